package rowengine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
)

// lateHarness holds lateTables synced tables of lateSeries series each,
// whose first preloadPerSeries points (times 1..preloadPerSeries, in runs
// of preloadBlock points per series and commit) are stored, and builds
// commits that spread their fragments over every table (as a group commit
// of TSBS data does: 9 tables), mixing new and late (repeated) points.
type lateHarness struct {
	db     *Engine
	tables []lateTable
	rng    *rand.Rand
	closed bool
}

type lateTable struct {
	tid  uint64
	seq  uint64
	next []int64 // per series, the next in-order time
}

const (
	lateTables       = 4
	lateSeries       = 250
	preloadPerSeries = 200
	preloadBlock     = 50
)

func newLateHarness(tb testing.TB, cfg Config) *lateHarness {
	tb.Helper()
	db, err := Open(cfg, nil, nil)
	require.NoError(tb, err)
	h := &lateHarness{db: db, tables: make([]lateTable, lateTables), rng: rand.New(rand.NewPCG(1, 2))}
	tb.Cleanup(func() {
		if !h.closed {
			require.NoError(tb, db.Close())
		}
	})
	series := make([]store.Series, lateSeries)
	for i := range series {
		series[i] = store.Series{ID: uint64(i + 1), Tags: []store.Field{{Col: 1, Value: store.Value{Kind: store.KindTag, Str: "host_" + strconv.Itoa(i)}}}}
	}
	for i := range h.tables {
		t := &h.tables[i]
		t.tid = nextTID()
		t.next = make([]int64, lateSeries)
		for s := range t.next {
			t.next[s] = 1
		}
	}
	for b := 0; b < preloadPerSeries/preloadBlock; b++ {
		commits := make([]store.TableCommit, len(h.tables))
		for i := range h.tables {
			frags := make([]store.Fragment, 0, lateSeries*preloadBlock)
			for s := range lateSeries {
				for range preloadBlock {
					frags = append(frags, h.newPoint(i, s))
				}
			}
			commits[i] = h.commit(i, frags)
			if b == 0 {
				commits[i].NewSeries = series
			}
		}
		require.NoError(tb, db.commit(commits))
	}
	// Stored, as points written again long after: their look-ups read
	// the tree, not the head.
	require.NoError(tb, db.flushHeads())
	return h
}

func (h *lateHarness) newPoint(table, s int) store.Fragment {
	t := &h.tables[table]
	f := store.Fragment{Series: uint64(s + 1), Time: t.next[s], Fields: []store.Field{intField(2, t.next[s])}}
	t.next[s]++
	return f
}

// latePoint is a repeat of a random preloaded point.
func (h *lateHarness) latePoint() store.Fragment {
	s := h.rng.IntN(lateSeries)
	ts := 1 + h.rng.Int64N(preloadPerSeries)
	return store.Fragment{Series: uint64(s + 1), Time: ts, Fields: []store.Field{intField(3, -ts)}}
}

// group returns one commit of n fragments spread evenly over the tables,
// a share late/100 of them late (spread evenly too).
func (h *lateHarness) group(n, late int) []store.TableCommit {
	commits := make([]store.TableCommit, len(h.tables))
	per := n / len(h.tables)
	for i := range h.tables {
		frags := make([]store.Fragment, per)
		for j := range frags {
			if j*late/100 != (j+1)*late/100 {
				frags[j] = h.latePoint()
			} else {
				frags[j] = h.newPoint(i, j%lateSeries)
			}
		}
		commits[i] = h.commit(i, frags)
	}
	return commits
}

func (h *lateHarness) commit(table int, frags []store.Fragment) store.TableCommit {
	t := &h.tables[table]
	tc := store.TableCommit{TableID: t.tid, FirstSeq: t.seq + 1, Fragments: frags, CommitTime: 1}
	t.seq += uint64(len(frags))
	return tc
}

// TestLateLookupsBounded proves that placing N late points costs a bounded
// number of index reads per point, whatever N and whatever else the commit
// holds: no per-point iterator (an iterator over the write transaction
// sorted every pending write of the commit, those of the tables before
// included), at most one point-index get, one run seek and two gap seeks
// per point, and three iterators per commit.
func TestLateLookupsBounded(t *testing.T) {
	for _, n := range []int{1_000, 50_000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Dir = t.TempDir()
			cfg.UnsafeNoSync = true
			h := newLateHarness(t, cfg)
			before := h.db.stats.load()
			commits := h.group(n, 100)
			require.NoError(t, h.db.commit(commits))
			after := h.db.stats.load()
			gets := after.pointGets - before.pointGets
			seeks := after.runSeeks - before.runSeeks
			maxSeeks := after.maxSeeks - before.maxSeeks
			gapSeeks := after.gapSeeks - before.gapSeeks
			iters := after.iterators - before.iterators
			t.Logf("N=%d: %d point gets, %d run seeks, %d gap seeks, %d max seeks, %d iterators", n, gets, seeks, gapSeeks, maxSeeks, iters)
			require.LessOrEqual(t, gets, uint64(n), "point-index gets")
			require.LessOrEqual(t, seeks, uint64(n), "run seeks")
			require.LessOrEqual(t, gapSeeks, uint64(2*n), "gap seeks")
			require.Zero(t, maxSeeks, "series high-water times are known in memory after the preload")
			require.LessOrEqual(t, iters, uint64(3), "iterators per commit")
			require.Positive(t, gets, "late points are looked up")

			// Every late point is an overwrite: each preloaded point it hit
			// now reads as the union of both fragments.
			for i, tc := range commits {
				hit := map[pointID]bool{}
				for _, f := range tc.Fragments {
					hit[pointID{f.Series, f.Time}] = true
				}
				rows := readAll(t, h.db, h.tables[i].tid, 0, uint64(lateSeries*preloadPerSeries), 10_000)
				require.Len(t, rows, lateSeries*preloadPerSeries)
				for _, r := range rows {
					if hit[pointID{r.Series, r.Time}] {
						require.Len(t, r.Fields, 2, "x_seq %d", r.Seq)
						require.Equal(t, intField(3, -r.Time), r.Fields[1])
					} else {
						require.Len(t, r.Fields, 1, "x_seq %d", r.Seq)
					}
				}
			}
		})
	}
}

// BenchmarkCommitLate is the store's commit path with a share of late
// (repeated) points, at several commit sizes (fragments spread over 4
// tables), on disk with fsync: the cost per point (ns/point) should stay
// flat across commit sizes at each share.
func BenchmarkCommitLate(b *testing.B) {
	for _, late := range []int{0, 10, 100} {
		for _, size := range []int{1_000, 10_000, 50_000} {
			b.Run(fmt.Sprintf("late=%d%%/size=%dk", late, size/1000), func(b *testing.B) {
				cfg := DefaultConfig()
				cfg.Dir = b.TempDir()
				h := newLateHarness(b, cfg)
				groups := make([][]store.TableCommit, b.N)
				for i := range groups {
					groups[i] = h.group(size, late)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					if err := h.db.commit(groups[i]); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/point")
			})
		}
	}
}

// TestOverwriteEntriesAfterRestart checks that a drain merges overwritten
// points the same from the entries this process wrote (kept in memory) as
// from the point index read back after a restart (once: the read keeps
// them), including a point overwritten again after the restart.
func TestOverwriteEntriesAfterRestart(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.UnsafeNoSync = true
	h := newLateHarness(t, cfg)
	commits := h.group(2_000, 50)
	require.NoError(t, h.db.commit(commits))
	tid, upto := h.tables[0].tid, h.tables[0].seq
	before := readAll(t, h.db, tid, 0, upto, 700)
	gets := h.db.stats.load().pointGets
	h.closed = true
	require.NoError(t, h.db.Close())

	db, err := Open(cfg, nil, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	require.Equal(t, before, readAll(t, db, tid, 0, upto, 700), "the same rows from the point index on disk")
	// The first read kept the entries it read: the next one reads none.
	read := db.stats.readEntries.Load()
	require.Positive(t, read, "the first read after the restart read entries")
	require.Equal(t, before, readAll(t, db, tid, 0, upto, 700))
	require.Equal(t, read, db.stats.readEntries.Load(), "entries read again")

	// One overwritten point written again: its entry is in memory again.
	f := commits[0].Fragments[1]
	f.Fields = []store.Field{intField(3, 42)}
	require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, FirstSeq: upto + 1, Fragments: []store.Fragment{f}, CommitTime: 1}}))
	after := readAll(t, db, tid, 0, upto+1, 700)
	require.Len(t, after, len(before)+1)
	for _, r := range after {
		if r.Series == f.Series && r.Time == f.Time {
			require.Equal(t, intField(3, 42), r.Fields[len(r.Fields)-1], "x_seq %d: the latest write wins", r.Seq)
		}
	}
	require.Positive(t, gets, "the harness looked points up while writing")
}

// TestGapRuns checks how new late points are placed: a backfill (each
// commit older than the one before, as the batches of a file sent newest
// first) and interleaved commits (two writers' batches of one time-ordered
// stream committing out of order) cost a few seeks per series and commit,
// not reads per point, and write no point-index entry; a resend of every
// point afterwards finds each one (every row then the union of both
// fragments).
func TestGapRuns(t *testing.T) {
	const series, perCommit, commits = 20, 50, 8
	st := newSeqTable(t)
	db := st.db
	commit := func(from int64, col uint32) {
		t.Helper()
		var frags []store.Fragment
		for s := range series {
			for k := range int64(perCommit) {
				frags = append(frags, store.Fragment{Series: uint64(s + 1), Time: from + k, Fields: []store.Field{intField(col, from+k)}})
			}
		}
		st.commit(t, frags...)
	}
	// Newest first, then the odd slots of a second range after its even
	// ones (writer 2's batches landing before writer 1's).
	var order []int64
	for c := commits - 1; c >= 0; c-- {
		order = append(order, int64(c*perCommit))
	}
	for _, odd := range []int{0, 1} {
		for c := odd; c < commits; c += 2 {
			order = append(order, int64((commits+c)*perCommit))
		}
	}
	before := db.stats.load()
	for _, from := range order {
		commit(from, 1)
	}
	after := db.stats.load()
	reads := after.pointGets - before.pointGets + after.runSeeks - before.runSeeks + after.gapSeeks - before.gapSeeks
	t.Logf("%d late points: %d point gets, %d run seeks, %d gap seeks", st.seq, after.pointGets-before.pointGets, after.runSeeks-before.runSeeks, after.gapSeeks-before.gapSeeks)
	require.LessOrEqual(t, reads, uint64(3*series*len(order)), "reads: at most 3 per series and commit")
	require.Zero(t, pointEntries(t, db, st.tid), "no point-index entry for new points")

	first := st.seq
	for _, from := range order {
		commit(from, 2)
	}
	rows := readAll(t, db, st.tid, 0, st.seq, 1000)
	require.Len(t, rows, int(st.seq))
	for _, r := range rows {
		require.Equal(t, []store.Field{intField(1, r.Time), intField(2, r.Time)}, r.Fields, "x_seq %d (first pass up to %d)", r.Seq, first)
	}
}

// TestGapBetweenWrites checks the pattern of concurrent writers sharing
// a stream: writes 0 and 4 of a stream land in one group commit, writes 1
// and 3 in a later one and write 2 last. Writes 1 to 3 are late, but new:
// the series' runs of the writes of one commit are separate, so the time
// between them stays a gap, and each costs a few seeks per series, no
// point get and no point-index entry. A resend of all five then finds
// every point.
func TestGapBetweenWrites(t *testing.T) {
	const series, perWrite = 30, 20
	st := newSeqTable(t)
	db := st.db
	write := func(w int, col uint32) []store.Fragment {
		var frags []store.Fragment
		for k := range int64(perWrite) {
			for s := range series {
				ts := int64(w*perWrite) + k
				frags = append(frags, store.Fragment{Series: uint64(s + 1), Time: ts, Fields: []store.Field{intField(col, ts)}})
			}
		}
		return frags
	}
	commit := func(col uint32, ws ...int) {
		t.Helper()
		var frags []store.Fragment
		var starts []int
		for i, w := range ws {
			if i > 0 {
				starts = append(starts, len(frags))
			}
			frags = append(frags, write(w, col)...)
		}
		require.NoError(t, db.commit([]store.TableCommit{{TableID: st.tid, FirstSeq: st.seq + 1, Fragments: frags, Writes: starts}}))
		st.seq += uint64(len(frags))
	}
	commit(1, 0, 4) // in order: a run per series and write
	before := db.stats.load()
	commit(1, 1, 3) // late, in one gap: again a run per series and write
	commit(1, 2)
	after := db.stats.load()
	require.Zero(t, after.pointGets-before.pointGets, "writes 1 to 3's points are new: no point get")
	require.LessOrEqual(t, after.gapSeeks-before.gapSeeks, uint64(2*2*series), "one gap per series and commit")
	require.Zero(t, pointEntries(t, db, st.tid), "no point-index entry for new points")

	first := st.seq
	commit(2, 0, 1, 2, 3, 4)
	rows := readAll(t, db, st.tid, 0, st.seq, 1000)
	require.Len(t, rows, int(st.seq))
	for _, r := range rows {
		require.Equal(t, []store.Field{intField(1, r.Time), intField(2, r.Time)}, r.Fields, "x_seq %d (first pass up to %d)", r.Seq, first)
	}
}

// TestLateAboveStoredNoReads checks the late points of concurrent
// writers between two head flushes: a write that commits after a later
// one of the same series is placed from the head alone, without a read
// of the LSM tree, also after a flush for the points above what it
// stored; points at or below that are looked up, and every row holds
// what was written.
func TestLateAboveStoredNoReads(t *testing.T) {
	const series, perWrite = 30, 20
	st := newSeqTable(t)
	db := st.db
	write := func(w int, col uint32) {
		t.Helper()
		var frags []store.Fragment
		for k := range int64(perWrite) {
			for s := range series {
				ts := int64(w*perWrite) + k
				frags = append(frags, store.Fragment{Series: uint64(s + 1), Time: ts, Fields: []store.Field{intField(col, ts)}})
			}
		}
		st.commit(t, frags...)
	}
	reads := func(c lookupCounts) uint64 { return c.pointGets + c.runSeeks + c.gapSeeks }
	write(0, 1)
	write(2, 1)
	before := db.stats.load()
	write(1, 1) // late: writes 0 and 2 are in the head
	require.Equal(t, reads(before), reads(db.stats.load()), "late points above the stored bound: no read")

	require.NoError(t, db.flushHeads())
	write(4, 1)
	before = db.stats.load()
	write(3, 1) // late, above what the flush stored (write 2)
	require.Equal(t, reads(before), reads(db.stats.load()), "late points above the flushed ones: no read")
	write(1, 2) // write 1 again: its points are stored, and must be found
	require.Greater(t, reads(db.stats.load()), reads(before), "points at or below the stored bound are looked up")

	rows := readAll(t, db, st.tid, 0, st.seq, 10000)
	require.Len(t, rows, int(st.seq))
	for _, r := range rows {
		want := []store.Field{intField(1, r.Time)}
		if r.Time >= perWrite && r.Time < 2*perWrite {
			want = append(want, intField(2, r.Time))
		}
		require.Equal(t, want, r.Fields, "x_seq %d", r.Seq)
	}
	require.NoError(t, db.flushHeads())
	require.Equal(t, series*perWrite, pointEntries(t, db, st.tid), "point-index entries only for the points written twice")
}

// TestLatePlacementModel writes random commits mixing in-order, backfilled
// (descending), random and repeated points over a few series, with
// restarts, and checks every fragment against a model: its row holds, per
// column, the value of the last fragment at its point that set it. A point
// missed by the look-ups (a gap or run rule placing an existing point as
// new) would show as a row without the columns of its other fragments.
func TestLatePlacementModel(t *testing.T) {
	// The head flushed at every commit, now and then, and only at Close.
	for seed := range uint64(12) {
		headMax := [...]int{1, 64, DefaultHeadMaxEntries}[seed%3]
		t.Run(fmt.Sprintf("seed=%d/head=%d", seed, headMax), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			cfg := DefaultConfig()
			cfg.Dir = t.TempDir()
			cfg.UnsafeNoSync = true
			cfg.HeadMaxEntries = headMax
			db, err := Open(cfg, nil, nil)
			require.NoError(t, err)
			defer func() { require.NoError(t, db.Close()) }()
			tid := nextTID()
			type write struct {
				col uint32
				seq uint64
			}
			model := map[pointID][]write{}
			seq := uint64(0)
			for c := range 150 {
				if c%50 == 49 {
					require.NoError(t, db.Close())
					db, err = Open(cfg, nil, nil)
					require.NoError(t, err)
				}
				n := 1 + rng.IntN(40)
				start := rng.Int64N(2000)
				var frags []store.Fragment
				for k := range n {
					var ts int64
					switch c % 4 {
					case 0: // in order
						ts = start + int64(k)
					case 1: // backfill
						ts = start - int64(k)
					case 2: // random
						ts = rng.Int64N(2000)
					default: // sparse steps
						ts = start + int64(k)*int64(1+rng.IntN(5))
					}
					sid := uint64(1 + rng.IntN(4))
					seq++
					col := uint32(1 + rng.IntN(4))
					frags = append(frags, store.Fragment{Series: sid, Time: ts, Fields: []store.Field{intField(col, int64(seq))}})
					id := pointID{sid, ts}
					model[id] = append(model[id], write{col, seq})
				}
				// Up to 3 writes per commit, as a group of concurrent
				// requests: each series' in-order points per write form
				// a run of their own.
				var writes []int
				for k := 1; k < n && len(writes) < 3; k++ {
					if rng.IntN(8) == 0 {
						writes = append(writes, k)
					}
				}
				require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, FirstSeq: seq - uint64(n) + 1, Fragments: frags, Writes: writes}}))
			}
			rows := readAll(t, db, tid, 0, seq, 97)
			require.Len(t, rows, int(seq))
			for _, r := range rows {
				last := map[uint32]int64{}
				for _, w := range model[pointID{r.Series, r.Time}] {
					last[w.col] = int64(w.seq)
				}
				var want []store.Field
				for col, v := range last {
					want = append(want, intField(col, v))
				}
				require.ElementsMatch(t, want, r.Fields, "x_seq %d at (%d, %d)", r.Seq, r.Series, r.Time)
			}
		})
	}
}

// BenchmarkReadSeqResent drains a table whose every point was written
// twice (a load, then the same load again with other values, as a retried
// or replayed writer does): 100 series × 500 times of 10 integer fields, in
// blocks of 1,000 fragments, so every one of the 100,000 rows is the
// coalesced union of two fragments.
// Pages of 10,000 rows, as `ingestd bench` drains.
func BenchmarkReadSeqResent(b *testing.B) {
	st := newSeqTable(b)
	db, tid := st.db, st.tid
	const series, times, block = 100, 500, 1000
	for pass := range 2 {
		var frags []store.Fragment
		for ts := range int64(times) {
			for s := range uint64(series) {
				fields := make([]store.Field, 10) // a TSBS cpu line's 10 integer fields
				for c := range fields {
					fields[c] = intField(uint32(c+1), ts*int64(c+pass+1))
				}
				frags = append(frags, store.Fragment{Series: s + 1, Time: ts, Fields: fields})
				if len(frags) == block {
					st.commit(b, frags...)
					frags = nil
				}
			}
		}
	}
	seq := st.seq
	b.ResetTimer()
	for b.Loop() {
		after, rows := uint64(0), 0
		for after < seq {
			_, err := db.readSeq(context.Background(), tid, after, seq, 10_000, nil, func(r *store.Row) error {
				if len(r.Fields) != 10 || r.Fields[0] != intField(1, 2*r.Time) {
					return fmt.Errorf("x_seq %d: %d fields", r.Seq, len(r.Fields))
				}
				after = r.Seq
				rows++
				return nil
			})
			require.NoError(b, err)
		}
		require.Equal(b, int(seq), rows)
	}
	b.ReportMetric(float64(b.N)*float64(seq)/b.Elapsed().Seconds(), "rows/s")
}

// TestGapRunsBounded checks that one block's late points scattered over
// more gaps than maxGapRuns cost at most maxGapRuns gap look-ups per series:
// the points beyond them are indexed, and every point stays exact.
func TestGapRunsBounded(t *testing.T) {
	const gaps = maxGapRuns + 4
	st := newSeqTable(t)
	db := st.db
	for i := range int64(gaps + 1) { // runs at 0-1, 100-101, 200-201, …: gaps between them (too wide for the head to join them)
		st.commit(t, store.Fragment{Series: 1, Time: 100 * i, Fields: []store.Field{intField(1, 100*i)}},
			store.Fragment{Series: 1, Time: 100*i + 1, Fields: []store.Field{intField(1, 100*i+1)}})
	}
	require.NoError(t, db.flushHeads()) // the runs in the tree: the gaps are looked up there
	var late []store.Fragment
	for i := range int64(gaps) {
		late = append(late, store.Fragment{Series: 1, Time: 100*i + 50, Fields: []store.Field{intField(1, 100*i+50)}})
	}
	before := db.stats.load()
	st.commit(t, late...)
	after := db.stats.load()
	require.Equal(t, uint64(2*maxGapRuns), after.gapSeeks-before.gapSeeks, "gap seeks: two per gap, for maxGapRuns gaps")
	require.Equal(t, gaps-maxGapRuns, pointEntries(t, db, st.tid), "the points beyond maxGapRuns gaps are indexed")
	st.commit(t, late...) // every late point again: each found
	for _, r := range readAll(t, db, st.tid, 0, st.seq, 100) {
		require.Equal(t, []store.Field{intField(1, r.Time)}, r.Fields, "x_seq %d", r.Seq)
	}
	require.Len(t, db.table(st.tid).dups, gaps, "every resent point is an overwrite")
}

// seqTable is one synced table of a fresh store (no fsync), committed to
// in x_seq order.
type seqTable struct {
	db       *Engine
	tid, seq uint64
}

func newSeqTable(tb testing.TB) *seqTable {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.Dir = tb.TempDir()
	cfg.UnsafeNoSync = true
	db, err := Open(cfg, nil, nil)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, db.Close()) })
	return &seqTable{db: db, tid: nextTID()}
}

// commit writes frags as one block, x_seq following the last.
func (s *seqTable) commit(tb testing.TB, frags ...store.Fragment) {
	tb.Helper()
	require.NoError(tb, s.db.commit([]store.TableCommit{{TableID: s.tid, FirstSeq: s.seq + 1, Fragments: frags}}))
	s.seq += uint64(len(frags))
}

// pointEntries counts table instance tid's point-index entries.
func pointEntries(tb testing.TB, db *Engine, tid uint64) int { return keysIn(tb, db, ksPoint, tid) }
