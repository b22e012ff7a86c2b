package feed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/memstore"
)

// --- Helpers for the long-poll, consumer and lag tests ----------------------

// fakeClock is an injected Sequencer.now that moves only when told to.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock(t0 time.Time) *fakeClock {
	c := &fakeClock{}
	c.ns.Store(t0.UnixNano())
	return c
}

func (c *fakeClock) now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) add(d time.Duration) { c.ns.Add(int64(d)) }
func (c *fakeClock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }

// openClockHarness is openHarness with a metrics registry (reg may be nil)
// and the clock clk (nil: real time) injected before the sequencer runs.
func openClockHarness(t testing.TB, disk *memstore.Disk, cfg Config, reg prometheus.Registerer, clk *fakeClock) *harness {
	t.Helper()
	db, err := memstore.Open(disk)
	require.NoError(t, err)
	return startHarness(t, disk, db, cfg, db, reg, clk)
}

// drainResult is the outcome of a drain run in its own goroutine.
type drainResult struct {
	p   page
	err error
}

// goDrain starts req in a goroutine; the result arrives on the channel.
func goDrain(s *Drainer, req DrainRequest) <-chan drainResult {
	ch := make(chan drainResult, 1)
	go func() {
		p, err := tryDrain(s, req)
		ch <- drainResult{p, err}
	}()
	return ch
}

// awaitDrain returns the drain's result, failing when it has not returned
// within limit: the test's bound on a long-poll that must end early, far
// below the drain's own wait.
func awaitDrain(t testing.TB, ch <-chan drainResult, limit time.Duration, msg string) drainResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(limit):
		t.Fatalf("drain still waiting after %v: %s", limit, msg)
		return drainResult{}
	}
}

// consumerOf returns table's consumer name, if listed.
func consumerOf(t testing.TB, s *Drainer, table, name string) (ConsumerInfo, bool) {
	t.Helper()
	cs, err := s.Consumers(table)
	require.NoError(t, err)
	for _, c := range cs {
		if c.Name == name {
			return c, true
		}
	}
	return ConsumerInfo{}, false
}

// awaitConsumer waits until a drain has recorded consumer name: a
// long-polling drain records its consumer before it starts to wait.
func awaitConsumer(t testing.TB, s *Drainer, table, name string) {
	t.Helper()
	eventually(t, func() bool { _, ok := consumerOf(t, s, table, name); return ok }, "consumer "+name+" recorded")
}

// consumerNames lists table's consumers by name.
func consumerNames(t testing.TB, s *Drainer, table string) []string {
	t.Helper()
	cs, err := s.Consumers(table)
	require.NoError(t, err)
	names := []string{}
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return names
}

// seqPoints returns n points on table, ts from+1 .. from+n, v = ts, over
// three hosts.
func seqPoints(table string, from, n int) []Point {
	pts := make([]Point, 0, n)
	for i := from + 1; i <= from+n; i++ {
		pts = append(pts, pt(table, int64(i), tg("host", fmt.Sprint("h", i%3)), fld("v", iv(int64(i)))))
	}
	return pts
}

// --- Long-poll (docs/contract.md#long-poll) -------------------------------------------------------

func TestDrainWait(t *testing.T) {
	const long = 60 * time.Second  // a wait that must be cut short
	const bound = 30 * time.Second // the test's deadline for that
	cases := []struct {
		name     string
		withRows bool          // the page is not empty to begin with
		wait     time.Duration // DrainRequest.Wait
		epoch    bool          // the drain names the epoch
		// act runs once the drain waits (its consumer is recorded).
		act   func(t *testing.T, h *harness, stop chan struct{})
		check func(t *testing.T, r drainResult, h *harness)
	}{
		{
			name: "a write from another goroutine ends the wait", wait: long, epoch: true,
			act: func(t *testing.T, h *harness, _ chan struct{}) {
				mustAppend(t, h.s, pt("t", 100, tg("host", "late"), fld("v", iv(7)), fld("s", sv("new"))))
			},
			check: func(t *testing.T, r drainResult, _ *harness) {
				require.NoError(t, r.err)
				require.Equal(t, []row{{11, map[string]Value{"time": tmv(100), "host": tagv("late"), "v": iv(7), "s": sv("new")}}}, r.p.rows())
				require.Equal(t, uint64(11), r.p.Next)
				require.Equal(t, uint64(11), r.p.Watermark)
				require.False(t, r.p.More)
			},
		},
		{
			name: "a page with rows does not wait", withRows: true, wait: long, epoch: true,
			check: func(t *testing.T, r drainResult, _ *harness) {
				require.NoError(t, r.err)
				require.Len(t, r.p.rows(), 5)
				require.Equal(t, uint64(10), r.p.Next)
			},
		},
		{
			name: "an expired wait returns an empty page at the watermark", wait: 200 * time.Millisecond, epoch: true,
			check: func(t *testing.T, r drainResult, _ *harness) {
				require.NoError(t, r.err)
				require.Empty(t, r.p.vals)
				require.Zero(t, r.p.Rows)
				require.Equal(t, uint64(10), r.p.Watermark)
				require.Equal(t, r.p.Watermark, r.p.Next)
				require.False(t, r.p.More)
				require.Equal(t, uint64(1), r.p.Epoch)
			},
		},
		{
			name: "closing Stop ends the wait with an empty page", wait: long, epoch: true,
			act: func(_ *testing.T, _ *harness, stop chan struct{}) { close(stop) },
			check: func(t *testing.T, r drainResult, _ *harness) {
				require.NoError(t, r.err)
				require.Empty(t, r.p.vals)
				require.Equal(t, uint64(10), r.p.Next)
				require.Equal(t, uint64(10), r.p.Watermark)
				require.False(t, r.p.More)
			},
		},
		{
			name: "truncate ends the wait with stale_epoch when the epoch was given", wait: long, epoch: true,
			act: func(t *testing.T, h *harness, _ chan struct{}) {
				_, err := h.s.Truncate(context.Background(), "t")
				require.NoError(t, err)
			},
			check: func(t *testing.T, r drainResult, _ *harness) {
				require.ErrorIs(t, r.err, ErrStaleEpoch)
				var ref *RefusalError
				require.ErrorAs(t, r.err, &ref)
				require.Equal(t, SyncStatus{Enabled: true, Epoch: 2, Seq: 10, Watermark: 10, Horizon: 1}, ref.Status)
				require.Empty(t, r.p.vals)
			},
		},
		{
			name: "without an epoch the wait follows the truncated table", wait: long, epoch: false,
			act: func(t *testing.T, h *harness, _ chan struct{}) {
				_, err := h.s.Truncate(context.Background(), "t")
				require.NoError(t, err)
				mustAppend(t, h.s, pt("t", 5, tg("host", "after"), fld("v", iv(-5))))
			},
			check: func(t *testing.T, r drainResult, _ *harness) {
				require.NoError(t, r.err)
				require.Equal(t, uint64(2), r.p.Epoch)
				require.Equal(t, []row{{11, map[string]Value{"time": tmv(5), "host": tagv("after"), "v": iv(-5)}}}, r.p.rows())
			},
		},
		{
			name: "sync off ends the wait with sync_off", wait: long, epoch: true,
			act: func(t *testing.T, h *harness, _ chan struct{}) {
				_, err := h.s.SetSync(context.Background(), "t", false)
				require.NoError(t, err)
			},
			check: func(t *testing.T, r drainResult, _ *harness) {
				require.ErrorIs(t, r.err, ErrSyncOff)
			},
		},
		{
			name: "drop ends the wait with table_not_found", wait: long, epoch: true,
			act: func(t *testing.T, h *harness, _ chan struct{}) {
				require.NoError(t, h.s.Drop(context.Background(), "t"))
			},
			check: func(t *testing.T, r drainResult, _ *harness) {
				require.ErrorIs(t, r.err, ErrTableNotFound)
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := openHarness(t, memstore.NewDisk(), DefaultConfig())
			defer h.close()
			_, _, err := h.s.CreateTable(context.Background(), "t", true)
			require.NoError(t, err)
			mustAppend(t, h.s, seqPoints("t", 0, 10)...)
			after := uint64(10)
			if tc.withRows {
				after = 5
			}
			stop := make(chan struct{})
			req := DrainRequest{Table: "t", After: after, Limit: 100, Wait: tc.wait, Stop: stop, Consumer: "poller", Epoch: 1, HasEpoch: tc.epoch}
			ch := goDrain(h.d, req)
			if tc.act != nil {
				awaitConsumer(t, h.d, "t", "poller")
				tc.act(t, h, stop)
			}
			r := awaitDrain(t, ch, bound, tc.name)
			if r.err == nil {
				require.NoError(t, pageProblem(r.p, req.After, req.Limit))
			}
			tc.check(t, r, h)
		})
	}
}

// --- Named consumers (docs/contract.md#consumers) ---------------------------------------

func TestConsumerRecorded(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 123456789, time.UTC)
	clk := newFakeClock(t0)
	h := openClockHarness(t, memstore.NewDisk(), DefaultConfig(), nil, clk)
	defer h.close()
	ctx := context.Background()
	for _, name := range []string{"t", "u"} {
		_, _, err := h.s.CreateTable(ctx, name, true)
		require.NoError(t, err)
	}
	mustAppend(t, h.s, seqPoints("t", 0, 50)...)

	drainAs := func(t *testing.T, table, consumer string, after uint64, epoch uint64) error {
		t.Helper()
		_, err := tryDrain(h.d, DrainRequest{Table: table, After: after, Limit: 10, Consumer: consumer, Epoch: epoch, HasEpoch: true})
		return err
	}
	t.Run("position is after, with the epoch and the clock", func(t *testing.T) {
		require.NoError(t, drainAs(t, "t", "m1", 40, 1))
		c, ok := consumerOf(t, h.d, "t", "m1")
		require.True(t, ok)
		require.Equal(t, ConsumerInfo{Name: "m1", Epoch: 1, Position: 40, LastSeen: t0}, c)
	})
	t.Run("a later drain moves it and its last_seen", func(t *testing.T) {
		clk.add(3 * time.Second)
		require.NoError(t, drainAs(t, "t", "m1", 50, 1))
		c, _ := consumerOf(t, h.d, "t", "m1")
		require.Equal(t, ConsumerInfo{Name: "m1", Epoch: 1, Position: 50, LastSeen: t0.Add(3 * time.Second)}, c)
	})
	t.Run("listed by name, per table", func(t *testing.T) {
		require.NoError(t, drainAs(t, "t", "a-first", 0, 1))
		require.NoError(t, drainAs(t, "u", "only-u", 0, 1))
		require.Equal(t, []string{"a-first", "m1"}, consumerNames(t, h.d, "t"))
		require.Equal(t, []string{"only-u"}, consumerNames(t, h.d, "u"))
	})
	t.Run("a refused drain records nothing", func(t *testing.T) {
		require.ErrorIs(t, drainAs(t, "t", "refused", 0, 7), ErrStaleEpoch)
		require.ErrorIs(t, drainAs(t, "t", "refused", 51, 1), ErrCursorBeyondSequence)
		_, err := tryDrain(h.d, DrainRequest{Table: "t", Limit: 0, Consumer: "refused"})
		require.ErrorIs(t, err, ErrInvalidLimit)
		_, ok := consumerOf(t, h.d, "t", "refused")
		require.False(t, ok)
		c, _ := consumerOf(t, h.d, "t", "m1")
		require.Equal(t, uint64(50), c.Position, "a refusal leaves the others alone")
	})
	t.Run("unknown table", func(t *testing.T) {
		_, err := h.d.Consumers("nope")
		require.ErrorIs(t, err, ErrTableNotFound)
	})
}

func TestConsumerDurable(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	record := func(t *testing.T, h *harness, name string, after uint64) {
		t.Helper()
		_, err := tryDrain(h.d, DrainRequest{Table: "t", After: after, Limit: 1, Consumer: name})
		require.NoError(t, err)
	}
	stored := func(t *testing.T, h *harness) []store.Consumer {
		t.Helper()
		cs, err := h.db.LoadConsumers(context.Background(), "t")
		require.NoError(t, err)
		return cs
	}
	setup := func(t *testing.T, cfg Config) (*harness, *fakeClock) {
		t.Helper()
		clk := newFakeClock(t0)
		h := openClockHarness(t, memstore.NewDisk(), cfg, nil, clk)
		_, _, err := h.s.CreateTable(context.Background(), "t", true)
		require.NoError(t, err)
		mustAppend(t, h.s, seqPoints("t", 0, 20)...)
		return h, clk
	}

	t.Run("flushed every ConsumerFlushInterval", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.ConsumerFlushInterval = 10 * time.Millisecond
		h, _ := setup(t, cfg)
		defer h.close()
		record(t, h, "m1", 7)
		want := []store.Consumer{{Name: "m1", Epoch: 1, Position: 7, LastSeen: t0.UnixNano()}}
		eventually(t, func() bool { return len(stored(t, h)) == 1 }, "consumer flushed while running")
		require.Equal(t, want, stored(t, h))
		record(t, h, "m1", 12)
		want[0].Position = 12
		eventually(t, func() bool { return stored(t, h)[0].Position == 12 }, "the new position flushed")
		require.Equal(t, want, stored(t, h))
	})

	t.Run("flushed at shutdown and loaded at start", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.ConsumerFlushInterval = time.Hour
		h, clk := setup(t, cfg)
		record(t, h, "m1", 7)
		clk.add(time.Minute)
		record(t, h, "m2", 20)
		require.Empty(t, stored(t, h), "nothing flushed before the interval")
		h.close()
		h = openClockHarness(t, h.disk, cfg, nil, clk)
		defer h.close()
		cs, err := h.d.Consumers("t")
		require.NoError(t, err)
		require.Equal(t, []ConsumerInfo{
			{Name: "m1", Epoch: 1, Position: 7, LastSeen: t0},
			{Name: "m2", Epoch: 1, Position: 20, LastSeen: t0.Add(time.Minute)},
		}, cs)
	})

	t.Run("a deletion is durable", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.ConsumerFlushInterval = time.Hour
		h, clk := setup(t, cfg)
		record(t, h, "gone", 1)
		record(t, h, "kept", 2)
		h.close()
		h = openClockHarness(t, h.disk, cfg, nil, clk)
		require.NoError(t, h.d.DeleteConsumer("t", "gone", Principal{}))
		record(t, h, "never-flushed", 3)
		require.NoError(t, h.d.DeleteConsumer("t", "never-flushed", Principal{}))
		h.close()
		h = openClockHarness(t, h.disk, cfg, nil, clk)
		defer h.close()
		require.Equal(t, []string{"kept"}, consumerNames(t, h.d, "t"))
	})
}

// TestConsumerBound walks the consumer budgets (per token and table, per
// token, in total) and ownership: a consumer is moved, reused and deleted
// only by its token or an admin; an unowned one is claimed by the first
// token that drains it.
func TestConsumerBound(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxConsumersPerTable = 2
	cfg.MaxConsumersPerToken = 3
	cfg.MaxConsumers = 6
	h := openHarness(t, memstore.NewDisk(), cfg)
	defer func() { h.close() }()
	ctx := context.Background()
	for _, name := range []string{"t", "u", "v"} {
		_, _, err := h.s.CreateTable(ctx, name, true)
		require.NoError(t, err)
	}
	a, b, anon := Principal{Name: "a"}, Principal{Name: "b"}, Principal{}
	root := Principal{Name: "root", Admin: true}
	steps := []struct {
		name  string
		table string
		op    string // "drain" or "delete"
		by    Principal
		cons  string
		err   error
		after []string // t's consumers afterwards
	}{
		{name: "first", table: "t", op: "drain", by: a, cons: "c1", after: []string{"c1"}},
		{name: "second", table: "t", op: "drain", by: a, cons: "c2", after: []string{"c1", "c2"}},
		{name: "third is refused", table: "t", op: "drain", by: a, cons: "c3", err: ErrTooManyConsumers, after: []string{"c1", "c2"}},
		{name: "a known one still drains", table: "t", op: "drain", by: a, cons: "c1", after: []string{"c1", "c2"}},
		{name: "a drain without a name is not bounded", table: "t", op: "drain", by: a, cons: "", after: []string{"c1", "c2"}},
		{name: "another token has its own room on the table", table: "t", op: "drain", by: b, cons: "b1", after: []string{"b1", "c1", "c2"}},
		{name: "another token may not move it", table: "t", op: "drain", by: b, cons: "c1", err: ErrConsumerOwned, after: []string{"b1", "c1", "c2"}},
		{name: "an admin may", table: "t", op: "drain", by: root, cons: "c1", after: []string{"b1", "c1", "c2"}},
		{name: "the owner still may", table: "t", op: "drain", by: a, cons: "c1", after: []string{"b1", "c1", "c2"}},
		{name: "the table bound is per table", table: "u", op: "drain", by: a, cons: "c3", after: []string{"b1", "c1", "c2"}},
		{name: "the token bound", table: "v", op: "drain", by: a, cons: "c4", err: ErrTooManyConsumers, after: []string{"b1", "c1", "c2"}},
		{name: "without a token", table: "u", op: "drain", by: anon, cons: "old", after: []string{"b1", "c1", "c2"}},
		{name: "b's second", table: "u", op: "drain", by: b, cons: "b2", after: []string{"b1", "c1", "c2"}},
		{name: "the total bound", table: "v", op: "drain", by: b, cons: "b3", err: ErrTooManyConsumers, after: []string{"b1", "c1", "c2"}},
		{name: "another token may not delete it", table: "t", op: "delete", by: b, cons: "c2", err: ErrConsumerOwned, after: []string{"b1", "c1", "c2"}},
		{name: "the owner deletes it", table: "t", op: "delete", by: a, cons: "c2", after: []string{"b1", "c1"}},
		{name: "then the total has room", table: "v", op: "drain", by: b, cons: "b3", after: []string{"b1", "c1"}},
		{name: "the name is free again", table: "t", op: "drain", by: b, cons: "c2", err: ErrTooManyConsumers, after: []string{"b1", "c1"}},
		{name: "an admin deletes any", table: "t", op: "delete", by: root, cons: "b1", after: []string{"c1"}},
		{name: "a free name is anyone's", table: "t", op: "drain", by: b, cons: "c2", after: []string{"c1", "c2"}},
		{name: "an unowned consumer is claimed", table: "u", op: "drain", by: b, cons: "old", after: []string{"c1", "c2"}},
		{name: "then it is the claimer's", table: "u", op: "drain", by: anon, cons: "old", err: ErrConsumerOwned, after: []string{"c1", "c2"}},
		{name: "delete an unknown one", table: "t", op: "delete", by: a, cons: "nobody", err: ErrConsumerNotFound, after: []string{"c1", "c2"}},
		{name: "delete on an unknown table", table: "nope", op: "delete", by: a, cons: "c1", err: ErrTableNotFound, after: []string{"c1", "c2"}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			var err error
			if st.op == "drain" {
				_, err = tryDrain(h.d, DrainRequest{Table: st.table, Limit: 1, Consumer: st.cons, By: st.by})
			} else {
				err = h.d.DeleteConsumer(st.table, st.cons, st.by)
			}
			if st.err != nil {
				require.ErrorIs(t, err, st.err)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, st.after, consumerNames(t, h.d, "t"))
		})
	}
	owners := map[string]string{}
	for _, table := range []string{"t", "u", "v"} {
		cs, err := h.d.Consumers(table)
		require.NoError(t, err)
		for _, c := range cs {
			owners[table+"/"+c.Name] = c.Owner
		}
	}
	require.Equal(t, map[string]string{"t/c1": "a", "t/c2": "b", "u/c3": "a", "u/old": "b", "u/b2": "b", "v/b3": "b"}, owners)
	require.Equal(t, 6, h.d.counts.count())

	t.Run("owners and counts survive a restart", func(t *testing.T) {
		h.close()
		h = openHarness(t, h.disk, cfg)
		require.Equal(t, 6, h.d.counts.count())
		_, err := tryDrain(h.d, DrainRequest{Table: "v", Limit: 1, Consumer: "c9", By: root})
		require.ErrorIs(t, err, ErrTooManyConsumers, "the total is counted from the store")
		_, err = tryDrain(h.d, DrainRequest{Table: "t", Limit: 1, Consumer: "c1", By: b})
		require.ErrorIs(t, err, ErrConsumerOwned)
	})
	t.Run("a drop returns its consumers to the budgets", func(t *testing.T) {
		require.NoError(t, h.s.Drop(ctx, "u"))
		require.Equal(t, 3, h.d.counts.count())
	})
}

// TestConsumerIdleExpiry: a consumer that has not drained for
// --consumer-idle-expiry is removed at the next sweep, durably, and
// counted; one seen since stays.
func TestConsumerIdleExpiry(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ConsumerIdleExpiry = time.Hour
	cfg.SweepInterval = 10 * time.Millisecond
	clk := newFakeClock(time.Unix(1_700_000_000, 0))
	disk := memstore.NewDisk()
	h := openClockHarness(t, disk, cfg, nil, clk)
	defer func() { h.close() }()
	_, _, err := h.s.CreateTable(context.Background(), "t", true)
	require.NoError(t, err)
	for _, c := range []string{"idle", "busy"} {
		_, err := tryDrain(h.d, DrainRequest{Table: "t", Limit: 1, Consumer: c})
		require.NoError(t, err)
	}
	clk.add(50 * time.Minute)
	_, err = tryDrain(h.d, DrainRequest{Table: "t", Limit: 1, Consumer: "busy"})
	require.NoError(t, err)
	clk.add(20 * time.Minute)
	eventually(t, func() bool { return len(consumerNames(t, h.d, "t")) == 1 }, "the idle consumer expires")
	require.Equal(t, []string{"busy"}, consumerNames(t, h.d, "t"))
	eventually(t, func() bool { return testutil.ToFloat64(h.s.m.consumersExpired) == 1 }, "the removal is counted")
	h.close()
	h = openClockHarness(t, disk, cfg, nil, clk)
	require.Equal(t, []string{"busy"}, consumerNames(t, h.d, "t"), "the removal is durable")
}

func TestConsumersTruncateAndDrop(t *testing.T) {
	cfg := DefaultConfig()
	h := openHarness(t, memstore.NewDisk(), cfg)
	defer func() { h.close() }()
	ctx := context.Background()
	_, _, err := h.s.CreateTable(ctx, "t", true)
	require.NoError(t, err)
	mustAppend(t, h.s, seqPoints("t", 0, 10)...)
	_, err = tryDrain(h.d, DrainRequest{Table: "t", After: 6, Limit: 1, Consumer: "m1"})
	require.NoError(t, err)

	t.Run("they survive TRUNCATE with their old epoch", func(t *testing.T) {
		_, err := h.s.Truncate(ctx, "t")
		require.NoError(t, err)
		c, ok := consumerOf(t, h.d, "t", "m1")
		require.True(t, ok)
		require.Equal(t, uint64(1), c.Epoch)
		require.Equal(t, uint64(6), c.Position)
		// Recorded in the new epoch, and still there after a restart.
		_, err = tryDrain(h.d, DrainRequest{Table: "t", After: 10, Limit: 1, Consumer: "m2"})
		require.NoError(t, err)
		h.close()
		h = openHarness(t, h.disk, cfg)
		require.Equal(t, []string{"m1", "m2"}, consumerNames(t, h.d, "t"))
		c, _ = consumerOf(t, h.d, "t", "m2")
		require.Equal(t, uint64(2), c.Epoch)
	})
	t.Run("they vanish with DROP", func(t *testing.T) {
		require.NoError(t, h.s.Drop(ctx, "t"))
		_, err := h.d.Consumers("t")
		require.ErrorIs(t, err, ErrTableNotFound)
		_, _, err = h.s.CreateTable(ctx, "t", true)
		require.NoError(t, err)
		require.Empty(t, consumerNames(t, h.d, "t"), "a re-created table has none")
		h.close()
		h = openHarness(t, h.disk, cfg)
		require.Empty(t, consumerNames(t, h.d, "t"), "nor after a restart")
	})
}

// --- Lag metrics (docs/contract.md#consumers) -----------------------------------------------------------

// lagMetrics reads the lag and position gauges of table's consumer name
// from reg; ok=false when the consumer is not reported.
func lagMetrics(t testing.TB, reg *prometheus.Registry, table, name string) (fragments, seconds, position float64, ok bool) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	found := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["table"] != table || labels["consumer"] != name {
				continue
			}
			switch mf.GetName() {
			case "ingestd_feed_consumer_lag_fragments":
				fragments = m.GetGauge().GetValue()
				found++
			case "ingestd_feed_consumer_lag_seconds":
				seconds = m.GetGauge().GetValue()
				found++
			case "ingestd_feed_consumer_position":
				position = m.GetGauge().GetValue()
				found++
			}
		}
	}
	if found == 0 {
		return 0, 0, 0, false
	}
	require.Equal(t, 3, found, "every consumer gauge is reported")
	return fragments, seconds, position, true
}

func TestConsumerLagMetrics(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clk := newFakeClock(t0)
	reg := prometheus.NewRegistry()
	h := openClockHarness(t, memstore.NewDisk(), DefaultConfig(), reg, clk)
	defer h.close()
	ctx := context.Background()
	_, _, err := h.s.CreateTable(ctx, "t", true)
	require.NoError(t, err)
	// 100 lines committed at t0, 20 more at t0+60s.
	mustAppend(t, h.s, seqPoints("t", 0, 100)...)
	drainAs := func(t *testing.T, name string, after uint64) {
		t.Helper()
		_, err := tryDrain(h.d, DrainRequest{Table: "t", After: after, Limit: 1, Consumer: name})
		require.NoError(t, err)
	}
	type lag struct {
		fragments, seconds, position float64
	}
	check := func(t *testing.T, name string, want lag) {
		t.Helper()
		f, s, p, ok := lagMetrics(t, reg, "t", name)
		require.True(t, ok, "consumer %s reported", name)
		require.Equal(t, want, lag{f, s, p}, "consumer %s", name)
	}

	t.Run("behind", func(t *testing.T) {
		drainAs(t, "behind", 40)
		clk.add(90 * time.Second)
		check(t, "behind", lag{fragments: 60, seconds: 90, position: 40})
	})
	t.Run("caught up", func(t *testing.T) {
		drainAs(t, "caught-up", 100)
		check(t, "caught-up", lag{fragments: 0, seconds: 0, position: 100})
	})
	t.Run("an offline consumer is still reported, its lag growing", func(t *testing.T) {
		clk.set(t0.Add(100 * time.Second))
		mustAppend(t, h.s, seqPoints("t", 100, 20)...)
		clk.add(30 * time.Second)
		// behind still waits for x_seq 41, committed at t0.
		check(t, "behind", lag{fragments: 80, seconds: 130, position: 40})
		// caught-up's oldest unapplied fragment, 101, was committed at t0+100s.
		check(t, "caught-up", lag{fragments: 20, seconds: 30, position: 100})
	})
	t.Run("a stale epoch lags by the whole watermark", func(t *testing.T) {
		_, err := h.s.Truncate(ctx, "t")
		require.NoError(t, err)
		check(t, "behind", lag{fragments: 120, seconds: 0, position: 40})
		drainAs(t, "behind", 120)
		check(t, "behind", lag{fragments: 0, seconds: 0, position: 120})
	})
	t.Run("a deleted consumer is no longer reported", func(t *testing.T) {
		require.NoError(t, h.d.DeleteConsumer("t", "behind", Principal{}))
		_, _, _, ok := lagMetrics(t, reg, "t", "behind")
		require.False(t, ok)
		_, _, _, ok = lagMetrics(t, reg, "t", "caught-up")
		require.True(t, ok)
	})
}

// stallingConsumers is the in-memory store whose PutConsumers waits,
// once entered, until release is closed: a consumer flush to a store that
// does not answer (a shared store's cluster cut off).
type stallingConsumers struct {
	*memstore.Store
	entered, release chan struct{}
	once             sync.Once
}

func (s *stallingConsumers) PutConsumers(ctx context.Context, byTable map[string][]store.Consumer) error {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return s.Store.PutConsumers(ctx, byTable)
}

// TestConsumerFlushNeverHoldsWrites: a flush of consumer positions that
// the store does not answer holds no write up (the upkeep runs beside the
// sequencer), and a DROP waits for it, so that the positions it writes
// never outlive the dropped table.
func TestConsumerFlushNeverHoldsWrites(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.ConsumerFlushInterval = time.Millisecond
	st := &stallingConsumers{entered: make(chan struct{}), release: make(chan struct{})}
	h := openHarnessOn(t, memstore.NewDisk(), cfg, func(db *memstore.Store) Storage { st.Store = db; return st })
	defer h.close()
	released := false
	defer func() { // a failure below must not leave the flush stuck for h.close
		if !released {
			close(st.release)
		}
	}()
	for _, name := range []string{"t", "other"} {
		_, _, err := h.s.CreateTable(ctx, name, true)
		require.NoError(t, err)
	}
	mustAppend(t, h.s, seqPoints("t", 0, 5)...)
	_, err := tryDrain(h.d, DrainRequest{Table: "t", After: 2, Limit: 1, Consumer: "m"})
	require.NoError(t, err)
	eventually(t, func() bool {
		select {
		case <-st.entered:
			return true
		default:
			return false
		}
	}, "the flush reached the store")

	for i := range 50 {
		appendWhileStalled(t, h.s, pt("other", int64(i), tg("host", "a"), fld("v", iv(int64(i)))))
	}
	require.Equal(t, uint64(50), status(t, h.d, "other").Watermark, "writes committed while the flush waited")

	// A DROP taken while the flush waits (the sequencer's only
	// operation: QueueDelay counts it) waits for it in turn.
	dropped := make(chan error, 1)
	go func() { dropped <- h.s.Drop(ctx, "t") }()
	eventually(t, func() bool { return h.s.QueueDelay() > 0 || len(dropped) > 0 }, "the DROP taken")
	close(st.release)
	released = true
	require.NoError(t, <-dropped)
	cs, err := h.db.LoadConsumers(ctx, "t")
	require.NoError(t, err)
	require.Empty(t, cs, "the flushed position went with the DROP, never written back after it")
}

// failingConsumers is the in-memory store whose PutConsumers fails: a
// store that cannot write the positions (a disk gone read-only, a
// cluster that refuses).
type failingConsumers struct{ *memstore.Store }

var errPositions = errors.New("positions not written")

func (failingConsumers) PutConsumers(context.Context, map[string][]store.Consumer) error {
	return errPositions
}

// TestConsumerFinalFlushFailure: positions are written at shutdown, so a
// stop that cannot write them returns the error (the daemon then exits 1
// instead of reporting a clean stop), after committing every line.
func TestConsumerFinalFlushFailure(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.ConsumerFlushInterval = time.Hour // only the final flush writes
	h := openHarnessOn(t, memstore.NewDisk(), cfg, func(db *memstore.Store) Storage { return failingConsumers{db} })
	_, _, err := h.s.CreateTable(ctx, "t", true)
	require.NoError(t, err)
	mustAppend(t, h.s, seqPoints("t", 0, 5)...)
	_, err = tryDrain(h.d, DrainRequest{Table: "t", After: 2, Limit: 1, Consumer: "m"})
	require.NoError(t, err)

	h.cancel()
	require.ErrorIs(t, <-h.done, errPositions)
	require.Equal(t, uint64(5), status(t, h.d, "t").Watermark, "every line committed before the final flush")
	require.NoError(t, h.db.Close())
}

// TestConsumerFinalFlushNothingToWrite: without a changed position the
// final flush writes nothing and the stop is clean, whatever the store.
func TestConsumerFinalFlushNothingToWrite(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ConsumerFlushInterval = time.Hour
	h := openHarnessOn(t, memstore.NewDisk(), cfg, func(db *memstore.Store) Storage { return failingConsumers{db} })
	mustAppend(t, h.s, seqPoints("t", 0, 5)...)
	h.close()
}

// flakyConsumers is the in-memory store whose first PutConsumers fails
// (a write meeting another table's removal, which blocks badger's writes
// a moment).
type flakyConsumers struct {
	*memstore.Store
	calls atomic.Int32
}

func (s *flakyConsumers) PutConsumers(ctx context.Context, byTable map[string][]store.Consumer) error {
	if s.calls.Add(1) == 1 {
		return errPositions
	}
	return s.Store.PutConsumers(ctx, byTable)
}

// TestConsumerFlushRetried: a position whose write failed is written by
// the next flush, without the consumer moving again.
func TestConsumerFlushRetried(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.ConsumerFlushInterval = 5 * time.Millisecond
	st := &flakyConsumers{}
	h := openHarnessOn(t, memstore.NewDisk(), cfg, func(db *memstore.Store) Storage { st.Store = db; return st })
	defer h.close()
	_, _, err := h.s.CreateTable(ctx, "t", true)
	require.NoError(t, err)
	mustAppend(t, h.s, seqPoints("t", 0, 5)...)
	_, err = tryDrain(h.d, DrainRequest{Table: "t", After: 2, Limit: 1, Consumer: "m"})
	require.NoError(t, err)
	eventually(t, func() bool {
		cs, err := h.db.LoadConsumers(ctx, "t")
		require.NoError(t, err)
		return len(cs) == 1 && cs[0].Position == 2
	}, "the position written by a later flush")
	require.GreaterOrEqual(t, st.calls.Load(), int32(2), "the first write failed")
}
