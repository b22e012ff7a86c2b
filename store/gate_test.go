package store

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
)

// TestCloseGate: a call in flight holds Close until it leaves, a call
// after Close gets ErrClosed, a second Close too, and an ended ctx is
// refused while the gate is open.
func TestCloseGate(t *testing.T) {
	var g CloseGate
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Enter(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Enter with an ended ctx: %v, want context.Canceled", err)
	}
	if err := g.Enter(context.Background()); err != nil {
		t.Fatal(err)
	}
	var left atomic.Bool
	closed := make(chan bool)
	go func() {
		if err := g.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		closed <- left.Load()
	}()
	// A Close that did not wait would return during these yields, before
	// the call left; one that waits can only return after it.
	for range 1000 {
		runtime.Gosched()
	}
	left.Store(true)
	g.Leave()
	if !<-closed {
		t.Fatal("Close returned while a call was in flight")
	}
	if err := g.Enter(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Enter after Close: %v, want ErrClosed", err)
	}
	if err := g.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v, want ErrClosed", err)
	}
}
