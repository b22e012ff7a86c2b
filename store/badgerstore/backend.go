package badgerstore

import (
	"context"
	"fmt"

	"github.com/dgraph-io/badger/v4"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/rowengine"
)

// This file is the store.Backend contract: the metadata, numbering and
// consumers this backend answers itself, each exported method checking
// that the store is open and ctx alive and holding the gate so
// that Close waits for it; rows, horizons and sweeps the row engine
// answers.

var _ store.Backend = (*DB)(nil)

// maxKeyNameBytes is the longest name this backend's keys hold: the
// longest key, a consumer's position, holds a table name and a consumer
// name plus 2 bytes, and badger refuses keys over rowengine.MaxKeyBytes.
const maxKeyNameBytes = 32_000

// Limits implements store.Backend: the row engine's blocks and fragments
// (rowengine.Limits), a table's metadata up to a quarter of a value,
// names up to maxKeyNameBytes.
func (db *DB) Limits() store.Limits {
	l := rowengine.Limits()
	l.MaxMetaBytes, l.MaxNameBytes = rowengine.MaxValueBytes/4, maxKeyNameBytes
	return l
}

// seqLeaseChunk is how many x_seq numbers one durable lease reserves beyond
// what a commit needs: one extra fsync per this many fragments per table.
const seqLeaseChunk = 1 << 16

// Close records each live table's exact x_seq as its lease (a restart
// then burns no numbers; when that write fails the leases stay, which
// only skips numbers), then closes the row engine (rowengine.Engine.Close).
// In-flight calls finish first; every later call, Close included,
// returns store.ErrClosed.
func (db *DB) Close() error {
	if err := db.gate.Close(); err != nil {
		return err
	}
	if err := db.releaseLeases(); err != nil {
		db.logger.Warn("x_seq leases not released: a restart skips the unused numbers", "err", err)
	}
	return db.e.Close()
}

// LoadTables implements store.Loader: every table's metadata, tombstones
// included, ordered by name, each name read from its key byte for byte.
func (db *DB) LoadTables(ctx context.Context) ([]store.TableMeta, error) {
	if err := db.gate.Enter(ctx); err != nil {
		return nil, err
	}
	defer db.gate.Leave()
	return db.loadTables()
}

// LoadSeries implements store.Loader (the row engine's).
func (db *DB) LoadSeries(ctx context.Context, tid uint64) ([]store.Series, error) {
	return db.e.LoadSeries(ctx, tid)
}

// Append implements store.Appender: it assigns x_seq numbers from each
// table's lease, extends a lease that runs out (one transaction holding
// every extended table's metadata, durable before stamped runs), calls
// stamped, then has the row engine write the commit, with the metadata of
// each TableCommit.Meta, and returns once it is fsynced (unless
// Config.UnsafeNoSync). Once stamped ran, ctx no longer stops it: the
// numbers are handed out. Writer only.
func (db *DB) Append(ctx context.Context, commits []store.TableCommit, stamped func()) error {
	if err := db.gate.Enter(ctx); err != nil {
		return err
	}
	defer db.gate.Leave()
	if err := db.e.CheckSpace(); err != nil {
		return err
	}
	var extended []*instance
	var own []rowengine.KV
	for i := range commits {
		tc := &commits[i]
		st := db.table(tc.TableID)
		if tc.Meta != nil {
			if _, err := db.adopt(st, *tc.Meta); err != nil {
				return err
			}
		}
		tc.FirstSeq = 0
		if tc.Sync && len(tc.Fragments) > 0 {
			tc.FirstSeq = st.seq + 1
			st.seq += uint64(len(tc.Fragments))
			if st.seq > st.lease {
				st.lease = st.seq + seqLeaseChunk
				extended = append(extended, st)
			}
		}
	}
	if len(extended) > 0 {
		// A lease must be durable before any number under it is handed out.
		if err := db.writeMetas(extended); err != nil {
			return err
		}
		db.leaseExtensions.Add(float64(len(extended)))
	}
	// The metadata a commit carries, with each lease as extended above:
	// never lower than what writeMetas made durable.
	for i := range commits {
		if commits[i].Meta != nil {
			st := db.table(commits[i].TableID)
			m := st.meta
			m.Seq = max(m.Seq, st.lease)
			var kvs []rowengine.KV
			err := db.e.View(context.WithoutCancel(ctx), func(txn *badger.Txn) (err error) {
				kvs, err = db.metaKVs(m, func(k []byte) ([]byte, error) { return txnValue(txn, k) })
				return err
			})
			if err != nil {
				return err
			}
			own = append(own, kvs...)
		}
	}
	if stamped != nil {
		stamped()
	}
	return db.e.Apply(context.WithoutCancel(ctx), commits, own...)
}

// NewTableID implements store.Tables: ids are persisted with the metadata
// that uses them.
func (db *DB) NewTableID(ctx context.Context) (uint64, error) {
	if err := db.gate.Enter(ctx); err != nil {
		return 0, err
	}
	defer db.gate.Leave()
	return db.allocTableID(), nil
}

// PutTable implements store.Tables in one transaction. Writer only.
func (db *DB) PutTable(ctx context.Context, m store.TableMeta) (store.TableMeta, error) {
	if err := db.gate.Enter(ctx); err != nil {
		return store.TableMeta{}, err
	}
	defer db.gate.Leave()
	if err := db.e.CheckSpace(); err != nil {
		return store.TableMeta{}, err
	}
	m, err := db.adopt(db.table(m.ID), m)
	if err != nil {
		return store.TableMeta{}, err
	}
	return m, db.e.Update(ctx, func(txn *badger.Txn) error { return db.setMeta(txn, m) })
}

// TruncateTable implements store.Tables (see endInstance). Writer only.
func (db *DB) TruncateTable(ctx context.Context, tid uint64) (store.TableMeta, error) {
	return db.endInstance(ctx, tid, func(txn *badger.Txn, old *instance) (store.TableMeta, error) {
		m := store.TableMeta{Name: old.meta.Name, ID: db.allocTableID(), Sync: old.meta.Sync, Epoch: old.meta.Epoch + 1,
			Seq: old.lease, Retention: old.meta.Retention}
		return m, db.setMeta(txn, m)
	}, func(m store.TableMeta, old *instance) {
		st := db.table(m.ID)
		st.meta, st.live, st.seq, st.lease = m, true, old.seq, old.lease
	})
}

// DropTable implements store.Tables (see endInstance); its transaction
// also deletes the name's consumers. Writer only.
func (db *DB) DropTable(ctx context.Context, tid uint64) (store.TableMeta, error) {
	return db.endInstance(ctx, tid, func(txn *badger.Txn, old *instance) (store.TableMeta, error) {
		tomb := store.TableMeta{Name: old.meta.Name, Epoch: old.meta.Epoch, Seq: max(old.lease, old.seq), Dropped: true}
		if err := db.setMeta(txn, tomb); err != nil {
			return store.TableMeta{}, err
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: consumerPrefix(tomb.Name)})
		var keys [][]byte
		for it.Rewind(); it.Valid(); it.Next() {
			keys = append(keys, it.Item().KeyCopy(nil))
		}
		it.Close()
		for _, k := range keys {
			if err := txn.Delete(k); err != nil {
				return store.TableMeta{}, err
			}
		}
		return tomb, nil
	}, nil)
}

// endInstance ends live instance tid (TRUNCATE, DROP): one transaction
// writes what end puts in its place and the row engine's drop mark for
// tid (rowengine.MarkDrop); then ended (when non-nil) sees the result,
// and the engine removes the instance's rows (rowengine.Engine.DropInstance,
// which blocks writes while it runs) with the mark. A crash before that
// leaves the mark, and Open finishes the removal, so the change is whole
// or not at all.
func (db *DB) endInstance(ctx context.Context, tid uint64, end func(*badger.Txn, *instance) (store.TableMeta, error),
	ended func(store.TableMeta, *instance)) (store.TableMeta, error) {
	if err := db.gate.Enter(ctx); err != nil {
		return store.TableMeta{}, err
	}
	defer db.gate.Leave()
	if err := db.e.CheckSpace(); err != nil {
		return store.TableMeta{}, err
	}
	old, err := db.liveTable(tid)
	if err != nil {
		return store.TableMeta{}, err
	}
	var m store.TableMeta
	err = db.e.Update(ctx, func(txn *badger.Txn) error {
		var err error
		if m, err = end(txn, old); err != nil {
			return err
		}
		return rowengine.MarkDrop(txn, tid)
	})
	if err != nil {
		return store.TableMeta{}, err
	}
	if ended != nil {
		ended(m, old)
	}
	old.live = false
	db.mu.Lock()
	delete(db.tables, tid)
	db.mu.Unlock()
	return m, db.e.DropInstance(context.WithoutCancel(ctx), tid)
}

// PruneTombstone implements store.Tables in one transaction. Writer only.
func (db *DB) PruneTombstone(ctx context.Context, name string, floor store.TableMeta) error {
	if err := db.gate.Enter(ctx); err != nil {
		return err
	}
	defer db.gate.Leave()
	if err := db.e.CheckSpace(); err != nil {
		return err
	}
	return db.e.Update(ctx, func(txn *badger.Txn) error {
		if err := db.setMeta(txn, floor); err != nil {
			return err
		}
		if err := deleteChunks(txn, name, 0); err != nil {
			return err
		}
		return txn.Delete(metaKey(name))
	})
}

// ReadSeq implements store.Reader (the row engine's).
func (db *DB) ReadSeq(ctx context.Context, tid, after, upto uint64, limit int, filter *store.SeqFilter, visit func(*store.Row) error) (uint64, error) {
	return db.e.ReadSeq(ctx, tid, after, upto, limit, filter, visit)
}

// SeqTime implements store.Reader (the row engine's).
func (db *DB) SeqTime(ctx context.Context, tid, seq uint64) (int64, bool, error) {
	return db.e.SeqTime(ctx, tid, seq)
}

// ReadRows implements store.Reader (the row engine's).
func (db *DB) ReadRows(ctx context.Context, tid uint64, cur store.RowCursor, start, end int64, limit int, visit func(*store.Row) error) (store.RowCursor, bool, error) {
	return db.e.ReadRows(ctx, tid, cur, start, end, limit, visit)
}

// ReadCounts returns the blocks and point-index entries the row engine's
// reads read since Open (rowengine.Engine.ReadCounts).
func (db *DB) ReadCounts() (blocks, entries uint64) { return db.e.ReadCounts() }

// PutConsumers implements store.ConsumerStore (see putConsumers).
func (db *DB) PutConsumers(ctx context.Context, byTable map[string][]store.Consumer) error {
	if err := db.gate.Enter(ctx); err != nil {
		return err
	}
	defer db.gate.Leave()
	return db.putConsumers(ctx, byTable)
}

// LoadConsumers implements store.ConsumerStore (see loadConsumers).
func (db *DB) LoadConsumers(ctx context.Context, table string) ([]store.Consumer, error) {
	if err := db.gate.Enter(ctx); err != nil {
		return nil, err
	}
	defer db.gate.Leave()
	return db.loadConsumers(ctx, table)
}

// DeleteConsumer implements store.ConsumerStore.
func (db *DB) DeleteConsumer(ctx context.Context, table, name string) error {
	if err := db.gate.Enter(ctx); err != nil {
		return err
	}
	defer db.gate.Leave()
	return db.deleteConsumer(ctx, table, name)
}

// SweepBefore implements store.Sweeper (the row engine's). Writer only.
func (db *DB) SweepBefore(ctx context.Context, tid uint64, cutoff int64, maxFragments int) (store.SweepResult, error) {
	return db.e.SweepBefore(ctx, tid, cutoff, maxFragments)
}

// RaiseHorizon implements store.Sweeper (the row engine's). Writer only.
func (db *DB) RaiseHorizon(ctx context.Context, tid, h uint64) (uint64, error) {
	return db.e.RaiseHorizon(ctx, tid, h)
}

// Horizon implements store.Sweeper (the row engine's).
func (db *DB) Horizon(ctx context.Context, tid uint64) (uint64, error) {
	return db.e.Horizon(ctx, tid)
}

// FirstSeqSince implements store.Sweeper (the row engine's).
func (db *DB) FirstSeqSince(ctx context.Context, tid, from uint64, cutoff int64, maxBlocks int) (uint64, bool, bool, error) {
	return db.e.FirstSeqSince(ctx, tid, from, cutoff, maxBlocks)
}

// TableStats implements store.StatsReader (the row engine's).
func (db *DB) TableStats(ctx context.Context, tid uint64) (store.TableStats, error) {
	return db.e.TableStats(ctx, tid)
}

// adopt makes m the metadata of instance st and returns it as it will be
// stored. An instance new to this process starts its x_seq counter at
// m.Seq, raised (with the epoch) above a tombstone of the same name; a
// known one keeps Seq at its lease. Writer only.
func (db *DB) adopt(st *instance, m store.TableMeta) (store.TableMeta, error) {
	if !st.live {
		prev, found, err := db.getMeta(m.Name)
		if err != nil {
			return store.TableMeta{}, err
		}
		if found && !prev.Dropped && prev.ID != m.ID {
			return store.TableMeta{}, fmt.Errorf("store: table %q is live as instance %d, not %d", m.Name, prev.ID, m.ID)
		}
		if found && prev.Dropped {
			m.Seq = max(m.Seq, prev.Seq)
			bump := uint64(0)
			if m.Sync {
				bump = 1
			}
			m.Epoch = max(m.Epoch, prev.Epoch+bump)
		}
		st.live, st.seq, st.lease = true, m.Seq, m.Seq
	}
	m.Seq = max(m.Seq, st.lease)
	m.Columns = append([]store.Column(nil), m.Columns...)
	st.meta = m
	return m, nil
}

// liveTable returns the state of live instance tid.
func (db *DB) liveTable(tid uint64) (*instance, error) {
	st := db.table(tid)
	if !st.live {
		return nil, fmt.Errorf("store: table instance %d is not live", tid)
	}
	return st, nil
}
