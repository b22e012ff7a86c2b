package httpapi

import (
	"context"

	"github.com/ingestd/ingestd/feed"
)

// The interfaces below are what the handlers need of the feed, each as
// small as its handlers' use of it. *feed.Drainer (the read side)
// implements TableReader, Drainer, RowReader, Consumers and StatusStats;
// *feed.Sequencer (the write side) implements TableCreator, TableAdmin and
// Writer. Every method is safe for concurrent use from any number of
// requests. Names are checked by the feed (docs/contract.md#names): a name no table or
// consumer can have is a *feed.NameError (400), not a missing one (404).

// TableReader reads the tables' published state: GET /api/v1/tables,
// GET /api/v1/tables/{table}, GET /api/v1/tables/{table}/sync, the status
// page, and SQL SHOW SYNC, SHOW COLUMNS, SHOW TABLES and the column checks
// of INSERT and SELECT. It never waits for the sequencer.
type TableReader interface {
	// Status returns table name's sync status (SHOW SYNC FROM name: sync
	// enabled, epoch, seq, watermark, horizon). Errors:
	// feed.ErrTableNotFound, a *feed.NameError.
	Status(name string) (feed.SyncStatus, error)
	// Table describes table name: its sync status, retention, committed
	// point count and columns ("time" first, then tags and fields in
	// order of first appearance; never x_ columns). Errors as Status.
	Table(name string) (feed.TableInfo, error)
	// Tables describes every live table, ordered by name; the caller owns
	// the slice.
	Tables() []feed.TableInfo
}

// TableCreator creates tables: PUT /api/v1/tables/{table} (which also
// changes an existing table's sync and retention) and SQL CREATE TABLE.
// Both wait until the sequencer has made the change durable.
type TableCreator interface {
	// PutTable creates table name with opts, or applies opts to the
	// existing table, and returns whether it created it and the table as
	// it then is. Errors: feed.ErrInvalidRetention,
	// feed.ErrInvalidTableName or a *feed.NameError, feed.ErrTableLimit,
	// feed.ErrClosed once the sequencer stopped, ctx.Err(), or the storage
	// error that stopped the sequencer.
	PutTable(ctx context.Context, name string, opts feed.TableOptions) (created bool, info feed.TableInfo, err error)
	// DefineTable creates table name with sync and the declared columns
	// (tags and fields; "time" is implicit), and changes nothing of an
	// existing table (feed.ErrTableExists). Other errors as PutTable,
	// plus feed.ErrInvalidName, feed.ErrDuplicateColumn and
	// feed.ErrColumnLimit for the columns.
	DefineTable(ctx context.Context, name string, sync bool, cols []feed.Column) (feed.SyncStatus, error)
}

// TableAdmin changes and removes existing tables: PUT
// /api/v1/tables/{table}/sync, POST /api/v1/tables/{table}/truncate,
// DELETE /api/v1/tables/{table} and SQL ALTER TABLE … SET SYNC, TRUNCATE
// and DROP TABLE. Each waits until the sequencer has made the change
// durable; errors: feed.ErrTableNotFound, feed.ErrInvalidTableName or a
// *feed.NameError, feed.ErrClosed once the sequencer stopped, ctx.Err(),
// or the storage error that stopped the sequencer.
type TableAdmin interface {
	// SetSync enables or disables table name's feed (enabling a table
	// whose sync is OFF bumps its epoch) and returns its status.
	SetSync(ctx context.Context, name string, enabled bool) (feed.SyncStatus, error)
	// Truncate deletes every row and column of table name, bumps its
	// epoch, keeps its seq and returns its status.
	Truncate(ctx context.Context, name string) (feed.SyncStatus, error)
	// Drop deletes table name and its named consumers; a table created
	// again under the name resumes above its epoch and seq.
	Drop(ctx context.Context, name string) error
}

// Drainer serves GET /drain (docs/contract.md#drain) and the SQL drain.
type Drainer interface {
	// Drain reads the page of req.Table after req.After (at most
	// req.Limit rows, ascending x_seq, never above the watermark; held
	// up to req.Wait when it would be empty), calling visit with the
	// page's columns and each row's values, both valid only during the
	// call. visit may return feed.ErrPageFull to end the page before the
	// row. Refusals are a *feed.RefusalError (sync off, stale epoch,
	// cursor beyond the sequence, history expired) carrying the table's
	// status; other errors: feed.ErrTableNotFound, a *feed.NameError,
	// feed.ErrInvalidLimit, feed.ErrUnknownColumn,
	// feed.ErrDuplicateColumn, feed.ErrTooManyConsumers,
	// feed.ErrConsumerOwned (req.Consumer is another token's), ctx.Err(), an
	// error of visit, or a storage error.
	Drain(ctx context.Context, req feed.DrainRequest, visit func(cols []feed.Column, vals []feed.Value) error) (feed.Page, error)
}

// RowReader serves the copy by time range: GET
// /api/v1/tables/{table}/rows and SQL SELECT by time range.
type RowReader interface {
	// Rows reads one page of req.Table's rows in req's time range from
	// req.Cursor on, calling visit as Drainer.Drain does (no x_seq
	// column); the page's Cursor resumes the copy ("" on the last page).
	// Errors: feed.ErrTableNotFound, a *feed.NameError,
	// feed.ErrInvalidLimit, feed.ErrInvalidCursor, a *feed.RefusalError
	// wrapping feed.ErrStaleEpoch when the table was truncated or
	// re-created since the cursor's first page, ctx.Err(), an error of
	// visit, or a storage error.
	Rows(ctx context.Context, req feed.RowsRequest, visit func(cols []feed.Column, vals []feed.Value) error) (feed.RowsPage, error)
}

// Consumers are a table's named drain consumers (docs/contract.md#consumers): GET and DELETE
// under /api/v1/tables/{table}/consumers.
type Consumers interface {
	// Consumers lists table's named consumers ordered by name; the caller
	// owns the slice. Errors: feed.ErrTableNotFound, a *feed.NameError.
	Consumers(table string) ([]feed.ConsumerInfo, error)
	// DeleteConsumer forgets the named consumer of table, durably, on
	// behalf of by (its owner, an admin, or anyone for an unowned one).
	// Errors: feed.ErrTableNotFound, feed.ErrConsumerNotFound,
	// feed.ErrConsumerOwned, a *feed.NameError, or a storage error.
	DeleteConsumer(table, name string, by feed.Principal) error
}

// Writer submits rows to the sequencer (SQL INSERT), as package ilp does
// lines.
type Writer interface {
	// Submit queues b and returns at once, or blocks while the queue is
	// full until there is room, ctx ends (ctx.Err()) or the sequencer
	// stops (feed.ErrClosed). b must not be changed until the Pending's
	// Wait returns.
	Submit(ctx context.Context, b *feed.Batch) (*feed.Pending, error)
}
