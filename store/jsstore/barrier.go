package jsstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Beyond implements store.Shared: drain cursor after is beyond live
// instance tid's sequence when it is above every x_seq this node's
// follower numbered once it applied a barrier (an empty block) that the
// stream acknowledged after the call began (doc.go, "Beyond the sequence").
// It is false, with nothing asked of the cluster, when the follower
// numbered after already or Config.BarrierInterval holds the call back (a
// check of the table went out less than that ago, or is in flight: it
// proves nothing for a call that arrived after it); false, with no
// barrier written, when the table's stream leader reports a last sequence
// the follower has not applied or a group it does not hear a majority of:
// the cursor may then be another node's. An error (the stream or the
// cluster unreachable, ctx ended, the store closed) leaves it unknown; a
// failed stream info or barrier counts towards Config.SwitchAfter as a
// failed publish does. Safe for concurrent use.
func (s *Store) Beyond(ctx context.Context, tid, after uint64) (bool, error) {
	t, err := s.enterLive(ctx, tid)
	if err != nil {
		return false, err
	}
	defer s.gate.Leave()
	if _, xseq := t.position(); after <= xseq {
		return false, nil
	}
	r, ok := s.joinCheck(t)
	if !ok {
		return false, nil
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return false, ctx.Err()
	case <-s.chk.stop:
		return false, errBarrierStopped
	}
	if r.err != nil || !r.applied {
		return false, r.err
	}
	_, xseq := t.position()
	return after > xseq, nil
}

// quorumCurrent tells whether a stream's leader (the one that answered)
// counts itself and a majority of its group as current.
func quorumCurrent(c *jetstream.ClusterInfo) bool {
	if c == nil || len(c.Replicas) == 0 {
		return true // not clustered, or one replica
	}
	current := 1 // the leader
	for _, r := range c.Replicas {
		if r.Current && !r.Offline {
			current++
		}
	}
	return 2*current > len(c.Replicas)+1
}

// checkState is the store's side of the checks: the goroutines of the
// checks in flight, and stop, closed (once) when the store closes.
type checkState struct {
	wg       sync.WaitGroup
	stop     chan struct{}
	stopOnce sync.Once
	n        atomic.Uint64 // numbers the barriers' message ids
}

// halt ends the requests of the checks in flight and the calls waiting
// for them (Close, abandon); a check waiting for its follower ends once
// the follower stops.
func (b *checkState) halt() {
	b.stopOnce.Do(func() { close(b.stop) })
}

// tableChecks coalesces and rate-bounds one table's checks: next is the
// check not started yet (a call arriving now joins it), busy tells that a
// check is in flight, sentAt when the last one started. mu guards them;
// it is taken alone.
type tableChecks struct {
	mu     sync.Mutex
	next   *check
	busy   bool
	sentAt time.Time
}

// check is one check of a table (the stream leader's last sequence, then
// a barrier) and the calls it serves: applied (the follower applied a
// barrier) and err are set before done is closed.
type check struct {
	done    chan struct{}
	applied bool
	err     error
}

// The results of a check (ingestd_jetstream_beyond_checks_total).
const (
	checkApplied = "applied" // the follower applied the barrier
	checkBehind  = "behind"  // the leader reports more than the follower applied: no barrier
	checkFailed  = "failed"  // no answer, or the barrier not acknowledged or applied in time
)

// joinCheck returns the check a call arriving now waits for: the one not
// started yet, or a new one started now; false when
// Config.BarrierInterval holds the call back.
func (s *Store) joinCheck(t *table) (*check, bool) {
	b := &t.chk
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.next != nil:
		s.m.checkJoins.Inc()
		return b.next, true
	case b.busy || time.Since(b.sentAt) < s.cfg.BarrierInterval:
		s.m.checkHeld.Inc()
		return nil, false
	}
	r := &check{done: make(chan struct{})}
	b.next, b.busy = r, true
	s.chk.wg.Add(1)
	go func() {
		defer s.chk.wg.Done()
		result := s.runCheck(t, r)
		s.m.checks.WithLabelValues(result).Inc()
		close(r.done)
		b.mu.Lock()
		b.busy = false
		b.mu.Unlock()
	}()
	return r, true
}

// runCheck asks t's stream leader for its last sequence and, when the
// follower applied it, sends a barrier and waits until the follower
// applied that too, all within sendTimeout; the calls arriving from the
// start on wait for the next check. It sets r's outcome and returns its
// result.
func (s *Store) runCheck(t *table, r *check) string {
	b := &t.chk
	b.mu.Lock()
	b.next, b.sentAt = nil, time.Now()
	b.mu.Unlock()
	deadline := time.Now().Add(sendTimeout)
	ctx, cancel := s.sendContext()
	defer cancel()
	go func() { // Close ends the requests at once
		select {
		case <-s.chk.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	fail := func(began time.Time, err error) string {
		if transient(err) {
			s.failed(began) // a server cut off its cluster may answer nothing
		}
		r.err = err
		return checkFailed
	}
	s.mu.Lock()
	name := t.stream
	s.mu.Unlock()
	began := time.Now()
	stream, err := s.js.Stream(ctx, name)
	if err != nil {
		return fail(began, fmt.Errorf("jsstore: stream %s: %w", name, err))
	}
	info := stream.CachedInfo()
	if !quorumCurrent(info.Cluster) {
		return checkBehind // the cursor may be another node's
	}
	// Behind: the table's subject holds a message the follower has not
	// applied.
	last, err := lastOfSubject(ctx, stream, t.subject)
	if err != nil {
		return fail(began, fmt.Errorf("jsstore: last message of table %q: %w", t.name, err))
	}
	t.f.fmu.Lock()
	behind := !t.passed(last)
	t.f.fmu.Unlock()
	if behind {
		return checkBehind
	}
	// The leader that answered may be cut off its peers and not know it
	// yet (it counts them current for up to 10 s): only a publish is
	// linearizable. An answer, even a leader's, does not end a run of
	// failures (Config.SwitchAfter): a leader cut off answers.
	msg := s.barrierMsg(t)
	began = time.Now()
	ack, err := s.js.PublishMsg(ctx, msg)
	if err != nil {
		return fail(began, fmt.Errorf("jsstore: barrier on stream %s: %w", name, err))
	}
	s.succeeded()
	if err := t.await(deadline, func() bool { return t.f.applied >= ack.Sequence }); err != nil {
		r.err = err
		return checkFailed
	}
	r.applied = true
	return checkApplied
}

// barrierMsg is a barrier of t's live instance: an empty block (no
// series, no fragments: no x_seq numbers), with a message id of its own
// (NODE.b.TID.N).
func (s *Store) barrierMsg(t *table) *nats.Msg {
	s.mu.Lock()
	tid := t.rec.Meta.ID
	s.mu.Unlock()
	m := nats.NewMsg(t.subject)
	m.Header.Set(jetstream.MsgIDHeader, s.node+"."+idBarrier+"."+strconv.FormatUint(tid, 10)+"."+strconv.FormatUint(s.chk.n.Add(1), 10))
	m.Header.Set(hdrInstance, strconv.FormatUint(tid, 10))
	m.Header.Set(hdrSync, syncHeader(true))
	m.Header.Set(hdrCount, "0")
	m.Header.Set(hdrCommitTime, strconv.FormatInt(time.Now().UnixNano(), 10))
	m.Data = appendBody(nil, nil, nil, nil)
	return m
}
