package ilp

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ingestd/ingestd/feed"
)

// parseSlots bounds how many HTTP write bodies are parsed at once
// (Config.WriteConcurrency), so that an overloaded server runs a few
// writes to completion instead of sharing its cores among every write in
// flight: shared, each of 64 bodies parses 32 times slower on 2 cores,
// every write's latency grows with the number in flight, and the ones
// the server will refuse wait as long as the rest. A body waits for a
// slot in arrival order (a channel's senders queue), at most
// Config.WriteQueueTimeout; past it the write is refused at once. A
// body is read before it waits, so a client sending slowly never holds
// a slot. Safe for concurrent use.
type parseSlots struct {
	c       chan struct{}
	timeout time.Duration
}

// errQueueTimeout marks a write refused because no parse slot came free
// within Config.WriteQueueTimeout.
var errQueueTimeout = errors.New("ilp: no parse slot within --http-write-queue-timeout")

func newParseSlots(n int, timeout time.Duration) *parseSlots {
	return &parseSlots{c: make(chan struct{}, n), timeout: timeout}
}

// acquire takes a slot, waiting at most the queue timeout: nil, or
// errQueueTimeout, or ctx's error once ctx ends. A nil error must be
// followed by release.
func (s *parseSlots) acquire(ctx context.Context) error {
	select {
	case s.c <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(s.timeout)
	defer t.Stop()
	select {
	case s.c <- struct{}{}:
		return nil
	case <-t.C:
		return errQueueTimeout
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release gives back a slot taken by acquire.
func (s *parseSlots) release() { <-s.c }

// submitOrder hands HTTP writes to the sequencer in the order their bodies
// finished arriving. Bodies are parsed by several slots at once, and the
// one that arrived second often finishes first; when the sequencer cuts a
// group commit between the two, the first one's points land after the
// second's, each one late for its series (a point-index entry in the
// store instead of a place in the series' run). Under overload, when
// writes overlap most, that multiplied the store's keys per line by
// eight. A parsed write therefore waits for the writes that arrived
// before it to be submitted, at most maxOrderWait: a large body still
// being parsed delays the ones behind it by no more than that. Safe for
// concurrent use.
type submitOrder struct {
	maxWait time.Duration // maxOrderWait, but in tests

	mu    sync.Mutex
	next  uint64              // the next ticket handed out
	turn  uint64              // the lowest ticket not yet done
	early map[uint64]struct{} // tickets above turn already done
	moved chan struct{}       // closed (and replaced) when turn advances
}

// maxOrderWait bounds how long a parsed write waits for the writes that
// arrived before it (submitOrder): several times what parsing a body of
// 1,000 lines takes.
const maxOrderWait = 10 * time.Millisecond

func newSubmitOrder(maxWait time.Duration) *submitOrder {
	return &submitOrder{maxWait: maxWait, early: map[uint64]struct{}{}, moved: make(chan struct{})}
}

// ticket returns the next place in the order. Every ticket must be done.
func (o *submitOrder) ticket() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.next
	o.next++
	return t
}

// wait returns once every ticket before t is done, maxWait has passed,
// or ctx ends.
func (o *submitOrder) wait(ctx context.Context, t uint64) {
	var timer *time.Timer
	for {
		o.mu.Lock()
		if o.turn >= t {
			o.mu.Unlock()
			return
		}
		moved := o.moved
		o.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(o.maxWait)
			defer timer.Stop()
		}
		select {
		case <-moved:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// done marks t submitted, or given up; calling it again does nothing.
func (o *submitOrder) done(t uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if t < o.turn {
		return
	}
	if t > o.turn {
		o.early[t] = struct{}{}
		return
	}
	o.turn++
	for {
		if _, ok := o.early[o.turn]; !ok {
			break
		}
		delete(o.early, o.turn)
		o.turn++
	}
	close(o.moved)
	o.moved = make(chan struct{})
}

// orderedSubmitter submits through app once the writes that arrived before
// ticket t were submitted (submitOrder.wait).
type orderedSubmitter struct {
	app   Appender
	order *submitOrder
	t     uint64
}

// Submit implements feed.Submitter.
func (s orderedSubmitter) Submit(ctx context.Context, b *feed.Batch) (*feed.Pending, error) {
	s.order.wait(ctx, s.t)
	defer s.order.done(s.t)
	return s.app.Submit(ctx, b)
}
