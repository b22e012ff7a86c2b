package ilp

import (
	"context"
	"errors"
	"time"
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
