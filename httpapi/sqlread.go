package httpapi

import (
	"container/heap"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/ingestd/ingestd/feed"
	sqlp "github.com/ingestd/ingestd/httpapi/sql"
	"github.com/ingestd/ingestd/httpapi/wire"
)

// errReadDone ends a SQL read's walk through the table once its result is
// complete (LIMIT rows, or a page full of bytes).
var errReadDone = errors.New("httpapi: read done")

// errScanLimit ends a SQL read that looked at more than
// Options.SQLMaxScanRows rows.
var errScanLimit = errors.New("httpapi: scan limit")

// sqlRead serves a SELECT that reads coalesced rows (docs/guide.md#sql): the rows
// of the time range, as /rows copies them (each point once, its columns
// merged, no x_ columns), those whose tags equal the WHERE's values, in
// storage order without ORDER BY (synced rows in x_seq order, then those
// written while sync was OFF; it reads only what it returns) or sorted by
// time. A tag filter or ORDER BY makes it walk the whole time range:
// at most Options.SQLMaxScanRows rows, else 400 scan_limit; ORDER BY keeps
// only the best LIMIT rows, encoded, in memory. The result ends before the
// row that would take it past Options.MaxPageBytes ("partial": true).
func (a *API) sqlRead(w http.ResponseWriter, r *http.Request, st *sqlp.Select, csv bool, tf timeFormat) {
	if st.Limit < 1 || st.Limit > a.opts.MaxDrainLimit {
		writeErr(w, fmt.Errorf("%w: %d is outside 1..%d (--max-drain-limit)", feed.ErrInvalidLimit, st.Limit, a.opts.MaxDrainLimit))
		return
	}
	t, err := a.opts.Tables.Table(st.Table.Name)
	if err != nil {
		writeErr(w, err)
		return
	}
	// The output columns are fixed by the schema read now: a column added
	// while the read goes on is not part of it.
	out := st.Columns
	if out == nil {
		for _, c := range t.Columns {
			out = append(out, sqlp.Name{Name: c.Name})
		}
	}
	kindOf := func(n sqlp.Name) (feed.Kind, bool) {
		j := slices.IndexFunc(t.Columns, func(c feed.Column) bool { return c.Name == n.Name })
		if j < 0 {
			writeStatementErr(w, wire.CodeUnknownColumn, sqlp.Errorf(n.Pos, "table %s has no column %s", feed.QuoteInput(t.Name), feed.QuoteInput(n.Name)))
			return 0, false
		}
		return t.Columns[j].Kind, true
	}
	for i, n := range out {
		if _, ok := kindOf(n); !ok {
			return
		}
		if slices.ContainsFunc(out[:i], func(m sqlp.Name) bool { return m.Name == n.Name }) {
			writeStatementErr(w, wire.CodeInvalidParameter, sqlp.Errorf(n.Pos, "column %s is selected twice", feed.QuoteInput(n.Name)))
			return
		}
	}
	for _, f := range st.Tags {
		k, ok := kindOf(f.Column)
		if !ok {
			return
		}
		if k != feed.KindTag {
			writeStatementErr(w, wire.CodeInvalidParameter, sqlp.Errorf(f.Column.Pos, "%s is a %s field: only tags are compared in a WHERE (and time)", feed.QuoteInput(f.Column.Name), k))
			return
		}
	}

	rd := &sqlReader{
		a: a, st: st, csv: csv, table: t.Name, outNames: names(out),
		enc: encoder{timeFormat: tf, buf: a.pageBuf()},
	}
	defer func() { a.releasePageBuf(rd.enc.buf) }()
	res := pageBytes{b: a.budget, client: requestClient(r)}
	defer res.release()
	if err := res.reserve(r.Context(), int64(a.opts.MaxPageBytes)); err != nil {
		writeErr(w, err)
		return
	}
	rd.vals = make([]feed.Value, len(out))
	req := feed.RowsRequest{Table: t.Name, Start: st.Start, End: st.End, HasStart: st.HasStart, HasEnd: st.HasEnd, Limit: st.Limit}
	if st.Order != sqlp.OrderNone || len(st.Tags) > 0 {
		req.Limit = a.opts.MaxDrainLimit // walk in the largest pages
	}
	empty := st.HasStart && st.HasEnd && st.Start >= st.End
	for !empty {
		pg, err := a.opts.Rows.Rows(r.Context(), req, rd.visit)
		a.m.sqlScanned.Add(float64(rd.pageScanned))
		rd.pageScanned = 0
		if errors.Is(err, errReadDone) {
			break
		}
		if errors.Is(err, errScanLimit) {
			a.m.sqlRefused.WithLabelValues("scan_rows").Inc()
			writeClientErr(w, wire.CodeScanLimit, fmt.Sprintf("the read looked at more than --sql-max-scan-rows=%d rows of its time range: narrow it with WHERE time >= … AND time < …", a.opts.SQLMaxScanRows))
			return
		}
		if err != nil {
			writeErr(w, err)
			return
		}
		if pg.Cursor == "" {
			break
		}
		req.Cursor = pg.Cursor
	}
	res.fit(int64(len(rd.enc.buf) + rd.bytes))
	rd.finish(w)
}

// sqlReader holds one SQL read's state while the feed walks the rows.
type sqlReader struct {
	a        *API
	st       *sqlp.Select
	csv      bool
	table    string
	outNames []string
	enc      encoder

	// The mapping of the feed's columns to the output and the filters,
	// rebuilt when the feed's columns change (a page later in the walk may
	// see a column added meanwhile).
	ncols   int
	outIdx  []int // feed column per output column, -1: absent
	tagIdx  []int // feed column per tag filter, -1: absent
	timeIdx int
	vals    []feed.Value

	scanned, pageScanned int
	rows                 int
	partial              bool

	// ORDER BY: the best rows so far, worst on top, encoded.
	best    rowHeap
	bytes   int
	bar     rowKey // rows not better than bar cannot be in the result
	hasBar  bool
	visited uint64
}

func (rd *sqlReader) index(cols []feed.Column) {
	find := func(name string) int {
		return slices.IndexFunc(cols, func(c feed.Column) bool { return c.Name == name })
	}
	rd.ncols = len(cols)
	rd.outIdx = rd.outIdx[:0]
	for _, n := range rd.outNames {
		rd.outIdx = append(rd.outIdx, find(n))
	}
	rd.tagIdx = rd.tagIdx[:0]
	for _, f := range rd.st.Tags {
		rd.tagIdx = append(rd.tagIdx, find(f.Column.Name))
	}
	rd.timeIdx = find("time")
}

// visit takes one row of the feed's walk.
func (rd *sqlReader) visit(cols []feed.Column, vals []feed.Value) error {
	if len(cols) != rd.ncols || rd.outIdx == nil {
		rd.index(cols)
	}
	rd.scanned++
	rd.pageScanned++
	if rd.scanned > rd.a.opts.SQLMaxScanRows && (rd.st.Order != sqlp.OrderNone || len(rd.st.Tags) > 0) {
		return errScanLimit
	}
	for i, f := range rd.st.Tags {
		if j := rd.tagIdx[i]; j < 0 || vals[j].Kind != feed.KindTag || vals[j].Str != f.Value {
			return nil
		}
	}
	for i, j := range rd.outIdx {
		rd.vals[i] = feed.Value{}
		if j >= 0 {
			rd.vals[i] = vals[j]
		}
	}
	if rd.st.Order == sqlp.OrderNone {
		mark := len(rd.enc.buf)
		rd.encode()
		if rd.rows > 0 && len(rd.enc.buf) > rd.a.opts.MaxPageBytes {
			rd.enc.buf = rd.enc.buf[:mark]
			rd.partial = true
			return errReadDone
		}
		if rd.rows++; rd.rows == rd.st.Limit {
			return errReadDone
		}
		return nil
	}
	rd.visited++
	k := rowKey{time: int64(vals[rd.timeIdx].Num), n: rd.visited, desc: rd.st.Order == sqlp.OrderDesc}
	if rd.hasBar && !k.better(rd.bar) || len(rd.best) == rd.st.Limit && !k.better(rd.best[0].key) {
		return nil
	}
	if len(rd.best) == rd.st.Limit {
		rd.evict()
	}
	mark := len(rd.enc.buf)
	rd.encode()
	b := slices.Clone(rd.enc.buf[mark:])
	rd.enc.buf = rd.enc.buf[:mark]
	heap.Push(&rd.best, heapRow{key: k, b: b})
	rd.bytes += len(b)
	// Rows past the page's bytes would be cut from the result: keep only
	// what fits (one row at least), and nothing worse than what was cut.
	for rd.bytes > rd.a.opts.MaxPageBytes && len(rd.best) > 1 {
		rd.bar, rd.hasBar = rd.evict(), true
		rd.partial = true
	}
	return nil
}

// evict drops the worst kept row and returns its key.
func (rd *sqlReader) evict() rowKey {
	worst := heap.Pop(&rd.best).(heapRow)
	rd.bytes -= len(worst.b)
	return worst.key
}

// encode appends the output row in rd.vals to the page: a JSON array
// (comma-separated) or a CSV record.
func (rd *sqlReader) encode() {
	if rd.csv {
		rd.enc.csvRow(rd.table, rd.vals)
		return
	}
	if len(rd.enc.buf) > 0 {
		rd.enc.buf = append(rd.enc.buf, ',')
	}
	rd.enc.row(rd.vals)
}

// finish writes the result.
func (rd *sqlReader) finish(w http.ResponseWriter) {
	if rd.st.Order != sqlp.OrderNone {
		sorted := slices.Clone(rd.best)
		slices.SortFunc(sorted, func(x, y heapRow) int {
			if x.key.better(y.key) {
				return -1
			}
			return 1
		})
		for i, row := range sorted {
			if i > 0 && !rd.csv {
				rd.enc.buf = append(rd.enc.buf, ',')
			}
			rd.enc.buf = append(rd.enc.buf, row.b...)
		}
	}
	if rd.csv {
		writePage(w, contentTypeCSV, csvHeader(rd.outNames), rd.enc.buf)
		return
	}
	end := `],"partial":false}` + "\n"
	if rd.partial {
		end = `],"partial":true}` + "\n"
	}
	writePage(w, "application/json", resultHead(rd.outNames), rd.enc.buf, []byte(end))
}

// rowKey orders rows for ORDER BY time: by time (descending when desc),
// then in the order the walk met them.
type rowKey struct {
	time int64
	n    uint64
	desc bool
}

// better reports whether k comes before o in the result.
func (k rowKey) better(o rowKey) bool {
	if k.time != o.time {
		return k.time < o.time != k.desc
	}
	return k.n < o.n
}

type heapRow struct {
	key rowKey
	b   []byte // the encoded row
}

// rowHeap is a max-heap by rowKey: the worst row on top.
type rowHeap []heapRow

func (h rowHeap) Len() int           { return len(h) }
func (h rowHeap) Less(i, j int) bool { return h[j].key.better(h[i].key) }
func (h rowHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *rowHeap) Push(x any)        { *h = append(*h, x.(heapRow)) }
func (h *rowHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
