package jsstore

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// TestTableNotMaterialised: a node that does not keep a table's rows
// (Config.Materialise) writes it as any node does, its appends numbered in
// stream order with the other node's, but its cache holds nothing of it
// and its reads answer store.ErrNotServed; a table it keeps is served as
// on every node.
func TestTableNotMaterialised(t *testing.T) {
	h := newHarness(t, 1)
	a := h.open(t, h.config(t))
	t.Cleanup(func() { _ = a.Close() })
	other := createTable(t, a, "kept-elsewhere")
	mine := createTable(t, a, "mine")
	require.NoError(t, a.Append(ctx, []store.TableCommit{commit(other, true, 1, 2, 1), commit(mine, true, 1, 2, 1)}, nil))
	cfg := h.cfgOf(a)
	cfg.CacheDir = t.TempDir()
	cfg.Materialise = "mi*,none"
	b := h.open(t, cfg)
	t.Cleanup(func() { _ = b.Close() })

	const writes, per = 10, 3
	for i := range writes {
		s := []*Store{a, b}[i%2]
		cs := []store.TableCommit{commit(other, false, int64(100+10*i), per, 1)}
		require.NoError(t, s.Append(ctx, cs, nil))
		require.Equal(t, uint64(3+per*i), cs[0].FirstSeq, "write %d numbered after every earlier one, whichever node took it", i)
	}
	last := uint64(2 + writes*per)
	appliedTo(t, a, other.ID, last)
	require.Len(t, readAll(t, a, other.ID, 0, last).Seq, int(last), "the keeping node holds both nodes' writes")

	_, err := b.ReadSeq(ctx, other.ID, 0, last, 10, nil, func(*store.Row) error { return nil })
	require.ErrorIs(t, err, store.ErrNotServed)
	_, _, err = b.ReadRows(ctx, other.ID, nil, math.MinInt64, math.MaxInt64, 10, func(*store.Row) error { return nil })
	require.ErrorIs(t, err, store.ErrNotServed)
	_, err = b.TableStats(ctx, other.ID)
	require.ErrorIs(t, err, store.ErrNotServed)
	h1, err := b.Horizon(ctx, other.ID)
	require.NoError(t, err)
	require.Equal(t, uint64(1), h1, "the record's horizon")
	series, err := b.cache.LoadSeries(ctx, other.ID)
	require.NoError(t, err)
	require.Empty(t, series, "nothing of the table in the node's cache")
	st, err := b.cache.TableStats(ctx, other.ID)
	require.NoError(t, err)
	require.Zero(t, st.Fragments, "nothing of the table in the node's cache")

	appliedTo(t, b, mine.ID, 2)
	require.Equal(t, readAll(t, a, mine.ID, 0, 2), readAll(t, b, mine.ID, 0, 2), "a table the node keeps is served")

	// A header counting more fragments than its body has bytes stops the
	// follower of headers only as the body's decoder stops the others',
	// instead of numbering what no node stores.
	msg := nats.NewMsg(b.placeOf(other.Name).Subject)
	msg.Data = []byte{0}
	msg.Header.Set(jetstream.MsgIDHeader, "test.corrupt")
	msg.Header.Set(hdrInstance, strconv.FormatUint(other.ID, 10))
	msg.Header.Set(hdrSync, "1")
	msg.Header.Set(hdrCount, "1000")
	msg.Header.Set(hdrCommitTime, "1")
	_, err = b.js.PublishMsg(ctx, msg)
	require.NoError(t, err)
	tb := b.tableByID(t, other.ID)
	require.NoError(t, tb.await(time.Now().Add(testdeadline.Scale(time.Minute)), func() bool { return tb.f.err != nil }))
	require.Contains(t, b.Unhealthy(), "header Ingestd-Count says 1000 fragments in a body of 1 bytes")
}

// TestMaterialisePatterns: names, prefixes, every table and none.
func TestMaterialisePatterns(t *testing.T) {
	for _, c := range []struct {
		list string
		yes  []string
		no   []string
	}{
		{"*", []string{"", "cpu", "a,b"}, nil},
		{"", nil, []string{"", "cpu"}},
		{"cpu,mem*", []string{"cpu", "mem", "memory"}, []string{"cpu2", "me", "disk"}},
	} {
		cfg := Config{Materialise: c.list}
		for _, n := range c.yes {
			require.True(t, cfg.materialises(n), "%q keeps %q", c.list, n)
		}
		for _, n := range c.no {
			require.False(t, cfg.materialises(n), "%q does not keep %q", c.list, n)
		}
	}
	cfg := DefaultConfig()
	cfg.URLs, cfg.CacheDir, cfg.Materialise = "nats://127.0.0.1:4222", "x", "a*b"
	require.ErrorContains(t, cfg.Validate(), "a * may only end a name")
}
