package feed

import (
	"fmt"

	"github.com/ingestd/ingestd/store"
)

// Operation selects drained fragments by what they did to their point
// (docs/contract.md#operation).
type Operation = store.Operation

// The operations a drain may ask for; OpAny (zero) returns both.
const (
	OpAny    = store.OpAny
	OpInsert = store.OpInsert
	OpUpdate = store.OpUpdate
)

// KindOp is the kind of the x_op column in drains: Num 0 for an insert
// (the fragment created its point), 1 for an update.
const KindOp Kind = 66

// Default budgets of a drain's filters (Config).
const (
	DefaultMaxDrainFilters          = 16
	DefaultMaxDrainFilterValues     = 256
	DefaultMaxDrainFilterValueBytes = 1024
	DefaultMaxDrainScan             = 1_000_000
)

// TagFilter admits the fragments whose series has tag Key set to one of
// Values (one value: equality; several: IN).
type TagFilter struct {
	// Key is the tag key, a tag column of the table.
	Key string
	// Values are the admitted values, at least one.
	Values []string
}

// Filter narrows a drain (docs/contract.md#filters): every condition set
// must hold. The zero Filter admits every fragment.
type Filter struct {
	// Tags are ANDed tag conditions, each on another key.
	Tags []TagFilter
	// Has lists fields the fragment's coalesced row must set.
	Has []string
	// Start and End, when HasStart or HasEnd, bound the point's time in
	// Unix nanoseconds: Start <= time < End.
	Start, End       int64
	HasStart, HasEnd bool
}

// set reports whether f holds any condition.
func (f *Filter) set() bool {
	return len(f.Tags) > 0 || len(f.Has) > 0 || f.HasStart || f.HasEnd
}

// Reasons of ingestd_feed_drain_filter_refusals_total (a closed set).
const (
	refusedFilters     = "filters"
	refusedValues      = "values"
	refusedValueBytes  = "value_bytes"
	refusedUnknownTag  = "unknown_tag"
	refusedUnknownHas  = "unknown_field"
	refusedFilterRange = "time_range"
)

// checkFilterBudgets refuses a filter past the configured budgets, before
// anything is resolved or read: ErrFilterLimit naming the flag, counted
// by reason.
func (s *registry) checkFilterBudgets(f *Filter) error {
	refuse := func(reason, format string, args ...any) error {
		s.m.filterRefusals.WithLabelValues(reason).Inc()
		return fmt.Errorf("%w: "+format, append([]any{ErrFilterLimit}, args...)...)
	}
	if n := len(f.Tags) + len(f.Has); n > s.cfg.MaxDrainFilters {
		return refuse(refusedFilters, "%d tag and has conditions, more than --max-drain-filters=%d", n, s.cfg.MaxDrainFilters)
	}
	for _, tf := range f.Tags {
		if len(tf.Values) > s.cfg.MaxDrainFilterValues {
			return refuse(refusedValues, "tag %s lists %d values, more than --max-drain-filter-values=%d", QuoteInput(tf.Key), len(tf.Values), s.cfg.MaxDrainFilterValues)
		}
		for _, v := range append([]string{tf.Key}, tf.Values...) {
			if len(v) > s.cfg.MaxDrainFilterValueBytes {
				return refuse(refusedValueBytes, "a value of tag %s is %d bytes, more than --max-drain-filter-value-bytes=%d", QuoteInput(tf.Key), len(v), s.cfg.MaxDrainFilterValueBytes)
			}
		}
	}
	for _, h := range f.Has {
		if len(h) > s.cfg.MaxDrainFilterValueBytes {
			return refuse(refusedValueBytes, "has names %d bytes, more than --max-drain-filter-value-bytes=%d", len(h), s.cfg.MaxDrainFilterValueBytes)
		}
	}
	return nil
}

// storeFilter resolves req's filter and operation against the published
// state p: tag conditions become the set of series ids whose tags match
// (so that the store skips the other series' fragments by id), has names
// column positions. ErrInvalidFilter names an unknown tag or field. nil
// when the request has no condition.
func (s *registry) storeFilter(req *DrainRequest, p *published) (*store.SeqFilter, error) {
	f := &req.Filter
	if !f.set() && req.Operation == OpAny {
		return nil, nil
	}
	refuse := func(reason, format string, args ...any) error {
		s.m.filterRefusals.WithLabelValues(reason).Inc()
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidFilter}, args...)...)
	}
	sf := &store.SeqFilter{Op: req.Operation, Start: f.Start, End: f.End, HasStart: f.HasStart, HasEnd: f.HasEnd, MaxScan: s.cfg.MaxDrainScan}
	if f.HasStart && f.HasEnd && f.Start >= f.End {
		return nil, refuse(refusedFilterRange, "start %d is not before end %d", f.Start, f.End)
	}
	colOf := func(name string) (uint32, store.Kind, bool) {
		for i, c := range p.cols {
			if c.Name == name {
				return uint32(i), c.Kind, true
			}
		}
		return 0, 0, false
	}
	if len(f.Tags) > 0 {
		want := make(map[uint32]map[string]struct{}, len(f.Tags))
		for _, tf := range f.Tags {
			col, kind, ok := colOf(tf.Key)
			if !ok || kind != KindTag {
				return nil, refuse(refusedUnknownTag, "%s is not a tag of table %s", QuoteInput(tf.Key), QuoteInput(req.Table))
			}
			if _, dup := want[col]; dup {
				return nil, refuse(refusedUnknownTag, "tag %s is filtered twice", QuoteInput(tf.Key))
			}
			vals := make(map[string]struct{}, len(tf.Values))
			for _, v := range tf.Values {
				vals[v] = struct{}{}
			}
			want[col] = vals
		}
		sf.Series = make([]bool, len(p.tags))
		for sid, tags := range p.tags {
			matched := 0
			for _, tg := range tags {
				if vals, ok := want[tg.Col]; ok {
					if _, ok := vals[tg.Value.Str]; ok {
						matched++
					}
				}
			}
			sf.Series[sid] = sid > 0 && matched == len(want)
		}
	}
	for _, h := range f.Has {
		col, kind, ok := colOf(h)
		if !ok || kind == KindTag {
			return nil, refuse(refusedUnknownHas, "%s is not a field of table %s", QuoteInput(h), QuoteInput(req.Table))
		}
		sf.Has = append(sf.Has, col)
	}
	return sf, nil
}
