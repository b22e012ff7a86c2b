package memstore

import (
	"cmp"
	"encoding/binary"
	"slices"

	"github.com/ingestd/ingestd/store"
)

// point is a point's identity in its table instance.
type point struct {
	series uint64
	time   int64
}

// fragment is one stored fragment; immutable once stored.
type fragment struct {
	seq    uint64 // 0: written with sync OFF
	block  uint64 // the instance's commit it came in, from 1
	series uint64
	time   int64
	fields []store.Field
}

// pointState is a point's fragments in write order and its coalesced
// row (per column the latest fragment's value, ordered by column),
// replaced, never changed, when a fragment arrives.
type pointState struct {
	n     uint64 // the point's place in creation order, from 1
	frags []*fragment
	row   []store.Field
}

// block is a synced commit's x_seq range and commit time.
type block struct {
	first, last uint64
	commitTime  int64
}

// instance is one table instance's data (package doc: layout).
type instance struct {
	meta    store.TableMeta // Seq: the highest x_seq handed out
	series  []store.Series  // by id
	known   map[uint64]bool // series ids in series
	synced  []*fragment     // by x_seq
	blocks  []block         // synced commits, by x_seq
	points  map[point]*pointState
	order   []point // every point, in creation order
	created uint64  // points created (pointState.n)
	horizon uint64
	commits uint64 // commits applied (fragment.block)
	frags   uint64 // fragments stored
	overs   uint64 // points holding more than one fragment
	bytes   uint64 // the fragments' encoded size
}

func newInstance() *instance {
	return &instance{known: map[uint64]bool{}, points: map[point]*pointState{}, horizon: 1}
}

// clone copies in for Disk.Clone: fragments are immutable and shared.
func (in *instance) clone() *instance {
	c := *in
	c.meta = cloneMeta(in.meta)
	c.series = slices.Clone(in.series)
	c.known = make(map[uint64]bool, len(in.known))
	for id := range in.known {
		c.known[id] = true
	}
	c.synced = slices.Clone(in.synced)
	c.blocks = slices.Clone(in.blocks)
	c.points = make(map[point]*pointState, len(in.points))
	for k, p := range in.points {
		c.points[k] = &pointState{n: p.n, frags: slices.Clone(p.frags), row: p.row}
	}
	c.order = slices.Clone(in.order)
	return &c
}

// apply stores a commit whose numbers are assigned. Called with the
// Disk's write lock.
func (in *instance) apply(tc *store.TableCommit) {
	for _, sr := range tc.NewSeries {
		if in.known[sr.ID] {
			continue // a repeated entry is the same series
		}
		in.known[sr.ID] = true
		in.series = append(in.series, store.Series{ID: sr.ID, Tags: slices.Clone(sr.Tags)})
		if n := len(in.series); n > 1 && in.series[n-2].ID > sr.ID {
			slices.SortFunc(in.series, func(a, b store.Series) int { return cmp.Compare(a.ID, b.ID) })
		}
	}
	if len(tc.Fragments) == 0 {
		return
	}
	in.commits++
	for i, f := range tc.Fragments {
		fr := &fragment{block: in.commits, series: f.Series, time: f.Time, fields: slices.Clone(f.Fields)}
		if tc.FirstSeq != 0 {
			fr.seq = tc.FirstSeq + uint64(i)
			in.synced = append(in.synced, fr)
		}
		in.frags++
		in.bytes += encodedSize(fr)
		k := point{f.Series, f.Time}
		p := in.points[k]
		if p == nil {
			in.created++
			p = &pointState{n: in.created, row: fr.fields}
			in.points[k] = p
			in.order = append(in.order, k)
		} else {
			if len(p.frags) == 1 {
				in.overs++
			}
			p.row = merge(p.row, fr.fields)
		}
		p.frags = append(p.frags, fr)
	}
	if tc.FirstSeq != 0 {
		in.blocks = append(in.blocks, block{first: tc.FirstSeq, last: tc.FirstSeq + uint64(len(tc.Fragments)) - 1, commitTime: tc.CommitTime})
	}
}

// merge returns a new row: row with fields' values in place of its own.
func merge(row, fields []store.Field) []store.Field {
	out := slices.Clone(row)
next:
	for _, f := range fields {
		for i := range out {
			if out[i].Col == f.Col {
				out[i] = f
				continue next
			}
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b store.Field) int { return cmp.Compare(a.Col, b.Col) })
	return out
}

// rebuildRow recomputes a point's row from its fragments.
func (p *pointState) rebuildRow() {
	p.row = p.frags[0].fields
	for _, f := range p.frags[1:] {
		p.row = merge(p.row, f.fields)
	}
}

// encodedSize is f's size in store.FragmentBytes' encoding.
func encodedSize(f *fragment) uint64 {
	var b [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(b[:], f.series) + binary.PutVarint(b[:], f.time) + binary.PutUvarint(b[:], uint64(len(f.fields)))
	for _, fl := range f.fields {
		n += binary.PutUvarint(b[:], uint64(fl.Col)) + 1
		switch fl.Value.Kind {
		case store.KindString, store.KindTag:
			n += binary.PutUvarint(b[:], uint64(len(fl.Value.Str))) + len(fl.Value.Str)
		default:
			n += 8
		}
	}
	return uint64(n)
}

// blockAt returns the index of the first synced block whose last x_seq
// is at least seq.
func (in *instance) blockAt(seq uint64) int {
	i, _ := slices.BinarySearchFunc(in.blocks, seq, func(b block, s uint64) int { return cmp.Compare(b.last, s) })
	return i
}

// sweep removes at most maxFragments fragments older than cutoff (store.Sweeper).
// Called with the Disk's write lock.
func (in *instance) sweep(cutoff int64, maxFragments int) store.SweepResult {
	maxFragments = max(maxFragments, 1)
	res := store.SweepResult{}
	removed := map[*fragment]bool{}
	var maxSeq uint64
	keep := in.order[:0:0]
	for i, k := range in.order {
		p := in.points[k]
		if k.time >= cutoff || res.More {
			keep = append(keep, k)
			continue
		}
		n := min(len(p.frags), maxFragments-res.Removed)
		for _, f := range p.frags[:n] {
			removed[f] = true
			maxSeq = max(maxSeq, f.seq)
			in.frags--
			in.bytes -= encodedSize(f)
		}
		res.Removed += n
		if len(p.frags) > 1 && len(p.frags)-n <= 1 {
			in.overs--
		}
		if n == len(p.frags) {
			delete(in.points, k)
		} else {
			p.frags = slices.Clone(p.frags[n:])
			p.rebuildRow()
			keep = append(keep, k)
		}
		if res.Removed == maxFragments {
			res.More = n < len(p.frags) || slices.ContainsFunc(in.order[i+1:], func(q point) bool { return q.time < cutoff })
		}
	}
	in.order = keep
	if maxSeq > 0 {
		in.horizon = max(in.horizon, maxSeq+1)
	}
	if len(removed) > 0 {
		synced := make([]*fragment, 0, len(in.synced))
		for _, f := range in.synced {
			if !removed[f] {
				synced = append(synced, f)
			}
		}
		in.synced = synced
		blocks := in.blocks[:0:0]
		for _, b := range in.blocks {
			i, _ := slices.BinarySearchFunc(in.synced, b.first, func(f *fragment, s uint64) int { return cmp.Compare(f.seq, s) })
			if i < len(in.synced) && in.synced[i].seq <= b.last {
				blocks = append(blocks, b)
			}
		}
		in.blocks = blocks
	}
	res.Horizon = in.horizon
	if !res.More {
		for _, k := range in.order {
			if !res.HasOldest || k.time < res.Oldest {
				res.Oldest, res.HasOldest = k.time, true
			}
		}
	}
	return res
}
