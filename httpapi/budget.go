package httpapi

import (
	"context"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// responseBudgetWait is how long a page waits for room in the response
// budget before it is refused with 503.
const responseBudgetWait = time.Second

// responseBudget bounds the bytes of the drain, rows and SQL pages being
// built or written at once (Options.MaxResponseBytesInflight): a client
// that does not read holds its page until --http-write-timeout cuts it
// off, so without a bound the pages of many such clients grow the heap
// without limit (docs/security.md#response-budget). Safe for concurrent
// use. One client address may hold at most perClient of it
// (Options.MaxResponseBytesPerClient): eight drains of 16 MiB pages that
// one host never read held the whole default budget, and every other
// drain got 503 until the write timeout cut them off. A page reading
// client waits for its own share as any page waits for the budget.
type responseBudget struct {
	limit, perClient int64
	wait             time.Duration
	inflight         prometheus.Gauge
	refused          prometheus.Counter
	// full is the error of a reservation that found no room in time.
	full error

	mu       sync.Mutex // guards used, byClient and freed
	used     int64
	byClient map[netip.Addr]int64
	freed    chan struct{} // closed, and replaced, whenever bytes are given back
}

func newResponseBudget(limit, perClient int64, wait time.Duration, inflight prometheus.Gauge, refused prometheus.Counter, full error) *responseBudget {
	return &responseBudget{limit: limit, perClient: min(perClient, limit), wait: wait, inflight: inflight, refused: refused,
		full: full, byClient: map[netip.Addr]int64{}, freed: make(chan struct{})}
}

// requestClient is the address of r's client (an IPv4-mapped IPv6 address
// as IPv4; the zero Addr when RemoteAddr holds none).
func requestClient(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// acquire takes n bytes for client, n at most perClient, waiting up to
// b.wait for them to be free (in the budget and in the client's share).
// It returns b.full (errResponseBudget, errSQLBudget) when they did not become free in time
// (counted), ctx's error when ctx ended first.
func (b *responseBudget) acquire(ctx context.Context, client netip.Addr, n int64) error {
	var timeout <-chan time.Time
	for {
		b.mu.Lock()
		if b.used+n <= b.limit && b.byClient[client]+n <= b.perClient {
			b.used += n
			b.byClient[client] += n
			b.mu.Unlock()
			b.inflight.Add(float64(n))
			return nil
		}
		freed := b.freed
		b.mu.Unlock()
		if timeout == nil {
			tm := time.NewTimer(b.wait)
			defer tm.Stop()
			timeout = tm.C
		}
		select {
		case <-freed:
		case <-timeout:
			b.refused.Inc()
			return b.full
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// add changes the bytes client holds by delta without waiting: a
// negative delta gives bytes back and wakes the pages waiting for them.
func (b *responseBudget) add(client netip.Addr, delta int64) {
	if delta == 0 {
		return
	}
	b.mu.Lock()
	b.used += delta
	if b.byClient[client] += delta; b.byClient[client] <= 0 {
		delete(b.byClient, client)
	}
	if delta < 0 {
		close(b.freed)
		b.freed = make(chan struct{})
	}
	b.mu.Unlock()
	b.inflight.Add(float64(delta))
}

// pageBytes is one page's share of a responseBudget: reserve before the
// page is built, fit once it is, release after it is written. Not safe for
// concurrent use.
type pageBytes struct {
	b      *responseBudget
	client netip.Addr // whose share the bytes count in (requestClient)
	held   int64
}

// reserve takes n bytes of the budget (at most the client's share of it)
// unless the page already holds its share, waiting for room as acquire
// does.
func (p *pageBytes) reserve(ctx context.Context, n int64) error {
	if p.held > 0 {
		return nil
	}
	n = max(min(n, p.b.perClient), 1)
	if err := p.b.acquire(ctx, p.client, n); err != nil {
		return err
	}
	p.held = n
	return nil
}

// fit sets the page's share to n bytes, its size once built: it gives the
// surplus back, or takes what is missing without waiting (a page holds at
// least one row, which may be larger than the page's reservation).
func (p *pageBytes) fit(n int64) {
	if p.held == 0 {
		return
	}
	n = max(n, 1)
	p.b.add(p.client, n-p.held)
	p.held = n
}

// release gives the page's share back.
func (p *pageBytes) release() {
	p.b.add(p.client, -p.held)
	p.held = 0
}
