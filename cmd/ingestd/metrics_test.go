package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/httpapi"
)

// scrapeMetrics reads the daemon's /metrics and parses the text exposition.
func scrapeMetrics(t testing.TB, d *daemon) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(d.URL + "/metrics")
	require.NoError(t, err)
	defer func() { require.NoError(t, resp.Body.Close()) }()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// sampleValue returns the value of the sample of family name whose labels
// include want (counter, gauge, or a histogram's sample count), and whether
// there is one.
func sampleValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func postBody(t testing.TB, url, body string) int {
	t.Helper()
	resp, err := http.Post(url, "text/plain", strings.NewReader(body))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

// TestMetricsAfterKnownActions checks the docs/reference.md#metrics families against what a
// test did: lines and rejections by transport and reason, HTTP requests by
// route and code, commits, per-table feed state, consumer lag, drains by
// outcome, TCP connections, store sizes, Go and process collectors.
func TestMetricsAfterKnownActions(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	req, err := http.NewRequest(http.MethodPut, d.URL+"/api/v1/tables/cpu", strings.NewReader(`{"sync":true}`))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	var lines strings.Builder
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&lines, "cpu,host=h%d usage=%di %d\n", i%3, i, i)
	}
	require.Equal(t, http.StatusNoContent, postBody(t, d.URL+"/write", lines.String()))
	require.Equal(t, http.StatusBadRequest, postBody(t, d.URL+"/write", "cpu usage=1i 101\nnot a line\n"))

	conn, err := net.Dial("tcp", d.TCPAddr)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	_, err = conn.Write([]byte("tcpt v=1 1\ntcpt v=2 2\ntcpt,x_bad=1 v=3 3\n"))
	require.NoError(t, err)

	// A consumer at 40 of 101.
	for _, q := range []string{"after=40&limit=1&consumer=audit", "after=0&limit=5", "after=0&limit=5&epoch=7"} {
		resp, err := http.Get(d.URL + "/drain?table=cpu&" + q)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}

	var fams map[string]*dto.MetricFamily
	pollUntil(t, 10*time.Second, func() bool {
		fams = scrapeMetrics(t, d)
		v, _ := sampleValue(fams, "ingestd_ilp_lines_total", map[string]string{"transport": "tcp"})
		return v == 2
	}, "the TCP lines are counted")
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"ingestd_ilp_lines_total", map[string]string{"transport": "http"}, 101},
		{"ingestd_ilp_lines_total", map[string]string{"transport": "tcp"}, 2},
		{"ingestd_ilp_rejected_lines_total", map[string]string{"transport": "http", "reason": "syntax"}, 1},
		{"ingestd_ilp_rejected_lines_total", map[string]string{"transport": "tcp", "reason": "reserved_key"}, 1},
		{"ingestd_ilp_tcp_connections", nil, 1},
		{"ingestd_http_requests_total", map[string]string{"route": "/write", "code": "204"}, 1},
		{"ingestd_http_requests_total", map[string]string{"route": "/write", "code": "400"}, 1},
		{"ingestd_http_requests_total", map[string]string{"route": "/drain", "code": "409"}, 1},
		{"ingestd_http_request_duration_seconds", map[string]string{"route": "/drain", "method": "GET", "code": "200"}, 2},
		{"ingestd_http_request_duration_seconds", map[string]string{"route": "/drain", "method": "GET", "code": "409"}, 1},
		{"ingestd_http_request_duration_seconds", map[string]string{"route": "/write", "method": "POST", "code": "204"}, 1},
		{"ingestd_feed_table_seq", map[string]string{"table": "cpu"}, 101},
		{"ingestd_feed_table_watermark", map[string]string{"table": "cpu"}, 101},
		{"ingestd_feed_table_epoch", map[string]string{"table": "cpu"}, 1},
		{"ingestd_feed_table_in_flight", map[string]string{"table": "cpu"}, 0},
		{"ingestd_feed_consumer_lag_fragments", map[string]string{"table": "cpu", "consumer": "audit"}, 61},
		{"ingestd_feed_consumer_position", map[string]string{"table": "cpu", "consumer": "audit"}, 40},
		{"ingestd_feed_drains_total", map[string]string{"outcome": "ok"}, 2},
		{"ingestd_feed_drains_total", map[string]string{"outcome": "refused"}, 1},
		{"ingestd_feed_committed_points_total", nil, 103},
		{"ingestd_feed_queue_depth", nil, 0},
		{"ingestd_feed_queue_capacity", nil, 256},
		{"ingestd_build_info", map[string]string{"version": httpapi.Version, "goversion": runtime.Version()}, 1},
	}
	for _, c := range checks {
		t.Run(c.name+fmt.Sprint(c.labels), func(t *testing.T) {
			v, ok := sampleValue(fams, c.name, c.labels)
			require.True(t, ok, "no sample")
			require.Equal(t, c.want, v)
		})
	}
	t.Run("present", func(t *testing.T) {
		for _, name := range []string{
			"ingestd_feed_commit_duration_seconds", "ingestd_feed_commit_batch_points", "ingestd_ilp_wire_bytes_total",
			"ingestd_feed_consumer_lag_seconds", "ingestd_store_size_bytes", "ingestd_store_files", "ingestd_store_free_bytes", "go_goroutines", "process_resident_memory_bytes",
		} {
			require.Contains(t, fams, name)
		}
		commits, _ := sampleValue(fams, "ingestd_feed_commit_duration_seconds", nil)
		require.Positive(t, commits)
	})
	t.Run("bounded labels", func(t *testing.T) {
		for name, f := range fams {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					require.NotContains(t, []string{"host", "hostname", "peer", "addr", "entity", "tag"}, l.GetName(), name)
					require.NotContains(t, l.GetValue(), "127.0.0.1", name)
				}
			}
		}
	})
}
