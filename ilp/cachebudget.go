package ilp

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// cacheBudget bounds what the caches of every Parser of the server hold
// together (Config.MaxParserCacheBytes): each TCP connection and each idle
// HTTP parser has caches of its own (known series, interned keys), each
// bounded, but 1,024 connections whose caches a peer filled on purpose
// would hold gigabytes. A cache that finds no room does not grow; the
// lines parse all the same, without its shortcut. Safe for concurrent
// use.
type cacheBudget struct {
	limit   int64
	used    atomic.Int64
	refused prometheus.Counter
}

// take counts n more bytes, or reports false (counted) when they would
// pass the limit.
func (b *cacheBudget) take(n int64) bool {
	if b.used.Add(n) > b.limit {
		b.used.Add(-n)
		b.refused.Inc()
		return false
	}
	return true
}

// give gives n bytes back.
func (b *cacheBudget) give(n int64) { b.used.Add(-n) }

// Costs of cache entries besides their bytes (the map entry, the
// knownSeries and its slices), counted against a cacheBudget.
const (
	knownSeriesOverhead = 160
	internedOverhead    = 64
)

// newParser returns a Parser with the server's limits whose caches take
// from its cache budget.
func (in *Ingest) newParser() *Parser {
	p := NewParser(in.cfg.Limits)
	p.budget = in.caches
	return p
}
