package rowengine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
)

// sweepModel is what a table must hold: per point the coalesced row, and
// per x_seq the time of the fragment.
type sweepModel struct {
	points map[pointID]map[uint32]int64
	seqTs  map[uint64]int64
}

// readPoints copies the table by time range: every point once, coalesced.
func readPoints(t *testing.T, db *Engine, tid uint64) map[pointID]map[uint32]int64 {
	t.Helper()
	out := map[pointID]map[uint32]int64{}
	var cur store.RowCursor
	for {
		next, done, err := db.readRows(context.Background(), tid, cur, math.MinInt64, math.MaxInt64, 97, func(r *store.Row) error {
			id := pointID{r.Series, r.Time}
			_, dup := out[id]
			require.False(t, dup, "point %v copied twice", id)
			m := map[uint32]int64{}
			for _, f := range r.Fields {
				m[f.Col] = f.Value.Int()
			}
			out[id] = m
			return nil
		})
		require.NoError(t, err)
		if done {
			return out
		}
		cur = next
	}
}

// TestSweepRemovesExactlyAged writes in-order runs, late points, overwrites
// and unsynced blocks, sweeps them in small batches and checks that exactly
// the aged points are gone, the rest coalesce as before, the horizon is
// above every removed x_seq, and a drain from the horizon reads every
// retained fragment while one below it is refused.
func TestSweepRemovesExactlyAged(t *testing.T) {
	forEachConfig(t, func(t *testing.T, db *Engine) {
		tid := nextTID()
		rng := rand.New(rand.NewPCG(1, 2))
		m := sweepModel{points: map[pointID]map[uint32]int64{}, seqTs: map[uint64]int64{}}
		seq := uint64(0)
		var series []store.Series
		for s := uint64(1); s <= 5; s++ {
			series = append(series, store.Series{ID: s})
		}
		for c := 0; c < 30; c++ {
			n := 1 + rng.IntN(150)
			frags := make([]store.Fragment, n)
			for i := range frags {
				sid := uint64(1 + rng.IntN(5))
				ts := int64(c*100 + i) // mostly in order
				if rng.IntN(4) == 0 {
					ts = int64(rng.IntN(3000)) // late or repeated
				}
				col := uint32(1 + rng.IntN(3))
				v := int64(c*1000 + i)
				frags[i] = store.Fragment{Series: sid, Time: ts, Fields: []store.Field{intField(col, v)}}
				id := pointID{sid, ts}
				if m.points[id] == nil {
					m.points[id] = map[uint32]int64{}
				}
				m.points[id][col] = v
			}
			tc := store.TableCommit{TableID: tid, Fragments: frags}
			if c == 0 {
				tc.NewSeries = series
			}
			if c%7 != 3 { // some blocks unsynced
				tc.FirstSeq = seq + 1
				for i := range frags {
					m.seqTs[seq+1+uint64(i)] = frags[i].Time
				}
				seq += uint64(n)
			}
			require.NoError(t, db.commit([]store.TableCommit{tc}))
		}
		require.Equal(t, m.points, readPoints(t, db, tid))

		const cutoff = 1500
		batches, removed := 0, 0
		var res store.SweepResult
		for {
			var err error
			res, err = db.sweepBefore(tid, cutoff, 40)
			require.NoError(t, err)
			removed += res.Removed
			batches++
			require.LessOrEqual(t, res.Removed, 40, "a batch removes at most its bound")
			if !res.More {
				break
			}
			require.Less(t, batches, 1000)
		}
		require.Greater(t, batches, 2, "the sweep took several bounded batches")
		want := map[pointID]map[uint32]int64{}
		oldest := int64(math.MaxInt64)
		for id, row := range m.points {
			if id.ts >= cutoff {
				want[id] = row
				oldest = min(oldest, id.ts)
			}
		}
		require.Equal(t, want, readPoints(t, db, tid), "exactly the aged points are gone, the rest coalesce as before")
		require.True(t, res.HasOldest)
		require.Equal(t, oldest, res.Oldest)

		maxRemoved := uint64(0)
		for s, ts := range m.seqTs {
			if ts < cutoff {
				maxRemoved = max(maxRemoved, s)
			}
		}
		h, err := db.horizon(tid)
		require.NoError(t, err)
		require.Equal(t, maxRemoved+1, h)
		require.Equal(t, h, res.Horizon)
		rows := readAll(t, db, tid, h-1, seq, 50)
		for _, r := range rows {
			require.GreaterOrEqual(t, r.Time, int64(cutoff))
			require.Equal(t, m.seqTs[r.Seq], r.Time)
		}
		var retained int
		for s, ts := range m.seqTs {
			if s >= h {
				require.GreaterOrEqual(t, ts, int64(cutoff))
				retained++
			}
		}
		require.Len(t, rows, retained, "a drain from horizon-1 reads every fragment above it")
		_, err = db.readSeq(context.Background(), tid, h-2, seq, 10, nil, func(*store.Row) error { return nil })
		require.ErrorIs(t, err, store.ErrHistoryExpired)

		// A second sweep finds nothing; a restart keeps the horizon.
		res, err = db.sweepBefore(tid, cutoff, 40)
		require.NoError(t, err)
		require.Zero(t, res.Removed)
		require.False(t, res.More)
	})
}

// TestSweepIdempotentAfterPartialWrites stores what a sweep interrupted
// by a crash leaves (blocks rewritten and the horizon raised, index entries
// not yet removed): after a restart the next sweep completes the removal
// and every retained point is intact.
func TestSweepIdempotentAfterPartialWrites(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.MinFreeBytes = 0
	db, err := Open(cfg, nil, nil)
	require.NoError(t, err)
	tid := nextTID()
	frags := []store.Fragment{}
	for i := range 200 {
		frags = append(frags, store.Fragment{Series: 1, Time: int64(i), Fields: []store.Field{intField(1, int64(i))}})
	}
	require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, FirstSeq: 1, NewSeries: []store.Series{{ID: 1}}, Fragments: frags}}))
	// Overwrite the points 50..59 so they have point-index entries.
	require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, FirstSeq: 201, Fragments: frags[50:60]}}))
	// Simulate a crash after the blocks were rewritten but before the
	// index entries went: run the block half by hand.
	view := db.bdb.NewTransaction(false)
	w := &committer{db: db, txn: db.bdb.NewTransaction(true)}
	f := blockFinder{view: view, tid: tid}
	key, _, err := f.find(ref{seq: 1})
	require.NoError(t, err)
	b := &sweepBlock{key: key, remove: map[uint64]bool{}}
	for i := range 100 {
		b.remove[uint64(i)] = true
	}
	n, err := w.rewriteBlock(view, b)
	require.NoError(t, err)
	require.Equal(t, 100, n)
	require.NoError(t, w.set(horizonKey(tid), []byte{101}))
	require.NoError(t, w.txn.Commit())
	f.close()
	view.Discard()
	require.NoError(t, db.Close())

	db, err = Open(cfg, nil, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	res, err := db.sweepBefore(tid, 100, 1000)
	require.NoError(t, err)
	require.False(t, res.More)
	require.Equal(t, 10, res.Removed, "only the overwrites in the second block were left to remove")
	got := readPoints(t, db, tid)
	require.Len(t, got, 100)
	for i := 100; i < 200; i++ {
		require.Equal(t, map[uint32]int64{1: int64(i)}, got[pointID{1, int64(i)}])
	}
	require.Equal(t, uint64(211), res.Horizon)
}

// TestCollectGarbageGivesSpaceBack writes and drops a table's data round
// after round: with the collector, the data directory never holds much
// more than one round (without it, it grows by a round each time).
func TestCollectGarbageGivesSpaceBack(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.MinFreeBytes = 0
	cfg.GCInterval = 0
	cfg.GCMaxBytesPerSecond = 0
	cfg.ValueLogMaxEntries = 16
	db, err := Open(cfg, nil, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	seq := uint64(0)
	var written int64 // the directory's size once the first round is written
	rewrites := 0
	for round := range 8 {
		tid := nextTID()
		for c := range 20 {
			frags := make([]store.Fragment, 5000)
			for j := range frags {
				frags[j] = store.Fragment{Series: 1, Time: int64(c*5000 + j), Fields: []store.Field{intField(1, int64(j)),
					{Col: 2, Value: store.Value{Kind: store.KindString, Str: fmt.Sprintf("round %d commit %d point %d and some padding", round, c, j)}}}}
			}
			tc := store.TableCommit{TableID: tid, FirstSeq: seq + 1, Fragments: frags}
			if c == 0 {
				tc.NewSeries = []store.Series{{ID: 1}}
			}
			seq += uint64(len(frags))
			require.NoError(t, db.commit([]store.TableCommit{tc}))
		}
		if round == 0 {
			lsm, vlog := db.diskSize()
			written = lsm + vlog
		}
		require.NoError(t, db.dropTableData(tid))
		n, err := db.collectGarbage()
		require.NoError(t, err)
		rewrites += n
		lsm, vlog := db.diskSize()
		require.LessOrEqual(t, lsm+vlog, 2*written, "round %d: %d bytes on disk, %d once the first round was written", round+1, lsm+vlog, written)
	}
	require.Positive(t, rewrites)
}
