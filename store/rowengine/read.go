package rowengine

import (
	"context"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"

	"github.com/ingestd/ingestd/store"
)

// readSeq visits, in ascending x_seq, the fragments of table instance tid
// with after < x_seq <= upto that flt admits (nil: all), at most limit of
// them, each as the coalesced row at its (series, ts): the union of every
// fragment stored there, the later write winning per column, with
// Row.Update set when the point's oldest fragment is another one. It
// returns through as store.Reader.ReadSeq specifies, and
// ErrHistoryExpired, before visiting anything, when after is below the
// instance's history horizon minus one as its read view sees it. A
// fragment flt's series or time range leaves out is stepped over without
// decoding its fields. The Row and its Fields are valid only during the
// call to visit; visit's error stops the read and is returned, and so is
// ctx's once it ends (checked before each block: a block is decoded in
// microseconds). Safe for concurrent use with Commit.
func (db *Engine) readSeq(ctx context.Context, tid, after, upto uint64, limit int, flt *store.SeqFilter, visit func(*store.Row) error) (uint64, error) {
	if after >= upto || limit <= 0 {
		return after, nil
	}
	if flt == nil {
		flt = &store.SeqFilter{}
	}
	st := db.table(tid)
	txn := db.bdb.NewTransaction(false)
	defer txn.Discard()
	// The horizon as this read's view sees it: a sweep that removed a
	// fragment above after committed its raised horizon first.
	horizon, err := readHorizon(txn, tid)
	if err != nil {
		return after, err
	}
	if after+1 < horizon {
		return after, fmt.Errorf("%w: after=%d is below the horizon %d", store.ErrHistoryExpired, after, horizon)
	}
	it := txn.NewIterator(badger.IteratorOptions{Prefix: tablePrefix(ksSync, tid)})
	defer it.Close()
	sc := blockScan{pts: pointRows{gets: &db.stats.readEntries}}
	examined := 0
	for it.Seek(tableKey(ksSync, tid, after+1)); it.Valid(); it.Next() {
		if err := ctx.Err(); err != nil {
			return after, err
		}
		item := it.Item()
		// Owned: the fragments' strings alias it and, being strings, must
		// never change. One copy out of the value log (the iterator does
		// not prefetch, which copied every block once more).
		val, err := item.ValueCopy(nil)
		if err != nil {
			return after, err
		}
		db.stats.readBlocks.Add(1)
		if err := sc.br.init(val); err != nil {
			return after, &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
		}
		seq := sc.br.firstSeq
		if after >= seq {
			if err := sc.br.seek(after + 1 - seq); err != nil {
				return after, &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
			}
			seq = after + 1
		}
		for ; sc.br.read < sc.br.count; seq++ {
			if seq > upto {
				return upto, nil
			}
			if flt.MaxScan > 0 && examined == flt.MaxScan {
				return seq - 1, nil
			}
			examined++
			sid, ts, err := sc.br.head()
			if err != nil {
				return after, &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
			}
			if sid != removedSeries && !flt.Admits(sid, ts) {
				if err := sc.br.skip(); err != nil {
					return after, &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
				}
				continue
			}
			if err := sc.br.next(&sc.f); err != nil {
				return after, &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
			}
			if sc.f.Series == removedSeries {
				// Below the horizon by construction; never skipped silently.
				return after, fmt.Errorf("%w: x_seq %d was removed", store.ErrHistoryExpired, seq)
			}
			pt, err := sc.pts.row(st, txn, tid, &sc.f)
			if err != nil {
				return after, err
			}
			sc.row = store.Row{Seq: seq, Series: sc.f.Series, Time: sc.f.Time, Fields: sc.f.Fields}
			if pt.dup {
				// An insert is the point's oldest fragment
				// (docs/contract.md#operation).
				sc.row.Fields, sc.row.Update = pt.fields, pt.first != ref{seq: seq}
			}
			if !flt.Keeps(&sc.row) {
				continue
			}
			if err := visit(&sc.row); err != nil {
				return after, err
			}
			if sc.n++; sc.n == limit {
				return seq, nil
			}
		}
	}
	return upto, nil
}

// blockScan is the state of a read that decodes blocks into coalesced
// rows (readSeq, readRows): the block being read, the fragment and row
// decoded last, the overwritten points met and the rows visited.
type blockScan struct {
	br  blockReader
	f   store.Fragment
	row store.Row
	pts pointRows
	n   int
}

// dupRefs reports whether (sid, ts) holds more than one fragment, with its
// point-index entry when this process wrote it and the commit is durable
// ("" otherwise: read it from the store).
func (st *tableState) dupRefs(sid uint64, ts int64) (string, bool) {
	st.dupMu.RLock()
	entry, ok := st.dups[pointID{sid, ts}]
	st.dupMu.RUnlock()
	return entry, ok
}

// seqTime returns when the server committed the fragment with x_seq seq of
// table instance tid (Unix nanoseconds), or ok=false when no stored block
// holds seq (e.g. a burned gap or a truncated range: the next stored one
// answers). Safe for concurrent use.
func (db *Engine) seqTime(tid, seq uint64) (ts int64, ok bool, err error) {
	err = db.bdb.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: tablePrefix(ksSync, tid), PrefetchValues: false})
		defer it.Close()
		it.Seek(tableKey(ksSync, tid, seq))
		if !it.Valid() {
			return nil
		}
		return it.Item().Value(func(v []byte) error {
			var br blockReader
			if err := br.init(v); err != nil {
				return &store.CorruptionError{Key: it.Item().KeyCopy(nil), Err: err}
			}
			ts, ok = br.commitTime, true
			return nil
		})
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, false, nil
	}
	return ts, ok, err
}
