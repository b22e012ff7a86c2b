package feed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store/memstore"
)

func sweepConfig() Config {
	cfg := DefaultConfig()
	cfg.SweepInterval = 5 * time.Millisecond
	cfg.SweepBatchFragments = 7
	return cfg
}

func horizonPoints(table string, from, n int, t0 int64) []Point {
	pts := make([]Point, n)
	for i := range pts {
		pts[i] = Point{Table: table, Series: "h=a", Tags: []Tag{{"h", "a"}}, Fields: []PointField{fld("v", iv(int64(from+i)))}, Time: t0 + int64(from+i)}
	}
	return pts
}

// requireHistoryExpired checks a refusal below the horizon: 409's error,
// with the table's state and the horizon.
func requireHistoryExpired(t *testing.T, err error, horizon uint64) {
	t.Helper()
	require.ErrorIs(t, err, ErrHistoryExpired)
	var ref *RefusalError
	require.True(t, errors.As(err, &ref))
	require.Equal(t, horizon, ref.Status.Horizon)
	require.Contains(t, err.Error(), "/rows")
}

// TestHistoryHorizonRefusesNeverSkips trims the feed to its last 10
// x_seq numbers: a consumer behind the horizon is refused with the horizon,
// never handed a page that skips, and a consumer at horizon-1 reads on.
func TestHistoryHorizonRefusesNeverSkips(t *testing.T) {
	cfg := sweepConfig()
	cfg.FeedHistoryFragments = 10
	h := openHarness(t, memstore.NewDisk(), cfg)
	defer func() { h.close() }() // the harness reopened below
	ctx := context.Background()
	_, _, err := h.s.CreateTable(ctx, "t", true)
	require.NoError(t, err)
	mustAppend(t, h.s, horizonPoints("t", 1, 50, 0)...)
	eventually(t, func() bool { st, _ := h.d.Status("t"); return st.Horizon == 41 }, "horizon at watermark-10+1")
	_, err = tryDrain(h.d, DrainRequest{Table: "t", After: 39, Limit: 100})
	requireHistoryExpired(t, err, 41)
	_, err = tryDrain(h.d, DrainRequest{Table: "t", After: 0, Limit: 100})
	requireHistoryExpired(t, err, 41)
	p := drainPage(t, h.d, DrainRequest{Table: "t", After: 40, Limit: 100})
	require.Equal(t, []uint64{41, 42, 43, 44, 45, 46, 47, 48, 49, 50}, p.seqs())

	// The horizon survives a restart.
	h.close()
	h = openHarness(t, h.disk, cfg)
	st, err := h.d.Status("t")
	require.NoError(t, err)
	require.Equal(t, uint64(41), st.Horizon)
	_, err = tryDrain(h.d, DrainRequest{Table: "t", After: 39, Limit: 100})
	requireHistoryExpired(t, err, 41)

	// TRUNCATE starts a new history: nothing of the new epoch is gone.
	st, err = h.s.Truncate(ctx, "t")
	require.NoError(t, err)
	require.Equal(t, uint64(1), st.Horizon)
	drainPage(t, h.d, DrainRequest{Table: "t", After: 0, Limit: 10, Epoch: st.Epoch, HasEpoch: true})
}

// TestConsumerHoldsHistory: a named consumer holds the horizon at its
// position while it is seen within the hold's age; deleting it, or its
// silence past the age, releases the hold.
func TestConsumerHoldsHistory(t *testing.T) {
	cfg := sweepConfig()
	cfg.FeedHistoryFragments = 10
	cfg.ConsumerHoldsHistory = true
	cfg.ConsumerHoldMaxAge = time.Hour
	clk := newFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	h := openClockHarness(t, memstore.NewDisk(), cfg, nil, clk)
	defer h.close()
	ctx := context.Background()
	for _, name := range []string{"t", "u"} {
		_, _, err := h.s.CreateTable(ctx, name, true)
		require.NoError(t, err)
	}
	mustAppend(t, h.s, horizonPoints("t", 1, 5, 0)...)
	drainPage(t, h.d, DrainRequest{Table: "t", After: 5, Limit: 10, Consumer: "slow"})
	drainPage(t, h.d, DrainRequest{Table: "t", After: 5, Limit: 10, Consumer: "gone"})
	mustAppend(t, h.s, horizonPoints("t", 6, 45, 0)...)
	// A table without consumers, written with t and again after: once its
	// second trim is done, a whole pass has run over t's data.
	mustAppend(t, h.s, horizonPoints("u", 1, 50, 0)...)
	eventually(t, func() bool { st, _ := h.d.Status("u"); return st.Horizon == 41 }, "u trimmed")
	mustAppend(t, h.s, horizonPoints("u", 51, 10, 0)...)
	eventually(t, func() bool { st, _ := h.d.Status("u"); return st.Horizon == 51 }, "u trimmed again")
	st, err := h.d.Status("t")
	require.NoError(t, err)
	require.Equal(t, uint64(6), st.Horizon, "held at the consumers' position + 1")
	cs, err := h.d.Consumers("t")
	require.NoError(t, err)
	require.Len(t, cs, 2)
	for _, c := range cs {
		require.True(t, c.HoldsHistory, c.Name)
		require.Equal(t, c.LastSeen.Add(time.Hour), c.HoldUntil)
	}
	p := drainPage(t, h.d, DrainRequest{Table: "t", After: 5, Limit: 100, Consumer: "slow"})
	require.Len(t, p.seqs(), 45, "the held history is all there")

	// Deleting "gone" leaves "slow" (now at 5, seen now) holding.
	require.NoError(t, h.d.DeleteConsumer("t", "gone", Principal{}))
	drainPage(t, h.d, DrainRequest{Table: "t", After: 30, Limit: 100, Consumer: "slow"})
	eventually(t, func() bool { st, _ := h.d.Status("t"); return st.Horizon == 31 }, "the hold follows the consumer")

	// Past the hold's age the consumer holds nothing.
	clk.add(time.Hour + time.Second)
	eventually(t, func() bool { st, _ := h.d.Status("t"); return st.Horizon == 41 }, "an expired hold is released")
	cs, err = h.d.Consumers("t")
	require.NoError(t, err)
	require.False(t, cs[0].HoldsHistory)
	require.True(t, cs[0].HoldUntil.IsZero())
}

// TestRetentionRemovesExactlyAged sets a retention on a table that
// writers fill with in-order, late (into old time) and repeated points
// while drains run, moves the clock, and checks that the sweep removes
// exactly the aged rows, refuses writes beyond the retention, raises the
// horizon above every removed x_seq, and that no drain ever skipped.
func TestRetentionRemovesExactlyAged(t *testing.T) {
	cfg := sweepConfig()
	cfg.SweepBatchFragments = 50
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clk := newFakeClock(t0)
	h := openClockHarness(t, memstore.NewDisk(), cfg, nil, clk)
	defer h.close()
	ctx := context.Background()
	ret, yes := time.Hour, true
	_, info, err := h.s.PutTable(ctx, "t", TableOptions{Sync: &yes, Retention: &ret})
	require.NoError(t, err)
	require.Equal(t, time.Hour, info.Retention)
	require.True(t, info.OwnRetention)

	// A write older than the retention is refused, the rest stored.
	res := appendBatch(t, h.s,
		Point{Table: "t", Series: "h=a", Tags: []Tag{{"h", "a"}}, Fields: []PointField{fld("v", iv(1))}, Time: t0.Add(-2 * time.Hour).UnixNano()},
		Point{Table: "t", Series: "h=a", Tags: []Tag{{"h", "a"}}, Fields: []PointField{fld("v", iv(2))}, Time: t0.UnixNano()})
	require.Equal(t, 1, res.Accepted)
	require.Len(t, res.Rejected, 1)
	require.ErrorIs(t, res.Rejected[0], ErrBeyondRetention)
	require.Contains(t, res.Rejected[0].Error(), "points beyond retention policy")

	// Writers: series s0..s3, times spread over an hour from lo, some
	// repeated (overwrites) and written late; a drainer follows the feed.
	model := map[string]map[string]int64{} // series|time -> field -> value
	var mu sync.Mutex
	write := func(lo time.Time, phase int) {
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for b := range 10 {
					var pts []Point
					for i := range 25 {
						ts := lo.Add(time.Duration((b*25+i)*7%3540) * time.Second).UnixNano()
						series := fmt.Sprintf("s=%d", (w+i)%4)
						f := fmt.Sprintf("f%d", i%3)
						pts = append(pts, Point{Table: "t", Series: series, Tags: []Tag{{"s", series[2:]}}, Fields: []PointField{fld(f, iv(int64(phase*100000+w*1000+b*25+i)))}, Time: ts})
					}
					res := appendBatch(t, h.s, pts...)
					require.Empty(t, res.Rejected)
					mu.Lock()
					for _, p := range pts {
						k := fmt.Sprint(p.Series, "|", p.Time)
						if model[k] == nil {
							model[k] = map[string]int64{}
						}
						model[k][p.Fields[0].Key] = p.Fields[0].Value.Int()
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	stopDrain := make(chan struct{})
	drainErr := make(chan error, 1)
	go func() {
		after, expired := uint64(0), 0
		for {
			select {
			case <-stopDrain:
				drainErr <- nil
				return
			default:
			}
			p, err := tryDrain(h.d, DrainRequest{Table: "t", After: after, Limit: 37})
			var ref *RefusalError
			switch {
			case errors.As(err, &ref) && errors.Is(err, ErrHistoryExpired):
				if after+1 >= ref.Status.Horizon {
					drainErr <- fmt.Errorf("refused at after=%d with horizon %d", after, ref.Status.Horizon)
					return
				}
				after = ref.Status.Horizon - 1 // a resync would copy; the test only follows
				expired++
				continue
			case err != nil:
				drainErr <- err
				return
			}
			if err := pageProblem(p, after, 37); err != nil {
				drainErr <- err
				return
			}
			after = p.Next
		}
	}()
	write(t0.Add(-59*time.Minute), 0)
	// Age the clock: the second writers run while the sweep removes what
	// the first wrote before t0-30m; they write late, into time the first
	// wrote, and newer.
	clk.add(30 * time.Minute)
	write(t0.Add(-29*time.Minute), 1)
	clk.add(30 * time.Minute)
	cutoff := clk.now().Add(-time.Hour).UnixNano()
	eventually(t, func() bool {
		rows := copyRows(t, h.d, "t")
		for _, r := range rows {
			if r.Vals["time"].Int() < cutoff {
				return false
			}
		}
		return true
	}, "aged rows removed")
	close(stopDrain)
	require.NoError(t, <-drainErr)

	want := map[string]map[string]int64{}
	for k, v := range model {
		var ts int64
		_, _ = fmt.Sscanf(k[len("s=0|"):], "%d", &ts)
		if ts >= cutoff {
			want[k] = v
		}
	}
	got := map[string]map[string]int64{}
	for _, r := range copyRows(t, h.d, "t") {
		k := fmt.Sprint("s=", r.Vals["s"].Str, "|", r.Vals["time"].Int())
		if r.Vals["time"].Int() == t0.UnixNano() {
			continue // the first write, v=2
		}
		m := map[string]int64{}
		for _, f := range []string{"f0", "f1", "f2"} {
			if v, ok := r.Vals[f]; ok {
				m[f] = v.Int()
			}
		}
		got[k] = m
	}
	require.NotEmpty(t, want)
	require.Less(t, len(want), len(model), "some rows aged out")
	require.Equal(t, want, got, "exactly the aged rows are gone, the rest coalesce as written")

	// The horizon lies above every removed x_seq: a drain from it sees
	// only retained rows, all of them.
	st, err := h.d.Status("t")
	require.NoError(t, err)
	require.Greater(t, st.Horizon, uint64(1))
	for _, r := range drainAll(t, h.d, "t", st.Horizon-1, 100) {
		require.GreaterOrEqual(t, r.Vals["time"].Int(), cutoff)
	}
	_, err = tryDrain(h.d, DrainRequest{Table: "t", After: st.Horizon - 2, Limit: 10})
	requireHistoryExpired(t, err, st.Horizon)
}

// copyRows copies a table by time range (every page).
func copyRows(t *testing.T, s *Drainer, table string) []row {
	t.Helper()
	var out []row
	cursor := ""
	for {
		pg, err := s.Rows(context.Background(), RowsRequest{Table: table, Limit: 100, Cursor: cursor}, func(c []Column, vals []Value) error {
			r := row{Vals: map[string]Value{}}
			for i, c := range c {
				if vals[i].Kind != 0 {
					r.Vals[c.Name] = vals[i]
				}
			}
			out = append(out, r)
			return nil
		})
		require.NoError(t, err)
		if pg.Cursor == "" {
			return out
		}
		cursor = pg.Cursor
	}
}

func TestParseRetention(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"0": 0, "INF": 0, "inf": 0, "30d": 30 * 24 * time.Hour, "2w": 14 * 24 * time.Hour, "1d12h": 36 * time.Hour,
		"90m": 90 * time.Minute, "1s": time.Second, "720h": 720 * time.Hour,
	} {
		got, err := ParseRetention(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
		again, err := ParseRetention(FormatRetention(got))
		require.NoError(t, err)
		require.Equal(t, got, again, "FormatRetention(%s)", in)
	}
	for in, want := range map[string]string{"30d": "30d", "2w": "2w", "14d": "2w", "1d12h": "1d12h", "720h": "30d", "90m": "1h30m", "15d1s": "15d1s"} {
		got, err := ParseRetention(in)
		require.NoError(t, err, in)
		require.Equal(t, want, FormatRetention(got), "as written back: %s", in)
	}
	for _, in := range []string{"", "-1d", "1x", "d", "1.5h", "500ms", "999999999999w", fmt.Sprint(uint64(math.MaxUint64)) + "s"} {
		_, err := ParseRetention(in)
		require.ErrorIs(t, err, ErrInvalidRetention, in)
	}
}

// TestRetentionMetricsBounded: the retention figures label the
// --metrics-max-tables tables with the most rows removed; the others are
// summed (removed rows) or their oldest taken (oldest kept row) in the
// series labelled "".
func TestRetentionMetricsBounded(t *testing.T) {
	cfg := sweepConfig()
	cfg.MetricsMaxTables = 1
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clk := newFakeClock(t0)
	reg := prometheus.NewRegistry()
	h := openClockHarness(t, memstore.NewDisk(), cfg, reg, clk)
	defer h.close()
	ret, yes := time.Hour, true
	for i, table := range []string{"a", "b", "c"} {
		_, _, err := h.s.PutTable(context.Background(), table, TableOptions{Sync: &yes, Retention: &ret})
		require.NoError(t, err)
		// a gets 3 aged points, b 2, c 1; each a point that stays.
		pts := horizonPoints(table, 0, 3-i, t0.UnixNano())
		pts = append(pts, horizonPoints(table, 10, 1, t0.Add(90*time.Minute).UnixNano())...)
		mustAppend(t, h.s, pts...)
	}
	clk.add(2 * time.Hour)
	series := func() map[string]float64 {
		out := map[string]float64{}
		fams, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				label := ""
				for _, l := range m.GetLabel() {
					label += l.GetName() + "=" + l.GetValue()
				}
				out[f.GetName()+"{"+label+"}"] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
		return out
	}
	eventually(t, func() bool {
		s := series()
		return s["ingestd_retention_removed_rows_total{table=a}"] == 3 && s["ingestd_retention_removed_rows_total{table=}"] == 3
	}, "a labelled, b and c summed")
	s := series()
	require.NotContains(t, s, "ingestd_retention_removed_rows_total{table=b}")
	require.InDelta(t, float64(t0.Add(90*time.Minute).UnixNano()+10)/1e9, s["ingestd_retention_oldest_retained_time_seconds{table=}"], 1e-3)
	require.InDelta(t, 2.0, s["ingestd_feed_metrics_unlabelled{kind=retention}"], 0)
}
