package feed

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store/memstore"
)

// --- Paging (docs/contract.md#paging) --------------------------------------------------------------

func TestDrainPaging(t *testing.T) {
	cases := []struct {
		name    string
		batches []int // fragments per Append
		after   uint64
		limit   int
	}{
		{name: "empty table", batches: nil, limit: 5},
		{name: "one row", batches: []int{1}, limit: 5},
		{name: "limit 1", batches: []int{3, 1, 4}, limit: 1},
		{name: "limit not dividing", batches: []int{2, 5, 3}, limit: 3},
		{name: "full last page", batches: []int{6}, limit: 3},
		{name: "limit equals rows", batches: []int{4, 3}, limit: 7},
		{name: "limit above rows", batches: []int{4, 3}, limit: 100},
		{name: "pages inside one large block", batches: []int{200}, limit: 70},
		{name: "pages across blocks", batches: []int{63, 1, 65, 130, 2}, limit: 64},
		{name: "from the middle of a block", batches: []int{100, 100}, after: 77, limit: 40},
		{name: "from a block boundary", batches: []int{10, 10}, after: 10, limit: 4},
		{name: "from the watermark", batches: []int{10}, after: 10, limit: 4},
		{name: "max limit", batches: []int{5, 5}, limit: DefaultMaxDrainLimit},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := openHarness(t, memstore.NewDisk(), DefaultConfig())
			defer h.close()
			_, _, err := h.s.CreateTable(context.Background(), "t", true)
			require.NoError(t, err)
			// Fragment k (1-based, in write order) is at ts k with v = 10k
			// on one of three series.
			n := 0
			for _, size := range tc.batches {
				pts := make([]Point, 0, size)
				for range size {
					n++
					pts = append(pts, pt("t", int64(n), tg("host", fmt.Sprint("h", n%3)), fld("v", iv(int64(10*n)))))
				}
				mustAppend(t, h.s, pts...)
			}
			st := status(t, h.d, "t")
			require.Equal(t, SyncStatus{Enabled: true, Epoch: 1, Seq: uint64(n), Watermark: uint64(n), Horizon: 1}, st)

			seen := map[uint64]int{}
			after, pages := tc.after, 0
			for {
				p := drainPage(t, h.d, DrainRequest{Table: "t", After: after, Limit: tc.limit, Epoch: 1, HasEpoch: true})
				pages++
				require.Equal(t, after, p.After)
				require.Equal(t, uint64(n), p.Watermark)
				require.Equal(t, uint64(n), p.Seq)
				require.Equal(t, uint64(1), p.Epoch)
				for _, r := range p.rows() {
					seen[r.Seq]++
					k := int64(r.Seq)
					require.Equal(t, map[string]Value{
						"time": tmv(k), "host": tagv(fmt.Sprint("h", k%3)), "v": iv(10 * k),
					}, r.Vals, "x_seq %d", r.Seq)
				}
				if !p.More {
					require.Equal(t, p.Watermark, p.Next, "the last page ends at the watermark")
					break
				}
				require.Greater(t, p.Next, after, "next moves forward")
				after = p.Next
				require.LessOrEqual(t, pages, n+1, "too many pages")
			}
			want := max(0, n-int(tc.after))
			require.Len(t, seen, want)
			for q := tc.after + 1; q <= uint64(n); q++ {
				require.Equal(t, 1, seen[q], "x_seq %d delivered once", q)
			}
			require.Equal(t, max(1, (want+tc.limit-1)/tc.limit), pages)
		})
	}
}

// --- Coalescing (docs/contract.md#coalescing) -----------------------------------------

// feedStep changes a table's sync or restarts, then appends pts as one batch.
type feedStep struct {
	op  string // "", "sync_on", "sync_off" or "restart"
	pts []Point
}

// runSteps runs steps on table "t" and returns the (possibly reopened)
// harness.
func runSteps(t testing.TB, h *harness, cfg Config, steps []feedStep) *harness {
	t.Helper()
	for _, s := range steps {
		switch s.op {
		case "":
		case "sync_on", "sync_off":
			_, err := h.s.SetSync(context.Background(), "t", s.op == "sync_on")
			require.NoError(t, err)
		case "restart":
			h.close()
			h = openHarness(t, h.disk, cfg)
		default:
			t.Fatalf("unknown op %q", s.op)
		}
		if len(s.pts) > 0 {
			mustAppend(t, h.s, s.pts...)
		}
	}
	return h
}

func TestDrainCoalesce(t *testing.T) {
	f1 := pt("t", 10, tg("host", "a"), fld("a", iv(1)), fld("b", sv("x")))
	f2 := pt("t", 10, tg("host", "a"), fld("b", sv("y")), fld("c", fv(2.5)))
	f3 := pt("t", 10, tg("host", "a"), fld("a", iv(3)))
	m12 := map[string]Value{"time": tmv(10), "host": tagv("a"), "a": iv(1), "b": sv("y"), "c": fv(2.5)}
	m123 := map[string]Value{"time": tmv(10), "host": tagv("a"), "a": iv(3), "b": sv("y"), "c": fv(2.5)}
	untagged := func(p Point) Point { p.Tags, p.Series = nil, ""; return p }
	m12untagged := map[string]Value{"time": tmv(10), "a": iv(1), "b": sv("y"), "c": fv(2.5)}
	escTags := tg("host", "a b", "rack", "r=1,2")
	esc := func(p Point) Point { return pt(p.Table, p.Time, escTags, p.Fields...) }
	m12esc := map[string]Value{"time": tmv(10), "host": tagv("a b"), "rack": tagv("r=1,2"), "a": iv(1), "b": sv("y"), "c": fv(2.5)}

	cases := []struct {
		name   string
		syncOn bool // table created with sync ON
		steps  []feedStep
		want   []row
	}{
		{
			name: "two batches", syncOn: true,
			steps: []feedStep{{pts: []Point{f1}}, {pts: []Point{f2}}},
			want:  []row{{1, m12}, {2, m12}},
		},
		{
			name: "one batch", syncOn: true,
			steps: []feedStep{{pts: []Point{f1, f2}}},
			want:  []row{{1, m12}, {2, m12}},
		},
		{
			name: "later write wins per column", syncOn: true,
			steps: []feedStep{{pts: []Point{f1}}, {pts: []Point{f2}}, {pts: []Point{f3}}},
			want:  []row{{1, m123}, {2, m123}, {3, m123}},
		},
		{
			name: "three fragments in one batch", syncOn: true,
			steps: []feedStep{{pts: []Point{f1, f2, f3}}},
			want:  []row{{1, m123}, {2, m123}, {3, m123}},
		},
		{
			name:   "first fragment written with sync off",
			syncOn: false,
			steps:  []feedStep{{pts: []Point{f1}}, {op: "sync_on", pts: []Point{f2}}},
			want:   []row{{1, m12}},
		},
		{
			name: "sync off fragment between synced ones", syncOn: true,
			steps: []feedStep{{pts: []Point{f1}}, {op: "sync_off", pts: []Point{f2}}, {op: "sync_on", pts: []Point{f3}}},
			want:  []row{{1, m123}, {2, m123}},
		},
		{
			name: "other entity and other time stay apart", syncOn: true,
			steps: []feedStep{{pts: []Point{
				f1,
				pt("t", 10, tg("host", "b"), fld("a", iv(9))),
				pt("t", 11, tg("host", "a"), fld("a", iv(8))),
				f2,
			}}},
			want: []row{
				{1, m12},
				{2, map[string]Value{"time": tmv(10), "host": tagv("b"), "a": iv(9)}},
				{3, map[string]Value{"time": tmv(11), "host": tagv("a"), "a": iv(8)}},
				{4, m12},
			},
		},
		{
			name: "late write to an older time", syncOn: true,
			steps: []feedStep{
				{pts: []Point{f1}},
				{pts: []Point{pt("t", 20, tg("host", "a"), fld("a", iv(5)))}},
				{pts: []Point{f2}},
			},
			want: []row{
				{1, m12},
				{2, map[string]Value{"time": tmv(20), "host": tagv("a"), "a": iv(5)}},
				{3, m12},
			},
		},
		{
			name: "untagged entity", syncOn: true,
			steps: []feedStep{{pts: []Point{untagged(f1)}}, {pts: []Point{untagged(f2)}}},
			want:  []row{{1, m12untagged}, {2, m12untagged}},
		},
		{
			name: "escaped tag values", syncOn: true,
			steps: []feedStep{{pts: []Point{esc(f1)}}, {pts: []Point{esc(f2)}}},
			want:  []row{{1, m12esc}, {2, m12esc}},
		},
		{
			name: "across a restart", syncOn: true,
			steps: []feedStep{{pts: []Point{f1}}, {op: "restart", pts: []Point{f2}}},
			want:  []row{{1, m12}, {2, m12}},
		},
		{
			name: "sync off fragment across a restart", syncOn: false,
			steps: []feedStep{{pts: []Point{f1}}, {op: "restart"}, {op: "sync_on", pts: []Point{f2}}},
			want:  []row{{1, m12}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			h := openHarness(t, memstore.NewDisk(), cfg)
			defer func() { h.close() }()
			_, _, err := h.s.CreateTable(context.Background(), "t", tc.syncOn)
			require.NoError(t, err)
			h = runSteps(t, h, cfg, tc.steps)
			require.Equal(t, tc.want, drainAll(t, h.d, "t", 0, 100))
			require.Equal(t, tc.want, drainAll(t, h.d, "t", 0, 1), "page by page")
			// Re-reading after the first fragment still gives the
			// coalesced row.
			require.Equal(t, orNil(tc.want[1:]), drainAll(t, h.d, "t", tc.want[0].Seq, 2))
		})
	}
}

// --- Sync OFF lines are invisible (docs/contract.md#sync-off-invisible) ------------------------------------------

func TestDrainSyncOffInvisible(t *testing.T) {
	// Lines written while sync is OFF carry v < 0, the others v > 0; no two
	// lines share a point.
	off := func(ts int64) Point { return pt("t", ts, tg("host", "a"), fld("v", iv(-ts))) }
	on := func(ts int64) Point { return pt("t", ts, tg("host", "a"), fld("v", iv(ts))) }
	cases := []struct {
		name   string
		create string // "on", "off" or "" (auto-created by the first write)
		steps  []feedStep
		onTs   []int64 // the sync ON lines, in write order
	}{
		{
			name: "created off, enabled later", create: "off",
			steps: []feedStep{{pts: []Point{off(1), off(2)}}, {pts: []Point{off(3)}}, {op: "sync_on", pts: []Point{on(4), on(5)}}},
			onTs:  []int64{4, 5},
		},
		{
			name: "auto-created", create: "",
			steps: []feedStep{{pts: []Point{off(1), off(2)}}, {op: "sync_on", pts: []Point{on(3)}}},
			onTs:  []int64{3},
		},
		{
			name: "disabled in between", create: "on",
			steps: []feedStep{
				{pts: []Point{on(1)}},
				{op: "sync_off", pts: []Point{off(2), off(3)}},
				{op: "sync_on", pts: []Point{on(4)}},
				{op: "sync_off", pts: []Point{off(5)}},
				{op: "sync_on"},
			},
			onTs: []int64{1, 4},
		},
		{
			name: "written before a restart", create: "off",
			steps: []feedStep{{pts: []Point{off(1)}}, {op: "restart", pts: []Point{off(2)}}, {op: "sync_on", pts: []Point{on(3)}}},
			onTs:  []int64{3},
		},
		{
			name: "older time than the synced lines", create: "on",
			steps: []feedStep{{pts: []Point{on(10)}}, {op: "sync_off", pts: []Point{off(5)}}, {op: "sync_on", pts: []Point{on(11)}}},
			onTs:  []int64{10, 11},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			h := openHarness(t, memstore.NewDisk(), cfg)
			defer func() { h.close() }()
			if tc.create != "" {
				_, _, err := h.s.CreateTable(context.Background(), "t", tc.create == "on")
				require.NoError(t, err)
			}
			h = runSteps(t, h, cfg, tc.steps)
			check := func(h *harness) {
				t.Helper()
				require.Equal(t, uint64(len(tc.onTs)), status(t, h.d, "t").Seq, "only sync ON lines are numbered")
				var want []row
				for i, ts := range tc.onTs {
					want = append(want, row{uint64(i + 1), map[string]Value{"time": tmv(ts), "host": tagv("a"), "v": iv(ts)}})
				}
				require.Equal(t, want, drainAll(t, h.d, "t", 0, 100))
				require.Equal(t, want, drainAll(t, h.d, "t", 0, 1))
			}
			check(h)
			h.close()
			h = openHarness(t, h.disk, cfg)
			check(h)
		})
	}
}

// --- Refusals, limits and columns (docs/contract.md#refusals) ----------------------------------------

func TestDrainRefusals(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxDrainLimit = 5
	h := openHarness(t, memstore.NewDisk(), cfg)
	defer h.close()
	ctx := context.Background()
	// "on": epoch 2, seq 3. "off": sync OFF, epoch 1, seq 1. "fresh": epoch
	// 1, seq 0.
	_, _, err := h.s.CreateTable(ctx, "on", true)
	require.NoError(t, err)
	mustAppend(t, h.s, pt("on", 1, nil, fld("v", iv(1))), pt("on", 2, nil, fld("v", iv(2))), pt("on", 3, nil, fld("v", iv(3))))
	_, err = h.s.SetSync(ctx, "on", false)
	require.NoError(t, err)
	_, err = h.s.SetSync(ctx, "on", true)
	require.NoError(t, err)
	_, _, err = h.s.CreateTable(ctx, "off", true)
	require.NoError(t, err)
	mustAppend(t, h.s, pt("off", 1, nil, fld("v", iv(1))))
	_, err = h.s.SetSync(ctx, "off", false)
	require.NoError(t, err)
	_, _, err = h.s.CreateTable(ctx, "fresh", true)
	require.NoError(t, err)
	require.Equal(t, SyncStatus{Enabled: true, Epoch: 2, Seq: 3, Watermark: 3, Horizon: 1}, status(t, h.d, "on"))
	require.Equal(t, SyncStatus{Enabled: false, Epoch: 1, Seq: 1, Watermark: 1, Horizon: 1}, status(t, h.d, "off"))

	cases := []struct {
		name    string
		req     DrainRequest
		err     error // nil: the drain succeeds
		refusal bool  // err comes as a *RefusalError
		rows    int
	}{
		{name: "unknown table", req: DrainRequest{Table: "nope", Limit: 1}, err: ErrTableNotFound},
		{name: "unknown table before everything else", req: DrainRequest{Table: "nope", Limit: 1, After: 9, Epoch: 9, HasEpoch: true, Columns: []string{"zz"}}, err: ErrTableNotFound},
		{name: "sync off", req: DrainRequest{Table: "off", Limit: 1}, err: ErrSyncOff, refusal: true},
		{name: "sync off before stale epoch and cursor", req: DrainRequest{Table: "off", Limit: 1, After: 9, Epoch: 9, HasEpoch: true}, err: ErrSyncOff, refusal: true},
		{name: "sync off with the current epoch", req: DrainRequest{Table: "off", Limit: 1, Epoch: 1, HasEpoch: true}, err: ErrSyncOff, refusal: true},
		{name: "stale epoch", req: DrainRequest{Table: "on", Limit: 1, Epoch: 1, HasEpoch: true}, err: ErrStaleEpoch, refusal: true},
		{name: "stale epoch before cursor", req: DrainRequest{Table: "on", Limit: 1, After: 9, Epoch: 1, HasEpoch: true}, err: ErrStaleEpoch, refusal: true},
		{name: "epoch 0 is an epoch", req: DrainRequest{Table: "on", Limit: 1, Epoch: 0, HasEpoch: true}, err: ErrStaleEpoch, refusal: true},
		{name: "future epoch", req: DrainRequest{Table: "on", Limit: 1, Epoch: 3, HasEpoch: true}, err: ErrStaleEpoch, refusal: true},
		{name: "cursor beyond sequence", req: DrainRequest{Table: "on", Limit: 1, After: 4, Epoch: 2, HasEpoch: true}, err: ErrCursorBeyondSequence, refusal: true},
		{name: "cursor beyond sequence without epoch", req: DrainRequest{Table: "on", Limit: 1, After: 100}, err: ErrCursorBeyondSequence, refusal: true},
		{name: "cursor beyond an empty table", req: DrainRequest{Table: "fresh", Limit: 1, After: 1}, err: ErrCursorBeyondSequence, refusal: true},
		{name: "cursor at sequence", req: DrainRequest{Table: "on", Limit: 1, After: 3, Epoch: 2, HasEpoch: true}},
		{name: "current epoch", req: DrainRequest{Table: "on", Limit: 5, Epoch: 2, HasEpoch: true}, rows: 3},
		{name: "epoch without HasEpoch is ignored", req: DrainRequest{Table: "on", Limit: 5, Epoch: 1}, rows: 3},
		{name: "empty table", req: DrainRequest{Table: "fresh", Limit: 5, Epoch: 1, HasEpoch: true}},
		{name: "limit 0", req: DrainRequest{Table: "on", Limit: 0}, err: ErrInvalidLimit},
		{name: "negative limit", req: DrainRequest{Table: "on", Limit: -1}, err: ErrInvalidLimit},
		{name: "limit above max", req: DrainRequest{Table: "on", Limit: 6}, err: ErrInvalidLimit},
		{name: "limit at max", req: DrainRequest{Table: "on", Limit: 5}, rows: 3},
		{name: "limit 1", req: DrainRequest{Table: "on", Limit: 1}, rows: 1},
		{name: "unknown column", req: DrainRequest{Table: "on", Limit: 1, Columns: []string{"time", "nope"}}, err: ErrUnknownColumn},
		{name: "column twice", req: DrainRequest{Table: "on", Limit: 1, Columns: []string{"v", "time", "v"}}, err: ErrDuplicateColumn},
		{name: "x_epoch is no column", req: DrainRequest{Table: "on", Limit: 1, Columns: []string{"x_epoch"}}, err: ErrUnknownColumn},
		{name: "empty column name", req: DrainRequest{Table: "on", Limit: 1, Columns: []string{""}}, err: ErrUnknownColumn},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tryDrain(h.d, tc.req)
			if tc.err == nil {
				require.NoError(t, err)
				require.NoError(t, pageProblem(p, tc.req.After, tc.req.Limit))
				require.Equal(t, tc.rows, p.Rows)
				return
			}
			require.ErrorIs(t, err, tc.err)
			require.Empty(t, p.vals, "a refused drain visits no row")
			var ref *RefusalError
			if !tc.refusal {
				require.NotErrorAs(t, err, &ref, "%v is no refusal", err)
				return
			}
			require.ErrorAs(t, err, &ref)
			require.Equal(t, status(t, h.d, tc.req.Table), ref.Status, "the refusal carries the current status")
			require.Equal(t, tc.err.Error(), ref.Error())
		})
	}
}

func TestDrainColumns(t *testing.T) {
	h := openHarness(t, memstore.NewDisk(), DefaultConfig())
	defer h.close()
	_, _, err := h.s.CreateTable(context.Background(), "t", true)
	require.NoError(t, err)
	mustAppend(t, h.s,
		pt("t", 1, tg("host", "a", "dc", "x"), fld("a", iv(1)), fld("b", sv("s"))),
		pt("t", 2, tg("host", "b"), fld("b", sv("t")), fld("c", bv(true))),
	)
	// Schema order: time, tags of the first line (sorted), then fields in
	// order of first appearance.
	all := []Column{{"time", KindTime}, {"dc", KindTag}, {"host", KindTag}, {"a", KindInt}, {"b", KindString}, {"c", KindBool}}
	require.Equal(t, all, columns(t, h.d, "t"))
	seq := func(x uint64) Value { return Value{Kind: KindSeq, Num: x} }
	var none Value
	cases := []struct {
		name    string
		columns []string
		want    []Column
		rows    [][]Value
	}{
		{
			name: "default", columns: nil,
			want: append(append([]Column(nil), all...), Column{"x_seq", KindSeq}, Column{"x_op", KindOp}),
			rows: [][]Value{
				{tmv(1), tagv("x"), tagv("a"), iv(1), sv("s"), none, seq(1), {Kind: KindOp}},
				{tmv(2), none, tagv("b"), none, sv("t"), bv(true), seq(2), {Kind: KindOp}},
			},
		},
		{
			name: "reordered", columns: []string{"x_seq", "b", "time"},
			want: []Column{{"x_seq", KindSeq}, {"b", KindString}, {"time", KindTime}},
			rows: [][]Value{{seq(1), sv("s"), tmv(1)}, {seq(2), sv("t"), tmv(2)}},
		},
		{
			name: "one tag", columns: []string{"host"},
			want: []Column{{"host", KindTag}},
			rows: [][]Value{{tagv("a")}, {tagv("b")}},
		},
		{
			name: "absent values", columns: []string{"c", "dc"},
			want: []Column{{"c", KindBool}, {"dc", KindTag}},
			rows: [][]Value{{none, tagv("x")}, {bv(true), none}},
		},
		{
			name: "every column permuted", columns: []string{"c", "a", "dc", "host", "x_seq", "time", "b"},
			want: []Column{{"c", KindBool}, {"a", KindInt}, {"dc", KindTag}, {"host", KindTag}, {"x_seq", KindSeq}, {"time", KindTime}, {"b", KindString}},
			rows: [][]Value{
				{none, iv(1), tagv("x"), tagv("a"), seq(1), tmv(1), sv("s")},
				{bv(true), none, none, tagv("b"), seq(2), tmv(2), sv("t")},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := drainPage(t, h.d, DrainRequest{Table: "t", Limit: 10, Columns: tc.columns})
			require.Equal(t, tc.want, p.Columns)
			require.Equal(t, tc.rows, p.vals)
		})
	}
}

// --- The watermark holds below a stalled commit (docs/contract.md#watermark) -------------------------

func TestDrainStalledCommit(t *testing.T) {
	cases := []struct {
		name    string
		create  []string // tables created with sync ON first
		before  []Point  // committed first, one batch
		stalled []Point  // the batch whose commit stalls
	}{
		{
			name:   "second batch",
			create: []string{"t"},
			before: []Point{
				pt("t", 1, tg("host", "a"), fld("v", iv(1))),
				pt("t", 2, tg("host", "a"), fld("v", iv(2))),
				pt("t", 3, tg("host", "b"), fld("v", iv(3))),
			},
			stalled: []Point{
				pt("t", 4, tg("host", "a"), fld("v", iv(4))),
				pt("t", 5, tg("host", "c"), fld("v", iv(5)), fld("w", sv("new"))),
			},
		},
		{
			name: "first commit of an auto-created table",
			stalled: []Point{
				pt("cpu", 1, tg("host", "a"), fld("v", iv(1))),
				pt("cpu", 2, tg("host", "a"), fld("v", iv(2))),
			},
		},
		{
			name:   "batch spanning two tables",
			create: []string{"t", "u"},
			before: []Point{
				pt("t", 1, nil, fld("v", iv(1))),
				pt("u", 1, nil, fld("v", iv(1))),
			},
			stalled: []Point{
				pt("u", 2, nil, fld("v", iv(2))),
				pt("t", 2, nil, fld("v", iv(2))),
				pt("u", 3, nil, fld("v", iv(3))),
			},
		},
		{
			name:   "overwrite of a visible row",
			create: []string{"t"},
			before: []Point{pt("t", 1, tg("host", "a"), fld("v", iv(1)))},
			stalled: []Point{
				pt("t", 1, tg("host", "a"), fld("v", iv(2))),
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.SyncTables = []string{"cpu"}
			h := openHarness(t, memstore.NewDisk(), cfg)
			defer h.close()
			// Installed before any write reaches the sequencer; released
			// before h.close (deferred calls run last first).
			stall := installStall(h)
			defer stall.release()
			ctx := context.Background()
			for _, name := range tc.create {
				_, _, err := h.s.CreateTable(ctx, name, true)
				require.NoError(t, err)
			}
			if len(tc.before) > 0 {
				mustAppend(t, h.s, tc.before...)
			}
			tables := map[string]bool{}
			for _, p := range tc.stalled {
				tables[p.Table] = true
			}
			old := map[string]SyncStatus{}
			oldRows := map[string][]row{}
			for name := range tables {
				st, err := h.d.Status(name)
				if err == nil {
					old[name] = st
					oldRows[name] = drainAll(t, h.d, name, 0, 10)
				}
			}

			stall.arm()
			pending, err := h.s.Submit(ctx, &Batch{Points: tc.stalled})
			require.NoError(t, err)
			waitClosed(t, stall.entered, "the commit reaches the hook")

			next := map[string]uint64{}
			for name := range tables {
				st := status(t, h.d, name)
				require.Greater(t, st.Seq, st.Watermark, "%s: seq handed out above the watermark", name)
				require.Equal(t, old[name].Watermark, st.Watermark, "%s: the watermark holds", name)
				if prev, ok := old[name]; ok {
					require.Equal(t, prev.Epoch, st.Epoch, "%s: epoch", name)
				} else {
					require.Equal(t, uint64(1), st.Epoch, "%s: auto-created WITH SYNC", name)
				}
				p := drainPage(t, h.d, DrainRequest{Table: name, Limit: 10})
				require.Equal(t, oldRows[name], orNil(p.rows()), "%s: only committed rows", name)
				require.Equal(t, st.Watermark, p.Next, "%s: next stops at the watermark", name)
				require.False(t, p.More)
				require.Equal(t, st.Seq, p.Seq)
				p = drainPage(t, h.d, DrainRequest{Table: name, After: p.Next, Limit: 10})
				require.Zero(t, p.Rows, "%s: nothing visible above the watermark", name)
				next[name] = p.Next
			}
			select {
			case <-pending.o.done:
				t.Fatal("a stalled batch is acknowledged")
			default:
			}

			stall.release()
			res, err := pending.Wait(ctx)
			require.NoError(t, err)
			require.Equal(t, len(tc.stalled), res.Accepted)
			for name := range tables {
				st := status(t, h.d, name)
				require.Equal(t, st.Seq, st.Watermark, "%s", name)
				var want []row
				for _, p := range tc.stalled {
					if p.Table == name {
						want = append(want, row{Seq: next[name] + uint64(len(want)) + 1, Vals: pointVals(p)})
					}
				}
				require.Equal(t, want, drainAll(t, h.d, name, next[name], 10), "%s: the first pull from next returns the stalled rows", name)
			}
		})
	}
}

func orNil(rows []row) []row {
	if len(rows) == 0 {
		return nil
	}
	return rows
}

// pointVals returns the row values of a point that is alone at its
// (entity, ts) or the last write there for each of its columns.
func pointVals(p Point) map[string]Value {
	m := map[string]Value{"time": tmv(p.Time)}
	for _, tag := range p.Tags {
		m[tag.Key] = tagv(tag.Value)
	}
	for _, f := range p.Fields {
		m[f.Key] = f.Value
	}
	return m
}

// --- Concurrent writers and a drainer (docs/contract.md#watermark) -------------------------------

func TestDrainConcurrentWriters(t *testing.T) {
	cases := []struct {
		name    string
		writers int
		batches int
		sizes   []int // batch sizes, cycled
		limits  []int // drain page sizes, cycled
	}{
		{name: "small batches", writers: 4, batches: 40, sizes: []int{1, 2, 3}, limits: []int{1, 4, 16}},
		{name: "mixed batches", writers: 3, batches: 15, sizes: []int{1, 17, 64, 5, 130}, limits: []int{7, 100, 3}},
	}
	tables := []string{"a", "b"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := openHarness(t, memstore.NewDisk(), DefaultConfig())
			defer h.close()
			ctx := context.Background()
			for _, name := range tables {
				_, _, err := h.s.CreateTable(ctx, name, true)
				require.NoError(t, err)
			}
			type key struct {
				table string
				host  string
				ts    int64
			}
			// Writer w's points alternate tables; each is alone at its
			// (entity, ts) and carries its writer and position.
			var (
				mu      sync.Mutex
				written = map[key]map[string]Value{}
				order   = map[string][][]key{} // table -> writer -> keys in write order
			)
			for _, name := range tables {
				order[name] = make([][]key, tc.writers)
			}
			var wg sync.WaitGroup
			errs := make(chan error, tc.writers+1)
			for w := range tc.writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n := 0
					for b := range tc.batches {
						size := tc.sizes[(b+w)%len(tc.sizes)]
						pts := make([]Point, 0, size)
						for range size {
							n++
							table := tables[(n+w)%len(tables)]
							ts := int64(w)<<32 | int64(n)
							pts = append(pts, pt(table, ts, tg("writer", fmt.Sprint("w", w)),
								fld("v", iv(ts)), fld("s", sv(fmt.Sprintf("w%d-%d", w, n))), fld("f", fv(float64(n)/4))))
						}
						res, err := h.s.Append(ctx, &Batch{Points: pts})
						if err == nil && (res.Accepted != size || len(res.Rejected) > 0) {
							err = fmt.Errorf("writer %d: accepted %d of %d: %v", w, res.Accepted, size, res.Rejected)
						}
						if err != nil {
							errs <- err
							return
						}
						mu.Lock()
						for _, p := range pts {
							k := key{p.Table, p.Tags[0].Value, p.Time}
							written[k] = pointVals(p)
							order[p.Table][w] = append(order[p.Table][w], k)
						}
						mu.Unlock()
					}
				}()
			}

			// The drainer follows both tables with (epoch, next) until the
			// writers are done.
			type cursor struct {
				epoch, next uint64
				rows        []row
			}
			cursors := map[string]*cursor{}
			for _, name := range tables {
				cursors[name] = &cursor{epoch: 1}
			}
			pull := func(name string, limit int) error {
				c := cursors[name]
				p, err := tryDrain(h.d, DrainRequest{Table: name, After: c.next, Limit: limit, Epoch: c.epoch, HasEpoch: true})
				if err != nil {
					return fmt.Errorf("drain %s after %d: %w", name, c.next, err)
				}
				if err := pageProblem(p, c.next, limit); err != nil {
					return fmt.Errorf("drain %s after %d: %w", name, c.next, err)
				}
				c.rows = append(c.rows, p.rows()...)
				c.next = p.Next
				return nil
			}
			writersDone := make(chan struct{})
			drainerDone := make(chan struct{})
			go func() {
				defer close(drainerDone)
				for i := 0; ; i++ {
					select {
					case <-writersDone:
						return
					default:
					}
					for _, name := range tables {
						if err := pull(name, tc.limits[i%len(tc.limits)]); err != nil {
							errs <- err
							return
						}
					}
				}
			}()
			wg.Wait()
			close(writersDone)
			<-drainerDone
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}

			for _, name := range tables {
				c := cursors[name]
				st := status(t, h.d, name)
				require.Equal(t, st.Seq, st.Watermark)
				for i := 0; c.next < st.Watermark; i++ {
					require.NoError(t, pull(name, tc.limits[i%len(tc.limits)]))
				}
				// Exactly 1..seq, in order, each once.
				require.Len(t, c.rows, int(st.Seq), "%s", name)
				pos := map[key]uint64{}
				for i, r := range c.rows {
					require.Equal(t, uint64(i+1), r.Seq, "%s: gap or duplicate", name)
					k := key{name, r.Vals["writer"].Str, int64(r.Vals["time"].Num)}
					want, ok := written[k]
					require.True(t, ok, "%s: row %d was never written: %v", name, r.Seq, r.Vals)
					require.Equal(t, want, r.Vals, "%s: row %d", name, r.Seq)
					pos[k] = r.Seq
				}
				// Each writer's lines are numbered in its write order.
				total := 0
				for w, keys := range order[name] {
					total += len(keys)
					for i := 1; i < len(keys); i++ {
						require.Less(t, pos[keys[i-1]], pos[keys[i]], "%s: writer %d line %d", name, w, i)
					}
				}
				require.Equal(t, total, len(c.rows), "%s: every written line drained", name)
			}
		})
	}
}

// TestDrainPageFull checks ErrPageFull from a visit function: the page
// ends before that row (Next is the last x_seq returned, More is true) and
// the next page starts with it; on a page's first row it fails the Drain.
func TestDrainPageFull(t *testing.T) {
	h := openHarness(t, memstore.NewDisk(), DefaultConfig())
	defer h.close()
	_, _, err := h.s.CreateTable(context.Background(), "t", true)
	require.NoError(t, err)
	for n := 1; n <= 5; n++ {
		mustAppend(t, h.s, pt("t", int64(n), nil, fld("v", iv(int64(n)))))
	}
	drain := func(after uint64, rows int) ([]uint64, Page, error) {
		var seqs []uint64
		pg, err := h.d.Drain(context.Background(), DrainRequest{Table: "t", After: after, Limit: 10, Columns: []string{"x_seq"}},
			func(_ []Column, vals []Value) error {
				if len(seqs) == rows {
					return ErrPageFull
				}
				seqs = append(seqs, vals[0].Num)
				return nil
			})
		return seqs, pg, err
	}
	seqs, pg, err := drain(0, 2)
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2}, seqs)
	require.Equal(t, 2, pg.Rows)
	require.Equal(t, uint64(2), pg.Next)
	require.True(t, pg.More)
	seqs, pg, err = drain(pg.Next, 10)
	require.NoError(t, err)
	require.Equal(t, []uint64{3, 4, 5}, seqs)
	require.Equal(t, uint64(5), pg.Next)
	require.False(t, pg.More)
	_, _, err = drain(0, 0)
	require.ErrorIs(t, err, ErrPageFull)
}

// TestDrainOperation checks x_op and operation= (docs/contract.md#operation):
// a point's first fragment is its insert, every later one an update, in
// one batch or several, and a drain asking for one kind returns exactly
// those with next covering the others; the lag and the reported columns
// are part of every page (docs/contract.md#lag).
func TestDrainOperation(t *testing.T) {
	clk := newFakeClock(time.Unix(1_700_000_000, 0))
	h := openClockHarness(t, memstore.NewDisk(), DefaultConfig(), nil, clk)
	defer func() { h.close() }()
	_, _, err := h.s.CreateTable(context.Background(), "t", true)
	require.NoError(t, err)
	a1 := pt("t", 10, tg("host", "a"), fld("v", iv(1)))
	a2 := pt("t", 10, tg("host", "a"), fld("v", iv(2)))
	b1 := pt("t", 10, tg("host", "b"), fld("v", iv(3)))
	mustAppend(t, h.s, a1, a2, b1) // x_seq 1..3
	mustAppend(t, h.s, a2)         // x_seq 4
	clk.add(time.Minute)
	want := []uint64{0, 1, 0, 1} // x_op of x_seq 1..4
	p := drainPage(t, h.d, DrainRequest{Table: "t", Limit: 10})
	require.Len(t, p.vals, 4)
	for i, vs := range p.vals {
		require.Equal(t, Value{Kind: KindOp, Num: want[i]}, vs[len(vs)-1], "x_seq %d", i+1)
	}
	require.Zero(t, p.LagFragments)
	require.Zero(t, p.Lag)
	require.Equal(t, []Column{{"host", KindTag}, {"v", KindInt}}, p.NewColumns, "every column from after=0")

	for _, tc := range []struct {
		op   Operation
		seqs []uint64
	}{{OpInsert, []uint64{1, 3}}, {OpUpdate, []uint64{2, 4}}} {
		var got []uint64
		for after, more := uint64(0), true; more; {
			p := drainPage(t, h.d, DrainRequest{Table: "t", After: after, Limit: 1, Operation: tc.op})
			for _, vs := range p.vals {
				require.Equal(t, Value{Kind: KindOp, Num: uint64(tc.op - 1)}, vs[len(vs)-1])
			}
			got = append(got, p.seqs()...)
			if len(p.vals) > 0 {
				require.Equal(t, p.seqs()[0], p.Next, "a full page ends at its row")
				require.Equal(t, 4-p.Next, p.LagFragments)
				wantLag := time.Duration(0)
				if p.Next < 4 {
					wantLag = time.Minute // the oldest fragment above next was committed a minute ago
				}
				require.Equal(t, wantLag, p.Lag)
			}
			after, more = p.Next, p.More
		}
		require.Equal(t, tc.seqs, got)
	}
}

// TestDrainFilteredWait checks that a filtered long-poll waits for a
// fragment its filter admits (docs/contract.md#filters): fragments it
// leaves out move its read on, not its answer, which reports the
// request's cursor and a next covering them.
func TestDrainFilteredWait(t *testing.T) {
	h := openHarness(t, memstore.NewDisk(), DefaultConfig())
	defer func() { h.close() }()
	ctx := context.Background()
	_, _, err := h.s.CreateTable(ctx, "t", true)
	require.NoError(t, err)
	mustAppend(t, h.s, pt("t", 1, tg("host", "a"), fld("v", iv(1))))
	ch := goDrain(h.d, DrainRequest{Table: "t", Limit: 10, Wait: time.Hour,
		Filter: Filter{Tags: []TagFilter{{Key: "host", Values: []string{"b"}}}}})
	mustAppend(t, h.s, pt("t", 2, tg("host", "a"), fld("v", iv(2))))
	mustAppend(t, h.s, pt("t", 3, tg("host", "b"), fld("v", iv(3))))
	r := awaitDrain(t, ch, 30*time.Second, "the admitted fragment ends the long-poll")
	require.NoError(t, r.err)
	require.Equal(t, []uint64{3}, r.p.seqs(), "only the fragment the filter admits, not an empty page")
	require.Equal(t, uint64(0), r.p.After)
	require.Equal(t, uint64(3), r.p.Next)
}

// TestWaitingDrainsBounded: at most --max-waiting-drains long-polls wait
// at once; one more is answered at once, as with wait 0 (an empty page
// that keeps the cursor, counted), and a slot given back is taken again.
func TestWaitingDrainsBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxWaitingDrains = 2
	h := openHarness(t, memstore.NewDisk(), cfg)
	defer h.close()
	_, _, err := h.s.CreateTable(context.Background(), "t", true)
	require.NoError(t, err)
	mustAppend(t, h.s, pt("t", 1, tg("host", "a"), fld("v", iv(1))))
	poll := DrainRequest{Table: "t", After: 1, Limit: 10, Wait: time.Hour}
	waiting := []<-chan drainResult{goDrain(h.d, poll), goDrain(h.d, poll)}
	eventually(t, func() bool { return h.d.waiting.Load() == 2 }, "two long-polls waiting")

	r := awaitDrain(t, goDrain(h.d, poll), 10*time.Second, "a third long-poll is answered at once")
	require.NoError(t, r.err)
	require.Zero(t, r.p.Rows)
	require.Equal(t, uint64(1), r.p.Next, "the cursor kept")
	require.Equal(t, 1.0, testutil.ToFloat64(h.d.m.waitRefused))

	mustAppend(t, h.s, pt("t", 2, tg("host", "a"), fld("v", iv(2))))
	for _, ch := range waiting {
		r := awaitDrain(t, ch, 10*time.Second, "a write wakes the waiting long-polls")
		require.NoError(t, r.err)
		require.Equal(t, 1, r.p.Rows)
	}
	eventually(t, func() bool { return h.d.waiting.Load() == 0 }, "the slots given back")
	poll.After = 2
	again := goDrain(h.d, poll)
	eventually(t, func() bool { return h.d.waiting.Load() == 1 }, "a long-poll waits again")
	mustAppend(t, h.s, pt("t", 3, tg("host", "a"), fld("v", iv(3))))
	require.NoError(t, awaitDrain(t, again, 10*time.Second, "woken").err)
	require.Equal(t, 1.0, testutil.ToFloat64(h.d.m.waitRefused))
}
