// Package store is ingestd's durable storage: fragments, table metadata and
// the series dictionary in an embedded badger database.
//
// # Lifecycle
//
// Open takes the data directory's lock (a second process on the same
// directory gets ErrLocked at once), Commit and the meta writes are called by
// exactly one goroutine (the feed's sequencer), reads (ReadSeq, LoadTables,
// LoadSeries) may run concurrently with it from any goroutine, and Close
// flushes and releases the directory. Nothing above this package sees a
// badger type or error.
//
// # Key layout
//
// Every key starts with a one-byte keyspace tag. Integers are 8-byte
// big-endian so that byte order is numeric order; timestamps are stored with
// the sign bit flipped so that negative times sort before positive ones.
//
//	'm' name                      -> table meta (JSON): instance id, sync, epoch, seq lease, columns
//	'n'                           -> next table instance id and next unsynced block number
//	's' tid sid                   -> series: the tag set as (column, value) pairs
//	'l' tid lastSeq               -> sync block: the fragments a commit wrote to the table, x_seq firstSeq..lastSeq
//	'u' tid blockNo               -> unsynced block: fragments written while sync was OFF (no x_seq)
//	'p' tid sid ts                -> point index: references to every fragment at (series, ts), in write order
//	'd' tid sid ts                -> overwrite marker: (series, ts) holds more than one fragment
//	'c' name 0x00 consumer        -> a named consumer's acknowledged position (JSON)
//
// Consumers are keyed by table name, not instance: they outlive TRUNCATE
// (their epoch then tells them apart) and go with DROP.
//
// tid is a table instance id: TRUNCATE and DROP give the table a new one and
// drop every key of the old one, so no scan ever filters dead data.
//
// # Why it is fast
//
// One commit writes one block per table, not one entry per line: a block is
// a single large value that badger appends to its value log, so the LSM tree
// only sees one small key per block plus one small point-index key per
// fragment (21 key bytes, a few value bytes). A drain is a forward seek to
// the block holding after+1 followed by sequential decoding of whole blocks:
// no per-row lookups. Overwrites are the exception: a fragment whose
// (series, ts) already holds data is found through the in-memory per-series
// high-water timestamp (new points in time order never touch the index) and,
// for late or repeated timestamps, one point lookup; the marker it leaves
// makes a drain merge that point's fragments and nothing else.
//
// # Block encoding
//
// A block is uvarint firstSeq (0 in unsynced blocks), varint commit time
// (Unix nanoseconds: when the server committed it, for consumer lag in
// seconds), uvarint count, a skip
// index (uvarint n = ceil(count/64), then n uvarint byte offsets of fragments
// 0, 64, 128, … into the body), then the body: count fragments, each uvarint sid, varint ts, uvarint nfields and nfields
// times (uvarint column, kind byte, value) where a float is 8 bytes
// little-endian IEEE 754, an integer a zig-zag varint, an unsigned integer
// a uvarint, a string a uvarint length and its bytes, a boolean one byte.
//
// # Version rule
//
// The layout is version 1, recorded under 'v'. A database with another
// version is refused with ErrVersion; a change to the layout bumps the
// version and ships a migration.
package store
