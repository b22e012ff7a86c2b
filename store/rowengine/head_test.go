package rowengine

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
)

// keysIn counts the keys of keyspace ks of table instance tid.
func keysIn(t testing.TB, db *Engine, ks byte, tid uint64) int {
	t.Helper()
	n := 0
	require.NoError(t, db.bdb.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: tablePrefix(ks, tid)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	}))
	return n
}

// TestHeadJoinsCommits checks what the head is for: a series written one
// point per commit (a Telegraf agent every interval) costs one head record
// per commit and, once flushed, one run key per series and
// maxHeadRunEntries points, not one per point.
func TestHeadJoinsCommits(t *testing.T) {
	st := newSeqTable(t)
	const commits, series = 200, 50
	for c := range int64(commits) {
		frags := make([]store.Fragment, series)
		for s := range frags {
			frags[s] = store.Fragment{Series: uint64(s + 1), Time: 10 * c, Fields: []store.Field{intField(1, c)}}
		}
		st.commit(t, frags...)
	}
	require.Zero(t, keysIn(t, st.db, ksRun, st.tid), "no run key before the head is flushed")
	require.Equal(t, commits, keysIn(t, st.db, ksHead, st.tid), "one head record per commit")
	require.Equal(t, commits*series, entriesOf(st.db, true))
	require.NoError(t, st.db.flushHeads())
	perSeries := (commits + maxHeadRunEntries - 1) / maxHeadRunEntries
	require.Equal(t, series*perSeries, keysIn(t, st.db, ksRun, st.tid), "one run per series and maxHeadRunEntries points")
	require.Zero(t, keysIn(t, st.db, ksHead, st.tid), "the flush deletes the records")
	require.Zero(t, entriesOf(st.db, true))
}

// TestHeadFlushSplit checks that a flush of more run keys than
// flushTxnKeys commits them in several transactions, so that commits
// are not held behind one large one, and stores every run all the same.
func TestHeadFlushSplit(t *testing.T) {
	st := newSeqTable(t)
	const series = 2*flushTxnKeys + 100
	for c := range int64(2) {
		frags := make([]store.Fragment, series)
		for s := range frags {
			frags[s] = store.Fragment{Series: uint64(s + 1), Time: 10 * c, Fields: []store.Field{intField(1, c)}}
		}
		st.commit(t, frags...)
	}
	before := st.db.bdb.MaxVersion()
	require.NoError(t, st.db.flushHeads())
	require.GreaterOrEqual(t, st.db.bdb.MaxVersion()-before, uint64(3), "transactions the flush committed")
	require.Equal(t, series, keysIn(t, st.db, ksRun, st.tid), "one run per series")
	require.Zero(t, keysIn(t, st.db, ksHead, st.tid), "the flush deletes the records")
	require.Len(t, readAll(t, st.db, st.tid, 0, st.seq, 2*series), 2*series)
}

// crashReopen ends db as a crash would, leaving badger's files as its last
// commit left them (no head flush, no memtable flush), and opens the
// store again with cfg; the new store is closed when the test ends.
func crashReopen(t *testing.T, db *Engine, cfg Config) *Engine {
	t.Helper()
	db.stopBackground()
	require.NoError(t, db.bdb.Close())
	require.NoError(t, db.lock.Close())
	db, err := Open(cfg, nil, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// TestHeadReplayedAfterCrash stops the store as a crash would (badger
// closed, the head never flushed) and checks that Open rebuilds the head
// from its records: every point written before is still found, so the
// same points written again are overwrites whose rows hold both writes.
func TestHeadReplayedAfterCrash(t *testing.T) {
	for _, sync := range []bool{true, false} {
		t.Run(map[bool]string{true: "sync blocks", false: "unsynced blocks"}[sync], func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Dir = t.TempDir()
			cfg.UnsafeNoSync = true
			db, err := Open(cfg, nil, nil)
			require.NoError(t, err)
			tid := nextTID()
			seq := uint64(0)
			commit := func(db *Engine, frags []store.Fragment) {
				first := uint64(0)
				if sync {
					first = seq + 1
					seq += uint64(len(frags))
				}
				require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, FirstSeq: first, Fragments: frags}}))
			}
			const series = 5
			pass := func(db *Engine, col uint32, times []int64) {
				for _, ts := range times {
					frags := make([]store.Fragment, series)
					for s := range frags {
						frags[s] = store.Fragment{Series: uint64(s + 1), Time: ts, Fields: []store.Field{intField(col, ts)}}
					}
					commit(db, frags)
				}
			}
			// In order one point per commit (joined runs), then a
			// backfill below them (gap runs).
			inOrder := []int64{100, 110, 120, 130, 140, 150}
			backfill := []int64{50, 40, 30}
			pass(db, 1, inOrder)
			pass(db, 1, backfill)
			entries := entriesOf(db, true)
			require.Equal(t, series*(len(inOrder)+len(backfill)), entries)

			db = crashReopen(t, db, cfg) // badger's files as the last commit left them
			require.Equal(t, entries, entriesOf(db, true), "the head rebuilt from its records")

			pass(db, 2, append(inOrder, backfill...))
			require.Len(t, db.table(tid).dups, series*(len(inOrder)+len(backfill)), "every point written again is an overwrite")
			if sync {
				rows := readAll(t, db, tid, 0, seq, 100)
				require.Len(t, rows, int(seq))
				for _, r := range rows {
					require.ElementsMatch(t, []store.Field{intField(1, r.Time), intField(2, r.Time)}, r.Fields, "x_seq %d", r.Seq)
				}
			}
		})
	}
}

// TestMaxTsAfterCrash checks a series' highest time as a commit after a
// crash first loads it: the head's runs count even when a point-index
// entry below them was stored, so that a point written again inside the
// head's runs is an overwrite, not a second point.
func TestMaxTsAfterCrash(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.UnsafeNoSync = true
	db, err := Open(cfg, nil, nil)
	require.NoError(t, err)
	tid := nextTID()
	seq := uint64(0)
	commit := func(db *Engine, col uint32, times ...int64) {
		t.Helper()
		var frags []store.Fragment
		for _, ts := range times {
			frags = append(frags, store.Fragment{Series: 1, Time: ts, Fields: []store.Field{intField(col, ts)}})
		}
		require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, FirstSeq: seq + 1, Fragments: frags}}))
		seq += uint64(len(frags))
	}
	commit(db, 1, 10, 20, 30)
	commit(db, 1, 7, 6) // late, descending in one gap: 6 gets a point-index entry
	require.Equal(t, 1, pointEntries(t, db, tid))

	db = crashReopen(t, db, cfg) // the head's runs are left as records only

	commit(db, 2, 20)
	require.Len(t, db.table(tid).dups, 1, "the point at 20 written again is an overwrite")
	rows := readAll(t, db, tid, 0, seq, 100)
	require.Len(t, rows, int(seq))
	for _, r := range rows {
		want := []store.Field{intField(1, r.Time)}
		if r.Time == 20 {
			want = append(want, intField(2, 20))
		}
		require.Equal(t, want, r.Fields, "x_seq %d", r.Seq)
	}
}

// TestSealedHeadConsulted holds a flush between sealing and storing, as a
// background flush may be, and checks that commits meanwhile see the
// sealed runs: a repeated point found only there is an overwrite (its
// marker written), a point above the sealed maximum is new without an
// index entry, and once the flush is reaped every point reads back.
func TestSealedHeadConsulted(t *testing.T) {
	st := newSeqTable(t)
	for c := range int64(10) {
		st.commit(t, store.Fragment{Series: 1, Time: 10 * (c + 1), Fields: []store.Field{intField(1, c)}})
	}
	f := st.db.seal()
	require.NotNil(t, f)
	require.Zero(t, entriesOf(st.db, false), "the live head starts empty")
	require.Equal(t, 10, entriesOf(st.db, true))

	st.commit(t, store.Fragment{Series: 1, Time: 50, Fields: []store.Field{intField(1, 500)}})
	_, dup := st.db.table(st.tid).dupRefs(1, 50)
	require.True(t, dup, "t=50 is in a sealed run: an overwrite")
	st.commit(t, store.Fragment{Series: 1, Time: 110, Fields: []store.Field{intField(1, 11)}})
	require.Zero(t, keysIn(t, st.db, ksPoint, st.tid), "t=50's entry is in the live head; t=110 is above the sealed maximum: new, no entry")
	require.Equal(t, 2, entriesOf(st.db, false), "t=50's overwrite and t=110 are in the live head")

	f.err = st.db.storeHeads(f)
	close(f.done)
	require.NoError(t, st.db.reapFlush(true))
	require.Zero(t, entriesOf(st.db, true)-entriesOf(st.db, false), "the sealed head is gone")
	require.Equal(t, 1, keysIn(t, st.db, ksRun, st.tid), "the sealed runs stored as one run key")
	rows := readAll(t, st.db, st.tid, 0, st.seq, 100)
	require.Len(t, rows, 12)
	for _, r := range rows {
		if r.Time == 50 {
			require.Equal(t, []store.Field{intField(1, 500)}, r.Fields, "x_seq %d: the overwrite wins", r.Seq)
		}
	}
}

// TestHeadRecordLayouts checks that a head record reads the same in
// every layout: the one this build writes (layout 8, whose runs of one
// point carry their index alone), layout 7's (a body for every run) and
// layout 6's, whose sections held absolute series and times and whose
// bodies began with the block's kind and base (a crash may leave such
// records for Open to replay).
func TestHeadRecordLayouts(t *testing.T) {
	type section struct {
		sid   uint64
		first int64
		flags byte
		body  string
	}
	arena := newArena(3, 4)
	runs := []*runBuilder{arena.run(7, -50, 0, 2), arena.run(3, 1e18, 0, 1), arena.run(300, 1e18+5, 0, 1)}
	runs[0].add(-50, 0)
	runs[0].add(-20, 4)
	runs[1].add(1e18, 1)
	runs[2].add(1e18+5, 2)
	ows := []overwrite{{ts: 9, idx: 3, entry: []byte("e1")}, {ts: 12, idx: 5, entry: []byte("e2")}}
	// The block the records index: each fragment where the runs and
	// overwrites above put it.
	frags := make([]store.Fragment, 6)
	for _, rb := range runs {
		for i, idx := range rb.idx {
			frags[idx] = store.Fragment{Series: rb.sid, Time: rb.ts[i]}
		}
	}
	for _, o := range ows {
		frags[o.idx] = store.Fragment{Series: 5, Time: o.ts}
	}
	// legacy appends a section of layouts 7 and 8 (flags after the deltas).
	legacy := func(rec []byte, prev *[2]int64, sid uint64, first int64, flags byte) []byte {
		rec = binary.AppendVarint(rec, int64(sid)-prev[0])
		rec = binary.AppendVarint(rec, first-prev[1])
		*prev = [2]int64{int64(sid), first}
		return append(rec, flags)
	}
	for _, kind := range []byte{'L', 'U'} {
		base := uint64(1000)
		hw := newHeadWriter(kind, base)
		old := []byte(nil) // layout 6: absolute series and time, kind and base in every body
		l7 := binary.AppendUvarint([]byte{recordCompact, kind}, base)
		l8 := slices.Clone(l7)
		var p7, p8 [2]int64
		for i, rb := range runs {
			hw.appendRun(rb, byte(i))
			old = binary.AppendUvarint(old, rb.sid)
			old = binary.AppendVarint(old, rb.firstTs)
			old = append(old, byte(i))
			v := rb.appendBody(binary.AppendUvarint([]byte{kind}, base)) // a run value of layout 8
			old = binary.AppendUvarint(old, uint64(len(v)))
			old = append(old, v...)
			body := rb.appendBody(nil)
			l7 = legacy(l7, &p7, rb.sid, rb.firstTs, byte(i))
			l7 = binary.AppendUvarint(l7, uint64(len(body)))
			l7 = append(l7, body...)
			if len(rb.ts) == 1 {
				l8 = legacy(l8, &p8, rb.sid, rb.firstTs, byte(i)|headSingle)
				l8 = binary.AppendUvarint(l8, rb.idx[0])
			} else {
				l8 = legacy(l8, &p8, rb.sid, rb.firstTs, byte(i))
				l8 = binary.AppendUvarint(l8, uint64(len(body)))
				l8 = append(l8, body...)
			}
		}
		hw.appendOver(5, ows)
		rr, err := newRecordReader(hw.rec, fragmentsSource(frags))
		require.NoError(t, err)
		var over []byte
		for range 4 {
			_, _, _, _, _, over, _, err = rr.next()
			require.NoError(t, err)
		}
		for _, rec := range []*[]byte{&l7, &l8} {
			*rec = legacy(*rec, map[*[]byte]*[2]int64{&l7: &p7, &l8: &p8}[rec], 5, 9, headOverwrite)
			*rec = binary.AppendUvarint(*rec, uint64(len(over)))
			*rec = append(*rec, over...)
		}
		ov := binary.AppendUvarint([]byte{kind}, base)
		ov = append(ov, over...)
		old = binary.AppendUvarint(old, 5)
		old = binary.AppendVarint(old, 9)
		old = append(old, headOverwrite)
		old = binary.AppendUvarint(old, uint64(len(ov)))
		old = append(old, ov...)

		var got [4][]section
		for i, rec := range [][]byte{hw.rec, old, l7, l8} {
			rr, err := newRecordReader(rec, fragmentsSource(frags))
			require.NoError(t, err)
			for {
				sid, first, flags, k, b, body, done, err := rr.next()
				require.NoError(t, err)
				if done {
					break
				}
				require.Equal(t, kind, k)
				require.Equal(t, base, b)
				got[i] = append(got[i], section{sid, first, flags, string(body)})
			}
			r, err := headRecordBlock(rec)
			require.NoError(t, err)
			want := ref{seq: base}
			if kind == 'U' {
				want = ref{block: base}
			}
			require.Equal(t, want, r)
		}
		require.Len(t, got[0], 4)
		require.Equal(t, got[0], got[1], "kind %c: layout 6", kind)
		require.Equal(t, got[0], got[2], "kind %c: layout 7", kind)
		require.Equal(t, got[0], got[3], "kind %c: layout 8", kind)
		var seen []int64
		require.NoError(t, scanHeadOver(kind, base, []byte(got[0][3].body), got[0][3].first, func(ts int64, _ ref, e []byte) {
			seen = append(seen, ts)
		}))
		require.Equal(t, []int64{9, 12}, seen)

		// A record's headFrag section cannot be read without its block.
		rr, err = newRecordReader(hw.rec, nil)
		require.NoError(t, err)
		_, _, _, _, _, _, _, err = rr.next() // the run of two points
		require.NoError(t, err)
		_, _, _, _, _, _, _, err = rr.next()
		require.Error(t, err)
	}

	// One point per series, the common load: 2 bytes a point, where
	// layout 8 took 4 or more (series and time deltas, flags, index).
	hw := newHeadWriter('U', 1)
	l8 := binary.AppendUvarint([]byte{recordCompact, 'U'}, 1)
	var p8 [2]int64
	arena = newArena(200, 200)
	for i := range 200 {
		rb := arena.run(uint64(1000+i), int64(i)*22_000, 0, 1)
		rb.add(rb.firstTs, uint64(i))
		hw.appendRun(rb, headInOrder)
		l8 = legacy(l8, &p8, rb.sid, rb.firstTs, headInOrder|headSingle)
		l8 = binary.AppendUvarint(l8, uint64(i))
	}
	require.Equal(t, 4+2*200, len(hw.rec))
	require.Less(t, len(hw.rec), valueThreshold, "such a record stays in the LSM tree")
	require.GreaterOrEqual(t, len(l8), 4+6*200)
}

// TestLookupRenewsViewAfterFlush: a commit's look-up view is renewed
// once a head flush has committed since it began, so that its seeks
// see the run keys the flush stored rather than step over each of them
// (keys newer than a view cost it as much as visible ones, and a
// commit of late points seeking through an old view among a flush's
// keys took a minute); the renewed view finds the newer run.
func TestLookupRenewsViewAfterFlush(t *testing.T) {
	st := newSeqTable(t)
	st.commit(t, store.Fragment{Series: 1, Time: 10, Fields: []store.Field{intField(1, 1)}})
	require.NoError(t, st.db.flushHeads())
	l := lookup{db: st.db}
	t.Cleanup(l.close)
	l.table(st.tid, st.db.tables[st.tid])
	r, err := l.runBefore(1, 10)
	require.NoError(t, err)
	require.Len(t, r, 1)
	require.Equal(t, int64(10), r[0].ts)
	view := l.view

	st.commit(t, store.Fragment{Series: 1, Time: 20, Fields: []store.Field{intField(1, 2)}})
	require.NoError(t, st.db.flushHeads())
	r, err = l.runBefore(1, 20)
	require.NoError(t, err)
	require.NotSame(t, view, l.view, "a new view")
	require.Len(t, r, 1)
	require.Equal(t, int64(20), r[0].ts, "the run the flush stored after the first view began")

	view = l.view
	_, err = l.runBefore(1, 10)
	require.NoError(t, err)
	require.Same(t, view, l.view, "no flush since: the same view")
}

// entriesOf is the entries of db's heads (headSize).
func entriesOf(db *Engine, sealed bool) int {
	e, _ := db.headSize(sealed)
	return e
}

// TestHeadBytesBounded: overwrites of large rows fill the head's records
// long before its entries reach --store-head-max-entries (a head record
// holds each overwritten point's row): the head is flushed once it holds
// --store-head-max-bytes, so it holds at most about twice that, and the
// points read back as last written.
func TestHeadBytesBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.UnsafeNoSync = true
	cfg.HeadMaxBytes = 256 << 10
	db, err := Open(cfg, nil, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	st := &seqTable{db: db, tid: nextTID()}
	big := strings.Repeat("x", 1000)
	const points, commits = 50, 200
	var most int64
	for c := range commits {
		frags := make([]store.Fragment, points)
		for p := range frags {
			frags[p] = store.Fragment{Series: uint64(p + 1), Time: 10, Fields: []store.Field{
				intField(1, int64(c)), {Col: 2, Value: store.Value{Kind: store.KindString, Str: big}}}}
		}
		st.commit(t, frags...)
		_, b := db.headSize(true)
		most = max(most, b)
	}
	require.Less(t, entriesOf(db, true), cfg.HeadMaxEntries/100, "far from the entries' bound")
	require.Positive(t, testutil.ToFloat64(db.headFlushes), "flushed by bytes")
	require.LessOrEqual(t, most, 2*cfg.HeadMaxBytes+points*2*int64(len(big)), "at most twice the bound and one commit's record")
	frags := readAll(t, db, st.tid, 0, st.seq, 1000)
	require.Equal(t, points*commits, len(frags), "every fragment drained")
	for _, f := range frags[len(frags)-points:] {
		require.Equal(t, uint64(commits-1), f.Fields[0].Value.Num, "the last commit's fragment of series %d", f.Series)
	}
}
