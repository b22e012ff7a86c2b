package jsstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// stalling is a Store whose round trips for new tables, columns and
// series hang while it is stalled, as when the meta bucket's servers stop
// answering: the calls the feed makes when a write brings a name the
// cluster has not numbered.
type stalling struct {
	*Store
	mu      sync.Mutex
	gate    chan struct{} // non-nil: stalled until closed
	waiting atomic.Int32  // calls held at the gate
}

func (s *stalling) hold() {
	s.mu.Lock()
	g := s.gate
	s.mu.Unlock()
	if g != nil {
		s.waiting.Add(1)
		<-g
		s.waiting.Add(-1)
	}
}

func (s *stalling) stall() {
	s.mu.Lock()
	s.gate = make(chan struct{})
	s.mu.Unlock()
}

func (s *stalling) resume() {
	s.mu.Lock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
	s.mu.Unlock()
}

func (s *stalling) NewTableID(ctx context.Context) (uint64, error) {
	s.hold()
	return s.Store.NewTableID(ctx)
}

func (s *stalling) PutTable(ctx context.Context, m store.TableMeta) (store.TableMeta, error) {
	s.hold()
	return s.Store.PutTable(ctx, m)
}

func (s *stalling) AddColumns(ctx context.Context, tid uint64, cols []store.Column) ([]store.Column, error) {
	s.hold()
	return s.Store.AddColumns(ctx, tid, cols)
}

func (s *stalling) SeriesIDs(ctx context.Context, tid uint64, series []store.SeriesKey) ([]uint64, error) {
	s.hold()
	return s.Store.SeriesIDs(ctx, tid, series)
}

func (s *stalling) TruncateTable(ctx context.Context, tid uint64) (store.TableMeta, error) {
	s.hold()
	return s.Store.TruncateTable(ctx, tid)
}

// feedOn runs a feed on st (every table created WITH SYNC; then what
// set changes, when given) until the test ends, then closes st.
func feedOn(t *testing.T, st feed.Storage, set ...func(*feed.Config)) (*feed.Sequencer, *feed.Drainer) {
	t.Helper()
	t.Cleanup(func() { require.NoError(t, st.(store.Backend).Close()) })
	cfg := feed.DefaultConfig()
	cfg.SyncTables = []string{"*"}
	for _, f := range set {
		f(&cfg)
	}
	seq, d, err := feed.Open(cfg, st, nil, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- seq.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-ran)
	})
	return seq, d
}

// point is one line of table at ts: host=host v=ts.
func point(table, host string, ts int64) feed.Point {
	return feed.Point{Table: table, Series: "host=" + host, Tags: []feed.Tag{{Key: "host", Value: host}},
		Fields: []feed.PointField{{Key: "v", Value: feed.Value{Kind: feed.KindFloat, Num: math.Float64bits(float64(ts))}}},
		Time:   ts, Line: 1}
}

// TestStalledMetadataHoldsOnlyNewNames stalls the shared store's round
// trips for new tables, columns and series, and table changes, on a node
// whose sequencer runs on a real JetStream: the writes that bring new
// names (a new table, a new series and a new column of a table in use)
// and a TRUNCATE wait, while the writers of known series keep
// committing; once the store answers, the held writes and the TRUNCATE
// are done too and every line is drained once. A sequencer that made
// those round trips itself would hold every writer behind them.
func TestStalledMetadataHoldsOnlyNewNames(t *testing.T) {
	h := newHarness(t, 1)
	st := &stalling{Store: h.open(t, h.config(t))}
	seq, d := feedOn(t, st)
	t.Cleanup(st.resume) // a failed test's held calls return before the feed stops
	wctx, wcancel := context.WithTimeout(context.Background(), testdeadline.Scale(time.Minute))
	defer wcancel()
	write := func(ps ...feed.Point) *feed.Pending {
		p, err := seq.Submit(wctx, &feed.Batch{Points: ps})
		require.NoError(t, err)
		return p
	}
	acked := func(p *feed.Pending, what string) {
		t.Helper()
		res, err := p.Wait(wctx)
		require.NoError(t, err, what)
		require.Empty(t, res.Rejected, what)
		require.Equal(t, 1, res.Accepted, what)
	}
	acked(write(point("steady", "a", 1)), "first write")
	acked(write(point("changed", "a", 1)), "first write of the table truncated")

	st.stall()
	truncated := make(chan error, 1)
	go func() { _, err := seq.Truncate(wctx, "changed"); truncated <- err }()
	held := []*feed.Pending{
		write(point("fresh", "a", 1)),  // a new table
		write(point("steady", "b", 2)), // a new series
	}
	wide := point("steady", "a", 3)
	wide.Fields = append(wide.Fields, feed.PointField{Key: "w", Value: feed.Value{Kind: feed.KindInt, Num: 7}})
	held = append(held, write(wide)) // a new column
	for st.waiting.Load() == 0 {
		require.NoError(t, wctx.Err(), "no write reached the shared store's round trips")
		time.Sleep(time.Millisecond)
	}
	const steady = 50
	for i := range steady {
		// Each answered while the store is stalled: the sequencer never
		// waits for it.
		acked(write(point("steady", "a", int64(10+i))), "a write of a known series while the store is stalled")
	}
	require.Positive(t, st.waiting.Load(), "the stall held until the steady writes were answered")
	_, err := d.Table("fresh")
	require.True(t, errors.Is(err, feed.ErrTableNotFound), "the new table waits for the store: %v", err)
	require.Empty(t, truncated, "the TRUNCATE waits for the store")

	st.resume()
	for _, p := range held {
		acked(p, "a held write, once the store answers")
	}
	require.NoError(t, <-truncated)
	count := func(table string) int {
		n := 0
		_, err := d.Drain(wctx, feed.DrainRequest{Table: table, Limit: 1000}, func([]feed.Column, []feed.Value) error {
			n++
			return nil
		})
		require.NoError(t, err)
		return n
	}
	require.Equal(t, 1+steady+2, count("steady"))
	require.Equal(t, 1, count("fresh"))
	status, err := d.Status("changed")
	require.NoError(t, err)
	require.Equal(t, uint64(2), status.Epoch, "truncated")
	require.Zero(t, count("changed"))
}

// TestClusterGoneFailsWritesNotTheNode stops the only JetStream server
// under a running feed for longer than --jetstream-publish-timeout: a
// write of a known series (its commit) and a write of a new series (its
// series id) fail with feed.ErrUnavailable, the sequencer runs on (a
// stopped one would answer ErrClosed), and once the server is back the
// same writes commit and drain.
func TestClusterGoneFailsWritesNotTheNode(t *testing.T) {
	h := newHarness(t, 1)
	cfg := h.config(t)
	cfg.PublishTimeout, cfg.SwitchAfter = time.Second, 500*time.Millisecond
	seq, d := feedOn(t, h.open(t, cfg))
	wctx, wcancel := context.WithTimeout(context.Background(), testdeadline.Scale(2*time.Minute))
	defer wcancel()
	write := func(p feed.Point) error {
		res, err := seq.Append(wctx, &feed.Batch{Points: []feed.Point{p}})
		if err == nil {
			require.Empty(t, res.Rejected)
		}
		return err
	}
	require.NoError(t, write(point("t", "a", 1)))

	h.cluster.Stop(0)
	require.ErrorIs(t, write(point("t", "a", 2)), feed.ErrUnavailable, "a commit the cluster did not answer")
	require.ErrorIs(t, write(point("t", "b", 3)), feed.ErrUnavailable, "a series id the cluster did not answer")

	h.cluster.Restart(0)
	h.cluster.WaitJetStream()
	for write(point("t", "a", 2)) != nil {
		require.NoError(t, wctx.Err(), "no commit once the server is back")
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, write(point("t", "b", 3)))
	seen := map[int64]bool{}
	_, err := d.Drain(wctx, feed.DrainRequest{Table: "t", Limit: 1000, Columns: []string{"time"}}, func(_ []feed.Column, vals []feed.Value) error {
		seen[vals[0].Int()] = true
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, map[int64]bool{1: true, 2: true, 3: true}, seen, "every acknowledged write")
}

// TestOversizedWritesRefusedAtTheDoor writes, through a feed on a real
// JetStream (max_payload 1 MiB), a point whose string takes more than a
// block message holds and field keys whose schema would outgrow the
// table's record (one key-value entry): both are refused as lines
// (invalid_value, column_limit), and the node goes on committing what
// fits. Without the store's limits the first made every commit of the
// group fail and the second its record update.
func TestOversizedWritesRefusedAtTheDoor(t *testing.T) {
	h := newHarness(t, 1)
	st := h.open(t, h.config(t))
	l := st.Limits()
	require.Less(t, l.MaxFragmentBytes, 1<<20, "a block message holds less than max_payload")
	require.Less(t, l.MaxMetaBytes, 1<<20, "a record holds less than max_payload")
	seq, d := feedOn(t, st)
	wctx, wcancel := context.WithTimeout(context.Background(), testdeadline.Scale(time.Minute))
	defer wcancel()

	big := point("t", "a", 1)
	big.Fields = []feed.PointField{{Key: "s", Value: feed.Value{Kind: feed.KindString, Str: strings.Repeat("x", 1<<20)}}}
	res, err := seq.Append(wctx, &feed.Batch{Points: []feed.Point{big, point("t", "a", 2)}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Accepted)
	require.Len(t, res.Rejected, 1)
	require.ErrorIs(t, res.Rejected[0].Err, feed.ErrInvalidValue)

	var pts []feed.Point
	for i := range l.MaxMetaBytes/store.ColumnBytes(strings.Repeat("k", 4000)) + 5 {
		p := point("t", "a", int64(10+i))
		p.Fields = []feed.PointField{{Key: fmt.Sprintf("%04d", i) + strings.Repeat("k", 3996), Value: feed.Value{Kind: feed.KindInt, Num: 1}}}
		pts = append(pts, p)
	}
	res, err = seq.Append(wctx, &feed.Batch{Points: pts})
	require.NoError(t, err)
	keys := res.Accepted
	require.Positive(t, keys)
	require.NotEmpty(t, res.Rejected)
	for _, r := range res.Rejected {
		require.ErrorIs(t, r.Err, feed.ErrColumnLimit)
	}
	res, err = seq.Append(wctx, &feed.Batch{Points: []feed.Point{point("t", "a", 3)}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Accepted, "the node goes on")
	info, err := d.Table("t")
	require.NoError(t, err)
	require.Equal(t, 3+keys, len(info.Columns), "time, host, v and the keys that fit (not s: its point was refused)")
}

// TestSweepsBesideWrites runs retention sweeps through a feed on a real
// JetStream while writers keep writing the table being swept: the feed
// runs a shared store's sweep steps beside its sequencer, so SweepBefore
// (the cache, the record, the stream's purge) meets Append of the same
// table at once. Every aged row goes, every row written meanwhile stays,
// each drained once above the raised horizon.
func TestSweepsBesideWrites(t *testing.T) {
	h := newHarness(t, 1)
	cfg := h.config(t)
	cfg.PurgeMinMessages, cfg.PurgeGrace = 1, 0
	seq, d := feedOn(t, h.open(t, cfg), func(c *feed.Config) {
		c.SweepInterval, c.SweepBatchFragments = 5*time.Millisecond, 7
	})
	wctx, wcancel := context.WithTimeout(context.Background(), testdeadline.Scale(2*time.Minute))
	defer wcancel()
	write := func(ps ...feed.Point) {
		t.Helper()
		res, err := seq.Append(wctx, &feed.Batch{Points: ps})
		require.NoError(t, err)
		require.Empty(t, res.Rejected)
	}

	// Aged once the table's retention becomes a minute: 100 points of
	// ten minutes ago, in commits of ten.
	old := time.Now().Add(-10 * time.Minute).UnixNano()
	for c := range 10 {
		var ps []feed.Point
		for i := range 10 {
			ps = append(ps, point("t", fmt.Sprint("h", i), old+int64(c*10+i)))
		}
		write(ps...)
	}
	minute := time.Minute
	_, _, err := seq.PutTable(wctx, "t", feed.TableOptions{Retention: &minute})
	require.NoError(t, err)
	const fresh = 200
	for i := range fresh { // beside the sweeps' batches of 7
		write(point("t", "new", time.Now().UnixNano()+int64(i)))
	}
	var status feed.SyncStatus
	for {
		status, err = d.Status("t")
		require.NoError(t, err)
		if status.Horizon == 101 {
			break
		}
		require.NoError(t, wctx.Err(), "the sweeps did not remove the aged rows (horizon %d)", status.Horizon)
		time.Sleep(10 * time.Millisecond)
	}
	n := 0
	_, err = d.Drain(wctx, feed.DrainRequest{Table: "t", After: status.Horizon - 1, Limit: 1000}, func([]feed.Column, []feed.Value) error {
		n++
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, fresh, n, "every row written beside the sweeps, none of the aged")
}
