package feed

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/memstore"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// sharedStore is the in-memory store made a store.Shared the test drives: it mints
// columns and series ids as the one process writing, and the test calls
// the Follow callback with what "another process" did.
type sharedStore struct {
	*memstore.Store
	mu     sync.Mutex
	cols   map[uint64][]store.Column
	series map[string]uint64
	fn     func(store.Followed)
	// fail, when set, is SeriesID's error (the other processes out of
	// reach); putErr PutTable's (another process ended the instance).
	fail, putErr error
	// loadGate, when set, holds LoadConsumers until it is closed (the
	// other processes not answering); sweepGate SweepBefore, which
	// closes sweeping when it starts waiting; ddlGate the next
	// TruncateTable or DropTable, which closes changing; appendGate the
	// next Append, which closes appending.
	loadGate, sweepGate, sweeping, ddlGate, changing, appendGate, appending chan struct{}
	// seriesCalls counts SeriesIDs calls, seriesAsked the series they
	// asked for.
	seriesCalls, seriesAsked int
}

func (s *sharedStore) Append(ctx context.Context, commits []store.TableCommit, stamped func()) error {
	s.holdAt(&s.appendGate, &s.appending)
	return s.Store.Append(ctx, commits, stamped)
}

// gate is a channel a stalled store call waits on. release opens it,
// once; a test defers it too (before its harness closes: a call stuck
// at the gate would keep the feed from stopping).
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) release() { g.once.Do(func() { close(g.ch) }) }

// holdAt holds the call until *gate is closed, when it is set (once),
// closing *entered as it starts waiting.
func (s *sharedStore) holdAt(gate, entered *chan struct{}) {
	s.mu.Lock()
	g, e := *gate, *entered
	*gate = nil
	s.mu.Unlock()
	if g != nil {
		close(e)
		<-g
	}
}

func (s *sharedStore) TruncateTable(ctx context.Context, tid uint64) (store.TableMeta, error) {
	s.holdAt(&s.ddlGate, &s.changing)
	return s.Store.TruncateTable(ctx, tid)
}

func (s *sharedStore) DropTable(ctx context.Context, tid uint64) (store.TableMeta, error) {
	s.holdAt(&s.ddlGate, &s.changing)
	return s.Store.DropTable(ctx, tid)
}

func (s *sharedStore) SweepBefore(ctx context.Context, tid uint64, cutoff int64, maxFragments int) (store.SweepResult, error) {
	s.holdAt(&s.sweepGate, &s.sweeping)
	return s.Store.SweepBefore(ctx, tid, cutoff, maxFragments)
}

func (s *sharedStore) LoadConsumers(ctx context.Context, table string) ([]store.Consumer, error) {
	s.mu.Lock()
	gate := s.loadGate
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return s.Store.LoadConsumers(ctx, table)
}

func (s *sharedStore) PutTable(ctx context.Context, m store.TableMeta) (store.TableMeta, error) {
	s.mu.Lock()
	err := s.putErr
	s.mu.Unlock()
	if err != nil {
		return store.TableMeta{}, err
	}
	return s.Store.PutTable(ctx, m)
}

// openShared starts a sequencer with cfg on a sharedStore in a new
// directory.
func openShared(t *testing.T, cfg Config) (*sharedStore, *harness) {
	t.Helper()
	var st *sharedStore
	h := openHarnessOn(t, memstore.NewDisk(), cfg, func(db *memstore.Store) Storage {
		st = &sharedStore{Store: db, cols: map[uint64][]store.Column{}, series: map[string]uint64{}}
		return st
	})
	return st, h
}

// openSharedTable is openShared with the defaults and a sync table "t".
func openSharedTable(t *testing.T) (*sharedStore, *harness) {
	t.Helper()
	st, h := openShared(t, DefaultConfig())
	_, _, err := h.s.CreateTable(context.Background(), "t", true)
	require.NoError(t, err)
	return st, h
}

func (s *sharedStore) AddColumns(_ context.Context, tid uint64, cols []store.Column) ([]store.Column, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range cols {
		if !slices.ContainsFunc(s.cols[tid], func(o store.Column) bool { return o.Name == c.Name }) {
			s.cols[tid] = append(s.cols[tid], c)
		}
	}
	return slices.Clone(s.cols[tid]), nil
}

func (s *sharedStore) SeriesIDs(_ context.Context, tid uint64, series []store.SeriesKey) ([]uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seriesCalls++
	s.seriesAsked += len(series)
	if s.fail != nil {
		return nil, s.fail
	}
	ids := make([]uint64, len(series))
	for i, sk := range series {
		k := string(rune(tid)) + sk.Key
		if _, ok := s.series[k]; !ok {
			s.series[k] = uint64(len(s.series) + 1)
		}
		ids[i] = s.series[k]
	}
	return ids, nil
}

func (s *sharedStore) Beyond(context.Context, uint64, uint64) (bool, error) { return false, nil }

func (s *sharedStore) Follow(fn func(store.Followed)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fn = fn
}

func (s *sharedStore) report(f store.Followed) {
	s.mu.Lock()
	fn := s.fn
	s.mu.Unlock()
	fn(f)
}

// TestFollowedTableChanges reports other processes' table changes to a
// sequencer on a shared store: a table created elsewhere appears, a new
// instance (TRUNCATE) replaces it at the new epoch with its consumers, a
// DROP removes it, SET SYNC OFF is taken; a block of an instance this
// process dropped, still pending when the DROP ran, does not bring it
// back; a report older than the table's instance is left out.
func TestFollowedTableChanges(t *testing.T) {
	ctx := context.Background()
	st, h := openShared(t, DefaultConfig())
	defer h.close()
	s, d := h.s, h.d

	// applied waits until a report of the marker table, sent after the
	// others, was applied, then until the sequencer committed a write
	// submitted after that: the reports before the marker were applied
	// too (one pass applies the pending reports in no particular order,
	// between group commits).
	marker := uint64(1 << 40)
	applied := func(reports ...store.Followed) {
		t.Helper()
		marker++
		name := "marker" + string(rune('a'+marker%26))
		for _, f := range reports {
			st.report(f)
		}
		st.report(store.Followed{Table: store.TableMeta{Name: name, ID: marker, Sync: true, Epoch: 1}, Version: marker})
		eventually(t, func() bool { st, err := d.Status(name); return err == nil && st.Epoch == 1 }, "the marker "+name+" applied")
		mustAppend(t, h.s, pt("pass", int64(marker), nil, fld("v", iv(1))))
	}

	_, _, err := s.CreateTable(ctx, "t", true)
	require.NoError(t, err)
	mustAppend(t, s, pt("t", 1, tg("host", "a"), fld("v", iv(1))))
	live := func(name string) *table {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return s.tables[name]
	}
	stale := store.Followed{Table: store.TableMeta{Name: "t", ID: live("t").meta.ID, Sync: true, Epoch: 1, Seq: 9}, Seq: 9, Version: 5}
	require.NoError(t, s.Drop(ctx, "t"))
	applied(stale)
	_, err = d.Status("t")
	require.ErrorIs(t, err, ErrTableNotFound, "a block of the dropped instance does not bring it back")

	other := store.TableMeta{Name: "o", ID: 1000, Sync: true, Epoch: 3, Seq: 40,
		Columns: []store.Column{{Name: "host", Kind: KindTag}, {Name: "v", Kind: KindInt}}}
	applied(store.Followed{Table: other, Seq: 42, Version: 10})
	got, err := d.Status("o")
	require.NoError(t, err)
	require.Equal(t, SyncStatus{Enabled: true, Epoch: 3, Seq: 42, Watermark: 42, Horizon: 1}, got, "a table another process created")
	consumers := live("o").consumers

	trunc := other
	trunc.ID, trunc.Epoch, trunc.Columns = 1001, 4, nil
	applied(store.Followed{Table: other, Seq: 50, Version: 9}, store.Followed{Table: trunc, Seq: 42, Version: 11})
	got, err = d.Status("o")
	require.NoError(t, err)
	require.Equal(t, uint64(4), got.Epoch, "the new instance, at its epoch (the older report left out)")
	require.Same(t, consumers, live("o").consumers, "consumers stay with a truncated table")

	off := trunc
	off.Sync = false
	applied(store.Followed{Table: off, Seq: 42, Version: 12})
	got, err = d.Status("o")
	require.NoError(t, err)
	require.False(t, got.Enabled, "SET SYNC OFF taken")

	applied(store.Followed{Table: store.TableMeta{Name: "o", Epoch: 4, Seq: 42, Dropped: true}, Ended: trunc.ID, Version: 13})
	_, err = d.Status("o")
	require.ErrorIs(t, err, ErrTableNotFound, "a DROP through another process")
}

// TestSharedStoreFailureFailsOnlyItsWrite makes the shared store fail to
// number a new series: that write fails with ErrUnavailable and nothing
// of it is applied, while the sequencer runs on, committing the writes of
// known series at once and the new series once the store answers again.
func TestSharedStoreFailureFailsOnlyItsWrite(t *testing.T) {
	ctx := context.Background()
	st, h := openSharedTable(t)
	defer h.close()
	s, d := h.s, h.d
	mustAppend(t, s, pt("t", 1, tg("host", "a"), fld("v", iv(1))))

	st.mu.Lock()
	st.fail = errors.New("meta bucket unreachable")
	st.mu.Unlock()
	_, err := s.Append(ctx, &Batch{Points: []Point{pt("t", 2, tg("host", "a"), fld("v", iv(2))), pt("t", 3, tg("host", "b"), fld("v", iv(3)))}})
	require.ErrorIs(t, err, ErrUnavailable, "a write with a series the store cannot number")
	mustAppend(t, s, pt("t", 4, tg("host", "a"), fld("v", iv(4))))

	st.mu.Lock()
	st.fail = nil
	st.mu.Unlock()
	mustAppend(t, s, pt("t", 5, tg("host", "b"), fld("v", iv(5))))
	status, err := d.Status("t")
	require.NoError(t, err)
	require.Equal(t, uint64(3), status.Watermark, "the failed write left nothing: its line of a known series neither")
}

// TestNewSeriesNumberedAtOnce: the series a write brings are numbered by
// the shared store in one call (each call is a round trip or more to the
// meta bucket: 1,000 new hosts took 2 s one at a time), each once, each
// its own id.
func TestNewSeriesNumberedAtOnce(t *testing.T) {
	st, h := openSharedTable(t)
	defer h.close()
	var pts []Point
	for i := range 50 {
		pts = append(pts, pt("t", int64(i+1), tg("host", fmt.Sprint("h", i)), fld("v", iv(int64(i)))))
	}
	mustAppend(t, h.s, pts...)
	st.mu.Lock()
	defer st.mu.Unlock()
	require.Equal(t, 1, st.seriesCalls, "one call for the write's new series")
	require.Equal(t, 50, st.seriesAsked, "each series asked for once")
	require.Len(t, st.series, 50, "each series numbered once")
	status, err := h.d.Status("t")
	require.NoError(t, err)
	require.Equal(t, uint64(50), status.Watermark)
}

// TestSharedStoreRefusalsNotParked writes, on a shared store, points that
// need a series or column the limits or name rules refuse: they are
// rejected for that reason at once (the resolver has nothing to resolve
// for them), not parked over and over.
func TestSharedStoreRefusalsNotParked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testdeadline.Scale(time.Minute))
	defer cancel()
	cfg := DefaultConfig()
	cfg.MaxSeriesPerTable, cfg.MaxColumnsPerTable, cfg.MaxTables = 1, 3, 1
	_, h := openShared(t, cfg)
	defer h.close()
	s := h.s
	mustAppend(t, s, pt("t", 1, tg("host", "a"), fld("v", iv(1))))
	for _, c := range []struct {
		p    Point
		want error
	}{
		{pt("t", 2, tg("host", "b"), fld("v", iv(2))), ErrSeriesLimit},
		{pt("t", 3, tg("host", "a"), fld("w", iv(3)), fld("x", iv(3))), ErrColumnLimit},
		{pt("t", 4, tg("host", "a"), fld("bad\\", iv(4))), ErrInvalidName},
		{pt("u", 5, tg("host", "a"), fld("v", iv(5))), ErrTableLimit},
	} {
		res, err := s.Append(ctx, &Batch{Points: []Point{c.p}})
		require.NoError(t, err, "%v", c.want)
		require.Len(t, res.Rejected, 1, "%v", c.want)
		require.ErrorIs(t, res.Rejected[0].Err, c.want)
	}
	mustAppend(t, s, pt("t", 6, tg("host", "a"), fld("w", iv(6))))
}

// TestSetSyncOfAnEndedInstance: a SET SYNC the shared store refuses
// because another process ended the instance meanwhile answers
// ErrTableChanged (retry) and leaves the table as it was; the sequencer
// runs on.
func TestSetSyncOfAnEndedInstance(t *testing.T) {
	ctx := context.Background()
	st, h := openSharedTable(t)
	defer h.close()
	s, d := h.s, h.d
	st.mu.Lock()
	st.putErr = fmt.Errorf("%w: instance 1", store.ErrEnded)
	st.mu.Unlock()
	_, err := s.SetSync(ctx, "t", false)
	require.ErrorIs(t, err, ErrTableChanged)
	status, err := d.Status("t")
	require.NoError(t, err)
	require.True(t, status.Enabled, "the table as it was")
	mustAppend(t, s, pt("t", 1, tg("host", "a"), fld("v", iv(1))))
}

// TestFollowedTableLoadedOffTheSequencer: a table another process created
// is taken with its series and consumers, which the resolver loads from
// the store: while the store does not answer, the writers of the other
// tables commit and the table is not half there; once it answers, the
// table appears with its consumers and the reports that came meanwhile.
func TestFollowedTableLoadedOffTheSequencer(t *testing.T) {
	ctx := context.Background()
	st, h := openSharedTable(t)
	defer h.close()
	// What "another process" stored: the instance, a series, a consumer.
	id, err := h.db.NewTableID(ctx)
	require.NoError(t, err)
	m, err := h.db.PutTable(ctx, store.TableMeta{Name: "o", ID: id, Sync: true, Epoch: 1,
		Columns: []store.Column{{Name: "time"}, {Name: "host", Kind: KindTag}, {Name: "v", Kind: KindInt}}})
	require.NoError(t, err)
	host := store.Series{ID: 1, Tags: []store.Field{{Col: 1, Value: store.Value{Kind: KindTag, Str: "a"}}}}
	commits := []store.TableCommit{{TableID: id, Sync: true, NewSeries: []store.Series{host}, CommitTime: 1,
		Fragments: []store.Fragment{{Series: 1, Time: 1, Fields: []store.Field{{Col: 2, Value: store.Value{Kind: KindInt, Num: 7}}}}}}}
	require.NoError(t, h.db.Append(ctx, commits, nil))
	require.NoError(t, h.db.PutConsumers(ctx, map[string][]store.Consumer{"o": {{Name: "mirror", Epoch: 1, Position: 1}}}))

	mustAppend(t, h.s, pt("t", 0, tg("host", "a"), fld("v", iv(0)))) // its names known: nothing to resolve
	g := newGate()
	defer g.release()
	st.mu.Lock()
	st.loadGate = g.ch
	st.mu.Unlock()
	st.report(store.Followed{Table: m, Seq: 1, Version: 1})
	for i := range 20 {
		appendWhileStalled(t, h.s, pt("t", int64(i+1), tg("host", "a"), fld("v", iv(int64(i)))))
	}
	require.Equal(t, uint64(21), status(t, h.d, "t").Watermark, "the other table's writes committed")
	_, err = h.d.Status("o")
	require.ErrorIs(t, err, ErrTableNotFound, "not taken before its consumers are loaded")
	st.report(store.Followed{Table: m, Seq: 1, Version: 2}) // waits behind the load

	g.release()
	eventually(t, func() bool { _, err := h.d.Status("o"); return err == nil }, "the table taken once loaded")
	cs, err := h.d.Consumers("o")
	require.NoError(t, err)
	require.Len(t, cs, 1)
	require.Equal(t, "mirror", cs[0].Name)
	rows := drainAll(t, h.d, "o", 0, 10)
	require.Len(t, rows, 1)
	require.Equal(t, "a", rows[0].Vals["host"].Str, "the series loaded with the instance")
	require.Zero(t, h.s.QueueDelay(), "a load leaves the sequencer idle, not refusing writes as stalled")
}

// TestSharedSweepBesideTheSequencer: on a shared store a retention
// batch's store calls run beside the sequencer: while the store does not
// answer one, writes commit, to the table being swept too, and once it
// answers the batch's horizon and removals are published.
func TestSharedSweepBesideTheSequencer(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.SweepInterval = time.Millisecond
	cfg.DefaultRetention = time.Hour
	clk := newFakeClock(time.Unix(1_700_000_000, 0))
	disk := memstore.NewDisk()
	db, err := memstore.Open(disk)
	require.NoError(t, err)
	st := &sharedStore{Store: db, cols: map[uint64][]store.Column{}, series: map[string]uint64{}}
	h := startHarness(t, disk, db, cfg, st, nil, clk)
	defer h.close()
	_, _, err = h.s.CreateTable(ctx, "t", true)
	require.NoError(t, err)
	old := clk.now().UnixNano()
	mustAppend(t, h.s, pt("t", old, tg("host", "a"), fld("v", iv(1))), pt("t", old+1, tg("host", "a"), fld("v", iv(2))))
	mustAppend(t, h.s, pt("other", old, tg("host", "a"), fld("v", iv(1))))

	g, sweeping := newGate(), make(chan struct{})
	defer g.release()
	st.mu.Lock()
	st.sweepGate, st.sweeping = g.ch, sweeping
	st.mu.Unlock()
	clk.add(2 * time.Hour) // both points of t are past the retention now
	eventually(t, func() bool {
		select {
		case <-sweeping:
			return true
		default:
			return false
		}
	}, "a retention batch reached the store")
	now := clk.now().UnixNano()
	for i := range 10 {
		appendWhileStalled(t, h.s, pt("t", now+int64(i), tg("host", "a"), fld("v", iv(int64(i)))))
		appendWhileStalled(t, h.s, pt("other", now+int64(i), tg("host", "a"), fld("v", iv(int64(i)))))
	}
	require.Equal(t, uint64(1), status(t, h.d, "t").Horizon, "nothing published before the batch answered")

	g.release()
	eventually(t, func() bool { return status(t, h.d, "t").Horizon == 3 }, "the batch's horizon published")
	rows := drainAll(t, h.d, "t", 2, 100)
	require.Len(t, rows, 10, "the aged points went, the writes made meanwhile stayed")
}

// TestTableChangeOffTheSequencer: on a shared store a table change's
// store call (here a TRUNCATE, then a DROP) runs beside the sequencer:
// while the store does not answer it, the other tables' writes commit,
// and the changed table's writes and later table changes wait behind it,
// in order: a write sent during the TRUNCATE lands in the new instance.
func TestTableChangeOffTheSequencer(t *testing.T) {
	ctx := context.Background()
	st, h := openSharedTable(t)
	defer h.close()
	mustAppend(t, h.s, pt("t", 1, tg("host", "a"), fld("v", iv(1))))
	mustAppend(t, h.s, pt("other", 1, tg("host", "a"), fld("v", iv(1))))

	for _, change := range []string{"truncate", "drop"} {
		g, changing := newGate(), make(chan struct{})
		defer g.release()
		st.mu.Lock()
		st.ddlGate, st.changing = g.ch, changing
		st.mu.Unlock()
		changed := make(chan error, 1)
		go func() {
			var err error
			if change == "truncate" {
				_, err = h.s.Truncate(ctx, "t")
			} else {
				err = h.s.Drop(ctx, "t")
			}
			changed <- err
		}()
		<-changing
		wrote, synced := make(chan error, 1), make(chan error, 1)
		go func() {
			_, err := h.s.Append(ctx, &Batch{Points: []Point{pt("t", 2, tg("host", "a"), fld("v", iv(2)))}})
			wrote <- err
		}()
		go func() { _, err := h.s.SetSync(ctx, "other", true); synced <- err }()
		for i := range 20 {
			appendWhileStalled(t, h.s, pt("other", int64(i+2), tg("host", "a"), fld("v", iv(int64(i)))))
		}
		require.Empty(t, changed, "the %s waits for its store call", change)
		require.Empty(t, wrote, "a write of the table waits behind its %s", change)
		require.Empty(t, synced, "a later table change waits behind the %s", change)
		g.release()
		require.NoError(t, <-changed)
		require.NoError(t, <-wrote)
		require.NoError(t, <-synced)

		// The write came after the change: it is the truncated table's
		// only row; it re-created the dropped one.
		if change == "truncate" {
			rows := drainAll(t, h.d, "t", 0, 10)
			require.Len(t, rows, 1)
			require.Equal(t, iv(2), rows[0].Vals["v"])
		} else {
			_, err := h.d.Status("t")
			require.NoError(t, err, "the write re-created the dropped table")
		}
	}
	require.Zero(t, h.s.QueueDelay())
}

// TestDroppedConsumersNeverFlushedBack: a consumer position recorded
// while a shared store's DROP is being stored is never written back once
// the tombstone is: the flush that runs after the store call, before the
// sequencer (here stuck in a commit) takes the table away, leaves the
// dropped table out.
func TestDroppedConsumersNeverFlushedBack(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.ConsumerFlushInterval = time.Millisecond
	st, h := openShared(t, cfg)
	defer h.close()
	for _, name := range []string{"t", "other"} {
		_, _, err := h.s.CreateTable(ctx, name, true)
		require.NoError(t, err)
		mustAppend(t, h.s, seqPoints(name, 0, 3)...)
		_, err = tryDrain(h.d, DrainRequest{Table: name, After: 0, Limit: 1, Consumer: "m"})
		require.NoError(t, err)
	}
	eventually(t, func() bool {
		cs, err := h.db.LoadConsumers(ctx, "t")
		return err == nil && len(cs) == 1
	}, "the consumer flushed")

	drop, commit := newGate(), newGate()
	defer drop.release()
	defer commit.release()
	changing, appending := make(chan struct{}), make(chan struct{})
	st.mu.Lock()
	st.ddlGate, st.changing = drop.ch, changing
	st.mu.Unlock()
	dropped := make(chan error, 1)
	go func() { dropped <- h.s.Drop(ctx, "t") }()
	<-changing // the DROP is at the store
	st.mu.Lock()
	st.appendGate, st.appending = commit.ch, appending
	st.mu.Unlock()
	wrote := make(chan error, 1)
	go func() {
		_, err := h.s.Append(ctx, &Batch{Points: seqPoints("other", 10, 1)})
		wrote <- err
	}()
	<-appending // the sequencer is in a commit: it takes no result meanwhile
	_, err := tryDrain(h.d, DrainRequest{Table: "t", After: 2, Limit: 1, Consumer: "m"})
	require.NoError(t, err, "the table is live here until the sequencer takes the DROP")
	drop.release()
	// A flush after the store call: "other"'s new position reaches the
	// store only through one.
	_, err = tryDrain(h.d, DrainRequest{Table: "other", After: 2, Limit: 1, Consumer: "m"})
	require.NoError(t, err)
	eventually(t, func() bool {
		cs, err := h.db.LoadConsumers(ctx, "other")
		return err == nil && len(cs) == 1 && cs[0].Position == 2
	}, "a flush ran after the DROP was stored")
	commit.release()
	require.NoError(t, <-wrote)
	require.NoError(t, <-dropped)
	cs, err := h.db.LoadConsumers(ctx, "t")
	require.NoError(t, err)
	require.Empty(t, cs, "the dropped table's consumer was never written back")
}
