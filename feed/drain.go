package feed

import (
	"context"
	"errors"
	"fmt"

	"github.com/ingestd/ingestd/store"
)

// DrainRequest is one pull of the feed (SPEC §6).
type DrainRequest struct {
	Table string
	// After is the cursor: rows with x_seq > After are returned.
	After uint64
	// Limit is the page size, 1..Config.MaxDrainLimit.
	Limit int
	// Epoch, when HasEpoch, must equal the table's epoch.
	Epoch    uint64
	HasEpoch bool
	// Columns selects and orders the output columns ("time", tags, fields,
	// "x_seq"); nil means every column in schema order with x_seq last.
	Columns []string
}

// Page is a drain page's envelope (SPEC §6).
type Page struct {
	Table     string
	Epoch     uint64
	After     uint64
	Next      uint64 // where the client resumes: last x_seq of a full page, else Watermark
	Seq       uint64
	Watermark uint64
	More      bool // Next < Watermark
	Columns   []Column
	Rows      int
}

// Drain reads the page of req.Table after req.After, at most req.Limit rows,
// in ascending x_seq and never above the watermark, calling visit with each
// row's values in Columns order (Kind 0 = absent). vals is reused between
// calls. Refusals are *RefusalError wrapping ErrSyncOff, ErrStaleEpoch or
// ErrCursorBeyondSequence (checked in that order); an unknown table is
// ErrTableNotFound, an unknown column ErrUnknownColumn, a bad limit
// ErrInvalidLimit. Safe for concurrent use; never blocks the sequencer.
func (s *Sequencer) Drain(ctx context.Context, req DrainRequest, visit func(vals []Value) error) (Page, error) {
	pg, err := s.drain(ctx, req, visit)
	outcome := "ok"
	switch {
	case err == nil:
	case isRefusal(err):
		outcome = "refused"
	default:
		outcome = "error"
	}
	s.m.drains.WithLabelValues(outcome).Inc()
	return pg, err
}

func isRefusal(err error) bool {
	var r *RefusalError
	return errors.As(err, &r)
}

func (s *Sequencer) drain(ctx context.Context, req DrainRequest, visit func(vals []Value) error) (Page, error) {
	if req.Limit < 1 || req.Limit > s.cfg.MaxDrainLimit {
		return Page{}, fmt.Errorf("%w: %d is outside 1..%d (--max-drain-limit)", ErrInvalidLimit, req.Limit, s.cfg.MaxDrainLimit)
	}
	t, err := s.lookup(req.Table)
	if err != nil {
		return Page{}, err
	}
	p := t.snapshot()
	st := p.statusLocked()
	switch {
	case !p.sync:
		return Page{}, &RefusalError{Err: ErrSyncOff, Status: st}
	case req.HasEpoch && req.Epoch != p.epoch:
		return Page{}, &RefusalError{Err: ErrStaleEpoch, Status: st}
	case req.After > p.seq:
		return Page{}, &RefusalError{Err: ErrCursorBeyondSequence, Status: st}
	}
	proj, cols, err := project(&p, req.Columns)
	if err != nil {
		return Page{}, err
	}
	pg := Page{Table: req.Table, Epoch: p.epoch, After: req.After, Seq: p.seq, Watermark: p.watermark, Columns: cols}
	vals := make([]Value, len(cols))
	last := req.After
	err = s.st.ReadSeq(p.tid, req.After, p.watermark, req.Limit, func(r *store.Row) error {
		clear(vals)
		if proj.time >= 0 {
			vals[proj.time] = Value{Kind: KindTime, Num: uint64(r.Time)}
		}
		if proj.seq >= 0 {
			vals[proj.seq] = Value{Kind: KindSeq, Num: r.Seq}
		}
		if r.Series < uint64(len(p.tags)) {
			for _, tg := range p.tags[r.Series] {
				if i := proj.col[tg.Col]; i >= 0 {
					vals[i] = tg.Value
				}
			}
		}
		for _, f := range r.Fields {
			if int(f.Col) < len(proj.col) {
				if i := proj.col[f.Col]; i >= 0 {
					vals[i] = f.Value
				}
			}
		}
		last = r.Seq
		pg.Rows++
		if pg.Rows%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		return visit(vals)
	})
	if err != nil {
		return Page{}, err
	}
	pg.Next = p.watermark
	if pg.Rows == req.Limit {
		pg.Next = last
	}
	pg.More = pg.Next < p.watermark
	return pg, nil
}

// projection maps schema positions and the pseudo-columns to output
// positions (-1 = not selected).
type projection struct {
	time, seq int
	col       []int
}

func project(p *published, names []string) (projection, []Column, error) {
	pr := projection{time: -1, seq: -1, col: make([]int, len(p.cols))}
	for i := range pr.col {
		pr.col[i] = -1
	}
	if names == nil {
		cols := make([]Column, 0, len(p.cols)+2)
		pr.time = 0
		cols = append(cols, Column{Name: "time", Kind: KindTime})
		for i, c := range p.cols {
			pr.col[i] = len(cols)
			cols = append(cols, Column(c))
		}
		pr.seq = len(cols)
		cols = append(cols, Column{Name: "x_seq", Kind: KindSeq})
		return pr, cols, nil
	}
	cols := make([]Column, 0, len(names))
	for _, n := range names {
		switch n {
		case "time":
			pr.time = len(cols)
			cols = append(cols, Column{Name: n, Kind: KindTime})
			continue
		case "x_seq":
			pr.seq = len(cols)
			cols = append(cols, Column{Name: n, Kind: KindSeq})
			continue
		}
		found := false
		for i, c := range p.cols {
			if c.Name == n {
				pr.col[i] = len(cols)
				cols = append(cols, Column(c))
				found = true
				break
			}
		}
		if !found {
			return pr, nil, fmt.Errorf("%w: %q", ErrUnknownColumn, n)
		}
	}
	return pr, cols, nil
}
