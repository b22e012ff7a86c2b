package ilp

import (
	"errors"
	"fmt"
)

// Rejection reasons, the closed label set of
// ingestd_ilp_rejected_lines_total{reason}.
const (
	ReasonSyntax        = "syntax"
	ReasonLineTooLong   = "line_too_long"
	ReasonKeyTooLong    = "key_too_long"
	ReasonStringTooLong = "string_too_long"
	ReasonReservedKey   = "reserved_key"
	ReasonDuplicateTag  = "duplicate_tag"
	ReasonFieldType     = "field_type_conflict"
	ReasonTagField      = "tag_field_conflict"
	ReasonTimestamp     = "timestamp_range"
	ReasonInvalidUTF8   = "invalid_utf8"
	ReasonNoFields      = "no_fields"
	ReasonColumnLimit   = "column_limit"
	ReasonSeriesLimit   = "series_limit"
	ReasonInvalidTable  = "invalid_table"
	ReasonTableLimit    = "table_limit"
	ReasonInvalidName   = "invalid_name"
	// ReasonForbidden is a TCP line for a table the connection's grant
	// may not write (docs/operations.md#scopes).
	ReasonForbidden = "forbidden"
	// ReasonBeyondRetention: older than the table's retention.
	ReasonBeyondRetention = "beyond_retention"
	// ReasonInvalidValue: a tag or field value the sequencer refused
	// (feed.ErrInvalidValue); the parser refuses such lines first.
	ReasonInvalidValue = "invalid_value"
)

var reasons = []string{
	ReasonSyntax, ReasonLineTooLong, ReasonKeyTooLong, ReasonStringTooLong, ReasonReservedKey,
	ReasonDuplicateTag, ReasonFieldType, ReasonTagField, ReasonTimestamp, ReasonInvalidUTF8,
	ReasonNoFields, ReasonColumnLimit, ReasonSeriesLimit, ReasonInvalidTable, ReasonTableLimit,
	ReasonInvalidName, ReasonForbidden, ReasonBeyondRetention, ReasonInvalidValue,
}

var (
	// ErrUnknownPrecision is returned by ParsePrecision.
	ErrUnknownPrecision = errors.New("ilp: unknown precision")
)

// ParseError is a rejected line: where (1-based line, 1-based byte column;
// 0 when the whole line is at fault), why (Reason, one of the Reason
// constants) and what (Err).
type ParseError struct {
	Line   int    // 1-based line in the request body or connection
	Column int    // 1-based byte column in the line; 0: the whole line
	Reason string // one of the Reason constants (the rejection metric's label)
	Err    error  // what is wrong
}

// Error returns "line L, column C: <Err>" (without the column when 0).
func (e *ParseError) Error() string {
	if e.Column > 0 {
		return fmt.Sprintf("line %d, column %d: %v", e.Line, e.Column, e.Err)
	}
	return fmt.Sprintf("line %d: %v", e.Line, e.Err)
}

// Unwrap returns Err.
func (e *ParseError) Unwrap() error { return e.Err }
