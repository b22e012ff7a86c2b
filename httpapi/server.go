package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Default values of Config.
const (
	DefaultMaxConns                 = 4096
	DefaultMaxConnsPerClient        = 256
	DefaultWriteTimeout             = 60 * time.Second
	DefaultMaxResponseBytesInflight = 128 << 20
	// DefaultMaxResponseBytesPerClient is half the default budget (four
	// default pages): one host that does not read its pages leaves the
	// other half to every other client.
	DefaultMaxResponseBytesPerClient = 64 << 20
	DefaultReadHeaderTimeout         = 10 * time.Second
	DefaultBodyTimeout               = 10 * time.Second
	DefaultBodyMinBytesPerSecond     = 16 << 10
	DefaultIdleTimeout               = 2 * time.Minute
	DefaultMaxHeaderBytes            = 64 << 10
	DefaultDrainMaxPageBytes         = 16 << 20
	DefaultSQLMaxStatementBytes      = 1 << 20
	DefaultSQLMaxScanRows            = 1_000_000
	DefaultSQLMaxInsertRows          = 10_000
	// DefaultSQLMaxInflightBytes holds three statements of
	// DefaultSQLMaxStatementBytes at sqlParsedFactor.
	DefaultSQLMaxInflightBytes = 256 << 20
)

// Config bounds what HTTP clients can hold: connections, time per request
// phase, header bytes, the bytes of a drain page and of the pages being
// written (docs/security.md#connections).
type Config struct {
	// MaxConns caps open HTTP connections. A connection accepted at the
	// cap closes the evictable connection (one kept alive between
	// requests, or one whose request or TLS handshake has not arrived
	// whole) that has waited the longest to make room; when none is
	// evictable it is refused: answered 503 with Retry-After and closed,
	// or over TLS closed without an answer.
	MaxConns int
	// MaxConnsPerClient caps the open connections of one client IP
	// address the same way: past it, a new connection of that address
	// closes that address's longest-waiting evictable connection, or is
	// refused.
	MaxConnsPerClient int
	// WriteTimeout is how long a response may take to be written, counted
	// from its first byte (not from the request: a long-poll's wait is
	// not counted). A client that does not read it in time is cut off.
	WriteTimeout time.Duration
	// MaxResponseBytesInflight bounds the bytes of the drain, rows and SQL
	// pages being built or written at once (Options.MaxResponseBytesInflight).
	MaxResponseBytesInflight int64
	// MaxResponseBytesPerClient bounds the part of it one client IP
	// address holds (Options.MaxResponseBytesPerClient).
	MaxResponseBytesPerClient int64
	// ReadHeaderTimeout is how long a request's line and headers may take
	// to arrive (counted from the connection's first byte wait).
	ReadHeaderTimeout time.Duration
	// BodyTimeout and BodyMinBytesPerSecond bound how long a request body
	// may take: the body must have arrived BodyTimeout after the handler
	// began reading it, plus one second per BodyMinBytesPerSecond bytes
	// received, so a body trickling in slower than that rate is cut off
	// (the connection is closed; a write answers 408 if it still can);
	// the credit of a fast start is capped, so a body that stops arriving
	// is cut off within 2 × BodyTimeout.
	BodyTimeout           time.Duration
	BodyMinBytesPerSecond int64
	// IdleTimeout closes a keep-alive connection that waits this long for
	// its next request.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps a request's line and headers in bytes (431 past
	// it and the 4 KiB net/http reads beyond it).
	MaxHeaderBytes int
	// DrainMaxPageBytes ends a drain page before the row that would take
	// its rows past this many bytes (Options.MaxPageBytes).
	DrainMaxPageBytes int
	// SQLMaxStatementBytes bounds a POST /api/v1/sql body (JSON or form,
	// as sent) and a GET's q, in bytes (413 past it).
	SQLMaxStatementBytes int
	// SQLMaxScanRows bounds the rows of its time range a SQL read with a
	// tag filter or ORDER BY looks at (400 scan_limit past it).
	SQLMaxScanRows int
	// SQLMaxInsertRows bounds the rows of one SQL INSERT (413 past it).
	SQLMaxInsertRows int
	// SQLMaxInflightBytes bounds what the SQL statements being parsed and
	// run hold at once, each counted as sqlParsedFactor times its bytes
	// (Options.SQLMaxInflightBytes).
	SQLMaxInflightBytes int64
	// StatusSampleInterval is how often the status page's sampler records
	// each table's committed points and the commit latency, and how often
	// the page refreshes itself.
	StatusSampleInterval time.Duration
	// StatusSamples is how many samples the status page keeps (its charts
	// cover StatusSamples × StatusSampleInterval, its rates the last
	// StatusRateWindow of it); each sample holds one counter per table (at
	// most --feed-max-tables).
	StatusSamples int
	// StatusMaxTables is how many tables (by name) the status page lists.
	StatusMaxTables int
	// StatusMaxConsumers is how many named consumers (the laggiest) the
	// status page lists.
	StatusMaxConsumers int
	// MaxDatabases bounds the databases CREATE DATABASE records for SHOW
	// DATABASES.
	MaxDatabases int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		MaxConns:                  DefaultMaxConns,
		MaxConnsPerClient:         DefaultMaxConnsPerClient,
		WriteTimeout:              DefaultWriteTimeout,
		MaxResponseBytesInflight:  DefaultMaxResponseBytesInflight,
		MaxResponseBytesPerClient: DefaultMaxResponseBytesPerClient,
		ReadHeaderTimeout:         DefaultReadHeaderTimeout,
		BodyTimeout:               DefaultBodyTimeout,
		BodyMinBytesPerSecond:     DefaultBodyMinBytesPerSecond,
		IdleTimeout:               DefaultIdleTimeout,
		MaxHeaderBytes:            DefaultMaxHeaderBytes,
		DrainMaxPageBytes:         DefaultDrainMaxPageBytes,
		SQLMaxStatementBytes:      DefaultSQLMaxStatementBytes,
		SQLMaxScanRows:            DefaultSQLMaxScanRows,
		SQLMaxInsertRows:          DefaultSQLMaxInsertRows,
		SQLMaxInflightBytes:       DefaultSQLMaxInflightBytes,
		StatusSampleInterval:      DefaultStatusSampleInterval,
		StatusSamples:             DefaultStatusSamples,
		StatusMaxTables:           DefaultStatusMaxTables,
		StatusMaxConsumers:        DefaultStatusMaxConsumers,
		MaxDatabases:              DefaultMaxDatabases,
	}
}

// RegisterFlags registers the HTTP server's flags on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxConns, "http-max-conns", c.MaxConns, "most open HTTP connections; at the cap a new one closes the longest-waiting idle or not-yet-requesting one, or is refused (503, or closed over TLS) when none is")
	fs.IntVar(&c.MaxConnsPerClient, "http-max-conns-per-client", c.MaxConnsPerClient, "most open HTTP connections of one client IP address; past it as at --http-max-conns, among that address's connections")
	fs.DurationVar(&c.WriteTimeout, "http-write-timeout", c.WriteTimeout, "how long a response may take to be written from its first byte (a long-poll's wait is not counted); a client reading slower is cut off")
	fs.Int64Var(&c.MaxResponseBytesPerClient, "http-max-response-bytes-per-client", c.MaxResponseBytesPerClient, "the part of --http-max-response-bytes-inflight one client IP address may hold (at most all of it; behind a reverse proxy every client has its address: raise it to the budget)")
	fs.Int64Var(&c.MaxResponseBytesInflight, "http-max-response-bytes-inflight", c.MaxResponseBytesInflight, "bytes of drain, rows and SQL pages and table lists being built or written at once; a page reserves --drain-max-page-bytes (a table list its size) before it is built and waits up to 1s for room, then gets 503")
	fs.DurationVar(&c.ReadHeaderTimeout, "http-read-header-timeout", c.ReadHeaderTimeout, "how long a request's line and headers may take to arrive")
	fs.DurationVar(&c.BodyTimeout, "http-body-timeout", c.BodyTimeout, "how long a request body may take, plus 1s per --http-body-min-bytes-per-second bytes received; a body that stops arriving is cut off within twice this, however much of it came before")
	fs.Int64Var(&c.BodyMinBytesPerSecond, "http-body-min-bytes-per-second", c.BodyMinBytesPerSecond, "slowest average rate in bytes per second a request body may arrive at past --http-body-timeout")
	fs.DurationVar(&c.IdleTimeout, "http-idle-timeout", c.IdleTimeout, "close a keep-alive HTTP connection idle this long")
	fs.IntVar(&c.MaxHeaderBytes, "http-max-header-bytes", c.MaxHeaderBytes, "largest request line and headers in bytes (431 past it, plus the 4 KiB Go's HTTP server reads beyond it)")
	fs.DurationVar(&c.StatusSampleInterval, "status-sample-interval", c.StatusSampleInterval, "how often the status page at / samples ingest rates and commit latency, and refreshes itself")
	fs.IntVar(&c.StatusSamples, "status-samples", c.StatusSamples, "samples the status page keeps per table for its charts (1..10000); its rates average the last minute of them")
	fs.IntVar(&c.MaxDatabases, "query-max-databases", c.MaxDatabases, "databases CREATE DATABASE records for SHOW DATABASES (they do not namespace tables)")
	fs.IntVar(&c.StatusMaxTables, "status-max-tables", c.StatusMaxTables, "tables the status page lists, by name (1..100000)")
	fs.IntVar(&c.StatusMaxConsumers, "status-max-consumers", c.StatusMaxConsumers, "named consumers the status page lists, laggiest first (1..100000)")
	fs.IntVar(&c.DrainMaxPageBytes, "drain-max-page-bytes", c.DrainMaxPageBytes, "a drain page ends before the row that would take its rows past this many bytes (a page holds at least one row)")
	fs.IntVar(&c.SQLMaxStatementBytes, "sql-max-statement-bytes", c.SQLMaxStatementBytes, "largest POST /api/v1/sql body (or GET q) in bytes (413 past it)")
	fs.IntVar(&c.SQLMaxInsertRows, "sql-max-insert-rows", c.SQLMaxInsertRows, "most rows in one SQL INSERT (413 past it)")
	fs.Int64Var(&c.SQLMaxInflightBytes, "sql-max-inflight-bytes", c.SQLMaxInflightBytes, "bytes the SQL statements being parsed and run hold at once, each counted as 80 times its own bytes (its parsed form), half of them for one client IP address; a statement without room within 1s is answered 503 (bytes)")
	fs.IntVar(&c.SQLMaxScanRows, "sql-max-scan-rows", c.SQLMaxScanRows, "most rows of its time range a SQL read with a tag filter or ORDER BY may look at (400 scan_limit past it)")
}

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	switch {
	case c.MaxConns < 1:
		return errors.New("httpapi: --http-max-conns must be positive")
	case c.MaxConnsPerClient < 1:
		return errors.New("httpapi: --http-max-conns-per-client must be positive")
	case c.WriteTimeout <= 0:
		return errors.New("httpapi: --http-write-timeout must be positive")
	case c.MaxResponseBytesInflight < 1:
		return errors.New("httpapi: --http-max-response-bytes-inflight must be positive")
	case c.MaxResponseBytesPerClient < 1:
		return errors.New("httpapi: --http-max-response-bytes-per-client must be positive")
	case c.ReadHeaderTimeout <= 0:
		return errors.New("httpapi: --http-read-header-timeout must be positive")
	case c.BodyTimeout <= 0:
		return errors.New("httpapi: --http-body-timeout must be positive")
	case c.BodyMinBytesPerSecond < 1:
		return errors.New("httpapi: --http-body-min-bytes-per-second must be positive")
	case c.IdleTimeout <= 0:
		return errors.New("httpapi: --http-idle-timeout must be positive")
	case c.MaxHeaderBytes < 1:
		return errors.New("httpapi: --http-max-header-bytes must be positive")
	case c.DrainMaxPageBytes < 1:
		return errors.New("httpapi: --drain-max-page-bytes must be positive")
	case c.SQLMaxStatementBytes < 1:
		return errors.New("httpapi: --sql-max-statement-bytes must be positive")
	case c.SQLMaxScanRows < 1:
		return errors.New("httpapi: --sql-max-scan-rows must be positive")
	case c.SQLMaxInsertRows < 1:
		return errors.New("httpapi: --sql-max-insert-rows must be positive")
	case c.SQLMaxInflightBytes < 1:
		return errors.New("httpapi: --sql-max-inflight-bytes must be positive")
	case c.StatusSampleInterval < 100*time.Millisecond:
		return errors.New("httpapi: --status-sample-interval must be at least 100ms")
	case c.StatusSamples < 1 || c.StatusSamples > 10000:
		return errors.New("httpapi: --status-samples must be 1..10000")
	case c.MaxDatabases < 1:
		return errors.New("httpapi: --query-max-databases must be positive")
	case c.StatusMaxTables < 1 || c.StatusMaxTables > 100000:
		return errors.New("httpapi: --status-max-tables must be 1..100000")
	case c.StatusMaxConsumers < 1 || c.StatusMaxConsumers > 100000:
		return errors.New("httpapi: --status-max-consumers must be 1..100000")
	}
	return nil
}

// Reasons the server closes a connection itself, the closed label set of
// ingestd_http_connections_closed_total.
const (
	closedEvicted          = "evicted"
	closedEvictedPerClient = "evicted_per_client"
	closedIdleTimeout      = "idle_timeout"
	closedHeaderTimeout    = "header_timeout"
	closedBodyTimeout      = "body_timeout"
	closedWriteTimeout     = "write_timeout"
)

// Reasons a connection is refused, the closed label set of
// ingestd_http_connections_refused_total.
const (
	refusedMaxConns  = "max_conns"
	refusedPerClient = "per_client"
)

type serverMetrics struct {
	// conns counts open connections by state: new (no request yet),
	// active (reading or serving a request), idle (kept alive between
	// requests).
	conns        *prometheus.GaugeVec
	refused      *prometheus.CounterVec
	closed       *prometheus.CounterVec
	acceptErrors prometheus.Counter
}

// Server is the HTTP server with Config's limits. Serve, Shutdown and
// Close may be called from different goroutines.
type Server struct {
	cfg    Config
	srv    *http.Server
	m      *serverMetrics
	logger *slog.Logger
}

// NewServer returns a server of h with cfg's limits. logger may be nil
// (discard); reg may be nil (no metrics). It returns cfg.Validate's error.
func NewServer(cfg Config, h http.Handler, logger *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	f := promauto.With(reg)
	s := &Server{cfg: cfg, logger: logger.With("component", "http"), m: &serverMetrics{
		conns: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ingestd_http_connections", Help: "Open HTTP connections by state: new (no request yet), active (reading or serving a request), idle (kept alive between requests).",
		}, []string{"state"}),
		refused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_http_connections_refused_total",
			Help: "HTTP connections refused (503 and closed; over TLS closed) because no connection was evictable, by reason: max_conns (--http-max-conns), per_client (--http-max-conns-per-client).",
		}, []string{"reason"}),
		closed: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_http_connections_closed_total",
			Help: "HTTP connections the server closed, by reason: evicted (the longest-waiting idle or not-yet-requesting one, to make room at --http-max-conns), evicted_per_client (the same at --http-max-conns-per-client), idle_timeout, header_timeout, body_timeout, write_timeout (--http-write-timeout).",
		}, []string{"reason"}),
		acceptErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "ingestd_http_accept_errors_total",
			Help: "Failed accepts on the HTTP listener (e.g. out of file descriptors), each retried after a backoff.",
		}),
	}}
	for _, r := range []string{closedEvicted, closedEvictedPerClient, closedIdleTimeout, closedHeaderTimeout, closedBodyTimeout, closedWriteTimeout} {
		s.m.closed.WithLabelValues(r)
	}
	for _, r := range []string{refusedMaxConns, refusedPerClient} {
		s.m.refused.WithLabelValues(r)
	}
	for _, st := range []http.ConnState{http.StateNew, http.StateActive, http.StateIdle} {
		s.m.conns.WithLabelValues(stateLabel(st))
	}
	s.srv = &http.Server{
		Handler:           s.bodyDeadline(s.writeDeadline(h)),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ConnState: func(c net.Conn, st http.ConnState) {
			if st == http.StateIdle {
				// The response is written whole: the next one's
				// deadline starts at its own first byte.
				_ = c.SetWriteDeadline(time.Time{})
			}
			if tc, ok := c.(*tls.Conn); ok {
				c = tc.NetConn()
			}
			if tc, ok := c.(*trackedConn); ok {
				tc.setState(st)
			}
		},
		// net/http logs a line per failed TLS handshake, which any
		// client can cause at will.
		ErrorLog: slog.NewLogLogger(&limitedHandler{Handler: s.logger.Handler(), every: time.Second}, slog.LevelWarn),
	}
	return s, nil
}

// Serve serves HTTP on ln until Shutdown or Close, returning
// http.ErrServerClosed then. Failed accepts that may succeed later
// (EMFILE, ENFILE) are retried after a backoff (net/http's), counted.
func (s *Server) Serve(ln net.Listener) error {
	return s.srv.Serve(s.newLimitListener(ln, false))
}

// ServeTLS is Serve over TLS with cfg (HTTP/1.1 only: cfg's NextProtos
// should not offer h2). The connection limits and timeouts count the
// connections under TLS, handshake included: a handshake must end within
// --http-read-header-timeout like a request's headers, and a connection
// mid-handshake is evictable like one whose headers have not arrived. A
// connection refused at a cap is closed without an answer: a TLS client
// could not read a plaintext 503.
func (s *Server) ServeTLS(ln net.Listener, cfg *tls.Config) error {
	return s.srv.Serve(tls.NewListener(s.newLimitListener(ln, true), cfg))
}

func (s *Server) newLimitListener(ln net.Listener, isTLS bool) *limitListener {
	return &limitListener{Listener: ln, s: s, tls: isTLS, conns: map[*trackedConn]struct{}{}, perClient: map[netip.Addr]int{}}
}

// Shutdown stops accepting, closes idle connections and waits for active
// ones until ctx ends (http.Server.Shutdown).
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Close closes the listener and every connection at once.
func (s *Server) Close() error { return s.srv.Close() }

// limitListener enforces Config.MaxConns and Config.MaxConnsPerClient
// and tracks each connection's state for eviction and for counting
// timeouts.
//
// At a cap the connection evicted is the one that has waited the longest
// among those kept alive between requests and those whose first request
// (or TLS handshake) has not arrived whole, as nginx reuses its "reusable"
// connections (keep-alive ones and those waiting for a request) when
// worker_connections run out: sockets opened and left silent, or fed half
// a request, cannot hold the cap against clients that send theirs, whose
// connections are the newest. Only connections serving a request are
// never evicted.
type limitListener struct {
	net.Listener
	s *Server
	// tls is set under a TLS listener: refusals close without an answer.
	tls   bool
	mu    sync.Mutex // guards conns, live, perClient and each conn's evicted
	conns map[*trackedConn]struct{}
	live  int // connections in conns not evicted
	// perClient counts the connections in conns not evicted by client
	// address; an address with none has no entry.
	perClient map[netip.Addr]int
}

// refusalMaxConns and refusalPerClient answer a plaintext connection
// refused at a cap; the body ends where the connection does.
const (
	refusalMaxConns = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" +
		`{"code":"unavailable","message":"too many open connections (--http-max-conns); retry later"}` + "\n"
	refusalPerClient = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" +
		`{"code":"unavailable","message":"too many open connections from this address (--http-max-conns-per-client); retry later"}` + "\n"
)

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				l.s.m.acceptErrors.Inc()
			}
			return nil, err
		}
		tc := &trackedConn{Conn: c, l: l, client: clientAddr(c)}
		tc.idleSince.Store(time.Now().UnixNano())
		tc.state.Store(int64(http.StateNew))
		victim, evicted, refused := l.admit(tc)
		if refused != "" {
			l.refuse(c, refused)
			continue
		}
		l.s.m.conns.WithLabelValues(stateLabel(http.StateNew)).Inc()
		if victim != nil {
			l.s.m.closed.WithLabelValues(evicted).Inc()
			_ = victim.Conn.Close() // net/http's read fails; it then closes tc
		}
		return tc, nil
	}
}

// admit takes tc in under the caps: first its address's, then the
// server's. At a cap it returns the connection to close to make room and
// the reason to count it under, or, none being evictable, the refusal
// reason (tc is then not taken in).
func (l *limitListener) admit(tc *trackedConn) (victim *trackedConn, evicted, refused string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.perClient[tc.client] >= l.s.cfg.MaxConnsPerClient:
		victim = l.longestWaitingLocked(tc.client, true)
		evicted, refused = closedEvictedPerClient, refusedPerClient
	case l.live >= l.s.cfg.MaxConns:
		victim = l.longestWaitingLocked(netip.Addr{}, false)
		evicted, refused = closedEvicted, refusedMaxConns
	}
	if evicted != "" && victim == nil {
		return nil, "", refused
	}
	if victim != nil {
		victim.evicted = true
		l.uncountLocked(victim)
	}
	l.conns[tc] = struct{}{}
	l.live++
	l.perClient[tc.client]++
	return victim, evicted, ""
}

// uncountLocked takes tc out of the live counts. l.mu must be held.
func (l *limitListener) uncountLocked(tc *trackedConn) {
	l.live--
	if l.perClient[tc.client]--; l.perClient[tc.client] <= 0 {
		delete(l.perClient, tc.client)
	}
}

// longestWaitingLocked returns the evictable connection (idle between
// requests, or not past its first request's headers) that has waited the
// longest, of client only when ofClient; nil when none is. l.mu must be
// held.
func (l *limitListener) longestWaitingLocked(client netip.Addr, ofClient bool) *trackedConn {
	var victim *trackedConn
	for tc := range l.conns {
		if tc.evicted || ofClient && tc.client != client {
			continue
		}
		if st := http.ConnState(tc.state.Load()); st != http.StateIdle && st != http.StateNew {
			continue
		}
		if victim == nil || tc.idleSince.Load() < victim.idleSince.Load() {
			victim = tc
		}
	}
	return victim
}

// refuse counts a connection refused at a cap (reason) and closes it,
// answering 503 first unless it is to be TLS.
func (l *limitListener) refuse(c net.Conn, reason string) {
	l.s.m.refused.WithLabelValues(reason).Inc()
	if !l.tls {
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		msg := refusalMaxConns
		if reason == refusedPerClient {
			msg = refusalPerClient
		}
		_, _ = io.WriteString(c, msg)
	}
	_ = c.Close()
}

// clientAddr is the IP address of c's peer (an IPv4-mapped IPv6 address
// as IPv4); the zero Addr for a peer without one.
func clientAddr(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// trackedConn is a connection the limitListener counts. net/http reports
// its state (ConnState); Read classifies the timeout that ends it.
type trackedConn struct {
	net.Conn
	l      *limitListener
	client netip.Addr // the peer's IP address (clientAddr)
	// state is its http.ConnState among new, active and idle, stateGone
	// once closed; idleSince (Unix nanoseconds) is when it last became
	// idle (or was accepted).
	state     atomic.Int64
	idleSince atomic.Int64
	// readSinceIdle counts the bytes read since it last became idle.
	readSinceIdle atomic.Int64
	// timedOut is set at the idle, header or write timeout counted.
	timedOut  atomic.Bool
	closeOnce sync.Once
	// evicted is guarded by l.mu.
	evicted bool
}

// stateGone is trackedConn.state once the connection is closed.
const stateGone = -1

// stateLabel is the state label of ingestd_http_connections.
func stateLabel(st http.ConnState) string {
	switch st {
	case http.StateNew:
		return "new"
	case http.StateActive:
		return "active"
	}
	return "idle"
}

// setState records a state net/http reports and moves the connection
// between the state gauges.
func (tc *trackedConn) setState(st http.ConnState) {
	switch st {
	case http.StateNew, http.StateActive, http.StateIdle:
	default:
		tc.gone()
		return
	}
	if st == http.StateIdle {
		tc.readSinceIdle.Store(0)
		tc.idleSince.Store(time.Now().UnixNano())
	}
	for {
		old := tc.state.Load()
		if old == stateGone || old == int64(st) {
			return
		}
		if tc.state.CompareAndSwap(old, int64(st)) {
			tc.l.s.m.conns.WithLabelValues(stateLabel(http.ConnState(old))).Dec()
			tc.l.s.m.conns.WithLabelValues(stateLabel(st)).Inc()
			return
		}
	}
}

// gone takes a closed connection out of the state gauges (once).
func (tc *trackedConn) gone() {
	if old := tc.state.Swap(stateGone); old != stateGone {
		tc.l.s.m.conns.WithLabelValues(stateLabel(http.ConnState(old))).Dec()
	}
}

// Read counts the timeout that ends a connection waiting for a request
// (idle) or for its headers. Timeouts while a request is active are not
// counted here: net/http also ends its own background read with one, and
// deadlineBody counts the body's.
func (tc *trackedConn) Read(p []byte) (int, error) {
	n, err := tc.Conn.Read(p)
	tc.readSinceIdle.Add(int64(n))
	if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		return n, err
	}
	reason := ""
	switch http.ConnState(tc.state.Load()) {
	case http.StateNew:
		reason = closedHeaderTimeout
	case http.StateIdle:
		reason = closedHeaderTimeout
		if tc.readSinceIdle.Load() == 0 {
			reason = closedIdleTimeout
		}
	}
	if reason != "" && tc.timedOut.CompareAndSwap(false, true) {
		tc.l.s.m.closed.WithLabelValues(reason).Inc()
	}
	return n, err
}

// Write counts the write timeout (Config.WriteTimeout) that cuts off a
// client not reading its response.
func (tc *trackedConn) Write(p []byte) (int, error) {
	n, err := tc.Conn.Write(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && tc.timedOut.CompareAndSwap(false, true) {
		tc.l.s.m.closed.WithLabelValues(closedWriteTimeout).Inc()
	}
	return n, err
}

// Close closes the connection and frees its place under the cap.
func (tc *trackedConn) Close() error {
	err := tc.Conn.Close()
	tc.closeOnce.Do(func() {
		l := tc.l
		l.mu.Lock()
		delete(l.conns, tc)
		if !tc.evicted {
			l.uncountLocked(tc)
		}
		l.mu.Unlock()
		tc.gone()
	})
	return err
}

// bodyDeadline sets the read deadline of the request body as it is read:
// BodyTimeout after the first read plus one second per
// BodyMinBytesPerSecond bytes received.
//
// A handler may answer before reading its body (413 on the declared
// length, 400 on a bad parameter). net/http then reads up to 256 KiB of
// what is left before it writes the answer, or closes the connection after
// it when more is declared; it tells these apart by the request's own
// body type, so the original body is put back when the handler returns,
// and that read runs under the same deadline: a client declaring a body it
// never sends cannot hold the answer and the connection.
func (s *Server) bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		orig := r.Body
		db := &deadlineBody{ReadCloser: orig, rc: http.NewResponseController(w), s: s}
		r.Body = db
		next.ServeHTTP(w, r)
		r.Body = orig
		if !db.done {
			db.setDeadline()
		}
	})
}

// deadlineBody is a request body read under Config's body deadline.
type deadlineBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	s     *Server
	start time.Time
	n     int64
	// done is set at the first error (EOF included): net/http then owns
	// the connection's read deadline again.
	done bool
}

// setDeadline sets the connection's read deadline for what is left of
// the body: BodyTimeout from the first read, plus one second per
// BodyMinBytesPerSecond bytes received, and never more than twice
// BodyTimeout from now. The credit a body earns by arriving faster than
// the minimum rate is capped there: without the cap, 31 MiB sent at once
// bought a stalled upload half an hour (at 16 KiB/s), holding its share
// of --http-max-inflight-write-bytes; with it, a body that stops
// arriving is cut off within 2 × BodyTimeout, and from then on must keep
// the minimum rate on average.
func (b *deadlineBody) setDeadline() {
	now := time.Now()
	if b.start.IsZero() {
		b.start = now
	}
	cfg := &b.s.cfg
	allowed := cfg.BodyTimeout + time.Duration(float64(b.n)/float64(cfg.BodyMinBytesPerSecond)*float64(time.Second))
	deadline := b.start.Add(allowed)
	if most := now.Add(2 * cfg.BodyTimeout); deadline.After(most) {
		deadline = most
		b.start = most.Add(-allowed) // the credit beyond the cap is gone
	}
	_ = b.rc.SetReadDeadline(deadline)
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	b.setDeadline()
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	if err != nil {
		b.done = true
		if errors.Is(err, os.ErrDeadlineExceeded) {
			b.s.m.closed.WithLabelValues(closedBodyTimeout).Inc()
		}
	}
	return n, err
}

// writeDeadline sets the connection's write deadline, WriteTimeout, when
// the response's first byte is written (or, for a response without a
// body, when the handler returns and net/http writes its headers), not
// when the request arrives: a long-poll waits as long as it asks for, and
// then its page has WriteTimeout to be read. ConnState clears the deadline
// once the connection is idle again.
func (s *Server) writeDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dw := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: s.cfg.WriteTimeout}
		next.ServeHTTP(dw, r)
		dw.start()
	})
}

// deadlineWriter starts the write deadline at the first Write or Flush.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	started bool
}

func (d *deadlineWriter) start() {
	if !d.started {
		d.started = true
		_ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	}
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	d.start()
	return d.ResponseWriter.Write(p)
}

// FlushError flushes what is buffered (http.ResponseController.Flush).
func (d *deadlineWriter) FlushError() error {
	d.start()
	return d.rc.Flush()
}

// Unwrap returns the ResponseWriter for http.ResponseController.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// limitedHandler passes at most one record per interval (every) to
// Handler, by the records' times, and drops the rest: the next record
// passed carries the number dropped before it as "suppressed". It bounds
// the log lines a client can make net/http's server write (a failed TLS
// handshake is one). Safe for concurrent use; only Handle is limited.
type limitedHandler struct {
	slog.Handler
	every time.Duration

	mu         sync.Mutex // guards last and suppressed
	last       time.Time
	suppressed int
}

// Handle passes r on unless a record was passed less than every before it.
func (h *limitedHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	if !h.last.IsZero() && r.Time.Sub(h.last) < h.every {
		h.suppressed++
		h.mu.Unlock()
		return nil
	}
	n := h.suppressed
	h.last, h.suppressed = r.Time, 0
	h.mu.Unlock()
	if n > 0 {
		r.AddAttrs(slog.Int("suppressed", n))
	}
	return h.Handler.Handle(ctx, r)
}
