package store

import (
	"context"
	"sync"
)

// CloseGate is how a backend keeps the promise of Backend.Close: calls in
// flight finish first, and every call after it returns ErrClosed. Each
// call holds the gate from Enter to Leave; Close waits for them. The zero
// value is open. Safe for concurrent use.
type CloseGate struct {
	mu     sync.RWMutex // read side: a call in flight; write side: Close
	closed bool
}

// Enter admits a call: ErrClosed after Close, ctx.Err() when ctx ended.
// On nil the caller must call Leave once it is done; a call must not
// Enter again while it holds the gate (Close may be waiting).
func (g *CloseGate) Enter(ctx context.Context) error {
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		g.mu.RUnlock()
		return err
	}
	return nil
}

// Leave ends a call Enter admitted.
func (g *CloseGate) Leave() { g.mu.RUnlock() }

// Close waits for the calls in flight and refuses every later one. It
// returns ErrClosed when the gate was closed already.
func (g *CloseGate) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrClosed
	}
	g.closed = true
	return nil
}
