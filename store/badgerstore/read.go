package badgerstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/dgraph-io/badger/v4"

	"github.com/ingestd/ingestd/store"
)

// readSeq visits, in ascending x_seq, the fragments of table instance tid
// with after < x_seq <= upto, at most limit of them, each as the coalesced
// row at its (series, ts): the union of every fragment stored there, the
// later write winning per column. It returns ErrHistoryExpired, before
// visiting anything, when after is below the instance's history horizon
// minus one as its read view sees it. The Row and its Fields are valid only
// during the call to visit; visit's error stops the read and is returned.
// Safe for concurrent use with Commit.
func (db *DB) readSeq(tid, after, upto uint64, limit int, visit func(*store.Row) error) error {
	if after >= upto || limit <= 0 {
		return nil
	}
	st := db.table(tid)
	txn := db.bdb.NewTransaction(false)
	defer txn.Discard()
	// The horizon as this read's view sees it: a sweep that removed a
	// fragment above after committed its raised horizon first.
	horizon, err := readHorizon(txn, tid)
	if err != nil {
		return err
	}
	if after+1 < horizon {
		return fmt.Errorf("%w: after=%d is below the horizon %d", store.ErrHistoryExpired, after, horizon)
	}
	it := txn.NewIterator(badger.IteratorOptions{Prefix: tablePrefix(ksSync, tid)})
	defer it.Close()
	var sc blockScan
	defer sc.co.close()
	for it.Seek(tableKey(ksSync, tid, after+1)); it.Valid(); it.Next() {
		item := it.Item()
		// Owned: the fragments' strings alias it and, being strings, must
		// never change. One copy out of the value log (the iterator does
		// not prefetch, which copied every block once more).
		val, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		if err := sc.br.init(val); err != nil {
			return &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
		}
		seq := sc.br.firstSeq
		if after >= seq {
			if err := sc.br.seek(after + 1 - seq); err != nil {
				return &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
			}
			seq = after + 1
		}
		for ; sc.br.read < sc.br.count; seq++ {
			if seq > upto {
				return nil
			}
			if err := sc.br.next(&sc.f); err != nil {
				return &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
			}
			if sc.f.Series == removedSeries {
				// Below the horizon by construction; never skipped silently.
				return fmt.Errorf("%w: x_seq %d was removed", store.ErrHistoryExpired, seq)
			}
			sc.row = store.Row{Seq: seq, Series: sc.f.Series, Time: sc.f.Time, Fields: sc.f.Fields}
			if sc.row.Fields, err = sc.co.rowFields(st, txn, tid, &sc.f, ref{seq: seq}); err != nil {
				return err
			}
			if err := visit(&sc.row); err != nil {
				return err
			}
			if sc.n++; sc.n == limit {
				return nil
			}
		}
	}
	return nil
}

// blockScan is the state of a read that decodes blocks into coalesced
// rows (readSeq, readRows): the block being read, the fragment and row
// decoded last, the coalescer of overwritten points and the rows visited.
type blockScan struct {
	br  blockReader
	f   store.Fragment
	row store.Row
	co  coalescer
	n   int
}

// dupRefs reports whether (sid, ts) holds more than one fragment, with its
// point-index entry when this process wrote it ("" otherwise).
func (st *tableState) dupRefs(sid uint64, ts int64) (string, bool) {
	st.dupMu.RLock()
	refs, ok := st.dups[pointID{sid, ts}]
	st.dupMu.RUnlock()
	return refs, ok
}

// coalescer merges the fragments of one point. It keeps the last few
// blocks it read, because the fragments of overwritten points cluster in
// a few blocks and a block is large: reading one per reference made a drain
// of an overwrite-heavy table quadratic.
type coalescer struct {
	key    []byte
	br     blockReader
	merged []store.Field
	refs   []ref
	it     *badger.Iterator // over the synced blocks, opened on first use
	cache  []*cachedBlock   // most recent last, at most coalescerCache
	// first is the oldest stored fragment of the point coalesce merged last
	// (hasFirst false when it found none).
	first    ref
	hasFirst bool
}

// coalescerCache is how many blocks a coalescer keeps.
const coalescerCache = 8

// cachedBlock is a block value a coalescer read: a synced block holding
// x_seq lo..hi, or unsynced block number lo (= hi). at holds the body
// offsets of fragments 0..len(at)-1, extended by each fetch past them, so
// that a fetch decodes only its own fragment when the fetches of a block
// go forward, as a drain's do (the fragments of a resend or replay were
// written in the order of the ones they overwrite): each fragment of the
// block is decoded once. (Offsets of the whole block built on the first
// fetch decoded every fragment twice; positioning by the skip index alone
// decoded 32 fragments per fetch on average.)
type cachedBlock struct {
	unsynced bool
	lo, hi   uint64
	firstSeq uint64
	count    uint64 // fragments in the block
	body     []byte // the fragments, aliasing the owned block value
	at       []uint32
}

// close releases the iterator; the transaction it belongs to must still be
// open.
func (c *coalescer) close() {
	if c.it != nil {
		c.it.Close()
		c.it = nil
	}
}

// rowFields returns f's fields, or its point's coalesced row when the point
// holds more than one fragment. self names f.
func (c *coalescer) rowFields(st *tableState, txn *badger.Txn, tid uint64, f *store.Fragment, self ref) ([]store.Field, error) {
	known, dup := st.dupRefs(f.Series, f.Time)
	if !dup {
		return f.Fields, nil
	}
	merged, err := c.coalesce(txn, tid, f, self, known)
	if err != nil || len(merged) == 0 {
		return f.Fields, err
	}
	return merged, nil
}

// pointFields is rowFields for a read that returns each point once (the
// copy by time range): a point holding several fragments is returned, as
// its coalesced row, only at its oldest stored fragment, which never
// changes however often the point is written again; skip reports the
// other fragments. self names f.
func (c *coalescer) pointFields(st *tableState, txn *badger.Txn, tid uint64, f *store.Fragment, self ref) (fields []store.Field, skip bool, err error) {
	known, dup := st.dupRefs(f.Series, f.Time)
	if !dup {
		return f.Fields, false, nil
	}
	merged, err := c.coalesce(txn, tid, f, self, known)
	if err != nil || len(merged) == 0 {
		return f.Fields, false, err
	}
	return merged, c.hasFirst && c.first != self, nil
}

// coalesce returns the union of the fragments at self's point, the later
// write winning per column, or nothing when no fragment of the point is
// visible yet (the caller keeps the fragment it has). self, named by
// selfRef, is not decoded again. The fields are valid until the next call
// and while self.Fields is (they may be self.Fields).
func (c *coalescer) coalesce(txn *badger.Txn, tid uint64, self *store.Fragment, selfRef ref, known string) ([]store.Field, error) {
	c.key = pointKey(c.key, ksPoint, tid, self.Series, self.Time)
	v := unsafe.Slice(unsafe.StringData(known), len(known)) // read only
	if known == "" {
		item, err := txn.Get(c.key)
		if errors.Is(err, badger.ErrKeyNotFound) {
			// The overwrite marker is set while its commit is in flight,
			// before the point's first entry is visible: the point is not
			// (yet) an overwrite in this read's view.
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read point index: %w", err)
		}
		if v, err = item.ValueCopy(nil); err != nil {
			return nil, err
		}
	}
	refs, err := decodeRefs(c.refs[:0], v)
	if err != nil {
		return nil, &store.CorruptionError{Key: c.key, Err: err}
	}
	c.refs = refs
	c.merged = c.merged[:0]
	c.hasFirst = false
	// The union is kept as a view of one fragment's fields, copying none,
	// while each fragment covers the columns of the ones before it (the
	// same columns at the same positions, and maybe more: a resent or
	// replayed line); it is copied into c.merged and merged there from
	// the first fragment that does not. A view of a fetched fragment
	// aliases c.br's fields, which the next fetch overwrites: it is
	// copied before one.
	var view []store.Field
	viewing, viewFetched := false, false
	var f store.Fragment
	for _, r := range refs {
		fields, fetched := self.Fields, r != selfRef
		if fetched {
			if viewing && viewFetched {
				c.merged, viewing = append(c.merged, view...), false
			}
			found, err := c.fetch(txn, tid, r, &f)
			if err != nil {
				return nil, err
			}
			if !found || f.Series == removedSeries {
				continue // its block was never stored (a crash split its commit), or a sweep removed it
			}
			fields = f.Fields
		}
		switch {
		case !c.hasFirst:
			c.first, c.hasFirst = r, true
			view, viewFetched, viewing = fields, fetched, true
		case viewing && covers(fields, view):
			view, viewFetched = fields, fetched
		default:
			if viewing {
				c.merged, viewing = append(c.merged, view...), false
			}
			c.merge(fields)
		}
	}
	if viewing {
		return view, nil
	}
	return c.merged, nil
}

// covers reports whether fields holds the columns of prev at the same
// positions (and maybe more after them): merged over prev, the later
// write winning per column, fields is the union as it is.
func covers(fields, prev []store.Field) bool {
	if len(fields) < len(prev) {
		return false
	}
	for k := range prev {
		if fields[k].Col != prev[k].Col {
			return false
		}
	}
	return true
}

// merge adds fields to c.merged, each replacing the field of its column.
// A fragment holds each column at most once (store.Fragment), so the
// first is taken as it is; the fragments of a point mostly carry the same
// columns in the same order (a resent or replayed line): the field at the
// same position is tried first, so a merge is linear in the fields, not
// quadratic.
func (c *coalescer) merge(fields []store.Field) {
	if len(c.merged) == 0 {
		c.merged = append(c.merged, fields...)
		return
	}
next:
	for k, fl := range fields {
		if k < len(c.merged) && c.merged[k].Col == fl.Col {
			c.merged[k] = fl
			continue
		}
		for i := range c.merged {
			if c.merged[i].Col == fl.Col {
				c.merged[i] = fl
				continue next
			}
		}
		c.merged = append(c.merged, fl)
	}
}

// fetch decodes the fragment r names into f; f.Fields is valid until the
// next fetch. It reports found=false when
// r's block does not exist: Commit writes the point index before the block,
// so a crash between the transactions of a split commit, or a commit in
// progress, leaves references to a block not (yet) stored.
func (c *coalescer) fetch(txn *badger.Txn, tid uint64, r ref, f *store.Fragment) (found bool, err error) {
	b, idx, found, err := c.block(txn, tid, r)
	if err != nil || !found {
		return false, err
	}
	if r.seq != 0 {
		idx = r.seq - b.firstSeq
	}
	if err := c.decodeAt(b, idx, f); err != nil {
		return false, &store.CorruptionError{Key: c.key, Err: err}
	}
	return true, nil
}

// decodeAt decodes fragment i of b into f, from the nearest offset at or
// below it in b.at, recording the offsets of the fragments it passes.
func (c *coalescer) decodeAt(b *cachedBlock, i uint64, f *store.Fragment) error {
	if i >= b.count {
		return errShort
	}
	k := min(i, uint64(len(b.at)-1))
	c.br.body, c.br.count, c.br.read = b.body, b.count, k
	c.br.b = b.body[b.at[k]:]
	for {
		if err := c.br.next(f); err != nil {
			return err
		}
		if c.br.read == uint64(len(b.at)) && c.br.read < b.count {
			b.at = append(b.at, uint32(len(b.body)-len(c.br.b)))
		}
		if c.br.read > i {
			return nil
		}
	}
}

// block returns the value of the block holding r (from the cache when it
// is there) and, for an unsynced reference, the fragment's index in it.
func (c *coalescer) block(txn *badger.Txn, tid uint64, r ref) (_ *cachedBlock, idx uint64, found bool, err error) {
	for _, b := range c.cache {
		if r.seq != 0 && !b.unsynced && b.lo <= r.seq && r.seq <= b.hi {
			return b, 0, true, nil
		}
		if r.seq == 0 && b.unsynced && b.lo == r.block {
			return b, r.idx, true, nil
		}
	}
	var item *badger.Item
	if r.seq != 0 {
		if c.it == nil {
			c.it = txn.NewIterator(badger.IteratorOptions{Prefix: tablePrefix(ksSync, tid)})
		}
		c.it.Seek(tableKey(ksSync, tid, r.seq))
		if !c.it.Valid() {
			return nil, 0, false, nil
		}
		item = c.it.Item()
	} else {
		item, err = txn.Get(tableKey(ksUnsync, tid, r.block))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil, 0, false, nil
		}
		if err != nil {
			return nil, 0, false, err
		}
		idx = r.idx
	}
	val, err := item.ValueCopy(nil)
	if err != nil {
		return nil, 0, false, err
	}
	if err := c.br.init(val); err != nil {
		return nil, 0, false, &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
	}
	if c.br.count == 0 || uint64(len(c.br.body)) > math.MaxUint32 {
		return nil, 0, false, &store.CorruptionError{Key: item.KeyCopy(nil), Err: errShort}
	}
	b := &cachedBlock{unsynced: r.seq == 0, lo: r.block, hi: r.block, firstSeq: c.br.firstSeq, count: c.br.count, body: c.br.body, at: make([]uint32, 1, c.br.count)}
	if r.seq != 0 {
		b.lo, b.hi = c.br.firstSeq, binary.BigEndian.Uint64(item.Key()[9:17])
		if r.seq < b.lo {
			return nil, 0, false, nil // the next stored block starts above it
		}
	}
	if len(c.cache) == coalescerCache {
		c.cache = append(c.cache[:0], c.cache[1:]...)
	}
	c.cache = append(c.cache, b)
	return b, idx, true, nil
}
