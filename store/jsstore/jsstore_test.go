package jsstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/rowengine"
	"github.com/ingestd/ingestd/store/testdeadline"
)

var ctx = context.Background()

// createTable creates a live table WITH SYNC named name.
func createTable(t *testing.T, s *Store, name string) store.TableMeta {
	t.Helper()
	id, err := s.NewTableID(ctx)
	require.NoError(t, err)
	m, err := s.PutTable(ctx, store.TableMeta{Name: name, ID: id, Sync: true, Epoch: 1,
		Columns: []store.Column{{Name: "time"}, {Name: "host", Kind: store.KindTag}, {Name: "v", Kind: store.KindInt}, {Name: "s", Kind: store.KindString}}})
	require.NoError(t, err)
	return m
}

// commit is a synced commit of n fragments of series 1 from time ts on,
// each with an int and a string of pad bytes.
func commit(m store.TableMeta, first bool, ts int64, n, pad int) store.TableCommit {
	tc := store.TableCommit{TableID: m.ID, Sync: true, CommitTime: ts}
	if first {
		tc.NewSeries = []store.Series{{ID: 1, Tags: []store.Field{{Col: 1, Value: store.Value{Kind: store.KindTag, Str: "h1"}}}}}
	}
	for i := range n {
		tc.Fragments = append(tc.Fragments, store.Fragment{Series: 1, Time: ts + int64(i), Fields: []store.Field{
			{Col: 2, Value: store.Value{Kind: store.KindInt, Num: uint64(ts) + uint64(i)}},
			{Col: 3, Value: store.Value{Kind: store.KindString, Str: strings.Repeat("x", pad)}},
		}})
	}
	return tc
}

// rows is every row of instance tid up to upto (ReadSeq, pages of 7) and
// every point (ReadRows, pages of 5), as compared copies.
type rows struct {
	Seq    []store.Row
	Points []store.Row
}

func readAll(t *testing.T, s *Store, tid, after, upto uint64) rows {
	t.Helper()
	cp := func(r *store.Row) store.Row {
		c := *r
		c.Fields = append([]store.Field(nil), r.Fields...)
		return c
	}
	var out rows
	for {
		n := 0
		_, err := s.ReadSeq(ctx, tid, after, upto, 7, nil, func(r *store.Row) error {
			out.Seq = append(out.Seq, cp(r))
			after = r.Seq
			n++
			return nil
		})
		require.NoError(t, err)
		if n < 7 {
			break
		}
	}
	var cur store.RowCursor
	for {
		next, done, err := s.ReadRows(ctx, tid, cur, math.MinInt64, math.MaxInt64, 5, func(r *store.Row) error {
			out.Points = append(out.Points, cp(r))
			return nil
		})
		require.NoError(t, err)
		if done {
			return out
		}
		cur = next
	}
}

// sweepAll sweeps instance tid below cutoff in batches of at most batch
// fragments until the sweep is complete.
func sweepAll(t *testing.T, s *Store, tid uint64, cutoff int64, batch int) {
	t.Helper()
	for {
		res, err := s.SweepBefore(ctx, tid, cutoff, batch)
		require.NoError(t, err)
		if !res.More {
			return
		}
	}
}

// streamMsgs is how many messages the blocks stream holds of the table.
func streamMsgs(t *testing.T, s *Store, name string) uint64 {
	t.Helper()
	st, err := s.js.Stream(ctx, s.blocksStream())
	require.NoError(t, err)
	subject := s.placeOf(name).Subject
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	require.NoError(t, err)
	return info.State.Subjects[subject]
}

// TestRetrySameMessageIDStoredOnce publishes a commit's message, then
// publishes it again as Append would after a lost acknowledgement (the
// same message id): the stream stores it once, the second publish is a
// dedup hit that returns the first one's sequence, and the rows are
// there once.
func TestRetrySameMessageIDStoredOnce(t *testing.T) {
	h := newHarness(t, 1)
	s := h.open(t, h.config(t))
	t.Cleanup(func() { _ = s.Close() })
	m := createTable(t, s, "dedup")
	tab, err := s.live(m.ID)
	require.NoError(t, err)
	tc := commit(m, true, 100, 3, 1)
	j, err := s.prepare(tab, &tc, idAppend)
	require.NoError(t, err)
	require.Len(t, j.msgs, 1)

	seq, dup, err := s.send(j.msgs) // stored; its ack "lost"
	require.NoError(t, err)
	require.False(t, dup)

	// Append's path: the same job published again: the stream's dedup
	// answers with the stored message's sequence.
	require.NoError(t, s.publish([]*publishJob{&j}))
	require.Equal(t, seq, j.last)
	require.Equal(t, float64(1), testutil.ToFloat64(s.m.dedups))
	require.Equal(t, uint64(1), streamMsgs(t, s, "dedup"), "stored once")
	tab.release(seq)
	require.NoError(t, tab.await(time.Now().Add(testdeadline.Scale(time.Minute)), func() bool { return tab.f.applied >= seq }))

	// A rebuild from the stream holds the rows once.
	require.NoError(t, s.Close())
	s2 := h.open(t, h.cfgOf(s))
	t.Cleanup(func() { _ = s2.Close() })
	got := readAll(t, s2, m.ID, 0, 10)
	require.Len(t, got.Seq, 3)
	require.Equal(t, uint64(3), got.Seq[2].Seq)
}

// openMaxMessage opens a store on a fresh 1-server cluster whose block
// messages hold at most maxMsg body bytes, and returns the harness and
// configuration to open it again.
func openMaxMessage(t *testing.T, maxMsg int) (*harness, Config, *Store) {
	t.Helper()
	h := newHarness(t, 1)
	cfg := h.config(t)
	cfg.MaxMessageBytes = maxMsg
	s := h.open(t, cfg)
	t.Cleanup(func() { _ = s.Close() })
	return h, cfg, s
}

// TestCommitIsOneBatch appends a commit touching three tables, the
// second's block split over three messages: the commit is one atomic
// batch, its messages contiguous in the stream in the commit's order,
// every table numbered from its own first row. Then the same commit's
// batch is sent again as after a lost acknowledgement: refused as a
// duplicate, its messages found where the followers hold them, stored
// once.
func TestCommitIsOneBatch(t *testing.T) {
	_, _, s := openMaxMessage(t, 4096)
	names := []string{"batch_a", "batch_b", "batch_c"}
	var commits []store.TableCommit
	for i, name := range names {
		pad := 1
		if i == 1 {
			pad = 3000 // a fragment a message
		}
		commits = append(commits, commit(createTable(t, s, name), true, 100, 3, pad))
	}
	st, err := s.js.Stream(ctx, s.blocksStream())
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	before := info.State.LastSeq

	require.NoError(t, s.Append(ctx, commits, nil))
	var sends dto.Metric
	require.NoError(t, s.m.publishSeconds.Write(&sends))
	require.Equal(t, uint64(1), sends.GetHistogram().GetSampleCount(), "one send")
	want := []string{names[0], names[1], names[1], names[1], names[2]}
	for i, name := range want {
		msg, err := st.GetMsg(ctx, before+1+uint64(i))
		require.NoError(t, err)
		require.Equal(t, s.placeOf(name).Subject, msg.Subject, "message %d of the commit", i)
	}
	for i := range commits {
		require.Equal(t, uint64(1), commits[i].FirstSeq, names[i])
		require.Len(t, readAll(t, s, commits[i].TableID, 0, 10).Seq, 3, names[i])
	}

	// The second commit's batch stored, its acknowledgement lost.
	var jobs []publishJob
	var msgs []*nats.Msg
	for i := range commits {
		tab, err := s.live(commits[i].TableID)
		require.NoError(t, err)
		again := commit(store.TableMeta{ID: commits[i].TableID}, false, 200, 2, 1)
		j, err := s.prepare(tab, &again, idAppend)
		require.NoError(t, err)
		jobs = append(jobs, j)
		msgs = append(msgs, j.msgs...)
	}
	last, _, err := s.send(msgs)
	require.NoError(t, err)
	group := []*publishJob{&jobs[0], &jobs[1], &jobs[2]}
	require.NoError(t, s.publish(group))
	for i, j := range jobs {
		require.Equal(t, last-uint64(len(jobs)-1-i), j.last, names[i])
		j.t.release(j.last)
	}
	for i, n := range []uint64{2, 4, 2} {
		require.Equal(t, n, streamMsgs(t, s, names[i]), "%s: stored once", names[i])
	}
	require.Equal(t, float64(1), testutil.ToFloat64(s.m.dedups))
}

// TestTwoWritersNumberInStreamOrder has two stores (two ingestd nodes)
// append to the same table at once: neither fails, the x_seq numbers are
// unique and ascend in stream order, each store's cache holds the other's
// rows, and both read the same pages.
func TestTwoWritersNumberInStreamOrder(t *testing.T) {
	h := newHarness(t, 1)
	a := h.open(t, h.config(t))
	t.Cleanup(func() { _ = a.Close() })
	m := createTable(t, a, "two")
	require.NoError(t, a.Append(ctx, []store.TableCommit{commit(m, true, 1, 2, 1)}, nil))
	b := h.peer(t, a)

	const rounds = 30
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		firsts []uint64
	)
	for w, s := range []*Store{a, b} {
		wg.Go(func() {
			for i := range rounds {
				cs := []store.TableCommit{commit(m, false, int64(1000*(w+1)+10*i), 3, 1)}
				if !assertNoError(t, s.Append(ctx, cs, nil)) {
					return
				}
				mu.Lock()
				firsts = append(firsts, cs[0].FirstSeq)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, firsts, 2*rounds)
	seen := map[uint64]bool{}
	for _, f := range firsts {
		for k := range uint64(3) {
			require.False(t, seen[f+k], "x_seq %d handed out twice", f+k)
			seen[f+k] = true
		}
	}
	// Each Append returned once its own node applied it: both nodes are
	// waited for until they applied every number handed out.
	last := uint64(2 + 2*rounds*3)
	appliedTo(t, a, m.ID, last)
	appliedTo(t, b, m.ID, last)
	ra, rb := readAll(t, a, m.ID, 0, last), readAll(t, b, m.ID, 0, last)
	require.Len(t, ra.Seq, 2+2*rounds*3)
	require.Equal(t, ra, rb, "both nodes read the same pages")
	for i := 1; i < len(ra.Seq); i++ {
		require.Greater(t, ra.Seq[i].Seq, ra.Seq[i-1].Seq)
	}
}

// assertNoError reports err in a goroutine (require would stop the
// wrong goroutine) and tells whether it was nil.
func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}

// appliedTo waits until s numbered live instance tid up to x_seq x and
// applied to the cache the message that last raised its numbering (the
// follower numbers a message before it applies it).
func appliedTo(t *testing.T, s *Store, tid, x uint64) {
	t.Helper()
	tb := s.tableByID(t, tid)
	require.NoError(t, tb.await(time.Now().Add(testdeadline.Scale(time.Minute)), func() bool {
		f := &tb.f
		return f.xseq >= x && (len(f.recent) == 0 || f.applied >= f.recent[len(f.recent)-1].seq)
	}))
}

// peer opens another process's store on a's shared data, with its own
// row cache, closed at the end of the test.
func (h *harness) peer(t *testing.T, a *Store) *Store {
	t.Helper()
	cfg := h.cfgOf(a)
	cfg.CacheDir = t.TempDir()
	s := h.open(t, cfg)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// tableByID returns s's state of live instance tid.
func (s *Store) tableByID(t *testing.T, tid uint64) *table {
	t.Helper()
	tb, err := s.live(tid)
	require.NoError(t, err)
	return tb
}

// reports collects what a store reports to its Follow callback.
type reports struct {
	mu  sync.Mutex
	got []store.Followed
}

func (r *reports) add(f store.Followed) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, f)
}

// has reports whether a report satisfies ok.
func (r *reports) has(ok func(store.Followed) bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.got, ok)
}

// TestOtherNodeTableChangesFollowed changes tables through one store
// (node a) while another (b) runs: b takes each change and reports it
// (a table a created, its TRUNCATE, its DROP), keeps its cache to the
// live instance, acknowledges without storing a commit to the instance a
// ended (ordered before the change: b had not been told), refuses to
// truncate it (store.ErrEnded), and writes the new instance, which a
// reads; a stream a purged before b read it is numbered alike on both.
func TestOtherNodeTableChangesFollowed(t *testing.T) {
	h := newHarness(t, 1)
	a := h.open(t, h.config(t))
	t.Cleanup(func() { _ = a.Close() })
	b := h.peer(t, a)
	var got reports
	b.Follow(got.add)
	wait := func(what string, ok func(store.Followed) bool) {
		t.Helper()
		require.Eventually(t, func() bool { return got.has(ok) }, testdeadline.Scale(time.Minute), 10*time.Millisecond, "b reports %s", what)
	}

	m := createTable(t, a, "changes")
	require.NoError(t, a.Append(ctx, []store.TableCommit{commit(m, true, 1, 3, 1)}, nil))
	wait("the table a created, and its block", func(f store.Followed) bool { return f.Table.ID == m.ID && f.Seq == 3 })
	require.Equal(t, readAll(t, a, m.ID, 0, 3), readAll(t, b, m.ID, 0, 3), "b serves a's rows")

	tr, err := a.TruncateTable(ctx, m.ID)
	require.NoError(t, err)
	wait("the truncate", func(f store.Followed) bool { return f.Table.ID == tr.ID && f.Table.Epoch == m.Epoch+1 })
	require.NoError(t, b.Append(ctx, []store.TableCommit{commit(m, false, 5, 2, 1)}, nil), "a commit to the ended instance is acknowledged")
	require.Equal(t, 2.0, testutil.ToFloat64(b.m.voided), "and counted, not stored")
	_, err = b.TruncateTable(ctx, m.ID)
	require.ErrorIs(t, err, store.ErrEnded)

	first := commit(tr, true, 7, 2, 1)
	first.Meta = &store.TableMeta{Name: tr.Name, ID: tr.ID, Sync: true, Epoch: tr.Epoch, Seq: tr.Seq, Columns: m.Columns}
	cs := []store.TableCommit{first}
	require.NoError(t, b.Append(ctx, cs, nil), "b writes the new instance")
	require.Equal(t, uint64(4), cs[0].FirstSeq, "numbered above the old instance")
	_, last := b.tableByID(t, tr.ID).position()
	appliedTo(t, a, tr.ID, last)
	require.Equal(t, readAll(t, b, tr.ID, 0, last), readAll(t, a, tr.ID, 0, last), "a serves b's rows of the new instance")
	require.Len(t, readAll(t, a, tr.ID, 0, last).Seq, 2)

	_, err = a.DropTable(ctx, tr.ID)
	require.NoError(t, err)
	wait("the drop", func(f store.Followed) bool { return f.Table.Dropped && f.Ended == tr.ID })
	_, err = b.live(tr.ID)
	require.ErrorIs(t, err, store.ErrEnded)

	// b re-creates the name; a, whose follower ran on after its drop,
	// numbers the new instance's blocks as b does.
	id, err := b.NewTableID(ctx)
	require.NoError(t, err)
	re, err := b.PutTable(ctx, store.TableMeta{Name: tr.Name, ID: id, Sync: true, Epoch: tr.Epoch + 1, Columns: m.Columns})
	require.NoError(t, err)
	require.Equal(t, id, re.ID)
	require.GreaterOrEqual(t, re.Seq, last, "the new instance starts above the dropped one")
	cs = []store.TableCommit{commit(re, true, 9, 3, 1)}
	require.NoError(t, b.Append(ctx, cs, nil))
	require.Equal(t, re.Seq+1, cs[0].FirstSeq)
	require.Eventually(t, func() bool { _, err := a.live(re.ID); return err == nil }, testdeadline.Scale(time.Minute), 10*time.Millisecond, "a takes b's new instance")
	appliedTo(t, a, re.ID, re.Seq+3)
	require.Equal(t, readAll(t, b, re.ID, 0, re.Seq+3), readAll(t, a, re.ID, 0, re.Seq+3), "a serves b's rows of the re-created table")
	require.Len(t, readAll(t, a, re.ID, 0, re.Seq+3).Seq, 3)
	c := h.peer(t, a)
	require.Equal(t, readAll(t, a, re.ID, 0, re.Seq+3), readAll(t, c, re.ID, 0, re.Seq+3), "a node started from the anchor numbers alike")
	require.Equal(t, 2.0, testutil.ToFloat64(b.m.changes.WithLabelValues("truncate"))+testutil.ToFloat64(b.m.changes.WithLabelValues("drop")), "one truncate and one drop followed")
}

// TestPrunedTombstoneForgotten: a tombstone another node pruned goes
// from this node's tables too (it stayed in LoadTables for good).
func TestPrunedTombstoneForgotten(t *testing.T) {
	h := newHarness(t, 1)
	a := h.open(t, h.config(t))
	t.Cleanup(func() { _ = a.Close() })
	b := h.peer(t, a)
	names := func(s *Store) []string {
		metas, err := s.LoadTables(ctx)
		require.NoError(t, err)
		var out []string
		for _, m := range metas {
			out = append(out, m.Name)
		}
		return out
	}
	m := createTable(t, a, "pruned")
	tomb, err := a.DropTable(ctx, m.ID)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return slices.Equal(names(b), []string{"pruned"}) }, testdeadline.Scale(time.Minute), 10*time.Millisecond, "b holds the tombstone")
	require.NoError(t, a.PruneTombstone(ctx, "pruned", store.TableMeta{Name: "x_floor", Epoch: tomb.Epoch, Seq: tomb.Seq}))
	require.Equal(t, []string{"x_floor"}, names(a))
	require.Eventually(t, func() bool { return slices.Equal(names(b), []string{"x_floor"}) }, testdeadline.Scale(time.Minute), 10*time.Millisecond, "b forgets the pruned tombstone: %v", names(b))
}

// TestStreamBehindIsWaitedFor keeps a node's follower from applying a
// block another node wrote (its cache held, as a stream whose new leader
// still applies its log delivers late): the node's next Append, which
// the stream acknowledged above that block, waits for it instead of
// failing or numbering below it, and returns once both are applied.
func TestStreamBehindIsWaitedFor(t *testing.T) {
	h := newHarness(t, 1)
	s := h.open(t, h.config(t))
	t.Cleanup(func() { _ = s.Close() })
	m := createTable(t, s, "behind")
	require.NoError(t, s.Append(ctx, []store.TableCommit{commit(m, true, 1, 2, 1)}, nil))
	other := h.open(t, func() Config { c := h.cfgOf(s); c.CacheDir = t.TempDir(); return c }())
	t.Cleanup(func() { _ = other.Close() })

	s.cacheMu.Lock()
	foreign := []store.TableCommit{commit(m, false, 10, 1, 1)}
	require.NoError(t, other.Append(ctx, foreign, nil))
	done := make(chan error, 1)
	cs := []store.TableCommit{commit(m, false, 20, 1, 1)}
	go func() { done <- s.Append(ctx, cs, nil) }()
	require.Eventually(t, func() bool { return testutil.ToFloat64(s.m.behind) > 0 }, testdeadline.Scale(time.Minute), 10*time.Millisecond,
		"the Append waited for its stream's consumer")
	select {
	case err := <-done:
		t.Fatalf("Append returned before its block was applied: %v", err)
	default:
	}
	beyond, err := s.Beyond(ctx, m.ID, foreign[0].FirstSeq+1)
	require.NoError(t, err)
	require.False(t, beyond, "the other node's block is not applied here yet: a cursor above it may be another node's")
	require.Equal(t, 1.0, testutil.ToFloat64(s.m.checks.WithLabelValues(checkBehind)), "no barrier while behind")
	s.cacheMu.Unlock()
	require.NoError(t, <-done, "applied once the consumer caught up")
	beyond, err = s.Beyond(ctx, m.ID, cs[0].FirstSeq)
	require.NoError(t, err)
	require.False(t, beyond, "numbered here")
	require.Eventually(t, func() bool {
		beyond, err := s.Beyond(ctx, m.ID, cs[0].FirstSeq+1)
		return err == nil && beyond
	}, testdeadline.Scale(time.Minute), 20*time.Millisecond, "everything applied: a cursor above every number is refused once a check proves it")
	require.Greater(t, cs[0].FirstSeq, foreign[0].FirstSeq)
	got := readAll(t, s, m.ID, 0, cs[0].FirstSeq)
	require.Len(t, got.Seq, 4, "the other node's block is applied here too")
}

// TestLostPullRequestFound: a consumer the server holds messages for and
// no pull request of is one whose request went nowhere (a server that did
// not know the new consumer yet answered "no responders", which nats.go's
// iterator ignores): pullLost finds it, and the watchdog, probed by a
// waiting call, starts the consumer again; a consumer with its pull
// request held is left alone.
func TestLostPullRequestFound(t *testing.T) {
	h := newHarness(t, 1)
	s := h.open(t, h.config(t))
	t.Cleanup(func() { _ = s.Close() })
	m := createTable(t, s, "lost")
	require.NoError(t, s.Append(ctx, []store.TableCommit{commit(m, true, 1, 2, 1)}, nil))
	tbl := s.tableByID(t, m.ID)
	stream, err := s.js.Stream(ctx, s.blocksStream())
	require.NoError(t, err)

	// Never pulled from: as if its first pull request went nowhere.
	lost, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{FilterSubject: tbl.subject, AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true})
	require.NoError(t, err)
	require.True(t, tbl.pullLost(ctx, lost), "messages held for it, no pull request")

	// Caught up, its pull request waiting at the server.
	held, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true,
		DeliverPolicy: jetstream.DeliverNewPolicy})
	require.NoError(t, err)
	it, err := held.Messages()
	require.NoError(t, err)
	defer it.Stop()
	go func() { _, _ = it.Next() }() // the iterator pulls once asked; Stop ends it
	require.Eventually(t, func() bool {
		info, err := held.Info(ctx)
		return err == nil && info.NumWaiting > 0
	}, testdeadline.Scale(time.Minute), 10*time.Millisecond, "the iterator's pull request reaches the server")
	require.False(t, tbl.pullLost(ctx, held), "its pull request is held")

	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	kick, probe, created := make(chan struct{}), make(chan struct{}, 1), make(chan jetstream.Consumer, 1)
	created <- lost
	done := make(chan struct{})
	go func() {
		defer close(done)
		tbl.watchdog(wctx, cancel, kick, probe, created)
	}()
	probe <- struct{}{}
	<-done
	require.ErrorIs(t, context.Cause(wctx), errPullLost, "the watchdog starts the consumer again")
}

// TestEarlierProcessLatePublishIsApplied opens a second store on a table
// another process is still writing, as when ingestd is SIGKILLed and
// restarted while the server still holds a publish it sent: the late
// publish lands after Open read the stream, and is numbered and applied
// like another node's block; the new process's first commit lands above
// it (phase 1 stopped ingestd with ErrConflict, then fenced the stream).
func TestEarlierProcessLatePublishIsApplied(t *testing.T) {
	h := newHarness(t, 1)
	old := h.open(t, h.config(t))
	t.Cleanup(func() { _ = old.Close() })
	m := createTable(t, old, "late")
	require.NoError(t, old.Append(ctx, []store.TableCommit{commit(m, true, 1, 2, 1)}, nil))

	s := h.open(t, func() Config { c := h.cfgOf(old); c.CacheDir = t.TempDir(); return c }())
	t.Cleanup(func() { _ = s.Close() })
	late := []store.TableCommit{commit(m, false, 10, 1, 1)}
	require.NoError(t, old.Append(ctx, late, nil), "the earlier process's publish lands")
	cs := []store.TableCommit{commit(m, false, 20, 1, 1)}
	require.NoError(t, s.Append(ctx, cs, nil), "the new process's first commit")
	require.Greater(t, cs[0].FirstSeq, late[0].FirstSeq)
	got := readAll(t, s, m.ID, 0, cs[0].FirstSeq)
	require.Len(t, got.Seq, 4, "the first commit's two rows, the late one and the new one")
	require.Equal(t, []int64{1, 2, 10, 20}, []int64{got.Seq[0].Time, got.Seq[1].Time, got.Seq[2].Time, got.Seq[3].Time})
}

// TestAtomicBatchAboveMaxPayload makes the largest message small, so a
// commit becomes an atomic batch of many messages: all of it is read
// back, before and after a rebuild, in x_seq order.
func TestAtomicBatchAboveMaxPayload(t *testing.T) {
	h, cfg, s := openMaxMessage(t, 600)
	m := createTable(t, s, "batch")
	commits := []store.TableCommit{commit(m, true, 1000, 40, 100)}
	commits[0].Writes = []int{10, 25}
	require.NoError(t, s.Append(ctx, commits, nil))
	last := commits[0].FirstSeq + 39
	require.Greater(t, streamMsgs(t, s, "batch"), uint64(5), "one commit, many messages")
	before := readAll(t, s, m.ID, 0, last)
	require.Len(t, before.Seq, 40)
	for i, r := range before.Seq {
		require.Equal(t, commits[0].FirstSeq+uint64(i), r.Seq)
	}
	require.NoError(t, s.Close())
	s2 := h.open(t, cfg)
	t.Cleanup(func() { _ = s2.Close() })
	require.Equal(t, before, readAll(t, s2, m.ID, 0, last))
}

// TestDeletedCacheRebuilds writes, truncates, sweeps and raises a horizon,
// closes, deletes the cache directory and opens again: the drains and
// row pages are identical (what the writing process applied from its own
// blocks is what a rebuild decodes from the stream), a drain below the
// horizon is still refused and the swept rows stay gone.
func TestDeletedCacheRebuilds(t *testing.T) {
	h := newHarness(t, 1)
	cfg := h.config(t)
	s := h.open(t, cfg)
	m := createTable(t, s, "cache")
	gone := createTable(t, s, "gone")
	require.NoError(t, s.Append(ctx, []store.TableCommit{commit(gone, true, 1, 5, 1)}, nil))
	gone, err := s.TruncateTable(ctx, gone.ID)
	require.NoError(t, err)
	var last uint64
	for i := range 20 {
		cs := []store.TableCommit{commit(m, i == 0, int64(i*10), 3, 5), commit(gone, i == 0, int64(i), 1, 1)}
		require.NoError(t, s.Append(ctx, cs, nil))
		last = cs[0].FirstSeq + 2
	}
	// An overwrite: coalesced rows must come back the same.
	require.NoError(t, s.Append(ctx, []store.TableCommit{commit(m, false, 30, 2, 7)}, nil))
	last += 2
	sweepAll(t, s, m.ID, 25, 4)
	hz, err := s.RaiseHorizon(ctx, m.ID, 12)
	require.NoError(t, err)
	before := readAll(t, s, m.ID, hz-1, last)
	beforeGone := readAll(t, s, gone.ID, 0, math.MaxUint64)
	require.NotEmpty(t, before.Seq)
	require.Len(t, beforeGone.Seq, 20)
	s.pendingMu.Lock()
	require.Empty(t, s.pending, "no Append's blocks kept once it returned")
	s.pendingMu.Unlock()
	require.NoError(t, s.Close())

	require.NoError(t, os.RemoveAll(cfg.CacheDir))
	s2 := h.open(t, cfg)
	t.Cleanup(func() { _ = s2.Close() })
	require.Equal(t, before, readAll(t, s2, m.ID, hz-1, last), "the same drain and rows after a rebuild")
	require.Equal(t, beforeGone, readAll(t, s2, gone.ID, 0, math.MaxUint64))
	got, err := s2.Horizon(ctx, m.ID)
	require.NoError(t, err)
	require.Equal(t, hz, got)
	_, err = s2.ReadSeq(ctx, m.ID, 0, last, 10, nil, func(*store.Row) error { return nil })
	require.ErrorIs(t, err, store.ErrHistoryExpired)
	for _, r := range before.Points {
		require.GreaterOrEqual(t, r.Time, int64(25), "swept rows stay gone")
	}
	require.Equal(t, float64(21+20), testutil.ToFloat64(s2.m.catchup), "every block of the live instances replayed, none of the truncated one")
}

// TestReplicasRefusedOrClamped opens with 3 replicas on one server: a
// clear error, or the store with 1 replica when clamping is asked for.
func TestReplicasRefusedOrClamped(t *testing.T) {
	h := newHarness(t, 1)
	cfg := h.config(t)
	cfg.Replicas = 3
	_, err := Open(cfg, rowengine.DefaultConfig(), nil, nil)
	require.ErrorContains(t, err, "cannot place 3 replicas")
	require.ErrorContains(t, err, "--jetstream-replicas")
	cfg.ClampReplicas = true
	s := h.open(t, cfg)
	require.Equal(t, 1, s.replicas)
	require.NoError(t, s.Close())
}

// TestLeaderRestartMidRun appends continuously on the 3-server cluster
// while the stream leader is stopped and started again, twice: every
// acknowledged fragment is read back once at its x_seq, no x_seq repeats,
// and a rebuild from the streams returns the same.
func TestLeaderRestartMidRun(t *testing.T) {
	h := newHarness(t, 3)
	cfg := h.config(t)
	s := h.open(t, cfg)
	m := createTable(t, s, "leader")
	stream := s.blocksStream()

	var (
		mu    sync.Mutex
		acked []uint64
		fails int
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			cs := []store.TableCommit{commit(m, i == 0, int64(i*10), 2, 3)}
			err := s.Append(ctx, cs, nil)
			mu.Lock()
			if err == nil {
				acked = append(acked, cs[0].FirstSeq, cs[0].FirstSeq+1)
			} else {
				fails++
			}
			mu.Unlock()
		}
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	waitFor := func(n int) {
		deadline := time.Now().Add(testdeadline.Scale(60 * time.Second))
		for count() < n {
			require.True(t, time.Now().Before(deadline), "no progress: %d acknowledged", count())
			time.Sleep(20 * time.Millisecond)
		}
	}
	for round := range 2 {
		waitFor(count() + 40)
		leader := -1
		deadline := time.Now().Add(testdeadline.Scale(30 * time.Second))
		for leader < 0 {
			require.True(t, time.Now().Before(deadline), "no stream leader")
			leader = h.cluster.StreamLeader(stream)
		}
		h.cluster.Stop(leader)
		waitFor(count() + 20) // writes go on under the new leader
		h.cluster.Restart(leader)
		t.Logf("round %d: restarted server %d, %d fragments acknowledged", round, leader, count())
	}
	waitFor(count() + 20)
	close(stop)
	<-done

	mu.Lock()
	defer mu.Unlock()
	require.Zero(t, fails, "a leader change is ridden out by the publish retries")
	for i := 1; i < len(acked); i++ {
		require.Greater(t, acked[i], acked[i-1], "x_seq never repeats")
	}
	last := acked[len(acked)-1]
	check := func(s *Store) []store.Row {
		got := readAll(t, s, m.ID, 0, last)
		require.Len(t, got.Seq, len(acked), "every acknowledged fragment, once")
		for i, r := range got.Seq {
			require.Equal(t, acked[i], r.Seq)
		}
		return got.Seq
	}
	before := check(s)
	require.NoError(t, s.Close())
	s2 := h.open(t, cfg)
	t.Cleanup(func() { _ = s2.Close() })
	require.Equal(t, before, check(s2), "a rebuild from the stream returns the same")
}

// TestAppendCreatesTable: a table created by a write (the feed's
// auto-create: no PutTable, the commit's Meta) gets its stream and record
// in the Append, above a tombstone of the same name, and is there after a
// restart.
func TestAppendCreatesTable(t *testing.T) {
	h := newHarness(t, 1)
	cfg := h.config(t)
	s := h.open(t, cfg)
	old := createTable(t, s, "auto")
	require.NoError(t, s.Append(ctx, []store.TableCommit{commit(old, true, 1, 3, 1)}, nil))
	tomb, err := s.DropTable(ctx, old.ID)
	require.NoError(t, err)

	id, err := s.NewTableID(ctx)
	require.NoError(t, err)
	m := store.TableMeta{Name: "auto", ID: id, Sync: true, Epoch: tomb.Epoch + 1, Seq: tomb.Seq,
		Columns: []store.Column{{Name: "time"}, {Name: "host", Kind: store.KindTag}, {Name: "v", Kind: store.KindInt}}}
	tc := commit(m, true, 10, 2, 1)
	tc.Meta = &m
	cs := []store.TableCommit{tc}
	require.NoError(t, s.Append(ctx, cs, nil))
	require.Greater(t, cs[0].FirstSeq, tomb.Seq, "above the tombstone")
	require.Len(t, readAll(t, s, id, 0, math.MaxUint64).Seq, 2)
	require.NoError(t, s.Close())

	s2 := h.open(t, cfg)
	t.Cleanup(func() { _ = s2.Close() })
	metas, err := s2.LoadTables(ctx)
	require.NoError(t, err)
	require.Len(t, metas, 1)
	require.Equal(t, id, metas[0].ID)
	require.Equal(t, m.Columns, metas[0].Columns)
	require.Equal(t, m.Epoch, metas[0].Epoch)
	require.Len(t, readAll(t, s2, id, 0, math.MaxUint64).Seq, 2)
}

// TestRetentionPurgesStream: once a sweep at a cutoff is complete, the
// stream is purged of the messages it left nothing of, after the series
// dictionary was published again (a later block uses a series first
// defined in a purged message); a rebuild from the shorter stream returns
// the same drain, rows and dictionary.
func TestRetentionPurgesStream(t *testing.T) {
	h := newHarness(t, 1)
	cfg := h.config(t)
	cfg.PurgeMinMessages, cfg.PurgeGrace = 1, 0
	s := h.open(t, cfg)
	m := createTable(t, s, "aged")
	var last uint64
	for i := range 12 {
		tc := commit(m, false, int64(i), 1, 2)
		tc.NewSeries = []store.Series{{ID: uint64(i + 1), Tags: []store.Field{{Col: 1, Value: store.Value{Kind: store.KindTag, Str: fmt.Sprint("h", i)}}}}}
		tc.Fragments[0].Series = uint64(i + 1)
		if i >= 10 { // recent points of series first defined in old messages
			tc.NewSeries = nil
			tc.Fragments[0].Series, tc.Fragments[0].Time = uint64(i-9), int64(100+i)
		}
		cs := []store.TableCommit{tc}
		require.NoError(t, s.Append(ctx, cs, nil))
		last = cs[0].FirstSeq
	}
	before := streamMsgs(t, s, "aged")
	sweepAll(t, s, m.ID, 50, 3)
	require.Equal(t, float64(10), testutil.ToFloat64(s.m.purged), "the ten aged messages")
	require.Equal(t, before-10+1, streamMsgs(t, s, "aged"), "purged, plus one message of the series dictionary")
	hz, err := s.Horizon(ctx, m.ID)
	require.NoError(t, err)
	want := readAll(t, s, m.ID, hz-1, last)
	require.Len(t, want.Seq, 2)
	series, err := s.LoadSeries(ctx, m.ID)
	require.NoError(t, err)
	require.Len(t, series, 10)
	require.NoError(t, s.Close())

	require.NoError(t, os.RemoveAll(cfg.CacheDir))
	s2 := h.open(t, cfg)
	t.Cleanup(func() { _ = s2.Close() })
	require.Equal(t, want, readAll(t, s2, m.ID, hz-1, last))
	again, err := s2.LoadSeries(ctx, m.ID)
	require.NoError(t, err)
	require.Equal(t, series, again)
	cs := []store.TableCommit{commit(m, false, 200, 1, 1)}
	require.NoError(t, s2.Append(ctx, cs, nil))
	require.Greater(t, cs[0].FirstSeq, last)
}

// TestSweepRecordsAnUnrecordedHorizon: when a sweep removed rows from the
// cache and its record update failed, the next sweep records the horizon
// though it removes nothing, so that a rebuild keeps it.
func TestSweepRecordsAnUnrecordedHorizon(t *testing.T) {
	h := newHarness(t, 1)
	cfg := h.config(t)
	s := h.open(t, cfg)
	m := createTable(t, s, "unrecorded")
	for i := range 6 {
		require.NoError(t, s.Append(ctx, []store.TableCommit{commit(m, i == 0, int64(i*10), 1, 1)}, nil))
	}
	s.mu.Lock()
	tab := s.byName["unrecorded"]
	before := tab.rec.Horizon
	s.mu.Unlock()
	sweepAll(t, s, m.ID, 30, 10)
	hz, err := s.Horizon(ctx, m.ID)
	require.NoError(t, err)
	require.Greater(t, hz, max(before, 1), "the sweep raised the horizon")
	// The record as a failed update leaves it.
	require.NoError(t, s.update(tab, func(r *record) error { r.Horizon, r.Cutoff = before, nil; return nil }))
	res, err := s.SweepBefore(ctx, m.ID, 30, 10)
	require.NoError(t, err)
	require.Zero(t, res.Removed)
	require.NoError(t, s.Close())

	require.NoError(t, os.RemoveAll(cfg.CacheDir))
	s2 := h.open(t, cfg)
	t.Cleanup(func() { _ = s2.Close() })
	got, err := s2.Horizon(ctx, m.ID)
	require.NoError(t, err)
	require.Equal(t, hz, got, "the horizon after a rebuild")
}

// TestOverwriteAfterPurgeRebuild: after a purge and a rebuild, where the
// republished dictionary repeats a series whose points are stored, a
// later write at one of those points is still an overwrite: one row,
// coalesced.
func TestOverwriteAfterPurgeRebuild(t *testing.T) {
	h := newHarness(t, 1)
	cfg := h.config(t)
	cfg.PurgeMinMessages, cfg.PurgeGrace = 1, 0
	s := h.open(t, cfg)
	m := createTable(t, s, "over")
	require.NoError(t, s.Append(ctx, []store.TableCommit{commit(m, true, 1, 1, 1)}, nil))    // series 1 defined, aged
	require.NoError(t, s.Append(ctx, []store.TableCommit{commit(m, false, 100, 1, 1)}, nil)) // series 1 at 100, kept
	sweepAll(t, s, m.ID, 50, 10)
	require.Equal(t, float64(1), testutil.ToFloat64(s.m.purged))
	require.NoError(t, s.Close())
	require.NoError(t, os.RemoveAll(cfg.CacheDir))
	s2 := h.open(t, cfg)
	t.Cleanup(func() { _ = s2.Close() })
	over := commit(m, false, 100, 1, 9) // the same point, a new string
	require.NoError(t, s2.Append(ctx, []store.TableCommit{over}, nil))
	got := readAll(t, s2, m.ID, 1, math.MaxUint64)
	require.Len(t, got.Points, 1, "one point, not two")
	require.Equal(t, strings.Repeat("x", 9), got.Points[0].Fields[1].Value.Str, "the later write wins")
	require.Len(t, got.Seq, 2, "both fragments in the feed")
	require.Equal(t, got.Seq[0].Fields, got.Seq[1].Fields, "each delivered as the coalesced row")
}

// TestPurgeWaitsForItsGrace: a retention purge first moves the record's
// anchor and takes the messages only once --jetstream-purge-grace has
// passed, at a later sweep that removes nothing; the other tables'
// messages in the blocks stream stay. TRUNCATE's purge of the ended
// instance waits for the grace too, and Close cancels it.
func TestPurgeWaitsForItsGrace(t *testing.T) {
	h := newHarness(t, 1)
	cfg := h.config(t)
	cfg.PurgeMinMessages, cfg.PurgeGrace = 1, time.Hour
	s := h.open(t, cfg)
	t.Cleanup(func() { _ = s.Close() })
	m := createTable(t, s, "graced")
	other := createTable(t, s, "neighbour")
	for i := range 4 {
		require.NoError(t, s.Append(ctx, []store.TableCommit{commit(m, i == 0, int64(i), 1, 1), commit(other, i == 0, int64(i), 1, 1)}, nil))
	}
	require.NoError(t, s.Append(ctx, []store.TableCommit{commit(m, false, 100, 1, 1)}, nil))
	sweepAll(t, s, m.ID, 50, 10)
	tb := s.tableByID(t, m.ID)
	require.Equal(t, uint64(5), streamMsgs(t, s, "graced")-1, "nothing purged within the grace (one message more: the dictionary)")
	require.NotZero(t, tb.anchored.Load(), "the anchor moved first")
	require.Equal(t, tb.due.seq, tb.anchored.Load(), "the purge planned up to the anchor")

	tb.due.at = time.Now().Add(-cfg.PurgeGrace) // as if the grace had passed
	sweepAll(t, s, m.ID, 50, 10)
	require.Equal(t, uint64(2), streamMsgs(t, s, "graced"), "the recent message and the dictionary")
	require.Equal(t, uint64(4), streamMsgs(t, s, "neighbour"), "another table's messages stay")
	require.Zero(t, tb.due.seq)

	_, err := s.TruncateTable(ctx, other.ID)
	require.NoError(t, err)
	require.Equal(t, uint64(4), streamMsgs(t, s, "neighbour"), "the ended instance's messages stay within the grace")
	s.later.mu.Lock()
	require.Len(t, s.later.pending, 1, "its purge waits")
	s.later.mu.Unlock()
	require.NoError(t, s.Close())
	s.later.mu.Lock()
	require.Empty(t, s.later.pending, "Close cancelled it")
	s.later.mu.Unlock()
}

// TestFollowerBehindAPurgeNumbersAlike: a node whose follower had not read
// a table's aged messages when another node purged them (a consumer of one
// subject sees no gap where messages went) numbers the messages after them
// by the record's anchor, as the node that purged does.
func TestFollowerBehindAPurgeNumbersAlike(t *testing.T) {
	h := newHarness(t, 1)
	cfg := h.config(t)
	cfg.PurgeMinMessages, cfg.PurgeGrace = 1, 0
	a := h.open(t, cfg)
	t.Cleanup(func() { _ = a.Close() })
	b := h.peer(t, a)
	m := createTable(t, a, "behind")
	require.NoError(t, a.Append(ctx, []store.TableCommit{commit(m, true, 1, 2, 1)}, nil))
	appliedTo(t, b, m.ID, 2)
	bt := b.tableByID(t, m.ID)
	applied, xseq := bt.position()
	bt.stopFollower()
	bt.f.fmu.Lock()
	bt.f.cancel = func() {} // as if it ran: the record watcher leaves it stopped (ensureFollower)
	bt.f.fmu.Unlock()

	for i := range 5 {
		require.NoError(t, a.Append(ctx, []store.TableCommit{commit(m, false, int64(10+i), 3, 1)}, nil))
	}
	cs := []store.TableCommit{commit(m, false, 100, 2, 1)}
	require.NoError(t, a.Append(ctx, cs, nil))
	last := cs[0].FirstSeq + 1
	before := streamMsgs(t, a, "behind")
	sweepAll(t, a, m.ID, 50, 10)
	require.Less(t, streamMsgs(t, a, "behind"), before, "a purged the aged messages b has not read")
	poll(t, func() bool { return bt.anchored.Load() > applied }, "b hears of the anchor")

	bt.restartFollower(b, applied+1, xseq, 0)
	appliedTo(t, b, m.ID, last)
	_, bx := bt.position()
	require.Equal(t, last, bx, "b numbers as a does")
	hz, err := a.Horizon(ctx, m.ID)
	require.NoError(t, err)
	// (b's own sweeps, not run here, would remove its aged points.)
	require.Equal(t, readAll(t, a, m.ID, hz-1, last).Seq, readAll(t, b, m.ID, hz-1, last).Seq, "the same rows at the same numbers")
	require.Len(t, readAll(t, b, m.ID, hz-1, last).Seq, 2)

	_, err = a.TruncateTable(ctx, m.ID)
	require.NoError(t, err)
	poll(t, func() bool { return streamMsgs(t, a, "behind") == 0 }, "the ended instance's messages purged once the grace (0) passed")
}

// TestRecordsFromABehindReplica checks what loadRecords compares a watch
// of the table records with: the leader's last record revision (0 before
// any, a purge's marker counted), and a watch whose current records end
// below it fails as transient (retried) instead of listing too few tables.
func TestRecordsFromABehindReplica(t *testing.T) {
	h := newHarness(t, 1)
	s := h.open(t, h.config(t))
	t.Cleanup(func() { _ = s.Close() })
	last, err := s.lastRecordRevision(ctx)
	require.NoError(t, err)
	require.Zero(t, last, "no record yet")

	createTable(t, s, "a")
	e, err := s.meta.Get(ctx, s.tableKey("a"))
	require.NoError(t, err)
	last, err = s.lastRecordRevision(ctx)
	require.NoError(t, err)
	require.Equal(t, e.Revision(), last)
	_, err = s.NewTableID(ctx) // not a table record
	require.NoError(t, err)
	again, err := s.lastRecordRevision(ctx)
	require.NoError(t, err)
	require.Equal(t, last, again, "only table records count")

	require.NoError(t, s.meta.Purge(ctx, s.tableKey("gone")))
	marker, err := s.lastRecordRevision(ctx)
	require.NoError(t, err)
	require.Greater(t, marker, last, "a purge's marker counts")
	var removed []string
	require.NoError(t, s.eachRecord(ctx, marker, func(e jetstream.KeyValueEntry) (bool, error) {
		return e == nil, nil
	}, func(key string, rev uint64) {
		removed = append(removed, key)
		require.Equal(t, marker, rev)
	}), "the marker ends the current records, though fn never sees it")
	require.Equal(t, []string{s.tableKey("gone")}, removed, "removed sees it")

	var names []string
	err = s.eachRecord(ctx, marker+1, func(e jetstream.KeyValueEntry) (bool, error) {
		if e == nil {
			return true, nil
		}
		names = append(names, e.Key())
		return false, nil
	}, nil)
	require.ErrorIs(t, err, errStaleRecords)
	require.True(t, transient(err), "a stale watch is retried")
	require.Equal(t, []string{s.tableKey("a")}, names)
}

// TestUnhealthyWhileAFollowerLags: a table whose follower stopped on a
// message it cannot read, or which a commit gave up waiting for, is named
// by Unhealthy (and counted by its gauge) until the follower applies again
// or a commit's wait on it succeeds.
func TestUnhealthyWhileAFollowerLags(t *testing.T) {
	h := newHarness(t, 1)
	s := h.open(t, h.config(t))
	defer func() { require.NoError(t, s.Close()) }()
	m := createTable(t, s, "lag")
	require.NoError(t, s.Append(ctx, []store.TableCommit{commit(m, true, 10, 2, 3)}, nil))
	require.Empty(t, s.Unhealthy())
	tb := s.tableByID(t, m.ID)

	tb.f.fmu.Lock()
	tb.f.stuck = time.Now()
	tb.f.fmu.Unlock()
	require.Contains(t, s.Unhealthy(), "jetstream: 1 table streams not applied to the row cache: "+tb.stream+" (nothing applied since a commit gave up")
	require.NoError(t, s.Append(ctx, []store.TableCommit{commit(m, false, 20, 2, 3)}, nil))
	require.Empty(t, s.Unhealthy(), "a commit applied")

	tb.f.fmu.Lock()
	tb.f.err = &store.CorruptionError{Key: []byte("k"), Err: errors.New("unreadable")}
	tb.f.fmu.Unlock()
	require.Contains(t, s.Unhealthy(), tb.stream+" (stopped: store: corrupt value")
	tb.f.fmu.Lock()
	tb.f.err = nil
	tb.f.fmu.Unlock()
	require.Empty(t, s.Unhealthy())
}

// TestSeriesBatches: a call's new series are created in atomic batches
// of at most seriesBatch keys; a batch meeting a key another process
// created is refused whole and its keys read or created one at a time,
// every id the first one minted. A meta bucket an earlier build created
// (without atomic batches) is given them at Open.
func TestSeriesBatches(t *testing.T) {
	h := newHarness(t, 1)
	cfg := h.config(t)
	nc, err := nats.Connect(h.cluster.URLs())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: cfg.Prefix + "_meta", History: 1, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	a := h.open(t, cfg)
	t.Cleanup(func() { _ = a.Close() })
	info, err := js.Stream(ctx, "KV_"+cfg.Prefix+"_meta")
	require.NoError(t, err)
	require.True(t, info.CachedInfo().Config.AllowAtomicPublish, "the earlier bucket takes atomic batches")

	m := createTable(t, a, "t")
	b := h.peer(t, a)
	keys := func(vals ...string) []store.SeriesKey {
		out := make([]store.SeriesKey, len(vals))
		for i, v := range vals {
			out[i] = store.SeriesKey{Key: "host=" + v}
		}
		return out
	}
	many := make([]string, seriesBatch+500)
	for i := range many {
		many[i] = fmt.Sprint("h", i)
	}
	ids, err := a.SeriesIDs(ctx, m.ID, keys(many...))
	require.NoError(t, err)
	require.Equal(t, 2.0, testutil.ToFloat64(a.m.seriesBatches), "1,500 new series in two batches")
	require.Zero(t, testutil.ToFloat64(a.m.seriesBatchConflicts))
	distinct := map[uint64]bool{}
	for _, id := range ids {
		distinct[id] = true
	}
	require.Len(t, distinct, len(many), "an id per series")

	mixed, err := b.SeriesIDs(ctx, m.ID, keys("new1", many[7], "new2"))
	require.NoError(t, err)
	require.Equal(t, 1.0, testutil.ToFloat64(b.m.seriesBatchConflicts), "the batch met a's key")
	require.Equal(t, ids[7], mixed[1], "the id a minted")
	again, err := a.SeriesIDs(ctx, m.ID, keys("new2", "new1"))
	require.NoError(t, err)
	require.Equal(t, []uint64{mixed[2], mixed[0]}, again, "a reads the ids b minted")
	require.False(t, distinct[mixed[0]] || distinct[mixed[2]] || mixed[0] == mixed[2], "new ids of their own")
}
