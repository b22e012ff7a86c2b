package feed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ingestd/ingestd/store"
)

// DrainRequest is one pull of the feed (docs/contract.md#drain).
type DrainRequest struct {
	// Table is the table to drain.
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
	// Wait, when positive, long-polls: a page that would be empty is held
	// until a fragment above After becomes visible or Wait passes.
	Wait time.Duration
	// Stop, when closed, ends a long-poll at once (server shutdown).
	Stop <-chan struct{}
	// Consumer, when set, records that this named consumer has applied
	// everything up to After in the drained epoch, on behalf of By: a new
	// name becomes By's consumer (within the budgets of Config), an
	// existing one must be By's (or By is Admin).
	Consumer string
	// By is who drains (docs/security.md#consumers).
	By Principal
	// Operation, when not OpAny, returns only inserts or only updates
	// (docs/contract.md#operation).
	Operation Operation
	// Filter narrows the page (docs/contract.md#filters); Next still
	// advances over the fragments it leaves out.
	Filter Filter
}

// Page is a drain page's envelope (docs/contract.md#paging).
type Page struct {
	Table     string   // the drained table
	Epoch     uint64   // the table's epoch the page was read in
	After     uint64   // the request's cursor
	Next      uint64   // where the client resumes: last x_seq of a full page (Limit rows, or ended by ErrPageFull), else Watermark
	Seq       uint64   // the table's seq when the page was read
	Watermark uint64   // the watermark the page was read at: no row above it
	More      bool     // Next < Watermark
	Columns   []Column // the page's columns, in the order of each row's values
	Rows      int      // rows visited, at most the request's Limit
	// NewConsumer is set when this drain registered DrainRequest.Consumer
	// (its first drain, or its first since it was deleted): the audit log
	// records it.
	NewConsumer bool
	// ScanLimited is set when a filtered page ended because it examined
	// Config.MaxDrainScan fragments: Next advanced over them, and the
	// page may be empty although More (docs/contract.md#filters).
	ScanLimited bool
	// NewColumns are the table's columns added after the cursor
	// (docs/contract.md#schema-changes), in schema order with their
	// kinds: a typed sink alters its target before it applies the page.
	// A column is reported by every page whose cursor is at or below the
	// x_seq it was added at, so before any row that carries it (a
	// fragment's coalesced row may carry a column a later write added).
	NewColumns []Column
	// LagFragments is how many x_seq numbers the table's sequence is
	// ahead of Next (Seq - Next, 0 when caught up): an upper bound on the
	// fragments left to drain (docs/contract.md#lag).
	LagFragments uint64
	// Lag is how long ago the oldest fragment above Next was committed
	// (0 when caught up), from the store's commit times.
	Lag time.Duration
}

// Drain reads the page of req.Table after req.After, at most req.Limit rows,
// in ascending x_seq and never above the watermark, calling visit with the
// page's columns and each row's values in that order (Kind 0 = absent).
// cols and vals are valid only during the call. Refusals are *RefusalError wrapping ErrSyncOff, ErrStaleEpoch,
// ErrCursorBeyondSequence or ErrHistoryExpired (after < horizon-1; checked in that order);
// a req.Consumer that req.By may not move is ErrConsumerOwned, one past a
// budget ErrTooManyConsumers; with a
// store.Shared backend (several ingestd nodes) a cursor above this node's seq
// is refused only once the store says it is beyond every number any node
// handed out (store.Shared.Beyond): until then it may be another node's, so
// the drain waits for this node to apply up to it (Wait) or returns an empty
// page with Next = After.
// An unknown table is
// ErrTableNotFound, an unknown column ErrUnknownColumn, a bad limit
// ErrInvalidLimit, a column named twice ErrDuplicateColumn, a filter
// naming a tag or field the table lacks ErrInvalidFilter, one past a
// budget ErrFilterLimit (docs/contract.md#filters). visit may
// return ErrPageFull to end the page before the row it was called with
// (Next is then the last x_seq of the page); any other error of visit ends
// the Drain with it. Safe for concurrent use; never blocks the sequencer.
func (s *Drainer) Drain(ctx context.Context, req DrainRequest, visit func(cols []Column, vals []Value) error) (Page, error) {
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

// takeWaiter takes one of the Config.MaxWaitingDrains long-poll slots
// (given back with waiting.Add(-1)), or reports false when all are
// taken.
func (s *Drainer) takeWaiter() bool {
	for {
		n := s.waiting.Load()
		if n >= int64(s.cfg.MaxWaitingDrains) {
			return false
		}
		if s.waiting.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func isRefusal(err error) bool {
	var r *RefusalError
	return errors.As(err, &r)
}

func (s *Drainer) drain(ctx context.Context, req DrainRequest, visit func(cols []Column, vals []Value) error) (Page, error) {
	if req.Limit < 1 || req.Limit > s.cfg.MaxDrainLimit {
		return Page{}, fmt.Errorf("%w: %d is outside 1..%d (--max-drain-limit)", ErrInvalidLimit, req.Limit, s.cfg.MaxDrainLimit)
	}
	if err := s.checkFilterBudgets(&req.Filter); err != nil {
		return Page{}, err
	}
	if req.Consumer != "" {
		if err := s.checkConsumerName(req.Consumer); err != nil {
			if ne, ok := errors.AsType[*NameError](err); ok && ne.Rule == RuleLength {
				s.m.consumerRefusals.WithLabelValues(refusedNameBytes).Inc()
			}
			return Page{}, err
		}
	}
	var timeout <-chan time.Time
	if req.Wait > 0 && !s.takeWaiter() {
		req.Wait = 0 // answered now: past --max-waiting-drains
		s.m.waitRefused.Inc()
	} else if req.Wait > 0 {
		defer s.waiting.Add(-1)
	}
	if req.Wait > 0 {
		tm := time.NewTimer(req.Wait)
		defer tm.Stop()
		timeout = tm.C
	}
	recorded, added := false, false
	// from is where the next read starts: req.After, or, for a filtered
	// long-poll, the next of a read that found nothing to return.
	from := req.After
	filtered := req.Filter.set() || req.Operation != OpAny
	for {
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
		case req.After > p.seq && s.beyond(ctx, p.tid, req.After):
			return Page{}, &RefusalError{Err: ErrCursorBeyondSequence, Status: st}
		case from+1 < p.horizon:
			return Page{}, historyRefusal(st)
		}
		if req.Consumer != "" && !recorded {
			var ref *consumerRefusal
			if added, ref = t.consumers.record(req.Consumer, req.By, p.epoch, req.After, s.now(), s.budgets(), s.counts); ref != nil {
				s.m.consumerRefusals.WithLabelValues(ref.reason).Inc()
				return Page{}, ref.err
			}
			recorded = true
		}
		if timeout == nil || p.watermark > from {
			pg, err := s.readPage(ctx, req, from, &p, visit)
			if isHistoryExpired(err) {
				// A sweep raised the horizon after the snapshot: the
				// store's view refused the read before any row. The
				// durable horizon may be ahead of the published one.
				st := t.status()
				h, herr := s.st.Horizon(ctx, p.tid)
				if herr != nil {
					return Page{}, herr
				}
				st.Horizon = max(st.Horizon, h)
				return Page{}, historyRefusal(st)
			}
			if err == nil && timeout != nil && filtered && pg.Rows == 0 && !pg.ScanLimited && pg.Next > from {
				// A filtered long-poll whose filter left out everything
				// up to the watermark waits on from there
				// (docs/contract.md#filters).
				from = pg.Next
				continue
			}
			pg.NewConsumer = added
			return pg, err
		}
		select {
		case <-p.changed:
		case <-timeout:
			timeout = nil
		case <-req.Stop:
			timeout = nil
		case <-s.stopping:
			timeout = nil
		case <-ctx.Done():
			return Page{}, ctx.Err()
		}
	}
}

// budgets returns the consumer budgets of the configuration.
func (s *registry) budgets() consumerBudgets {
	return consumerBudgets{perTable: s.cfg.MaxConsumersPerTable, perToken: s.cfg.MaxConsumersPerToken, total: s.cfg.MaxConsumers}
}

// beyond tells whether cursor after, above this process's published seq
// of instance tid, is beyond the table's sequence: always with a store
// this process alone writes; with a shared store only when the store says
// so (store.Shared.Beyond). Until then the cursor may be another
// process's: the drain waits for this process to apply up to it, or
// returns an empty page that keeps the cursor, instead of refusing it
// (unknown, an error included: not refused, the client retries).
func (s *Drainer) beyond(ctx context.Context, tid, after uint64) bool {
	if s.shared == nil {
		return true
	}
	beyond, err := s.shared.Beyond(ctx, tid, after)
	return err == nil && beyond
}

// readPage reads one page from the published state p, from x_seq from
// on (req.After, or above it for a filtered long-poll that read past
// fragments it left out): rows the filter admits up to the limit, the
// watermark or Config.MaxDrainScan examined fragments, whichever comes
// first; Next covers what was examined. The envelope's After and new
// columns are req.After's.
func (s *Drainer) readPage(ctx context.Context, req DrainRequest, from uint64, p *published, visit func(cols []Column, vals []Value) error) (Page, error) {
	proj, cols, err := project(p, req.Columns)
	if err != nil {
		return Page{}, err
	}
	flt, err := s.storeFilter(&req, p)
	if err != nil {
		return Page{}, err
	}
	pg := Page{Table: req.Table, Epoch: p.epoch, After: req.After, Seq: p.seq, Watermark: p.watermark, Columns: cols}
	vals := make([]Value, len(cols))
	last := from
	full := false // visit ended the page before the limit
	through, err := s.st.ReadSeq(ctx, p.tid, from, p.watermark, req.Limit, flt, func(r *store.Row) error {
		proj.fill(vals, p, r)
		if pg.Rows > 0 && pg.Rows%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if err := visit(cols, vals); err != nil {
			if errors.Is(err, ErrPageFull) && pg.Rows > 0 {
				full = true
			}
			return err
		}
		last = r.Seq
		pg.Rows++
		return nil
	})
	if errors.Is(err, store.ErrNotServed) {
		return Page{}, fmt.Errorf("%w: %w", ErrNotServed, err)
	}
	if err != nil && !full {
		return Page{}, err
	}
	// through is the watermark when the read reached it, the last row
	// of a page of Limit rows, or the last fragment a filtered read
	// examined; a cursor ahead of this node stays where it is.
	pg.Next = max(through, from)
	if full {
		pg.Next = last
	}
	pg.ScanLimited = !full && pg.Rows < req.Limit && pg.Next < p.watermark
	pg.More = pg.Next < p.watermark
	for i, c := range schemaOrder(p.cols) {
		if p.colSince(i) >= req.After {
			pg.NewColumns = append(pg.NewColumns, Column(c))
		}
	}
	if p.seq > pg.Next {
		pg.LagFragments = p.seq - pg.Next
		ts, ok, err := s.st.SeqTime(ctx, p.tid, pg.Next+1)
		if err != nil {
			return Page{}, err
		}
		if ok {
			pg.Lag = max(s.now().Sub(time.Unix(0, ts)), 0)
		}
	}
	return pg, nil
}

// projection maps schema positions and the pseudo-columns to output
// positions (-1 = not selected).
type projection struct {
	time, seq, op int
	col           []int
}

// fill sets vals (in output order) from a stored row: time, x_seq, the
// series' tags and the fields; unselected and absent columns stay zero.
func (pr *projection) fill(vals []Value, p *published, r *store.Row) {
	clear(vals)
	if pr.time >= 0 {
		vals[pr.time] = Value{Kind: KindTime, Num: uint64(r.Time)}
	}
	if pr.seq >= 0 {
		vals[pr.seq] = Value{Kind: KindSeq, Num: r.Seq}
	}
	if pr.op >= 0 {
		vals[pr.op] = Value{Kind: KindOp}
		if r.Update {
			vals[pr.op].Num = 1
		}
	}
	if r.Series < uint64(len(p.tags)) {
		for _, tg := range p.tags[r.Series] {
			if int(tg.Col) < len(pr.col) {
				if i := pr.col[tg.Col]; i >= 0 {
					vals[i] = tg.Value
				}
			}
		}
	}
	for _, f := range r.Fields {
		if int(f.Col) < len(pr.col) {
			if i := pr.col[f.Col]; i >= 0 {
				vals[i] = f.Value
			}
		}
	}
}

func project(p *published, names []string) (projection, []Column, error) {
	pr := projection{time: -1, seq: -1, op: -1, col: make([]int, len(p.cols))}
	for i := range pr.col {
		pr.col[i] = -1
	}
	if names == nil {
		cols := make([]Column, 0, len(p.cols)+2)
		pr.time = 0
		cols = append(cols, Column{Name: "time", Kind: KindTime})
		for i, c := range schemaOrder(p.cols) {
			pr.col[i] = len(cols)
			cols = append(cols, Column(c))
		}
		pr.seq = len(cols)
		cols = append(cols, Column{Name: "x_seq", Kind: KindSeq})
		pr.op = len(cols)
		cols = append(cols, Column{Name: "x_op", Kind: KindOp})
		return pr, cols, nil
	}
	cols := make([]Column, 0, len(names))
	seen := make(map[string]struct{}, len(names))
	for _, n := range names {
		if _, dup := seen[n]; dup {
			return pr, nil, fmt.Errorf("%w: %s", ErrDuplicateColumn, QuoteInput(n))
		}
		seen[n] = struct{}{}
		switch n {
		case "time":
			pr.time = len(cols)
			cols = append(cols, Column{Name: n, Kind: KindTime})
			continue
		case "x_seq":
			pr.seq = len(cols)
			cols = append(cols, Column{Name: n, Kind: KindSeq})
			continue
		case "x_op":
			pr.op = len(cols)
			cols = append(cols, Column{Name: n, Kind: KindOp})
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
			return pr, nil, fmt.Errorf("%w: %s", ErrUnknownColumn, QuoteInput(n))
		}
	}
	return pr, cols, nil
}
