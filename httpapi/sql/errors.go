package sql

import (
	"fmt"
	"strconv"

	"github.com/ingestd/ingestd/feed"
)

// Pos is a position in a statement: 1-based line, and 1-based column
// counted in characters (runes) within the line.
type Pos struct {
	Line   int // 1-based line
	Column int // 1-based column in runes within the line
}

// Error is every error Parse returns: where (Pos) and what went wrong.
// For a syntax error Expected says what could stand at Pos and Found what
// does; otherwise Msg says what is wrong with the token at Pos (a reserved
// column written, x_seq outside a drain, a number out of range).
// LimitRequired marks a SELECT without LIMIT (the seed's rule); Limit
// names the Limits bound the statement went past ("insert_rows" or
// "columns"), "" otherwise.
type Error struct {
	Pos           Pos    // where the error is
	Expected      string // syntax errors: what could stand at Pos
	Found         string // syntax errors: what stands at Pos
	Msg           string // other errors: what is wrong with the token at Pos
	LimitRequired bool   // a SELECT without LIMIT
	Limit         string // the Limits bound gone past: "insert_rows", "columns", or ""
}

// Error returns "error at line L, column C: …" with Msg, or with what was
// expected and found.
func (e *Error) Error() string {
	if e.Msg != "" {
		return fmt.Sprintf("error at line %d, column %d: %s", e.Pos.Line, e.Pos.Column, e.Msg)
	}
	s := fmt.Sprintf("syntax error at line %d, column %d: expected %s", e.Pos.Line, e.Pos.Column, e.Expected)
	if e.Found != "" && e.Found != "end of statement" {
		s += ", found " + e.Found
	}
	return s
}

// Errorf returns an *Error at pos with a formatted message; the executor
// uses it for what only the table's schema can tell (an unknown column, a
// value of the wrong type), so that those errors carry a position too.
func Errorf(pos Pos, format string, args ...any) *Error {
	return &Error{Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

func errAt(pos Pos, msg string) *Error { return &Error{Pos: pos, Msg: msg} }

func expected(pos Pos, what, found string) *Error {
	return &Error{Pos: pos, Expected: what, Found: found}
}

// quote quotes a piece of the statement for a message, cut as
// feed.QuoteInput cuts it.
func quote(s string) string { return feed.QuoteInput(s) }

func itoa(n int) string { return strconv.Itoa(n) }
