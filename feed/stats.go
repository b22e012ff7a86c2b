package feed

import (
	"sort"
	"time"

	"github.com/ingestd/ingestd/store"
)

// TableStats is what a table holds in the store (docs/reference.md#tables): see
// store.TableStats for how each figure is counted.
type TableStats struct {
	// Fragments is the number of stored fragments (exact).
	Fragments uint64
	// RowsEstimate estimates the distinct points: Fragments minus the
	// points written more than once (exact unless a point was written
	// three times or more; an upper bound).
	RowsEstimate uint64
	// Series is the number of distinct tag sets.
	Series uint64
	// Bytes is the table's keys and values in bytes (badger's accounting,
	// before compression).
	Bytes uint64
	// ComputedAt is when the store counted them (at most
	// --store-table-stats-max-age ago).
	ComputedAt time.Time
}

// TableStats counts what table name holds. ErrTableNotFound for an unknown
// table; a storage failure is returned as is. Safe for concurrent use.
func (s *Drainer) TableStats(name string) (TableStats, error) {
	t, err := s.lookup(name)
	if err != nil {
		return TableStats{}, err
	}
	st, err := s.st.TableStats(storeCtx, t.snapshot().tid)
	if err != nil {
		return TableStats{}, storageErr("table stats", err)
	}
	return TableStats{Fragments: st.Fragments, RowsEstimate: st.RowsEstimate(), Series: st.Series, Bytes: st.Bytes, ComputedAt: st.ComputedAt}, nil
}

// ConsumerLag is a named consumer's position and how far it is behind
// (the figures of ingestd_feed_consumer_lag_fragments and _seconds).
type ConsumerLag struct {
	ConsumerInfo
	// Fragments is watermark - position (the whole watermark when the
	// consumer's epoch is stale).
	Fragments uint64
	// Seconds is how long ago the oldest fragment it has not applied was
	// committed; 0 when caught up.
	Seconds float64
}

// ConsumerLags lists table's named consumers with their lag, ordered by
// name, from one snapshot of the table (so a lag is never negative).
// ErrTableNotFound for an unknown table. Safe for concurrent use.
func (s *Drainer) ConsumerLags(table string) ([]ConsumerLag, error) {
	t, err := s.lookup(table)
	if err != nil {
		return nil, err
	}
	return s.consumerLags(t, t.snapshot()), nil
}

func (s *registry) consumerLags(t *table, p published) []ConsumerLag {
	now := s.now()
	list := t.consumers.list()
	out := make([]ConsumerLag, len(list))
	for i, c := range list {
		out[i] = s.consumerLag(c, &p, now)
		s.lagSeconds(&out[i], &p, now)
	}
	return out
}

// consumerLag is c's position and lag in fragments against p, as of now
// (Seconds left 0: lagSeconds reads the store for it).
func (s *registry) consumerLag(c store.Consumer, p *published, now time.Time) ConsumerLag {
	pos := c.Position
	if c.Epoch != p.epoch || pos > p.watermark {
		pos = 0 // a stale epoch must resync everything
	}
	return ConsumerLag{ConsumerInfo: s.consumerInfo(c, p.epoch, now), Fragments: p.watermark - pos}
}

// lagSeconds sets l.Seconds: how long ago the oldest fragment l has not
// applied was committed (one store read).
func (s *registry) lagSeconds(l *ConsumerLag, p *published, now time.Time) {
	if l.Fragments == 0 {
		return
	}
	pos := p.watermark - l.Fragments
	if ts, ok, err := s.st.SeqTime(storeCtx, p.tid, pos+1); err == nil && ok {
		l.Seconds = max(0, now.Sub(time.Unix(0, ts)).Seconds())
	}
}

// TableConsumerLag is a ConsumerLag with its table's name.
type TableConsumerLag struct {
	Table string // the consumer's table
	ConsumerLag
}

// LaggiestConsumers returns the n named consumers furthest behind (in
// fragments, then by table and name) among the tables allow accepts (nil:
// every table), and the count of the others and the sum of their lag in
// fragments. Only the n returned read the store (for their lag in
// seconds), so its cost is bounded by n, not by the consumers. Safe for
// concurrent use.
func (s *Drainer) LaggiestConsumers(n int, allow func(table string) bool) (top []TableConsumerLag, others int, othersFragments uint64) {
	return s.laggiest(n, func(name string, _ *published) bool { return allow == nil || allow(name) })
}

func (s *registry) laggiest(n int, allow func(name string, p *published) bool) (top []TableConsumerLag, others int, othersFragments uint64) {
	now := s.now()
	type cand struct {
		TableConsumerLag
		p *published
	}
	var all []cand
	for _, t := range s.liveTables() {
		p := t.snapshot()
		if !allow(t.name, &p) {
			continue
		}
		for _, c := range t.consumers.list() {
			all = append(all, cand{TableConsumerLag{t.name, s.consumerLag(c, &p, now)}, &p})
		}
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := &all[i], &all[j]
		if a.Fragments != b.Fragments {
			return a.Fragments > b.Fragments
		}
		if a.Table != b.Table {
			return a.Table < b.Table
		}
		return a.Name < b.Name
	})
	n = max(0, min(n, len(all)))
	top = make([]TableConsumerLag, n)
	for i := range top {
		top[i] = all[i].TableConsumerLag
		s.lagSeconds(&top[i].ConsumerLag, all[i].p, now)
	}
	for _, c := range all[n:] {
		othersFragments += c.Fragments
	}
	return top, len(all) - n, othersFragments
}
