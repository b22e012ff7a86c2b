package jsstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/rowengine"
)

// opTimeout bounds one metadata operation (a KV read or update, a stream
// lookup); PublishTimeout bounds a commit's publish.
const opTimeout = 10 * time.Second

// record is a table name's entry in the meta bucket (key tableKey(name)),
// updated with compare-and-set on its revision: every DDL call is one
// update of it.
type record struct {
	// Name is the table's name, byte for byte (JSON would replace invalid
	// UTF-8 in Meta.Name).
	Name []byte `json:"name"`
	// Meta is the live instance's metadata or the tombstone; Meta.Seq is
	// a floor: no number at or below it is handed out again. Stored as
	// WireMeta (record.MarshalJSON).
	Meta     store.TableMeta `json:"-"`
	WireMeta metaWire        `json:"meta"`
	// Anchor is where the x_seq numbering of the name's stream stands
	// (follow.go); nil: from the stream's start, above Meta.Seq.
	Anchor *anchor `json:"anchor,omitempty"`
	// Stream and Subject are where the name's blocks are: the store's
	// blocks stream and the name's subject in it (placeOf).
	Stream  string `json:"stream"`
	Subject string `json:"subject"`
	// Born is the id of the instance that created the name (kept by
	// TRUNCATE, new after DROP + re-create): the consumers' generation.
	Born uint64 `json:"born,omitempty"`
	// Horizon is the live instance's history horizon (0 or 1: nothing
	// trimmed); Cutoff, when set, the highest retention cutoff swept.
	Horizon uint64 `json:"horizon,omitempty"`
	Cutoff  *int64 `json:"cutoff,omitempty"`
	// Writer is the id of the process that wrote the record last.
	Writer string `json:"writer,omitempty"`
	// Ended is the id of the name's last instance a TRUNCATE or DROP
	// ended (instance ids grow: every lower one ended too).
	Ended uint64 `json:"ended,omitempty"`
}

// table is the in-memory state of one table name.
type table struct {
	// name, stream and subject are the name, its stream and its subject
	// in the stream (fixed).
	name, stream, subject string
	// served is set when this node materialises the table
	// (Config.Materialise; fixed): its follower applies the stream to
	// the row cache. Otherwise the follower reads the messages' headers
	// only and numbers them, and reads are refused (store.ErrNotServed).
	served bool
	// rec is the name's record as this process knows it, rev its revision
	// in the bucket (0: not stored); Store.mu guards both (setRecord).
	rec record
	rev uint64
	// cached is the instance whose rows the cache holds (0: none);
	// Store.cacheMu guards it (syncCache).
	cached uint64
	// life serializes starting and stopping the follower.
	life sync.Mutex
	// commits numbers this process's commits and purges' dictionaries
	// (message ids).
	commits atomic.Uint64
	// f follows the stream into the cache (follow.go).
	f follower
	// ages places the live instance's messages in time (guarded by
	// f.fmu: the follower adds, the sweeps read), purged is the stream
	// sequence up to which they were purged (purgeAged, and the DDL calls
	// that end or start an instance).
	ages   ageIndex
	purged atomic.Uint64
	// due is the purge purgeAged planned and the record's anchor already
	// covers, made once Config.PurgeGrace has passed (sweeps only).
	due duePurge
	// anchored is the stream sequence of the record's anchor (setRecord):
	// the table's messages up to it may be purged, so a call waiting for
	// the follower to pass one of them stops waiting.
	anchored atomic.Uint64
	// chk coalesces and rate-bounds Beyond's checks (barrier.go).
	chk tableChecks
}

// Store is the JetStream backend of store.Backend (doc.go). The writer
// side is called by one goroutine at a time; every other method is safe
// for concurrent use.
type Store struct {
	cfg    Config
	logger *slog.Logger
	nc     *nats.Conn
	js     jetstream.JetStream
	meta   jetstream.KeyValue
	cache  *rowengine.Engine
	lock   *os.File
	node   string // this process's id in message ids
	// replicas is what the streams and buckets were created with.
	replicas int
	// maxMsg is the largest block message body; limits what the store
	// holds (Limits), fixed at Open.
	maxMsg int
	limits store.Limits

	// cacheMu serializes the cache's writer side (the followers' applies,
	// the writer's DDL, sweeps and horizons): one goroutine at a time, as
	// the row engine asks.
	cacheMu sync.Mutex

	mu     sync.Mutex        // guards byName and byTID (the writer changes them, readers look)
	byName map[string]*table // every name with a record
	byTID  map[uint64]*table // live instances
	// ended are the columns of the instances other processes ended, for
	// the calls the writer makes on them before it takes the report
	// (records.go); endedOrder bounds them (maxEnded). Guarded by mu.
	ended      map[uint64][]store.Column
	endedOrder []uint64
	// followFn is store.Shared's Follow callback (nil: none); mu guards it.
	followFn func(store.Followed)

	// idBlocks are the series ids reserved and not used yet, by
	// instance (SeriesID); idMu guards it, held across a reservation.
	idMu     sync.Mutex
	idBlocks map[uint64]idBlock

	// pending are the blocks of this process's Appends in flight, by
	// message id: the follower applies its own messages from them instead
	// of decoding the bodies it wrote (a message is what prepare encoded
	// from its block). pendingMu guards it.
	pendingMu sync.Mutex
	pending   map[string]*store.TableCommit

	// stopWatch ends the record watcher; watchDone is closed when it ended.
	stopWatch context.CancelFunc
	watchDone chan struct{}

	// sw moves the connection off a server JetStream is unreachable
	// through (switch.go).
	sw serverSwitch

	// chk tracks Beyond's checks in flight (barrier.go).
	chk checkState

	// later holds the purges of ended instances until their grace passed.
	later timers

	// gate is held by every call and closed by Close.
	gate store.CloseGate

	m metrics
}

// metrics are the store's counters (docs/reference.md#metrics).
type metrics struct {
	publishes, retries, dedups, behind, catchup, purged, switches, pullsLost, heartbeatsMissed prometheus.Counter
	// conflicts counts the pauses after compare-and-set conflicts on the
	// meta bucket (contended).
	conflicts prometheus.Counter
	// voided counts the lines of commits to instances another process
	// had ended (acknowledged, not stored: ordered before the change).
	voided prometheus.Counter
	// changes counts the other processes' table changes followed.
	changes *prometheus.CounterVec
	// checks counts Beyond's checks (barrier.go) by result;
	// checkJoins the calls served by a check another call started,
	// checkHeld those --jetstream-barrier-interval held back.
	checks                *prometheus.CounterVec
	checkJoins, checkHeld prometheus.Counter
	// seriesBatches counts the atomic batches of series keys created
	// (SeriesIDs), seriesBatchConflicts those refused for a key that
	// existed.
	seriesBatches, seriesBatchConflicts prometheus.Counter
	// publishSeconds times an Append's publishing: from the first send
	// until every table's block is acknowledged.
	publishSeconds prometheus.Histogram
}

// newMetrics returns the counters, not yet registered.
func newMetrics() metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	return metrics{
		publishes:        c("ingestd_jetstream_publishes_total", "Block messages the streams acknowledged."),
		retries:          c("ingestd_jetstream_publish_retries_total", "Publishes sent again after no acknowledgement or an expected-last-sequence mismatch."),
		dedups:           c("ingestd_jetstream_dedup_hits_total", "Publishes found already stored by their message id (an acknowledgement lost)."),
		behind:           c("ingestd_jetstream_stream_behind_total", "Appends whose acknowledged blocks the table's stream consumer had not delivered within a second (a new leader still applying its log, or a busy cache); the Append waits for them."),
		catchup:          c("ingestd_jetstream_catchup_messages_total", "Block messages applied to the local row cache from the streams at start."),
		purged:           c("ingestd_jetstream_purged_sequences_total", "Stream sequences a retention purge of a table's messages passed over (the table's messages among them, which retention left nothing of; the blocks stream holds every table's)."),
		conflicts:        c("ingestd_jetstream_meta_conflicts_total", "Compare-and-set updates of the meta bucket (series ids, columns, table records, counters) that another node's change came before, each tried again after a pause of 1 to 100 ms; they fail only after --jetstream-publish-timeout."),
		heartbeatsMissed: c("ingestd_jetstream_heartbeats_missed_total", "Table stream consumers started again because the server sent nothing, not even a heartbeat, for two --jetstream-follower-heartbeat (a pull request lost, a server gone), whether or not a call waited on them."),
		pullsLost:        c("ingestd_jetstream_pulls_lost_total", "Table stream consumers started again because the server held messages for them and no pull request (the request went to a server that did not know the new consumer yet); found while a call waited more than 100 ms on the follower."),
		switches:         c("ingestd_jetstream_server_switches_total", "Reconnects to another NATS server forced after JetStream was unreachable through the connected one for --jetstream-switch-after."),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ingestd_jetstream_beyond_checks_total",
			Help: "Checks whether a drain cursor above this node's sequence is beyond the table's sequence or another node's, by result: applied (what the stream leader reports applied, then a barrier published and applied), behind (the leader reports more than this node applied: no barrier), failed (no answer or acknowledgement in time)."}, []string{"result"}),
		voided: c("ingestd_jetstream_voided_lines_total", "Lines of commits this node acknowledged to a table instance another node had truncated or dropped (not stored: ordered before that change, as a write racing it)."),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ingestd_jetstream_followed_changes_total",
			Help: "Table changes made through other ingestd nodes that this node followed, by kind: create (a table new here, or re-created), truncate (a new instance of a live table), drop."}, []string{"kind"}),
		checkJoins:    c("ingestd_jetstream_beyond_check_joins_total", "Drains with a cursor above this node's sequence served by a check another drain started (coalesced)."),
		checkHeld:     c("ingestd_jetstream_beyond_check_held_total", "Drains with a cursor above this node's sequence that --jetstream-barrier-interval held back (answered as not caught up yet: an empty page that keeps the cursor)."),
		seriesBatches: c("ingestd_jetstream_series_batches_total", "Atomic batches of new series keys created in the meta bucket (up to 1,000 series each: the new series of a table in one write's resolution)."),
		// From about a millisecond (one stream, idle servers) to
		// --jetstream-publish-timeout.
		publishSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ingestd_jetstream_commit_publish_duration_seconds",
			Help:    "Duration of publishing one group commit's blocks: from the first send until the quorum of every table's stream acknowledged its block (retries included). The rest of ingestd_feed_commit_duration_seconds is mostly the row cache's apply.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		seriesBatchConflicts: c("ingestd_jetstream_series_batch_conflicts_total", "Atomic batches of new series keys the meta bucket refused because one of their keys existed (another node numbered it first, or an attempt whose acknowledgement was lost stored it): their series were then read or created one at a time."),
	}
}

var _ store.Backend = (*Store)(nil)

// Open connects to the JetStream cluster, creates the meta bucket when
// missing, rebuilds the row cache from every live table's stream and
// returns the store, waiting up to cfg.PublishTimeout for a cluster that
// is electing its leaders. It refuses with a clear error when the cluster
// cannot hold cfg.Replicas replicas (unless cfg.ClampReplicas) and when
// another process holds cfg.CacheDir (store.ErrLocked). cacheCfg
// configures the cache's badger (its Dir is replaced). logger may be nil
// (discard); reg may be nil (no metrics).
func Open(cfg Config, cacheCfg rowengine.Config, logger *slog.Logger, reg prometheus.Registerer) (_ *Store, err error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, logger: logger.With("component", "jetstream"), node: randomID(),
		byName: map[string]*table{}, byTID: map[uint64]*table{}, ended: map[uint64][]store.Column{}, idBlocks: map[uint64]idBlock{},
		pending: map[string]*store.TableCommit{}, m: newMetrics()}
	s.chk.stop = make(chan struct{})
	if err := os.MkdirAll(cfg.CacheDir, 0o750); err != nil {
		return nil, fmt.Errorf("jsstore: create cache directory: %w", err)
	}
	if s.lock, err = lockFile(filepath.Join(cfg.CacheDir, "LOCK.jsstore")); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.abandon()
		}
	}()
	s.sw.dropped, s.sw.drop = context.WithCancel(context.Background())
	s.sw.sendTimeout = sendTimeout
	s.nc, err = nats.Connect(cfg.URLs, append(cfg.natsOptions(), nats.ReconnectHandler(s.reconnected),
		nats.DisconnectErrHandler(s.disconnected))...)
	if err != nil {
		return nil, fmt.Errorf("jsstore: connect to %s: %w", cfg.URLs, err)
	}
	if s.js, err = jetstream.New(s.nc); err != nil {
		return nil, fmt.Errorf("jsstore: %w", err)
	}
	s.maxMsg = int(s.nc.MaxPayload()) - 4096 // room for the headers
	if s.maxMsg < 4096 {
		return nil, fmt.Errorf("jsstore: the servers' max_payload (%d bytes) is below 8 KiB", s.nc.MaxPayload())
	}
	if cfg.MaxMessageBytes > 0 {
		s.maxMsg = min(s.maxMsg, cfg.MaxMessageBytes)
	}
	s.limits = limitsOf(int(s.nc.MaxPayload()), s.maxMsg)
	s.checkSync()
	if err := s.openMeta(); err != nil {
		return nil, err
	}
	// The cache is derived state: rebuilt from the streams at every start.
	rows := filepath.Join(cfg.CacheDir, "rows")
	if err := os.RemoveAll(rows); err != nil {
		return nil, fmt.Errorf("jsstore: clear the row cache: %w", err)
	}
	cacheCfg.Dir, cacheCfg.InMemory, cacheCfg.UnsafeNoSync = rows, false, true
	if s.cache, err = rowengine.Open(cacheCfg, logger, reg); err != nil {
		return nil, fmt.Errorf("jsstore: open the row cache: %w", err)
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	watchCtx, stop := context.WithCancel(context.Background())
	s.stopWatch, s.watchDone = stop, make(chan struct{})
	go func() {
		defer close(s.watchDone)
		s.watchRecords(watchCtx)
	}()
	if reg != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ingestd_jetstream_tables_not_converging",
			Help: "Tables whose stream this node's row cache no longer applies: its follower stopped on an unreadable message, or a commit gave up waiting for it (--jetstream-publish-timeout) and it applied nothing since; /health then fails."},
			func() float64 {
				n := 0
				for _, t := range s.allTables() {
					if _, ok := t.notConverging(); ok {
						n++
					}
				}
				return float64(n)
			}))
		reg.MustRegister(tablesCollector{s})
		reg.MustRegister(s.m.publishes, s.m.retries, s.m.conflicts, s.m.dedups, s.m.behind, s.m.catchup, s.m.purged, s.m.switches, s.m.pullsLost, s.m.heartbeatsMissed,
			s.m.checks, s.m.checkJoins, s.m.checkHeld, s.m.voided, s.m.changes, s.m.seriesBatches, s.m.seriesBatchConflicts, s.m.publishSeconds)
	}
	s.logger.Info("jetstream store open", "servers", cfg.URLs, "replicas", s.replicas, "tables", len(s.byTID))
	return s, nil
}

// randomID returns 16 random bytes in hex: this process's id in message
// ids, a batch's id.
func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b[:])
}

// abandonFollowers stops the record watcher and every table's follower.
func (s *Store) abandonFollowers() {
	if s.stopWatch != nil {
		s.stopWatch()
		<-s.watchDone
	}
	for _, t := range s.allTables() {
		t.stopFollower()
	}
}

// tablesDesc describes ingestd_jetstream_tables.
var tablesDesc = prometheus.NewDesc("ingestd_jetstream_tables",
	"Live tables by whether this node materialises them (--jetstream-materialise): materialised=\"true\" keeps their rows and serves their reads, \"false\" follows their streams by the messages' headers only.",
	[]string{"materialised"}, nil)

// tablesCollector counts the live tables at each scrape (tablesDesc).
type tablesCollector struct{ s *Store }

func (c tablesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- tablesDesc }

func (c tablesCollector) Collect(ch chan<- prometheus.Metric) {
	var served, followed float64
	c.s.mu.Lock()
	for _, t := range c.s.byName {
		switch {
		case !t.rec.live():
		case t.served:
			served++
		default:
			followed++
		}
	}
	c.s.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(tablesDesc, prometheus.GaugeValue, served, "true")
	ch <- prometheus.MustNewConstMetric(tablesDesc, prometheus.GaugeValue, followed, "false")
}

// allTables returns every table with a record (any order).
func (s *Store) allTables() []*table {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Values(s.byName))
}

// lockFile takes an exclusive advisory lock on path.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return nil, fmt.Errorf("jsstore: open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", store.ErrLocked, filepath.Dir(path))
		}
		return nil, fmt.Errorf("jsstore: lock cache directory: %w", err)
	}
	return f, nil
}

// abandon releases what Open took without writing anything (a failed
// Open, or a test's crash).
func (s *Store) abandon() {
	s.chk.halt()
	s.abandonFollowers()
	s.chk.wg.Wait()
	if s.cache != nil {
		_ = s.cache.Close()
	}
	if s.nc != nil {
		s.nc.Close()
	}
	_ = s.lock.Close()
}

// checkSync logs a WARN for every server that does not report
// sync_interval always. A client sees the servers' JetStream config only
// through the system account's $SYS.REQ.SERVER.PING.VARZ (every server
// answers; ingestd's account needs it imported); without access to it the
// WARN says how the operator verifies it.
func (s *Store) checkSync() {
	answers, err := s.gather("$SYS.REQ.SERVER.PING.VARZ", 2*time.Second, 250*time.Millisecond)
	if err == nil && len(answers) == 0 {
		err = nats.ErrTimeout
	}
	if err != nil {
		s.logger.Warn("cannot read the servers' sync_interval from this account (no system account access): make sure every server runs with jetstream { sync_interval: always } (check: curl -s http://SERVER:8222/varz | grep sync_always), else a server crash may lose acknowledged writes (Jepsen, NATS 2.12.1)", "err", err)
		return
	}
	for _, data := range answers {
		var varz struct {
			Server struct {
				Name string `json:"name"`
			} `json:"server"`
			Data struct {
				JetStream struct {
					Config struct {
						SyncAlways bool `json:"sync_always"`
					} `json:"config"`
				} `json:"jetstream"`
			} `json:"data"`
		}
		if err := json.Unmarshal(data, &varz); err != nil || !varz.Data.JetStream.Config.SyncAlways {
			s.logger.Warn("a NATS server does not run with jetstream { sync_interval: always }: its crash may lose acknowledged writes (Jepsen, NATS 2.12.1)", "server", varz.Server.Name)
		}
	}
}

// gather sends a request with no body to subject and returns every
// answer: the first within first, each next within quiet of the one
// before (a $SYS PING is answered by every server).
func (s *Store) gather(subject string, first, quiet time.Duration) ([][]byte, error) {
	inbox := s.nc.NewRespInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := s.nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, err
	}
	var out [][]byte
	for wait := first; ; wait = quiet {
		msg, err := sub.NextMsg(wait)
		if errors.Is(err, nats.ErrTimeout) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
			return out, nats.ErrNoResponders
		}
		out = append(out, msg.Data)
	}
}

// errCodeClusterNotAvailable is the server's "JetStream system
// temporarily unavailable" (a meta leader election).
const errCodeClusterNotAvailable jetstream.ErrorCode = 10008

// transient tells whether err may go away by itself: no answer in time,
// no responders, JetStream between leaders. The API errors come in two
// types: jetstream's, and nats.go's older one, which the key-value
// watchers (an ordered push consumer of the legacy API) return.
func transient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		// A placement refused for a peer that is offline (a server
		// restarting, or not yet heard of in a cluster just started)
		// succeeds once it is back.
		return apiErr.ErrorCode == errCodeClusterNotAvailable || apiErr.Code == 503 ||
			apiErr.ErrorCode == errCodeNoPeers && strings.Contains(apiErr.Description, "peer offline")
	}
	var legacyErr *nats.APIError
	if errors.As(err, &legacyErr) {
		return legacyErr.ErrorCode == nats.ErrorCode(errCodeClusterNotAvailable) || legacyErr.Code == 503
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, errStaleRecords) || errors.Is(err, errWatchEnded) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrConnectionReconnecting)
}

// unavailable marks err, the failure of a call the cluster did not
// answer in time, as store.ErrUnavailable: the feed fails the operation
// and runs on (docs/design.md#shared-metadata).
func unavailable(err error) error {
	if errors.Is(err, store.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
}

// retry runs op (each attempt bounded by opTimeout) until it succeeds, fails
// for good, or Config.PublishTimeout has passed: what Open and the DDL
// calls do while the cluster elects a leader.
func (s *Store) retry(op func(ctx context.Context) error) error {
	deadline := time.Now().Add(s.cfg.PublishTimeout)
	wait := 50 * time.Millisecond
	for {
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		err := op(ctx)
		cancel()
		switch {
		case err == nil:
			s.succeeded()
		case transient(err):
			s.failed(began)
		}
		if err == nil {
			return nil
		}
		if !transient(err) {
			return apiUnavailable(err)
		}
		if time.Now().Add(wait).After(deadline) {
			return unavailable(err)
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
}

// apiUnavailable marks err as store.ErrUnavailable when the cluster
// refused the request (a JetStream API error: no room for a stream, an
// account limit, a placement it cannot make): the feed fails that
// operation and runs on, as for a cluster that does not answer. Errors of
// ingestd's own (a record's instance ended, the row cache's disk) are
// returned as they are.
func apiUnavailable(err error) error {
	var apiErr *jetstream.APIError
	var legacyErr *nats.APIError
	if errors.As(err, &apiErr) || errors.As(err, &legacyErr) {
		return unavailable(err)
	}
	return err
}

// firstAttempt bounds the first attempt of a request that may go
// unanswered for a reason a second attempt does not meet (growing).
const firstAttempt = 500 * time.Millisecond

// growing returns op with its first attempt bounded by first and each
// next one by twice the last, up to opTimeout (retry's own bound): a
// request the cluster drops (a cluster that has just started, nodes
// creating the same stream at once) is sent again soon, one that takes
// long is given the time.
func growing(first time.Duration, op func(ctx context.Context) error) func(ctx context.Context) error {
	timeout := first
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		timeout = min(2*timeout, opTimeout)
		return op(ctx)
	}
}

// placementError tells whether err is the cluster refusing to place the
// replicas asked for.
func placementError(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case errCodeNoPeers, errCodeInsufficientResources, errCodeReplicasNotSupported:
		return true
	}
	return false
}

// The server's error codes for a placement it cannot make
// (nats-server's jetstream_errors_generated.go; nats.go names none).
const (
	errCodeNoPeers               jetstream.ErrorCode = 10005 // no suitable peers for placement
	errCodeInsufficientResources jetstream.ErrorCode = 10023
	errCodeReplicasNotSupported  jetstream.ErrorCode = 10074 // replicas > 1 not supported in non-clustered mode
)

// openMeta creates (or opens) the meta bucket with cfg.Replicas, or the
// highest count the cluster can place when cfg.ClampReplicas.
func (s *Store) openMeta() error {
	for r := s.cfg.Replicas; r >= 1; r-- {
		var kv jetstream.KeyValue
		// The first request to a cluster that has just started may go
		// unanswered (no meta leader yet): attempts start short.
		err := s.retry(growing(firstAttempt, func(ctx context.Context) (err error) {
			kv, err = s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: s.cfg.Prefix + "_meta",
				Description: "ingestd tables (compare-and-set per DDL), table ids and consumer positions",
				History:     1, Storage: jetstream.FileStorage, Replicas: r})
			return err
		}))
		if err == nil {
			if r < s.cfg.Replicas {
				s.logger.Warn("jetstream replicas clamped to what the cluster can place", "asked", s.cfg.Replicas, "replicas", r)
			}
			s.meta, s.replicas = kv, r
			return s.allowMetaBatches()
		}
		if !placementError(err) {
			return fmt.Errorf("jsstore: create the meta bucket: %w", err)
		}
		if !s.cfg.ClampReplicas {
			return fmt.Errorf("jsstore: the cluster cannot place %d replicas (%w): run at least %d JetStream servers, lower --jetstream-replicas or set --jetstream-replicas-clamp",
				s.cfg.Replicas, err, s.cfg.Replicas)
		}
	}
	return errors.New("jsstore: the cluster cannot place even one replica of the meta bucket")
}

// allowMetaBatches lets the meta bucket's stream take atomic batches
// (SeriesIDs creates a write's new series keys in one), which a bucket
// created by an earlier build does not.
func (s *Store) allowMetaBatches() error {
	name := "KV_" + s.meta.Bucket()
	return s.retry(func(ctx context.Context) error {
		st, err := s.js.Stream(ctx, name)
		if err != nil {
			return err
		}
		cfg := st.CachedInfo().Config
		if cfg.AllowAtomicPublish {
			return nil
		}
		cfg.AllowAtomicPublish = true
		if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("jsstore: allow atomic batches on the meta bucket: %w", err)
		}
		return nil
	})
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// encodeName is name as stream names and KV keys allow: base32 (A-Z,
// 2-7) when that stays within 200 characters, else "H" and the base32 of
// its SHA-256 (the record keeps the name itself).
func encodeName(name string) string {
	if e := b32.EncodeToString([]byte(name)); len(e) <= 200 {
		return "N" + e
	}
	sum := sha256.Sum256([]byte(name))
	return "H" + b32.EncodeToString(sum[:])
}

func (s *Store) tableKey(name string) string { return "t." + encodeName(name) }

// blocksStream is the name of the stream that holds every table's blocks.
func (s *Store) blocksStream() string { return s.cfg.Prefix + "_blocks" }

// placeOf returns the record of a name new to the bucket: its name, the
// blocks stream, and its subject there (PREFIX_b.ENC(name)).
func (s *Store) placeOf(name string) record {
	return record{Name: []byte(name), Stream: s.blocksStream(), Subject: s.cfg.Prefix + "_b." + encodeName(name)}
}
func (s *Store) consumersKey(name string, born uint64) string {
	return "c." + encodeName(name) + "." + strconv.FormatUint(born, 10)
}

const nextTIDKey = "next_tid"

// load reads every table record, then starts each live instance's
// follower and waits until it has applied its subject up to its last
// message (catchUp).
func (s *Store) load() error {
	if err := s.retry(s.loadRecords); err != nil {
		return fmt.Errorf("jsstore: list tables: %w", err)
	}
	for _, t := range s.byTID {
		if err := s.catchUp(t); err != nil {
			return err
		}
	}
	return nil
}

// loadRecords reads every table record into byName and byTID.
// The maps change under mu: a reconnect during Open lists the tables
// (allTables) while they load.
//
// The watch reads the bucket through a consumer the server places on any
// replica, perhaps one a write quorum left behind (a busy machine, a
// server back from a fault): it would miss records acknowledged before
// Open, and a crashed process's tables would vanish. The bucket's leader
// is asked first for its last record (lastRecordRevision); a watch whose
// current records end below it failed (errStaleRecords, retried).
func (s *Store) loadRecords(ctx context.Context) error {
	s.mu.Lock()
	clear(s.byName)
	clear(s.byTID)
	s.mu.Unlock()
	last, err := s.lastRecordRevision(ctx)
	if err != nil {
		return err
	}
	return s.eachRecord(ctx, last, func(e jetstream.KeyValueEntry) (bool, error) {
		if e == nil {
			return true, nil // every current record was delivered
		}
		rec, err := decodeRecord(e)
		if err != nil {
			return true, err
		}
		t := s.newTable(rec, e.Revision())
		s.mu.Lock()
		s.byName[t.name] = t
		if !t.rec.Meta.Dropped {
			s.byTID[t.rec.Meta.ID] = t
		}
		s.mu.Unlock()
		return false, nil
	}, nil)
}

// errStaleRecords is a watch of the table records that began on a replica
// behind the bucket's leader; errWatchEnded is a watch the client ended
// (its subscription closed). Both are transient: watching again starts
// afresh.
var (
	errStaleRecords = errors.New("jsstore: the table records read from a replica behind the leader")
	errWatchEnded   = errors.New("jsstore: the watch of the table records ended")
)

// recordsSubject is the meta bucket's subject of every table record.
func (s *Store) recordsSubject() string { return "$KV." + s.cfg.Prefix + "_meta.t.>" }

// lastRecordRevision asks the meta bucket's leader (a plain message get,
// which only the stream leader answers, unlike a direct get) for the
// revision of the last table record written, a purge's marker included;
// 0 when there is none.
func (s *Store) lastRecordRevision(ctx context.Context) (uint64, error) {
	req, err := json.Marshal(struct {
		LastBySubj string `json:"last_by_subj"`
	}{s.recordsSubject()})
	if err != nil {
		return 0, err
	}
	msg, err := s.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+s.cfg.Prefix+"_meta", req)
	if err != nil {
		return 0, err
	}
	var resp struct {
		Message *struct {
			Seq uint64 `json:"seq"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return 0, fmt.Errorf("jsstore: the last table record: %w", err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return 0, nil
	case resp.Error != nil:
		return 0, resp.Error
	case resp.Message == nil:
		return 0, errors.New("jsstore: the last table record: an empty answer")
	}
	return resp.Message.Seq, nil
}

// eachRecord watches the table records and calls fn with each entry,
// nil marking the end of the current ones, until fn says stop or fails,
// or ctx ends; a deletion or purge goes to removed instead (nil: skipped).
// The current records must reach revision atLeast (deletions and purges
// count), else it returns errStaleRecords before fn sees the end of them;
// errWatchEnded when the watch ends.
func (s *Store) eachRecord(ctx context.Context, atLeast uint64, fn func(jetstream.KeyValueEntry) (stop bool, err error), removed func(key string, rev uint64)) error {
	w, err := s.meta.WatchFiltered(ctx, []string{"t.>"})
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	current, seen := true, uint64(0)
	for {
		var e jetstream.KeyValueEntry
		var ok bool
		select {
		case e, ok = <-w.Updates():
			if !ok {
				return errWatchEnded
			}
		case <-ctx.Done():
			return ctx.Err()
		}
		switch {
		case e == nil && current:
			current = false
			if seen < atLeast {
				return fmt.Errorf("%w: revision %d, the leader's %d", errStaleRecords, seen, atLeast)
			}
		case e != nil:
			seen = max(seen, e.Revision())
			if e.Operation() != jetstream.KeyValuePut {
				if removed != nil {
					removed(e.Key(), e.Revision())
				}
				continue
			}
		}
		if stop, err := fn(e); stop || err != nil {
			return err
		}
	}
}

// catchUp starts t's follower at the record's anchor and waits until it
// has applied its subject up to the last message it had when looked at,
// then applies the retention the record holds (the sweeps and horizon of
// before the restart): a node never serves a drain above what it applied.
func (s *Store) catchUp(t *table) error {
	ctx := context.Background()
	s.mu.Lock()
	tid, a := t.rec.Meta.ID, t.anchor()
	cutoff, horizon := t.rec.Cutoff, t.rec.Horizon
	s.mu.Unlock()
	if err := s.syncCache(t); err != nil {
		return err
	}
	last, err := s.lastRetried(t)
	if err != nil {
		return fmt.Errorf("jsstore: stream %s of table %q: %w", t.stream, t.name, err)
	}
	t.purged.Store(a.Seq)
	t.ensureFollower(s, last) // the record watcher may have started it
	// Waited for until Config.PublishTimeout passes without progress (a
	// leader election cuts a long replay; the follower resumes it). A
	// last message another process purged meanwhile (its anchor moved
	// over it first) never arrives.
	for from, _ := t.position(); ; {
		err := t.await(time.Now().Add(s.cfg.PublishTimeout), func() bool { return t.passed(last) || t.f.applied > from })
		applied, _ := t.position()
		if err != nil {
			return fmt.Errorf("jsstore: catch up with stream %s: %w", t.stream, err)
		}
		if applied >= last || t.anchored.Load() >= last {
			break
		}
		from = applied
	}
	if !t.served { // no rows here: the record's horizon is answered as it is
		return nil
	}
	if cutoff != nil {
		for {
			s.cacheMu.Lock()
			res, err := s.cache.SweepBefore(ctx, tid, *cutoff, 1<<16)
			s.cacheMu.Unlock()
			if err != nil {
				return err
			}
			if !res.More {
				break
			}
		}
	}
	if horizon > 1 {
		s.cacheMu.Lock()
		_, err := s.cache.RaiseHorizon(ctx, tid, horizon)
		s.cacheMu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// anchor returns where t's numbering stands in its record: the anchor, or
// the stream's start above the record's floor. Store.mu must be held.
func (t *table) anchor() anchor {
	if t.rec.Anchor != nil {
		return *t.rec.Anchor
	}
	return anchor{XSeq: t.rec.Meta.Seq}
}

// Close stops the followers, closes the cache and the connection. In-flight calls finish first (a
// Beyond waiting for a barrier returns at once, its cursor unknown); every later call,
// Close included, returns store.ErrClosed.
func (s *Store) Close() error {
	s.chk.halt()
	s.later.stop()
	if err := s.gate.Close(); err != nil {
		return err
	}
	s.abandonFollowers()
	s.chk.wg.Wait() // a check waiting for its follower ended with it
	err := s.cache.Close()
	s.nc.Close() // every publish was acknowledged: nothing is pending
	return errors.Join(err, s.lock.Close())
}

// update applies change to t's record and stores it with compare-and-set
// on t's revision, retrying while the cluster is between leaders. When
// the record changed meanwhile (another process, or an earlier attempt
// whose answer was lost), it reads it again (and takes what another
// process changed: adoptRecord) and applies change to that, after a pause
// (contended: the replica that answers the read may not have the change
// yet): every change is a set or a maximum, so applying it again is
// harmless, and a change that no longer applies (its instance ended)
// returns its error, which update returns, writing nothing. Writer only.
func (s *Store) update(t *table, change func(*record) error) error {
	reread := false
	return s.contended(fmt.Sprintf("update table %q", t.name), func() (bool, error) {
		if reread {
			if err := s.retry(func(ctx context.Context) error { return s.reread(ctx, t) }); err != nil {
				return false, err
			}
		}
		reread = true
		s.mu.Lock()
		rec, cur := t.rec, t.rev
		s.mu.Unlock()
		rec.Meta.Columns = slices.Clone(rec.Meta.Columns)
		if err := change(&rec); err != nil {
			return false, err
		}
		rec.Writer = s.node
		v, err := json.Marshal(rec)
		if err != nil {
			return false, err
		}
		key := s.tableKey(t.name)
		var rev uint64
		err = s.retry(func(ctx context.Context) (err error) {
			if cur == 0 {
				rev, err = s.meta.Create(ctx, key, v)
			} else {
				rev, err = s.meta.Update(ctx, key, v, cur)
			}
			return err
		})
		switch {
		case err == nil:
			s.setRecord(t, rec, rev)
			return true, nil
		case isConflict(err):
			return false, nil
		}
		return false, fmt.Errorf("jsstore: update table %q: %w", t.name, err)
	})
}

// reread loads t's record from the bucket after a compare-and-set
// conflict and takes it (adoptRecord).
func (s *Store) reread(ctx context.Context, t *table) error {
	e, err := s.meta.Get(ctx, s.tableKey(t.name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		s.mu.Lock()
		t.rev = 0 // pruned (PruneTombstone): created again
		s.mu.Unlock()
		return nil
	}
	if err != nil {
		return fmt.Errorf("jsstore: read table %q: %w", t.name, err)
	}
	rec, err := decodeRecord(e)
	if err != nil {
		return err
	}
	return s.adoptRecord(rec, e.Revision(), nil)
}

// isConflict tells whether err is a compare-and-set conflict.
func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return errors.Is(err, jetstream.ErrKeyExists)
}
