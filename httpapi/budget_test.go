package httpapi

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestResponseBudget checks the response budget: a page's reservation
// waits for room and is refused (counted) when none comes in time; given
// back bytes wake a waiting page; fit gives back a built page's surplus
// and takes an oversized row's excess without waiting; a reservation is
// at most the whole budget.
func TestResponseBudget(t *testing.T) {
	inflight := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"})
	refused := prometheus.NewCounter(prometheus.CounterOpts{Name: "c"})
	b := newResponseBudget(100, 100, time.Minute, inflight, refused, errResponseBudget)
	held := func() int { return gaugeOrCounter(t, inflight) }
	ctx := context.Background()

	p1 := pageBytes{b: b}
	require.NoError(t, p1.reserve(ctx, 60))
	require.NoError(t, p1.reserve(ctx, 60), "a page holding its share does not reserve again")
	require.Equal(t, 60, held())

	p2 := pageBytes{b: b}
	done := make(chan error, 1)
	go func() { done <- p2.reserve(ctx, 60) }()
	p1.release()
	require.NoError(t, <-done, "bytes given back wake the waiting page")
	require.Equal(t, 60, held())

	short := newResponseBudget(100, 100, time.Millisecond, inflight, refused, errResponseBudget)
	short.used = 90
	p3 := pageBytes{b: short}
	require.ErrorIs(t, p3.reserve(ctx, 60), errResponseBudget)
	require.Equal(t, 1, gaugeOrCounter(t, refused))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	p5 := pageBytes{b: b}
	require.ErrorIs(t, p5.reserve(cctx, 60), context.Canceled, "a client gone stops the wait")

	p2.fit(10)
	require.Equal(t, 10, held(), "a built page keeps its size")
	p2.release()
	p4 := pageBytes{b: b}
	require.NoError(t, p4.reserve(ctx, 1000), "a reservation is at most the budget")
	require.Equal(t, 100, held())
	p4.fit(500)
	require.Equal(t, 500, held(), "a page's oversized row is taken without waiting")
	p4.release()
	require.Zero(t, held())
}

// TestResponseBudgetPerClient: one client address holds at most its
// share of the budget, waiting and refused as for the budget past it,
// while another client's page finds room.
func TestResponseBudgetPerClient(t *testing.T) {
	inflight := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"})
	refused := prometheus.NewCounter(prometheus.CounterOpts{Name: "c"})
	b := newResponseBudget(100, 40, 10*time.Millisecond, inflight, refused, errResponseBudget)
	ctx := context.Background()
	a, other := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")

	p1 := pageBytes{b: b, client: a}
	require.NoError(t, p1.reserve(ctx, 60), "a reservation is at most the client's share")
	require.Equal(t, 40, gaugeOrCounter(t, inflight))
	p2 := pageBytes{b: b, client: a}
	require.ErrorIs(t, p2.reserve(ctx, 10), errResponseBudget, "the client's share is full")
	require.Equal(t, 1, gaugeOrCounter(t, refused))
	p3 := pageBytes{b: b, client: other}
	require.NoError(t, p3.reserve(ctx, 40), "another client finds room")
	p1.release()
	require.NoError(t, p2.reserve(ctx, 10), "the share given back is taken")
	p2.release()
	p3.release()
	require.Zero(t, gaugeOrCounter(t, inflight))
	require.Empty(t, b.byClient, "no client entry left")
}
