package feed

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// The rules every write path applies to a point before it is stored
// (docs/security.md#write-validation): /write and /api/v2/write, ILP over
// TCP, SQL INSERT, and so a mirror writing to ingestd, accept the same
// set. The sequencer applies them to every point it is handed, whoever
// built it (Sequencer.Submit); ilp's parser applies the same functions
// first, to report a bad line with its column.

// MaxTime is the latest time of a point, in Unix nanoseconds: 2^63 − 2.
// MinTime = −MaxTime is the earliest. A copy by time range reads
// [start, end) with end at most 2^63 − 1, so a point at 2^63 − 1 could be
// stored but never read back; the range is kept symmetric.
const (
	MaxTime = math.MaxInt64 - 1
	MinTime = -MaxTime
)

// DefaultMaxStringBytes is the default of Config.MaxStringBytes: the
// longest tag value or string field in bytes (InfluxDB's limit).
const DefaultMaxStringBytes = 1 << 20

// ErrTimeRange is wrapped by the error of a time outside MinTime..MaxTime.
var ErrTimeRange = errors.New("time out of range")

// ErrInvalidValue is wrapped by the *ValueError of a tag value or field
// value that breaks a rule of CheckTagValue or CheckFieldValue.
var ErrInvalidValue = errors.New("invalid value")

// More rules, as NameError.Rule and ValueError.Rule report them.
const (
	// RuleBackslash: the name or tag value ends with a backslash, which
	// line protocol cannot carry there (it would escape the separator
	// that follows), so no line could write it and no lp page return it.
	RuleBackslash = "trailing_backslash"
	// RuleReserved: a tag or field key named "time" or starting with x_
	// (engine-owned).
	RuleReserved = "reserved"
	// RuleNotFinite: a float field that is NaN or ±Inf.
	RuleNotFinite = "not_finite"
)

// ValueError explains why a tag value or field value was refused. It
// wraps ErrInvalidValue.
type ValueError struct {
	What  string // "tag value" or "string field", "float field"
	Key   string // the tag or field key
	Rule  string // RuleEmpty, RuleLength, RuleUTF8, RuleControl, RuleBackslash or RuleNotFinite
	Len   int    // the value's length in bytes (RuleLength)
	Limit int    // for RuleLength, the limit in bytes; else 0
}

// Error names the rule broken and the key (QuoteInput); it never repeats
// the value.
func (e *ValueError) Error() string {
	k := QuoteInput(e.Key)
	switch e.Rule {
	case RuleEmpty:
		return fmt.Sprintf("%v: %s of %s is empty", ErrInvalidValue, e.What, k)
	case RuleLength:
		return fmt.Sprintf("%v: %s of %s is %d bytes, longer than the limit of %d (--ilp-max-string-bytes)", ErrInvalidValue, e.What, k, e.Len, e.Limit)
	case RuleUTF8:
		return fmt.Sprintf("%v: %s of %s is not valid UTF-8", ErrInvalidValue, e.What, k)
	case RuleControl:
		return fmt.Sprintf("%v: %s of %s contains a control character (NUL, C0 or DEL)", ErrInvalidValue, e.What, k)
	case RuleBackslash:
		return fmt.Sprintf("%v: %s of %s ends with a backslash", ErrInvalidValue, e.What, k)
	}
	return fmt.Sprintf("%v: %s of %s is NaN or infinite", ErrInvalidValue, e.What, k)
}

// Unwrap returns ErrInvalidValue.
func (e *ValueError) Unwrap() error { return ErrInvalidValue }

// CheckTime returns nil when ns is within MinTime..MaxTime, else an error
// wrapping ErrTimeRange.
func CheckTime(ns int64) error {
	if ns > MaxTime || ns < MinTime {
		return fmt.Errorf("%w: %d is outside ±%d ns", ErrTimeRange, ns, int64(MaxTime))
	}
	return nil
}

// CheckKey applies CheckName's rules to a measurement, tag key or field
// key (what: "measurement", "tag key", "field key"), and two more that
// line protocol imposes: it does not end with a backslash, and a tag or
// field key is not "time" and does not start with x_. The result is a
// *NameError (wrapping ErrInvalidName) or nil.
func CheckKey(what, name string, maxBytes int) error {
	if err := CheckName(what, name, maxBytes); err != nil {
		return err
	}
	if strings.HasSuffix(name, `\`) {
		return &NameError{What: what, Name: name, Rule: RuleBackslash}
	}
	if what != "measurement" && (strings.HasPrefix(name, "x_") || name == "time") {
		return &NameError{What: what, Name: name, Rule: RuleReserved}
	}
	return nil
}

// CheckTagValue checks the value v of tag key: not empty (an empty tag is
// no tag), at most maxBytes bytes, valid UTF-8, no C0 control character or
// DEL (line protocol refuses them in a tag value; C1 characters pass), not
// ending with a backslash. The result is a *ValueError or nil.
func CheckTagValue(key, v string, maxBytes int) error {
	bad := func(rule string) error {
		return &ValueError{What: "tag value", Key: key, Rule: rule, Len: len(v), Limit: maxBytes}
	}
	switch {
	case v == "":
		return bad(RuleEmpty)
	case len(v) > maxBytes:
		return bad(RuleLength)
	case v[len(v)-1] == '\\':
		return bad(RuleBackslash)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f {
			return bad(RuleControl)
		}
	}
	if !utf8.ValidString(v) {
		return bad(RuleUTF8)
	}
	return nil
}

// CheckFieldValue checks the value v of field key: a string is at most
// maxBytes bytes of valid UTF-8 (any character, a control one included),
// a float is finite. Other kinds always pass. The result is a *ValueError
// or nil.
func CheckFieldValue(key string, v Value, maxBytes int) error {
	switch v.Kind {
	case KindString:
		if len(v.Str) > maxBytes {
			return &ValueError{What: "string field", Key: key, Rule: RuleLength, Len: len(v.Str), Limit: maxBytes}
		}
		if !utf8.ValidString(v.Str) {
			return &ValueError{What: "string field", Key: key, Rule: RuleUTF8}
		}
	case KindFloat:
		if f := math.Float64frombits(v.Num); math.IsNaN(f) || math.IsInf(f, 0) {
			return &ValueError{What: "float field", Key: key, Rule: RuleNotFinite}
		}
	}
	return nil
}

// PointLimits are the limits CheckPoint applies.
type PointLimits struct {
	// MaxNameBytes bounds the measurement and every key
	// (Config.MaxNameBytes).
	MaxNameBytes int
	// MaxStringBytes bounds every tag value and string field
	// (Config.MaxStringBytes).
	MaxStringBytes int
}

// ErrMalformedPoint is returned by CheckPoint for a point no parser
// builds: tags not sorted by key or named twice, a field named twice, a
// key both a tag and a field, no field.
var ErrMalformedPoint = errors.New("malformed point")

// CheckPoint applies every rule to p: CheckKey to its measurement, tag
// keys and field keys, CheckTagValue to its tag values, CheckFieldValue to
// its field values, CheckTime to its time, and the shape rules
// (ErrMalformedPoint). It returns the first rule p breaks: a *NameError, a
// *ValueError, or an error wrapping ErrTimeRange or ErrMalformedPoint. It
// is the definition of what ingestd stores; the sequencer applies the
// same checks, each once per series and column it learns
// (Sequencer.checkPoint).
func CheckPoint(p *Point, lim PointLimits) error {
	if err := CheckKey("measurement", p.Table, lim.MaxNameBytes); err != nil {
		return err
	}
	if err := CheckTime(p.Time); err != nil {
		return err
	}
	for i, t := range p.Tags {
		if i > 0 && p.Tags[i-1].Key >= t.Key {
			return fmt.Errorf("%w: tags not sorted by key, or %s twice", ErrMalformedPoint, QuoteInput(t.Key))
		}
		if err := CheckKey("tag key", t.Key, lim.MaxNameBytes); err != nil {
			return err
		}
		if err := CheckTagValue(t.Key, t.Value, lim.MaxStringBytes); err != nil {
			return err
		}
	}
	if len(p.Fields) == 0 {
		return fmt.Errorf("%w: no field", ErrMalformedPoint)
	}
	for i, f := range p.Fields {
		if err := CheckKey("field key", f.Key, lim.MaxNameBytes); err != nil {
			return err
		}
		if err := CheckFieldValue(f.Key, f.Value, lim.MaxStringBytes); err != nil {
			return err
		}
		for _, g := range p.Fields[:i] {
			if g.Key == f.Key {
				return fmt.Errorf("%w: field %s twice", ErrMalformedPoint, QuoteInput(f.Key))
			}
		}
		for _, t := range p.Tags {
			if t.Key == f.Key {
				return fmt.Errorf("%w: %s is a tag and a field", ErrMalformedPoint, QuoteInput(f.Key))
			}
		}
	}
	return nil
}
