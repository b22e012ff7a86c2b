package feed

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/ingestd/ingestd/store"
)

// CreateTable creates table name with the given sync setting (docs/reference.md#tables
// CREATE TABLE … WITH (SYNC)). It is idempotent: for an existing table it
// reports created=false and applies sync like SetSync. A table dropped
// before resumes above its old epoch and sequence.
func (s *Sequencer) CreateTable(ctx context.Context, name string, sync bool) (created bool, st SyncStatus, err error) {
	o, err := s.control(ctx, opCreate, name, sync)
	if err != nil {
		return false, SyncStatus{}, err
	}
	return o.created, o.status, nil
}

// SetSync enables or disables the feed of a table (ALTER TABLE … SET SYNC
// / SET SYNC OFF). Enabling a table whose sync is OFF bumps its epoch;
// disabling keeps it; setting the current value is a no-op. It returns
// ErrTableNotFound for an unknown table.
func (s *Sequencer) SetSync(ctx context.Context, name string, enabled bool) (SyncStatus, error) {
	o, err := s.control(ctx, opSetSync, name, enabled)
	if err != nil {
		return SyncStatus{}, err
	}
	return o.status, nil
}

// TableOptions are the settings PutTable applies; a nil field is left
// as it is (or takes its default on a new table).
type TableOptions struct {
	// Sync enables or disables the table's feed (a new table: off).
	Sync *bool
	// Retention is the table's own retention (0: forever; see
	// ParseRetention); nil leaves it, or follows Config.DefaultRetention.
	Retention *time.Duration
}

// PutTable creates table name with opts, or applies opts to the existing
// table (PUT /api/v1/tables/{t}; docs/reference.md#tables). It reports created, and
// the table as it then is. A retention is applied from the next sweep
// and the next write on; ErrInvalidRetention for one outside
// MinRetention..MaxRetention (0 allowed).
func (s *Sequencer) PutTable(ctx context.Context, name string, opts TableOptions) (created bool, info TableInfo, err error) {
	if r := opts.Retention; r != nil && (*r < 0 || *r > 0 && *r < MinRetention) {
		return false, TableInfo{}, fmt.Errorf("%w: %s (0, or at least %s)", ErrInvalidRetention, *r, MinRetention)
	}
	o := &op{kind: opCreate, name: name, keepSync: opts.Sync == nil, retention: opts.Retention}
	if opts.Sync != nil {
		o.flag = *opts.Sync
	}
	if o, err = s.runOp(ctx, o); err != nil {
		return false, TableInfo{}, err
	}
	info, err = s.tableInfo(name)
	info.Sync = o.status
	return o.created, info, err
}

// Truncate deletes every row of a table and its columns, bumps its epoch
// and keeps its sequence (TRUNCATE). ErrTableNotFound for an unknown table.
func (s *Sequencer) Truncate(ctx context.Context, name string) (SyncStatus, error) {
	o, err := s.control(ctx, opTruncate, name, false)
	if err != nil {
		return SyncStatus{}, err
	}
	return o.status, nil
}

// Drop deletes a table (DROP TABLE), keeping a tombstone of its epoch and
// sequence so that a re-created table resumes above them.
// ErrTableNotFound for an unknown table.
func (s *Sequencer) Drop(ctx context.Context, name string) error {
	_, err := s.control(ctx, opDrop, name, false)
	return err
}

// Status returns table name's sync status (SHOW SYNC FROM t): whether
// sync is on, the epoch, seq, watermark and history horizon, as last
// published by the sequencer.
func (s *Drainer) Status(name string) (SyncStatus, error) {
	t, err := s.lookup(name)
	if err != nil {
		return SyncStatus{}, err
	}
	return t.status(), nil
}

// Table describes one table (SHOW COLUMNS FROM t); never lists x_ columns.
// ErrTableNotFound for an unknown table.
func (s *Drainer) Table(name string) (TableInfo, error) { return s.tableInfo(name) }

// tableInfo describes the live table name.
func (s *registry) tableInfo(name string) (TableInfo, error) {
	t, err := s.lookup(name)
	if err != nil {
		return TableInfo{}, err
	}
	p := t.snapshot()
	return p.info(name, s.cfg.DefaultRetention), nil
}

// Tables describes every live table, ordered by name (an empty slice when
// there is none); the caller owns the slice.
func (s *Drainer) Tables() []TableInfo {
	ts := s.liveTables()
	sort.Slice(ts, func(i, j int) bool { return ts[i].name < ts[j].name })
	out := make([]TableInfo, len(ts))
	for i, t := range ts {
		p := t.snapshot()
		out[i] = p.info(t.name, s.cfg.DefaultRetention)
	}
	return out
}

// runControl executes a table operation in the sequencer goroutine, on a
// store of one process (a shared store's: changes.go).
func (s *Sequencer) runControl(o *op) {
	t, ok := s.tables[o.name]
	if o.kind == opDefine {
		s.runDefine(o, ok)
		return
	}
	if o.kind == opCreate && !ok {
		if o.err = s.checkTableLimit(); o.err != nil {
			return
		}
		if t, o.err = s.createTable(o.name, o.flag); o.err != nil {
			return
		}
		o.created = true
		if o.retention != nil {
			t.setRetention(*o.retention)
		}
		if _, err := s.st.PutTable(storeCtx, t.meta); err != nil {
			o.err = storageErr("create table", err)
			return
		}
		o.status = t.status()
		return
	}
	if !ok {
		_, o.err = s.lookup(o.name)
		return
	}
	switch o.kind {
	case opCreate, opSetSync:
		// Each change is stored before the table takes it: a store that
		// did not answer (ErrUnavailable) leaves the table as it was.
		if o.retention != nil {
			m := t.meta
			ns := int64(*o.retention)
			m.Retention = &ns
			if _, err := s.st.PutTable(storeCtx, m); err != nil {
				o.err = s.changeErr("set retention", err)
				return
			}
			t.setRetention(*o.retention)
		}
		if !o.keepSync && t.meta.Sync != o.flag {
			m := t.meta
			m.Sync = o.flag
			if o.flag {
				m.Epoch++
			}
			if _, err := s.st.PutTable(storeCtx, m); err != nil {
				o.err = s.changeErr("set sync", err)
				return
			}
			t.setSync(m.Sync, m.Epoch)
		}
	case opTruncate:
		// One store call: the new instance (epoch one higher, x_seq
		// continuing) replaces the old one, whose data goes.
		m, err := s.st.TruncateTable(storeCtx, t.meta.ID)
		if err != nil {
			o.err = s.changeErr("truncate", err)
			return
		}
		t = s.truncated(t, m)
	case opDrop:
		// One store call: the tombstone replaces the table, whose data
		// and consumers go. Under consumerMu, so that a consumer flush
		// ends before it and none after it writes the name's consumers
		// back.
		s.consumerMu.Lock()
		tomb, err := s.st.DropTable(storeCtx, t.meta.ID)
		if err != nil {
			s.consumerMu.Unlock()
			o.err = s.changeErr("drop", err)
			return
		}
		s.dropTable(t, &tomb)
		s.consumerMu.Unlock()
		o.err = s.pruneTombstones()
		return
	}
	o.status = t.status()
}

// truncated makes m, the instance TRUNCATE put in place of t, the
// table's: empty, its sequence continuing, its consumers kept (their
// cursors' epoch is stale).
func (s *Sequencer) truncated(t *table, m store.TableMeta) *table {
	nt := newTable(m, nil)
	nt.seq = t.seq
	nt.pub.seq, nt.pub.watermark = t.seq, t.seq
	old := t.snapshot()
	nt.pub.points, nt.pub.removed = old.points, old.removed
	nt.consumers = t.consumers
	s.mu.Lock()
	s.putTableLocked(nt)
	s.mu.Unlock()
	t.notify()
	return nt
}

// changeErr is the error of a TRUNCATE, DROP or SET SYNC the store
// refused:
// ErrTableChanged when another process ended the instance meanwhile (its
// change is taken at once: a retry acts on the table as it is now), else
// a storage failure.
func (s *Sequencer) changeErr(what string, err error) error {
	if errors.Is(err, store.ErrEnded) {
		s.applyFollowed(true)
		return fmt.Errorf("%w: %s", ErrTableChanged, err)
	}
	return storageErr(what, err)
}

// minDropped is the least number of dropped instances Sequencer.dropped
// keeps, whatever --feed-max-tombstones.
const minDropped = 64

// dropTable removes live table t, its consumers and its metrics; tomb,
// when given, is its tombstone (a DROP through another process leaves
// its tombstone to the store, which re-creates the name above it).
// With a shared store it remembers t's instance id (Sequencer.dropped).
// Sequencer goroutine only.
func (s *Sequencer) dropTable(t *table, tomb *store.TableMeta) {
	if s.dropped != nil {
		s.dropped[t.name] = t.meta.ID
		for len(s.dropped) > max(s.cfg.MaxTombstones, minDropped) {
			var low string
			for name, id := range s.dropped {
				if low == "" || id < s.dropped[low] {
					low = name
				}
			}
			delete(s.dropped, low)
		}
	}
	s.mu.Lock()
	s.deleteTableLocked(t.name)
	if tomb != nil {
		s.tombstones[t.name] = *tomb
	}
	s.mu.Unlock()
	t.notify()
	t.consumers.dropAll(s.counts)
}

// DefineTable creates table name with sync and the declared columns (SQL
// CREATE TABLE t (col TYPE, …) [WITH (SYNC)], docs/guide.md#sql): cols are tags
// (KindTag) and fields (KindFloat, KindInt, KindUint, KindString,
// KindBool) in the order given, listed tags first as every schema is
// (docs/contract.md#columns); "time" is implicit and not among them. A table dropped before
// resumes above its old epoch and sequence, as with CreateTable. Unlike
// CreateTable it changes nothing of an existing table: it returns
// ErrTableExists. Other errors: ErrInvalidTableName and ErrInvalidName (a
// *NameError of CheckKey: a column named "time", with the reserved x_
// prefix or ending with a backslash among them),
// ErrDuplicateColumn, ErrColumnLimit (more than
// Config.MaxColumnsPerTable, or a schema larger than the store holds:
// store.Limits.MaxMetaBytes), ErrTableLimit, ErrClosed. Safe for
// concurrent use.
func (s *Sequencer) DefineTable(ctx context.Context, name string, sync bool, cols []Column) (SyncStatus, error) {
	if len(cols) > s.cfg.MaxColumnsPerTable {
		return SyncStatus{}, fmt.Errorf("%w: %d columns declared, more than --feed-max-columns-per-table=%d", ErrColumnLimit, len(cols), s.cfg.MaxColumnsPerTable)
	}
	seen := make(map[string]struct{}, len(cols))
	for _, c := range cols {
		// The key rules of every write path (CheckKey): a column no line
		// could write is not declared either.
		if err := CheckKey("column", c.Name, s.cfg.MaxNameBytes); err != nil {
			return SyncStatus{}, err
		}
		switch c.Kind {
		case KindTag, KindFloat, KindInt, KindUint, KindString, KindBool:
		default:
			return SyncStatus{}, fmt.Errorf("%w: column %s has kind %d, not a tag or field kind", ErrInvalidName, QuoteInput(c.Name), c.Kind)
		}
		if _, dup := seen[c.Name]; dup {
			return SyncStatus{}, fmt.Errorf("%w: %s", ErrDuplicateColumn, QuoteInput(c.Name))
		}
		seen[c.Name] = struct{}{}
	}
	if n := columnsBytes(storeColumns(cols)); n > s.limits.MaxMetaBytes {
		return SyncStatus{}, fmt.Errorf("%w: the declared columns take up to %d bytes stored, more than the store holds (%d)", ErrColumnLimit, n, s.limits.MaxMetaBytes)
	}
	o, err := s.runOp(ctx, &op{kind: opDefine, name: name, flag: sync, cols: cols})
	if err != nil {
		return SyncStatus{}, err
	}
	return o.status, nil
}

// runDefine creates the table of an opDefine, or refuses it when the table
// exists. Sequencer goroutine only.
func (s *Sequencer) runDefine(o *op, exists bool) {
	if exists {
		o.err = fmt.Errorf("%w: %s", ErrTableExists, QuoteInput(o.name))
		return
	}
	if o.err = s.checkTableLimit(); o.err != nil {
		return
	}
	if n := columnsCost(storeColumns(o.cols)); !s.schemaRoom(n) {
		o.err = fmt.Errorf("%w: the tables' schemas hold %d bytes, the declared columns (%d bytes) do not fit in --feed-max-schema-bytes=%d",
			ErrColumnLimit, s.schemaBytes.Load(), n, s.cfg.MaxSchemaBytes)
		return
	}
	t, err := s.createTable(o.name, o.flag)
	if err != nil {
		o.err = err
		return
	}
	for _, c := range storeColumns(o.cols) {
		s.addColumn(t, c)
	}
	t.columnsAdded()
	o.created = true
	if _, err := s.st.PutTable(storeCtx, t.meta); err != nil {
		o.err = storageErr("create table", err)
		return
	}
	o.status = t.status()
}

// storeColumns converts declared columns to stored ones.
func storeColumns(cs []Column) []store.Column {
	out := make([]store.Column, len(cs))
	for i, c := range cs {
		out[i] = store.Column(c)
	}
	return out
}
