// Package wire holds what ingestd's HTTP server (package httpapi) writes
// and its Go client (package httpapi/client) reads, so that the two cannot
// drift apart: the error codes (docs/reference.md#error-codes), the JSON error object and the
// bodies of the table routes. It imports nothing but the standard library.
package wire

// The error codes of the JSON error object (docs/reference.md#error-codes; api.yaml's
// ErrorCode lists each).
const (
	CodeTableNotFound        = "table_not_found"
	CodeSyncOff              = "sync_off"
	CodeStaleEpoch           = "stale_epoch"
	CodeCursorBeyondSequence = "cursor_beyond_sequence"
	CodeHistoryExpired       = "history_expired"
	CodeLimitRequired        = "limit_required"
	CodeInvalidLimit         = "invalid_limit"
	CodeInvalidParameter     = "invalid_parameter"
	CodeUnknownColumn        = "unknown_column"
	CodeInvalidCursor        = "invalid_cursor"
	CodeInvalidTableName     = "invalid_table_name"
	CodeInvalidName          = "invalid_name"
	CodeInvalidBody          = "invalid_body"
	CodeTooManyConsumers     = "too_many_consumers"
	CodeTableLimit           = "table_limit"
	CodeConsumerNotFound     = "consumer_not_found"
	CodeTableExists          = "table_exists"
	CodeColumnLimit          = "column_limit"
	CodeSyntaxError          = "syntax_error"
	CodeInvalidValue         = "invalid_value"
	CodeRowRejected          = "row_rejected"
	CodeScanLimit            = "scan_limit"
	CodeInvalidFilter        = "invalid_filter"
	CodeFilterLimit          = "filter_limit"
	CodeTooLarge             = "request_too_large"
	CodeMethodNotAllowed     = "method_not_allowed"
	// CodeNotFound is a path no route serves (404); a table or consumer
	// that does not exist has its own code.
	CodeNotFound    = "not_found"
	CodeUnavailable = "unavailable"
	// CodeNotServed (421) refuses a read of a table this node does not
	// keep the rows of (--jetstream-materialise): another node serves it.
	CodeNotServed = "not_served"
	// CodeUnauthorized and CodeForbidden are InfluxDB 2.x's codes of 401
	// and 403 (package auth writes them for tokens; CodeForbidden also
	// refuses cross-site requests).
	CodeUnauthorized         = "unauthorized"
	CodeForbidden            = "forbidden"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeInternal             = "internal"
)

// ErrorBody is the JSON error object (docs/contract.md#error-body, api.yaml's Error and
// Refusal): Code is one of the Code constants, Message the human-readable
// reason and Error the same text (InfluxDB's clients read "error"). Epoch,
// Seq and Watermark are set on drain refusals, Horizon on history_expired,
// Line and Column (1-based) on SQL errors.
type ErrorBody struct {
	// Code is the machine-readable code.
	Code string `json:"code"`
	// Message is the human-readable reason.
	Message string `json:"message"`
	// Error repeats Message.
	Error string `json:"error"`
	// Epoch, Seq and Watermark are the table's state at a drain refusal.
	Epoch     *uint64 `json:"epoch,omitempty"`
	Seq       *uint64 `json:"seq,omitempty"`
	Watermark *uint64 `json:"watermark,omitempty"`
	// Horizon is the lowest drainable x_seq (history_expired).
	Horizon *uint64 `json:"horizon,omitempty"`
	// Line and Column locate a SQL error (1-based).
	Line   int `json:"line,omitempty"`
	Column int `json:"column,omitempty"`
}

// SyncStatus is SHOW SYNC (docs/reference.md#tables): the body of GET, PUT
// /api/v1/tables/{t}/sync and POST …/truncate.
type SyncStatus struct {
	// Enabled reports whether the table's sync is ON.
	Enabled bool `json:"enabled"`
	// Epoch changes at TRUNCATE, SET SYNC ON and DROP + re-create.
	Epoch uint64 `json:"epoch"`
	// Seq is the highest x_seq handed out.
	Seq uint64 `json:"seq"`
	// Watermark is the highest x_seq a drain may return now.
	Watermark uint64 `json:"watermark"`
	// Horizon is the lowest x_seq still drainable (docs/contract.md#horizon; 1 while nothing
	// was trimmed).
	Horizon uint64 `json:"horizon"`
}

// Column is one column of SHOW COLUMNS.
type Column struct {
	// Name is the column's name: time, a tag or a field key.
	Name string `json:"name"`
	// Type is time, tag, float, integer, unsigned, string or boolean.
	Type string `json:"type"`
}

// TableStats is what a table holds (api.yaml TableStats).
type TableStats struct {
	// Fragments counts the stored fragments, synced and not (exact).
	Fragments uint64 `json:"fragments"`
	// RowsEstimate estimates the distinct points.
	RowsEstimate uint64 `json:"rows_estimate"`
	// Series counts the distinct tag sets.
	Series uint64 `json:"series"`
	// Bytes is the table's keys and values before compression, in bytes.
	Bytes uint64 `json:"bytes"`
	// CountedAt is when the counts were taken (RFC 3339).
	CountedAt string `json:"counted_at"`
}

// Table is one table as the table routes show it.
type Table struct {
	// Name is the table's name (the ILP measurement).
	Name string `json:"name"`
	// Sync is the table's sync state.
	Sync SyncStatus `json:"sync"`
	// Retention is the retention in force ("0": forever; docs/contract.md#retention).
	Retention string `json:"retention"`
	// Columns lists time, tags and fields in order of first appearance
	// (GET of one table; nil in lists).
	Columns []Column `json:"columns,omitempty"`
	// Stats is what the table holds, when the server counts it.
	Stats *TableStats `json:"stats,omitempty"`
}
