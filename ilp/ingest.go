package ilp

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ingestd/ingestd/feed"
)

// Appender is what the listeners need from the sequencer.
type Appender interface {
	// Submit queues a batch, blocking while the queue is full, and returns
	// a handle to wait for its commit.
	Submit(ctx context.Context, b *feed.Batch) (*feed.Pending, error)
}

// queueDelayer is an Appender that estimates how long a write submitted
// now waits to be taken (feed.Sequencer): the HTTP write handler refuses
// writes past Config.MaxWriteDelay with it (overload).
type queueDelayer interface {
	QueueDelay() time.Duration
}

// Ingest serves ILP over HTTP (HandlerV1, HandlerV2) and TCP (ServeTCP).
// Safe for concurrent use.
type Ingest struct {
	cfg           Config
	app           Appender
	submitTimeout time.Duration
	logger        *slog.Logger
	m             *metrics
	now           func() time.Time
	logLimit      rateLimit
	// acceptLog rate-limits the TCP listener's logs of failed accepts,
	// refused and evicted connections, and connections ended (idle, read
	// errors, a grant's end).
	acceptLog rateLimit
	// storeLog rate-limits the logs of batches the sequencer failed to
	// take or commit (a full or failing disk fails every write).
	storeLog rateLimit
	// inflight holds the bytes of HTTP write bodies
	// (Config.MaxInflightWriteBytes).
	inflight *writeQuota
	// tcpBudget holds the bytes of the TCP connections' batches and
	// partial lines (Config.TCPMaxBufferedBytes).
	tcpBudget *tcpBudget
	auth      Auth
	// parsers are the HTTP handler's idle Parsers (parserPool).
	parsers parserPool
	// caches is the budget of every Parser's caches.
	caches *cacheBudget
	// overload refuses HTTP writes while writes take longer than
	// Config.MaxWriteDelay.
	overload *overload
	// slots bound the HTTP write bodies parsed at once
	// (Config.WriteConcurrency).
	slots *parseSlots
}

// Grant limits what one writer may write (docs/operations.md#scopes); package
// httpapi/auth's *Grant is one. Implementations are safe for concurrent
// use.
type Grant interface {
	// CheckWrite returns nil when the writer may write table now, else
	// an error saying why (shown to the client; an error with Status()
	// int and Code() string methods sets the HTTP status and code, else
	// 403 forbidden). remote is the peer's address, for the audit log.
	CheckWrite(table, remote string) error
	// Done is closed when the grant ends (its token revoked or changed):
	// a TCP connection holding it is then closed.
	Done() <-chan struct{}
}

// Auth connects the listeners to access control. The zero Auth admits
// every writer for every table, as without an auth file.
type Auth struct {
	// Request returns the grant a write request was admitted with (the
	// router checked its credentials); nil, or a nil result, is no limit.
	Request func(r *http.Request) Grant
	// Conn admits a new TCP connection (completing any TLS handshake) and
	// returns its grant (nil: no limit); an error closes the connection,
	// counted as refused. nil admits every connection.
	Conn func(ctx context.Context, c net.Conn) (Grant, error)
}

// SetAuth sets the access control of the listeners; call it before they
// serve.
func (in *Ingest) SetAuth(a Auth) { in.auth = a }

// New returns an Ingest handing batches to app. submitTimeout bounds the
// wait for room in the sequencer queue before HTTP answers 503. logger may
// be nil (discard); reg may be nil (no metrics).
func New(cfg Config, app Appender, submitTimeout time.Duration, logger *slog.Logger, reg prometheus.Registerer) (*Ingest, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	slots := cfg.WriteConcurrency
	if slots == 0 {
		slots = runtime.GOMAXPROCS(0)
	}
	var delay func() time.Duration
	if d, ok := app.(queueDelayer); ok {
		delay = d.QueueDelay
	}
	ov, ps := newOverload(cfg.MaxWriteDelay, delay), newParseSlots(slots, cfg.WriteQueueTimeout, cfg.OverloadQueueTimeout)
	ov.onRefusing = ps.shorten
	m := newMetrics(reg)
	caches := &cacheBudget{limit: cfg.MaxParserCacheBytes, refused: m.cacheRefused}
	promauto.With(reg).NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ingestd_ilp_parser_cache_bytes",
		Help: "Bytes the caches of all ILP parsers hold (known series with their field keys, interned keys); at most --ilp-max-parser-cache-bytes.",
	}, func() float64 { return float64(caches.used.Load()) })
	return &Ingest{
		caches: caches,
		cfg:    cfg, app: app, submitTimeout: submitTimeout, overload: ov,
		logger: logger.With("component", "ilp"), m: m, now: time.Now,
		tcpBudget: newTCPBudget(cfg.TCPMaxBufferedBytes, m.tcpBuffered, m.tcpBudgetWaits),
		logLimit:  rateLimit{every: time.Second}, acceptLog: rateLimit{every: time.Second},
		storeLog: rateLimit{every: time.Second},
		inflight: newWriteQuota(cfg.MaxInflightWriteBytes), parsers: make(parserPool, pooledParsers),
		slots: ps,
	}, nil
}

// rateLimit lets one event through per interval and counts the rest.
type rateLimit struct {
	every      time.Duration
	mu         sync.Mutex // guards last and suppressed
	last       time.Time
	suppressed int
}

// allow reports whether to log now and how many events were suppressed
// since the last one logged.
func (r *rateLimit) allow(now time.Time) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.last) < r.every {
		r.suppressed++
		return false, 0
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	return true, n
}
