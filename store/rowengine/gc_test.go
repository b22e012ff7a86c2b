package rowengine

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// TestGCDiscardRatio stores two tables side by side, one a third of the
// bytes, and sweeps that one away (its retention): the value-log files
// they share end about a third garbage, which the default ratio gives
// back and badger's usual 0.5 does not. Head records of one point per
// series stay in the LSM tree (layout 10), so they add none.
func TestGCDiscardRatio(t *testing.T) {
	for _, tc := range []struct {
		ratio   float64
		rewrite bool
	}{{DefaultGCDiscardRatio, true}, {0.5, false}} {
		cfg := DefaultConfig()
		cfg.Dir = t.TempDir()
		cfg.MinFreeBytes = 0
		cfg.GCInterval = 0
		cfg.GCMaxBytesPerSecond = 0
		cfg.GCDiscardRatio = tc.ratio
		cfg.ValueLogMaxEntries = 64
		db, err := Open(cfg, nil, nil)
		require.NoError(t, err)
		swept, kept := nextTID(), nextTID()
		// Series per commit: the swept table's a third of the bytes, and
		// both tables' head records under valueThreshold.
		const sweptSeries, keptSeries, commits, rounds = 120, 240, 60, 6
		seqs := map[uint64]uint64{}
		commitOf := func(tid uint64, series, c int) store.TableCommit {
			tc := store.TableCommit{TableID: tid, FirstSeq: seqs[tid] + 1}
			for s := range series {
				if c == 0 {
					tc.NewSeries = append(tc.NewSeries, store.Series{ID: uint64(s + 1)})
				}
				tc.Fragments = append(tc.Fragments, store.Fragment{Series: uint64(s + 1), Time: int64(c)*10e9 + int64(s)*1000,
					Fields: []store.Field{intField(1, int64(c*s*7919)), intField(2, int64(c+s)*104729), intField(3, int64(s))}})
			}
			seqs[tid] += uint64(series)
			return tc
		}
		began := time.Now()
		// Each round's deletions go to an LSM table of their own (Close
		// flushes the memtable); past badger's 5 level-0 tables a
		// compaction merges them, which counts the deleted blocks' values
		// as garbage.
		for r := range rounds {
			for c := r * commits; c < (r+1)*commits; c++ {
				require.NoError(t, db.commit([]store.TableCommit{commitOf(swept, sweptSeries, c), commitOf(kept, keptSeries, c)}))
			}
			require.NoError(t, db.flushHeads())
			require.NoError(t, db.Close())
			db, err = Open(cfg, nil, nil)
			require.NoError(t, err)
		}
		for more := true; more; {
			res, err := db.sweepBefore(swept, math.MaxInt64, 1<<20)
			require.NoError(t, err)
			more = res.More
		}
		require.Empty(t, readPoints(t, db, swept))
		require.NoError(t, db.Close())
		db, err = Open(cfg, nil, nil)
		require.NoError(t, err)
		// Compacting the tables rewrites a fraction of what the rounds
		// wrote: ten times their time, scaled by the machine's load.
		wrote := time.Since(began)
		require.Eventually(t, func() bool {
			l0, below := 0, 0
			for _, ti := range db.bdb.Tables() {
				if ti.Level == 0 {
					l0++
				} else {
					below++
				}
			}
			if l0 > 0 && below > 0 {
				// A compaction ran before the last rounds: the tables
				// left in level 0 are too few to start another.
				require.NoError(t, db.bdb.Flatten(1))
			}
			return l0 == 0
		}, testdeadline.Scale(10*wrote), 10*time.Millisecond, "badger compacts level 0 (the rounds took %s)", wrote)
		// Level 0 may have gone down to a level above the one holding the
		// swept blocks (badger's base level): a deletion counts its
		// block's value as garbage only when a compaction merges the two.
		// Flatten merges every level into the last.
		require.NoError(t, db.bdb.Flatten(1))
		n, err := db.collectGarbage()
		require.NoError(t, err)
		if tc.rewrite {
			require.Positive(t, n, "ratio %v: files a third swept blocks rewritten", tc.ratio)
		} else {
			require.Zero(t, n, "ratio %v", tc.ratio)
		}
		require.Len(t, readPoints(t, db, kept), keptSeries*commits*rounds)
		require.NoError(t, db.Close())
	}
}

func TestGCDiscardRatioValidate(t *testing.T) {
	for _, r := range []float64{0, 1, -0.1, 1.5} {
		cfg := DefaultConfig()
		cfg.GCDiscardRatio = r
		require.ErrorContains(t, cfg.Validate(), "--store-gc-discard-ratio", "ratio %v", r)
	}
	cfg := DefaultConfig()
	require.NoError(t, cfg.Validate())
}
