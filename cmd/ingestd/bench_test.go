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
)

// TestBench runs `ingestd bench` in every mode and pattern against
// in-process daemons on small generated TSBS-shaped data (2 hosts × 30 min
// = 3,240 lines): each run must store, verify and (http, tcp) drain exactly
// what it sent; after a resend, two fragments per line.
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
			code := runBench(ctx, args, &out, &errOut)
			require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
			res := benchResultKV(t, out.String())
			for k, v := range tc.want {
				require.Equal(t, v, res[k], "%s in %s", k, out.String())
			}
			if tc.server {
				require.NotEqual(t, "-1.000", res["rss_hwm_mib"], "VmHWM of --server-pid is read")
			}
			if res["mode"] == "http" {
				cpu, err := strconv.ParseFloat(res["cpu_s"], 64)
				require.NoError(t, err, "cpu_s of --server-pid is read: %s", out.String())
				require.GreaterOrEqual(t, cpu, 0.0)
			}
		})
	}
}

// TestBenchRefusesUsedServer checks that a second load into the same
// ingestd is refused: its counts could not be verified.
func TestBenchRefusesUsedServer(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	args := []string{"--scale", "1", "--duration", "1m", "--url", d.URL, "--drain=false"}
	var out bytes.Buffer
	require.Equal(t, 0, runBench(context.Background(), args, &out, &out), out.String())
	out.Reset()
	require.Equal(t, 1, runBench(context.Background(), args, &out, &out))
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

func TestScanDrainPage(t *testing.T) {
	for _, tc := range []struct {
		name string
		page string
		rows int
		next uint64
		more bool
	}{
		{"empty", `{"table":"t","epoch":1,"after":0,"next":5,"seq":5,"watermark":5,"more":false,"columns":["time","x_seq"],"rows":[]}`, 0, 5, false},
		{"rows", `{"table":"t","epoch":1,"after":0,"next":2,"seq":5,"watermark":5,"more":true,"columns":["time","a","x_seq"],"rows":[["2026-01-01T00:00:00Z","x",1],["2026-01-01T00:00:00Z",null,2]]}`, 2, 2, true},
		{"strings with brackets, quotes and escapes", `{"table":"t","epoch":1,"after":0,"next":9,"seq":9,"watermark":9,"more":false,"columns":["time","rows","x_seq"],"rows":[["t","]\"[\\",8],["t","[[",9]]}`, 2, 9, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pg, n, err := scanDrainPage([]byte(tc.page))
			require.NoError(t, err)
			require.Equal(t, tc.rows, n)
			require.Equal(t, tc.next, pg.Next)
			require.Equal(t, tc.more, pg.More)
		})
	}
}

// TestBenchRefusesPatternOutsideHTTP checks that the patterns other than
// inorder are refused outside http mode, and unknown ones everywhere.
func TestBenchRefusesPatternOutsideHTTP(t *testing.T) {
	for _, args := range [][]string{
		{"--mode", "tcp", "--pattern", "concurrent"},
		{"--mode", "latency", "--rate", "1000", "--pattern", "resend"},
		{"--mode", "http", "--pattern", "shuffled"},
	} {
		var out bytes.Buffer
		require.Equal(t, 2, runBench(context.Background(), args, &out, &out), "%v: %s", args, out.String())
		require.Contains(t, out.String(), "--pattern", "%v", args)
	}
}

// TestBenchWriterBatches checks each pattern's bodies: every line once,
// whole batches of the load, in the order the pattern gives.
func TestBenchWriterBatches(t *testing.T) {
	d, err := generateDevops(3, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), 10*time.Minute, 10*time.Second, 1, 0)
	require.NoError(t, err)
	all := benchStream{text: d.text, lines: d.lines()}.batches(100) // 1,620 lines: 17 batches
	require.Len(t, all, 17)
	for _, tc := range []struct {
		pattern string
		writers int
		want    [][]int // indexes into all, per writer
	}{
		{benchPatternConcurrent, 3, [][]int{{0, 3, 6, 9, 12, 15}, {1, 4, 7, 10, 13, 16}, {2, 5, 8, 11, 14}}},
		{benchPatternBackfill, 1, [][]int{{16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}}},
		{benchPatternBackfill, 2, [][]int{{16, 14, 12, 10, 8, 6, 4, 2, 0}, {15, 13, 11, 9, 7, 5, 3, 1}}},
		{benchPatternResend, 1, [][]int{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}},
	} {
		got := d.writerBatches(tc.pattern, tc.writers, true, 100)
		require.Len(t, got, tc.writers, tc.pattern)
		for w, idx := range tc.want {
			require.Len(t, got[w], len(idx), "%s writer %d", tc.pattern, w)
			for k, i := range idx {
				require.Equal(t, string(all[i]), string(got[w][k]), "%s writer %d body %d", tc.pattern, w, k)
			}
		}
	}
}

// TestReadProcCPU checks that this process's CPU time is read and grows.
func TestReadProcCPU(t *testing.T) {
	before, err := readProcCPU(os.Getpid())
	require.NoError(t, err)
	pollUntil(t, 30*time.Second, func() bool {
		for i := range 1_000_000 {
			_ = strconv.Itoa(i)
		}
		after, err := readProcCPU(os.Getpid())
		require.NoError(t, err)
		return after > before
	}, "CPU time of this process did not grow past %s", before)
	zero, err := readProcCPU(0)
	require.NoError(t, err)
	require.Zero(t, zero)
}

// TestBenchPartition checks that partitioning keeps every line once and,
// by series, each series on one writer in its original order.
func TestBenchPartition(t *testing.T) {
	d, err := generateDevops(5, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), 10*time.Minute, 10*time.Second, 1, 0)
	require.NoError(t, err)
	require.Equal(t, 5*9*60, d.lines())
	for _, bySeries := range []bool{true, false} {
		streams := d.partition(3, bySeries, 100)
		total := 0
		owner := map[string]int{}
		for i, s := range streams {
			total += s.lines
			require.Equal(t, s.lines, bytes.Count(s.text, []byte{'\n'}))
			last := map[string]string{}
			for _, line := range strings.SplitAfter(string(s.text), "\n") {
				if line == "" {
					continue
				}
				key := string(seriesKey([]byte(line)))
				ts := line[strings.LastIndexByte(strings.TrimSuffix(line, "\n"), ' ')+1:]
				require.Greater(t, ts, last[key], "series %s in time order", key)
				last[key] = ts
				if bySeries {
					if w, ok := owner[key]; ok {
						require.Equal(t, w, i, "series %s on one writer", key)
					}
					owner[key] = i
				}
			}
		}
		require.Equal(t, d.lines(), total)
	}
}
