package store

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// lateHarness is a synced table of lateSeries series whose first
// preloadPerSeries points (times 1..preloadPerSeries, in runs of
// preloadBlock points per series and commit) are stored, with helpers that
// build commits mixing new and late (repeated) points.
type lateHarness struct {
	db   *DB
	tid  uint64
	seq  uint64
	next []int64 // per series, the next in-order time
	rng  *rand.Rand
}

const (
	lateSeries       = 1000
	preloadPerSeries = 200
	preloadBlock     = 50
)

func newLateHarness(tb testing.TB, cfg Config) *lateHarness {
	tb.Helper()
	db, err := Open(cfg, nil, nil)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, db.Close()) })
	h := &lateHarness{db: db, tid: db.AllocTableID(), next: make([]int64, lateSeries), rng: rand.New(rand.NewPCG(1, 2))}
	series := make([]Series, lateSeries)
	for i := range series {
		series[i] = Series{ID: uint64(i + 1), Tags: []Field{{Col: 1, Value: Value{Kind: KindTag, Str: "host_" + strconv.Itoa(i)}}}}
		h.next[i] = 1
	}
	for b := 0; b < preloadPerSeries/preloadBlock; b++ {
		frags := make([]Fragment, 0, lateSeries*preloadBlock)
		for s := range lateSeries {
			for range preloadBlock {
				frags = append(frags, h.newPoint(s))
			}
		}
		tc := h.commit(frags)
		if b == 0 {
			tc.NewSeries = series
		}
		require.NoError(tb, db.Commit([]TableCommit{tc}))
	}
	return h
}

func (h *lateHarness) newPoint(s int) Fragment {
	f := Fragment{Series: uint64(s + 1), Time: h.next[s], Fields: []Field{intField(2, h.next[s])}}
	h.next[s]++
	return f
}

// latePoint is a repeat of a random preloaded point.
func (h *lateHarness) latePoint() Fragment {
	s := h.rng.IntN(lateSeries)
	ts := 1 + h.rng.Int64N(preloadPerSeries)
	return Fragment{Series: uint64(s + 1), Time: ts, Fields: []Field{intField(3, -ts)}}
}

// frags returns n fragments of which a share late/100 are late.
func (h *lateHarness) frags(n, late int) []Fragment {
	out := make([]Fragment, n)
	for i := range out {
		if i*late/100 != (i+1)*late/100 { // spread evenly
			out[i] = h.latePoint()
		} else {
			out[i] = h.newPoint(i % lateSeries)
		}
	}
	return out
}

func (h *lateHarness) commit(frags []Fragment) TableCommit {
	tc := TableCommit{TableID: h.tid, FirstSeq: h.seq + 1, Fragments: frags, CommitTime: 1}
	h.seq += uint64(len(frags))
	return tc
}

// TestLateLookupsBounded proves that placing N late points costs a bounded
// number of index reads per point, whatever N: no per-point iterator (an
// iterator over the write transaction sorted every pending write), at most
// one point-index get and one run seek per point, and a few iterators per
// commit.
func TestLateLookupsBounded(t *testing.T) {
	for _, n := range []int{1_000, 50_000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Dir = t.TempDir()
			cfg.UnsafeNoSync = true
			h := newLateHarness(t, cfg)
			h.next = h.next[:0:0] // no new points below
			before := h.db.stats.load()
			frags := make([]Fragment, n)
			for i := range frags {
				frags[i] = h.latePoint()
			}
			require.NoError(t, h.db.Commit([]TableCommit{h.commit(frags)}))
			after := h.db.stats.load()
			gets := after.pointGets - before.pointGets
			seeks := after.runSeeks - before.runSeeks
			maxSeeks := after.maxSeeks - before.maxSeeks
			iters := after.iterators - before.iterators
			t.Logf("N=%d: %d point gets, %d run seeks, %d max seeks, %d iterators", n, gets, seeks, maxSeeks, iters)
			require.LessOrEqual(t, gets, uint64(n), "point-index gets")
			require.LessOrEqual(t, seeks, uint64(n), "run seeks")
			require.LessOrEqual(t, maxSeeks, uint64(2*lateSeries), "series high-water seeks: once per series and process")
			require.LessOrEqual(t, iters, uint64(2), "iterators per commit")
			require.Positive(t, gets, "late points are looked up")

			// Every late point is an overwrite: each preloaded point it hit
			// now reads as the union of both fragments.
			hit := map[pointID]bool{}
			for _, f := range frags {
				hit[pointID{f.Series, f.Time}] = true
			}
			rows := readAll(t, h.db, h.tid, 0, uint64(lateSeries*preloadPerSeries), 10_000)
			require.Len(t, rows, lateSeries*preloadPerSeries)
			for _, r := range rows {
				if hit[pointID{r.Series, r.Time}] {
					require.Len(t, r.Fields, 2, "x_seq %d", r.Seq)
					require.Equal(t, intField(3, -r.Time), r.Fields[1])
				} else {
					require.Len(t, r.Fields, 1, "x_seq %d", r.Seq)
				}
			}
		})
	}
}

// BenchmarkCommitLate is the store's commit path with a share of late
// (repeated) points, at several commit sizes, on disk with fsync: the cost
// per point (ns/point) should stay flat across commit sizes at each share.
func BenchmarkCommitLate(b *testing.B) {
	for _, late := range []int{0, 10, 100} {
		for _, size := range []int{1_000, 10_000, 50_000} {
			b.Run(fmt.Sprintf("late=%d%%/size=%dk", late, size/1000), func(b *testing.B) {
				cfg := DefaultConfig()
				cfg.Dir = b.TempDir()
				h := newLateHarness(b, cfg)
				commits := make([][]Fragment, b.N)
				for i := range commits {
					commits[i] = h.frags(size, late)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					if err := h.db.Commit([]TableCommit{h.commit(commits[i])}); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/point")
			})
		}
	}
}
