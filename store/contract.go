package store

import "context"

// Backend is the whole storage contract (docs/contract.md): what the feed
// needs from durable storage, and what every backend implements
// (store/badgerstore on one machine; a distributed engine such as NATS
// JetStream behind the same calls). store/storetest is the suite that
// checks a backend against it; doc.go lists the guarantees.
//
// Concurrency: the writer side (Appender, Tables, the writes of Sweeper)
// is called by one goroutine at a time, the feed's sequencer; the read
// side (Loader, Reader, ConsumerStore, Horizon, StatsReader) is safe for
// concurrent use with it and with itself. Every method takes a context
// first: reads stop early with ctx.Err() when it ends; a write checks it
// before it starts and, once started, runs to its end (a write abandoned
// half-way would leave the caller's memory ahead of the store).
//
// After Close every method returns ErrClosed, and Close itself does the
// second time.
type Backend interface {
	Loader
	Appender
	Tables
	Reader
	ConsumerStore
	Sweeper
	StatsReader
	// Limits returns the largest things the backend stores. Constant
	// from Open on; safe for concurrent use.
	Limits() Limits
	// Close makes everything written durable, releases what Open took
	// (files, connections) and makes every later call return ErrClosed. A
	// backend may record each table's exact x_seq on a clean Close, so a
	// restart burns no numbers. The writer must have stopped first.
	Close() error
}

// Loader reads the durable state at start-up.
type Loader interface {
	// LoadTables returns every table's metadata, tombstones included,
	// ordered by name. A live table's Seq is the highest x_seq the
	// backend may have assigned to it: it resumes above it.
	LoadTables(ctx context.Context) ([]TableMeta, error)
	// LoadSeries returns a table instance's series dictionary, ordered by
	// series id.
	LoadSeries(ctx context.Context, tid uint64) ([]Series, error)
}

// Appender is the write of a group commit (docs/contract.md#x-seq): the backend assigns
// each synced table's x_seq numbers and makes the commit durable.
type Appender interface {
	// Append durably writes commits, at most one per table instance. For
	// each commit with Sync set and fragments, the backend assigns the
	// table's next x_seq numbers to the fragments in order and writes the
	// first into FirstSeq (the rest follow consecutively): strictly above
	// every number it assigned to the table's name before, across
	// TRUNCATE, DROP + re-create (PutTable resumes above the tombstone),
	// crashes and restarts; a crash may leave a gap, never a repeat. Other
	// commits get FirstSeq 0 (an unsynced block: no x_seq). Then it calls
	// stamped (when non-nil) once, from the calling goroutine, before
	// anything of the commit is visible to a reader: the caller may
	// publish the numbers as handed out. Append returns nil only once
	// every fragment is durable and visible to ReadSeq at its x_seq: the
	// caller then raises each table's watermark to its last number, never
	// before. On an error nothing at the assigned numbers may be read
	// until a restart (a prefix of the commit may survive a crash), and
	// the numbers are never assigned again. ErrDiskFull when the backend
	// is out of room (nothing written).
	Append(ctx context.Context, commits []TableCommit, stamped func()) error
}

// Tables are the DDL changes: each is one atomic call, so a crash leaves
// the table either as it was or as the call makes it, never in between.
// Writer only.
type Tables interface {
	// NewTableID returns a table instance id never returned before, also
	// across restarts once a table using it was written.
	NewTableID(ctx context.Context) (uint64, error)
	// PutTable writes a live table's metadata (create, sync, epoch,
	// retention, columns) and returns it as stored. For a new instance
	// that replaces a tombstone of the same name, the backend raises Seq
	// to the tombstone's and Epoch to the tombstone's (plus one when
	// Sync), so a re-created table never runs backwards; for an existing
	// instance the backend keeps Seq at least as high as every number it
	// assigned (the caller's Seq is only a lower bound). A Shared backend
	// returns ErrEnded for an instance another process ended (TRUNCATE,
	// DROP) meanwhile.
	PutTable(ctx context.Context, m TableMeta) (TableMeta, error)
	// TruncateTable replaces live instance tid by a new empty instance of
	// the same name (TRUNCATE): a new ID, Epoch one higher, the same Sync
	// and Retention, no columns, and x_seq continuing above every number
	// the old instance was assigned. The old instance's fragments, series
	// and horizon are gone; consumers (kept by name) stay. It returns the
	// new instance's metadata.
	TruncateTable(ctx context.Context, tid uint64) (TableMeta, error)
	// DropTable replaces live instance tid by a tombstone of its name
	// (DROP TABLE): Dropped set, ID 0, its Epoch, and Seq at least every
	// number assigned to it. The instance's data and the name's consumers
	// are gone. It returns the tombstone.
	DropTable(ctx context.Context, tid uint64) (TableMeta, error)
	// PruneTombstone deletes the tombstone of name and writes floor (a
	// tombstone under a reserved name holding the highest epoch and Seq of
	// every pruned one) in one step.
	PruneTombstone(ctx context.Context, name string, floor TableMeta) error
}

// Reader is the drain's and the copy's read side. Safe for concurrent use.
type Reader interface {
	// ReadSeq visits the fragments of instance tid with after < x_seq <=
	// upto in x_seq order, at most limit, each as the coalesced row at its
	// (series, time) (the later write wins per column, every fragment
	// under its own x_seq) with Row.Update telling whether it created its
	// point. upto must be at most the watermark: everything
	// below it is there, so a read never skips an acknowledged fragment.
	// filter, when non-nil, leaves out the fragments it does not admit
	// (without visiting them) and bounds the fragments examined.
	// It returns through: every fragment with after < x_seq <= through
	// was examined (visited or left out), through = upto when the read
	// reached upto, the x_seq of the limit-th row when limit ended it, the
	// last x_seq examined when filter.MaxScan did, and after when there was
	// nothing to read (after >= upto, limit <= 0).
	// ErrHistoryExpired when after+1 is below the instance's horizon as
	// the read's own view sees it. The Row is valid only during visit; an
	// error from visit ends the read and is returned.
	ReadSeq(ctx context.Context, tid, after, upto uint64, limit int, filter *SeqFilter, visit func(*Row) error) (through uint64, err error)
	// SeqTime returns when the block holding x_seq seq (or the next stored
	// one) was committed, in Unix nanoseconds; ok=false when there is none.
	SeqTime(ctx context.Context, tid, seq uint64) (ts int64, ok bool, err error)
	// ReadRows visits the points of instance tid with start <= time < end
	// (Unix nanoseconds) from cur on, at most limit, each once as its
	// coalesced row, from one read view taken before the first visit (a
	// visited row was committed before visit first ran). Row.Seq is 0 for
	// a fragment written with sync OFF. It returns the opaque cursor of the
	// next page, and done=true when there is none. A visit returning
	// ErrRowLeftOut ends the page before its row. ErrInvalidCursor for a
	// cursor the backend did not issue.
	ReadRows(ctx context.Context, tid uint64, cur RowCursor, start, end int64, limit int, visit func(*Row) error) (next RowCursor, done bool, err error)
}

// ConsumerStore keeps named consumers' positions, by table name (they
// outlive TRUNCATE and go with DROP). Safe for concurrent use.
type ConsumerStore interface {
	// PutConsumers durably writes positions, by table name.
	PutConsumers(ctx context.Context, byTable map[string][]Consumer) error
	// LoadConsumers returns a table's consumers, ordered by name.
	LoadConsumers(ctx context.Context, table string) ([]Consumer, error)
	// DeleteConsumer forgets one consumer; none is not an error.
	DeleteConsumer(ctx context.Context, table, name string) error
}

// Sweeper is the store's side of retention and of the history horizon
// (docs/contract.md#horizon). SweepBefore and RaiseHorizon are writer only; Horizon and
// FirstSeqSince are safe for concurrent use.
type Sweeper interface {
	// SweepBefore removes, in one bounded batch of at most maxFragments,
	// the fragments of instance tid older than cutoff (Unix nanoseconds),
	// raising its horizon above every synced fragment it removes before
	// any is gone.
	SweepBefore(ctx context.Context, tid uint64, cutoff int64, maxFragments int) (SweepResult, error)
	// RaiseHorizon durably raises instance tid's horizon to h (never
	// lowers it) and returns the horizon in force.
	RaiseHorizon(ctx context.Context, tid, h uint64) (uint64, error)
	// Horizon returns instance tid's horizon (1: nothing trimmed).
	Horizon(ctx context.Context, tid uint64) (uint64, error)
	// FirstSeqSince finds the first x_seq from from on committed at or
	// after cutoff, looking at most maxBlocks blocks (more=true: look
	// again from seq).
	FirstSeqSince(ctx context.Context, tid, from uint64, cutoff int64, maxBlocks int) (seq uint64, found, more bool, err error)
}

// StatsReader counts what a table instance holds. Safe for concurrent use.
type StatsReader interface {
	// TableStats counts instance tid's fragments, overwritten points,
	// series and bytes; a backend may reuse counts up to an age it
	// documents (TableStats.ComputedAt says when they were taken).
	TableStats(ctx context.Context, tid uint64) (TableStats, error)
}

// Shared is implemented by a backend that several ingestd processes
// write at once (store/jsstore: several nodes on one JetStream cluster);
// the feed discovers it with a type assertion. A backend with one writer
// (store/badgerstore) does not implement it, and the feed then mints
// column positions and series ids itself. With it, the feed takes both
// from the backend, so that a tag set is one series and a column one
// position in every process, and follows what the other processes wrote
// and changed: their blocks, the tables they created, their TRUNCATE,
// DROP, SET SYNC and retention. Follow is called once, before the feed
// loads the tables.
//
// Concurrency: a shared store's round trips must not hold the writer, so
// the feed calls AddColumns, SeriesIDs, the DDL of Tables (NewTableID,
// PutTable, TruncateTable, DropTable, PruneTombstone: a table a write
// creates, and the table changes), and LoadSeries, Horizon and
// LoadConsumers for an instance another process created, from one
// goroutine of its own (its resolver: docs/design.md#shared-metadata),
// and the sweeps (SweepBefore, FirstSeqSince, RaiseHorizon: one at a
// time) from another, at the same time as the writer's Append, for the
// same table too (but for a table change: no Append of the table runs
// beside its TruncateTable or DropTable). Every such call of one goroutine is a compare-and-set the
// backend retries or merges on conflict, whichever goroutine or process
// it meets.
//
// An instance another process ended (TRUNCATE, DROP) stays writable for
// the caller until it takes the report of the change (Follow): AddColumns
// and SeriesIDs answer for it as before, and the backend's Append
// acknowledges its commits without storing them (they are ordered before
// the change: a write that raced it); TruncateTable and DropTable refuse
// it with ErrEnded.
type Shared interface {
	// AddColumns adds the columns of cols that live instance tid's schema
	// lacks (by name) to it, at the end, for every process at once
	// (compare-and-set), and returns the whole schema. Positions never
	// change; a name another process added first keeps its kind, which
	// the caller checks against the returned schema.
	AddColumns(ctx context.Context, tid uint64, cols []Column) ([]Column, error)
	// SeriesIDs returns the ids of series (ids[i] is series[i]'s) in
	// live instance tid: for each canonical tag set, the id the first
	// process to ask minted, the same in every process; a key given twice
	// gets one id. The resolver asks for every series of a table new to
	// it at once, so that a burst of new series (a fleet's first writes)
	// costs the backend a few round trips, not one per series. On an
	// error none of the ids is returned (some may have been minted: the
	// next call returns them). Safe for concurrent use.
	SeriesIDs(ctx context.Context, tid uint64, series []SeriesKey) ([]uint64, error)
	// Beyond reports whether drain cursor after is beyond live instance
	// tid's sequence (docs/contract.md#cursor-beyond-sequence): above every x_seq
	// any process had handed out when the call began. False while that is
	// not known (this process has not applied every other process's
	// block yet, or the backend bounds what proving it costs): the cursor
	// may be another process's, which the caller waits for. An error
	// leaves it unknown. Safe for concurrent use.
	Beyond(ctx context.Context, tid, after uint64) (bool, error)
	// Follow registers fn, which the backend calls, from its own
	// goroutines, after it applied a block another process wrote or a
	// change another process made to a table: fn must not block nor call
	// the backend.
	Follow(fn func(Followed))
}

// HealthReporter is implemented by a backend that can stop keeping up
// with what it stores without failing every call (store/jsstore: a
// table's follower that no longer applies its stream); the server's
// /health reports it (docs/operations.md#health).
type HealthReporter interface {
	// Unhealthy returns what the backend does not keep up with, "" when
	// nothing. Safe for concurrent use; no I/O.
	Unhealthy() string
}

// Followed is what a Shared backend applied of another process's writes
// to one table name, in one of three forms:
//   - a block of a live instance: Table is the instance's metadata as the
//     backend knows it (Columns at least as long as the block needs),
//     Series the series the block introduced;
//   - a change of the name's live instance (a table created, truncated or
//     re-created, its sync, epoch, retention or columns changed): Table
//     is the instance, which may be new to the caller;
//   - a DROP: Table is the tombstone (Dropped) and Ended the id of the
//     instance the drop ended.
//
// Version orders the reports of one name: a report with a lower Version
// than one applied describes an older state of the name (its metadata is
// stale; its series and Seq still count for the instance it names).
// Instance ids grow: a higher id is a later instance of the name.
type Followed struct {
	// Table is the instance's metadata or the tombstone.
	Table TableMeta
	// Ended is, for a tombstone, the id of the instance the DROP ended.
	Ended uint64
	// Series are the series a block introduced (ids as SeriesIDs gives).
	Series []Series
	// Seq is the highest x_seq applied to the instance (every number at
	// or below it is readable: the watermark the caller may publish).
	Seq uint64
	// Version is the version of the name's metadata the report shows.
	Version uint64
}
