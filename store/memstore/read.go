package memstore

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/ingestd/ingestd/store"
)

// ReadSeq implements store.Reader, in batches of readBatch fragments
// (package doc: concurrency).
func (s *Store) ReadSeq(ctx context.Context, tid, after, upto uint64, limit int, flt *store.SeqFilter, visit func(*store.Row) error) (uint64, error) {
	if err := s.enter(ctx); err != nil {
		return after, err
	}
	if after >= upto || limit <= 0 {
		return after, nil
	}
	if flt == nil {
		flt = &store.SeqFilter{}
	}
	d := s.d
	d.mu.RLock()
	in := d.insts[tid]
	if in == nil {
		d.mu.RUnlock()
		return upto, nil // an ended instance holds nothing
	}
	var (
		rows      []store.Row
		buf       []store.Field
		cur       = after // the last x_seq examined
		lastBlock uint64
		examined  int
		visited   int
	)
	for {
		// Here with the read lock: the horizon as this batch sees it.
		if h := in.horizon; cur+1 < h {
			d.mu.RUnlock() // h read under the lock: a sweep may raise it now
			return after, fmt.Errorf("%w: after=%d is below the horizon %d", store.ErrHistoryExpired, cur, h)
		}
		i, _ := slices.BinarySearchFunc(in.synced, cur+1, func(f *fragment, s uint64) int { return cmp.Compare(f.seq, s) })
		rows = rows[:0]
		done, through := false, uint64(0)
		for range readBatch {
			if i == len(in.synced) || in.synced[i].seq > upto {
				done, through = true, upto
				break
			}
			if flt.MaxScan > 0 && examined == flt.MaxScan {
				done, through = true, cur
				break
			}
			f := in.synced[i]
			i++
			if f.block != lastBlock {
				if err := ctx.Err(); err != nil {
					d.mu.RUnlock()
					return after, err
				}
				s.blocks.Add(1)
				lastBlock = f.block
			}
			examined++
			cur = f.seq
			if !flt.Admits(f.series, f.time) {
				continue
			}
			r := store.Row{Seq: f.seq, Series: f.series, Time: f.time, Fields: f.fields}
			if p := in.points[point{f.series, f.time}]; len(p.frags) > 1 {
				s.entries.Add(1)
				r.Fields, r.Update = p.row, p.frags[0] != f
			}
			if !flt.Keeps(&r) {
				continue
			}
			rows = append(rows, r)
			if visited+len(rows) == limit {
				done, through = true, f.seq
				break
			}
		}
		d.mu.RUnlock()
		for k := range rows {
			if err := ctx.Err(); err != nil {
				return after, err
			}
			// The visit gets a copy: what it does to Fields never
			// reaches the store.
			buf = append(buf[:0], rows[k].Fields...)
			rows[k].Fields = buf
			if err := visit(&rows[k]); err != nil {
				return after, err
			}
		}
		visited += len(rows)
		if done {
			return through, nil
		}
		d.mu.RLock()
	}
}

// SeqTime implements store.Reader.
func (s *Store) SeqTime(ctx context.Context, tid, seq uint64) (int64, bool, error) {
	if err := s.enter(ctx); err != nil {
		return 0, false, err
	}
	s.d.mu.RLock()
	defer s.d.mu.RUnlock()
	in := s.d.insts[tid]
	if in == nil {
		return 0, false, nil
	}
	i := in.blockAt(seq)
	if i == len(in.blocks) {
		return 0, false, nil
	}
	return in.blocks[i].commitTime, true, nil
}

// cursorTag starts every row cursor a Store issues.
const cursorTag = 'M'

// ReadRows implements store.Reader: the points in the order they were
// created, so that a point created while a copy goes on comes after
// every page already read. A page's rows are copied under one lock, then
// visited. The cursor is 'M' and the uvarint place of the next point.
func (s *Store) ReadRows(ctx context.Context, tid uint64, c store.RowCursor, start, end int64, limit int, visit func(*store.Row) error) (store.RowCursor, bool, error) {
	if err := s.enter(ctx); err != nil {
		return nil, false, err
	}
	from, err := decodeCursor(c)
	if err != nil {
		return nil, false, err
	}
	d := s.d
	d.mu.RLock()
	in := d.insts[tid]
	if in == nil || limit <= 0 {
		d.mu.RUnlock()
		return c, in == nil, nil
	}
	s.blocks.Add(1)
	i, _ := slices.BinarySearchFunc(in.order, from, func(k point, n uint64) int { return cmp.Compare(in.points[k].n, n) })
	var (
		rows []store.Row
		at   []uint64 // rows' places
		next uint64
	)
	for ; i < len(in.order); i++ {
		k := in.order[i]
		if k.time < start || k.time >= end {
			continue
		}
		p := in.points[k]
		if len(rows) == limit {
			next = p.n
			break
		}
		rows = append(rows, store.Row{Seq: p.frags[0].seq, Series: k.series, Time: k.time, Fields: p.row})
		at = append(at, p.n)
	}
	d.mu.RUnlock()
	var buf []store.Field
	for k := range rows {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		buf = append(buf[:0], rows[k].Fields...)
		rows[k].Fields = buf
		err := visit(&rows[k])
		if errors.Is(err, store.ErrRowLeftOut) {
			return encodeCursor(at[k]), false, nil
		}
		if err != nil {
			return nil, false, err
		}
	}
	if next == 0 {
		return nil, true, nil
	}
	return encodeCursor(next), false, nil
}

func encodeCursor(n uint64) store.RowCursor { return binary.AppendUvarint([]byte{cursorTag}, n) }

// decodeCursor reads a cursor encodeCursor issued; empty is the start.
func decodeCursor(c store.RowCursor) (uint64, error) {
	if len(c) == 0 {
		return 0, nil
	}
	if c[0] != cursorTag {
		return 0, store.ErrInvalidCursor
	}
	n, m := binary.Uvarint(c[1:])
	if m <= 0 || 1+m != len(c) {
		return 0, store.ErrInvalidCursor
	}
	return n, nil
}

// SweepBefore implements store.Sweeper. Writer only.
func (s *Store) SweepBefore(ctx context.Context, tid uint64, cutoff int64, maxFragments int) (store.SweepResult, error) {
	if err := s.enter(ctx); err != nil {
		return store.SweepResult{}, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	in := s.d.insts[tid]
	if in == nil {
		return store.SweepResult{}, fmt.Errorf("memstore: table instance %d is not live", tid)
	}
	return in.sweep(cutoff, maxFragments), nil
}

// RaiseHorizon implements store.Sweeper. Writer only.
func (s *Store) RaiseHorizon(ctx context.Context, tid, h uint64) (uint64, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	in := s.d.insts[tid]
	if in == nil {
		return 0, fmt.Errorf("memstore: table instance %d is not live", tid)
	}
	in.horizon = max(in.horizon, h)
	return in.horizon, nil
}

// Horizon implements store.Sweeper.
func (s *Store) Horizon(ctx context.Context, tid uint64) (uint64, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	s.d.mu.RLock()
	defer s.d.mu.RUnlock()
	if in := s.d.insts[tid]; in != nil {
		return in.horizon, nil
	}
	return 1, nil
}

// FirstSeqSince implements store.Sweeper: the first x_seq from from on
// of the oldest synced commit at or after cutoff.
func (s *Store) FirstSeqSince(ctx context.Context, tid, from uint64, cutoff int64, maxBlocks int) (uint64, bool, bool, error) {
	if err := s.enter(ctx); err != nil {
		return 0, false, false, err
	}
	s.d.mu.RLock()
	defer s.d.mu.RUnlock()
	in := s.d.insts[tid]
	if in == nil {
		return from, false, false, nil
	}
	seq, n := from, 0
	for _, b := range in.blocks[in.blockAt(from):] {
		if n == maxBlocks {
			return seq, false, true, nil
		}
		n++
		if b.commitTime >= cutoff {
			return max(b.first, from), true, false, nil
		}
		seq = b.last + 1
	}
	return seq, false, false, nil
}
