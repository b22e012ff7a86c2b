package jsstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/ingestd/ingestd/store"
)

// The read side is served by the row cache, which holds exactly what
// Append applied after the streams acknowledged it (and, after Open, what
// the streams held): each method checks that the store is open, then
// asks the cache. A table this node does not materialise has nothing in
// the cache: its reads are refused (notServed), and what the feed asks of
// it besides (times, horizons) is answered from its record.

// notServed returns the live table of instance tid when this node does
// not materialise it (nil otherwise).
func (s *Store) notServed(tid uint64) *table {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.byTID[tid]; ok && !t.served {
		return t
	}
	return nil
}

// errNotServed is store.ErrNotServed for table t.
func errNotServed(t *table) error {
	return fmt.Errorf("%w: %q (--jetstream-materialise)", store.ErrNotServed, t.name)
}

// ReadSeq implements store.Reader from the row cache.
func (s *Store) ReadSeq(ctx context.Context, tid, after, upto uint64, limit int, filter *store.SeqFilter, visit func(*store.Row) error) (uint64, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return after, err
	}
	defer s.gate.Leave()
	if t := s.notServed(tid); t != nil {
		return after, errNotServed(t)
	}
	return s.cache.ReadSeq(ctx, tid, after, upto, limit, filter, visit)
}

// ReadCounts returns the blocks and point-index entries the row cache's
// reads (ReadSeq, ReadRows) read since Open: rowengine.Engine.ReadCounts.
func (s *Store) ReadCounts() (blocks, entries uint64) { return s.cache.ReadCounts() }

// SeqTime implements store.Reader from the row cache.
func (s *Store) SeqTime(ctx context.Context, tid, seq uint64) (int64, bool, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return 0, false, err
	}
	defer s.gate.Leave()
	if s.notServed(tid) != nil {
		return 0, false, nil // unknown here, as for a gap
	}
	return s.cache.SeqTime(ctx, tid, seq)
}

// ReadRows implements store.Reader from the row cache (its cursors).
func (s *Store) ReadRows(ctx context.Context, tid uint64, cur store.RowCursor, start, end int64, limit int, visit func(*store.Row) error) (store.RowCursor, bool, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return nil, false, err
	}
	defer s.gate.Leave()
	if t := s.notServed(tid); t != nil {
		return nil, false, errNotServed(t)
	}
	return s.cache.ReadRows(ctx, tid, cur, start, end, limit, visit)
}

// Horizon implements store.Sweeper from the row cache (raised from the
// record at Open).
func (s *Store) Horizon(ctx context.Context, tid uint64) (uint64, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return 0, err
	}
	defer s.gate.Leave()
	if t := s.notServed(tid); t != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		return max(t.rec.Horizon, 1), nil
	}
	return s.cache.Horizon(ctx, tid)
}

// horizonUnrecorded reports whether t's record holds a lower horizon for
// live instance tid than h, the cache's: a sweep removed rows and failed
// to record its horizon, which the next sweep records though it removes
// nothing (a rebuild of the cache takes its horizon from the record).
func (s *Store) horizonUnrecorded(t *table, tid, h uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return t.rec.live() && t.rec.Meta.ID == tid && t.rec.Horizon < h
}

// FirstSeqSince implements store.Sweeper from the row cache.
func (s *Store) FirstSeqSince(ctx context.Context, tid, from uint64, cutoff int64, maxBlocks int) (uint64, bool, bool, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return 0, false, false, err
	}
	defer s.gate.Leave()
	if s.notServed(tid) != nil {
		return 0, false, false, nil // its retention is the materialising nodes'
	}
	return s.cache.FirstSeqSince(ctx, tid, from, cutoff, maxBlocks)
}

// TableStats implements store.StatsReader from the row cache (its counts
// and their age, rowengine.Config.TableStatsMaxAge).
func (s *Store) TableStats(ctx context.Context, tid uint64) (store.TableStats, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return store.TableStats{}, err
	}
	defer s.gate.Leave()
	if t := s.notServed(tid); t != nil {
		return store.TableStats{}, errNotServed(t)
	}
	return s.cache.TableStats(ctx, tid)
}

// RaiseHorizon implements store.Sweeper: the record first (a rebuild
// keeps it), then the cache (when this node materialises the table).
// Writer only.
func (s *Store) RaiseHorizon(ctx context.Context, tid, h uint64) (uint64, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return 0, err
	}
	defer s.gate.Leave()
	t, void, err := s.liveOrVoid(tid)
	if void || err != nil {
		return h, err
	}
	var cur uint64
	if t.served {
		cur, err = s.cache.Horizon(ctx, tid)
	} else {
		s.mu.Lock()
		cur = max(t.rec.Horizon, 1)
		s.mu.Unlock()
	}
	if err != nil || h <= cur {
		return cur, err
	}
	err = s.update(t, func(r *record) error {
		if !r.live() || r.Meta.ID != tid {
			return errVoid
		}
		r.Horizon = max(r.Horizon, h)
		return nil
	})
	if errors.Is(err, errVoid) {
		return h, nil
	}
	if err != nil {
		return cur, err
	}
	if !t.served {
		return h, nil
	}
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	return s.cache.RaiseHorizon(context.Background(), tid, h)
}

// SweepBefore implements store.Sweeper: the cache sweeps (raising its
// horizon before removing), then, when it removed anything, the record
// keeps the horizon and the cutoff so that a rebuild sweeps the same
// rows, and once the sweep at cutoff is complete the table's subject is
// purged of the messages it left nothing of (purgeAged: planned, then
// made once due). Writer only.
func (s *Store) SweepBefore(ctx context.Context, tid uint64, cutoff int64, maxFragments int) (store.SweepResult, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return store.SweepResult{}, err
	}
	defer s.gate.Leave()
	t, void, err := s.liveOrVoid(tid)
	if void || err != nil {
		return store.SweepResult{}, err
	}
	s.cacheMu.Lock()
	var res store.SweepResult
	if t.cached == tid {
		res, err = s.cache.SweepBefore(ctx, tid, cutoff, maxFragments)
	}
	s.cacheMu.Unlock()
	if err != nil {
		return res, err
	}
	if res.Removed > 0 || s.horizonUnrecorded(t, tid, res.Horizon) {
		err = s.update(t, func(r *record) error {
			if !r.live() || r.Meta.ID != tid {
				return errVoid
			}
			r.Horizon = max(r.Horizon, res.Horizon)
			if r.Cutoff == nil || *r.Cutoff < cutoff {
				r.Cutoff = &cutoff
			}
			return nil
		})
		if errors.Is(err, errVoid) {
			return store.SweepResult{}, nil
		}
		if err != nil {
			return res, err
		}
	}
	if res.More {
		return res, nil
	}
	// Complete at cutoff (the last batch may have removed nothing): the
	// messages it left nothing of may go, and a purge planned by an
	// earlier sweep may be due.
	if err := s.purgeAged(t, cutoff); err != nil {
		// The rows are swept and the cutoff recorded: a rebuild sweeps
		// the messages again, so only the stream's size suffers.
		s.logger.Warn("stream not purged below the retention cutoff", "table", t.name, "stream", t.stream, "err", err)
	}
	return res, nil
}
