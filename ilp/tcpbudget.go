package ilp

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// tcpBudget bounds the bytes the ILP TCP connections hold together
// (Config.TCPMaxBufferedBytes): the lines parsed into their batches, from
// the line's arrival until its batch is committed, and their partial lines
// beyond the first lineReadBytes of each. Without it each connection could
// hold two batches of --ilp-tcp-batch-bytes parsed (about five times their
// size) and a partial line of --max-line-bytes: 300 connections sending as
// fast as they could took RssAnon to 5.4 GB, and 1,020 connections each
// holding 1 MiB without a newline to 1.1 GB.
//
// A batch's bytes wait for room (the connection stops reading, as when
// the sequencer is saturated): batches are committed, so room always
// comes. Partial lines never wait (a line that never ends would hold its
// bytes for --ilp-tcp-idle-timeout) and may take at most half the budget:
// a line that finds no room for its next bytes is dropped as too long, so
// connections holding partial lines cannot keep the batches out. Safe for
// concurrent use.
type tcpBudget struct {
	limit int64
	gauge prometheus.Gauge
	waits prometheus.Counter

	mu      sync.Mutex
	used    int64         // batches' and partial lines' bytes
	lines   int64         // of used, the partial lines'
	changed chan struct{} // closed and replaced when bytes are given back
}

func newTCPBudget(limit int64, gauge prometheus.Gauge, waits prometheus.Counter) *tcpBudget {
	return &tcpBudget{limit: limit, gauge: gauge, waits: waits, changed: make(chan struct{})}
}

// tryLine takes n bytes for a partial line unless the partial lines would
// then hold more than half the budget or the budget would overflow.
func (b *tcpBudget) tryLine(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lines+n > b.limit/2 || b.used+n > b.limit {
		return false
	}
	b.lines += n
	b.used += n
	b.gauge.Add(float64(n))
	return true
}

// giveLine gives back n bytes a partial line held.
func (b *tcpBudget) giveLine(n int64) {
	b.mu.Lock()
	b.lines -= n
	b.mu.Unlock()
	b.give(n)
}

// tryBatch takes n bytes for a batch when they fit.
func (b *tcpBudget) tryBatch(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit {
		return false
	}
	b.used += n
	b.gauge.Add(float64(n))
	return true
}

// takeBatch takes n bytes (at most the budget) for a batch, waiting until
// they fit or ctx ends (its error).
func (b *tcpBudget) takeBatch(ctx context.Context, n int64) error {
	n = min(n, b.limit)
	counted := false
	for {
		b.mu.Lock()
		if b.used+n <= b.limit {
			b.used += n
			b.mu.Unlock()
			b.gauge.Add(float64(n))
			return nil
		}
		ch := b.changed
		b.mu.Unlock()
		if !counted {
			b.waits.Inc()
			counted = true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// give gives back n bytes.
func (b *tcpBudget) give(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
	b.gauge.Sub(float64(n))
}
