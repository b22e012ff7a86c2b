package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// RowsRequest is one page of the copy by time range (GET
// /api/v1/tables/{t}/rows, docs/contract.md#bootstrap): the bootstrap of a mirror.
type RowsRequest struct {
	// Table is the table to copy.
	Table string
	// Start (inclusive) and End (exclusive) bound the time range: RFC 3339
	// or integer nanoseconds; empty: unbounded.
	Start, End string
	// Limit is the most rows of the page (1 to 10000).
	Limit int
	// Cursor is the previous page's Cursor; empty for the first page.
	Cursor string
	// Format is FormatJSON (empty) or FormatLP.
	Format string
	// TimeFormat renders time as rfc3339 (empty), ns, us, ms or s.
	TimeFormat string
}

// RowsPage is one page of the copy by time range (api.yaml RowsPage).
type RowsPage struct {
	// Table is the copied table.
	Table string
	// Epoch and Watermark were read before the copy began, and every page
	// repeats them: once the copy ends, drain from (Epoch, Watermark).
	Epoch, Watermark uint64
	// Cursor resumes the copy; empty on the last page.
	Cursor string
	// Columns names the cells of every row (JSON pages only; no x_
	// columns).
	Columns []string
	// Rows holds the page's coalesced rows, each cell its JSON text (JSON
	// pages only). Cells alias Body.
	Rows [][]json.RawMessage
	// Body is the answer as sent: the JSON page or the ILP lines.
	Body []byte
	// Format is the page's format (FormatJSON or FormatLP).
	Format string
	// Header holds the answer's headers (Content-Type, the Ingestd-*
	// envelope of lp pages).
	Header http.Header
}

// Rows asks for one page of the copy by time range. Refusals: ErrTableNotFound,
// ErrStaleEpoch (the table was truncated or re-created since the copy
// began: start over), 400s for a bad parameter or cursor. A page of
// another table, with more rows than r.Limit, lines of another
// measurement (lp) or a cursor that does not move is a *ProtocolError
// wrapping ErrBadPage.
func (c *Client) Rows(ctx context.Context, r RowsRequest) (*RowsPage, error) {
	q := url.Values{"limit": {strconv.Itoa(r.Limit)}}
	for k, v := range map[string]string{"start": r.Start, "end": r.End, "cursor": r.Cursor, "format": r.Format, "time_format": r.TimeFormat} {
		if v != "" {
			q.Set(k, v)
		}
	}
	path := tablePath(r.Table) + "/rows?" + q.Encode()
	op := "GET " + tablePath(r.Table) + "/rows"
	resp, err := c.Do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return nil, err
	}
	pg := &RowsPage{Table: r.Table, Body: resp.Body, Format: r.Format, Header: resp.Header}
	if pg.Format == "" {
		pg.Format = FormatJSON
	}
	if pg.Format != FormatJSON {
		e, err1 := strconv.ParseUint(resp.Header.Get("Ingestd-Epoch"), 10, 64)
		w, err2 := strconv.ParseUint(resp.Header.Get("Ingestd-Watermark"), 10, 64)
		if err1 != nil || err2 != nil {
			return nil, &ProtocolError{Op: op, Err: fmt.Errorf("rows page without epoch and watermark headers (%q, %q)",
				resp.Header.Get("Ingestd-Epoch"), resp.Header.Get("Ingestd-Watermark"))}
		}
		pg.Epoch, pg.Watermark, pg.Cursor = e, w, resp.Header.Get("Ingestd-Cursor")
		if err := checkRowsPage(op, r, pg); err != nil {
			return nil, err
		}
		return pg, nil
	}
	var env struct {
		Table     string          `json:"table"`
		Epoch     uint64          `json:"epoch"`
		Watermark uint64          `json:"watermark"`
		Cursor    *string         `json:"cursor"`
		Columns   []string        `json:"columns"`
		Rows      json.RawMessage `json:"rows"`
	}
	var cells []json.RawMessage
	if err := c.decodePage(op, resp.Body, &env, &env.Rows, &pg.Rows, &cells); err != nil {
		return nil, err
	}
	if env.Columns == nil {
		return nil, &ProtocolError{Op: op, Err: fmt.Errorf("page without columns: %s", clip(resp.Body))}
	}
	if env.Cursor != nil && *env.Cursor == "" {
		return nil, &ProtocolError{Op: op, Err: fmt.Errorf("empty cursor (the last page has null): %s", clip(resp.Body))}
	}
	pg.Table, pg.Epoch, pg.Watermark, pg.Columns = env.Table, env.Epoch, env.Watermark, env.Columns
	if env.Cursor != nil {
		pg.Cursor = *env.Cursor
	}
	if err := checkRowsPage(op, r, pg); err != nil {
		return nil, err
	}
	return pg, nil
}
