// Package memstore is the in-memory backend of store.Backend: the whole
// contract (docs/contract.md) on Go maps and slices, with no file and no
// network. The feed's unit tests run on it, so they test the feed rather
// than a disk; store/storetest checks it like the other backends. It is
// not a server option: nothing survives the process.
//
// # Disk
//
// A Disk is the medium: it holds the tables, fragments and consumers and
// outlives the Stores opened on it, one at a time (Open refuses a second
// with store.ErrLocked). Everything Append acknowledged is on it, so a
// clean restart is Close then Open on the same Disk, and what a crash
// leaves is Disk.Clone taken while a Store is open (there is no lease to
// release: TableMeta.Seq is always the highest number handed out).
//
// # Layout
//
// A table instance keeps its synced fragments in one slice ordered by
// x_seq (ReadSeq finds a cursor by binary search), the synced blocks'
// first and last x_seq and commit time (SeqTime, FirstSeqSince), and a
// map from point (series, time) to the point's fragments and its
// coalesced row, kept current by every Append: a drain reads the row of
// an overwritten point in one map look-up however often it was written.
// ReadRows walks the points in (series, time) order, sorted when a read
// needs it after new points arrived.
//
// Read counts (ReadCounts, as storetest's Harness.Reads wants them): a
// ReadSeq counts each commit's block it examines a fragment of and each
// look-up of an overwritten point's row; a ReadRows page counts one block
// (its view of the point map) and no entry.
//
// # Concurrency
//
// A Disk's RWMutex guards everything on it. Writes take it exclusively
// for their whole call. A ReadSeq takes the read lock for at most
// readBatch fragments at a time and visits the rows it copied with the
// lock released (a visit may call the store; a slow visit never holds a
// writer); every batch sees the instance's horizon again, so a sweep
// that removed fragments above the read's cursor meanwhile makes it
// return store.ErrHistoryExpired instead of skipping them. A ReadRows
// page copies its rows under one read lock (one view, taken before the
// first visit). Fragments are immutable once stored; a sweep or a DROP
// replaces slices and maps rather than changing them under a reader.
// ctx is checked before each block a read examines and before each visit.
// Close only marks the Store closed (every later call returns
// store.ErrClosed): a call that entered before may still finish, as it
// holds nothing Close releases.
package memstore
