package rowengine

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
)

// TestLSMMetrics: the LSM tables are reported by level as badger counts
// them (a store closed with data in its memtable reopens with a level-0
// table), and both write-stall stages are exported from the start.
func TestLSMMetrics(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.MinFreeBytes = 0
	cfg.GCInterval = 0
	db, err := Open(cfg, nil, nil)
	require.NoError(t, err)
	tid := nextTID()
	require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, FirstSeq: 1, NewSeries: []store.Series{{ID: 1}},
		Fragments: []store.Fragment{{Series: 1, Time: 1, Fields: []store.Field{{Col: 1, Value: store.Value{Kind: store.KindInt, Num: 7}}}}}}}))
	require.NoError(t, db.Close()) // flushes the memtable to level 0

	reg := prometheus.NewPedanticRegistry()
	db, err = Open(cfg, nil, reg)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	levels := db.bdb.Levels()
	require.Positive(t, levels[0].NumTables, "the memtable closed with data is a level-0 table")
	var want strings.Builder
	want.WriteString("# HELP ingestd_store_lsm_tables LSM tables by level (0 is the newest; badger stops flushing memtables while level 0 holds 15).\n# TYPE ingestd_store_lsm_tables gauge\n")
	for _, l := range levels {
		want.WriteString("ingestd_store_lsm_tables{level=\"" + strconv.Itoa(l.Level) + "\"} " + strconv.Itoa(l.NumTables) + "\n")
	}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want.String()), "ingestd_store_lsm_tables"))
	require.Equal(t, 2, testutil.CollectAndCount(lsmCollector{db}, "ingestd_store_write_stall_seconds_total"), "both stages, l0 and memtable")
}
