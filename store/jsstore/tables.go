package jsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ingestd/ingestd/store"
)

// LoadTables implements store.Loader from the records read at Open and
// kept since: every table, tombstones included, ordered by name; a live
// table's Seq is the highest number its follower has numbered (at least
// every number this node assigned).
func (s *Store) LoadTables(ctx context.Context) ([]store.TableMeta, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return nil, err
	}
	defer s.gate.Leave()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]store.TableMeta, 0, len(s.byName))
	for _, t := range s.byName {
		if t.rev == 0 {
			continue // being created
		}
		m := t.rec.Meta
		m.Columns = slices.Clone(m.Columns)
		if !m.Dropped {
			_, xseq := t.position()
			m.Seq = max(m.Seq, xseq)
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b store.TableMeta) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// LoadSeries implements store.Loader from the row cache (the series ride
// in the block messages that first use them). An instance the cache does
// not hold yet (another process made it a moment ago) has none there:
// its series reach the Follow callback as its blocks are applied.
func (s *Store) LoadSeries(ctx context.Context, tid uint64) ([]store.Series, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return nil, err
	}
	defer s.gate.Leave()
	s.cacheMu.Lock()
	cached := false
	for _, t := range s.allTables() {
		cached = cached || t.cached == tid
	}
	s.cacheMu.Unlock()
	if !cached {
		return nil, nil
	}
	return s.cache.LoadSeries(ctx, tid)
}

// NewTableID implements store.Tables: a counter in the meta bucket,
// raised with compare-and-set, so an id is never returned twice, across
// restarts and processes.
func (s *Store) NewTableID(ctx context.Context) (uint64, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return 0, err
	}
	defer s.gate.Leave()
	return s.newTableID()
}

func (s *Store) newTableID() (uint64, error) { return s.counter(nextTIDKey, "table id") }

// counter returns the next number of the counter at key in the meta
// bucket (1 first), raised with compare-and-set: never the same number
// twice, across restarts and processes; what names the number in errors.
func (s *Store) counter(key, what string) (uint64, error) { return s.reserve(key, what, 1) }

// reserve takes n consecutive numbers of the counter at key in the meta
// bucket (one compare-and-set) and returns the first. Processes raising
// the same counter at once take turns (contended); an attempt whose answer
// was lost burns its numbers, never repeats one.
func (s *Store) reserve(key, what string, n uint64) (uint64, error) {
	var first uint64
	err := s.contended(what, func() (bool, error) {
		var (
			e   jetstream.KeyValueEntry
			rev uint64
		)
		err := s.retry(func(ctx context.Context) (err error) {
			e, err = s.meta.Get(ctx, key)
			return err
		})
		id := uint64(1)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return false, fmt.Errorf("jsstore: %s: %w", what, err)
		default:
			if id, err = strconv.ParseUint(string(e.Value()), 10, 64); err != nil {
				return false, &store.CorruptionError{Key: []byte(key), Err: err}
			}
			rev = e.Revision()
		}
		err = s.retry(func(ctx context.Context) (err error) {
			next := []byte(strconv.FormatUint(id+n, 10))
			if rev == 0 {
				_, err = s.meta.Create(ctx, key, next)
			} else {
				_, err = s.meta.Update(ctx, key, next, rev)
			}
			return err
		})
		switch {
		case err == nil:
			first = id
			return true, nil
		case isConflict(err):
			return false, nil
		}
		return false, fmt.Errorf("jsstore: %s: %w", what, err)
	})
	return first, err
}

// contended runs attempt until it is done or fails, pausing between
// attempts that met a compare-and-set conflict (attempt returns false,
// nil): another process changed the key first, or the replica that
// answered a read had not applied that change yet (a KV read may be served
// by any replica). The pause doubles from 1 ms to 100 ms, each drawn at
// random from its upper half, so processes racing for one key take turns
// instead of meeting again; after Config.PublishTimeout the conflict is
// the error. ingestd_jetstream_meta_conflicts_total counts the pauses.
func (s *Store) contended(what string, attempt func() (done bool, err error)) error {
	deadline := time.Now().Add(s.cfg.PublishTimeout)
	pause := time.Millisecond
	for {
		done, err := attempt()
		if done || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return unavailable(fmt.Errorf("jsstore: %s: other processes kept changing it for %s (--jetstream-publish-timeout)", what, s.cfg.PublishTimeout))
		}
		s.m.conflicts.Inc()
		time.Sleep(pause/2 + rand.N(pause/2+1))
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// PutTable implements store.Tables with one compare-and-set update of the
// name's record. A new instance gets the name's stream (created when
// missing) and resumes above a tombstone of the same name; ErrEnded for
// an instance another process ended. Safe for concurrent use with the
// writer: the feed's resolver creates the tables writes bring
// (store.Shared).
func (s *Store) PutTable(ctx context.Context, m store.TableMeta) (store.TableMeta, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return store.TableMeta{}, err
	}
	defer s.gate.Leave()
	m, _, err := s.putTable(m)
	if errors.Is(err, errVoid) {
		err = fmt.Errorf("%w: instance %d of %q", store.ErrEnded, m.ID, m.Name)
	}
	return m, err
}

// putTable writes m (PutTable, or the Meta of an Append's commit) and
// returns it as stored with its table. A new instance gets the name's
// stream (created when missing), an anchor at the stream's end above the
// tombstone's and m's Seq, and a follower. errVoid: m's instance was
// ended by another process. Writer only.
func (s *Store) putTable(m store.TableMeta) (store.TableMeta, *table, error) {
	s.mu.Lock()
	t := s.byName[m.Name]
	_, ended := s.ended[m.ID]
	var (
		cur    record
		curRev uint64
	)
	if t != nil {
		cur, curRev = t.rec, t.rev
	}
	s.mu.Unlock()
	if ended {
		return store.TableMeta{}, nil, errVoid
	}
	m.Columns = slices.Clone(m.Columns)
	m.Dropped = false
	if t != nil && cur.live() {
		if cur.Meta.ID != m.ID { // created by another process, or before: that instance is the table
			live := cur.Meta
			live.Columns = slices.Clone(live.Columns)
			return live, t, nil
		}
		_, xseq := t.position()
		err := s.update(t, func(r *record) error {
			if !r.live() || r.Meta.ID != m.ID {
				return errVoid
			}
			m.Seq = max(m.Seq, r.Meta.Seq, xseq)
			m.Columns = mergeColumns(r.Meta.Columns, m.Columns)
			r.Meta = m
			return nil
		})
		return m, t, err
	}
	if t == nil {
		s.mu.Lock()
		if t = s.byName[m.Name]; t == nil { // or the record watcher's, which then conflicts
			t = s.newTable(s.placeOf(m.Name), 0)
			s.byName[m.Name] = t
		}
		s.mu.Unlock()
	} else {
		m.Seq = max(m.Seq, cur.Meta.Seq)
		bump := uint64(0)
		if m.Sync {
			bump = 1
		}
		m.Epoch = max(m.Epoch, cur.Meta.Epoch+bump)
	}
	last, err := s.ensureStream(t)
	if err != nil {
		return store.TableMeta{}, nil, err
	}
	a := anchor{Seq: last, XSeq: m.Seq}
	if curRev != 0 {
		// A name with a record (a tombstone): the new instance's anchor is
		// where a follower of the name's subject stands, every message
		// before it numbered as every node numbers it (the followers of
		// the nodes that followed the drop run on), and above m's floor.
		subjectLast, err := s.lastRetried(t)
		if err != nil {
			return store.TableMeta{}, nil, fmt.Errorf("jsstore: last message of table %q: %w", t.name, err)
		}
		if a, err = s.numberedAt(t, subjectLast); err != nil {
			return store.TableMeta{}, nil, err
		}
		a.XSeq = max(a.XSeq, m.Seq)
		m.Seq = a.XSeq
	}
	adopt := false
	err = s.update(t, func(r *record) error {
		// Another process created the name meanwhile: its instance is
		// the table (Shared: the caller takes the returned id).
		if adopt = r.live() && r.Meta.ID != m.ID; !adopt {
			r.Meta, r.Born, r.Horizon, r.Cutoff, r.Anchor = m, m.ID, 0, nil, &a
		}
		return nil
	})
	if err != nil {
		return store.TableMeta{}, nil, err
	}
	if adopt {
		return s.adopt(t)
	}
	if err := s.syncCache(t); err != nil {
		return store.TableMeta{}, nil, err
	}
	t.purged.Store(last)
	if curRev == 0 { // a new name: no follower ran
		t.restartFollower(s, last+1, m.Seq, 0)
	}
	return m, t, nil
}

// numberedAt starts t's follower (unless it runs) and returns where it
// stands once it numbered t's subject up to at least last (or the record's
// anchor passed it).
func (s *Store) numberedAt(t *table, last uint64) (anchor, error) {
	t.ensureFollower(s, 0)
	var a anchor
	err := t.await(time.Now().Add(s.cfg.PublishTimeout), func() bool { return t.f.counted >= last || t.anchored.Load() >= last })
	a = t.numberedTo()
	if err != nil {
		return anchor{}, fmt.Errorf("jsstore: number the stream of table %q: %w", t.name, err)
	}
	return a, nil
}

// errVoid is returned internally for a call on an instance another
// process ended that this process's writer has not been told of yet.
var errVoid = errors.New("jsstore: table instance ended by another process")

// adopt makes t's record, a live instance another process created, this
// store's: its follower catches up with the stream before it returns.
func (s *Store) adopt(t *table) (store.TableMeta, *table, error) {
	s.mu.Lock()
	m := t.rec.Meta
	s.mu.Unlock()
	m.Columns = slices.Clone(m.Columns)
	if err := s.catchUp(t); err != nil {
		return store.TableMeta{}, nil, err
	}
	return m, t, nil
}

// mergeColumns returns have with the columns of add it lacks (by name)
// appended: another process's columns keep their positions.
func mergeColumns(have, add []store.Column) []store.Column {
	out := slices.Clone(have)
	for _, c := range add {
		if !slices.ContainsFunc(out, func(o store.Column) bool { return o.Name == c.Name }) {
			out = append(out, c)
		}
	}
	return out
}

// ensureStream creates t's stream, the blocks stream every table shares
// (a subject per table), when missing (file storage, the store's
// replicas, atomic batches, the duplicate window) and returns its last
// sequence.
func (s *Store) ensureStream(t *table) (uint64, error) {
	var stream jetstream.Stream
	// Nodes that create the same stream at once (their first writes to
	// a new table) are not all answered: the cluster creates it once and
	// the other requests may go unanswered, so a first attempt gives up
	// soon and the next one finds the stream.
	err := s.retry(growing(firstAttempt, func(ctx context.Context) (err error) {
		stream, err = s.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: t.stream, Subjects: []string{s.cfg.Prefix + "_b.*"}, Description: "ingestd table blocks, a subject per table",
			Storage: jetstream.FileStorage, Replicas: s.replicas, Duplicates: s.cfg.DuplicateWindow,
			AllowAtomicPublish: true, Discard: jetstream.DiscardOld,
		})
		return err
	}))
	if err != nil {
		return 0, fmt.Errorf("jsstore: create stream %s for table %q: %w", t.stream, t.name, err)
	}
	return stream.CachedInfo().State.LastSeq, nil
}

// TruncateTable implements store.Tables: one update of the record puts a
// new instance (new id, epoch one higher, no columns, horizon and cutoff
// reset) in place of tid; the old instance's messages are ignored by id
// from then on and purged from the stream, its rows leave the cache.
// store.ErrEnded: another process ended tid meanwhile. Writer only.
func (s *Store) TruncateTable(ctx context.Context, tid uint64) (store.TableMeta, error) {
	t, err := s.enterLive(ctx, tid)
	if err != nil {
		return store.TableMeta{}, err
	}
	defer s.gate.Leave()
	id, err := s.newTableID()
	if err != nil {
		return store.TableMeta{}, err
	}
	at := t.numberedTo()
	var m store.TableMeta
	err = s.update(t, func(r *record) error {
		if !r.live() || r.Meta.ID != tid {
			return store.ErrEnded
		}
		old := r.Meta
		m = store.TableMeta{Name: old.Name, ID: id, Sync: old.Sync, Epoch: old.Epoch + 1, Seq: max(old.Seq, at.XSeq), Retention: old.Retention}
		r.Meta, r.Horizon, r.Cutoff, r.Anchor, r.Ended = m, 0, nil, &at, tid
		return nil
	})
	if err != nil {
		return store.TableMeta{}, err
	}
	return m, s.endInstance(t)
}

// DropTable implements store.Tables: one update of the record turns it
// into the tombstone (and moves the name's consumers out of sight: they
// belong to the generation Born); the stream is purged, the cache and
// the old consumers' entry dropped after. store.ErrEnded: another process
// ended tid meanwhile. Writer only.
func (s *Store) DropTable(ctx context.Context, tid uint64) (store.TableMeta, error) {
	t, err := s.enterLive(ctx, tid)
	if err != nil {
		return store.TableMeta{}, err
	}
	defer s.gate.Leave()
	var born uint64
	at := t.numberedTo()
	var tomb store.TableMeta
	err = s.update(t, func(r *record) error {
		if !r.live() || r.Meta.ID != tid {
			return store.ErrEnded
		}
		born = r.Born
		tomb = store.TableMeta{Name: r.Meta.Name, Epoch: r.Meta.Epoch, Seq: max(r.Meta.Seq, at.XSeq), Dropped: true}
		r.Meta, r.Born, r.Horizon, r.Cutoff, r.Anchor, r.Ended = tomb, 0, 0, nil, &at, tid
		return nil
	})
	if err != nil {
		return store.TableMeta{}, err
	}
	// The follower runs on: it numbers the stream for the name's next
	// instance as every other node's does (putTable).
	if err := s.meta.Purge(context.Background(), s.consumersKey(tomb.Name, born)); err != nil {
		s.logger.Warn("the dropped table's consumers stay in the bucket (out of sight)", "table", tomb.Name, "err", err)
	}
	return tomb, s.endInstance(t)
}

// endInstance makes the cache follow t's record (the ended instance's
// rows go, a new one's table comes) and, Config.PurgeGrace later, purges
// t's subject up to the sequence the record's new anchor names, as a
// retention purge waits (purgeAged): a follower behind those messages
// hears of the anchor first. A purge that fails, or that Close or a crash
// prevents, is only logged: the messages are ignored by id, and the
// subject's next purge takes them.
func (s *Store) endInstance(t *table) error {
	if err := s.syncCache(t); err != nil {
		return err
	}
	s.mu.Lock()
	upto := t.anchor().Seq
	s.mu.Unlock()
	t.purged.Store(upto)
	s.later.after(s.cfg.PurgeGrace, func() {
		if s.gate.Enter(context.Background()) != nil {
			return // closed
		}
		defer s.gate.Leave()
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		stream, err := s.js.Stream(ctx, t.stream)
		if err == nil {
			err = stream.Purge(ctx, jetstream.WithPurgeSubject(t.subject), jetstream.WithPurgeSequence(upto+1))
		}
		if err != nil {
			s.logger.Warn("stream not purged of an ended table instance (its messages are ignored)", "stream", t.stream, "subject", t.subject, "err", err)
		}
	})
	return nil
}

// PruneTombstone implements store.Tables: it writes floor's record first,
// then deletes name's, then purges its subject up to its last message
// before the deletion (a name created again after it keeps its messages).
// A crash in between leaves both records, which only keeps a second,
// lower floor (never a lower number), or messages of the pruned name
// below a new instance's anchor, never read. Writer only.
func (s *Store) PruneTombstone(ctx context.Context, name string, floor store.TableMeta) error {
	if err := s.gate.Enter(ctx); err != nil {
		return err
	}
	defer s.gate.Leave()
	s.mu.Lock()
	ft, old := s.byName[floor.Name], s.byName[name]
	s.mu.Unlock()
	if ft == nil {
		ft = s.newTable(s.placeOf(floor.Name), 0)
	}
	floor.Dropped, floor.ID = true, 0
	if err := s.update(ft, func(r *record) error { r.Meta = floor; return nil }); err != nil {
		return err
	}
	s.mu.Lock()
	s.byName[floor.Name] = ft
	s.mu.Unlock()
	if old == nil {
		return nil
	}
	last, err := s.lastRetried(old)
	if err != nil {
		return fmt.Errorf("jsstore: last message of tombstone %q: %w", name, err)
	}
	if err := s.meta.Purge(context.Background(), s.tableKey(name)); err != nil {
		return fmt.Errorf("jsstore: delete tombstone %q: %w", name, err)
	}
	s.mu.Lock()
	delete(s.byName, name)
	s.mu.Unlock()
	old.stopFollower()
	pctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	stream, err := s.js.Stream(pctx, old.stream)
	if err == nil {
		err = stream.Purge(pctx, jetstream.WithPurgeSubject(old.subject), jetstream.WithPurgeSequence(last+1))
	}
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		s.logger.Warn("messages of a pruned tombstone not purged", "stream", old.stream, "subject", old.subject, "err", err)
	}
	return nil
}

// consumers are a table name's consumer positions, one entry per name
// and generation (consumersKey), by consumer name: the entry's JSON.
type consumers map[string]consumerWire

// born returns the consumers' generation of name (0: no live table).
func (s *Store) born(name string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.byName[name]; t != nil {
		return t.rec.Born
	}
	return 0
}

// readConsumers returns key's entry and revision (0: none).
func (s *Store) readConsumers(ctx context.Context, key string) (consumers, uint64, error) {
	e, err := s.meta.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return consumers{}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("jsstore: read consumers: %w", err)
	}
	cs := consumers{}
	if err := json.Unmarshal(e.Value(), &cs); err != nil {
		return nil, 0, &store.CorruptionError{Key: []byte(key), Err: err}
	}
	return cs, e.Revision(), nil
}

// changeConsumers applies change to the consumers of table with
// compare-and-set, reading again on a conflict (contended).
func (s *Store) changeConsumers(table string, change func(consumers)) error {
	key := s.consumersKey(table, s.born(table))
	return s.contended("consumers", func() (bool, error) {
		var (
			cs  consumers
			rev uint64
		)
		err := s.retry(func(ctx context.Context) (err error) {
			cs, rev, err = s.readConsumers(ctx, key)
			return err
		})
		if err != nil {
			return false, err
		}
		change(cs)
		v, err := json.Marshal(cs)
		if err != nil {
			return false, err
		}
		err = s.retry(func(ctx context.Context) (err error) {
			if rev == 0 {
				_, err = s.meta.Create(ctx, key, v)
			} else {
				_, err = s.meta.Update(ctx, key, v, rev)
			}
			return err
		})
		if err != nil && isConflict(err) {
			return false, nil
		}
		return true, err
	})
}

// PutConsumers implements store.ConsumerStore: one compare-and-set
// update per table.
func (s *Store) PutConsumers(ctx context.Context, byTable map[string][]store.Consumer) error {
	if err := s.gate.Enter(ctx); err != nil {
		return err
	}
	defer s.gate.Leave()
	for table, list := range byTable {
		err := s.changeConsumers(table, func(cs consumers) {
			for _, c := range list {
				cs[c.Name] = consumerWire{Epoch: c.Epoch, Position: c.Position, LastSeen: c.LastSeen, Owner: c.Owner}
			}
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// LoadConsumers implements store.ConsumerStore.
func (s *Store) LoadConsumers(ctx context.Context, table string) ([]store.Consumer, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return nil, err
	}
	defer s.gate.Leave()
	cs, _, err := s.readConsumers(ctx, s.consumersKey(table, s.born(table)))
	if err != nil {
		return nil, err
	}
	out := make([]store.Consumer, 0, len(cs))
	for name, c := range cs {
		out = append(out, store.Consumer{Name: name, Epoch: c.Epoch, Position: c.Position, LastSeen: c.LastSeen, Owner: c.Owner})
	}
	slices.SortFunc(out, func(a, b store.Consumer) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// DeleteConsumer implements store.ConsumerStore.
func (s *Store) DeleteConsumer(ctx context.Context, table, name string) error {
	if err := s.gate.Enter(ctx); err != nil {
		return err
	}
	defer s.gate.Leave()
	return s.changeConsumers(table, func(cs consumers) { delete(cs, name) })
}
