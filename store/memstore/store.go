package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ingestd/ingestd/store"
)

// Limits are what a Store reports (store.Backend.Limits): the same sizes
// as the disk backend's, so that a test's configuration passes on both.
var Limits = store.Limits{
	MaxBlockBytes:    256 << 20,
	MaxFragmentBytes: 128 << 20,
	MaxMetaBytes:     64 << 20,
	MaxNameBytes:     32_000,
}

// readBatch bounds the fragments a ReadSeq examines under one read lock.
const readBatch = 1024

// Disk is the in-memory medium Stores are opened on (package doc). The
// zero Disk is not usable: call NewDisk. Safe for concurrent use.
type Disk struct {
	mu        sync.RWMutex
	open      bool
	nextTID   uint64
	live      map[string]uint64          // the live instance of each name
	tombs     map[string]store.TableMeta // the tombstones (and floors), by name
	insts     map[uint64]*instance       // live instances (their metadata: instance.meta)
	consumers map[string]map[string]store.Consumer
}

// NewDisk returns an empty Disk.
func NewDisk() *Disk {
	return &Disk{nextTID: 1, live: map[string]uint64{}, tombs: map[string]store.TableMeta{}, insts: map[uint64]*instance{},
		consumers: map[string]map[string]store.Consumer{}}
}

// Clone returns a copy of everything on d at this instant: what a crash
// of the Store open on d would leave (every acknowledged commit), opened
// with Open like any Disk.
func (d *Disk) Clone() *Disk {
	d.mu.RLock()
	defer d.mu.RUnlock()
	c := NewDisk()
	c.nextTID = d.nextTID
	for n, id := range d.live {
		c.live[n] = id
	}
	for n, m := range d.tombs {
		c.tombs[n] = cloneMeta(m)
	}
	for id, in := range d.insts {
		c.insts[id] = in.clone()
	}
	for n, cs := range d.consumers {
		c.consumers[n] = maps(cs)
	}
	return c
}

func maps(m map[string]store.Consumer) map[string]store.Consumer {
	out := make(map[string]store.Consumer, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func cloneMeta(m store.TableMeta) store.TableMeta {
	m.Columns = slices.Clone(m.Columns)
	m.ColumnsSince = slices.Clone(m.ColumnsSince)
	if m.Retention != nil {
		r := *m.Retention
		m.Retention = &r
	}
	return m
}

// Store is a store.Backend on a Disk. Safe for concurrent use as the
// contract says (store.Backend).
type Store struct {
	d       *Disk
	closed  atomic.Bool
	blocks  atomic.Uint64 // blocks read (package doc: read counts)
	entries atomic.Uint64 // overwritten points' rows looked up
}

var _ store.Backend = (*Store)(nil)

// Open opens a Store on d. store.ErrLocked while another Store is open on
// it.
func Open(d *Disk) (*Store, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.open {
		return nil, store.ErrLocked
	}
	d.open = true
	return &Store{d: d}, nil
}

// New opens a Store on a new Disk.
func New() *Store {
	s, _ := Open(NewDisk()) // a new Disk is never open
	return s
}

// Disk returns the medium s is open on.
func (s *Store) Disk() *Disk { return s.d }

// ReadCounts returns the blocks and point rows s's reads looked at so far
// (package doc). Safe for concurrent use.
func (s *Store) ReadCounts() (blocks, entries uint64) { return s.blocks.Load(), s.entries.Load() }

// enter checks that s is open and ctx not ended. A call that entered
// may end after Close: it holds nothing Close releases (the Disk stays),
// so Close does not wait for it.
func (s *Store) enter(ctx context.Context) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return ctx.Err()
}

// Limits implements store.Backend.
func (s *Store) Limits() store.Limits { return Limits }

// Close implements store.Backend: the Disk keeps everything, and another
// Store may be opened on it.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return store.ErrClosed
	}
	s.d.mu.Lock()
	s.d.open = false
	s.d.mu.Unlock()
	return nil
}

// LoadTables implements store.Loader.
func (s *Store) LoadTables(ctx context.Context) ([]store.TableMeta, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	s.d.mu.RLock()
	defer s.d.mu.RUnlock()
	out := make([]store.TableMeta, 0, len(s.d.insts)+len(s.d.tombs))
	for _, in := range s.d.insts {
		out = append(out, cloneMeta(in.meta))
	}
	for _, m := range s.d.tombs {
		out = append(out, cloneMeta(m))
	}
	slices.SortFunc(out, func(a, b store.TableMeta) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// LoadSeries implements store.Loader.
func (s *Store) LoadSeries(ctx context.Context, tid uint64) ([]store.Series, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	s.d.mu.RLock()
	defer s.d.mu.RUnlock()
	in := s.d.insts[tid]
	if in == nil {
		return nil, nil
	}
	out := make([]store.Series, len(in.series))
	for i, sr := range in.series {
		out[i] = store.Series{ID: sr.ID, Tags: slices.Clone(sr.Tags)}
	}
	return out, nil
}

// Append implements store.Appender. Writer only.
func (s *Store) Append(ctx context.Context, commits []store.TableCommit, stamped func()) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	d := s.d
	d.mu.Lock()
	for i := range commits {
		tc := &commits[i]
		if d.insts[tc.TableID] == nil && (tc.Meta == nil || tc.Meta.ID != tc.TableID) {
			d.mu.Unlock()
			return fmt.Errorf("memstore: table instance %d is not live", tc.TableID)
		}
	}
	for i := range commits {
		tc := &commits[i]
		if tc.Meta != nil {
			if _, err := d.adopt(*tc.Meta); err != nil {
				d.mu.Unlock()
				return err
			}
		}
		in := d.insts[tc.TableID]
		tc.FirstSeq = 0
		if tc.Sync && len(tc.Fragments) > 0 {
			tc.FirstSeq = in.meta.Seq + 1
			in.meta.Seq += uint64(len(tc.Fragments))
		}
	}
	// Numbered, nothing visible: stamped may read (the writer is the
	// only one to change the Disk meanwhile).
	d.mu.Unlock()
	if stamped != nil {
		stamped()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range commits {
		if in := d.insts[commits[i].TableID]; in != nil { // the writer ended none meanwhile
			in.apply(&commits[i])
		}
	}
	return nil
}

// adopt makes m the metadata of its instance, creating the instance when
// it is new (its Seq and Epoch raised above a tombstone of its name), and
// returns it as stored.
func (d *Disk) adopt(m store.TableMeta) (store.TableMeta, error) {
	if len(m.Name) > Limits.MaxNameBytes {
		return store.TableMeta{}, fmt.Errorf("memstore: a table name of %d bytes exceeds %d", len(m.Name), Limits.MaxNameBytes)
	}
	in := d.insts[m.ID]
	if in == nil {
		if id, ok := d.live[m.Name]; ok {
			return store.TableMeta{}, fmt.Errorf("memstore: table %q is live as instance %d, not %d", m.Name, id, m.ID)
		}
		prev, found := d.tombs[m.Name]
		if m.ID == 0 || m.ID >= d.nextTID {
			return store.TableMeta{}, fmt.Errorf("memstore: table instance %d was not handed out", m.ID)
		}
		if found {
			m.Seq = max(m.Seq, prev.Seq)
			bump := uint64(0)
			if m.Sync {
				bump = 1
			}
			m.Epoch = max(m.Epoch, prev.Epoch+bump)
		}
		in = newInstance()
		d.insts[m.ID] = in
		d.live[m.Name] = m.ID
		delete(d.tombs, m.Name)
	} else {
		m.Seq = max(m.Seq, in.meta.Seq)
	}
	in.meta = cloneMeta(m)
	return cloneMeta(m), nil
}

// NewTableID implements store.Tables.
func (s *Store) NewTableID(ctx context.Context) (uint64, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.nextTID++
	return s.d.nextTID - 1, nil
}

// PutTable implements store.Tables. Writer only.
func (s *Store) PutTable(ctx context.Context, m store.TableMeta) (store.TableMeta, error) {
	if err := s.enter(ctx); err != nil {
		return store.TableMeta{}, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.d.adopt(m)
}

// TruncateTable implements store.Tables. Writer only.
func (s *Store) TruncateTable(ctx context.Context, tid uint64) (store.TableMeta, error) {
	return s.end(ctx, tid, func(d *Disk, old store.TableMeta) store.TableMeta {
		m := store.TableMeta{Name: old.Name, ID: d.nextTID, Sync: old.Sync, Epoch: old.Epoch + 1, Seq: old.Seq, Retention: old.Retention}
		d.nextTID++
		d.insts[m.ID] = newInstance()
		d.insts[m.ID].meta = m
		return m
	})
}

// DropTable implements store.Tables; the name's consumers go with it.
// Writer only.
func (s *Store) DropTable(ctx context.Context, tid uint64) (store.TableMeta, error) {
	return s.end(ctx, tid, func(d *Disk, old store.TableMeta) store.TableMeta {
		delete(d.consumers, old.Name)
		return store.TableMeta{Name: old.Name, Epoch: old.Epoch, Seq: old.Seq, Dropped: true}
	})
}

// end replaces live instance tid by what with makes of it.
func (s *Store) end(ctx context.Context, tid uint64, with func(*Disk, store.TableMeta) store.TableMeta) (store.TableMeta, error) {
	if err := s.enter(ctx); err != nil {
		return store.TableMeta{}, err
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	in := d.insts[tid]
	if in == nil {
		return store.TableMeta{}, fmt.Errorf("memstore: table instance %d is not live", tid)
	}
	m := with(d, in.meta)
	delete(d.insts, tid)
	if m.Dropped {
		delete(d.live, m.Name)
		d.tombs[m.Name] = m
	} else {
		d.live[m.Name] = m.ID
	}
	return cloneMeta(m), nil
}

// PruneTombstone implements store.Tables. Writer only.
func (s *Store) PruneTombstone(ctx context.Context, name string, floor store.TableMeta) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if _, ok := s.d.live[name]; ok {
		return fmt.Errorf("memstore: table %q is live", name)
	}
	delete(s.d.tombs, name)
	s.d.tombs[floor.Name] = cloneMeta(floor)
	return nil
}

// PutConsumers implements store.ConsumerStore.
func (s *Store) PutConsumers(ctx context.Context, byTable map[string][]store.Consumer) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	for table, cs := range byTable {
		for _, c := range cs {
			if len(c.Name) > Limits.MaxNameBytes {
				return fmt.Errorf("memstore: a consumer name of %d bytes exceeds %d", len(c.Name), Limits.MaxNameBytes)
			}
		}
		m := s.d.consumers[table]
		if m == nil {
			m = map[string]store.Consumer{}
			s.d.consumers[table] = m
		}
		for _, c := range cs {
			m[c.Name] = c
		}
	}
	return nil
}

// LoadConsumers implements store.ConsumerStore.
func (s *Store) LoadConsumers(ctx context.Context, table string) ([]store.Consumer, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	s.d.mu.RLock()
	defer s.d.mu.RUnlock()
	var out []store.Consumer
	for _, c := range s.d.consumers[table] {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b store.Consumer) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// DeleteConsumer implements store.ConsumerStore.
func (s *Store) DeleteConsumer(ctx context.Context, table, name string) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	delete(s.d.consumers[table], name)
	if len(s.d.consumers[table]) == 0 {
		delete(s.d.consumers, table)
	}
	return nil
}

// TableStats implements store.StatsReader: exact counts, Bytes the
// fragments' encoded size (store.FragmentBytes' encoding, exactly).
func (s *Store) TableStats(ctx context.Context, tid uint64) (store.TableStats, error) {
	if err := s.enter(ctx); err != nil {
		return store.TableStats{}, err
	}
	s.d.mu.RLock()
	defer s.d.mu.RUnlock()
	st := store.TableStats{ComputedAt: time.Now()}
	if in := s.d.insts[tid]; in != nil {
		st.Fragments, st.Overwritten, st.Series, st.Bytes = in.frags, in.overs, uint64(len(in.series)), in.bytes
	}
	return st, nil
}
