package ilp

import (
	"context"
	"sync"
)

// writeQuota bounds the bytes of HTTP write bodies in flight
// (Config.MaxInflightWriteBytes). A body is held chunk by chunk as it
// arrives, so a request may hold part of its body and need more; if every
// such request waited while holding, overload would end with the whole
// quota held by partly read bodies that all wait on one another until
// their timeout, none completing, and the retries refilling it (an open
// loop of 1,000-line bodies above ingestd's rate answered 190 writes and
// 107,315 503s in ten minutes). So:
//   - a request holding nothing waits, while its bytes do not fit or while
//     a request holding bytes waits for more;
//   - a request holding bytes takes more when they fit; else it waits when
//     no other request holding bytes waits, and gives up at once
//     (errInflightFull, releasing what it holds) when one does.
//
// The one waiting holder gets what the others release, as nothing new is
// admitted meanwhile, so the quota always drains towards complete bodies.
// Safe for concurrent use.
type writeQuota struct {
	mu      sync.Mutex
	size    int64
	used    int64
	growing bool          // a request holding bytes waits for more
	changed chan struct{} // closed and replaced when bytes are released or growing ends
}

func newWriteQuota(size int64) *writeQuota {
	return &writeQuota{size: size, changed: make(chan struct{})}
}

// acquire takes n bytes; holding tells whether the caller already holds
// some. It returns ctx's error when ctx ends first, errInflightFull when
// the caller holds bytes and another holder already waits.
func (q *writeQuota) acquire(ctx context.Context, n int64, holding bool) error {
	q.mu.Lock()
	grower := false
	for {
		if q.used+n <= q.size && (holding || !q.growing) {
			q.used += n
			if grower {
				q.growing = false
				q.wakeLocked()
			}
			q.mu.Unlock()
			return nil
		}
		if holding && !grower {
			if q.growing {
				q.mu.Unlock()
				return errInflightFull
			}
			q.growing, grower = true, true
		}
		ch := q.changed
		q.mu.Unlock()
		select {
		case <-ch:
			q.mu.Lock()
		case <-ctx.Done():
			if grower {
				q.mu.Lock()
				q.growing = false
				q.wakeLocked()
				q.mu.Unlock()
			}
			return ctx.Err()
		}
	}
}

// release gives back n bytes.
func (q *writeQuota) release(n int64) {
	q.mu.Lock()
	q.used -= n
	q.wakeLocked()
	q.mu.Unlock()
}

func (q *writeQuota) wakeLocked() {
	close(q.changed)
	q.changed = make(chan struct{})
}
