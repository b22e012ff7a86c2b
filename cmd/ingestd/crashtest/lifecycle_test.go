//go:build linux

package crashtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// idLine appends the line "table,w=<w> id=<id>i <ts>": one point per id.
func idLine(b []byte, table string, w int, id int64) []byte {
	return fmt.Appendf(b, "%s,w=%d id=%di %d\n", table, w, id, crashBaseTS+id)
}

// ackedWriter posts batches of n id lines to /write until ctx ends,
// recording the ids of every request answered 204 and counting the
// others.
type ackedWriter struct {
	mu      sync.Mutex
	acked   []int64
	refused []int64 // answered 503: nothing may be stored
	other   map[int]int
	errs    int
}

func (aw *ackedWriter) run(ctx context.Context, hc *http.Client, base, table string, w, n int) {
	var body []byte
	for i := int64(0); ctx.Err() == nil; i++ {
		body = body[:0]
		ids := make([]int64, n)
		for j := range ids {
			ids[j] = int64(w)<<32 | (i*int64(n) + int64(j))
			body = idLine(body, table, w, ids[j])
		}
		r, err := do(ctx, hc, http.MethodPost, base+"/write", nil, body)
		aw.mu.Lock()
		switch {
		case err != nil:
			aw.errs++
		case r.Status == http.StatusNoContent:
			aw.acked = append(aw.acked, ids...)
		case r.Status == http.StatusServiceUnavailable:
			aw.refused = append(aw.refused, ids...)
			fallthrough
		default:
			if aw.other == nil {
				aw.other = map[int]int{}
			}
			aw.other[r.Status]++
		}
		aw.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond) // pacing: the daemon is stopping
		}
	}
}

// requireStored fails unless every id is in stored.
func requireStored(t testing.TB, stored []int64, ids []int64, what string) {
	t.Helper()
	set := make(map[int64]struct{}, len(stored))
	for _, id := range stored {
		set[id] = struct{}{}
	}
	for _, id := range ids {
		if _, ok := set[id]; !ok {
			t.Fatalf("%s: id %d (writer %d, line %d) is not stored (%d of %d stored in all)", what, id, id>>32, id&(1<<32-1), len(set), len(ids))
		}
	}
}

// TestShutdownUnderLoad sends SIGTERM while HTTP writers and two TCP
// connections write: one connection's lines are all read but still
// buffered in the daemon (its flush interval is an hour), the other writes
// all the while. The daemon exits 0; after a restart every 204-acknowledged
// line and every line of the first connection is stored, and the second
// connection's stored lines are a prefix of what it sent.
func TestShutdownUnderLoad(t *testing.T) {
	dir := t.TempDir()
	args := daemonArgs(filepath.Join(dir, "data"), "--tcp-flush-interval", "1h", "--sync-tables", "sd_*")
	p := startIngestd(t, filepath.Join(dir, "1.log"), args...)
	hc := newHTTPClient(t, 8)

	// Connection A: 25,000 lines, more than one TCP batch (10,000 lines),
	// so some are committed at once and the rest wait for the shutdown.
	const nA = 25_000
	var linesA []byte
	for i := range int64(nA) {
		linesA = idLine(linesA, "sd_tcpa", 0, i)
	}
	connA, err := net.DialTimeout("tcp", p.TCPAddr, 5*time.Second)
	require.NoError(t, err)
	defer func() { _ = connA.Close() }()
	require.NoError(t, connA.SetWriteDeadline(time.Now().Add(30*time.Second)))
	_, err = connA.Write(linesA)
	require.NoError(t, err)
	poll(t, 30*time.Second, func() bool {
		v, _ := metric(t, hc, p.URL, `ingestd_ilp_wire_bytes_total{transport="tcp"}`)
		return v >= float64(len(linesA))
	}, "ingestd reads connection A's %d bytes", len(linesA))
	st := getSync(t, hc, p.URL, "sd_tcpa")
	require.Less(t, st.Seq, uint64(nA), "some of connection A's lines wait in the daemon's buffer")

	// The load: three HTTP writers and connection B.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	writers := make([]*ackedWriter, 3)
	for w := range writers {
		writers[w] = &ackedWriter{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			writers[w].run(ctx, hc, p.URL, "sd_http", w, 1+w*40)
		}()
	}
	connB, err := net.DialTimeout("tcp", p.TCPAddr, 5*time.Second)
	require.NoError(t, err)
	defer func() { _ = connB.Close() }()
	var sentB int64 // lines of connection B written whole
	wg.Add(1)
	go func() {
		defer wg.Done()
		var b []byte
		for i := int64(0); ctx.Err() == nil; i += 10 {
			b = b[:0]
			for j := range int64(10) {
				b = idLine(b, "sd_tcpb", 1, i+j)
			}
			_ = connB.SetWriteDeadline(time.Now().Add(10 * time.Second))
			n, err := connB.Write(b)
			if err != nil {
				sentB = i + int64(n/(len(b)/10)) // lines are of equal length
				return
			}
			sentB = i + 10
			time.Sleep(time.Millisecond) // pacing
		}
	}()
	poll(t, 30*time.Second, func() bool {
		for _, w := range writers {
			w.mu.Lock()
			n := len(w.acked)
			w.mu.Unlock()
			if n == 0 {
				return false
			}
		}
		return true
	}, "every HTTP writer has a write acknowledged")
	time.Sleep(200 * time.Millisecond) // more load

	began := time.Now()
	code := p.terminate(t, 60*time.Second)
	stopped := time.Since(began)
	cancel()
	wg.Wait()
	log := p.log(t)
	require.Equal(t, 0, code, "SIGTERM under load: exit code\n%s", log)
	requireCleanLog(t, log)
	require.Contains(t, log, "ingestd stopped cleanly")

	p = startIngestd(t, filepath.Join(dir, "2.log"), args...)
	defer func() { require.Equal(t, 0, p.terminate(t, 60*time.Second)) }()
	stored := intColumn(t, hc, p.URL, "sd_http", "id")
	total := 0
	for w, aw := range writers {
		requireStored(t, stored, aw.acked, fmt.Sprintf("HTTP writer %d", w))
		total += len(aw.acked)
	}
	var wantA []int64
	for i := range int64(nA) {
		wantA = append(wantA, i)
	}
	storedA := intColumn(t, hc, p.URL, "sd_tcpa", "id")
	slices.Sort(storedA)
	require.Equal(t, wantA, storedA, "every line of connection A, read before SIGTERM, is stored once")
	storedB := intColumn(t, hc, p.URL, "sd_tcpb", "id")
	slices.Sort(storedB)
	for i, id := range storedB {
		require.Equal(t, int64(i), id, "connection B's stored lines are a prefix of what it sent")
	}
	require.LessOrEqual(t, int64(len(storedB)), sentB)
	t.Logf("SIGTERM took %s to exit 0; %d HTTP lines acknowledged, %d lines of A and %d of %d lines of B stored",
		stopped.Round(time.Millisecond), total, len(storedA), len(storedB), sentB)
}

// TestSecondProcess starts a second ingestd on a data directory in use: it
// fails at once with a clear message and exit code 1, and the first goes on
// serving.
func TestSecondProcess(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	p := startIngestd(t, filepath.Join(dir, "1.log"), daemonArgs(data, "--sync-tables", "*")...)
	hc := newHTTPClient(t, 2)

	began := time.Now()
	second := launch(t, filepath.Join(dir, "2.log"), daemonArgs(data)...)
	code := second.wait(t, 30*time.Second)
	log := second.log(t)
	require.Equal(t, 1, code, "the second process: exit code\n%s", log)
	require.Less(t, time.Since(began), 10*time.Second, "the second process fails at once")
	require.Contains(t, log, "data directory is in use by another process")
	require.Contains(t, log, data, "the message names the directory")
	require.NotContains(t, log, "ingestd started")
	requireCleanLog(t, log)

	r := mustDo(t, hc, http.MethodPost, p.URL+"/write", idLine(nil, "second", 0, 7))
	require.Equal(t, http.StatusNoContent, r.Status, "the first process goes on: %s", r.Body)
	require.Equal(t, []int64{7}, intColumn(t, hc, p.URL, "second", "id"))
	require.Equal(t, 0, p.terminate(t, 60*time.Second))
}

// mountTmpfs mounts a tmpfs of the given size (mount(8) syntax, e.g. "48m")
// on a new directory, unmounted when the test ends. It skips the test when
// this process may not mount (not root, or no CAP_SYS_ADMIN).
func mountTmpfs(t testing.TB, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("SKIP: cannot mount a tmpfs on %s (%v): this test needs root or CAP_SYS_ADMIN", dir, err)
	}
	t.Cleanup(func() { require.NoError(t, syscall.Unmount(dir, 0)) })
	return dir
}

// remount changes a mounted tmpfs's flags and options.
func remount(t testing.TB, dir string, flags uintptr, opts string) {
	t.Helper()
	require.NoError(t, syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT|flags, opts), "remount %s %s", dir, opts)
}

// requireFails runs ingestd, which must fail at once: exit code 1, a log
// naming the cause, no crash.
func requireFails(t testing.TB, logPath string, want []string, args ...string) {
	t.Helper()
	p := launch(t, logPath, args...)
	code := p.wait(t, 30*time.Second)
	log := p.log(t)
	require.Equal(t, 1, code, "exit code\n%s", log)
	for _, w := range want {
		require.Contains(t, log, w)
	}
	require.NotContains(t, log, "ingestd started")
	requireCleanLog(t, log)
}

// TestUnwritableDataDir checks that a data directory ingestd cannot create
// or write makes it fail at once with a clear message and exit code 1,
// never a panic, and that acknowledged data is readable once the cause is
// fixed.
func TestUnwritableDataDir(t *testing.T) {
	t.Run("under a regular file", func(t *testing.T) {
		dir := t.TempDir()
		file := filepath.Join(dir, "file")
		require.NoError(t, os.WriteFile(file, nil, 0o600))
		requireFails(t, filepath.Join(dir, "1.log"), []string{"create data directory", "not a directory"},
			daemonArgs(filepath.Join(file, "data"))...)
	})
	t.Run("permissions", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("SKIP: root ignores permissions (the read-only file system case covers root)")
		}
		dir := t.TempDir()
		require.NoError(t, os.Chmod(dir, 0o500))
		requireFails(t, filepath.Join(t.TempDir(), "1.log"), []string{"create data directory", "permission denied"},
			daemonArgs(filepath.Join(dir, "data"))...)
	})
	t.Run("read-only file system", func(t *testing.T) {
		fs := mountTmpfs(t, "64m")
		logs := t.TempDir()
		args := daemonArgs(filepath.Join(fs, "data"), "--sync-tables", "*", "--store-min-free-bytes", "16777216")
		hc := newHTTPClient(t, 2)
		p := startIngestd(t, filepath.Join(logs, "1.log"), args...)
		var body []byte
		for i := range int64(1000) {
			body = idLine(body, "ro", 0, i)
		}
		r := mustDo(t, hc, http.MethodPost, p.URL+"/write", body)
		require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
		require.Equal(t, 0, p.terminate(t, 60*time.Second))

		remount(t, fs, syscall.MS_RDONLY, "")
		requireFails(t, filepath.Join(logs, "2.log"), []string{"read-only file system"}, args...)

		remount(t, fs, 0, "")
		p = startIngestd(t, filepath.Join(logs, "3.log"), args...)
		ids := intColumn(t, hc, p.URL, "ro", "id")
		require.Len(t, ids, 1000, "the acknowledged lines are readable once the directory is writable again")
		require.Equal(t, 0, p.terminate(t, 60*time.Second))
	})
}

// TestDiskFull checks the data directory's free space: ingestd does not
// start with less than --store-min-free-bytes free; when a writer fills the
// file system, the write that finds less is answered 500 naming the cause
// and ingestd exits 1 with the storage error (never a panic, which a write
// to a full disk through badger's memory-mapped files would be: SIGBUS);
// once the file system is enlarged every acknowledged line is readable and
// writes work again.
func TestDiskFull(t *testing.T) {
	fs := mountTmpfs(t, "40m")
	logs := t.TempDir()
	args := daemonArgs(filepath.Join(fs, "data"), "--tcp-addr", "", "--sync-tables", "*",
		"--store-memtable-bytes", "1048576", "--store-block-cache-bytes", "1048576", "--store-min-free-bytes", "16777216")
	hc := newHTTPClient(t, 2)
	// Less free space than asked for: ingestd does not start.
	requireFails(t, filepath.Join(logs, "0.log"), []string{"data directory is full", "--store-min-free-bytes"},
		append(slices.Clone(args), "--store-min-free-bytes", "1099511627776")...)
	p := startIngestd(t, filepath.Join(logs, "1.log"), args...)

	var (
		acked   []int64
		failure response
	)
	// Random padding: blocks are compressed, and zeros would never fill it.
	rng := rand.New(rand.NewPCG(1, 2))
	pad := make([]byte, 500)
	for i := int64(0); ; i++ {
		require.Less(t, i, int64(2000), "the file system never filled up")
		var body []byte
		ids := make([]int64, 100)
		for j := range ids {
			ids[j] = i*100 + int64(j)
			for k := range pad {
				pad[k] = byte(rng.Uint32())
			}
			body = fmt.Appendf(body, "full,w=0 id=%di,pad=\"%x\" %d\n", ids[j], pad, crashBaseTS+ids[j])
		}
		r, err := do(context.Background(), hc, http.MethodPost, p.URL+"/write", nil, body)
		require.NoError(t, err, "the write that fills the disk gets an answer")
		if r.Status == http.StatusNoContent {
			acked = append(acked, ids...)
			continue
		}
		failure = r
		break
	}
	require.Equal(t, http.StatusInternalServerError, failure.Status, "%s", failure.Body)
	require.Contains(t, string(failure.Body), "data directory is full")
	code := p.wait(t, 60*time.Second)
	log := p.log(t)
	require.Equal(t, 1, code, "ingestd stops after the storage error\n%s", log)
	require.Contains(t, log, "data directory is full")
	require.Contains(t, log, "--store-min-free-bytes")
	requireCleanLog(t, log)
	require.NotEmpty(t, acked)

	remount(t, fs, 0, "size=256m")
	p = startIngestd(t, filepath.Join(logs, "3.log"), args...)
	stored := intColumn(t, hc, p.URL, "full", "id")
	requireStored(t, stored, acked, "after the file system was enlarged")
	r := mustDo(t, hc, http.MethodPost, p.URL+"/write", idLine(nil, "full", 0, 1<<40))
	require.Equal(t, http.StatusNoContent, r.Status, "writes work again: %s", r.Body)
	require.Equal(t, 0, p.terminate(t, 60*time.Second))
	t.Logf("%d lines of about 1 KB acknowledged before the file system filled up", len(acked))
}
