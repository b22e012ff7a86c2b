// Package storetest is the contract suite of store.Backend (store/doc.go):
// every backend runs it from its own tests, in the manner of NATS'
// testAllStoreAllPermutations, and passes it before the feed may stand on
// it. Run registers one subtest per guarantee; each opens its own backend
// through the Harness.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
)

// Harness opens the backend under test.
type Harness struct {
	// New opens a new, empty backend. The suite closes it; New may
	// register a cleanup for what else it made (directories, servers).
	New func(t testing.TB) store.Backend
	// Restart closes b cleanly and returns a backend opened on the same
	// data. Nil for a backend that keeps nothing across Close (in
	// memory): the restart and crash subtests then are not run.
	Restart func(t testing.TB, b store.Backend) store.Backend
	// Crash returns a backend opened on b's data as a crash at this
	// instant (no clean Close, no released lease) would leave it. b is
	// not used again by the suite (Crash, or a cleanup, closes it). Nil
	// when Restart is.
	Crash func(t testing.TB, b store.Backend) store.Backend
	// Reads returns how many blocks (units of fragments as the backend
	// stores them) and point-index entries b's drains and row copies
	// have read so far, as its read metrics count them. Required.
	Reads func(b store.Backend) (blocks, entries uint64)
	// Peer opens another process's backend on b's shared data (another
	// ingestd node on the same cluster), for a backend that implements
	// store.Shared: the Shared subtests, and the others through a peer,
	// run only with it. The suite closes it.
	Peer func(t testing.TB, b store.Backend) store.Backend
	// Applied, required with Peer, snapshots what a has acknowledged
	// (blocks, table changes) and returns a check of whether peer b has
	// applied all of it: the single-store subtests run through a peer
	// read from b once it holds. The check is called repeatedly, from
	// any goroutine, and must not block.
	Applied func(a, b store.Backend) func() bool
}

// singleTests are the guarantees of one store; durable ones need
// Harness.Restart and Harness.Crash.
var singleTests = []struct {
	name    string
	durable bool
	fn      func(t *testing.T, h Harness)
}{
	{"XSeqAssignedByBackend", false, testXSeqAssigned},
	{"StampedBeforeVisible", false, testStampedBeforeVisible},
	{"DrainNeverSkipsAcknowledged", false, testDrainNeverSkips},
	{"Coalescing", false, testCoalescing},
	{"Operation", false, testOperation},
	{"FilteredRead", false, testFilteredRead},
	{"OverwriteReadsBounded", false, testOverwriteReads},
	{"TruncateBumpsEpochKeepsSeq", false, testTruncate},
	{"DropAndRecreateResumeAbove", false, testDropAndRecreate},
	{"PruneTombstone", false, testPruneTombstone},
	{"Consumers", false, testConsumers},
	{"HorizonOnlyRises", false, testHorizon},
	{"SweepRaisesHorizonFirst", false, testSweep},
	{"RowsOpaqueCursor", false, testRowsCursor},
	{"ContextEnded", false, testContextEnded},
	{"ContextEndsLongRead", false, testContextEndsLongRead},
	{"ErrClosedAfterClose", false, testErrClosed},
	{"RestartKeepsEverything", true, testRestart},
	{"CrashReopen", true, testCrashReopen},
	{"CrashAfterDDL", true, testCrashAfterDDL},
}

// Run runs every subtest of the contract against the backends h opens:
// with Harness.Peer also the Shared subtests, and the single-store ones
// through a peer (peer.go).
func Run(t *testing.T, h Harness) {
	for _, tc := range singleTests {
		if tc.durable && (h.Restart == nil || h.Crash == nil) {
			continue // nothing survives Close: not a property of this backend
		}
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
	if h.Peer != nil {
		require.NotNil(t, h.Applied, "Harness.Peer without Harness.Applied")
		runShared(t, h)
		runThroughPeer(t, h)
	}
}

var ctx = context.Background()

// open returns a new backend closed at the end of the test.
func open(t *testing.T, h Harness) store.Backend {
	b := h.New(t)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// reopen turns b into the backend restart or crash returns, closed at the
// end of the test.
func reopen(t *testing.T, b store.Backend, how func(testing.TB, store.Backend) store.Backend) store.Backend {
	nb := how(t, b)
	t.Cleanup(func() { _ = nb.Close() })
	return nb
}

// Col is the value column the suite writes; column 1 is the tag.
const (
	tagCol = 1
	valCol = 2
)

// createTable creates a live table with sync as given.
func createTable(t testing.TB, b store.Backend, name string, sync bool) store.TableMeta {
	t.Helper()
	id, err := b.NewTableID(ctx)
	require.NoError(t, err)
	var epoch uint64
	if sync {
		epoch = 1
	}
	m, err := b.PutTable(ctx, store.TableMeta{Name: name, ID: id, Sync: sync, Epoch: epoch,
		Columns: []store.Column{{Name: "time"}, {Name: "host", Kind: store.KindTag}, {Name: "v", Kind: store.KindInt}}})
	require.NoError(t, err)
	require.Equal(t, id, m.ID)
	return m
}

// frag is a fragment of series 1 at ts with the given column values.
func frag(ts int64, fields ...store.Field) store.Fragment {
	return store.Fragment{Series: 1, Time: ts, Fields: fields}
}

func iv(col uint32, v int64) store.Field {
	return store.Field{Col: col, Value: store.Value{Kind: store.KindInt, Num: uint64(v)}}
}

// series1 is the dictionary entry of series 1.
var series1 = []store.Series{{ID: 1, Tags: []store.Field{{Col: tagCol, Value: store.Value{Kind: store.KindTag, Str: "a"}}}}}

// write appends frags to m's instance (with series 1 on the first write
// when first is set) and returns the first and last x_seq assigned (0, 0
// without sync).
func write(t testing.TB, b store.Backend, m store.TableMeta, first bool, frags ...store.Fragment) (uint64, uint64) {
	t.Helper()
	tc := store.TableCommit{TableID: m.ID, Sync: m.Sync, Fragments: frags, CommitTime: 1}
	if first {
		tc.NewSeries = series1
	}
	commits := []store.TableCommit{tc}
	require.NoError(t, b.Append(ctx, commits, nil))
	if commits[0].FirstSeq == 0 {
		return 0, 0
	}
	return commits[0].FirstSeq, commits[0].FirstSeq + uint64(len(frags)) - 1
}

// row is a copied store.Row.
type row struct {
	Seq    uint64
	Time   int64
	Fields map[uint32]int64
	Update bool
}

func copyRow(r *store.Row) row {
	out := row{Seq: r.Seq, Time: r.Time, Fields: map[uint32]int64{}, Update: r.Update}
	for _, f := range r.Fields {
		out.Fields[f.Col] = f.Value.Int()
	}
	return out
}

// readSeq reads every row after < x_seq <= upto, in pages of limit.
func readSeq(t testing.TB, b store.Backend, tid, after, upto uint64, limit int) []row {
	t.Helper()
	var out []row
	for {
		n := 0
		_, err := b.ReadSeq(ctx, tid, after, upto, limit, nil, func(r *store.Row) error {
			out = append(out, copyRow(r))
			after = r.Seq
			n++
			return nil
		})
		require.NoError(t, err)
		if n < limit {
			return out
		}
	}
}

func testXSeqAssigned(t *testing.T, h Harness) {
	b := open(t, h)
	m := createTable(t, b, "t", true)
	f1, l1 := write(t, b, m, true, frag(1, iv(valCol, 1)), frag(2, iv(valCol, 2)), frag(3, iv(valCol, 3)))
	require.NotZero(t, f1, "a synced commit is assigned x_seq numbers")
	require.Equal(t, f1+2, l1)
	f2, _ := write(t, b, m, false, frag(4, iv(valCol, 4)))
	require.Greater(t, f2, l1, "x_seq strictly increases")

	off := createTable(t, b, "off", false)
	f, _ := write(t, b, off, true, frag(1, iv(valCol, 1)))
	require.Zero(t, f, "sync OFF: no x_seq")

	// Two tables in one commit each get their own numbers.
	u := createTable(t, b, "u", true)
	commits := []store.TableCommit{
		{TableID: m.ID, Sync: true, Fragments: []store.Fragment{frag(5, iv(valCol, 5))}, CommitTime: 1},
		{TableID: u.ID, Sync: true, NewSeries: series1, Fragments: []store.Fragment{frag(1, iv(valCol, 1)), frag(2, iv(valCol, 2))}, CommitTime: 1},
	}
	require.NoError(t, b.Append(ctx, commits, nil))
	require.Greater(t, commits[0].FirstSeq, f2)
	require.NotZero(t, commits[1].FirstSeq)
	rows := readSeq(t, b, m.ID, 0, commits[0].FirstSeq, 2)
	require.Len(t, rows, 5)
	for i := 1; i < len(rows); i++ {
		require.Greater(t, rows[i].Seq, rows[i-1].Seq)
	}
	require.Equal(t, int64(5), rows[4].Fields[valCol])
	require.Len(t, readSeq(t, b, u.ID, 0, commits[1].FirstSeq+1, 10), 2)

	// SET SYNC OFF, a write, SET SYNC ON: numbers continue above.
	last := commits[0].FirstSeq
	m.Sync = false
	m, err := b.PutTable(ctx, m)
	require.NoError(t, err)
	f, _ = write(t, b, m, false, frag(6, iv(valCol, 6)))
	require.Zero(t, f)
	m.Sync, m.Epoch = true, m.Epoch+1
	m, err = b.PutTable(ctx, m)
	require.NoError(t, err)
	f, _ = write(t, b, m, false, frag(7, iv(valCol, 7)))
	require.Greater(t, f, last, "x_seq never reused across SET SYNC OFF/ON")
}

func testStampedBeforeVisible(t *testing.T, h Harness) {
	b := open(t, h)
	m := createTable(t, b, "t", true)
	_, last := write(t, b, m, true, frag(1, iv(valCol, 1)))
	commits := []store.TableCommit{{TableID: m.ID, Sync: true, Fragments: []store.Fragment{frag(2, iv(valCol, 2)), frag(3, iv(valCol, 3))}, CommitTime: 1}}
	calls := 0
	require.NoError(t, b.Append(ctx, commits, func() {
		calls++
		first := commits[0].FirstSeq
		require.Greater(t, first, last, "numbers are assigned before stamped")
		// Nothing of the commit is visible yet, even to a read naming its numbers.
		require.Len(t, readSeq(t, b, m.ID, 0, first+1, 10), 1)
	}))
	require.Equal(t, 1, calls, "stamped runs exactly once")
	require.Len(t, readSeq(t, b, m.ID, 0, commits[0].FirstSeq+1, 10), 3, "durable and visible once Append returned")
}

// testDrainNeverSkips has a reader drain from a cursor up to the
// watermark the writer publishes after each Append, concurrently with the
// writes: every acknowledged fragment is read exactly once, in order.
func testDrainNeverSkips(t *testing.T, h Harness) {
	b := open(t, h)
	m := createTable(t, b, "t", true)
	const commits = 200
	var (
		mu        sync.Mutex
		watermark uint64
		acked     []uint64
	)
	done := make(chan struct{})
	readerErr := make(chan error, 1)
	go func() {
		// The feed's drain: next is the last x_seq of a full page, else
		// the watermark the page was read at.
		var after uint64
		var got []uint64
		for {
			finished := false
			select {
			case <-done:
				finished = true // the watermark read next is the final one
			default:
			}
			mu.Lock()
			wm := watermark
			mu.Unlock()
			if after == wm && !finished {
				runtime.Gosched() // nothing new yet: let the writer run
			}
			for after < wm {
				n := 0
				_, err := b.ReadSeq(ctx, m.ID, after, wm, 7, nil, func(r *store.Row) error {
					if r.Seq <= after || r.Seq > wm {
						return fmt.Errorf("x_seq %d read after %d up to %d", r.Seq, after, wm)
					}
					got, after = append(got, r.Seq), r.Seq
					n++
					return nil
				})
				if err != nil {
					readerErr <- err
					return
				}
				if n < 7 {
					after = wm
				}
			}
			if finished {
				mu.Lock()
				defer mu.Unlock()
				if fmt.Sprint(got) != fmt.Sprint(acked) {
					readerErr <- fmt.Errorf("drained %v, acknowledged %v", got, acked)
					return
				}
				readerErr <- nil
				return
			}
		}
	}()
	for i := range commits {
		n := 1 + i%5
		frags := make([]store.Fragment, n)
		for j := range frags {
			frags[j] = frag(int64(i*10+j), iv(valCol, int64(i)))
		}
		first, last := write(t, b, m, i == 0, frags...)
		mu.Lock()
		for s := first; s <= last; s++ {
			acked = append(acked, s)
		}
		watermark = last
		mu.Unlock()
	}
	close(done)
	require.NoError(t, <-readerErr)
}

func testCoalescing(t *testing.T, h Harness) {
	b := open(t, h)
	m := createTable(t, b, "t", true)
	s1, _ := write(t, b, m, true, frag(100, iv(valCol, 1)), frag(200, iv(valCol, 7)))
	s2, _ := write(t, b, m, false, frag(100, iv(valCol, 2), iv(3, 30)))
	s3, _ := write(t, b, m, false, frag(100, iv(3, 31)))
	rows := readSeq(t, b, m.ID, 0, s3, 10)
	require.Len(t, rows, 4, "every fragment under its own x_seq")
	want := map[uint32]int64{valCol: 2, 3: 31} // the later write wins per column
	require.Equal(t, row{Seq: s1, Time: 100, Fields: want}, rows[0])
	require.Equal(t, row{Seq: s1 + 1, Time: 200, Fields: map[uint32]int64{valCol: 7}}, rows[1])
	require.Equal(t, row{Seq: s2, Time: 100, Fields: want, Update: true}, rows[2])
	require.Equal(t, row{Seq: s3, Time: 100, Fields: want, Update: true}, rows[3])
}

// testOperation checks Row.Update (docs/contract.md#operation): a
// fragment is an insert when it is its point's oldest, also when a later
// one overwrote the point, in the same commit or another; an update
// otherwise, also when the point's oldest fragment was written with sync
// OFF (it has no x_seq).
func testOperation(t *testing.T, h Harness) {
	b := open(t, h)
	m := createTable(t, b, "t", true)
	s1, _ := write(t, b, m, true, frag(100, iv(valCol, 1)), frag(200, iv(valCol, 2)), frag(200, iv(valCol, 3)))
	s2, _ := write(t, b, m, false, frag(100, iv(valCol, 4)), frag(300, iv(valCol, 5)))
	off := createTable(t, b, "off", false)
	write(t, b, off, true, frag(7, iv(valCol, 1)))
	off.Sync, off.Epoch = true, 1
	off, err := b.PutTable(ctx, off)
	require.NoError(t, err)
	o1, _ := write(t, b, off, false, frag(7, iv(valCol, 2)), frag(8, iv(valCol, 3)))

	ops := func(rows []row) map[uint64]bool {
		out := map[uint64]bool{}
		for _, r := range rows {
			out[r.Seq] = r.Update
		}
		return out
	}
	require.Equal(t, map[uint64]bool{s1: false, s1 + 1: false, s1 + 2: true, s2: true, s2 + 1: false},
		ops(readSeq(t, b, m.ID, 0, s2+1, 2)), "insert: the point's oldest fragment")
	require.Equal(t, map[uint64]bool{o1: true, o1 + 1: false}, ops(readSeq(t, b, off.ID, 0, o1+1, 10)),
		"a point created with sync OFF is updated by its first synced fragment")
}

// testFilteredRead checks ReadSeq's filter: series, time range, field
// presence and operation ANDed, through covering what was left out, and
// MaxScan bounding the fragments examined.
func testFilteredRead(t *testing.T, h Harness) {
	b := open(t, h)
	m := createTable(t, b, "t", true)
	series2 := store.Series{ID: 2, Tags: []store.Field{{Col: tagCol, Value: store.Value{Kind: store.KindTag, Str: "b"}}}}
	var frags []store.Fragment
	for i := range 20 {
		f := frag(int64(i%10), iv(valCol, int64(i)))
		if i%4 == 0 {
			f.Series = 2
		}
		if i%3 == 0 {
			f.Fields = append(f.Fields, iv(3, 1))
		}
		frags = append(frags, f)
	}
	commits := []store.TableCommit{{TableID: m.ID, Sync: true, NewSeries: append(slices.Clone(series1), series2), CommitTime: 1, Fragments: frags}}
	require.NoError(t, b.Append(ctx, commits, nil))
	first := commits[0].FirstSeq
	last := first + 19
	all := readSeq(t, b, m.ID, first-1, last, 100)
	require.Len(t, all, 20)
	read := func(flt *store.SeqFilter, limit int) ([]uint64, uint64) {
		var got []uint64
		through, err := b.ReadSeq(ctx, m.ID, first-1, last, limit, flt, func(r *store.Row) error {
			got = append(got, r.Seq)
			return nil
		})
		require.NoError(t, err)
		return got, through
	}
	// again tells whether fragment i's point holds an older fragment.
	again := func(i int) bool {
		for j := range i {
			if j%10 == i%10 && (j%4 == 0) == (i%4 == 0) {
				return true
			}
		}
		return false
	}
	filters := []struct {
		name string
		flt  store.SeqFilter
		want func(i int, r row) bool
	}{
		{"series", store.SeqFilter{Series: []bool{false, false, true}}, func(i int, _ row) bool { return i%4 == 0 }},
		{"time range", store.SeqFilter{Start: 3, End: 6, HasStart: true, HasEnd: true}, func(i int, _ row) bool { return i%10 >= 3 && i%10 < 6 }},
		{"has", store.SeqFilter{Has: []uint32{3}}, func(_ int, r row) bool { _, ok := r.Fields[3]; return ok }},
		{"insert", store.SeqFilter{Op: store.OpInsert}, func(i int, _ row) bool { return !again(i) }},
		{"update and series", store.SeqFilter{Op: store.OpUpdate, Series: []bool{false, true}}, func(i int, _ row) bool { return again(i) && i%4 != 0 }},
	}
	for i, r := range all {
		require.Equal(t, again(i), r.Update, "x_seq %d", r.Seq)
	}
	for _, tc := range filters {
		t.Run(tc.name, func(t *testing.T) {
			var want []uint64
			for i, r := range all {
				if tc.want(i, r) {
					want = append(want, r.Seq)
				}
			}
			require.NotEmpty(t, want)
			got, through := read(&tc.flt, 100)
			require.Equal(t, want, got)
			require.Equal(t, last, through, "a read that reached upto covers it")
			got, through = read(&tc.flt, 1)
			require.Equal(t, want[:1], got)
			require.Equal(t, want[0], through, "limit: through is the last row")
			bounded := tc.flt
			bounded.MaxScan = 3
			got, through = read(&bounded, 100)
			require.Equal(t, first+2, through, "MaxScan: through is the last fragment examined")
			for _, s := range got {
				require.LessOrEqual(t, s, through)
			}
		})
	}
	through, err := b.ReadSeq(ctx, m.ID, last, last, 10, nil, func(*store.Row) error { return nil })
	require.NoError(t, err)
	require.Equal(t, last, through, "nothing to read: through is after")
}

// testOverwriteReads writes points 1, 8, 9, 10 and 100 times (one commit
// per pass over the points, each pass setting the value column and one
// column of its own) and checks that every page of a drain and of a row
// copy returns each point's current row while reading no more blocks than
// hold the fragments it returns (plus the one it resumes in) and at most
// one point-index entry per point it touches, whatever the number of
// fragments per point: a cost that grows with them is a cliff.
func testOverwriteReads(t *testing.T, h Harness) {
	require.NotNil(t, h.Reads, "the harness must give the backend's read counts")
	const points = 16 // series 1, times 1..points
	for _, k := range []int{1, 8, 9, 10, 100} {
		t.Run(fmt.Sprintf("%d_fragments", k), func(t *testing.T) {
			b := open(t, h)
			m := createTable(t, b, "t", true)
			want := map[uint32]int64{}
			var upto uint64
			for pass := range k {
				frags := make([]store.Fragment, points)
				for i := range frags {
					frags[i] = frag(int64(i+1), iv(valCol, int64(pass)), iv(uint32(3+pass%4), int64(pass)))
				}
				want[valCol], want[uint32(3+pass%4)] = int64(pass), int64(pass)
				_, upto = write(t, b, m, pass == 0, frags...)
			}
			for _, limit := range []int{points, points/2 + 1} {
				after, pages := uint64(0), 0
				for after < upto {
					blocks0, entries0 := h.Reads(b)
					var got []row
					_, err := b.ReadSeq(ctx, m.ID, after, upto, limit, nil, func(r *store.Row) error {
						got = append(got, copyRow(r))
						return nil
					})
					require.NoError(t, err)
					require.NotEmpty(t, got)
					blocks, entries := h.Reads(b)
					// A page of limit rows lies in at most ceil(limit/points)+1
					// blocks of points fragments each.
					maxBlocks := uint64((limit+points-1)/points + 1)
					require.LessOrEqual(t, blocks-blocks0, maxBlocks, "page %d of %d rows with %d fragments per point: blocks read", pages, limit, k)
					require.LessOrEqual(t, entries-entries0, uint64(len(got)), "page %d: at most one entry per point", pages)
					for _, r := range got {
						require.Equal(t, after+1, r.Seq)
						require.Equal(t, want, r.Fields, "x_seq %d reads as its point's current row", r.Seq)
						after = r.Seq
					}
					pages++
				}
			}
			// A copy by time range: each point once, as its current row,
			// in pages; each page reads the blocks it walks, each once.
			var cur store.RowCursor
			seen := map[int64]bool{}
			blocks0, _ := h.Reads(b)
			pages := 0
			for done := false; !done; pages++ {
				var err error
				cur, done, err = b.ReadRows(ctx, m.ID, cur, math.MinInt64, math.MaxInt64, points/2, func(r *store.Row) error {
					require.False(t, seen[r.Time], "point %d returned once", r.Time)
					seen[r.Time] = true
					require.Equal(t, want, copyRow(r).Fields, "point %d", r.Time)
					return nil
				})
				require.NoError(t, err)
			}
			require.Len(t, seen, points)
			blocks, _ := h.Reads(b)
			require.LessOrEqual(t, blocks-blocks0, uint64(k+pages), "a copy reads each of the %d blocks once, plus the one each page resumes in", k)
		})
	}
}

func testTruncate(t *testing.T, h Harness) {
	b := open(t, h)
	m := createTable(t, b, "t", true)
	_, last := write(t, b, m, true, frag(1, iv(valCol, 1)), frag(2, iv(valCol, 2)))
	require.NoError(t, b.PutConsumers(ctx, map[string][]store.Consumer{"t": {{Name: "c", Epoch: m.Epoch, Position: last}}}))
	nm, err := b.TruncateTable(ctx, m.ID)
	require.NoError(t, err)
	require.Equal(t, m.Name, nm.Name)
	require.NotEqual(t, m.ID, nm.ID, "a new instance")
	require.Equal(t, m.Epoch+1, nm.Epoch, "TRUNCATE bumps the epoch")
	require.True(t, nm.Sync)
	require.GreaterOrEqual(t, nm.Seq, last)
	require.Empty(t, nm.Columns)
	require.Empty(t, readSeq(t, b, nm.ID, 0, math.MaxUint64, 10), "the new instance is empty")
	series, err := b.LoadSeries(ctx, nm.ID)
	require.NoError(t, err)
	require.Empty(t, series)
	first, _ := write(t, b, nm, true, frag(1, iv(valCol, 3)))
	require.Greater(t, first, last, "x_seq never runs backwards across TRUNCATE")
	cs, err := b.LoadConsumers(ctx, "t")
	require.NoError(t, err)
	require.Len(t, cs, 1, "consumers outlive TRUNCATE")
	metas, err := b.LoadTables(ctx)
	require.NoError(t, err)
	require.Len(t, metas, 1)
	require.Equal(t, nm.ID, metas[0].ID)
	require.Equal(t, nm.Epoch, metas[0].Epoch)
	_, err = b.TruncateTable(ctx, m.ID)
	require.Error(t, err, "the old instance is gone")
}

func testDropAndRecreate(t *testing.T, h Harness) {
	b := open(t, h)
	m := createTable(t, b, "t", true)
	_, last := write(t, b, m, true, frag(1, iv(valCol, 1)))
	require.NoError(t, b.PutConsumers(ctx, map[string][]store.Consumer{"t": {{Name: "c", Epoch: m.Epoch, Position: last}}}))
	tomb, err := b.DropTable(ctx, m.ID)
	require.NoError(t, err)
	require.True(t, tomb.Dropped)
	require.Zero(t, tomb.ID)
	require.Equal(t, m.Epoch, tomb.Epoch)
	require.GreaterOrEqual(t, tomb.Seq, last, "the tombstone holds every number handed out")
	cs, err := b.LoadConsumers(ctx, "t")
	require.NoError(t, err)
	require.Empty(t, cs, "consumers go with DROP")
	require.Empty(t, readSeq(t, b, m.ID, 0, math.MaxUint64, 10))
	metas, err := b.LoadTables(ctx)
	require.NoError(t, err)
	require.Equal(t, []store.TableMeta{tomb}, metas)

	// Re-created from nothing (a caller that forgot the tombstone): the
	// backend resumes above it.
	nm := createTable(t, b, "t", true)
	require.Greater(t, nm.Epoch, tomb.Epoch, "a re-created table WITH SYNC is at a later epoch")
	require.GreaterOrEqual(t, nm.Seq, tomb.Seq)
	first, _ := write(t, b, nm, true, frag(1, iv(valCol, 2)))
	require.Greater(t, first, last, "x_seq never reused across DROP + re-create")
}

func testPruneTombstone(t *testing.T, h Harness) {
	b := open(t, h)
	m := createTable(t, b, "t", true)
	write(t, b, m, true, frag(1, iv(valCol, 1)))
	tomb, err := b.DropTable(ctx, m.ID)
	require.NoError(t, err)
	floor := store.TableMeta{Name: "x_floor", Dropped: true, Epoch: tomb.Epoch, Seq: tomb.Seq}
	require.NoError(t, b.PruneTombstone(ctx, "t", floor))
	metas, err := b.LoadTables(ctx)
	require.NoError(t, err)
	require.Equal(t, []store.TableMeta{floor}, metas)
}

func testConsumers(t *testing.T, h Harness) {
	b := open(t, h)
	createTable(t, b, "t", true)
	require.NoError(t, b.PutConsumers(ctx, map[string][]store.Consumer{
		"t": {{Name: "b", Epoch: 1, Position: 5, LastSeen: 10}, {Name: "a", Epoch: 1, Position: 3, LastSeen: 11}},
	}))
	require.NoError(t, b.PutConsumers(ctx, map[string][]store.Consumer{"t": {{Name: "b", Epoch: 1, Position: 6, LastSeen: 12, Owner: "mirror"}}}))
	cs, err := b.LoadConsumers(ctx, "t")
	require.NoError(t, err)
	require.Equal(t, []store.Consumer{{Name: "a", Epoch: 1, Position: 3, LastSeen: 11}, {Name: "b", Epoch: 1, Position: 6, LastSeen: 12, Owner: "mirror"}}, cs)
	require.NoError(t, b.DeleteConsumer(ctx, "t", "a"))
	require.NoError(t, b.DeleteConsumer(ctx, "t", "nobody"))
	cs, err = b.LoadConsumers(ctx, "t")
	require.NoError(t, err)
	require.Equal(t, []store.Consumer{{Name: "b", Epoch: 1, Position: 6, LastSeen: 12, Owner: "mirror"}}, cs)
}

func testHorizon(t *testing.T, h Harness) {
	b := open(t, h)
	m := createTable(t, b, "t", true)
	first, last := write(t, b, m, true, frag(1, iv(valCol, 1)), frag(2, iv(valCol, 2)), frag(3, iv(valCol, 3)))
	hz, err := b.Horizon(ctx, m.ID)
	require.NoError(t, err)
	require.Equal(t, uint64(1), hz, "nothing trimmed")
	hz, err = b.RaiseHorizon(ctx, m.ID, first+1)
	require.NoError(t, err)
	require.Equal(t, first+1, hz)
	hz, err = b.RaiseHorizon(ctx, m.ID, 1)
	require.NoError(t, err)
	require.Equal(t, first+1, hz, "the horizon never lowers")
	_, err = b.ReadSeq(ctx, m.ID, first-1, last, 10, nil, func(*store.Row) error { return nil })
	require.ErrorIs(t, err, store.ErrHistoryExpired, "a read starting below the horizon is refused, never a page that skips")
	require.Len(t, readSeq(t, b, m.ID, first, last, 10), 2, "after = horizon-1 is still served")
}

func testSweep(t *testing.T, h Harness) {
	b := open(t, h)
	m := createTable(t, b, "t", true)
	commits := []store.TableCommit{{TableID: m.ID, Sync: true, NewSeries: series1, CommitTime: 50,
		Fragments: []store.Fragment{frag(10, iv(valCol, 1)), frag(20, iv(valCol, 2)), frag(30, iv(valCol, 3))}}}
	require.NoError(t, b.Append(ctx, commits, nil))
	first := commits[0].FirstSeq
	ts, ok, err := b.SeqTime(ctx, m.ID, first)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(50), ts)
	seq, found, _, err := b.FirstSeqSince(ctx, m.ID, 1, 50, 10)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, first, seq)
	var res store.SweepResult
	for {
		res, err = b.SweepBefore(ctx, m.ID, 25, 1)
		require.NoError(t, err)
		if !res.More {
			break
		}
	}
	require.Greater(t, res.Horizon, first+1, "the horizon rose above every removed fragment")
	require.True(t, res.HasOldest)
	require.Equal(t, int64(30), res.Oldest)
	rows := readSeq(t, b, m.ID, res.Horizon-1, first+2, 10)
	require.Equal(t, []row{{Seq: first + 2, Time: 30, Fields: map[uint32]int64{valCol: 3}}}, rows)
	st, err := b.TableStats(ctx, m.ID)
	require.NoError(t, err)
	require.Equal(t, uint64(1), st.Series)
}

func testRowsCursor(t *testing.T, h Harness) {
	b := open(t, h)
	m := createTable(t, b, "t", true)
	for i := range 10 {
		write(t, b, m, i == 0, frag(int64(i), iv(valCol, int64(i))), frag(int64(i)+100, iv(valCol, int64(i))))
	}
	write(t, b, m, false, frag(3, iv(valCol, 33))) // an overwrite: the point is copied once
	off := createTable(t, b, "off", false)
	write(t, b, off, true, frag(7, iv(valCol, 7)))
	for _, tc := range []struct {
		tid        uint64
		start, end int64
		want       int
	}{{m.ID, math.MinInt64, math.MaxInt64, 20}, {m.ID, 2, 105, 13}, {off.ID, math.MinInt64, math.MaxInt64, 1}} {
		seen := map[int64]int64{}
		var cur store.RowCursor
		for pages := 0; ; pages++ {
			require.Less(t, pages, 100)
			next, done, err := b.ReadRows(ctx, tc.tid, cur, tc.start, tc.end, 3, func(r *store.Row) error {
				_, dup := seen[r.Time]
				require.False(t, dup, "point %d copied twice", r.Time)
				require.GreaterOrEqual(t, r.Time, tc.start)
				require.Less(t, r.Time, tc.end)
				seen[r.Time] = copyRow(r).Fields[valCol]
				return nil
			})
			require.NoError(t, err)
			if done {
				break
			}
			cur = next
		}
		require.Len(t, seen, tc.want)
		if tc.tid == m.ID && tc.start < 3 {
			require.Equal(t, int64(33), seen[3], "the coalesced row")
		}
	}
	// ErrRowLeftOut ends the page before the row and resumes at it.
	var times []int64
	var cur store.RowCursor
	for {
		n := 0
		next, done, err := b.ReadRows(ctx, m.ID, cur, math.MinInt64, math.MaxInt64, 5, func(r *store.Row) error {
			if n == 2 {
				return store.ErrRowLeftOut
			}
			n++
			times = append(times, r.Time)
			return nil
		})
		require.NoError(t, err)
		if done {
			break
		}
		cur = next
	}
	require.Len(t, times, 20)
	_, _, err := b.ReadRows(ctx, m.ID, store.RowCursor{0xff}, math.MinInt64, math.MaxInt64, 5, func(*store.Row) error { return nil })
	require.ErrorIs(t, err, store.ErrInvalidCursor)
}

func testContextEnded(t *testing.T, h Harness) {
	b := open(t, h)
	m := createTable(t, b, "t", true)
	_, last := write(t, b, m, true, frag(1, iv(valCol, 1)))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err := b.ReadSeq(cctx, m.ID, 0, last, 10, nil, func(*store.Row) error { return nil })
	require.ErrorIs(t, err, context.Canceled)
	_, _, err = b.ReadRows(cctx, m.ID, nil, math.MinInt64, math.MaxInt64, 10, func(*store.Row) error { return nil })
	require.ErrorIs(t, err, context.Canceled)
	err = b.Append(cctx, []store.TableCommit{{TableID: m.ID, Sync: true, Fragments: []store.Fragment{frag(2, iv(valCol, 2))}}}, nil)
	require.ErrorIs(t, err, context.Canceled)
	_, last3 := write(t, b, m, false, frag(3, iv(valCol, 3)))
	rows := readSeq(t, b, m.ID, 0, last3, 10)
	require.Len(t, rows, 2, "a write refused before it started stored nothing")
	require.Equal(t, int64(3), rows[1].Time)
}

// testContextEndsLongRead ends the ctx of a long read while it runs, in
// its first visit, and requires the read to return ctx's error having read
// at most one block more, where it would otherwise decode every block of
// the table: its filter (field presence, which only the first fragment
// passes) leaves out everything after that visit, as a filtered drain
// scans long stretches without a visit. ReadRows the same way. The time
// from the cancel to the return is logged.
func testContextEndsLongRead(t *testing.T, h Harness) {
	b := open(t, h)
	m := createTable(t, b, "t", true)
	const blocks, perBlock = 100, 20
	var last uint64
	for i := range blocks {
		var frags []store.Fragment
		for j := range perBlock {
			frags = append(frags, frag(int64(i*perBlock+j), iv(valCol, int64(j))))
		}
		if i == 0 {
			frags[0].Fields = append(frags[0].Fields, iv(3, 1))
		}
		_, last = write(t, b, m, i == 0, frags...)
	}
	// readsAfterCancel runs read with a ctx it ends in the first visit and
	// returns the blocks read from then on.
	readsAfterCancel := func(name string, read func(ctx context.Context, visit func(*store.Row) error) error) uint64 {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var (
			ended time.Time
			at    uint64
		)
		err := read(cctx, func(*store.Row) error {
			if ended.IsZero() {
				cancel()
				ended = time.Now()
				at, _ = h.Reads(b)
			}
			return nil
		})
		require.ErrorIs(t, err, context.Canceled, name)
		require.False(t, ended.IsZero(), "%s visited nothing", name)
		t.Logf("%s returned %s after its ctx ended", name, time.Since(ended))
		now, _ := h.Reads(b)
		return now - at
	}
	flt := &store.SeqFilter{Has: []uint32{3}}
	n := readsAfterCancel("ReadSeq", func(ctx context.Context, visit func(*store.Row) error) error {
		_, err := b.ReadSeq(ctx, m.ID, 0, last, math.MaxInt32, flt, visit)
		return err
	})
	require.LessOrEqual(t, n, uint64(1), "blocks ReadSeq read after its ctx ended, of %d", blocks)
	n = readsAfterCancel("ReadRows", func(ctx context.Context, visit func(*store.Row) error) error {
		_, _, err := b.ReadRows(ctx, m.ID, nil, math.MinInt64, math.MaxInt64, math.MaxInt32, visit)
		return err
	})
	require.LessOrEqual(t, n, uint64(1), "blocks ReadRows read after its ctx ended, of %d", blocks)
}

// testErrClosed calls every method of the contract after Close.
func testErrClosed(t *testing.T, h Harness) {
	b := h.New(t)
	m := createTable(t, b, "t", true)
	_, last := write(t, b, m, true, frag(1, iv(valCol, 1)))
	require.NoError(t, b.Close())
	visit := func(*store.Row) error { return nil }
	calls := map[string]func() error{
		"LoadTables": func() error { _, err := b.LoadTables(ctx); return err },
		"LoadSeries": func() error { _, err := b.LoadSeries(ctx, m.ID); return err },
		"Append": func() error {
			return b.Append(ctx, []store.TableCommit{{TableID: m.ID, Sync: true, Fragments: []store.Fragment{frag(2)}}}, nil)
		},
		"NewTableID": func() error { _, err := b.NewTableID(ctx); return err },
		"PutTable":   func() error { _, err := b.PutTable(ctx, m); return err },
		"Truncate":   func() error { _, err := b.TruncateTable(ctx, m.ID); return err },
		"Drop":       func() error { _, err := b.DropTable(ctx, m.ID); return err },
		"Prune":      func() error { return b.PruneTombstone(ctx, "t", store.TableMeta{Name: "x_floor", Dropped: true}) },
		"ReadSeq":    func() error { _, err := b.ReadSeq(ctx, m.ID, 0, last, 10, nil, visit); return err },
		"SeqTime":    func() error { _, _, err := b.SeqTime(ctx, m.ID, last); return err },
		"ReadRows": func() error {
			_, _, err := b.ReadRows(ctx, m.ID, nil, math.MinInt64, math.MaxInt64, 10, visit)
			return err
		},
		"PutConsumer": func() error { return b.PutConsumers(ctx, map[string][]store.Consumer{"t": {{Name: "c"}}}) },
		"LoadCons":    func() error { _, err := b.LoadConsumers(ctx, "t"); return err },
		"DeleteCons":  func() error { return b.DeleteConsumer(ctx, "t", "c") },
		"Sweep":       func() error { _, err := b.SweepBefore(ctx, m.ID, 10, 10); return err },
		"Raise":       func() error { _, err := b.RaiseHorizon(ctx, m.ID, 2); return err },
		"Horizon":     func() error { _, err := b.Horizon(ctx, m.ID); return err },
		"FirstSince":  func() error { _, _, _, err := b.FirstSeqSince(ctx, m.ID, 1, 0, 10); return err },
		"TableStats":  func() error { _, err := b.TableStats(ctx, m.ID); return err },
		"Close":       b.Close,
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- call() }()
			select {
			case err := <-done:
				require.ErrorIs(t, err, store.ErrClosed)
			case <-timeAfter(t):
				t.Fatalf("%s blocked after Close", name)
			}
		})
	}
}

func testRestart(t *testing.T, h Harness) {
	b := h.New(t)
	m := createTable(t, b, "t", true)
	_, last := write(t, b, m, true, frag(1, iv(valCol, 1)), frag(2, iv(valCol, 2)))
	require.NoError(t, b.PutConsumers(ctx, map[string][]store.Consumer{"t": {{Name: "c", Epoch: 1, Position: last}}}))
	hz, err := b.RaiseHorizon(ctx, m.ID, 2)
	require.NoError(t, err)
	before := readSeq(t, b, m.ID, hz-1, last, 10)

	b = reopen(t, b, h.Restart)
	metas, err := b.LoadTables(ctx)
	require.NoError(t, err)
	require.Len(t, metas, 1)
	require.Equal(t, m.ID, metas[0].ID)
	require.Equal(t, m.Epoch, metas[0].Epoch)
	require.GreaterOrEqual(t, metas[0].Seq, last, "the table resumes above every number handed out")
	require.Equal(t, m.Columns, metas[0].Columns)
	series, err := b.LoadSeries(ctx, m.ID)
	require.NoError(t, err)
	require.Equal(t, series1, series)
	cs, err := b.LoadConsumers(ctx, "t")
	require.NoError(t, err)
	require.Len(t, cs, 1)
	got, err := b.Horizon(ctx, m.ID)
	require.NoError(t, err)
	require.Equal(t, hz, got)
	require.Equal(t, before, readSeq(t, b, m.ID, hz-1, last, 10))
	first, _ := write(t, b, metas[0], false, frag(3, iv(valCol, 3)))
	require.Greater(t, first, last)
}

// testCrashReopen crashes the backend after acknowledged commits that
// extended the x_seq lease and commits that did not: everything
// acknowledged is there, and numbers resume above every one handed out.
func testCrashReopen(t *testing.T, h Harness) {
	for _, n := range []int{1, 1000} {
		t.Run(fmt.Sprint(n, " fragments"), func(t *testing.T) {
			b := h.New(t)
			m := createTable(t, b, "t", true)
			frags := make([]store.Fragment, n)
			for i := range frags {
				frags[i] = frag(int64(i), iv(valCol, int64(i)))
			}
			_, last := write(t, b, m, true, frags...)
			_, last = write(t, b, m, false, frag(int64(n), iv(valCol, -1)))
			want := readSeq(t, b, m.ID, last-2, last, 10)

			b = reopen(t, b, h.Crash)
			metas, err := b.LoadTables(ctx)
			require.NoError(t, err)
			require.Len(t, metas, 1)
			require.GreaterOrEqual(t, metas[0].Seq, last, "the lease covers every number handed out")
			require.Equal(t, want, readSeq(t, b, m.ID, last-2, last, 10), "acknowledged commits survive a crash")
			require.Len(t, readSeq(t, b, m.ID, 0, last, 1<<17), n+1)
			first, _ := write(t, b, metas[0], false, frag(int64(n)+1, iv(valCol, 1)))
			require.Greater(t, first, last, "no number is handed out twice")
		})
	}
}

// testCrashAfterDDL crashes right after TRUNCATE and DROP: each is whole.
func testCrashAfterDDL(t *testing.T, h Harness) {
	b := h.New(t)
	a := createTable(t, b, "a", true)
	_, lastA := write(t, b, a, true, frag(1, iv(valCol, 1)))
	d := createTable(t, b, "d", true)
	_, lastD := write(t, b, d, true, frag(1, iv(valCol, 1)))
	na, err := b.TruncateTable(ctx, a.ID)
	require.NoError(t, err)
	tomb, err := b.DropTable(ctx, d.ID)
	require.NoError(t, err)

	b = reopen(t, b, h.Crash)
	metas, err := b.LoadTables(ctx)
	require.NoError(t, err)
	require.Len(t, metas, 2)
	require.Equal(t, na.ID, metas[0].ID)
	require.Equal(t, na.Epoch, metas[0].Epoch)
	require.Equal(t, tomb, metas[1])
	require.Empty(t, readSeq(t, b, a.ID, 0, lastA, 10), "the truncated instance's data is gone")
	require.Empty(t, readSeq(t, b, d.ID, 0, lastD, 10), "the dropped instance's data is gone")
	first, _ := write(t, b, metas[0], true, frag(1, iv(valCol, 2)))
	require.Greater(t, first, lastA)
	nd := createTable(t, b, "d", true)
	first, _ = write(t, b, nd, true, frag(1, iv(valCol, 2)))
	require.Greater(t, first, lastD)
	require.Greater(t, nd.Epoch, tomb.Epoch)
}

// timeAfter bounds how long a call after Close may take to refuse.
func timeAfter(t *testing.T) <-chan time.Time {
	t.Helper()
	return time.After(10 * time.Second)
}

// CopyDir copies the regular files under src to dst, keeping holes (badger
// preallocates sparse value-log files of hundreds of MiB): a disk
// backend's Harness.Crash copies its directory while the backend is open,
// which is what a crash at that instant leaves of what was fsynced.
func CopyDir(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o750)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return copySparse(path, target)
	})
	require.NoError(t, err)
}

// lseek(2) whence values on Linux; other systems reject them and get a
// plain copy.
const (
	seekData = 3
	seekHole = 4
)

func copySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, info.Mode().Perm())
	if err != nil {
		return err
	}
	size := info.Size()
	for off := int64(0); off < size; {
		data, err := in.Seek(off, seekData)
		if errors.Is(err, syscall.ENXIO) {
			break // only a hole is left
		}
		if err != nil { // no SEEK_DATA: copy the rest as is
			data = off
		}
		hole, err := in.Seek(data, seekHole)
		if err != nil {
			hole = size
		}
		if _, err := io.Copy(io.NewOffsetWriter(out, data), io.NewSectionReader(in, data, hole-data)); err != nil {
			_ = out.Close()
			return err
		}
		off = hole
	}
	if err := out.Truncate(size); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
