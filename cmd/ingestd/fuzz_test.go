package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store/badgerstore"
)

// fuzzRequestTimeout is how long one fuzzed request may take before its
// client goes away (its context is cancelled), so that a long-poll does not
// hold the fuzzer.
const fuzzRequestTimeout = 100 * time.Millisecond

// fuzzSeed is one seed of FuzzRouter: a request, then an optional second
// one ("METHOD /target", no body) that reads what the first left behind.
type fuzzSeed struct {
	method, target, header string
	body                   string
	then                   string
}

// fuzzSeeds cover every route of api.yaml (FuzzRouter checks it).
var fuzzSeeds = []fuzzSeed{
	{"GET", "/", "", "", ""},
	{"GET", "/favicon.ico", "", "", ""},
	{"GET", "/ping", "", "", ""},
	{"HEAD", "/ping", "", "", ""},
	{"GET", "/health", "", "", ""},
	{"GET", "/query?q=SHOW+DATABASES", "", "", ""},
	{"POST", "/query", "Content-Type: application/x-www-form-urlencoded", "q=CREATE+DATABASE+telegraf", ""},
	{"POST", "/write?db=x&precision=s", "Content-Type: text/plain", "cpu,host=a usage=1.5,n=3i,u=4u,ok=t,s=\"x\" 1700000000\n", "GET /drain?table=cpu&after=0&limit=10"},
	{"POST", "/write", "Content-Encoding: gzip", "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", ""},
	{"POST", "/api/v2/write?org=o&bucket=b&precision=ms", "Content-Length: 40", "m,t=1 f=1 1700000000000\nm f=\"a\\\"b\"", "GET /api/v1/tables/m/rows?limit=5"},
	{"GET", "/metrics", "", "", ""},
	{"GET", "/api.yaml", "", "", ""},
	{"GET", "/api/v1/tables", "", "", ""},
	{"PUT", "/api/v1/tables/sensor", "Content-Type: application/json", `{"sync":true}`, "GET /api/v1/tables/sensor"},
	{"PUT", "/api/v1/tables/a%2Fb", "", `{"sync":false}`, "GET /metrics"},
	{"PUT", "/api/v1/tables/%C3%A9t%C3%A9", "", `{"sync":true}`, "GET /drain?table=%C3%A9t%C3%A9&after=0&limit=1&consumer=%C3%A9"},
	{"GET", "/api/v1/tables/cpu", "", "", ""},
	{"GET", "/api/v1/tables/sensor/sync", "", "", ""},
	{"PUT", "/api/v1/tables/sensor/sync", "", `{"enabled":true}`, "GET /api/v1/tables/sensor/sync"},
	{"POST", "/api/v1/tables/sensor/truncate", "", "", ""},
	{"GET", "/api/v1/tables/cpu/rows?start=0&end=2000000000000000000&limit=2&format=lp", "", "", ""},
	{"GET", "/api/v1/tables/cpu/consumers", "", "", ""},
	{"GET", "/drain?table=cpu&after=0&limit=3&epoch=1&columns=time,host,usage&format=ndjson&consumer=m1&time_format=ms", "", "", "GET /api/v1/tables/cpu/consumers"},
	{"GET", "/drain?table=cpu&after=0&limit=1&format=lp&wait=10ms", "", "", ""},
	// A long-poll whose client goes away before anything arrives.
	{"GET", "/drain?table=cpu&after=1&limit=1&wait=5s", "", "", ""},
	{"DELETE", "/api/v1/tables/cpu/consumers/m1", "", "", ""},
	{"DELETE", "/api/v1/tables/sensor", "", "", "GET /api/v1/tables"},
	{"POST", "/api/v1/sql", "Content-Type: application/x-www-form-urlencoded", "q=CREATE+TABLE+s+(host+TAG,+p00+DOUBLE,+n+BIGINT)+WITH+(SYNC)", "GET /api/v1/sql?q=SHOW+COLUMNS+FROM+s"},
	{"POST", "/api/v1/sql", "Content-Type: application/json", `{"q":"INSERT INTO s (time, host, p00, n) VALUES (1, 'a', 1.5, -2), ('2025-11-29T10:00:00Z', 'b', NULL, 3)"}`, "GET /api/v1/sql?q=SELECT+*+FROM+s+WHERE+x_seq+>+0+LIMIT+5"},
	{"GET", "/api/v1/sql?q=SELECT+*+FROM+cpu+WHERE+time+>%3D+0+AND+host+%3D+'a'+ORDER+BY+time+DESC+LIMIT+3&time_format=ms", "Accept: text/csv", "", ""},
	{"POST", "/api/v1/sql?q=ALTER+TABLE+s+SET+SYNC+OFF", "", "", "POST /api/v1/sql?q=TRUNCATE+s"},
	// Routed paths asked with another method (405) and, as the second
	// request, a path no route serves (404).
	{"PATCH", "/api/v1/tables/cpu", "", "", "GET /api/v1/nope"},
}

// FuzzRouter sends random requests (methods, paths, parameters, headers,
// bodies) through the daemon's whole HTTP handler, wired as serve wires it
// over a real store, and requires that none panics or answers 500 (503 is
// back-pressure), that every error is the JSON error object, that the
// sequencer keeps running and that /ping still answers 204. Every route of api.yaml has a seed. One daemon serves every
// input of a fuzzing process, so a failure may depend on what earlier
// inputs left behind; the second request of an input (then) lets one input
// both change the state and read it. CI runs it bounded by
// executions: go test ./cmd/ingestd -run '^$' -fuzz '^FuzzRouter$' -fuzztime 30000x.
func FuzzRouter(f *testing.F) {
	cfg := testConfig(f.TempDir())
	cfg.feed.SyncTables = []string{"*"}
	cfg.store.UnsafeNoSync = true     // requests are under test, not durability
	cfg.store.MemTableBytes = 1 << 20 // a DROP or TRUNCATE allocates a new memtable
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	db, err := badgerstore.Open(cfg.store, logger, reg)
	require.NoError(f, err)
	seq, _, api, err := wire(cfg, db, logger, reg, nil)
	require.NoError(f, err)
	api.SetReady(true)
	ctx, cancel := context.WithCancel(context.Background())
	seqDone := make(chan error, 1)
	go func() { seqDone <- seq.Run(ctx) }()
	f.Cleanup(func() {
		cancel()
		require.NoError(f, <-seqDone)
		require.NoError(f, db.Close())
	})

	routes := map[string]bool{}
	require.NoError(f, chi.Walk(api.Router(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes[method+" "+routeKey(route)] = false
		return nil
	}))
	for _, s := range fuzzSeeds {
		req := httptest.NewRequest(s.method, s.target, nil)
		rctx := chi.NewRouteContext()
		require.True(f, api.Router().Match(rctx, req.Method, req.URL.EscapedPath()), "seed %s %s matches no route", s.method, s.target)
		routes[s.method+" "+routeKey(rctx.RoutePattern())] = true
		f.Add(s.method, s.target, s.header, []byte(s.body), s.then)
	}
	for r, seeded := range routes {
		require.True(f, seeded, "route %s has no seed", r)
	}

	f.Fuzz(func(t *testing.T, method, target, header string, body []byte, then string) {
		fuzzRequest(t, api, method, target, header, body)
		if m, tgt, ok := strings.Cut(then, " "); ok {
			fuzzRequest(t, api, m, tgt, "", nil)
		}
		select {
		case err := <-seqDone:
			seqDone <- err
			t.Fatalf("the sequencer stopped: %v", err)
		default:
		}
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ping", nil))
		require.Equal(t, http.StatusNoContent, rec.Code, "GET /ping")
	})
}

// routeKey is a chi route pattern without the sub-router's trailing "/*"
// or "/".
func routeKey(pattern string) string {
	return strings.TrimSuffix(strings.ReplaceAll(pattern, "/*", ""), "/")
}

// fuzzRequest serves one request built from fuzzed parts (nothing when
// they make no request, as a server would not route it) and fails on a
// panic or a 5xx other than 503. header holds "Key: value" lines; a
// Content-Length among them is the request's declared length, as a server
// takes it. The client goes away after fuzzRequestTimeout.
func fuzzRequest(t *testing.T, h http.Handler, method, target, header string, body []byte) {
	t.Helper()
	if !strings.HasPrefix(target, "/") {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://ingestd"+target, bytes.NewReader(body))
	if err != nil {
		return
	}
	for line := range strings.Lines(header) {
		k, v, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ":")
		if !ok || k == "" {
			continue
		}
		k, v = textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(k)), strings.TrimSpace(v)
		if k == "Content-Length" {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
				req.ContentLength = n
			}
			continue
		}
		req.Header.Add(k, v)
	}
	gone := time.AfterFunc(fuzzRequestTimeout, cancel)
	defer gone.Stop()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("%s %q with headers %q and a body of %d bytes answered %d: %s", method, clip([]byte(target)), header, len(body), rec.Code, clip(rec.Body.Bytes()))
	}
	// Every error but 499 (no one reads it) is the JSON error object, 404
	// and 405 of unrouted requests included.
	var e struct{ Code, Message string }
	if rec.Code >= 400 && rec.Code != 499 && (rec.Header().Get("Content-Type") != "application/json" ||
		json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Code == "" || e.Message == "") {
		t.Fatalf("%s %q answered %d as %q, not the JSON error object: %s", method, clip([]byte(target)), rec.Code, rec.Header().Get("Content-Type"), clip(rec.Body.Bytes()))
	}
}
