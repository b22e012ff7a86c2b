// Package jsstore is the NATS JetStream backend of store.Backend
// (docs/design.md#scale-out): the same feed contract as store/badgerstore, with every
// acknowledged block replicated on a JetStream cluster, so that a feed
// survives losing a machine, and several ingestd nodes may write the same
// tables at once (store.Shared; "Several ingestd nodes" below).
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
// node never serves a drain above what it has applied (a replay cut by a
// leader election resumes, until Config.PublishTimeout passes without
// progress). A publish an earlier process on this cache left in flight
// (SIGKILLed mid-commit) that lands after Open read the stream is another
// writer's message like any: numbered in stream order and applied (the
// fence phase 1 needed is gone with the expected last sequence). Open and the DDL
// calls retry what a leader election makes fail for a moment (no answer
// in time, no responders, JetStream temporarily unavailable) until
// Config.PublishTimeout (retry); the requests a cluster may drop (the
// meta bucket's creation, the first request to a cluster that has just
// started; a stream's creation, which several nodes may ask at once)
// give their first attempt 500 ms and each next one twice as long
// (growing); a record update or a table id whose
// answer was lost is detected by compare-and-set and re-read, never
// applied twice. A call the cluster did not answer within
// Config.PublishTimeout (a publish, a DDL call, a compare-and-set that
// kept conflicting, a follower that did not deliver an acknowledged
// block), and one the cluster refused (a JetStream API error: no room
// for a new table's stream, an account limit; a placement refused for a
// peer that is offline is retried first), returns an error wrapping
// store.ErrUnavailable: the feed fails
// that operation and runs on; only the row cache's own disk failing
// stops it. A server cut off from its cluster keeps its client
// connections up while every JetStream request through it fails, and
// nats.go reconnects only when the connection breaks: after
// Config.SwitchAfter of failures without a success (publishes, their
// settling, the DDL calls' attempts, a follower's consumer set-up,
// Beyond's stream info and barriers;
// attempts begun before a reconnect do not count) the store forces a reconnect to the next server of the
// pool (switch.go; TestSwitchOffIsolatedServer, and the fault tests of
// cmd/ingestd/crashtest). A send whose connection drops stops waiting for
// its acknowledgement at once and is settled (TestLostConnectionCostsNoSendTimeout).
// Close stops the
// followers, closes the cache and the connection; after it every method
// returns store.ErrClosed.
//
// # Where things are
//
// Meta bucket PREFIX_meta (replicated KV, file storage, history 1):
//
//   - t.ENC(name): the table's record (JSON): the name byte for byte, the
//     live instance's TableMeta (its Columns: the schema every node
//     shares) or the tombstone, the stream, the consumers' generation
//     (Born), the history horizon, the highest retention cutoff swept and
//     the numbering's anchor (below). Every DDL call is one
//     compare-and-set update of it (revision), so a crash leaves the table
//     as before or as after: PutTable, TRUNCATE (a new instance id, epoch
//     one higher), DROP (the tombstone with every number handed out),
//     AddColumns, RaiseHorizon and a sweep's horizon and cutoff. A
//     conflict re-reads the record and applies the change again (every
//     change is a set, a maximum or a merge of columns by name).
//   - next_tid: the table-id counter, raised with compare-and-set.
//   - s.TID.HASH (HASH: base32 of the SHA-256 of the canonical tag set):
//     a series of instance TID, {id, tag set}, created with KV Create
//     semantics (no earlier entry expected), a call's keys in atomic
//     batches of up to 1000 (the bucket's stream allows them: Open
//     turns that on for a bucket an earlier build created); n.TID: the
//     instance's series-id counter (SeriesIDs), from which a process
//     reserves at least 64 ids at a time.
//   - c.ENC(name).BORN: the name's consumers of generation BORN (one JSON
//     object by consumer name, updated with compare-and-set): TRUNCATE
//     keeps BORN, DROP clears it in the same update that writes the
//     tombstone, so the consumers go with DROP atomically (the old entry
//     is purged after, best effort).
//
// Every compare-and-set that meets another process's change first (or a
// replica's read that lagged it: KV reads may be served by any replica)
// reads again and retries after a random pause of 1 to 100 ms, for up to
// Config.PublishTimeout, never a fixed number of times: nodes that create
// the same tables, series and columns at once take turns.
//
// ENC is "N" and the name's base32 (A-Z, 2-7) when that stays within 200
// characters, else "H" and the base32 of its SHA-256 (stream names may
// not contain '.', '*', '>', whitespace or path separators, and are at
// most 255 characters; the record keeps the name itself).
//
// Stream PREFIX_blocks, every table's blocks, subject PREFIX_b.ENC(name)
// per table name (the record names both): file storage,
// Config.Replicas, the duplicate window Config.DuplicateWindow, atomic
// batch publish allowed. One stream, not one per table: a group commit
// touching nine tables is nine messages to one raft group instead of
// nine raft groups' rounds, which took most of a commit's time and of
// the servers' CPU (docs/performance.md#jetstream). A name's subject
// outlives TRUNCATE and DROP (purged up to the instance's end) and is
// purged when the tombstone is pruned. A record without a subject (the
// stream per table of builds before) is refused at Open.
//
// # Block messages
//
// A table's part of a group commit is one message, or several above the
// server's max_payload (minus 4 KiB of headers); a commit's messages of
// every table it touches are one atomic batch (ADR-50: Nats-Batch-Id,
// Nats-Batch-Sequence, Nats-Batch-Commit on the last; at most 1000, more
// go in several batches of whole tables), a single message a plain
// publish. Headers: Nats-Msg-Id (NODE.KIND.TID.N.I:
// this process's random id, "a" for an Append's block or "d" for a
// purge's series dictionary, the table instance, the process's commit
// counter and the message's index: a publish retried after a lost
// acknowledgement is stored once, within the duplicate window),
// Ingestd-Instance (the table instance id), Ingestd-Sync ("1": the
// fragments get x_seq numbers; "0": written with sync OFF), Ingestd-Count
// (fragments), Ingestd-Commit-Time (Unix nanoseconds) and
// Ingestd-Encoding ("2": encodingCompact; absent: encodingPlain, what
// streams written before it hold). A message carries no x_seq: its
// numbers follow from its place in the stream. The body is
// uvarint-framed: the new series of the commit (id, tags), the write
// boundaries (TableCommit.Writes), the fragments: each encoded against
// the one before it (series and time deltas, its columns and kinds only
// when they differ from the previous fragment's, then the values; see
// appendCompactFragment), or plainly (series, zig-zag time, fields:
// column, kind, number or string). Every fragment takes at least 3 bytes
// and every field 1, so a decoder never allocates more elements than the
// message has bytes, and a node that reads only the headers can bound
// Ingestd-Count by the body's size. A barrier (below,
// "Beyond the sequence") is an empty block: no series, no fragments,
// Ingestd-Count 0, message id NODE.b.TID.N; every follower records it as
// applied and gives it no number.
//
// # x_seq, watermark, durability
//
// x_seq derives from the stream order (docs/design.md#guarantees): the synced
// fragments of a table's subject are numbered 1, 2, 3, … in stream order
// (dense, across instances: TRUNCATE and DROP + re-create continue the
// count), from the anchor the record holds: {Seq, XSeq} says that the
// table's messages after stream sequence Seq number from XSeq+1 on. Every
// node reads the same subject in the same order, so every node gives a
// fragment the same number, without a lease, a lock or a round trip: the
// stream leader's sequence, assigned at the replicated commit point,
// orders the writers. The anchor moves only to a point every node numbers
// alike: to the last message a purge removes (before the purge), to
// where the truncating node's follower stands at TRUNCATE and DROP (with
// the numbers reached there), and for a new instance, to the stream's
// end (a new name) or the subject's numbered end (a re-created name)
// above the floor PutTable is given (a re-created name's tombstone, the
// pruned tombstones' floor). A message below a purge is therefore never
// needed to number the ones after it. A follower reads its table's
// subject only, so messages another node purged before it read them
// leave no gap it could see: it takes the record's anchor at the first
// message after it (follower.rebase), which it knows by then because
// every purge waits Config.PurgeGrace after the anchor moved (the record
// watcher brings it to every node within milliseconds): a retention
// purge, and the purge of an ended instance's messages at TRUNCATE and
// DROP (a follower meeting the new instance's first message reads its
// record, anchor included, first anyway; the grace keeps a late message
// of the ended instance, written after the anchor, from being taken for
// the live one's by a follower whose record lags).
//
// Append publishes a commit's messages as one atomic batch, without an
// expected last sequence (two busy writers would conflict on every
// commit), and waits for its acknowledgement (given once the stream's
// quorum stored the batch, one raft entry: one round trip and one fsync
// on each server for the commit, whatever the tables it touches). A send
// without an acknowledgement (leader election, lost connection) is sent
// again with the same ids until Config.PublishTimeout: a single message
// the stream stored meanwhile is a duplicate, acknowledged with its
// sequence; an atomic batch it stored is refused as a duplicate and its
// messages found by the tables' followers, which hold every Append
// message of this process.
// Then the follower (below), which numbers every message as it reaches
// it, has numbered the commit's first message: Append reads FirstSeq
// from it, calls stamped, releases the held messages and returns once
// the follower applied them to the cache (or the record's anchor passed
// them: another node ended the instance and may have purged them). So
// stamped runs before any of the commit is readable, and when Append
// returns every message before the commit in the stream, another node's
// included, is applied: the feed raises the watermark only over what this
// node applied, and "never skip an in-flight writer" holds across nodes.
// A follower that does not
// reach the acknowledged message within a second (a new leader still
// applying its log) is waited for, counted in
// ingestd_jetstream_stream_behind_total, until Config.PublishTimeout. On
// any error nothing of the commit is applied to the cache by Append (the
// held messages are released: if stored, they are numbered and applied
// as any message, after a restart as a prefix of a crashed commit is in
// badger).
//
// # Row cache
//
// Rows for drains and /rows are materialised from the streams into a
// local row engine (store/rowengine, in Config.CacheDir/rows, keyed by
// table instance id, as the default backend keeps its rows) through
// rowengine.Engine.Apply, which stores blocks at the x_seq numbers the
// follower gives them. The cache holds rows only: names, schemas and
// consumers are in the meta bucket. It holds the tables
// Config.Materialise names (docs/design.md#materialised-tables): another
// table's follower reads its stream with a consumer of headers only,
// which number its messages (decodeHeaders) and apply nothing, and its
// reads answer store.ErrNotServed. Each live
// table has a follower (follow.go): a goroutine reading the table's
// stream with an ordered consumer from the anchor on (nats.go recreates
// it after a lost connection, from the last message it delivered), which
// numbers every message, applies the live instance's to the cache, and
// reports another process's block to the Follow callback (the feed). A
// second copy of a message id within the duplicate window, by the
// stream's own timestamps (a send retried to a new leader before the
// first copy was applied, which the stream's dedup did not catch), is
// neither numbered nor applied, on every node alike. A watchdog starts
// the consumer again from its position when it applied nothing for two
// seconds while an Append or Open waited on it (a consumer lost with its
// stream leader, or stuck recreating itself), at once after the
// connection was re-established, and as soon as a call has waited 100
// ms on it while the server holds messages for the consumer but no pull
// request of it: a new consumer's first pull request can reach a server
// that has not heard of the consumer yet, whose "no responders" nats.go's
// iterator ignores, waiting for heartbeats
// (ingestd_jetstream_pulls_lost_total). Without a call waiting, the
// heartbeats find it: the server sends one every
// Config.FollowerHeartbeat while it has nothing to deliver, and a
// follower that hears nothing for two starts its consumer again
// (ingestd_jetstream_heartbeats_missed_total), so a node's drains of a
// table only other nodes write fall behind by seconds, not the 30 s of
// nats.go's default. The row cache is derived state, written without fsync and rebuilt at every Open: the
// directory is cleared, every live table's follower starts at its
// anchor and Open waits until each has applied its subject up to its
// last message when Open looked, then the record's cutoff is swept
// and its horizon raised, so a rebuild does not bring aged rows back and
// a drain below the horizon stays refused. Deleting the directory is therefore
// harmless. ReadSeq, ReadRows, SeqTime, LoadSeries, Horizon,
// FirstSeqSince and TableStats are the cache's. A lock file
// (LOCK.jsstore) keeps a second process off the same cache directory.
//
// # Beyond the sequence
//
// A drain cursor above what this node numbered may be another node's (not
// applied here yet: the drain waits) or beyond the table's sequence (409
// docs/contract.md#cursor-beyond-sequence). Beyond tells them apart with a check.
// The stream leader's last sequence is not enough: JetStream has no
// linearizable read, and a leader cut off its peers still answers as
// leader, with a stale last sequence, counting its peers current for up
// to NATS raft's lost-quorum interval (10 s), while the majority elected
// another leader and acknowledges other nodes' writes
// (TestBeyondStaleLeaderCutOff). A publish is linearizable: acknowledged
// only once the stream's quorum stored it, at a sequence above every
// message acknowledged before it was sent. So a check first asks the
// leader (when it holds a message above what the follower applied, or a
// group it does not hear a majority of, the cursor may be another node's
// and nothing is written; messages the record's anchor covers are not
// awaited: they may have been purged), then publishes a barrier to the table's stream and
// waits, within sendTimeout, until the follower applied it: every number
// any node handed out before the check began is then numbered here, and
// a cursor above them all is beyond the sequence. A check that gets no
// answer or no acknowledgement in time (a server cut off, no leader)
// leaves the cursor unknown, not refused, and counts towards
// Config.SwitchAfter like a failed publish, so a node on a server cut off
// its cluster moves to another.
//
// What a client can make it cost is bounded per table and node, however
// many drains it sends: the calls arriving before a check starts share it
// (ingestd_jetstream_beyond_check_joins_total), at most one is in flight,
// and the next starts no sooner than Config.BarrierInterval after the last
// (--jetstream-barrier-interval, 100 ms: at most ten stream infos and ten
// empty messages a second, ingestd_jetstream_beyond_checks_total{result});
// a call the bound holds back is answered as not known
// (ingestd_jetstream_beyond_check_held_total): the drain waits or returns
// an empty page that keeps the cursor, never a refusal it cannot prove.
// Barriers stay in the stream until retention purges them with the blocks
// around them.
//
// # Retention
//
// SweepBefore sweeps the cache (which raises its horizon before removing
// anything) and, when it removed rows, records the horizon and cutoff in
// the record. Once a sweep at a cutoff is complete, the table's subject is
// purged of the prefix of messages it left nothing of (purgeAged: a per-table
// index of the running maximum of the messages' times says where that
// prefix ends; all their synced fragments are below the horizon), when
// that prefix spans at least Config.PurgeMinMessages stream sequences;
// the record's anchor moves to the prefix's last message first, and the
// purge follows at the first complete sweep Config.PurgeGrace later. Those
// messages may hold the first use of series still in use, so the
// instance's series dictionary is published again (one message of series
// only) before the purge; a rebuild applies a repeated series as the
// same entry (rowengine.Engine.Apply keeps what it knows of its times).
// JetStream's purge keeps the stream's sequence running. Messages of an
// ended instance are purged at TRUNCATE and DROP.
//
// # Concurrency
//
// The writer's calls (Append), the resolver's (AddColumns, SeriesIDs, the
// Tables calls, and the loads for a table another process creates) and
// the sweeps' (SweepBefore, FirstSeqSince, RaiseHorizon) come from three
// goroutines of the feed at once, as store.Shared says, each making one
// call at a time (SeriesIDs takes its id blocks under idMu): every
// record change is a compare-and-set on the record's revision (update),
// the cache's writer side is serialized by cacheMu, and a table's message
// ids, purged position and anchor's sequence (anchored) are atomic, and
// its planned purge (due) is the sweeps' alone. Append's batches (above
// 1000 messages) run concurrently, and each live table's follower runs
// in its own goroutine. Everything else is safe for concurrent use.
// Store.mu guards the maps of tables, each table's record as readers and
// followers see it, and the Follow
// callback; a table's follower.fmu its numbering, applied position, held
// messages and age index (follower.fcond, on it, is broadcast at every
// change: Append and Open wait on it); Store.cacheMu serializes the
// cache's writer side (the followers' Apply, the resolver's DDL, sweeps
// and horizons), which the row engine takes one goroutine at a time.
// Store.mu and fmu are never held together; cacheMu is taken with
// neither, and a follower takes Store.mu inside it (the record decides
// whether a block goes to the cache). A table's life mutex serializes
// starting and stopping its follower. A table's tableChecks.mu (barrier.go) is taken alone.
// Store.gate (store.CloseGate) is held by every call and closed by Close,
// which first ends the waits for Beyond's checks (checkState.halt), then
// stops the followers and waits for the checks before it closes the
// cache.
//
// # Several ingestd nodes
//
// Any number of ingestd processes may run on one cluster (with the same
// --jetstream-prefix) and write the same tables (the fault tests of cmd/ingestd/crashtest run
// two; TestTwoWritersNumberInStreamOrder here). The Store implements
// store.Shared, which the feed discovers by a type assertion:
//
//   - x_seq: by stream order (above). The design sketched before (publish
//     with the expected last sequence, and on a conflict apply the other
//     node's messages and number again above them) would cost two busy
//     writers a conflict, a stream read and a second publish on nearly
//     every commit; numbering by stream order costs no round trip, and
//     keeps numbers dense, so --feed-history-fragments and consumer lag
//     keep their meaning (a stream sequence times 2^k would not).
//
//   - Columns: AddColumns merges new columns into the record's schema by
//     name with compare-and-set; positions never change, so the feed asks
//     before it uses a new column and takes the whole schema back (the
//     other nodes' columns included). A follower that meets a block using
//     a column it does not know reads the record again.
//
//   - Series: SeriesIDs creates the s.TID.HASH keys of a call's series in
//     atomic batches, each key expecting no earlier entry; a batch that
//     meets a key another process created is refused whole, and its keys
//     are then read, or created one at a time (KV Create), the loser of a
//     race reading the winner's id (its counter number is a gap). The
//     feed asks once per tag set new to it, all of a table's new series
//     of a write in one call (one round trip per batch), then keeps the
//     id; the block carries the series too, so every node's cache and
//     feed learn the tag set from the stream.
//
//   - Tables: a node creating a name another node created meanwhile finds
//     the record live under another instance id in its compare-and-set,
//     and takes that instance (PutTable returns it; its follower catches
//     up first).
//
//   - Watermark: the Follow callback reports, after each block of another
//     node is applied, the instance's metadata, the block's new series and
//     the highest x_seq applied; the feed publishes them (feed/shared.go).
//
//   - Table changes: every record another node writes reaches this one
//     (records.go): the record watcher watches them all (the current
//     ones first, so a restarted watch misses nothing), a follower that
//     meets a block of an instance its record does not account for
//     (Record.Ended and the live id say what became of every lower id)
//     reads the record until it does; messages another node purged
//     before this one read them are passed by the record's anchor
//     ("x_seq, watermark, durability").
//     adoptRecord takes a record only when its revision is newer than the
//     one this node has (setRecord: from any goroutine, in any order, the
//     state only moves forward), makes the cache hold the live instance
//     (syncCache: the ended one's rows go, a new one's table comes), starts
//     a follower for a name new here, and reports the change to the
//     Follow callback: a table created, truncated or re-created, dropped
//     (Followed.Ended), or its sync, epoch, retention or columns changed.
//
//   - The writer's calls on an instance another node ended, made before
//     the feed took the report: Append acknowledges its commits without
//     publishing them (or finds them purged by the change: the follower
//     passes their acknowledged sequence without them), counted in
//     ingestd_jetstream_voided_lines_total; AddColumns merges in memory
//     (Store.ended keeps the last maxEnded ended instances' columns);
//     SeriesIDs answers from the bucket; SweepBefore and RaiseHorizon do
//     nothing; TruncateTable and DropTable return store.ErrEnded. Each
//     record update checks, in its compare-and-set, that its instance is
//     still the live one, so a node never writes an ended instance's
//     metadata over the new one's.
//
// The series keys of an ended instance stay in the bucket.
package jsstore
