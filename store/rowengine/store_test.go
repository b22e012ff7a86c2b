package rowengine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ingestd/ingestd/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// configs are the store configurations every contract test runs against
// (docs/design.md#engineering-rules).
func configs(t *testing.T) map[string]Config {
	onDisk := DefaultConfig()
	onDisk.Dir = t.TempDir()
	mem := DefaultConfig()
	mem.InMemory = true
	noSync := DefaultConfig()
	noSync.Dir = t.TempDir()
	noSync.UnsafeNoSync = true
	return map[string]Config{"on-disk": onDisk, "in-memory": mem, "no-sync": noSync}
}

func forEachConfig(t *testing.T, fn func(t *testing.T, db *Engine)) {
	for name, cfg := range configs(t) {
		t.Run(name, func(t *testing.T) {
			db, err := Open(cfg, nil, nil)
			require.NoError(t, err)
			defer func() { require.NoError(t, db.Close()) }()
			fn(t, db)
		})
	}
}

func intField(col uint32, v int64) store.Field {
	return store.Field{Col: col, Value: store.Value{Kind: store.KindInt, Num: uint64(v)}}
}

// readAll drains tid after..upto with the given page size, returning rows
// with copied fields.
func readAll(t *testing.T, db *Engine, tid, after, upto uint64, limit int) []store.Row {
	t.Helper()
	var out []store.Row
	for {
		n := 0
		_, err := db.readSeq(context.Background(), tid, after, upto, limit, nil, func(r *store.Row) error {
			c := *r
			c.Fields = append([]store.Field(nil), r.Fields...)
			out = append(out, c)
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

func TestReadSeqAcrossBlocks(t *testing.T) {
	forEachConfig(t, func(t *testing.T, db *Engine) {
		tid := nextTID()
		series := []store.Series{{ID: 1, Tags: []store.Field{{Col: 0, Value: store.Value{Kind: store.KindTag, Str: "a"}}}}}
		seq := uint64(0)
		// Blocks of 1, 200 and 70 fragments: pages must cross the skip
		// index (64) and block boundaries.
		for i, n := range []int{1, 200, 70} {
			frags := make([]store.Fragment, n)
			for j := range frags {
				frags[j] = store.Fragment{Series: 1, Time: int64(seq) + int64(j) + 1, Fields: []store.Field{intField(1, int64(seq)+int64(j)+1)}}
			}
			tc := store.TableCommit{TableID: tid, FirstSeq: seq + 1, Fragments: frags}
			if i == 0 {
				tc.NewSeries = series
			}
			require.NoError(t, db.commit([]store.TableCommit{tc}))
			seq += uint64(n)
		}
		for _, limit := range []int{1, 7, 64, 65, 1000} {
			t.Run(fmt.Sprint("limit=", limit), func(t *testing.T) {
				rows := readAll(t, db, tid, 0, seq, limit)
				require.Len(t, rows, int(seq))
				for i, r := range rows {
					require.Equal(t, uint64(i+1), r.Seq)
					require.Equal(t, int64(i+1), r.Time)
					require.Equal(t, []store.Field{intField(1, int64(i+1))}, r.Fields)
				}
			})
		}
		t.Run("upto bounds the read", func(t *testing.T) {
			rows := readAll(t, db, tid, 100, 150, 1000)
			require.Len(t, rows, 50)
			require.Equal(t, uint64(101), rows[0].Seq)
			require.Equal(t, uint64(150), rows[49].Seq)
		})
	})
}

func TestCoalesceOverwrites(t *testing.T) {
	forEachConfig(t, func(t *testing.T, db *Engine) {
		tid := nextTID()
		// An unsynced fragment, then two synced ones at the same point (one
		// in the same commit as a late point of another series).
		require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, NewSeries: []store.Series{{ID: 1}, {ID: 2}},
			Fragments: []store.Fragment{{Series: 1, Time: 100, Fields: []store.Field{intField(1, 1), intField(2, 2)}}}}}))
		require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, FirstSeq: 1, Fragments: []store.Fragment{
			{Series: 2, Time: 100, Fields: []store.Field{intField(1, 9)}},
			{Series: 1, Time: 100, Fields: []store.Field{intField(2, 20)}},
			{Series: 1, Time: 50, Fields: []store.Field{intField(3, 5)}},
		}}}))
		require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, FirstSeq: 4, Fragments: []store.Fragment{
			{Series: 1, Time: 100, Fields: []store.Field{intField(3, 30)}},
			{Series: 1, Time: 100, Fields: []store.Field{intField(1, 10)}},
		}}}))
		merged := []store.Field{intField(1, 10), intField(2, 20), intField(3, 30)}
		rows := readAll(t, db, tid, 0, 5, 10)
		require.Len(t, rows, 5)
		require.Equal(t, []store.Field{intField(1, 9)}, rows[0].Fields, "another series at the same time is not merged")
		require.ElementsMatch(t, merged, rows[1].Fields)
		require.Equal(t, []store.Field{intField(3, 5)}, rows[2].Fields, "a late point of its own stays alone")
		require.ElementsMatch(t, merged, rows[3].Fields)
		require.ElementsMatch(t, merged, rows[4].Fields)
	})
}

func TestValueKindsRoundTrip(t *testing.T) {
	forEachConfig(t, func(t *testing.T, db *Engine) {
		tid := nextTID()
		fields := []store.Field{
			{Col: 1, Value: store.Value{Kind: store.KindFloat, Num: math.Float64bits(-1.5e300)}},
			{Col: 2, Value: store.Value{Kind: store.KindInt, Num: 1 << 63}},
			{Col: 3, Value: store.Value{Kind: store.KindUint, Num: math.MaxUint64}},
			{Col: 4, Value: store.Value{Kind: store.KindString, Str: "héllo\n\"x\""}},
			{Col: 5, Value: store.Value{Kind: store.KindBool, Num: 1}},
			{Col: 6, Value: store.Value{Kind: store.KindString, Str: ""}},
		}
		require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, FirstSeq: 1, NewSeries: []store.Series{{ID: 1}},
			Fragments: []store.Fragment{{Series: 1, Time: math.MinInt64 + 1, Fields: fields}}}}))
		rows := readAll(t, db, tid, 0, 1, 10)
		require.Len(t, rows, 1)
		require.Equal(t, int64(math.MinInt64+1), rows[0].Time)
		require.Equal(t, fields, rows[0].Fields)
	})
}

// TestSeriesOwnKeysAndDrop: a commit's series and the owner's keys
// written with it survive a restart, and DropInstance removes the
// instance's series and rows, leaving the owner's keys.
func TestSeriesOwnKeysAndDrop(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	db, err := Open(cfg, nil, nil)
	require.NoError(t, err)
	tid := nextTID()
	tags := []store.Field{{Col: 0, Value: store.Value{Kind: store.KindTag, Str: "a,b=c d"}}}
	own := KV{Key: []byte{ksMeta, 't'}, Value: []byte("owner's")}
	require.NoError(t, db.Apply(ctx, []store.TableCommit{{TableID: tid, NewSeries: []store.Series{{ID: 1, Tags: tags}},
		FirstSeq: 1, Fragments: []store.Fragment{{Series: 1, Time: 1, Fields: []store.Field{intField(1, 1)}}}}}, own))
	require.NoError(t, db.Close())

	db, err = Open(cfg, nil, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	series, err := db.LoadSeries(ctx, tid)
	require.NoError(t, err)
	require.Equal(t, []store.Series{{ID: 1, Tags: tags}}, series)
	require.Equal(t, own.Value, ownValue(t, db, own.Key))

	require.NoError(t, db.DropInstance(ctx, tid))
	require.Empty(t, readAll(t, db, tid, 0, 1, 10))
	series, err = db.LoadSeries(ctx, tid)
	require.NoError(t, err)
	require.Empty(t, series)
	require.Equal(t, own.Value, ownValue(t, db, own.Key), "the owner's keys stay")
}

// ownValue reads an owner's key (nil when there is none).
func ownValue(t *testing.T, db *Engine, k []byte) []byte {
	t.Helper()
	var v []byte
	require.NoError(t, db.View(context.Background(), func(txn *badger.Txn) error {
		item, err := txn.Get(k)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		require.NoError(t, err)
		v, err = item.ValueCopy(nil)
		return err
	}))
	return v
}

func TestOpenRefusals(t *testing.T) {
	t.Run("locked", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Dir = t.TempDir()
		db, err := Open(cfg, nil, nil)
		require.NoError(t, err)
		defer func() { require.NoError(t, db.Close()) }()
		_, err = Open(cfg, nil, nil)
		require.ErrorIs(t, err, store.ErrLocked)
	})
	t.Run("unwritable", func(t *testing.T) {
		if os.Geteuid() == 0 {
			// root ignores permissions; use a path under a regular file.
			f := filepath.Join(t.TempDir(), "file")
			require.NoError(t, os.WriteFile(f, nil, 0o600))
			cfg := DefaultConfig()
			cfg.Dir = filepath.Join(f, "data")
			_, err := Open(cfg, nil, nil)
			require.ErrorContains(t, err, "create data directory")
			return
		}
		dir := t.TempDir()
		require.NoError(t, os.Chmod(dir, 0o500))
		cfg := DefaultConfig()
		cfg.Dir = filepath.Join(dir, "data")
		_, err := Open(cfg, nil, nil)
		require.ErrorContains(t, err, "create data directory")
	})
	t.Run("disk full", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Dir = t.TempDir()
		cfg.MinFreeBytes = math.MaxInt64
		_, err := Open(cfg, nil, nil)
		require.ErrorIs(t, err, store.ErrDiskFull)
		require.ErrorContains(t, err, cfg.Dir, "the error names the directory")
		cfg.MinFreeBytes = 0
		db, err := Open(cfg, nil, nil)
		require.NoError(t, err, "a refused Open leaves the directory unlocked")
		require.NoError(t, db.Close())
	})
}

// TestDiskFull checks that every write refuses, writing nothing, while the
// file system has less than MinFreeBytes free, and works again once it has
// more.
func TestDiskFull(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.MinFreeBytes = 1 << 20
	db, err := Open(cfg, nil, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	var free uint64 = 1<<20 - 1
	db.freeBytes = func(dir string) (uint64, error) {
		require.Equal(t, cfg.Dir, dir)
		return free, nil
	}
	tid := nextTID()
	own := KV{Key: []byte{ksMeta, 't'}, Value: []byte{1}}
	commit := []store.TableCommit{{TableID: tid, NewSeries: []store.Series{{ID: 1}},
		FirstSeq: 1, Fragments: []store.Fragment{{Series: 1, Time: 1, Fields: []store.Field{intField(1, 1)}}}}}
	writes := map[string]func() error{
		"apply": func() error { return db.Apply(context.Background(), commit, own) },
		"write batch": func() error {
			return db.WriteBatch(context.Background(), func(*badger.WriteBatch) error { return nil })
		},
		"check": db.CheckSpace,
	}
	for name, write := range writes {
		err := write()
		require.ErrorIs(t, err, store.ErrDiskFull, name)
		require.ErrorContains(t, err, "1048575 bytes free", name)
	}
	require.Nil(t, ownValue(t, db, own.Key), "a refused write writes nothing")
	require.Empty(t, readAll(t, db, tid, 0, 1, 10))

	free = 1 << 20
	for name, write := range writes {
		require.NoError(t, write(), name)
	}
	require.Len(t, readAll(t, db, tid, 0, 1, 10), 1)
}

func TestBlockCorruption(t *testing.T) {
	frags := []store.Fragment{{Series: 1, Time: 5, Fields: []store.Field{intField(1, 1), {Col: 2, Value: store.Value{Kind: store.KindString, Str: "abc"}}}}}
	var body []byte
	var offs []uint64
	block, _, _ := appendBlock(nil, 1, 42, frags, body, offs)
	for cut := range len(block) {
		t.Run(fmt.Sprint("truncated at ", cut), func(t *testing.T) {
			var br blockReader
			var f store.Fragment
			err := br.init(block[:cut])
			if err == nil {
				err = br.next(&f)
			}
			require.Error(t, err, "a torn block must not decode")
		})
	}
}

// TestOpenWithEmptyLogs checks that Open survives the empty write-ahead and
// value log files a crash leaves when it hits badger between creating such
// a file and sizing it (dgraph-io/badger#2207), and that no data is lost.
func TestOpenWithEmptyLogs(t *testing.T) {
	for _, files := range [][]string{{"00099.mem"}, {"000099.vlog"}, {"00099.mem", "000099.vlog"}} {
		t.Run(fmt.Sprint(files), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Dir = t.TempDir()
			db, err := Open(cfg, nil, nil)
			require.NoError(t, err)
			tid := nextTID()
			require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, FirstSeq: 1, NewSeries: []store.Series{{ID: 1}},
				Fragments: []store.Fragment{{Series: 1, Time: 1, Fields: []store.Field{intField(1, 7)}}}}}))
			require.NoError(t, db.Close())
			for _, f := range files {
				require.NoError(t, os.WriteFile(filepath.Join(cfg.Dir, f), nil, 0o644))
			}
			db, err = Open(cfg, nil, nil)
			require.NoError(t, err)
			defer func() { require.NoError(t, db.Close()) }()
			rows := readAll(t, db, tid, 0, 1, 10)
			require.Len(t, rows, 1)
			require.Equal(t, []store.Field{intField(1, 7)}, rows[0].Fields)
		})
	}
}

// TestTornSplitCommit checks what a crash between the transactions of a
// split commit leaves: Commit writes the head record (with the
// overwrites' entries) before the block, so a record may index a block
// that was never stored, and the commit's torn mark (written before its
// first transaction) is left. Open drops such a record: the lost fragment
// is skipped and the stored fragments of the point still coalesce.
func TestTornSplitCommit(t *testing.T) {
	cases := []struct {
		name     string
		firstSeq uint64 // of the commits; 0: unsynced blocks
	}{{"sync blocks", 1}, {"unsynced blocks", 0}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Dir = t.TempDir()
			db, err := Open(cfg, nil, nil)
			require.NoError(t, err)
			tid := nextTID()
			seq := func(n uint64) uint64 {
				if tc.firstSeq == 0 {
					return 0
				}
				return n
			}
			// Two fragments at point (1, 100), then a third whose block is lost.
			require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, FirstSeq: seq(1), NewSeries: []store.Series{{ID: 1}},
				Fragments: []store.Fragment{{Series: 1, Time: 100, Fields: []store.Field{intField(1, 1)}}}}}))
			require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, FirstSeq: seq(2),
				Fragments: []store.Fragment{{Series: 1, Time: 100, Fields: []store.Field{intField(2, 2)}}}}}))
			require.NoError(t, db.flushHeads()) // the union of 1 and 2 is stored
			require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, FirstSeq: seq(3),
				Fragments: []store.Fragment{{Series: 1, Time: 100, Fields: []store.Field{intField(1, 9), intField(3, 3)}}}}}))
			lost := tableKey(ksUnsync, tid, 2)
			if tc.firstSeq != 0 {
				lost = tableKey(ksSync, tid, 3)
			}
			require.NoError(t, db.bdb.Update(func(txn *badger.Txn) error {
				if err := txn.Set([]byte{ksTorn}, binary.AppendUvarint(nil, tid)); err != nil {
					return err
				}
				return txn.Delete(lost)
			}))
			db = crashReopen(t, db, cfg) // badger's files as the torn commit left them
			want := []store.Field{intField(1, 1), intField(2, 2)}
			var got [][]store.Field
			_, done, err := db.readRows(context.Background(), tid, nil, math.MinInt64, math.MaxInt64, 10, func(r *store.Row) error {
				got = append(got, append([]store.Field(nil), r.Fields...))
				return nil
			})
			require.NoError(t, err)
			require.True(t, done)
			require.Len(t, got, 1, "the point is visited once, and never at the lost block's fragment")
			for _, g := range got {
				require.ElementsMatch(t, want, g, "the stored fragments coalesce; the lost one is skipped")
			}
			if tc.firstSeq != 0 {
				rows := readAll(t, db, tid, 0, 3, 10)
				require.Len(t, rows, 2)
				require.ElementsMatch(t, want, rows[1].Fields)
				// A later block does not make the lost reference resolve.
				require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, FirstSeq: 70000,
					Fragments: []store.Fragment{{Series: 1, Time: 100, Fields: []store.Field{intField(4, 4)}}}}}))
				rows = readAll(t, db, tid, 0, 70000, 10)
				require.Len(t, rows, 3)
				require.ElementsMatch(t, append(want, intField(4, 4)), rows[2].Fields)
			}
		})
	}
}

// TestSeriesRuns checks the in-order fast path: points above their series'
// high-water time get no point-index entry, yet a later write at one of
// them (in the same block, a later block, or after a restart) is found and
// coalesced.
func TestSeriesRuns(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	db, err := Open(cfg, nil, nil)
	require.NoError(t, err)
	tid := nextTID()
	require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, FirstSeq: 1, NewSeries: []store.Series{{ID: 1}, {ID: 2}}, Fragments: []store.Fragment{
		{Series: 1, Time: 10, Fields: []store.Field{intField(1, 1)}},
		{Series: 2, Time: 10, Fields: []store.Field{intField(1, 2)}},
		{Series: 1, Time: 20, Fields: []store.Field{intField(1, 3)}},
		{Series: 1, Time: 10, Fields: []store.Field{intField(2, 4)}}, // repeat within the block
	}}}))
	require.NoError(t, db.Close())

	db, err = Open(cfg, nil, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, FirstSeq: 5, Fragments: []store.Fragment{
		{Series: 1, Time: 20, Fields: []store.Field{intField(2, 5)}}, // repeat of a run point, after a restart
		{Series: 2, Time: 5, Fields: []store.Field{intField(1, 6)}},  // late and new
		{Series: 1, Time: 30, Fields: []store.Field{intField(1, 7)}}, // in order again
	}}}))
	rows := readAll(t, db, tid, 0, 7, 100)
	require.Len(t, rows, 7)
	want := [][]store.Field{
		{intField(1, 1), intField(2, 4)},
		{intField(1, 2)},
		{intField(1, 3), intField(2, 5)},
		{intField(1, 1), intField(2, 4)},
		{intField(1, 3), intField(2, 5)},
		{intField(1, 6)},
		{intField(1, 7)},
	}
	for i, r := range rows {
		require.ElementsMatch(t, want[i], r.Fields, "x_seq %d", r.Seq)
	}
	require.NoError(t, db.flushHeads())
	require.Equal(t, 2, pointEntries(t, db, tid), "only the repeated points have point-index entries, once the head is stored (the late new one joins a gap run)")
	require.NoError(t, db.bdb.View(func(txn *badger.Txn) error {
		_, err := txn.Get(pointKey(nil, ksRun, tid, 2, 5))
		return err
	}), "the late new point of series 2 is a run of its own")
}

// TestLayoutVersions checks that a version 1 database is read and upgraded
// and that a newer one is refused.
func TestLayoutVersions(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	setVersion := func(v uint64) {
		db, err := Open(cfg, nil, nil)
		require.NoError(t, err)
		require.NoError(t, db.bdb.Update(func(txn *badger.Txn) error {
			return txn.Set([]byte{ksVersion}, binary.AppendUvarint(nil, v))
		}))
		require.NoError(t, db.Close())
	}
	setVersion(1)
	db, err := Open(cfg, nil, nil)
	require.NoError(t, err, "version 1 is read")
	require.NoError(t, db.bdb.View(func(txn *badger.Txn) error {
		item, err := txn.Get([]byte{ksVersion})
		require.NoError(t, err)
		v, err := item.ValueCopy(nil)
		require.NoError(t, err)
		got, _ := binary.Uvarint(v)
		require.Equal(t, uint64(layoutVersion), got, "and upgraded")
		return nil
	}))
	require.NoError(t, db.Close())
	setVersion(layoutVersion + 1)
	_, err = Open(cfg, nil, nil)
	require.ErrorIs(t, err, store.ErrVersion)
}

// TestLegacyEntriesConverted checks the upgrade from layout 2, where a
// point-index entry listed every fragment at its point: Open turns such an
// entry into the point's union with a reference entry per later fragment,
// reads are unchanged, and a later write extends the union.
func TestLegacyEntriesConverted(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	db, err := Open(cfg, nil, nil)
	require.NoError(t, err)
	tid := nextTID()
	for i, f := range [][]store.Field{{intField(1, 1)}, {intField(2, 2)}, {intField(1, 3)}} {
		require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, FirstSeq: uint64(i + 1), NewSeries: []store.Series{{ID: 1}},
			Fragments: []store.Fragment{{Series: 1, Time: 100, Fields: f}}}}))
	}
	// Rewrite the point as layout 2 stored it: one entry listing x_seq
	// 1, 2 and 3, no union, no reference entries or overwrite runs.
	require.NoError(t, db.flushHeads())
	require.NoError(t, db.bdb.DropPrefix(tablePrefix(ksOver, tid)))
	require.NoError(t, db.bdb.Update(func(txn *badger.Txn) error {
		legacy := appendRef(appendRef(appendRef(nil, ref{seq: 1}), ref{seq: 2}), ref{seq: 3})
		if err := txn.Set(pointKey(nil, ksPoint, tid, 1, 100), legacy); err != nil {
			return err
		}
		for n := uint64(2); n <= 3; n++ {
			if err := txn.Delete(refKey(tid, 1, 100, n)); err != nil {
				return err
			}
		}
		return txn.Set([]byte{ksVersion}, binary.AppendUvarint(nil, 2))
	}))
	require.NoError(t, db.Close())

	db, err = Open(cfg, nil, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	want := []store.Field{intField(1, 3), intField(2, 2)}
	rows := readAll(t, db, tid, 0, 3, 10)
	require.Len(t, rows, 3)
	for _, r := range rows {
		require.ElementsMatch(t, want, r.Fields, "x_seq %d reads as the point's union", r.Seq)
	}
	require.NoError(t, db.bdb.View(func(txn *badger.Txn) error {
		item, err := txn.Get(pointKey(nil, ksPoint, tid, 1, 100))
		require.NoError(t, err)
		v, err := item.ValueCopy(nil)
		require.NoError(t, err)
		e, err := decodeEntry(v, nil)
		require.NoError(t, err)
		require.Equal(t, uint64(3), e.count)
		require.Equal(t, ref{seq: 1}, e.first)
		require.ElementsMatch(t, want, e.fields, "the entry is the union")
		for n := uint64(2); n <= 3; n++ {
			_, err := txn.Get(refKey(tid, 1, 100, n))
			require.NoError(t, err, "fragment %d's reference entry", n)
		}
		return nil
	}))
	require.NoError(t, db.commit([]store.TableCommit{{TableID: tid, FirstSeq: 4,
		Fragments: []store.Fragment{{Series: 1, Time: 100, Fields: []store.Field{intField(3, 4)}}}}}))
	rows = readAll(t, db, tid, 0, 4, 10)
	require.Len(t, rows, 4)
	require.ElementsMatch(t, append(want, intField(3, 4)), rows[3].Fields, "a write after the upgrade extends the union")
}

// TestCompactFragments checks the compact body's encoding of each
// fragment against the one before: fragments whose series go down, times
// go back and below zero, shapes change, repeat and hold every kind decode
// as written, whichever way a reader moves through the block (next, skip,
// head, seeks back and forward across skip-index entries), and a layout 6
// block (plain fragments) still decodes.
func TestCompactFragments(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	shapes := [][]store.Field{
		{intField(1, 0), intField(2, 0)},
		{{Col: 3, Value: store.Value{Kind: store.KindFloat}}, {Col: 200, Value: store.Value{Kind: store.KindUint}}},
		{{Col: 1, Value: store.Value{Kind: store.KindBool}}, {Col: 4, Value: store.Value{Kind: store.KindString}}, intField(2, 0)},
		{},
	}
	frags := make([]store.Fragment, 300)
	for i := range frags {
		shape := shapes[rng.IntN(len(shapes))]
		if i > 0 && rng.IntN(3) > 0 {
			shape = frags[i-1].Fields // the same shape again
		}
		fields := make([]store.Field, len(shape))
		for j, fl := range shape {
			v := store.Value{Kind: fl.Value.Kind}
			switch v.Kind {
			case store.KindString:
				v.Str = strconv.Itoa(rng.IntN(1000))
			case store.KindBool:
				v.Num = uint64(rng.IntN(2))
			default:
				v.Num = rng.Uint64() >> rng.IntN(64)
			}
			fields[j] = store.Field{Col: fl.Col, Value: v}
		}
		frags[i] = store.Fragment{Series: uint64(rng.IntN(5000)), Time: rng.Int64N(1<<40) - 1<<39, Fields: fields}
	}
	plain := func(frags []store.Fragment) []byte { // a layout 6 block: plain fragments, no format byte
		var b, body []byte
		b = binary.AppendUvarint(b, 9)
		b = binary.AppendVarint(b, 42)
		b = binary.AppendUvarint(b, uint64(len(frags)))
		var offs []uint64
		for i := range frags {
			if i%skipEvery == 0 {
				offs = append(offs, uint64(len(body)))
			}
			body = appendFragment(body, &frags[i])
		}
		b = binary.AppendUvarint(b, uint64(len(offs)))
		for _, o := range offs {
			b = binary.AppendUvarint(b, o)
		}
		return append(b, body...)
	}
	compact, _, _ := appendBlock(nil, 9, 42, frags, nil, nil)
	for name, block := range map[string][]byte{"compact": compact, "plain": plain(frags)} {
		t.Run(name, func(t *testing.T) {
			var br blockReader
			require.NoError(t, br.init(block))
			require.Equal(t, name == "compact", br.compact)
			for i, want := range frags {
				sid, ts, err := br.head()
				require.NoError(t, err)
				require.Equal(t, [2]int64{int64(want.Series), want.Time}, [2]int64{int64(sid), ts}, "head of fragment %d", i)
				if i%3 == 1 {
					require.NoError(t, br.skip())
					continue
				}
				var f store.Fragment
				require.NoError(t, br.next(&f))
				require.Equal(t, want.Series, f.Series, "fragment %d", i)
				require.Equal(t, want.Time, f.Time, "fragment %d", i)
				require.Equal(t, len(want.Fields), len(f.Fields), "fragment %d", i)
				for j := range want.Fields {
					require.Equal(t, want.Fields[j], f.Fields[j], "fragment %d field %d", i, j)
				}
			}
			for range 200 {
				i := uint64(rng.IntN(len(frags)))
				require.NoError(t, br.seek(i))
				var f store.Fragment
				require.NoError(t, br.next(&f))
				require.Equal(t, frags[i].Series, f.Series, "after a seek to %d", i)
				require.Equal(t, frags[i].Time, f.Time, "after a seek to %d", i)
			}
		})
	}
	// A block whose first fragment claims its predecessor's shape is corrupt.
	var f store.Fragment
	one := []store.Fragment{{Series: 1, Time: 1, Fields: []store.Field{intField(1, 1)}}}
	b, _, _ := appendBlock(nil, 1, 1, one, nil, nil)
	var br blockReader
	require.NoError(t, br.init(b))
	require.True(t, br.compact)
	body := appendCompactFragment(nil, &one[0], &one[0]) // shape 0: "as before"
	br.b, br.body = body, body
	require.Error(t, br.next(&f))
}

// TestBlockBodyFormats checks both block bodies: a small or
// incompressible body is stored as it is, a compressible one as an S2
// block, and each decodes to the fragments written, with the skip index
// working (a seek into the middle) and every truncation of a compressed
// block refused.
func TestBlockBodyFormats(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	frags := func(n int, random bool) []store.Fragment {
		out := make([]store.Fragment, n)
		for i := range out {
			s := "host_" + strconv.Itoa(i%10)
			if random {
				b := make([]byte, 40)
				for j := range b {
					b[j] = byte(rng.Uint32())
				}
				s = string(b)
			}
			out[i] = store.Fragment{Series: uint64(1 + i%10), Time: int64(1e18) + int64(i)*1e9,
				Fields: []store.Field{intField(1, int64(i)), {Col: 2, Value: store.Value{Kind: store.KindString, Str: s}}}}
		}
		return out
	}
	cases := []struct {
		name       string
		frags      []store.Fragment
		compressed bool
	}{
		{"one small fragment", frags(1, false), false},
		{"a compressible body", frags(500, false), true},
		{"an incompressible body", frags(50, true), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			block, body, _ := appendBlock(nil, 7, 42, tc.frags, nil, nil)
			var br blockReader
			require.NoError(t, br.init(block))
			raw := len(body)
			require.Equal(t, tc.compressed, len(block) < raw, "block of %d bytes, body of %d", len(block), raw)
			require.Equal(t, uint64(7), br.firstSeq)
			require.Equal(t, int64(42), br.commitTime)
			for i, want := range tc.frags {
				var f store.Fragment
				require.NoError(t, br.next(&f))
				require.Equal(t, want, f, "fragment %d", i)
			}
			mid := uint64(len(tc.frags) / 2)
			require.NoError(t, br.seek(mid))
			var f store.Fragment
			require.NoError(t, br.next(&f))
			require.Equal(t, tc.frags[mid], f, "after a seek")
			if !tc.compressed {
				return
			}
			for cut := range len(block) {
				var br blockReader
				err := br.init(block[:cut])
				for i := 0; err == nil && i < len(tc.frags); i++ {
					err = br.next(&f)
				}
				require.Error(t, err, "a block truncated at %d must not decode", cut)
			}
		})
	}
}

// TestRowsSkipBlocksOfOverwrites checks that a row copy reads only the
// blocks holding points' first fragments: a block whose every fragment
// overwrites a point is marked when written and skipped by its key alone,
// so copying points written K times reads what copying them once does.
func TestRowsSkipBlocksOfOverwrites(t *testing.T) {
	for _, synced := range []bool{true, false} {
		t.Run(fmt.Sprintf("synced=%v", synced), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Dir = t.TempDir()
			db, err := Open(cfg, nil, nil)
			require.NoError(t, err)
			defer func() { require.NoError(t, db.Close()) }()
			tid := nextTID()
			const points, passes = 16, 50
			seq := uint64(1)
			for pass := range passes {
				frags := make([]store.Fragment, points)
				for i := range frags {
					frags[i] = store.Fragment{Series: 1, Time: int64(i), Fields: []store.Field{intField(uint32(1+pass%3), int64(pass))}}
				}
				tc := store.TableCommit{TableID: tid, Fragments: frags}
				if pass == 0 {
					tc.NewSeries = []store.Series{{ID: 1}}
				}
				if synced {
					tc.FirstSeq = seq
					seq += points
				}
				require.NoError(t, db.commit([]store.TableCommit{tc}))
			}
			blocks0, _ := db.ReadCounts()
			var got int
			_, done, err := db.readRows(context.Background(), tid, nil, math.MinInt64, math.MaxInt64, 1000, func(r *store.Row) error {
				got++
				require.Len(t, r.Fields, 3, "point %d reads as its current row", r.Time)
				return nil
			})
			require.NoError(t, err)
			require.True(t, done)
			require.Equal(t, points, got)
			blocks, _ := db.ReadCounts()
			require.Equal(t, uint64(1), blocks-blocks0, "only the block of the first pass is read")
		})
	}
}

// tids numbers the test tables' instances: unique within the process, as
// an owner's instance ids are within a store.
var tids atomic.Uint64

func nextTID() uint64 { return tids.Add(1) }

// TestDropMarkFinishedAtOpen: an instance marked for removal (MarkDrop in
// the owner's transaction) whose removal a crash cut short is removed by
// the next Open, mark included.
func TestDropMarkFinishedAtOpen(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	db, err := Open(cfg, nil, nil)
	require.NoError(t, err)
	tid := nextTID()
	require.NoError(t, db.Apply(ctx, []store.TableCommit{{TableID: tid, NewSeries: []store.Series{{ID: 1}}, CommitTime: 1, FirstSeq: 1,
		Fragments: []store.Fragment{{Series: 1, Time: 1, Fields: []store.Field{intField(1, 1)}}, {Series: 1, Time: 1, Fields: []store.Field{intField(1, 2)}}}}}))
	_, err = db.RaiseHorizon(ctx, tid, 2)
	require.NoError(t, err)
	require.NoError(t, db.Update(ctx, func(txn *badger.Txn) error { return MarkDrop(txn, tid) }))
	require.Positive(t, countKeys(t, db, tid), "the instance's keys are there before the reopen")
	require.NoError(t, db.Close())

	db, err = Open(cfg, nil, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	require.Zero(t, countKeys(t, db, tid), "Open finished the removal")
	require.Nil(t, ownValue(t, db, dropKey(tid)), "and deleted the mark")
}

// countKeys counts the keys of instance tid in every per-instance keyspace.
func countKeys(t *testing.T, db *Engine, tid uint64) int {
	t.Helper()
	n := 0
	require.NoError(t, db.bdb.View(func(txn *badger.Txn) error {
		for _, ks := range []byte{ksSeries, ksSync, ksUnsync, ksRun, ksPoint, ksDup, ksHorizon, ksHead, ksOver, ksRef} {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: tablePrefix(ks, tid)})
			for it.Rewind(); it.Valid(); it.Next() {
				n++
			}
			it.Close()
		}
		return nil
	}))
	return n
}
