// Package feed is ingestd's sequencer and change feed (SPEC §4–§6).
//
// # Lifecycle
//
// New loads every table from the store; Run is the sequencer goroutine and
// returns when its context ends, after committing every operation that was
// queued before (graceful shutdown); then the store may be closed. Submit,
// the table operations and Drain are safe for concurrent use from any
// goroutine while Run runs.
//
// # Invariants
//
// One goroutine, the sequencer, owns every write: schemas, series ids,
// x_seq and epochs change only there, and it group-commits whatever the
// queue holds as one store commit (one fsync) before acknowledging it.
//
//   - x_seq is per table, assigned in arrival order, and never runs
//     backwards nor repeats, across restarts, crashes, TRUNCATE, SET SYNC and
//     DROP + re-create: numbers are leased durably in chunks before any of
//     them becomes visible, and a restart resumes above the lease (a crash
//     burns the unused rest, a gap the cursor steps over).
//   - seq is the highest x_seq handed out; the watermark is the highest x_seq
//     a drain may return. The sequencer raises seq when it stamps a group and
//     the watermark only after the store commit returned, so everything at
//     or below the watermark is durable and visible, and a drain, which never
//     reads above the watermark it saw, can never skip an in-flight write.
//   - The epoch starts at 1 for a table created with sync ON (0 otherwise),
//     and is bumped by enabling sync on a table whose sync is OFF and by
//     TRUNCATE; a drain naming another epoch is refused (ErrStaleEpoch).
//
// # Locks
//
// table.mu guards a table's published state (sync, epoch, seq, watermark,
// instance id and the schema and series snapshots). Sequencer.mu guards the
// table maps. Order: Sequencer.mu before table.mu; the store's own locks are
// taken only inside store calls, never while holding either.
package feed
