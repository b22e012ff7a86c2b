package feed

import (
	"slices"
	"sync"
	"time"

	"github.com/ingestd/ingestd/store"
)

// followed holds what a store.Shared backend reported of other processes'
// writes and table changes until the sequencer goroutine applies it
// (applyFollowed), merged per table name so that it stays bounded by the
// tables, their columns and series, whatever the rate of the reports.
type followed struct {
	mu      sync.Mutex // guards pending; taken alone (doc.go, Locks)
	pending map[string]*change
	wake    chan struct{} // capacity 1: the Run loop applies pending
}

// change is what is pending for one table name: the latest state
// reported (store.Followed.Version orders them) with the series and Seq
// of its instance, and whether a DROP came before that instance (its
// consumers go with the dropped one).
type change struct {
	store.Followed
	dropped bool
}

// sameInstance reports whether f describes c's instance (or c's drop).
func (c *change) sameInstance(f *store.Followed) bool {
	return c.Table.Dropped == f.Table.Dropped && c.Table.ID == f.Table.ID && c.Ended == f.Ended
}

// add merges f into pending and wakes the Run loop. It never blocks (the
// backend calls it from its own goroutines).
func (p *followed) add(f store.Followed) {
	p.mu.Lock()
	cur := p.pending[f.Table.Name]
	switch {
	case cur == nil:
		f.Series = slices.Clone(f.Series)
		p.pending[f.Table.Name] = &change{Followed: f}
	case cur.sameInstance(&f):
		if f.Version >= cur.Version {
			cols := cur.Table.Columns
			cur.Table, cur.Version = f.Table, f.Version
			if len(f.Table.Columns) < len(cols) {
				cur.Table.Columns = cols
			}
		}
		cur.Series = append(cur.Series, f.Series...)
		cur.Seq = max(cur.Seq, f.Seq)
	case f.Version > cur.Version: // a later instance, or the drop
		dropped := cur.dropped || cur.Table.Dropped
		f.Series = slices.Clone(f.Series)
		p.pending[f.Table.Name] = &change{Followed: f, dropped: dropped}
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take returns and forgets what is pending (only the changes keep
// admits when keep is non-nil).
func (p *followed) take(keep func(name string, c *change) bool) map[string]*change {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.pending
	if keep == nil {
		p.pending = map[string]*change{}
		return out
	}
	out = map[string]*change{}
	for name, c := range p.pending {
		if keep(name, c) {
			out[name] = c
			delete(p.pending, name)
		}
	}
	return out
}

// applyFollowed makes what the other processes wrote and changed part of
// the tables' published state: a table another process created, a new
// instance (TRUNCATE, DROP + re-create: consumers then see a stale epoch,
// as after a TRUNCATE here), a DROP, the sync, epoch and retention they
// set, their columns, their series, and the watermark up to what the
// backend applied. A report of an instance older than this process's is
// left out. Without instances it takes only the reports of the live
// instances' blocks and metadata (new series and columns, sync, epoch,
// retention: nothing a write checked against them by needs depends on),
// leaving the rest pending. Sequencer goroutine only, between group
// commits.
func (s *Sequencer) applyFollowed(instances bool) {
	if s.shared == nil {
		return
	}
	keep := func(name string, c *change) bool {
		if s.loading[name] {
			return false // after the instance being loaded is taken
		}
		if s.chg != nil && s.chg.o.name == name {
			return false // after the change in flight (changes.go)
		}
		t := s.tables[name]
		return instances || t != nil && !c.Table.Dropped && c.Table.ID == t.meta.ID
	}
	for name, c := range s.follow.take(keep) {
		s.applyChange(name, c, nil)
	}
}

// applyChange applies c, what is pending for table name, for
// applyFollowed. An instance new here (a table another process created,
// or re-created after a DROP) is loaded first, off this goroutine (its
// consumers and series are the store's, a round trip): c goes to the
// resolver and comes back with loaded (takeLoaded), meanwhile the name's
// reports wait.
func (s *Sequencer) applyChange(name string, c *change, loaded *resolveReq) {
	f := &c.Followed
	t := s.tables[name]
	switch {
	case f.Table.Dropped:
		if t != nil && t.meta.ID <= f.Ended {
			s.consumerMu.Lock() // as a DROP here (opDrop)
			s.dropTable(t, nil)
			s.consumerMu.Unlock()
			s.logger.Info("table dropped through another ingestd node", "table", name)
		}
		return
	case t == nil && f.Table.ID <= s.dropped[name]:
		return // a block of the instance dropped since
	case t == nil || f.Table.ID > t.meta.ID:
		if (t == nil || c.dropped) && loaded == nil {
			s.loading[name] = true
			s.toResolver(&resolveReq{follow: c})
			return
		}
		t = s.takeInstance(t, c, loaded)
	case f.Table.ID < t.meta.ID:
		return
	default:
		s.takeMeta(t, f)
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

// takeLoaded applies the change whose instance the resolver loaded, then
// has the name's reports that waited applied. Sequencer goroutine only.
func (s *Sequencer) takeLoaded(req *resolveReq) {
	name := req.follow.Table.Name
	delete(s.loading, name)
	if req.err != nil {
		s.logger.Warn("a table another node made taken without its consumers and series: the store did not answer", "table", name, "err", req.err)
	}
	s.applyChange(name, req.follow, req)
	select {
	case s.follow.wake <- struct{}{}:
	default:
	}
}

// takeInstance makes c's instance, new to this process, table name's in
// place of old (nil: a table another process created). Consumers stay
// with a truncated table (their cursors' epoch is stale) and go with a
// dropped one; a table new here takes the series, consumers and history
// horizon loaded (what loaded has of them: nothing when the load failed).
func (s *Sequencer) takeInstance(old *table, c *change, loaded *resolveReq) *table {
	m := c.Table
	var in *instanceState
	if loaded != nil {
		in = loaded.instance
	}
	var nt *table
	if in != nil {
		nt = newTable(m, in.series)
	} else {
		nt = newTable(m, nil)
	}
	nt.seq = max(c.Seq, c.Table.Seq)
	if old != nil {
		if c.dropped {
			old.consumers.dropAll(s.counts)
		} else {
			nt.consumers = old.consumers
		}
		s.logger.Info("table truncated or re-created through another ingestd node", "table", m.Name, "epoch", m.Epoch)
	}
	if in != nil {
		nt.consumers.load(in.consumers, s.counts)
		nt.pub.horizon = max(in.horizon, 1)
	} else if h, err := loadHorizon(s.st, m.ID); err == nil {
		nt.pub.horizon = max(h, 1)
	}
	s.replaceInstance(old, nt)
	return nt
}

// replaceInstance makes nt, a new instance of its name, the name's table
// in place of old (nil: none): nt's x_seq goes on above old's, the
// process's counts carry over, and old's waiters are woken. Consumers are
// the caller's to carry or load. Sequencer goroutine only.
func (s *Sequencer) replaceInstance(old, nt *table) {
	if old != nil {
		nt.seq = max(nt.seq, old.seq)
		prev := old.snapshot()
		nt.pub.points, nt.pub.removed = prev.points, prev.removed
	}
	nt.pub.seq, nt.pub.watermark = nt.seq, nt.seq
	delete(s.dropped, nt.name)
	s.mu.Lock()
	s.putTableLocked(nt)
	delete(s.tombstones, nt.name)
	s.mu.Unlock()
	if old != nil {
		old.notify()
	}
}

// takeMeta takes the sync, epoch and retention of a later version of t's
// instance (SET SYNC, retention changed through another process).
func (s *Sequencer) takeMeta(t *table, f *store.Followed) {
	if f.Version < t.version {
		return
	}
	t.version = f.Version
	if r := f.Table.Retention; r != nil && (t.meta.Retention == nil || *r != *t.meta.Retention) {
		t.setRetention(time.Duration(*r))
	}
	if f.Table.Sync == t.meta.Sync && f.Table.Epoch <= t.meta.Epoch {
		return
	}
	t.setSync(f.Table.Sync, max(t.meta.Epoch, f.Table.Epoch))
}

// adoptColumns appends the columns of cols (the backend's whole schema,
// of which t's is a prefix) that t lacks. Sequencer goroutine only.
func (s *Sequencer) adoptColumns(t *table, cols []store.Column) {
	if len(cols) <= len(t.meta.Columns) {
		return
	}
	for _, c := range cols[len(t.meta.Columns):] {
		s.addColumn(t, c)
	}
	t.columnsAdded()
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
	s.addSeriesBytes(t, seriesCost(len(key), tags))
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
