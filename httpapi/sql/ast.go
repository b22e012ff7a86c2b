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
	Name string
	Pos  Pos
}

// CreateTable is CREATE TABLE [IF NOT EXISTS] t [(col TYPE, …)] [WITH (SYNC)].
// Columns hold the declared tags and fields in order; a declared
// "time TIMESTAMP" is the implicit time column and is left out.
type CreateTable struct {
	Table       Name
	IfNotExists bool
	Columns     []ColumnDef
	Sync        bool
}

// ColumnDef is one declared column: a tag (feed.KindTag) or a field
// (feed.KindFloat, KindInt, KindUint, KindString, KindBool).
type ColumnDef struct {
	Name Name
	Kind feed.Kind
}

// AlterSync is ALTER TABLE t SET SYNC (Enabled) or SET SYNC OFF.
type AlterSync struct {
	Table   Name
	Enabled bool
}

// ShowSync is SHOW SYNC FROM t.
type ShowSync struct{ Table Name }

// ShowColumns is SHOW COLUMNS FROM t.
type ShowColumns struct{ Table Name }

// ShowTables is SHOW TABLES.
type ShowTables struct{}

// Truncate is TRUNCATE [TABLE] t.
type Truncate struct{ Table Name }

// DropTable is DROP TABLE [IF EXISTS] t.
type DropTable struct {
	Table    Name
	IfExists bool
}

// Insert is INSERT INTO t (col, …) VALUES (…), …: every row has exactly
// one value per column. No column is x_seq or x_epoch (the x_ prefix is
// engine-owned), none is named twice.
type Insert struct {
	Table   Name
	Columns []Name
	Rows    [][]Literal
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
	Kind LiteralKind
	Text string
	Bool bool
	Pos  Pos
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
	Table   Name
	Columns []Name

	Drain    bool
	After    uint64
	Epoch    uint64
	HasEpoch bool

	Start, End       int64
	HasStart, HasEnd bool
	Tags             []TagFilter
	Order            Order

	Limit int
}

// TagFilter is a read's "tag = 'value'".
type TagFilter struct {
	Column Name
	Value  string
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
