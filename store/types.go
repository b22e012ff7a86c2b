package store

import (
	"encoding/binary"
	"math"
	"time"
)

// Kind is a column's type. Tag columns hold strings; field columns one of the
// five ILP field types.
type Kind uint8

// The column kinds. The zero Kind is invalid.
const (
	KindTag Kind = iota + 1
	KindFloat
	KindInt
	KindUint
	KindString
	KindBool
)

// String returns the kind's name as SHOW COLUMNS reports it.
func (k Kind) String() string {
	switch k {
	case KindTag:
		return "tag"
	case KindFloat:
		return "float"
	case KindInt:
		return "integer"
	case KindUint:
		return "unsigned"
	case KindString:
		return "string"
	case KindBool:
		return "boolean"
	}
	return "invalid"
}

// Value is one typed value. Num holds the bits of a number (int64 as two's
// complement, float64 as IEEE 754 bits, bool as 0 or 1); Str holds a string
// or tag value. The zero Value (Kind 0) means absent.
type Value struct {
	// Kind is the value's type; 0 means absent.
	Kind Kind
	// Num holds a number's bits (see Int, Float, Bool).
	Num uint64
	// Str holds a string field's or a tag's value.
	Str string
}

// Int returns the value as int64.
func (v Value) Int() int64 { return int64(v.Num) }

// Float returns the value as float64.
func (v Value) Float() float64 { return math.Float64frombits(v.Num) }

// Bool returns the value as bool.
func (v Value) Bool() bool { return v.Num != 0 }

// Field is a value in a table column, identified by the column's position in
// the table's schema.
type Field struct {
	// Col is the column's position in the table's schema.
	Col uint32
	// Value is the column's value.
	Value Value
}

// SameColumns reports whether a and b list the same columns with the same
// kinds in the same order, whatever their values: two fragments of one
// shape, which an encoding may store once for both.
func SameColumns(a, b []Field) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Col != b[i].Col || a[i].Value.Kind != b[i].Value.Kind {
			return false
		}
	}
	return true
}

// Column is one column of a table's schema. Position 0 is always "time" with
// Kind 0; tags and fields follow in order of first appearance.
type Column struct {
	// Name is the tag key or field key (as written, checked by
	// feed.CheckName).
	Name string
	// Kind is KindTag for a tag, the field's type for a field, 0 for time.
	Kind Kind
}

// Fragment is what one ILP line carries: field values at (series, ts).
// Fields are in any order, each column at most once.
type Fragment struct {
	// Series is the series id in the table's dictionary (Series.ID).
	Series uint64
	// Time is the point's time in nanoseconds since the Unix epoch.
	Time int64
	// Fields are the line's field values.
	Fields []Field
}

// Series is one entry of a table's series dictionary: the tag set (as tag
// columns and their values, sorted by tag key) behind a series id.
type Series struct {
	// ID is the series id, from 1 up within a table instance.
	ID uint64
	// Tags are the tag columns and values, sorted by tag key.
	Tags []Field
}

// SeriesKey is a series to number (Shared.SeriesIDs): its canonical tag
// set as a key, and the same tag set as columns and values.
type SeriesKey struct {
	// Key is the canonical tag set: tag keys sorted, escaped as in line
	// protocol ("host=a,region=eu").
	Key string
	// Tags are the tag columns and values, sorted by tag key.
	Tags []Field
}

// TableMeta is a table's durable metadata. A dropped table keeps a tombstone
// (Dropped set, ID 0) so that a re-created table resumes above its epoch and
// sequence. Like every type of this package it has no encoding: each
// backend stores it in a format of its own.
type TableMeta struct {
	// Name is the table's name (the measurement).
	Name string
	// ID is the instance id (Tables.NewTableID); 0 in a tombstone.
	ID uint64
	// Sync tells whether the table's sync is ON (docs/contract.md#sync-off-invisible).
	Sync bool
	// Epoch is the table's feed epoch (docs/contract.md#epochs).
	Epoch uint64
	// Seq is the x_seq floor of the name: no number at or below it is
	// assigned again (the backend's lease, or a tombstone's last number).
	Seq uint64
	// Columns is the schema: "time" at position 0, then tags and fields
	// in order of first appearance (a column's position never changes).
	Columns []Column
	// Dropped marks a tombstone.
	Dropped bool
	// Retention, when set, is the table's own retention in nanoseconds
	// (0: forever); nil follows the server's default.
	Retention *int64

	// ColumnsSince[i] is the table's highest x_seq when Columns[i] was
	// added: every fragment carrying it has a higher x_seq
	// (docs/contract.md#schema-changes). Shorter than Columns in a table
	// written before it was kept: the columns past it count as added at 0.
	ColumnsSince []uint64
}

// TableCommit is what one commit writes to one table instance.
type TableCommit struct {
	// TableID is the instance the fragments belong to.
	TableID uint64
	// Meta, when non-nil, is written first (new columns, a new table).
	Meta *TableMeta
	// NewSeries are dictionary entries first used by these fragments.
	NewSeries []Series
	// Sync asks the backend to assign x_seq numbers to the fragments (the
	// table's sync is ON); without it they form an unsynced block.
	Sync bool
	// FirstSeq is set by Appender.Append: the x_seq of Fragments[0], the
	// rest following consecutively; 0 for an unsynced block.
	FirstSeq  uint64
	Fragments []Fragment
	// Writes, ascending, are the indexes in Fragments at which the
	// fragments of another write (request, TCP batch) of the group commit
	// begin; nil: one write. A hint a backend may lay its data out by
	// (store/rowengine keeps the in-order points of two writes in two series
	// runs, so that a write landing later between them needs no
	// point-index look-up) and may ignore (memstore); it changes no
	// read.
	Writes []int
	// CommitTime is when the server commits the block (Unix nanoseconds).
	CommitTime int64
}

// Consumer is a named consumer's acknowledged position in a table's feed:
// it has applied everything up to Position in Epoch, as of LastSeen (Unix
// nanoseconds).
type Consumer struct {
	// Name is the consumer's name (feed.CheckName).
	Name string
	// Epoch is the epoch its Position belongs to.
	Epoch uint64
	// Position is the highest x_seq it has acknowledged.
	Position uint64
	// LastSeen is when it last drained, in Unix nanoseconds.
	LastSeen int64
	// Owner is the name of the token that created it, which alone (or an
	// admin token) may move or delete it; "" when it was created without
	// access control (or before consumers had owners).
	Owner string
}

// Row is one drained fragment delivered as the coalesced row at its
// (series, ts). Fields is valid until the visit function returns.
type Row struct {
	// Seq is the fragment's x_seq (0 in an unsynced block).
	Seq uint64
	// Series is the series id.
	Series uint64
	// Time is the point's time in Unix nanoseconds.
	Time int64
	// Fields are the coalesced row's values: per column, the latest
	// fragment at the point that set it.
	Fields []Field
	// Update is set by ReadSeq when the fragment changed a point an older
	// fragment created (docs/contract.md#operation): the point holds
	// several fragments and this one is not the oldest. False for the
	// fragment that created its point (an insert), and in ReadRows.
	Update bool
}

// Operation selects drained fragments by what they did to their point
// (Row.Update).
type Operation uint8

// The operations a SeqFilter selects; OpAny (zero) selects both.
const (
	OpAny Operation = iota
	OpInsert
	OpUpdate
)

// SeqFilter narrows a ReadSeq to the fragments a filtered drain returns
// (docs/contract.md#filters). Every condition set must hold (AND); the
// zero SeqFilter admits every fragment. A backend checks Series and the
// time range before it decodes a fragment's fields.
type SeqFilter struct {
	// Series, when non-nil, admits a fragment of series id s only when
	// s < len(Series) and Series[s].
	Series []bool
	// Start and End, when HasStart or HasEnd, bound the point's time
	// (Unix nanoseconds): Start <= Time < End.
	Start, End       int64
	HasStart, HasEnd bool
	// Has lists columns the coalesced row must set (field presence).
	Has []uint32
	// Op admits only inserts or only updates (OpAny: both).
	Op Operation
	// MaxScan, when positive, bounds the fragments the read examines
	// (returned or not): the read stops before the one past it.
	MaxScan int
}

// Admits reports whether a fragment of series sid at time ts passes the
// filter's series and time conditions (those checked before decoding).
func (f *SeqFilter) Admits(sid uint64, ts int64) bool {
	if f.Series != nil && (sid >= uint64(len(f.Series)) || !f.Series[sid]) {
		return false
	}
	return (!f.HasStart || ts >= f.Start) && (!f.HasEnd || ts < f.End)
}

// Keeps reports whether a row passes the filter's operation and
// field-presence conditions (those that need the coalesced row).
func (f *SeqFilter) Keeps(r *Row) bool {
	switch {
	case f.Op == OpInsert && r.Update, f.Op == OpUpdate && !r.Update:
		return false
	}
next:
	for _, c := range f.Has {
		for _, fl := range r.Fields {
			if fl.Col == c {
				continue next
			}
		}
		return false
	}
	return true
}

// SweepResult is what one SweepBefore batch did.
type SweepResult struct {
	// Removed is how many fragments the batch removed.
	Removed int
	// More is true when the batch stopped at its bound with aged
	// fragments left: call again.
	More bool
	// Horizon is the instance's history horizon after the batch (raised
	// above every synced fragment it removed).
	Horizon uint64
	// Oldest is the lowest time (Unix nanoseconds) of a fragment the table
	// still holds, valid only when More is false and HasOldest is true
	// (the table holds a fragment).
	Oldest    int64
	HasOldest bool
}

// TableStats is what one table instance holds in the store, as counted by
// TableStats (fragments, rows and bytes per table).
type TableStats struct {
	// Fragments is the number of stored fragments, synced and unsynced
	// (one per accepted point write; exact).
	Fragments uint64
	// Overwritten is the number of points holding more than one fragment
	// (the overwrite markers; exact).
	Overwritten uint64
	// Series is the number of distinct tag sets (exact).
	Series uint64
	// Bytes is the backend's estimate of what the table's data takes in
	// it, each backend saying how it counts (store/rowengine: keys and values
	// before compression, not the superseded data its files hold until
	// compaction; memstore: the fragments' encoded size).
	Bytes uint64
	// ComputedAt is when the figures were counted (a backend may keep
	// them for an age it documents).
	ComputedAt time.Time
}

// RowsEstimate is the number of distinct points (what a query counting rows
// would answer), estimated as Fragments - Overwritten: exact unless a
// point was written three times or more, an upper bound otherwise.
func (s TableStats) RowsEstimate() uint64 { return s.Fragments - min(s.Overwritten, s.Fragments) }

// Limits are the largest things a backend stores (Backend.Limits). The
// feed checks its configuration against them when it opens the backend
// and refuses, before the backend sees it, a point or a column that
// would exceed them (docs/contract.md#names).
type Limits struct {
	// MaxBlockBytes bounds one table's block of one commit, its fragments
	// counted with FragmentBytes: the feed cuts its group commits so that
	// a block stays below it (--feed-max-group-bytes plus one fragment).
	MaxBlockBytes int
	// MaxFragmentBytes bounds one fragment, counted with FragmentBytes.
	MaxFragmentBytes int
	// MaxMetaBytes bounds a table's schema, its columns counted with
	// ColumnBytes.
	MaxMetaBytes int
	// MaxNameBytes bounds a table, column or consumer name
	// (--max-name-bytes may not exceed it).
	MaxNameBytes int
}

// FragmentBytes bounds the size of a fragment with fields field values
// holding strBytes bytes of strings, as every backend encodes it (a
// uvarint series id, a varint time and field count, and per field a
// uvarint column, a kind byte and a number or a uvarint length and the
// string): the unit of Limits.MaxBlockBytes and MaxFragmentBytes.
func FragmentBytes(fields, strBytes int) int {
	return 3*binary.MaxVarintLen64 + 8 + fields*(2*binary.MaxVarintLen64+1) + strBytes
}

// ColumnBytes bounds what a column named name adds to a table's stored
// schema (the unit of Limits.MaxMetaBytes): JSON escapes a byte of a name
// to at most 6 (a name holds no control character), plus its kind, the
// x_seq it was added at and the punctuation.
func ColumnBytes(name string) int { return 6*len(name) + 64 }

// RowCursor is an opaque position in a table instance's rows for
// ReadRows, issued by the backend that reads them: callers store it and
// hand it back byte for byte, never look inside. nil (or empty) is the
// start. A backend refuses a cursor it cannot decode with
// ErrInvalidCursor.
type RowCursor []byte
