package main

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/cmd/ingestd/bench"
)

// TestBench runs `ingestd bench` in every mode and pattern against
// in-process daemons on small generated TSBS-shaped data (2 hosts × 30 min
// = 3,240 lines): each run must store, verify and (http, tcp) drain exactly
// what it sent; after a resend, two fragments per line; overwrite mode
// drains a fragment per write, each its point's current row.
func TestBench(t *testing.T) {
	gen := []string{"--scale", "2", "--duration", "30m", "--server-pid", strconv.Itoa(os.Getpid())}
	for _, tc := range []struct {
		name   string
		server bool
		args   []string
		want   map[string]string
	}{
		{"http", true, []string{"--mode", "http", "--batch-lines", "500", "--concurrency", "3", "--drain-limit", "1000"},
			map[string]string{"lines": "3240", "requests": "9", "drain_rows": "3240", "verified": "ok"}},
		{"http batches dealt in turn, plain bodies", true, []string{"--mode", "http", "--batch-lines", "400", "--concurrency", "2", "--partition-series=false", "--gzip=false"},
			map[string]string{"lines": "3240", "requests": "9", "drain_rows": "3240", "verified": "ok"}},
		{"pattern concurrent", true, []string{"--mode", "http", "--pattern", "concurrent", "--batch-lines", "300", "--concurrency", "4"},
			map[string]string{"pattern": "concurrent", "lines": "3240", "requests": "11", "drain_rows": "3240", "verified": "ok"}},
		{"pattern resend", true, []string{"--mode", "http", "--pattern", "resend", "--batch-lines", "500", "--concurrency", "2", "--drain-limit", "1000"},
			map[string]string{"pattern": "resend", "lines": "3240", "requests": "8", "drain_rows": "6480", "verified": "ok"}},
		{"pattern backfill", true, []string{"--mode", "http", "--pattern", "backfill", "--batch-lines", "500", "--concurrency", "1"},
			map[string]string{"pattern": "backfill", "lines": "3240", "requests": "7", "drain_rows": "3240", "verified": "ok"}},
		{"tcp", true, []string{"--mode", "tcp", "--connections", "2", "--drain-limit", "700"},
			map[string]string{"lines": "3240", "drain_rows": "3240", "verified": "ok"}},
		{"latency", true, []string{"--mode", "latency", "--rate", "20000", "--latency-lines", "100", "--latency-duration", "250ms"},
			map[string]string{"lines": "5000", "requests": "50", "drain_rows_per_s": "na", "verified": "ok"}},
		{"soak with a tailing consumer per table", true, []string{"--mode", "soak", "--rate", "20000", "--latency-lines", "100", "--soak-duration", "1s", "--window", "500ms", "--series", "90", "--tails", "9"},
			map[string]string{"series": "90", "windows": "2", "refused": "0", "failed": "0", "tails": "9"}},
		{"overwrite, two passes per commit", true, []string{"--mode", "overwrite", "--overwrite-points", "200", "--scale", "4", "--overwrites", "5", "--overwrites-per-request", "2"},
			map[string]string{"points": "200", "overwrites": "5", "per_request": "2", "verified": "ok"}},
		{"decode", false, []string{"--mode", "decode", "--passes", "1"},
			map[string]string{"lines": "3240", "verified": "ok"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{}, gen...), tc.args...)
			if tc.server {
				d := startDaemon(t, testConfig(t.TempDir()))
				args = append(args, "--url", d.URL, "--tcp-addr", d.TCPAddr)
			}
			var out, errOut bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			code := bench.Run(ctx, args, &out, &errOut)
			require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
			res := benchResultKV(t, out.String())
			for k, v := range tc.want {
				require.Equal(t, v, res[k], "%s in %s", k, out.String())
			}
			if tc.server {
				require.NotEqual(t, "-1.000", res["rss_hwm_mib"], "VmHWM of --server-pid is read")
			}
			if res["mode"] == "soak" {
				keys, err := strconv.ParseFloat(res["lsm_keys_per_line"], 64)
				require.NoError(t, err, "lsm_keys_per_line is read from /metrics: %s", out.String())
				require.Greater(t, keys, 0.0)
				require.Less(t, keys, 1.0, "the head keeps LSM writes well under one key per line")
			}
			if res["mode"] == "http" {
				cpu, err := strconv.ParseFloat(res["cpu_s"], 64)
				require.NoError(t, err, "cpu_s of --server-pid is read: %s", out.String())
				require.GreaterOrEqual(t, cpu, 0.0)
				commits, err := strconv.ParseFloat(res["commits"], 64)
				require.NoError(t, err, "the group commits are read from /metrics: %s", out.String())
				require.Greater(t, commits, 0.0)
				ms, err := strconv.ParseFloat(res["commit_ms"], 64)
				require.NoError(t, err, "commit_ms: %s", out.String())
				require.Greater(t, ms, 0.0)
				require.Equal(t, "na", res["publish_ms"], "badger publishes nothing")
			}
		})
	}
}

// TestBenchSoakRefusals: against a server whose write delay bound (100
// µs: every commit takes longer, and an interval of it still holds the
// writes answered in it) every write passes, the share refuses all but
// its floor;
// the soak's summary reports the refusals, the server's own time for
// them (from its request histogram) and their cause.
func TestBenchSoakRefusals(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.ilp.MaxWriteDelay = 100 * time.Microsecond
	d := startDaemon(t, cfg)
	args := []string{"--scale", "2", "--duration", "30m", "--server-pid", strconv.Itoa(os.Getpid()), "--url", d.URL,
		"--mode", "soak", "--rate", "20000", "--latency-lines", "100", "--soak-duration", "2s", "--window", "1s", "--series", "90"}
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.Equal(t, 0, bench.Run(ctx, args, &out, &errOut), "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	res := benchResultKV(t, out.String())
	require.NotEqual(t, "0", res["refused"], out.String())
	require.Equal(t, "0", res["failed"], out.String())
	share, err := strconv.ParseFloat(res["refusals_server_le128ms"], 64)
	require.NoError(t, err, "the server's time for its refusals is read from /metrics: %s", out.String())
	require.Greater(t, share, 0.0, out.String())
	require.LessOrEqual(t, share, 1.0, out.String())
	require.Regexp(t, `refused for .*overload \(share\) \d+, overload \(stalled\) \d+, parse-slot queue \d+`, out.String())
}

// TestBenchRefusesUsedServer checks that a second load into the same
// ingestd is refused: its counts could not be verified.
func TestBenchRefusesUsedServer(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	args := []string{"--scale", "1", "--duration", "1m", "--url", d.URL, "--drain=false"}
	var out bytes.Buffer
	require.Equal(t, 0, bench.Run(context.Background(), args, &out, &out), out.String())
	out.Reset()
	require.Equal(t, 1, bench.Run(context.Background(), args, &out, &out))
	require.Contains(t, out.String(), "run the harness against a fresh server")
}

func benchResultKV(t testing.TB, out string) map[string]string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "RESULT "); ok {
			kv := map[string]string{}
			for _, f := range strings.Fields(rest) {
				k, v, _ := strings.Cut(f, "=")
				kv[k] = v
			}
			return kv
		}
	}
	t.Fatalf("no RESULT line in %s", out)
	return nil
}

// TestDiskBench runs `ingestd diskbench` for two small rounds against an
// in-process daemon: each round is written, truncated and measured.
func TestDiskBench(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	var out, errOut bytes.Buffer
	code := runDiskBench(context.Background(), []string{"--url", d.URL, "--rounds", "2", "--rows", "600", "--batch-lines", "250", "--settle", "200ms"}, &out, &errOut)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	require.Contains(t, out.String(), "round 1: 600 rows written and truncated in ")
	require.Contains(t, out.String(), "round 2: 600 rows written and truncated in ")
	st := newClient(t, d).syncStatus(t, "diskbench")
	require.Equal(t, uint64(3), st.Epoch, "created, then truncated twice")
	require.Equal(t, uint64(1200), st.Seq)
}
