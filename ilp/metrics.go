package ilp

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ingestd/ingestd/feed"
)

// Transports, the closed label set of the transport label.
const (
	transportHTTP = "http"
	transportTCP  = "tcp"
)

// Reasons the TCP listener closes a connection itself, the closed label
// set of ingestd_ilp_tcp_connections_closed_total.
const (
	closedIdleTimeout = "idle_timeout"
	closedEvicted     = "evicted"
	// closedRefused: Auth.Conn refused the connection (TLS handshake
	// failed, the auth file's TCP rule does not admit it, or protected
	// mode: a peer not on loopback without an auth file).
	closedRefused = "refused"
	// closedRevoked: the connection's grant ended (token revoked or its
	// scopes changed); the peer may reconnect under the new rules.
	closedRevoked = "revoked"
)

type metrics struct {
	lines        *prometheus.CounterVec
	bytes        *prometheus.CounterVec
	rejected     *prometheus.CounterVec
	conns        prometheus.Gauge
	closed       *prometheus.CounterVec
	acceptErrors prometheus.Counter
	// inflight is the bytes of HTTP write bodies held; inflightRefused
	// counts writes answered 503 for want of room.
	inflight        prometheus.Gauge
	inflightRefused prometheus.Counter
	// overloadRefused counts writes answered 503 unparsed because writes
	// take longer than Config.MaxWriteDelay (overload), by cause
	// (causeShare, causeStalled).
	overloadRefused *prometheus.CounterVec
	// queueRefused counts writes answered 503 because no parse slot came
	// free within Config.WriteQueueTimeout.
	queueRefused prometheus.Counter
	// tooLarge counts writes answered 413: a body over Config.MaxBodyBytes.
	tooLarge prometheus.Counter
	// tcpBuffered is the TCP budget's bytes held; tcpBudgetWaits counts
	// the batches that waited for room in it.
	tcpBuffered    prometheus.Gauge
	tcpBudgetWaits prometheus.Counter
	// cacheRefused counts parser cache entries not kept for want of room
	// under Config.MaxParserCacheBytes.
	cacheRefused prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		lines: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_ilp_lines_total", Help: "ILP lines accepted (durably committed), by transport.",
		}, []string{"transport"}),
		bytes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_ilp_wire_bytes_total", Help: "Bytes received as sent on the wire (before decompression), by transport.",
		}, []string{"transport"}),
		rejected: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_ilp_rejected_lines_total", Help: "ILP lines rejected, by transport and reason.",
		}, []string{"transport", "reason"}),
		conns: f.NewGauge(prometheus.GaugeOpts{
			Name: "ingestd_ilp_tcp_connections", Help: "Open ILP TCP connections.",
		}),
		closed: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_ilp_tcp_connections_closed_total",
			Help: "ILP TCP connections the server closed, by reason: idle_timeout (nothing sent for --ilp-tcp-idle-timeout), evicted (of the address holding the most, the one longest without a complete line, to make room at --ilp-tcp-max-conns), refused (TLS handshake failed, the auth file's TCP rule does not admit it, or protected mode: a peer not on loopback without --auth-file), revoked (its token was revoked or changed).",
		}, []string{"reason"}),
		acceptErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "ingestd_ilp_tcp_accept_errors_total",
			Help: "Failed accepts on the ILP TCP listener (e.g. out of file descriptors), each retried after a backoff.",
		}),
		inflight: f.NewGauge(prometheus.GaugeOpts{
			Name: "ingestd_http_write_inflight_bytes",
			Help: "Bytes of HTTP write bodies held (after decompression, as they arrive, until the write is answered) and of their parsed form's estimates (held before the parse); at most --http-max-inflight-write-bytes.",
		}),
		inflightRefused: f.NewCounter(prometheus.CounterOpts{
			Name: "ingestd_http_write_inflight_refused_total",
			Help: "HTTP writes answered 503 because their body found no room under --http-max-inflight-write-bytes within --feed-submit-timeout.",
		}),
		overloadRefused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_http_write_overload_refused_total",
			Help: "HTTP writes answered 503 with Retry-After, unparsed, because writes took longer than --http-write-max-delay in the server, by cause: share (the share refused while writes are slower than the bound), stalled (the sequencer's queue delay is over the bound: every write refused).",
		}, []string{"cause"}),
		queueRefused: f.NewCounter(prometheus.CounterOpts{
			Name: "ingestd_http_write_queue_refused_total",
			Help: "HTTP writes answered 503 with Retry-After because their read body waited --http-write-queue-timeout (--http-write-overload-queue-timeout while writes are being refused as overloaded) for one of --http-write-concurrency parse slots, or was predicted to wait longer; nothing of them was written.",
		}),
		tcpBuffered: f.NewGauge(prometheus.GaugeOpts{
			Name: "ingestd_ilp_tcp_buffered_bytes",
			Help: "Bytes the ILP TCP connections hold: lines parsed into batches not yet committed, and partial lines past their first 64 KiB; at most --ilp-tcp-max-buffered-bytes.",
		}),
		cacheRefused: f.NewCounter(prometheus.CounterOpts{
			Name: "ingestd_ilp_parser_cache_refused_total",
			Help: "ILP parser cache entries (a known series, its field keys, an interned key) not kept because the caches of all parsers held --ilp-max-parser-cache-bytes; their lines parse all the same.",
		}),
		tcpBudgetWaits: f.NewCounter(prometheus.CounterOpts{
			Name: "ingestd_ilp_tcp_buffered_waits_total",
			Help: "Times an ILP TCP connection stopped reading until the other connections' commits gave back room under --ilp-tcp-max-buffered-bytes (its own batch submitted first).",
		}),
		tooLarge: f.NewCounter(prometheus.CounterOpts{
			Name: "ingestd_http_write_too_large_total",
			Help: "HTTP writes answered 413 because their body (after gzip decompression) exceeded --max-body-bytes; nothing of them was written.",
		}),
	}
	for _, r := range []string{closedIdleTimeout, closedEvicted, closedRefused, closedRevoked} {
		m.closed.WithLabelValues(r)
	}
	for _, c := range []string{causeShare, causeStalled} {
		m.overloadRefused.WithLabelValues(c)
	}
	for _, t := range []string{transportHTTP, transportTCP} {
		m.lines.WithLabelValues(t)
		m.bytes.WithLabelValues(t)
		for _, r := range reasons {
			m.rejected.WithLabelValues(t, r)
		}
	}
	return m
}

// rejectReason maps a sequencer rejection to its reason label.
func rejectReason(r *feed.RejectError) string {
	switch {
	case errors.Is(r.Err, feed.ErrFieldTypeConflict):
		return ReasonFieldType
	case errors.Is(r.Err, feed.ErrTagFieldConflict):
		return ReasonTagField
	case errors.Is(r.Err, feed.ErrColumnLimit):
		return ReasonColumnLimit
	case errors.Is(r.Err, feed.ErrSeriesLimit):
		return ReasonSeriesLimit
	case errors.Is(r.Err, feed.ErrTableLimit):
		return ReasonTableLimit
	case errors.Is(r.Err, feed.ErrInvalidName):
		return ReasonInvalidName
	case errors.Is(r.Err, feed.ErrBeyondRetention):
		return ReasonBeyondRetention
	case errors.Is(r.Err, feed.ErrTimeRange):
		return ReasonTimestamp
	case errors.Is(r.Err, feed.ErrInvalidValue):
		return ReasonInvalidValue
	}
	return ReasonInvalidTable
}
