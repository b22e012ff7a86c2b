package feed

import (
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// DefaultMaxNameBytes is the default of Config.MaxNameBytes: the longest
// table, measurement, tag key, field key or consumer name in bytes.
const DefaultMaxNameBytes = 4096

// MaxNameBytesCeiling bounds Config.MaxNameBytes, and every other name
// limit of ingestd (ILP's key limit, the mirror's): no store holds longer
// names (badger's 65,000-byte keys hold a table and a consumer name);
// Open checks the limit against what its store holds
// (store.Limits.MaxNameBytes).
const MaxNameBytesCeiling = 32_000

// MaxEchoBytes is how many bytes of a client's input an error message
// quotes (QuoteInput); the rest is elided with its length, so an error body
// stays small whatever the input.
const MaxEchoBytes = 64

// ErrInvalidName is returned for a table, measurement, tag key, field key
// or consumer name that breaks a rule of CheckName (docs/contract.md#names).
var ErrInvalidName = errors.New("invalid name")

// Name rules, as NameError.Rule reports them.
const (
	RuleEmpty   = "empty"
	RuleUTF8    = "invalid_utf8"
	RuleControl = "control_character"
	RuleLength  = "too_long"
)

// NameError explains why a name was refused: what it names ("table",
// "tag key", …), the rule it breaks (one of the Rule constants) and, for
// RuleLength, the limit. It wraps ErrInvalidName, and ErrInvalidTableName
// when What is "table".
type NameError struct {
	What  string // what the name names: "table", "tag key", "field key", "consumer", "column"
	Name  string // the refused name as given (error messages quote at most MaxEchoBytes of it)
	Rule  string // the rule it breaks: RuleEmpty, RuleUTF8, RuleControl, RuleLength, or (CheckKey) RuleBackslash or RuleReserved
	Limit int    // for RuleLength, the limit in bytes; else 0
	// Flag is the flag that sets Limit ("" means --max-name-bytes).
	Flag string
}

// Error names the rule broken and quotes the name (QuoteInput).
func (e *NameError) Error() string {
	switch e.Rule {
	case RuleEmpty:
		return fmt.Sprintf("%v: %s is empty", ErrInvalidName, e.What)
	case RuleUTF8:
		return fmt.Sprintf("%v: %s %s is not valid UTF-8", ErrInvalidName, e.What, QuoteInput(e.Name))
	case RuleControl:
		return fmt.Sprintf("%v: %s %s contains a control character (NUL, C0, DEL or C1)", ErrInvalidName, e.What, QuoteInput(e.Name))
	case RuleBackslash:
		return fmt.Sprintf("%v: %s %s ends with a backslash", ErrInvalidName, e.What, QuoteInput(e.Name))
	case RuleReserved:
		return fmt.Sprintf("%v: %s %s is reserved (the x_ prefix and \"time\" are engine-owned)", ErrInvalidName, e.What, QuoteInput(e.Name))
	}
	flag := e.Flag
	if flag == "" {
		flag = "--max-name-bytes"
	}
	return fmt.Sprintf("%v: %s %s is %d bytes, longer than the limit of %d (%s)",
		ErrInvalidName, e.What, QuoteInput(e.Name), len(e.Name), e.Limit, flag)
}

// Unwrap returns ErrInvalidName, and ErrInvalidTableName too for a table.
func (e *NameError) Unwrap() []error {
	if e.What == "table" {
		return []error{ErrInvalidName, ErrInvalidTableName}
	}
	return []error{ErrInvalidName}
}

// CheckName reports whether name may become part of a storage key
// (docs/contract.md#names): not empty, valid UTF-8, no control character (unicode.IsControl:
// NUL and the rest of C0, DEL, C1) and at most maxBytes bytes. what names
// the kind of name in the error. The result is a *NameError or nil. The
// store's key layout relies on it: a name never holds the 0x00 that ends a
// table name in a consumer key, so no two names share a key prefix.
func CheckName(what, name string, maxBytes int) error {
	switch {
	case name == "":
		return &NameError{What: what, Rule: RuleEmpty}
	case len(name) > maxBytes:
		return &NameError{What: what, Name: name, Rule: RuleLength, Limit: maxBytes}
	}
	for i := 0; i < len(name); {
		if c := name[i]; c < utf8.RuneSelf { // ASCII fast path: C0 and DEL
			if c < 0x20 || c == 0x7f {
				return &NameError{What: what, Name: name, Rule: RuleControl}
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(name[i:])
		if r == utf8.RuneError && n == 1 {
			return &NameError{What: what, Name: name, Rule: RuleUTF8}
		}
		if unicode.IsControl(r) {
			return &NameError{What: what, Name: name, Rule: RuleControl}
		}
		i += n
	}
	return nil
}

// QuoteInput returns s as a Go-quoted string for an error message, cut to
// its first MaxEchoBytes bytes (at a rune boundary) and marked with "…"
// when longer, so that an error never repeats a large input.
func QuoteInput(s string) string {
	if len(s) <= MaxEchoBytes {
		return strconv.Quote(s)
	}
	cut := MaxEchoBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
}
