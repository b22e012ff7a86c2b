package rowengine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/dgraph-io/badger/v4"

	"github.com/ingestd/ingestd/store"
)

// ksHorizon keys a table instance's feed history horizon: 'h' tid ->
// uvarint horizon (see doc.go, "Retention and the history horizon").
const ksHorizon = 'h'

// removedSeries is the series id of a removed fragment. Series ids start
// at 1, so no written fragment has it: a removed fragment keeps its place
// (and x_seq) in its block as sid 0, time 0 and no fields, which keeps
// every index into the block valid.
const removedSeries = 0

func horizonKey(tid uint64) []byte { return tablePrefix(ksHorizon, tid) }

// horizon returns table instance tid's history horizon: the lowest x_seq a
// drain may still start at (after >= horizon-1). It is 1 while nothing of
// the instance's history was removed. Safe for concurrent use.
func (db *Engine) horizon(tid uint64) (uint64, error) {
	txn := db.bdb.NewTransaction(false)
	defer txn.Discard()
	return readHorizon(txn, tid)
}

func readHorizon(txn *badger.Txn, tid uint64) (uint64, error) {
	item, err := txn.Get(horizonKey(tid))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read history horizon: %w", err)
	}
	var h uint64
	err = item.Value(func(v []byte) error {
		var n int
		if h, n = binary.Uvarint(v); n <= 0 {
			return &store.CorruptionError{Key: horizonKey(tid), Err: errShort}
		}
		return nil
	})
	return max(h, 1), err
}

// raiseHorizon durably sets table instance tid's history horizon to h
// when h is above it (drains after < h-1 are refused from then on) and
// returns the horizon now in force. Sequencer only.
func (db *Engine) raiseHorizon(tid, h uint64) (uint64, error) {
	if err := db.checkSpace(); err != nil {
		return 0, err
	}
	cur, err := db.horizon(tid)
	if err != nil || h <= cur {
		return cur, err
	}
	err = db.bdb.Update(func(txn *badger.Txn) error {
		return txn.Set(horizonKey(tid), binary.AppendUvarint(nil, h))
	})
	if err != nil {
		return cur, err
	}
	return h, nil
}

// firstSeqSince returns the first x_seq of the oldest synced block of
// table instance tid that holds x_seq >= from and was committed at or
// after cutoff (Unix nanoseconds), looking at most maxBlocks blocks. When
// every block it looked at is older, it returns the x_seq after the last
// of them with more=true if it stopped at maxBlocks; found=false and
// more=false when there is no such block at all (everything from from on
// is older than cutoff). Commit times are the server's clock at commit, so
// they ascend with x_seq unless the clock stepped back. Safe for
// concurrent use.
func (db *Engine) firstSeqSince(tid, from uint64, cutoff int64, maxBlocks int) (seq uint64, found, more bool, err error) {
	txn := db.bdb.NewTransaction(false)
	defer txn.Discard()
	it := txn.NewIterator(badger.IteratorOptions{Prefix: tablePrefix(ksSync, tid)})
	defer it.Close()
	seq = from
	n := 0
	for it.Seek(tableKey(ksSync, tid, from)); it.Valid(); it.Next() {
		if n == maxBlocks {
			return seq, false, true, nil
		}
		n++
		item := it.Item()
		var br blockReader
		err := item.Value(func(v []byte) error { return br.init(v) })
		if err != nil {
			return 0, false, false, &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
		}
		if br.commitTime >= cutoff {
			return max(br.firstSeq, from), true, false, nil
		}
		seq = binary.BigEndian.Uint64(item.Key()[9:17]) + 1
	}
	return seq, false, false, nil
}

// sweepBlock is one block a sweep batch rewrites: the indexes of the
// fragments it removes.
type sweepBlock struct {
	key    []byte
	remove map[uint64]bool
}

// sweepBefore removes, in one bounded batch, the fragments of table
// instance tid whose time is below cutoff (Unix nanoseconds): at most
// maxFragments of them, found through the series runs and point-index
// entries (which only aged points have, ordered by series and time, so the
// search costs one seek per series plus the aged entries). Each block
// holding one is rewritten with the fragment replaced by a removed
// placeholder (x_seq and block indexes unchanged), a block left without
// fragments is deleted, and the aged run entries, point-index entries and
// overwrite markers go. Writes are ordered so that a crash anywhere loses
// nothing retained and leaves nothing a drain could skip silently: first
// the horizon, raised above every synced fragment of the batch, then the
// blocks, then the index entries (a repeated sweep finds the entries of
// fragments already removed and removes them again, idempotently).
// Sequencer only (it runs between group commits).
func (db *Engine) sweepBefore(tid uint64, cutoff int64, maxFragments int) (store.SweepResult, error) {
	if err := db.checkSpace(); err != nil {
		return store.SweepResult{}, err
	}
	// The sweep walks stored runs: the head's become run keys first.
	if st := db.table(tid); len(st.head.records) > 0 || st.sealed != nil {
		if err := db.flushHeads(); err != nil {
			return store.SweepResult{}, err
		}
	}
	view := db.bdb.NewTransaction(false)
	defer view.Discard()
	res := store.SweepResult{Oldest: math.MaxInt64}
	var err error
	if res.Horizon, err = readHorizon(view, tid); err != nil {
		return res, err
	}
	w := &committer{db: db, txn: db.bdb.NewTransaction(true)}
	defer func() { w.txn.Discard() }()
	blocks := map[string]*sweepBlock{}
	finder := blockFinder{view: view, tid: tid}
	defer finder.close()
	target := 0
	var maxSeq uint64 // the highest x_seq removed
	removeRef := func(r ref) error {
		key, idx, err := finder.find(r)
		if err != nil || key == nil {
			return err
		}
		maxSeq = max(maxSeq, r.seq)
		b := blocks[string(key)]
		if b == nil {
			b = &sweepBlock{key: key, remove: map[uint64]bool{}}
			blocks[string(key)] = b
		}
		if !b.remove[idx] {
			b.remove[idx] = true
			target++
		}
		return nil
	}
	var (
		runDeletes [][]byte
		runSets    []kv
		refDeletes [][]byte
		ptDeletes  [][]byte
		dropped    []pointID
	)
	// Series runs: each series' runs ascend in time, so its aged runs come
	// first; the rest of the series is skipped by one seek.
	more, err := scanAged(view, ksRun, tid, cutoff, &res, func(key []byte, v []byte) (bool, error) {
		run, err := decodeRun(v, pointKeyTime(key))
		if err != nil {
			return false, &store.CorruptionError{Key: key, Err: err}
		}
		kind, base, _, _, _ := runHeader(v) // decodeRun checked it
		n := 0
		for n < len(run) && run[n].ts < cutoff && target < maxFragments {
			if err := removeRef(run[n].r); err != nil {
				return false, err
			}
			n++
		}
		runDeletes = append(runDeletes, key)
		if n < len(run) {
			rest := run[n:]
			rb := runBuilder{firstTs: rest[0].ts}
			for _, e := range rest {
				idx := e.r.idx
				if kind == 'L' {
					idx = e.r.seq - base
				}
				rb.add(e.ts, idx)
			}
			nk := pointKey(nil, ksRun, tid, binary.BigEndian.Uint64(key[9:17]), rb.firstTs)
			runSets = append(runSets, kv{nk, rb.encode(kind, base)})
			if rest[0].ts >= cutoff {
				res.Oldest = min(res.Oldest, rest[0].ts)
				res.HasOldest = true
			}
		}
		return target < maxFragments, nil
	}, maxFragments)
	if err != nil {
		return res, err
	}
	// The references of overwritten points' later fragments, then the
	// point-index entries: a point's entry (its union) goes last, so that
	// the fragments a batch leaves still read as the point's row.
	if !more {
		more, err = scanAged(view, ksRef, tid, cutoff, &res, func(key []byte, v []byte) (bool, error) {
			r, _, err := decodeRef(v)
			if err != nil {
				return false, &store.CorruptionError{Key: key, Err: err}
			}
			if err := removeRef(r); err != nil {
				return false, err
			}
			refDeletes = append(refDeletes, key)
			return target < maxFragments, nil
		}, maxFragments-target)
		if err != nil {
			return res, err
		}
	}
	if !more {
		// Overwrite runs ascend in time like series runs; a shortened
		// one is written under its new first time and first reference.
		more, err = scanAged(view, ksOver, tid, cutoff, &res, func(key []byte, v []byte) (bool, error) {
			ents, err := decodeOverRun(v, pointKeyTime(key))
			if err != nil {
				return false, &store.CorruptionError{Key: key, Err: err}
			}
			n := 0
			for n < len(ents) && ents[n].ts < cutoff && target < maxFragments {
				if err := removeRef(ents[n].r); err != nil {
					return false, err
				}
				n++
			}
			runDeletes = append(runDeletes, key)
			if rest := ents[n:]; len(rest) > 0 {
				nk := overKey(tid, binary.BigEndian.Uint64(key[9:17]), rest[0].ts, rest[0].r)
				runSets = append(runSets, kv{nk, appendOverRun(nil, rest[0].ts, rest)})
				if rest[0].ts >= cutoff {
					res.Oldest = min(res.Oldest, rest[0].ts)
					res.HasOldest = true
				}
			}
			return target < maxFragments, nil
		}, maxFragments-target)
		if err != nil {
			return res, err
		}
	}
	if !more {
		more, err = scanAged(view, ksPoint, tid, cutoff, &res, func(key []byte, v []byte) (bool, error) {
			e, err := decodeEntry(v, nil)
			if err != nil {
				return false, &store.CorruptionError{Key: key, Err: err}
			}
			if err := removeRef(e.first); err != nil {
				return false, err
			}
			ptDeletes = append(ptDeletes, key)
			dropped = append(dropped, pointID{binary.BigEndian.Uint64(key[9:17]), pointKeyTime(key)})
			return target < maxFragments, nil
		}, maxFragments-target)
		if err != nil {
			return res, err
		}
	}
	res.More = more
	if res.More {
		res.HasOldest = false
	}
	// 1. The horizon, above every synced fragment removed.
	if maxSeq+1 > res.Horizon {
		res.Horizon = maxSeq + 1
		if err := w.set(horizonKey(tid), binary.AppendUvarint(nil, res.Horizon)); err != nil {
			return res, err
		}
	}
	keys := make([]string, 0, len(blocks))
	for k := range blocks {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// 2. The blocks.
	for _, k := range keys {
		n, err := w.rewriteBlock(view, blocks[k])
		if err != nil {
			return res, err
		}
		res.Removed += n
	}
	// 3. The index entries: a shortened run is written under its new
	// first time before the old run goes, so that a crash in between
	// leaves both (the old one naming removed fragments, which the next
	// sweep removes again) and never loses a kept fragment's entry.
	for _, e := range runSets {
		if err := w.set(e.k, e.v); err != nil {
			return res, err
		}
	}
	for _, k := range runDeletes {
		if err := w.delete(k); err != nil {
			return res, err
		}
	}
	for _, k := range refDeletes {
		if err := w.delete(k); err != nil {
			return res, err
		}
	}
	for _, k := range ptDeletes {
		if err := w.delete(k); err != nil {
			return res, err
		}
		dk := append([]byte{ksDup}, k[1:]...)
		if err := w.delete(dk); err != nil {
			return res, err
		}
	}
	if err := w.txn.Commit(); err != nil {
		return res, err
	}
	if len(dropped) > 0 {
		st := db.table(tid)
		st.dupMu.Lock()
		for _, id := range dropped {
			delete(st.dups, id)
		}
		st.dupMu.Unlock()
	}
	return res, nil
}

type kv struct{ k, v []byte }

// scanAged walks the keys of keyspace ks ('r', 'q', 'o' or 'p': ks tid sid ts …) of
// table instance tid whose time is below cutoff, in key order, calling fn
// with each key and value until fn returns false or limit reaches 0 (then
// more is true). Per series, the first key at or above cutoff records the
// series' oldest retained time in res and skips to the next series.
func scanAged(view *badger.Txn, ks byte, tid uint64, cutoff int64, res *store.SweepResult, fn func(key, v []byte) (bool, error), limit int) (more bool, err error) {
	if limit <= 0 {
		return true, nil
	}
	it := view.NewIterator(badger.IteratorOptions{Prefix: tablePrefix(ks, tid)})
	defer it.Close()
	it.Rewind()
	for it.Valid() {
		item := it.Item()
		key := item.KeyCopy(nil)
		sid := binary.BigEndian.Uint64(key[9:17])
		if ts := pointKeyTime(key); ts >= cutoff {
			res.Oldest = min(res.Oldest, ts)
			res.HasOldest = true
			if sid == math.MaxUint64 {
				return false, nil
			}
			it.Seek(tableKey(ks, tid, sid+1))
			continue
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return false, err
		}
		goOn, err := fn(key, v)
		if err != nil {
			return false, err
		}
		if !goOn {
			return true, nil
		}
		it.Next()
	}
	return false, nil
}

// blockFinder finds the blocks holding fragment references for a sweep,
// with one iterator and the last synced block found remembered (the aged
// fragments of a series cluster in a few blocks).
type blockFinder struct {
	view        *badger.Txn
	tid         uint64
	it          *badger.Iterator
	key         []byte // the last synced block found
	first, last uint64 // its x_seq range
}

func (f *blockFinder) close() {
	if f.it != nil {
		f.it.Close()
	}
}

// find returns the key of the block holding r and r's index in it, or a
// nil key when that block is not stored (a crash split its commit).
func (f *blockFinder) find(r ref) ([]byte, uint64, error) {
	if r.seq == 0 {
		return tableKey(ksUnsync, f.tid, r.block), r.idx, nil
	}
	if f.key != nil && f.first <= r.seq && r.seq <= f.last {
		return f.key, r.seq - f.first, nil
	}
	if f.it == nil {
		f.it = f.view.NewIterator(badger.IteratorOptions{Prefix: tablePrefix(ksSync, f.tid)})
	}
	f.it.Seek(tableKey(ksSync, f.tid, r.seq))
	if !f.it.Valid() {
		return nil, 0, nil
	}
	item := f.it.Item()
	var first uint64
	err := item.Value(func(v []byte) error {
		var n int
		if first, n = binary.Uvarint(v); n <= 0 {
			return errShort
		}
		return nil
	})
	if err != nil {
		return nil, 0, &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
	}
	if r.seq < first {
		return nil, 0, nil
	}
	f.key, f.first, f.last = item.KeyCopy(nil), first, binary.BigEndian.Uint64(item.Key()[9:17])
	return f.key, r.seq - first, nil
}

// rewriteBlock rewrites b's block with its fragments b.remove replaced by
// removed placeholders, or deletes it when no fragment is left. It
// returns how many fragments it removed (already removed ones excluded).
func (w *committer) rewriteBlock(view *badger.Txn, b *sweepBlock) (int, error) {
	item, err := view.Get(b.key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	val, err := item.ValueCopy(nil)
	if err != nil {
		return 0, err
	}
	var br blockReader
	if err := br.init(val); err != nil {
		return 0, &store.CorruptionError{Key: b.key, Err: err}
	}
	frags := make([]store.Fragment, br.count)
	removed, left := 0, 0
	for i := range frags {
		var f store.Fragment
		if err := br.next(&f); err != nil {
			return 0, &store.CorruptionError{Key: b.key, Err: err}
		}
		switch {
		case f.Series == removedSeries:
		case b.remove[uint64(i)]:
			removed++
		default:
			f.Fields = append([]store.Field(nil), f.Fields...)
			frags[i] = f
			left++
		}
	}
	if removed == 0 {
		return 0, nil
	}
	if left == 0 {
		return removed, w.delete(b.key)
	}
	block, _, _ := appendBlock(nil, br.firstSeq, br.commitTime, frags, nil, nil)
	return removed, w.setMeta(b.key, block, item.UserMeta())
}

// delete deletes k, committing and starting a new transaction when the
// current one is full.
func (w *committer) delete(k []byte) error {
	if err := w.count(); err != nil {
		return err
	}
	err := w.txn.Delete(k)
	if errors.Is(err, badger.ErrTxnTooBig) {
		if err := w.split(); err != nil {
			return err
		}
		err = w.txn.Delete(k)
	}
	return err
}
