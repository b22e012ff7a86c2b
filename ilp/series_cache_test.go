package ilp

import (
	"fmt"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/feed"
)

// TestSeriesCacheShared parses the same series through Parsers on
// several goroutines sharing one cache, each line's fields in one of two
// orders (so the series' shape keeps being replaced): every point is the
// one a Parser of its own makes, the later passes find their series
// known when there is room for them, and the cache stays within its
// budget, emptying shards when there is not.
func TestSeriesCacheShared(t *testing.T) {
	const series, parsers, passes = 2000, 4, 3
	var body []byte
	for s := range series {
		if s%2 == 0 {
			body = fmt.Appendf(body, "cpu,host=h%d,dc=x usage=%di,idle=%d.5 %d\n", s, s, s, s)
		} else {
			body = fmt.Appendf(body, "cpu,host=h%d,dc=x idle=%d.5,usage=%di %d\n", s, s, s, s)
		}
	}
	want := func() []string {
		b := &feed.Batch{}
		errs, _ := NewParser(DefaultLimits()).ParseAll(b, body, 1, Nanosecond, 0)
		return renderResults(b.Points, errs)
	}()

	cost := int64(seriesCost(len("cpu,host=h1000,dc=x"), &knownSeries{tags: make([]feed.Tag, 2)}))
	for _, tc := range []struct {
		name   string
		budget int64
	}{
		{"room for all", 4 * series * cost},
		{"room for half", series / 2 * cost},
	} {
		reg := prometheus.NewRegistry()
		c := newSeriesCache(tc.budget, reg)
		var wg sync.WaitGroup
		results := make([][]string, parsers*passes)
		for g := range parsers {
			wg.Go(func() {
				p := NewParser(DefaultLimits())
				p.shared = c
				for pass := range passes {
					b := &feed.Batch{}
					errs, _ := p.ParseAll(b, body, 1, Nanosecond, 0)
					results[g*passes+pass] = renderResults(b.Points, errs)
					p.Reuse()
				}
			})
		}
		wg.Wait()
		for i, got := range results {
			require.Equal(t, want, got, "%s: parser %d pass %d", tc.name, i/passes, i%passes)
		}
		hits, misses := testutil.ToFloat64(c.hits), testutil.ToFloat64(c.misses)
		require.Equal(t, float64(series*parsers*passes), hits+misses, "%s: every line looked up once", tc.name)
		require.LessOrEqual(t, c.bytes.Load(), tc.budget, tc.name)
		if tc.budget > series*cost {
			// Once every parser's first pass is done, every series is known.
			require.GreaterOrEqual(t, hits, float64(series*parsers*(passes-1)), tc.name)
			require.Zero(t, testutil.ToFloat64(c.clears), tc.name)
		} else {
			require.Positive(t, testutil.ToFloat64(c.clears), "%s: a full shard is emptied", tc.name)
		}
		n, err := testutil.GatherAndCount(reg, "ingestd_ilp_series_cache_bytes", "ingestd_ilp_series_cache_hits_total")
		require.NoError(t, err)
		require.Equal(t, 2, n)
	}

	require.Nil(t, newSeriesCache(0, nil), "0 bytes: no shared cache")
}
