package crashtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/httpapi/client"
	"github.com/ingestd/ingestd/httpapi/wire"
)

// TestCrashCycles' aging tables (docs/contract.md#retention): crash_r keeps its rows for
// agingRetention, and its lines carry the current time, so that the
// sweeper removes rows (and raises the feed's horizon) all the time, in
// batches of 50; crash_t is truncated every truncateEvery. The daemon's
// value-log collector runs every 50 ms over files of at most 8 values, so
// that kills land inside sweeps, truncations and collections.
const (
	agingRetention = 3 * time.Second
	truncateEvery  = 100 * time.Millisecond
	agingBatch     = 20 // lines per write
	// agingLagCycles: the consumer leaves crash_r alone for this many
	// cycles in turn (each a load of mostly 150 ms to 3 s, a restart and
	// the checks: well beyond agingRetention in all), so that the sweeper
	// passes its cursor and the next drain is refused history_expired.
	agingLagCycles = 6
)

// agingArgs are the daemon flags the aging tables need.
var agingArgs = []string{"--retention-sweep-interval", "20ms", "--retention-batch-size", "50",
	"--store-gc-interval", "50ms", "--store-gc-max-bytes-per-second", "0", "--store-value-log-max-entries", "8"}

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

// agingTable is one aging table's model (what was acknowledged) and a
// consumer's replica of it; the agingLoad's mu guards it.
type agingTable struct {
	name   string
	writes []retWrite
	// The consumer: its cursor (epoch, next), its replica (id → time),
	// the id every x_seq it drained named, the highest epoch it met and
	// the highest seq it met in that epoch, and how often it resynced by
	// the copy (history_expired, stale_epoch).
	epoch, next      uint64
	rows             map[int64]int64
	seqs             map[uint64]int64
	maxEpoch, maxSeq uint64
	resyncs          int
}

// agingLoad drives and checks the aging tables across the kill cycles.
type agingLoad struct {
	mu     sync.Mutex
	tables [2]*agingTable // crash_r, crash_t
	truncs []truncation
	nextID int64
	// lagging: the consumer does not drain crash_r this cycle (set
	// between cycles only).
	lagging bool
}

func newAgingLoad() *agingLoad {
	a := &agingLoad{}
	for i, name := range []string{"crash_r", "crash_t"} {
		a.tables[i] = &agingTable{name: name, rows: map[int64]int64{}, seqs: map[uint64]int64{}}
	}
	return a
}

// create creates the tables (crash_r with its retention).
func (a *agingLoad) create(t testing.TB, hc *http.Client, base string) {
	r := mustDo(t, hc, http.MethodPut, base+"/api/v1/tables/crash_r", []byte(`{"sync": true, "retention": "3s"}`))
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	createSyncTable(t, hc, base, "crash_t")
	for _, tb := range a.tables {
		tb.epoch, tb.maxEpoch = 1, 1
	}
}

// start runs, until ctx ends, two writers of crash_r and one of crash_t,
// the truncator of crash_t and the consumer of both.
func (a *agingLoad) start(ctx context.Context, wg *sync.WaitGroup, errs chan<- error, hc *http.Client, base string, seed uint64) {
	for _, tb := range []*agingTable{a.tables[0], a.tables[0], a.tables[1]} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.write(ctx, hc, base, tb)
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		a.truncate(ctx, hc, base)
	}()
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 0xa9))
		for ctx.Err() == nil {
			for _, tb := range a.tables[a.skip():] {
				_, err := a.pull(ctx, hc, base, tb, drainLimits[rng.IntN(len(drainLimits))])
				switch {
				case ctx.Err() != nil:
					return
				case isConnErr(err):
					time.Sleep(5 * time.Millisecond) // pacing while the daemon is down
				case err != nil:
					errs <- fmt.Errorf("aging consumer: %w", err)
					return
				}
			}
		}
	}()
}

// write writes batches of agingBatch lines stamped with the current time
// to tb, recording those answered 204.
func (a *agingLoad) write(ctx context.Context, hc *http.Client, base string, tb *agingTable) {
	for ctx.Err() == nil {
		a.mu.Lock()
		ids := make([]int64, agingBatch)
		for i := range ids {
			a.nextID++
			ids[i] = a.nextID
		}
		a.mu.Unlock()
		w := retWrite{ids: ids, ts: time.Now().UnixNano(), sent: time.Now()}
		var body []byte
		for _, id := range ids {
			body = fmt.Appendf(body, "%s,w=x id=%di %d\n", tb.name, id, w.ts+id%1000)
		}
		r, err := do(ctx, hc, http.MethodPost, base+"/write", nil, body)
		if err == nil && r.Status == http.StatusNoContent {
			w.done = time.Now()
			a.mu.Lock()
			tb.writes = append(tb.writes, w)
			a.mu.Unlock()
		}
	}
}

// truncate truncates crash_t every truncateEvery.
func (a *agingLoad) truncate(ctx context.Context, hc *http.Client, base string) {
	for ctx.Err() == nil {
		tr := truncation{sent: time.Now()}
		r, err := do(ctx, hc, http.MethodPost, base+"/api/v1/tables/crash_t/truncate", nil, nil)
		if err == nil && r.Status == http.StatusOK {
			tr.done, tr.acked = time.Now(), true
		}
		a.mu.Lock()
		a.truncs = append(a.truncs, tr)
		a.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(truncateEvery):
		}
	}
}

// skip is how many of a.tables the consumer leaves alone: crash_r while
// lagging.
func (a *agingLoad) skip() int {
	if a.lagging {
		return 1
	}
	return 0
}

// summary logs what the aging tables went through and requires that the
// mix did what it is for: retention passed the lagging consumer (a
// history_expired resync) and TRUNCATE ended epochs under it (stale_epoch
// resyncs), once enough cycles ran.
func (a *agingLoad) summary(t *testing.T, kills int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	acked := 0
	for _, tr := range a.truncs {
		if tr.acked {
			acked++
		}
	}
	r, tt := a.tables[0], a.tables[1]
	t.Logf("aging: crash_r %d writes acknowledged, seq %d, %d history_expired resyncs; crash_t %d writes acknowledged, %d TRUNCATEs (%d acknowledged), epoch %d, %d stale_epoch resyncs",
		len(r.writes), r.maxSeq, r.resyncs, len(tt.writes), len(a.truncs), acked, tt.maxEpoch, tt.resyncs)
	if kills >= 2*agingLagCycles {
		require.Positive(t, r.resyncs, "retention never passed the lagging consumer's cursor")
		require.Positive(t, tt.resyncs, "no TRUNCATE ended an epoch under the consumer")
	}
}

// killed records the moment of a kill: an unanswered TRUNCATE may have
// run until then.
func (a *agingLoad) killed() {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	for i := range a.truncs {
		if !a.truncs[i].acked && a.truncs[i].done.IsZero() {
			a.truncs[i].done = now
		}
	}
}

// pull drains one page of tb into its replica. A cursor the feed refuses
// as too old (history_expired: retention passed it) or of a past epoch
// (stale_epoch: a TRUNCATE) makes the consumer resync as the refusal says:
// the copy by time range replaces the replica, then it drains on from the
// watermark the copy reported. It reports whether the page was the last.
func (a *agingLoad) pull(ctx context.Context, hc *http.Client, base string, tb *agingTable, limit int) (bool, error) {
	a.mu.Lock()
	epoch, after := tb.epoch, tb.next
	a.mu.Unlock()
	api, err := client.New(base, client.WithHTTPClient(hc))
	if err != nil {
		return false, err
	}
	pg, err := api.Drain(ctx, client.DrainRequest{Table: tb.name, Epoch: epoch, After: after, Limit: limit, TimeFormat: "ns", Consumer: "crashtest"})
	var refusal *client.Error
	if errors.As(err, &refusal) && refusal.StatusCode == http.StatusConflict {
		if err := a.sawSync(tb, refusal.Epoch, refusal.Seq); err != nil {
			return false, err
		}
		want := map[string]string{"crash_r": wire.CodeHistoryExpired, "crash_t": wire.CodeStaleEpoch}[tb.name]
		if refusal.Code != want {
			return false, fmt.Errorf("drain %s epoch %d after %d: %w, want 200 or %s", tb.name, epoch, after, err, want)
		}
		return false, a.resync(ctx, api, tb)
	}
	if err != nil {
		return false, fmt.Errorf("drain %s epoch %d after %d: %w", tb.name, epoch, after, err)
	}
	rows, seqs, err := idRows(pg.Columns, pg.Rows)
	if err != nil {
		return false, fmt.Errorf("drain %s: %w", tb.name, err)
	}
	if err := checkPage(pg, after, limit, seqs); err != nil {
		return false, fmt.Errorf("drain %s after %d limit %d: %w", tb.name, after, limit, err)
	}
	if err := a.sawSync(tb, pg.Epoch, pg.Seq); err != nil {
		return false, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if pg.Epoch != tb.epoch {
		return false, fmt.Errorf("drain %s: epoch %d answered for epoch %d", tb.name, pg.Epoch, tb.epoch)
	}
	for i, row := range rows {
		if prev, ok := tb.seqs[seqs[i]]; ok && prev != row[0] {
			return false, fmt.Errorf("%s: x_seq %d named id %d and now names id %d", tb.name, seqs[i], prev, row[0])
		}
		tb.seqs[seqs[i]] = row[0]
		tb.rows[row[0]] = row[1]
	}
	tb.next = pg.Next
	return !pg.More, nil
}

// sawSync checks an epoch and seq the daemon reported for tb against
// those it reported before: the epoch never goes back (crash_r's stays 1),
// nor does the seq, across TRUNCATE too (feed/doc.go). seq 0: not
// reported.
func (a *agingLoad) sawSync(tb *agingTable, epoch, seq uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case epoch < tb.maxEpoch:
		return fmt.Errorf("%s: epoch %d after epoch %d", tb.name, epoch, tb.maxEpoch)
	case tb.name == "crash_r" && epoch != 1:
		return fmt.Errorf("%s: epoch %d: retention must not change the epoch", tb.name, epoch)
	case seq != 0 && seq < tb.maxSeq:
		return fmt.Errorf("%s: seq %d (epoch %d) after seq %d (epoch %d)", tb.name, seq, epoch, tb.maxSeq, tb.maxEpoch)
	}
	tb.maxEpoch, tb.maxSeq = epoch, max(tb.maxSeq, seq)
	return nil
}

// resync copies tb by time range into a new replica and sets the cursor
// to the epoch and watermark of the copy's first page.
func (a *agingLoad) resync(ctx context.Context, api *client.Client, tb *agingTable) error {
	rows := map[int64]int64{}
	var epoch, watermark uint64
	req := client.RowsRequest{Table: tb.name, Limit: 10000, TimeFormat: "ns"}
	for first := true; ; first = false {
		pg, err := api.Rows(ctx, req)
		if err != nil {
			return fmt.Errorf("copy %s: %w", tb.name, err)
		}
		if first {
			epoch, watermark = pg.Epoch, pg.Watermark
		}
		got, _, err := idRows(pg.Columns, pg.Rows)
		if err != nil {
			return fmt.Errorf("copy %s: %w", tb.name, err)
		}
		for _, row := range got {
			rows[row[0]] = row[1]
		}
		if pg.Cursor == "" {
			break
		}
		req.Cursor = pg.Cursor
	}
	if err := a.sawSync(tb, epoch, 0); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	tb.rows, tb.epoch, tb.next = rows, epoch, watermark
	tb.resyncs++
	return nil
}

// idRows reads the (id, time) of each row and its x_seq (0 without the
// column, as in the copy).
func idRows(cols []string, rows [][]json.RawMessage) ([][2]int64, []uint64, error) {
	iid, its, iseq := slices.Index(cols, "id"), slices.Index(cols, "time"), slices.Index(cols, "x_seq")
	if len(rows) == 0 {
		return nil, nil, nil // an empty table has no id column
	}
	if iid < 0 || its < 0 {
		return nil, nil, fmt.Errorf("columns %v: no id or time", cols)
	}
	out, seqs := make([][2]int64, len(rows)), make([]uint64, len(rows))
	for i, row := range rows {
		id, err1 := strconv.ParseInt(string(row[iid]), 10, 64)
		ts, err2 := strconv.ParseInt(string(row[its]), 10, 64)
		if err1 != nil || err2 != nil {
			return nil, nil, fmt.Errorf("row %d: id %s, time %s", i, row[iid], row[its])
		}
		out[i] = [2]int64{id, ts}
		if iseq >= 0 {
			s, err := strconv.ParseUint(string(row[iseq]), 10, 64)
			if err != nil {
				return nil, nil, fmt.Errorf("row %d: x_seq %s", i, row[iseq])
			}
			seqs[i] = s
		}
	}
	return out, seqs, nil
}

// verify checks the aging tables after a restart (no load running): the
// model (every acknowledged row still retained is there, nothing aged
// stays, the truncations held), SHOW SYNC against every epoch and seq seen
// before, and the consumer, caught up from its stored cursor, against the
// source: crash_t's replica equals its rows; crash_r's replica holds
// every row the source holds, and the source every replica row that is
// still within the retention (the feed does not carry retention's
// removals).
func (a *agingLoad) verify(t *testing.T, hc *http.Client, base string, cycle int) {
	t.Helper()
	a.mu.Lock()
	rw, tw, truncs := slices.Clone(a.tables[0].writes), slices.Clone(a.tables[1].writes), slices.Clone(a.truncs)
	a.mu.Unlock()
	verifyRetention(t, hc, base, rw, agingRetention)
	verifyTruncated(t, hc, base, tw, truncs)
	for _, tb := range a.tables[a.skip():] {
		st := getSync(t, hc, base, tb.name)
		require.True(t, st.Enabled, "cycle %d: %s: sync off after the restart", cycle, tb.name)
		require.Equal(t, st.Seq, st.Watermark, "cycle %d: %s: watermark below seq with no write in flight", cycle, tb.name)
		require.NoError(t, a.sawSync(tb, st.Epoch, st.Seq), "cycle %d: SHOW SYNC after the restart", cycle)
		for done := false; !done; {
			var err error
			done, err = a.pull(context.Background(), hc, base, tb, 5000)
			require.NoError(t, err, "cycle %d: catching up", cycle)
		}
		began := time.Now()
		src := map[int64]int64{}
		copyRows(t, hc, base, tb.name, func(cols []string, rows [][]json.RawMessage) {
			got, _, err := idRows(cols, rows)
			require.NoError(t, err)
			for _, row := range got {
				src[row[0]] = row[1]
			}
		})
		a.mu.Lock()
		replica := maps.Clone(tb.rows)
		a.mu.Unlock()
		if tb.name == "crash_t" {
			require.Equal(t, src, replica, "cycle %d: %s: the consumer's replica differs from the source's rows", cycle, tb.name)
			continue
		}
		// Replica rows younger than keep were retained through the copy.
		keep := began.Add(-agingRetention + time.Second).UnixNano()
		for id, ts := range src {
			got, ok := replica[id]
			require.True(t, ok && got == ts, "cycle %d: %s: id %d (time %d) is stored but the consumer has %d (%v)", cycle, tb.name, id, ts, got, ok)
		}
		for id, ts := range replica {
			_, ok := src[id]
			require.True(t, ok || ts < keep, "cycle %d: %s: the consumer has id %d (time %d), within the retention, which the source lost", cycle, tb.name, id, ts)
		}
	}
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

// verifyRetention checks crash_r right after a restart.
func verifyRetention(t testing.TB, hc *http.Client, base string, writes []retWrite, retention time.Duration) {
	t.Helper()
	// Rows that stay younger than the retention for the next 500 ms must
	// all be there now.
	stored := tableIDs(t, hc, base, "crash_r")
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
		for _, ts := range tableIDs(t, hc, base, "crash_r") {
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
	st := getSync(t, hc, base, "crash_r")
	if st.Horizon > 1 {
		_, err := api.Drain(context.Background(), client.DrainRequest{Table: "crash_r", Epoch: st.Epoch, After: st.Horizon - 2, Limit: 100, TimeFormat: "ns"})
		require.ErrorIs(t, err, client.ErrHistoryExpired)
	}
	for range 100 {
		_, err := api.Drain(context.Background(), client.DrainRequest{Table: "crash_r", Epoch: st.Epoch, After: st.Horizon - 1, Limit: 100, TimeFormat: "ns"})
		if err == nil {
			return
		}
		var ref *client.Error
		require.ErrorAs(t, err, &ref)
		require.Equal(t, http.StatusConflict, ref.StatusCode, "%v", err)
		require.Equal(t, wire.CodeHistoryExpired, ref.Code)
		require.Greater(t, ref.Horizon, st.Horizon, "refused at the horizon itself: %v", err)
		st.Horizon = ref.Horizon
	}
	t.Fatalf("no drain from the horizon succeeded in 100 tries")
}

// verifyTruncated checks crash_t after a restart: a write
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
	stored := tableIDs(t, hc, base, "crash_t")
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
