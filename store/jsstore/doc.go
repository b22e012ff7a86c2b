// Package jsstore is the NATS JetStream backend of store.Backend (SPEC §1,
// issue 14 phase 1): the same feed contract as store/badgerstore, with
// every acknowledged block replicated on a JetStream cluster, so that a
// feed survives losing a machine. Phase 1 runs one ingestd node per
// cluster (one writer per table); see "Phase 2" for what several writers
// add.
//
// # Life
//
// Open connects (nats.go: URLs, credentials file, user and password or
// token, TLS), logs a WARN unless every server runs with
// `sync_interval: always` (checkSync: the servers' JetStream config is
// visible to a client only through the system account's
// $SYS.REQ.SERVER.PING.VARZ; without that access the WARN says how the
// operator verifies it on /varz; Jepsen's 2025 analysis of NATS 2.12.1
// lost acknowledged writes under the default fsync interval), creates or
// opens the meta bucket with Config.Replicas (refusing with a clear error
// when the cluster cannot place them, unless Config.ClampReplicas), then
// rebuilds the row cache from the streams (below) before it returns: a
// node never serves a drain above what it has applied. It then fences each
// live table's stream with an empty block published with the expected
// last sequence it replayed (fence): a publish an earlier process on this
// cache left in flight (SIGKILLed mid-commit) can no longer land after it,
// and one that landed before it is replayed first. Open and the DDL
// calls retry what a leader election makes fail for a moment (no answer
// in time, no responders, JetStream temporarily unavailable) until
// Config.PublishTimeout (retry); a record update or a table id whose
// answer was lost is detected by compare-and-set and re-read, never
// applied twice. A server cut off from its cluster keeps its client
// connections up while every JetStream request through it fails, and
// nats.go reconnects only when the connection breaks: after
// Config.SwitchAfter of failures without a success (publishes, their
// settling, the DDL calls' attempts; attempts begun before a reconnect
// do not count) the store forces a reconnect to the next server of the
// pool (switch.go; TestSwitchOffIsolatedServer, and the fault tests of
// cmd/ingestd/crashtest). A send whose connection drops stops waiting for
// its acknowledgement at once and is settled (TestLostConnectionCostsNoSendTimeout).
// Close lowers each
// table's lease to its exact x_seq, closes the cache and the
// connection; after it every method returns store.ErrClosed.
//
// # Where things are
//
// Meta bucket PREFIX_meta (replicated KV, file storage, history 1):
//
//   - t.ENC(name): the table's record (JSON): the name byte for byte, the
//     live instance's TableMeta or the tombstone, the stream, the
//     consumers' generation (Born), the history horizon and the highest
//     retention cutoff swept. Every DDL call is one compare-and-set update
//     of it (revision), so a crash leaves the table as before or as after:
//     PutTable, TRUNCATE (a new instance id, epoch one higher, the lease
//     kept), DROP (the tombstone with every number handed out), the lease
//     extensions of Append, RaiseHorizon and a sweep's horizon and cutoff.
//   - next_tid: the table-id counter, raised with compare-and-set.
//   - c.ENC(name).BORN: the name's consumers of generation BORN (one JSON
//     object by consumer name, updated with compare-and-set): TRUNCATE
//     keeps BORN, DROP clears it in the same update that writes the
//     tombstone, so the consumers go with DROP atomically (the old entry
//     is purged after, best effort).
//
// ENC is "N" and the name's base32 (A-Z, 2-7) when that stays within 200
// characters, else "H" and the base32 of its SHA-256 (stream names may
// not contain '.', '*', '>', whitespace or path separators, and are at
// most 255 characters; the record keeps the name itself).
//
// Stream PREFIX_T_ENC(name), one per table name, subject
// PREFIX_T_ENC(name).blocks: file storage, Config.Replicas, the
// duplicate window Config.DuplicateWindow, atomic batch publish allowed.
// It outlives TRUNCATE and DROP (purged, its sequence keeps running) and
// is deleted when the tombstone is pruned.
//
// # Block messages
//
// A table's part of a group commit is one message, or, above the
// server's max_payload (minus 4 KiB of headers), one atomic batch of
// messages (ADR-50: Nats-Batch-Id, Nats-Batch-Sequence, Nats-Batch-Commit
// on the last; at most 1000). Headers: Nats-Msg-Id (this process's random
// id, the table instance, the process's commit counter and the message's
// index: a publish retried after a lost acknowledgement is stored once,
// within the duplicate window), Nats-Expected-Last-Sequence on the first
// (the stream's last sequence as this node saw it: optimistic
// concurrency), Ingestd-Instance (the table instance id),
// Ingestd-First-Seq (the first fragment's x_seq; 0 for a block written
// with sync OFF), Ingestd-Count (fragments) and Ingestd-Commit-Time (Unix
// nanoseconds). The body is uvarint-framed: the new series of the commit
// (id, tags), the write boundaries (TableCommit.Writes), the fragments
// (series, zig-zag time, fields: column, kind, number or string). A
// decoder never allocates more than the message's size.
//
// # x_seq, watermark, durability
//
// Append assigns each synced commit's numbers above the table's highest
// x_seq (dense within the commit and within each message, strictly above
// the previous message's last and the record's floor), under a lease kept
// in the record's Meta.Seq and extended by 65536 before stamped runs (as
// badgerstore's lease: a crash burns at most that many numbers, never
// repeats one). It publishes every table's messages concurrently and
// waits for every acknowledgement (a JetStream ack is given once the
// stream's quorum stored the message); only then does it apply the
// blocks to the cache and return nil, so the feed raises the watermark
// only over what the stream committed. A stream's message order is
// x_seq order (one writer), so "never skip an in-flight writer" holds.
// A send without an acknowledgement (leader election, lost connection)
// is resolved by looking at the stream: the commit's last message id on
// top means it was stored (a dedup hit), the last sequence unchanged
// means it was not (sent again with the same ids, until
// Config.PublishTimeout), a last sequence below what the stream had
// acknowledged is a leader elected a moment ago that still applies its
// log (waited for and sent again, until Config.PublishTimeout), a higher
// one is another writer (ErrConflict:
// the commit fails, nothing of it becomes readable, the next Append
// continues above the other block). On any error nothing of the commit
// is applied to the cache; a message that was stored anyway appears after
// a restart, as a prefix of a crashed commit does in badger.
//
// # Row cache
//
// Rows for drains and /rows are materialised from the streams into a
// local badgerstore (Config.CacheDir/rows; one cache instance per table
// instance, named after its id) through badgerstore.DB.ApplyAt, which
// stores blocks at the x_seq numbers the messages carry. It is derived
// state, written without fsync and rebuilt at every Open: the directory
// is cleared, every live instance's messages are replayed in stream
// order (an ordered consumer), then the record's cutoff is swept and its
// horizon raised, so a rebuild does not bring aged rows back and a drain
// below the horizon stays refused. Deleting the directory is therefore
// harmless. ReadSeq, ReadRows, SeqTime, LoadSeries, Horizon,
// FirstSeqSince and TableStats are the cache's. A lock file
// (LOCK.jsstore) keeps a second process off the same cache directory.
//
// # Retention
//
// SweepBefore sweeps the cache (which raises its horizon before removing
// anything) and, when it removed rows, records the horizon and cutoff in
// the record. Once a sweep at a cutoff is complete, the stream is purged
// of the prefix of messages it left nothing of (purgeAged: a per-table
// index of the running maximum of the messages' times says where that
// prefix ends; all their synced fragments are below the horizon), when
// that prefix holds at least Config.PurgeMinMessages sequences. Those
// messages may hold the first use of series still in use, so the
// instance's series dictionary is published again (one message of series
// only) before the purge; a rebuild applies a repeated series as the
// same entry (badgerstore.DB.ApplyAt keeps what it knows of its times).
// JetStream's purge keeps the stream's sequence running. Messages of an
// ended instance are purged at TRUNCATE and DROP.
//
// # Concurrency
//
// The writer side (Append, the Tables calls, SweepBefore, RaiseHorizon)
// is called by one goroutine at a time, as the contract says; Append's
// publishes run concurrently per table. Everything else is safe for
// concurrent use. Store.mu guards the maps of tables and each table's
// record and highest x_seq as readers see them; closeMu's read side is
// held by every call, its write side by Close.
//
// # Phase 2: several ingestd nodes per cluster
//
// What phase 2 must add, and why this design allows it:
//
//   - Series dictionaries in the meta bucket, one key per (instance,
//     series id), created with compare-and-set (KV Create) so two nodes
//     never mint the same id for different tag sets; today the new series
//     ride in the block message that first uses them (and in the
//     dictionary messages a purge publishes), which is only correct with
//     one writer. The block format keeps its series section.
//   - Schemas (columns) updated with compare-and-set by every node: the
//     record update of Append already is one, and on a conflict it reads
//     the record again (update/reread); phase 2 merges the columns
//     instead of keeping the higher lease only.
//   - x_seq with several writers: numbers must follow stream order. Each
//     node's Append already publishes with the expected last sequence and
//     detects another writer's block (ErrConflict); phase 2 re-reads the
//     stream's last message and numbers again above it before the feed
//     learns the numbers, which needs the stamped callback moved after the
//     sequence check (or a per-table lease of x_seq ranges in the record,
//     already compare-and-set).
//   - Every node applies every message to its cache: a subscription per
//     table stream (an ordered consumer from the applied sequence, which
//     the replay already is) keeps each node's cache following the other
//     writers, and the watermark a node serves is what it applied.
//   - Incremental catch-up instead of a full rebuild at Open: the cache
//     records the stream sequence it applied per table (one more key in
//     the same badger transaction as the block).
//   - Purging below a horizon raised without removing rows (the feed's
//     history trim): today only retention's sweeps purge.
//   - The fault tests (cmd/ingestd/crashtest, TestJetStreamFaults and
//     TestJetStreamLeaderKills: the real binary, natstest's Stop, Kill, Cut
//     and Restart) already send writes and drains to a list of ingestd
//     URLs and compare a drain from 0 through every node; phase 2 starts a
//     second node in that list.
package jsstore
