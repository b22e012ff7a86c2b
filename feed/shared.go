package feed

import (
	"slices"
	"sync"

	"github.com/ingestd/ingestd/store"
)

// followed holds what a store.Shared backend reported of other processes'
// writes until the sequencer goroutine applies it (applyFollowed), merged
// per table instance so that it stays bounded by the tables, their
// columns and series, whatever the rate of the reports.
type followed struct {
	mu      sync.Mutex // guards pending; taken alone (doc.go, Locks)
	pending map[uint64]*store.Followed
	wake    chan struct{} // capacity 1: the Run loop applies pending
}

// add merges f into pending and wakes the Run loop. It never blocks (the
// backend calls it from its own goroutines).
func (p *followed) add(f store.Followed) {
	p.mu.Lock()
	if cur := p.pending[f.Table.ID]; cur != nil {
		if len(f.Table.Columns) < len(cur.Table.Columns) {
			f.Table.Columns = cur.Table.Columns
		}
		cur.Table = f.Table
		cur.Series = append(cur.Series, f.Series...)
		cur.Seq = max(cur.Seq, f.Seq)
	} else {
		f.Series = slices.Clone(f.Series)
		p.pending[f.Table.ID] = &f
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take returns and forgets what is pending.
func (p *followed) take() map[uint64]*store.Followed {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.pending
	p.pending = map[uint64]*store.Followed{}
	return out
}

// applyFollowed makes what the other processes wrote part of the tables'
// published state: their columns, their series, and the watermark up to
// what the backend applied. A report of an instance this process does not
// have (a table another process created, truncated or dropped) is left
// out: this process follows only the instances it wrote. Sequencer
// goroutine only, between group commits.
func (s *Sequencer) applyFollowed() {
	if s.shared == nil {
		return
	}
	for _, f := range s.follow.take() {
		t := s.tables[f.Table.Name]
		if t == nil || t.meta.ID != f.Table.ID {
			continue
		}
		s.adoptColumns(t, f.Table.Columns)
		for _, sr := range f.Series {
			s.adoptSeries(t, sr.ID, sr.Tags)
		}
		t.seq = max(t.seq, f.Seq)
		t.mu.Lock()
		t.pub.seq = t.seq
		if f.Seq > t.pub.watermark {
			t.pub.watermark = f.Seq
			t.notifyLocked()
		}
		t.mu.Unlock()
	}
}

// adoptColumns appends the columns of cols (the backend's whole schema,
// of which t's is a prefix) that t lacks. Sequencer goroutine only.
func (s *Sequencer) adoptColumns(t *table, cols []store.Column) {
	if len(cols) <= len(t.meta.Columns) {
		return
	}
	for _, c := range cols[len(t.meta.Columns):] {
		t.colByName[c.Name] = uint32(len(t.meta.Columns))
		t.meta.Columns = append(t.meta.Columns, c)
	}
	t.mu.Lock()
	t.pub.cols = t.meta.Columns
	t.mu.Unlock()
}

// adoptSeries makes tags series id of t (unless its tag set is known).
// Ids have gaps (a process that lost the race for a tag set skips its
// number): a gap filled later replaces the published tags slice rather
// than write into the one readers hold. Sequencer goroutine only.
func (s *Sequencer) adoptSeries(t *table, id uint64, tags []store.Field) {
	key := string(appendSeriesKey(nil, t.meta.Columns, tags))
	if _, ok := t.series[key]; ok {
		return
	}
	t.series[key] = id
	t.mu.Lock()
	defer t.mu.Unlock()
	pub := t.pub.tags
	if id < uint64(len(pub)) {
		pub = slices.Clone(pub)
	}
	for uint64(len(pub)) <= id {
		pub = append(pub, nil)
	}
	pub[id] = tags
	t.pub.tags = pub
}
