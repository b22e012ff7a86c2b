package jsstore

import (
	"context"
	"errors"

	"github.com/ingestd/ingestd/store"
)

// The read side is served by the row cache, which holds exactly what
// Append applied after the streams acknowledged it (and, after Open, what
// the streams held): each method checks that the store is open, then
// asks the cache.

// ReadSeq implements store.Reader from the row cache.
func (s *Store) ReadSeq(ctx context.Context, tid, after, upto uint64, limit int, filter *store.SeqFilter, visit func(*store.Row) error) (uint64, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return after, err
	}
	defer s.gate.Leave()
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
	return s.cache.SeqTime(ctx, tid, seq)
}

// ReadRows implements store.Reader from the row cache (its cursors).
func (s *Store) ReadRows(ctx context.Context, tid uint64, cur store.RowCursor, start, end int64, limit int, visit func(*store.Row) error) (store.RowCursor, bool, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return nil, false, err
	}
	defer s.gate.Leave()
	return s.cache.ReadRows(ctx, tid, cur, start, end, limit, visit)
}

// Horizon implements store.Sweeper from the row cache (raised from the
// record at Open).
func (s *Store) Horizon(ctx context.Context, tid uint64) (uint64, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return 0, err
	}
	defer s.gate.Leave()
	return s.cache.Horizon(ctx, tid)
}

// FirstSeqSince implements store.Sweeper from the row cache.
func (s *Store) FirstSeqSince(ctx context.Context, tid, from uint64, cutoff int64, maxBlocks int) (uint64, bool, bool, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return 0, false, false, err
	}
	defer s.gate.Leave()
	return s.cache.FirstSeqSince(ctx, tid, from, cutoff, maxBlocks)
}

// TableStats implements store.StatsReader from the row cache (its counts
// and their age, rowengine.Config.TableStatsMaxAge).
func (s *Store) TableStats(ctx context.Context, tid uint64) (store.TableStats, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return store.TableStats{}, err
	}
	defer s.gate.Leave()
	return s.cache.TableStats(ctx, tid)
}

// RaiseHorizon implements store.Sweeper: the record first (a rebuild
// keeps it), then the cache. Writer only.
func (s *Store) RaiseHorizon(ctx context.Context, tid, h uint64) (uint64, error) {
	if err := s.gate.Enter(ctx); err != nil {
		return 0, err
	}
	defer s.gate.Leave()
	t, void, err := s.liveOrVoid(tid)
	if void || err != nil {
		return h, err
	}
	cur, err := s.cache.Horizon(ctx, tid)
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
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	return s.cache.RaiseHorizon(context.Background(), tid, h)
}

// SweepBefore implements store.Sweeper: the cache sweeps (raising its
// horizon before removing), then, when it removed anything, the record
// keeps the horizon and the cutoff so that a rebuild sweeps the same
// rows, and once the sweep at cutoff is complete the stream is purged of
// the messages it left nothing of (purgeAged). Writer only.
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
	if err != nil || res.Removed == 0 {
		return res, err
	}
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
	if err != nil || res.More {
		return res, err
	}
	if err := s.purgeAged(t, cutoff); err != nil {
		// The rows are swept and the cutoff recorded: a rebuild sweeps
		// the messages again, so only the stream's size suffers.
		s.logger.Warn("stream not purged below the retention cutoff", "table", t.name, "stream", t.stream, "err", err)
	}
	return res, nil
}
