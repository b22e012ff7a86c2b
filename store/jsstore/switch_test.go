package jsstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/jsstore/natstest"
	"github.com/ingestd/ingestd/store/rowengine"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// TestSwitchOffIsolatedServer cuts the server the store is connected to
// off its cluster (its routes dropped by natstest's proxies; the client
// connection stays up, so nats.go sees nothing wrong): the next Append
// still succeeds, within the publish timeout, because the store moves to
// another server after --jetstream-switch-after of failures (counted in
// ingestd_jetstream_server_switches_total). Without the switch every
// attempt goes to the isolated server until the timeout and the commit
// fails.
func TestSwitchOffIsolatedServer(t *testing.T) {
	c := natstest.Start(t, 3, natstest.RouteProxies())
	c.WaitJetStream()
	h := &harness{cluster: c, cfgs: map[store.Backend]Config{}}
	cfg := h.config(t)
	cfg.PublishTimeout, cfg.SwitchAfter = 20*time.Second, time.Second
	s, err := Open(cfg, rowengine.DefaultConfig(), nil, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	m := createTable(t, s, "isolated")
	require.NoError(t, s.Append(ctx, []store.TableCommit{commit(m, true, 10, 2, 3)}, nil))
	poll := func(cond func() bool, what string) {
		deadline := time.Now().Add(testdeadline.Scale(time.Minute))
		for !cond() {
			require.True(t, time.Now().Before(deadline), "not within a minute: %s", what)
			time.Sleep(20 * time.Millisecond)
		}
	}
	poll(func() bool { return c.StreamCurrent(s.blocksStream()) }, "every replica current")

	name := s.nc.ConnectedServerName()
	i, err := strconv.Atoi(strings.TrimPrefix(name, "n"))
	require.NoError(t, err, "server name %q", name)
	c.Cut(i - 1)
	t.Cleanup(func() { c.Heal(i - 1) })
	began := time.Now()
	for k := range 3 {
		require.NoError(t, s.Append(ctx, []store.TableCommit{commit(m, false, int64(20+10*k), 2, 3)}, nil), "append %d with server %s cut off", k, name)
	}
	t.Logf("3 appends in %s with %s cut off, now on %s", time.Since(began).Round(time.Millisecond), name, s.nc.ConnectedServerName())
	require.NotEqual(t, name, s.nc.ConnectedServerName(), "the connection moved off the isolated server")
	require.GreaterOrEqual(t, testutil.ToFloat64(s.m.switches), 1.0)
	got := readAll(t, s, m.ID, 0, 1<<20)
	require.Len(t, got.Seq, 8, "every acknowledged fragment")
}

// TestSwitchAfterValidated: --jetstream-switch-after is at least 100ms and
// below --jetstream-publish-timeout (a commit must outlive one switch).
func TestSwitchAfterValidated(t *testing.T) {
	cfg := DefaultConfig()
	cfg.URLs, cfg.CacheDir = "nats://127.0.0.1:4222", t.TempDir()
	require.NoError(t, cfg.Validate())
	for _, d := range []time.Duration{0, 99 * time.Millisecond, cfg.PublishTimeout, time.Hour} {
		bad := cfg
		bad.SwitchAfter = d
		require.ErrorContains(t, bad.Validate(), "--jetstream-switch-after must be at least 100ms and below --jetstream-publish-timeout", "%s", d)
	}
}

// TestLostConnectionCostsNoSendTimeout loses the store's connection
// while a publish waits for its acknowledgement (natstest.ClientProxy:
// the server's answers withheld, then the connection dropped, as when the
// server the store is connected to goes away): the wait ends with the
// connection, and publish settles on another server (the message was
// stored: a dedup hit) instead of waiting out its send timeout, raised to
// an hour here so that only the drop can end the wait within the test's
// deadline.
func TestLostConnectionCostsNoSendTimeout(t *testing.T) {
	h := newHarness(t, 3)
	proxy := h.cluster.ClientProxy(0)
	cfg := h.config(t)
	cfg.URLs = proxy.URL() // the others are learnt from the server
	s := h.open(t, cfg)
	t.Cleanup(func() { _ = s.Close() })
	m := createTable(t, s, "lost")
	require.NoError(t, s.Append(ctx, []store.TableCommit{commit(m, true, 10, 2, 3)}, nil))

	s.sw.mu.Lock()
	s.sw.sendTimeout = time.Hour
	s.sw.mu.Unlock()
	proxy.Hold()
	sent := proxy.Sent()
	done := make(chan error, 1)
	go func() { done <- s.Append(ctx, []store.TableCommit{commit(m, false, 20, 2, 3)}, nil) }()
	deadline := time.Now().Add(testdeadline.Scale(10 * time.Second))
	for proxy.Sent() == sent {
		require.True(t, time.Now().Before(deadline), "the publish did not go out")
		time.Sleep(time.Millisecond)
	}
	began := time.Now()
	proxy.Drop()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(testdeadline.Scale(time.Minute)):
		t.Fatal("the publish waited for an acknowledgement that could not come")
	}
	t.Logf("the append returned %s after its connection was lost", time.Since(began).Round(time.Millisecond))
	require.Len(t, readAll(t, s, m.ID, 0, 1<<20).Seq, 4, "every acknowledged fragment, once")
}

// TestTransientAPIErrors: "JetStream system temporarily unavailable"
// (a leader election) is retried in both of nats.go's API error types;
// the fault tests met the older one when ingestd started right after a
// partition healed (loading the table records through a key-value
// watcher), and ingestd then refused to start.
func TestTransientAPIErrors(t *testing.T) {
	for _, err := range []error{
		&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"},
		fmt.Errorf("jsstore: list tables: %w", &nats.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}),
		nats.ErrNoResponders,
		context.DeadlineExceeded,
		// A cluster just started, or a server restarting.
		&jetstream.APIError{Code: 400, ErrorCode: errCodeNoPeers, Description: "no suitable peers for placement, peer offline"},
	} {
		require.True(t, transient(err), "%v", err)
	}
	for _, err := range []error{
		&jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use with a different configuration"},
		&nats.APIError{Code: 404, ErrorCode: 10059, Description: "stream not found"},
		&jetstream.APIError{Code: 500, ErrorCode: errCodeNoPeers, Description: "no suitable peers for placement"},
	} {
		require.False(t, transient(err), "%v", err)
	}
}

// TestRefusedStreamFailsTheCallNotTheNode: a blocks stream the cluster
// refuses to create (here: a stream of that name already exists in
// memory, whose storage JetStream does not change) fails PutTable with
// store.ErrUnavailable, which the feed answers with 503 and runs on; the
// store stays usable once the stream can be made.
func TestRefusedStreamFailsTheCallNotTheNode(t *testing.T) {
	h := newHarness(t, 1)
	s := h.open(t, h.config(t))
	t.Cleanup(func() { _ = s.Close() })
	_, err := s.js.CreateStream(ctx, jetstream.StreamConfig{Name: s.blocksStream(), Subjects: []string{"elsewhere"},
		Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	id, err := s.NewTableID(ctx)
	require.NoError(t, err)
	_, err = s.PutTable(ctx, store.TableMeta{Name: "taken", ID: id, Sync: true, Epoch: 1, Columns: []store.Column{{Name: "time"}}})
	require.ErrorIs(t, err, store.ErrUnavailable)
	var apiErr *jetstream.APIError
	require.ErrorAs(t, err, &apiErr, "the cluster's refusal is in the error")

	require.NoError(t, s.js.DeleteStream(ctx, s.blocksStream()))
	m := createTable(t, s, "free")
	require.NoError(t, s.Append(ctx, []store.TableCommit{commit(m, true, 1, 2, 1)}, nil))
}

// TestGrowingAttempts: a request a cluster may drop (the first one to a
// cluster that has just started) is given firstAttempt, then twice as
// long each time, up to opTimeout, so that a dropped request costs half a
// second, not opTimeout.
func TestGrowingAttempts(t *testing.T) {
	var start time.Time
	var bounds []time.Duration
	op := growing(firstAttempt, func(ctx context.Context) error {
		d, ok := ctx.Deadline()
		require.True(t, ok)
		bounds = append(bounds, d.Sub(start))
		return nil
	})
	for range 7 {
		start = time.Now()
		require.NoError(t, op(context.Background()))
	}
	want := []time.Duration{firstAttempt, 2 * firstAttempt, 4 * firstAttempt, 8 * firstAttempt, 16 * firstAttempt, opTimeout, opTimeout}
	for i, b := range bounds {
		// Set after start: at least the bound, and late by no more
		// than the scheduler held the call.
		require.GreaterOrEqual(t, b, want[i], "attempt %d", i)
		require.Less(t, b, want[i]+testdeadline.Scale(firstAttempt), "attempt %d", i)
	}
}

// TestIdleFollowerHearsNothing: a follower nothing waits on (this node
// does not write the table; its drains only read it) whose server goes
// silent (natstest.ClientProxy: everything it sends withheld, a
// message delivered meanwhile lost) starts its consumer again after two
// missed heartbeats, and applies what another node wrote. With nats.go's
// default heartbeat it waited 30 s, and the node's drains saw nothing.
func TestIdleFollowerHearsNothing(t *testing.T) {
	h := newHarness(t, 1)
	proxy := h.cluster.ClientProxy(0)
	cfg := h.config(t)
	cfg.URLs = proxy.URL()
	cfg.FollowerHeartbeat = time.Second
	a := h.open(t, cfg)
	t.Cleanup(func() { _ = a.Close() })
	bcfg := h.cfgOf(a)
	bcfg.URLs, bcfg.CacheDir = h.cluster.URLs(), t.TempDir()
	b := h.open(t, bcfg)
	t.Cleanup(func() { _ = b.Close() })
	m := createTable(t, b, "idle")
	cs := []store.TableCommit{commit(m, true, 1, 2, 1)}
	require.NoError(t, b.Append(ctx, cs, nil))
	appliedTo(t, a, m.ID, cs[0].FirstSeq+1)

	proxy.Hold()
	cs = []store.TableCommit{commit(m, false, 3, 2, 1)}
	require.NoError(t, b.Append(ctx, cs, nil), "b writes while a hears nothing")
	require.Eventually(t, func() bool { return testutil.ToFloat64(a.m.heartbeatsMissed) > 0 },
		testdeadline.Scale(10*time.Second), 10*time.Millisecond, "a's follower noticed the silence")
	proxy.Release()
	// Polled, not awaited: a call waiting on the follower would have the
	// watchdog start it again whatever the heartbeats. By stream
	// position, not x_seq: the follower numbers a message before it
	// applies it, and the rows are read right after.
	written, _ := b.tableByID(t, m.ID).position()
	tb := a.tableByID(t, m.ID)
	require.Eventually(t, func() bool { applied, _ := tb.position(); return applied >= written },
		testdeadline.Scale(10*time.Second), 10*time.Millisecond, "a applied what b wrote while it heard nothing")
	require.Len(t, readAll(t, a, m.ID, 0, cs[0].FirstSeq+1).Seq, 4, "a serves b's rows")
}
