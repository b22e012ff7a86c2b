package rowengine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
)

// TestCoalesceColumnShapes writes one point seven times with column sets
// that cover the ones before them (same columns at the same positions,
// with or without more), reorder them, or hold fewer, each in a block of
// its own after a fragment of another point (so that each is fetched),
// and checks that every fragment, read at its own x_seq with every page
// size, is the exact union of the point's fragments, the later write
// winning per column. Reading a prefix of the fragments checks the
// union of fewer writes.
func TestCoalesceColumnShapes(t *testing.T) {
	writes := [][]store.Field{
		{intField(1, 10), intField(2, 20)},
		{intField(1, 11), intField(2, 21), intField(3, 31)}, // covers, and more
		{intField(1, 12), intField(2, 22), intField(3, 32)}, // covers exactly
		{intField(5, 52)},                  // fewer, new
		{intField(2, 23), intField(1, 13)}, // reordered
		{intField(4, 44)},                  // fewer, new
		{intField(2, 25), intField(1, 15), intField(4, 45), intField(3, 35)},
	}
	st := newSeqTable(t)
	var seqs []uint64
	for i, fields := range writes {
		st.commit(t, store.Fragment{Series: 2, Time: int64(i), Fields: []store.Field{intField(9, int64(i))}},
			store.Fragment{Series: 1, Time: 100, Fields: fields})
		seqs = append(seqs, st.seq)
		want := map[uint32]int64{}
		for _, w := range writes[:i+1] {
			for _, f := range w {
				want[f.Col] = int64(f.Value.Num)
			}
		}
		for _, limit := range []int{1, 2, 100} {
			rows := readAll(t, st.db, st.tid, 0, st.seq, limit)
			require.Len(t, rows, 2*(i+1))
			for _, r := range rows {
				if r.Series != 1 {
					continue
				}
				got := map[uint32]int64{}
				for _, f := range r.Fields {
					_, dup := got[f.Col]
					require.False(t, dup, "x_seq %d: column %d twice", r.Seq, f.Col)
					got[f.Col] = int64(f.Value.Num)
				}
				require.Equal(t, want, got, "x_seq %d after %d writes, pages of %d", r.Seq, i+1, limit)
				require.Contains(t, seqs, r.Seq)
			}
		}
	}
}

// TestCoalesceAcrossEvictedBlocks writes one point in more blocks than a
// coalescer caches (fetcherCache + 4), each write with a string column
// of its own and a block size of its own, and checks that every fragment
// reads as the union of all of them, string for string, with every page
// size: blocks evicted while one union is built keep the strings it took
// from them (a reused block buffer would not, as an attempt showed).
func TestCoalesceAcrossEvictedBlocks(t *testing.T) {
	const writes = fetcherCache + 4
	st := newSeqTable(t)
	want := map[uint32]string{}
	for i := range writes {
		v := fmt.Sprintf("value %d of the point %s", i, strings.Repeat("x", 50*(writes-i)))
		want[uint32(i)] = v
		frags := []store.Fragment{{Series: 1, Time: 100, Fields: []store.Field{{Col: uint32(i), Value: store.Value{Kind: store.KindString, Str: v}}}}}
		for k := range i * 3 { // blocks of different sizes, the point not first
			frags = append([]store.Fragment{{Series: 2, Time: int64(i*100 + k), Fields: []store.Field{intField(99, int64(k))}}}, frags...)
		}
		st.commit(t, frags...)
	}
	for _, limit := range []int{1, 3, 1000} {
		rows := readAll(t, st.db, st.tid, 0, st.seq, limit)
		seen := 0
		for _, r := range rows {
			if r.Series != 1 {
				continue
			}
			seen++
			got := map[uint32]string{}
			for _, f := range r.Fields {
				got[f.Col] = f.Value.Str
			}
			require.Equal(t, want, got, "x_seq %d, pages of %d", r.Seq, limit)
		}
		require.Equal(t, writes, seen, "every fragment under its own x_seq")
	}
}
