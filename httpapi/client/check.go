package client

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// ErrBadPage is wrapped by the *ProtocolError of a 2xx drain or copy page
// that breaks the feed's contract (docs/security.md#client-limits): another
// table's rows, an epoch or cursor other than the one asked for, a next
// below the cursor, more rows than the limit or than x_seq numbers between
// after and next, x_seq not ascending within (after, next], more without a
// row. A consumer must not apply such a page nor store its cursor.
var ErrBadPage = errors.New("page breaks the feed's contract")

// badPage returns the *ProtocolError of op for a page breaking the
// contract as format and args say.
func badPage(op, format string, args ...any) error {
	return &ProtocolError{Op: op, Err: fmt.Errorf("%w: "+format, append([]any{ErrBadPage}, args...)...)}
}

// checkPage checks the drain page pg answering r (every format): its
// envelope against the request and itself, its row count, and, for JSON
// pages, the table and every x_seq cell; for lp pages, every line's
// measurement.
func checkPage(r DrainRequest, pg *Page) error {
	const op = "GET /drain"
	switch {
	case pg.Format == FormatJSON && pg.Table != r.Table:
		return badPage(op, "table %q, asked for %q", pg.Table, r.Table)
	case pg.Epoch == 0 || (r.Epoch != 0 && pg.Epoch != r.Epoch):
		return badPage(op, "epoch %d, asked for %d", pg.Epoch, r.Epoch)
	case pg.After != r.After:
		return badPage(op, "after %d, asked for %d", pg.After, r.After)
	case pg.Next < r.After:
		return badPage(op, "next %d goes back below the cursor %d", pg.Next, r.After)
	case pg.More != (pg.Next < pg.Watermark):
		return badPage(op, "more=%t with next %d and watermark %d", pg.More, pg.Next, pg.Watermark)
	}
	rows, lpErr := 0, error(nil)
	if pg.Format == FormatLP {
		rows, lpErr = checkMeasurement(op, pg.Body, r.Table) // one scan counts and checks the lines
	} else {
		rows = pg.Lines()
	}
	switch {
	case r.Limit > 0 && rows > r.Limit:
		return badPage(op, "%d rows, limit %d", rows, r.Limit)
	case uint64(rows) > pg.Next-r.After:
		return badPage(op, "%d rows between after %d and next %d", rows, r.After, pg.Next)
	case pg.More && rows == 0 && !pg.ScanLimited:
		return badPage(op, "more=true on an empty page")
	}
	switch pg.Format {
	case FormatJSON:
		return checkSeqs(op, pg, r.After)
	case FormatLP:
		return lpErr
	}
	return nil
}

// checkSeqs checks that the x_seq cells of a JSON page (when selected)
// ascend strictly within (after, pg.Next].
func checkSeqs(op string, pg *Page, after uint64) error {
	col := slices.Index(pg.Columns, "x_seq")
	if col < 0 {
		return nil
	}
	prev := after
	for i, row := range pg.Rows {
		if col >= len(row) {
			return badPage(op, "row %d has %d cells for %d columns", i+1, len(row), len(pg.Columns))
		}
		s, err := strconv.ParseUint(string(row[col]), 10, 64)
		if err != nil {
			return badPage(op, "row %d: x_seq %s is not a sequence number", i+1, clip(row[col]))
		}
		if s <= prev || s > pg.Next {
			return badPage(op, "row %d: x_seq %d after %d, outside (%d, %d] or not ascending", i+1, s, prev, after, pg.Next)
		}
		prev = s
	}
	return nil
}

// checkMeasurement checks that every line of an lp page is of table: it
// starts with the table's name escaped as a measurement (a backslash
// before each comma and space) and then a comma or a space. Lines end as
// line protocol ends them (lpLines). It returns the page's line count
// (up to the first bad line) with the error.
func checkMeasurement(op string, body []byte, table string) (int, error) {
	m := appendMeasurement(nil, table)
	var err error
	n := 0
	complete := lpLines(body, func(line []byte) bool {
		n++
		if !bytes.HasPrefix(line, m) || len(line) == len(m) || (line[len(m)] != ',' && line[len(m)] != ' ') {
			err = badPage(op, "line %d is not of table %q: %s", n, table, clip(line))
			return false
		}
		return true
	})
	if err == nil && !complete {
		err = badPage(op, "the last line does not end with a newline")
	}
	return n, err
}

// appendMeasurement appends name escaped as an ILP measurement.
func appendMeasurement(dst []byte, name string) []byte {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c == ',' || c == ' ' {
			dst = append(dst, '\\')
		}
		dst = append(dst, name[i])
	}
	return dst
}

// checkRowsPage checks a copy page answering r: its table (JSON), its row
// count against the limit, and every lp line's measurement.
func checkRowsPage(op string, r RowsRequest, pg *RowsPage) error {
	rows := len(pg.Rows)
	if pg.Format != FormatJSON {
		rows = countLines(pg.Body)
	}
	switch {
	case pg.Table != r.Table:
		return badPage(op, "table %q, asked for %q", pg.Table, r.Table)
	case r.Limit > 0 && rows > r.Limit:
		return badPage(op, "%d rows, limit %d", rows, r.Limit)
	case pg.Cursor != "" && pg.Cursor == r.Cursor:
		return badPage(op, "the cursor does not move")
	}
	if pg.Format == FormatLP {
		_, err := checkMeasurement(op, pg.Body, r.Table)
		return err
	}
	return nil
}
