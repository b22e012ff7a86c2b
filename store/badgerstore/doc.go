// Package badgerstore is the store.Backend of one machine. A table's rows
// (its series, blocks, late-point index, retention and history horizon)
// live in the row engine (store/rowengine, whose doc.go describes their
// layout and costs); this package keeps, in the same badger database and
// in keys the engine leaves to it, what makes the engine a store: table
// metadata, instance ids, x_seq numbering and consumer positions. It
// passes the contract suite store/storetest on disk and in memory.
//
// # Lifecycle
//
// Open opens the row engine (the data directory's lock, crash recovery)
// and loads every table's metadata; Append and the DDL calls are made by
// exactly one goroutine (the feed's sequencer); reads (ReadSeq, ReadRows,
// LoadTables, LoadSeries, …) may run concurrently with it from any
// goroutine; Close waits for the calls in flight, records each live
// table's exact x_seq as its lease, then closes the engine, and every
// call after it returns store.ErrClosed. Nothing above this package sees
// a badger type or error.
//
// # x_seq
//
// Append assigns each synced table's numbers from an in-memory counter
// under a durable lease: when a commit would pass the lease, the table's
// metadata with a lease 64 Ki numbers higher is fsynced first (one
// transaction for every table extended;
// ingestd_feed_seq_lease_extensions_total counts them), before the
// numbers are handed out. A crash resumes above the lease (burning the
// unused rest, a gap the cursor steps over); a clean Close lowers each
// lease to the exact number, so a restart burns nothing. The commit then
// goes to the engine (rowengine.Engine.Apply) with the metadata a
// TableCommit carries, in its first transaction.
//
// # DDL
//
// TruncateTable and DropTable write, in one transaction, the metadata that
// ends the instance (the new instance, or the tombstone, plus the deletion
// of the name's consumers on DROP) and the engine's drop mark for it; then
// the engine removes the instance's rows and the mark. The engine's Open
// finishes every marked removal a crash interrupted, so a TRUNCATE or
// DROP is whole or not at all.
//
// # Keys
//
// In the engine's owner keyspaces (rowengine.OwnerKeyspaces):
//
//	'm' name                      -> table meta (JSON, its name empty: the key's): instance id, sync, epoch, seq lease, column_chunks (the chunks of its columns that follow; older stores: columns and columns_since inline, the x_seq each column was added at, absent in older still, read as 0)
//	'm' name 0x00 chunk(4 BE)     -> a chunk of the table's columns (JSON: at most 64 columns, closed once their names reach 16 KiB, with their x_seq): a new column rewrites only the last chunk
//	'n' 't'                       -> next table instance id (uvarint)
//	'c' name 0x00 consumer        -> a named consumer's acknowledged position (JSON)
//
// Names are the keys' bytes, read back byte for byte. Consumers are keyed
// by table name, not instance: they outlive TRUNCATE (their epoch then
// tells them apart) and go with DROP. The engine's layout version covers
// these keys too.
package badgerstore
