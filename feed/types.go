package feed

import (
	"time"

	"github.com/ingestd/ingestd/store"
)

// Value is a typed value (see store.Value); an alias so that callers never
// import store.
type Value = store.Value

// Kind is a column's type (see store.Kind).
type Kind = store.Kind

// The column kinds.
const (
	KindTag    = store.KindTag
	KindFloat  = store.KindFloat
	KindInt    = store.KindInt
	KindUint   = store.KindUint
	KindString = store.KindString
	KindBool   = store.KindBool
	// KindTime is the kind of the time column (Num holds int64 nanoseconds).
	KindTime Kind = 64
	// KindSeq is the kind of the x_seq column in drains (Num holds it).
	KindSeq Kind = 65
)

// Tag is one tag of a point.
type Tag struct {
	Key   string // the tag key (a column of kind KindTag)
	Value string // the tag value, unescaped
}

// PointField is one field of a point.
type PointField struct {
	Key   string // the field key (a column of the value's kind)
	Value Value  // the typed field value
}

// Point is one parsed line as the sequencer takes it (docs/contract.md#terms).
type Point struct {
	// Table is the measurement.
	Table string
	// Series is the canonical tag set: tags sorted by key, rendered as
	// escaped ILP ("k=v,k2=v2"); "" for a line without tags. Two points are
	// in the same series exactly when their Series are equal.
	Series string
	// Tags are sorted by key, without duplicates.
	Tags []Tag
	// Fields hold at most one value per key.
	Fields []PointField
	// Time is nanoseconds since the Unix epoch.
	Time int64
	// Line is the point's 1-based line number in its request or connection,
	// for error messages.
	Line int
}

// Batch is what a listener hands the sequencer: points in arrival order.
type Batch struct {
	// Points are the batch's points in arrival order; the sequencer reads
	// them until the batch's Wait returns.
	Points []Point
	// NoCreate rejects the points of a table that does not exist
	// (ErrTableNotFound) instead of creating it, as a SQL INSERT must: the
	// table may be dropped between the INSERT's checks and its commit.
	NoCreate bool
}

// Result tells how a batch was applied: Accepted points are durable, and
// each rejected point has a RejectError in Rejected (in line order).
type Result struct {
	Accepted int            // points durably committed
	Rejected []*RejectError // points dropped, one error each, in line order
}

// Column is one column of a table as SHOW COLUMNS and drains report it.
type Column struct {
	Name string // the column name: "time", a tag or field key, or "x_seq" in drains
	Kind Kind   // KindTag, a field kind, KindTime or KindSeq
}

// SyncStatus is a table's feed state (SHOW SYNC).
type SyncStatus struct {
	Enabled   bool   // sync is ON: writes get an x_seq and the table can be drained
	Epoch     uint64 // the feed's epoch (0 until sync is first enabled; docs/contract.md#epochs)
	Seq       uint64 // highest x_seq handed out
	Watermark uint64 // highest x_seq a drain may return now
	// Horizon is the lowest x_seq still drainable (docs/contract.md#horizon): a drain with
	// after < Horizon-1 is refused with ErrHistoryExpired. 1 while nothing
	// of the table's history was trimmed or removed.
	Horizon uint64
}

// TableInfo describes a table (list and SHOW COLUMNS).
type TableInfo struct {
	Name string     // the table's name
	Sync SyncStatus // the table's sync status
	// Retention is the retention in force (the table's own, else the
	// default; 0: forever) and OwnRetention whether the table has its own.
	Retention    time.Duration
	OwnRetention bool
	Columns      []Column // "time" first, then tags and fields in order of first appearance
	// Points counts the points committed to the table since the process
	// started (TRUNCATE keeps counting): the status page's ingest rate.
	Points uint64
}
