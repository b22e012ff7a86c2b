package feed

import (
	"errors"
	"fmt"
)

var (
	// ErrTableNotFound is returned for a table that does not exist.
	ErrTableNotFound = errors.New("feed: table not found")
	// ErrTableExists is returned by DefineTable for a table that exists.
	ErrTableExists = errors.New("feed: table already exists")
	// ErrSyncOff is returned by Drain on a table whose sync is OFF.
	ErrSyncOff = errors.New("feed: sync is off for this table")
	// ErrStaleEpoch is returned by Drain when the cursor's epoch is not the
	// table's current one: the client must resync in full.
	ErrStaleEpoch = errors.New("feed: stale epoch, resync in full")
	// ErrCursorBeyondSequence is returned by Drain when after > seq, e.g. for
	// a table restored from an older backup.
	ErrCursorBeyondSequence = errors.New("feed: cursor is beyond the table's write sequence")
	// ErrUnknownColumn is returned by Drain for a requested column the table
	// does not have.
	ErrUnknownColumn = errors.New("feed: unknown column")
	// ErrDuplicateColumn is returned by Drain for a column requested more
	// than once.
	ErrDuplicateColumn = errors.New("feed: column requested more than once")
	// ErrTooManyConsumers is returned by Drain when a new consumer name
	// would exceed a consumer budget: Config.MaxConsumersPerTable,
	// MaxConsumersPerToken or MaxConsumers (the message names it).
	ErrTooManyConsumers = errors.New("feed: too many consumers")
	// ErrConsumerOwned is returned by Drain and DeleteConsumer when the
	// named consumer belongs to another principal (Principal).
	ErrConsumerOwned = errors.New("feed: consumer belongs to another token")
	// ErrConsumerNotFound is returned by DeleteConsumer for an unknown name.
	ErrConsumerNotFound = errors.New("feed: consumer not found")
	// ErrInvalidLimit is returned by Drain for a limit outside
	// 1..Config.MaxDrainLimit.
	ErrInvalidLimit = errors.New("feed: invalid limit")
	// ErrInvalidTableName is returned for an empty or reserved table name.
	ErrInvalidTableName = errors.New("feed: invalid table name")
	// ErrPageFull is not returned by Drain: a Drain visit function returns
	// it to end the page before the row it was called with (the caller's
	// page is full, e.g. in bytes). That row is not part of the page: the
	// page's Next is the x_seq of the row before it, so the next page
	// starts with it. Returned for the first row it fails the Drain. A
	// Rows visit function may return it too: the page's Cursor then
	// resumes at that row.
	ErrPageFull = errors.New("feed: page full")
	// ErrBusy is returned by AppendWithin when the queue stayed full for
	// the whole submit timeout.
	ErrBusy = errors.New("feed: sequencer queue full")
	// ErrUnavailable fails a write or table operation when a store that
	// keeps its data over the network (store.ErrUnavailable) did not
	// answer in time: for new tables, columns or series (nothing of the
	// write applied), for a commit (the write may have landed: a retry
	// writes its points again, which overwrites them) or for a table
	// change (not made). The sequencer runs on; retry.
	ErrUnavailable = errors.New("feed: the store did not answer in time: retry")
	// ErrNotServed is returned by Drain, Rows and TableStats for a table
	// this node's store does not materialise (a shared store that keeps
	// the rows of some tables only, store.ErrNotServed): its reads are
	// another node's to serve.
	ErrNotServed = errors.New("feed: this node does not keep the table's rows: read it through a node that does")
	// ErrClosed is returned once the sequencer has stopped.
	ErrClosed = errors.New("feed: sequencer stopped")
	// ErrTableChanged is returned by Truncate, Drop, SetSync and
	// CreateTable (of an existing table) when another ingestd node
	// truncated or dropped the table meanwhile (a store.Shared backend):
	// retry, on the table as it is now.
	ErrTableChanged = errors.New("feed: table truncated or dropped through another ingestd node meanwhile: retry")
	// ErrFieldTypeConflict rejects a field whose type differs from the
	// column's (first write wins).
	ErrFieldTypeConflict = errors.New("field type conflict")
	// ErrTagFieldConflict rejects a key used as a tag and a field in one
	// table.
	ErrTagFieldConflict = errors.New("tag/field key conflict")
	// ErrColumnLimit rejects a line that would add a column past
	// Config.MaxColumnsPerTable.
	ErrColumnLimit = errors.New("column limit exceeded")
	// ErrTableLimit rejects a line or CREATE TABLE that would add a table
	// past Config.MaxTables.
	ErrTableLimit = errors.New("feed: table limit exceeded")
	// ErrSeriesLimit rejects a line that would add a series past
	// Config.MaxSeriesPerTable.
	ErrSeriesLimit = errors.New("series limit exceeded")
	// ErrBeyondRetention rejects a point whose time is older than now
	// minus its table's retention (InfluxDB: "points beyond retention
	// policy").
	ErrBeyondRetention = errors.New("points beyond retention policy")
	// ErrHistoryExpired is returned by Drain when after is below the
	// table's history horizon minus one (docs/contract.md#history-expired): fragments the cursor
	// has not seen were trimmed or removed. Resync with the copy by time
	// range, then drain from the watermark it reports.
	ErrHistoryExpired = errors.New("feed: change history expired, resync with the copy by time range (/rows) and drain from the watermark it reports")
	// ErrInvalidRetention is returned for a retention that
	// ParseRetention refuses.
	ErrInvalidRetention = errors.New("feed: invalid retention")
	// ErrInvalidFilter is returned by Drain for a filter naming a tag or
	// field the table does not have, a tag filtered twice, or an empty
	// time range (docs/contract.md#filters); the message names it.
	ErrInvalidFilter = errors.New("feed: invalid filter")
	// ErrFilterLimit is returned by Drain for a filter past a budget:
	// Config.MaxDrainFilters, MaxDrainFilterValues or
	// MaxDrainFilterValueBytes (the message names the flag).
	ErrFilterLimit = errors.New("feed: filter over its budget")
)

// RefusalError is a drain refusal with the table's state at the time, so a
// client can decide how to resync. It wraps ErrSyncOff, ErrStaleEpoch,
// ErrCursorBeyondSequence or ErrHistoryExpired.
type RefusalError struct {
	Err    error      // ErrSyncOff, ErrStaleEpoch, ErrCursorBeyondSequence or ErrHistoryExpired (possibly wrapped with detail)
	Status SyncStatus // the table's sync status when the drain was refused
}

// Error returns the refusal's message, Err's.
func (e *RefusalError) Error() string { return e.Err.Error() }

// Unwrap returns Err, so that errors.Is finds the refusal's sentinel.
func (e *RefusalError) Unwrap() error { return e.Err }

// RejectError explains why the sequencer dropped one point.
type RejectError struct {
	Line int    // the point's line number in its request (1-based)
	Key  string // the column at fault
	Err  error  // ErrFieldTypeConflict, ErrTagFieldConflict, ErrColumnLimit, ErrSeriesLimit, ErrTableLimit, ErrBeyondRetention, ErrInvalidTableName, a *NameError
	Msg  string // detail
}

// Error returns "line N: <sentinel>: <detail>".
func (e *RejectError) Error() string {
	return fmt.Sprintf("line %d: %v: %s", e.Line, e.Err, e.Msg)
}

// Unwrap returns Err, so that errors.Is finds the rejection's sentinel.
func (e *RejectError) Unwrap() error { return e.Err }
