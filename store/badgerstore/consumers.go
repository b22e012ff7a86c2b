package badgerstore

import (
	"errors"

	"github.com/dgraph-io/badger/v4"

	"github.com/ingestd/ingestd/store"
)

func consumerPrefix(table string) []byte {
	return append(append([]byte{ksConsumer}, table...), 0)
}

func consumerKey(table, name string) []byte { return append(consumerPrefix(table), name...) }

// putConsumers durably writes consumer positions, by table name. Safe for
// concurrent use.
func (db *DB) putConsumers(byTable map[string][]store.Consumer) error {
	if err := db.checkSpace(); err != nil {
		return err
	}
	wb := db.bdb.NewWriteBatch()
	defer wb.Cancel()
	for table, cs := range byTable {
		for _, c := range cs {
			v, err := encodeConsumer(c)
			if err != nil {
				return err
			}
			if err := wb.Set(consumerKey(table, c.Name), v); err != nil {
				return err
			}
		}
	}
	return wb.Flush()
}

// deleteConsumer forgets one consumer of a table; it is not an error when
// there is none. Safe for concurrent use.
func (db *DB) deleteConsumer(table, name string) error {
	return db.bdb.Update(func(txn *badger.Txn) error { return txn.Delete(consumerKey(table, name)) })
}

// loadConsumers returns the consumers of a table, ordered by name, each
// name read from its key. Table names never contain 0x00 (the feed refuses
// them), so a table's prefix 'c' name 0x00 covers its consumers only.
func (db *DB) loadConsumers(table string) ([]store.Consumer, error) {
	var out []store.Consumer
	err := db.bdb.View(func(txn *badger.Txn) error {
		prefix := consumerPrefix(table)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var c store.Consumer
			err := it.Item().Value(func(v []byte) (err error) {
				c, err = decodeConsumer(string(it.Item().Key()[len(prefix):]), v) // the key's name, byte for byte
				return err
			})
			if err != nil {
				return &store.CorruptionError{Key: it.Item().KeyCopy(nil), Err: err}
			}
			out = append(out, c)
		}
		return nil
	})
	return out, err
}

// seqTime returns when the server committed the fragment with x_seq seq of
// table instance tid (Unix nanoseconds), or ok=false when no stored block
// holds seq (e.g. a burned gap or a truncated range: the next stored one
// answers). Safe for concurrent use.
func (db *DB) seqTime(tid, seq uint64) (ts int64, ok bool, err error) {
	err = db.bdb.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: tablePrefix(ksSync, tid), PrefetchValues: false})
		defer it.Close()
		it.Seek(tableKey(ksSync, tid, seq))
		if !it.Valid() {
			return nil
		}
		return it.Item().Value(func(v []byte) error {
			var br blockReader
			if err := br.init(v); err != nil {
				return &store.CorruptionError{Key: it.Item().KeyCopy(nil), Err: err}
			}
			ts, ok = br.commitTime, true
			return nil
		})
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, false, nil
	}
	return ts, ok, err
}
