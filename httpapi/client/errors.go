package client

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ingestd/ingestd/httpapi/wire"
)

// The write routes answer with InfluxDB's codes instead (api.yaml's
// WriteError): a body with bad lines is CodeWriteInvalid (400: none or
// some stored on /write; /api/v2/write answers CodeWritePartial, 422, when
// some were).
const (
	CodeWriteInvalid = "invalid"
	CodeWritePartial = "unprocessable entity"
)

// Sentinels for errors.Is: an *Error matches the sentinel of its Code,
// whatever its status and message (errors.Is(err, ErrStaleEpoch)).
var (
	// ErrTableNotFound is returned when the table does not exist (404).
	ErrTableNotFound = &Error{Code: wire.CodeTableNotFound}
	// ErrSyncOff is returned by a drain of a table whose sync is OFF (409).
	ErrSyncOff = &Error{Code: wire.CodeSyncOff}
	// ErrStaleEpoch is returned by a drain or copy whose epoch is no longer
	// the table's (409): TRUNCATE, SET SYNC ON or DROP + re-create
	// happened; resync in full.
	ErrStaleEpoch = &Error{Code: wire.CodeStaleEpoch}
	// ErrCursorBeyondSequence is returned by a drain whose after is above
	// the table's seq (409), e.g. a table restored from an older backup.
	ErrCursorBeyondSequence = &Error{Code: wire.CodeCursorBeyondSequence}
	// ErrHistoryExpired is returned by a drain whose after is below the
	// table's horizon - 1 (409; docs/contract.md#history-expired): resync with the copy by time
	// range, then drain from the watermark it reports.
	ErrHistoryExpired = &Error{Code: wire.CodeHistoryExpired}
	// ErrTooManyConsumers is returned when a drain names a new consumer
	// beyond one of the server's consumer budgets (409): per token and
	// table, per token, or in total (the message names the flag).
	ErrTooManyConsumers = &Error{Code: wire.CodeTooManyConsumers}
	// ErrConsumerNotFound is returned for a consumer the table does not
	// know (404).
	ErrConsumerNotFound = &Error{Code: wire.CodeConsumerNotFound}
	// ErrTableExists is returned by CREATE TABLE without IF NOT EXISTS over
	// SQL (409); PUT /api/v1/tables/{t} is idempotent and never returns it.
	ErrTableExists = &Error{Code: wire.CodeTableExists}
	// ErrUnavailable is returned while the server shuts down or sheds load
	// (503): retry after a pause.
	ErrUnavailable = &Error{Code: wire.CodeUnavailable}
	// ErrNotServed is returned by a drain, copy or query of a table the
	// node does not keep the rows of (421; --store=jetstream with
	// --jetstream-materialise): ask a node that does.
	ErrNotServed = &Error{Code: wire.CodeNotServed}
	// ErrUnauthorized is returned for a missing, unknown or revoked token
	// (401).
	ErrUnauthorized = &Error{Code: wire.CodeUnauthorized}
	// ErrForbidden is returned when the token lacks the route's scope, or
	// names a consumer another token owns (403).
	ErrForbidden = &Error{Code: wire.CodeForbidden}
)

// maxErrorBodyBytes bounds how much of an error answer is read and kept.
const maxErrorBodyBytes = 64 << 10

// Error is an answer of the server other than 2xx. Code, Message, Line
// and the table state come from the JSON error object (docs/contract.md#error-body, api.yaml
// Error and Refusal); an answer that is not one (a proxy's HTML page, a
// non-ingestd target) leaves Code empty and keeps the start of the body in
// Message.
type Error struct {
	// StatusCode is the HTTP status (404, 409 …); 0 only in sentinels.
	StatusCode int
	// Code is the machine-readable code: one of package wire's Code
	// constants (shared with the server) on the API routes, InfluxDB's
	// (CodeWriteInvalid, CodeWritePartial) on the write routes.
	Code string
	// Message is the human-readable reason.
	Message string
	// HasState reports whether Epoch, Seq and Watermark were sent: drain
	// refusals carry the table's current state (too_many_consumers not).
	HasState bool
	// Epoch, Seq and Watermark are the table's at the refusal.
	Epoch, Seq, Watermark uint64
	// Horizon is the lowest drainable x_seq; set on history_expired only
	// (0 else).
	Horizon uint64
	// Line (1-based) is the first bad line of a write, or the SQL
	// statement's line at fault; 0 when not sent.
	Line int
	// Column (1-based, in characters) is the SQL statement's column at
	// fault; 0 when not sent.
	Column int
	// RetryAfter is the Retry-After header in whole seconds (503); 0 when
	// absent.
	RetryAfter int
}

// Error renders "HTTP 409 stale_epoch: feed: stale epoch, resync in
// full" (the code left out when the answer had none).
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("HTTP ")
	b.WriteString(strconv.Itoa(e.StatusCode))
	if e.Code != "" {
		b.WriteString(" ")
		b.WriteString(e.Code)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Is reports whether target is the sentinel of e's code (an *Error with
// StatusCode 0 and the same Code), so that errors.Is(err, ErrStaleEpoch)
// holds for every stale_epoch refusal.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.StatusCode == 0 && t.Code != "" && t.Code == e.Code
}

// IsResync reports whether err asks a consumer to resync in full: a
// stale epoch, a cursor beyond the table's sequence or expired history
// (docs/contract.md#refusals).
func IsResync(err error) bool {
	return errors.Is(err, ErrStaleEpoch) || errors.Is(err, ErrCursorBeyondSequence) || errors.Is(err, ErrHistoryExpired)
}

// ProtocolError is returned when a 2xx answer does not have the shape
// api.yaml gives it (a missing envelope header, a page that is not JSON).
type ProtocolError struct {
	// Op is the request, "GET /drain".
	Op string
	// Err is what was wrong.
	Err error
}

// Error renders "ingestd: GET /drain: bad answer: …".
func (e *ProtocolError) Error() string {
	return fmt.Sprintf("ingestd: %s: bad answer: %v", e.Op, e.Err)
}

// Unwrap returns Err.
func (e *ProtocolError) Unwrap() error { return e.Err }
