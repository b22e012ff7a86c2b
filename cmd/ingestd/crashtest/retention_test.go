package crashtest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/httpapi/client"
)

// retentionCycles is how many SIGKILL cycles TestCrashRetentionAndTruncate
// runs.
const retentionCycles = 8

// retWrite is one acknowledged write: its ids, the time its lines carry
// and when it was sent and answered.
type retWrite struct {
	ids        []int64
	ts         int64 // the lines' time (Unix ns)
	sent, done time.Time
}

// truncation is one TRUNCATE: when it was sent and when it was answered
// 200 (acked), or, unanswered, when the daemon was killed: it ran, or did
// not, at some moment in between.
type truncation struct {
	sent, done time.Time
	acked      bool
}

// TestCrashRetentionAndTruncate SIGKILLs ingestd at random moments while
// writers fill a table with a 3 s retention (rows stamped with the
// current time, so the sweeper removes rows all the time, in batches of
// 50) and another that is truncated every 100 ms, with the value-log
// collector running every 50 ms over files of at most 8 values, so that
// kills land inside sweeps, truncations and collections. After every
// restart: every acknowledged row younger than the retention is there
// (a crash during a sweep or a collection loses nothing retained), no row
// older than the retention stays once a sweep has run, a drain from the
// horizon reads on, and the truncated table holds every row acknowledged
// after its last acknowledged TRUNCATE and none acknowledged before that
// TRUNCATE was sent.
func TestCrashRetentionAndTruncate(t *testing.T) {
	dir := t.TempDir()
	const retention = 3 * time.Second
	args := daemonArgs(filepath.Join(dir, "data"), "--retention-sweep-interval", "20ms", "--retention-batch-size", "50",
		"--store-gc-interval", "50ms", "--store-gc-max-bytes-per-second", "0", "--store-value-log-max-entries", "8")
	hc := newHTTPClient(t, 8)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 15))
	var (
		mu     sync.Mutex
		writes = map[string][]retWrite{}
		truncs []truncation
		nextID int64
	)
	for cycle := range retentionCycles {
		p := startIngestd(t, filepath.Join(dir, fmt.Sprintf("cycle%d.log", cycle)), args...)
		base := p.URL
		if cycle == 0 {
			r := mustDo(t, hc, http.MethodPut, base+"/api/v1/tables/ret", []byte(`{"sync": true, "retention": "3s"}`))
			require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
			createSyncTable(t, hc, base, "trunc")
		}
		verifyRetention(t, hc, base, writes["ret"], retention)
		verifyTruncated(t, hc, base, writes["trunc"], truncs)

		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, table := range []string{"ret", "ret", "trunc"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					mu.Lock()
					ids := make([]int64, 20)
					for i := range ids {
						nextID++
						ids[i] = nextID
					}
					mu.Unlock()
					w := retWrite{ids: ids, ts: time.Now().UnixNano(), sent: time.Now()}
					var body []byte
					for _, id := range ids {
						body = fmt.Appendf(body, "%s,w=x id=%di %d\n", table, id, w.ts+id%1000)
					}
					r, err := do(ctx, hc, http.MethodPost, base+"/write", nil, body)
					if err == nil && r.Status == http.StatusNoContent {
						w.done = time.Now()
						mu.Lock()
						writes[table] = append(writes[table], w)
						mu.Unlock()
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				tr := truncation{sent: time.Now()}
				r, err := do(ctx, hc, http.MethodPost, base+"/api/v1/tables/trunc/truncate", nil, nil)
				if err == nil && r.Status == http.StatusOK {
					tr.done, tr.acked = time.Now(), true
				}
				mu.Lock()
				truncs = append(truncs, tr)
				mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
		time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond) // the kill lands at a random moment
		p.kill(t)
		cancel()
		wg.Wait()
		killed := time.Now()
		for i := range truncs {
			if !truncs[i].acked && truncs[i].done.IsZero() {
				truncs[i].done = killed // it may have run until the kill
			}
		}
		requireCleanLog(t, p.log(t))
	}
	p := startIngestd(t, filepath.Join(dir, "final.log"), args...)
	verifyRetention(t, hc, p.URL, writes["ret"], retention)
	verifyTruncated(t, hc, p.URL, writes["trunc"], truncs)
	require.Equal(t, 0, p.terminate(t, 30*time.Second))
	requireCleanLog(t, p.log(t))
}

// tableIDs returns the id column of a table's rows with their times.
func tableIDs(t testing.TB, hc *http.Client, base, table string) map[int64]int64 {
	t.Helper()
	out := map[int64]int64{}
	copyRows(t, hc, base, table, func(cols []string, rows [][]json.RawMessage) {
		iid, its := slices.Index(cols, "id"), slices.Index(cols, "time")
		for _, row := range rows {
			id, err := strconv.ParseInt(string(row[iid]), 10, 64)
			require.NoError(t, err)
			ts, err := strconv.ParseInt(string(row[its]), 10, 64)
			require.NoError(t, err)
			out[id] = ts
		}
	})
	return out
}

// verifyRetention checks the retention table right after a restart.
func verifyRetention(t testing.TB, hc *http.Client, base string, writes []retWrite, retention time.Duration) {
	t.Helper()
	// Rows that stay younger than the retention for the next 500 ms must
	// all be there now.
	stored := tableIDs(t, hc, base, "ret")
	keep := time.Now().Add(-retention + 500*time.Millisecond).UnixNano()
	for _, w := range writes {
		if w.ts < keep {
			continue
		}
		for _, id := range w.ids {
			_, ok := stored[id]
			require.True(t, ok, "id %d written at %s (acknowledged, within the retention) is lost", id, time.Unix(0, w.ts).UTC())
		}
	}
	// Once the sweeper has run, nothing older than the retention stays
	// (1 s of slack for the sweep interval and clocks).
	poll(t, 10*time.Second, func() bool {
		cutoff := time.Now().Add(-retention - time.Second).UnixNano()
		for _, ts := range tableIDs(t, hc, base, "ret") {
			if ts < cutoff {
				return false
			}
		}
		return true
	}, "aged rows removed after restart")
	// A drain from the horizon reads on (the sweeper may raise the
	// horizon in between: the refusal then names the new one), one below
	// is refused.
	api := apiClient(t, hc, base)
	st := getSync(t, hc, base, "ret")
	if st.Horizon > 1 {
		_, err := api.Drain(context.Background(), client.DrainRequest{Table: "ret", Epoch: st.Epoch, After: st.Horizon - 2, Limit: 100, TimeFormat: "ns"})
		require.ErrorIs(t, err, client.ErrHistoryExpired)
	}
	for range 100 {
		_, err := api.Drain(context.Background(), client.DrainRequest{Table: "ret", Epoch: st.Epoch, After: st.Horizon - 1, Limit: 100, TimeFormat: "ns"})
		if err == nil {
			return
		}
		var ref *client.Error
		require.ErrorAs(t, err, &ref)
		require.Equal(t, http.StatusConflict, ref.StatusCode, "%v", err)
		require.Equal(t, client.CodeHistoryExpired, ref.Code)
		require.Greater(t, ref.Horizon, st.Horizon, "refused at the horizon itself: %v", err)
		st.Horizon = ref.Horizon
	}
	t.Fatalf("no drain from the horizon succeeded in 100 tries")
}

// verifyTruncated checks the truncated table after a restart: a write
// sent after every TRUNCATE ended is stored; a write acknowledged before an
// acknowledged TRUNCATE was sent is gone.
func verifyTruncated(t testing.TB, hc *http.Client, base string, writes []retWrite, truncs []truncation) {
	t.Helper()
	var lastEnd time.Time
	for _, tr := range truncs {
		if tr.done.After(lastEnd) {
			lastEnd = tr.done
		}
	}
	stored := tableIDs(t, hc, base, "trunc")
	for _, w := range writes {
		if w.sent.After(lastEnd) {
			for _, id := range w.ids {
				_, ok := stored[id]
				require.True(t, ok, "id %d acknowledged after every TRUNCATE ended is lost", id)
			}
			continue
		}
		for _, tr := range truncs {
			if tr.acked && w.done.Before(tr.sent) {
				for _, id := range w.ids {
					_, ok := stored[id]
					require.False(t, ok, "id %d acknowledged before an acknowledged TRUNCATE is still stored", id)
				}
				break
			}
		}
	}
}
