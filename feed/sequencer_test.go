package feed

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store/memstore"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// --- Test helpers shared by the feed tests ----------------------------------

// tg builds a tag list from key, value pairs.
func tg(kv ...string) []Tag {
	tags := make([]Tag, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		tags = append(tags, Tag{Key: kv[i], Value: kv[i+1]})
	}
	return tags
}

// seriesKey renders tags as the canonical Point.Series: sorted by key,
// "k=v,k2=v2", each part escaped with AppendEscapedTag.
func seriesKey(tags []Tag) string {
	sorted := slices.Clone(tags)
	slices.SortFunc(sorted, func(a, b Tag) int { return strings.Compare(a.Key, b.Key) })
	var b []byte
	for i, tag := range sorted {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendEscapedTag(b, tag.Key)
		b = append(b, '=')
		b = AppendEscapedTag(b, tag.Value)
	}
	return string(b)
}

// pt builds a point with sorted tags and its canonical Series.
func pt(table string, ts int64, tags []Tag, fields ...PointField) Point {
	sorted := slices.Clone(tags)
	slices.SortFunc(sorted, func(a, b Tag) int { return strings.Compare(a.Key, b.Key) })
	return Point{Table: table, Series: seriesKey(sorted), Tags: sorted, Fields: fields, Time: ts}
}

func iv(x int64) Value    { return Value{Kind: KindInt, Num: uint64(x)} }
func uv(x uint64) Value   { return Value{Kind: KindUint, Num: x} }
func fv(x float64) Value  { return Value{Kind: KindFloat, Num: math.Float64bits(x)} }
func sv(x string) Value   { return Value{Kind: KindString, Str: x} }
func tagv(x string) Value { return Value{Kind: KindTag, Str: x} }
func tmv(ts int64) Value  { return Value{Kind: KindTime, Num: uint64(ts)} }

func bv(x bool) Value {
	if x {
		return Value{Kind: KindBool, Num: 1}
	}
	return Value{Kind: KindBool}
}

func fld(key string, v Value) PointField { return PointField{Key: key, Value: v} }

// appendBatch appends pts as one batch (numbering lines from 1 where Line is
// unset) and returns the result.
func appendBatch(t testing.TB, s *Sequencer, pts ...Point) Result {
	t.Helper()
	pts = slices.Clone(pts)
	for i := range pts {
		if pts[i].Line == 0 {
			pts[i].Line = i + 1
		}
	}
	res, err := s.Append(context.Background(), &Batch{Points: pts})
	require.NoError(t, err)
	return res
}

// appendWhileStalled is mustAppend for a write that must not wait for a
// store call another goroutine is stuck in: it fails, rather than hangs,
// when the write is not committed within the tests' deadline.
func appendWhileStalled(t testing.TB, s *Sequencer, pts ...Point) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testdeadline.Scale(10*time.Second))
	defer cancel()
	res, err := s.Append(ctx, &Batch{Points: pts})
	require.NoError(t, err, "a write waited for a stalled store call")
	require.Empty(t, res.Rejected)
}

// mustAppend appends pts as one batch and requires every point accepted.
func mustAppend(t testing.TB, s *Sequencer, pts ...Point) {
	t.Helper()
	res := appendBatch(t, s, pts...)
	require.Empty(t, res.Rejected)
	require.Equal(t, len(pts), res.Accepted)
}

// row is one drained row: its x_seq and its present values by column name
// (x_seq excluded).
type row struct {
	Seq  uint64
	Vals map[string]Value
}

// page is a drained page with its rows copied out.
type page struct {
	Page
	vals [][]Value
}

// rows returns the page's rows by column name; the page must hold x_seq.
func (p page) rows() []row {
	out := make([]row, 0, len(p.vals))
	for _, vs := range p.vals {
		r := row{Vals: map[string]Value{}}
		for i, c := range p.Columns {
			switch {
			case c.Name == "x_seq":
				r.Seq = vs[i].Num
			case c.Name == "x_op": // TestDrainOperation checks it
			case vs[i].Kind != 0:
				r.Vals[c.Name] = vs[i]
			}
		}
		out = append(out, r)
	}
	return out
}

func (p page) seqs() []uint64 {
	var out []uint64
	for _, r := range p.rows() {
		out = append(out, r.Seq)
	}
	return out
}

// tryDrain runs one drain and copies its rows.
func tryDrain(s *Drainer, req DrainRequest) (page, error) {
	var p page
	pg, err := s.Drain(context.Background(), req, func(_ []Column, v []Value) error {
		p.vals = append(p.vals, slices.Clone(v))
		return nil
	})
	p.Page = pg
	return p, err
}

// pageProblem checks the page invariants of docs/contract.md#paging for a page read after
// after with limit limit, and returns the first violation. Without an x_seq
// column only the envelope is checked.
func pageProblem(p page, after uint64, limit int) error {
	if p.Rows != len(p.vals) {
		return fmt.Errorf("Rows=%d but %d rows visited", p.Rows, len(p.vals))
	}
	if p.Rows > limit {
		return fmt.Errorf("%d rows exceed limit %d", p.Rows, limit)
	}
	if p.Watermark > p.Seq {
		return fmt.Errorf("watermark %d above seq %d", p.Watermark, p.Seq)
	}
	if p.More != (p.Next < p.Watermark) {
		return fmt.Errorf("more=%v with next=%d watermark=%d", p.More, p.Next, p.Watermark)
	}
	if p.Rows < limit && p.Next != p.Watermark {
		return fmt.Errorf("next=%d on a page of %d rows (limit %d), want the watermark %d", p.Next, p.Rows, limit, p.Watermark)
	}
	if !slices.ContainsFunc(p.Columns, func(c Column) bool { return c.Name == "x_seq" }) {
		return nil
	}
	seqs := p.seqs()
	prev := after
	for _, q := range seqs {
		if q <= prev {
			return fmt.Errorf("x_seq %d not above %d (after=%d): %v", q, prev, after, seqs)
		}
		if q > p.Watermark {
			return fmt.Errorf("x_seq %d above watermark %d", q, p.Watermark)
		}
		prev = q
	}
	if len(seqs) == limit && p.Next != seqs[len(seqs)-1] {
		return fmt.Errorf("next=%d on a full page, want its last x_seq %d", p.Next, seqs[len(seqs)-1])
	}
	return nil
}

// drainPage drains one page and checks its invariants.
func drainPage(t testing.TB, s *Drainer, req DrainRequest) page {
	t.Helper()
	p, err := tryDrain(s, req)
	require.NoError(t, err)
	require.NoError(t, pageProblem(p, req.After, req.Limit))
	return p
}

// drainAll drains table from after to the watermark, page by page, and
// returns every row.
func drainAll(t testing.TB, s *Drainer, table string, after uint64, limit int) []row {
	t.Helper()
	var out []row
	for range 100_000 {
		p := drainPage(t, s, DrainRequest{Table: table, After: after, Limit: limit})
		out = append(out, p.rows()...)
		if !p.More {
			return out
		}
		after = p.Next
	}
	t.Fatal("drain did not reach the watermark")
	return nil
}

// status returns a table's status.
func status(t testing.TB, s *Drainer, table string) SyncStatus {
	t.Helper()
	st, err := s.Status(table)
	require.NoError(t, err)
	return st
}

// columns returns a table's columns.
func columns(t testing.TB, s *Drainer, table string) []Column {
	t.Helper()
	info, err := s.Table(table)
	require.NoError(t, err)
	return info.Columns
}

// waitClosed waits for ch to be closed, failing after 10 s.
func waitClosed(t testing.TB, ch <-chan struct{}, msg string) {
	t.Helper()
	eventually(t, func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}, msg)
}

// stallHook installs a commit hook on h that blocks exactly one commit, the
// first one after arm is called, until release is called. It must be
// installed before the first write.
type stallHook struct {
	armed    atomic.Bool
	entered  chan struct{}
	released chan struct{}
	once     sync.Once
}

func installStall(h *harness) *stallHook {
	st := &stallHook{entered: make(chan struct{}), released: make(chan struct{})}
	h.s.testHookBeforeCommit = func() {
		if st.armed.CompareAndSwap(true, false) {
			close(st.entered)
			<-st.released
		}
	}
	return st
}

func (st *stallHook) arm()     { st.armed.Store(true) }
func (st *stallHook) release() { st.once.Do(func() { close(st.released) }) }

func TestSeriesKey(t *testing.T) {
	cases := []struct {
		name string
		tags []Tag
		want string
	}{
		{"no tags", nil, ""},
		{"one tag", tg("host", "a"), "host=a"},
		{"sorted by key", tg("z", "1", "a", "2", "m", "3"), "a=2,m=3,z=1"},
		{"escaped", tg("ho st", "a,b=c d"), `ho\ st=a\,b\=c\ d`},
		{"quotes and backslashes stay", tg("k", `a"b\c`), `k=a"b\c`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, seriesKey(tc.tags))
			require.Equal(t, tc.want, pt("t", 1, tc.tags).Series)
		})
	}
}

// --- Epochs, SET SYNC and TRUNCATE (docs/contract.md#epochs) ----------------------------------

// tableStep is one operation on table "t" followed by the status it must
// leave.
type tableStep struct {
	op   string // create_on, create_off, sync_on, sync_off, truncate, write
	n    int    // rows for write
	want SyncStatus
}

func TestEpochs(t *testing.T) {
	on := func(epoch, seq uint64) SyncStatus {
		return SyncStatus{Enabled: true, Epoch: epoch, Seq: seq, Watermark: seq, Horizon: 1}
	}
	off := func(epoch, seq uint64) SyncStatus {
		return SyncStatus{Epoch: epoch, Seq: seq, Watermark: seq, Horizon: 1}
	}
	cases := []struct {
		name  string
		steps []tableStep
	}{
		{"created with sync starts at epoch 1", []tableStep{
			{op: "create_on", want: on(1, 0)},
			{op: "write", n: 3, want: on(1, 3)},
		}},
		{"created without sync stays at epoch 0", []tableStep{
			{op: "create_off", want: off(0, 0)},
			{op: "write", n: 3, want: off(0, 0)},
			{op: "sync_off", want: off(0, 0)},
		}},
		{"enabling sync bumps the epoch", []tableStep{
			{op: "create_off", want: off(0, 0)},
			{op: "write", n: 2, want: off(0, 0)},
			{op: "sync_on", want: on(1, 0)},
			{op: "write", n: 3, want: on(1, 3)},
		}},
		{"disabling sync keeps the epoch", []tableStep{
			{op: "create_on", want: on(1, 0)},
			{op: "write", n: 2, want: on(1, 2)},
			{op: "sync_off", want: off(1, 2)},
			{op: "write", n: 2, want: off(1, 2)},
			{op: "sync_off", want: off(1, 2)},
			{op: "sync_on", want: on(2, 2)},
			{op: "write", n: 1, want: on(2, 3)},
		}},
		{"enabling twice is a no-op", []tableStep{
			{op: "create_off", want: off(0, 0)},
			{op: "sync_on", want: on(1, 0)},
			{op: "write", n: 2, want: on(1, 2)},
			{op: "sync_on", want: on(1, 2)},
			{op: "create_on", want: on(1, 2)},
		}},
		{"truncate bumps the epoch and keeps seq", []tableStep{
			{op: "create_on", want: on(1, 0)},
			{op: "write", n: 4, want: on(1, 4)},
			{op: "truncate", want: on(2, 4)},
			{op: "write", n: 2, want: on(2, 6)},
			{op: "truncate", want: on(3, 6)},
			{op: "truncate", want: on(4, 6)},
			{op: "write", n: 1, want: on(4, 7)},
		}},
		{"truncate after set sync off then on", []tableStep{
			{op: "create_on", want: on(1, 0)},
			{op: "write", n: 2, want: on(1, 2)},
			{op: "sync_off", want: off(1, 2)},
			{op: "sync_on", want: on(2, 2)},
			{op: "truncate", want: on(3, 2)},
			{op: "write", n: 2, want: on(3, 4)},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := openHarness(t, memstore.NewDisk(), DefaultConfig())
			defer h.close()
			ctx := context.Background()
			ts := int64(0)
			for i, step := range tc.steps {
				before, _ := h.d.Status("t")
				var got SyncStatus
				var err error
				switch step.op {
				case "create_on", "create_off":
					var created bool
					created, got, err = h.s.CreateTable(ctx, "t", step.op == "create_on")
					require.NoError(t, err)
					require.Equal(t, i == 0, created, "step %d: created", i)
				case "sync_on", "sync_off":
					got, err = h.s.SetSync(ctx, "t", step.op == "sync_on")
					require.NoError(t, err)
				case "truncate":
					got, err = h.s.Truncate(ctx, "t")
					require.NoError(t, err)
					// The table is empty: a drain from 0 returns nothing and
					// steps straight to the watermark.
					p := drainPage(t, h.d, DrainRequest{Table: "t", Limit: 10})
					require.Zero(t, p.Rows, "step %d: rows after truncate", i)
					require.Equal(t, got.Watermark, p.Next, "step %d: next after truncate", i)
					require.Equal(t, []Column{{Name: "time", Kind: KindTime}}, columns(t, h.d, "t"), "step %d: columns after truncate", i)
				case "write":
					var pts []Point
					for range step.n {
						ts++
						pts = append(pts, pt("t", ts, tg("host", "a"), fld("v", iv(ts))))
					}
					mustAppend(t, h.s, pts...)
					got = status(t, h.d, "t")
					if got.Enabled {
						// The new rows carry the numbers right above the
						// old seq, also after a truncate.
						rows := drainAll(t, h.d, "t", before.Seq, 100)
						require.Len(t, rows, step.n, "step %d", i)
						for j, r := range rows {
							require.Equal(t, before.Seq+uint64(j)+1, r.Seq, "step %d row %d", i, j)
							require.Equal(t, iv(ts-int64(step.n)+int64(j)+1), r.Vals["v"], "step %d row %d", i, j)
						}
					}
				default:
					t.Fatalf("unknown op %q", step.op)
				}
				require.Equal(t, step.want, got, "step %d (%s): returned status", i, step.op)
				require.Equal(t, step.want, status(t, h.d, "t"), "step %d (%s): Status", i, step.op)
				if got.Enabled {
					// The current epoch is accepted; any other is stale.
					_, err := tryDrain(h.d, DrainRequest{Table: "t", Limit: 1, Epoch: got.Epoch, HasEpoch: true})
					require.NoError(t, err, "step %d", i)
					_, err = tryDrain(h.d, DrainRequest{Table: "t", Limit: 1, Epoch: got.Epoch - 1, HasEpoch: true})
					require.ErrorIs(t, err, ErrStaleEpoch, "step %d", i)
				}
			}
		})
	}
}

func TestTableOperationsOnUnknownTable(t *testing.T) {
	h := openHarness(t, memstore.NewDisk(), DefaultConfig())
	defer h.close()
	ctx := context.Background()
	cases := []struct {
		name string
		run  func() error
	}{
		{"set sync", func() error { _, err := h.s.SetSync(ctx, "nope", true); return err }},
		{"truncate", func() error { _, err := h.s.Truncate(ctx, "nope"); return err }},
		{"drop", func() error { return h.s.Drop(ctx, "nope") }},
		{"status", func() error { _, err := h.d.Status("nope"); return err }},
		{"table", func() error { _, err := h.d.Table("nope"); return err }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, tc.run(), ErrTableNotFound)
		})
	}
	require.Empty(t, h.d.Tables(), "no operation created the table")
}

// --- Crash and restart (docs/contract.md#x-seq: x_seq never runs backwards) ------------------

// crashSetup brings a harness into the state a crash test copies. The
// returned function, when not nil, runs after the copy (before the original
// harness is closed).
type crashSetup func(t *testing.T, disk *memstore.Disk, cfg Config) (*harness, func())

func TestCrashKeepsSequence(t *testing.T) {
	ctx := context.Background()
	write := func(t testing.TB, h *harness, table string, from, n int) {
		t.Helper()
		var pts []Point
		for i := from; i < from+n; i++ {
			pts = append(pts, pt(table, int64(i), tg("host", fmt.Sprint("h", i%3)), fld("v", iv(int64(i))), fld("s", sv(fmt.Sprint("s", i)))))
		}
		mustAppend(t, h.s, pts...)
	}
	cases := []struct {
		name  string
		cfg   func(*Config)
		setup crashSetup
	}{
		{name: "sync table with rows", setup: func(t *testing.T, disk *memstore.Disk, cfg Config) (*harness, func()) {
			h := openHarness(t, disk, cfg)
			_, _, err := h.s.CreateTable(ctx, "a", true)
			require.NoError(t, err)
			write(t, h, "a", 1, 3)
			write(t, h, "a", 4, 70)
			write(t, h, "a", 74, 1)
			return h, nil
		}},
		{name: "coalesced rows", setup: func(t *testing.T, disk *memstore.Disk, cfg Config) (*harness, func()) {
			h := openHarness(t, disk, cfg)
			_, _, err := h.s.CreateTable(ctx, "a", false)
			require.NoError(t, err)
			mustAppend(t, h.s, pt("a", 5, tg("host", "x"), fld("v", iv(1)), fld("s", sv("off"))))
			_, err = h.s.SetSync(ctx, "a", true)
			require.NoError(t, err)
			mustAppend(t, h.s, pt("a", 5, tg("host", "x"), fld("v", iv(2))), pt("a", 6, tg("host", "x"), fld("v", iv(3))))
			mustAppend(t, h.s, pt("a", 6, tg("host", "x"), fld("s", sv("on"))))
			return h, nil
		}},
		{name: "after a clean restart", setup: func(t *testing.T, disk *memstore.Disk, cfg Config) (*harness, func()) {
			h := openHarness(t, disk, cfg)
			_, _, err := h.s.CreateTable(ctx, "a", true)
			require.NoError(t, err)
			write(t, h, "a", 1, 5)
			h.close()
			h = openHarness(t, disk, cfg)
			write(t, h, "a", 6, 5)
			return h, nil
		}},
		{name: "after truncate", setup: func(t *testing.T, disk *memstore.Disk, cfg Config) (*harness, func()) {
			h := openHarness(t, disk, cfg)
			_, _, err := h.s.CreateTable(ctx, "a", true)
			require.NoError(t, err)
			write(t, h, "a", 1, 5)
			_, err = h.s.Truncate(ctx, "a")
			require.NoError(t, err)
			write(t, h, "a", 6, 2)
			return h, nil
		}},
		{name: "after drop and re-create", setup: func(t *testing.T, disk *memstore.Disk, cfg Config) (*harness, func()) {
			h := openHarness(t, disk, cfg)
			_, _, err := h.s.CreateTable(ctx, "a", true)
			require.NoError(t, err)
			write(t, h, "a", 1, 5)
			require.NoError(t, h.s.Drop(ctx, "a"))
			_, _, err = h.s.CreateTable(ctx, "a", true)
			require.NoError(t, err)
			write(t, h, "a", 6, 2)
			return h, nil
		}},
		{name: "tables auto-created by writes", cfg: func(c *Config) { c.SyncTables = []string{"cpu*"} }, setup: func(t *testing.T, disk *memstore.Disk, cfg Config) (*harness, func()) {
			h := openHarness(t, disk, cfg)
			write(t, h, "cpu_1", 1, 3)
			write(t, h, "mem", 1, 3)
			write(t, h, "cpu_2", 1, 1)
			return h, nil
		}},
		{name: "sync enabled on an existing table", setup: func(t *testing.T, disk *memstore.Disk, cfg Config) (*harness, func()) {
			h := openHarness(t, disk, cfg)
			write(t, h, "a", 1, 3)
			_, err := h.s.SetSync(ctx, "a", true)
			require.NoError(t, err)
			write(t, h, "a", 4, 3)
			return h, nil
		}},
		{name: "commit in flight", setup: func(t *testing.T, disk *memstore.Disk, cfg Config) (*harness, func()) {
			h := openHarness(t, disk, cfg)
			stall := installStall(h)
			_, _, err := h.s.CreateTable(ctx, "a", true)
			require.NoError(t, err)
			write(t, h, "a", 1, 4)
			stall.arm()
			p, err := h.s.Submit(ctx, &Batch{Points: []Point{
				pt("a", 100, tg("host", "x"), fld("v", iv(100))),
				pt("a", 101, tg("host", "x"), fld("v", iv(101))),
			}})
			require.NoError(t, err)
			waitClosed(t, stall.entered, "the second commit reaches the hook")
			st := status(t, h.d, "a")
			require.Equal(t, uint64(6), st.Seq, "the stalled numbers are handed out")
			require.Equal(t, uint64(4), st.Watermark)
			return h, func() {
				stall.release()
				res, err := p.Wait(ctx)
				require.NoError(t, err)
				require.Equal(t, 2, res.Accepted)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			h, after := tc.setup(t, memstore.NewDisk(), cfg)
			type tableState struct {
				info TableInfo
				rows []row
			}
			before := map[string]tableState{}
			for _, info := range h.d.Tables() {
				ts := tableState{info: info}
				if info.Sync.Enabled {
					ts.rows = drainAll(t, h.d, info.Name, 0, 7)
					for _, r := range ts.rows {
						require.LessOrEqual(t, r.Seq, info.Sync.Seq)
					}
				}
				before[info.Name] = ts
			}
			require.NotEmpty(t, before)

			// Crash: copy the directory of the live store and never close
			// the copied store.
			copied := h.disk.Clone()
			defer func() {
				if after != nil {
					after()
				}
				h.close()
			}()

			c := openHarness(t, copied, cfg)
			defer c.close()
			require.Len(t, c.d.Tables(), len(before))
			for name, old := range before {
				st := status(t, c.d, name)
				require.Equal(t, old.info.Sync.Enabled, st.Enabled, "%s: sync", name)
				require.Equal(t, old.info.Sync.Epoch, st.Epoch, "%s: epoch", name)
				require.GreaterOrEqual(t, st.Seq, old.info.Sync.Seq, "%s: seq ran backwards", name)
				require.Equal(t, st.Seq, st.Watermark, "%s: nothing in flight after the crash", name)
				require.Equal(t, old.info.Columns, columns(t, c.d, name), "%s: columns", name)
				if !st.Enabled {
					continue
				}
				require.Equal(t, old.rows, drainAll(t, c.d, name, 0, 7), "%s: every committed row survives", name)

				mustAppend(t, c.s, pt(name, 1_000_000, tg("host", "new"), fld("v", iv(-1))))
				rows := drainAll(t, c.d, name, old.info.Sync.Seq, 10)
				require.Len(t, rows, 1, "%s: only the new row lies above the old seq", name)
				require.Greater(t, rows[0].Seq, old.info.Sync.Seq, "%s: x_seq handed out twice", name)
				require.Greater(t, rows[0].Seq, st.Seq, "%s: new x_seq not above the recovered seq", name)
				require.Equal(t, iv(-1), rows[0].Vals["v"])
			}
		})
	}
}

func TestCleanRestart(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name  string
		cfg   func(*Config)
		setup func(t testing.TB, s *Sequencer)
		// Table "t" gets one more row after the restart.
		extra Point
	}{
		{
			name: "sync table",
			setup: func(t testing.TB, s *Sequencer) {
				_, _, err := s.CreateTable(ctx, "t", true)
				require.NoError(t, err)
				mustAppend(t, s, pt("t", 1, tg("host", "a"), fld("v", iv(1))), pt("t", 2, tg("host", "b"), fld("f", fv(2.5))))
				mustAppend(t, s, pt("t", 3, nil, fld("v", iv(3)), fld("ok", bv(true)), fld("u", uv(7))))
			},
			extra: pt("t", 4, tg("host", "a"), fld("v", iv(4))),
		},
		{
			name: "sync off table",
			setup: func(t testing.TB, s *Sequencer) {
				mustAppend(t, s, pt("t", 1, tg("host", "a"), fld("v", iv(1))))
			},
			extra: pt("t", 2, tg("host", "a"), fld("v", iv(2))),
		},
		{
			name: "sync turned off",
			setup: func(t testing.TB, s *Sequencer) {
				_, _, err := s.CreateTable(ctx, "t", true)
				require.NoError(t, err)
				mustAppend(t, s, pt("t", 1, tg("host", "a"), fld("v", iv(1))))
				_, err = s.SetSync(ctx, "t", false)
				require.NoError(t, err)
			},
			extra: pt("t", 2, tg("host", "a"), fld("v", iv(2))),
		},
		{
			name: "after truncate",
			setup: func(t testing.TB, s *Sequencer) {
				_, _, err := s.CreateTable(ctx, "t", true)
				require.NoError(t, err)
				mustAppend(t, s, pt("t", 1, tg("host", "a"), fld("v", iv(1))), pt("t", 2, tg("host", "a"), fld("v", iv(2))))
				_, err = s.Truncate(ctx, "t")
				require.NoError(t, err)
				mustAppend(t, s, pt("t", 3, tg("dc", "x"), fld("w", sv("three"))))
			},
			extra: pt("t", 4, tg("dc", "x"), fld("w", sv("four"))),
		},
		{
			name: "coalesced rows",
			setup: func(t testing.TB, s *Sequencer) {
				_, _, err := s.CreateTable(ctx, "t", false)
				require.NoError(t, err)
				mustAppend(t, s, pt("t", 1, tg("host", "a"), fld("v", iv(1)), fld("w", sv("off"))))
				_, err = s.SetSync(ctx, "t", true)
				require.NoError(t, err)
				mustAppend(t, s, pt("t", 1, tg("host", "a"), fld("v", iv(2))))
				mustAppend(t, s, pt("t", 1, tg("host", "a"), fld("v", iv(3))))
			},
			extra: pt("t", 1, tg("host", "a"), fld("v", iv(4))),
		},
		{
			// The series dictionary is rebuilt from disk: with a limit of
			// one series, the same (escaped) tag set must map to the same
			// series after the restart.
			name: "escaped tag set keeps its series",
			cfg:  func(c *Config) { c.MaxSeriesPerTable = 1 },
			setup: func(t testing.TB, s *Sequencer) {
				_, _, err := s.CreateTable(ctx, "t", true)
				require.NoError(t, err)
				mustAppend(t, s, pt("t", 1, tg("host", "a b,c=d", "z k", "=,"), fld("v", iv(1))))
			},
			extra: pt("t", 2, tg("host", "a b,c=d", "z k", "=,"), fld("v", iv(2))),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			disk := memstore.NewDisk()
			h := openHarness(t, disk, cfg)
			tc.setup(t, h.s)
			old := status(t, h.d, "t")
			oldCols := columns(t, h.d, "t")
			var oldRows []row
			if old.Enabled {
				oldRows = drainAll(t, h.d, "t", 0, 10)
			}
			h.close()

			h = openHarness(t, disk, cfg)
			defer h.close()
			require.Equal(t, old, status(t, h.d, "t"), "status survives a clean restart")
			require.Equal(t, oldCols, columns(t, h.d, "t"))
			if old.Enabled {
				require.Equal(t, oldRows, drainAll(t, h.d, "t", 0, 10))
			}
			mustAppend(t, h.s, tc.extra)
			st := status(t, h.d, "t")
			if !old.Enabled {
				require.Equal(t, old.Seq, st.Seq, "sync off: no x_seq")
				return
			}
			// The lease was released on the clean stop: no number is burnt.
			require.Equal(t, old.Seq+1, st.Seq)
			rows := drainAll(t, h.d, "t", old.Seq, 10)
			require.Len(t, rows, 1)
			require.Equal(t, old.Seq+1, rows[0].Seq)
			require.Equal(t, tc.extra.Fields[0].Value, rows[0].Vals[tc.extra.Fields[0].Key])
		})
	}
}

// --- DROP + re-create ----------------------------------------------------------

func TestDropAndRecreate(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		cfg     func(*Config)
		restart bool // restart between drop and re-create
		byWrite bool // re-create by a write to a sync glob
		reject  bool // a rejected write precedes the re-create
		rounds  int
	}{
		{name: "re-create", rounds: 1},
		{name: "restart between drop and re-create", restart: true, rounds: 1},
		{name: "re-created by a write", cfg: func(c *Config) { c.SyncTables = []string{"t"} }, byWrite: true, rounds: 1},
		{name: "re-created by a write after a restart", cfg: func(c *Config) { c.SyncTables = []string{"t"} }, byWrite: true, restart: true, rounds: 1},
		{name: "rejected write before re-create", cfg: func(c *Config) { c.SyncTables = []string{"t"} }, reject: true, rounds: 1},
		{name: "rejected write before re-create by a write", cfg: func(c *Config) { c.SyncTables = []string{"t"} }, reject: true, byWrite: true, restart: true, rounds: 1},
		{name: "three rounds", rounds: 3},
		{name: "three rounds with restarts", restart: true, rounds: 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			disk := memstore.NewDisk()
			h := openHarness(t, disk, cfg)
			defer func() { h.close() }()
			_, _, err := h.s.CreateTable(ctx, "t", true)
			require.NoError(t, err)
			mustAppend(t, h.s, pt("t", 1, tg("host", "old"), fld("old", iv(1))), pt("t", 2, tg("host", "old"), fld("old", iv(2))))
			mustAppend(t, h.s, pt("other", 1, nil, fld("v", iv(1))))
			ts := int64(10)
			for round := range tc.rounds {
				old := status(t, h.d, "t")
				require.NoError(t, h.s.Drop(ctx, "t"))

				_, err := h.d.Status("t")
				require.ErrorIs(t, err, ErrTableNotFound, "round %d", round)
				_, err = tryDrain(h.d, DrainRequest{Table: "t", Limit: 10})
				require.ErrorIs(t, err, ErrTableNotFound, "round %d", round)
				require.ErrorIs(t, h.s.Drop(ctx, "t"), ErrTableNotFound, "round %d", round)
				require.Len(t, h.d.Tables(), 1, "round %d", round)
				require.Equal(t, "other", h.d.Tables()[0].Name)

				if tc.restart {
					h.close()
					h = openHarness(t, disk, cfg)
					_, err := h.d.Status("t")
					require.ErrorIs(t, err, ErrTableNotFound, "round %d: dropped after restart", round)
				}

				if tc.reject {
					res := appendBatch(t, h.s, pt("t", 1, tg("k", "x"), fld("k", iv(1))))
					require.Len(t, res.Rejected, 1)
					_, err := h.d.Status("t")
					require.ErrorIs(t, err, ErrTableNotFound, "round %d: a rejected line creates no table", round)
				}

				ts++
				newRow := pt("t", ts, tg("dc", "new"), fld("new", sv(fmt.Sprint("r", round))))
				if tc.byWrite {
					mustAppend(t, h.s, newRow)
				} else {
					created, st, err := h.s.CreateTable(ctx, "t", true)
					require.NoError(t, err)
					require.True(t, created, "round %d", round)
					require.True(t, st.Enabled)
					require.Greater(t, st.Epoch, old.Epoch, "round %d: epoch", round)
					require.GreaterOrEqual(t, st.Seq, old.Seq, "round %d: seq", round)
					require.Equal(t, st.Seq, st.Watermark)
					// The old rows and columns are gone.
					p := drainPage(t, h.d, DrainRequest{Table: "t", Limit: 10, Epoch: st.Epoch, HasEpoch: true})
					require.Zero(t, p.Rows, "round %d", round)
					require.Equal(t, st.Watermark, p.Next)
					require.Equal(t, []Column{{Name: "time", Kind: KindTime}}, columns(t, h.d, "t"))
					mustAppend(t, h.s, newRow)
				}
				st := status(t, h.d, "t")
				require.True(t, st.Enabled)
				require.Greater(t, st.Epoch, old.Epoch, "round %d: epoch", round)
				require.Greater(t, st.Seq, old.Seq, "round %d: seq", round)
				rows := drainAll(t, h.d, "t", 0, 10)
				require.Len(t, rows, 1, "round %d: only the new row", round)
				require.Greater(t, rows[0].Seq, old.Seq, "round %d: x_seq reused", round)
				require.Equal(t, map[string]Value{
					"time": tmv(ts), "dc": tagv("new"), "new": sv(fmt.Sprint("r", round)),
				}, rows[0].Vals)
				require.Equal(t, []Column{
					{Name: "time", Kind: KindTime}, {Name: "dc", Kind: KindTag}, {Name: "new", Kind: KindString},
				}, columns(t, h.d, "t"))
				// The old schema is gone too: "old" may now be a string.
				mustAppend(t, h.s, pt("t", ts, tg("dc", "new"), fld("old", sv("x"))))
			}
			require.Equal(t, SyncStatus{Horizon: 1}, status(t, h.d, "other"), "the other table is untouched")
		})
	}
}

// --- Schema rules (docs/contract.md#columns) ---------------------------------------------------------

func TestSchemaRejects(t *testing.T) {
	type reject struct {
		line int
		key  string
		err  error
	}
	cases := []struct {
		name     string
		cfg      func(*Config)
		setup    []Point // accepted, one batch
		batch    []Point // Line set by the case
		rejects  []reject
		accepted int
		columns  []Column
	}{
		{
			name:  "field type conflict",
			setup: []Point{pt("t", 1, tg("host", "a"), fld("v", iv(1)))},
			batch: []Point{
				withLine(7, pt("t", 2, tg("host", "a"), fld("v", fv(2)), fld("extra", iv(1)))),
				withLine(8, pt("t", 3, tg("host", "a"), fld("v", iv(3)))),
				withLine(9, pt("t", 4, tg("host", "b"), fld("v", sv("x")))),
				withLine(10, pt("t", 5, tg("host", "a"), fld("w", fv(5)))),
			},
			rejects:  []reject{{7, "v", ErrFieldTypeConflict}, {9, "v", ErrFieldTypeConflict}},
			accepted: 2,
			columns:  []Column{{"time", KindTime}, {"host", KindTag}, {"v", KindInt}, {"w", KindFloat}},
		},
		{
			// The columns of the previous point's keys are reused by
			// position (table.shapeKeys): kinds are still checked, and
			// other orders and key sets find their own columns.
			name:  "field shapes",
			setup: []Point{pt("t", 1, tg("host", "a"), fld("x", iv(1)), fld("y", iv(1)))},
			batch: []Point{
				withLine(1, pt("t", 2, tg("host", "a"), fld("x", iv(2)), fld("y", fv(2)))),
				withLine(2, pt("t", 3, tg("host", "a"), fld("y", iv(3)), fld("x", iv(30)))),
				withLine(3, pt("t", 4, tg("host", "a"), fld("y", iv(4)), fld("x", iv(40)), fld("z", sv("z")))),
				withLine(4, pt("t", 5, tg("host", "a"), fld("y", iv(5)), fld("x", sv("x")), fld("z", sv("z")))),
				withLine(5, pt("t", 6, tg("host", "a"), fld("x", iv(6)), fld("y", iv(60)))),
				withLine(6, pt("t", 7, tg("host", "a"), fld("z", sv("7")))),
				withLine(7, pt("t", 8, tg("host", "a"), fld("x", iv(8)), fld("y", iv(80)))),
			},
			rejects:  []reject{{1, "y", ErrFieldTypeConflict}, {4, "x", ErrFieldTypeConflict}},
			accepted: 5,
			columns:  []Column{{"time", KindTime}, {"host", KindTag}, {"x", KindInt}, {"y", KindInt}, {"z", KindString}},
		},
		{
			name: "field type conflict within one batch",
			batch: []Point{
				withLine(1, pt("t", 1, nil, fld("v", bv(true)))),
				withLine(2, pt("t", 2, nil, fld("v", uv(2)))),
				withLine(3, pt("t", 3, nil, fld("v", bv(false)))),
			},
			rejects:  []reject{{2, "v", ErrFieldTypeConflict}},
			accepted: 2,
			columns:  []Column{{"time", KindTime}, {"v", KindBool}},
		},
		{
			name:  "tag then field",
			setup: []Point{pt("t", 1, tg("host", "a"), fld("v", iv(1)))},
			batch: []Point{
				withLine(3, pt("t", 2, tg("dc", "x"), fld("host", sv("b")), fld("new", iv(1)))),
				withLine(4, pt("t", 3, tg("host", "a"), fld("v", iv(3)))),
			},
			rejects:  []reject{{3, "host", ErrTagFieldConflict}},
			accepted: 1,
			columns:  []Column{{"time", KindTime}, {"host", KindTag}, {"v", KindInt}},
		},
		{
			name:  "field then tag",
			setup: []Point{pt("t", 1, tg("host", "a"), fld("v", iv(1)))},
			batch: []Point{
				withLine(5, pt("t", 2, tg("host", "b", "v", "x", "dc", "y"), fld("w", iv(1)))),
				withLine(6, pt("t", 3, tg("host", "b"), fld("v", iv(3)))),
			},
			rejects:  []reject{{5, "v", ErrTagFieldConflict}},
			accepted: 1,
			columns:  []Column{{"time", KindTime}, {"host", KindTag}, {"v", KindInt}},
		},
		{
			name: "tag and field in one line",
			batch: []Point{
				withLine(1, pt("t", 1, tg("k", "x"), fld("k", iv(1)))),
				withLine(2, pt("t", 2, tg("host", "a"), fld("v", iv(2)))),
			},
			rejects:  []reject{{1, "k", ErrTagFieldConflict}},
			accepted: 1,
			columns:  []Column{{"time", KindTime}, {"host", KindTag}, {"v", KindInt}},
		},
		{
			name: "tag and field in one batch",
			batch: []Point{
				withLine(1, pt("t", 1, tg("k", "x"), fld("v", iv(1)))),
				withLine(2, pt("t", 2, nil, fld("k", iv(2)))),
				withLine(3, pt("t", 3, nil, fld("j", iv(3)))),
				withLine(4, pt("t", 4, tg("j", "y"), fld("v", iv(4)))),
			},
			rejects:  []reject{{2, "k", ErrTagFieldConflict}, {4, "j", ErrTagFieldConflict}},
			accepted: 2,
			columns:  []Column{{"time", KindTime}, {"k", KindTag}, {"v", KindInt}, {"j", KindInt}},
		},
		{
			name:  "column limit",
			cfg:   func(c *Config) { c.MaxColumnsPerTable = 3 },
			setup: []Point{pt("t", 1, tg("host", "a"), fld("v", iv(1)))},
			batch: []Point{
				withLine(1, pt("t", 2, tg("host", "a"), fld("a", iv(1)), fld("b", iv(1)))),
				withLine(2, pt("t", 3, tg("host", "a", "dc", "x"), fld("v", iv(1)), fld("a", iv(2)))),
				withLine(3, pt("t", 4, tg("host", "a"), fld("a", iv(3)))),
				withLine(4, pt("t", 5, tg("host", "a"), fld("b", iv(4)))),
				withLine(5, pt("t", 6, tg("host", "b"), fld("v", iv(5)), fld("a", iv(5)))),
			},
			rejects:  []reject{{1, "", ErrColumnLimit}, {2, "", ErrColumnLimit}, {4, "", ErrColumnLimit}},
			accepted: 2,
			columns:  []Column{{"time", KindTime}, {"host", KindTag}, {"v", KindInt}, {"a", KindInt}},
		},
		{
			name:  "series limit",
			cfg:   func(c *Config) { c.MaxSeriesPerTable = 2 },
			setup: []Point{pt("t", 1, tg("host", "a"), fld("v", iv(1))), pt("t", 1, tg("host", "b"), fld("v", iv(1)))},
			batch: []Point{
				withLine(1, pt("t", 2, tg("host", "c"), fld("v", iv(2)))),
				withLine(2, pt("t", 2, tg("host", "a", "dc", "x"), fld("w", iv(2)))),
				withLine(3, pt("t", 2, nil, fld("v", iv(2)))),
				withLine(4, pt("t", 2, tg("host", "b"), fld("v", iv(2)), fld("w", fv(2)))),
			},
			rejects:  []reject{{1, "", ErrSeriesLimit}, {2, "", ErrSeriesLimit}, {3, "", ErrSeriesLimit}},
			accepted: 1,
			columns:  []Column{{"time", KindTime}, {"host", KindTag}, {"v", KindInt}, {"w", KindFloat}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			h := openHarness(t, memstore.NewDisk(), cfg)
			defer h.close()
			_, _, err := h.s.CreateTable(context.Background(), "t", true)
			require.NoError(t, err)
			if len(tc.setup) > 0 {
				mustAppend(t, h.s, tc.setup...)
			}
			seq := status(t, h.d, "t").Seq

			res := appendBatch(t, h.s, tc.batch...)
			require.Equal(t, tc.accepted, res.Accepted)
			require.Len(t, res.Rejected, len(tc.rejects))
			for i, want := range tc.rejects {
				got := res.Rejected[i]
				require.ErrorIs(t, got, want.err, "reject %d: %v", i, got)
				require.Equal(t, want.line, got.Line, "reject %d: %v", i, got)
				if want.key != "" {
					require.Equal(t, want.key, got.Key, "reject %d", i)
				}
				require.Contains(t, got.Error(), fmt.Sprintf("line %d", want.line))
			}
			require.Equal(t, tc.columns, columns(t, h.d, "t"), "rejected points add no column")

			// Exactly the accepted lines of the batch were stamped, in line
			// order, and carry their own values.
			rejected := map[int]bool{}
			for _, r := range tc.rejects {
				rejected[r.line] = true
			}
			var want []Point
			for _, p := range tc.batch {
				if !rejected[p.Line] {
					want = append(want, p)
				}
			}
			require.Equal(t, seq+uint64(tc.accepted), status(t, h.d, "t").Seq)
			rows := drainAll(t, h.d, "t", seq, 100)
			require.Len(t, rows, len(want))
			for i, r := range rows {
				require.Equal(t, seq+uint64(i)+1, r.Seq)
				require.Equal(t, tmv(want[i].Time), r.Vals["time"])
				for _, f := range want[i].Fields {
					require.Equal(t, f.Value, r.Vals[f.Key], "row %d field %s", i, f.Key)
				}
				for _, tag := range want[i].Tags {
					require.Equal(t, tagv(tag.Value), r.Vals[tag.Key], "row %d tag %s", i, tag.Key)
				}
			}
		})
	}
}

// TestColumnOrder checks docs/contract.md#columns: columns are time, then every tag, then
// every field, each in order of first appearance, in SHOW COLUMNS and in a
// drain's default columns, also after a restart.
func TestColumnOrder(t *testing.T) {
	cases := []struct {
		name    string
		batches [][]Point
		want    []Column
	}{
		{
			name:    "one line",
			batches: [][]Point{{pt("t", 1, tg("host", "a", "dc", "x"), fld("v", iv(1)), fld("a", sv("s")))}},
			want:    []Column{{"time", KindTime}, {"dc", KindTag}, {"host", KindTag}, {"v", KindInt}, {"a", KindString}},
		},
		{
			name: "tag first seen after fields",
			batches: [][]Point{{
				pt("t", 1, tg("host", "a"), fld("v", iv(1))),
				pt("t", 2, tg("host", "a", "zone", "z"), fld("w", fv(2))),
			}},
			want: []Column{{"time", KindTime}, {"host", KindTag}, {"zone", KindTag}, {"v", KindInt}, {"w", KindFloat}},
		},
		{
			name: "tags first seen in later batches",
			batches: [][]Point{
				{pt("t", 1, nil, fld("v", iv(1)), fld("b", bv(true)))},
				{pt("t", 2, tg("zone", "z"), fld("v", iv(2)))},
				{pt("t", 3, tg("host", "h", "zone", "z"), fld("c", uv(3)))},
			},
			want: []Column{{"time", KindTime}, {"zone", KindTag}, {"host", KindTag}, {"v", KindInt}, {"b", KindBool}, {"c", KindUint}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := openHarness(t, memstore.NewDisk(), DefaultConfig())
			defer func() { h.close() }()
			_, _, err := h.s.CreateTable(context.Background(), "t", true)
			require.NoError(t, err)
			var written []Point
			for _, b := range tc.batches {
				mustAppend(t, h.s, b...)
				written = append(written, b...)
			}
			check := func(h *harness) {
				t.Helper()
				require.Equal(t, tc.want, columns(t, h.d, "t"))
				p := drainPage(t, h.d, DrainRequest{Table: "t", Limit: 100})
				require.Equal(t, append(slices.Clone(tc.want), Column{"x_seq", KindSeq}, Column{"x_op", KindOp}), p.Columns)
				require.Len(t, p.vals, len(written))
				for i, w := range written {
					want := pointVals(w)
					want["x_seq"] = Value{Kind: KindSeq, Num: uint64(i + 1)}
					want["x_op"] = Value{Kind: KindOp} // every point written once
					for j, c := range p.Columns {
						require.Equal(t, want[c.Name], p.vals[i][j], "row %d column %s", i, c.Name)
					}
				}
			}
			check(h)
			h.close()
			h = openHarness(t, h.disk, DefaultConfig())
			check(h)
		})
	}
}

func withLine(line int, p Point) Point {
	p.Line = line
	return p
}

// --- Auto-create (docs/guide.md#tables, --sync-tables) --------------------------------------

func TestAutoCreate(t *testing.T) {
	cases := []struct {
		name      string
		globs     []string
		table     string
		tags      []Tag // default host=a
		rejectErr error // the write is rejected and creates nothing
		want      SyncStatus
	}{
		{name: "no globs", table: "cpu_1", want: SyncStatus{Horizon: 1}},
		{name: "matching glob", globs: []string{"cpu*"}, table: "cpu_1", want: SyncStatus{Enabled: true, Epoch: 1, Seq: 1, Watermark: 1, Horizon: 1}},
		{name: "other glob", globs: []string{"cpu*"}, table: "mem", want: SyncStatus{Horizon: 1}},
		{name: "second glob", globs: []string{"cpu*", "disk"}, table: "disk", want: SyncStatus{Enabled: true, Epoch: 1, Seq: 1, Watermark: 1, Horizon: 1}},
		{name: "glob matches the whole name", globs: []string{"disk"}, table: "disk2", want: SyncStatus{Horizon: 1}},
		{name: "reserved name", globs: []string{"*"}, table: "x_sys", rejectErr: ErrInvalidTableName},
		{name: "rejected first line", globs: []string{"cpu*"}, table: "cpu_1", tags: tg("v", "x"), rejectErr: ErrTagFieldConflict},
		{name: "rejected first line without sync", table: "mem", tags: tg("v", "x"), rejectErr: ErrTagFieldConflict},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.SyncTables = tc.globs
			h := openHarness(t, memstore.NewDisk(), cfg)
			defer func() { h.close() }()
			tags := tc.tags
			if tags == nil {
				tags = tg("host", "a")
			}
			p := pt(tc.table, 42, tags, fld("v", fv(1.5)))
			res := appendBatch(t, h.s, p, pt("known", 1, nil, fld("v", iv(1))))
			if tc.rejectErr != nil {
				require.Equal(t, 1, res.Accepted)
				require.Len(t, res.Rejected, 1)
				require.ErrorIs(t, res.Rejected[0], tc.rejectErr)
				require.Equal(t, 1, res.Rejected[0].Line)
				_, err := h.d.Status(tc.table)
				require.ErrorIs(t, err, ErrTableNotFound)
				require.Len(t, h.d.Tables(), 1, "only the accepted line's table exists")
				// Nor does it come back after a restart.
				h.close()
				h = openHarness(t, h.disk, cfg)
				_, err = h.d.Status(tc.table)
				require.ErrorIs(t, err, ErrTableNotFound, "after a restart")
				return
			}
			require.Equal(t, 2, res.Accepted)
			require.Empty(t, res.Rejected)
			require.Equal(t, tc.want, status(t, h.d, tc.table))
			require.Equal(t, []Column{{"time", KindTime}, {"host", KindTag}, {"v", KindFloat}}, columns(t, h.d, tc.table))
			if !tc.want.Enabled {
				_, err := tryDrain(h.d, DrainRequest{Table: tc.table, Limit: 10})
				require.ErrorIs(t, err, ErrSyncOff)
				return
			}
			// The feed is complete from the first line.
			rows := drainAll(t, h.d, tc.table, 0, 10)
			require.Equal(t, []row{{Seq: 1, Vals: map[string]Value{"time": tmv(42), "host": tagv("a"), "v": fv(1.5)}}}, rows)
		})
	}
}

// TestGroupAppliesWritesInTimeOrder checks that the writes of one group
// commit are applied in the order of their lowest point time, not their
// queue order (commitGroup), while the lines of one write keep their
// order: three batches queued newest first before the sequencer runs
// get x_seq oldest first, and the out-of-order lines inside one keep
// theirs.
func TestGroupAppliesWritesInTimeOrder(t *testing.T) {
	db := memstore.New()
	cfg := DefaultConfig()
	cfg.SyncTables = []string{"*"}
	s, d, err := Open(cfg, db, nil, nil)
	require.NoError(t, err)
	h := &harness{t: t, disk: db.Disk(), db: db, s: s, d: d, done: make(chan error, 1)}
	batch := func(times ...int64) *Batch {
		b := &Batch{}
		for i, ts := range times {
			p := pt("m", ts, tg("host", "a"), fld("v", iv(ts)))
			p.Line = i + 1
			b.Points = append(b.Points, p)
		}
		return b
	}
	var pending []*Pending
	for _, b := range []*Batch{batch(300, 301), batch(105, 101), batch(200)} {
		p, err := s.Submit(context.Background(), b)
		require.NoError(t, err)
		pending = append(pending, p)
	}
	h.start() // one group: all three were queued before Run
	defer h.close()
	for _, p := range pending {
		res, err := p.Wait(context.Background())
		require.NoError(t, err)
		require.Empty(t, res.Rejected)
	}
	var got []int64
	for _, r := range drainAll(t, d, "m", 0, 100) {
		got = append(got, int64(r.Vals["v"].Num))
	}
	require.Equal(t, []int64{105, 101, 200, 300, 301}, got, "writes by lowest time, lines of a write in line order")
}

// TestDrainerOutlivesRun checks the split of the feed's two sides: once
// Run has returned, the Sequencer refuses writes and table operations
// with ErrClosed, while the Drainer still reads everything committed
// (until the store is closed) and a long-poll at the watermark answers at
// once instead of waiting for writes that cannot come.
func TestDrainerOutlivesRun(t *testing.T) {
	h := openHarness(t, memstore.NewDisk(), DefaultConfig())
	ctx := context.Background()
	_, _, err := h.s.CreateTable(ctx, "t", true)
	require.NoError(t, err)
	mustAppend(t, h.s, pt("t", 1, tg("host", "a"), fld("v", iv(1))), pt("t", 2, tg("host", "a"), fld("v", iv(2))))
	h.cancel()
	require.NoError(t, <-h.done)

	_, err = h.s.Submit(ctx, &Batch{Points: []Point{pt("t", 3, tg("host", "a"), fld("v", iv(3)))}})
	require.ErrorIs(t, err, ErrClosed)
	_, err = h.s.SetSync(ctx, "t", false)
	require.ErrorIs(t, err, ErrClosed)

	st := status(t, h.d, "t")
	require.Equal(t, SyncStatus{Enabled: true, Epoch: 1, Seq: 2, Watermark: 2, Horizon: 1}, st)
	rows := drainAll(t, h.d, "t", 0, 1)
	require.Len(t, rows, 2)
	require.Equal(t, []uint64{1, 2}, []uint64{rows[0].Seq, rows[1].Seq})
	r := awaitDrain(t, goDrain(h.d, DrainRequest{Table: "t", After: 2, Limit: 10, Wait: time.Hour}), 10*time.Second,
		"a long-poll after Run returned must answer at once")
	require.NoError(t, r.err)
	require.Zero(t, r.p.Rows)
	require.Equal(t, uint64(2), r.p.Next)
	require.NoError(t, h.db.Close())
}

// TestQueueDelay checks the overload signal the HTTP writes are refused
// by: 0 while the sequencer is idle; while a commit is held, at least as
// long as it has been held (writes submitted meanwhile wait at least that
// long), growing; 0 again once the queue has drained.
func TestQueueDelay(t *testing.T) {
	h := openHarness(t, memstore.NewDisk(), DefaultConfig())
	defer h.close()
	stall := installStall(h)
	defer stall.release()
	ctx := context.Background()
	require.Zero(t, h.s.QueueDelay(), "idle")
	// A sequential writer reads 0 as soon as its write is answered: its
	// own finished group is no queue (several rounds, as the sequencer
	// may run late after answering).
	for i := range 20 {
		mustAppend(t, h.s, pt("a", int64(i+1), tg("host", "x"), fld("v", iv(1))))
		require.Zero(t, h.s.QueueDelay(), "idle after a commit")
	}

	stall.arm()
	held, err := h.s.Submit(ctx, &Batch{Points: []Point{pt("a", 100, tg("host", "x"), fld("v", iv(2)))}})
	require.NoError(t, err)
	waitClosed(t, stall.entered, "the commit reaches the hook")
	start := time.Now()
	queued, err := h.s.Submit(ctx, &Batch{Points: []Point{pt("a", 101, tg("host", "x"), fld("v", iv(3)))}})
	require.NoError(t, err)
	eventually(t, func() bool { return time.Since(start) > 20*time.Millisecond }, "time passes")
	// elapsed is read first: the held group was taken before start, so
	// the delay read after it is at least elapsed however late this
	// goroutine runs.
	elapsed := time.Since(start)
	d1 := h.s.QueueDelay()
	require.GreaterOrEqual(t, d1, elapsed, "a held commit counts from when it was taken")
	eventually(t, func() bool { return h.s.QueueDelay() > d1 }, "the delay grows while the commit is held")

	stall.release()
	for _, p := range []*Pending{held, queued} {
		_, err := p.Wait(ctx)
		require.NoError(t, err)
	}
	eventually(t, func() bool { return h.s.QueueDelay() == 0 }, "the queue drained")
}

// TestSeriesBytesBudget: the series dictionaries of all tables together
// hold at most --feed-max-series-bytes; a line bringing a series past it
// is rejected (known series are still written, in any table), the bytes
// come back with DROP, and series loaded at start are counted.
func TestSeriesBytesBudget(t *testing.T) {
	long := strings.Repeat("v", 200)
	one := pointSeriesCost(&[]Point{pt("t", 1, tg("host", long+"000"), fld("v", iv(1)))}[0])
	cfg := DefaultConfig()
	cfg.MaxSeriesBytes = int(5*one + one/2) // five series of this shape
	h := openHarness(t, memstore.NewDisk(), cfg)
	bytes := func() int64 { return h.s.seriesBytes.Load() }
	var batch []Point
	for i := range 4 {
		batch = append(batch, pt("t", int64(i+1), tg("host", fmt.Sprintf("%s%03d", long, i)), fld("v", iv(1))))
	}
	batch = append(batch, pt("u", 1, tg("host", long+"100"), fld("v", iv(1))), pt("u", 2, tg("host", long+"101"), fld("v", iv(1))),
		pt("t", 9, tg("host", long+"000"), fld("v", iv(2))))
	res := appendBatch(t, h.s, batch...)
	require.Equal(t, 6, res.Accepted, "four series of t, one of u, a known series of t")
	require.Len(t, res.Rejected, 1)
	require.ErrorIs(t, res.Rejected[0], ErrSeriesLimit, "u's second series: the budget is global")
	require.Contains(t, res.Rejected[0].Error(), "--feed-max-series-bytes")
	require.Equal(t, 5*one, bytes())
	require.LessOrEqual(t, bytes(), int64(cfg.MaxSeriesBytes))

	require.NoError(t, h.s.Drop(context.Background(), "u"))
	require.Equal(t, 4*one, bytes(), "DROP gives its series' bytes back")
	mustAppend(t, h.s, pt("t", 10, tg("host", long+"004"), fld("v", iv(1))))
	require.Equal(t, 5*one, bytes())

	h.close()
	h = openHarness(t, h.disk, cfg)
	defer h.close()
	require.Equal(t, 5*one, h.s.seriesBytes.Load(), "the series loaded at start are counted")
	res = appendBatch(t, h.s, pt("t", 11, tg("host", long+"005"), fld("v", iv(1))), pt("t", 12, tg("host", long+"001"), fld("v", iv(1))))
	require.Equal(t, 1, res.Accepted)
	require.ErrorIs(t, res.Rejected[0], ErrSeriesLimit)
}

// TestSchemaBytesBudget checks Config.MaxSchemaBytes: the schemas of all
// tables together (thousands of tables of a thousand columns of 4,000-byte
// names would otherwise hold gigabytes) stay within it. A line whose new
// columns do not fit is rejected as column_limit, as is a table definition;
// DROP gives its columns' bytes back, and the columns loaded at start are
// counted.
func TestSchemaBytesBudget(t *testing.T) {
	key := func(i int) string { return fmt.Sprintf("%s%03d", strings.Repeat("k", 200), i) }
	host, long := columnCost("host"), columnCost(key(0))
	cfg := DefaultConfig()
	cfg.MaxSchemaBytes = int(2*host + 3*long + long/2)
	h := openHarness(t, memstore.NewDisk(), cfg)
	bytes := func() int64 { return h.s.schemaBytes.Load() }

	mustAppend(t, h.s, pt("t", 1, tg("host", "a"), fld(key(1), iv(1)), fld(key(2), iv(1))))
	require.Equal(t, host+2*long, bytes())
	res := appendBatch(t, h.s, pt("u", 1, tg("host", "a"), fld(key(3), iv(1)), fld(key(4), iv(1))))
	require.Zero(t, res.Accepted)
	require.Len(t, res.Rejected, 1)
	require.ErrorIs(t, res.Rejected[0], ErrColumnLimit, "u's columns: the budget is global")
	require.Contains(t, res.Rejected[0].Error(), "--feed-max-schema-bytes")
	mustAppend(t, h.s, pt("u", 1, tg("host", "a"), fld(key(3), iv(1))))
	require.Equal(t, 2*host+3*long, bytes())
	_, err := h.s.DefineTable(context.Background(), "w", true, []Column{{Name: key(5), Kind: KindInt}})
	require.ErrorIs(t, err, ErrColumnLimit)
	require.Contains(t, err.Error(), "--feed-max-schema-bytes")
	require.LessOrEqual(t, bytes(), int64(cfg.MaxSchemaBytes))

	require.NoError(t, h.s.Drop(context.Background(), "u"))
	require.Equal(t, host+2*long, bytes(), "DROP gives its columns' bytes back")
	_, err = h.s.DefineTable(context.Background(), "w", true, []Column{{Name: key(5), Kind: KindInt}})
	require.NoError(t, err)
	require.Equal(t, host+3*long, bytes())

	h.close()
	h = openHarness(t, h.disk, cfg)
	defer h.close()
	require.Equal(t, host+3*long, h.s.schemaBytes.Load(), "the columns loaded at start are counted")
	res = appendBatch(t, h.s, pt("t", 2, tg("host", "a"), fld(key(6), iv(1)), fld(key(7), iv(1))))
	require.ErrorIs(t, res.Rejected[0], ErrColumnLimit)
}

// TestGroupScratchHoldsNoStrings: once a group is committed, the
// sequencer's scratch (the field slab, the group's tables) holds none of
// its values, so the writers' parsed strings, and the parser arenas they
// point into, are not kept alive between groups; rejected points' fields
// included.
func TestGroupScratchHoldsNoStrings(t *testing.T) {
	h := openHarness(t, memstore.NewDisk(), DefaultConfig())
	var pts []Point
	for i := range 100 {
		pts = append(pts, pt("t", int64(i+1), tg("host", "a"), fld("s", sv(strings.Repeat("x", 100))), fld("v", iv(int64(i)))))
	}
	// A string where the column is an integer: rejected after its first
	// field went into the slab.
	pts = append(pts, pt("t", 200, tg("host", "a"), fld("s", sv("y")), fld("v", sv("not an integer"))))
	res := appendBatch(t, h.s, pts...)
	require.Equal(t, 100, res.Accepted)
	require.Len(t, res.Rejected, 1)
	// A group after: the sequencer is idle again. Once Run has returned,
	// its scratch is read race-free.
	mustAppend(t, h.s, pt("t", 300, tg("host", "a"), fld("v", iv(1))))
	h.close()
	slab := h.s.fieldSlab[:cap(h.s.fieldSlab)]
	require.NotEmpty(t, slab, "the slab was used")
	for i, f := range slab {
		require.Empty(t, f.Value.Str, "slab entry %d keeps a value", i)
	}
	for i, g := range h.s.groupTables[:cap(h.s.groupTables)] {
		require.Nil(t, g, "group table %d kept", i)
	}
}

// TestCommittedBatchesNotKept: once a write is committed and answered,
// nothing of the sequencer keeps its batch (its points, and the parsed
// strings and parser arenas they point into) reachable: after a flood of
// 300 TCP writers, 320 MB of committed values stayed in use, held through
// the sequencer's list of the operations of its last groups.
func TestCommittedBatchesNotKept(t *testing.T) {
	h := openHarness(t, memstore.NewDisk(), DefaultConfig())
	defer h.close()
	freed := make(chan struct{}, 1)
	func() {
		b := &Batch{}
		for i := range 100 {
			b.Points = append(b.Points, pt("t", int64(i+1), tg("host", "a"), fld("s", sv(strings.Repeat("x", 100)))))
		}
		runtime.AddCleanup(b, func(ch chan struct{}) { ch <- struct{}{} }, freed)
		res, err := h.s.Append(context.Background(), b)
		require.NoError(t, err)
		require.Equal(t, 100, res.Accepted)
	}()
	eventually(t, func() bool {
		runtime.GC()
		select {
		case <-freed:
			return true
		default:
			return false
		}
	}, "the committed batch collected")
}
