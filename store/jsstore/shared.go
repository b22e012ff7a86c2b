package jsstore

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ingestd/ingestd/store"
)

var _ store.Shared = (*Store)(nil)

// AddColumns implements store.Shared with one compare-and-set update of
// the table's record (re-read and merged on a conflict). On an instance
// another process ended it merges in memory only (store.Shared). Safe
// for concurrent use with the writer (a conflict with its updates is
// merged as one with another process's).
func (s *Store) AddColumns(ctx context.Context, tid uint64, cols []store.Column) ([]store.Column, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return nil, err
	}
	defer s.gate.Leave()
	if have, ok := s.endedColumns(tid); ok {
		return s.voidColumns(tid, have, cols), nil
	}
	t, err := s.live(tid)
	if err != nil {
		return nil, err
	}
	var merged []store.Column
	err = s.update(t, func(r *record) error {
		if !r.live() || r.Meta.ID != tid {
			return errVoid
		}
		r.Meta.Columns = mergeColumns(r.Meta.Columns, cols)
		merged = r.Meta.Columns
		return nil
	})
	if errors.Is(err, errVoid) {
		have, _ := s.endedColumns(tid)
		return s.voidColumns(tid, have, cols), nil
	}
	return slices.Clone(merged), err
}

// voidColumns merges cols into ended instance tid's columns in memory.
func (s *Store) voidColumns(tid uint64, have, cols []store.Column) []store.Column {
	merged := mergeColumns(have, cols)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ended[tid]; ok {
		s.ended[tid] = merged
	}
	return slices.Clone(merged)
}

// seriesEntry is a series' key in the meta bucket (seriesKey): its id and
// canonical tag set (checked on every read: a SHA-256 collision is an
// error, never a merge).
type seriesEntry struct {
	ID  uint64 `json:"id"`
	Key []byte `json:"key"`
}

// seriesKey is the meta bucket key of a series of instance tid:
// s.TID.BASE32(SHA-256(key)).
func seriesKey(tid uint64, key string) string {
	sum := sha256.Sum256([]byte(key))
	return "s." + strconv.FormatUint(tid, 10) + "." + b32.EncodeToString(sum[:])
}

// SeriesIDs implements store.Shared: a series' key in the meta bucket
// (seriesKey) holds its id; the first process to ask creates the key
// with a number of its own, a process that loses the race reads the
// winner's (its own number is skipped: ids have gaps, never two tag
// sets). The keys are created seriesBatch at a time, each batch one
// atomic batch of KV creates (each expecting no earlier entry of its
// key): one round trip and one replicated write for the batch. When the
// stream refuses a batch because one of its keys exists (another process
// numbered it, or an attempt whose acknowledgement was lost did), each of
// its keys is read and, if missing, created on its own (seriesID). A
// process takes its numbers from the instance's counter (n.TID) at least
// seriesIDBlock at a time, so that processes numbering new series of one
// table at once seldom contend for the counter. Safe for concurrent use.
func (s *Store) SeriesIDs(ctx context.Context, tid uint64, series []store.SeriesKey) ([]uint64, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return nil, err
	}
	defer s.gate.Leave()
	if _, ended := s.endedColumns(tid); !ended {
		if _, err := s.live(tid); err != nil {
			return nil, err
		}
	}
	// A key given twice is asked for once (an atomic batch refuses two
	// creates of one key).
	ids := make([]uint64, len(series))
	firstOf := make(map[string]int, len(series))
	var keys []string // distinct, in order
	for _, sk := range series {
		if _, ok := firstOf[sk.Key]; !ok {
			firstOf[sk.Key] = len(keys)
			keys = append(keys, sk.Key)
		}
	}
	got := make([]uint64, len(keys))
	for lo := 0; lo < len(keys); lo += seriesBatch {
		hi := min(lo+seriesBatch, len(keys))
		if err := s.createSeries(tid, keys[lo:hi], got[lo:hi]); err != nil {
			return nil, err
		}
	}
	for i, sk := range series {
		ids[i] = got[firstOf[sk.Key]]
	}
	return ids, nil
}

// seriesBatch bounds the series keys of one atomic batch (the server's
// default bound of a batch).
const seriesBatch = maxBatchMessages

// createSeries numbers keys (distinct tag sets of instance tid) into ids:
// one atomic batch creating every key, or, when the stream refuses it
// because a key exists, seriesID for each.
func (s *Store) createSeries(tid uint64, keys []string, ids []uint64) error {
	nums, err := s.nextSeriesIDs(tid, len(keys))
	if err != nil {
		return err
	}
	msgs := make([]*nats.Msg, len(keys))
	for i, key := range keys {
		v, err := json.Marshal(seriesEntry{ID: nums[i], Key: []byte(key)})
		if err != nil {
			return err
		}
		m := nats.NewMsg(s.metaSubject(seriesKey(tid, key)))
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		m.Data = v
		msgs[i] = m
	}
	err = s.retry(func(context.Context) error {
		_, _, err := s.send(msgs)
		return err
	})
	switch {
	case err == nil:
		copy(ids, nums)
		s.m.seriesBatches.Inc()
		return nil
	case !isConflict(err):
		return fmt.Errorf("jsstore: series ids: %w", err)
	}
	// Some key exists: its id is the one to use (the numbers reserved
	// for this batch are gaps).
	s.m.seriesBatchConflicts.Inc()
	for i, key := range keys {
		if ids[i], err = s.seriesID(tid, key); err != nil {
			return err
		}
	}
	return nil
}

// metaSubject is the subject of key in the meta bucket.
func (s *Store) metaSubject(key string) string { return "$KV." + s.meta.Bucket() + "." + key }

// seriesID returns the id of tag set key in instance tid, reading its
// entry, or creating it (KV Create) with a number of this process's when
// it is missing; a create that meets another process's entry reads that
// one.
func (s *Store) seriesID(tid uint64, key string) (uint64, error) {
	k := seriesKey(tid, key)
	var id uint64
	err := s.contended("series id", func() (bool, error) {
		var e jetstream.KeyValueEntry
		err := s.retry(func(ctx context.Context) (err error) {
			e, err = s.meta.Get(ctx, k)
			return err
		})
		switch {
		case err == nil:
			var se seriesEntry
			if err := json.Unmarshal(e.Value(), &se); err != nil || string(se.Key) != key {
				return false, &store.CorruptionError{Key: []byte(k), Err: fmt.Errorf("series entry of another tag set or unreadable: %v", err)}
			}
			id = se.ID
			return true, nil
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			return false, fmt.Errorf("jsstore: series id: %w", err)
		}
		nums, err := s.nextSeriesIDs(tid, 1)
		if err != nil {
			return false, err
		}
		v, err := json.Marshal(seriesEntry{ID: nums[0], Key: []byte(key)})
		if err != nil {
			return false, err
		}
		err = s.retry(func(ctx context.Context) error {
			_, err := s.meta.Create(ctx, k, v)
			return err
		})
		switch {
		case err == nil:
			id = nums[0]
			return true, nil
		case isConflict(err):
			return false, nil // another process numbered it first: read its id
		}
		return false, fmt.Errorf("jsstore: series id: %w", err)
	})
	return id, err
}

// seriesIDBlock is how many series ids a process reserves from an
// instance's counter at once. The numbers a process reserved and did not
// use when it stops, or when the instance ends, are gaps.
const seriesIDBlock = 64

// maxIDBlocks bounds the instances whose reserved series ids a process
// keeps; past it they are all dropped (gaps).
const maxIDBlocks = 1024

// idBlock is the rest of the series ids reserved for one instance:
// next..end-1.
type idBlock struct{ next, end uint64 }

// nextSeriesIDs returns n unused series ids of instance tid from this
// process's reserved block, reserving more when it runs out: at least
// seriesIDBlock, and all that is missing in one compare-and-set. Safe for
// concurrent use (idMu).
func (s *Store) nextSeriesIDs(tid uint64, n int) ([]uint64, error) {
	s.idMu.Lock()
	defer s.idMu.Unlock()
	out := make([]uint64, 0, n)
	b := s.idBlocks[tid]
	for ; b.next < b.end && len(out) < n; b.next++ {
		out = append(out, b.next)
	}
	if missing := uint64(n - len(out)); missing > 0 {
		size := max(missing, seriesIDBlock)
		first, err := s.reserve("n."+strconv.FormatUint(tid, 10), "series id", size)
		if err != nil {
			return nil, err
		}
		for i := range missing {
			out = append(out, first+i)
		}
		b = idBlock{first + missing, first + size}
	}
	if _, ok := s.idBlocks[tid]; !ok && len(s.idBlocks) >= maxIDBlocks {
		clear(s.idBlocks)
	}
	s.idBlocks[tid] = b
	return out, nil
}

// Follow implements store.Shared.
func (s *Store) Follow(fn func(store.Followed)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.followFn = fn
}

// followed reports another process's block of the live instance, applied
// up to x_seq seq, to the Follow callback, reading the record again first
// when the block uses columns the follower does not know yet (need: one
// more than the highest position it uses; the writer added them with
// AddColumns before it published).
func (s *Store) followed(t *table, tc *store.TableCommit, need int, seq uint64) error {
	s.mu.Lock()
	fn, m, rev := s.followFn, t.rec.Meta, t.rev
	s.mu.Unlock()
	if fn == nil {
		return nil
	}
	t.f.fmu.Lock()
	cols := t.f.cols
	t.f.fmu.Unlock()
	if len(m.Columns) > len(cols) {
		cols = m.Columns
	}
	if need > len(cols) {
		var rec record
		err := s.retry(func(ctx context.Context) error {
			e, err := s.meta.Get(ctx, s.tableKey(m.Name))
			if err != nil {
				return err
			}
			return json.Unmarshal(e.Value(), &rec)
		})
		if err != nil {
			return fmt.Errorf("jsstore: read the columns of table %q: %w", m.Name, err)
		}
		if rec.Meta.ID == m.ID && len(rec.Meta.Columns) > len(cols) {
			cols = rec.Meta.Columns
		}
		if need > len(cols) {
			return &store.CorruptionError{Key: []byte(s.tableKey(m.Name)), Err: fmt.Errorf("a block uses column %d, the schema has %d", need-1, len(cols))}
		}
		t.f.fmu.Lock()
		t.f.cols = cols
		t.f.fmu.Unlock()
	}
	m.Columns = slices.Clone(cols)
	fn(store.Followed{Table: m, Series: tc.NewSeries, Seq: seq, Version: rev})
	return nil
}
