package feed

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ingestd/ingestd/store"
)

// resolver runs, on a goroutine of its own, the store.Shared calls a
// write needs before the sequencer can apply it (docs/design.md#shared-metadata):
// the instance of a table the write creates, the columns it adds and the
// ids of its new series, each a round trip to the other processes. The
// sequencer checks every write just before it applies it (needs); a write
// that needs something is parked here, out of the group, while the
// writes that need nothing commit, and comes back to the sequencer,
// resolved, to be applied then. So a burst of new series, or a shared
// store that stops answering, holds only the writes that bring new
// names, never the other writers.
//
// The parked writes are bounded by the writes in flight (each HTTP request
// and TCP connection has at most one), and each resolution by the store's
// own timeouts (--jetstream-publish-timeout).
type resolver struct {
	mu      sync.Mutex // guards queue and results; taken alone
	queue   []*resolveReq
	results []*resolveReq
	wake    chan struct{} // capacity 1: queue has requests
	ready   chan struct{} // capacity 1: results has requests (read by Run)
	quit    chan struct{} // closed to stop the goroutine
	exited  chan struct{} // closed when the goroutine has returned
	// parked counts the writes handed over and not taken back (written by
	// the sequencer goroutine, read by the metric).
	parked atomic.Int64
}

// resolveReq is one parked write and what it needs, per table; or, when
// follow is set, the load of an instance another process created (its
// series, horizon and consumers: instance).
type resolveReq struct {
	o      *op
	tables []*tableNeeds
	// err is the resolution's failure (the op fails with it).
	err error

	follow   *change
	instance *instanceState

	// change, when set, is a table change (o its operation) whose store
	// calls the resolver makes.
	change *tableChange
}

// tableNeeds is what a parked write needs of one table name.
type tableNeeds struct {
	name string
	// tid is the live instance the needs are of; 0 when the write creates
	// the table, create then being its metadata but for the id.
	tid    uint64
	create store.TableMeta
	// schema is the instance's schema as the sequencer knew it, then as
	// the store returned it.
	schema []store.Column
	// cols are the columns to add, in order of first appearance, colKind
	// their kinds by name.
	cols    []store.Column
	colKind map[string]Kind
	// series are the new tag sets (their keys also in seriesIdx).
	series    []seriesNeed
	seriesIdx map[string]struct{}

	// Set by the resolver.
	meta     store.TableMeta // the instance, when the write created the table
	instance *instanceState  // its state, when another process created it first
	out      []store.Series  // the resolved series
}

// seriesNeed is a tag set to number: its canonical key and its tags (the
// batch's, valid while the write is parked).
type seriesNeed struct {
	key  string
	tags []Tag
}

// instanceState is what a process loads of a table instance another
// process created.
type instanceState struct {
	series    []store.Series
	horizon   uint64
	consumers []store.Consumer
}

// table returns req's needs of table name, nil when none.
func (r *resolveReq) table(name string) *tableNeeds {
	if r == nil {
		return nil
	}
	for _, tn := range r.tables {
		if tn.name == name {
			return tn
		}
	}
	return nil
}

// creates counts the tables req creates.
func (r *resolveReq) creates() int {
	n := 0
	if r != nil {
		for _, tn := range r.tables {
			if tn.tid == 0 {
				n++
			}
		}
	}
	return n
}

// startResolver starts the resolver goroutine (a shared store only).
func (s *Sequencer) startResolver() {
	r := &s.res
	r.wake, r.ready = make(chan struct{}, 1), make(chan struct{}, 1)
	r.quit, r.exited = make(chan struct{}), make(chan struct{})
	go s.resolveLoop()
}

// stopResolver stops the resolver goroutine and waits for it (it ends the
// resolution it is in first). A no-op when none runs.
func (s *Sequencer) stopResolver() {
	r := &s.res
	if r.quit == nil {
		return
	}
	select {
	case <-r.quit:
	default:
		close(r.quit)
	}
	<-r.exited
}

// resolveLoop resolves parked writes in arrival order and hands them
// back to the sequencer.
func (s *Sequencer) resolveLoop() {
	r := &s.res
	defer close(r.exited)
	for {
		select {
		case <-r.quit:
			return
		case <-r.wake:
		}
		for {
			r.mu.Lock()
			reqs := r.queue
			r.queue = nil
			r.mu.Unlock()
			if len(reqs) == 0 {
				break
			}
			c := resolveCache{created: map[string]createdTable{}, ids: map[string]uint64{}}
			for _, req := range reqs {
				select {
				case <-r.quit:
					r.requeue(req)
					continue
				default:
				}
				start := time.Now()
				s.resolve(req, &c)
				s.m.resolveSeconds.Observe(time.Since(start).Seconds())
				if req.err != nil {
					s.m.resolveFailures.Inc()
				}
				r.mu.Lock()
				r.results = append(r.results, req)
				r.mu.Unlock()
				select {
				case r.ready <- struct{}{}:
				default:
				}
			}
		}
	}
}

// requeue puts back a request the stopping goroutine did not resolve.
func (r *resolver) requeue(req *resolveReq) {
	r.mu.Lock()
	r.queue = append(r.queue, req)
	r.mu.Unlock()
}

// resolveCache remembers, within one round of requests, the tables
// created and the series numbered, so that writes parked together for
// the same names cost one round trip each.
type resolveCache struct {
	created map[string]createdTable
	ids     map[string]uint64 // by instance id and series key
}

type createdTable struct {
	meta     store.TableMeta
	instance *instanceState
}

// resolve does req's store calls: creates the tables, adds the columns,
// numbers the series. Resolver goroutine only: it reads nothing of the
// sequencer's state but req.
func (s *Sequencer) resolve(req *resolveReq, c *resolveCache) {
	if req.follow != nil {
		req.instance, req.err = s.loadInstance(req.follow.Table)
		return
	}
	if req.change != nil {
		s.runChange(req.change)
		return
	}
	for _, tn := range req.tables {
		if err := s.resolveTable(tn, c); err != nil {
			req.err = fmt.Errorf("%w: table %s: %w", ErrUnavailable, QuoteInput(tn.name), err)
			return
		}
	}
}

func (s *Sequencer) resolveTable(tn *tableNeeds, c *resolveCache) error {
	if tn.tid == 0 {
		ct, ok := c.created[tn.name]
		if !ok {
			var err error
			if ct, _, err = s.createInstance(tn.create); err != nil {
				return err
			}
			c.created[tn.name] = ct
		}
		tn.meta, tn.instance, tn.tid, tn.schema = ct.meta, ct.instance, ct.meta.ID, ct.meta.Columns
	}
	if len(tn.cols) > 0 {
		schema, err := s.shared.AddColumns(storeCtx, tn.tid, tn.cols)
		if err != nil {
			return err
		}
		tn.schema = schema
	}
	pos := make(map[string]uint32, len(tn.schema))
	for i, col := range tn.schema {
		if col.Kind == KindTag {
			pos[col.Name] = uint32(i)
		}
	}
	// The series without an id yet, each asked for once.
	var (
		keys []string // by tn.out's index
		miss []newSeries
	)
next:
	for _, sn := range tn.series {
		tags := make([]store.Field, len(sn.tags))
		for i, tag := range sn.tags {
			col, ok := pos[tag.Key]
			if !ok {
				continue next // a field of the table: the point is refused when applied
			}
			tags[i] = store.Field{Col: col, Value: Value{Kind: KindTag, Str: strings.Clone(tag.Value)}}
		}
		ck := fmt.Sprintf("%d\x00%s", tn.tid, sn.key)
		if _, ok := c.ids[ck]; !ok {
			c.ids[ck] = 0 // asked for below
			miss = append(miss, newSeries{ck: ck, key: sn.key, tags: tags})
		}
		keys = append(keys, ck)
		tn.out = append(tn.out, store.Series{Tags: tags})
	}
	if err := s.seriesIDs(tn.tid, miss); err != nil {
		for _, ns := range miss {
			delete(c.ids, ns.ck)
		}
		return err
	}
	for _, ns := range miss {
		c.ids[ns.ck] = ns.id
	}
	for i := range tn.out {
		tn.out[i].ID = c.ids[keys[i]]
	}
	return nil
}

// newSeries is a series the resolver asks the shared store to number:
// its cache key, canonical key and tag set, and the id it got.
type newSeries struct {
	ck, key string
	tags    []store.Field
	id      uint64
}

// seriesIDs numbers each of miss in instance tid with one call of the
// shared store (store.Shared.SeriesIDs: a burst of new series costs it a
// few round trips, not one per series).
func (s *Sequencer) seriesIDs(tid uint64, miss []newSeries) error {
	if len(miss) == 0 {
		return nil
	}
	keys := make([]store.SeriesKey, len(miss))
	for i, ns := range miss {
		keys[i] = store.SeriesKey{Key: ns.key, Tags: ns.tags}
	}
	ids, err := s.shared.SeriesIDs(storeCtx, tid, keys)
	if err != nil {
		return err
	}
	if len(ids) != len(miss) {
		return fmt.Errorf("feed: %d series ids for %d series", len(ids), len(miss))
	}
	for i := range miss {
		miss[i].id = ids[i]
	}
	return nil
}

// createInstance stores a new instance of table m (m but for its id)
// and returns it; when another process created the name first, its
// instance, loaded (created false). Resolver goroutine only.
func (s *Sequencer) createInstance(m store.TableMeta) (ct createdTable, created bool, err error) {
	if m.ID, err = s.st.NewTableID(storeCtx); err != nil {
		return ct, false, err
	}
	if ct.meta, err = s.st.PutTable(storeCtx, m); err != nil {
		return ct, false, err
	}
	if ct.meta.ID == m.ID {
		return ct, true, nil
	}
	ct.instance, err = s.loadInstance(ct.meta)
	return ct, false, err
}

// loadInstance loads what this process needs of instance m, which another
// process created: its series, history horizon and consumers.
func (s *Sequencer) loadInstance(m store.TableMeta) (*instanceState, error) {
	series, err := s.st.LoadSeries(storeCtx, m.ID)
	if err != nil {
		return nil, err
	}
	h, err := loadHorizon(s.st, m.ID)
	if err != nil {
		return nil, err
	}
	cs, err := s.st.LoadConsumers(storeCtx, m.Name)
	if err != nil {
		return nil, err
	}
	return &instanceState{series: series, horizon: h, consumers: cs}, nil
}

// park hands o, which needs req resolved, to the resolver. Sequencer
// goroutine only.
func (s *Sequencer) park(req *resolveReq) {
	req.o.parked = true
	s.res.parked.Add(1)
	s.toResolver(req)
}

// toResolver hands req to the resolver. Sequencer goroutine only.
func (s *Sequencer) toResolver(req *resolveReq) {
	s.res.mu.Lock()
	s.res.queue = append(s.res.queue, req)
	s.res.mu.Unlock()
	select {
	case s.res.wake <- struct{}{}:
	default:
	}
}

// takeResolved takes the writes the resolver handed back: a failed one is
// answered with its error, a resolved one's tables, columns and series
// become the tables' (an instance ended meanwhile is left out: the write
// is checked again when applied) and it is appended to ops; so are the
// operations that waited behind a table change it finished (changes.go).
// A change's storage failure of the store's own is returned, every
// operation taken answered with it: the sequencer stops. Sequencer
// goroutine only.
func (s *Sequencer) takeResolved(ops []*op) ([]*op, error) {
	s.res.mu.Lock()
	reqs := s.res.results
	s.res.results = nil
	s.res.mu.Unlock()
	for i, req := range reqs {
		if req.follow != nil {
			s.takeLoaded(req)
			continue
		}
		if req.change != nil {
			waited, err := s.finishChange(req.change)
			if err != nil {
				failOps(ops, err)
				s.res.mu.Lock()
				s.res.results = append(reqs[i+1:], s.res.results...) // failParked answers them
				s.res.mu.Unlock()
				return nil, err
			}
			ops = append(ops, waited...)
			continue
		}
		s.res.parked.Add(-1)
		req.o.parked = false
		if req.err != nil {
			failOps([]*op{req.o}, req.err)
			continue
		}
		for _, tn := range req.tables {
			s.adoptNeeds(tn)
		}
		ops = append(ops, req.o)
	}
	return ops, nil
}

// adoptNeeds makes what the resolver resolved of tn the table's.
func (s *Sequencer) adoptNeeds(tn *tableNeeds) {
	t := s.tables[tn.name]
	if tn.meta.ID != 0 && (t == nil || t.meta.ID < tn.meta.ID) && s.dropped[tn.name] < tn.meta.ID {
		t = s.installCreated(t, tn)
	}
	if t == nil || t.meta.ID != tn.tid {
		return
	}
	if len(tn.schema) > len(t.meta.Columns) {
		s.adoptColumns(t, tn.schema)
		t.metaPending = true
	}
	for _, sr := range tn.out {
		s.adoptSeries(t, sr.ID, sr.Tags)
	}
	t.announce = append(t.announce, tn.out...)
}

// installCreated makes the instance the resolver created (or found
// created by another process) table tn.name's, in place of old, an
// instance of the name this process knew before (nil: none).
func (s *Sequencer) installCreated(old *table, tn *tableNeeds) *table {
	var t *table
	if tn.instance == nil {
		t = newTable(tn.meta, nil)
	} else {
		t = newTable(tn.meta, tn.instance.series)
		t.pub.horizon = max(tn.instance.horizon, 1)
	}
	t.metaPending = true
	switch {
	case old != nil: // consumers are kept by name, as across TRUNCATE
		t.consumers = old.consumers
	case tn.instance != nil:
		t.consumers.load(tn.instance.consumers, s.counts)
	}
	s.replaceInstance(old, t)
	return t
}

// failParked stops the resolver and answers every write parked with it
// with err. Sequencer goroutine only, once Run stops.
func (s *Sequencer) failParked(err error) {
	s.stopResolver()
	s.res.mu.Lock()
	reqs := append(s.res.queue, s.res.results...)
	s.res.queue, s.res.results = nil, nil
	s.res.mu.Unlock()
	s.failChange(err)
	for _, req := range reqs {
		if req.o == nil {
			continue // an instance load: nothing waits on it
		}
		s.res.parked.Add(-1)
		req.o.parked = false
		failOps([]*op{req.o}, err)
	}
}

// needs returns what o's batch needs of the shared store before it can be
// applied, nil when nothing: tables to create, columns to add, series to
// number. It makes the decisions of tableForWrite and checkPoint that
// keep a name out of the store (an invalid name, a table, series or
// column past its limit, a schema or point larger than the store holds,
// a key that is a tag and a field), so that an
// outside party makes the store hold only what a write could add; the
// other checks (values, times, retention, kinds) are left to the apply.
// Sequencer goroutine only.
func (s *Sequencer) needs(o *op) *resolveReq {
	var (
		req  *resolveReq
		name string
		t    *table
		tn   *tableNeeds
		skip bool
	)
	for i := range o.batch.Points {
		p := &o.batch.Points[i]
		if i == 0 || p.Table != name {
			name = p.Table
			t, tn, skip = s.tables[name], req.table(name), false
			if t == nil && tn == nil {
				skip = CheckKey("measurement", name, s.cfg.MaxNameBytes) != nil || o.batch.NoCreate ||
					s.checkTableName(name) != nil || len(s.tables)+req.creates() >= s.cfg.MaxTables
			}
		}
		if skip || tn == nil && s.knownPoint(t, p) {
			continue
		}
		if tn == nil {
			if req == nil {
				req = &resolveReq{o: o}
			}
			tn = s.newNeeds(name, t)
			req.tables = append(req.tables, tn)
		}
		s.pointNeeds(t, tn, p)
	}
	if req == nil {
		return nil
	}
	// A table whose points all break a name or limit rule needs nothing
	// (nor is it created): the apply refuses them.
	kept := req.tables[:0]
	for _, tn := range req.tables {
		if len(tn.cols) > 0 || len(tn.series) > 0 {
			kept = append(kept, tn)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	req.tables = kept
	return req
}

// knownPoint reports whether t knows p's series and every field key.
func (s *Sequencer) knownPoint(t *table, p *Point) bool {
	if t == nil {
		return false
	}
	if _, ok := t.series[p.Series]; !ok {
		return false
	}
	for j := range p.Fields {
		if j < len(t.shapeKeys) && t.shapeKeys[j] == p.Fields[j].Key {
			continue
		}
		if _, ok := t.colByName[p.Fields[j].Key]; !ok {
			return false
		}
	}
	return true
}

// newNeeds returns empty needs of table name: of live table t, or of the
// table a write creates (t nil), above its tombstone as createTable does.
func (s *Sequencer) newNeeds(name string, t *table) *tableNeeds {
	tn := &tableNeeds{name: name, colKind: map[string]Kind{}, seriesIdx: map[string]struct{}{}}
	if t != nil {
		tn.tid = t.meta.ID
		tn.schema = t.meta.Columns[:len(t.meta.Columns):len(t.meta.Columns)]
		return tn
	}
	sync := s.cfg.syncOnCreate(name)
	m := store.TableMeta{Name: name, Sync: sync, Epoch: s.floor.Epoch, Seq: s.floor.Seq}
	if tomb, ok := s.tombstones[name]; ok {
		m.Epoch, m.Seq = tomb.Epoch, tomb.Seq
	}
	if sync {
		m.Epoch++
	}
	tn.create = m
	return tn
}

// pointNeeds adds what p needs to tn (t: the live table, nil when the
// write creates it), unless checkPoint would refuse p for a name or a
// limit.
func (s *Sequencer) pointNeeds(t *table, tn *tableNeeds, p *Point) {
	if fragmentBytes(p) > s.limits.MaxFragmentBytes {
		return // larger than the store holds: refused whatever its names
	}
	kindOf := func(name string) (Kind, bool) {
		if t != nil {
			if c, ok := t.colByName[name]; ok {
				return t.meta.Columns[c].Kind, true
			}
		}
		k, ok := tn.colKind[name]
		return k, ok
	}
	var cols []store.Column
	pending := func(name string) bool {
		for _, c := range cols {
			if c.Name == name {
				return true
			}
		}
		return false
	}
	series, columns, metaBytes := len(tn.series), len(tn.cols), columnsBytes(tn.cols)
	if t != nil {
		series += len(t.series)
		columns += len(t.meta.Columns)
		metaBytes += t.metaBytes
	}
	_, known := tn.seriesIdx[p.Series]
	if t != nil && !known {
		_, known = t.series[p.Series]
	}
	if !known {
		if series >= s.cfg.MaxSeriesPerTable || !s.seriesRoom(pointSeriesCost(p)) {
			return
		}
		for _, tag := range p.Tags {
			if CheckTagValue(tag.Key, tag.Value, s.maxStringBytes()) != nil {
				return
			}
			if k, ok := kindOf(tag.Key); ok {
				if k != KindTag {
					return
				}
				continue
			}
			if CheckKey("tag key", tag.Key, s.cfg.MaxNameBytes) != nil {
				return
			}
			cols = append(cols, store.Column{Name: tag.Key, Kind: KindTag})
		}
	}
	for _, f := range p.Fields {
		if _, ok := kindOf(f.Key); ok {
			continue
		}
		if pending(f.Key) || CheckKey("field key", f.Key, s.cfg.MaxNameBytes) != nil {
			return
		}
		cols = append(cols, store.Column{Name: f.Key, Kind: f.Value.Kind})
	}
	if columns+len(cols) > s.cfg.MaxColumnsPerTable || len(cols) > 0 && (metaBytes+columnsBytes(cols) > s.limits.MaxMetaBytes || !s.schemaRoom(columnsCost(cols))) {
		return
	}
	for _, c := range cols {
		tn.colKind[c.Name] = c.Kind
		tn.cols = append(tn.cols, c)
	}
	if !known {
		tn.seriesIdx[p.Series] = struct{}{}
		tn.series = append(tn.series, seriesNeed{key: p.Series, tags: p.Tags})
	}
}
