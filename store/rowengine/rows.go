package rowengine

import (
	"context"
	"encoding/binary"
	"errors"

	"github.com/dgraph-io/badger/v4"

	"github.com/ingestd/ingestd/store"
)

// rowPos is the position a store.RowCursor carries for ReadRows: the
// synced blocks in x_seq order, then the unsynced ones in write order. The
// zero rowPos is the start.
type rowPos struct {
	Unsynced bool   // in the unsynced blocks
	Block    uint64 // block key: last x_seq of a synced block, number of an unsynced one
	Index    uint64 // next fragment within that block
}

// encode is the cursor of p: three uvarints (1 when unsynced, else 0; the
// block; the index).
func (p rowPos) encode() store.RowCursor {
	u := uint64(0)
	if p.Unsynced {
		u = 1
	}
	b := binary.AppendUvarint(nil, u)
	b = binary.AppendUvarint(b, p.Block)
	return binary.AppendUvarint(b, p.Index)
}

// decodeRowPos reads a cursor encode issued; empty is the start. Bytes
// after the three numbers are ignored.
func decodeRowPos(c store.RowCursor) (rowPos, error) {
	var vals [3]uint64
	if len(c) == 0 {
		return rowPos{}, nil
	}
	for i := range vals {
		v, n := binary.Uvarint(c)
		if n <= 0 {
			return rowPos{}, store.ErrInvalidCursor
		}
		vals[i], c = v, c[n:]
	}
	return rowPos{Unsynced: vals[0] == 1, Block: vals[1], Index: vals[2]}, nil
}

// readRows visits the points of table instance tid with start <= ts < end
// from cur on, at most limit of them, each once as its coalesced row: a
// point written several times is visited at its oldest stored fragment
// only (a point overwritten while the read goes on may be visited again at
// a newer fragment, or left to the feed when that fragment's block lies
// behind cur). It returns
// the cursor after the last visited fragment and done=true when there is
// nothing after it. A visit returning ErrRowLeftOut ends the page before
// its row. Row.Seq is 0 for fragments written while sync was OFF.
// The Row and its Fields are valid only during visit. ctx's error stops
// the read once ctx ends (checked before each block) and is returned.
// Safe for concurrent use with Commit: it reads one consistent view,
// taken before the first call to visit, so blocks committed meanwhile are
// not visited.
func (db *Engine) readRows(ctx context.Context, tid uint64, c store.RowCursor, start, end int64, limit int, visit func(*store.Row) error) (store.RowCursor, bool, error) {
	cur, err := decodeRowPos(c)
	if err != nil {
		return nil, false, err
	}
	st := db.table(tid)
	txn := db.bdb.NewTransaction(false)
	defer txn.Discard()
	sc := blockScan{pts: pointRows{gets: &db.stats.readEntries}}
	for _, space := range []struct {
		unsynced bool
		ks       byte
	}{{false, ksSync}, {true, ksUnsync}} {
		if cur.Unsynced && !space.unsynced {
			continue
		}
		if space.unsynced && !cur.Unsynced {
			cur = rowPos{Unsynced: true}
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: tablePrefix(space.ks, tid)})
		err := func() error {
			defer it.Close()
			for it.Seek(tableKey(space.ks, tid, cur.Block)); it.Valid(); it.Next() {
				if err := ctx.Err(); err != nil {
					return err
				}
				item := it.Item()
				key := item.Key()
				block := binary.BigEndian.Uint64(key[9:17])
				if item.UserMeta()&metaNoFirst != 0 {
					// Only overwrites: no point of the block is visited
					// here, and its value is not read.
					cur = rowPos{Unsynced: space.unsynced, Block: block + 1}
					continue
				}
				if block != cur.Block {
					cur = rowPos{Unsynced: space.unsynced, Block: block}
				}
				val, err := item.ValueCopy(nil)
				if err != nil {
					return err
				}
				db.stats.readBlocks.Add(1)
				if err := sc.br.init(val); err != nil {
					return &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
				}
				if err := sc.br.seek(cur.Index); err != nil {
					return &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
				}
				for sc.br.read < sc.br.count {
					idx := sc.br.read
					if err := sc.br.next(&sc.f); err != nil {
						return &store.CorruptionError{Key: item.KeyCopy(nil), Err: err}
					}
					cur.Index = idx + 1
					if sc.f.Series == removedSeries || sc.f.Time < start || sc.f.Time >= end {
						continue
					}
					sc.row = store.Row{Series: sc.f.Series, Time: sc.f.Time, Fields: sc.f.Fields}
					self := ref{block: block, idx: idx}
					if !space.unsynced {
						sc.row.Seq = sc.br.firstSeq + idx
						self = ref{seq: sc.row.Seq}
					}
					var skip bool
					if sc.row.Fields, skip, err = sc.pts.pointFields(st, txn, tid, &sc.f, self); err != nil {
						return err
					}
					if skip {
						continue // the point was returned at its oldest fragment
					}
					if err := visit(&sc.row); err != nil {
						if errors.Is(err, store.ErrRowLeftOut) {
							cur.Index = idx // the next page starts with this row
							return errPageFull
						}
						return err
					}
					if sc.n++; sc.n == limit {
						return errPageFull
					}
				}
				cur = rowPos{Unsynced: space.unsynced, Block: block + 1}
			}
			return nil
		}()
		if errors.Is(err, errPageFull) {
			return cur.encode(), false, nil
		}
		if err != nil {
			return nil, false, err
		}
	}
	return nil, true, nil
}

// errPageFull stops ReadRows' block walk once limit rows were visited.
var errPageFull = errors.New("page full")
