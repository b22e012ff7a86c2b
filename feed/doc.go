// Package feed is ingestd's sequencer and change feed (docs/contract.md).
//
// # Two sides over one registry
//
// Open loads every table from the store (any store.Backend, through the
// Storage interface: store/doc.go is the contract, store/badgerstore the
// backend of one machine) and returns the feed's two sides
// over one table registry (the live tables by name and the dropped
// tables' tombstones), in the manner of etcd's write and watch sides over
// one store:
//
//   - the Sequencer, the write side: Submit and Append (group-committed
//     writes), the table operations CreateTable, PutTable, DefineTable,
//     SetSync, Truncate and Drop, and Run, the sequencer goroutine, which
//     alone changes the registry and the tables' state;
//   - the Drainer, the read side: Drain, Rows (the copy by time range),
//     Consumers, DeleteConsumer, ConsumerLags, TableStats, Status, Table
//     and Tables. It reads what the sequencer published and the store, and
//     never waits for the sequencer goroutine.
//
// # Lifecycle
//
// Run returns when its context ends, after committing every operation
// that was queued before (graceful shutdown); then the store may be
// closed. Submit and the table operations are safe for concurrent use from
// any goroutine while Run runs (ErrClosed once it stopped); the Drainer's
// methods are safe for concurrent use before, while and after Run runs
// (until the store is closed), and its long-polls end when Run starts to
// stop.
//
// # Invariants
//
// One goroutine, the sequencer, owns every write: schemas, series ids
// and epochs change only there, and it group-commits whatever the queue
// holds as one store Append (one fsync) before acknowledging it. Each DDL
// change (create, SET SYNC, retention, TRUNCATE, DROP, pruning a
// tombstone) is one store call.
//
//   - x_seq is per table, assigned in arrival order by the store in
//     Append (the backend's sequence: badger's durable lease, a JetStream
//     stream's), and never runs backwards nor repeats, across restarts,
//     crashes, TRUNCATE, SET SYNC and DROP + re-create (a crash may burn
//     a gap, which the cursor steps over).
//     Arrival order is the queue's, except among the writes of one group
//     commit: they were all in flight together (none answered), so the
//     sequencer applies them by their lowest point time, which keeps a
//     series' points of concurrent writers' requests in ascending runs
//     (store/rowengine/doc.go). The lines of one write keep their order,
//     and a writer that waits for an answer before its next write (every
//     HTTP client, one batch in flight per TCP connection) sees its writes
//     in the order it sent them.
//   - seq is the highest x_seq handed out; the watermark is the highest x_seq
//     a drain may return. The sequencer raises seq when the store reports
//     the group's numbers (Append's stamped callback, before anything is
//     visible) and the watermark only after Append returned, so everything
//     at or below the watermark is durable and visible, and a drain, which
//     never reads above the watermark it saw, can never skip an in-flight
//     write.
//   - The epoch starts at 1 for a table created with sync ON (0 otherwise),
//     and is bumped by enabling sync on a table whose sync is OFF and by
//     TRUNCATE; a drain naming another epoch is refused (ErrStaleEpoch).
//   - The history horizon (docs/contract.md#horizon) is the lowest x_seq a drain may still
//     start at: a drain with after < horizon-1 is refused with
//     ErrHistoryExpired (never a page that skips). It only rises, durably
//     (the store keeps it per table instance; TRUNCATE starts a new
//     instance at 1), for three reasons: --feed-history (fragments
//     committed longer ago) and --feed-history-fragments (x_seq numbers
//     further below the watermark) trim it, held back by named consumers
//     with --consumer-holds-history (at position+1, in the current epoch,
//     until --consumer-hold-max-age after they were last seen); and a
//     retention sweep raises it above every fragment it removes (holds do
//     not stop retention). Trimming history removes no rows: fragments
//     below the horizon stay the table's rows, which the copy by time
//     range (the resync the refusal asks for) returns, until retention
//     removes them.
//   - Every point stored passes CheckPoint (docs/security.md#write-validation),
//     whoever built it: the sequencer applies its rules to the time and
//     field values of each point and to the keys and tag values of each
//     series and column the first time a table sees it. That is sound
//     because Point.Series is injective (AppendEscapedTag): a known series
//     key has the tags that passed then.
//
// # Retention
//
// A table's retention (its own, else --default-retention; 0 keeps rows
// forever) refuses points older than now minus it at the door of the
// group (ErrBeyondRetention, a partial write like InfluxDB's "points
// beyond retention policy") and removes older rows in the background.
// The sweeper is part of the sequencer goroutine: every
// --retention-sweep-interval it starts a pass over the live tables, and
// each of its steps (one store batch of at most --retention-batch-size
// fragments, or one bounded look for the history horizon) is one turn of
// the sequencer's loop, chosen at random against the queued writes, so a
// sweep never holds writes up longer than one batch, and a batch sees
// every commit before it and none in flight. The horizon a batch raises
// is durable before its fragments go (see store/doc.go, History), so a
// drain that read the old published horizon is refused by the store's own
// view. On a shared store a step's store calls (a bucket update, a stream
// purge) run on a goroutine of their own while the sequencer goes on
// writing, the same table included (the store takes both at once,
// store.Shared); the sequencer publishes what the step found when it
// comes back, unless the table was replaced meanwhile.
//
// # Several writers: a shared store
//
// A store that several ingestd processes write at once (store.Shared,
// discovered by a type assertion: store/jsstore on a JetStream cluster)
// changes three things. Column positions and series ids come from the
// store (AddColumns, SeriesID: a tag set is one series, a column one
// position, in every process), asked when a point brings a column or a
// tag set the sequencer does not know, by its resolver (resolve.go), a
// goroutine of its own that holds the write meanwhile: the sequencer
// never waits for such a round trip. A table is created in the store at
// once, and when another process created it meanwhile the sequencer
// takes that instance; every table change (create, SET SYNC, retention,
// TRUNCATE, DROP) makes its store calls on the resolver as well, one
// change at a time, the changed table's writes waiting behind it
// (changes.go). And the store reports, from its own
// goroutines, each other process's block it applied (Follow): the
// sequencer publishes the reported columns, series and watermark between
// group commits, and after every commit before raising its own
// watermark, so a drain never meets a series or column it cannot name.
// It reports the other processes' table changes too: a table created
// (added here once the resolver loaded its series, consumers and horizon
// off the sequencer goroutine; the name's reports wait meanwhile), a new
// instance (TRUNCATE: it replaces the table, consumers kept; DROP +
// re-create: loaded as a table created, the dropped one's consumers
// gone), a DROP (the table goes, its tombstone
// stays in the store), and SET SYNC or retention (taken when newer, by
// store.Followed.Version). A TRUNCATE or DROP here of an instance another
// process ended meanwhile is refused with ErrTableChanged (retry).
// A drain's cursor may then come from another process and be above this
// one's seq: until the store says it is beyond every number any process
// handed out (Beyond), it is not refused (ErrCursorBeyondSequence) but
// waits, or gets an empty page that keeps the cursor, until this process
// applied up to it.
//
// # When a commit fails
//
// A group commit, and every metadata write, fails only when the store
// itself fails: a full disk (store.ErrDiskFull, below
// --store-min-free-bytes), an I/O error, a closed store. Nothing a client
// sends can be the cause, because everything that could make a write
// impossible is refused at the door, before the sequencer: every name
// (CheckName) fits a whole key; a table's block stays below the store's
// store.Limits.MaxBlockBytes (Config.MaxGroupBytes splits a group, Open
// checks it), a point below MaxFragmentBytes and a table's schema below
// MaxMetaBytes (checkPoint and DefineTable refuse what would not fit); a
// series by its line; timestamps by ILP's range.
// When a commit fails anyway, the sequencer stops: the batch being
// committed and every queued one fail with the error (HTTP 500; a TCP
// connection logs it and closes), new ones get ErrClosed (HTTP 503), and
// Run returns the error, on which ingestd shuts down in order and exits 1.
// It neither retries nor goes on, because its memory is then ahead of the
// store: x_seq numbers stamped, the schema and series dictionary extended,
// watermarks about to move. Accepting more writes on top of a store in an
// unknown state could acknowledge what is not durable or hand out an x_seq
// twice; a restart reloads exactly the durable state (the store resumes
// x_seq above every number handed out), once the operator has fixed the
// disk.
//
// # Locks
//
// The sequencer goroutine owns the write state without a lock (each
// table's schema, series dictionary, seq and metadata; the group being
// built; the sweeper; the tombstone floor). What other goroutines see is
// behind seven mutexes, each declared with what it guards:
//
//   - Sequencer.submitMu (RWMutex) guards Sequencer.closed: Submit and the
//     table operations hold it for reading while they put an operation on
//     the queue, and Run's stop takes it for writing, so once Run stops no
//     operation can enter the queue after Run has emptied it.
//   - registry.consumerMu serializes the flush of consumer positions and
//     the expiry of idle consumers (consumerUpkeep, a goroutine of its
//     own beside the sequencer's) with Drainer.DeleteConsumer and with
//     DROP (the sequencer's store call and the table's removal), so that
//     a flush never writes back a consumer deleted or dropped meanwhile;
//     each makes its store call under it.
//   - registry.mu (RWMutex) guards the registry's maps, tables and
//     tombstones: only the sequencer goroutine writes them (Lock, for a
//     map update only); both sides look tables up under RLock.
//   - table.mu guards a table's published state (sync, epoch, seq,
//     watermark, horizon, own retention, instance id, committed points
//     and the schema and series snapshots, and the changed channel that
//     wakes long-polls).
//   - consumerSet.mu guards a table's named consumers (positions and the
//     dirty set); the set, and so the lock, is shared by the table
//     instances a TRUNCATE replaces.
//   - consumerCounts.mu guards the count of every live table's named
//     consumers, in all and by owner (the consumer budgets); it is taken
//     under consumerSet.mu by each change that adds or removes a consumer.
//   - followed.mu guards what a shared store reported and the sequencer
//     has not applied yet (Sequencer.follow); it is taken alone, by the
//     store's goroutines (which hold none of the feed's locks) and by the
//     sequencer.
//
// Order, outermost first: consumerMu, then registry.mu, then table.mu;
// consumerMu, then consumerSet.mu, then consumerCounts.mu. A goroutine
// holding one may take a later one, never an earlier one; submitMu and
// followed.mu are taken alone. Today only consumerMu is held while taking
// another (registry.mu to list the tables or, in a DROP, to remove one;
// table.mu to wake its readers; consumerSet.mu to read or delete
// positions), and consumerSet.mu while taking consumerCounts.mu
// (to count a consumer added or removed): the others are released before
// the next is taken. The store's own locks are innermost: store
// calls are made under consumerMu and consumerSet.mu (consumer positions),
// never under submitMu, registry.mu or table.mu, so that no reader waits
// for a store write.
//
// None of the first five can go or merge without a cost (followed.mu
// keeps a store goroutine from waiting for the sequencer): submitMu blocks on a
// full queue and registry.mu is taken by the sequencer, so one lock for
// both would deadlock; consumerSet.mu in place of table.mu would not
// survive TRUNCATE, which swaps the table but keeps its consumers; and
// consumerMu held per set instead would make every flush write one table
// at a time, or hold every set's lock (and every drain that records a
// consumer) across a store write.
package feed
