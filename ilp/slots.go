package ilp

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// parseSlots bounds how many HTTP write bodies are parsed at once
// (Config.WriteConcurrency), so that an overloaded server runs a few
// writes to completion instead of sharing its cores among every write in
// flight: shared, each of 64 bodies parses 32 times slower on 2 cores,
// every write's latency grows with the number in flight, and the ones
// the server will refuse wait as long as the rest. A body waits for a
// slot in arrival order (a channel's senders queue), at most a queue
// timeout: Config.WriteQueueTimeout, or the shorter
// Config.OverloadQueueTimeout while the server is refusing writes as
// overloaded (overload.refusing), so that a burst on a server that keeps
// up waits its turn while an overloaded one answers what it cannot take
// within that bound. A body that would wait far longer is refused at
// once rather than at the timeout: from the bodies waiting ahead of it
// and how long a body has held its slot of late (a moving average), its
// wait is predicted, and past predictMargin times the timeout (the
// overload timeout itself while overloaded) it is refused unqueued. A
// body is read before it waits, so a client sending slowly never holds a
// slot. Safe for concurrent use.
type parseSlots struct {
	c               chan struct{}
	timeout         time.Duration // Config.WriteQueueTimeout
	overloadTimeout time.Duration // Config.OverloadQueueTimeout
	waiting         atomic.Int64  // bodies waiting for a slot
	hold            atomic.Int64  // moving average of a slot's hold, in ns

	cutMu sync.Mutex
	// cut is closed by shorten, and replaced: the bodies waiting with
	// the queue timeout then wait at most the overload timeout.
	cut chan struct{}
}

// holdWeight is the weight of the newest hold in the moving average: 1/8.
const holdWeight = 8

// predictMargin is how many times Config.WriteQueueTimeout a predicted
// wait must pass for the body to be refused unqueued. The prediction
// overestimates a burst: 39 bodies of 5,000 lines sent at once, which
// all found a slot within the timeout when each waited, saw up to 11 of
// them refused on a prediction past the timeout itself.
const predictMargin = 2

// queueRefusal is acquire's error for a body refused for want of a
// parse slot: after its wait (predicted false) or at once, its wait
// predicted past the bound (predicted true); overloaded when the bound
// was the overload timeout.
type queueRefusal struct{ predicted, overloaded bool }

func (e *queueRefusal) Error() string {
	switch {
	case e.predicted && e.overloaded:
		return "ilp: no parse slot predicted within the overload queue timeout"
	case e.predicted:
		return "ilp: no parse slot predicted within twice the queue timeout"
	case e.overloaded:
		return "ilp: no parse slot within the overload queue timeout"
	}
	return "ilp: no parse slot within the queue timeout"
}

// newParseSlots returns n slots whose waits end after timeout, or after
// overloadTimeout (at most timeout) while the server is overloaded.
func newParseSlots(n int, timeout, overloadTimeout time.Duration) *parseSlots {
	return &parseSlots{
		c: make(chan struct{}, n), timeout: timeout, overloadTimeout: min(overloadTimeout, timeout),
		cut: make(chan struct{}),
	}
}

// acquire takes a slot, waiting at most the queue timeout, or the
// overload timeout when overloaded or once shorten is called during the
// wait (counted from its start): the time it was taken and nil; or a
// *queueRefusal, at once when the predicted wait is longer than
// predictMargin times the queue timeout, or than the overload timeout
// when overloaded; or ctx's error once ctx ends. A nil error must be
// followed by release with the time returned.
func (s *parseSlots) acquire(ctx context.Context, overloaded bool) (time.Time, error) {
	select {
	case s.c <- struct{}{}:
		return time.Now(), nil
	default:
	}
	timeout, refuseOver := s.timeout, predictMargin*s.timeout
	var cut chan struct{}
	if overloaded {
		timeout, refuseOver = s.overloadTimeout, s.overloadTimeout
	} else {
		s.cutMu.Lock()
		cut = s.cut
		s.cutMu.Unlock()
	}
	// Every slot is taken: one frees in half a hold on average, and each
	// body ahead takes a hold of one of them.
	ahead := s.waiting.Add(1) - 1
	defer s.waiting.Add(-1)
	if wait := time.Duration((2*ahead + 1) * s.hold.Load() / int64(2*cap(s.c))); wait > refuseOver {
		return time.Time{}, &queueRefusal{predicted: true, overloaded: overloaded}
	}
	start := time.Now()
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case s.c <- struct{}{}:
			return time.Now(), nil
		case <-t.C:
			return time.Time{}, &queueRefusal{overloaded: overloaded}
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-cut:
			cut, overloaded = nil, true
			left := s.overloadTimeout - time.Since(start)
			if left <= 0 {
				return time.Time{}, &queueRefusal{overloaded: true}
			}
			t.Reset(left)
		}
	}
}

// shorten ends the wait of the bodies waiting with the queue timeout
// once they have waited the overload timeout: called as the server
// begins to count as overloaded (overload.onRefusing).
func (s *parseSlots) shorten() {
	s.cutMu.Lock()
	defer s.cutMu.Unlock()
	close(s.cut)
	s.cut = make(chan struct{})
}

// release gives back a slot taken by acquire at taken.
func (s *parseSlots) release(taken time.Time) {
	d := int64(time.Since(taken))
	for {
		old := s.hold.Load()
		if s.hold.CompareAndSwap(old, old+(d-old)/holdWeight) {
			break
		}
	}
	<-s.c
}
