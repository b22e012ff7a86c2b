package main

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/cmd/ingestd/cli"
	"github.com/ingestd/ingestd/store/jsstore"
	"github.com/ingestd/ingestd/store/jsstore/natstest"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// TestJetStreamBackend runs the real daemon with --store=jetstream against
// an embedded 3-server JetStream cluster: ILP over HTTP is acknowledged
// (204) and drained; after a restart with the row cache deleted the same
// pages come back, and new writes continue above every x_seq handed out.
func TestJetStreamBackend(t *testing.T) {
	cluster := natstest.Start(t, 3)
	cluster.WaitJetStream()
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.backend, cfg.jetstream = "jetstream", jsstore.DefaultConfig()
	cfg.jetstream.URLs = cluster.URLs()
	require.NoError(t, cfg.validate())
	require.Equal(t, filepath.Join(dir, jsstore.DefaultCacheDirName), cfg.jetstream.CacheDir, "the cache defaults to a subdirectory of --data-dir")

	d := startDaemon(t, cfg)
	c := newClient(t, d)
	c.createSyncTable(t, "sensor")
	var lines []string
	for i := range 30 {
		lines = append(lines, fmt.Sprintf("sensor,host=h%d,site=north p00=%d.5,p01=%di %d", i%4, i, i, 1764410400+i))
	}
	c.mustWrite(t, strings.Join(lines[:20], "\n")+"\n")
	c.mustWrite(t, strings.Join(lines[20:], "\n")+"\n")
	c.mustWrite(t, "room,name=lab temp=21.5 1764410400\n") // auto-created by the write, sync OFF
	q := url.Values{"table": {"sensor"}, "epoch": {"1"}, "after": {"0"}, "limit": {"100"}, "time_format": {"s"}}
	page, first := c.drainOK(t, q)
	require.Len(t, page.Rows, 30)
	require.Equal(t, uint64(30), page.Watermark)
	metrics := string(c.getOK(t, "/metrics").Body)
	require.Contains(t, metrics, "ingestd_jetstream_publishes_total 3")
	require.Contains(t, metrics, "ingestd_jetstream_commit_publish_duration_seconds_count 3", "each write's commit published once, the table's creation nothing")
	d.stop(t)

	require.NoError(t, os.RemoveAll(cfg.jetstream.CacheDir))
	d = startDaemon(t, cfg)
	c = newClient(t, d)
	_, again := c.drainOK(t, q)
	require.Equal(t, string(first), string(again), "the same page after a rebuild of the row cache")
	require.Equal(t, http.StatusOK, c.get(t, tablePath("room")).Status, "the table created by a write survived the restart")
	c.mustWrite(t, "sensor,host=h9,site=south p00=9.5 1764410500\n")
	page, _ = c.drainOK(t, url.Values{"table": {"sensor"}, "epoch": {"1"}, "after": {"30"}, "limit": {"10"}})
	require.Len(t, page.Rows, 1)
	require.Greater(t, page.Next, uint64(30), "x_seq continues above every number handed out")

	// A cursor beyond the sequence is refused once a barrier proved it.
	beyond := strconv.FormatUint(page.Next+1, 10)
	e := decodeError(t, c.get(t, "/drain?table=sensor&epoch=1&limit=10&after="+beyond), http.StatusConflict)
	require.Equal(t, "cursor_beyond_sequence", e.Code, "message: %s", e.Message)
	require.Equal(t, page.Next, *e.Seq)
	require.Contains(t, string(c.getOK(t, "/metrics").Body), `ingestd_jetstream_beyond_checks_total{result="applied"} 1`)
}

// TestJetStreamNodeKeepingNoRows runs two daemons on one cluster, the
// second with --jetstream-materialise="" (it keeps no table's rows): a
// write through it is acknowledged and drained through the first, while
// its own drains and copies of the table answer 421 not_served, its table
// listing omits the counts, and its metrics say what it keeps.
func TestJetStreamNodeKeepingNoRows(t *testing.T) {
	cluster := natstest.Start(t, 1)
	cluster.WaitJetStream()
	node := func(materialise string) *apiClient {
		cfg := testConfig(t.TempDir())
		cfg.backend, cfg.jetstream = "jetstream", jsstore.DefaultConfig()
		cfg.jetstream.URLs, cfg.jetstream.Replicas, cfg.jetstream.Materialise = cluster.URLs(), 1, materialise
		require.NoError(t, cfg.validate())
		return newClient(t, startDaemon(t, cfg))
	}
	a, b := node("*"), node("")
	a.createSyncTable(t, "sensor")
	pollUntil(t, testdeadline.Scale(30*time.Second), func() bool { return b.get(t, tablePath("sensor")).Status == http.StatusOK },
		"the second node follows the table's creation")
	b.mustWrite(t, "sensor,host=h1 v=1 1764410400\nsensor,host=h2 v=2 1764410400\n")
	// The first node applies the other's write within moments: its
	// drain waits for it (wait=) rather than polling.
	page, _ := a.drainOK(t, url.Values{"table": {"sensor"}, "epoch": {"1"}, "after": {"0"}, "limit": {"10"}, "wait": {"30s"}})
	for i := 0; page.Next < 2 && i < 2; i++ {
		page, _ = a.drainOK(t, url.Values{"table": {"sensor"}, "epoch": {"1"}, "after": {strconv.FormatUint(page.Next, 10)}, "limit": {"10"}, "wait": {"30s"}})
	}
	require.Equal(t, uint64(2), page.Next, "the keeping node drains what the other took")

	e := decodeError(t, b.drain(t, url.Values{"table": {"sensor"}, "epoch": {"1"}, "after": {"0"}, "limit": {"10"}}), http.StatusMisdirectedRequest)
	require.Equal(t, "not_served", e.Code, "message: %s", e.Message)
	e = decodeError(t, b.get(t, tablePath("sensor")+"/rows?limit=10"), http.StatusMisdirectedRequest)
	require.Equal(t, "not_served", e.Code, "message: %s", e.Message)
	require.Contains(t, string(a.getOK(t, tablePath("sensor")).Body), `"stats"`, "counts where the rows are kept")
	require.NotContains(t, string(b.getOK(t, tablePath("sensor")).Body), `"stats"`, "none where they are not")
	metrics := string(b.getOK(t, "/metrics").Body)
	require.Contains(t, metrics, `ingestd_jetstream_tables{materialised="false"} 1`)
	require.Contains(t, metrics, `ingestd_jetstream_tables{materialised="true"} 0`)
}

// TestREADMEWalkthroughOnJetStream runs the README's Walkthrough and the
// guide's SQL section, each on a fresh daemon with --store=jetstream over
// one embedded 3-server cluster (its own --jetstream-prefix per daemon),
// and requires the outputs they print for badger: the same feed, refusals,
// TRUNCATE and DROP rules on both backends.
func TestREADMEWalkthroughOnJetStream(t *testing.T) {
	cluster := natstest.Start(t, 3)
	cluster.WaitJetStream()
	var prefixes atomic.Int64
	runREADMESections(t, func(t *testing.T) config {
		cfg := testConfig(t.TempDir())
		cfg.backend, cfg.jetstream = "jetstream", jsstore.DefaultConfig()
		cfg.jetstream.URLs = cluster.URLs()
		cfg.jetstream.Prefix = fmt.Sprint("readme", prefixes.Add(1))
		require.NoError(t, cfg.validate())
		return cfg
	})
}

// TestJetStreamFlagsValidated: the store choice and the JetStream flags
// are refused at the door with a clear message (exit 2), before anything
// connects.
func TestJetStreamFlagsValidated(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--store=cassandra"}, `--store must be badger or jetstream, not "cassandra"`},
		{[]string{"--store=jetstream"}, "--nats-url is required with --store=jetstream"},
		{[]string{"--store=jetstream", "--nats-url=http://x:4222"}, "is not a nats://, tls://, ws:// or wss:// URL"},
		{[]string{"--store=jetstream", "--nats-url=nats://x:4222", "--jetstream-replicas=7"}, "--jetstream-replicas must be within 1..5"},
		{[]string{"--store=jetstream", "--nats-url=nats://x:4222", "--nats-user=u"}, "--nats-user and --nats-password go together"},
		{[]string{"--store=jetstream", "--nats-url=nats://x:4222", "--nats-token=t", "--nats-user=u", "--nats-password=p"}, "give one of --nats-creds"},
		{[]string{"--store=jetstream", "--nats-url=nats://x:4222", "--nats-tls-cert=" + filepath.Join(dir, "none.pem"), "--nats-tls-key=k"}, "--nats-tls-cert: stat"},
		{[]string{"--store=jetstream", "--nats-url=nats://x:4222", "--jetstream-prefix=a.b"}, "--jetstream-prefix must be"},
		{[]string{"--store=jetstream", "--nats-url=nats://x:4222", "--jetstream-barrier-interval=1ms"}, "--jetstream-barrier-interval must be within 10ms..1m0s"},
		{[]string{"--store=jetstream", "--nats-url=nats://x:4222", "--jetstream-barrier-interval=2m"}, "--jetstream-barrier-interval must be within 10ms..1m0s"},
		{[]string{"--store=jetstream", "--nats-url=nats://x:4222", "--jetstream-materialise=cpu,*mem"}, `--jetstream-materialise: "*mem": a * may only end a name`},
	} {
		code, _, errOut := runCLI(t, append([]string{"--data-dir", dir}, tc.args...)...)
		require.Equal(t, cli.ExitBadUsage, code, "%v", tc.args)
		require.Contains(t, errOut, tc.want, "%v", tc.args)
	}
}
