package badgerstore

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/rowengine"
	"github.com/ingestd/ingestd/store/storetest"
)

// TestDropMarkFinishedAtOpen checks the recovery that makes TRUNCATE and
// DROP atomic: a crash after the transaction that ends an instance (its
// metadata and the row engine's drop mark written) and before its rows
// are gone leaves the mark, and the next Open removes the instance's rows.
func TestDropMarkFinishedAtOpen(t *testing.T) {
	ctx := context.Background()
	db, cfg, tid := openOnDisk(t)
	m, err := db.PutTable(ctx, store.TableMeta{Name: "t", ID: tid, Sync: true, Epoch: 1})
	require.NoError(t, err)
	commits := []store.TableCommit{{TableID: m.ID, Sync: true, NewSeries: []store.Series{{ID: 1}}, CommitTime: 1,
		Fragments: []store.Fragment{{Series: 1, Time: 1, Fields: []store.Field{intField(1, 1)}}, {Series: 1, Time: 1, Fields: []store.Field{intField(1, 2)}}}}}
	require.NoError(t, db.Append(ctx, commits, nil))
	_, err = db.RaiseHorizon(ctx, tid, 2)
	require.NoError(t, err)
	// What DropTable's transaction writes, without the removal after it.
	require.NoError(t, db.e.Update(ctx, func(txn *badger.Txn) error {
		if err := db.setMeta(txn, store.TableMeta{Name: "t", Epoch: 1, Seq: 2, Dropped: true}); err != nil {
			return err
		}
		return rowengine.MarkDrop(txn, tid)
	}))
	db.table(tid).live = false // as DropTable leaves it
	require.NotEmpty(t, seriesOf(t, db, tid), "the instance's rows are there before the reopen")
	require.NoError(t, db.Close())

	db, err = Open(cfg, nil, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	require.Empty(t, seriesOf(t, db, tid), "Open finished the removal")
	h, err := db.Horizon(ctx, tid)
	require.NoError(t, err)
	require.Equal(t, uint64(1), h, "the horizon went with the rows (1: nothing removed)")
	metas, err := db.LoadTables(ctx)
	require.NoError(t, err)
	require.Equal(t, []store.TableMeta{{Name: "t", Epoch: 1, Seq: 2, Dropped: true}}, metas)
}

// openOnDisk opens a store in a new directory, with its configuration
// and a new table instance id.
func openOnDisk(t *testing.T) (*DB, rowengine.Config, uint64) {
	t.Helper()
	cfg := rowengine.DefaultConfig()
	cfg.Dir = t.TempDir()
	db, err := Open(cfg, nil, nil)
	require.NoError(t, err)
	tid, err := db.NewTableID(context.Background())
	require.NoError(t, err)
	return db, cfg, tid
}

func seriesOf(t *testing.T, db *DB, tid uint64) []store.Series {
	t.Helper()
	series, err := db.LoadSeries(context.Background(), tid)
	require.NoError(t, err)
	return series
}

// TestLeaseReleasedOnClose checks the x_seq lease: a crash resumes above
// it, a clean Close lowers it to the exact number.
func TestLeaseReleasedOnClose(t *testing.T) {
	ctx := context.Background()
	db, cfg, tid := openOnDisk(t)
	_, err := db.PutTable(ctx, store.TableMeta{Name: "t", ID: tid, Sync: true, Epoch: 1})
	require.NoError(t, err)
	commits := []store.TableCommit{{TableID: tid, Sync: true, NewSeries: []store.Series{{ID: 1}}, CommitTime: 1,
		Fragments: []store.Fragment{{Series: 1, Time: 1}, {Series: 1, Time: 2}, {Series: 1, Time: 3}}}}
	require.NoError(t, db.Append(ctx, commits, nil))
	require.Equal(t, uint64(1), commits[0].FirstSeq)
	metas, err := db.loadTables()
	require.NoError(t, err)
	require.Equal(t, uint64(3+seqLeaseChunk), metas[0].Seq, "the lease is durable before the numbers are handed out")
	require.NoError(t, db.Close())

	db, err = Open(cfg, nil, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	metas, err = db.LoadTables(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(3), metas[0].Seq, "a clean Close releases the lease: no number is burnt")
}

func intField(col uint32, v int64) store.Field {
	return store.Field{Col: col, Value: store.Value{Kind: store.KindInt, Num: uint64(v)}}
}

// TestNamesFromKeys checks that table and consumer names come back byte
// for byte, even where JSON would not carry them (invalid UTF-8 becomes
// U+FFFD there): a table stored as "\xff" by an older version must not
// collide with "\uFFFD" after a restart.
func TestNamesFromKeys(t *testing.T) {
	ctx := context.Background()
	for _, inMemory := range []bool{false, true} {
		cfg := rowengine.DefaultConfig()
		cfg.Dir, cfg.InMemory = t.TempDir(), inMemory
		db, err := Open(cfg, nil, nil)
		require.NoError(t, err)
		names := []string{"\xff", "\uFFFD", "a", "a\xfe"}
		for i, n := range names {
			require.NoError(t, db.e.Update(ctx, func(txn *badger.Txn) error {
				return db.setMeta(txn, store.TableMeta{Name: n, ID: uint64(i + 1), Epoch: uint64(i)})
			}))
		}
		require.NoError(t, db.putConsumers(ctx, map[string][]store.Consumer{"a": {{Name: "\xff", Position: 1}, {Name: "\uFFFD", Position: 2}}}))
		metas, err := db.loadTables()
		require.NoError(t, err)
		got := map[string]uint64{}
		for _, m := range metas {
			got[m.Name] = m.ID
		}
		require.Equal(t, map[string]uint64{"\xff": 1, "\uFFFD": 2, "a": 3, "a\xfe": 4}, got)
		cs, err := db.loadConsumers(ctx, "a")
		require.NoError(t, err)
		require.Equal(t, []store.Consumer{{Name: "\uFFFD", Position: 2}, {Name: "\xff", Position: 1}}, cs, "ordered by name bytes")
		cs, err = db.loadConsumers(ctx, "a\xfe")
		require.NoError(t, err)
		require.Empty(t, cs, "a table's consumer prefix covers no other table's")
		require.NoError(t, db.Close())
	}
}

// TestCommitsMetaKeepsTheLease: a table whose first commit carries its
// metadata (TableCommit.Meta) and extends its lease keeps the extended
// lease in what that commit writes, so that a crash resumes above every
// number handed out.
func TestCommitsMetaKeepsTheLease(t *testing.T) {
	ctx := context.Background()
	db, cfg, tid := openOnDisk(t)
	meta := store.TableMeta{Name: "t", ID: tid, Sync: true, Epoch: 1}
	commits := []store.TableCommit{{TableID: tid, Meta: &meta, Sync: true, NewSeries: []store.Series{{ID: 1}}, CommitTime: 1,
		Fragments: []store.Fragment{{Series: 1, Time: 1}, {Series: 1, Time: 2}, {Series: 1, Time: 3}}}}
	require.NoError(t, db.Append(ctx, commits, nil))
	require.Equal(t, uint64(1), commits[0].FirstSeq)

	crashed := t.TempDir()
	storetest.CopyDir(t, cfg.Dir, crashed)
	require.NoError(t, db.Close())
	cfg.Dir = crashed
	db, err := Open(cfg, nil, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	metas, err := db.LoadTables(ctx)
	require.NoError(t, err)
	require.Len(t, metas, 1)
	require.Equal(t, uint64(3+seqLeaseChunk), metas[0].Seq, "the lease, not the metadata's Seq before it was extended")
}

// TestColumnsWrittenOnce: a table's columns are stored in chunks after
// its metadata, and a new column rewrites only the last chunk. Adding
// 300 columns of 1,000-byte names one by one writes about a chunk each
// (once, the whole schema each: 45 MB; a table of 1,020 columns of
// 4,000-byte names, added one at a time, wrote 2 GB the collector did not
// give back and filled the disk). The columns read back whole after a
// restart, and a TRUNCATE, which empties the schema, deletes the chunks.
func TestColumnsWrittenOnce(t *testing.T) {
	ctx := context.Background()
	db, cfg, tid := openOnDisk(t)
	m, err := db.PutTable(ctx, store.TableMeta{Name: "wide", ID: tid, Sync: true, Epoch: 1})
	require.NoError(t, err)
	written := 0
	for i := range 300 {
		m.Columns = append(m.Columns, store.Column{Name: fmt.Sprintf("%04d%s", i, strings.Repeat("k", 996)), Kind: store.KindInt})
		m.ColumnsSince = append(m.ColumnsSince, uint64(i))
		require.NoError(t, db.e.View(ctx, func(txn *badger.Txn) error {
			kvs, err := db.metaKVs(m, func(k []byte) ([]byte, error) { return txnValue(txn, k) })
			for _, kv := range kvs {
				written += len(kv.Value)
			}
			return err
		}))
		m, err = db.PutTable(ctx, m)
		require.NoError(t, err)
	}
	t.Logf("%d bytes written for 300 columns of 1,000 bytes", written)
	require.Less(t, written, 300*(chunkBytes+3000), "about a chunk per column")
	chunks := func() int {
		n := 0
		require.NoError(t, db.e.View(ctx, func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: append(metaKey("wide"), 0)})
			defer it.Close()
			for it.Rewind(); it.Valid(); it.Next() {
				n++
			}
			return nil
		}))
		return n
	}
	require.Equal(t, len(columnChunkEnds(m.Columns)), chunks())
	require.Greater(t, chunks(), 10)
	require.NoError(t, db.Close())

	db, err = Open(cfg, nil, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	metas, err := db.LoadTables(ctx)
	require.NoError(t, err)
	require.Equal(t, []store.TableMeta{m}, metas)
	got, found, err := db.getMeta("wide")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, m, got)

	tm, err := db.TruncateTable(ctx, m.ID)
	require.NoError(t, err)
	require.Empty(t, tm.Columns)
	require.Zero(t, chunks(), "the emptied schema's chunks deleted")
	metas, err = db.LoadTables(ctx)
	require.NoError(t, err)
	require.Equal(t, []store.TableMeta{tm}, metas)
}
