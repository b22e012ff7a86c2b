package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ingestd/ingestd/feed"
)

// Version is reported in X-Influxdb-Version and /health.
const Version = "0.1.0"

// Tables is the table management the API needs (SPEC §5).
type Tables interface {
	CreateTable(ctx context.Context, name string, sync bool) (bool, feed.SyncStatus, error)
	SetSync(ctx context.Context, name string, enabled bool) (feed.SyncStatus, error)
	Truncate(ctx context.Context, name string) (feed.SyncStatus, error)
	Drop(ctx context.Context, name string) error
	// DefineTable creates a table with declared columns (SQL CREATE TABLE).
	DefineTable(ctx context.Context, name string, sync bool, cols []feed.Column) (feed.SyncStatus, error)
	Status(name string) (feed.SyncStatus, error)
	Table(name string) (feed.TableInfo, error)
	Tables() []feed.TableInfo
}

// Drainer reads the feed (SPEC §6).
type Drainer interface {
	Drain(ctx context.Context, req feed.DrainRequest, visit func(cols []feed.Column, vals []feed.Value) error) (feed.Page, error)
	Rows(ctx context.Context, req feed.RowsRequest, visit func(cols []feed.Column, vals []feed.Value) error) (feed.RowsPage, error)
}

// Consumers are the named drain consumers (SPEC §6).
type Consumers interface {
	Consumers(table string) ([]feed.ConsumerInfo, error)
	DeleteConsumer(table, name string) error
}

// Writer submits rows to the sequencer (SQL INSERT), as package ilp does
// lines.
type Writer interface {
	Submit(ctx context.Context, b *feed.Batch) (*feed.Pending, error)
}

// Feed is the sequencer as the API sees it.
type Feed interface {
	Tables
	Drainer
	Consumers
	Writer
}

// Options are what New wires into the router.
type Options struct {
	Feed Feed
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
	// SQLMaxColumns bounds a statement's column lists and WHERE
	// comparisons (the feed's columns per table, plus time); 0 means none
	// beyond SQLMaxStatementBytes.
	SQLMaxColumns int
	// SubmitTimeout bounds how long a SQL INSERT waits for room in the
	// sequencer's queue before 503; 0 means feed.DefaultSubmitTimeout.
	SubmitTimeout time.Duration
}

// API is the HTTP surface. SetReady toggles /health between 200 and 503;
// BeginShutdown also ends long-polls.
type API struct {
	opts     Options
	logger   *slog.Logger
	ready    atomic.Bool
	router   chi.Router
	m        *metrics
	stopping chan struct{}
	stopOnce sync.Once
	// maxPageBytes is Options.MaxPageBytes, the default applied.
	maxPageBytes int
	// pageBufs recycles drain and rows page buffers (*[]byte): a JSON page
	// of 10,000 rows is a few MB, which growing anew for every request
	// would copy about twice.
	pageBufs sync.Pool
}

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	// SQL: statements by kind and outcome, rows a read looked at, and
	// requests refused at a limit.
	sqlStatements *prometheus.CounterVec
	sqlScanned    prometheus.Counter
	sqlRefused    *prometheus.CounterVec
}

// New builds the router. reg may be nil (no metrics).
func New(opts Options, reg prometheus.Registerer) *API {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxPageBytes <= 0 {
		opts.MaxPageBytes = DefaultDrainMaxPageBytes
	}
	if opts.MaxDrainLimit <= 0 {
		opts.MaxDrainLimit = feed.DefaultMaxDrainLimit
	}
	if opts.SQLMaxStatementBytes <= 0 {
		opts.SQLMaxStatementBytes = DefaultSQLMaxStatementBytes
	}
	if opts.SQLMaxScanRows <= 0 {
		opts.SQLMaxScanRows = DefaultSQLMaxScanRows
	}
	if opts.SQLMaxInsertRows <= 0 {
		opts.SQLMaxInsertRows = DefaultSQLMaxInsertRows
	}
	if opts.SubmitTimeout <= 0 {
		opts.SubmitTimeout = feed.DefaultSubmitTimeout
	}
	f := promauto.With(reg)
	a := &API{opts: opts, maxPageBytes: opts.MaxPageBytes, logger: opts.Logger.With("component", "httpapi"), stopping: make(chan struct{}), m: &metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_http_requests_total", Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		// From sub-millisecond reads to multi-second long-polls and large writes.
		latency: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ingestd_http_request_duration_seconds", Help: "HTTP request latency by route pattern.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"route"}),
		sqlStatements: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_sql_statements_total", Help: "SQL statements by kind (create_table, alter_table, show_sync, show_columns, show_tables, truncate, drop_table, insert, drain, read, invalid) and outcome (ok, error).",
		}, []string{"statement", "outcome"}),
		sqlScanned: f.NewCounter(prometheus.CounterOpts{
			Name: "ingestd_sql_scanned_rows_total", Help: "Rows SQL reads looked at (in their time range, before tag filters and ORDER BY).",
		}),
		sqlRefused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_sql_limit_refusals_total", Help: "SQL requests refused at a limit: statement_bytes (--sql-max-statement-bytes), insert_rows (--sql-max-insert-rows), columns (--feed-max-columns-per-table) or scan_rows (--sql-max-scan-rows).",
		}, []string{"limit"}),
	}}
	r := chi.NewRouter()
	r.Use(a.influxHeaders, a.instrument, strictQuery)
	r.Get("/ping", a.ping)
	r.Head("/ping", a.ping)
	r.Get("/health", a.health)
	r.Get("/query", a.query)
	r.Post("/query", a.query)
	if opts.WriteV1 != nil {
		r.Method(http.MethodPost, "/write", opts.WriteV1)
	}
	if opts.WriteV2 != nil {
		r.Method(http.MethodPost, "/api/v2/write", opts.WriteV2)
	}
	if opts.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", opts.Metrics)
	}
	r.Get("/api.yaml", a.spec)
	r.Get("/api/v1/tables", a.listTables)
	r.Route("/api/v1/tables/{table}", func(r chi.Router) {
		r.Get("/", a.getTable)
		r.Put("/", a.putTable)
		r.Delete("/", a.deleteTable)
		r.Get("/sync", a.getSync)
		r.Put("/sync", a.putSync)
		r.Post("/truncate", a.truncate)
		r.Get("/rows", a.rows)
		r.Get("/consumers", a.listConsumers)
		r.Delete("/consumers/{consumer}", a.deleteConsumer)
	})
	r.Get("/drain", a.drain)
	r.Get("/api/v1/sql", a.sql)
	r.Post("/api/v1/sql", a.sql)
	a.router = r
	return a
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
	a.stopOnce.Do(func() { close(a.stopping) })
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
// request as if a parameter were absent (SPEC §8).
func strictQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			writeClientErr(w, CodeInvalidParameter, "query string cannot be read: "+feed.QuoteInput(err.Error()))
			return
		}
		for k, vs := range q {
			if len(vs) > 1 {
				writeClientErr(w, CodeInvalidParameter, "parameter "+feed.QuoteInput(k)+" is given more than once")
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
		a.m.requests.WithLabelValues(route, strconv.Itoa(sw.code)).Inc()
		a.m.latency.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

func (a *API) ping(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }

func (a *API) health(w http.ResponseWriter, _ *http.Request) {
	body := map[string]any{"name": "ingestd", "version": Version, "checks": []any{}}
	if a.ready.Load() {
		body["status"], body["message"] = "pass", "ready for queries and writes"
		writeJSON(w, http.StatusOK, body)
		return
	}
	body["status"], body["message"] = "fail", "not ready (starting or stopping)"
	writeJSON(w, http.StatusServiceUnavailable, body)
}

func (a *API) spec(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(a.opts.APISpec)
}
