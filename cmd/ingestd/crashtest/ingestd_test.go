package crashtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/httpapi/client"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// ---- the binary ----

// binary is the ingestd binary built once for the whole package.
var binary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// ingestdBinary builds cmd/ingestd once (without -race: the child's speed
// and memory are part of what is measured) and returns its path.
func ingestdBinary(t testing.TB) string {
	t.Helper()
	binary.once.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			binary.err = fmt.Errorf("the go tool is needed to build ingestd: %w", err)
			return
		}
		if binary.dir, binary.err = os.MkdirTemp("", "ingestd-crashtest-"); binary.err != nil {
			return
		}
		binary.path = filepath.Join(binary.dir, "ingestd")
		cmd := exec.Command(goBin, "build", "-o", binary.path, "github.com/ingestd/ingestd/cmd/ingestd")
		if out, err := cmd.CombinedOutput(); err != nil {
			binary.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	require.NoError(t, binary.err)
	return binary.path
}

// removeBinary deletes the built binary (TestMain, after every test).
func removeBinary() {
	if binary.dir != "" {
		_ = os.RemoveAll(binary.dir)
	}
}

// ---- one ingestd process ----

// proc is one ingestd child process. Its stderr (the log, text format) and
// stdout go to a file.
type proc struct {
	cmd       *exec.Cmd
	logPath   string
	portsPath string        // the --ports-file the process writes once its listeners are bound
	done      chan struct{} // closed when the process has exited
	state     *os.ProcessState
	URL       string // http://127.0.0.1:port, once started
	TCPAddr   string // "" when TCP is disabled
	PprofAddr string // host:port of --pprof-addr, "" when it is off
}

// launch starts `ingestd args… --ports-file LOGPATH.ports` with its output
// in logPath and returns at once. The process is killed when the test
// ends, if it still runs.
func launch(t testing.TB, logPath string, args ...string) *proc {
	t.Helper()
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	require.NoError(t, err)
	defer func() { _ = f.Close() }() // the child has its own descriptor
	portsPath := logPath + ".ports"
	if err := os.Remove(portsPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		require.NoError(t, err)
	}
	cmd := exec.Command(ingestdBinary(t), append(append([]string(nil), args...), "--ports-file", portsPath)...)
	cmd.Stdout, cmd.Stderr = f, f // files: no copying goroutines
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "INGESTD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	require.NoError(t, cmd.Start())
	p := &proc{cmd: cmd, logPath: logPath, portsPath: portsPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.done)
	}()
	t.Cleanup(func() { p.kill(t) })
	return p
}

// daemonArgs are the flags every test passes: loopback listeners on free
// ports, the data directory, and no overload refusal (these tests count
// what was acknowledged; writes a loaded machine slows would trip it).
func daemonArgs(dataDir string, extra ...string) []string {
	return append([]string{"--data-dir", dataDir, "--http-addr", "127.0.0.1:0", "--tcp-addr", "127.0.0.1:0", "--http-write-max-delay", "0", "--http-write-queue-timeout", "1m"}, extra...)
}

// startIngestd launches ingestd and waits until its listeners are bound
// (its --ports-file appears), failing the test if it exits first.
func startIngestd(t testing.TB, logPath string, args ...string) *proc {
	t.Helper()
	p := launch(t, logPath, args...)
	timeout := testdeadline.Scale(60 * time.Second)
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(p.portsPath)
		if err == nil {
			var ports struct {
				HTTP  string `json:"http"`
				TCP   string `json:"tcp"`
				Pprof string `json:"pprof"`
			}
			require.NoError(t, json.Unmarshal(b, &ports), "--ports-file %s: %s", p.portsPath, b)
			require.NotEmpty(t, ports.HTTP, "--ports-file %s: %s", p.portsPath, b)
			p.URL, p.TCPAddr, p.PprofAddr = "http://"+ports.HTTP, ports.TCP, ports.Pprof
			return p
		}
		require.ErrorIs(t, err, os.ErrNotExist)
		select {
		case <-p.done:
			t.Fatalf("ingestd exited (%s) before it started:\n%s", p.state, p.log(t))
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("ingestd did not start within %s:\n%s", timeout, p.log(t))
		}
	}
}

// log returns what the process has logged so far.
func (p *proc) log(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(p.logPath)
	require.NoError(t, err)
	return string(b)
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the process (if it still runs) and waits for it.
func (p *proc) kill(t testing.TB) {
	t.Helper()
	_ = p.cmd.Process.Kill() // fails only when it has exited already
	p.wait(t, 30*time.Second)
}

// terminate sends SIGTERM and returns the exit code.
func (p *proc) terminate(t testing.TB, timeout time.Duration) int {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	return p.wait(t, timeout)
}

// wait waits for the process to exit and returns its exit code (-1 when a
// signal killed it); timeout is stretched on a busy machine
// (testdeadline.Scale).
func (p *proc) wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	timeout = testdeadline.Scale(timeout)
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("ingestd did not exit within %s:\n%s", timeout, p.log(t))
	}
	return p.state.ExitCode()
}

// requireCleanLog fails when the log shows a Go panic or fatal error.
func requireCleanLog(t testing.TB, log string) {
	t.Helper()
	for _, bad := range []string{"panic:", "fatal error:", "goroutine ", "SIGBUS", "SIGSEGV"} {
		require.NotContains(t, log, bad, "the log shows a crash:\n%s", log)
	}
}

// ---- HTTP ----

// newHTTPClient returns a client for the daemon; its idle connections are
// closed when the test ends (goleak).
func newHTTPClient(t testing.TB, conns int) *http.Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 2 * time.Minute}
}

// response is a read HTTP response.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// do sends one request and reads the whole answer; err is a transport
// error (e.g. the daemon was killed).
func do(ctx context.Context, hc *http.Client, method, u string, hdr http.Header, body []byte) (response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return response{}, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := hc.Do(req)
	if err != nil {
		return response{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// writeAcked posts body to base's /write and returns an error unless it
// was acknowledged (204); what names the write in that error. For
// goroutines, which must not call t.FailNow.
func writeAcked(ctx context.Context, hc *http.Client, base string, body []byte, what string) error {
	resp, err := do(ctx, hc, http.MethodPost, base+"/write", nil, body)
	if err == nil && resp.Status != http.StatusNoContent {
		err = fmt.Errorf("%s answered %d: %s", what, resp.Status, clip(resp.Body))
	}
	return err
}

// mustDo is do for requests that must reach the daemon.
func mustDo(t testing.TB, hc *http.Client, method, u string, body []byte) response {
	t.Helper()
	r, err := do(context.Background(), hc, method, u, nil, body)
	require.NoError(t, err, "%s %s", method, u)
	return r
}

// apiClient is the httpapi client of the daemon at base over hc.
func apiClient(t testing.TB, hc *http.Client, base string) *client.Client {
	t.Helper()
	c, err := client.New(base, client.WithHTTPClient(hc))
	require.NoError(t, err)
	return c
}

func getSync(t testing.TB, hc *http.Client, base, table string) client.SyncStatus {
	t.Helper()
	st, err := apiClient(t, hc, base).Sync(context.Background(), table)
	require.NoError(t, err, "SHOW SYNC %s", table)
	return st
}

// createSyncTable creates table WITH SYNC (or finds it existing).
func createSyncTable(t testing.TB, hc *http.Client, base, table string) {
	t.Helper()
	_, _, err := apiClient(t, hc, base).CreateTable(context.Background(), table, client.TableOptions{Sync: new(true)})
	require.NoError(t, err, "create %s", table)
}

// checkPage returns the first violation of the page invariants for a page
// read after after with limit limit, or nil; seqs are its rows' x_seq.
func checkPage(p *client.Page, after uint64, limit int, seqs []uint64) error {
	switch {
	case len(p.Rows) > limit:
		return fmt.Errorf("%d rows exceed limit %d", len(p.Rows), limit)
	case p.After != after:
		return fmt.Errorf("after=%d, asked %d", p.After, after)
	case p.Watermark > p.Seq:
		return fmt.Errorf("watermark %d above seq %d", p.Watermark, p.Seq)
	case p.More != (p.Next < p.Watermark):
		return fmt.Errorf("more=%v with next=%d watermark=%d", p.More, p.Next, p.Watermark)
	case len(p.Rows) < limit && p.Next != max(p.Watermark, after):
		// A node behind the cursor (another node's, on a shared store)
		// keeps the cursor where it is.
		return fmt.Errorf("next=%d on a page of %d rows (limit %d), want the watermark %d", p.Next, len(p.Rows), limit, max(p.Watermark, after))
	case len(p.Rows) == limit && p.Next != seqs[len(seqs)-1]:
		return fmt.Errorf("next=%d on a full page, want its last x_seq %d", p.Next, seqs[len(seqs)-1])
	}
	prev := after
	for _, q := range seqs {
		if q <= prev || q > p.Watermark {
			return fmt.Errorf("x_seq %d out of order or above the watermark %d (after=%d): %v", q, p.Watermark, after, seqs)
		}
		prev = q
	}
	return nil
}

// drainURL is the drain request of one page, times as integer ns.
func drainURL(base, table string, epoch, after uint64, limit int, extra url.Values) string {
	q := url.Values{"table": {table}, "epoch": {strconv.FormatUint(epoch, 10)}, "after": {strconv.FormatUint(after, 10)},
		"limit": {strconv.Itoa(limit)}, "time_format": {"ns"}}
	for k, v := range extra {
		q[k] = v
	}
	return base + "/drain?" + q.Encode()
}

// copyRows reads every row of a table through the time-range copy (times
// as integer ns), calling visit with each page's columns and rows (a point
// written several times is visited once per fragment).
func copyRows(t testing.TB, hc *http.Client, base, table string, visit func(cols []string, rows [][]json.RawMessage)) {
	t.Helper()
	c := apiClient(t, hc, base)
	req := client.RowsRequest{Table: table, Limit: 10000, TimeFormat: "ns"}
	for {
		pg, err := c.Rows(context.Background(), req)
		require.NoError(t, err, "rows of %s", table)
		visit(pg.Columns, pg.Rows)
		if pg.Cursor == "" {
			return
		}
		req.Cursor = pg.Cursor
	}
}

// intColumn returns the integer values of one column of a table's rows
// (every fragment's row; absent values skipped).
func intColumn(t testing.TB, hc *http.Client, base, table, col string) []int64 {
	t.Helper()
	var out []int64
	copyRows(t, hc, base, table, func(cols []string, rows [][]json.RawMessage) {
		i := slices.Index(cols, col)
		require.GreaterOrEqual(t, i, 0, "%s has no column %s: %v", table, col, cols)
		for _, row := range rows {
			if string(row[i]) == "null" {
				continue
			}
			v, err := strconv.ParseInt(string(row[i]), 10, 64)
			require.NoError(t, err)
			out = append(out, v)
		}
	})
	return out
}

// metric returns the value of one sample of the daemon's /metrics, by its
// exact name and labels as exposed (e.g. `x_total{transport="tcp"}`);
// ok=false when absent.
func metric(t testing.TB, hc *http.Client, base, sample string) (float64, bool) {
	t.Helper()
	r := mustDo(t, hc, http.MethodGet, base+"/metrics", nil)
	require.Equal(t, http.StatusOK, r.Status)
	sc := bufio.NewScanner(bytes.NewReader(r.Body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, "%q", sc.Text())
			return f, true
		}
	}
	return 0, false
}

// poll calls cond until it holds, failing the test after timeout,
// stretched on a busy machine (testdeadline.Scale: a JetStream election
// or a server's catch-up takes several times longer when other processes
// keep the cores busy).
func poll(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	timeout = testdeadline.Scale(timeout)
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(min(max(timeout/200, 5*time.Millisecond), 100*time.Millisecond))
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: "+format, append([]any{timeout}, args...)...)
		}
		<-tick.C
	}
}

// isConnErr reports whether err is a transport failure (refused, reset,
// EOF, a kept-alive connection the killed daemon closed as it was
// reused: net/http's unexported errServerClosedIdle, matched by its
// text), as when the daemon was killed.
func isConnErr(err error) bool {
	var ne net.Error
	return err != nil && (errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		strings.Contains(err.Error(), "http: server closed idle connection"))
}
