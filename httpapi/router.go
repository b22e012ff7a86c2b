package httpapi

import (
	"context"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/httpapi/auth"
	"github.com/ingestd/ingestd/httpapi/wire"
)

// Version is reported in X-Influxdb-Version and /health.
const Version = "0.1.0"

// Options are what New wires into the router.
type Options struct {
	// Tables, Drains, Rows and Consumers are the feed's read side
	// (*feed.Drainer); Creator, Admin and Writer its write side
	// (*feed.Sequencer). Each serves the routes its interface's comment
	// names, which are always routed: a server sets them all; only a test
	// that requests none of those routes may leave one nil.
	Tables    TableReader
	Drains    Drainer
	Rows      RowReader
	Consumers Consumers
	Creator   TableCreator
	Admin     TableAdmin
	Writer    Writer
	// WriteV1 and WriteV2 serve POST /write and POST /api/v2/write.
	WriteV1, WriteV2 http.Handler
	// Metrics serves GET /metrics; nil leaves the route out.
	Metrics http.Handler
	// APISpec is served at GET /api.yaml.
	APISpec []byte
	Logger  *slog.Logger
	// MaxPageBytes ends a drain page before the row that would take its
	// rows past this many bytes (a page holds at least one row, whatever
	// its size); 0 means DefaultDrainMaxPageBytes. SQL results are bounded
	// alike.
	MaxPageBytes int
	// MaxResponseBytesInflight bounds the bytes of drain, rows and SQL
	// pages being built or written at once: a page reserves MaxPageBytes
	// (at most the whole budget) before its first row is encoded, keeps
	// its size once built and gives it back once written; a page finding
	// no room within a second is answered 503 with Retry-After. 0 means
	// DefaultMaxResponseBytesInflight.
	MaxResponseBytesInflight int64
	// MaxResponseBytesPerClient bounds the part of it one client IP
	// address holds (at most all of it); 0 means
	// DefaultMaxResponseBytesPerClient.
	MaxResponseBytesPerClient int64
	// MaxDrainLimit is the feed's --max-drain-limit, the largest LIMIT of
	// a SQL read; 0 means feed.DefaultMaxDrainLimit.
	MaxDrainLimit int
	// SQLMaxStatementBytes bounds a SQL request (Config.SQLMaxStatementBytes);
	// 0 means DefaultSQLMaxStatementBytes.
	SQLMaxStatementBytes int
	// SQLMaxScanRows bounds the rows a SQL read looks at
	// (Config.SQLMaxScanRows); 0 means DefaultSQLMaxScanRows.
	SQLMaxScanRows int
	// SQLMaxInsertRows bounds the rows of one INSERT
	// (Config.SQLMaxInsertRows); 0 means DefaultSQLMaxInsertRows.
	SQLMaxInsertRows int
	// SQLMaxInflightBytes bounds the SQL statements in flight
	// (Config.SQLMaxInflightBytes); 0 means DefaultSQLMaxInflightBytes.
	SQLMaxInflightBytes int64
	// SQLMaxColumns bounds a statement's column lists and WHERE
	// comparisons (the feed's columns per table, plus time); 0 means none
	// beyond SQLMaxStatementBytes.
	SQLMaxColumns int
	// SQLMaxInValues bounds the values of one IN list of a SQL drain (the
	// feed's --max-drain-filter-values); 0: no bound (the feed's own
	// check still applies).
	SQLMaxInValues int
	// SubmitTimeout bounds how long a SQL INSERT waits for room in the
	// sequencer's queue before 503; 0 means feed.DefaultSubmitTimeout.
	SubmitTimeout time.Duration
	// Auth checks each route's token and scope (New sets which;
	// docs/operations.md#scopes); nil (no --auth-file) admits every request.
	Auth *auth.Authenticator
	// Protected is protected mode, applied when Auth is nil to the routes
	// that would need a token (docs/operations.md#access-control): a request from a
	// client not on loopback is 403; nil (or off) admits every request.
	Protected *auth.Protected
	// Audit records table and sync changes, truncates, drops, consumer
	// deletions and each consumer's first drain; nil records nothing.
	Audit *auth.Audit
	// Stats gives the status page (GET /) and the table listings each
	// table's counted contents and each consumer's lag; nil leaves them
	// out.
	Stats StatusStats
	// Gatherer is read by the status page for the server's health (queue
	// depth, commit latency, disk free, store size); nil shows n/a.
	Gatherer prometheus.Gatherer
	// Health, when set, says what the store does not keep up with (""
	// when nothing: store.HealthReporter); /health then fails (503).
	Health func() string
	// TLS and Store describe the listeners' TLS ("off", "on", with the
	// client-certificate policy) and the storage backend for the status
	// page; empty shows n/a.
	TLS, Store string
	// StatusSampleInterval, StatusSamples and StatusMaxTables are
	// Config's fields of the same names (0: the defaults).
	StatusSampleInterval time.Duration
	StatusSamples        int
	StatusMaxTables      int
	StatusMaxConsumers   int
	// MaxDatabases bounds the databases CREATE DATABASE records for SHOW
	// DATABASES (0: DefaultMaxDatabases).
	MaxDatabases int
}

// API is the HTTP surface. SetReady toggles /health between 200 and 503;
// BeginShutdown also ends long-polls.
type API struct {
	opts   Options
	logger *slog.Logger
	// clientLog is logger passing at most one record a second (the rest
	// counted as suppressed), for the lines a request can cause: any
	// client can send requests as fast as it likes.
	clientLog *slog.Logger
	ready     atomic.Bool
	router    chi.Router
	// routes holds router's routes flattened, for 405's Allow.
	routes chi.Router
	m      *metrics
	// stopCtx ends at BeginShutdown: every long-poll then answers.
	stopCtx context.Context
	stopAll context.CancelFunc
	csrf    *http.CrossOriginProtection
	// maxPageBytes is Options.MaxPageBytes, the default applied.
	maxPageBytes int
	// pageBufs recycles drain, rows and SQL page buffers: a JSON page of
	// 10,000 rows is a few MB, which growing anew for every request would
	// copy about twice.
	pageBufs pageBufList
	// budget is the response budget (Options.MaxResponseBytesInflight).
	budget *responseBudget
	// sqlBudget bounds the SQL statements in flight
	// (Options.SQLMaxInflightBytes).
	sqlBudget *responseBudget
	// started is when New ran: the status page's uptime.
	started   time.Time
	sampler   statusSampler
	databases databases
}

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	// SQL: statements by kind and outcome, rows a read looked at, and
	// requests refused at a limit.
	sqlStatements *prometheus.CounterVec
	sqlScanned    prometheus.Counter
	sqlRefused    *prometheus.CounterVec
	refused       *prometheus.CounterVec
}

// Reasons a request is refused before its route's handler serves it (or,
// for response_bytes, before it builds its page), the closed label set of
// ingestd_http_requests_refused_total.
const (
	refusedCrossSite     = "cross_site"
	refusedContentType   = "content_type"
	refusedEncoding      = "content_encoding"
	refusedResponseBytes = "response_bytes"
	refusedSQLBytes      = "sql_bytes"
)

// New builds the router. reg may be nil (no metrics).
func New(opts Options, reg prometheus.Registerer) *API {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	orDefault(&opts.MaxPageBytes, DefaultDrainMaxPageBytes)
	orDefault(&opts.MaxDrainLimit, feed.DefaultMaxDrainLimit)
	orDefault(&opts.MaxResponseBytesInflight, DefaultMaxResponseBytesInflight)
	orDefault(&opts.MaxResponseBytesPerClient, DefaultMaxResponseBytesPerClient)
	orDefault(&opts.SQLMaxStatementBytes, DefaultSQLMaxStatementBytes)
	orDefault(&opts.SQLMaxScanRows, DefaultSQLMaxScanRows)
	orDefault(&opts.SQLMaxInsertRows, DefaultSQLMaxInsertRows)
	orDefault(&opts.SQLMaxInflightBytes, DefaultSQLMaxInflightBytes)
	orDefault(&opts.SubmitTimeout, feed.DefaultSubmitTimeout)
	orDefault(&opts.StatusSampleInterval, DefaultStatusSampleInterval)
	orDefault(&opts.StatusSamples, DefaultStatusSamples)
	orDefault(&opts.MaxDatabases, DefaultMaxDatabases)
	orDefault(&opts.StatusMaxTables, DefaultStatusMaxTables)
	orDefault(&opts.StatusMaxConsumers, DefaultStatusMaxConsumers)
	f := promauto.With(reg)
	a := &API{opts: opts, maxPageBytes: opts.MaxPageBytes, started: time.Now(), databases: databases{names: map[string]struct{}{}}, logger: opts.Logger.With("component", "httpapi"), csrf: http.NewCrossOriginProtection(), m: &metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_http_requests_total", Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		// From sub-millisecond reads to multi-second long-polls and large writes.
		latency: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ingestd_http_request_duration_seconds", Help: "HTTP request latency by route pattern, method and status code (promhttp's labels plus route).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"route", "method", "code"}),
		sqlStatements: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_sql_statements_total", Help: "SQL statements by kind (create_table, alter_table, show_sync, show_columns, show_tables, truncate, drop_table, insert, drain, read, invalid) and outcome (ok, error).",
		}, []string{"statement", "outcome"}),
		sqlScanned: f.NewCounter(prometheus.CounterOpts{
			Name: "ingestd_sql_scanned_rows_total", Help: "Rows SQL reads looked at (in their time range, before tag filters and ORDER BY).",
		}),
		sqlRefused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_sql_limit_refusals_total", Help: "SQL requests refused at a limit: statement_bytes (--sql-max-statement-bytes), insert_rows (--sql-max-insert-rows), columns (--feed-max-columns-per-table), in_values (--max-drain-filter-values) or scan_rows (--sql-max-scan-rows).",
		}, []string{"limit"}),
		refused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_http_requests_refused_total",
			Help: "Requests refused before their route's handler, by reason: cross_site (403: a state-changing request whose Origin or Sec-Fetch-Site names another site), content_type (415: a control route's body declared as other than application/json), content_encoding (415: a body compressed on a route other than the writes), response_bytes (503: a drain, rows or SQL page or a table list that found no room under --http-max-response-bytes-inflight within 1s, before it was built), sql_bytes (503: a SQL statement that found no room under --sql-max-inflight-bytes within 1s, before it was parsed).",
		}, []string{"reason"}),
	}}
	a.budget = newResponseBudget(opts.MaxResponseBytesInflight, opts.MaxResponseBytesPerClient, responseBudgetWait, f.NewGauge(prometheus.GaugeOpts{
		Name: "ingestd_http_response_inflight_bytes",
		Help: "Bytes of drain, rows and SQL pages being built or written, reserved under --http-max-response-bytes-inflight.",
	}), a.m.refused.WithLabelValues(refusedResponseBytes), errResponseBudget)
	a.sqlBudget = newResponseBudget(opts.SQLMaxInflightBytes, opts.SQLMaxInflightBytes/2, responseBudgetWait, f.NewGauge(prometheus.GaugeOpts{
		Name: "ingestd_sql_inflight_bytes",
		Help: "Bytes the SQL statements being parsed and run hold (80 times each statement's bytes), at most --sql-max-inflight-bytes.",
	}), a.m.refused.WithLabelValues(refusedSQLBytes), errSQLBudget)
	a.clientLog = slog.New(&limitedHandler{Handler: a.logger.Handler(), every: time.Second})
	a.stopCtx, a.stopAll = context.WithCancel(context.Background())
	a.m.refused.WithLabelValues(refusedCrossSite)
	a.m.refused.WithLabelValues(refusedContentType)
	a.m.refused.WithLabelValues(refusedEncoding)
	// Each route's scope (docs/operations.md#scopes). Open: /ping, /health,
	// /metrics, /api.yaml, /favicon.ico.
	need := opts.Auth.Require
	if opts.Auth == nil && opts.Protected.On() {
		need = func(auth.Scope, string, func(*http.Request) string) func(http.Handler) http.Handler {
			return opts.Protected.Require
		}
	}
	table := func(r *http.Request) string { return pathParam(r, "table") }
	drainTable := func(r *http.Request) string { return r.URL.Query().Get("table") }
	r := chi.NewRouter()
	r.Use(a.influxHeaders, a.instrument, a.crossSite, strictQuery)
	r.NotFound(a.notFound)
	r.MethodNotAllowed(a.methodNotAllowed)
	r.With(need(auth.Any, "status", nil)).Get("/", a.status)
	r.Get("/favicon.ico", a.favicon)
	r.Get("/ping", a.ping)
	r.Head("/ping", a.ping)
	r.Get("/health", a.health)
	r.With(need(auth.Any, "query", nil)).Get("/query", a.query)
	r.With(need(auth.Any, "query", nil), a.identityOnly).Post("/query", a.query)
	if opts.WriteV1 != nil {
		r.With(need(auth.Write, "write", nil)).Method(http.MethodPost, "/write", opts.WriteV1)
	}
	if opts.WriteV2 != nil {
		r.With(need(auth.Write, "write", nil)).Method(http.MethodPost, "/api/v2/write", opts.WriteV2)
	}
	if opts.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", opts.Metrics)
	}
	r.Get("/api.yaml", a.spec)
	r.With(need(auth.Any, "table.list", nil)).Get("/api/v1/tables", a.listTables)
	r.Route("/api/v1/tables/{table}", func(r chi.Router) {
		read := r.With(need(auth.Drain|auth.Admin, "table.read", table))
		read.Get("/", a.getTable)
		read.Get("/sync", a.getSync)
		admin := r.With(need(auth.Admin, "table.admin", table), a.jsonOnly)
		admin.Put("/", a.putTable)
		admin.Delete("/", a.deleteTable)
		admin.Put("/sync", a.putSync)
		admin.Post("/truncate", a.truncate)
		drain := r.With(need(auth.Drain, "table.read", table))
		drain.Get("/rows", a.rows)
		drain.Get("/consumers", a.listConsumers)
		// A drain token deletes its own consumers; an admin token any
		// (feed.Principal).
		r.With(need(auth.Drain|auth.Admin, "consumer.delete", table), a.jsonOnly).Delete("/consumers/{consumer}", a.deleteConsumer)
	})
	r.With(need(auth.Drain, "drain", drainTable)).Get("/drain", a.drain)
	// Each statement is checked against its own scope (sqlAllowed).
	r.With(need(auth.Any, "sql", nil)).Get("/api/v1/sql", a.sql)
	r.With(need(auth.Any, "sql", nil), a.identityOnly).Post("/api/v1/sql", a.sql)
	a.router = r
	a.routes = flatRoutes(r)
	return a
}

// notFound answers a path no route serves: 404 not_found, as JSON like
// every other answer.
func (a *API) notFound(w http.ResponseWriter, r *http.Request) {
	writeJSONErr(w, http.StatusNotFound, wire.CodeNotFound,
		"no route "+r.Method+" "+feed.QuoteInput(r.URL.Path)+": see GET /api.yaml for the routes")
}

// methodNotAllowed answers a routed path asked with a method it does not
// serve: 405 method_not_allowed with Allow listing the methods it does.
func (a *API) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	if path != "/" {
		path = strings.TrimSuffix(path, "/") // as flatRoutes keeps the routes
	}
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete} {
		if a.routes.Match(chi.NewRouteContext(), m, path) {
			allowed = append(allowed, m)
		}
	}
	allow := strings.Join(allowed, ", ")
	w.Header().Set("Allow", allow)
	writeJSONErr(w, http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed,
		"method "+feed.QuoteInput(r.Method)+" is not allowed on "+feed.QuoteInput(r.URL.Path)+" (allowed: "+allow+")")
}

// flatRoutes returns a router holding r's routes, subrouters flattened, with
// no handler: chi's Find on a path where r mounts a subrouter reports the
// mount for every method, this one only the methods routed.
func flatRoutes(r chi.Router) chi.Router {
	flat := chi.NewRouter()
	noop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	_ = chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.TrimSuffix(strings.ReplaceAll(route, "/*", ""), "/")
		if route == "" {
			route = "/"
		}
		flat.Method(method, route, noop)
		return nil
	})
	return flat
}

// crossSite refuses a state-changing request (any method but GET, HEAD
// and OPTIONS) that a browser sent from another site: Sec-Fetch-Site other
// than same-origin or none, or, without it, an Origin whose host differs
// from the request's Host (Go's http.CrossOriginProtection). Requests
// without either header (Telegraf, client libraries, curl) pass. The
// refusal is 403 forbidden.
func (a *API) crossSite(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := a.csrf.Check(r); err != nil {
			a.m.refused.WithLabelValues(refusedCrossSite).Inc()
			writeJSONErr(w, http.StatusForbidden, wire.CodeForbidden, "cross-site request refused: "+err.Error()+
				" (a browser page of another site may not change data; non-browser clients send no Origin or Sec-Fetch-Site)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// jsonOnly refuses a control route's body declared as other than
// application/json with 415: a browser can send text/plain, form and
// multipart bodies to another site without asking it first (CORS's simple
// requests), never application/json. A body without Content-Type is read
// as JSON (Go's and most clients send none).
func (a *API) jsonOnly(next http.Handler) http.Handler {
	return a.identityOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get("Content-Type"); ct != "" {
			mt, _, err := mime.ParseMediaType(ct)
			if err != nil || mt != "application/json" {
				a.m.refused.WithLabelValues(refusedContentType).Inc()
				writeJSONErr(w, http.StatusUnsupportedMediaType, wire.CodeUnsupportedMediaType,
					"Content-Type must be application/json, got "+feed.QuoteInput(ct))
				return
			}
		}
		next.ServeHTTP(w, r)
	}))
}

// identityOnly refuses a request whose body declares a Content-Encoding
// other than identity with 415: only the write routes decompress (gzip).
// Elsewhere a compressed body would be read as it is, and a route that
// reads no body (TRUNCATE) would act on a request whose body it never
// looked at.
func (a *API) identityOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
			a.m.refused.WithLabelValues(refusedEncoding).Inc()
			writeJSONErr(w, http.StatusUnsupportedMediaType, wire.CodeUnsupportedMediaType,
				"Content-Encoding must be identity here (only /write and /api/v2/write take gzip bodies), got "+feed.QuoteInput(ce))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// principal is who r acts as on table's named consumers: its token's
// name, and whether the token holds the admin scope on table; the zero
// Principal without access control (every client is then the same
// principal, docs/security.md#consumers).
func principal(r *http.Request, table string) feed.Principal {
	g := auth.FromContext(r.Context())
	if g == nil {
		return feed.Principal{}
	}
	return feed.Principal{Name: g.Name(), Admin: g.Allows(auth.Admin, table)}
}

// pathParam returns the path parameter key, unescaped. chi routes on the
// escaped path when the request has one (r.URL.RawPath, set when the
// client's escaping differs from Go's default, e.g. %2F or %2C in a name)
// and then hands out the parameters still escaped: a table or consumer
// whose name needs such escaping would otherwise never be found.
func pathParam(r *http.Request, key string) string {
	v := chi.URLParam(r, key)
	if r.URL.RawPath == "" {
		return v
	}
	if u, err := url.PathUnescape(v); err == nil {
		return u
	}
	return v
}

// Router returns the chi router (for route walks in tests).
func (a *API) Router() chi.Router { return a.router }

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.router.ServeHTTP(w, r) }

// SetReady sets what /health reports: ready (200) or not (503).
func (a *API) SetReady(ready bool) { a.ready.Store(ready) }

// BeginShutdown reports not ready and ends every long-poll at once (each
// answers with its current, possibly empty, page), so that
// http.Server.Shutdown need not wait for them. Safe to call more than once.
func (a *API) BeginShutdown() {
	a.SetReady(false)
	a.stopAll()
}

func (a *API) influxHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Influxdb-Version", Version)
		h.Set("X-Influxdb-Build", "OSS")
		next.ServeHTTP(w, r)
	})
}

// strictQuery refuses a request whose query string cannot be read whole
// (bad percent-encoding, a ';' separator) or repeats a parameter (every
// parameter of every route is single-valued): net/http's URL.Query would
// silently drop the bad pairs or keep only the first value, serving the
// request as if a parameter were absent (docs/contract.md#bad-requests).
func strictQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			writeClientErr(w, wire.CodeInvalidParameter, "query string cannot be read: "+feed.QuoteInput(err.Error()))
			return
		}
		for k, vs := range q {
			if len(vs) > 1 {
				writeClientErr(w, wire.CodeInvalidParameter, "parameter "+feed.QuoteInput(k)+" is given more than once")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// statusWriter records the status code.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (a *API) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		if sw.code == 0 {
			sw.code = http.StatusOK
		}
		code := strconv.Itoa(sw.code)
		a.m.requests.WithLabelValues(route, code).Inc()
		a.m.latency.WithLabelValues(route, methodLabel(r.Method), code).Observe(time.Since(start).Seconds())
	})
}

func (a *API) ping(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }

func (a *API) health(w http.ResponseWriter, _ *http.Request) {
	body := map[string]any{"name": "ingestd", "version": Version, "checks": []any{}}
	if !a.ready.Load() {
		body["status"], body["message"] = "fail", "not ready (starting or stopping)"
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	if a.opts.Health != nil {
		if msg := a.opts.Health(); msg != "" {
			body["status"], body["message"] = "fail", msg
			body["checks"] = []any{map[string]any{"name": "store", "status": "fail", "message": msg}}
			writeJSON(w, http.StatusServiceUnavailable, body)
			return
		}
	}
	body["status"], body["message"] = "pass", "ready for queries and writes"
	writeJSON(w, http.StatusOK, body)
}

func (a *API) spec(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(a.opts.APISpec)
}

// orDefault sets *v to def when it is zero or negative (an Options field
// left unset).
func orDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// methodLabel bounds the method label to the methods the API routes (any
// other is "other"), so that a client cannot mint label values.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete:
		return m
	}
	return "other"
}
