package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/cmd/ingestd/cli"
	"github.com/ingestd/ingestd/cmd/ingestd/mirror"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// ---- helpers of the mirror tests ----

// mirrorBuildBinary builds the real binary into a temporary directory of t (the
// mirror runs as its own process, so that it can be SIGKILLed).
func mirrorBuildBinary(t testing.TB) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go tool is needed to build ingestd")
	bin := filepath.Join(t.TempDir(), "ingestd")
	out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// mirrorProc is one `ingestd mirror` process; its stdout and stderr go to a
// log file.
type mirrorProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // cmd.Wait's, valid once done is closed
}

// startMirrorProc runs `bin mirror args…`, appending its output to logPath.
// The process is killed when the test ends, if it still runs.
func startMirrorProc(t testing.TB, bin, logPath string, args ...string) *mirrorProc {
	t.Helper()
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(t, err)
	defer func() { _ = f.Close() }() // the child has its own descriptor
	cmd := exec.Command(bin, append([]string{"mirror"}, args...)...)
	cmd.Stdout, cmd.Stderr = f, f // files: no copying goroutines
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "INGESTD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	require.NoError(t, cmd.Start())
	p := &mirrorProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill(t) })
	return p
}

// kill SIGKILLs the process (if it still runs) and waits for it.
func (p *mirrorProc) kill(t testing.TB) {
	t.Helper()
	_ = p.cmd.Process.Kill() // fails only when it has exited already
	p.wait(t)
}

// wait waits for the process to exit, at most 30 s.
func (p *mirrorProc) wait(t testing.TB) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(testdeadline.Scale(30 * time.Second)):
		t.Fatal("the mirror process did not exit")
	}
}

// readMirrorCursor reads a mirror cursor file; ok=false while there is none.
func readMirrorCursor(t testing.TB, path string) (mirror.Cursor, bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return mirror.Cursor{}, false
	}
	require.NoError(t, err)
	var c mirror.Cursor
	require.NoError(t, json.Unmarshal(b, &c), "the cursor file is always whole: %q", b)
	return c, true
}

// mirrorFreeAddr returns a loopback address with a port free at the time.
func mirrorFreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// mirrorScrape returns the unlabelled samples of a Prometheus text page by name.
func mirrorScrape(hc *http.Client, base string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") || strings.Contains(name, "{") {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			out[name] = f
		}
	}
	return out, nil
}

// mirrorGathered returns the value of the counter or gauge name whose labels
// include labels, from reg.
func mirrorGathered(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metric
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no sample of %s%v", name, labels)
	return 0
}

// mirrorLPString escapes an ILP string field value.
var mirrorLPString = strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace

// mirrorWriter writes batches of lines to the source: new points in time
// order, late points (earlier times, new or not) and overwrites of points
// it wrote before with new values for some of the fields.
type mirrorWriter struct {
	c       *apiClient
	lpTable string // the measurement, escaped
	id      int
	rng     *rand.Rand
	next    int64   // next in-order time offset
	points  []int64 // times written, for overwrites (host = time % 5)
	written *atomic.Int64
	// gate, when set, holds the writer once gate.limit lines are written
	// until gate.open is closed.
	gate *writeGate
}

// writeGate pauses writers at a point of the run (see mirrorWriter.gate).
type writeGate struct {
	limit int64
	open  chan struct{}
	once  sync.Once
}

// release lets the held writers go on (idempotent).
func (g *writeGate) release() { g.once.Do(func() { close(g.open) }) }

// line returns one ILP line.
func (w *mirrorWriter) line() string {
	const base = int64(1_767_225_600_000_000_000) // 2026-01-01T00:00:00Z
	var ts int64
	switch r := w.rng.IntN(10); {
	case r < 6 || len(w.points) == 0:
		w.next += 1 + w.rng.Int64N(3)
		ts = w.next
	case r < 8:
		ts = w.rng.Int64N(w.next + 1) // late
	default:
		ts = w.points[w.rng.IntN(len(w.points))] // overwrite
	}
	w.points = append(w.points, ts)
	fields := []string{}
	for len(fields) == 0 {
		if w.rng.IntN(2) == 0 {
			fields = append(fields, "v="+strconv.FormatFloat(w.rng.NormFloat64()*1e3, 'g', -1, 64))
		}
		if w.rng.IntN(2) == 0 {
			fields = append(fields, fmt.Sprintf("n=%di", w.rng.Int64()-w.rng.Int64()))
		}
		if w.rng.IntN(3) == 0 {
			fields = append(fields, fmt.Sprintf(`s="%s"`, mirrorLPString(fmt.Sprintf(`w%d "%d" \ %x`, w.id, ts, w.rng.Uint32()))))
		}
		if w.rng.IntN(4) == 0 {
			fields = append(fields, "ok="+strconv.FormatBool(w.rng.IntN(2) == 0))
		}
	}
	return fmt.Sprintf("%s,host=h%d,writer=w%d %s %d", w.lpTable, ts%5, w.id, strings.Join(fields, ","), base+ts*int64(time.Millisecond))
}

// run writes batches of size lines, pausing between batches.
func (w *mirrorWriter) run(batches, size int) error {
	for range batches {
		if w.gate != nil && w.written.Load() >= w.gate.limit {
			<-w.gate.open
		}
		lines := make([]string, size)
		for i := range lines {
			lines[i] = w.line()
		}
		r, err := w.c.try(http.MethodPost, "/write?db=x", nil, strings.NewReader(strings.Join(lines, "\n")))
		if err != nil {
			return err
		}
		if r.Status != http.StatusNoContent {
			return fmt.Errorf("writer %d: %s", w.id, r)
		}
		w.written.Add(int64(size))
		time.Sleep(time.Duration(2+w.rng.IntN(5)) * time.Millisecond) // spaces the batches out
	}
	return nil
}

// ---- the end-to-end test ----

// TestMirrorEndToEnd runs `ingestd mirror` from daemon A to daemon B while
// writers keep writing to A (late timestamps and overwrites included); the
// mirror is SIGKILLed and restarted twice (the second time as it resyncs)
// and A is truncated once. At the end B holds exactly A's rows.
func TestMirrorEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs for several seconds")
	}
	bin := mirrorBuildBinary(t)
	dir := t.TempDir()
	a := newClientURL(t, startDaemon(t, testConfig(filepath.Join(dir, "a"))).URL)
	bURL := startDaemon(t, testConfig(filepath.Join(dir, "b"))).URL
	b := newClientURL(t, bURL)
	const table, lpTable = "mirror,e2e", `mirror\,e2e`
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	// History: lines written while sync was OFF (the table is auto-created),
	// then sync ON and more lines, all before the mirror starts.
	var written atomic.Int64
	writers := make([]*mirrorWriter, 3)
	for i := range writers {
		writers[i] = &mirrorWriter{c: a, lpTable: lpTable, id: i, rng: rand.New(rand.NewPCG(seed, uint64(i+1))), written: &written}
	}
	require.NoError(t, writers[0].run(5, 40))
	require.Equal(t, http.StatusOK, a.send(t, http.MethodPut, tablePath(table)+"/sync", `{"enabled": true}`).Status)
	require.NoError(t, writers[1].run(5, 20))

	const batches, size = 120, 8
	total := written.Load() + int64(len(writers)*batches*size)
	// The writers wait at the truncate's point until it is done, so that
	// a good share of the lines (over a third) lands after it however
	// slow the truncate's request is on a busy machine.
	truncateAt := int64((0.4 + 0.2*rng.Float64()) * float64(total))
	gate := &writeGate{limit: truncateAt, open: make(chan struct{})}
	errs := make(chan error, len(writers))
	var wg sync.WaitGroup
	for _, w := range writers {
		w.gate = gate
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- w.run(batches, size)
		}()
	}
	writersDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(writersDone)
	}()
	defer func() { // a failing test still waits for its writers
		gate.release()
		<-writersDone
	}()

	cursorFile := filepath.Join(dir, "mirror.cursor")
	metricsAddr := mirrorFreeAddr(t)
	mtr := &http.Transport{}
	t.Cleanup(mtr.CloseIdleConnections)
	mc := &http.Client{Transport: mtr, Timeout: 10 * time.Second}
	args := func(extra ...string) []string {
		return append([]string{
			"--source", a.base, "--table", table, "--target", bURL + "/write?db=x",
			"--cursor-file", cursorFile, "--wait", "1s", "--limit", "500", "--max-backoff", "500ms",
		}, extra...)
	}
	logs := make([]string, 3)
	for i := range logs {
		logs[i] = filepath.Join(dir, fmt.Sprintf("mirror-%d.log", i+1))
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("%s:\n%s", filepath.Base(l), b)
			}
		}
	})
	atLeast := func(n int64, what string) {
		t.Helper()
		pollUntil(t, 2*time.Minute, func() bool { return written.Load() >= n }, "%s", fmt.Sprintf("%d lines written before %s", n, what))
	}

	// Run 1: bootstraps, follows; SIGKILLed at a random-ish moment once it
	// has written its cursor.
	m1 := startMirrorProc(t, bin, logs[0], args()...)
	pollUntil(t, time.Minute, func() bool { _, ok := readMirrorCursor(t, cursorFile); return ok }, "%s", "run 1 bootstrapped")
	atLeast(int64((0.15+0.15*rng.Float64())*float64(total)), "the first kill")
	m1.kill(t)
	c1, ok := readMirrorCursor(t, cursorFile)
	require.True(t, ok)
	require.Equal(t, uint64(1), c1.Epoch)

	// Run 2: resumes from the cursor; A is truncated under it; SIGKILLed as
	// soon as its resync has truncated B (B's epoch moves), so while it
	// copies A or just after.
	m2 := startMirrorProc(t, bin, logs[1], args()...)
	atLeast(truncateAt, "the truncate")
	epochB := b.syncStatus(t, table).Epoch
	r := a.send(t, http.MethodPost, tablePath(table)+"/truncate", "")
	require.Equal(t, http.StatusOK, r.Status, "%s", r)
	gate.release()
	pollUntil(t, time.Minute, func() bool { return b.syncStatus(t, table).Epoch > epochB }, "%s", "run 2 truncates B to resync")
	m2.kill(t)
	log2, err := os.ReadFile(logs[1])
	require.NoError(t, err)
	require.Contains(t, string(log2), `level=ERROR msg="source refused the cursor: resyncing in full"`)

	// Run 3: resyncs (or resumes) and follows to the end. Run 2 may have
	// reached what the writers wrote last: run 3 then applies nothing.
	start3, _ := readMirrorCursor(t, cursorFile)
	m3 := startMirrorProc(t, bin, logs[2], args("--metrics-addr", metricsAddr)...)
	select {
	case <-writersDone:
	case <-time.After(testdeadline.Scale(3 * time.Minute)):
		t.Fatal("the writers did not finish")
	}
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, total, written.Load())

	final := a.syncStatus(t, table)
	require.Equal(t, uint64(2), final.Epoch, "sync ON, then one truncate")
	require.Equal(t, final.Seq, final.Watermark)
	pollUntil(t, 2*time.Minute, func() bool {
		c, ok := readMirrorCursor(t, cursorFile)
		return ok && c.Epoch == final.Epoch && c.Next == final.Watermark
	}, "%s", fmt.Sprintf("the mirror's cursor reaches epoch %d, watermark %d", final.Epoch, final.Watermark))

	// B holds exactly A's rows.
	rowsA, rowsB := feedRowsByPoint(t, a, table), feedRowsByPoint(t, b, table)
	require.Greater(t, len(rowsA), 500, "the comparison covers the rows written after the truncate")
	require.Equal(t, len(rowsA), len(rowsB), "as many points on B as on A")
	for k, ra := range rowsA {
		require.Equal(t, ra, rowsB[k], "point %s", k)
	}
	require.Equal(t, feedColumns(t, a, table), feedColumns(t, b, table))
	t.Logf("%d lines written; A: epoch %d, watermark %d, %d points; cursor after run 1: %+v", total, final.Epoch, final.Watermark, len(rowsA), c1)

	// Progress is visible: A lists the mirror as a consumer at the
	// watermark, its metrics report the position and no lag, and its logs
	// tell the resync loudly.
	pollUntil(t, time.Minute, func() bool {
		cs := a.listConsumers(t, table)
		return len(cs) == 1 && cs[0] == feedConsumer{Name: "mirror-" + table, Epoch: final.Epoch, Position: final.Watermark}
	}, "%s", "A lists the mirror's consumer at the watermark")
	var samples map[string]float64
	pollUntil(t, time.Minute, func() bool {
		var err error
		samples, err = mirrorScrape(mc, "http://"+metricsAddr)
		return err == nil && samples["ingestd_mirror_position"] == float64(final.Watermark)
	}, "%s", "the mirror's position metric reaches the watermark")
	require.InDelta(t, 0, samples["ingestd_mirror_lag_fragments"], 0)
	// Run 3 commits only when run 2 stopped below the end; one that
	// resumed at the watermark never committed, and its last commit time
	// is 0: this process never committed.
	if start3.Epoch != final.Epoch || start3.Next != final.Watermark {
		require.Positive(t, samples["ingestd_mirror_rows_total"], "run 3 started at %+v, below the end", start3)
		require.Positive(t, samples["ingestd_mirror_last_commit_timestamp_seconds"])
	} else {
		require.Zero(t, samples["ingestd_mirror_rows_total"], "run 3 resumed at the end")
	}
	var all []byte
	for _, l := range logs {
		b, err := os.ReadFile(l)
		require.NoError(t, err)
		all = append(all, b...)
	}
	require.Contains(t, string(all), `level=ERROR msg="source refused the cursor: resyncing in full"`)
	require.Contains(t, string(all), `level=WARN msg="target table truncated for a full resync"`)
	require.Contains(t, string(all), `msg="mirror progress"`)
	require.Contains(t, string(all), `msg="resuming from cursor file"`)

	// SIGTERM stops it cleanly.
	require.NoError(t, m3.cmd.Process.Signal(syscall.SIGTERM))
	m3.wait(t)
	require.NoError(t, m3.err, "exit code 0 after SIGTERM")
}

// ---- a target that rejects a page ----

// mirrorLogBuffer is a bytes.Buffer safe for concurrent use.
type mirrorLogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *mirrorLogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *mirrorLogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestMirrorTargetErrors runs the mirror in-process against a target that
// answers the first page 400 (a partial write: counted and logged, never
// retried) and the second page 503 once (retried with backoff until
// acknowledged).
func TestMirrorTargetErrors(t *testing.T) {
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections) // the mirror's client
	a := newClientURL(t, startDaemon(t, testConfig(t.TempDir())).URL)
	a.createSyncTable(t, "m")
	var lines []string
	for i := range 10 {
		lines = append(lines, fmt.Sprintf("m,host=h%d v=%di %d", i%2, i, 1000+i))
	}
	a.mustWrite(t, strings.Join(lines, "\n"))

	var (
		mu    sync.Mutex
		posts []string
		// The fourth POST is held until release is closed.
		arrived, release = make(chan struct{}), make(chan struct{})
		releaseOnce      sync.Once
	)
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/write" {
			http.NotFound(w, r) // not an ingestd: no table API
			return
		}
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		n := len(posts)
		posts = append(posts, string(body))
		mu.Unlock()
		switch n {
		case 0:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"code":"invalid","message":"partial write: unable to parse dropped=5"}`)
		case 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 3:
			close(arrived)
			<-release
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(target.Close)
	t.Cleanup(releaseAll) // before target.Close
	sent := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), posts...)
	}

	cursorFile := filepath.Join(t.TempDir(), "m.cursor")
	cfg := mirror.Config{
		Source: a.base, Table: "m", Target: target.URL + "/write?db=x", CursorFile: cursorFile, Consumer: "mirror-m",
		Limit: 5, Wait: 200 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, LogLevel: "info", LogFormat: "text",
	}
	require.NoError(t, cfg.Validate())
	var logs mirrorLogBuffer
	reg := prometheus.NewRegistry()
	mr, err := mirror.New(cfg, cli.NewLogger(&logs, "info", "text"), reg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- mr.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case <-runErr:
		case <-time.After(testdeadline.Scale(30 * time.Second)):
			t.Error("the mirror did not stop")
		}
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("mirror log:\n%s", logs.String())
		}
	})
	cursorAt := func(next uint64) func() bool {
		return func() bool { c, ok := readMirrorCursor(t, cursorFile); return ok && c.Next == next }
	}
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		return mirrorGathered(t, reg, name, labels)
	}

	pollUntil(t, time.Minute, cursorAt(10), "%s", "the copy is acknowledged")
	got := sent()
	require.Len(t, got, 3, "page 1 once (400, not retried), page 2 twice (503, then 204)")
	require.Equal(t, got[1], got[2], "the retry resends the same page")
	copied := strings.Split(strings.TrimSuffix(got[0]+got[1], "\n"), "\n")
	require.ElementsMatch(t, lines, copied, "the copy carries every row once")
	require.InDelta(t, 1, value("ingestd_mirror_target_rejected_total", nil), 0)
	require.InDelta(t, 1, value("ingestd_mirror_errors_total", map[string]string{"side": "target"}), 0)
	require.InDelta(t, 2, value("ingestd_mirror_pages_total", nil), 0)
	require.InDelta(t, 10, value("ingestd_mirror_rows_total", nil), 0)
	require.InDelta(t, 1, value("ingestd_mirror_resyncs_total", nil), 0)
	require.InDelta(t, 10, value("ingestd_mirror_position", nil), 0)
	require.Contains(t, logs.String(), `level=ERROR msg="target dropped lines of a page" status=400`)
	require.Contains(t, logs.String(), `level=WARN msg="request failed; retrying" side=target err="HTTP 503`)

	// It goes on following the feed, and moves the cursor only once the
	// target has acknowledged the page.
	a.mustWrite(t, "m,host=h9 v=99i 2000\nm,host=h9 v=98i 2001\nm,host=h0 v=7i 1000")
	select {
	case <-arrived:
	case <-time.After(testdeadline.Scale(time.Minute)):
		t.Fatal("the new lines were not sent to the target")
	}
	c, ok := readMirrorCursor(t, cursorFile)
	require.True(t, ok)
	require.Equal(t, mirror.Cursor{Source: a.base, Table: "m", Epoch: 1, Next: 10}, c, "not moved while the target has not answered")
	releaseAll()
	pollUntil(t, time.Minute, cursorAt(13), "%s", "the new lines are acknowledged")
	got = sent()
	require.Len(t, got, 4)
	require.Equal(t, "m,host=h9 v=99i 2000\nm,host=h9 v=98i 2001\nm,host=h0 v=7i 1000\n", got[3], "the overwrite comes as the coalesced row")
	require.InDelta(t, 1, value("ingestd_mirror_target_rejected_total", nil), 0)
	require.InDelta(t, 0, value("ingestd_mirror_lag_fragments", nil), 0)
}

// TestMirrorTargetDownAtStart starts the mirror while its ingestd target is
// down: the resync must still truncate the target once it is up, so that a
// row the source does not hold goes.
func TestMirrorTargetDownAtStart(t *testing.T) {
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections) // the mirror's client
	cfgB := testConfig(t.TempDir())
	cfgB.httpAddr = mirrorFreeAddr(t)
	bd := startDaemon(t, cfgB)
	newClientURL(t, bd.URL).mustWrite(t, "m,host=stale v=1i 1")
	bd.stop(t)

	a := newClientURL(t, startDaemon(t, testConfig(t.TempDir())).URL)
	a.createSyncTable(t, "m")
	a.mustWrite(t, "m,host=h1 v=1i 1\nm,host=h2 v=2i 2")

	cursorFile := filepath.Join(t.TempDir(), "m.cursor")
	cfg := mirror.Config{
		Source: a.base, Table: "m", Target: "http://" + cfgB.httpAddr + "/write?db=x", CursorFile: cursorFile, Consumer: "mirror-m",
		Limit: 100, Wait: 200 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, LogLevel: "info", LogFormat: "text",
	}
	var logs mirrorLogBuffer
	mr, err := mirror.New(cfg, cli.NewLogger(&logs, "info", "text"), prometheus.NewRegistry())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- mr.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case <-runErr:
		case <-time.After(testdeadline.Scale(30 * time.Second)):
			t.Error("the mirror did not stop")
		}
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("mirror log:\n%s", logs.String())
		}
	})
	pollUntil(t, time.Minute, func() bool {
		return strings.Contains(logs.String(), `msg="request failed; retrying" side=target`)
	}, "%s", "the mirror retries the target")

	b := newClientURL(t, startDaemon(t, cfgB).URL)
	pollUntil(t, time.Minute, func() bool { c, ok := readMirrorCursor(t, cursorFile); return ok && c.Next == 2 }, "%s", "the copy is acknowledged")
	require.Equal(t, feedRowsByPoint(t, a, "m"), feedRowsByPoint(t, b, "m"), "the target was truncated before the copy")
}

// TestMirrorSourceRefusals: a source that refuses the mirror in a way only
// its operator can change (a token it does not accept, one without the
// drain scope, its consumer limit reached) stops `ingestd mirror` at once
// with exit 1 and an error naming the cause and what to do, instead of
// retrying for ever.
func TestMirrorSourceRefusals(t *testing.T) {
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections) // the mirror's client
	src, _, tok := authDaemon(t, map[string][]string{"admin": {"admin", "drain", "write"}, "writer": {"write:m"}}, func(c *config) {
		c.feed.MaxConsumersPerTable = 1
	})
	admin := tokenClient(t, src, tok["admin"])
	admin.createSyncTable(t, "m")
	admin.mustWrite(t, "m v=1i 1")
	// Another consumer holds the table's only named consumer.
	r := admin.drain(t, url.Values{"table": {"m"}, "consumer": {"other"}, "limit": {"10"}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	target := startDaemon(t, testConfig(t.TempDir())).URL

	for _, c := range []struct {
		name, token string
		want        []string
	}{
		{"unknown token", "not-a-token", []string{"HTTP 401", "the source does not accept --source-token"}},
		{"no drain scope", tok["writer"], []string{"HTTP 403", "--source-token lacks the drain scope"}},
		{"too many consumers", tok["admin"], []string{"HTTP 409 too_many_consumers", "--max-consumers-per-table", "delete consumers no longer used"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out mirrorLogBuffer
			code := mirror.Run(ctx, []string{"--source", src.URL, "--source-token", c.token, "--table", "m",
				"--target", target + "/write?db=x", "--cursor-file", filepath.Join(t.TempDir(), "cursor"), "--max-backoff", "100ms"}, &out, &out)
			require.NoError(t, ctx.Err(), "the mirror retried until the deadline:\n%s", out.String())
			require.Equal(t, 1, code, "%s", out.String())
			logs := out.String()
			require.Contains(t, logs, "the source refuses the mirror")
			for _, w := range c.want {
				require.Contains(t, logs, w)
			}
			require.NotContains(t, logs, "retrying", "a refusal is not retried")
			if c.token != "not-a-token" {
				require.NotContains(t, logs, c.token, "the token is never logged")
			}
		})
	}
}
