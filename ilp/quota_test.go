package ilp

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWriteQuotaProgress: more writers than the quota holds, each needing
// several chunks, all complete. With every partly read body waiting while
// holding (a FIFO semaphore), the first chunks of all writers filled the
// quota and no one got a second: all waited until their deadline.
func TestWriteQuotaProgress(t *testing.T) {
	const size, chunks, writers = 4, 4, 16
	q := newWriteQuota(size)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	completed, refused := 0, 0
	for range writers {
		wg.Go(func() {
			for ctx.Err() == nil { // a refused writer retries, as clients do
				held, err := int64(0), error(nil)
				for held < chunks && err == nil {
					if err = q.acquire(ctx, 1, held > 0); err == nil {
						held++
						time.Sleep(time.Millisecond) // reading the chunk
					}
				}
				q.release(held)
				mu.Lock()
				if err == nil {
					completed++
				} else if errors.Is(err, errInflightFull) {
					refused++
				}
				mu.Unlock()
				if err == nil {
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d writers completed, %d refusals retried", completed, refused)
	require.Equal(t, writers, completed, "every writer completes")
	q.mu.Lock()
	defer q.mu.Unlock()
	require.Zero(t, q.used, "all released")
	require.False(t, q.growing)
}
