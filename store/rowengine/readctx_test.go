package rowengine

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
)

// TestReadsStopWhenCtxEnds: a read whose ctx ends while it runs (here in
// its first visit) stops before the next block with ctx's error, rather
// than reading the table to its limit.
func TestReadsStopWhenCtxEnds(t *testing.T) {
	forEachConfig(t, func(t *testing.T, db *Engine) {
		tid := nextTID()
		const blocks, perBlock = 3, 10
		for b := range blocks {
			tc := store.TableCommit{TableID: tid, FirstSeq: uint64(b*perBlock + 1)}
			if b == 0 {
				tc.NewSeries = []store.Series{{ID: 1}}
			}
			for i := range perBlock {
				tc.Fragments = append(tc.Fragments, store.Fragment{Series: 1, Time: int64(b*perBlock + i), Fields: []store.Field{intField(1, int64(i))}})
			}
			require.NoError(t, db.commit([]store.TableCommit{tc}))
		}

		ctx, cancel := context.WithCancel(context.Background())
		visited := 0
		_, err := db.ReadSeq(ctx, tid, 0, blocks*perBlock, math.MaxInt32, nil, func(*store.Row) error {
			cancel()
			visited++
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, perBlock, visited, "the first block, not the table")

		ctx, cancel = context.WithCancel(context.Background())
		visited = 0
		_, _, err = db.ReadRows(ctx, tid, nil, math.MinInt64, math.MaxInt64, math.MaxInt32, func(*store.Row) error {
			cancel()
			visited++
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, perBlock, visited, "the first block, not the table")
	})
}
