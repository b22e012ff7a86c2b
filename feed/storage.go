package feed

import "github.com/ingestd/ingestd/store"

// Storage is what the feed needs from durable storage; *badgerstore.DB implements
// it, and a second backend (e.g. NATS JetStream) would too. Its parts are
// split by caller.
type Storage interface {
	Loader
	Committer
	Reader
	ConsumerStore
	Sweeper
}

// Loader reads the durable state at start-up.
type Loader interface {
	// LoadTables returns every table's metadata, tombstones included.
	LoadTables() ([]store.TableMeta, error)
	// LoadSeries returns a table instance's series dictionary.
	LoadSeries(tid uint64) ([]store.Series, error)
}

// Committer is the sequencer's write side. Its methods are called from the
// sequencer goroutine only.
type Committer interface {
	// AllocTableID returns a table instance id never returned before.
	AllocTableID() uint64
	// PutMeta durably writes one table's metadata.
	PutMeta(m store.TableMeta) error
	// DeleteMeta durably deletes one table's metadata (a pruned tombstone).
	DeleteMeta(name string) error
	// Commit durably writes a group commit.
	Commit(commits []store.TableCommit) error
	// DropTableData deletes everything stored for a table instance.
	DropTableData(tid uint64) error
}

// Reader is the drain's read side, safe for concurrent use.
type Reader interface {
	// ReadSeq visits fragments after < x_seq <= upto in order, at most
	// limit, each as its coalesced row.
	ReadSeq(tid, after, upto uint64, limit int, visit func(*store.Row) error) error
	// SeqTime returns when the block holding x_seq seq (or the next stored
	// one) was committed, in Unix nanoseconds; ok=false when there is none.
	SeqTime(tid, seq uint64) (ts int64, ok bool, err error)
	// ReadRows visits fragments with start <= ts < end from a cursor on,
	// at most limit, each as its coalesced row, from one read view taken
	// before the first visit (Rows relies on it: a visited row was
	// committed before visit first ran).
	ReadRows(tid uint64, cur store.RowCursor, start, end int64, limit int, visit func(*store.Row) error) (store.RowCursor, bool, error)
}

// ConsumerStore keeps named consumers' positions, by table name. Safe for
// concurrent use.
type ConsumerStore interface {
	PutConsumers(byTable map[string][]store.Consumer) error
	LoadConsumers(table string) ([]store.Consumer, error)
	DeleteConsumer(table, name string) error
	DeleteConsumers(table string) error
}
