package rowengine

import (
	"context"
	"errors"

	"github.com/dgraph-io/badger/v4"

	"github.com/ingestd/ingestd/store"
)

// This file is what a backend (the engine's owner) calls: each exported
// method checks that the engine is open and ctx alive, then runs the
// unexported method doing the work, holding the gate so that
// Close waits for it.

// MaxValueBytes is the largest value the engine holds (badger's value-log
// file size): a table's block of one commit is one value.
const MaxValueBytes = 256 << 20

// MaxKeyBytes is the longest key badger accepts. An owner that keeps names
// in its keys bounds them by it.
const MaxKeyBytes = 65_000

// Limits returns what the engine holds: a table's block of one commit up
// to MaxValueBytes and a fragment up to half of that. MaxMetaBytes and
// MaxNameBytes are the owner's (0 here): the engine stores no name and no
// schema.
func Limits() store.Limits {
	return store.Limits{MaxBlockBytes: MaxValueBytes, MaxFragmentBytes: MaxValueBytes / 2}
}

// OwnerKeyspaces are the first bytes of the keys the engine leaves to its
// owner (Update, View, NewWriteBatch, Apply's own keys): the engine never
// reads, writes or drops a key that starts with one of them. The key
// {'n', 't'} is the owner's too (the engine's only 'n' key is {'n'}).
var OwnerKeyspaces = []byte{ksMeta, ksConsumer}

// KV is one of the owner's keys and its value, written by Apply with the
// commit.
type KV struct {
	// Key starts with a byte of OwnerKeyspaces.
	Key []byte
	// Value is stored as it is; Apply keeps no reference after it returns.
	Value []byte
}

// Close stores the head's runs, stops the value-log collector, flushes and
// closes the database and releases the directory lock. In-flight calls
// finish first; every later call, Close included, returns
// store.ErrClosed. An owner writes what it keeps for a clean restart
// before.
func (db *Engine) Close() error {
	if err := db.gate.Close(); err != nil {
		return err
	}
	if err := db.flushHeads(); err != nil {
		db.logger.Warn("head runs not stored: the next Open replays them", "err", err)
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
func (db *Engine) stopBackground() {
	if db.gc != nil {
		close(db.gc.stop)
		<-db.gc.done
	}
	if db.mapped != nil {
		close(db.mapped.stop)
		<-db.mapped.done
	}
}

// Apply durably writes commits whose x_seq numbers the owner assigned
// (each TableCommit.FirstSeq, 0 for an unsynced block; TableCommit.Meta
// is ignored: the schema is the owner's), with own, the owner's keys
// (OwnerKeyspaces), in the first of its transactions. A series given again
// (store/jsstore republishes a table's dictionary before it purges old
// messages) keeps its entry's value and what the engine knows of its
// stored times. It returns once everything is fsynced (unless
// Config.UnsafeNoSync), ErrDiskFull having written nothing when the data
// directory's file system has less than Config.MinFreeBytes free. Writer
// only: one goroutine at a time, beside no Sweep or DropInstance.
func (db *Engine) Apply(ctx context.Context, commits []store.TableCommit, own ...KV) error {
	if err := db.gate.Enter(ctx); err != nil {
		return err
	}
	defer db.gate.Leave()
	return db.commit(commits, own...)
}

// Update runs fn in one read-write badger transaction, committed (and
// fsynced unless Config.UnsafeNoSync) when fn returns nil: for the
// owner's keys (OwnerKeyspaces) and MarkDrop. Safe for concurrent use.
func (db *Engine) Update(ctx context.Context, fn func(txn *badger.Txn) error) error {
	if err := db.gate.Enter(ctx); err != nil {
		return err
	}
	defer db.gate.Leave()
	if err := db.checkSpace(); err != nil {
		return err
	}
	return db.bdb.Update(fn)
}

// View runs fn in one read-only badger transaction, for the owner's keys.
// Safe for concurrent use.
func (db *Engine) View(ctx context.Context, fn func(txn *badger.Txn) error) error {
	if err := db.gate.Enter(ctx); err != nil {
		return err
	}
	defer db.gate.Leave()
	return db.bdb.View(fn)
}

// WriteBatch runs fn with a badger write batch and flushes it: many of
// the owner's keys (OwnerKeyspaces) at the cost of one sync. Safe for
// concurrent use.
func (db *Engine) WriteBatch(ctx context.Context, fn func(wb *badger.WriteBatch) error) error {
	if err := db.gate.Enter(ctx); err != nil {
		return err
	}
	defer db.gate.Leave()
	if err := db.checkSpace(); err != nil {
		return err
	}
	wb := db.bdb.NewWriteBatch()
	defer wb.Cancel()
	if err := fn(wb); err != nil {
		return err
	}
	return wb.Flush()
}

// MarkDrop marks instance tid for removal in txn (an Update's): an owner
// writes it with the change that ends the instance, then calls
// DropInstance. When a crash comes between them, Open finishes the
// removal, so the change is whole or not at all.
func MarkDrop(txn *badger.Txn, tid uint64) error { return txn.Set(dropKey(tid), nil) }

// DropInstance removes every series, block, index entry and the horizon
// of instance tid, then its drop mark (marking it first when the owner
// did not). It blocks writes while it runs (badger DropPrefix). Writer
// only.
func (db *Engine) DropInstance(ctx context.Context, tid uint64) error {
	if err := db.gate.Enter(ctx); err != nil {
		return err
	}
	defer db.gate.Leave()
	// The owner's transaction wrote the mark as a rule (badgerstore's
	// TRUNCATE and DROP): a read then saves a synced write.
	err := db.bdb.Update(func(txn *badger.Txn) error {
		if _, err := txn.Get(dropKey(tid)); !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		return MarkDrop(txn, tid)
	})
	if err != nil {
		return err
	}
	return db.dropInstance(tid)
}

// dropKey marks instance tid for removal ('x' tid): written with the
// change that ends the instance, deleted once its data is gone.
func dropKey(tid uint64) []byte { return tablePrefix(ksDrop, tid) }

// dropInstance removes what instance tid stored, then its drop mark.
func (db *Engine) dropInstance(tid uint64) error {
	if err := db.dropTableData(tid); err != nil {
		return err
	}
	return db.bdb.Update(func(txn *badger.Txn) error { return txn.Delete(dropKey(tid)) })
}

// CheckSpace returns store.ErrDiskFull when the data directory's file
// system has less than Config.MinFreeBytes free; every write of the
// engine checks it first.
func (db *Engine) CheckSpace() error { return db.checkSpace() }

// LoadSeries returns the series dictionary of instance tid, ordered by
// series id.
func (db *Engine) LoadSeries(ctx context.Context, tid uint64) ([]store.Series, error) {
	if err := db.gate.Enter(ctx); err != nil {
		return nil, err
	}
	defer db.gate.Leave()
	return db.loadSeries(tid)
}

// ReadSeq is store.Reader's ReadSeq (see readSeq).
func (db *Engine) ReadSeq(ctx context.Context, tid, after, upto uint64, limit int, filter *store.SeqFilter, visit func(*store.Row) error) (uint64, error) {
	if err := db.gate.Enter(ctx); err != nil {
		return after, err
	}
	defer db.gate.Leave()
	return db.readSeq(ctx, tid, after, upto, limit, filter, visit)
}

// SeqTime is store.Reader's SeqTime (see seqTime).
func (db *Engine) SeqTime(ctx context.Context, tid, seq uint64) (int64, bool, error) {
	if err := db.gate.Enter(ctx); err != nil {
		return 0, false, err
	}
	defer db.gate.Leave()
	return db.seqTime(tid, seq)
}

// ReadRows is store.Reader's ReadRows (see readRows).
func (db *Engine) ReadRows(ctx context.Context, tid uint64, cur store.RowCursor, start, end int64, limit int, visit func(*store.Row) error) (store.RowCursor, bool, error) {
	if err := db.gate.Enter(ctx); err != nil {
		return nil, false, err
	}
	defer db.gate.Leave()
	return db.readRows(ctx, tid, cur, start, end, limit, visit)
}

// SweepBefore is store.Sweeper's SweepBefore (see sweepBefore). Writer
// only.
func (db *Engine) SweepBefore(ctx context.Context, tid uint64, cutoff int64, maxFragments int) (store.SweepResult, error) {
	if err := db.gate.Enter(ctx); err != nil {
		return store.SweepResult{}, err
	}
	defer db.gate.Leave()
	return db.sweepBefore(tid, cutoff, maxFragments)
}

// RaiseHorizon is store.Sweeper's RaiseHorizon (see raiseHorizon). Writer
// only.
func (db *Engine) RaiseHorizon(ctx context.Context, tid, h uint64) (uint64, error) {
	if err := db.gate.Enter(ctx); err != nil {
		return 0, err
	}
	defer db.gate.Leave()
	return db.raiseHorizon(tid, h)
}

// Horizon is store.Sweeper's Horizon (see horizon).
func (db *Engine) Horizon(ctx context.Context, tid uint64) (uint64, error) {
	if err := db.gate.Enter(ctx); err != nil {
		return 0, err
	}
	defer db.gate.Leave()
	return db.horizon(tid)
}

// FirstSeqSince is store.Sweeper's FirstSeqSince (see firstSeqSince).
func (db *Engine) FirstSeqSince(ctx context.Context, tid, from uint64, cutoff int64, maxBlocks int) (uint64, bool, bool, error) {
	if err := db.gate.Enter(ctx); err != nil {
		return 0, false, false, err
	}
	defer db.gate.Leave()
	return db.firstSeqSince(tid, from, cutoff, maxBlocks)
}

// TableStats is store.StatsReader's TableStats (see countTable).
func (db *Engine) TableStats(ctx context.Context, tid uint64) (store.TableStats, error) {
	if err := db.gate.Enter(ctx); err != nil {
		return store.TableStats{}, err
	}
	defer db.gate.Leave()
	return db.countTable(tid)
}
