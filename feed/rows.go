package feed

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/ingestd/ingestd/store"
)

// RowsRequest is one page of a copy by time range (docs/contract.md#bootstrap).
type RowsRequest struct {
	// Table is the table to copy.
	Table string
	// Start (inclusive) and End (exclusive) bound the time in Unix
	// nanoseconds, each only when its Has flag is set.
	Start, End       int64
	HasStart, HasEnd bool
	// Limit is the page size, 1..Config.MaxDrainLimit.
	Limit int
	// Cursor is the previous page's Cursor; "" starts the copy.
	Cursor string
}

// RowsPage is a copy page's envelope. Epoch and Watermark were read before
// the copy began (the first page) and every later page repeats them: every
// fragment at or below Watermark is in the copy, so a mirror then drains
// from (Epoch, Watermark). Cursor is "" on the last page.
type RowsPage struct {
	Table     string   // the copied table
	Epoch     uint64   // the table's epoch when the copy began
	Watermark uint64   // the table's watermark when the copy began
	Columns   []Column // time, tags and fields of this page (a later page may have more)
	Cursor    string   // resumes the copy at the next page; "" on the last
	Rows      int      // rows visited, at most the request's Limit
}

// ErrInvalidCursor is returned by Rows for a cursor it did not issue.
var ErrInvalidCursor = errors.New("feed: invalid cursor")

// rowsCursor is what a RowsPage.Cursor carries: the copy's epoch,
// watermark and table instance, and the store's opaque position.
type rowsCursor struct {
	epoch, watermark, tid uint64
	pos                   store.RowCursor
}

// encode renders c as version 1, three uvarints and the store's cursor,
// in unpadded base64url.
func (c rowsCursor) encode() string {
	b := []byte{1}
	b = binary.AppendUvarint(b, c.epoch)
	b = binary.AppendUvarint(b, c.watermark)
	b = binary.AppendUvarint(b, c.tid)
	b = append(b, c.pos...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeRowsCursor reads what encode wrote; the store checks its own
// part when the cursor is used (ErrInvalidCursor).
func decodeRowsCursor(s string) (rowsCursor, error) {
	var c rowsCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) == 0 || b[0] != 1 {
		return c, fmt.Errorf("%w: %s", ErrInvalidCursor, QuoteInput(s))
	}
	b = b[1:]
	var vals [3]uint64
	for i := range vals {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return c, fmt.Errorf("%w: %s", ErrInvalidCursor, QuoteInput(s))
		}
		vals[i], b = v, b[n:]
	}
	if len(b) == 0 {
		return c, fmt.Errorf("%w: %s", ErrInvalidCursor, QuoteInput(s))
	}
	return rowsCursor{epoch: vals[0], watermark: vals[1], tid: vals[2], pos: b}, nil
}

// Rows reads one page of a table's rows by time range, calling visit with
// the page's columns (time, tags, fields; never x_ columns) and each row's
// values. Each point of the range appears once, as its coalesced row,
// however often it was written (a point written again during the copy may
// appear again; the copy is idempotent to apply). visit may return
// ErrPageFull to end the page before the row it was called with (not for
// the first row): Cursor then resumes at that row. Errors: ErrTableNotFound, ErrInvalidLimit,
// ErrInvalidCursor, and *RefusalError{ErrStaleEpoch} when the table was
// truncated or re-created since the cursor's first page. Safe for
// concurrent use.
func (s *Drainer) Rows(ctx context.Context, req RowsRequest, visit func(cols []Column, vals []Value) error) (RowsPage, error) {
	if req.Limit < 1 || req.Limit > s.cfg.MaxDrainLimit {
		return RowsPage{}, fmt.Errorf("%w: %d is outside 1..%d (--max-drain-limit)", ErrInvalidLimit, req.Limit, s.cfg.MaxDrainLimit)
	}
	t, err := s.lookup(req.Table)
	if err != nil {
		return RowsPage{}, err
	}
	p := t.snapshot()
	cur := rowsCursor{epoch: p.epoch, watermark: p.watermark, tid: p.tid}
	if req.Cursor != "" {
		if cur, err = decodeRowsCursor(req.Cursor); err != nil {
			return RowsPage{}, err
		}
		if cur.tid != p.tid || cur.epoch != p.epoch {
			return RowsPage{}, &RefusalError{Err: ErrStaleEpoch, Status: p.statusLocked()}
		}
	}
	start, end := int64(math.MinInt64), int64(math.MaxInt64)
	if req.HasStart {
		start = req.Start
	}
	if req.HasEnd {
		end = req.End
	}
	proj, cols := rowsProjection(&p)
	pg := RowsPage{Table: req.Table, Epoch: cur.epoch, Watermark: cur.watermark, Columns: cols}
	if start >= end {
		// No time is in the range (/rows with start >= end): the last
		// page, without a store read, which would walk every block.
		return pg, nil
	}
	var vals []Value
	next, done, err := s.st.ReadRows(ctx, p.tid, cur.pos, start, end, req.Limit, func(r *store.Row) error {
		if pg.Rows == 0 {
			// The store's read view is open now: every row it visits was
			// committed before, so its series and columns are in this
			// snapshot. The one taken before the read may miss a tag key
			// or field first written in between, which would put the row
			// in another series.
			p = t.snapshot()
			proj, cols = rowsProjection(&p)
			pg.Columns = cols
			vals = make([]Value, len(cols))
		}
		proj.fill(vals, &p, r)
		if pg.Rows > 0 && pg.Rows%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if err := visit(cols, vals); err != nil {
			if errors.Is(err, ErrPageFull) && pg.Rows > 0 {
				return store.ErrRowLeftOut
			}
			return err
		}
		pg.Rows++
		return nil
	})
	if errors.Is(err, store.ErrInvalidCursor) {
		return RowsPage{}, fmt.Errorf("%w: %s", ErrInvalidCursor, QuoteInput(req.Cursor))
	}
	if errors.Is(err, store.ErrNotServed) {
		return RowsPage{}, fmt.Errorf("%w: %w", ErrNotServed, err)
	}
	if err != nil {
		return RowsPage{}, err
	}
	if !done {
		cur.pos = next
		pg.Cursor = cur.encode()
	}
	return pg, nil
}

// rowsProjection is the drain projection of p without x_seq.
func rowsProjection(p *published) (projection, []Column) {
	proj, cols, _ := project(p, nil) // no names: cannot fail
	proj.seq, proj.op = -1, -1
	return proj, cols[:len(cols)-2] // without x_seq and x_op
}
