package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The formats of a drain or copy page (the format parameter).
const (
	// FormatJSON is one JSON object with columns and rows (the default).
	FormatJSON = "json"
	// FormatNDJSON is one JSON object per row, the envelope in headers.
	FormatNDJSON = "ndjson"
	// FormatLP is one ILP line per fragment, POSTable as is to any
	// InfluxDB /write; the envelope in headers.
	FormatLP = "lp"
)

// DrainRequest is one GET /drain (docs/contract.md#drain).
type DrainRequest struct {
	// Table is the sync table to drain.
	Table string
	// Epoch, when not 0, must be the table's current epoch, else the
	// drain is refused with ErrStaleEpoch (epochs start at 1: 0 sends
	// none).
	Epoch uint64
	// After is the cursor: the previous page's Next (0 from the start).
	After uint64
	// Limit is the most rows of the page, 1 to the server's
	// --max-drain-limit (10000 by default); 0 sends none, which the
	// server refuses with limit_required (the feed pages, it does not
	// stream unbounded).
	Limit int
	// Columns chooses the columns and their order (time, tags, fields,
	// x_seq); nil: all, x_seq last.
	Columns []string
	// Format is FormatJSON (empty), FormatNDJSON or FormatLP.
	Format string
	// TimeFormat renders time as rfc3339 (empty), ns, us, ms or s.
	TimeFormat string
	// Wait long-polls: when the page would be empty, the server holds it
	// up to Wait (at most 60s, whole milliseconds or coarser) for a
	// fragment above After; 0 answers at once.
	Wait time.Duration
	// Consumer, when set, records that this named consumer has applied
	// everything up to After (feeds the lag metrics; docs/contract.md#consumers).
	Consumer string
	// Operation, OpInsert or OpUpdate, returns only the fragments that
	// created their point or only those that changed one; empty: both
	// (docs/contract.md#operation).
	Operation string
	// Tags filters by tag: a fragment is returned when, for every key,
	// its tag holds one of the values (equality for one value, IN for
	// several; keys ANDed; a key without values is left out). Has lists fields its row must set. Start and
	// End, when HasStart or HasEnd, bound the point's time: Start <= time
	// < End (docs/contract.md#filters).
	Tags             map[string][]string
	Has              []string
	Start, End       time.Time
	HasStart, HasEnd bool
	// OpTag, for FormatLP, is the tag key the lines carry x_op under
	// (insert or update), so that they can be written back.
	OpTag string
}

// The operations of DrainRequest.Operation.
const (
	OpInsert = "insert"
	OpUpdate = "update"
)

// query renders r as /drain's query string.
func (r DrainRequest) query() string {
	q := url.Values{"table": {r.Table}, "after": {strconv.FormatUint(r.After, 10)}}
	if r.Limit != 0 {
		q.Set("limit", strconv.Itoa(r.Limit))
	}
	if r.Epoch != 0 {
		q.Set("epoch", strconv.FormatUint(r.Epoch, 10))
	}
	if r.Columns != nil {
		q.Set("columns", strings.Join(r.Columns, ","))
	}
	if r.Format != "" {
		q.Set("format", r.Format)
	}
	if r.TimeFormat != "" {
		q.Set("time_format", r.TimeFormat)
	}
	if r.Wait > 0 {
		q.Set("wait", r.Wait.String())
	}
	if r.Consumer != "" {
		q.Set("consumer", r.Consumer)
	}
	if r.Operation != "" {
		q.Set("operation", r.Operation)
	}
	for k, vs := range r.Tags {
		switch len(vs) {
		case 0:
		case 1:
			q.Set("tag."+k, "eq:"+vs[0])
		default:
			q.Set("tag."+k, "in:"+joinEscaped(vs))
		}
	}
	if len(r.Has) > 0 {
		q.Set("has", joinEscaped(r.Has))
	}
	if r.HasStart {
		q.Set("start", strconv.FormatInt(r.Start.UnixNano(), 10))
	}
	if r.HasEnd {
		q.Set("end", strconv.FormatInt(r.End.UnixNano(), 10))
	}
	if r.OpTag != "" {
		q.Set("op_tag", r.OpTag)
	}
	return q.Encode()
}

// joinEscaped joins vs with commas, a backslash before each comma or
// backslash of a value (the drain's in: and has lists).
func joinEscaped(vs []string) string {
	esc := strings.NewReplacer(`\`, `\\`, `,`, `\,`)
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = esc.Replace(v)
	}
	return strings.Join(out, ",")
}

// Page is one page of a table's feed (docs/contract.md#paging, api.yaml Page).
type Page struct {
	// Table is the drained table.
	Table string
	// Epoch is the table's epoch the page was read in.
	Epoch uint64
	// After echoes the request's cursor.
	After uint64
	// Next is where to resume: the last x_seq of a full page, else the
	// watermark the page was read at. Store (Epoch, Next) after applying
	// the page.
	Next uint64
	// Seq is the table's highest x_seq handed out.
	Seq uint64
	// Watermark is the highest x_seq a drain could return.
	Watermark uint64
	// More reports Next < Watermark: another page is ready now.
	More bool
	// Columns names the cells of every row (JSON pages only).
	Columns []string
	// Rows holds the page's rows in ascending x_seq, each cell its JSON
	// text as the server sent it (numbers exact, absent values null);
	// JSON pages only. Cells alias Body.
	Rows [][]json.RawMessage
	// Body is the answer as sent: the JSON page, or the ndjson or ILP
	// lines. It is reused by the next DrainInto with this Page.
	Body []byte
	// Format is the page's format (FormatJSON, FormatNDJSON, FormatLP).
	Format string
	// Header holds the answer's headers (Content-Type, the Ingestd-*
	// envelope of ndjson and lp pages, X-Influxdb-Version).
	Header http.Header
	// ScanLimited reports a filtered page that ended at the server's
	// --max-drain-scan: Next advanced over the fragments examined, and
	// the page may be empty although More (docs/contract.md#filters).
	ScanLimited bool
	// NewColumns are the table's columns added since After that the
	// page's rows may carry, with their kinds: alter a typed target
	// before applying the page (docs/contract.md#schema-changes).
	NewColumns []NewColumn
	// NewColumnsTruncated reports an lp or ndjson page whose header could
	// not list every new column (names too long for a header): read the
	// table's columns (Table) before applying it. An ndjson page's
	// x_schema line lists them all.
	NewColumnsTruncated bool
	// LagFragments is how many x_seq numbers the table's sequence is
	// ahead of Next; Lag how long ago the oldest fragment above Next was
	// committed (docs/contract.md#lag). Both 0 when caught up.
	LagFragments uint64
	Lag          time.Duration

	buf   []byte
	cells []json.RawMessage
}

// NewColumn is a column a page reports as added (Page.NewColumns).
type NewColumn struct {
	// Name is the column's name.
	Name string `json:"name"`
	// Kind is tag, float, integer, unsigned, string or boolean.
	Kind string `json:"kind"`
}

// schemaLine starts the first line of an ndjson page whose columns
// changed: the x_schema object, not a row.
var schemaLine = []byte(`{"x_schema":`)

// Lines counts the rows of an ndjson or lp page (its lines, a newline
// inside a string field of an lp line not ending it), or of a JSON page.
func (p *Page) Lines() int {
	switch p.Format {
	case FormatJSON:
		return len(p.Rows)
	case FormatLP:
		return countLines(p.Body)
	}
	n := bytes.Count(p.Body, []byte{'\n'})
	if bytes.HasPrefix(p.Body, schemaLine) {
		n-- // the x_schema object
	}
	return n
}

// Drain asks for one page of r.Table's feed. Refusals are *Error:
// ErrTableNotFound, ErrSyncOff, ErrStaleEpoch, ErrCursorBeyondSequence,
// ErrHistoryExpired (each carrying the table's state), ErrTooManyConsumers,
// and 400s for a bad parameter (limit_required when Limit is 0).
func (c *Client) Drain(ctx context.Context, r DrainRequest) (*Page, error) {
	pg := &Page{}
	if err := c.DrainInto(ctx, r, pg); err != nil {
		return nil, err
	}
	return pg, nil
}

// DrainInto is Drain filling pg, whose buffers it reuses: a consumer
// draining many pages allocates little. pg's previous Rows and Body are
// overwritten. The page is checked against r before it is returned: one
// that breaks the feed's contract (ErrBadPage) or is larger than
// WithMaxBodyBytes (ErrBodyTooLarge) is a *ProtocolError, and pg must
// then not be applied.
func (c *Client) DrainInto(ctx context.Context, r DrainRequest, pg *Page) error {
	path := "/drain?" + r.query()
	resp, err := c.send(ctx, http.MethodGet, path, nil, nil, &pg.buf)
	if err != nil {
		return err
	}
	pg.Body, pg.Rows, pg.Format, pg.Header = pg.buf, pg.Rows[:0], r.Format, resp.Header
	if pg.Format == "" {
		pg.Format = FormatJSON
	}
	if pg.Format != FormatJSON {
		pg.Columns = nil
		if err := c.pageHeaders(resp.Header, pg); err != nil {
			return err
		}
		pg.Table = r.Table
		return checkPage(r, pg)
	}
	var env struct {
		Table        string          `json:"table"`
		Epoch        uint64          `json:"epoch"`
		After        uint64          `json:"after"`
		Next         uint64          `json:"next"`
		Seq          uint64          `json:"seq"`
		Watermark    uint64          `json:"watermark"`
		More         bool            `json:"more"`
		ScanLimited  bool            `json:"scan_limited"`
		LagFragments uint64          `json:"lag_fragments"`
		LagSeconds   float64         `json:"lag_seconds"`
		NewColumns   []NewColumn     `json:"new_columns"`
		Columns      []string        `json:"columns"`
		Rows         json.RawMessage `json:"rows"`
	}
	if err := c.decodePage("GET /drain", pg.Body, &env, &env.Rows, &pg.Rows, &pg.cells); err != nil {
		return err
	}
	pg.Table, pg.Epoch, pg.After, pg.Next, pg.Seq, pg.Watermark, pg.More = env.Table, env.Epoch, env.After, env.Next, env.Seq, env.Watermark, env.More
	pg.ScanLimited, pg.LagFragments, pg.NewColumns = env.ScanLimited, env.LagFragments, env.NewColumns
	pg.Lag = time.Duration(env.LagSeconds * float64(time.Second))
	pg.Columns = env.Columns
	if pg.Columns == nil {
		return &ProtocolError{Op: "GET /drain", Err: fmt.Errorf("page without columns: %s", clip(pg.Body))}
	}
	return checkPage(r, pg)
}

// pageHeaders reads the envelope of an ndjson or lp drain page from its
// Ingestd-* headers.
func (c *Client) pageHeaders(h http.Header, pg *Page) error {
	var errs []error
	num := func(k string) uint64 {
		n, err := strconv.ParseUint(h.Get(k), 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("header %s: %w", k, err))
		}
		return n
	}
	pg.Epoch, pg.After, pg.Next = num("Ingestd-Epoch"), num("Ingestd-After"), num("Ingestd-Next")
	pg.Seq, pg.Watermark = num("Ingestd-Seq"), num("Ingestd-Watermark")
	more, err := strconv.ParseBool(h.Get("Ingestd-More"))
	if err != nil {
		errs = append(errs, fmt.Errorf("header Ingestd-More: %w", err))
	}
	pg.More = more
	// The lag and schema headers are absent from an older server's pages.
	pg.ScanLimited, pg.LagFragments, pg.Lag = h.Get("Ingestd-Scan-Limited") == "true", 0, 0
	if h.Get("Ingestd-Lag-Fragments") != "" {
		pg.LagFragments = num("Ingestd-Lag-Fragments")
	}
	if v := h.Get("Ingestd-Lag-Seconds"); v != "" {
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("header Ingestd-Lag-Seconds: %w", err))
		}
		pg.Lag = time.Duration(secs * float64(time.Second))
	}
	pg.NewColumns = pg.NewColumns[:0]
	pg.NewColumnsTruncated = h.Get("Ingestd-New-Columns-Truncated") == "true"
	if nc := h.Get("Ingestd-New-Columns"); nc != "" {
		for _, pair := range strings.Split(nc, ",") {
			i := strings.LastIndexByte(pair, ':')
			name, err := url.QueryUnescape(pair[:max(i, 0)])
			if i <= 0 || err != nil {
				errs = append(errs, fmt.Errorf("header Ingestd-New-Columns: bad pair %q", clip([]byte(pair))))
				break
			}
			pg.NewColumns = append(pg.NewColumns, NewColumn{Name: name, Kind: pair[i+1:]})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return &ProtocolError{Op: "GET /drain", Err: err}
	}
	return nil
}

// rowsKey is what precedes the rows of a JSON page as ingestd encodes it:
// the envelope first, rows last. Outside a string, JSON text holds these
// bytes only as a member named rows (a quote inside a string is escaped),
// and the rows, an array of arrays of scalars, hold no member: the first
// occurrence in a page of that shape is its rows' start.
var rowsKey = []byte(`,"rows":[`)

// decodePage decodes a JSON page b into env (its envelope, whose rows
// field is *rawRows) and *rows (cells aliasing b, backed by *cells,
// reused). The server writes the
// rows last: the envelope, found by a forward search for rowsKey (a few
// hundred bytes in, so the cost does not grow with the page), is decoded
// with encoding/json and the rows are split by a scanner that validates
// their shape (an array of arrays of scalars) without decoding a cell. A
// body of another layout, or any body in strict mode, is decoded whole
// with encoding/json first.
func (c *Client) decodePage(op string, b []byte, env any, rawRows *json.RawMessage, rows *[][]json.RawMessage, cells *[]json.RawMessage) error {
	i := bytes.Index(b, rowsKey)
	var raw []byte
	if i >= 0 && !c.strict {
		head := append(b[:i:i], '}')
		if err := json.Unmarshal(head, env); err != nil {
			return &ProtocolError{Op: op, Err: fmt.Errorf("page envelope: %w: %s", err, clip(b))}
		}
		raw = b[i+len(rowsKey)-1:]
		end := bytes.LastIndexByte(raw, '}')
		if end < 0 || len(bytes.TrimSpace(raw[end+1:])) != 0 {
			return &ProtocolError{Op: op, Err: fmt.Errorf("page does not end with its rows: %s", clip(b))}
		}
		raw = raw[:end]
	} else {
		if err := c.decode(op, b, env); err != nil {
			return err
		}
		raw = *rawRows
	}
	if err := splitRows(raw, rows, cells); err != nil {
		return &ProtocolError{Op: op, Err: fmt.Errorf("rows: %w: %s", err, clip(b))}
	}
	return nil
}

// splitRows splits raw, a JSON array of arrays of scalars, into rows of
// cells aliasing raw, appended to *rows and backed by one slice *cells
// (both reused). It fails on anything else, null included. It checks the
// shape, not each scalar: the cells are the server's JSON text as sent.
// It is one pass over raw without reflection, which is most of what a
// drain costs its consumer: per cell, a search eight bytes at a time for
// its end (scalarEnd).
func splitRows(raw []byte, rows *[][]json.RawMessage, cells *[]json.RawMessage) error {
	// Every cell but the first of a row follows a comma: the commas bound
	// the cells, so that cs never grows and the rows can alias it.
	bound := bytes.Count(raw, []byte{','}) + 1
	cs := (*cells)[:0]
	if cap(cs) < bound {
		cs = make([]json.RawMessage, 0, bound)
	}
	rs := *rows
	i, n := skipSpace(raw, 0), len(raw)
	if i >= n || raw[i] != '[' {
		return fmt.Errorf("offset %d: want '['", i)
	}
	i = skipSpace(raw, i+1)
	if i < n && raw[i] == ']' {
		i++
	} else {
		for {
			if i >= n || raw[i] != '[' {
				return fmt.Errorf("offset %d: want '['", i)
			}
			start := len(cs)
			i = skipSpace(raw, i+1)
			if i < n && raw[i] == ']' {
				i++
			} else {
				for {
					j, err := scalarEnd(raw, i)
					if err != nil {
						return err
					}
					cs = append(cs, raw[i:j:j])
					// The server writes no space: a comma or the row's
					// end follows the cell.
					if j < n && raw[j] == ',' && j+1 < n && !jsonSpace[raw[j+1]] {
						i = j + 1
						continue
					}
					next, more, err := listNext(raw, j)
					if err != nil {
						return err
					}
					if i = next; !more {
						break
					}
				}
			}
			rs = append(rs, cs[start:len(cs):len(cs)])
			next, more, err := listNext(raw, i)
			if err != nil {
				return err
			}
			if i = next; !more {
				break
			}
		}
	}
	if i = skipSpace(raw, i); i != n {
		return fmt.Errorf("offset %d: trailing data", i)
	}
	if rs == nil {
		rs = [][]json.RawMessage{}
	}
	*rows, *cells = rs, cs
	return nil
}

// listNext reads what follows an element of a JSON array at raw[i]: a
// comma (more is true, next is the next element's start) or the closing
// bracket (more is false, next is past it).
func listNext(raw []byte, i int) (next int, more bool, err error) {
	i = skipSpace(raw, i)
	switch {
	case i < len(raw) && raw[i] == ',':
		return skipSpace(raw, i+1), true, nil
	case i < len(raw) && raw[i] == ']':
		return i + 1, false, nil
	}
	return i, false, fmt.Errorf("offset %d: want ',' or ']'", i)
}

// Bytes of 0x01 and of 0x80 in each of a word's eight lanes: a lane of
// x is zero when ((x-lanes01) &^ x) & lanes80 has its high bit (a lane
// above a zero one may be reported too, which only ends a fast path).
const (
	lanes01 = 0x0101010101010101
	lanes80 = 0x8080808080808080
)

// jsonSpace holds JSON's whitespace bytes.
var jsonSpace = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

// cellDelim holds the bytes that end a cell other than a string: JSON
// whitespace, ',' and ']'.
var cellDelim = [256]bool{' ': true, '\t': true, '\n': true, '\r': true, ',': true, ']': true}

// skipSpace returns the index of the first byte of raw at or after i that
// is not JSON whitespace.
func skipSpace(raw []byte, i int) int {
	for i < len(raw) && jsonSpace[raw[i]] {
		i++
	}
	return i
}

// scalarEnd returns the end of the JSON scalar starting at raw[i]: a
// string (escapes kept), a number, true, false or null.
func scalarEnd(raw []byte, i int) (int, error) {
	n := len(raw)
	switch {
	case i >= n:
		return 0, fmt.Errorf("offset %d: truncated", i)
	case raw[i] == '"':
		// The first '"' not escaped by a backslash ends the string: eight
		// bytes per step while a word holds neither (cells are short, a
		// call to bytes.IndexByte per cell cost more), and from a word that
		// holds one straight to the first, its lowest flagged lane (a
		// lane is flagged wrongly only above a lane truly flagged), then
		// byte by byte near the end.
		for j := i + 1; j < n; {
			if j+8 <= n {
				x := binary.LittleEndian.Uint64(raw[j:])
				q, bs := x^(lanes01*'"'), x^(lanes01*'\\')
				m := ((q-lanes01)&^q | (bs-lanes01)&^bs) & lanes80
				if m == 0 {
					j += 8
					continue
				}
				j += bits.TrailingZeros64(m) >> 3
			}
			switch raw[j] {
			case '"':
				return j + 1, nil
			case '\\':
				j++ // the escaped byte
			}
			j++
		}
		return 0, fmt.Errorf("offset %d: unterminated string", i)
	case raw[i] == '[' || raw[i] == '{':
		return 0, fmt.Errorf("offset %d: a cell is not a scalar", i)
	}
	// A number or literal ends at the first byte of cellDelim: eight
	// bytes per step while a word holds no ',', ']' or byte below 0x21
	// (which holds cellDelim's whitespace), then from the first such
	// byte (the lowest flagged lane, exact as above), byte by byte: a
	// control byte that is not whitespace stays in the cell, as before.
	j := i
	for j+8 <= n {
		x := binary.LittleEndian.Uint64(raw[j:])
		c, sb := x^(lanes01*','), x^(lanes01*']')
		m := ((c-lanes01)&^c | (sb-lanes01)&^sb | (x-lanes01*0x21)&^x) & lanes80
		if m == 0 {
			j += 8
			continue
		}
		j += bits.TrailingZeros64(m) >> 3
		break
	}
	for j < n && !cellDelim[raw[j]] {
		j++
	}
	if j == i {
		return 0, fmt.Errorf("offset %d: empty cell", i)
	}
	return j, nil
}

// CellTexts returns row's cells as their JSON text ("\"h1\"", "1.5",
// "null"), for printing and exact comparison.
func CellTexts(row []json.RawMessage) []string {
	out := make([]string, len(row))
	for i, cell := range row {
		out[i] = string(cell)
	}
	return out
}
