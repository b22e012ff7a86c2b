package feed

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store/memstore"
)

// TestTableStats counts what a table holds through the real store: every
// fragment, the points written more than once, the series, and bytes that
// grow with the data; TRUNCATE empties the counts but not the points
// committed since start, which the status page's rates read.
func TestTableStats(t *testing.T) {
	h := openHarness(t, memstore.NewDisk(), DefaultConfig())
	defer h.close()
	ctx := context.Background()
	_, _, err := h.s.CreateTable(ctx, "cpu", true)
	require.NoError(t, err)

	// 3 series × 2 times, then (a, 1) overwritten once: 7 fragments, 6 rows.
	var pts []Point
	for _, host := range []string{"a", "b", "c"} {
		for ts := int64(1); ts <= 2; ts++ {
			pts = append(pts, pt("cpu", ts, tg("host", host), fld("v", fv(float64(ts)))))
		}
	}
	mustAppend(t, h.s, pts...)
	mustAppend(t, h.s, pt("cpu", 1, tg("host", "a"), fld("v", fv(9))))
	// An unsynced table's fragments count too.
	mustAppend(t, h.s, pt("room", 5, tg("name", "lab"), fld("temp", fv(21))))

	st, err := h.d.TableStats("cpu")
	require.NoError(t, err)
	require.Equal(t, uint64(7), st.Fragments)
	require.Equal(t, uint64(6), st.RowsEstimate)
	require.Equal(t, uint64(3), st.Series)
	require.Positive(t, st.Bytes)
	require.WithinDuration(t, time.Now(), st.ComputedAt, time.Minute)

	room, err := h.d.TableStats("room")
	require.NoError(t, err)
	require.Equal(t, TableStats{Fragments: 1, RowsEstimate: 1, Series: 1, Bytes: room.Bytes, ComputedAt: room.ComputedAt}, room)
	require.Less(t, room.Bytes, st.Bytes, "bytes grow with the data")

	info, err := h.d.Table("cpu")
	require.NoError(t, err)
	require.Equal(t, uint64(7), info.Points)

	_, err = h.s.Truncate(ctx, "cpu")
	require.NoError(t, err)
	st, err = h.d.TableStats("cpu") // a new instance: not the cached count
	require.NoError(t, err)
	require.Equal(t, TableStats{ComputedAt: st.ComputedAt}, st)
	info, err = h.d.Table("cpu")
	require.NoError(t, err)
	require.Equal(t, uint64(7), info.Points, "TRUNCATE keeps counting")

	_, err = h.d.TableStats("nosuch")
	require.ErrorIs(t, err, ErrTableNotFound)
}

// TestConsumerLags lists each consumer with the lag the metrics report.
func TestConsumerLags(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clk := newFakeClock(t0)
	h := openClockHarness(t, memstore.NewDisk(), DefaultConfig(), nil, clk)
	defer h.close()
	_, _, err := h.s.CreateTable(context.Background(), "t", true)
	require.NoError(t, err)
	mustAppend(t, h.s, seqPoints("t", 0, 100)...)
	for name, after := range map[string]uint64{"behind": 40, "live": 100} {
		_, err := tryDrain(h.d, DrainRequest{Table: "t", After: after, Limit: 1, Consumer: name})
		require.NoError(t, err)
	}
	clk.add(90 * time.Second)
	lags, err := h.d.ConsumerLags("t")
	require.NoError(t, err)
	require.Len(t, lags, 2)
	require.Equal(t, "behind", lags[0].Name)
	require.Equal(t, uint64(40), lags[0].Position)
	require.Equal(t, uint64(60), lags[0].Fragments)
	require.InDelta(t, 90, lags[0].Seconds, 0.001)
	require.Equal(t, "live", lags[1].Name)
	require.Equal(t, uint64(0), lags[1].Fragments)
	require.Zero(t, lags[1].Seconds)
	_, err = h.d.ConsumerLags("nosuch")
	require.ErrorIs(t, err, ErrTableNotFound)
}

// TestLaggiestConsumers: the n furthest behind, over every table, with
// their lag in seconds; the others counted and summed.
func TestLaggiestConsumers(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clk := newFakeClock(t0)
	h := openClockHarness(t, memstore.NewDisk(), DefaultConfig(), nil, clk)
	defer h.close()
	for _, table := range []string{"t", "u"} {
		_, _, err := h.s.CreateTable(context.Background(), table, true)
		require.NoError(t, err)
		mustAppend(t, h.s, seqPoints(table, 0, 100)...)
	}
	for _, c := range []struct {
		table, name string
		after       uint64
	}{{"t", "a", 90}, {"t", "b", 10}, {"u", "c", 50}, {"u", "d", 100}, {"u", "e", 99}} {
		_, err := tryDrain(h.d, DrainRequest{Table: c.table, After: c.after, Limit: 1, Consumer: c.name})
		require.NoError(t, err)
	}
	clk.add(time.Minute)
	top, others, othersFrags := h.d.LaggiestConsumers(2, nil)
	require.Len(t, top, 2)
	require.Equal(t, []string{"t/b", "u/c"}, []string{top[0].Table + "/" + top[0].Name, top[1].Table + "/" + top[1].Name})
	require.Equal(t, []uint64{90, 50}, []uint64{top[0].Fragments, top[1].Fragments})
	require.InDelta(t, 60, top[0].Seconds, 0.001)
	require.Equal(t, 3, others)
	require.Equal(t, uint64(10+0+1), othersFrags)

	top, others, _ = h.d.LaggiestConsumers(10, func(table string) bool { return table == "u" })
	require.Len(t, top, 3)
	require.Zero(t, others)
	require.Equal(t, "c", top[0].Name)
}
