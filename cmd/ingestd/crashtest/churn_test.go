package crashtest

import (
	"flag"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

var churnCycles = flag.Int("churn.cycles", 160, "TestHostileTableChurnDisk: create/write/truncate/drop cycles to run (the size at cycle N must be within twice the size at cycle N/32)")

// TestHostileTableChurnDisk: an attacker allowed DDL creates a table,
// writes 100 lines to it, truncates it (every other cycle) and drops it,
// over and over (-churn.cycles). Each cycle leaves nothing live: the
// data directory's size at the last cycle must be within twice its size
// at a thirty-second of the run. What the cycles leave behind is badger's
// MANIFEST (two table changes per TRUNCATE or DROP, whose DropPrefix
// flushes the memtable), which badger rewrites once it records 10,000
// deletions: the size saws between about 100 and 300 KiB on an empty
// store, see docs/operations.md#disk for the figures of a 32,000-cycle
// run. A cycle's head records and blocks above 512
// bytes go to badger's value log, where they are garbage once dropped,
// taken back when the collector rewrites their file, never the file
// being written: value-log files of 16 values and a pass every 50 ms
// make that happen within the run instead of once every few hundred
// cycles (4,096 values a file by default).
func TestHostileTableChurnDisk(t *testing.T) {
	n := *churnCycles
	require.GreaterOrEqual(t, n, 32, "-churn.cycles")
	h := startHostile(t, "--feed-max-tombstones", "1000", "--store-value-log-max-entries", "16", "--store-gc-interval", "50ms")
	dataDir := filepath.Join(filepath.Dir(h.p.logPath), "data")
	var body strings.Builder
	for i := range 100 {
		fmt.Fprintf(&body, "TABLE,host=h%02d v=%d,s=\"%s\" %d\n", i, i, strings.Repeat("x", 200), i+1)
	}
	var early int64
	for i := range n {
		name := fmt.Sprintf("churn%06d", i)
		createSyncTable(t, h.hc, h.p.URL, name)
		r := mustDo(t, h.hc, http.MethodPost, h.p.URL+"/write", []byte(strings.ReplaceAll(body.String(), "TABLE", name)))
		require.Equal(t, http.StatusNoContent, r.Status, "%.300s", r.Body)
		if i%2 == 1 {
			r = mustDo(t, h.hc, http.MethodPost, h.p.URL+"/api/v1/tables/"+name+"/truncate", nil)
			require.Equal(t, http.StatusOK, r.Status, "%.300s", r.Body)
		}
		r = mustDo(t, h.hc, http.MethodDelete, h.p.URL+"/api/v1/tables/"+name, nil)
		require.Equal(t, http.StatusNoContent, r.Status, "%.300s", r.Body)
		if (i+1)%(n/32) == 0 {
			use := diskUse(t, dataDir)
			t.Logf("after %d cycles: %d KiB on disk", i+1, use>>10)
			if early == 0 {
				early = use
			}
		}
	}
	late := diskUse(t, dataDir)
	require.LessOrEqual(t, late, 2*early, "the data directory grew from %d KiB (cycle %d) to %d KiB (cycle %d)", early>>10, n/32, late>>10, n)
}

// diskUse is the space the files under dir take on disk: their allocated
// blocks, as badger's value-log and memtable files are sparse until
// written.
func diskUse(t testing.TB, dir string) int64 {
	t.Helper()
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		}
		return nil
	})
	require.NoError(t, err)
	return total
}
