package jsstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ingestd/ingestd/store"
)

// newTable returns the state of the name rec holds, at revision rev.
func (s *Store) newTable(rec record, rev uint64) *table {
	rec.Meta.Name = string(rec.Name)
	t := &table{name: rec.Meta.Name, stream: rec.Stream, subject: rec.Subject, rec: rec, rev: rev, served: s.cfg.materialises(rec.Meta.Name)}
	if rec.Anchor != nil {
		t.anchored.Store(rec.Anchor.Seq)
	}
	return t
}

// metaWire is a table's metadata as the meta bucket holds it, inside its
// record (which holds the name byte for byte): this backend's field
// names, whatever store.TableMeta's are.
type metaWire struct {
	ID           uint64       `json:"id"`
	Sync         bool         `json:"sync"`
	Epoch        uint64       `json:"epoch"`
	Seq          uint64       `json:"seq_lease"`
	Columns      []columnWire `json:"columns"`
	Dropped      bool         `json:"dropped,omitempty"`
	Retention    *int64       `json:"retention_ns,omitempty"`
	ColumnsSince []uint64     `json:"columns_since,omitempty"`
}

// columnWire is a column of metaWire.
type columnWire struct {
	Name string     `json:"name"`
	Kind store.Kind `json:"kind"`
}

// MarshalJSON encodes r with Meta as its metaWire.
func (r record) MarshalJSON() ([]byte, error) {
	type plain record // without the methods
	m := r.Meta
	r.WireMeta = metaWire{ID: m.ID, Sync: m.Sync, Epoch: m.Epoch, Seq: m.Seq, Dropped: m.Dropped, Retention: m.Retention, ColumnsSince: m.ColumnsSince}
	if m.Columns != nil {
		r.WireMeta.Columns = make([]columnWire, len(m.Columns))
		for i, c := range m.Columns {
			r.WireMeta.Columns[i] = columnWire(c)
		}
	}
	return json.Marshal(plain(r))
}

// UnmarshalJSON decodes what MarshalJSON encoded; Meta.Name is the
// record's Name.
func (r *record) UnmarshalJSON(b []byte) error {
	type plain record
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*r = record(p)
	w := r.WireMeta
	r.WireMeta = metaWire{}
	r.Meta = store.TableMeta{Name: string(r.Name), ID: w.ID, Sync: w.Sync, Epoch: w.Epoch, Seq: w.Seq, Dropped: w.Dropped, Retention: w.Retention, ColumnsSince: w.ColumnsSince}
	if w.Columns != nil {
		r.Meta.Columns = make([]store.Column, len(w.Columns))
		for i, c := range w.Columns {
			r.Meta.Columns[i] = store.Column(c)
		}
	}
	return nil
}

// consumerWire is a consumer's position in its table's consumers entry
// (consumers), which is keyed by the consumer's name.
type consumerWire struct {
	Epoch    uint64 `json:"epoch"`
	Position uint64 `json:"position"`
	LastSeen int64  `json:"last_seen"`
	Owner    string `json:"owner,omitempty"`
}

// decodeRecord decodes a table record of the meta bucket.
func decodeRecord(e jetstream.KeyValueEntry) (record, error) {
	var rec record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return record{}, &store.CorruptionError{Key: []byte(e.Key()), Err: err}
	}
	rec.Meta.Name = string(rec.Name)
	if rec.Subject == "" {
		// An earlier build's layout: a stream per table, its messages
		// numbered by stream sequence alone.
		return record{}, fmt.Errorf("jsstore: table %q is stored in a stream of its own (%s), as builds before the shared blocks stream did: run this build on a new --jetstream-prefix", rec.Name, rec.Stream)
	}
	return rec, nil
}

// live reports whether r holds a live instance.
func (r *record) live() bool { return !r.Meta.Dropped && r.Meta.ID != 0 }

// knows reports whether r says what became of instance tid: it is r's
// live instance, or it ended (at or below Ended, or below the live one).
func (r *record) knows(tid uint64) bool {
	return tid <= r.Ended || r.live() && tid <= r.Meta.ID
}

// maxEnded bounds the ended instances whose columns the store keeps for
// the writer's calls on them (Store.ended): the writer takes the report
// of an instance's end within one group commit.
const maxEnded = 64

// setRecord makes rec, at revision rev, t's record when rev is newer than
// t's (a record only moves forward, whoever read it: the writer, the
// record watcher, a follower), keeping byTID and the ended instances'
// columns in step, and returns whether it did and the record it replaced.
func (s *Store) setRecord(t *table, rec record, rev uint64) (bool, record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := t.rec
	if rev <= t.rev {
		return false, prev
	}
	rec.Meta.Name = t.name
	if prev.live() && rec.live() && prev.Meta.ID == rec.Meta.ID {
		rec.Meta.Seq = max(rec.Meta.Seq, prev.Meta.Seq)
	}
	t.rec, t.rev = rec, rev
	if prev.live() && (!rec.live() || rec.Meta.ID != prev.Meta.ID) {
		delete(s.byTID, prev.Meta.ID)
		s.ended[prev.Meta.ID] = prev.Meta.Columns
		s.endedOrder = append(s.endedOrder, prev.Meta.ID)
		if len(s.endedOrder) > maxEnded {
			delete(s.ended, s.endedOrder[0])
			s.endedOrder = slices.Delete(s.endedOrder, 0, 1)
		}
	}
	if rec.live() {
		s.byTID[rec.Meta.ID] = t
	}
	if rec.Anchor != nil && rec.Anchor.Seq > t.anchored.Load() {
		t.anchored.Store(rec.Anchor.Seq)
		defer func() { go t.wake() }() // fmu is never taken under mu
	}
	return true, prev
}

// adoptRecord takes rec, at revision rev, another process's record of a
// name (or one read again after a compare-and-set conflict), when it is
// newer than what this process knows: a name new here gets its state; a
// new live instance (created, truncated, re-created) its table in the
// cache, and a follower when none runs (self: the follower calling, which
// runs); an ended instance's rows leave the cache. Then the change is
// reported to the Follow callback (the feed takes the new instance, the
// drop, the new sync, epoch, retention or columns).
func (s *Store) adoptRecord(rec record, rev uint64, self *table) error {
	name := string(rec.Name)
	s.mu.Lock()
	t := s.byName[name]
	if t == nil {
		t = s.newTable(record{Name: rec.Name, Stream: rec.Stream, Subject: rec.Subject}, 0)
		s.byName[name] = t
	}
	s.mu.Unlock()
	ok, prev := s.setRecord(t, rec, rev)
	if !ok {
		return nil
	}
	// Read after the record is set: a callback registered later comes
	// with a LoadTables that sees it.
	s.mu.Lock()
	fn := s.followFn
	s.mu.Unlock()
	if err := s.syncCache(t); err != nil {
		return err
	}
	if rec.live() && t != self {
		t.ensureFollower(s, 0)
	}
	switch {
	case fn == nil, rec.Writer == s.node:
		return nil
	case rec.live():
		_, xseq := t.position()
		m := rec.Meta
		m.Columns = slices.Clone(m.Columns)
		fn(store.Followed{Table: m, Seq: max(xseq, m.Seq), Version: rev})
	case prev.live():
		fn(store.Followed{Table: rec.Meta, Ended: prev.Meta.ID, Version: rev})
	default:
		return nil // a tombstone's floor moved
	}
	if !prev.live() || !rec.live() || prev.Meta.ID != rec.Meta.ID {
		s.m.changes.WithLabelValues(changeKind(prev, rec)).Inc()
	}
	return nil
}

// changeKind names a change of a name's instance from prev to rec for
// ingestd_jetstream_followed_changes_total.
func changeKind(prev, rec record) string {
	switch {
	case !rec.live():
		return "drop"
	case prev.live():
		return "truncate"
	default:
		return "create"
	}
}

// syncCache makes the cache hold the live instance of t's record (none
// when this node does not materialise t): an ended instance's rows go
// (and its age index), a new one starts at the record's horizon. Whoever
// changed the record calls it; a follower calls it before it applies a
// block (the record may have moved on since).
func (s *Store) syncCache(t *table) error {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	return s.syncCacheLocked(t)
}

// syncCacheLocked is syncCache with cacheMu held.
func (s *Store) syncCacheLocked(t *table) error {
	s.mu.Lock()
	want, horizon := uint64(0), t.rec.Horizon
	if t.rec.live() && t.served {
		want = t.rec.Meta.ID
	}
	s.mu.Unlock()
	if t.cached == want {
		return nil
	}
	ctx := context.Background()
	if t.cached != 0 {
		if err := s.cache.DropInstance(ctx, t.cached); err != nil {
			return err
		}
		t.f.fmu.Lock()
		t.ages = ageIndex{}
		t.f.fmu.Unlock()
	}
	t.cached = 0
	if want != 0 {
		// Another process's retention trimmed the instance's history: a
		// drain below its horizon is refused here too.
		if horizon > 1 {
			if _, err := s.cache.RaiseHorizon(ctx, want, horizon); err != nil {
				return err
			}
		}
	}
	t.cached = want
	return nil
}

// learn reads t's record until it says what became of instance tid (a
// block of an instance this process has not heard of: its record was
// written before the block, and may not have reached this process yet),
// and takes it (adoptRecord). It polls, as a bucket read may be served by
// a replica that is behind, until ctx ends.
func (s *Store) learn(ctx context.Context, t *table, tid uint64) error {
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		var (
			rec record
			rev uint64
		)
		err := s.retry(func(ctx context.Context) error {
			e, err := s.meta.Get(ctx, s.tableKey(t.name))
			if err != nil {
				return err
			}
			rev = e.Revision()
			rec, err = decodeRecord(e)
			return err
		})
		if err != nil {
			return fmt.Errorf("jsstore: read the record of table %q: %w", t.name, err)
		}
		if rec.knows(tid) {
			return s.adoptRecord(rec, rev, t)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// watchRecords follows the table records (until ctx ends) and takes the
// ones other processes wrote (adoptRecord): every current record first,
// so that a restarted watch misses nothing, then every update.
func (s *Store) watchRecords(ctx context.Context) {
	for ctx.Err() == nil {
		err := s.eachRecord(ctx, 0, func(e jetstream.KeyValueEntry) (bool, error) {
			if e == nil {
				return false, nil // the end of the current ones
			}
			rec, err := decodeRecord(e)
			if err != nil {
				s.logger.Error("unreadable table record skipped", "key", e.Key(), "err", err)
				return false, nil
			}
			return false, s.adoptRecord(rec, e.Revision(), nil)
		}, s.forgetRecord)
		if ctx.Err() != nil {
			return
		}
		s.logger.Warn("watching the table records failed: starting again", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// forgetRecord takes the removal (revision rev) of the record at key
// from another process's PruneTombstone: the name's tombstone goes, as
// it went there, and its follower, if one still ran, stops. Only a
// tombstone is ever removed; a live record or a later one stays.
func (s *Store) forgetRecord(key string, rev uint64) {
	s.mu.Lock()
	var gone *table
	for name, t := range s.byName {
		if s.tableKey(name) == key {
			if !t.rec.live() && t.rev < rev {
				gone = t
				delete(s.byName, name)
			}
			break
		}
	}
	s.mu.Unlock()
	if gone != nil {
		gone.stopFollower()
	}
}

// endedColumns returns the columns of instance tid when another process
// ended it and this process has not been told yet.
func (s *Store) endedColumns(tid uint64) ([]store.Column, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cols, ok := s.ended[tid]
	return cols, ok
}
