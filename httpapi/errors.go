package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"unicode/utf8"

	"github.com/ingestd/ingestd/feed"
)

// Error codes of the JSON error object; api.yaml lists each.
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
	CodeTooLarge             = "request_too_large"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeUnavailable          = "unavailable"
	// CodeUnauthorized and CodeForbidden are InfluxDB 2.x's codes of 401
	// and 403 (package auth writes them for tokens; CodeForbidden also
	// refuses cross-site requests).
	CodeUnauthorized         = "unauthorized"
	CodeForbidden            = "forbidden"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeInternal             = "internal"
)

// statusClientClosed is the status of a request whose client went away
// before the answer (nginx's 499 "client closed request"): nobody reads it,
// and it must not count among the 5xx that a bug or a storage failure
// answers.
const statusClientClosed = 499

// errorBody is the JSON error object. Epoch, Seq and Watermark are set on
// drain refusals; Line and Column (1-based) on SQL errors.
type errorBody struct {
	Code      string  `json:"code"`
	Message   string  `json:"message"`
	Error     string  `json:"error"`
	Epoch     *uint64 `json:"epoch,omitempty"`
	Seq       *uint64 `json:"seq,omitempty"`
	Watermark *uint64 `json:"watermark,omitempty"`
	Horizon   *uint64 `json:"horizon,omitempty"`
	Line      int     `json:"line,omitempty"`
	Column    int     `json:"column,omitempty"`
}

// errorStatus is the one table from errors to responses: status and code.
// 4xx are client mistakes (never worth retrying as is), 503 is back-pressure
// or shutdown (retry after Retry-After), 500 a bug or storage failure; a
// request cancelled because its client went away gets statusClientClosed
// and no code.
func errorStatus(err error) (int, string) {
	switch {
	case errors.Is(err, feed.ErrTableNotFound):
		return http.StatusNotFound, CodeTableNotFound
	case errors.Is(err, feed.ErrSyncOff):
		return http.StatusConflict, CodeSyncOff
	case errors.Is(err, feed.ErrStaleEpoch):
		return http.StatusConflict, CodeStaleEpoch
	case errors.Is(err, feed.ErrCursorBeyondSequence):
		return http.StatusConflict, CodeCursorBeyondSequence
	case errors.Is(err, feed.ErrHistoryExpired):
		return http.StatusConflict, CodeHistoryExpired
	case errors.Is(err, feed.ErrInvalidRetention):
		return http.StatusBadRequest, CodeInvalidBody
	case errors.Is(err, feed.ErrUnknownColumn):
		return http.StatusBadRequest, CodeUnknownColumn
	case errors.Is(err, feed.ErrDuplicateColumn):
		return http.StatusBadRequest, CodeInvalidParameter
	case errors.Is(err, feed.ErrInvalidLimit):
		return http.StatusBadRequest, CodeInvalidLimit
	case errors.Is(err, feed.ErrInvalidCursor):
		return http.StatusBadRequest, CodeInvalidCursor
	case errors.Is(err, feed.ErrInvalidTableName):
		return http.StatusBadRequest, CodeInvalidTableName
	case errors.Is(err, feed.ErrInvalidName):
		return http.StatusBadRequest, CodeInvalidName
	case errors.Is(err, feed.ErrTableExists):
		return http.StatusConflict, CodeTableExists
	case errors.Is(err, feed.ErrColumnLimit):
		return http.StatusConflict, CodeColumnLimit
	case errors.Is(err, feed.ErrTableLimit):
		return http.StatusConflict, CodeTableLimit
	case errors.Is(err, feed.ErrTooManyConsumers):
		return http.StatusConflict, CodeTooManyConsumers
	case errors.Is(err, feed.ErrConsumerNotFound):
		return http.StatusNotFound, CodeConsumerNotFound
	case errors.Is(err, feed.ErrClosed), errors.Is(err, feed.ErrBusy):
		return http.StatusServiceUnavailable, CodeUnavailable
	case errors.Is(err, context.Canceled):
		return statusClientClosed, ""
	}
	return http.StatusInternalServerError, CodeInternal
}

// MaxErrorMessageBytes bounds the message of an error body: messages quote
// at most feed.MaxEchoBytes of any input, and this cuts whatever else a
// library's error might repeat (a JSON decoder naming an unknown field).
const MaxErrorMessageBytes = 1024

// capMessage cuts msg to MaxErrorMessageBytes at a rune boundary.
func capMessage(msg string) string {
	if len(msg) <= MaxErrorMessageBytes {
		return msg
	}
	cut := MaxErrorMessageBytes
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// writeErr maps err through errorStatus and writes the JSON error object.
func writeErr(w http.ResponseWriter, err error) {
	status, code := errorStatus(err)
	if status == statusClientClosed {
		w.WriteHeader(status)
		return
	}
	msg := capMessage(err.Error())
	body := errorBody{Code: code, Message: msg, Error: msg}
	var ref *feed.RefusalError
	if errors.As(err, &ref) {
		body.Epoch, body.Seq, body.Watermark = &ref.Status.Epoch, &ref.Status.Seq, &ref.Status.Watermark
		if errors.Is(err, feed.ErrHistoryExpired) {
			body.Horizon = &ref.Status.Horizon
		}
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, body)
}

// writeClientErr writes a 400 with the given code.
func writeClientErr(w http.ResponseWriter, code, msg string) {
	writeJSONErr(w, http.StatusBadRequest, code, msg)
}

// writeJSONErr writes the JSON error object with status and code.
func writeJSONErr(w http.ResponseWriter, status int, code, msg string) {
	msg = capMessage(msg)
	writeJSON(w, status, errorBody{Code: code, Message: msg, Error: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
