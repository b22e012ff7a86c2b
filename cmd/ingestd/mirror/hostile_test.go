package mirror

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/httpapi/client"
)

// fakeSource is a source ingestd of table "t" (sync ON, epoch 1, seq and
// watermark 10, 10 fragments) whose copy and drain pages rows and drain
// serve.
type fakeSource struct {
	rows, drain http.HandlerFunc
}

func (f *fakeSource) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	st := `{"enabled":true,"epoch":1,"seq":10,"watermark":10,"horizon":1}`
	switch r.URL.Path {
	case "/api/v1/tables/t/sync":
		fmt.Fprint(w, st)
	case "/api/v1/tables/t":
		fmt.Fprintf(w, `{"name":"t","sync":%s,"retention":"0","stats":{"fragments":10,"rows_estimate":10,"series":1,"bytes":100,"counted_at":"2026-01-01T00:00:00Z"}}`, st)
	case "/api/v1/tables/t/rows":
		f.rows(w, r)
	case "/drain":
		f.drain(w, r)
	default:
		http.NotFound(w, r)
	}
}

// lpDrainPage answers an lp drain page of epoch 1 after the request's
// cursor with next, watermark 10 and body.
func lpDrainPage(next uint64, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Ingestd-Epoch", "1")
		h.Set("Ingestd-After", r.URL.Query().Get("after"))
		h.Set("Ingestd-Next", fmt.Sprint(next))
		h.Set("Ingestd-Seq", "10")
		h.Set("Ingestd-Watermark", "10")
		h.Set("Ingestd-More", fmt.Sprint(next < 10))
		fmt.Fprint(w, body)
	}
}

// target is an InfluxDB-like target (no table API) keeping what it is
// written.
type target struct {
	mu     sync.Mutex
	bodies []string
}

func (tg *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/write" {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	tg.mu.Lock()
	tg.bodies = append(tg.bodies, string(body))
	tg.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (tg *target) written() string {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return strings.Join(tg.bodies, "")
}

// runHostile runs a mirror of table t from src to a fresh target until it
// stops, from the cursor (epoch 1, next 5) when follow is set (else it
// bootstraps), and returns its error, the target, the registry and the
// cursor file's content after the run.
func runHostile(t *testing.T, src http.Handler, follow bool, maxPage int64) (error, *target, *prometheus.Registry, string) {
	t.Helper()
	s := httptest.NewServer(src)
	t.Cleanup(s.Close)
	tg := &target{}
	ts := httptest.NewServer(tg)
	t.Cleanup(ts.Close)
	cursorFile := filepath.Join(t.TempDir(), "cursor")
	if follow {
		b, err := json.Marshal(Cursor{Source: s.URL, Table: "t", Epoch: 1, Next: 5})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(cursorFile, b, 0o600))
	}
	cfg := DefaultConfig()
	cfg.Source, cfg.Table, cfg.Target, cfg.CursorFile = s.URL, "t", ts.URL+"/write?db=m", cursorFile
	cfg.Wait, cfg.MaxBackoff, cfg.Limit = 0, 10*time.Millisecond, 100
	if maxPage > 0 {
		cfg.MaxPageBytes = maxPage
	}
	reg := prometheus.NewRegistry()
	mr, err := New(cfg, slog.New(slog.DiscardHandler), reg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = mr.Run(ctx)
	require.NoError(t, ctx.Err(), "the mirror must stop by itself")
	cur, _ := os.ReadFile(cursorFile)
	return err, tg, reg, string(cur)
}

// protocolErrors returns ingestd_mirror_protocol_errors_total{reason}.
func protocolErrors(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	return gathered(t, reg, "ingestd_mirror_protocol_errors_total", reason)
}

// gathered returns the counter name of reg, of the given reason label
// when reason is set (0 when absent).
func gathered(t *testing.T, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if reason == "" {
				return m.GetCounter().GetValue()
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestMirrorHostileSource: a source that breaks the protocol stops the
// mirror with ErrProtocol naming what it broke; nothing of the bad page
// reaches the target and the cursor does not move.
func TestMirrorHostileSource(t *testing.T) {
	const cursor5 = `"epoch":1,"next":5`
	for _, tc := range []struct {
		name   string
		drain  http.HandlerFunc
		reason string
	}{
		{"huge Content-Length", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "40000000000")
			lpDrainPage(10, "t v=1 1\n")(w, r)
		}, reasonBodyTooLarge},
		{"another measurement", lpDrainPage(7, "t v=1 1\nother v=2 2\n"), reasonBadPage},
		{"next backwards", lpDrainPage(3, ""), reasonBadPage},
		{"time at the int64 limit", lpDrainPage(6, "t v=1 9223372036854775807\n"), reasonBadLine},
		{"control byte in a tag value", lpDrainPage(6, "t,k=a\x01b v=1 1\n"), reasonBadLine},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err, tg, reg, cur := runHostile(t, &fakeSource{drain: tc.drain}, true, 0)
			require.ErrorIs(t, err, ErrProtocol)
			require.Contains(t, err.Error(), tc.reason)
			require.Empty(t, tg.written())
			require.Contains(t, cur, cursor5)
			require.Equal(t, 1.0, protocolErrors(t, reg, tc.reason))
		})
	}
}

// TestMirrorChecksLines: lines that break the write rules or are of
// another table are refused before anything is written (the client's
// own check of the measurement comes first; this one stands behind it).
func TestMirrorChecksLines(t *testing.T) {
	mr, err := New(Config{Source: "http://127.0.0.1:1", Target: "http://127.0.0.1:1/write", Table: "t"}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	require.NoError(t, err)
	n, err := mr.checkLines([]byte("t,k=v a=1i,b=\"x\ny\" 1\nt v=2 2\n"))
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for body, reason := range map[string]string{
		"t v=1 1\nu v=1 1\n":           reasonOtherTable,
		"t v=1 -9223372036854775807\n": reasonBadLine,
		"t,k=a\\ v=1 1\n":              reasonBadLine,
		"t s=\"\xff\" 1\n":             reasonBadLine,
		"t,x_seq=1 v=1 1\n":            reasonBadLine,
	} {
		_, err := mr.checkLines([]byte(body))
		require.ErrorIs(t, err, ErrProtocol, "%q", body)
		require.Contains(t, err.Error(), reason, "%q", body)
	}
}

// TestMirrorEndlessBody: an endless chunked page is read up to
// --max-page-bytes, then the mirror stops; the heap stays bounded.
func TestMirrorEndlessBody(t *testing.T) {
	chunk := []byte(strings.Repeat("t v=1 1\n", 8<<10))
	endless := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Ingestd-Epoch", "1")
		w.Header().Set("Ingestd-Watermark", "10")
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err, tg, reg, _ := runHostile(t, &fakeSource{rows: endless}, false, 4<<20)
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, ErrProtocol)
	require.ErrorIs(t, err, client.ErrBodyTooLarge)
	require.Empty(t, tg.written())
	require.Equal(t, 1.0, protocolErrors(t, reg, reasonBodyTooLarge))
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<20), "what the run allocated in all")
}

// TestMirrorEndlessCopy: a copy whose cursor never runs out stops once it
// returned more rows than the source held and wrote since; the pages
// within that were written, the one past it not, the cursor file never.
func TestMirrorEndlessCopy(t *testing.T) {
	var n atomic.Int64
	rows := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Ingestd-Epoch", "1")
		w.Header().Set("Ingestd-Watermark", "10")
		w.Header().Set("Ingestd-Cursor", fmt.Sprintf("c%d", n.Add(1)))
		fmt.Fprintf(w, "t v=%d %d\n", n.Load(), n.Load())
	}
	err, tg, reg, cur := runHostile(t, &fakeSource{rows: rows}, false, 0)
	require.ErrorIs(t, err, ErrProtocol)
	require.Contains(t, err.Error(), reasonEndlessCopy)
	require.Equal(t, 1.0, protocolErrors(t, reg, reasonEndlessCopy))
	// 10 fragments and seq 10 when the copy began, none written since.
	require.Equal(t, 20, strings.Count(tg.written(), "\n"))
	require.Empty(t, cur)
	require.Equal(t, 1.0, gathered(t, reg, "ingestd_mirror_resyncs_total", ""), "stopped, not started over")
}

// runFor runs a mirror of table t from src to a fresh target for d, from
// the cursor (epoch 1, next 5), with long-polls of wait and pauses of at
// most maxBackoff, and returns the registry.
func runFor(t *testing.T, src http.Handler, d, wait, maxBackoff time.Duration) *prometheus.Registry {
	t.Helper()
	s := httptest.NewServer(src)
	t.Cleanup(s.Close)
	ts := httptest.NewServer(&target{})
	t.Cleanup(ts.Close)
	cursorFile := filepath.Join(t.TempDir(), "cursor")
	b, err := json.Marshal(Cursor{Source: s.URL, Table: "t", Epoch: 1, Next: 5})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(cursorFile, b, 0o600))
	cfg := DefaultConfig()
	cfg.Source, cfg.Table, cfg.Target, cfg.CursorFile = s.URL, "t", ts.URL+"/write?db=m", cursorFile
	cfg.Wait, cfg.MaxBackoff, cfg.Limit = wait, maxBackoff, 100
	reg := prometheus.NewRegistry()
	mr, err := New(cfg, slog.New(slog.DiscardHandler), reg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	require.NoError(t, mr.Run(ctx))
	return reg
}

// TestMirrorPacesHostileLoops: a source that answers every long-poll at
// once with nothing (ignoring wait=), or refuses every cursor with 409
// stale_epoch, or pages a copy forever without rows, had the mirror
// loop as fast as requests go (3,500 drains a second; a full resync,
// target truncated, five times a second). Each loop is paced: a pause
// that doubles from 100 ms (up to the wait, or --max-backoff), so that
// 1.5 s see a handful of requests, not thousands.
func TestMirrorPacesHostileLoops(t *testing.T) {
	const run = 1500 * time.Millisecond
	var drains atomic.Int64
	emptyAtOnce := func(w http.ResponseWriter, r *http.Request) {
		drains.Add(1)
		h := w.Header()
		after := r.URL.Query().Get("after")
		h.Set("Ingestd-Epoch", "1")
		h.Set("Ingestd-After", after)
		h.Set("Ingestd-Next", after)
		h.Set("Ingestd-Seq", after)
		h.Set("Ingestd-Watermark", after)
		h.Set("Ingestd-More", "false")
	}
	runFor(t, &fakeSource{drain: emptyAtOnce}, run, 10*time.Second, time.Minute)
	require.Less(t, drains.Load(), int64(12), "drains answered at once with nothing, in %s", run)
	require.Greater(t, drains.Load(), int64(2), "the mirror polls on")

	stale := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprint(w, `{"code":"stale_epoch","message":"feed: stale epoch, resync in full","error":"stale epoch"}`)
	}
	var copies atomic.Int64
	oneRow := func(w http.ResponseWriter, _ *http.Request) {
		copies.Add(1)
		w.Header().Set("Ingestd-Epoch", "1")
		w.Header().Set("Ingestd-Watermark", "10")
		fmt.Fprint(w, "t v=1 1\n")
	}
	reg := runFor(t, &fakeSource{drain: stale, rows: oneRow}, run, 10*time.Second, time.Minute)
	resyncs := gathered(t, reg, "ingestd_mirror_resyncs_total", "")
	require.Less(t, resyncs, 12.0, "full resyncs in %s", run)
	require.Greater(t, resyncs, 2.0, "the mirror resyncs on")

	copies.Store(0)
	emptyCopy := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Ingestd-Epoch", "1")
		w.Header().Set("Ingestd-Watermark", "10")
		w.Header().Set("Ingestd-Cursor", fmt.Sprintf("c%d", copies.Add(1)))
	}
	runFor(t, &fakeSource{drain: stale, rows: emptyCopy}, run, 10*time.Second, time.Minute)
	require.Less(t, copies.Load(), int64(12), "empty copy pages in %s", run)
	require.Greater(t, copies.Load(), int64(2), "the copy goes on")
}
