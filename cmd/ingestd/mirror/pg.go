package mirror

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/big"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/httpapi/client"
)

// The PostgreSQL target (docs/guide.md#mirror-into-postgresql). One table
// per mirrored table, named as it: a bigint column "time" (Unix
// nanoseconds, exact: timestamptz holds microseconds and would merge
// points that differ below them), one text column per tag (NOT NULL,
// '' when a point lacks the tag: line protocol has no empty tag value)
// and one column per field, typed by its kind (pgType). A unique index
// on (every tag, time), whose name pgKeyName derives from the table's,
// makes the point's identity the upsert's conflict target; its columns
// are how the mirror tells a tag column from a string field's.
//
// Exactly once (docs/design.md#mirror-into-postgresql): every transaction
// first locks the table's row of the cursor table (pgCursorTable, created
// when missing) and checks that it holds the cursor the mirror applies the
// page on top of; it then alters the table, upserts the page's rows and
// moves the cursor, and commits all of it at once. A crash loses the
// transaction whole; a second mirror waits for the lock, finds the cursor
// moved, rolls back and resumes from the cursor it found
// (staleCursorError), so pages apply one at a time, in feed order, each
// once.

// pgCursorTable holds one row per mirrored table: (table_name, source,
// epoch, next, updated); epoch 0 is no cursor. Quoted as an SQL
// identifier (the same name as unquoted: it is lower case).
const pgCursorTable = "\"ingestd_mirror_cursor\""

// pgMaxNameBytes is the longest identifier PostgreSQL keeps (NAMEDATALEN
// − 1); a longer one would be cut silently, merging names.
const pgMaxNameBytes = 63

// pgMaxColumnsCeiling is PostgreSQL's limit of columns per table.
const pgMaxColumnsCeiling = 1600

// pgMaxParams is the most parameters one statement may bind (the
// protocol's 16-bit count).
const pgMaxParams = math.MaxUint16

// The defaults of the PostgreSQL target's budgets.
const (
	// DefaultPGMaxStatementBytes is --pg-max-statement-bytes' default.
	DefaultPGMaxStatementBytes = 8 << 20
	// DefaultPGMaxColumns is --pg-max-columns' default.
	DefaultPGMaxColumns = 1000
)

// ErrTargetRefused is wrapped by the error Run returns when a PostgreSQL
// target cannot take a page as it is: a field whose kind conflicts with
// its column's type, a table past --pg-max-columns, a point past
// --pg-max-statement-bytes, a name longer than PostgreSQL keeps, a string
// holding NUL, or PostgreSQL refusing the data or the statement (an error
// of SQLSTATE class 22, 23, 42, 54 or 0A). Retrying cannot fix it; nothing
// of the page was applied and the cursor stays where it was.
var ErrTargetRefused = errors.New("the target cannot take the page")

// The reasons of ingestd_mirror_target_refused_total (a closed set).
const (
	refusedKind       = "kind_conflict"
	refusedColumns    = "too_many_columns"
	refusedStatement  = "statement_bytes"
	refusedName       = "name_too_long"
	refusedNUL        = "nul_in_text"
	refusedPostgreSQL = "postgresql"
)

var refusedReasons = []string{refusedKind, refusedColumns, refusedStatement, refusedName, refusedNUL, refusedPostgreSQL}

// IsPostgresURL reports whether target names a PostgreSQL target
// (postgres:// or postgresql://).
func IsPostgresURL(target string) bool {
	u, err := url.Parse(target)
	return err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql")
}

// pgKeyName is the name of the unique index on (tags…, time) of table: a
// hash of the name, so that it fits pgMaxNameBytes whatever the table's.
func pgKeyName(table string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(table))
	return fmt.Sprintf("ingestd_key_%016x", h.Sum64())
}

// pgType is the column type of a kind.
func pgType(k feed.Kind) string {
	switch k {
	case feed.KindInt:
		return "bigint"
	case feed.KindFloat:
		return "double precision"
	case feed.KindBool:
		return "boolean"
	case feed.KindUint:
		return "numeric(20,0)"
	}
	return "text" // tags and string fields
}

// kindName names a kind in messages.
func kindName(k feed.Kind) string {
	switch k {
	case feed.KindTag:
		return "tag"
	case feed.KindInt:
		return "integer field"
	case feed.KindFloat:
		return "float field"
	case feed.KindBool:
		return "boolean field"
	case feed.KindUint:
		return "unsigned field"
	}
	return "string field"
}

// ident quotes a name as an SQL identifier.
func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// staleCursorError is returned by a transaction that found the cursor row
// moved by another mirror: it rolled back, and the mirror resumes from
// cur (nil: none, copy in full).
type staleCursorError struct{ cur *Cursor }

func (e *staleCursorError) Error() string { return "another mirror moved the cursor" }

// targetError marks a failure of PostgreSQL worth retrying (a lost
// connection, a deadlock, a shutdown).
type targetError struct{ err error }

func (e *targetError) Error() string { return "postgresql: " + e.err.Error() }
func (e *targetError) Unwrap() error { return e.err }

// sourceError marks a failure of the source worth retrying that ended a
// copy into PostgreSQL: the copy's transaction is rolled back rather than
// held open (with TRUNCATE's lock, which readers of the table wait for)
// while the source is away, and the copy starts over.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return "source: " + e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// pgColumn is one column of the target table as its catalog holds it.
type pgColumn struct {
	typ string // format_type's name: bigint, text, numeric(20,0) …
	tag bool   // a column of the key index other than time
}

// pgTarget is a PostgreSQL target; only Run's goroutine uses it.
type pgTarget struct {
	url     string
	table   string // the target table: the mirrored table's name
	key     string // pgKeyName(table)
	source  string // --source, recorded in the cursor row
	maxStmt int    // --pg-max-statement-bytes
	maxCols int    // --pg-max-columns
	m       *metrics
	conn    *pgx.Conn // nil until connected, and after a failure

	// Reused by applyRows.
	folded []pgPoint
	index  map[string]int
}

// pgPoint is a page's fragments of one point folded into one: later
// fields overwrite earlier ones, as ingestd's own row merges them.
type pgPoint struct {
	series string
	tags   []feed.Tag
	time   int64
	fields []feed.PointField // sorted by key once folded
}

// fail turns an error of a PostgreSQL call into what Run makes of it: a
// refusal no retry fixes (ErrTargetRefused, counted) or a *targetError
// to retry on a new connection.
func (t *pgTarget) fail(err error) error {
	var pe *pgconn.PgError
	var stale *staleCursorError
	switch {
	case err == nil, errors.Is(err, ErrTargetRefused), errors.As(err, &stale):
		return err
	case errors.As(err, &pe) && slices.Contains([]string{"22", "23", "42", "54", "0A"}, pe.Code[:2]):
		t.closeConn()
		return t.refuse(refusedPostgreSQL, fmt.Errorf("postgresql refused it: %w", err))
	}
	t.closeConn()
	return &targetError{err: err}
}

// refuse counts a refusal of reason and returns the error that stops the
// mirror.
func (t *pgTarget) refuse(reason string, err error) error {
	t.m.refused.WithLabelValues(reason).Inc()
	return fmt.Errorf("%w (%s): %w: the mirror stops (nothing of the page was applied; fix the target table or the source and restart it)",
		ErrTargetRefused, reason, err)
}

// closeConn drops the connection (a failed one; the next call opens
// another).
func (t *pgTarget) closeConn() {
	if t.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = t.conn.Close(ctx)
		t.conn = nil
	}
}

// connect returns the connection, opening it (and creating the cursor
// table, under an advisory lock so that two mirrors starting together do
// not race) when there is none.
func (t *pgTarget) connect(ctx context.Context) (*pgx.Conn, error) {
	if t.conn != nil && !t.conn.IsClosed() {
		return t.conn, nil
	}
	t.closeConn()
	cc, err := pgx.ParseConfig(t.url)
	if err != nil {
		return nil, err
	}
	// Statements are cached by description only, on the client: a page's
	// INSERTs differ by their rows and fields, and a server-side prepared
	// statement each (pgx's default) would pile up on the server.
	cc.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	if cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = "ingestd mirror"
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, err
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", pgCursorTable); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+pgCursorTable+
			" (table_name text PRIMARY KEY, source text NOT NULL, epoch bigint NOT NULL, next bigint NOT NULL, updated timestamptz NOT NULL DEFAULT now())")
		return err
	})
	if err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("create %s: %w", pgCursorTable, err)
	}
	t.conn = conn
	return conn, nil
}

// load reads the table's cursor; nil when there is none.
func (t *pgTarget) load(ctx context.Context) (*Cursor, error) {
	conn, err := t.connect(ctx)
	if err != nil {
		return nil, t.fail(err)
	}
	var epoch, next int64
	err = conn.QueryRow(ctx, "SELECT epoch, next FROM "+pgCursorTable+" WHERE table_name = $1", t.table).Scan(&epoch, &next)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && epoch == 0) {
		return nil, nil
	}
	if err != nil {
		return nil, t.fail(err)
	}
	return &Cursor{Source: t.source, Table: t.table, Epoch: uint64(epoch), Next: uint64(next)}, nil
}

// begin opens a transaction holding the lock of the table's cursor row,
// provided the row holds want (nil: no cursor); else it rolls back and
// returns *staleCursorError with what it holds.
func (t *pgTarget) begin(ctx context.Context, want *Cursor) (pgx.Tx, error) {
	conn, err := t.connect(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	var epoch, next int64
	_, err = tx.Exec(ctx, "INSERT INTO "+pgCursorTable+" (table_name, source, epoch, next) VALUES ($1, $2, 0, 0) ON CONFLICT DO NOTHING", t.table, t.source)
	if err == nil {
		err = tx.QueryRow(ctx, "SELECT epoch, next FROM "+pgCursorTable+" WHERE table_name = $1 FOR UPDATE", t.table).Scan(&epoch, &next)
	}
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	var got *Cursor
	if epoch != 0 {
		got = &Cursor{Source: t.source, Table: t.table, Epoch: uint64(epoch), Next: uint64(next)}
	}
	same := (got == nil && want == nil) || (got != nil && want != nil && got.Epoch == want.Epoch && got.Next == want.Next)
	if !same {
		_ = tx.Rollback(ctx)
		t.m.stale.Inc()
		return nil, &staleCursorError{cur: got}
	}
	return tx, nil
}

// commit moves the cursor to cur and commits tx.
func (t *pgTarget) commit(ctx context.Context, tx pgx.Tx, cur *Cursor) error {
	if cur.Epoch > math.MaxInt64 || cur.Next > math.MaxInt64 {
		return t.refuse(refusedPostgreSQL, fmt.Errorf("cursor (%d, %d) does not fit bigint", cur.Epoch, cur.Next))
	}
	_, err := tx.Exec(ctx, "UPDATE "+pgCursorTable+" SET source = $2, epoch = $3, next = $4, updated = now() WHERE table_name = $1",
		t.table, t.source, int64(cur.Epoch), int64(cur.Next))
	if err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// columns reads the target table's columns; nil when it does not exist.
func (t *pgTarget) columns(ctx context.Context, tx pgx.Tx) (map[string]pgColumn, error) {
	rows, err := tx.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod),
  EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE i.indrelid = a.attrelid AND c.relname = $2 AND a.attnum = ANY(i.indkey::int2[]))
FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`, ident(t.table), t.key)
	if err != nil {
		return nil, err
	}
	var cols map[string]pgColumn
	var name string
	var c pgColumn
	_, err = pgx.ForEachRow(rows, []any{&name, &c.typ, &c.tag}, func() error {
		if cols == nil {
			cols = map[string]pgColumn{}
		}
		c.tag = c.tag && name != "time"
		cols[name] = c
		return nil
	})
	return cols, err
}

// ensureSchema creates the target table when it does not exist and adds
// the columns pts need (a new tag rebuilds the key index over every tag),
// within tx. It returns the table's columns.
func (t *pgTarget) ensureSchema(ctx context.Context, tx pgx.Tx, pts []feed.Point) (map[string]pgColumn, error) {
	cols, err := t.columns(ctx, tx)
	if err != nil {
		return nil, err
	}
	if cols == nil {
		if len(t.table) > pgMaxNameBytes {
			return nil, t.refuse(refusedName, fmt.Errorf("table name %s is %d bytes, longer than PostgreSQL keeps (%d)", feed.QuoteInput(t.table), len(t.table), pgMaxNameBytes))
		}
		if _, err := tx.Exec(ctx, "CREATE TABLE "+ident(t.table)+` ("time" bigint NOT NULL)`); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, "CREATE UNIQUE INDEX "+ident(t.key)+" ON "+ident(t.table)+` ("time")`); err != nil {
			return nil, err
		}
		cols = map[string]pgColumn{"time": {typ: "bigint"}}
	}
	added := map[string]feed.Kind{}
	need := func(name string, k feed.Kind) error {
		if c, ok := cols[name]; ok {
			if c.tag != (k == feed.KindTag) || c.typ != pgType(k) {
				what := "a " + c.typ + " field column"
				if c.tag {
					what = "a tag column"
				}
				return t.refuse(refusedKind, fmt.Errorf("column %s of the target table is %s, the source's is a %s (%s): drop the target table (the mirror copies it again) or the column",
					feed.QuoteInput(name), what, kindName(k), pgType(k)))
			}
			return nil
		}
		if prev, ok := added[name]; ok {
			if prev != k {
				return t.refuse(refusedKind, fmt.Errorf("column %s is a %s and a %s in one page", feed.QuoteInput(name), kindName(prev), kindName(k)))
			}
			return nil
		}
		if len(name) > pgMaxNameBytes {
			return t.refuse(refusedName, fmt.Errorf("column name %s is %d bytes, longer than PostgreSQL keeps (%d)", feed.QuoteInput(name), len(name), pgMaxNameBytes))
		}
		if len(cols)+len(added) >= t.maxCols {
			return t.refuse(refusedColumns, fmt.Errorf("column %s would be column %d of the target table, past --pg-max-columns (%d)", feed.QuoteInput(name), len(cols)+len(added)+1, t.maxCols))
		}
		added[name] = k
		return nil
	}
	for i := range pts {
		for _, tg := range pts[i].Tags {
			if err := need(tg.Key, feed.KindTag); err != nil {
				return nil, err
			}
		}
		for _, f := range pts[i].Fields {
			if err := need(f.Key, f.Value.Kind); err != nil {
				return nil, err
			}
		}
	}
	if len(added) == 0 {
		return cols, nil
	}
	names := make([]string, 0, len(added))
	for n := range added {
		names = append(names, n)
	}
	slices.Sort(names)
	var sb strings.Builder
	sb.WriteString("ALTER TABLE " + ident(t.table))
	newTag := false
	for i, n := range names {
		k := added[n]
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(" ADD COLUMN " + ident(n) + " " + pgType(k))
		if k == feed.KindTag {
			sb.WriteString(" NOT NULL DEFAULT ''")
			newTag = true
		}
		cols[n] = pgColumn{typ: pgType(k), tag: k == feed.KindTag}
	}
	if _, err := tx.Exec(ctx, sb.String()); err != nil {
		return nil, err
	}
	t.m.columns.Add(float64(len(names)))
	if newTag {
		if _, err := tx.Exec(ctx, "DROP INDEX IF EXISTS "+ident(t.key)); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, "CREATE UNIQUE INDEX "+ident(t.key)+" ON "+ident(t.table)+" ("+strings.Join(keyColumns(cols), ", ")+")"); err != nil {
			return nil, err
		}
	}
	return cols, nil
}

// keyColumns returns the quoted columns of the key: every tag column,
// sorted, then time.
func keyColumns(cols map[string]pgColumn) []string {
	var out []string
	for n, c := range cols {
		if c.tag {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	for i, n := range out {
		out[i] = ident(n)
	}
	return append(out, `"time"`)
}

// fold folds pts by point (series and time) into t.folded, in the order
// their points first appear, each point's fields sorted by key.
func (t *pgTarget) fold(pts []feed.Point) []pgPoint {
	out := t.folded[:0]
	if t.index == nil {
		t.index = map[string]int{}
	}
	clear(t.index)
	var kb []byte
	for i := range pts {
		p := &pts[i]
		kb = strconv.AppendInt(append(kb[:0], p.Series...), p.Time, 10)
		j, ok := t.index[string(kb)]
		if !ok {
			t.index[string(kb)] = len(out)
			out = append(out, pgPoint{series: p.Series, tags: slices.Clone(p.Tags), time: p.Time, fields: slices.Clone(p.Fields)})
			continue
		}
		for _, f := range p.Fields {
			k := slices.IndexFunc(out[j].fields, func(g feed.PointField) bool { return g.Key == f.Key })
			if k >= 0 {
				out[j].fields[k] = f
			} else {
				out[j].fields = append(out[j].fields, f)
			}
		}
	}
	for i := range out {
		slices.SortFunc(out[i].fields, func(a, b feed.PointField) int { return strings.Compare(a.Key, b.Key) })
	}
	t.folded = out
	return out
}

// applyRows upserts pts (a page's points, in feed order) into the target
// table within tx, whose columns are cols: folded per point, grouped by
// the fields they carry, one INSERT … ON CONFLICT DO UPDATE per group and
// per --pg-max-statement-bytes (or 65535 parameters). It returns the
// statements sent.
func (t *pgTarget) applyRows(ctx context.Context, tx pgx.Tx, cols map[string]pgColumn, pts []feed.Point) (int, error) {
	folded := t.fold(pts)
	groups := map[string][]int{}
	var order []string
	for i := range folded {
		var sig strings.Builder
		for _, f := range folded[i].fields {
			sig.WriteString(f.Key)
			sig.WriteByte(0)
		}
		s := sig.String()
		if _, ok := groups[s]; !ok {
			order = append(order, s)
		}
		groups[s] = append(groups[s], i)
	}
	var tags []string
	for n, c := range cols {
		if c.tag {
			tags = append(tags, n)
		}
	}
	slices.Sort(tags)
	key := keyColumns(cols)
	stmts := 0
	for _, s := range order {
		idx := groups[s]
		first := folded[idx[0]]
		names := slices.Clone(key)
		set := make([]string, 0, len(first.fields))
		for _, f := range first.fields {
			names = append(names, ident(f.Key))
			set = append(set, ident(f.Key)+" = EXCLUDED."+ident(f.Key))
		}
		head := "INSERT INTO " + ident(t.table) + " (" + strings.Join(names, ", ") + ") VALUES "
		tail := " ON CONFLICT (" + strings.Join(key, ", ") + ") DO UPDATE SET " + strings.Join(set, ", ")
		if len(set) == 0 { // a point without fields: line protocol has none, but a point is its key
			tail = " ON CONFLICT (" + strings.Join(key, ", ") + ") DO NOTHING"
		}
		width := len(names)
		var sql strings.Builder
		var args []any
		bytes := 0
		flush := func() error {
			if len(args) == 0 {
				return nil
			}
			sql.WriteString(tail)
			if _, err := tx.Exec(ctx, sql.String(), args...); err != nil {
				return err
			}
			stmts++
			sql.Reset()
			args = args[:0]
			return nil
		}
		for _, i := range idx {
			p := &folded[i]
			row, rowBytes, err := t.rowArgs(p, tags)
			if err != nil {
				return stmts, err
			}
			rowBytes += width * 8 // "($n, …)"
			if len(head)+len(tail)+rowBytes > t.maxStmt {
				return stmts, t.refuse(refusedStatement, fmt.Errorf("the point at %d of series %s takes %d bytes in a statement, past --pg-max-statement-bytes (%d)",
					p.time, feed.QuoteInput(p.series), len(head)+len(tail)+rowBytes, t.maxStmt))
			}
			if len(args) > 0 && (bytes+rowBytes > t.maxStmt || len(args)+width > pgMaxParams) {
				if err := flush(); err != nil {
					return stmts, err
				}
			}
			if len(args) == 0 {
				sql.WriteString(head)
				bytes = len(head) + len(tail)
			} else {
				sql.WriteByte(',')
			}
			sql.WriteByte('(')
			for c := range row {
				if c > 0 {
					sql.WriteByte(',')
				}
				sql.WriteByte('$')
				sql.WriteString(strconv.Itoa(len(args) + c + 1))
			}
			sql.WriteByte(')')
			args = append(args, row...)
			bytes += rowBytes
		}
		if err := flush(); err != nil {
			return stmts, err
		}
	}
	return stmts, nil
}

// rowArgs returns the parameters of p's row (its tags in the order of
// tags, the empty string for those it lacks; time; its fields) and their
// size in bytes.
func (t *pgTarget) rowArgs(p *pgPoint, tags []string) ([]any, int, error) {
	row := make([]any, 0, len(tags)+1+len(p.fields))
	n := 0
	for _, k := range tags {
		v := ""
		if j := slices.IndexFunc(p.tags, func(tg feed.Tag) bool { return tg.Key == k }); j >= 0 {
			v = p.tags[j].Value
		}
		row = append(row, v)
		n += len(v)
	}
	row = append(row, p.time)
	n += 8
	for _, f := range p.fields {
		v := f.Value
		switch v.Kind {
		case feed.KindInt:
			row = append(row, v.Int())
			n += 8
		case feed.KindFloat:
			row = append(row, v.Float())
			n += 8
		case feed.KindBool:
			row = append(row, v.Bool())
			n++
		case feed.KindUint:
			row = append(row, pgtype.Numeric{Int: new(big.Int).SetUint64(v.Num), Valid: true})
			n += 20
		default:
			if strings.IndexByte(v.Str, 0) >= 0 {
				return nil, 0, t.refuse(refusedNUL, fmt.Errorf("string field %s of the point at %d of series %s holds NUL, which PostgreSQL's text cannot",
					feed.QuoteInput(f.Key), p.time, feed.QuoteInput(p.series)))
			}
			row = append(row, v.Str)
			n += len(v.Str)
		}
	}
	return row, n, nil
}

// applyPage applies one drained page's points on top of want and moves
// the cursor to next, in one transaction. It returns the statements sent.
func (t *pgTarget) applyPage(ctx context.Context, want, next *Cursor, pts []feed.Point) (int, error) {
	tx, err := t.begin(ctx, want)
	if err != nil {
		return 0, t.fail(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	stmts := 0
	if len(pts) > 0 {
		cols, err := t.ensureSchema(ctx, tx, pts)
		if err != nil {
			return 0, t.fail(err)
		}
		if stmts, err = t.applyRows(ctx, tx, cols, pts); err != nil {
			return 0, t.fail(err)
		}
	}
	if err := t.commit(ctx, tx, next); err != nil {
		return 0, t.fail(err)
	}
	return stmts, nil
}

// runPG is Run for a PostgreSQL target.
func (mr *Mirror) runPG(ctx context.Context) error {
	t := mr.pg
	defer t.closeConn()
	var cur *Cursor
	err := mr.retryPG(ctx, func() (err error) {
		cur, err = t.load(ctx)
		return err
	})
	if err != nil {
		return mr.stopped(ctx, err)
	}
	if cur != nil {
		mr.logger.Info("resuming from the target's cursor", "epoch", cur.Epoch, "next", cur.Next)
		mr.m.position.Set(float64(cur.Next))
	}
	// needCopy: copy in full, in a transaction that begins on top of cur
	// (nil: no cursor yet; else the cursor the source refused).
	needCopy := cur == nil
	// Copies that follow one another without a row followed in between
	// are paced, as Run paces them: a source that refuses every cursor
	// (409) or changes during every copy would otherwise have the target
	// table emptied and filled again as fast as the requests go.
	var resyncs pacer
	for ctx.Err() == nil {
		var stale *staleCursorError
		if needCopy {
			if err := resyncs.wait(ctx, mr.cfg.MaxBackoff); err != nil {
				return nil
			}
			var next *Cursor
			err := mr.retryPG(ctx, func() (err error) {
				next, err = mr.pgBootstrap(ctx, cur)
				return err
			})
			switch {
			case errors.Is(err, errResync):
				mr.peerLog.Error("source changed during the copy: starting over", "err", err)
				continue
			case errors.As(err, &stale):
				mr.peerLog.Info("another mirror moved the cursor: resuming from it")
				cur, needCopy = stale.cur, stale.cur == nil
				continue
			case err != nil:
				return mr.stopped(ctx, err)
			}
			cur, needCopy = next, false
		}
		followed, err := mr.pgFollow(ctx, cur)
		if followed {
			resyncs.reset()
		}
		switch {
		case errors.Is(err, errResync):
			mr.peerLog.Error("source refused the cursor: resyncing in full", "epoch", cur.Epoch, "next", cur.Next, "err", err)
			needCopy = true
		case errors.As(err, &stale):
			mr.peerLog.Info("another mirror moved the cursor: resuming from it")
			cur, needCopy = stale.cur, stale.cur == nil
		case err != nil:
			return mr.stopped(ctx, err)
		}
	}
	return nil
}

// stopped returns err, or nil when ctx ended (the mirror was stopped).
func (mr *Mirror) stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// retryPG runs fn until it returns anything but a *targetError (a
// failure of PostgreSQL worth retrying) or a *sourceError (of the source,
// during a copy), pausing with jittered exponential backoff between
// attempts.
func (mr *Mirror) retryPG(ctx context.Context, fn func() error) error {
	backoff := pacer{d: min(100*time.Millisecond, mr.cfg.MaxBackoff)}
	for {
		err := fn()
		var te *targetError
		var se *sourceError
		side := "target"
		switch {
		case ctx.Err() != nil:
			return err
		case errors.As(err, &se):
			side = "source"
		case !errors.As(err, &te):
			return err
		}
		mr.m.errors.WithLabelValues(side).Inc()
		mr.peerLog.Warn("request failed; retrying", "side", side, "err", err, "backoff", backoff.d)
		if err := backoff.wait(ctx, mr.cfg.MaxBackoff); err != nil {
			return err
		}
	}
}

// pgBootstrap copies the table in one transaction that begins on top of
// refused (the cursor the source refused; nil: none), truncates the
// target table, upserts every copied page and sets the cursor to the
// copy's epoch and watermark. A crash or a failure rolls all of it back.
func (mr *Mirror) pgBootstrap(ctx context.Context, refused *Cursor) (*Cursor, error) {
	t := mr.pg
	st, err := mr.resyncStatus(ctx)
	if err != nil {
		return nil, err
	}
	budget, err := mr.newCopyBudget(ctx, st)
	if err != nil {
		return nil, err
	}
	tx, err := t.begin(ctx, refused)
	if err != nil {
		return nil, t.fail(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := t.ensureSchema(ctx, tx, nil); err != nil {
		return nil, t.fail(err)
	}
	if _, err := tx.Exec(ctx, "TRUNCATE "+ident(t.table)); err != nil {
		return nil, t.fail(err)
	}
	mr.logger.Info("copying table into the target", "source", mr.cfg.Source)
	var cur *Cursor
	req := client.RowsRequest{Table: mr.cfg.Table, Limit: mr.cfg.Limit, Format: client.FormatLP}
	rows, stmts := uint64(0), 0
	for {
		// One attempt: a failure worth retrying starts the copy over,
		// its transaction rolled back (sourceError).
		pg, err := mr.src.Rows(ctx, req)
		if err != nil {
			if ferr := mr.final("source", resync(err)); ferr != nil || ctx.Err() != nil {
				return nil, cmp.Or(ferr, err)
			}
			return nil, &sourceError{err: err}
		}
		if cur == nil {
			cur = &Cursor{Source: mr.cfg.Source, Table: mr.cfg.Table, Epoch: pg.Epoch, Next: pg.Watermark}
		} else if pg.Epoch != cur.Epoch || pg.Watermark != cur.Next {
			return nil, mr.protocolErr(reasonBadPage, fmt.Errorf("copy page of epoch %d and watermark %d, the copy began at %d and %d", pg.Epoch, pg.Watermark, cur.Epoch, cur.Next))
		}
		n, err := mr.checkLines(pg.Body)
		if err != nil {
			return nil, err
		}
		rows += uint64(n)
		if err := budget.check(ctx, mr, rows); err != nil {
			return nil, err
		}
		if n > 0 {
			cols, err := t.ensureSchema(ctx, tx, mr.batch.Points)
			if err != nil {
				return nil, t.fail(err)
			}
			s, err := t.applyRows(ctx, tx, cols, mr.batch.Points)
			if err != nil {
				return nil, t.fail(err)
			}
			stmts += s
		}
		if req.Cursor = pg.Cursor; req.Cursor == "" {
			break
		}
	}
	if err := t.commit(ctx, tx, cur); err != nil {
		return nil, t.fail(err)
	}
	mr.m.statements.Add(float64(stmts))
	mr.m.rows.Add(float64(rows))
	mr.m.pages.Inc()
	mr.committed(cur)
	mr.logger.Info("table copied; following the feed", "rows", rows, "epoch", cur.Epoch, "from", cur.Next)
	return cur, nil
}

// committed publishes a cursor PostgreSQL committed.
func (mr *Mirror) committed(c *Cursor) {
	mr.m.position.Set(float64(c.Next))
	mr.m.lastCommit.SetToCurrentTime()
}

// pgFollow drains the feed from cur with long-polls, applying each page
// and moving the cursor in one transaction, until ctx ends, a resync is
// due (errResync) or another mirror moved the cursor (*staleCursorError);
// followed tells whether a page brought rows.
func (mr *Mirror) pgFollow(ctx context.Context, cur *Cursor) (followed bool, err error) {
	var pg client.Page
	for ctx.Err() == nil {
		n, err := mr.nextPage(ctx, cur, &pg)
		if err != nil {
			return followed, err
		}
		mr.m.lag.Set(float64(pg.Watermark - min(pg.Watermark, pg.Next)))
		if pg.Next == cur.Next && n == 0 {
			continue
		}
		next := &Cursor{Source: cur.Source, Table: cur.Table, Epoch: cur.Epoch, Next: pg.Next}
		var stmts int
		err = mr.retryPG(ctx, func() (err error) {
			stmts, err = mr.pg.applyPage(ctx, cur, next, mr.batch.Points)
			return err
		})
		if err != nil {
			return followed, err
		}
		followed = followed || n > 0
		*cur = *next
		mr.m.statements.Add(float64(stmts))
		mr.m.pages.Inc()
		mr.m.rows.Add(float64(n))
		mr.committed(cur)
		if time.Since(mr.lastProgress) >= 10*time.Second {
			mr.lastProgress = time.Now()
			mr.logger.Info("mirror progress", "epoch", cur.Epoch, "position", cur.Next, "watermark", pg.Watermark)
		}
	}
	return followed, nil
}
