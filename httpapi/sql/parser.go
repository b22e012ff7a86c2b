package sql

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ingestd/ingestd/feed"
)

// reserved are the keywords a bare identifier may not be (quote them to
// use them as names).
var reserved = map[string]bool{
	"SELECT": true, "FROM": true, "WHERE": true, "AND": true, "ORDER": true, "BY": true, "LIMIT": true,
	"INSERT": true, "INTO": true, "VALUES": true, "CREATE": true, "TABLE": true, "WITH": true,
	"ALTER": true, "SET": true, "SHOW": true, "DROP": true, "TRUNCATE": true, "IF": true, "NOT": true,
	"EXISTS": true, "TRUE": true, "FALSE": true, "NULL": true, "ASC": true, "DESC": true, "OR": true,
}

// columnTypes maps the declarable types to column kinds; KindTime is
// TIMESTAMP, which only the time column may have.
var columnTypes = map[string]feed.Kind{
	"DOUBLE": feed.KindFloat, "BIGINT": feed.KindInt, "UBIGINT": feed.KindUint,
	"VARCHAR": feed.KindString, "TEXT": feed.KindString, "BOOLEAN": feed.KindBool,
	"TIMESTAMP": feed.KindTime, "TAG": feed.KindTag,
}

const typeList = "a type: DOUBLE, BIGINT, UBIGINT, VARCHAR, TEXT, BOOLEAN, TIMESTAMP or TAG"

// bailout carries an *Error out of the recursive descent to Parse.
type bailout struct{ err *Error }

type parser struct {
	lx  *lexer
	tok token
	lim Limits
}

// Limits bound what one statement may hold, so that its AST stays a small
// multiple of the statement's bytes: the rows of an INSERT, and the names
// of a column list or the comparisons of a WHERE. Zero means no bound.
type Limits struct {
	MaxInsertRows int // rows of one INSERT (--sql-max-insert-rows); 0: no bound
	MaxColumns    int // names of a column list, comparisons of a WHERE; 0: no bound
	MaxInValues   int // values of one IN list (--max-drain-filter-values); 0: no bound
}

// Limit names of Error.Limit.
const (
	LimitInsertRows = "insert_rows"
	LimitColumns    = "columns"
	LimitInValues   = "in_values"
)

// Parse parses one statement (an optional trailing ';' allowed) within
// lim. Its error is always an *Error with a position.
func Parse(src string, lim Limits) (st Statement, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, ok := r.(bailout)
			if !ok {
				panic(r)
			}
			st, err = nil, b.err
		}
	}()
	p := &parser{lx: newLexer(src), lim: lim}
	p.next()
	st = p.statement()
	p.punct(";")
	if p.tok.kind != tokEOF {
		p.fail(expected(p.tok.pos, "end of statement (one statement per request)", p.tok.describe()))
	}
	return st, nil
}

func (p *parser) fail(e *Error) { panic(bailout{e}) }

// count fails when the n-th item of a list at pos goes past max.
func (p *parser) count(n, max int, pos Pos, limit, what string) {
	if max > 0 && n > max {
		e := errAt(pos, "more than "+itoa(max)+" "+what)
		e.Limit = limit
		p.fail(e)
	}
}

func (p *parser) next() {
	t, err := p.lx.next()
	if err != nil {
		p.fail(err.(*Error)) //nolint:errorlint // the lexer returns only *Error
	}
	p.tok = t
}

// isKeyword reports whether the current token is the bare word kw.
func (p *parser) isKeyword(kw string) bool {
	return p.tok.kind == tokIdent && strings.EqualFold(p.tok.text, kw)
}

// keyword consumes the bare word kw if it is next.
func (p *parser) keyword(kw string) bool {
	if p.isKeyword(kw) {
		p.next()
		return true
	}
	return false
}

func (p *parser) expectKeyword(kw string) {
	if !p.keyword(kw) {
		p.fail(expected(p.tok.pos, kw, p.tok.describe()))
	}
}

// punct consumes the punctuation s if it is next.
func (p *parser) punct(s string) bool {
	if p.tok.kind == tokPunct && p.tok.text == s {
		p.next()
		return true
	}
	return false
}

func (p *parser) expectPunct(s string) {
	if !p.punct(s) {
		p.fail(expected(p.tok.pos, quote(s), p.tok.describe()))
	}
}

// name consumes an identifier: a quoted one, or a bare word that is not
// a reserved keyword.
func (p *parser) name(what string) Name {
	t := p.tok
	switch {
	case t.kind == tokQuoted:
	case t.kind == tokIdent && !reserved[strings.ToUpper(t.text)]:
	default:
		e := expected(t.pos, what, t.describe())
		if t.kind == tokIdent {
			e.Expected += " (quote a keyword used as a name: \"" + t.text + "\")"
		}
		p.fail(e)
	}
	p.next()
	return Name{Name: t.text, Pos: t.pos}
}

func (p *parser) statement() Statement {
	t := p.tok
	switch {
	case p.keyword("SELECT"):
		return p.selectStmt()
	case p.keyword("INSERT"):
		return p.insert()
	case p.keyword("CREATE"):
		return p.createTable()
	case p.keyword("ALTER"):
		p.expectKeyword("TABLE")
		st := &AlterSync{Table: p.name("a table name")}
		p.expectKeyword("SET")
		p.expectKeyword("SYNC")
		st.Enabled = !p.keyword("OFF")
		return st
	case p.keyword("SHOW"):
		switch {
		case p.keyword("SYNC"):
			p.expectKeyword("FROM")
			return &ShowSync{Table: p.name("a table name")}
		case p.keyword("COLUMNS"):
			p.expectKeyword("FROM")
			return &ShowColumns{Table: p.name("a table name")}
		case p.keyword("TABLES"):
			return &ShowTables{}
		}
		p.fail(expected(p.tok.pos, "SYNC, COLUMNS or TABLES", p.tok.describe()))
	case p.keyword("TRUNCATE"):
		p.keyword("TABLE")
		return &Truncate{Table: p.name("a table name")}
	case p.keyword("DROP"):
		p.expectKeyword("TABLE")
		st := &DropTable{}
		if p.keyword("IF") {
			p.expectKeyword("EXISTS")
			st.IfExists = true
		}
		st.Table = p.name("a table name")
		return st
	}
	p.fail(expected(t.pos, "a statement: SELECT, INSERT, CREATE TABLE, ALTER TABLE, SHOW, TRUNCATE or DROP TABLE", t.describe()))
	return nil
}

func (p *parser) createTable() *CreateTable {
	p.expectKeyword("TABLE")
	st := &CreateTable{}
	if p.keyword("IF") {
		p.expectKeyword("NOT")
		p.expectKeyword("EXISTS")
		st.IfNotExists = true
	}
	st.Table = p.name("a table name")
	if p.punct("(") {
		seen := map[string]bool{}
		for {
			n := p.name("a column name")
			p.count(len(seen)+1, p.lim.MaxColumns, n.Pos, LimitColumns, "columns in one table (--feed-max-columns-per-table)")
			if seen[n.Name] {
				p.fail(errAt(n.Pos, "column "+quote(n.Name)+" is declared twice"))
			}
			seen[n.Name] = true
			if strings.HasPrefix(n.Name, "x_") {
				p.fail(errAt(n.Pos, "column "+quote(n.Name)+": the x_ prefix is engine-owned"))
			}
			typ := p.tok
			kind, ok := columnTypes[strings.ToUpper(typ.text)]
			if typ.kind != tokIdent || !ok {
				p.fail(expected(typ.pos, typeList, typ.describe()))
			}
			p.next()
			if tag := p.tok; p.keyword("TAG") {
				if kind != feed.KindString {
					p.fail(errAt(tag.pos, "only a VARCHAR or TEXT column can be a TAG (tag values are strings)"))
				}
				kind = feed.KindTag
			}
			switch {
			case n.Name == "time" && kind != feed.KindTime:
				p.fail(errAt(typ.pos, "the time column is TIMESTAMP (every row has one time, in nanoseconds)"))
			case n.Name != "time" && kind == feed.KindTime:
				p.fail(errAt(typ.pos, "only the time column is a TIMESTAMP: every row has exactly one time, and line protocol has no time fields"))
			case kind != feed.KindTime:
				st.Columns = append(st.Columns, ColumnDef{Name: n, Kind: kind})
			}
			if p.punct(")") {
				break
			}
			p.expectPunct(",")
		}
	}
	if p.keyword("WITH") {
		p.expectPunct("(")
		p.expectKeyword("SYNC")
		p.expectPunct(")")
		st.Sync = true
	}
	return st
}

func (p *parser) insert() *Insert {
	p.expectKeyword("INTO")
	st := &Insert{Table: p.name("a table name")}
	p.expectPunct("(")
	seen := map[string]bool{}
	for {
		n := p.name("a column name")
		p.count(len(seen)+1, p.lim.MaxColumns, n.Pos, LimitColumns, "columns in one table (--feed-max-columns-per-table)")
		if strings.HasPrefix(n.Name, "x_") {
			p.fail(errAt(n.Pos, quote(n.Name)+" is engine-owned (the x_ prefix is reserved): never writable"))
		}
		if seen[n.Name] {
			p.fail(errAt(n.Pos, "column "+quote(n.Name)+" is named twice"))
		}
		seen[n.Name] = true
		st.Columns = append(st.Columns, n)
		if p.punct(")") {
			break
		}
		p.expectPunct(",")
	}
	p.expectKeyword("VALUES")
	for {
		open := p.tok.pos
		p.count(len(st.Rows)+1, p.lim.MaxInsertRows, open, LimitInsertRows, "rows in one INSERT (--sql-max-insert-rows)")
		p.expectPunct("(")
		row := make([]Literal, 0, len(st.Columns))
		for {
			row = append(row, p.literal())
			if len(row) == len(st.Columns) {
				p.expectPunct(")")
				break
			}
			if p.tok.kind == tokPunct && p.tok.text == ")" {
				p.fail(errAt(open, "row "+itoa(len(st.Rows)+1)+" has "+itoa(len(row))+" values for "+itoa(len(st.Columns))+" columns"))
			}
			p.expectPunct(",")
		}
		st.Rows = append(st.Rows, row)
		if !p.punct(",") {
			return st
		}
	}
}

// literal consumes a value: a number (optionally negative), a string,
// TRUE, FALSE or NULL.
func (p *parser) literal() Literal {
	t := p.tok
	neg := ""
	if p.punct("-") {
		neg = "-"
		if p.tok.kind != tokNumber {
			p.fail(expected(p.tok.pos, "a number after -", p.tok.describe()))
		}
	}
	switch {
	case p.tok.kind == tokNumber:
		kind := LitInt
		if strings.ContainsAny(p.tok.text, ".eE") {
			kind = LitFloat
		}
		l := Literal{Kind: kind, Text: neg + p.tok.text, Pos: t.pos}
		p.next()
		return l
	case p.tok.kind == tokString:
		l := Literal{Kind: LitString, Text: p.tok.text, Pos: t.pos}
		p.next()
		return l
	case p.keyword("TRUE"):
		return Literal{Kind: LitBool, Bool: true, Pos: t.pos}
	case p.keyword("FALSE"):
		return Literal{Kind: LitBool, Pos: t.pos}
	case p.keyword("NULL"):
		return Literal{Kind: LitNull, Pos: t.pos}
	}
	p.fail(expected(t.pos, "a value: a number, a 'string', TRUE, FALSE or NULL", t.describe()))
	return Literal{}
}

// cond is one comparison of a WHERE: col op val, col IN (in…) (op
// "IN"), or col IS NOT NULL (op "IS NOT NULL").
type cond struct {
	col   Name
	op    string
	opPos Pos
	val   Literal
	in    []Literal
}

var comparisons = map[string]bool{"=": true, ">": true, ">=": true, "<": true, "<=": true}

func (p *parser) selectStmt() *Select {
	st := &Select{}
	if !p.punct("*") {
		for {
			p.count(len(st.Columns)+1, p.lim.MaxColumns, p.tok.pos, LimitColumns, "columns in one table (--feed-max-columns-per-table)")
			st.Columns = append(st.Columns, p.name("* or a column name"))
			if !p.punct(",") {
				break
			}
		}
	}
	p.expectKeyword("FROM")
	st.Table = p.name("a table name")
	var conds []cond
	if p.keyword("WHERE") {
		for {
			p.count(len(conds)+1, p.lim.MaxColumns, p.tok.pos, LimitColumns, "comparisons (one per column of a table, --feed-max-columns-per-table)")
			c := cond{col: p.name("a column name")}
			c.opPos, c.op = p.tok.pos, p.tok.text
			switch {
			case p.keyword("IN"):
				c.op = "IN"
				p.expectPunct("(")
				for {
					p.count(len(c.in)+1, p.lim.MaxInValues, p.tok.pos, LimitInValues, "values in one IN list (--max-drain-filter-values)")
					c.in = append(c.in, p.literal())
					if !p.punct(",") {
						break
					}
				}
				p.expectPunct(")")
			case p.keyword("IS"):
				p.expectKeyword("NOT")
				p.expectKeyword("NULL")
				c.op = "IS NOT NULL"
			case p.tok.kind != tokPunct || !comparisons[c.op]:
				p.fail(expected(p.tok.pos, "a comparison: =, >, >=, < or <=, IN (…) or IS NOT NULL", p.tok.describe()))
			default:
				p.next()
				c.val = p.literal()
			}
			conds = append(conds, c)
			if !p.keyword("AND") {
				break
			}
		}
	}
	drain := false
	for _, c := range conds {
		drain = drain || c.col.Name == "x_seq" || c.col.Name == "x_epoch"
	}
	if drain {
		p.drainWhere(st, conds)
	} else {
		p.readWhere(st, conds)
	}
	if order := p.tok; p.keyword("ORDER") {
		if drain {
			p.fail(errAt(order.pos, "a drain comes in x_seq order (arrival order): ORDER BY is not allowed"))
		}
		p.expectKeyword("BY")
		if c := p.name("time"); c.Name != "time" {
			p.fail(errAt(c.Pos, "only ORDER BY time is supported"))
		}
		st.Order = OrderAsc
		if p.keyword("DESC") {
			st.Order = OrderDesc
		} else {
			p.keyword("ASC")
		}
	}
	if !p.keyword("LIMIT") {
		e := expected(p.tok.pos, "LIMIT", p.tok.describe())
		e.LimitRequired = true
		p.fail(e)
	}
	n := p.tok
	limit, err := strconv.Atoi(n.text)
	if n.kind != tokNumber || err != nil || limit < 0 {
		p.fail(expected(n.pos, "the LIMIT as a whole number of rows", n.describe()))
	}
	p.next()
	st.Limit = limit
	return st
}

// drainWhere checks a drain's WHERE: x_seq > N, and optionally
// x_epoch = E, nothing else; its column list names no x_epoch.
func (p *parser) drainWhere(st *Select, conds []cond) {
	st.Drain = true
	seenSeq := false
	for _, c := range conds {
		switch c.col.Name {
		case "x_seq":
			if seenSeq {
				p.fail(errAt(c.col.Pos, "x_seq is compared once: WHERE [x_epoch = E AND] x_seq > N"))
			}
			if c.op != ">" {
				p.fail(expected(c.opPos, "> (the drain's cursor: x_seq > N)", quote(c.op)))
			}
			st.After, seenSeq = p.uint(c.val, "x_seq > N"), true
		case "x_epoch":
			if st.HasEpoch {
				p.fail(errAt(c.col.Pos, "x_epoch is compared once: WHERE [x_epoch = E AND] x_seq > N"))
			}
			if c.op != "=" {
				p.fail(expected(c.opPos, "= (x_epoch = E)", quote(c.op)))
			}
			st.Epoch, st.HasEpoch = p.uint(c.val, "x_epoch = E"), true
		case "x_op":
			if c.op != "=" || c.val.Kind != LitString || (c.val.Text != "insert" && c.val.Text != "update") || st.Op != "" {
				p.fail(errAt(c.col.Pos, "a drain's operation is compared once: x_op = 'insert' or x_op = 'update'"))
			}
			st.Op = c.val.Text
		case "time":
			if c.op == "IN" || c.op == "IS NOT NULL" {
				p.fail(expected(c.opPos, "a comparison of time: =, >, >=, < or <=", quote(c.op)))
			}
			p.timeBound(st, c)
		default:
			if strings.HasPrefix(c.col.Name, "x_") {
				p.fail(errAt(c.col.Pos, "a drain's WHERE holds x_seq > N, [x_epoch = E], [x_op = 'insert'|'update'], time bounds, tag = 'v', tag IN ('a', …) and field IS NOT NULL, not "+quote(c.col.Name)))
			}
			switch c.op {
			case "IS NOT NULL":
				st.Has = append(st.Has, c.col)
			case "=", "IN":
				vals := c.in
				if c.op == "=" {
					vals = []Literal{c.val}
				}
				tf := TagIn{Column: c.col}
				for _, v := range vals {
					if v.Kind != LitString {
						p.fail(expected(v.Pos, "a 'string' (tag values are strings)", "a "+litName(v.Kind)))
					}
					tf.Values = append(tf.Values, v.Text)
				}
				st.TagIn = append(st.TagIn, tf)
			default:
				p.fail(expected(c.opPos, "= or IN (columns other than time are tags, compared for equality) or IS NOT NULL (fields)", quote(c.op)))
			}
		}
	}
	if !seenSeq {
		p.fail(errAt(conds[0].col.Pos, "a drain needs its cursor: WHERE [x_epoch = E AND] x_seq > N"))
	}
	for _, c := range st.Columns {
		if c.Name == "x_epoch" {
			p.fail(errAt(c.Pos, "x_epoch is not a column: the page's envelope carries the epoch"))
		}
	}
}

// uint reads a non-negative integer literal.
func (p *parser) uint(l Literal, what string) uint64 {
	v, err := strconv.ParseUint(l.Text, 10, 64)
	if l.Kind != LitInt || err != nil {
		p.fail(errAt(l.Pos, what+" needs a whole number from 0 to 18446744073709551615"))
	}
	return v
}

// readWhere checks a read's WHERE (time bounds and tag equalities) and
// that no x_ column is selected.
func (p *parser) readWhere(st *Select, conds []cond) {
	for _, c := range st.Columns {
		if strings.HasPrefix(c.Name, "x_") {
			p.fail(errAt(c.Pos, quote(c.Name)+" is engine-owned: it appears only in a drain (WHERE [x_epoch = E AND] x_seq > N)"))
		}
	}
	for _, c := range conds {
		if c.op == "IN" || c.op == "IS NOT NULL" {
			p.fail(expected(c.opPos, "a comparison (IN and IS NOT NULL filter drains: WHERE x_seq > N AND …)", quote(c.op)))
		}
		if c.col.Name != "time" {
			if c.op != "=" {
				p.fail(expected(c.opPos, "= (columns other than time are tags, compared for equality)", quote(c.op)))
			}
			if c.val.Kind != LitString {
				p.fail(expected(c.val.Pos, "a 'string' (tag values are strings)", "a "+litName(c.val.Kind)))
			}
			st.Tags = append(st.Tags, TagFilter{Column: c.col, Value: c.val.Text})
			continue
		}
		p.timeBound(st, c)
	}
}

// timeBound narrows st's time bounds by c, a comparison of time.
func (p *parser) timeBound(st *Select, c cond) {
	ns := p.timeValue(c.val)
	lower := func(v int64) {
		if !st.HasStart || v > st.Start {
			st.Start, st.HasStart = v, true
		}
	}
	upper := func(v int64) {
		if !st.HasEnd || v < st.End {
			st.End, st.HasEnd = v, true
		}
	}
	switch c.op {
	case ">=":
		lower(ns)
	case ">":
		if ns == math.MaxInt64 {
			upper(math.MinInt64) // nothing is later
		} else {
			lower(ns + 1)
		}
	case "<":
		upper(ns)
	case "<=":
		if ns < math.MaxInt64 {
			upper(ns + 1)
		}
	case "=":
		lower(ns)
		if ns < math.MaxInt64 {
			upper(ns + 1)
		}
	}
}

func litName(k LiteralKind) string {
	switch k {
	case LitInt, LitFloat:
		return "number"
	case LitBool:
		return "boolean"
	case LitNull:
		return "NULL"
	}
	return "string"
}

// Time bounds representable as int64 nanoseconds (years 1677 to 2262).
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// TimeValue reads a time literal (a number or a string) with ParseTime.
func TimeValue(l Literal) (int64, bool) {
	if l.Kind != LitInt && l.Kind != LitString {
		return 0, false
	}
	return ParseTime(l.Text)
}

// ParseTime reads a time: integer nanoseconds since the Unix epoch or RFC
// 3339, within int64 nanoseconds (an RFC 3339 time outside them would wrap
// around); ok is false otherwise. /rows' start and end use it too.
func ParseTime(s string) (int64, bool) {
	if ns, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ns, true
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Before(minTime) || t.After(maxTime) {
		return 0, false
	}
	return t.UnixNano(), true
}

func (p *parser) timeValue(l Literal) int64 {
	ns, ok := TimeValue(l)
	if !ok {
		p.fail(expected(l.Pos, "a time: integer nanoseconds or an RFC 3339 'string', within ±2^63 ns (years 1677 to 2262)", litDescribe(l)))
	}
	return ns
}

func litDescribe(l Literal) string {
	switch l.Kind {
	case LitString:
		return "string " + quote("'"+l.Text+"'")
	case LitInt, LitFloat:
		return quote(l.Text)
	}
	return litName(l.Kind)
}
