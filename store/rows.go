package store

import (
	"encoding/binary"
	"errors"

	"github.com/dgraph-io/badger/v4"
)

// RowCursor is a position in a table instance's blocks for ReadRows: the
// synced blocks in x_seq order, then the unsynced ones in write order. The
// zero RowCursor is the start.
type RowCursor struct {
	Unsynced bool   // in the unsynced blocks
	Block    uint64 // block key: last x_seq of a synced block, number of an unsynced one
	Index    uint64 // next fragment within that block
}

// ReadRows visits the points of table instance tid with start <= ts < end
// from cur on, at most limit of them, each once as its coalesced row: a
// point written several times is visited at its oldest stored fragment
// only (a point overwritten while the read goes on may be visited again at
// a newer fragment, or left to the feed when that fragment's block lies
// behind cur). It returns
// the cursor after the last visited fragment and done=true when there is
// nothing after it. A visit returning ErrRowLeftOut ends the page before
// its row. Row.Seq is 0 for fragments written while sync was OFF.
// The Row and its Fields are valid only during visit. Safe for concurrent
// use with Commit: it reads one consistent view, taken before the first
// call to visit, so blocks committed meanwhile are not visited.
func (db *DB) ReadRows(tid uint64, cur RowCursor, start, end int64, limit int, visit func(*Row) error) (RowCursor, bool, error) {
	st := db.table(tid)
	txn := db.bdb.NewTransaction(false)
	defer txn.Discard()
	var (
		br  blockReader
		f   Fragment
		row Row
		co  coalescer
		n   int
	)
	defer co.close()
	for _, space := range []struct {
		unsynced bool
		ks       byte
	}{{false, ksSync}, {true, ksUnsync}} {
		if cur.Unsynced && !space.unsynced {
			continue
		}
		if space.unsynced && !cur.Unsynced {
			cur = RowCursor{Unsynced: true}
		}
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 2, Prefix: tablePrefix(space.ks, tid)})
		err := func() error {
			defer it.Close()
			for it.Seek(tableKey(space.ks, tid, cur.Block)); it.Valid(); it.Next() {
				item := it.Item()
				key := item.Key()
				block := binary.BigEndian.Uint64(key[9:17])
				if block != cur.Block {
					cur = RowCursor{Unsynced: space.unsynced, Block: block}
				}
				val, err := item.ValueCopy(nil)
				if err != nil {
					return err
				}
				if err := br.init(val); err != nil {
					return &CorruptionError{Key: item.KeyCopy(nil), Err: err}
				}
				if err := br.seek(cur.Index); err != nil {
					return &CorruptionError{Key: item.KeyCopy(nil), Err: err}
				}
				for br.read < br.count {
					idx := br.read
					if err := br.next(&f); err != nil {
						return &CorruptionError{Key: item.KeyCopy(nil), Err: err}
					}
					cur.Index = idx + 1
					if f.Series == removedSeries || f.Time < start || f.Time >= end {
						continue
					}
					row = Row{Series: f.Series, Time: f.Time, Fields: f.Fields}
					self := ref{block: block, idx: idx}
					if !space.unsynced {
						row.Seq = br.firstSeq + idx
						self = ref{seq: row.Seq}
					}
					var skip bool
					if row.Fields, skip, err = co.pointFields(st, txn, tid, &f, self); err != nil {
						return err
					}
					if skip {
						continue // the point was returned at its oldest fragment
					}
					if err := visit(&row); err != nil {
						if errors.Is(err, ErrRowLeftOut) {
							cur.Index = idx // the next page starts with this row
							return errPageFull
						}
						return err
					}
					if n++; n == limit {
						return errPageFull
					}
				}
				cur = RowCursor{Unsynced: space.unsynced, Block: block + 1}
			}
			return nil
		}()
		if errors.Is(err, errPageFull) {
			return cur, false, nil
		}
		if err != nil {
			return cur, false, err
		}
	}
	return cur, true, nil
}

// ErrRowLeftOut, returned by a ReadRows visit function, ends the page
// before the row it was called with: ReadRows returns no error and a
// cursor that resumes at that row.
var ErrRowLeftOut = errors.New("store: row left out of the page")

// errPageFull stops ReadRows' block walk once limit rows were visited.
var errPageFull = errors.New("page full")
