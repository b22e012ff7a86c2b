package httpapi

import (
	"net/http"
	"strconv"

	"github.com/ingestd/ingestd/feed"
	sqlp "github.com/ingestd/ingestd/httpapi/sql"
	"github.com/ingestd/ingestd/httpapi/wire"
)

// rows serves GET /api/v1/tables/{table}/rows?start=&end=&limit=&cursor=
// [&format=json|lp][&time_format=]: one page of a copy by time range
// (docs/contract.md#bootstrap), never with x_ columns. Like a drain page it ends
// before the row that would take its rows past Options.MaxPageBytes (one
// row at least); its cursor then resumes at that row.
func (a *API) rows(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := feed.RowsRequest{Table: pathParam(r, "table"), Cursor: q.Get("cursor")}
	ls := q.Get("limit")
	if ls == "" {
		writeClientErr(w, wire.CodeLimitRequired, "limit is required: the copy pages, it does not stream unbounded")
		return
	}
	var err error
	if req.Limit, err = strconv.Atoi(ls); err != nil {
		writeClientErr(w, wire.CodeInvalidLimit, "limit must be an integer, got "+feed.QuoteInput(ls))
		return
	}
	for _, b := range []struct {
		name string
		dst  *int64
		has  *bool
	}{{"start", &req.Start, &req.HasStart}, {"end", &req.End, &req.HasEnd}} {
		s := q.Get(b.name)
		if s == "" {
			continue
		}
		if *b.dst, *b.has = sqlp.ParseTime(s); !*b.has {
			writeClientErr(w, wire.CodeInvalidParameter, b.name+" must be RFC 3339 or integer nanoseconds within ±2^63 ns (years 1677 to 2262), got "+feed.QuoteInput(s))
			return
		}
	}
	format := q.Get("format")
	if format != "" && format != formatJSON && format != formatLP {
		writeClientErr(w, wire.CodeInvalidParameter, "format must be json or lp, got "+feed.QuoteInput(format))
		return
	}
	tf, ok := parseTimeFormat(q.Get("time_format"))
	if !ok {
		writeClientErr(w, wire.CodeInvalidParameter, "time_format must be one of rfc3339, ns, us, ms, s, got "+feed.QuoteInput(q.Get("time_format")))
		return
	}
	enc := encoder{timeFormat: tf, buf: a.pageBuf()}
	defer func() { a.releasePageBuf(enc.buf) }()
	res := pageBytes{b: a.budget, client: requestClient(r)}
	defer res.release()
	size := int64(a.maxPageBytes) // a JSON page lists the table's columns too
	if format != formatLP {
		size += a.columnsListBytes(req.Table)
	}
	if err := res.reserve(r.Context(), size); err != nil {
		writeErr(w, err)
		return
	}
	n := 0
	pg, err := a.opts.Rows.Rows(r.Context(), req, func(cols []feed.Column, vals []feed.Value) error {
		mark := len(enc.buf)
		if format == formatLP {
			enc.line(req.Table, cols, vals)
		} else {
			if n > 0 {
				enc.buf = append(enc.buf, ',')
			}
			enc.row(vals)
		}
		if n > 0 && len(enc.buf) > a.maxPageBytes {
			// The page ends before this row; the cursor resumes at it.
			enc.buf = enc.buf[:mark]
			return feed.ErrPageFull
		}
		n++
		return nil
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	res.fit(int64(len(enc.buf)) + size - int64(a.maxPageBytes))
	h := w.Header()
	if format == formatLP {
		h.Set("Ingestd-Epoch", strconv.FormatUint(pg.Epoch, 10))
		h.Set("Ingestd-Watermark", strconv.FormatUint(pg.Watermark, 10))
		h.Set("Ingestd-Cursor", pg.Cursor)
		writePage(w, "text/plain; charset=utf-8", enc.buf)
		return
	}
	head := appendPageHead(make([]byte, 0, 256), pg.Table, pg.Epoch)
	head = appendUintMember(head, "watermark", pg.Watermark)
	head = append(head, `,"cursor":`...)
	if pg.Cursor == "" {
		head = append(head, "null"...)
	} else {
		head = appendString(head, pg.Cursor)
	}
	head = appendColumns(head, pg.Columns)
	head = append(head, `,"rows":[`...)
	writePage(w, "application/json", head, enc.buf, []byte(jsonPageEnd))
}

// appendColumns appends `,"columns":[…]`.
func appendColumns(b []byte, cols []feed.Column) []byte {
	b = append(b, `,"columns":[`...)
	for i, c := range cols {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, c.Name)
	}
	return append(b, ']')
}
