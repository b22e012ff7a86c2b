package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/ilp"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// TestBenchRefusesPatternOutsideHTTP checks that the patterns other than
// inorder are refused outside http mode, and unknown ones everywhere.
func TestBenchRefusesPatternOutsideHTTP(t *testing.T) {
	for _, args := range [][]string{
		{"--mode", "tcp", "--pattern", "concurrent"},
		{"--mode", "latency", "--rate", "1000", "--pattern", "resend"},
		{"--mode", "http", "--pattern", "shuffled"},
	} {
		var out bytes.Buffer
		require.Equal(t, 2, Run(context.Background(), args, &out, &out), "%v: %s", args, out.String())
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
	deadline := time.Now().Add(30 * time.Second)
	for {
		for i := range 1_000_000 {
			_ = strconv.Itoa(i)
		}
		after, err := readProcCPU(os.Getpid())
		require.NoError(t, err)
		if after > before {
			break
		}
		require.True(t, time.Now().Before(deadline), "CPU time of this process did not grow past %s", before)
	}
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

// TestBenchWriteData checks `ingestd bench --write-data`: the generated
// load is written as line protocol (gzip for .gz), exactly the lines the
// harness would send, read back by --file; an existing file is refused.
func TestBenchWriteData(t *testing.T) {
	dir := t.TempDir()
	gen := []string{"--scale", "2", "--duration", "30m"}
	want, err := benchLoad(&benchConfig{scale: 2, duration: 30 * time.Minute, interval: 10 * time.Second, start: "2026-01-01T00:00:00Z", seed: 42})
	require.NoError(t, err)
	for _, name := range []string{"load.lp", "load.lp.gz"} {
		path := filepath.Join(dir, name)
		var out bytes.Buffer
		require.Equal(t, 0, Run(context.Background(), append(gen, "--write-data", path), &out, &out), out.String())
		require.Equal(t, path+": 3240 lines, 9 tables, "+strconv.FormatFloat(float64(len(want.text))/1e6, 'f', 2, 64)+" MB of line protocol\n", out.String())
		got, err := loadBenchFile(path)
		require.NoError(t, err)
		require.Equal(t, string(want.text), string(got.text), name)
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, strings.HasSuffix(name, ".gz"), bytes.HasPrefix(raw, []byte{0x1f, 0x8b}), "%s: gzip magic", name)

		out.Reset()
		require.Equal(t, 1, Run(context.Background(), append(gen, "--write-data", path), &out, &out))
		require.Contains(t, out.String(), "file exists")
	}
}

// TestBenchWriteURLsInTurn checks that --write-urls deals the requests to
// --url and the listed nodes in turn, and that the flags are refused where
// they mean nothing.
func TestBenchWriteURLsInTurn(t *testing.T) {
	tg := &benchTarget{kind: benchIngestd, base: "http://a", writeBases: []string{"http://a", "http://b", "http://c"}}
	var got []string
	for range 6 {
		got = append(got, tg.writeURL())
	}
	require.Equal(t, []string{"http://a/write", "http://b/write", "http://c/write", "http://a/write", "http://b/write", "http://c/write"}, got)

	for _, args := range [][]string{
		{"--target", "influxdb", "--write-urls", "http://b"},
		{"--mode", "tcp", "--write-urls", "http://b"},
		{"--other-pids", "12,x"},
		{"--other-pids", "-3"},
	} {
		var out bytes.Buffer
		require.Equal(t, 2, Run(context.Background(), args, &out, &out), "%v: %s", args, out.String())
		require.Contains(t, out.String(), args[len(args)-2], "%v", args)
	}
}

// TestSoakLines checks the soak load: valid line protocol, every series
// of every table in turn, each series' times strictly ascending and each
// line stamped with its due time.
func TestSoakLines(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const series, rate = 30, 1000.0
	g := newSoakGen(series, 3, t0, rate, 1)
	require.Equal(t, []string{"cpu", "diskio", "disk"}, g.tables)
	text := g.appendLines(nil, 0, 3*series)
	p := ilp.NewParser(ilp.DefaultLimits())
	var b feed.Batch
	perrs, _ := p.ParseAll(&b, text, 1, ilp.Nanosecond, 0)
	require.Empty(t, perrs)
	require.Len(t, b.Points, 3*series)
	last := map[string]int64{}
	for i, pt := range b.Points {
		require.Equal(t, g.tables[i%series%3], pt.Table, "line %d", i)
		require.Equal(t, t0.UnixNano()+int64(float64(i)*1e9/rate), pt.Time, "line %d is stamped with its due time", i)
		key := pt.Table + "," + pt.Series
		if prev, ok := last[key]; ok {
			require.Greater(t, pt.Time, prev, "series %s", key)
		}
		last[key] = pt.Time
	}
	require.Len(t, last, series, "every series once per round")
	from := bytes.Index(text, g.appendLines(nil, series, 1))
	require.Positive(t, from)
	require.True(t, bytes.Equal(text[from:], g.appendLines(nil, series, 2*series)), "lines are a function of their number")
}

// TestSoakHist checks the latency histogram's percentiles against exact
// ones: within its 2 % buckets.
func TestSoakHist(t *testing.T) {
	var h soakHist
	var all latencies
	for i := 1; i <= 10_000; i++ {
		d := time.Duration(i*i) * time.Microsecond / 100
		h.add(d)
		all = append(all, d)
	}
	for _, p := range []float64{0.5, 0.9, 0.99} {
		want := all.pct(p)
		got := h.pct(p)
		require.InEpsilon(t, float64(want), float64(got), 0.021, "p%v", p*100)
	}
	require.Equal(t, all[len(all)-1], h.pct(1))
}

// TestDiskProbe checks the disk probe: it syncs its own file, reports
// the slowest sync of each window, and stops and removes its file when
// closed.
func TestDiskProbe(t *testing.T) {
	dir := t.TempDir()
	began := time.Now()
	p, err := startDiskProbe(dir, time.Millisecond) // creates, writes and syncs its block
	require.NoError(t, err)
	setUp := time.Since(began)
	files, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, files, 1)
	// The first timed sync comes a tick later: a thousand set-ups' time
	// bounds it on this machine.
	require.Eventually(t, func() bool { return p.window() > 0 }, testdeadline.Scale(1000*setUp), time.Millisecond, "a sync is timed")
	p.close()
	p.window() // a sync may have ended since the last window
	require.Zero(t, p.window(), "no sync after close")
	files, err = os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, files, "the probe's file is removed")
	require.Zero(t, (*diskProbe)(nil).window())
}
