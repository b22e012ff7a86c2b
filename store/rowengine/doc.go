// Package rowengine is the row engine of ingestd's disk-backed stores: a
// table instance's series, blocks, late-point index and head, its
// retention and history horizon, and the reads that coalesce a point's
// fragments into its row, in an embedded badger database. Two backends
// keep their rows in it as peers, neither importing the other:
// store/badgerstore, whose table metadata, x_seq numbering and consumers
// live in keys of its own beside the engine's (OwnerKeyspaces), and
// store/jsstore, whose row cache it is. Only these three packages import
// badger (imports_test.go).
//
// # Lifecycle
//
// Open takes the data directory's lock (a second process on the same
// directory gets store.ErrLocked at once), finishes every removal a
// crash cut short (below) and replays the head records a crash left.
// Apply, SweepBefore, RaiseHorizon and DropInstance are the writer's: one
// goroutine at a time (the owner serialises them); reads (ReadSeq,
// ReadRows, LoadSeries, …) may run concurrently with it from any
// goroutine; Close waits for the calls in flight, stores the head, flushes
// and releases the directory, and every call after it returns
// store.ErrClosed. Nothing above the owner sees a badger type or error.
//
// # x_seq
//
// The engine numbers nothing: the owner gives each synced block's first
// x_seq (store.TableCommit.FirstSeq), the engine keys the block by its
// last one. store/badgerstore numbers from a durable lease, store/jsstore
// from the stream's order.
//
// # Removal
//
// An owner ends an instance (TRUNCATE, DROP) by writing, in one
// transaction (Update), what takes its place in its own keys and a drop
// mark 'x' tid (MarkDrop); DropInstance then removes the instance's keys
// (badger DropPrefix, not transactional) and the mark with them. Open
// finishes every marked removal a crash interrupted, so the change is
// whole or not at all.
//
// # Key layout
//
// Every key starts with a one-byte keyspace tag. Integers are 8-byte
// big-endian so that byte order is numeric order; timestamps are stored with
// the sign bit flipped so that negative times sort before positive ones.
//
//	'n'                           -> next unsynced block number
//	'v'                           -> layout version
//	's' tid sid                   -> series: the tag set as (column, value) pairs
//	'l' tid lastSeq               -> sync block: the fragments a commit wrote to the table, x_seq firstSeq..lastSeq
//	'u' tid blockNo               -> unsynced block: fragments written while sync was OFF (no x_seq)
//	'r' tid sid firstTs           -> series run: fragments of one series in one block, in time order (times and block indexes)
//	'p' tid sid ts                -> point index, for points not proven new by their series' high-water time:
//	                                 a reference to the point's one fragment, or the point's union
//	                                 (fragment count, oldest fragment's reference, current row)
//	'o' tid sid firstTs ref       -> overwrite run: the fragments of one series that overwrote a point (its second
//	                                 and later ones), stored by one head flush, in time order (times and references)
//	'q' tid sid ts n              -> layout 5 and older: the reference of the n-th fragment (n >= 2) of an overwritten point
//	'd' tid sid ts                -> overwrite marker: (series, ts) holds more than one fragment
//	'w'                           -> torn mark: a commit split over transactions is being written (its tables)
//	'k' tid n                     -> head record: the series runs and overwrites of the table's n-th commit since the last head flush
//	'r', 'r' 0, 'p', 'p' 0        -> keyspace floors (empty): where a reverse seek that finds nothing stops (layout.go)
//	'h' tid                       -> the instance's feed history horizon (uvarint; absent: 1)
//	'x' tid                       -> drop mark: the instance's keys are being removed (empty value)
//
// The owner's keys start with 'm' or 'c', or are 'n' 't'
// (OwnerKeyspaces); the engine never touches them.
//
// tid is a table instance id: TRUNCATE and DROP give the table a new one and
// drop every key of the old one, so no scan ever filters dead data.
//
// # Why it is fast
//
// One commit writes one block per table, not one entry per line: a block is
// a single large value that badger appends to its value log, so the LSM tree
// only sees one small key per block, one head record per block (the
// block's series runs, see "The head") and, only for points that are
// late outside a gap (see below), one point-index entry each. A point whose time is above its
// series' highest stored time (kept in memory, looked up once per series
// and process) is new by construction: it joins its series' run and costs
// no index entry and no lookup. A write to an existing point costs no key
// of its own either: the head keeps it and the point's current row until a
// flush (see "Overwritten points").
// A drain is a forward seek to the block holding after+1 followed by
// sequential decoding of whole blocks: no per-row lookups. A read copies
// each block it decodes once, out of the value log, into memory of its
// own that the fragments' strings alias (a string must never change, so
// that memory is never reused); badger does not prefetch values for it,
// which copied every block a second time. The page buffers the drain's
// rows are encoded into are reused (httpapi), so a drain's fresh memory is
// about the size of the blocks it reads.
//
// # The head
//
// A series run is an index over blocks, and the blocks are durable, so
// the runs need not be stored at every commit. Writing one run key per
// series and commit made a load of many series written one point each
// per commit (Telegraf agents every interval, the usual case) cost the
// LSM tree one key per line: its memtable inserts and compactions then
// took half the CPU, and the cost per line grew with the store.
//
// Instead a commit writes its block's runs as one head record ('k' tid
// n: series, first time, flags and the run value of each; a run of one
// point only its flags and its fragment's index in the block, whose
// series and time the block holds), in the same transaction as the
// block, and once durable adds them to the table's
// head in memory. There a series' in-order run joins the series' last
// head run when both name x_seqs (synced tables), the last one is in
// order too (nothing of the series lies between them), no gap run of the
// same block lies between them, the joined run stays within 128
// entries (a look-up decodes a whole run), and the time between them is
// at most 16 times the series' step (the smallest time between two of
// its points so far; maxJoinSteps): a regular series' points, one per
// commit, form one run even with holes (writes refused and never sent
// again), while concurrent writers' batches of a series committed out of
// order, each many steps long, keep their gap, which the late batch
// fills without look-ups (see "Late points"). Look-
// ups consult the head beside the stored runs: the run before a time is
// the one with the greater first time of the two, the next run's first
// time the smaller.
//
// When the heads hold Config.HeadMaxEntries entries (one per new point or
// overwrite; --store-head-max-entries, 1 Mi by default, about 40 MiB) or
// Config.HeadMaxBytes of head records (--store-head-max-bytes, 64 MiB: an
// overwrite's record holds the point's row), the commit seals them and a flush writes
// every sealed run as a run key (and the overwrites, see "Overwritten
// points") and deletes the records, the records last, in the background: commits go
// on into new live heads meanwhile, their look-ups consulting live and
// sealed heads, and the first commit after the flush has ended (whose
// view sees its keys) drops the sealed ones. A second flush waits for
// the first, so the heads hold at most twice the bound. A crash before
// the records go leaves them, and Open rebuilds the same heads from them
// (in record order, joins as recorded) and the next flush writes the
// same keys. A retention sweep of a table flushes
// first (it walks stored runs), and so does Close, so that a restart
// replays nothing. So a point costs the LSM tree 1/B of a record (B the
// points of its block) plus 1/J of a run key (J the points a head run
// joins before a flush: up to 128, and with S series and H entries
// about H/S), whatever the size of the store: ingestd_store_keys_written_total
// against ingestd_ilp_lines_total shows it. Unsynced tables' runs name
// a block each and do not join: they cost one run key per series and
// commit, at the flush.
//
// # Overwritten points
//
// A point written K times holds K fragments, each under its own x_seq,
// and every one of them reads as the point's current row: per column, the
// latest fragment that set it. That row is the point's union entry ('p',
// with the fragment count and the reference of the point's oldest
// fragment), and the references of fragments 2..K are overwrite runs
// ('o'), read only by retention. Neither is written by the commit that
// adds a fragment: the commit puts the fragment's time, its index in the
// block and the point's new union into its head record (one value, with
// the block's runs), and the head keeps the overwrites in memory; once the
// commit is durable (never before: a reader must not see a value a crash
// could take back) the union is the point's entry in memory
// (tableState.dups), where reads and later commits find it. A head flush
// writes each series' overwrites as runs of up to 1,024 references (one
// key), the entry of each point they name as it is in memory then, and an
// overwrite marker ('d') for a point overwritten for the first time. So:
//
//   - writing the K-th fragment of a point costs what writing a new point
//     does, plus a merge linear in the point's columns: no key of its own
//     in the LSM tree at commit, and at the flush one entry per point
//     (however often the head saw it written) and 1/1,024 of a run key.
//     Only the second fragment reads a block: the first fragment's, for
//     its fields, through a cache of the last 8 blocks the commit read (a
//     resend's or a replay's first fragments lie in a few blocks, in
//     order). The store grows by one fragment per write, and the index of
//     an overwritten point is one entry however large K is;
//   - a drain page decodes the blocks holding the fragments it returns
//     and nothing else: an overwritten point's row comes from its entry,
//     read once per page (kept in memory; after a restart, one get the first
//     time a read meets the point, which then keeps it) and reused for
//     each of its fragments in the page. A page of n rows costs n fragment
//     decodes plus at most one entry per point it touches, whatever K:
//     there is no cache whose size a point's fragments could outgrow;
//   - a row copy page (readRows, each point once at its oldest fragment)
//     skips without reading it every block none of whose fragments is its
//     point's first (marked metaNoFirst when written): a block of a pass
//     that overwrote every point it wrote costs one key in the scan. So a
//     copy reads the blocks holding first fragments plus one key per
//     block of overwrites, whatever K; where one block mixes first
//     fragments and overwrites (several passes in one commit) it decodes
//     them all.
//
// ingestd_store_feed_reads_total counts the blocks and entries reads
// take; the contract suite bounds them per page at 1 to 100 fragments
// per point (store/storetest, OverwriteReadsBounded).
//
// Open replays the head records a crash left, reading the block of each
// that names fragments: each overwrite's union becomes the point's entry
// in memory again, the latest record winning.
// A record is written before its block (in the same transaction, or in an
// earlier one of a split commit): Open drops the records of a torn commit
// whose block was never stored, with the torn mark, so that no union
// shows a value no stored fragment carries.
//
// A commit larger than one badger transaction is split; before its first
// transaction commits, a torn mark naming its tables is made durable, and
// its last transaction deletes it. Open finds the mark after a crash in
// between, drops those tables' head records whose block was never stored
// and, for a store written by layout 5 (which wrote unions at commit),
// rebuilds the unions that name such a fragment from the fragments that
// were. Layout versions 1 and 2 listed every fragment's reference in the
// point's entry; Open converts such entries the same way, once.
//
// A block holds the writes of one group commit (store.TableCommit.Writes tells
// where each begins): a series' in-order points form one run per write,
// not one per block, and so do its gap runs. Concurrent writers'
// requests of one time-ordered stream commit out of order; when writes 1
// and 3 of a series share a block and write 2 comes later, the time
// between the runs of 1 and 3 is still a gap, and write 2 is placed there
// by step 2 below instead of a get per point (one run would span write
// 2's times and make every one of its points a look-up and an index
// entry).
//
// # Late points
//
// A point at or below its series' highest stored time (late, repeated,
// backfilled, or from a writer whose batch of the same series committed
// first) is placed as follows, in order, stopping at the first hit:
//
//  1. the points of the same block already placed (a map): free;
//  2. a gap run: when the point lies below the series' in-order runs of
//     this block and in an interval where earlier commits stored nothing
//     of the series (between two stored runs, above the last point-index
//     entry there), it is new without a look-up and joins its write's run
//     in that gap, a run like any other, as long as its time is above the
//     gap's last placed point (at most 64 gaps per series and block, found
//     by binary search; points beyond them take steps 3–5). The interval
//     is found once per
//     series, gap and commit (a reverse and a forward seek among runs, a
//     reverse seek among point-index entries; none when the series' last
//     decoded run spans the point) and reused by the series' following
//     late points.
//     This is the path of backfills and of concurrent writers' batches
//     of one stream landing out of order: a few seeks and one run key per
//     series and commit instead of a get, a seek and an index entry per
//     point;
//  3. the point index as stored by earlier commits: one get;
//  4. the series' run in the block being written (binary search): free;
//  5. the series' stored runs: runs are disjoint and ascending, so the run
//     with the greatest first time at or below the point's time is the
//     only one that can hold it: one reverse seek, then a binary search in
//     the decoded run. The last run decoded per series is kept for the
//     commit, so the late points of a resend or a backfill, which fall in
//     the same runs in order, mostly cost no seek at all.
//
// Points placed by steps 3–5 get a point-index entry (and an overwrite
// marker when something was found). Runs stay disjoint: a gap holds no
// stored run, two gaps of a series are disjoint or the same, and the
// in-order points a block adds later lie above every gap found before
// them.
//
// Each series also carries the bound above which the tree holds none of
// its run keys or point-index entries: raised to the series' highest time
// when a head flush is sealed and to a late point's time when its entry
// is written, and set to the highest time when that is first loaded from
// the store. Steps 2, 3 and 5 read only the heads for a point above it:
// the common late point, a write that committed after a later write of
// the same series, both since the last flush, costs no read of the tree
// at all. Without it, concurrent writers near capacity paid thousands of
// seeks a second on the sequencer's goroutine, and more as L0 tables
// piled up, which slowed commits and reordered still more writes
// (TestLateAboveStoredNoReads).
//
// So a late point costs at most one get and four seeks, whatever the size
// of the commit and whatever else it holds, and a new late point in a gap
// nothing after the first of its series. Steps 2, 3 and 5 read a read-only
// view opened once per commit, with three iterators reused by seeking,
// never the commit's own write transaction: badger builds an
// iterator over a write transaction by sorting all its pending writes, so a
// lookup there cost O(size of the commit) and a commit of N late points
// O(N²). The view lacks nothing a lookup needs, because a commit holds at
// most one block per table and what that block places is known in memory
// (steps 1, 2 and 4). ingestd_store_index_reads_total counts the reads by
// kind; TestLateLookupsBounded proves the bound, TestGapRuns the cost of
// backfills and interleaved commits, and BenchmarkCommitLate measures the
// cost per point at several commit sizes.
//
// A run value is a kind byte ('l': synced, then uvarint first x_seq of the
// block; 'u': unsynced, then uvarint block number), uvarint count, and count
// pairs of varint (zig-zag) changes of the time delta (the first from the
// key's firstTs) and of the block-index delta from the pair before: a
// series written at a fixed interval costs two bytes a point. Runs of
// layout 8 and before ('L' and 'U') hold plain uvarint deltas instead, as
// head records still do, and read as they are.
//
// # Block encoding
//
// A block is uvarint firstSeq (0 in unsynced blocks), varint commit time
// (Unix nanoseconds: when the server committed it, for consumer lag in
// seconds), uvarint count, a zero byte and a format byte (no skip index
// has 0 entries, so the zero marks it), a skip index (uvarint n =
// ceil(count/64), then n uvarint byte offsets of fragments 0, 64, 128, …
// into the body), then the body: count fragments.
//
// A fragment is compact (format bit 2, layout 7): encoded against the
// fragment before it, or against nothing at a skip-index entry, so that a
// reader can start at any entry. It is the varint series delta, the
// varint time delta, the shape (uvarint 0: the columns and kinds of the
// fragment before; else the field count + 1 and per field the uvarint
// column and kind byte) and each field's value: a float is 8 bytes
// little-endian IEEE 754, an integer a zig-zag varint, an unsigned integer
// a uvarint, a string a uvarint length and its bytes, a boolean one byte.
// Many series written one point each per commit, the common load, make a
// block of one fragment per series, consecutive ones sharing their
// measurement's columns and lying microseconds apart: a line of integer
// fields costs about a byte per field plus three. Blocks of layout 6 and
// older hold plain fragments (no format bit 2: uvarint sid, varint ts,
// uvarint nfields, and per field uvarint column, kind byte and value);
// layout 4 and older have no format byte either. Point-index unions hold
// one plain fragment.
//
// A body of 256 bytes or more is compressed (S2, Snappy's successor) when
// that saves an eighth of it (format bit 1): the skip index is then
// followed by the uvarint decoded size of the body and the S2 block. A
// reader decodes the body once, into memory of its own, where it copied a
// plain block out of the value log. Badger compresses no value.
//
// # Bytes per line
//
// What a line costs on disk, measured after 2 minutes of the soak load
// (1,000 series over the 9 TSBS devops tables, 90,000 lines/s, 1,000-line
// writes, about 9 integer fields a line; ingestd bench --mode soak):
//
//   - its fragment in a block: about 19 bytes (compact fragments, S2);
//   - its share of a head record, which the head flush deletes: about 2
//     bytes (layout 10: a run of one point names its fragment in the
//     block, whose series and time the record no longer repeats; 7 in
//     layout 8, 10 before). A commit's record of a table then stays under
//     valueThreshold up to about 250 points, in the LSM tree, where the
//     flush's deletion drops it at the next compaction; a layout 8 record
//     went to the value log and stayed there as garbage among live blocks
//     (about a quarter of the file) until the collector rewrote the file;
//   - its share of its series' run keys: about 2 bytes (a run names up to
//     128 points, a byte each for the change of the time delta and of the
//     x_seq delta at a steady interval; 5 before layout 9 stored plain
//     deltas);
//   - the LSM tree's own keys and indexes: under 1 byte.
//
// None of these grows with the store: a block holds what one commit
// wrote, a record what one commit indexed, a run key what the head joined
// for one series, and nothing is rewritten as the store grows but by
// badger's compactions, which see a key per run and per block, not per
// line (ingestd_store_keys_written_total ÷ ingestd_ilp_lines_total, the
// LSM writes per line, about 0.04 under that load). InfluxDB's TSM files
// hold such a line in about 9 bytes once compacted, encoding each
// series' values against its previous ones; a block encodes a fragment
// only against the block's previous fragment, another series', so that
// a drain reads the feed in x_seq order without reassembling series.
//
// # Compactions
//
// badger's flushes and compactions run on the cores that serve writes.
// Two compactors run them, each in one goroutine that builds its tables
// one at a time, with one more compressing their blocks (the fork's
// SerialCompactions, store/badgerfork/FORK.md): Go's scheduler shares the
// processors among runnable goroutines, and upstream's dozen goroutines
// for one level-0 compaction took most of a 2-core machine from the
// writers. A flush builds its level-0 table whole in memory while the
// next memtable fills, so memtables are 32 MiB by default
// (DefaultMemTableBytes): at 64 MiB a flush and the compaction it starts
// took the heap near --memory-limit-bytes, where the collector works
// harder. Level 0 keeps 5 tables before it is compacted and 15 before
// flushes wait (ingestd_store_lsm_tables, ingestd_store_write_stall_seconds_total);
// figures in docs/performance.md#twice-the-sustained-rate.
//
// # Retention and the history horizon
//
// SweepBefore removes the fragments older than a cutoff in bounded
// batches. It finds them through the indexes, which hold every fragment
// by (series, time): the series runs (in-order fragments), the
// point-index entries (a late point's first fragment) and the reference
// entries (an overwritten point's later ones), all keyed ks tid sid ts…,
// so per series the aged entries come first and one seek skips the rest;
// a point's entry goes after its reference entries, so that what a batch
// leaves of a point still reads as its row.
// A removed fragment is not cut out of its block: the block is rewritten
// with the fragment replaced by a placeholder (series 0, which no written
// fragment has, time 0, no fields), so that the x_seq numbers and block
// indexes of every other fragment, which runs and point entries refer to,
// stay valid; a block left with placeholders only is deleted. Aged run
// entries go (a shortened run is stored again under its new first time),
// aged point-index, reference entries and overwrite markers go, and the
// overwrite set in memory forgets them.
//
// The history horizon of an instance is the lowest x_seq a drain may
// still start at (after >= horizon-1). It only rises: the feed raises it
// for --feed-history, and every sweep batch raises it above the highest
// x_seq it removes, because a drain must never pass a removed fragment in
// silence. ReadSeq reads the horizon in its own read view and refuses a
// read below it (store.ErrHistoryExpired), and meeting a placeholder above its
// start is refused the same way, which the order of a batch's writes
// makes impossible: (1) the horizon, (2) the rewritten blocks, (3) the
// new runs, then the deletion of the old runs and point entries. A batch
// larger than one transaction commits in that order, so a crash at any
// point leaves a prefix: the horizon may be raised with nothing removed
// yet (drains are refused a little early, never skip), blocks may hold
// placeholders whose index entries remain (the next sweep finds them,
// "removes" them again, which changes nothing, and deletes the entries).
// A crash never loses a retained fragment, because only fragments older
// than the cutoff are ever named. The copy by time range (ReadRows) and
// coalescing skip placeholders. TRUNCATE and DROP drop the horizon with
// the instance, so a new instance starts at 1.
//
// # Space given back
//
// Blocks live in badger's value log, which only a value-log garbage
// collection shrinks: badger's compactions count the bytes of deleted and
// overwritten values per value-log file, and RunValueLogGC rewrites a
// file at least --store-gc-discard-ratio garbage (0.3: copying at most
// 2.3 bytes of live values forward per byte given back) and deletes it. collectGarbage runs such passes, one file at a time,
// pausing after each as long as rewriting that file takes at
// --store-gc-max-bytes-per-second; a background loop calls it every
// --store-gc-interval (2 s). badger never collects the file it is
// writing, so --store-value-log-max-entries (4,096 values) starts a new
// file sooner than the 256 MiB size limit would: this bounds the garbage
// the newest file can hold. Every file stays open and mapped while it
// lives (ingestd_store_files): the count is also what keeps a store of
// small blocks within the process's descriptors. (badger's size limit is also its largest value,
// so it stays at MaxValueBytes: a count is the bound that leaves a
// large group commit's block room.) ingestd_store_size_bytes walks the
// data directory at every
// scrape and reports allocated blocks (badger preallocates value-log
// files sparsely, so their length says nothing).
//
// # Version rule
//
// The layout's version is recorded under 'v' (layoutVersion in layout.go
// lists what each version changed). Older versions are read as they are
// or converted at Open, and their mark is upgraded. A newer version is
// refused with store.ErrVersion; a change to the layout bumps the
// version and ships what reads or converts the older one.
package rowengine
