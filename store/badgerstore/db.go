package badgerstore

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"sync"

	"github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/rowengine"
)

// Keys of this backend, in the row engine's owner keyspaces
// (rowengine.OwnerKeyspaces; doc.go).
const (
	ksMeta     = 'm'
	ksConsumer = 'c'
)

// nextTIDKey holds the next table instance id (a uvarint).
var nextTIDKey = []byte{'n', 't'}

// DB is the default backend: a table's rows in the row engine, its
// metadata, x_seq numbering and consumers in keys of its own in the same
// badger database (doc.go). The writer's calls (Append, the table
// changes, SweepBefore, RaiseHorizon) must come from one goroutine at a
// time, the sequencer; every other method is safe for concurrent use.
type DB struct {
	e      *rowengine.Engine
	logger *slog.Logger

	// nextTID is the next table instance id; sequencer only.
	nextTID uint64

	mu     sync.Mutex           // guards tables
	tables map[uint64]*instance // by table instance id

	// gate is held by every call of the store.Backend contract that
	// this backend answers itself, and closed by Close.
	gate store.CloseGate

	// leaseExtensions counts durable x_seq lease extensions.
	leaseExtensions prometheus.Counter
}

// instance is what the backend knows of one table instance.
type instance struct {
	// meta is a live instance's metadata as last written, live is set
	// while it is (not truncated or dropped), seq is the highest x_seq
	// assigned to it and lease the highest durably reserved (Seq as
	// stored); writer only.
	meta       store.TableMeta
	live       bool
	seq, lease uint64
}

// Open opens (creating if needed) the store in cfg.Dir: the row engine
// (rowengine.Open, whose errors it returns: ErrLocked, ErrDiskFull,
// ErrVersion), then this backend's table metadata. logger may be nil
// (discard); reg may be nil (no metrics).
func Open(cfg rowengine.Config, logger *slog.Logger, reg prometheus.Registerer) (*DB, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e, err := rowengine.Open(cfg, logger, reg)
	if err != nil {
		return nil, err
	}
	db := &DB{e: e, logger: logger.With("component", "store"), tables: map[uint64]*instance{},
		leaseExtensions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ingestd_feed_seq_lease_extensions_total", Help: "Durable x_seq lease extensions.",
		})}
	if err := db.load(); err != nil {
		return nil, errors.Join(err, e.Close())
	}
	if reg != nil {
		reg.MustRegister(db.leaseExtensions)
	}
	return db, nil
}

// load reads the instance id high-water and starts each live table's
// x_seq counter at its lease.
func (db *DB) load() error {
	err := db.e.View(context.Background(), func(txn *badger.Txn) error {
		item, err := txn.Get(nextTIDKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			db.nextTID, _ = binary.Uvarint(v)
			return nil
		})
	})
	if err != nil {
		return err
	}
	db.nextTID = max(db.nextTID, 1)
	metas, err := db.loadTables()
	if err != nil {
		return err
	}
	for _, m := range metas {
		if !m.Dropped {
			st := db.table(m.ID)
			st.meta, st.live, st.seq, st.lease = m, true, m.Seq, m.Seq
		}
	}
	return nil
}

// table returns the state of instance tid, creating it.
func (db *DB) table(tid uint64) *instance {
	db.mu.Lock()
	defer db.mu.Unlock()
	st, ok := db.tables[tid]
	if !ok {
		st = &instance{}
		db.tables[tid] = st
	}
	return st
}

// loadTables returns every table's metadata, tombstones included, ordered
// by name. Each name is read from its key, so it is exactly the name
// setMeta was given.
func (db *DB) loadTables() ([]store.TableMeta, error) {
	var metas []store.TableMeta
	err := db.e.View(context.Background(), func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{ksMeta}, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			// The key holds the name byte for byte; JSON would have turned
			// invalid UTF-8 into U+FFFD (names stored by older versions).
			var m store.TableMeta
			err := it.Item().Value(func(v []byte) (err error) {
				m, err = decodeMeta(string(it.Item().Key()[1:]), v)
				return err
			})
			if err != nil {
				return &store.CorruptionError{Key: it.Item().KeyCopy(nil), Err: err}
			}
			metas = append(metas, m)
		}
		return nil
	})
	return metas, err
}

// allocTableID returns a table instance id never returned before, also
// across restarts: ids are persisted with the metadata that uses them.
// Sequencer only.
func (db *DB) allocTableID() uint64 {
	db.nextTID++
	return db.nextTID - 1
}

func metaKey(name string) []byte { return append([]byte{ksMeta}, name...) }

// metaKVs returns the keys that store m under its name, with the
// instance id high-water.
func (db *DB) metaKVs(m store.TableMeta) ([]rowengine.KV, error) {
	v, err := encodeMeta(m)
	if err != nil {
		return nil, err
	}
	return []rowengine.KV{{Key: metaKey(m.Name), Value: v}, {Key: nextTIDKey, Value: binary.AppendUvarint(nil, db.nextTID)}}, nil
}

// setMeta writes m under its name and the instance id high-water in txn.
func (db *DB) setMeta(txn *badger.Txn, m store.TableMeta) error {
	kvs, err := db.metaKVs(m)
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		if err := txn.Set(kv.Key, kv.Value); err != nil {
			return err
		}
	}
	return nil
}

// getMeta reads the metadata stored under name.
func (db *DB) getMeta(name string) (m store.TableMeta, found bool, err error) {
	err = db.e.View(context.Background(), func(txn *badger.Txn) error {
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

// writeMetas durably writes the metadata of sts with each lease, in one
// transaction.
func (db *DB) writeMetas(sts []*instance) error {
	return db.e.Update(context.Background(), func(txn *badger.Txn) error {
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
	var sts []*instance
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
	if err := db.e.CheckSpace(); err != nil {
		return err
	}
	return db.writeMetas(sts)
}
