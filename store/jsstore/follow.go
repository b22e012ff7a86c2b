package jsstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ingestd/ingestd/store"
)

// anchor says where a table's x_seq numbering stands in its stream (doc.go,
// "x_seq, watermark, durability"): the messages after stream sequence Seq
// number their synced fragments from XSeq+1 on, in stream order. It is
// moved (in the record, with compare-and-set) only to a point every node
// numbers alike: before a purge, to the last purged message; for a new
// stream or instance, to the stream's end and the floor above every number
// the name was assigned.
type anchor struct {
	Seq  uint64 `json:"seq"`
	XSeq uint64 `json:"xseq"`
}

// ownMsg is a message of this process the follower numbered and holds
// back until Append has published its numbers (stamped) or given up.
type ownMsg struct {
	seq   uint64
	id    string // Nats-Msg-Id
	first uint64 // the x_seq its synced fragments start at
}

// follower is the state of a table's follower goroutine: every message of
// the stream, in stream order, is numbered and applied to the row cache
// (this node's and every other writer's). fmu guards it; fcond (on fmu)
// is broadcast when it changes.
type follower struct {
	fmu   sync.Mutex
	fcond *sync.Cond
	// applied is the stream sequence applied to the cache (or skipped: a
	// message of another instance) and reported; numbered the one
	// numbered and applied to the cache (ahead of applied while a report
	// fails); counted the one whose numbers xseq, the highest x_seq
	// numbered, includes (ahead of numbered while it is applied, or after
	// its apply failed: a message delivered again is not numbered twice).
	applied, numbered, counted, xseq uint64
	// held are this process's messages numbered and not yet released;
	// released is the sequence up to which they may be applied.
	held     []ownMsg
	released uint64
	// catchUpTo is the stream's last sequence when Open looked: the live
	// messages up to it count as catch-up (ingestd_jetstream_catchup_messages_total).
	catchUpTo uint64
	err       error // the follower stopped on a message it cannot read
	// stuck is when a call last gave up waiting on the follower (await's
	// deadline), until it applies a message or a call's wait succeeds
	// (zero: it keeps up).
	stuck time.Time
	// waiters counts the calls waiting on the follower (await): the
	// stream holds what they wait for.
	waiters int
	// seen are the ids of the messages stored within window (the
	// duplicate window) before the last one, in stream order (repeated).
	seen      map[string]struct{}
	seenOrder []seenID
	window    time.Duration
	// recent are the last synced messages numbered, oldest first: their
	// stream sequence and the x_seq before them (rebase); based is the
	// last anchor the numbering was checked against.
	recent []numberedMsg
	based  anchor
	// cols is the schema as the follower last read it for another
	// process's block (shared.go).
	cols    []store.Column
	closing bool
	cancel  context.CancelFunc
	done    chan struct{}
	// kick (capacity 1) makes the watchdog start the consumer again at
	// once: the connection was re-established (kickFollowers).
	kick chan struct{}
	// probe (capacity 1) makes the watchdog ask the server whether the
	// consumer still has a pull request: a call has waited probeAfter.
	probe chan struct{}
}

// restartFollower (re)starts t's follower at stream sequence from (the
// anchor's next), numbering from xseq; catchUpTo is catch-up's end (0:
// none). A follower that runs is stopped first.
func (t *table) restartFollower(s *Store, from, xseq, catchUpTo uint64) {
	t.life.Lock()
	defer t.life.Unlock()
	t.stopFollowerLocked()
	t.startFollowerLocked(s, from, xseq, catchUpTo)
}

// ensureFollower starts t's follower at its record's anchor unless one
// runs (a live instance another process made on a name whose follower
// this process stopped, or never started); catchUpTo is catch-up's end
// for a follower it starts. A running follower is never restarted: it
// would apply what it applied again.
func (t *table) ensureFollower(s *Store, catchUpTo uint64) {
	t.life.Lock()
	defer t.life.Unlock()
	t.f.fmu.Lock()
	running := t.f.cancel != nil
	t.f.fmu.Unlock()
	if running {
		return
	}
	s.mu.Lock()
	a := t.anchor()
	s.mu.Unlock()
	t.startFollowerLocked(s, a.Seq+1, a.XSeq, catchUpTo)
}

// startFollowerLocked starts t's follower; t.life must be held.
func (t *table) startFollowerLocked(s *Store, from, xseq, catchUpTo uint64) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &t.f
	f.fmu.Lock()
	f.fcond = sync.NewCond(&f.fmu)
	f.applied, f.numbered, f.counted, f.xseq, f.released = from-1, from-1, from-1, xseq, from-1
	f.held, f.err, f.closing, f.catchUpTo, f.recent = nil, nil, false, catchUpTo, nil
	f.based = anchor{Seq: from - 1, XSeq: xseq}
	f.seen, f.seenOrder, f.window = map[string]struct{}{}, nil, s.cfg.DuplicateWindow
	f.cancel, f.done, f.kick, f.probe = cancel, make(chan struct{}), make(chan struct{}, 1), make(chan struct{}, 1)
	f.fmu.Unlock()
	go func() {
		defer close(f.done)
		s.follow(ctx, t, from)
	}()
}

// stopFollower ends t's follower and waits for it.
func (t *table) stopFollower() {
	t.life.Lock()
	defer t.life.Unlock()
	t.stopFollowerLocked()
}

// stopFollowerLocked is stopFollower with t.life held.
func (t *table) stopFollowerLocked() {
	f := &t.f
	f.fmu.Lock()
	if f.cancel == nil {
		f.fmu.Unlock()
		return
	}
	f.closing = true
	f.cancel()
	f.cancel = nil
	f.fcond.Broadcast()
	done := f.done
	f.fmu.Unlock()
	<-done
}

// numberedMsg is a synced message numbered: its stream sequence and the
// x_seq before it.
type numberedMsg struct{ seq, before uint64 }

// firstOf returns the first x_seq of synced message seq, one of the last
// maxRecent counted. fmu must be held.
func (f *follower) firstOf(seq uint64) uint64 {
	for i := len(f.recent) - 1; i >= 0; i-- {
		if f.recent[i].seq == seq {
			return f.recent[i].before + 1
		}
	}
	return f.xseq + 1 // not reached: the follower counts one message ahead at most
}

// maxRecent bounds follower.recent.
const maxRecent = 16

// rebase raises the numbering to anchor a, new to the follower, which it
// passed: a
// re-created instance's anchor may lie above the stream's numbering (the
// floor of the name's earlier instances); every node numbers the messages
// after a.Seq from a.XSeq on, this one too. The messages the follower
// numbered after a.Seq (an ended instance's, not applied) move up alike.
// fmu must be held.
func (f *follower) rebase(a anchor, log func(msg string, args ...any)) {
	at := f.xseq // the x_seq at a.Seq
	for i := len(f.recent) - 1; i >= 0 && f.recent[i].seq > a.Seq; i-- {
		at = f.recent[i].before
		if i == 0 && len(f.recent) == maxRecent && a.XSeq > at {
			log("a table's numbering raised to an anchor further back than the follower remembers", "anchor", a.Seq)
		}
	}
	if a.XSeq > at {
		f.xseq += a.XSeq - at
	}
}

// passed tells whether the follower is past stream sequence seq of t's
// subject: it applied it, or the record's anchor covers it (the message
// may have been purged before the follower read it, and then never
// arrives). fmu must be held.
func (t *table) passed(seq uint64) bool {
	return t.f.applied >= seq || t.anchored.Load() >= seq
}

// wake makes the calls waiting on t's follower look again (the record's
// anchor moved: passed).
func (t *table) wake() {
	t.f.fmu.Lock()
	defer t.f.fmu.Unlock()
	if t.f.fcond != nil {
		t.f.fcond.Broadcast()
	}
}

// lastOf returns the stream sequence of the last message of t's subject
// (0: none), as the stream's leader answers.
func (s *Store) lastOf(ctx context.Context, t *table) (uint64, error) {
	stream, err := s.js.Stream(ctx, t.stream)
	if err != nil {
		return 0, err
	}
	return lastOfSubject(ctx, stream, t.subject)
}

// lastRetried is lastOf, retried while the cluster does not answer
// (retry: up to Config.PublishTimeout).
func (s *Store) lastRetried(t *table) (last uint64, err error) {
	err = s.retry(func(ctx context.Context) (err error) {
		last, err = s.lastOf(ctx, t)
		return err
	})
	return last, err
}

// lastOfSubject is lastOf on a stream already looked up.
func lastOfSubject(ctx context.Context, stream jetstream.Stream, subject string) (uint64, error) {
	m, err := stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return m.Sequence, nil
}

// follow reads t's stream from sequence from with an ephemeral consumer
// and applies every message, until ctx ends or a message cannot be read;
// a consumer that fails (a lost connection or heartbeat, a message
// missed) is replaced by a new one from the follower's position.
func (s *Store) follow(ctx context.Context, t *table, from uint64) {
	for ctx.Err() == nil {
		err := s.followOnce(ctx, t, from)
		if ctx.Err() != nil {
			return
		}
		var corrupt *store.CorruptionError
		if errors.As(err, &corrupt) {
			t.f.fmu.Lock()
			t.f.err = err
			t.f.fcond.Broadcast()
			t.f.fmu.Unlock()
			s.logger.Error("table stream unreadable: the row cache stops following it", "stream", t.stream, "err", err)
			return
		}
		t.f.fmu.Lock()
		from = t.f.applied + 1
		t.f.fmu.Unlock()
		if errors.Is(err, errPullLost) { // the server is fine: no pause
			s.m.pullsLost.Inc()
			s.logger.Info("following a table stream: its pull request was lost, starting again", "stream", t.stream)
			continue
		}
		if errors.Is(err, jetstream.ErrNoHeartbeat) {
			s.m.heartbeatsMissed.Inc()
		}
		s.logger.Warn("following a table stream failed: starting again", "stream", t.stream, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *Store) followOnce(ctx context.Context, t *table, from uint64) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t.f.fmu.Lock()
	kick, probe := t.f.kick, t.f.probe
	t.f.fmu.Unlock()
	created := make(chan jetstream.Consumer, 1)
	go t.watchdog(ctx, cancel, kick, probe, created)
	// A consumer that cannot be created through the connected server (its
	// JetStream unavailable there: a server cut off its cluster) counts
	// towards Config.SwitchAfter like a failed publish: an Append waiting
	// for the follower publishes nothing meanwhile, and nothing else
	// would move the connection.
	began := time.Now()
	setupFailed := func(err error) error {
		if transient(err) && ctx.Err() == nil {
			s.failed(began)
		}
		return err
	}
	stream, err := s.js.Stream(ctx, t.stream)
	if err != nil {
		return setupFailed(err)
	}
	// The table's subject only: another table's messages are nothing to
	// this follower, and take no numbers of this table.
	// An ephemeral consumer of our own, not nats.go's ordered consumer:
	// that one recreates itself inside Next, and stopping it from another
	// goroutine meanwhile (the only way to end Next while it retries)
	// leaks the new consumer's goroutines. Whatever would make the
	// ordered consumer start again (a lost heartbeat, a message missed)
	// ends this call instead, and follow starts again from the position.
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from,
		FilterSubject: t.subject, AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, Replicas: 1, InactiveThreshold: followerIdle,
		HeadersOnly: !t.served, // numbering needs the headers alone
	})
	if err != nil {
		return setupFailed(err)
	}
	created <- cons
	defer func() { // the server also drops it after followerIdle
		dctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = stream.DeleteConsumer(dctx, cons.CachedInfo().Name)
		cancel()
	}()
	it, err := cons.Messages(jetstream.PullMaxMessages(512), jetstream.PullHeartbeat(s.cfg.FollowerHeartbeat),
		jetstream.WithMessagesErrOnMissingHeartbeat(true))
	if err != nil {
		return err
	}
	defer it.Stop()
	go func() { // Next blocks: stopping the iterator ends it
		<-ctx.Done()
		it.Stop()
	}()
	delivered := uint64(0) // the consumer's sequence of the last message
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if cause := context.Cause(ctx); cause != nil {
				return cause
			}
			return err
		}
		md, err := msg.Metadata()
		if err != nil {
			return err
		}
		if delivered++; md.Sequence.Consumer != delivered {
			return fmt.Errorf("jsstore: %s: message %d of the consumer delivered as %d: starting again", t.stream, delivered, md.Sequence.Consumer)
		}
		if err := s.apply(ctx, t, md.Sequence.Stream, md.Timestamp, msg.Headers().Get(jetstream.MsgIDHeader), msg); err != nil {
			return err
		}
	}
}

// followerIdle is how long the server keeps a follower's consumer that
// nobody pulls from (a follower that ended without deleting it).
const followerIdle = time.Minute

// stallAfter is how long a follower may apply nothing while a call waits
// on it before the watchdog takes its consumer for stuck (lost with the
// stream leader it was on, or recreating itself against a stream between
// leaders) and starts it again from its position.
const stallAfter = 2 * time.Second

// watchdog cancels a follower's consumer (cause errStalled) when it
// applied nothing for stallAfter while a call waited on it (what it waits
// for is in the stream), at once when kicked (errReconnected), and when
// probed (a call waited probeAfter) while the server holds messages for
// the consumer (created) and no pull request of it (errPullLost), until
// ctx ends.
func (t *table) watchdog(ctx context.Context, cancel context.CancelCauseFunc, kick, probe <-chan struct{}, created <-chan jetstream.Consumer) {
	tick := time.NewTicker(stallAfter)
	defer tick.Stop()
	last := ^uint64(0)
	var cons jetstream.Consumer
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
			cancel(errReconnected)
			return
		case <-probe:
			if cons == nil {
				select {
				case cons = <-created:
				default:
					continue // still being created: stallAfter covers it
				}
			}
			if t.pullLost(ctx, cons) {
				cancel(errPullLost)
				return
			}
			continue
		case <-tick.C:
		}
		t.f.fmu.Lock()
		applied, waiting := t.f.applied, t.f.waiters > 0
		t.f.fmu.Unlock()
		if waiting && applied == last {
			cancel(errStalled)
			return
		}
		last = applied
	}
}

// errReconnected ends a consumer when the connection was re-established:
// it is started again on the new one from its position at once, rather
// than when nats.go notices its missing heartbeats.
var errReconnected = errors.New("jsstore: reconnected: starting the consumer again")

// kickFollowers makes every follower start its consumer again (a new
// connection). It takes Store.mu, then each follower's fmu, one at a time.
func (s *Store) kickFollowers() {
	for _, t := range s.allTables() {
		t.f.fmu.Lock()
		if t.f.kick != nil {
			select {
			case t.f.kick <- struct{}{}:
			default:
			}
		}
		t.f.fmu.Unlock()
	}
}

// errStalled ends a consumer no message came through while a call waited.
var errStalled = errors.New("jsstore: no message while a commit waits for one: recreating the consumer")

// errPullLost ends a consumer whose pull request the server does not
// hold while it holds messages for it.
var errPullLost = errors.New("jsstore: the consumer's pull request was lost: recreating the consumer")

// probeAfter is how long a call waits on a follower before the watchdog
// asks the server about its consumer (pullLost).
const probeAfter = 100 * time.Millisecond

// pullLost reports whether the server holds messages for cons but no pull
// request of it, while the follower applied nothing: the pull request
// went nowhere. That happens when the iterator's first request reaches a
// server that has not yet heard of the new consumer's interest (a fresh
// consumer on another server of the cluster): the server answers "no
// responders", which nats.go's iterator ignores, and it then waits for
// heartbeats of a request nobody holds (twice the heartbeat interval,
// 30 s by default). One consumer info request, made only while a call
// waits.
func (t *table) pullLost(ctx context.Context, cons jetstream.Consumer) bool {
	t.f.fmu.Lock()
	before := t.f.applied
	t.f.fmu.Unlock()
	ictx, cancel := context.WithTimeout(ctx, stallAfter)
	defer cancel()
	info, err := cons.Info(ictx)
	if err != nil {
		return false // stallAfter covers a consumer the server cannot answer for
	}
	t.f.fmu.Lock()
	idle := t.f.applied == before
	t.f.fmu.Unlock()
	return idle && info.NumPending > 0 && info.NumWaiting == 0
}

// apply numbers the message at stream sequence seq, holds it while it is
// this process's and not released (Append publishes the numbers first:
// stamped before visible), applies it to the cache when it belongs to the
// live instance, reports another process's block (followed) and records
// it as applied. A message delivered again after a failed report is not
// numbered nor applied twice (numbered). An empty block (a barrier of
// any node, barrier.go) takes no number and is only recorded as applied.
// A block is decoded into room of scratches, given back when apply
// returns: nothing apply hands the block to keeps its fragments past the
// call.
func (s *Store) apply(ctx context.Context, t *table, seq uint64, stored time.Time, id string, msg jetstream.Msg) error {
	var (
		tc    store.TableCommit
		cols  int
		count int // fragments
		err   error
	)
	own := strings.HasPrefix(id, s.node+"."+idAppend+".")
	if block, ok := s.pendingBlock(id); ok && own && t.served {
		// This process's message, its Append in flight: the block it
		// encoded, not decoded again (cols is only for other writers').
		tc, count = block, len(block.Fragments)
	} else if t.served {
		scr := getScratch()
		defer putScratch(scr)
		tc, cols, err = decodeMessage(msg.Headers(), msg.Data(), scr)
		count = len(tc.Fragments)
	} else {
		var n uint64
		if tc, n, err = decodeHeaders(msg.Headers()); err == nil {
			// Each fragment takes bytes of the body the server measured:
			// a count above them is a corrupt header, refused as the
			// nodes that decode the body refuse it.
			size, serr := strconv.ParseUint(msg.Headers().Get(nats.MsgSize), 10, 64)
			if serr != nil || n > size {
				err = fmt.Errorf("%w: header %s says %d fragments in a body of %s bytes", errCodec, hdrCount, n, msg.Headers().Get(nats.MsgSize))
			}
		}
		count = int(min(n, math.MaxInt32))
	}
	if err != nil {
		return &store.CorruptionError{Key: fmt.Appendf(nil, "%s#%d", t.stream, seq), Err: err}
	}
	f := &t.f
	f.fmu.Lock()
	applied := f.applied
	f.fmu.Unlock()
	if seq <= applied { // delivered again after a restart of the consumer
		return nil
	}
	// A block of an instance this process has not heard of: another
	// process created it (its record was written first), and the record
	// says how to go on. Messages another process purged before this
	// follower read them leave no trace in a filtered consumer: the
	// record's anchor moved over them first, and the numbering takes it
	// (rebase) at the first message after it (every purge waits
	// Config.PurgeGrace for the anchor to reach every node).
	known, a, anchored := s.recordView(t, tc.TableID)
	if !known {
		if err := s.learn(ctx, t, tc.TableID); err != nil {
			return err
		}
		_, a, anchored = s.recordView(t, tc.TableID)
	}
	// blocks: something for the cache and the Follow callback (a barrier
	// has nothing; nor has a message of series only, read by its
	// headers); live: a block of the live instance, applied (or, on a
	// table this node does not materialise, numbered).
	blocks := len(tc.NewSeries) > 0 || count > 0
	live := false
	f.fmu.Lock()
	if seq > f.counted && f.repeated(id, stored) {
		f.counted, f.numbered = seq, seq // a second copy of a message: not numbered, not applied
	}
	if seq > f.counted {
		if anchored && a != f.based && a.Seq < seq {
			f.rebase(a, s.logger.Warn)
			f.based = a
		}
		first := f.xseq + 1
		if own {
			f.held = append(f.held, ownMsg{seq: seq, id: id, first: first})
			f.fcond.Broadcast()
			for f.released < seq && !f.closing {
				f.fcond.Wait()
			}
			if f.closing {
				f.fmu.Unlock()
				return context.Canceled
			}
		}
		if tc.Sync && count > 0 {
			if len(f.recent) == maxRecent {
				f.recent = slices.Delete(f.recent, 0, 1)
			}
			f.recent = append(f.recent, numberedMsg{seq: seq, before: f.xseq})
			f.xseq += uint64(count)
		}
		f.counted = seq
		f.fcond.Broadcast() // numberedAt waits for the count
	}
	if seq > f.numbered {
		// Counted, not applied yet (or its apply failed and it came
		// again): its numbers are in recent.
		if tc.Sync && count > 0 {
			tc.FirstSeq = f.firstOf(seq)
		}
		f.fmu.Unlock()
		if blocks && !t.served {
			s.mu.Lock()
			live = t.rec.live() && t.rec.Meta.ID == tc.TableID
			s.mu.Unlock()
			if !live && own {
				s.m.voided.Add(float64(count))
			}
		} else if blocks {
			// The record decides under cacheMu: an instance ended meanwhile
			// has its rows dropped, before or after this block.
			s.cacheMu.Lock()
			err := s.syncCacheLocked(t)
			if live = err == nil && t.cached == tc.TableID; live {
				err = s.cache.Apply(context.Background(), []store.TableCommit{tc})
			}
			s.cacheMu.Unlock()
			if err != nil {
				return err
			}
			if !live && own {
				s.m.voided.Add(float64(len(tc.Fragments)))
			}
		}
		f.fmu.Lock()
		f.numbered = seq
		if live {
			t.ages.add(seq, f.xseq, tc.Fragments)
			if seq <= f.catchUpTo {
				s.m.catchup.Inc()
			}
		}
	} else if blocks { // numbered and applied before a report failed
		s.mu.Lock()
		live = t.rec.live() && t.rec.Meta.ID == tc.TableID
		s.mu.Unlock()
	}
	last := f.xseq
	f.fmu.Unlock()
	if live && !strings.HasPrefix(id, s.node+".") {
		if err := s.followed(t, &tc, cols, last); err != nil {
			return err
		}
	}
	f.fmu.Lock()
	f.applied, f.stuck = seq, time.Time{}
	f.fcond.Broadcast()
	f.fmu.Unlock()
	return nil
}

// recordView returns, from t's record, whether it says what became of
// instance tid, and the live instance's anchor (anchored: it has one).
func (s *Store) recordView(t *table, tid uint64) (known bool, a anchor, anchored bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if anchored = t.rec.live() && t.rec.Anchor != nil; anchored {
		a = *t.rec.Anchor
	}
	return t.rec.knows(tid), a, anchored
}

// repeated tells whether message id was seen among the messages stored
// within the duplicate window before stored (the stream's own time, the
// same on every node), and records it. fmu must be held.
func (f *follower) repeated(id string, stored time.Time) bool {
	for len(f.seenOrder) > 0 && stored.Sub(f.seenOrder[0].at) > f.window {
		delete(f.seen, f.seenOrder[0].id)
		f.seenOrder = f.seenOrder[1:]
	}
	if id == "" { // not an ingestd block: the decoder refuses it anyway
		return false
	}
	if _, ok := f.seen[id]; ok {
		return true
	}
	f.seen[id] = struct{}{}
	f.seenOrder = append(f.seenOrder, seenID{id: id, at: stored})
	return false
}

// seenID is a message id and when the stream stored it.
type seenID struct {
	id string
	at time.Time
}

// await waits until ok (called with fmu held) holds, the follower failed,
// the store closes, or deadline passes.
func (t *table) await(deadline time.Time, ok func() bool) error {
	f := &t.f
	f.fmu.Lock()
	if ok() { // mostly so once a commit's messages are back: no timers
		f.stuck = time.Time{}
		f.fmu.Unlock()
		return nil
	}
	f.fmu.Unlock()
	timer := time.AfterFunc(time.Until(deadline), func() {
		f.fmu.Lock()
		f.fcond.Broadcast()
		f.fmu.Unlock()
	})
	defer timer.Stop()
	probe := time.AfterFunc(probeAfter, func() {
		select {
		case f.probe <- struct{}{}:
		default:
		}
	})
	defer probe.Stop()
	f.fmu.Lock()
	defer f.fmu.Unlock()
	f.waiters++
	defer func() { f.waiters-- }()
	for !ok() {
		switch {
		case f.err != nil:
			return f.err
		case f.closing:
			return store.ErrClosed
		case !time.Now().Before(deadline):
			f.stuck = time.Now()
			held := make([]uint64, len(f.held))
			for i, m := range f.held {
				held[i] = m.seq
			}
			return unavailable(fmt.Errorf("jsstore: stream %s not delivered up to the acknowledged message in time (applied up to %d, holding %v)", t.stream, f.applied, held))
		}
		f.fcond.Wait()
	}
	f.stuck = time.Time{} // what a call waited for is applied
	return nil
}

// heldID returns the held message with id id. fmu must be held.
func (f *follower) heldID(id string) (ownMsg, bool) {
	for _, m := range f.held {
		if m.id == id {
			return m, true
		}
	}
	return ownMsg{}, false
}

// heldSeq returns the stream sequence of held message id (a publish whose
// acknowledgement was lost finds it stored).
func (t *table) heldSeq(id string) (uint64, bool) {
	t.f.fmu.Lock()
	defer t.f.fmu.Unlock()
	m, ok := t.f.heldID(id)
	return m.seq, ok
}

// release lets the follower apply this process's messages up to seq
// (math.MaxUint64: all, after a failed Append).
func (t *table) release(seq uint64) {
	f := &t.f
	f.fmu.Lock()
	defer f.fmu.Unlock()
	if f.fcond == nil {
		return
	}
	f.released = max(f.released, seq)
	kept := f.held[:0]
	for _, m := range f.held {
		if m.seq > f.released {
			kept = append(kept, m)
		}
	}
	f.held = kept
	f.fcond.Broadcast()
}

// numberedTo returns where the numbering stands: the last stream sequence
// numbered and the highest x_seq, a pair every node's follower reaches
// alike (an anchor).
func (t *table) numberedTo() anchor {
	t.f.fmu.Lock()
	defer t.f.fmu.Unlock()
	return anchor{Seq: t.f.counted, XSeq: t.f.xseq}
}

// position returns the stream sequence applied and the highest x_seq
// numbered.
func (t *table) position() (applied, xseq uint64) {
	t.f.fmu.Lock()
	defer t.f.fmu.Unlock()
	return t.f.applied, t.f.xseq
}

// releaseAll releases every table's held messages: after a failed Append
// nothing waits to stamp them.
func releaseAll(tables []*table) {
	for _, t := range tables {
		if t != nil {
			t.release(math.MaxUint64)
		}
	}
}

// notConverging returns whether t's follower does not keep up with its
// stream: it stopped on a message it cannot read, or a call gave up
// waiting on it and it applied nothing since; why says which.
func (t *table) notConverging() (why string, ok bool) {
	t.f.fmu.Lock()
	defer t.f.fmu.Unlock()
	switch {
	case t.f.err != nil:
		return "stopped: " + t.f.err.Error(), true
	case !t.f.stuck.IsZero():
		return fmt.Sprintf("nothing applied since a commit gave up waiting for it %s ago", time.Since(t.f.stuck).Round(time.Second)), true
	}
	return "", false
}

// maxUnhealthyNamed bounds the tables Unhealthy names.
const maxUnhealthyNamed = 3

// Unhealthy implements store.HealthReporter: the tables whose follower
// does not keep up with their stream (notConverging), at most
// maxUnhealthyNamed of them named. Safe for concurrent use.
func (s *Store) Unhealthy() string {
	var named []string
	n := 0
	for _, t := range s.allTables() {
		if why, ok := t.notConverging(); ok {
			n++
			if len(named) < maxUnhealthyNamed {
				named = append(named, fmt.Sprintf("%s (%s)", t.stream, why))
			}
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("jetstream: %d table streams not applied to the row cache: %s", n, strings.Join(named, "; "))
}
