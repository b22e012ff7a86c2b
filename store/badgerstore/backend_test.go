package badgerstore

import (
	"context"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
)

// TestDropMarkFinishedAtOpen checks the recovery that makes TRUNCATE and
// DROP atomic: a crash after the transaction that ends an instance (its
// drop mark written) and before its keys are gone leaves the mark, and the
// next Open removes the instance's keys and the mark.
func TestDropMarkFinishedAtOpen(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	db, err := Open(cfg, nil, nil)
	require.NoError(t, err)
	tid, err := db.NewTableID(ctx)
	require.NoError(t, err)
	m, err := db.PutTable(ctx, store.TableMeta{Name: "t", ID: tid, Sync: true, Epoch: 1})
	require.NoError(t, err)
	commits := []store.TableCommit{{TableID: m.ID, Sync: true, NewSeries: []store.Series{{ID: 1}}, CommitTime: 1,
		Fragments: []store.Fragment{{Series: 1, Time: 1, Fields: []store.Field{intField(1, 1)}}, {Series: 1, Time: 1, Fields: []store.Field{intField(1, 2)}}}}}
	require.NoError(t, db.Append(ctx, commits, nil))
	_, err = db.RaiseHorizon(ctx, tid, 2)
	require.NoError(t, err)
	// What DropTable's transaction writes, without the removal after it.
	require.NoError(t, db.bdb.Update(func(txn *badger.Txn) error {
		if err := db.setMeta(txn, store.TableMeta{Name: "t", Epoch: 1, Seq: 2, Dropped: true}); err != nil {
			return err
		}
		return txn.Set(dropKey(tid), nil)
	}))
	db.table(tid).live = false // as DropTable leaves it
	require.Positive(t, countKeys(t, db, tid), "the instance's keys are there before the reopen")
	require.NoError(t, db.Close())

	db, err = Open(cfg, nil, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	require.Zero(t, countKeys(t, db, tid), "Open finished the removal")
	require.NoError(t, db.bdb.View(func(txn *badger.Txn) error {
		_, err := txn.Get(dropKey(tid))
		require.ErrorIs(t, err, badger.ErrKeyNotFound, "and deleted the mark")
		return nil
	}))
	metas, err := db.LoadTables(ctx)
	require.NoError(t, err)
	require.Equal(t, []store.TableMeta{{Name: "t", Epoch: 1, Seq: 2, Dropped: true}}, metas)
}

// countKeys counts the keys of instance tid in every per-instance keyspace.
func countKeys(t *testing.T, db *DB, tid uint64) int {
	t.Helper()
	n := 0
	require.NoError(t, db.bdb.View(func(txn *badger.Txn) error {
		for _, ks := range []byte{ksSeries, ksSync, ksUnsync, ksRun, ksPoint, ksDup, ksHorizon} {
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

// TestLeaseReleasedOnClose checks the x_seq lease: a crash resumes above
// it, a clean Close lowers it to the exact number.
func TestLeaseReleasedOnClose(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	db, err := Open(cfg, nil, nil)
	require.NoError(t, err)
	tid, err := db.NewTableID(ctx)
	require.NoError(t, err)
	_, err = db.PutTable(ctx, store.TableMeta{Name: "t", ID: tid, Sync: true, Epoch: 1})
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
