package ilp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/store/badgerstore"
	"github.com/ingestd/ingestd/store/rowengine"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// rig is an Ingest on a real sequencer and badger store in t.TempDir(),
// served over HTTP (srv: POST /write and /api/v2/write) and TCP (addr).
// Everything stops at the end of the test.
type rig struct {
	t    testing.TB
	db   *badgerstore.DB
	seq  *feed.Sequencer
	d    *feed.Drainer
	in   *Ingest
	srv  *httptest.Server
	addr string

	tcpCancel context.CancelFunc
	tcpDone   chan error
	tcpOnce   sync.Once
}

// rigOptions change a rig before it starts. Every field may be zero.
type rigOptions struct {
	mod    func(*Config)               // changes ILP's defaults
	wrap   func(app Appender) Appender // stands between the listeners and the sequencer
	logger *slog.Logger                // the Ingest's logger; nil discards
	// logEvery is the least time between two rejection logs; 0 keeps the
	// default, negative logs every rejection.
	logEvery time.Duration
	// auth is set on the Ingest before it serves.
	auth Auth
}

// newRig starts a rig with ILP's defaults changed by mod (may be nil) and
// creates tables with sync ON so that they can be drained.
func newRig(t testing.TB, mod func(*Config), tables ...string) *rig {
	t.Helper()
	return newRigOpts(t, rigOptions{mod: mod}, tables...)
}

// newRigOpts is newRig with more options.
func newRigOpts(t testing.TB, opts rigOptions, tables ...string) *rig {
	t.Helper()
	mod := opts.mod
	scfg := rowengine.DefaultConfig()
	scfg.Dir = t.TempDir()
	db, err := badgerstore.Open(scfg, nil, nil)
	require.NoError(t, err)
	seq, d, err := feed.Open(feed.DefaultConfig(), db, nil, nil)
	if err != nil {
		require.NoError(t, db.Close())
		require.NoError(t, err)
	}
	seqCtx, seqCancel := context.WithCancel(context.Background())
	seqDone := make(chan error, 1)
	go func() { seqDone <- seq.Run(seqCtx) }()

	r := &rig{t: t, db: db, seq: seq, d: d}
	// Stops in reverse: HTTP, TCP, sequencer, store.
	t.Cleanup(func() {
		seqCancel()
		require.NoError(t, <-seqDone, "sequencer Run")
		require.NoError(t, db.Close(), "store Close")
	})

	cfg := DefaultConfig()
	// Writes slowed by the race detector would find no parse slot in
	// time; the tests of that refusal set their own timeout.
	cfg.WriteQueueTimeout = time.Minute
	if mod != nil {
		mod(&cfg)
	}
	var app Appender = seq
	if opts.wrap != nil {
		app = opts.wrap(seq)
	}
	r.in, err = New(cfg, app, time.Second, opts.logger, nil)
	require.NoError(t, err)
	if opts.logEvery != 0 {
		r.in.logLimit.every = max(0, opts.logEvery)
	}
	r.in.SetAuth(opts.auth)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r.addr = ln.Addr().String()
	tcpCtx, tcpCancel := context.WithCancel(context.Background())
	r.tcpCancel, r.tcpDone = tcpCancel, make(chan error, 1)
	go func() { r.tcpDone <- r.in.ServeTCP(tcpCtx, ln) }()
	t.Cleanup(r.stopTCP)

	mux := http.NewServeMux()
	mux.Handle("POST /write", r.in.HandlerV1())
	mux.Handle("POST /api/v2/write", r.in.HandlerV2())
	r.srv = httptest.NewServer(mux)
	t.Cleanup(r.srv.Close)

	for _, name := range tables {
		_, _, err := seq.CreateTable(context.Background(), name, true)
		require.NoError(t, err)
	}
	return r
}

// stopTCP cancels ServeTCP's context and waits for it to return (every
// connection closed and its lines committed). Safe to call twice.
func (r *rig) stopTCP() {
	r.t.Helper()
	r.tcpOnce.Do(func() {
		r.tcpCancel()
		select {
		case err := <-r.tcpDone:
			require.NoError(r.t, err, "ServeTCP")
		case <-time.After(testdeadline.Scale(10 * time.Second)):
			r.t.Fatal("ServeTCP did not return after cancel")
		}
	})
}

// httpResult is an HTTP write's response.
type httpResult struct {
	status int
	header http.Header
	body   []byte
}

// post sends body to path (with its query) and returns the response.
// hdr sets request headers.
func (r *rig) post(path string, body io.Reader, hdr map[string]string) httpResult {
	r.t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.srv.URL+path, body)
	require.NoError(r.t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := r.srv.Client().Do(req)
	require.NoError(r.t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(r.t, err)
	return httpResult{status: resp.StatusCode, header: resp.Header, body: b}
}

// row is a drained row: column name to Go value (time int64, tags and
// strings string, float64, int64, uint64, bool); absent columns and x_seq
// are left out.
type row map[string]any

// drain returns every drainable row of table, in x_seq order, with the
// columns the table has when drain starts.
func (r *rig) drain(table string) []row {
	r.t.Helper()
	info, err := r.d.Table(table)
	require.NoError(r.t, err)
	names := make([]string, 0, len(info.Columns))
	for _, c := range info.Columns {
		names = append(names, c.Name)
	}
	rows := []row{}
	var after uint64
	for {
		pg, err := r.d.Drain(context.Background(), feed.DrainRequest{Table: table, After: after, Limit: 1000, Columns: names},
			func(_ []feed.Column, vals []feed.Value) error {
				rw := row{}
				for i, v := range vals {
					if x, ok := goValue(v); ok {
						rw[names[i]] = x
					}
				}
				rows = append(rows, rw)
				return nil
			})
		require.NoError(r.t, err)
		if !pg.More {
			return rows
		}
		after = pg.Next
	}
}

// goValue converts a drained value; false for an absent one.
func goValue(v feed.Value) (any, bool) {
	switch v.Kind {
	case feed.KindTime:
		return v.Int(), true
	case feed.KindTag, feed.KindString:
		return v.Str, true
	case feed.KindFloat:
		return v.Float(), true
	case feed.KindInt:
		return v.Int(), true
	case feed.KindUint:
		return v.Num, true
	case feed.KindBool:
		return v.Bool(), true
	}
	return nil, false
}

// eventually polls cond until it holds, failing the test with msg once
// timeout (stretched on a busy machine: testdeadline.Scale) has passed.
func eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string) {
	t.Helper()
	timeout = testdeadline.Scale(timeout)
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not met within %s: %s", timeout, msg)
		}
		<-tick.C
	}
}

// waitRows polls until table holds exactly want (as drain returns it).
func (r *rig) waitRows(table string, want []row) {
	r.t.Helper()
	var got []row
	eventually(r.t, 10*time.Second, func() bool {
		got = r.drain(table)
		return len(got) >= len(want)
	}, "rows of "+table+" to arrive")
	require.Equal(r.t, want, got)
}

// tcpBytes is how many bytes the TCP listener has read.
func (r *rig) tcpBytes() int {
	return metricValue(r.t, r.in.m.bytes.WithLabelValues(transportTCP))
}

// tcpRejected is how many TCP lines were rejected for reason.
func (r *rig) tcpRejected(reason string) int {
	return metricValue(r.t, r.in.m.rejected.WithLabelValues(transportTCP, reason))
}

// tcpConns is the number of open TCP connections.
func (r *rig) tcpConns() int {
	return metricValue(r.t, r.in.m.conns)
}

// dial opens a TCP connection to the rig, closed at the end of the test.
func (r *rig) dial() net.Conn {
	r.t.Helper()
	return r.dialFrom("")
}

// dialFrom is dial from local address ip (a loopback address such as
// 127.0.0.2: another client to the server; "": any).
func (r *rig) dialFrom(ip string) net.Conn {
	r.t.Helper()
	d := net.Dialer{}
	if ip != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(ip)}
	}
	c, err := d.Dial("tcp", r.addr)
	require.NoError(r.t, err)
	r.t.Cleanup(func() { _ = c.Close() })
	return c
}

// send writes each piece separately and waits until the server has read it,
// so that each piece arrives in its own read.
func (r *rig) send(c net.Conn, pieces ...string) {
	r.t.Helper()
	for _, p := range pieces {
		want := r.tcpBytes() + len(p)
		_, err := io.WriteString(c, p)
		require.NoError(r.t, err)
		eventually(r.t, 10*time.Second, func() bool { return r.tcpBytes() >= want }, "server to read "+strings.TrimSpace(p))
	}
}

// metricValue reads a counter or gauge.
func metricValue(t testing.TB, m prometheus.Metric) int {
	t.Helper()
	var pb dto.Metric
	require.NoError(t, m.Write(&pb))
	switch {
	case pb.Counter != nil:
		return int(pb.Counter.GetValue())
	case pb.Gauge != nil:
		return int(pb.Gauge.GetValue())
	}
	t.Fatalf("metric %v is neither a counter nor a gauge", m.Desc())
	return 0
}

// logRecorder collects the records of a JSON slog logger.
type logRecorder struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

// newLogRecorder returns a recorder and a debug-level logger writing to it.
func newLogRecorder() (*logRecorder, *slog.Logger) {
	lr := &logRecorder{}
	return lr, slog.New(slog.NewJSONHandler(lr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (lr *logRecorder) Write(p []byte) (int, error) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return lr.buf.Write(p)
}

// records returns the records logged so far with message msg, each as
// its JSON object.
func (lr *logRecorder) records(t testing.TB, msg string) []map[string]any {
	t.Helper()
	lr.mu.Lock()
	defer lr.mu.Unlock()
	var out []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(lr.buf.Bytes()), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var rec map[string]any
		require.NoError(t, json.Unmarshal(l, &rec), "log line %s", l)
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}
