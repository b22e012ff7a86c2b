package rowengine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
)

// TestTableStatsMaxAge: counts are reused for Config.TableStatsMaxAge and
// counted anew at 0; a large block in the value log is counted from its
// header like a small one in the LSM tree.
func TestTableStatsMaxAge(t *testing.T) {
	for _, maxAge := range []time.Duration{0, time.Hour} {
		t.Run(maxAge.String(), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Dir = t.TempDir()
			cfg.TableStatsMaxAge = maxAge
			db, err := Open(cfg, nil, nil)
			require.NoError(t, err)
			defer func() { require.NoError(t, db.Close()) }()
			tid := nextTID()
			commit := func(first uint64, n int) {
				frags := make([]store.Fragment, n)
				for i := range frags {
					frags[i] = store.Fragment{Series: 1, Time: int64(first) + int64(i), Fields: []store.Field{intField(1, int64(i))}}
				}
				require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, NewSeries: []store.Series{{ID: 1}}, FirstSeq: first, Fragments: frags}}))
			}
			commit(1, 3)
			st, err := db.countTable(tid)
			require.NoError(t, err)
			require.Equal(t, uint64(3), st.Fragments)
			require.Equal(t, uint64(1), st.Series)

			commit(4, 2000) // a block above the value threshold: in the value log
			again, err := db.countTable(tid)
			require.NoError(t, err)
			if maxAge == 0 {
				require.Equal(t, uint64(2003), again.Fragments)
				require.Equal(t, uint64(2003), again.RowsEstimate())
				require.Greater(t, again.Bytes, st.Bytes)
			} else {
				require.Equal(t, st, again, "reused within --store-table-stats-max-age")
			}
		})
	}
}

func TestRowsEstimate(t *testing.T) {
	require.Equal(t, uint64(7), store.TableStats{Fragments: 9, Overwritten: 2}.RowsEstimate())
	require.Zero(t, store.TableStats{Fragments: 1, Overwritten: 2}.RowsEstimate(), "never negative")
}

// TestTableStatsSweptOncePerMaxAge: the expired counts are dropped at most
// once per Config.TableStatsMaxAge, not at every call (a list of 10,000
// tables asked 10,000 counts, each sweeping the whole cache: 1.2 s a
// request), and a count past its age is counted anew whether or not a
// sweep dropped it.
func TestTableStatsSweptOncePerMaxAge(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.TableStatsMaxAge = time.Hour
	db, err := Open(cfg, nil, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	tid := nextTID()
	commit := func(first uint64) {
		f := store.Fragment{Series: 1, Time: int64(first), Fields: []store.Field{intField(1, 1)}}
		require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, NewSeries: []store.Series{{ID: 1}}, FirstSeq: first, Fragments: []store.Fragment{f}}}))
	}
	commit(1)
	_, err = db.countTable(tid)
	require.NoError(t, err)
	c := &db.tableStats
	old := time.Now().Add(-2 * time.Hour)
	c.mu.Lock()
	c.byTID[999_999] = store.TableStats{ComputedAt: old} // another instance's expired count
	s := c.byTID[tid]
	s.ComputedAt = old
	c.byTID[tid] = s
	c.mu.Unlock()

	commit(2)
	st, err := db.countTable(tid)
	require.NoError(t, err)
	require.Equal(t, uint64(2), st.Fragments, "an expired count is counted anew")
	c.mu.Lock()
	_, kept := c.byTID[999_999]
	c.swept = old
	c.mu.Unlock()
	require.True(t, kept, "no sweep within the max age of the last one")
	_, err = db.countTable(tid)
	require.NoError(t, err)
	c.mu.Lock()
	_, kept = c.byTID[999_999]
	c.mu.Unlock()
	require.False(t, kept, "swept once the max age passed")
}
