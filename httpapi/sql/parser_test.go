package sql

import (
	"errors"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/feed"
)

func n(name string, line, col int) Name { return Name{Name: name, Pos: Pos{line, col}} }

// TestParse checks the statements of docs/guide.md#sql and their variants parse to
// the expected AST.
func TestParse(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want Statement
	}{
		{"create with sync", "CREATE TABLE sensor (p00 DOUBLE, p01 DOUBLE) WITH (SYNC);",
			&CreateTable{Table: n("sensor", 1, 14), Sync: true, Columns: []ColumnDef{{n("p00", 1, 22), feed.KindFloat}, {n("p01", 1, 34), feed.KindFloat}}}},
		{"create every type", `create table if not exists "my table" (time TIMESTAMP, host TAG, site VARCHAR TAG, a BIGINT, b UBIGINT, c VARCHAR, d TEXT, e BOOLEAN)`,
			&CreateTable{Table: n("my table", 1, 28), IfNotExists: true, Columns: []ColumnDef{
				{n("host", 1, 56), feed.KindTag}, {n("site", 1, 66), feed.KindTag}, {n("a", 1, 84), feed.KindInt},
				{n("b", 1, 94), feed.KindUint}, {n("c", 1, 105), feed.KindString}, {n("d", 1, 116), feed.KindString}, {n("e", 1, 124), feed.KindBool}}}},
		{"create bare", "CREATE TABLE t", &CreateTable{Table: n("t", 1, 14)}},
		{"alter on", "ALTER TABLE sensor SET SYNC", &AlterSync{Table: n("sensor", 1, 13), Enabled: true}},
		{"alter off", "alter table sensor set sync off", &AlterSync{Table: n("sensor", 1, 13)}},
		{"show sync", "SHOW SYNC FROM sensor", &ShowSync{Table: n("sensor", 1, 16)}},
		{"show columns", "SHOW COLUMNS FROM \"a\"\"b\"", &ShowColumns{Table: n(`a"b`, 1, 19)}},
		{"show tables", "SHOW TABLES;", &ShowTables{}},
		{"truncate", "TRUNCATE sensor", &Truncate{Table: n("sensor", 1, 10)}},
		{"truncate table", "TRUNCATE TABLE sensor", &Truncate{Table: n("sensor", 1, 16)}},
		{"drop", "DROP TABLE sensor", &DropTable{Table: n("sensor", 1, 12)}},
		{"drop if exists", "DROP TABLE IF EXISTS sensor", &DropTable{Table: n("sensor", 1, 22), IfExists: true}},
		{"insert", "INSERT INTO sensor (time, host, p00) VALUES (1, 'h''1', -1.5e3), ('2025-11-29T10:00:00Z', NULL, TRUE)",
			&Insert{Table: n("sensor", 1, 13), Columns: []Name{n("time", 1, 21), n("host", 1, 27), n("p00", 1, 33)}, Rows: [][]Literal{
				{{Kind: LitInt, Text: "1", Pos: Pos{1, 46}}, {Kind: LitString, Text: "h'1", Pos: Pos{1, 49}}, {Kind: LitFloat, Text: "-1.5e3", Pos: Pos{1, 57}}},
				{{Kind: LitString, Text: "2025-11-29T10:00:00Z", Pos: Pos{1, 67}}, {Kind: LitNull, Pos: Pos{1, 91}}, {Kind: LitBool, Bool: true, Pos: Pos{1, 97}}},
			}}},
		{"drain", "SELECT * FROM sensor WHERE x_seq > 41250 LIMIT 500",
			&Select{Table: n("sensor", 1, 15), Drain: true, After: 41250, Limit: 500}},
		{"drain with epoch", "SELECT * FROM sensor WHERE x_epoch = 3 AND x_seq > 41250 LIMIT 500",
			&Select{Table: n("sensor", 1, 15), Drain: true, After: 41250, Epoch: 3, HasEpoch: true, Limit: 500}},
		{"drain columns", "SELECT time, p00, x_seq FROM sensor WHERE x_seq > 0 AND x_epoch = 1 LIMIT 5",
			&Select{Table: n("sensor", 1, 30), Columns: []Name{n("time", 1, 8), n("p00", 1, 14), n("x_seq", 1, 19)}, Drain: true, Epoch: 1, HasEpoch: true, Limit: 5}},
		{"filtered drain", "SELECT x_seq FROM t WHERE x_seq > 4 AND host IN ('a', 'b') AND dc = 'x' AND x_op = 'update' AND v IS NOT NULL AND time >= 5 LIMIT 3",
			&Select{Table: n("t", 1, 19), Columns: []Name{n("x_seq", 1, 8)}, Drain: true, After: 4, TagIn: []TagIn{{n("host", 1, 41), []string{"a", "b"}}, {n("dc", 1, 64), []string{"x"}}},
				Op: "update", Has: []Name{n("v", 1, 97)}, Start: 5, HasStart: true, Limit: 3}},
		{"read", "SELECT * FROM sensor LIMIT 10", &Select{Table: n("sensor", 1, 15), Limit: 10}},
		{"read range", "SELECT host, p00 FROM sensor WHERE time >= '2025-11-29T10:00:00Z' AND time < 1764410410000000000 AND host = 'h1' ORDER BY time DESC LIMIT 10",
			&Select{Table: n("sensor", 1, 23), Columns: []Name{n("host", 1, 8), n("p00", 1, 14)}, Start: 1764410400000000000, HasStart: true,
				End: 1764410410000000000, HasEnd: true, Tags: []TagFilter{{n("host", 1, 102), "h1"}}, Order: OrderDesc, Limit: 10}},
		{"read bounds tighten", "SELECT * FROM t WHERE time > 5 AND time >= 3 AND time <= 9 AND time < 20 ORDER BY time ASC LIMIT 1",
			&Select{Table: n("t", 1, 15), Start: 6, HasStart: true, End: 10, HasEnd: true, Order: OrderAsc, Limit: 1}},
		{"read one time", "SELECT * FROM t WHERE time = 7 LIMIT 1",
			&Select{Table: n("t", 1, 15), Start: 7, HasStart: true, End: 8, HasEnd: true, Limit: 1}},
		{"read after the last time", "SELECT * FROM t WHERE time > 9223372036854775807 LIMIT 1",
			&Select{Table: n("t", 1, 15), End: math.MinInt64, HasEnd: true, Limit: 1}},
		{"comments and lines", "-- the pull\nSELECT *\n  FROM sensor -- cursor next\n  WHERE x_seq > 1\n  LIMIT 2 ;",
			&Select{Table: n("sensor", 3, 8), Drain: true, After: 1, Limit: 2}},
		{"unicode names", `SELECT "é t" FROM été LIMIT 1`, &Select{Table: n("été", 1, 19), Columns: []Name{n("é t", 1, 8)}, Limit: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.src, Limits{})
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestParseErrors checks that every refusal names its position and what
// was expected, or what is wrong there.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		src, want string
		limit     bool
	}{
		{"SELECT * FROM sensor WHERE x_seq > 5", "syntax error at line 1, column 37: expected LIMIT", true},
		{"SELECT * FROM sensor ORDER BY time", "syntax error at line 1, column 35: expected LIMIT", true},
		{"SELECT * FROM sensor WHERE x_seq > 5 LIMT 5", `syntax error at line 1, column 38: expected LIMIT, found "LIMT"`, true},
		{"SELECT * FROM t LIMIT ten", `syntax error at line 1, column 23: expected the LIMIT as a whole number of rows, found "ten"`, false},
		{"SELECT * FROM t LIMIT 99999999999999999999", `syntax error at line 1, column 23: expected the LIMIT as a whole number of rows, found "99999999999999999999"`, false},
		{"", "syntax error at line 1, column 1: expected a statement: SELECT, INSERT, CREATE TABLE, ALTER TABLE, SHOW, TRUNCATE or DROP TABLE", false},
		{"UPDATE t SET a = 1", `syntax error at line 1, column 1: expected a statement: SELECT, INSERT, CREATE TABLE, ALTER TABLE, SHOW, TRUNCATE or DROP TABLE, found "UPDATE"`, false},
		{"SHOW TABLES; SHOW TABLES", `syntax error at line 1, column 14: expected end of statement (one statement per request), found "SHOW"`, false},
		{"SELECT * FROM select LIMIT 1", `syntax error at line 1, column 15: expected a table name (quote a keyword used as a name: "select"), found "select"`, false},
		{"SELECT FROM t LIMIT 1", `syntax error at line 1, column 8: expected * or a column name (quote a keyword used as a name: "FROM"), found "FROM"`, false},
		{"SELECT * FROM 'sensor' LIMIT 1", `syntax error at line 1, column 15: expected a table name, found string "'sensor'"`, false},
		{"SELECT * FROM \"sensor LIMIT 1", `syntax error at line 1, column 30: expected closing " of the identifier opened at line 1, column 15`, false},
		{"INSERT INTO t (a) VALUES ('x)", `syntax error at line 1, column 30: expected closing ' of the string opened at line 1, column 27`, false},
		{"SELECT * FROM t WHERE x_seq >= 5 LIMIT 1", `syntax error at line 1, column 29: expected > (the drain's cursor: x_seq > N), found ">="`, false},
		{"SELECT * FROM t WHERE x_seq > -1 LIMIT 1", `error at line 1, column 31: x_seq > N needs a whole number from 0 to 18446744073709551615`, false},
		{"SELECT * FROM t WHERE x_epoch = 1 LIMIT 1", `error at line 1, column 23: a drain needs its cursor: WHERE [x_epoch = E AND] x_seq > N`, false},
		{"SELECT * FROM t WHERE x_seq > 1 AND x_foo = 'a' LIMIT 1", `error at line 1, column 37: a drain's WHERE holds x_seq > N, [x_epoch = E], [x_op = 'insert'|'update'], time bounds, tag = 'v', tag IN ('a', …) and field IS NOT NULL, not "x_foo"`, false},
		{"SELECT * FROM t WHERE x_seq > 1 AND x_op = 'delete' LIMIT 1", `error at line 1, column 37: a drain's operation is compared once: x_op = 'insert' or x_op = 'update'`, false},
		{"SELECT * FROM t WHERE x_seq > 1 AND host > 'a' LIMIT 1", `syntax error at line 1, column 42: expected = or IN (columns other than time are tags, compared for equality) or IS NOT NULL (fields), found ">"`, false},
		{"SELECT * FROM t WHERE x_seq > 1 AND host IN ('a', 1) LIMIT 1", `syntax error at line 1, column 51: expected a 'string' (tag values are strings), found a number`, false},
		{"SELECT * FROM t WHERE host IN ('a') LIMIT 1", `syntax error at line 1, column 28: expected a comparison (IN and IS NOT NULL filter drains: WHERE x_seq > N AND …), found "IN"`, false},
		{"SELECT * FROM t WHERE x_seq > 1 ORDER BY time LIMIT 1", `error at line 1, column 33: a drain comes in x_seq order (arrival order): ORDER BY is not allowed`, false},
		{"SELECT x_seq FROM t LIMIT 1", `error at line 1, column 8: "x_seq" is engine-owned: it appears only in a drain (WHERE [x_epoch = E AND] x_seq > N)`, false},
		{"SELECT * FROM t WHERE host > 'a' LIMIT 1", `syntax error at line 1, column 28: expected = (columns other than time are tags, compared for equality), found ">"`, false},
		{"SELECT * FROM t WHERE host = 1 LIMIT 1", `syntax error at line 1, column 30: expected a 'string' (tag values are strings), found a number`, false},
		{"SELECT * FROM t WHERE time > 'yesterday' LIMIT 1", `syntax error at line 1, column 30: expected a time: integer nanoseconds or an RFC 3339 'string', within ±2^63 ns (years 1677 to 2262), found string "'yesterday'"`, false},
		{"SELECT * FROM t WHERE time != 1 LIMIT 1", `syntax error at line 1, column 28: expected a comparison: =, >, >=, < or <=, IN (…) or IS NOT NULL, found "!="`, false},
		{"SELECT * FROM t ORDER BY host LIMIT 1", `error at line 1, column 26: only ORDER BY time is supported`, false},
		{"INSERT INTO t (x_seq, a) VALUES (1, 2)", `error at line 1, column 16: "x_seq" is engine-owned (the x_ prefix is reserved): never writable`, false},
		{"INSERT INTO t (a, x_epoch) VALUES (1, 2)", `error at line 1, column 19: "x_epoch" is engine-owned (the x_ prefix is reserved): never writable`, false},
		{"INSERT INTO t (a, a) VALUES (1, 2)", `error at line 1, column 19: column "a" is named twice`, false},
		{"INSERT INTO t (a, b) VALUES (1)", `error at line 1, column 29: row 1 has 1 values for 2 columns`, false},
		{"INSERT INTO t (a) VALUES (1, 2)", `syntax error at line 1, column 28: expected ")", found ","`, false},
		{"INSERT INTO t (a) VALUES (1), (x)", `syntax error at line 1, column 32: expected a value: a number, a 'string', TRUE, FALSE or NULL, found "x"`, false},
		{"INSERT INTO t (a) VALUES (1e)", `syntax error at line 1, column 29: expected digits of the exponent, found ")"`, false},
		{"INSERT INTO t (a) VALUES (12abc)", `syntax error at line 1, column 29: expected a space or an operator after the number, found "a"`, false},
		{"CREATE TABLE t (a INT)", `syntax error at line 1, column 19: expected a type: DOUBLE, BIGINT, UBIGINT, VARCHAR, TEXT, BOOLEAN, TIMESTAMP or TAG, found "INT"`, false},
		{"CREATE TABLE t (a DOUBLE TAG)", `error at line 1, column 26: only a VARCHAR or TEXT column can be a TAG (tag values are strings)`, false},
		{"CREATE TABLE t (ts TIMESTAMP)", `error at line 1, column 20: only the time column is a TIMESTAMP: every row has exactly one time, and line protocol has no time fields`, false},
		{"CREATE TABLE t (time DOUBLE)", `error at line 1, column 22: the time column is TIMESTAMP (every row has one time, in nanoseconds)`, false},
		{"CREATE TABLE t (x_seq BIGINT)", `error at line 1, column 17: column "x_seq": the x_ prefix is engine-owned`, false},
		{"CREATE TABLE t (a DOUBLE, a BIGINT)", `error at line 1, column 27: column "a" is declared twice`, false},
		{"CREATE TABLE t (a DOUBLE) WITH SYNC", `syntax error at line 1, column 32: expected "(", found "SYNC"`, false},
		{"ALTER TABLE t SET SYNCS", `syntax error at line 1, column 19: expected SYNC, found "SYNCS"`, false},
		{"SHOW DATABASES", `syntax error at line 1, column 6: expected SYNC, COLUMNS or TABLES, found "DATABASES"`, false},
		{"DROP TABLE IF t", `syntax error at line 1, column 15: expected EXISTS, found "t"`, false},
		{"SELECT *\nFROM t\nWHERE x_seq > 1\nLIMIT", `syntax error at line 4, column 6: expected the LIMIT as a whole number of rows`, false},
		{"SELECT * FROM t LIMIT 1 \xff", `error at line 1, column 25: the statement is not valid UTF-8`, false},
		{"SELECT * FROM t WHERE a = 'b\xffc' LIMIT 1", `error at line 1, column 29: the statement is not valid UTF-8`, false},
		{"SELECT * FROM t WHERE a = - 'b' LIMIT 1", `syntax error at line 1, column 29: expected a number after -, found string "'b'"`, false},
	}
	limited := []struct {
		src, want, limit string
	}{
		{"INSERT INTO t (a) VALUES (1), (2), (3)", `error at line 1, column 36: more than 2 rows in one INSERT (--sql-max-insert-rows)`, LimitInsertRows},
		{"INSERT INTO t (a, b, c) VALUES (1, 2, 3)", `error at line 1, column 22: more than 2 columns in one table (--feed-max-columns-per-table)`, LimitColumns},
		{"CREATE TABLE t (a TAG, b TAG, c TAG)", `error at line 1, column 31: more than 2 columns in one table (--feed-max-columns-per-table)`, LimitColumns},
		{"SELECT a, b, c FROM t LIMIT 1", `error at line 1, column 14: more than 2 columns in one table (--feed-max-columns-per-table)`, LimitColumns},
		{"SELECT * FROM t WHERE a = 'x' AND b = 'y' AND c = 'z' LIMIT 1", `error at line 1, column 47: more than 2 comparisons (one per column of a table, --feed-max-columns-per-table)`, LimitColumns},
	}
	for _, tt := range limited {
		t.Run(tt.src, func(t *testing.T) {
			_, err := Parse(tt.src, Limits{MaxInsertRows: 2, MaxColumns: 2})
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, tt.want, err.Error())
			require.Equal(t, tt.limit, e.Limit)
		})
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			_, err := Parse(tt.src, Limits{})
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, tt.want, err.Error())
			require.Equal(t, tt.limit, e.LimitRequired)
			require.Empty(t, e.Limit)
		})
	}
}

// FuzzParse checks that Parse never panics and that every error it
// returns is an *Error whose position lies within the statement (or just
// past its end).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"CREATE TABLE sensor (p00 DOUBLE, p01 DOUBLE) WITH (SYNC)",
		"ALTER TABLE sensor SET SYNC OFF",
		"SHOW SYNC FROM sensor", "SHOW COLUMNS FROM \"a b\"", "SHOW TABLES;",
		"TRUNCATE TABLE sensor", "DROP TABLE IF EXISTS sensor",
		"INSERT INTO sensor (time, host, p00) VALUES (1, 'h''1', -1.5e3), ('2025-11-29T10:00:00Z', NULL, TRUE)",
		"SELECT * FROM sensor WHERE x_epoch = 3 AND x_seq > 41250 LIMIT 500",
		"SELECT host, p00 FROM sensor WHERE time >= '2025-11-29T10:00:00Z' AND time < 1 AND host = 'h1' ORDER BY time DESC LIMIT 10",
		"-- c\nSELECT *\nFROM t\nLIMIT", "SELECT * FROM \"t", "'", "\xff", "1e", ".5",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		st, err := Parse(src, Limits{MaxInsertRows: 3, MaxColumns: 4})
		if err == nil {
			require.NotNil(t, st)
			return
		}
		var e *Error
		require.True(t, errors.As(err, &e), "error %T %v is not an *Error", err, err)
		lines := strings.Split(src, "\n")
		require.GreaterOrEqual(t, e.Pos.Line, 1, "%v", err)
		require.LessOrEqual(t, e.Pos.Line, len(lines), "%v", err)
		require.GreaterOrEqual(t, e.Pos.Column, 1, "%v", err)
		require.LessOrEqual(t, e.Pos.Column, utf8.RuneCountInString(lines[e.Pos.Line-1])+1, "%v", err)
		require.True(t, strings.Contains(err.Error(), "at line "), "%v", err)
	})
}
