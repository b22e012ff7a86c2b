package feed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ingestd/ingestd/store"
)

// registry is the table registry the Sequencer and the Drainer share:
// the live tables by name and the dropped tables' tombstones, with what
// both sides read (configuration, storage, metrics, clock). Only the
// sequencer goroutine adds, replaces or removes a table (under mu); both
// sides look tables up under mu's read lock and then read a table's
// published state under table.mu (see the lock order in doc.go).
type registry struct {
	cfg Config
	st  Storage
	// limits are st's (store.Limits), read once at Open.
	limits store.Limits
	logger *slog.Logger
	m      *metrics
	now    func() time.Time

	stopping chan struct{} // closed when Run starts to stop: ends long-polls

	// consumerMu serializes the consumer upkeep's flushes and expiry
	// (consumerUpkeep) with Drainer.DeleteConsumer and DROP, so that a
	// flush never writes back a consumer deleted or dropped meanwhile.
	consumerMu sync.Mutex
	// counts counts the live tables' named consumers for the budgets.
	counts *consumerCounts

	// shared is st when several processes write it (store.Shared: column
	// positions and series ids come from it, a drain's cursor may come
	// from another process); nil otherwise. Set by Open.
	shared store.Shared

	mu         sync.RWMutex // guards tables and tombstones (written by the sequencer only)
	tables     map[string]*table
	tombstones map[string]store.TableMeta
	// seriesBytes is the registered tables' seriesBytes together
	// (Config.MaxSeriesBytes); written by the sequencer only.
	seriesBytes atomic.Int64
	// schemaBytes is the registered tables' schemaBytes together
	// (Config.MaxSchemaBytes); written by the sequencer only.
	schemaBytes atomic.Int64
	// waiting counts the long-poll drains waiting (Config.MaxWaitingDrains).
	waiting atomic.Int64
}

// putTableLocked makes t the table of its name in place of the one
// registered (if any), moving the series bytes it holds. s.mu must be
// held for writing; sequencer goroutine only.
func (s *registry) putTableLocked(t *table) {
	if old := s.tables[t.name]; old != t {
		if old != nil {
			s.seriesBytes.Add(-old.seriesBytes)
			s.schemaBytes.Add(-old.schemaBytes)
			old.registered = false
		}
		s.seriesBytes.Add(t.seriesBytes)
		s.schemaBytes.Add(t.schemaBytes)
		t.registered = true
	}
	s.tables[t.name] = t
}

// deleteTableLocked takes name's table out of the registry. s.mu must be
// held for writing; sequencer goroutine only.
func (s *registry) deleteTableLocked(name string) {
	if old := s.tables[name]; old != nil {
		s.seriesBytes.Add(-old.seriesBytes)
		s.schemaBytes.Add(-old.schemaBytes)
		old.registered = false
	}
	delete(s.tables, name)
}

// addSeriesBytes counts n more bytes of t's series dictionary.
// Sequencer goroutine only.
func (s *registry) addSeriesBytes(t *table, n int64) {
	t.seriesBytes += n
	if t.registered {
		s.seriesBytes.Add(n)
	}
}

// addColumn appends c to t's schema, counting its bytes.
// Sequencer goroutine only.
func (s *registry) addColumn(t *table, c store.Column) {
	t.addColumn(c)
	if t.registered {
		s.schemaBytes.Add(columnCost(c.Name))
	}
}

// schemaRoom reports whether columns of cost n fit under
// Config.MaxSchemaBytes.
func (s *registry) schemaRoom(n int64) bool {
	return s.schemaBytes.Load()+n <= int64(s.cfg.MaxSchemaBytes)
}

// seriesRoom reports whether a series of cost n fits under
// Config.MaxSeriesBytes.
func (s *registry) seriesRoom(n int64) bool {
	return s.seriesBytes.Load()+n <= int64(s.cfg.MaxSeriesBytes)
}

// Sequencer is the feed's write side, the single writer of docs/contract.md#x-seq:
// listeners Submit batches, one goroutine (Run) validates them against
// the schema, stamps x_seq and group-commits them, then publishes the
// watermark and acknowledges; the table operations (CreateTable, PutTable,
// DefineTable, SetSync, Truncate, Drop) run in the same goroutine between
// group commits. Open returns it with the Drainer, the read side, over the
// same table registry. All exported methods are safe for concurrent use.
//
// A table operation returns once its change is durable. Besides the errors
// its comment names, it returns ErrInvalidTableName or a *NameError for a
// name no table may have (CheckName, the x_ prefix), ctx.Err() when ctx
// ends while the queue is full, ErrClosed once Run has stopped, and the
// storage error that stopped the sequencer.
type Sequencer struct {
	*registry

	queue   chan *op
	stopped chan struct{} // closed when Run has returned

	submitMu sync.RWMutex // guards closed against in-flight Submits
	closed   bool

	// clock is the origin of queued, busySince and lastWait (monotonic
	// nanoseconds since it); busySince is when the group being committed
	// was taken from the queue (0: none; process resets it before it
	// answers the group's last operation), lastWait how long its oldest
	// write had waited in the queue (QueueDelay).
	clock     time.Time
	busySince atomic.Int64
	lastWait  atomic.Int64

	// floor holds the highest epoch and x_seq lease of every pruned
	// tombstone (Config.MaxTombstones); stored as the tombstone of
	// floorName. Sequencer goroutine only.
	floor store.TableMeta

	// testHookBeforeCommit, when set by a test, runs in the sequencer
	// goroutine after a group is stamped (seq published) and before the
	// store commit.
	testHookBeforeCommit func()

	// Scratch reused across groups (sequencer goroutine only).
	groupTables []*groupTable
	fieldSlab   []store.Field
	newCols     []store.Column
	// groupPointCount and groupBytes count the group's accepted points and
	// bound its fragments' encoded size (fragmentBytes).
	groupPointCount int
	groupBytes      int
	// pointSlab is where the fields of the point being applied begin in
	// fieldSlab; pointSID and pointKnown its series' id and whether t knew
	// it (checkPoint's look-up, which addPoint uses).
	pointSlab  int
	pointSID   uint64
	pointKnown bool
	// pointBytes is the point's fragmentBytes (checkPoint's).
	pointBytes int

	// sweep is the retention and history-trim pass in progress
	// (sequencer goroutine only).
	sweep sweeper

	// follow holds what a shared store reported of the other processes'
	// writes (registry.shared); dropped is, per name without a live
	// table, the id of the instance a DROP ended (here or through another
	// process): a report of it still pending is stale (sequencer goroutine
	// only; at most max(Config.MaxTombstones, minDropped) entries, the
	// lowest ids go first).
	follow  followed
	dropped map[string]uint64
	// loading are the names whose instance, new here, the resolver loads
	// (applyFollowed); their reports wait until it is taken (sequencer
	// goroutine only).
	loading map[string]bool
	// chg is the table change whose store calls the resolver makes
	// (changes.go; store.Shared only; sequencer goroutine only).
	chg *tableChange

	// res resolves what writes need of a shared store off this goroutine
	// (resolve.go; store.Shared only).
	res resolver
}

// Drainer is the feed's read side (docs/contract.md#drain): drain pages, the copy by
// time range (Rows), named consumers and their lag, and the tables'
// published state (Status, Table, Tables, TableStats), read from the
// table registry the Sequencer writes. A read never waits for the
// sequencer goroutine: it takes the registry's read lock and a table's
// lock only to copy the published state, then reads the store. All
// methods are safe for concurrent use, before, while and after Run runs
// (until the store is closed). A method given a table name returns
// ErrTableNotFound for an unknown table and a *NameError for a name no
// table can have (a client's mistake, not a missing table).
type Drainer struct {
	*registry
}

type opKind uint8

const (
	opWrite opKind = iota
	opCreate
	opSetSync
	opTruncate
	opDrop
	opDefine
)

type op struct {
	kind  opKind
	batch *Batch
	name  string
	flag  bool
	// cols are the columns opDefine declares.
	cols []Column
	// keepSync (opCreate) leaves an existing table's sync as it is;
	// retention (opCreate), when non-nil, sets the table's own retention.
	keepSync  bool
	retention *time.Duration
	// minTime (opWrite) is the batch's lowest point time, the order in
	// which commitGroup applies the writes of one group.
	minTime int64
	// queued is when the op entered the queue (Sequencer.clock).
	queued int64
	// parked (opWrite) is set while the resolver holds the op: the
	// group it was taken with does not answer it.
	parked bool
	done   chan struct{}
	// Outcome, valid once done is closed.
	res     Result
	status  SyncStatus
	created bool
	err     error
}

// groupTable is one table's part of a group commit.
type groupTable struct {
	t     *table
	frags []store.Fragment
	// writes are the indexes in frags at which another write's fragments
	// begin (store.TableCommit.Writes); op is the write frags ends with.
	writes    []int
	op        *op
	newSeries []store.Series
	metaDirty bool
	// cutoff is the oldest time (Unix nanoseconds) the table's retention
	// accepts in this group (math.MinInt64: no retention).
	cutoff int64
	// created is set when a write in this group created the table; tomb is
	// the tombstone it replaced, if any.
	created bool
	tomb    *store.TableMeta
}

// Open loads every table from st and returns the feed's two sides over
// one table registry: the Sequencer, ready to Run, and the Drainer.
// logger may be nil (discard); reg may be nil (no metrics). Errors: an
// invalid cfg (Config.Validate), or the storage error of loading a table.
func Open(cfg Config, st Storage, logger *slog.Logger, reg prometheus.Registerer) (*Sequencer, *Drainer, error) {
	s, err := newSequencer(cfg, st, logger, reg)
	if err != nil {
		return nil, nil, err
	}
	return s, &Drainer{registry: s.registry}, nil
}

// newSequencer loads every table from st and returns a sequencer ready to
// Run.
func newSequencer(cfg Config, st Storage, logger *slog.Logger, reg prometheus.Registerer) (*Sequencer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	limits := st.Limits()
	if err := cfg.checkLimits(limits); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Sequencer{
		registry: &registry{
			cfg: cfg, st: st, limits: limits, logger: logger.With("component", "feed"), now: time.Now,
			stopping:   make(chan struct{}),
			tables:     map[string]*table{},
			tombstones: map[string]store.TableMeta{},
			counts:     &consumerCounts{byOwner: map[string]int{}},
		},
		queue: make(chan *op, cfg.QueueLength), clock: time.Now(),
		stopped: make(chan struct{}),
	}
	if sh, ok := st.(store.Shared); ok {
		// Registered before the tables load: a report meanwhile is applied
		// (idempotently) once Run runs.
		s.shared = sh
		s.follow = followed{pending: map[string]*change{}, wake: make(chan struct{}, 1)}
		s.dropped, s.loading = map[string]uint64{}, map[string]bool{}
		sh.Follow(s.follow.add)
	}
	metas, err := st.LoadTables(storeCtx)
	if err != nil {
		return nil, fmt.Errorf("load tables: %w", err)
	}
	for _, m := range metas {
		if m.Dropped && m.Name == floorName {
			s.floor = m
			continue
		}
		if m.Dropped {
			s.tombstones[m.Name] = m
			continue
		}
		series, err := st.LoadSeries(storeCtx, m.ID)
		if err != nil {
			return nil, fmt.Errorf("load series of %s: %w", m.Name, err)
		}
		t := newTable(m, series)
		if t.pub.horizon, err = loadHorizon(st, m.ID); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Name, err)
		}
		cs, err := st.LoadConsumers(storeCtx, m.Name)
		if err != nil {
			return nil, fmt.Errorf("load consumers of %s: %w", m.Name, err)
		}
		t.consumers.load(cs, s.counts)
		s.putTableLocked(t)
	}
	s.m = newMetrics(reg, s)
	// --feed-max-tombstones may have been lowered since the last run.
	if err := s.pruneTombstones(); err != nil {
		return nil, err
	}
	return s, nil
}

// Submit queues a batch for the sequencer and returns at once unless the
// queue is full, in which case it blocks (back-pressure) until there is
// room, ctx ends (ctx.Err()) or the sequencer stops (ErrClosed). The batch
// must not be modified until Wait returns.
//
// Batches in flight together (queued, none answered yet) may be committed
// in any order (see commitGroup): a writer that needs one write to follow
// another waits for the first's answer, as the TCP listener does (one
// batch in flight per connection) and every HTTP client does between
// requests. The points of one batch keep their line order.
func (s *Sequencer) Submit(ctx context.Context, b *Batch) (*Pending, error) {
	o := &op{kind: opWrite, batch: b, minTime: minTime(b), done: make(chan struct{})}
	if err := s.enqueue(ctx, o); err != nil {
		return nil, err
	}
	return &Pending{o: o}, nil
}

// Append submits a batch and waits until it is durable (docs/contract.md#durable-writes: 204 only
// after fsync).
func (s *Sequencer) Append(ctx context.Context, b *Batch) (Result, error) {
	p, err := s.Submit(ctx, b)
	if err != nil {
		return Result{}, err
	}
	return p.Wait(ctx)
}

// Submitter queues batches for the sequencer: the Sequencer's Submit, as
// the listeners see it.
type Submitter interface {
	// Submit queues b, blocking while the queue is full until there is
	// room, ctx ends (ctx.Err()) or the sequencer stops (ErrClosed); b
	// must not be changed until the Pending's Wait returns. Safe for
	// concurrent use.
	Submit(ctx context.Context, b *Batch) (*Pending, error)
}

// AppendWithin submits b to s, waiting at most submitTimeout for room in
// the queue (ErrBusy past it while ctx still lives), then waits until the
// batch is durable or ctx ends, as Append. The HTTP writes and SQL INSERT
// use it so that a saturated sequencer answers 503 instead of holding them.
func AppendWithin(ctx context.Context, s Submitter, b *Batch, submitTimeout time.Duration) (Result, error) {
	sctx, cancel := context.WithTimeout(ctx, submitTimeout)
	p, err := s.Submit(sctx, b)
	cancel()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return Result{}, ErrBusy
		}
		return Result{}, err
	}
	return p.Wait(ctx)
}

// Pending is a submitted batch.
type Pending struct{ o *op }

// Wait blocks until the batch is committed (its accepted points durable and
// visible) or failed, or ctx ends. A batch whose wait is abandoned is still
// committed.
func (p *Pending) Wait(ctx context.Context) (Result, error) {
	select {
	case <-p.o.done:
		return p.o.res, p.o.err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

func (s *Sequencer) enqueue(ctx context.Context, o *op) error {
	s.submitMu.RLock()
	defer s.submitMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	o.queued = s.monotonic()
	select {
	case s.queue <- o:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stopping:
		return ErrClosed
	}
}

// control runs a table operation in the sequencer and waits for it.
func (s *Sequencer) control(ctx context.Context, kind opKind, name string, flag bool) (*op, error) {
	return s.runOp(ctx, &op{kind: kind, name: name, flag: flag})
}

// runOp runs the table operation o in the sequencer and waits for it.
func (s *Sequencer) runOp(ctx context.Context, o *op) (*op, error) {
	if err := s.checkTableName(o.name); err != nil {
		return nil, err
	}
	o.done = make(chan struct{})
	if err := s.enqueue(ctx, o); err != nil {
		return nil, err
	}
	select {
	case <-o.done:
		return o, o.err
	case <-s.stopped:
		select {
		case <-o.done:
			return o, o.err
		default:
			return nil, ErrClosed
		}
	}
}

// checkTableName refuses a table name that breaks CheckName's rules or
// starts with the reserved x_ prefix.
func (s *Sequencer) checkTableName(name string) error {
	if err := CheckName("table", name, s.cfg.MaxNameBytes); err != nil {
		return err
	}
	if strings.HasPrefix(name, "x_") {
		return fmt.Errorf("%w: %s (the x_ prefix is reserved)", ErrInvalidTableName, QuoteInput(name))
	}
	return nil
}

// Run is the sequencer goroutine. It returns nil after ctx ends, every
// operation queued before has been committed and the consumers' changed
// positions written; the error of that final write (every line is
// committed then); or the storage error that stopped it (after failing
// every queued operation).
func (s *Sequencer) Run(ctx context.Context) error {
	defer close(s.stopped)
	if s.shared != nil {
		s.startResolver()
		defer s.stopResolver()
	}
	upkeepStop, upkeepDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(upkeepDone)
		s.consumerUpkeep(upkeepStop)
	}()
	defer func() {
		close(upkeepStop)
		<-upkeepDone // no store call of it after Run returns
	}()
	sweepTick := time.NewTicker(s.cfg.SweepInterval)
	defer sweepTick.Stop()
	s.sweep.done = make(chan *sweepJob, 1)
	defer s.awaitSweep()
	s.sweep.startPass(s)
	var batch []*op
	for {
		// While a sweep pass has steps left, one step is ready at every
		// turn: select picks among it and the queued operations at random,
		// so a sweep batch never holds writes up for more than one batch
		// (on a shared store, the step's store calls run beside: sweepStep).
		var step <-chan struct{}
		if s.sweep.ready() {
			step = closedChan
		}
		select {
		case <-step:
			if err := s.sweepStep(); err != nil {
				s.fail(err)
				return err
			}
		case j := <-s.sweep.done:
			if err := s.sweepStepped(j); err != nil {
				s.fail(err)
				return err
			}
		case <-sweepTick.C:
			s.sweep.startPass(s)
		case <-s.follow.wake:
			s.applyFollowed(true)
		case <-s.res.ready:
			// The resolver's results may hold no write (a table loaded
			// for a follow report, a write that failed): a group
			// begins only with one, for only a group's end marks the
			// sequencer idle again (finish).
			resolved, err := s.takeResolved(batch[:0])
			if err != nil {
				s.fail(err)
				return err
			}
			batch = s.collect(resolved)
			if len(batch) == 0 {
				break
			}
			s.busySince.Store(s.monotonic())
			if err := s.process(batch); err != nil {
				s.fail(err)
				return err
			}
		case o := <-s.queue:
			taken := s.monotonic()
			s.lastWait.Store(taken - o.queued)
			s.busySince.Store(taken)
			batch = s.collect(append(batch[:0], o))
			if err := s.process(batch); err != nil {
				s.fail(err)
				return err
			}
		case <-ctx.Done():
			s.stop()
			// What was queued, and the writes parked with the resolver,
			// are committed first.
			for len(s.queue) > 0 || s.res.parked.Load() > 0 {
				if len(s.queue) > 0 {
					batch = s.collect(batch[:0])
				} else {
					<-s.res.ready
					var err error
					if batch, err = s.takeResolved(batch[:0]); err != nil {
						s.failQueued(err)
						s.failParked(err)
						return err
					}
				}
				if err := s.process(batch); err != nil {
					s.failQueued(err)
					s.failParked(err)
					return err
				}
			}
			// The positions are written at shutdown too
			// (docs/contract.md#consumers): a stop that could not
			// write them is not clean.
			return s.flushConsumers()
		}
	}
}

// monotonic is the time since s.clock in nanoseconds (monotonic, above 0).
func (s *Sequencer) monotonic() int64 { return int64(time.Since(s.clock)) + 1 }

// QueueDelay estimates how long a write submitted now waits before the
// sequencer takes it: 0 when the queue is empty and no group is being
// committed, else the longer of how long the oldest write of the last
// group taken had waited and how long that group has been committing so
// far. The HTTP write handler refuses writes past
// --http-write-max-delay with it, before parsing their bodies.
// Safe for concurrent use; costs two atomic loads.
func (s *Sequencer) QueueDelay() time.Duration {
	busy := s.busySince.Load()
	if busy == 0 && len(s.queue) == 0 {
		return 0
	}
	d := s.lastWait.Load()
	if busy != 0 {
		d = max(d, s.monotonic()-busy)
	}
	return time.Duration(d)
}

// closedChan is always ready.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// stop refuses new operations and waits until no Submit is mid-enqueue.
func (s *Sequencer) stop() {
	close(s.stopping)
	s.submitMu.Lock()
	s.closed = true
	s.submitMu.Unlock()
}

// fail stops the sequencer after the storage failure err: every queued
// and parked operation fails with it.
func (s *Sequencer) fail(err error) {
	s.stop()
	s.failQueued(err)
	s.failParked(err)
}

func (s *Sequencer) failQueued(err error) {
	for {
		select {
		case o := <-s.queue:
			failOps([]*op{o}, err)
		default:
			return
		}
	}
}

// collect adds queued operations to batch, without blocking, up to the
// group limit.
func (s *Sequencer) collect(batch []*op) []*op {
	points := 0
	for _, o := range batch {
		if o.batch != nil {
			points += len(o.batch.Points)
		}
	}
	for points < s.cfg.MaxGroupPoints {
		select {
		case o := <-s.queue:
			batch = append(batch, o)
			if o.batch != nil {
				points += len(o.batch.Points)
			}
		default:
			return batch
		}
	}
	return batch
}

// process runs ops in order: runs of writes become one group commit, a
// table operation runs alone between them. After a storage failure it fails
// the ops not yet run with the same error and returns it. It clears ops
// before it returns: the caller reuses the slice, whose stale entries
// would keep the answered writes' batches (their points, and the parsed
// strings and parser arenas they point into) alive.
func (s *Sequencer) process(ops []*op) error {
	defer clear(ops)
	for len(ops) > 0 {
		if ops[0].kind != opWrite && s.shared != nil {
			// Its store calls run on the resolver (changes.go).
			s.beginChange(ops[0])
			s.finish(nil, nil, len(ops) == 1)
			ops = ops[1:]
			continue
		}
		if ops[0].kind != opWrite {
			s.runControl(ops[0])
			err := ops[0].err
			fatal := err != nil && errors.Is(err, errStorage)
			s.finish(ops[:1], err, len(ops) == 1 || fatal)
			if fatal {
				failOps(ops[1:], err)
				return err
			}
			ops = ops[1:]
			continue
		}
		n := 1
		for n < len(ops) && ops[n].kind == opWrite {
			n++
		}
		err := s.commitGroup(ops[:n])
		fatal := err != nil && errors.Is(err, errStorage)
		s.finish(ops[:n], err, n == len(ops) || fatal)
		if fatal {
			failOps(ops[n:], err)
			return err
		}
		ops = ops[n:]
	}
	return nil
}

// finish completes ops with err (nil: success). When last (they end the
// group Run took, or err stops the sequencer) it first marks the group
// done (busySince 0): a writer told its write is done must never read a
// QueueDelay that still counts its own finished group, or a sequential
// writer behind a slow disk would be refused (HTTP 503) with the queue
// empty.
func (s *Sequencer) finish(ops []*op, err error, last bool) {
	if last {
		s.busySince.Store(0)
	}
	failOps(ops, err)
}

// failOps completes ops with err (nil: success), but for the parked ones
// (the resolver answers them).
func failOps(ops []*op, err error) {
	for _, o := range ops {
		if o.parked {
			continue
		}
		o.err = err
		close(o.done)
	}
}

// storeCtx is the context of the store calls no request is behind: the
// sequencer's, which are never abandoned half-way (the sequencer's memory
// would then be ahead of the store), so none is cancelled, not even by
// Run's context (Run commits what was queued before it ended); and
// loading, stats and consumer flushes.
var storeCtx = context.Background()

// errStorage marks errors that stop the sequencer.
var errStorage = errors.New("feed: storage failure")

// storageErr is the error of a store call that failed: ErrUnavailable
// when the store's service did not answer (store.ErrUnavailable: the
// operation fails, the sequencer runs on), else a storage failure that
// stops the sequencer (the disk's own: errStorage).
func storageErr(what string, err error) error {
	if errors.Is(err, store.ErrNotServed) {
		return fmt.Errorf("%w: %s: %w", ErrNotServed, what, err)
	}
	if errors.Is(err, store.ErrUnavailable) {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
	}
	return fmt.Errorf("%w: %s: %w", errStorage, what, err)
}

// commitGroup validates, stamps and commits a run of write ops: one store
// commit, or several when their fragments would exceed
// Config.MaxGroupBytes (a table's block is one store value, which the store
// bounds), each committed as soon as it is full.
//
// The writes are applied in the order of their batches' lowest point time
// (stable: equal times keep their queue order), not their queue order.
// They were all in flight together, so either order is one the writers
// could have seen (docs/contract.md#arrival-order among requests nobody has been
// answered yet is the sequencer's to choose, as a database serialises
// concurrent transactions). It matters for speed: concurrent writers'
// batches of one time-ordered stream (TSBS's loader, an open-loop client,
// retries) reach the queue shuffled, and applied as queued every batch
// that overtook an older one would make the older one's points late,
// each a gap run or a point-index look-up in the store; sorted, a
// series' points of one group commit mostly ascend and join its
// in-order run.
func (s *Sequencer) commitGroup(ops []*op) error {
	if len(ops) > 1 {
		slices.SortStableFunc(ops, func(a, b *op) int { return cmp.Compare(a.minTime, b.minTime) })
	}
	s.resetGroup()
	for _, o := range ops {
		// With a shared store, a write that needs new tables, columns or
		// series waits for them with the resolver, out of the group
		// (resolve.go). Checked right before the apply: nothing but the
		// group's own writes changes the tables until it is done.
		if s.shared != nil {
			if s.changing(o) { // after the change of its table
				s.waitChange(o)
				continue
			}
			if req := s.needs(o); req != nil {
				s.park(req)
				continue
			}
		}
		if err := s.applyBatch(o); err != nil {
			return err
		}
	}
	return s.flushGroup()
}

// minTime returns the lowest point time of b (0 when it has none).
func minTime(b *Batch) int64 {
	if len(b.Points) == 0 {
		return 0
	}
	m := b.Points[0].Time
	for i := 1; i < len(b.Points); i++ {
		m = min(m, b.Points[i].Time)
	}
	return m
}

// resetGroup starts an empty group. The scratch slices are cleared, not
// only truncated: their stale entries would keep the committed group's
// field strings, and with them the parsers' arenas they point into, alive
// until the next group of that size overwrote them (after a flood of
// 300 TCP writers, 467 MB of committed string values stayed in use).
func (s *Sequencer) resetGroup() {
	clear(s.groupTables)
	s.groupTables = s.groupTables[:0]
	s.truncSlab(0)
	s.groupPointCount, s.groupBytes = 0, 0
}

// truncSlab cuts s.fieldSlab to n entries, clearing those it drops.
func (s *Sequencer) truncSlab(n int) {
	clear(s.fieldSlab[n:])
	s.fieldSlab = s.fieldSlab[:n]
}

// flushGroup stamps and commits the group built so far, publishes the
// watermarks and starts an empty group.
func (s *Sequencer) flushGroup() error {
	defer s.resetGroup()
	points := s.groupPointCount
	s.forgetUnwrittenTables()
	commits := make([]store.TableCommit, 0, len(s.groupTables))
	for _, g := range s.groupTables {
		t := g.t
		t.lastFrags = min(len(g.frags), s.cfg.MaxGroupPoints)
		tc := store.TableCommit{TableID: t.meta.ID, NewSeries: g.newSeries, Fragments: g.frags, Writes: g.writes, CommitTime: s.now().UnixNano(),
			Sync: t.meta.Sync}
		if g.metaDirty {
			m := t.meta
			m.Columns = append([]store.Column(nil), m.Columns...)
			tc.Meta = &m
		}
		commits = append(commits, tc)
	}
	// The store assigns the x_seq numbers and calls stamped before any of
	// them is visible: seq is published as handed out, the watermark only
	// once the commit is durable.
	stamped := func() {
		for i, g := range s.groupTables {
			if tc := &commits[i]; tc.FirstSeq != 0 {
				g.t.seq = tc.FirstSeq + uint64(len(tc.Fragments)) - 1
			}
			g.t.mu.Lock()
			g.t.pub.seq = g.t.seq
			g.t.mu.Unlock()
		}
		if s.testHookBeforeCommit != nil {
			s.testHookBeforeCommit()
		}
	}
	start := s.now()
	if err := s.st.Append(storeCtx, commits, stamped); err != nil {
		err = storageErr("commit", err)
		if !errors.Is(err, errStorage) {
			s.abandonGroup()
		}
		return err
	}
	s.m.commitSeconds.Observe(s.now().Sub(start).Seconds())
	// The other processes' blocks numbered below this group's are applied
	// (Append returned): their series and columns are published first.
	// Their instance changes wait for the end of the group, whose writes
	// were checked against the instances as they are (needs).
	s.applyFollowed(false)
	s.m.groupPoints.Observe(float64(points))
	s.m.committed.Add(float64(points))
	for _, g := range s.groupTables {
		g.t.mu.Lock()
		g.t.pub.points += uint64(len(g.frags))
		if g.t.pub.watermark != g.t.seq {
			g.t.pub.watermark = g.t.seq
			g.t.notifyLocked()
		}
		g.t.mu.Unlock()
		g.t.group = nil
	}
	return nil
}

// abandonGroup forgets the group a commit failed for, when the sequencer
// runs on (ErrUnavailable): its tables' next group carries again the
// metadata and series this one did (another process learns a series from
// the block that brings it).
func (s *Sequencer) abandonGroup() {
	for _, g := range s.groupTables {
		t := g.t
		t.metaPending = t.metaPending || g.metaDirty
		if s.shared != nil {
			t.announce = append(g.newSeries, t.announce...)
		}
		t.group = nil
	}
}

// applyBatch validates each point of o's batch and adds the accepted ones
// to the group, committing the group whenever it reaches
// Config.MaxGroupBytes. It returns the storage error of such a commit or
// of a new table's instance id.
func (s *Sequencer) applyBatch(o *op) error {
	var t *table
	for i := range o.batch.Points {
		if s.groupBytes >= s.cfg.MaxGroupBytes {
			s.m.groupSplits.Inc()
			if err := s.flushGroup(); err != nil {
				return err
			}
			t = nil // its group was committed
		}
		p := &o.batch.Points[i]
		if t == nil || t.name != p.Table {
			var err error
			if err = CheckKey("measurement", p.Table, s.cfg.MaxNameBytes); err != nil {
				s.m.rejected.WithLabelValues(reasonInvalidName).Inc()
				o.res.Rejected = append(o.res.Rejected, &RejectError{Line: p.Line, Key: p.Table, Err: err, Msg: err.Error()})
				t = nil
				continue
			}
			if _, ok := s.tables[p.Table]; !ok && o.batch.NoCreate {
				t, err = nil, fmt.Errorf("%w: %s", ErrTableNotFound, QuoteInput(p.Table))
			} else {
				t, err = s.tableForWrite(p.Table)
			}
			if errors.Is(err, errStorage) {
				return err // no instance id: the store failed
			}
			if err != nil {
				o.res.Rejected = append(o.res.Rejected, &RejectError{Line: p.Line, Key: p.Table, Err: err, Msg: err.Error()})
				t = nil
				continue
			}
		}
		if rej := s.applyPoint(t, p); rej != nil {
			o.res.Rejected = append(o.res.Rejected, rej)
			continue
		}
		if g := t.group; g.op != o {
			if n := len(g.frags) - 1; n > 0 {
				g.writes = append(g.writes, n)
			}
			g.op = o
		}
		o.res.Accepted++
		s.groupPointCount++
		s.groupBytes += s.pointBytes
	}
	return nil
}

// fragmentBytes bounds the size of p's fragment in a stored block
// (store.FragmentBytes).
func fragmentBytes(p *Point) int {
	n := 0
	for _, f := range p.Fields {
		n += len(f.Value.Str)
	}
	return store.FragmentBytes(len(p.Fields), n)
}

// tableForWrite returns the live table, creating it (sync per
// Config.SyncTables) on first write.
func (s *Sequencer) tableForWrite(name string) (*table, error) {
	if t, ok := s.tables[name]; ok {
		if t.group == nil {
			t.group = &groupTable{t: t, frags: make([]store.Fragment, 0, t.lastFrags), cutoff: s.writeCutoff(t),
				metaDirty: t.metaPending, newSeries: t.announce}
			t.metaPending, t.announce = false, nil
			s.groupTables = append(s.groupTables, t.group)
		}
		return t, nil
	}
	if err := s.checkTableName(name); err != nil {
		return nil, err
	}
	if err := s.checkTableLimit(); err != nil {
		return nil, err
	}
	if s.shared != nil {
		// The resolver creates a table for the points that need it
		// (needs): these break a name or limit rule, which checkPoint
		// reports against an empty table that is neither kept nor
		// committed.
		t := newTable(store.TableMeta{Name: name}, nil)
		t.group = &groupTable{t: t, cutoff: math.MinInt64}
		return t, nil
	}
	tomb, dropped := s.tombstones[name]
	t, err := s.createTable(name, s.cfg.syncOnCreate(name))
	if err != nil {
		return nil, err
	}
	t.group = &groupTable{t: t, metaDirty: true, created: true, cutoff: s.writeCutoff(t)}
	if dropped {
		t.group.tomb = &tomb
	}
	s.groupTables = append(s.groupTables, t.group)
	return t, nil
}

// forgetUnwrittenTables undoes the creation of the tables that writes of
// this group created but none of whose points were accepted (a rejected line
// creates nothing), restoring the tombstone each replaced.
func (s *Sequencer) forgetUnwrittenTables() {
	kept := s.groupTables[:0]
	for _, g := range s.groupTables {
		if !g.created || len(g.frags) > 0 {
			kept = append(kept, g)
			continue
		}
		s.mu.Lock()
		s.deleteTableLocked(g.t.name)
		if g.tomb != nil {
			s.tombstones[g.t.name] = *g.tomb
		}
		s.mu.Unlock()
		g.t.group = nil
		g.t.notify()
	}
	clear(s.groupTables[len(kept):])
	s.groupTables = kept
}

// checkTableLimit refuses a new table past Config.MaxTables.
func (s *Sequencer) checkTableLimit() error {
	if len(s.tables) >= s.cfg.MaxTables {
		return fmt.Errorf("%w: %d tables already (--feed-max-tables)", ErrTableLimit, s.cfg.MaxTables)
	}
	return nil
}

// floorName is the reserved name (the x_ prefix is engine-owned, so no
// table has it) under which the tombstone floor is stored.
const floorName = "x_dropped_tables_floor"

// pruneTombstones folds tombstones past Config.MaxTombstones into the
// floor, the lowest sequence first: the floor is raised and the tombstone
// goes in one store call, so a crash loses nothing.
func (s *Sequencer) pruneTombstones() error {
	if len(s.tombstones) <= s.cfg.MaxTombstones {
		return nil
	}
	pruned, floor, err := foldTombstones(s.st, maps.Clone(s.tombstones), s.floor, s.cfg.MaxTombstones)
	s.takeFold(pruned, floor)
	if err != nil {
		return storageErr("prune a tombstone", err)
	}
	return nil
}

// foldTombstones folds the oldest of tombs (the lowest sequence first)
// into floor while more than limit are left, one PruneTombstone each,
// and returns the names folded and the floor they raised, up to the
// first store error. It deletes them from tombs, reads nothing else.
func foldTombstones(st Storage, tombs map[string]store.TableMeta, floor store.TableMeta, limit int) ([]string, store.TableMeta, error) {
	var pruned []string
	for len(tombs) > limit {
		var victim store.TableMeta
		first := true
		for _, tb := range tombs {
			if first || tb.Seq < victim.Seq || tb.Seq == victim.Seq && tb.Name < victim.Name {
				victim, first = tb, false
			}
		}
		next := store.TableMeta{Name: floorName, Dropped: true,
			Epoch: max(floor.Epoch, victim.Epoch), Seq: max(floor.Seq, victim.Seq)}
		if err := st.PruneTombstone(storeCtx, victim.Name, next); err != nil {
			return pruned, floor, err
		}
		floor = next
		delete(tombs, victim.Name)
		pruned = append(pruned, victim.Name)
	}
	return pruned, floor, nil
}

// takeFold makes what foldTombstones folded the sequencer's: the
// tombstones pruned leave, the floor rises.
func (s *Sequencer) takeFold(pruned []string, floor store.TableMeta) {
	if len(pruned) == 0 {
		return
	}
	s.floor = floor
	s.mu.Lock()
	for _, name := range pruned {
		delete(s.tombstones, name)
	}
	s.mu.Unlock()
	s.m.tombstonesPruned.Add(float64(len(pruned)))
}

// newMeta returns the metadata of a new instance of table name, but for
// its id: resuming above the name's tombstone, else above every pruned
// one.
func (s *Sequencer) newMeta(name string, sync bool) store.TableMeta {
	meta := store.TableMeta{Name: name, Sync: sync, Epoch: s.floor.Epoch, Seq: s.floor.Seq}
	if tomb, ok := s.tombstones[name]; ok {
		meta.Epoch, meta.Seq = tomb.Epoch, tomb.Seq
	}
	if sync {
		meta.Epoch++
	}
	return meta
}

// createTable makes a new live table (not yet persisted), resuming above a
// dropped table's epoch and sequence.
func (s *Sequencer) createTable(name string, sync bool) (*table, error) {
	id, err := s.st.NewTableID(storeCtx)
	if err != nil {
		return nil, storageErr("create table", err)
	}
	meta := s.newMeta(name, sync)
	meta.ID = id
	t := newTable(meta, nil)
	s.mu.Lock()
	s.putTableLocked(t)
	delete(s.tombstones, name)
	s.mu.Unlock()
	return t, nil
}

// applyPoint checks p against t's schema, extends the schema and series
// dictionary as needed and adds the fragment to t's group. Nothing changes
// when it returns a rejection. With a shared store the resolver has added
// p's columns and numbered its series before (needs).
func (s *Sequencer) applyPoint(t *table, p *Point) *RejectError {
	rej := s.checkPoint(t, p)
	if rej == nil && s.shared != nil && (len(s.newCols) > 0 || !s.pointKnown) {
		// The resolver numbers new columns and series (needs): not reached.
		s.truncSlab(s.pointSlab)
		s.m.rejected.WithLabelValues(reasonUnresolved).Inc()
		err := fmt.Errorf("%w: a column or series of table %s not numbered yet", ErrUnavailable, QuoteInput(t.name))
		return &RejectError{Line: p.Line, Err: err, Msg: err.Error()}
	}
	s.addPoint(t, p, rej)
	return rej
}

// checkPoint checks p against t's schema: its fields' columns go to
// s.fieldSlab from s.pointSlab on, the columns it adds to s.newCols.
// Nothing changes when it returns a rejection.
func (s *Sequencer) checkPoint(t *table, p *Point) *RejectError {
	reject := func(err error, key, reason, msg string) *RejectError {
		s.m.rejected.WithLabelValues(reason).Inc()
		return &RejectError{Line: p.Line, Key: key, Err: err, Msg: msg}
	}
	s.newCols = s.newCols[:0]
	// The rules of CheckPoint: the time and the field values of every
	// point, the keys and tag values of a series or column the first time
	// the table sees it (the series key is injective: a known one has the
	// tags that passed then).
	if err := CheckTime(p.Time); err != nil {
		return reject(err, "", reasonTimeRange, err.Error())
	}
	for _, f := range p.Fields {
		if err := CheckFieldValue(f.Key, f.Value, s.maxStringBytes()); err != nil {
			return reject(err, f.Key, reasonInvalidValue, err.Error())
		}
	}
	s.pointBytes = fragmentBytes(p)
	if n := s.pointBytes; n > s.limits.MaxFragmentBytes {
		err := fmt.Errorf("%w: the point's fields take up to %d bytes stored, more than the store holds in one point (%d)", ErrInvalidValue, n, s.limits.MaxFragmentBytes)
		return reject(err, "", reasonInvalidValue, err.Error())
	}
	if p.Time < t.group.cutoff {
		return reject(ErrBeyondRetention, "", reasonBeyondRetention,
			fmt.Sprintf("time %s is older than the retention of table %s (%s)",
				time.Unix(0, p.Time).UTC().Format(time.RFC3339Nano), QuoteInput(t.name), FormatRetention(s.retention(t))))
	}
	sid, known := t.series[p.Series]
	s.pointSID, s.pointKnown = sid, known
	if !known {
		if len(t.series) >= s.cfg.MaxSeriesPerTable {
			return reject(ErrSeriesLimit, "", reasonSeriesLimit,
				fmt.Sprintf("table %s already has %d series (--feed-max-series-per-table)", QuoteInput(t.name), s.cfg.MaxSeriesPerTable))
		}
		if !s.seriesRoom(pointSeriesCost(p)) {
			return reject(ErrSeriesLimit, "", reasonSeriesLimit,
				fmt.Sprintf("the series dictionaries hold %d bytes, a new series does not fit in --feed-max-series-bytes=%d", s.seriesBytes.Load(), s.cfg.MaxSeriesBytes))
		}
		for _, tag := range p.Tags {
			if err := CheckTagValue(tag.Key, tag.Value, s.maxStringBytes()); err != nil {
				return reject(err, tag.Key, reasonInvalidValue, err.Error())
			}
			if c, ok := t.colByName[tag.Key]; ok {
				if t.meta.Columns[c].Kind != KindTag {
					return reject(ErrTagFieldConflict, tag.Key, reasonTagField,
						fmt.Sprintf("%s is a %s field of table %s and cannot be a tag", QuoteInput(tag.Key), t.meta.Columns[c].Kind, QuoteInput(t.name)))
				}
				continue
			}
			if err := CheckKey("tag key", tag.Key, s.cfg.MaxNameBytes); err != nil {
				return reject(err, tag.Key, reasonInvalidName, err.Error())
			}
			s.newCols = append(s.newCols, store.Column{Name: tag.Key, Kind: KindTag})
		}
	}
	slab := len(s.fieldSlab)
	s.pointSlab = slab
	sameShape := len(p.Fields) == len(t.shapeKeys)
	for j, f := range p.Fields {
		var c uint32
		ok := j < len(t.shapeKeys) && t.shapeKeys[j] == f.Key
		if ok {
			c = t.shapeCols[j]
		} else {
			sameShape = false
			c, ok = t.colByName[f.Key]
		}
		if !ok {
			if k := s.pendingKind(f.Key); k != 0 {
				s.truncSlab(slab)
				return reject(ErrTagFieldConflict, f.Key, reasonTagField,
					fmt.Sprintf("%s is used as a tag and a field", QuoteInput(f.Key)))
			}
			if err := CheckKey("field key", f.Key, s.cfg.MaxNameBytes); err != nil {
				s.truncSlab(slab)
				return reject(err, f.Key, reasonInvalidName, err.Error())
			}
			c = uint32(len(t.meta.Columns) + len(s.newCols))
			s.newCols = append(s.newCols, store.Column{Name: f.Key, Kind: f.Value.Kind})
		} else if k := t.meta.Columns[c].Kind; k != f.Value.Kind {
			s.truncSlab(slab)
			if k == KindTag {
				return reject(ErrTagFieldConflict, f.Key, reasonTagField,
					fmt.Sprintf("%s is a tag of table %s and cannot be a field", QuoteInput(f.Key), QuoteInput(t.name)))
			}
			return reject(ErrFieldTypeConflict, f.Key, reasonFieldType,
				fmt.Sprintf("field %s is %s in table %s, got %s", QuoteInput(f.Key), k, QuoteInput(t.name), f.Value.Kind))
		}
		s.fieldSlab = append(s.fieldSlab, store.Field{Col: c, Value: f.Value})
	}
	if len(t.meta.Columns)+len(s.newCols) > s.cfg.MaxColumnsPerTable {
		s.truncSlab(slab)
		return reject(ErrColumnLimit, "", reasonColumnLimit,
			fmt.Sprintf("table %s would have %d columns, more than --feed-max-columns-per-table=%d",
				QuoteInput(t.name), len(t.meta.Columns)+len(s.newCols), s.cfg.MaxColumnsPerTable))
	}
	if n := columnsCost(s.newCols); len(s.newCols) > 0 && !s.schemaRoom(n) {
		s.truncSlab(slab)
		return reject(ErrColumnLimit, "", reasonColumnLimit,
			fmt.Sprintf("the tables' schemas hold %d bytes, the new columns of table %s do not fit in --feed-max-schema-bytes=%d",
				s.schemaBytes.Load(), QuoteInput(t.name), s.cfg.MaxSchemaBytes))
	}
	if n := t.metaBytes + columnsBytes(s.newCols); len(s.newCols) > 0 && n > s.limits.MaxMetaBytes {
		s.truncSlab(slab)
		return reject(ErrColumnLimit, "", reasonColumnLimit,
			fmt.Sprintf("table %s's schema would take up to %d bytes stored, more than the store holds (%d): shorter names or fewer columns",
				QuoteInput(t.name), n, s.limits.MaxMetaBytes))
	}
	// A shared store places new columns itself: the point is checked
	// again, and its shape taken then.
	if !sameShape && (s.shared == nil || len(s.newCols) == 0) {
		t.setShape(s.fieldSlab[slab:], p.Fields)
	}
	return nil
}

// columnsBytes bounds what cols add to a stored schema
// (store.ColumnBytes).
// columnsCost is the columnCost of cols together.
func columnsCost(cols []store.Column) int64 {
	var n int64
	for _, c := range cols {
		n += columnCost(c.Name)
	}
	return n
}

func columnsBytes(cols []store.Column) int {
	n := 0
	for _, c := range cols {
		n += store.ColumnBytes(c.Name)
	}
	return n
}

// maxStringBytes is Config.MaxStringBytes, DefaultMaxStringBytes for 0.
func (s *Sequencer) maxStringBytes() int {
	if s.cfg.MaxStringBytes > 0 {
		return s.cfg.MaxStringBytes
	}
	return DefaultMaxStringBytes
}

// addPoint adds p, checked by checkPoint (rej: refused, nothing to add),
// to t's group with the columns it adds and its series, numbered here
// (with a shared store they are known: needs).
func (s *Sequencer) addPoint(t *table, p *Point, rej *RejectError) {
	if rej != nil {
		return
	}
	slab, sid, known := s.pointSlab, s.pointSID, s.pointKnown
	g := t.group
	if len(s.newCols) > 0 {
		for _, c := range s.newCols {
			s.addColumn(t, c)
		}
		g.metaDirty = true
		t.columnsAdded()
	}
	if !known {
		tags := make([]store.Field, len(p.Tags))
		for i, tag := range p.Tags {
			tags[i] = store.Field{Col: t.colByName[tag.Key], Value: Value{Kind: KindTag, Str: strings.Clone(tag.Value)}}
		}
		sid = uint64(len(t.series) + 1)
		t.series[strings.Clone(p.Series)] = sid
		s.addSeriesBytes(t, seriesCost(len(p.Series), tags))
		t.mu.Lock()
		t.pub.tags = append(t.pub.tags, tags)
		t.mu.Unlock()
		g.newSeries = append(g.newSeries, store.Series{ID: sid, Tags: tags})
	}
	g.frags = append(g.frags, store.Fragment{Series: sid, Time: p.Time, Fields: s.fieldSlab[slab:len(s.fieldSlab):len(s.fieldSlab)]})
}

// setShape makes the keys of fields, whose columns are cols (in order),
// t's shape. Sequencer goroutine only.
func (t *table) setShape(cols []store.Field, fields []PointField) {
	t.shapeKeys, t.shapeCols = t.shapeKeys[:0], t.shapeCols[:0]
	for i := range fields {
		t.shapeKeys = append(t.shapeKeys, fields[i].Key)
		t.shapeCols = append(t.shapeCols, cols[i].Col)
	}
}

// pendingKind returns the kind of a column added by the point being
// applied, or 0.
func (s *Sequencer) pendingKind(name string) Kind {
	for _, c := range s.newCols {
		if c.Name == name {
			return c.Kind
		}
	}
	return 0
}

// liveTables returns the live tables (any order).
func (s *registry) liveTables() []*table {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*table, 0, len(s.tables))
	for _, t := range s.tables {
		out = append(out, t)
	}
	return out
}

// lookup returns the live table name: ErrTableNotFound when there is
// none, a *NameError when no table can have the name.
func (s *registry) lookup(name string) (*table, error) {
	s.mu.RLock()
	t, ok := s.tables[name]
	s.mu.RUnlock()
	if !ok {
		// A name no table can have is the client's mistake (400), not a
		// table that happens to be missing. A table stored under such a
		// name by an older version is still found, so it can be dropped.
		if err := CheckName("table", name, s.cfg.MaxNameBytes); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s", ErrTableNotFound, QuoteInput(name))
	}
	return t, nil
}
