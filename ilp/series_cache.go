package ilp

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// seriesCache is the known series (see doc.go, "Known series") the HTTP
// handler's Parsers share: a body finds known the series any earlier body
// wrote, through any Parser, where a Parser's own cache holds the 4,096
// it saw last. With more series than that (100,000 hosts writing every
// interval), every line missed its Parser's cache and took the full
// parse, half the server's CPU in a 100,000-series soak.
//
// It is split into shards by a hash of the section, each under its own
// lock and a share of the byte budget; a shard at its share is emptied
// and refilled, as a Parser's cache is. Entries never change once stored
// but for their shape, which is replaced whole (atomic). Safe for
// concurrent use.
type seriesCache struct {
	seed     maphash.Seed
	maxShard int // bytes per shard
	shards   [seriesCacheShards]seriesShard

	hits, misses, clears prometheus.Counter
	bytes                atomic.Int64
}

// seriesCacheShards is the number of shards: a power of two, enough that
// the handlers of two cores rarely meet on one lock.
const seriesCacheShards = 64

type seriesShard struct {
	mu    sync.RWMutex
	m     map[string]*knownSeries
	bytes int
}

// newSeriesCache returns a cache of at most maxBytes (estimated: see
// seriesCost), nil when maxBytes is 0. reg may be nil (no metrics).
func newSeriesCache(maxBytes int64, reg prometheus.Registerer) *seriesCache {
	if maxBytes <= 0 {
		return nil
	}
	f := promauto.With(reg)
	c := &seriesCache{seed: maphash.MakeSeed(), maxShard: int(maxBytes / seriesCacheShards),
		hits: f.NewCounter(prometheus.CounterOpts{Name: "ingestd_ilp_series_cache_hits_total",
			Help: "HTTP write lines whose measurement and tag section the shared series cache held (parsed from their field set on)."}),
		misses: f.NewCounter(prometheus.CounterOpts{Name: "ingestd_ilp_series_cache_misses_total",
			Help: "HTTP write lines whose measurement and tag section the shared series cache did not hold (parsed in full)."}),
		clears: f.NewCounter(prometheus.CounterOpts{Name: "ingestd_ilp_series_cache_clears_total",
			Help: "Shards of the shared series cache emptied because they reached their share of --ilp-series-cache-bytes."}),
	}
	f.NewGaugeFunc(prometheus.GaugeOpts{Name: "ingestd_ilp_series_cache_bytes",
		Help: "Estimated bytes the shared series cache holds; at most --ilp-series-cache-bytes."},
		func() float64 { return float64(c.bytes.Load()) })
	for i := range c.shards {
		c.shards[i].m = map[string]*knownSeries{}
	}
	return c
}

func (c *seriesCache) shard(section []byte) *seriesShard {
	return &c.shards[maphash.Bytes(c.seed, section)&(seriesCacheShards-1)]
}

// get returns the known series of a measurement and tag section, or nil.
func (c *seriesCache) get(section []byte) *knownSeries {
	s := c.shard(section)
	s.mu.RLock()
	ks := s.m[string(section)]
	s.mu.RUnlock()
	if ks == nil {
		c.misses.Inc()
	} else {
		c.hits.Inc()
	}
	return ks
}

// put stores ks as the known series of section.
func (c *seriesCache) put(section []byte, ks *knownSeries) {
	cost := seriesCost(len(section), ks)
	if cost > c.maxShard {
		return
	}
	s := c.shard(section)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[string(section)]; ok {
		return // another Parser stored it meanwhile
	}
	if s.bytes+cost > c.maxShard {
		clear(s.m)
		c.bytes.Add(-int64(s.bytes))
		s.bytes = 0
		c.clears.Inc()
	}
	s.m[string(section)] = ks
	s.bytes += cost
	c.bytes.Add(int64(cost))
}

// seriesCost estimates what an entry holds: its key, the series key
// (about as long), the tags and the entry itself.
func seriesCost(sectionLen int, ks *knownSeries) int {
	return 2*sectionLen + 32*len(ks.tags) + 128
}
