package crashtest

import (
	"net/http"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store/jsstore/natstest"
)

// TestJetStreamStopWithClusterGone sends SIGTERM to a node whose NATS
// servers are all gone, with a consumer position to write back: every
// store call is retried for --jetstream-publish-timeout (5 min here), and
// the shutdown used to wait for them (101 s for one table's positions at
// the default 90 s). It now ends at --shutdown-limit, exits 1 and says
// why.
func TestJetStreamStopWithClusterGone(t *testing.T) {
	cluster := natstest.Start(t, 1)
	cluster.WaitJetStream()
	dir := t.TempDir()
	p := startIngestd(t, filepath.Join(dir, "ingestd.log"), daemonArgs(filepath.Join(dir, "data"), "--store", "jetstream",
		"--nats-url", cluster.URLs(), "--jetstream-replicas", "1",
		"--jetstream-publish-timeout", "5m", "--jetstream-duplicate-window", "5m",
		"--shutdown-timeout", "1s", "--shutdown-limit", "3s")...)
	hc := newHTTPClient(t, 4)
	createSyncTable(t, hc, p.URL, "gone")
	require.Equal(t, http.StatusNoContent, mustDo(t, hc, http.MethodPost, p.URL+"/write", []byte("gone v=1 1\n")).Status)
	consumer := url.Values{"consumer": {"c"}}
	r := mustDo(t, hc, http.MethodGet, drainURL(p.URL, "gone", 1, 0, 10, consumer), nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	cluster.Kill(0)
	// Acknowledges position 1: a position to write back at the stop.
	r = mustDo(t, hc, http.MethodGet, drainURL(p.URL, "gone", 1, 1, 10, consumer), nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	hc.CloseIdleConnections()
	began := time.Now()
	code := p.terminate(t, time.Minute)
	t.Logf("exited %d after %s", code, time.Since(began).Round(time.Millisecond))
	require.Equal(t, 1, code, "log:\n%s", p.log(t))
	require.Contains(t, p.log(t), "the shutdown did not finish within --shutdown-limit")
}
