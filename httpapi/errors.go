package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"unicode/utf8"

	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/httpapi/wire"
)

// errResponseBudget is returned when a page found no room in the response
// budget (--http-max-response-bytes-inflight) within responseBudgetWait.
var errResponseBudget = errors.New("httpapi: too many response bytes in flight (--http-max-response-bytes-inflight); retry later")

// errSQLBudget is returned when a SQL statement found no room in
// --sql-max-inflight-bytes within responseBudgetWait.
var errSQLBudget = errors.New("httpapi: too many SQL statement bytes in flight (--sql-max-inflight-bytes); retry later")

// statusClientClosed is the status of a request whose client went away
// before the answer (nginx's 499 "client closed request"): nobody reads it,
// and it must not count among the 5xx that a bug or a storage failure
// answers.
const statusClientClosed = 499

// errorStatus is the one table from errors to responses: status and code.
// 4xx are client mistakes (never worth retrying as is), 503 is back-pressure
// or shutdown (retry after Retry-After), 500 a bug or storage failure; a
// request cancelled because its client went away gets statusClientClosed
// and no code.
func errorStatus(err error) (int, string) {
	switch {
	case errors.Is(err, feed.ErrTableNotFound):
		return http.StatusNotFound, wire.CodeTableNotFound
	case errors.Is(err, feed.ErrSyncOff):
		return http.StatusConflict, wire.CodeSyncOff
	case errors.Is(err, feed.ErrStaleEpoch):
		return http.StatusConflict, wire.CodeStaleEpoch
	case errors.Is(err, feed.ErrCursorBeyondSequence):
		return http.StatusConflict, wire.CodeCursorBeyondSequence
	case errors.Is(err, feed.ErrHistoryExpired):
		return http.StatusConflict, wire.CodeHistoryExpired
	case errors.Is(err, feed.ErrInvalidRetention):
		return http.StatusBadRequest, wire.CodeInvalidBody
	case errors.Is(err, feed.ErrUnknownColumn):
		return http.StatusBadRequest, wire.CodeUnknownColumn
	case errors.Is(err, feed.ErrInvalidFilter):
		return http.StatusBadRequest, wire.CodeInvalidFilter
	case errors.Is(err, feed.ErrFilterLimit):
		return http.StatusBadRequest, wire.CodeFilterLimit
	case errors.Is(err, feed.ErrDuplicateColumn):
		return http.StatusBadRequest, wire.CodeInvalidParameter
	case errors.Is(err, feed.ErrInvalidLimit):
		return http.StatusBadRequest, wire.CodeInvalidLimit
	case errors.Is(err, feed.ErrInvalidCursor):
		return http.StatusBadRequest, wire.CodeInvalidCursor
	case errors.Is(err, feed.ErrInvalidTableName):
		return http.StatusBadRequest, wire.CodeInvalidTableName
	case errors.Is(err, feed.ErrInvalidName):
		return http.StatusBadRequest, wire.CodeInvalidName
	case errors.Is(err, feed.ErrTableExists):
		return http.StatusConflict, wire.CodeTableExists
	case errors.Is(err, feed.ErrColumnLimit):
		return http.StatusConflict, wire.CodeColumnLimit
	case errors.Is(err, feed.ErrTableLimit):
		return http.StatusConflict, wire.CodeTableLimit
	case errors.Is(err, feed.ErrTooManyConsumers):
		return http.StatusConflict, wire.CodeTooManyConsumers
	case errors.Is(err, feed.ErrConsumerOwned):
		return http.StatusForbidden, wire.CodeForbidden
	case errors.Is(err, feed.ErrConsumerNotFound):
		return http.StatusNotFound, wire.CodeConsumerNotFound
	case errors.Is(err, feed.ErrNotServed):
		return http.StatusMisdirectedRequest, wire.CodeNotServed
	case errors.Is(err, feed.ErrClosed), errors.Is(err, feed.ErrBusy), errors.Is(err, feed.ErrTableChanged), errors.Is(err, feed.ErrUnavailable),
		errors.Is(err, errResponseBudget), errors.Is(err, errSQLBudget):
		return http.StatusServiceUnavailable, wire.CodeUnavailable
	case errors.Is(err, context.Canceled):
		return statusClientClosed, ""
	}
	return http.StatusInternalServerError, wire.CodeInternal
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
	body := wire.ErrorBody{Code: code, Message: msg, Error: msg}
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
	writeJSON(w, status, wire.ErrorBody{Code: code, Message: msg, Error: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
