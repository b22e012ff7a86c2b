package badgerstore

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store/testdeadline"
)

// TestCompactionNice: with --store-compaction-nice badger's two
// compactors run on threads of that nice value, and those threads end
// with the store instead of going back to the runtime's pool at the
// lowered priority.
func TestCompactionNice(t *testing.T) {
	const nice = 7 // not the default, which other tests' stores may use
	require.Empty(t, threadsAtNice(t, nice), "before the store opened")
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.MinFreeBytes = 0
	cfg.GCInterval = 0
	cfg.CompactionNice = nice
	db, err := Open(cfg, nil, nil)
	require.NoError(t, err)
	waitThreadsAtNice(t, nice, "one per compactor", func(tids []int) bool { return len(tids) == 2 })
	require.NoError(t, db.Close())
	waitThreadsAtNice(t, nice, "none once closed", func(tids []int) bool { return len(tids) == 0 })
}

// waitThreadsAtNice polls until ok holds for the ids of the process's
// threads at nice.
func waitThreadsAtNice(t *testing.T, nice int, want string, ok func(tids []int) bool) {
	t.Helper()
	deadline := time.Now().Add(testdeadline.Scale(10 * time.Second))
	for {
		tids := threadsAtNice(t, nice)
		if ok(tids) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads %v (process %d) at nice %d, want %s", tids, os.Getpid(), nice, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// threadsAtNice returns the ids of the process's threads whose nice
// value is nice (/proc/self/task/*/stat, field 19).
func threadsAtNice(t *testing.T, nice int) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/self/task/*/stat")
	require.NoError(t, err)
	var tids []int
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread ended
		}
		s := string(b)
		// Past the command's closing parenthesis: fields 3 on.
		if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 16 && f[16] == strconv.Itoa(nice) {
			tid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			require.NoError(t, err)
			tids = append(tids, tid)
		}
	}
	return tids
}
