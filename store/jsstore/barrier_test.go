package jsstore

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/jsstore/natstest"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// TestBeyondStaleLeaderCutOff cuts the table stream's leader off its
// peers (natstest's route proxies) while a node (r) is connected to it
// alone, and has another node (o), connected to the majority, commit
// above what r applied once the majority elected a new leader. The cut
// leader still answers r's stream info as leader, with its stale last
// sequence, and counts its peers current for up to 10 s (NATS raft's
// lost-quorum interval): CaughtUp trusted that answer and refused o's
// cursor as beyond the sequence (the 409 of TestJetStreamFaults' cycle 4).
// Beyond must never call o's highest number beyond the sequence, from the
// cut until r has applied it (r moves off the cut server after
// --jetstream-switch-after of failed checks); then a cursor above it is
// refused, once a barrier through the majority proves it.
func TestBeyondStaleLeaderCutOff(t *testing.T) {
	c := natstest.Start(t, 3, natstest.RouteProxies())
	c.WaitJetStream()
	h := &harness{cluster: c, cfgs: map[store.Backend]Config{}}
	w := h.open(t, h.config(t))
	t.Cleanup(func() { _ = w.Close() })
	m := createTable(t, w, "stale")
	require.NoError(t, w.Append(ctx, []store.TableCommit{commit(m, true, 10, 2, 3)}, nil))
	stream := w.blocksStream()
	leader := -1
	poll(t, func() bool { leader = c.StreamLeader(stream); return leader >= 0 && c.StreamCurrent(stream) }, "every replica of %s current", stream)

	var others []string
	for i, u := range strings.Split(c.URLs(), ",") {
		if i != leader {
			others = append(others, u)
		}
	}
	node := func(urls string, switchAfter time.Duration) *Store {
		cfg := h.cfgOf(w)
		cfg.URLs, cfg.CacheDir, cfg.SwitchAfter = urls, t.TempDir(), switchAfter
		s := h.open(t, cfg)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	// r knows every server (as --nats-url lists them: a server cut off
	// announces none of its peers) and is moved until it is on the leader.
	r := node(c.URLs(), time.Second)
	cut := fmt.Sprintf("n%d", leader+1)
	poll(t, func() bool {
		if r.nc.ConnectedServerName() == cut {
			return true
		}
		if r.nc.IsConnected() {
			require.NoError(t, r.nc.ForceReconnect())
		}
		return false
	}, "r connected to the stream's leader %s", cut)
	o := node(strings.Join(others, ","), DefaultSwitchAfter)

	c.Cut(leader)
	t.Cleanup(func() { c.Heal(leader) })
	more := []store.TableCommit{commit(m, false, 20, 3, 3)}
	require.NoError(t, o.Append(ctx, more, nil), "o commits once the majority elected a leader")
	after := more[0].FirstSeq + 2 // o's highest number: r has not applied it
	tr := r.tableByID(t, m.ID)
	calls, unknown := 0, 0
	deadline := time.Now().Add(testdeadline.Scale(time.Minute))
	for {
		beyond, err := r.Beyond(ctx, m.ID, after)
		calls++
		if err != nil { // the cluster unreachable through the cut server
			unknown++
		}
		require.False(t, beyond, "call %d: x_seq %d, another node's, refused as beyond the sequence (r applied up to stream sequence %d)", calls, after, func() uint64 { a, _ := tr.position(); return a }())
		if _, xseq := tr.position(); xseq >= after {
			break
		}
		require.True(t, time.Now().Before(deadline), "r did not apply x_seq %d within a minute (cut %s, applied %v, switches %v, on %s; %d calls, %d unknown, %v held; checks: %v applied, %v behind, %v failed; last err %v)", after,
			cut, func() uint64 { a, _ := tr.position(); return a }(), testutil.ToFloat64(r.m.switches), r.nc.ConnectedServerName(), calls, unknown, testutil.ToFloat64(r.m.checkHeld), testutil.ToFloat64(r.m.checks.WithLabelValues(checkApplied)),
			testutil.ToFloat64(r.m.checks.WithLabelValues(checkBehind)), testutil.ToFloat64(r.m.checks.WithLabelValues(checkFailed)), err)
		time.Sleep(20 * time.Millisecond) // pacing of the poll
	}
	t.Logf("%d calls (%d unknown) until r applied x_seq %d; checks: %v applied, %v failed; r now on %s", calls, unknown, after,
		testutil.ToFloat64(r.m.checks.WithLabelValues(checkApplied)), testutil.ToFloat64(r.m.checks.WithLabelValues(checkFailed)), r.nc.ConnectedServerName())
	require.NotEqual(t, cut, r.nc.ConnectedServerName(), "r moved off the cut server")

	poll(t, func() bool {
		beyond, err := r.Beyond(ctx, m.ID, after+1)
		return err == nil && beyond
	}, "a cursor above every number handed out is refused")
	require.GreaterOrEqual(t, testutil.ToFloat64(r.m.checks.WithLabelValues(checkApplied)), 1.0)
}

// TestBarrierCoalescedAndBounded: concurrent drains with a cursor beyond
// the sequence share one check and barrier (the ones arriving before it
// starts) or are held back by --jetstream-barrier-interval, answered as
// not beyond (an empty page, never a wrong 409), and write nothing more;
// a cursor at or below the sequence costs no check. The barrier, an empty block,
// takes no x_seq number: the next commit continues the count on a node
// that followed the barrier live and on one that rebuilt its cache over
// it, and both read the same pages.
func TestBarrierCoalescedAndBounded(t *testing.T) {
	h := newHarness(t, 1)
	cfg := h.config(t)
	cfg.BarrierInterval = time.Minute // one check in this test
	a := h.open(t, cfg)
	t.Cleanup(func() { _ = a.Close() })
	m := createTable(t, a, "barrier")
	first := []store.TableCommit{commit(m, true, 10, 3, 1)}
	require.NoError(t, a.Append(ctx, first, nil))
	top := first[0].FirstSeq + 2
	other := func() *Store {
		c := h.cfgOf(a)
		c.CacheDir = t.TempDir()
		s := h.open(t, c)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	live := other() // follows the barrier as it comes
	msgs := streamMsgs(t, a, "barrier")

	for _, after := range []uint64{0, 1, top} {
		beyond, err := a.Beyond(ctx, m.ID, after)
		require.NoError(t, err)
		require.False(t, beyond, "cursor %d", after)
	}
	require.Equal(t, msgs, streamMsgs(t, a, "barrier"), "a cursor within the sequence costs no barrier")
	require.Equal(t, 0, testutil.CollectAndCount(a.m.checks), "nor a check")

	const calls = 32
	refused := make([]bool, calls)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			<-start
			beyond, err := a.Beyond(ctx, m.ID, top+1)
			assertNoError(t, err)
			refused[i] = beyond
		})
	}
	close(start)
	wg.Wait()
	n := 0
	for _, r := range refused {
		if r {
			n++
		}
	}
	joins, held := testutil.ToFloat64(a.m.checkJoins), testutil.ToFloat64(a.m.checkHeld)
	t.Logf("%d concurrent calls: %d refused (1 started the check, %v joined it), %v held back", calls, n, joins, held)
	require.Equal(t, 1.0, testutil.ToFloat64(a.m.checks.WithLabelValues(checkApplied)), "one check")
	require.Equal(t, msgs+1, streamMsgs(t, a, "barrier"), "one barrier")
	require.Equal(t, 1+int(joins), n, "refused: the calls the check served, no other")
	require.Equal(t, calls, 1+int(joins)+int(held), "every call started, joined or was held back")

	beyond, err := a.Beyond(ctx, m.ID, top+1)
	require.NoError(t, err)
	require.False(t, beyond, "held back by the interval: not refused")
	require.Equal(t, held+1, testutil.ToFloat64(a.m.checkHeld))
	require.Equal(t, msgs+1, streamMsgs(t, a, "barrier"), "held back: nothing written")

	rebuilt := other() // catches up over the barrier
	next := []store.TableCommit{commit(m, false, 20, 2, 1)}
	require.NoError(t, live.Append(ctx, next, nil))
	require.Equal(t, top+1, next[0].FirstSeq, "the barrier took no number")
	last := next[0].FirstSeq + 1
	want := readAll(t, live, m.ID, 0, last)
	require.Len(t, want.Seq, int(last))
	for _, s := range []*Store{a, rebuilt} {
		appliedTo(t, s, m.ID, last)
		require.Equal(t, want, readAll(t, s, m.ID, 0, last), "the same pages on every node")
	}
}

// poll waits up to a minute for cond, failing the test with what.
func poll(t *testing.T, cond func() bool, what string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(testdeadline.Scale(time.Minute))
	for !cond() {
		require.True(t, time.Now().Before(deadline), "not within a minute: %s", fmt.Sprintf(what, args...))
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBeyondAfterAPurgeNotRead: a node whose follower had not read a
// table's last messages when another node truncated it (the stream
// purged: they never arrive, and the stream's last sequence lies above
// what the follower applied) still proves a cursor beyond the new
// instance's sequence, without waiting for a write.
func TestBeyondAfterAPurgeNotRead(t *testing.T) {
	h := newHarness(t, 1)
	a := h.open(t, h.config(t))
	t.Cleanup(func() { _ = a.Close() })
	b := h.peer(t, a)
	m := createTable(t, a, "unread")
	cs := []store.TableCommit{commit(m, true, 1, 3, 1)}
	require.NoError(t, a.Append(ctx, cs, nil))
	appliedTo(t, b, m.ID, 3)
	require.NoError(t, a.Append(ctx, []store.TableCommit{commit(m, false, 5, 2, 1)}, nil))
	appliedTo(t, b, m.ID, 5)
	tr, err := a.TruncateTable(ctx, m.ID)
	require.NoError(t, err)
	poll(t, func() bool { _, err := b.live(tr.ID); return err == nil }, "b takes the truncate")
	// As if the last message (two fragments) had been purged before b's
	// follower read it.
	bt := b.tableByID(t, tr.ID)
	bt.f.fmu.Lock()
	require.Equal(t, bt.f.applied, bt.f.numbered)
	require.Equal(t, uint64(5), bt.f.xseq)
	bt.f.applied--
	bt.f.numbered--
	bt.f.counted--
	bt.f.xseq -= 2
	bt.f.fmu.Unlock()
	poll(t, func() bool {
		beyond, err := b.Beyond(ctx, tr.ID, 6)
		require.NoError(t, err)
		return beyond
	}, "a cursor beyond the sequence proven on b")
	beyond, err := b.Beyond(ctx, tr.ID, 5)
	require.NoError(t, err)
	require.False(t, beyond, "the last number handed out is not beyond")
}
