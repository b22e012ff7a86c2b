package jsstore

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/rowengine"
)

// TestHostileNames: table names with what stream names and KV keys may
// not hold ('.', '*', '>', whitespace, path separators, invalid UTF-8)
// and a name of 32,000 bytes (feed's ceiling) each get their own stream
// and record, and come back byte for byte after a restart with their
// rows.
func TestHostileNames(t *testing.T) {
	h := newHarness(t, 1)
	cfg := h.config(t)
	s := h.open(t, cfg)
	names := []string{"a.b", "a*b", "a>b", "a b\tc", "a/b\\c", "\xff\xfe", "$KV.x.>", strings.Repeat("n", 32000), strings.Repeat("n", 31999) + "m"}
	ids := map[string]uint64{}
	for i, name := range names {
		m := createTable(t, s, name)
		ids[name] = m.ID
		require.NoError(t, s.Append(ctx, []store.TableCommit{commit(m, true, int64(i), 2, 1)}, nil))
	}
	subjects := map[string]bool{}
	for _, name := range names {
		sub := s.placeOf(name).Subject
		require.LessOrEqual(t, len(sub), 255)
		require.Equal(t, 1, strings.Count(sub, "."), "two tokens: %s", sub)
		require.NotContains(t, sub, "*")
		require.NotContains(t, sub, ">")
		require.False(t, subjects[sub], "one subject per name")
		subjects[sub] = true
	}
	require.NoError(t, s.Close())
	s2 := h.open(t, cfg)
	t.Cleanup(func() { _ = s2.Close() })
	metas, err := s2.LoadTables(ctx)
	require.NoError(t, err)
	require.Len(t, metas, len(names))
	for _, m := range metas {
		require.Equal(t, ids[m.Name], m.ID, "name %q read back byte for byte", m.Name[:min(len(m.Name), 20)])
		require.Len(t, readAll(t, s2, m.ID, 0, math.MaxUint64).Seq, 2)
	}
}

// TestSyncIntervalWarning: a client without system account access cannot
// read the servers' sync_interval, and Open says so in a WARN naming the
// setting and how to verify it.
func TestSyncIntervalWarning(t *testing.T) {
	h := newHarness(t, 1)
	var logs bytes.Buffer
	s, err := Open(h.config(t), rowengine.DefaultConfig(), slog.New(slog.NewTextHandler(&logs, nil)), nil)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.Contains(t, logs.String(), "level=WARN")
	require.Contains(t, logs.String(), "sync_interval: always")
	require.Contains(t, logs.String(), "/varz")
}

// FuzzDecodeBody: a block body of either encoding never panics the
// decoder nor makes it allocate beyond the message, and what it decodes
// encodes (compact) and decodes again to the same (bytes may differ: a
// varint may be padded).
func FuzzDecodeBody(f *testing.F) {
	f.Add(appendBody(nil, []store.Series{{ID: 1, Tags: []store.Field{{Col: 1, Value: store.Value{Kind: store.KindTag, Str: "h"}}}}},
		[]int{1}, []store.Fragment{{Series: 1, Time: -5, Fields: []store.Field{{Col: 2, Value: store.Value{Kind: store.KindFloat, Num: 7}}}}, {Series: 1, Time: 9}}), true)
	f.Add(plainBodyV1, false)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, true)
	f.Fuzz(func(t *testing.T, b []byte, compact bool) {
		enc := encodingPlain
		if compact {
			enc = encodingCompact
		}
		body, err := decodeBody(b, enc, nil)
		if err != nil {
			require.ErrorIs(t, err, errCodec)
			return
		}
		if !compact && slices.ContainsFunc(body.frags, func(f store.Fragment) bool {
			return slices.ContainsFunc(f.Fields, func(fl store.Field) bool { return fl.Value.Kind < store.KindTag || fl.Value.Kind > store.KindBool })
		}) {
			return // a kind no writer sends, which only the plain encoding carries
		}
		again, err := decodeBody(appendBody(nil, body.series, body.writes, body.frags), encodingCompact, nil)
		require.NoError(t, err)
		require.Equal(t, body, again, "encode and decode again: the same body")
	})
}

// plainBodyV1 is a body of encodingPlain, as streams written before
// encodingCompact hold: series 3 {1: "h1"}, write boundary 1, and two
// fragments of series 3, at 1.7e18 ns (float 100 in column 2, int -5 in
// column 3) and 10 s later (string "ok", true, uint 9 in columns 4-6).
var plainBodyV1, _ = hex.DecodeString("0103010101026831010102038080d0e2c6bfce972f020202808080808080c0ac400303fbffffffffffffffff01038090afa391c0ce972f030405026f6b050601060409")

// TestDecodeBodyEncodings: a stream's older plain bodies decode as they
// were written, a compact body to what was encoded, and its bytes are
// fewer; an unknown encoding is refused.
func TestDecodeBodyEncodings(t *testing.T) {
	minus5 := int64(-5)
	series := []store.Series{{ID: 3, Tags: []store.Field{{Col: 1, Value: store.Value{Kind: store.KindTag, Str: "h1"}}}}}
	frags := []store.Fragment{
		{Series: 3, Time: 1700000000000000000, Fields: []store.Field{
			{Col: 2, Value: store.Value{Kind: store.KindFloat, Num: math.Float64bits(100)}},
			{Col: 3, Value: store.Value{Kind: store.KindInt, Num: uint64(minus5)}}}},
		{Series: 3, Time: 1700000010000000000, Fields: []store.Field{
			{Col: 4, Value: store.Value{Kind: store.KindString, Str: "ok"}},
			{Col: 5, Value: store.Value{Kind: store.KindBool, Num: 1}},
			{Col: 6, Value: store.Value{Kind: store.KindUint, Num: 9}}}},
	}
	want := body{series: series, writes: []int{1}, frags: frags, cols: 7}
	got, err := decodeBody(plainBodyV1, encodingPlain, nil)
	require.NoError(t, err)
	require.Equal(t, want, got, "a plain body")
	compact := appendBody(nil, series, []int{1}, frags)
	got, err = decodeBody(compact, encodingCompact, nil)
	require.NoError(t, err)
	require.Equal(t, want, got, "a compact body")
	require.Less(t, len(compact), len(plainBodyV1))
	_, err = decodeBody(compact, "3", nil)
	require.ErrorIs(t, err, errCodec)
	_, err = decodeBody(compact, encodingPlain, nil)
	require.Error(t, err, "a compact body read as plain")
}

// TestDecodeBodyFieldSlab: the fragments' fields of a block come from a
// few shared allocations, not one each, and the body says the highest
// column it uses.
func TestDecodeBodyFieldSlab(t *testing.T) {
	frags := make([]store.Fragment, 2000)
	for i := range frags {
		frags[i] = store.Fragment{Series: 1, Time: int64(i), Fields: []store.Field{
			{Col: 2, Value: store.Value{Kind: store.KindFloat, Num: uint64(i)}},
			{Col: 5, Value: store.Value{Kind: store.KindInt, Num: 7}}}}
	}
	b := appendBody(nil, []store.Series{{ID: 1, Tags: []store.Field{{Col: 1, Value: store.Value{Kind: store.KindTag, Str: "h"}}}}}, nil, frags)
	got, err := decodeBody(b, encodingCompact, nil)
	require.NoError(t, err)
	require.Equal(t, frags, got.frags)
	require.Equal(t, 6, got.cols)
	allocs := testing.AllocsPerRun(10, func() { _, _ = decodeBody(b, encodingCompact, nil) })
	require.Less(t, allocs, 20.0, "one allocation per fragment would be %d", len(frags))
	got.frags[0].Fields = append(got.frags[0].Fields, store.Field{Col: 9})
	require.Equal(t, frags[1].Fields, got.frags[1].Fields, "a list grown never writes over the next")

	// Decoded again and again into one scratch: the same fragments, and
	// once its room fits a body, no allocation at all (but the series',
	// which the feed keeps: none in this body).
	b = appendBody(nil, nil, nil, frags)
	var scr scratch
	for range 3 {
		got, err = decodeBody(b, encodingCompact, &scr)
		require.NoError(t, err)
		require.Equal(t, frags, got.frags)
	}
	allocs = testing.AllocsPerRun(10, func() { _, _ = decodeBody(b, encodingCompact, &scr) })
	require.Zero(t, allocs)
	got.frags[0].Fields = append(got.frags[0].Fields, store.Field{Col: 9})
	require.Equal(t, frags[1].Fields, got.frags[1].Fields, "a list grown never writes over the next")
}

// BenchmarkDecodeBody decodes a block of 1,000 TSBS-cpu-shaped fragments
// (ten integer fields each, a series each of 100): what a node that
// keeps a table pays per message another node wrote, with new room for
// every body and with a reused scratch (a follower's).
func BenchmarkDecodeBody(b *testing.B) {
	frags := make([]store.Fragment, 1000)
	for i := range frags {
		fields := make([]store.Field, 10)
		for j := range fields {
			fields[j] = store.Field{Col: uint32(j + 2), Value: store.Value{Kind: store.KindInt, Num: uint64(i*j) % 100}}
		}
		frags[i] = store.Fragment{Series: uint64(i % 100), Time: int64(i / 100 * 10e9), Fields: fields}
	}
	body := appendBody(nil, nil, nil, frags)
	for _, reuse := range []bool{false, true} {
		b.Run(fmt.Sprintf("scratch=%v", reuse), func(b *testing.B) {
			var scr *scratch
			if reuse {
				scr = &scratch{}
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decodeBody(body, encodingCompact, scr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
