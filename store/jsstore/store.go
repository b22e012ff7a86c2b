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
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/badgerstore"
)

// seqLeaseChunk is how many x_seq numbers one durable lease (the record's
// Meta.Seq) reserves beyond what a commit needs, as badgerstore does: one
// KV update per this many fragments per table.
const seqLeaseChunk = 1 << 16

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
	// the x_seq lease: no number at or below it is handed out again.
	Meta store.TableMeta `json:"meta"`
	// Stream is the name's stream (streamName(Name)).
	Stream string `json:"stream"`
	// Born is the id of the instance that created the name (kept by
	// TRUNCATE, new after DROP + re-create): the consumers' generation.
	Born uint64 `json:"born,omitempty"`
	// Horizon is the live instance's history horizon (0 or 1: nothing
	// trimmed); Cutoff, when set, the highest retention cutoff swept.
	Horizon uint64 `json:"horizon,omitempty"`
	Cutoff  *int64 `json:"cutoff,omitempty"`
}

// table is the in-memory state of one table name.
type table struct {
	rec record
	rev uint64 // rec's revision in the bucket (0: not stored)
	// lastSeq is the stream's last sequence as this node saw it (the
	// expected last sequence of its next publish); xseq is the highest
	// x_seq assigned; commits numbers this process's commits (message ids).
	lastSeq, xseq, commits uint64
	// ages places the live instance's messages in time, purged is the
	// stream sequence up to which they were purged (purgeAged). Writer only.
	ages   ageIndex
	purged uint64
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
	cache  *badgerstore.DB
	lock   *os.File
	node   string // this process's id in message ids
	// replicas is what the streams and buckets were created with.
	replicas int
	// maxMsg is the largest block message body.
	maxMsg int

	mu     sync.Mutex        // guards byName and byTID (the writer changes them, readers look)
	byName map[string]*table // every name with a record
	byTID  map[uint64]*table // live instances

	// sw moves the connection off a server JetStream is unreachable
	// through (switch.go).
	sw serverSwitch

	// closeMu's read side is held by every call, its write side by Close.
	closeMu sync.RWMutex
	closed  bool

	m metrics
}

// metrics are the store's counters (README, Metrics).
type metrics struct {
	publishes, retries, dedups, behind, catchup, purged, switches prometheus.Counter
}

// newMetrics returns the counters, not yet registered.
func newMetrics() metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	return metrics{
		publishes: c("ingestd_jetstream_publishes_total", "Block messages the streams acknowledged."),
		retries:   c("ingestd_jetstream_publish_retries_total", "Publishes sent again after no acknowledgement or an expected-last-sequence mismatch."),
		dedups:    c("ingestd_jetstream_dedup_hits_total", "Publishes found already stored by their message id (an acknowledgement lost)."),
		behind:    c("ingestd_jetstream_stream_behind_total", "Failed publishes after which the stream's last sequence was below what it had acknowledged (a new leader still applying its log); the publish waits and is sent again."),
		catchup:   c("ingestd_jetstream_catchup_messages_total", "Block messages applied to the local row cache from the streams at start."),
		purged:    c("ingestd_jetstream_purged_sequences_total", "Stream sequences purged below a retention cutoff (messages retention left nothing of)."),
		switches:  c("ingestd_jetstream_server_switches_total", "Reconnects to another NATS server forced after JetStream was unreachable through the connected one for --jetstream-switch-after."),
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
func Open(cfg Config, cacheCfg badgerstore.Config, logger *slog.Logger, reg prometheus.Registerer) (_ *Store, err error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, logger: logger.With("component", "jetstream"), node: randomID(),
		byName: map[string]*table{}, byTID: map[uint64]*table{}, m: newMetrics()}
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
	if s.cache, err = badgerstore.Open(cacheCfg, logger, reg); err != nil {
		return nil, fmt.Errorf("jsstore: open the row cache: %w", err)
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	if reg != nil {
		reg.MustRegister(s.m.publishes, s.m.retries, s.m.dedups, s.m.behind, s.m.catchup, s.m.purged, s.m.switches)
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
		return apiErr.ErrorCode == errCodeClusterNotAvailable || apiErr.Code == 503
	}
	var legacyErr *nats.APIError
	if errors.As(err, &legacyErr) {
		return legacyErr.ErrorCode == nats.ErrorCode(errCodeClusterNotAvailable) || legacyErr.Code == 503
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrConnectionReconnecting)
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
		if err == nil || !transient(err) || time.Now().Add(wait).After(deadline) {
			return err
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
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
		err := s.retry(func(ctx context.Context) (err error) {
			kv, err = s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: s.cfg.Prefix + "_meta",
				Description: "ingestd tables (compare-and-set per DDL), table ids and consumer positions",
				History:     1, Storage: jetstream.FileStorage, Replicas: r})
			return err
		})
		if err == nil {
			if r < s.cfg.Replicas {
				s.logger.Warn("jetstream replicas clamped to what the cluster can place", "asked", s.cfg.Replicas, "replicas", r)
			}
			s.meta, s.replicas = kv, r
			return nil
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

func (s *Store) tableKey(name string) string   { return "t." + encodeName(name) }
func (s *Store) streamName(name string) string { return s.cfg.Prefix + "_T_" + encodeName(name) }
func subjectOf(stream string) string           { return stream + ".blocks" }
func (s *Store) consumersKey(name string, born uint64) string {
	return "c." + encodeName(name) + "." + strconv.FormatUint(born, 10)
}

const nextTIDKey = "next_tid"

// load reads every table record, then rebuilds the cache of each live
// instance from its stream (catchUp).
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
func (s *Store) loadRecords(ctx context.Context) error {
	clear(s.byName)
	clear(s.byTID)
	w, err := s.meta.WatchFiltered(ctx, []string{"t.>"}, jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for {
		var e jetstream.KeyValueEntry
		select {
		case e = <-w.Updates():
		case <-ctx.Done():
			return ctx.Err()
		}
		if e == nil {
			return nil // every current record was delivered
		}
		t := &table{rev: e.Revision()}
		if err := json.Unmarshal(e.Value(), &t.rec); err != nil {
			return &store.CorruptionError{Key: []byte(e.Key()), Err: err}
		}
		t.rec.Meta.Name = string(t.rec.Name)
		t.xseq = t.rec.Meta.Seq
		s.byName[t.rec.Meta.Name] = t
		if !t.rec.Meta.Dropped {
			s.byTID[t.rec.Meta.ID] = t
		}
	}
}

// cacheMeta is instance tid's metadata in the cache: one name per
// instance, so that the cache never sees two instances under one name.
func cacheMeta(tid uint64) store.TableMeta {
	return store.TableMeta{Name: "i" + strconv.FormatUint(tid, 16), ID: tid, Sync: true, Epoch: 1}
}

// catchUp applies every message of t's live instance in its stream to
// the cache, then the retention the record holds (the sweeps and horizon
// of before the restart), and sets t's stream position and x_seq.
func (s *Store) catchUp(t *table) error {
	ctx := context.Background()
	tid := t.rec.Meta.ID
	if _, err := s.cache.PutTable(ctx, cacheMeta(tid)); err != nil {
		return err
	}
	var stream jetstream.Stream
	err := s.retry(func(ctx context.Context) (err error) {
		stream, err = s.js.Stream(ctx, t.rec.Stream)
		return err
	})
	if err != nil {
		return fmt.Errorf("jsstore: stream %s of table %q: %w", t.rec.Stream, t.rec.Meta.Name, err)
	}
	info := stream.CachedInfo()
	t.lastSeq = info.State.LastSeq
	t.purged = info.State.FirstSeq - min(info.State.FirstSeq, 1)
	if info.State.Msgs > 0 {
		if err := s.replay(t, stream, info.State.FirstSeq, info.State.LastSeq); err != nil {
			return err
		}
	}
	if err := s.fence(t, stream); err != nil {
		return fmt.Errorf("jsstore: stream %s of table %q: %w", t.rec.Stream, t.rec.Meta.Name, err)
	}
	if t.rec.Cutoff != nil {
		for {
			res, err := s.cache.SweepBefore(ctx, tid, *t.rec.Cutoff, 1<<16)
			if err != nil {
				return err
			}
			if !res.More {
				break
			}
		}
	}
	if t.rec.Horizon > 1 {
		if _, err := s.cache.RaiseHorizon(ctx, tid, t.rec.Horizon); err != nil {
			return err
		}
	}
	return nil
}

// fence publishes an empty block to t's stream expecting the last sequence
// catchUp replayed. A publish that a previous process on this cache left
// in flight (SIGKILLed mid-commit: the server still commits what it had
// received) carries the expected last sequence of its own time, so once
// the fence is stored none of them can land any more; one that landed
// before it makes the fence fail (wrong last sequence, or the stream found
// longer) and is replayed, and the fence is sent again. Without it such a
// late message lands above what this process read, and its first commit
// finds the stream moved (ErrConflict) or, worse, reuses a series id the
// late message defines. Retried until Config.PublishTimeout.
func (s *Store) fence(t *table, stream jetstream.Stream) error {
	id := s.node + ".fence." + strconv.FormatUint(t.rec.Meta.ID, 10)
	deadline := time.Now().Add(s.cfg.PublishTimeout)
	wait := 50 * time.Millisecond
	for {
		m := nats.NewMsg(subjectOf(t.rec.Stream))
		m.Header.Set(jetstream.MsgIDHeader, id)
		m.Header.Set(hdrInstance, strconv.FormatUint(t.rec.Meta.ID, 10))
		m.Header.Set(hdrFirstSeq, "0")
		m.Header.Set(hdrCount, "0")
		m.Header.Set(hdrCommitTime, strconv.FormatInt(time.Now().UnixNano(), 10))
		m.Data = appendBody(nil, nil, nil, nil)
		began := time.Now()
		seq, _, err := s.send([]*nats.Msg{m}, t.lastSeq)
		if err == nil {
			s.succeeded()
			t.lastSeq = seq
			return nil
		}
		done, serr := s.settleFence(t, stream, id)
		if serr == nil && done {
			s.succeeded()
			return nil
		}
		s.failed(began)
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("fence: %w", errors.Join(err, serr))
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
}

// settleFence looks at t's stream after a fence that failed: done when
// the fence (message id id) is its last message; otherwise it replays
// what landed above t.lastSeq.
func (s *Store) settleFence(t *table, stream jetstream.Stream, id string) (done bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
	defer cancel()
	info, err := stream.Info(ctx)
	if err != nil {
		return false, err
	}
	last := info.State.LastSeq
	if last <= t.lastSeq {
		return false, nil // not stored; or a leader still applying its log
	}
	msg, err := stream.GetMsg(ctx, last)
	if err != nil {
		return false, err
	}
	if msg.Header.Get(jetstream.MsgIDHeader) == id && last == t.lastSeq+1 {
		t.lastSeq = last
		return true, nil
	}
	if err := s.replay(t, stream, t.lastSeq+1, last); err != nil {
		return false, err
	}
	t.lastSeq = last
	return false, nil
}

// replay reads t's stream from first to last with an ordered consumer and
// applies the live instance's messages to the cache. A transient failure
// (a leader election: JetStream temporarily unavailable, no responders)
// resumes after the last message applied, until Config.PublishTimeout has
// passed without progress.
func (s *Store) replay(t *table, stream jetstream.Stream, first, last uint64) error {
	deadline := time.Now().Add(s.cfg.PublishTimeout)
	wait := 50 * time.Millisecond
	for next := first; ; {
		began, from := time.Now(), next
		err := s.replayFrom(t, stream, &next, last)
		if err == nil || !transient(err) {
			return err
		}
		s.failed(began)
		if next > from { // progress: a new bound
			deadline, wait = time.Now().Add(s.cfg.PublishTimeout), 50*time.Millisecond
		}
		if time.Now().Add(wait).After(deadline) {
			return err
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
}

// replayFrom is one attempt of replay from *next, which it advances past
// every message it applied.
func (s *Store) replayFrom(t *table, stream jetstream.Stream, next *uint64, last uint64) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: *next})
	if err != nil {
		return fmt.Errorf("jsstore: read stream %s: %w", t.rec.Stream, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(512))
	if err != nil {
		return fmt.Errorf("jsstore: read stream %s: %w", t.rec.Stream, err)
	}
	defer it.Stop()
	for {
		msg, err := it.Next()
		if err != nil {
			return fmt.Errorf("jsstore: read stream %s: %w", t.rec.Stream, err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("jsstore: read stream %s: %w", t.rec.Stream, err)
		}
		tc, err := decodeMessage(msg.Headers(), msg.Data())
		if err != nil {
			return &store.CorruptionError{Key: []byte(fmt.Sprintf("%s#%d", t.rec.Stream, md.Sequence.Stream)), Err: err}
		}
		if tc.FirstSeq != 0 {
			s.raiseXSeq(t, tc.FirstSeq+uint64(len(tc.Fragments))-1)
		}
		if tc.TableID == t.rec.Meta.ID && (len(tc.NewSeries) > 0 || len(tc.Fragments) > 0) { // not a fence
			if err := s.cache.ApplyAt(ctx, []store.TableCommit{tc}); err != nil {
				return err
			}
			t.ages.add(md.Sequence.Stream, tc.Fragments)
			s.m.catchup.Inc()
		}
		*next = md.Sequence.Stream + 1
		if md.Sequence.Stream >= last {
			return nil
		}
	}
}

// raiseXSeq raises t's highest assigned x_seq to at least seq.
func (s *Store) raiseXSeq(t *table, seq uint64) {
	s.mu.Lock()
	t.xseq = max(t.xseq, seq)
	s.mu.Unlock()
}

// enter admits a call: ErrClosed after Close, ctx.Err() when ctx ended.
// On nil the caller must call leave.
func (s *Store) enter(ctx context.Context) error {
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return store.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		s.closeMu.RUnlock()
		return err
	}
	return nil
}

func (s *Store) leave() { s.closeMu.RUnlock() }

// Close records each live table's exact x_seq as its lease (a restart
// then burns no numbers; a failure only skips numbers), closes the cache
// and the connection. In-flight calls finish first; every later call,
// Close included, returns store.ErrClosed.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return store.ErrClosed
	}
	s.closed = true
	s.closeMu.Unlock()
	for _, t := range s.liveTables() {
		if lease := t.rec.Meta.Seq; lease > t.xseq {
			err := s.update(t, func(r *record) {
				if r.Meta.Seq == lease { // not raised by another process meanwhile
					r.Meta.Seq = t.xseq
				}
			})
			if err != nil { // the cluster is away: do not wait for it once per table
				s.logger.Warn("x_seq leases not released: a restart skips the unused numbers", "table", t.rec.Meta.Name, "err", err)
				break
			}
		}
	}
	err := s.cache.Close()
	s.nc.Close() // every publish was acknowledged: nothing is pending
	return errors.Join(err, s.lock.Close())
}

// liveTables returns the live tables, ordered by name.
func (s *Store) liveTables() []*table {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*table, 0, len(s.byTID))
	for _, t := range s.byTID {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *table) int { return strings.Compare(a.rec.Meta.Name, b.rec.Meta.Name) })
	return out
}

// update applies change to t's record and stores it with compare-and-set
// on t's revision, retrying while the cluster is between leaders. When
// the record changed meanwhile (another process, or an earlier attempt
// whose answer was lost), it reads it again and applies change to that
// (every change is a set or a maximum, so applying it again is harmless).
// Writer only.
func (s *Store) update(t *table, change func(*record)) error {
	for attempt := 0; ; attempt++ {
		rec := t.rec
		rec.Meta.Columns = slices.Clone(rec.Meta.Columns)
		change(&rec)
		v, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		key := s.tableKey(string(rec.Name))
		var rev uint64
		err = s.retry(func(ctx context.Context) (err error) {
			if t.rev == 0 {
				rev, err = s.meta.Create(ctx, key, v)
			} else {
				rev, err = s.meta.Update(ctx, key, v, t.rev)
			}
			return err
		})
		if err == nil {
			s.mu.Lock()
			t.rec, t.rev = rec, rev
			s.mu.Unlock()
			return nil
		}
		if !isConflict(err) || attempt == 3 {
			return fmt.Errorf("jsstore: update table %q: %w", rec.Meta.Name, err)
		}
		if err := s.retry(func(ctx context.Context) error { return s.reread(ctx, t, key) }); err != nil {
			return err
		}
	}
}

// reread loads t's record from the bucket after a compare-and-set
// conflict, keeping the higher lease.
func (s *Store) reread(ctx context.Context, t *table, key string) error {
	e, err := s.meta.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		s.mu.Lock()
		t.rev = 0
		s.mu.Unlock()
		return nil
	}
	if err != nil {
		return fmt.Errorf("jsstore: read table %q: %w", t.rec.Meta.Name, err)
	}
	var rec record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return &store.CorruptionError{Key: []byte(key), Err: err}
	}
	rec.Meta.Name = string(rec.Name)
	rec.Meta.Seq = max(rec.Meta.Seq, t.rec.Meta.Seq)
	s.mu.Lock()
	t.rec, t.rev = rec, e.Revision()
	s.mu.Unlock()
	return nil
}

// isConflict tells whether err is a compare-and-set conflict.
func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return errors.Is(err, jetstream.ErrKeyExists)
}
