package rowengine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/dgraph-io/badger/v4"

	"github.com/ingestd/ingestd/store"
)

// A point-index entry ('p' tid sid ts) is one of (see doc.go, "Overwritten
// points"):
//
//   - a reference ('L' x_seq, or 'U' block number and index): the point
//     holds one fragment, placed by a lookup;
//   - a union: 'M', uvarint count (>= 2: the fragments at the point),
//     the reference of its oldest fragment, then the point's current row
//     encoded as a fragment (uvarint sid, varint ts, the fields): every
//     column any of its fragments set, the later write winning. The
//     references of fragments 2..count are in overwrite runs ('o'); a
//     store of layout 5 or older holds them as 'q' entries, keyed by
//     their number at the point.
//
// An entry is bounded by the point's columns, not by how often it was
// written: the K-th write of a point replaces one entry of the same size.
const entryUnion = 'M'

// pointEntry is a decoded point-index entry. fields aliases the value it
// was decoded from.
type pointEntry struct {
	count  uint64 // fragments at the point, >= 1
	first  ref    // the oldest of them
	fields []store.Field
}

// decodeEntry decodes a point-index entry; fields is scratch space the
// union's fields are decoded into (returned as e.fields). A legacy entry
// (layout 1 and 2: a list of references) is decoded as its first
// reference with the count of references and no fields.
func decodeEntry(v []byte, fields []store.Field) (e pointEntry, err error) {
	if len(v) > 0 && v[0] == entryUnion {
		b := v[1:]
		count, n := binary.Uvarint(b)
		if n <= 0 || count < 2 {
			return e, errShort
		}
		first, k, err := decodeRef(b[n:])
		if err != nil {
			return e, err
		}
		body := b[n+k:]
		br := blockReader{b: body, body: body, count: 1, fields: fields[:0]}
		var f store.Fragment
		if err := br.next(&f); err != nil {
			return e, err
		}
		return pointEntry{count: count, first: first, fields: f.Fields}, nil
	}
	refs, err := decodeRefs(nil, v)
	if err != nil || len(refs) == 0 {
		return e, errors.Join(errShort, err)
	}
	return pointEntry{count: uint64(len(refs)), first: refs[0]}, nil
}

// appendUnion encodes a union entry of count fragments at (sid, ts).
func appendUnion(dst []byte, count uint64, first ref, sid uint64, ts int64, fields []store.Field) []byte {
	dst = append(dst, entryUnion)
	dst = binary.AppendUvarint(dst, count)
	dst = appendRef(dst, first)
	return appendFragment(dst, &store.Fragment{Series: sid, Time: ts, Fields: fields})
}

// refKey returns the key of the reference to fragment n (2..count) of
// the point (sid, ts): 'q' tid sid ts n, n 8-byte big-endian so that a
// point's references sort in write order.
func refKey(tid, sid uint64, ts int64, n uint64) []byte {
	k := pointKey(make([]byte, 0, 33), ksRef, tid, sid, ts)
	return binary.BigEndian.AppendUint64(k, n)
}

// mergeFields sets each of fields in dst, replacing the field of its
// column, and returns dst. A fragment holds each column at most once
// (store.Fragment), and the fragments of a point mostly carry the same
// columns in the same order (a resent or replayed line): the field at the
// same position is tried first, so a merge is linear in the fields.
func mergeFields(dst, fields []store.Field) []store.Field {
	if len(dst) == 0 {
		return append(dst, fields...)
	}
next:
	for k, fl := range fields {
		if k < len(dst) && dst[k].Col == fl.Col {
			dst[k] = fl
			continue
		}
		for i := range dst {
			if dst[i].Col == fl.Col {
				dst[i] = fl
				continue next
			}
		}
		dst = append(dst, fl)
	}
	return dst
}

// pointRows resolves, for one read (a drain page or a row copy page), the
// current row of each overwritten point it meets: the point's union entry
// is read and decoded once, the first time one of its fragments is met,
// and reused for every other fragment of the point in the page. No block
// is read for it: a page costs the blocks holding the fragments it returns
// plus one entry per overwritten point it touches, however many fragments
// those points hold.
type pointRows struct {
	key  []byte
	rows map[pointID]pointRow
	gets *atomic.Uint64 // the store's count of point-index reads
	// arena holds the rows' fields, in chunks that are never moved (rows
	// alias them): one allocation per pointRowsChunk fields, not one per
	// point, where a page meets each point once.
	arena []store.Field
}

// pointRowsChunk is the fields an arena chunk of pointRows holds.
const pointRowsChunk = 4096

// pointRow is what a read knows of one point: its union (dup) or that it
// holds one fragment in the read's view.
type pointRow struct {
	dup    bool
	first  ref
	fields []store.Field
}

// row returns the point of fragment f as the read's view sees it.
func (p *pointRows) row(st *tableState, txn *badger.Txn, tid uint64, f *store.Fragment) (pointRow, error) {
	id := pointID{f.Series, f.Time}
	if r, ok := p.rows[id]; ok { // met before in this read
		return r, nil
	}
	known, dup := st.dupRefs(f.Series, f.Time)
	if !dup {
		return pointRow{}, nil
	}
	// A known entry is immutable (a string); a read one is a copy of the
	// read's own: the row's strings alias either.
	v := unsafe.Slice(unsafe.StringData(known), len(known))
	if known == "" {
		p.gets.Add(1)
		p.key = pointKey(p.key, ksPoint, tid, f.Series, f.Time)
		item, err := txn.Get(p.key)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
			// The overwrite marker is set while its commit is in flight,
			// before the point's entry is visible: not an overwrite (yet)
			// in this read's view.
			v = nil
		case err != nil:
			return pointRow{}, fmt.Errorf("read point index: %w", err)
		default:
			if v, err = item.ValueCopy(nil); err != nil {
				return pointRow{}, err
			}
			st.keepEntry(id, v)
		}
	}
	var r pointRow
	if v != nil {
		if cap(p.arena)-len(p.arena) < 64 {
			p.arena = make([]store.Field, 0, pointRowsChunk)
		}
		e, err := decodeEntry(v, p.arena[len(p.arena):len(p.arena):cap(p.arena)])
		if err != nil {
			return pointRow{}, &store.CorruptionError{Key: pointKey(nil, ksPoint, tid, f.Series, f.Time), Err: err}
		}
		// A single reference: the point's second fragment is not visible
		// in this view. A legacy list is never read here: Open converts it.
		r = pointRow{dup: e.count > 1 && e.fields != nil, first: e.first, fields: e.fields}
		if len(e.fields) > 0 && len(p.arena) < cap(p.arena) && &e.fields[0] == &p.arena[:len(p.arena)+1][len(p.arena)] {
			p.arena = p.arena[:len(p.arena)+len(e.fields)] // decoded in place
		}
	}
	if p.rows == nil {
		p.rows = make(map[pointID]pointRow, 1024)
	}
	p.rows[id] = r
	return r, nil
}

// keepEntry makes v, the stored entry of point id as a read found it, the
// point's entry in memory, so that later reads and commits need no get:
// only while dups marks the point without an entry, which means that no
// commit of this process wrote the point (a commit's entry replaces the
// mark, and one applied meanwhile is kept) nor did a retention sweep drop
// it (the mark is gone). v must not change afterwards.
func (st *tableState) keepEntry(id pointID, v []byte) {
	e := unsafe.String(unsafe.SliceData(v), len(v))
	st.dupMu.Lock()
	if cur, ok := st.dups[id]; ok && cur == "" {
		st.dups[id] = e
	}
	st.dupMu.Unlock()
}

// rowFields returns f's fields, or its point's current row when the point
// holds more than one fragment.
func (p *pointRows) rowFields(st *tableState, txn *badger.Txn, tid uint64, f *store.Fragment) ([]store.Field, error) {
	r, err := p.row(st, txn, tid, f)
	if err != nil || !r.dup {
		return f.Fields, err
	}
	return r.fields, nil
}

// pointFields is rowFields for a read that returns each point once (the
// copy by time range): a point holding several fragments is returned, as
// its current row, only at its oldest fragment, which never changes
// however often the point is written again; skip reports the others.
// self names f.
func (p *pointRows) pointFields(st *tableState, txn *badger.Txn, tid uint64, f *store.Fragment, self ref) (fields []store.Field, skip bool, err error) {
	r, err := p.row(st, txn, tid, f)
	if err != nil || !r.dup {
		return f.Fields, false, err
	}
	return r.fields, r.first != self, nil
}

// fetcher decodes single fragments by reference, for the write path (the
// fields of a point's first fragment when it is written a second time) and
// for rebuilding unions (Open's conversion of legacy entries and its repair
// after a torn commit). It keeps the last few blocks it read: the
// fragments a resend or a replay overwrites lie in a few blocks, in order.
type fetcher struct {
	it    *badger.Iterator // over the synced blocks, opened on first use
	cache []*cachedBlock   // most recent last, at most fetcherCache
	reads *atomic.Uint64   // the store's count of block reads
}

// fetcherCache is how many blocks a fetcher keeps.
const fetcherCache = 8

// cachedBlock is a block value a fetcher read: a synced block holding
// x_seq lo..hi, or unsynced block number lo (= hi), with a reader left
// where the last fetch from it ended: fetches going forward through a
// block decode each fragment once, and one going back starts at the skip
// index entry at or below it.
type cachedBlock struct {
	unsynced bool
	lo, hi   uint64
	rd       blockReader // over the owned block value
}

// close releases the iterator; the transaction it belongs to must still be
// open.
func (c *fetcher) close() {
	if c.it != nil {
		c.it.Close()
		c.it = nil
	}
	c.cache = nil
}

// fetch decodes the fragment r names into f; f.Fields is valid until the
// next fetch, its strings while the fetcher's transaction is open. It
// reports found=false when r's block is not stored (a crash split its
// commit) or r names a removed placeholder.
func (c *fetcher) fetch(txn *badger.Txn, tid uint64, r ref, f *store.Fragment) (found bool, err error) {
	b, idx, found, err := c.block(txn, tid, r)
	if err != nil || !found {
		return false, err
	}
	if r.seq != 0 {
		idx = r.seq - b.rd.firstSeq
	}
	if err := b.decode(idx, f); err != nil {
		return false, &store.CorruptionError{Key: tableKey(ksSync, tid, r.seq), Err: err}
	}
	return f.Series != removedSeries, nil
}

// decode decodes fragment i of b into f.
func (b *cachedBlock) decode(i uint64, f *store.Fragment) error {
	if i >= b.rd.count {
		return errShort
	}
	if err := b.rd.seek(i); err != nil {
		return err
	}
	return b.rd.next(f)
}

// block returns the block holding r (from the cache when it is there) and,
// for an unsynced reference, the fragment's index in it.
func (c *fetcher) block(txn *badger.Txn, tid uint64, r ref) (_ *cachedBlock, idx uint64, found bool, err error) {
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
	if c.reads != nil {
		c.reads.Add(1)
	}
	// Owned: the fragments' strings alias it while the block is cached.
	val, err := item.ValueCopy(nil)
	if err != nil {
		return nil, 0, false, err
	}
	b := &cachedBlock{unsynced: r.seq == 0, lo: r.block, hi: r.block}
	if err := b.rd.init(val); err != nil {
		return nil, 0, false, &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
	}
	if b.rd.count == 0 {
		return nil, 0, false, &store.CorruptionError{Key: item.KeyCopy(nil), Err: errShort}
	}
	if r.seq != 0 {
		b.lo, b.hi = b.rd.firstSeq, binary.BigEndian.Uint64(item.Key()[9:17])
		if r.seq < b.lo {
			return nil, 0, false, nil // the next stored block starts above it
		}
	}
	if len(c.cache) == fetcherCache {
		c.cache = append(c.cache[:0], c.cache[1:]...)
	}
	c.cache = append(c.cache, b)
	return b, idx, true, nil
}

// stored reports whether the blocks of every fragment refs names are
// stored (without decoding the fragments).
func (c *fetcher) stored(txn *badger.Txn, tid uint64, refs []ref) (bool, error) {
	for _, r := range refs {
		if _, _, found, err := c.block(txn, tid, r); err != nil || !found {
			return false, err
		}
	}
	return true, nil
}

// rebuildUnion computes the entry of point (sid, ts) of instance tid from
// its fragments as stored, refs in write order: the union of those found
// (a torn commit's blocks are not), with the oldest found as first. It
// returns nil when none is found and a single reference when one is.
func (c *fetcher) rebuildUnion(txn *badger.Txn, tid, sid uint64, ts int64, refs []ref) ([]byte, []ref, error) {
	var (
		fields []store.Field
		found  []ref
		f      store.Fragment
	)
	for _, r := range refs {
		ok, err := c.fetch(txn, tid, r, &f)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			fields = mergeFields(fields, f.Fields)
			found = append(found, r)
		}
	}
	switch len(found) {
	case 0:
		return nil, nil, nil
	case 1:
		return appendRef(nil, found[0]), found, nil
	}
	return appendUnion(nil, uint64(len(found)), found[0], sid, ts, fields), found, nil
}

// upgrade converts what Open found in an older layout or left by a torn
// commit: the legacy entries of overwritten points (a list of references)
// become unions, and the unions of the tables a torn commit wrote are
// rebuilt from the fragments actually stored. Both are idempotent: a crash
// during either repeats it at the next Open.
func (db *Engine) upgrade() error {
	var torn []uint64
	err := db.bdb.View(func(txn *badger.Txn) error {
		item, err := txn.Get([]byte{ksTorn})
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			for len(v) > 0 {
				tid, n := binary.Uvarint(v)
				if n <= 0 {
					return &store.CorruptionError{Key: []byte{ksTorn}, Err: errShort}
				}
				torn, v = append(torn, tid), v[n:]
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	if db.upgradeFrom == 0 && torn == nil {
		return nil
	}
	// Layouts 1 and 2 hold legacy entries in every table; layout 3 differs
	// from this one only by the head records it never wrote.
	legacy := db.upgradeFrom == 1 || db.upgradeFrom == 2
	converted := 0
	if legacy || torn != nil {
		var tids []uint64 // nil: every table
		if !legacy {
			tids = torn
		}
		if converted, err = db.rebuildEntries(tids); err != nil {
			return err
		}
	}
	var voided [][]byte
	if torn != nil {
		if voided, err = db.tornRecords(torn); err != nil {
			return err
		}
	}
	err = db.bdb.Update(func(txn *badger.Txn) error {
		// A head record whose block a crash kept from being stored goes
		// with the mark: the entries of its overwrites name a fragment
		// no block holds.
		for _, k := range voided {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		if err := txn.Delete([]byte{ksTorn}); err != nil {
			return err
		}
		return txn.Set([]byte{ksVersion}, binary.AppendUvarint(nil, layoutVersion))
	})
	if err != nil {
		return err
	}
	if db.upgradeFrom != 0 {
		db.logger.Info("layout upgraded", "from", db.upgradeFrom, "to", layoutVersion, "points_converted", converted)
		db.upgradeFrom = 0
	} else {
		db.logger.Warn("repaired the overwritten points of a commit a crash split", "tables", len(torn), "points_rebuilt", converted)
	}
	return nil
}

// tornRecords returns the keys of the head records of table instances
// tids whose block is not stored: a crash split their commit after the
// record and before the block (committer.index writes the block last).
func (db *Engine) tornRecords(tids []uint64) ([][]byte, error) {
	var voided [][]byte
	err := db.bdb.View(func(txn *badger.Txn) error {
		for _, tid := range tids {
			var fetch fetcher
			it := txn.NewIterator(badger.IteratorOptions{Prefix: tablePrefix(ksHead, tid)})
			for it.Rewind(); it.Valid(); it.Next() {
				item := it.Item()
				var r ref
				err := item.Value(func(v []byte) (err error) {
					r, err = headRecordBlock(v)
					return err
				})
				if err != nil {
					it.Close()
					fetch.close()
					return &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
				}
				_, _, found, err := fetch.block(txn, tid, r)
				if err != nil {
					it.Close()
					fetch.close()
					return err
				}
				if !found {
					voided = append(voided, item.KeyCopy(nil))
				}
			}
			it.Close()
			fetch.close()
		}
		return nil
	})
	return voided, err
}

// headRecordBlock returns a reference to the first fragment of the block a
// head record indexes.
func headRecordBlock(rec []byte) (ref, error) {
	rr, err := newRecordReader(rec, nil)
	if err != nil {
		return ref{}, err
	}
	if rr.compact {
		return rr.block(), nil
	}
	_, _, _, kind, base, _, done, err := rr.next()
	switch {
	case err != nil:
		return ref{}, err
	case done:
		return ref{}, errShort
	case kind == 'L':
		return ref{seq: base}, nil
	}
	return ref{block: base}, nil
}

// rebuildEntries rebuilds, in the table instances tids (nil: all), every
// point-index entry that lists several fragments (a legacy entry) or
// names a fragment whose block is not stored, from the fragments that are;
// it returns how many it rewrote. A point left with one fragment loses its
// overwrite marker, one left with none its entry.
func (db *Engine) rebuildEntries(tids []uint64) (int, error) {
	view := db.bdb.NewTransaction(false)
	defer view.Discard()
	w := &committer{db: db, txn: db.bdb.NewTransaction(true)}
	defer func() { w.txn.Discard() }()
	var (
		fetch     fetcher
		rebuilt   int
		refs      []ref
		dropDup   []pointID
		dropTable []uint64
	)
	defer fetch.close()
	prefixes := [][]byte{{ksPoint}}
	if tids != nil {
		prefixes = prefixes[:0]
		for _, tid := range tids {
			prefixes = append(prefixes, tablePrefix(ksPoint, tid))
		}
	}
	lastTid := uint64(0)
	for _, prefix := range prefixes {
		it := view.NewIterator(badger.IteratorOptions{Prefix: prefix})
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			key := item.KeyCopy(nil)
			if keyspaceFloor(key) {
				continue
			}
			if len(key) != 25 {
				it.Close()
				return 0, &store.CorruptionError{Key: key, Err: errShort}
			}
			tid, sid, ts := binary.BigEndian.Uint64(key[1:9]), binary.BigEndian.Uint64(key[9:17]), pointKeyTime(key)
			if tid != lastTid {
				fetch.close() // its cache holds one instance's blocks
				lastTid = tid
			}
			v, err := item.ValueCopy(nil)
			if err != nil {
				it.Close()
				return 0, err
			}
			e, err := decodeEntry(v, nil)
			if err != nil {
				it.Close()
				return 0, &store.CorruptionError{Key: key, Err: err}
			}
			var refKeys [][]byte
			refs = append(refs[:0], e.first)
			if e.fields != nil { // a union: its later fragments' references
				rit := view.NewIterator(badger.IteratorOptions{Prefix: append([]byte{ksRef}, key[1:]...)})
				for rit.Rewind(); rit.Valid(); rit.Next() {
					var r ref
					rk := rit.Item().KeyCopy(nil)
					err := rit.Item().Value(func(v []byte) (err error) {
						r, _, err = decodeRef(v)
						return err
					})
					if err != nil {
						rit.Close()
						it.Close()
						return 0, &store.CorruptionError{Key: rk, Err: err}
					}
					refs, refKeys = append(refs, r), append(refKeys, rk)
				}
				rit.Close()
			} else if e.count > 1 {
				legacy, _ := decodeRefs(nil, v) // decodeEntry checked it
				refs = legacy
			}
			if e.fields == nil && e.count == 1 {
				continue // one fragment: nothing to rebuild
			}
			if e.fields != nil {
				stored, err := fetch.stored(view, tid, refs)
				if err != nil {
					it.Close()
					return 0, err
				}
				if stored {
					continue // every fragment of the union is stored
				}
			}
			entry, found, err := fetch.rebuildUnion(view, tid, sid, ts, refs)
			if err != nil {
				it.Close()
				return 0, err
			}
			rebuilt++
			for _, rk := range refKeys {
				if err := w.delete(rk); err != nil {
					it.Close()
					return 0, err
				}
			}
			if entry == nil {
				err = w.delete(key)
			} else {
				err = w.set(key, entry)
			}
			if err != nil {
				it.Close()
				return 0, err
			}
			for n := 2; n <= len(found); n++ {
				if err := w.set(refKey(tid, sid, ts, uint64(n)), appendRef(nil, found[n-1])); err != nil {
					it.Close()
					return 0, err
				}
			}
			if len(found) < 2 {
				if err := w.delete(pointKey(nil, ksDup, tid, sid, ts)); err != nil {
					it.Close()
					return 0, err
				}
				dropDup, dropTable = append(dropDup, pointID{sid, ts}), append(dropTable, tid)
			}
		}
		it.Close()
	}
	if err := w.txn.Commit(); err != nil {
		return 0, err
	}
	for i, id := range dropDup {
		st := db.tableLocked(dropTable[i])
		delete(st.dups, id)
	}
	return rebuilt, nil
}
