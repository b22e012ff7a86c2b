package badgerstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
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
			key := it.Item().Key()
			if _, _, chunk := isColumnChunk(key); chunk {
				continue // read with its table's value (readMeta)
			}
			// The key holds the name byte for byte; JSON would have turned
			// invalid UTF-8 into U+FFFD (names stored by older versions).
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			m, err := readMeta(txn, string(key[1:]), v)
			if err != nil {
				return err
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

// columnChunkKey is the key of chunk i of the columns of name: after its
// meta key and before any other name's (a name holds no control byte).
func columnChunkKey(name string, i int) []byte {
	return binary.BigEndian.AppendUint32(append(metaKey(name), 0), uint32(i))
}

// isColumnChunk reports whether key, of the meta keyspace, is a chunk of
// columns (columnChunkKey), and whose and which.
func isColumnChunk(key []byte) (name string, i int, ok bool) {
	at := bytes.IndexByte(key[1:], 0)
	if at < 0 || len(key) != 1+at+1+4 {
		return "", 0, false
	}
	return string(key[1 : 1+at]), int(binary.BigEndian.Uint32(key[1+at+1:])), true
}

// metaKVs returns the keys that store m under its name: its value, the
// chunks of its columns that differ from what stored reads (a key's
// value, nil when absent), and the instance id high-water. A chunk left
// past m's (a schema that shrank) is not read any more; setMeta deletes
// them.
func (db *DB) metaKVs(m store.TableMeta, stored func(key []byte) ([]byte, error)) ([]rowengine.KV, error) {
	v, chunks, err := encodeMeta(m)
	if err != nil {
		return nil, err
	}
	kvs := []rowengine.KV{{Key: metaKey(m.Name), Value: v}, {Key: nextTIDKey, Value: binary.AppendUvarint(nil, db.nextTID)}}
	for i, c := range chunks {
		k := columnChunkKey(m.Name, i)
		old, err := stored(k)
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(old, c) {
			kvs = append(kvs, rowengine.KV{Key: k, Value: c})
		}
	}
	return kvs, nil
}

// txnValue reads key's value in txn: nil when absent.
func txnValue(txn *badger.Txn, key []byte) ([]byte, error) {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return item.ValueCopy(nil)
}

// setMeta writes m under its name and the instance id high-water in txn,
// and deletes the chunks of columns past m's.
func (db *DB) setMeta(txn *badger.Txn, m store.TableMeta) error {
	kvs, err := db.metaKVs(m, func(k []byte) ([]byte, error) { return txnValue(txn, k) })
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		if err := txn.Set(kv.Key, kv.Value); err != nil {
			return err
		}
	}
	return deleteChunks(txn, m.Name, len(columnChunkEnds(m.Columns)))
}

// deleteChunks deletes the chunks of columns of name from chunk from on.
func deleteChunks(txn *badger.Txn, name string, from int) error {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: append(metaKey(name), 0)})
	var keys [][]byte
	for it.Seek(columnChunkKey(name, from)); it.Valid(); it.Next() {
		keys = append(keys, it.Item().KeyCopy(nil))
	}
	it.Close()
	for _, k := range keys {
		if err := txn.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// getMeta reads the metadata stored under name.
func (db *DB) getMeta(name string) (m store.TableMeta, found bool, err error) {
	err = db.e.View(context.Background(), func(txn *badger.Txn) error {
		v, err := txnValue(txn, metaKey(name))
		if err != nil || v == nil {
			return err
		}
		found = true
		m, err = readMeta(txn, name, v)
		return err
	})
	return m, found, err
}

// readMeta decodes name's meta value v and reads its chunks of columns
// in txn.
func readMeta(txn *badger.Txn, name string, v []byte) (store.TableMeta, error) {
	m, chunks, err := decodeMeta(name, v) // the key's name (encodeMeta)
	if err != nil {
		return m, &store.CorruptionError{Key: metaKey(name), Err: err}
	}
	for i := range chunks {
		c, err := txnValue(txn, columnChunkKey(name, i))
		if err == nil && c == nil {
			err = fmt.Errorf("badgerstore: chunk %d of %d of the columns is missing", i, chunks)
		}
		if err == nil {
			err = addChunk(&m, c)
		}
		if err != nil {
			return m, &store.CorruptionError{Key: columnChunkKey(name, i), Err: err}
		}
	}
	return m, nil
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
