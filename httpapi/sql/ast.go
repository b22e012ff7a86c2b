package sql

import "github.com/ingestd/ingestd/feed"

// Statement is one parsed statement: *CreateTable, *AlterSync, *ShowSync,
// *ShowColumns, *ShowTables, *Truncate, *DropTable, *Insert or *Select.
type Statement interface {
	// Read reports whether the statement only reads (SELECT, SHOW), so
	// that GET may carry it.
	Read() bool
}

// Name is an identifier (a table or column name) and where it stands.
type Name struct {
	Name string // the name, unquoted and unescaped
	Pos  Pos    // where it starts in the statement
}

// CreateTable is CREATE TABLE [IF NOT EXISTS] t [(col TYPE, …)] [WITH (SYNC)].
// Columns hold the declared tags and fields in order; a declared
// "time TIMESTAMP" is the implicit time column and is left out.
type CreateTable struct {
	Table       Name        // the table to create
	IfNotExists bool        // IF NOT EXISTS: an existing table is no error
	Columns     []ColumnDef // the declared tags and fields, in order
	Sync        bool        // WITH (SYNC)
}

// ColumnDef is one declared column: a tag (feed.KindTag) or a field
// (feed.KindFloat, KindInt, KindUint, KindString, KindBool).
type ColumnDef struct {
	Name Name      // the column's name
	Kind feed.Kind // its kind, from the declared type (TAG, DOUBLE, BIGINT, …)
}

// AlterSync is ALTER TABLE t SET SYNC (Enabled) or SET SYNC OFF.
type AlterSync struct {
	Table   Name // the table to alter
	Enabled bool // SET SYNC (true) or SET SYNC OFF (false)
}

// ShowSync is SHOW SYNC FROM t.
type ShowSync struct {
	Table Name // the table whose sync status to show
}

// ShowColumns is SHOW COLUMNS FROM t.
type ShowColumns struct {
	Table Name // the table whose columns to show
}

// ShowTables is SHOW TABLES.
type ShowTables struct{}

// Truncate is TRUNCATE [TABLE] t.
type Truncate struct {
	Table Name // the table to truncate
}

// DropTable is DROP TABLE [IF EXISTS] t.
type DropTable struct {
	Table    Name // the table to drop
	IfExists bool // IF EXISTS: a missing table is no error
}

// Insert is INSERT INTO t (col, …) VALUES (…), …: every row has exactly
// one value per column. No column is x_seq or x_epoch (the x_ prefix is
// engine-owned), none is named twice.
type Insert struct {
	Table   Name        // the table to insert into
	Columns []Name      // the column list, in order
	Rows    [][]Literal // the VALUES rows, one literal per column each
}

// LiteralKind is the kind of a Literal.
type LiteralKind uint8

// The literal kinds.
const (
	LitNull  LiteralKind = iota
	LitInt               // decimal digits, optionally with a leading '-'
	LitFloat             // a number with a fraction or an exponent
	LitString
	LitBool
)

// Literal is a value as written: Text holds a number's digits (with its
// '-') or a string's decoded contents; Bool a boolean's value.
type Literal struct {
	Kind LiteralKind // what was written: NULL, an integer, a float, a string or a boolean
	Text string      // a number's digits (with its '-') or a string's decoded contents
	Bool bool        // a boolean's value
	Pos  Pos         // where the literal starts
}

// Order is a read's ORDER BY time.
type Order uint8

// The orders: OrderNone (storage order), ascending or descending time.
const (
	OrderNone Order = iota
	OrderAsc
	OrderDesc
)

// Select is a SELECT, either a drain (Drain: WHERE [x_epoch = E AND]
// x_seq > N, After and Epoch set) or a read of coalesced rows (time bounds
// Start inclusive and End exclusive in Unix nanoseconds, each when its Has
// flag is set; Tags to equal; Order). Columns nil means *. Limit is as
// written (the feed bounds it).
type Select struct {
	Table   Name   // the table read
	Columns []Name // the select list; nil means *

	Drain    bool   // a drain: WHERE [x_epoch = E AND] x_seq > N
	After    uint64 // a drain's N
	Epoch    uint64 // a drain's E, when HasEpoch
	HasEpoch bool   // the drain names x_epoch

	Start, End       int64       // a read's time bounds in Unix nanoseconds (inclusive, exclusive)
	HasStart, HasEnd bool        // whether Start, End are set
	Tags             []TagFilter // a read's tag equalities, all of which must hold
	Order            Order       // a read's ORDER BY time

	// A drain's filters (docs/contract.md#filters), ANDed with its time
	// bounds: tag equalities and INs, fields that must be set (f IS NOT
	// NULL) and the operation (x_op = 'insert' or 'update'; "" for both).
	TagIn []TagIn
	Has   []Name
	Op    string

	Limit int // LIMIT as written (the feed bounds it)
}

// TagIn is a drain's "tag = 'v'" (one value) or "tag IN ('a', 'b')".
type TagIn struct {
	Column Name     // the tag column
	Values []string // the values, any of which it may equal
}

// TagFilter is a read's "tag = 'value'".
type TagFilter struct {
	Column Name   // the tag column
	Value  string // the value it must equal
}

// Read implements Statement.
func (*CreateTable) Read() bool { return false }

// Read implements Statement.
func (*AlterSync) Read() bool { return false }

// Read implements Statement.
func (*ShowSync) Read() bool { return true }

// Read implements Statement.
func (*ShowColumns) Read() bool { return true }

// Read implements Statement.
func (*ShowTables) Read() bool { return true }

// Read implements Statement.
func (*Truncate) Read() bool { return false }

// Read implements Statement.
func (*DropTable) Read() bool { return false }

// Read implements Statement.
func (*Insert) Read() bool { return false }

// Read implements Statement.
func (*Select) Read() bool { return true }
