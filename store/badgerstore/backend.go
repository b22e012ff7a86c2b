package badgerstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"

	"github.com/ingestd/ingestd/store"
)

// This file is the store.Backend contract as badger implements it: each
// exported method checks that the store is open and ctx alive, then runs
// the unexported method doing the work, holding closeMu's read side so
// that Close waits for it.

var _ store.Backend = (*DB)(nil)

// MaxValueBytes is the largest value badger holds here (its value-log
// file size): a table's block in one commit is one value.
const MaxValueBytes = 256 << 20

// maxKeyNameBytes is the longest name badger's keys hold: the longest
// key, a consumer's position, holds a table name and a consumer name plus
// 2 bytes, and badger refuses keys over 65,000 bytes.
const maxKeyNameBytes = 32_000

// Limits returns what every DB holds: a block up to a value, a fragment
// up to half of one, a table's metadata up to a quarter, names up to
// maxKeyNameBytes.
func Limits() store.Limits {
	return store.Limits{MaxBlockBytes: MaxValueBytes, MaxFragmentBytes: MaxValueBytes / 2,
		MaxMetaBytes: MaxValueBytes / 4, MaxNameBytes: maxKeyNameBytes}
}

// Limits implements store.Backend (the package's Limits).
func (db *DB) Limits() store.Limits { return Limits() }

// seqLeaseChunk is how many x_seq numbers one durable lease reserves beyond
// what a commit needs: one extra fsync per this many fragments per table.
const seqLeaseChunk = 1 << 16

// enter admits a call: ErrClosed after Close, ctx.Err() when ctx ended.
// On nil the caller must call leave.
func (db *DB) enter(ctx context.Context) error {
	db.closeMu.RLock()
	if db.closed {
		db.closeMu.RUnlock()
		return store.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		db.closeMu.RUnlock()
		return err
	}
	return nil
}

func (db *DB) leave() { db.closeMu.RUnlock() }

// Close records each live table's exact x_seq as its lease (a restart
// then burns no numbers; when that write fails the leases stay, which
// only skips numbers), stops the value-log collector, flushes and closes
// the database and releases the directory lock. In-flight calls finish
// first; every later call, Close included, returns store.ErrClosed.
func (db *DB) Close() error {
	db.closeMu.Lock()
	if db.closed {
		db.closeMu.Unlock()
		return store.ErrClosed
	}
	db.closed = true
	db.closeMu.Unlock()
	if err := db.flushHeads(); err != nil {
		db.logger.Warn("head runs not stored: the next Open replays them", "err", err)
	}
	if err := db.releaseLeases(); err != nil {
		db.logger.Warn("x_seq leases not released: a restart skips the unused numbers", "err", err)
	}
	db.stopBackground()
	err := db.bdb.Close()
	if db.lock != nil {
		err = errors.Join(err, db.lock.Close())
	}
	return err
}

// stopBackground stops the value-log collector and the mapped-pages
// bound and waits for them, before badger closes.
func (db *DB) stopBackground() {
	if db.gc != nil {
		close(db.gc.stop)
		<-db.gc.done
	}
	if db.mapped != nil {
		close(db.mapped.stop)
		<-db.mapped.done
	}
}

// LoadTables implements store.Loader: every table's metadata, tombstones
// included, ordered by name, each name read from its key byte for byte.
func (db *DB) LoadTables(ctx context.Context) ([]store.TableMeta, error) {
	if err := db.enter(ctx); err != nil {
		return nil, err
	}
	defer db.leave()
	return db.loadTables()
}

// LoadSeries implements store.Loader.
func (db *DB) LoadSeries(ctx context.Context, tid uint64) ([]store.Series, error) {
	if err := db.enter(ctx); err != nil {
		return nil, err
	}
	defer db.leave()
	return db.loadSeries(tid)
}

// Append implements store.Appender: it assigns x_seq numbers from each
// table's lease, extends a lease that runs out (one transaction holding
// every extended table's metadata, durable before stamped runs), calls
// stamped, then writes the commit as doc.go describes and returns once it
// is fsynced (unless Config.UnsafeNoSync). Writer only.
func (db *DB) Append(ctx context.Context, commits []store.TableCommit, stamped func()) error {
	if err := db.enter(ctx); err != nil {
		return err
	}
	defer db.leave()
	if err := db.checkSpace(); err != nil {
		return err
	}
	var extended []*tableState
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
	if stamped != nil {
		stamped()
	}
	return db.commit(commits)
}

// NewTableID implements store.Tables: ids are persisted with the metadata
// that uses them.
func (db *DB) NewTableID(ctx context.Context) (uint64, error) {
	if err := db.enter(ctx); err != nil {
		return 0, err
	}
	defer db.leave()
	return db.allocTableID(), nil
}

// PutTable implements store.Tables in one transaction. Writer only.
func (db *DB) PutTable(ctx context.Context, m store.TableMeta) (store.TableMeta, error) {
	if err := db.enter(ctx); err != nil {
		return store.TableMeta{}, err
	}
	defer db.leave()
	if err := db.checkSpace(); err != nil {
		return store.TableMeta{}, err
	}
	m, err := db.adopt(db.table(m.ID), m)
	if err != nil {
		return store.TableMeta{}, err
	}
	return m, db.putMeta(m)
}

// TruncateTable implements store.Tables (see endInstance). Writer only.
func (db *DB) TruncateTable(ctx context.Context, tid uint64) (store.TableMeta, error) {
	return db.endInstance(ctx, tid, func(txn *badger.Txn, old *tableState) (store.TableMeta, error) {
		m := store.TableMeta{Name: old.meta.Name, ID: db.allocTableID(), Sync: old.meta.Sync, Epoch: old.meta.Epoch + 1,
			Seq: old.lease, Retention: old.meta.Retention}
		return m, db.setMeta(txn, m)
	}, func(m store.TableMeta, old *tableState) {
		st := db.table(m.ID)
		st.meta, st.live, st.seq, st.lease = m, true, old.seq, old.lease
	})
}

// DropTable implements store.Tables (see endInstance); its transaction
// also deletes the name's consumers. Writer only.
func (db *DB) DropTable(ctx context.Context, tid uint64) (store.TableMeta, error) {
	return db.endInstance(ctx, tid, func(txn *badger.Txn, old *tableState) (store.TableMeta, error) {
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
// writes what end puts in its place and a drop mark for tid; then ended
// (when non-nil) sees the result, and the instance's keys go (badger
// DropPrefix, which blocks writes while it runs) with the mark. A crash
// before that leaves the mark, and Open finishes the removal, so the
// change is whole or not at all.
func (db *DB) endInstance(ctx context.Context, tid uint64, end func(*badger.Txn, *tableState) (store.TableMeta, error),
	ended func(store.TableMeta, *tableState)) (store.TableMeta, error) {
	if err := db.enter(ctx); err != nil {
		return store.TableMeta{}, err
	}
	defer db.leave()
	if err := db.checkSpace(); err != nil {
		return store.TableMeta{}, err
	}
	old, err := db.liveTable(tid)
	if err != nil {
		return store.TableMeta{}, err
	}
	var m store.TableMeta
	err = db.bdb.Update(func(txn *badger.Txn) error {
		var err error
		if m, err = end(txn, old); err != nil {
			return err
		}
		return txn.Set(dropKey(tid), nil)
	})
	if err != nil {
		return store.TableMeta{}, err
	}
	if ended != nil {
		ended(m, old)
	}
	old.live = false
	return m, db.dropInstance(tid)
}

// PruneTombstone implements store.Tables in one transaction. Writer only.
func (db *DB) PruneTombstone(ctx context.Context, name string, floor store.TableMeta) error {
	if err := db.enter(ctx); err != nil {
		return err
	}
	defer db.leave()
	if err := db.checkSpace(); err != nil {
		return err
	}
	return db.bdb.Update(func(txn *badger.Txn) error {
		if err := db.setMeta(txn, floor); err != nil {
			return err
		}
		return txn.Delete(metaKey(name))
	})
}

// ReadSeq implements store.Reader (see readSeq).
func (db *DB) ReadSeq(ctx context.Context, tid, after, upto uint64, limit int, filter *store.SeqFilter, visit func(*store.Row) error) (uint64, error) {
	if err := db.enter(ctx); err != nil {
		return after, err
	}
	defer db.leave()
	return db.readSeq(ctx, tid, after, upto, limit, filter, visit)
}

// SeqTime implements store.Reader (see seqTime).
func (db *DB) SeqTime(ctx context.Context, tid, seq uint64) (int64, bool, error) {
	if err := db.enter(ctx); err != nil {
		return 0, false, err
	}
	defer db.leave()
	return db.seqTime(tid, seq)
}

// ReadRows implements store.Reader (see readRows).
func (db *DB) ReadRows(ctx context.Context, tid uint64, cur store.RowCursor, start, end int64, limit int, visit func(*store.Row) error) (store.RowCursor, bool, error) {
	if err := db.enter(ctx); err != nil {
		return nil, false, err
	}
	defer db.leave()
	return db.readRows(ctx, tid, cur, start, end, limit, visit)
}

// PutConsumers implements store.ConsumerStore (see putConsumers).
func (db *DB) PutConsumers(ctx context.Context, byTable map[string][]store.Consumer) error {
	if err := db.enter(ctx); err != nil {
		return err
	}
	defer db.leave()
	return db.putConsumers(byTable)
}

// LoadConsumers implements store.ConsumerStore (see loadConsumers).
func (db *DB) LoadConsumers(ctx context.Context, table string) ([]store.Consumer, error) {
	if err := db.enter(ctx); err != nil {
		return nil, err
	}
	defer db.leave()
	return db.loadConsumers(table)
}

// DeleteConsumer implements store.ConsumerStore.
func (db *DB) DeleteConsumer(ctx context.Context, table, name string) error {
	if err := db.enter(ctx); err != nil {
		return err
	}
	defer db.leave()
	return db.deleteConsumer(table, name)
}

// SweepBefore implements store.Sweeper (see sweepBefore). Writer only.
func (db *DB) SweepBefore(ctx context.Context, tid uint64, cutoff int64, maxFragments int) (store.SweepResult, error) {
	if err := db.enter(ctx); err != nil {
		return store.SweepResult{}, err
	}
	defer db.leave()
	return db.sweepBefore(tid, cutoff, maxFragments)
}

// RaiseHorizon implements store.Sweeper (see raiseHorizon). Writer only.
func (db *DB) RaiseHorizon(ctx context.Context, tid, h uint64) (uint64, error) {
	if err := db.enter(ctx); err != nil {
		return 0, err
	}
	defer db.leave()
	return db.raiseHorizon(tid, h)
}

// Horizon implements store.Sweeper (see horizon).
func (db *DB) Horizon(ctx context.Context, tid uint64) (uint64, error) {
	if err := db.enter(ctx); err != nil {
		return 0, err
	}
	defer db.leave()
	return db.horizon(tid)
}

// FirstSeqSince implements store.Sweeper (see firstSeqSince).
func (db *DB) FirstSeqSince(ctx context.Context, tid, from uint64, cutoff int64, maxBlocks int) (uint64, bool, bool, error) {
	if err := db.enter(ctx); err != nil {
		return 0, false, false, err
	}
	defer db.leave()
	return db.firstSeqSince(tid, from, cutoff, maxBlocks)
}

// TableStats implements store.StatsReader (see countTable).
func (db *DB) TableStats(ctx context.Context, tid uint64) (store.TableStats, error) {
	if err := db.enter(ctx); err != nil {
		return store.TableStats{}, err
	}
	defer db.leave()
	return db.countTable(tid)
}

// adopt makes m the metadata of instance st and returns it as it will be
// stored. An instance new to this process starts its x_seq counter at
// m.Seq, raised (with the epoch) above a tombstone of the same name; a
// known one keeps Seq at its lease. Writer only.
func (db *DB) adopt(st *tableState, m store.TableMeta) (store.TableMeta, error) {
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
func (db *DB) liveTable(tid uint64) (*tableState, error) {
	st := db.table(tid)
	if !st.live {
		return nil, fmt.Errorf("store: table instance %d is not live", tid)
	}
	return st, nil
}

// getMeta reads the metadata stored under name.
func (db *DB) getMeta(name string) (m store.TableMeta, found bool, err error) {
	err = db.bdb.View(func(txn *badger.Txn) error {
		item, err := txn.Get(metaKey(name))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		err = item.Value(func(v []byte) (err error) {
			m, err = decodeMeta(name, v) // the key's name (encodeMeta)
			return err
		})
		if err != nil {
			return &store.CorruptionError{Key: metaKey(name), Err: err}
		}
		return nil
	})
	return m, found, err
}

// setMeta writes m under its name and the instance id high-water in txn.
func (db *DB) setMeta(txn *badger.Txn, m store.TableMeta) error {
	v, err := encodeMeta(m)
	if err != nil {
		return err
	}
	if err := txn.Set(metaKey(m.Name), v); err != nil {
		return err
	}
	return txn.Set([]byte{ksNext, 't'}, binary.AppendUvarint(nil, db.nextTID))
}

// writeMetas durably writes the metadata of sts with each lease, in one
// transaction.
func (db *DB) writeMetas(sts []*tableState) error {
	return db.bdb.Update(func(txn *badger.Txn) error {
		for _, st := range sts {
			m := st.meta
			m.Seq = st.lease
			if err := db.setMeta(txn, m); err != nil {
				return err
			}
		}
		return nil
	})
}

// releaseLeases lowers each live table's lease to its exact x_seq.
func (db *DB) releaseLeases() error {
	var sts []*tableState
	db.mu.Lock()
	for _, st := range db.tables {
		if st.live && st.lease > st.seq {
			st.lease = st.seq
			sts = append(sts, st)
		}
	}
	db.mu.Unlock()
	if len(sts) == 0 {
		return nil
	}
	if err := db.checkSpace(); err != nil {
		return err
	}
	return db.writeMetas(sts)
}

// dropKey marks instance tid for removal ('x' tid): written with the
// metadata change that ends the instance, deleted once its data is gone.
func dropKey(tid uint64) []byte { return tablePrefix(ksDrop, tid) }

// dropInstance removes what instance tid stored, then its drop mark.
func (db *DB) dropInstance(tid uint64) error {
	if err := db.dropTableData(tid); err != nil {
		return err
	}
	return db.bdb.Update(func(txn *badger.Txn) error { return txn.Delete(dropKey(tid)) })
}

// ApplyAt writes commits whose x_seq numbers another system already
// assigned (each TableCommit.FirstSeq as given, 0 for an unsynced block)
// instead of assigning them as Append does: store/jsstore materialises a
// JetStream stream's blocks into a badger cache with it. Every instance
// written must be live (PutTable); its x_seq counter is raised to the
// commit's last number so a later Append never goes below it. A series
// given again (store/jsstore republishes a table's dictionary before it
// purges old messages) keeps its entry's value and what the store knows
// of its stored times. It returns
// once the commit is fsynced (unless Config.UnsafeNoSync), like Append.
// Writer only; the default backend's own writes never call it.
func (db *DB) ApplyAt(ctx context.Context, commits []store.TableCommit) error {
	if err := db.enter(ctx); err != nil {
		return err
	}
	defer db.leave()
	if err := db.checkSpace(); err != nil {
		return err
	}
	for i := range commits {
		tc := &commits[i]
		st, err := db.liveTable(tc.TableID)
		if err != nil {
			return err
		}
		if tc.FirstSeq != 0 && len(tc.Fragments) > 0 {
			last := tc.FirstSeq + uint64(len(tc.Fragments)) - 1
			st.seq, st.lease = max(st.seq, last), max(st.lease, last)
		}
	}
	return db.commit(commits)
}
