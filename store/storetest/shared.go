package storetest

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// The guarantees of store.Shared, checked with two backends on the same
// shared data (two processes: Harness.Peer). Each subtest opens its own
// pair.
var sharedTests = []struct {
	name string
	fn   func(t *testing.T, p *pair)
}{
	{"SharedSeriesIDs", testSharedSeriesIDs},
	{"SharedColumns", testSharedColumns},
	{"SharedBlocksFollowed", testSharedBlocksFollowed},
	{"SharedXSeqAcrossWriters", testSharedXSeq},
	{"SharedTableChangesFollowed", testSharedTableChanges},
	{"SharedBeyond", testSharedBeyond},
}

// pair is two backends on one shared store, a and b, with what b's
// Follow reported.
type pair struct {
	a, b   store.Backend
	sa, sb store.Shared
	mu     sync.Mutex
	got    []store.Followed // b's reports, guarded by mu
}

// openPair opens a, then b on a's data, registering b's Follow first.
func openPair(t *testing.T, h Harness) *pair {
	a := open(t, h)
	b := h.Peer(t, a)
	t.Cleanup(func() { _ = b.Close() })
	p := &pair{a: a, b: b}
	var ok bool
	p.sa, ok = a.(store.Shared)
	require.True(t, ok, "a backend with Harness.Peer implements store.Shared")
	p.sb = b.(store.Shared)
	p.sb.Follow(func(f store.Followed) {
		f.Series = slices.Clone(f.Series)
		p.mu.Lock()
		p.got = append(p.got, f)
		p.mu.Unlock()
	})
	return p
}

// followed waits until b reported what ok admits.
func (p *pair) followed(t *testing.T, what string, ok func(store.Followed) bool) store.Followed {
	t.Helper()
	var hit store.Followed
	poll(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, f := range p.got {
			if ok(f) {
				hit = f
				return true
			}
		}
		return false
	}, "b reports "+what)
	return hit
}

// knows waits until b reports instance m (created, or written, by a).
func (p *pair) knows(t *testing.T, m store.TableMeta) {
	t.Helper()
	p.followed(t, fmt.Sprintf("table %s instance %d", m.Name, m.ID), func(f store.Followed) bool { return f.Table.ID == m.ID })
}

// poll waits up to a minute (stretched on a busy machine) for cond.
func poll(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(testdeadline.Scale(time.Minute))
	for !cond() {
		require.True(t, time.Now().Before(deadline), "not within a minute: %s", what)
		time.Sleep(5 * time.Millisecond)
	}
}

func runShared(t *testing.T, h Harness) {
	for _, tc := range sharedTests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, openPair(t, h)) })
	}
}

func tagSet(v string) []store.Field {
	return []store.Field{{Col: tagCol, Value: store.Value{Kind: store.KindTag, Str: v}}}
}

// seriesIDs asks s for the ids of the tag sets host=V for each of vals.
func seriesIDs(t *testing.T, s store.Shared, tid uint64, vals ...string) []uint64 {
	t.Helper()
	keys := make([]store.SeriesKey, len(vals))
	for i, v := range vals {
		keys[i] = store.SeriesKey{Key: "host=" + v, Tags: tagSet(v)}
	}
	ids, err := s.SeriesIDs(ctx, tid, keys)
	require.NoError(t, err)
	require.Len(t, ids, len(vals))
	return ids
}

// testSharedSeriesIDs: a tag set is one id in every process, whichever
// asks first, however many ask at once and whether or not the other
// series of a call are new; two tag sets never share one; a key given
// twice in one call gets one id.
func testSharedSeriesIDs(t *testing.T, p *pair) {
	m := createTable(t, p.a, "t", true)
	p.knows(t, m)
	ida := seriesIDs(t, p.sa, m.ID, "x")[0]
	require.Positive(t, ida)
	require.Equal(t, ida, seriesIDs(t, p.sb, m.ID, "x")[0], "the id the first process minted")

	// A call of new series and one known (x): every id is the one minted
	// first, the new ones included.
	mixed := seriesIDs(t, p.sb, m.ID, "y", "x", "z", "y")
	require.Equal(t, ida, mixed[1], "a known series in a call of new ones")
	require.Equal(t, mixed[0], mixed[3], "a key given twice: one id")
	require.Equal(t, mixed[:3], seriesIDs(t, p.sa, m.ID, "y", "x", "z"), "the other process reads the same ids")

	// Both processes number the same 64 new series at once, in calls of
	// 16 in opposite orders.
	const keys = 64
	vals := make([]string, keys)
	for k := range vals {
		vals[k] = fmt.Sprint("k", k)
	}
	ids := [2][]uint64{}
	var wg sync.WaitGroup
	for side, s := range []store.Shared{p.sa, p.sb} {
		wg.Go(func() {
			order := slices.Clone(vals)
			if side == 1 {
				slices.Reverse(order)
			}
			got := map[string]uint64{}
			for lo := 0; lo < keys; lo += 16 {
				batch := order[lo : lo+16]
				kk := make([]store.SeriesKey, len(batch))
				for i, v := range batch {
					kk[i] = store.SeriesKey{Key: "host=" + v, Tags: tagSet(v)}
				}
				out, err := s.SeriesIDs(ctx, m.ID, kk)
				if err != nil {
					return
				}
				for i, v := range batch {
					got[v] = out[i]
				}
			}
			for _, v := range vals {
				ids[side] = append(ids[side], got[v])
			}
		})
	}
	wg.Wait()
	seen := map[uint64]string{ida: "x", mixed[0]: "y", mixed[2]: "z"}
	require.Len(t, seen, 3, "x, y and z: three ids")
	for k, v := range vals {
		require.Len(t, ids[0], keys, "every call through a succeeded")
		require.Len(t, ids[1], keys, "every call through b succeeded")
		require.Positive(t, ids[0][k], "key %s through a", v)
		require.Equal(t, ids[0][k], ids[1][k], "key %s: one id through both processes", v)
		prev, dup := seen[ids[0][k]]
		require.False(t, dup, "keys %s and %s share id %d", v, prev, ids[0][k])
		seen[ids[0][k]] = v
	}
}

// testSharedColumns: columns added through either process merge by name
// into one schema; a position never changes and a name keeps the kind it
// was first added with.
func testSharedColumns(t *testing.T, p *pair) {
	m := createTable(t, p.a, "t", true)
	p.knows(t, m)
	ca, err := p.sa.AddColumns(ctx, m.ID, []store.Column{{Name: "f", Kind: store.KindFloat}})
	require.NoError(t, err)
	require.Equal(t, append(slices.Clone(m.Columns), store.Column{Name: "f", Kind: store.KindFloat}), ca)
	cb, err := p.sb.AddColumns(ctx, m.ID, []store.Column{{Name: "g", Kind: store.KindString}, {Name: "f", Kind: store.KindInt}})
	require.NoError(t, err)
	require.Equal(t, append(slices.Clone(ca), store.Column{Name: "g", Kind: store.KindString}), cb,
		"a's positions kept, f keeps its kind, g appended")
	again, err := p.sa.AddColumns(ctx, m.ID, []store.Column{{Name: "g", Kind: store.KindString}})
	require.NoError(t, err)
	require.Equal(t, cb, again, "a sees b's column")
}

// testSharedBlocksFollowed: a block one process writes is applied by the
// other, reported with its new series and the x_seq applied, and read
// there as it is where it was written.
func testSharedBlocksFollowed(t *testing.T, p *pair) {
	m := createTable(t, p.a, "t", true)
	_, last := write(t, p.a, m, true, frag(1, iv(valCol, 1)), frag(2, iv(valCol, 2)), frag(1, iv(valCol, 3)))
	f := p.followed(t, "a's block", func(f store.Followed) bool { return f.Table.ID == m.ID && f.Seq >= last })
	require.Equal(t, m.Name, f.Table.Name)
	p.followed(t, "a's block's series", func(f store.Followed) bool {
		return f.Table.ID == m.ID && slices.ContainsFunc(f.Series, func(s store.Series) bool { return s.ID == 1 })
	})
	require.Equal(t, readSeq(t, p.a, m.ID, 0, last, 10), readSeq(t, p.b, m.ID, 0, last, 10), "b reads a's rows as a does")
}

// testSharedXSeq: two processes writing one table get x_seq numbers that
// are unique and ascending across both, and read the same pages.
func testSharedXSeq(t *testing.T, p *pair) {
	m := createTable(t, p.a, "t", true)
	write(t, p.a, m, true, frag(1, iv(valCol, 1)))
	p.knows(t, m)
	var firsts []uint64
	var top uint64
	for i := range 6 {
		w := p.a
		if i%2 == 1 {
			w = p.b
		}
		first, last := write(t, w, m, false, frag(int64(10+i), iv(valCol, int64(i))), frag(int64(20+i), iv(valCol, int64(i))))
		require.Equal(t, first+1, last)
		firsts = append(firsts, first)
		top = last
	}
	for i := 1; i < len(firsts); i++ {
		require.Greater(t, firsts[i], firsts[i-1]+1, "write %d numbered above write %d's two fragments", i, i-1)
	}
	poll(t, func() bool { return len(readSeq(t, p.a, m.ID, 0, top, 100)) == 13 }, "a applied b's blocks")
	poll(t, func() bool { return len(readSeq(t, p.b, m.ID, 0, top, 100)) == 13 }, "b applied a's blocks")
	require.Equal(t, readSeq(t, p.a, m.ID, 0, top, 4), readSeq(t, p.b, m.ID, 0, top, 5), "the same pages through both")
}

// testSharedTableChanges: a TRUNCATE and a DROP through one process are
// reported by the other; until it takes them, its commits to the ended
// instance are acknowledged without being stored, and its own TRUNCATE,
// DROP or metadata change of it is refused with ErrEnded.
func testSharedTableChanges(t *testing.T, p *pair) {
	m := createTable(t, p.a, "t", true)
	_, last := write(t, p.a, m, true, frag(1, iv(valCol, 1)))
	p.followed(t, "a's block", func(f store.Followed) bool { return f.Table.ID == m.ID && f.Seq >= last })
	tr, err := p.a.TruncateTable(ctx, m.ID)
	require.NoError(t, err)
	f := p.followed(t, "the truncate", func(f store.Followed) bool { return f.Table.ID == tr.ID })
	require.Equal(t, m.Epoch+1, f.Table.Epoch)
	require.False(t, f.Table.Dropped)
	require.NoError(t, p.b.Append(ctx, []store.TableCommit{{TableID: m.ID, Sync: true, Fragments: []store.Fragment{frag(5, iv(valCol, 5))}, CommitTime: 1}}, nil),
		"a commit to the ended instance is acknowledged")
	_, err = p.b.TruncateTable(ctx, m.ID)
	require.ErrorIs(t, err, store.ErrEnded)
	_, err = p.b.DropTable(ctx, m.ID)
	require.ErrorIs(t, err, store.ErrEnded)
	off := m
	off.Sync = false
	_, err = p.b.PutTable(ctx, off)
	require.ErrorIs(t, err, store.ErrEnded, "SET SYNC of the ended instance")
	require.Empty(t, readSeq(t, p.a, tr.ID, 0, math.MaxUint64, 10), "nothing of it is stored in the new instance")

	_, err = p.a.DropTable(ctx, tr.ID)
	require.NoError(t, err)
	f = p.followed(t, "the drop", func(f store.Followed) bool { return f.Table.Dropped && f.Ended == tr.ID })
	require.Equal(t, m.Name, f.Table.Name)
	require.Zero(t, f.Table.ID, "a tombstone")
}

// testSharedBeyond: a cursor above every number any process handed out is
// beyond the sequence once the process asked has proven it; one at or
// below the sequence never is.
func testSharedBeyond(t *testing.T, p *pair) {
	m := createTable(t, p.a, "t", true)
	_, last := write(t, p.a, m, true, frag(1, iv(valCol, 1)), frag(2, iv(valCol, 2)))
	p.followed(t, "a's block", func(f store.Followed) bool { return f.Table.ID == m.ID && f.Seq >= last })
	for _, after := range []uint64{0, last} {
		beyond, err := p.sb.Beyond(ctx, m.ID, after)
		require.NoError(t, err)
		require.False(t, beyond, "cursor %d is within the sequence", after)
	}
	poll(t, func() bool {
		beyond, err := p.sb.Beyond(ctx, m.ID, last+10)
		return err == nil && beyond
	}, fmt.Sprintf("cursor %d proven beyond the sequence %d", last+10, last))
}
