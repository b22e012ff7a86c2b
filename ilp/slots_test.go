package ilp

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSubmitOrder: a parsed write waits until every write that arrived
// before it was submitted (or gave up), whatever order they finish
// parsing in; no longer than the bound; done twice is done once.
func TestSubmitOrder(t *testing.T) {
	o := newSubmitOrder(time.Hour)
	t0, t1, t2 := o.ticket(), o.ticket(), o.ticket()
	returned := make(chan uint64, 3)
	waitFor := func(tk uint64) {
		go func() {
			o.wait(context.Background(), tk)
			returned <- tk
		}()
	}
	waitFor(t2)
	waitFor(t1)
	o.wait(context.Background(), t0)
	o.done(t0)
	require.Equal(t, t1, <-returned, "the second arrival goes next")
	select {
	case tk := <-returned:
		t.Fatalf("ticket %d went before ticket %d was done", tk, t1)
	default:
	}
	o.done(t1)
	o.done(t1)
	require.Equal(t, t2, <-returned)
	o.done(t2)

	// Done out of order: the turn moves past every ticket done early.
	t3, t4, t5 := o.ticket(), o.ticket(), o.ticket()
	o.done(t5)
	o.done(t4)
	o.done(t3)
	o.wait(context.Background(), o.ticket()) // returns at once: all before it are done
	require.Empty(t, o.early)

	// A ticket never done holds the ones behind it no longer than the
	// bound, or than their context.
	short := newSubmitOrder(20 * time.Millisecond)
	short.ticket()
	began := time.Now()
	short.wait(context.Background(), short.ticket())
	require.GreaterOrEqual(t, time.Since(began), 20*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o.ticket()
	o.wait(ctx, o.ticket()) // the hour-long bound; returns as ctx has ended
}
