package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/httpapi/auth"
	sqlp "github.com/ingestd/ingestd/httpapi/sql"
	"github.com/ingestd/ingestd/httpapi/wire"
)

// Statement kinds, the closed label set of ingestd_sql_statements_total.
const (
	stmtCreateTable = "create_table"
	stmtAlterTable  = "alter_table"
	stmtShowSync    = "show_sync"
	stmtShowColumns = "show_columns"
	stmtShowTables  = "show_tables"
	stmtTruncate    = "truncate"
	stmtDropTable   = "drop_table"
	stmtInsert      = "insert"
	stmtDrain       = "drain"
	stmtRead        = "read"
	stmtInvalid     = "invalid"
)

// sql serves GET and POST /api/v1/sql (docs/guide.md#sql): one statement
// per request, q in a JSON body {"q": …}, a form body or the query
// string (GET: reads only), with an optional time_format beside it. It
// parses (httpapi/sql), then runs the statement through the same feed
// methods as the REST routes. Results are {"columns","rows"} JSON (a
// drain's page envelope for drains), or InfluxDB /query's CSV for
// Accept: text/csv.
// sqlParsedFactor is how many times its bytes a SQL statement holds while
// it is parsed and run: a 1 MiB INSERT of 10,000 rows of 48 integer
// columns held about 70 MB (its literals, then the batch's points).
const sqlParsedFactor = 80

func (a *API) sql(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w}
	kind := stmtInvalid
	defer func() {
		outcome := "ok"
		if sw.code >= 400 {
			outcome = "error"
		}
		a.m.sqlStatements.WithLabelValues(kind, outcome).Inc()
	}()
	q, tf, ok := a.sqlRequest(sw, r)
	if !ok {
		return
	}
	// Parsed, a statement is many times its bytes (a 1 MiB INSERT of
	// 10,000 rows of 48 columns held 70 MB until its commit), and
	// --sql-max-statement-bytes bounds only one: the statements in
	// flight share --sql-max-inflight-bytes.
	held := pageBytes{b: a.sqlBudget, client: requestClient(r)}
	defer held.release()
	if err := held.reserve(r.Context(), int64(len(q))*sqlParsedFactor); err != nil {
		writeErr(sw, err)
		return
	}
	st, err := sqlp.Parse(q, sqlp.Limits{MaxInsertRows: a.opts.SQLMaxInsertRows, MaxColumns: a.opts.SQLMaxColumns, MaxInValues: a.opts.SQLMaxInValues})
	if err != nil {
		e, ok := errors.AsType[*sqlp.Error](err)
		switch {
		case !ok:
			writeErr(sw, err)
		case e.Limit != "":
			a.m.sqlRefused.WithLabelValues(e.Limit).Inc()
			msg := capMessage(e.Error())
			writeJSON(sw, http.StatusRequestEntityTooLarge, wire.ErrorBody{Code: wire.CodeTooLarge, Message: msg, Error: msg, Line: e.Pos.Line, Column: e.Pos.Column})
		case e.LimitRequired:
			writeStatementErr(sw, wire.CodeLimitRequired, e)
		default:
			writeStatementErr(sw, wire.CodeSyntaxError, e)
		}
		return
	}
	kind = statementKind(st)
	if r.Method == http.MethodGet && !st.Read() {
		sw.Header().Set("Allow", http.MethodPost)
		msg := "this statement changes data: send it with POST (GET carries SELECT and SHOW only)"
		writeJSON(sw, http.StatusMethodNotAllowed, wire.ErrorBody{Code: wire.CodeMethodNotAllowed, Message: msg, Error: msg})
		return
	}
	access := statementAccess(st)
	if !a.sqlAllowed(sw, r, access) {
		return
	}
	csv := acceptsCSV(r.Header.Get("Accept"))
	switch st := st.(type) {
	case *sqlp.Select:
		if st.Drain {
			format := formatJSON
			if csv {
				format = formatCSV
			}
			req := feed.DrainRequest{Table: st.Table.Name, After: st.After, Epoch: st.Epoch, HasEpoch: st.HasEpoch, Limit: st.Limit}
			if st.Columns != nil {
				req.Columns = names(st.Columns)
			}
			drainFilter(st, &req)
			a.servePage(sw, r, req, format, tf, "")
			return
		}
		a.sqlRead(sw, r, st, csv, tf)
	case *sqlp.Insert:
		a.sqlInsert(sw, r, st)
	default:
		// As long as the table list (listTables) or the columns
		// (getTable).
		var list int64
		switch st := st.(type) {
		case *sqlp.ShowTables:
			list = tableListBytes(a.opts.Tables.Tables(), auth.FromContext(r.Context()))
		case *sqlp.ShowColumns:
			list = a.columnsListBytes(st.Table.Name)
		}
		if list > 0 {
			lb := pageBytes{b: a.budget, client: requestClient(r)}
			defer lb.release()
			if err := lb.reserve(r.Context(), list); err != nil {
				writeErr(sw, err)
				return
			}
		}
		res, err := a.runTableStatement(r.Context(), st)
		if access.audit != "" {
			a.audit(r, access.audit, access.table, err)
		}
		if err != nil {
			writeErr(sw, err)
			return
		}
		writeResult(sw, res, csv, tf)
	}
}

func statementKind(st sqlp.Statement) string {
	switch st := st.(type) {
	case *sqlp.CreateTable:
		return stmtCreateTable
	case *sqlp.AlterSync:
		return stmtAlterTable
	case *sqlp.ShowSync:
		return stmtShowSync
	case *sqlp.ShowColumns:
		return stmtShowColumns
	case *sqlp.ShowTables:
		return stmtShowTables
	case *sqlp.Truncate:
		return stmtTruncate
	case *sqlp.DropTable:
		return stmtDropTable
	case *sqlp.Insert:
		return stmtInsert
	case *sqlp.Select:
		if st.Drain {
			return stmtDrain
		}
		return stmtRead
	}
	return stmtInvalid
}

// sqlAccess is what a statement needs: the scope its REST twin needs on
// its table ("" for any table), and, for a statement that changes a
// table, its audit action (as the REST route's).
type sqlAccess struct {
	scope auth.Scope
	table string
	audit string
}

func statementAccess(st sqlp.Statement) sqlAccess {
	switch st := st.(type) {
	case *sqlp.CreateTable:
		return sqlAccess{auth.Admin, st.Table.Name, "table.create"}
	case *sqlp.AlterSync:
		return sqlAccess{auth.Admin, st.Table.Name, "sync.set"}
	case *sqlp.Truncate:
		return sqlAccess{auth.Admin, st.Table.Name, "table.truncate"}
	case *sqlp.DropTable:
		return sqlAccess{auth.Admin, st.Table.Name, "table.drop"}
	case *sqlp.ShowSync:
		return sqlAccess{scope: auth.Drain | auth.Admin, table: st.Table.Name}
	case *sqlp.ShowColumns:
		return sqlAccess{scope: auth.Drain | auth.Admin, table: st.Table.Name}
	case *sqlp.Insert:
		return sqlAccess{scope: auth.Write, table: st.Table.Name}
	case *sqlp.Select:
		return sqlAccess{scope: auth.Drain, table: st.Table.Name}
	}
	return sqlAccess{scope: auth.Any} // SHOW TABLES lists what the token may see
}

// sqlAllowed refuses, with an auth file, a statement whose token lacks its
// scope (401/403, counted and audited like a route's), writing the answer
// itself. Unlike the table routes, SQL keeps taking form bodies for every
// statement (InfluxDB's /query convention): a browser's cross-site form is
// refused by crossSite, which sees its Origin and Sec-Fetch-Site.
func (a *API) sqlAllowed(w http.ResponseWriter, r *http.Request, access sqlAccess) bool {
	if auth.FromContext(r.Context()) == nil {
		return true
	}
	if _, err := a.opts.Auth.Check(r, access.scope, access.table, "sql"); err != nil {
		auth.WriteError(w, err)
		return false
	}
	return true
}

func names(ns []sqlp.Name) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Name
	}
	return out
}

// acceptsCSV reports whether an Accept header asks for CSV (text/csv or
// application/csv, as InfluxDB's /query takes them).
func acceptsCSV(accept string) bool {
	for part := range strings.SplitSeq(accept, ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err == nil && (mt == "text/csv" || mt == "application/csv") {
			return true
		}
	}
	return false
}

// writeStatementErr writes a 400 naming the statement's line and column.
func writeStatementErr(w http.ResponseWriter, code string, e *sqlp.Error) {
	msg := capMessage(e.Error())
	writeJSON(w, http.StatusBadRequest, wire.ErrorBody{Code: code, Message: msg, Error: msg, Line: e.Pos.Line, Column: e.Pos.Column})
}

// sqlRequest reads the statement and time_format of a SQL request,
// bounded by Options.SQLMaxStatementBytes. It writes the error itself and
// reports false on a bad request.
func (a *API) sqlRequest(w http.ResponseWriter, r *http.Request) (string, timeFormat, bool) {
	maxBytes := a.opts.SQLMaxStatementBytes
	tooLarge := func() (string, timeFormat, bool) {
		a.m.sqlRefused.WithLabelValues("statement_bytes").Inc()
		msg := fmt.Sprintf("the SQL request is larger than --sql-max-statement-bytes=%d", maxBytes)
		writeJSON(w, http.StatusRequestEntityTooLarge, wire.ErrorBody{Code: wire.CodeTooLarge, Message: msg, Error: msg})
		return "", 0, false
	}
	var qs, tfs []string
	if r.Method == http.MethodPost {
		body := http.MaxBytesReader(w, r.Body, int64(maxBytes))
		ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if ct == "application/json" {
			var in struct {
				Q          *string `json:"q"`
				TimeFormat *string `json:"time_format"`
			}
			dec := json.NewDecoder(body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&in); err != nil {
				if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
					return tooLarge()
				}
				writeClientErr(w, wire.CodeInvalidBody, `body must be {"q": "<one SQL statement>"[, "time_format": …]}: `+err.Error())
				return "", 0, false
			}
			if in.Q != nil {
				qs = append(qs, *in.Q)
			}
			if in.TimeFormat != nil {
				tfs = append(tfs, *in.TimeFormat)
			}
		} else {
			r.Body = body
			if err := r.ParseForm(); err != nil {
				if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
					return tooLarge()
				}
				writeClientErr(w, wire.CodeInvalidBody, "form body cannot be read: "+err.Error())
				return "", 0, false
			}
			qs, tfs = r.PostForm["q"], r.PostForm["time_format"]
		}
	}
	url := r.URL.Query()
	qs, tfs = append(qs, url["q"]...), append(tfs, url["time_format"]...)
	if len(qs) > 1 || len(tfs) > 1 {
		writeClientErr(w, wire.CodeInvalidParameter, "q and time_format may each be given once (in the body or the query string)")
		return "", 0, false
	}
	if len(qs) == 0 || strings.TrimSpace(qs[0]) == "" {
		writeClientErr(w, wire.CodeInvalidParameter, `q is required: one SQL statement, as a form field, a JSON body {"q": …} or in the query string`)
		return "", 0, false
	}
	if len(qs[0]) > maxBytes {
		return tooLarge()
	}
	tf, ok := timeRFC3339, true
	if len(tfs) == 1 {
		if tf, ok = parseTimeFormat(tfs[0]); !ok {
			writeClientErr(w, wire.CodeInvalidParameter, "time_format must be one of rfc3339, ns, us, ms, s, got "+feed.QuoteInput(tfs[0]))
			return "", 0, false
		}
	}
	return qs[0], tf, true
}

// result is a small SQL result: its name (the CSV's name column: a table,
// or "tables"), columns and rows.
type result struct {
	name string
	cols []string
	rows [][]feed.Value
}

// writeResult writes res as {"columns","rows"} JSON or as CSV.
func writeResult(w http.ResponseWriter, res result, csv bool, tf timeFormat) {
	enc := encoder{timeFormat: tf}
	if csv {
		for _, row := range res.rows {
			enc.csvRow(res.name, row)
		}
		writePage(w, contentTypeCSV, csvHeader(res.cols), enc.buf)
		return
	}
	for i, row := range res.rows {
		if i > 0 {
			enc.buf = append(enc.buf, ',')
		}
		enc.row(row)
	}
	writePage(w, "application/json", resultHead(res.cols), enc.buf, []byte(jsonPageEnd))
}

// resultHead opens a JSON result: {"columns":[…],"rows":[.
func resultHead(cols []string) []byte {
	b := append([]byte(nil), `{"columns":[`...)
	for i, c := range cols {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, c)
	}
	return append(b, `],"rows":[`...)
}

func boolValue(b bool) feed.Value {
	if b {
		return feed.Value{Kind: feed.KindBool, Num: 1}
	}
	return feed.Value{Kind: feed.KindBool}
}

func uintValue(v uint64) feed.Value { return feed.Value{Kind: feed.KindUint, Num: v} }

func stringValue(s string) feed.Value { return feed.Value{Kind: feed.KindString, Str: s} }

// syncResult is SHOW SYNC's answer (enabled, epoch, seq, watermark,
// horizon: docs/contract.md#terms), also the answer of CREATE TABLE, ALTER
// TABLE and TRUNCATE.
func syncResult(table string, s feed.SyncStatus) result {
	return result{name: table, cols: []string{"enabled", "epoch", "seq", "watermark", "horizon"},
		rows: [][]feed.Value{{boolValue(s.Enabled), uintValue(s.Epoch), uintValue(s.Seq), uintValue(s.Watermark), uintValue(s.Horizon)}}}
}

// sqlTypes names column kinds as CREATE TABLE declares them.
var sqlTypes = map[feed.Kind]string{
	feed.KindTime: "TIMESTAMP", feed.KindTag: "VARCHAR", feed.KindFloat: "DOUBLE", feed.KindInt: "BIGINT",
	feed.KindUint: "UBIGINT", feed.KindString: "VARCHAR", feed.KindBool: "BOOLEAN",
}

// runTableStatement runs the table management statements.
func (a *API) runTableStatement(ctx context.Context, st sqlp.Statement) (result, error) {
	switch st := st.(type) {
	case *sqlp.CreateTable:
		cols := make([]feed.Column, len(st.Columns))
		for i, c := range st.Columns {
			cols[i] = feed.Column{Name: c.Name.Name, Kind: c.Kind}
		}
		s, err := a.opts.Creator.DefineTable(ctx, st.Table.Name, st.Sync, cols)
		if errors.Is(err, feed.ErrTableExists) && st.IfNotExists {
			s, err = a.opts.Tables.Status(st.Table.Name)
		}
		return syncResult(st.Table.Name, s), err
	case *sqlp.AlterSync:
		s, err := a.opts.Admin.SetSync(ctx, st.Table.Name, st.Enabled)
		return syncResult(st.Table.Name, s), err
	case *sqlp.ShowSync:
		s, err := a.opts.Tables.Status(st.Table.Name)
		return syncResult(st.Table.Name, s), err
	case *sqlp.Truncate:
		s, err := a.opts.Admin.Truncate(ctx, st.Table.Name)
		return syncResult(st.Table.Name, s), err
	case *sqlp.DropTable:
		err := a.opts.Admin.Drop(ctx, st.Table.Name)
		dropped := err == nil
		if errors.Is(err, feed.ErrTableNotFound) && st.IfExists {
			err = nil
		}
		return result{name: st.Table.Name, cols: []string{"dropped"}, rows: [][]feed.Value{{boolValue(dropped)}}}, err
	case *sqlp.ShowColumns:
		t, err := a.opts.Tables.Table(st.Table.Name)
		res := result{name: st.Table.Name, cols: []string{"name", "type", "tag"}}
		for _, c := range t.Columns {
			res.rows = append(res.rows, []feed.Value{stringValue(c.Name), stringValue(sqlTypes[c.Kind]), boolValue(c.Kind == feed.KindTag)})
		}
		return res, err
	case *sqlp.ShowTables:
		res := result{name: "tables", cols: []string{"name", "sync", "epoch", "seq", "watermark"}}
		g := auth.FromContext(ctx)
		for _, t := range a.opts.Tables.Tables() {
			if g != nil && !g.Allows(auth.Any, t.Name) {
				continue
			}
			s := t.Sync
			res.rows = append(res.rows, []feed.Value{stringValue(t.Name), boolValue(s.Enabled), uintValue(s.Epoch), uintValue(s.Seq), uintValue(s.Watermark)})
		}
		return res, nil
	}
	return result{}, fmt.Errorf("httpapi: statement %T has no runner", st)
}

// sqlInsert runs INSERT: each row becomes one fragment, stamped like an
// ILP line (docs/contract.md#terms): the named tags make its series, the other named
// columns its fields (NULL leaves a column out), time its timestamp (the
// request's receive time when not given, as for a line without one). The
// table and every column must exist; each value must fit its column's
// type. The sequencer applies to each row the rules every write path
// applies (feed.CheckPoint, docs/security.md#write-validation): a row
// they refuse is answered as a partial insert (row_rejected). It answers
// once every accepted row is durable.
func (a *API) sqlInsert(w http.ResponseWriter, r *http.Request, st *sqlp.Insert) {
	t, err := a.opts.Tables.Table(st.Table.Name)
	if err != nil {
		writeErr(w, err)
		return
	}
	kinds := make([]feed.Kind, len(st.Columns))
	for i, c := range st.Columns {
		j := slices.IndexFunc(t.Columns, func(tc feed.Column) bool { return tc.Name == c.Name })
		if j < 0 {
			writeStatementErr(w, wire.CodeUnknownColumn, sqlp.Errorf(c.Pos, "table %s has no column %s (CREATE TABLE declares columns; line protocol writes add them)", feed.QuoteInput(t.Name), feed.QuoteInput(c.Name)))
			return
		}
		kinds[i] = t.Columns[j].Kind
	}
	now := time.Now().UnixNano()
	b := &feed.Batch{Points: make([]feed.Point, len(st.Rows)), NoCreate: true}
	for i, row := range st.Rows {
		p := &b.Points[i]
		*p = feed.Point{Table: t.Name, Time: now, Line: i + 1}
		for j, lit := range row {
			if lit.Kind == sqlp.LitNull {
				continue
			}
			col := st.Columns[j].Name
			switch kinds[j] {
			case feed.KindTime:
				ns, ok := sqlp.TimeValue(lit)
				if !ok {
					writeStatementErr(w, wire.CodeInvalidValue, sqlp.Errorf(lit.Pos, "time must be integer nanoseconds or an RFC 3339 'string' within ±2^63 ns"))
					return
				}
				p.Time = ns
			case feed.KindTag:
				if lit.Kind != sqlp.LitString || strings.ContainsAny(lit.Text, "\r\n") {
					writeStatementErr(w, wire.CodeInvalidValue, sqlp.Errorf(lit.Pos, "%s is a tag: its value is a 'string' without line breaks (as in line protocol)", feed.QuoteInput(col)))
					return
				}
				if lit.Text != "" { // an empty tag is no tag, as in InfluxDB
					p.Tags = append(p.Tags, feed.Tag{Key: col, Value: lit.Text})
				}
			default:
				v, ok := literalValue(lit, kinds[j])
				if !ok {
					writeStatementErr(w, wire.CodeInvalidValue, sqlp.Errorf(lit.Pos, "%s is %s: the value does not fit it", feed.QuoteInput(col), sqlTypes[kinds[j]]))
					return
				}
				p.Fields = append(p.Fields, feed.PointField{Key: col, Value: v})
			}
		}
		if len(p.Fields) == 0 {
			writeStatementErr(w, wire.CodeInvalidValue, sqlp.Errorf(row[0].Pos, "row %d has no field value: a fragment needs at least one field, as a line of line protocol does", i+1))
			return
		}
		slices.SortFunc(p.Tags, func(x, y feed.Tag) int { return strings.Compare(x.Key, y.Key) })
		p.Series = string(feed.AppendSeries(nil, p.Tags))
	}
	res, err := a.append(r.Context(), b)
	if err != nil {
		writeErr(w, err)
		return
	}
	if len(res.Rejected) > 0 {
		rej := res.Rejected[0]
		if res.Accepted == 0 && errors.Is(rej, feed.ErrTableNotFound) {
			writeErr(w, rej.Err) // dropped meanwhile: 404, nothing created
			return
		}
		msg := fmt.Sprintf("partial insert: row %d: %v: %s inserted=%d dropped=%d", rej.Line, rej.Err, rej.Msg, res.Accepted, len(res.Rejected))
		writeClientErr(w, wire.CodeRowRejected, msg)
		return
	}
	writeResult(w, result{name: t.Name, cols: []string{"inserted"}, rows: [][]feed.Value{{uintValue(uint64(res.Accepted))}}}, acceptsCSV(r.Header.Get("Accept")), timeRFC3339)
}

// append submits b, waiting at most Options.SubmitTimeout for queue room
// (feed.ErrBusy: 503), then waits for the commit.
func (a *API) append(ctx context.Context, b *feed.Batch) (feed.Result, error) {
	return feed.AppendWithin(ctx, a.opts.Writer, b, a.opts.SubmitTimeout)
}

// literalValue converts a literal to a field of kind k (integers exact,
// floats finite), reporting false when it does not fit.
func literalValue(l sqlp.Literal, k feed.Kind) (feed.Value, bool) {
	switch {
	case k == feed.KindFloat && (l.Kind == sqlp.LitFloat || l.Kind == sqlp.LitInt):
		f, err := strconv.ParseFloat(l.Text, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return feed.Value{}, false
		}
		return feed.Value{Kind: k, Num: math.Float64bits(f)}, true
	case k == feed.KindInt && l.Kind == sqlp.LitInt:
		i, err := strconv.ParseInt(l.Text, 10, 64)
		return feed.Value{Kind: k, Num: uint64(i)}, err == nil
	case k == feed.KindUint && l.Kind == sqlp.LitInt:
		u, err := strconv.ParseUint(l.Text, 10, 64)
		return feed.Value{Kind: k, Num: u}, err == nil
	case k == feed.KindString && l.Kind == sqlp.LitString:
		return feed.Value{Kind: k, Str: l.Text}, true
	case k == feed.KindBool && l.Kind == sqlp.LitBool:
		return boolValue(l.Bool), true
	}
	return feed.Value{}, false
}

// drainFilter sets req's filters from a SQL drain's WHERE
// (docs/contract.md#filters): the feed checks the names and budgets.
func drainFilter(st *sqlp.Select, req *feed.DrainRequest) {
	for _, tf := range st.TagIn {
		req.Filter.Tags = append(req.Filter.Tags, feed.TagFilter{Key: tf.Column.Name, Values: tf.Values})
	}
	req.Filter.Has = names(st.Has)
	req.Filter.Start, req.Filter.End, req.Filter.HasStart, req.Filter.HasEnd = st.Start, st.End, st.HasStart, st.HasEnd
	switch st.Op {
	case "insert":
		req.Operation = feed.OpInsert
	case "update":
		req.Operation = feed.OpUpdate
	}
}
