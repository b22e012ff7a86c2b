package feed

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/memstore"
)

// --- Helpers for the copy by time range -----------------------------------------

// rowsPage is a copy page with its rows copied out.
type rowsPage struct {
	RowsPage
	vals [][]Value
}

// rows returns the page's rows by column name (absent values left out).
func (p rowsPage) rows() []map[string]Value {
	out := make([]map[string]Value, 0, len(p.vals))
	for _, vs := range p.vals {
		m := map[string]Value{}
		for i, c := range p.Columns {
			if vs[i].Kind != 0 {
				m[c.Name] = vs[i]
			}
		}
		out = append(out, m)
	}
	return out
}

// tryRows reads one copy page and copies its rows.
func tryRows(s *Drainer, req RowsRequest) (rowsPage, error) {
	var p rowsPage
	pg, err := s.Rows(context.Background(), req, func(cols []Column, vals []Value) error {
		if len(cols) != len(vals) {
			return fmt.Errorf("%d columns but %d values", len(cols), len(vals))
		}
		p.vals = append(p.vals, slices.Clone(vals))
		return nil
	})
	p.RowsPage = pg
	return p, err
}

// copyAll follows a copy from req (whose Cursor is ignored) until the cursor
// is "", checking each page against the first: the same table, epoch and
// watermark, at most req.Limit rows, and columns without x_ ones. between,
// when set, runs before every page after the first.
func copyAll(t testing.TB, s *Drainer, req RowsRequest, between func()) (first RowsPage, rows []map[string]Value) {
	t.Helper()
	req.Cursor = ""
	for page := 0; ; page++ {
		require.Less(t, page, 100_000, "the copy does not end")
		if page > 0 && between != nil {
			between()
		}
		p, err := tryRows(s, req)
		require.NoError(t, err, "page %d", page)
		require.LessOrEqual(t, p.Rows, req.Limit, "page %d", page)
		require.Len(t, p.vals, p.Rows, "page %d", page)
		require.Equal(t, req.Table, p.Table)
		for _, c := range p.Columns {
			require.NotEqual(t, "x_", c.Name[:min(2, len(c.Name))], "page %d lists %s", page, c.Name)
			require.NotEqual(t, KindSeq, c.Kind, "page %d", page)
		}
		if page == 0 {
			first = p.RowsPage
		} else {
			require.Equal(t, first.Epoch, p.Epoch, "page %d repeats the first page's epoch", page)
			require.Equal(t, first.Watermark, p.Watermark, "page %d repeats the first page's watermark", page)
		}
		rows = append(rows, p.rows()...)
		if p.Cursor == "" {
			return first, rows
		}
		if p.Rows < req.Limit {
			t.Fatalf("page %d has %d rows (limit %d) and a cursor", page, p.Rows, req.Limit)
		}
		req.Cursor = p.Cursor
	}
}

// rowTimes returns the rows' times, sorted.
func rowTimes(rows []map[string]Value) []int64 {
	out := make([]int64, 0, len(rows))
	for _, r := range rows {
		out = append(out, int64(r["time"].Num))
	}
	slices.Sort(out)
	return out
}

// timeRange returns from, from+1, …, to-1.
func timeRange(from, to int64) []int64 {
	out := []int64{}
	for ts := from; ts < to; ts++ {
		out = append(out, ts)
	}
	return out
}

// hookedStore is the store with a hook run at the start of each ReadRows,
// in the caller's goroutine: a test commits writes there, between a Rows
// call's snapshot of the table and its read.
type hookedStore struct {
	*memstore.Store
	beforeReadRows func()
}

func (h *hookedStore) ReadRows(ctx context.Context, tid uint64, cur store.RowCursor, start, end int64, limit int, visit func(*store.Row) error) (store.RowCursor, bool, error) {
	if f := h.beforeReadRows; f != nil {
		f()
	}
	return h.Store.ReadRows(ctx, tid, cur, start, end, limit, visit)
}

// openHookedHarness is openHarness with the sequencer on a hookedStore.
func openHookedHarness(t testing.TB, disk *memstore.Disk, cfg Config) (*harness, *hookedStore) {
	t.Helper()
	db, err := memstore.Open(disk)
	require.NoError(t, err)
	hs := &hookedStore{Store: db}
	return startHarness(t, disk, db, cfg, hs, nil, nil), hs
}

// --- Copy by time range (docs/contract.md#bootstrap) -----------------------------------------

func TestRowsTimeRange(t *testing.T) {
	h := openHarness(t, memstore.NewDisk(), DefaultConfig())
	defer h.close()
	_, _, err := h.s.CreateTable(context.Background(), "t", true)
	require.NoError(t, err)
	// ts -5..24 once each, v = ts, written out of time order (late
	// timestamps in later batches).
	write := func(from, to int64) {
		var pts []Point
		for ts := from; ts < to; ts++ {
			pts = append(pts, pt("t", ts, tg("host", fmt.Sprint("h", (ts+9)%3)), fld("v", iv(ts))))
		}
		mustAppend(t, h.s, pts...)
	}
	write(10, 25)
	write(-5, 5)
	write(5, 10)

	cases := []struct {
		name       string
		start, end *int64
		want       []int64
	}{
		{name: "everything", want: timeRange(-5, 25)},
		{name: "start only", start: ptr(0), want: timeRange(0, 25)},
		{name: "end only", end: ptr(0), want: timeRange(-5, 0)},
		{name: "start inclusive, end exclusive", start: ptr(3), end: ptr(12), want: timeRange(3, 12)},
		{name: "one nanosecond", start: ptr(24), end: ptr(25), want: []int64{24}},
		{name: "start equals end", start: ptr(7), end: ptr(7), want: []int64{}},
		{name: "start after end", start: ptr(9), end: ptr(2), want: []int64{}},
		{name: "after the data", start: ptr(100), end: ptr(200), want: []int64{}},
		{name: "extreme bounds", start: ptr(math.MinInt64), end: ptr(math.MaxInt64), want: timeRange(-5, 25)},
	}
	for _, tc := range cases {
		for _, limit := range []int{4, 1000} {
			t.Run(fmt.Sprintf("%s/limit %d", tc.name, limit), func(t *testing.T) {
				req := RowsRequest{Table: "t", Limit: limit}
				if tc.start != nil {
					req.Start, req.HasStart = *tc.start, true
				}
				if tc.end != nil {
					req.End, req.HasEnd = *tc.end, true
				}
				reads := h.blocksRead()
				first, rows := copyAll(t, h.d, req, nil)
				if req.HasStart && req.HasEnd && req.Start >= req.End {
					require.Equal(t, reads, h.blocksRead(), "an empty range reads no block")
				}
				require.Equal(t, uint64(1), first.Epoch)
				require.Equal(t, uint64(30), first.Watermark)
				require.Equal(t, []Column{{"time", KindTime}, {"host", KindTag}, {"v", KindInt}}, first.Columns, "no x_seq")
				require.Equal(t, tc.want, rowTimes(rows), "each time in range exactly once")
				for _, r := range rows {
					ts := int64(r["time"].Num)
					require.Equal(t, map[string]Value{"time": tmv(ts), "host": tagv(fmt.Sprint("h", (ts+9)%3)), "v": iv(ts)}, r)
				}
			})
		}
	}
}

func ptr(x int64) *int64 { return &x }

// blocksRead returns the blocks h's store read (memstore's ReadCounts: a
// ReadRows page counts one).
func (h *harness) blocksRead() uint64 {
	blocks, _ := h.db.(*memstore.Store).ReadCounts()
	return blocks
}

func TestRowsPaging(t *testing.T) {
	ctx := context.Background()
	t.Run("the first page's epoch and watermark hold for the whole copy", func(t *testing.T) {
		h := openHarness(t, memstore.NewDisk(), DefaultConfig())
		defer h.close()
		_, _, err := h.s.CreateTable(ctx, "t", true)
		require.NoError(t, err)
		mustAppend(t, h.s, seqPoints("t", 0, 20)...)
		n := 20
		first, rows := copyAll(t, h.d, RowsRequest{Table: "t", Limit: 3}, func() {
			// Writes between pages move the table's watermark, not the copy's.
			mustAppend(t, h.s, seqPoints("t", n, 2)...)
			n += 2
		})
		require.Equal(t, uint64(1), first.Epoch)
		require.Equal(t, uint64(20), first.Watermark)
		require.Greater(t, status(t, h.d, "t").Watermark, first.Watermark)
		got := rowTimes(rows)
		require.Subset(t, got, timeRange(1, 21), "every fragment at or below the watermark is in the copy")
		require.Equal(t, slices.Compact(slices.Clone(got)), got, "no fragment twice")
	})

	t.Run("a point written several times appears once, coalesced", func(t *testing.T) {
		h := openHarness(t, memstore.NewDisk(), DefaultConfig())
		defer h.close()
		_, _, err := h.s.CreateTable(ctx, "t", true)
		require.NoError(t, err)
		mustAppend(t, h.s, pt("t", 5, tg("host", "a"), fld("v", iv(1)), fld("s", sv("x"))))
		mustAppend(t, h.s, pt("t", 9, tg("host", "a"), fld("v", iv(2))))
		mustAppend(t, h.s, pt("t", 5, tg("host", "a"), fld("v", iv(3))))
		mustAppend(t, h.s, pt("t", 5, tg("host", "a"), fld("f", fv(0.5))))
		p5 := map[string]Value{"time": tmv(5), "host": tagv("a"), "v": iv(3), "s": sv("x"), "f": fv(0.5)}
		p9 := map[string]Value{"time": tmv(9), "host": tagv("a"), "v": iv(2)}
		for _, limit := range []int{1, 2, 100} {
			_, rows := copyAll(t, h.d, RowsRequest{Table: "t", Limit: limit}, nil)
			require.ElementsMatch(t, []map[string]Value{p5, p9}, rows, "limit %d", limit)
		}
	})

	t.Run("a point overwritten in one batch with sync OFF appears once", func(t *testing.T) {
		h := openHarness(t, memstore.NewDisk(), DefaultConfig())
		defer h.close()
		// Auto-created with sync OFF: the fragments share one unsynced block.
		mustAppend(t, h.s,
			pt("t", 5, tg("host", "a"), fld("v", iv(1))),
			pt("t", 6, tg("host", "a"), fld("v", iv(6))),
			pt("t", 5, tg("host", "a"), fld("s", sv("x"))),
		)
		mustAppend(t, h.s, pt("t", 5, tg("host", "a"), fld("v", iv(2))))
		_, err := h.s.SetSync(ctx, "t", true)
		require.NoError(t, err)
		mustAppend(t, h.s, pt("t", 5, tg("host", "a"), fld("f", fv(0.5))), pt("t", 6, tg("host", "a"), fld("v", iv(7))))
		p5 := map[string]Value{"time": tmv(5), "host": tagv("a"), "v": iv(2), "s": sv("x"), "f": fv(0.5)}
		p6 := map[string]Value{"time": tmv(6), "host": tagv("a"), "v": iv(7)}
		for _, limit := range []int{1, 2, 100} {
			_, rows := copyAll(t, h.d, RowsRequest{Table: "t", Limit: limit}, nil)
			require.ElementsMatch(t, []map[string]Value{p5, p6}, rows, "limit %d", limit)
		}
	})

	t.Run("rows written with sync OFF are in the copy", func(t *testing.T) {
		h := openHarness(t, memstore.NewDisk(), DefaultConfig())
		defer h.close()
		off := func(ts int64) Point { return pt("t", ts, tg("host", "off"), fld("v", iv(-ts))) }
		on := func(ts int64) Point { return pt("t", ts, tg("host", "on"), fld("v", iv(ts))) }
		mustAppend(t, h.s, off(1), off(2), off(3)) // auto-created, sync OFF
		_, err := h.s.SetSync(ctx, "t", true)
		require.NoError(t, err)
		mustAppend(t, h.s, on(4), on(5))
		_, err = h.s.SetSync(ctx, "t", false)
		require.NoError(t, err)
		mustAppend(t, h.s, off(6))
		for _, limit := range []int{1, 2, 100} {
			first, rows := copyAll(t, h.d, RowsRequest{Table: "t", Limit: limit}, nil)
			require.Equal(t, SyncStatus{Enabled: false, Epoch: 1, Seq: 2, Watermark: 2, Horizon: 1}, status(t, h.d, "t"))
			require.Equal(t, uint64(1), first.Epoch)
			require.Equal(t, uint64(2), first.Watermark)
			require.ElementsMatch(t, []map[string]Value{
				pointVals(off(1)), pointVals(off(2)), pointVals(off(3)), pointVals(on(4)), pointVals(on(5)), pointVals(off(6)),
			}, rows, "limit %d", limit)
		}
	})
}

func TestRowsRefusals(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxDrainLimit = 10
	h := openHarness(t, memstore.NewDisk(), cfg)
	defer h.close()
	ctx := context.Background()
	_, _, err := h.s.CreateTable(ctx, "t", true)
	require.NoError(t, err)
	mustAppend(t, h.s, seqPoints("t", 0, 5)...)
	first, err := tryRows(h.d, RowsRequest{Table: "t", Limit: 2})
	require.NoError(t, err)
	require.NotEmpty(t, first.Cursor)
	raw, err := base64.RawURLEncoding.DecodeString(first.Cursor)
	require.NoError(t, err)
	enc := base64.RawURLEncoding.EncodeToString

	cases := []struct {
		name string
		req  RowsRequest
		err  error
	}{
		{name: "unknown table", req: RowsRequest{Table: "nope", Limit: 1}, err: ErrTableNotFound},
		{name: "limit 0", req: RowsRequest{Table: "t", Limit: 0}, err: ErrInvalidLimit},
		{name: "limit above max", req: RowsRequest{Table: "t", Limit: 11}, err: ErrInvalidLimit},
		{name: "garbage cursor", req: RowsRequest{Table: "t", Limit: 1, Cursor: "not a cursor!"}, err: ErrInvalidCursor},
		{name: "empty base64 cursor", req: RowsRequest{Table: "t", Limit: 1, Cursor: "AA"}, err: ErrInvalidCursor},
		{name: "unknown cursor version", req: RowsRequest{Table: "t", Limit: 1, Cursor: enc(append([]byte{2}, raw[1:]...))}, err: ErrInvalidCursor},
		{name: "truncated cursor", req: RowsRequest{Table: "t", Limit: 1, Cursor: enc(raw[:len(raw)-1])}, err: ErrInvalidCursor},
		{name: "padded base64", req: RowsRequest{Table: "t", Limit: 1, Cursor: first.Cursor + "=="}, err: ErrInvalidCursor},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tryRows(h.d, tc.req)
			require.ErrorIs(t, err, tc.err)
			require.Empty(t, p.vals)
		})
	}
	t.Run("the cursor is valid", func(t *testing.T) {
		p, err := tryRows(h.d, RowsRequest{Table: "t", Limit: 10, Cursor: first.Cursor})
		require.NoError(t, err)
		require.Equal(t, 3, p.Rows)
	})
}

func TestRowsStaleEpoch(t *testing.T) {
	cases := []struct {
		name string
		// change runs between the first and the second page.
		change func(t *testing.T, s *Sequencer)
		err    error // nil: the copy goes on
		epoch  uint64
	}{
		{
			name: "truncate", err: ErrStaleEpoch, epoch: 2,
			change: func(t *testing.T, s *Sequencer) {
				_, err := s.Truncate(context.Background(), "t")
				require.NoError(t, err)
				mustAppend(t, s, seqPoints("t", 0, 5)...)
			},
		},
		{
			name: "sync off then on", err: ErrStaleEpoch, epoch: 2,
			change: func(t *testing.T, s *Sequencer) {
				for _, on := range []bool{false, true} {
					_, err := s.SetSync(context.Background(), "t", on)
					require.NoError(t, err)
				}
			},
		},
		{
			name: "drop and re-create", err: ErrStaleEpoch, epoch: 2,
			change: func(t *testing.T, s *Sequencer) {
				require.NoError(t, s.Drop(context.Background(), "t"))
				_, _, err := s.CreateTable(context.Background(), "t", true)
				require.NoError(t, err)
			},
		},
		{
			name: "drop", err: ErrTableNotFound,
			change: func(t *testing.T, s *Sequencer) {
				require.NoError(t, s.Drop(context.Background(), "t"))
			},
		},
		{
			name: "sync off alone keeps the epoch", epoch: 1,
			change: func(t *testing.T, s *Sequencer) {
				_, err := s.SetSync(context.Background(), "t", false)
				require.NoError(t, err)
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := openHarness(t, memstore.NewDisk(), DefaultConfig())
			defer h.close()
			_, _, err := h.s.CreateTable(context.Background(), "t", true)
			require.NoError(t, err)
			mustAppend(t, h.s, seqPoints("t", 0, 5)...)
			first, err := tryRows(h.d, RowsRequest{Table: "t", Limit: 2})
			require.NoError(t, err)
			require.NotEmpty(t, first.Cursor)
			tc.change(t, h.s)
			p, err := tryRows(h.d, RowsRequest{Table: "t", Limit: 2, Cursor: first.Cursor})
			if tc.err == nil {
				require.NoError(t, err)
				require.Equal(t, 2, p.Rows)
				require.Equal(t, tc.epoch, p.Epoch)
				return
			}
			require.ErrorIs(t, err, tc.err)
			require.Empty(t, p.vals)
			if tc.err == ErrStaleEpoch {
				var ref *RefusalError
				require.ErrorAs(t, err, &ref)
				require.Equal(t, status(t, h.d, "t"), ref.Status, "the refusal carries the current status")
				require.Equal(t, tc.epoch, ref.Status.Epoch)
			}
		})
	}
}

func TestRowsNewSeriesDuringCopy(t *testing.T) {
	base := []Point{
		pt("t", 1, tg("host", "a"), fld("v", iv(1))),
		pt("t", 2, tg("host", "b"), fld("v", iv(2))),
		pt("t", 3, tg("host", "c"), fld("v", iv(3))),
	}
	cases := []struct {
		name  string
		write []Point // committed between the page's snapshot and its read
	}{
		{name: "a new series of known tag keys", write: []Point{pt("t", 4, tg("host", "new"), fld("v", iv(4)))}},
		{name: "a new series on the untagged entity's table", write: []Point{pt("t", 5, nil, fld("v", iv(5)))}},
		{name: "a new tag key", write: []Point{pt("t", 6, tg("host", "d", "rack", "r1"), fld("v", iv(6)))}},
		{name: "a new field", write: []Point{pt("t", 7, tg("host", "a"), fld("w", fv(7.5)))}},
		{name: "a new series with a new tag key and field", write: []Point{pt("t", 8, tg("zone", "z"), fld("w", fv(8.5)), fld("v", iv(8)))}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, hs := openHookedHarness(t, memstore.NewDisk(), DefaultConfig())
			defer h.close()
			_, _, err := h.s.CreateTable(context.Background(), "t", true)
			require.NoError(t, err)
			mustAppend(t, h.s, base...)
			var rows []map[string]Value
			first, err := tryRows(h.d, RowsRequest{Table: "t", Limit: 2})
			require.NoError(t, err)
			rows = append(rows, first.rows()...)
			wrote := false
			hs.beforeReadRows = func() {
				if !wrote {
					wrote = true
					mustAppend(t, h.s, tc.write...)
				}
			}
			cursor := first.Cursor
			for cursor != "" {
				p, err := tryRows(h.d, RowsRequest{Table: "t", Limit: 2, Cursor: cursor})
				require.NoError(t, err)
				rows = append(rows, p.rows()...)
				cursor = p.Cursor
			}
			require.True(t, wrote)
			want := []map[string]Value{}
			for _, p := range append(slices.Clone(base), tc.write...) {
				want = append(want, pointVals(p))
			}
			require.ElementsMatch(t, want, rows, "every row with its own tags and fields")
		})
	}
}
