package badgerstore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// TestGCDiscardRatio stores the common load (many series, one point each
// per commit), whose value-log files end about a third head records once
// the head flush has deleted them: the default ratio gives that space
// back, badger's usual 0.5 does not.
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
		tid := db.allocTableID()
		const series, commits, rounds = 500, 60, 6
		seq := uint64(0)
		began := time.Now()
		// Each round's deleted records go to an LSM table of their own
		// (Close flushes the memtable); past badger's 5 level-0 tables a
		// compaction merges them, which counts the deleted records'
		// values as garbage.
		for r := range rounds {
			for c := r * commits; c < (r+1)*commits; c++ {
				tc := store.TableCommit{TableID: tid, FirstSeq: seq + 1}
				for s := range series {
					if c == 0 {
						tc.NewSeries = append(tc.NewSeries, store.Series{ID: uint64(s + 1)})
					}
					tc.Fragments = append(tc.Fragments, store.Fragment{Series: uint64(s + 1), Time: int64(c)*10e9 + int64(s)*1000,
						Fields: []store.Field{intField(1, int64(c*s)), intField(2, int64(c+s)), intField(3, int64(s))}})
				}
				seq += series
				require.NoError(t, db.commit([]store.TableCommit{tc}))
			}
			require.NoError(t, db.flushHeads())
			require.NoError(t, db.Close())
			db, err = Open(cfg, nil, nil)
			require.NoError(t, err)
		}
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
		n, err := db.collectGarbage()
		require.NoError(t, err)
		if tc.rewrite {
			require.Positive(t, n, "ratio %v: files a third head records rewritten", tc.ratio)
		} else {
			require.Zero(t, n, "ratio %v", tc.ratio)
		}
		require.Len(t, readPoints(t, db, tid), series*commits*rounds)
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
