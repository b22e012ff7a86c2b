// Package store is the backend-neutral storage contract of ingestd
// (docs/design.md#store-layout): the types the feed stores (tables, series, fragments, consumers)
// and the small interfaces a backend implements (store.Backend: Loader,
// Appender, Tables, Reader, ConsumerStore, Sweeper, StatsReader). It
// imports no storage engine; store/badgerstore is the backend of one
// machine, and a distributed engine (NATS JetStream: the stream leader
// assigns the sequence, the committed last sequence is the watermark, a
// batch is one atomic publish with a deduplication id, metadata lives in
// key-value buckets updated with compare-and-set) stands behind the same
// calls (store/jsstore). Both keep their rows in store/rowengine, as
// peers. store/storetest is the suite every backend runs; the subtest
// checking each guarantee is named after it below.
//
// # What a backend guarantees
//
// x_seq (docs/contract.md#x-seq). The backend assigns each synced table's x_seq numbers
// in Append, in fragment order: strictly increasing per table name, never
// reused across TRUNCATE, DROP + re-create, crashes and restarts (gaps
// allowed). Append calls its stamped callback once the numbers are
// assigned and before anything of the commit is visible, so the caller
// may publish them as handed out (the table's seq). Storetest:
// XSeqAssignedByBackend, StampedBeforeVisible, TruncateBumpsEpochKeepsSeq,
// DropAndRecreateResumeAbove, CrashReopen.
//
// Watermark. Append returns nil only once every fragment of the commit is
// durable and readable at its number, and the caller raises the watermark
// to the last number only then; the watermark therefore never moves
// backwards and never passes a non-durable append, and ReadSeq up to it
// never skips an acknowledged fragment. A commit that fails leaves nothing
// readable at its numbers. Storetest: DrainNeverSkipsAcknowledged,
// StampedBeforeVisible, ContextEnded.
//
// Coalescing. ReadSeq delivers every fragment under its own x_seq, each
// as the current row at its (series, time): the union of every fragment
// written there, the later write winning per column. ReadRows delivers
// each point once. Storetest: Coalescing, RowsOpaqueCursor.
//
// Operation and filters (docs/contract.md#operation,
// docs/contract.md#filters). ReadSeq sets Row.Update on every fragment
// but its point's oldest (the insert), however often and in however many
// commits the point was written. A SeqFilter leaves out what it does not
// admit without visiting it, steps over fragments of other series or
// times without decoding their fields, and bounds the fragments examined;
// ReadSeq's through says how far the read covered, returned or not.
// Storetest: Operation, FilteredRead.
//
// DDL. Each change (create or update a table, TRUNCATE, DROP, pruning a
// tombstone) is one atomic call: a crash leaves the table as before or as
// after. TRUNCATE makes a new instance with the epoch one higher and the
// sequence kept; DROP leaves a tombstone with the epoch and every number
// handed out, and a table created again over it resumes above both.
// Storetest: TruncateBumpsEpochKeepsSeq, DropAndRecreateResumeAbove,
// PruneTombstone, CrashAfterDDL.
//
// History (docs/contract.md#horizon). The horizon of an instance only rises; a read
// starting below it is refused with ErrHistoryExpired, never answered
// with a page that skips; a sweep raises it above what it removes before
// removing it. Storetest: HorizonOnlyRises, SweepRaisesHorizonFirst.
//
// Cursors. The /rows position is an opaque RowCursor the backend issues
// and reads back; nothing above the backend looks inside. Storetest:
// RowsOpaqueCursor.
//
// Durability. What Append, the DDL calls and PutConsumers acknowledged
// survives a clean restart and a crash. Storetest:
// RestartKeepsEverything, CrashReopen, CrashAfterDDL (a backend without
// durable data, such as badger in memory, runs the rest; store/memstore
// keeps its data on a Disk that outlives its Close and runs them all).
//
// Life. Every method takes a context first: reads stop with its error,
// writes refuse before they start. After Close every method returns
// ErrClosed at once (none blocks), Close included. Storetest: ContextEnded,
// ErrClosedAfterClose.
//
// # Several writers (optional)
//
// A backend that several ingestd processes write at once also implements
// Shared (store/jsstore does, store/badgerstore does not; the feed finds
// out with a type assertion): column positions and series ids come from
// it, the same in every process, and it reports the other processes'
// blocks once applied and their table changes (Follow). Everything above
// holds for each process, and x_seq is unique and ascending across them.
// storetest checks it with two processes: the Shared subtests, and every
// single-process guarantee with the writes going to one process and the
// reads to the other once it applied them (but StampedBeforeVisible,
// which reads inside the writer's Append); jsstore's own tests and
// cmd/ingestd/crashtest run more.
//
// # Concurrency
//
// One goroutine at a time (the feed's sequencer) calls the writer side:
// Append, the Tables calls, SweepBefore and RaiseHorizon. Everything else
// is safe for concurrent use with it and with itself.
package store
