package badgerstore

import (
	"context"

	"github.com/dgraph-io/badger/v4"

	"github.com/ingestd/ingestd/store"
)

func consumerPrefix(table string) []byte {
	return append(append([]byte{ksConsumer}, table...), 0)
}

func consumerKey(table, name string) []byte { return append(consumerPrefix(table), name...) }

// putConsumers durably writes consumer positions, by table name. Safe for
// concurrent use.
func (db *DB) putConsumers(ctx context.Context, byTable map[string][]store.Consumer) error {
	if err := db.e.CheckSpace(); err != nil {
		return err
	}
	return db.e.WriteBatch(ctx, func(wb *badger.WriteBatch) error {
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
		return nil
	})
}

// deleteConsumer forgets one consumer of a table; it is not an error when
// there is none. Safe for concurrent use.
func (db *DB) deleteConsumer(ctx context.Context, table, name string) error {
	return db.e.Update(ctx, func(txn *badger.Txn) error { return txn.Delete(consumerKey(table, name)) })
}

// loadConsumers returns the consumers of a table, ordered by name, each
// name read from its key. Table names never contain 0x00 (the feed refuses
// them), so a table's prefix 'c' name 0x00 covers its consumers only.
func (db *DB) loadConsumers(ctx context.Context, table string) ([]store.Consumer, error) {
	var out []store.Consumer
	err := db.e.View(ctx, func(txn *badger.Txn) error {
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
