package httpapi

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/feed"
)

// TestAppendRFC3339Nano checks the drain's cached time rendering against
// time.Format(RFC3339Nano) in UTC, across second boundaries, negative
// times, trailing-zero fractions and the int64 extremes.
func TestAppendRFC3339Nano(t *testing.T) {
	vals := []int64{0, 1, -1, 999_999_999, -999_999_999, 1e9, -1e9, 1_500_000_000, 1767225600000000000,
		1767225600100000000, 1767225600000000010, math.MaxInt64, math.MinInt64, math.MinInt64 + 1, -62135596800000000000 / 10}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20_000 {
		vals = append(vals, rng.Int64(), rng.Int64N(4e18)-2e18, 1767225600000000000+rng.Int64N(3)*1e9+rng.Int64N(2)*rng.Int64N(1e9))
	}
	var e encoder
	for _, ns := range vals {
		want := time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
		require.Equal(t, want, string(e.appendRFC3339Nano(nil, ns)), "ns=%d", ns)
	}
}

// TestAppendStringPlainPrefix checks that strings with a plain prefix and
// something to escape after it render as encoding/json renders them.
func TestAppendStringPlainPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"":                   `""`,
		"host_1":             `"host_1"`,
		`a"b`:                `"a\"b"`,
		"abc\n":              `"abc\n"`,
		"tab\there\\":        `"tab\there\\"`,
		"caf\u00e9\u2028x":   `"café\u2028x"`,
		"bad\xffutf8":        `"bad\ufffdutf8"`,
		"ctl\x01":            `"ctl\u0001"`,
		"<html>&amp;</html>": `"<html>&amp;</html>"`,
	} {
		require.Equal(t, want, string(appendString(nil, in)), "%q", in)
	}
}

// TestAppendIntegers checks the drain's integer rendering against strconv
// around the fast paths' bounds and at the extremes.
func TestAppendIntegers(t *testing.T) {
	e := encoder{}
	for _, i := range []int64{0, 1, 9, 10, 11, 99, 100, 101, -1, -9, -10, -99, -100, math.MaxInt64, math.MinInt64, math.MinInt64 + 1} {
		require.Equal(t, strconv.FormatInt(i, 10), string(e.value(nil, feed.Value{Kind: feed.KindInt, Num: uint64(i)})))
	}
	for _, u := range []uint64{0, 9, 10, 99, 100, math.MaxUint64, 1 << 63} {
		require.Equal(t, strconv.FormatUint(u, 10), string(e.value(nil, feed.Value{Kind: feed.KindUint, Num: u})))
		require.Equal(t, strconv.FormatUint(u, 10), string(e.value(nil, feed.Value{Kind: feed.KindSeq, Num: u})))
	}
}

// TestAppendUint checks the drain's integer rendering against
// strconv.AppendUint: every power of ten and its neighbours, the uint64
// extremes and random values of every length, appended after a prefix
// and at a buffer's full capacity.
func TestAppendUint(t *testing.T) {
	vals := []uint64{0, 9, 10, 11, 99, 100, 101, math.MaxUint64, math.MaxUint64 - 1, 1 << 63}
	for p := uint64(10); p <= 1e19; p *= 10 {
		vals = append(vals, p-1, p, p+1)
		if p == 1e19 {
			break
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20_000 {
		vals = append(vals, rng.Uint64()>>rng.UintN(64))
	}
	for _, v := range vals {
		want := strconv.AppendUint([]byte("x,"), v, 10)
		require.Equal(t, string(want), string(appendUint([]byte("x,"), v)), "v=%d", v)
		full := make([]byte, 3, 3)
		require.Equal(t, "\x00\x00\x00"+strconv.FormatUint(v, 10), string(appendUint(full, v)), "v=%d at capacity", v)
	}
}

// TestPlainPrefix checks the word-at-a-time scan of appendString against
// the byte-by-byte one: every byte value at every position of strings of
// 0 to 24 bytes, and random strings mixing plain and special bytes.
func TestPlainPrefix(t *testing.T) {
	slow := func(s string) int {
		i := 0
		for i < len(s) && jsonPlain[s[i]] {
			i++
		}
		return i
	}
	for n := range 25 {
		for pos := range n {
			for c := range 256 {
				b := []byte(strings.Repeat("a", n))
				b[pos] = byte(c)
				require.Equal(t, slow(string(b)), plainPrefix(string(b)), "%q", b)
			}
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	special := []byte{0, 0x1f, 0x20, '"', '\\', 0x7f, 0x80, 0xff, '!', '#', '[', ']', '~'}
	for range 50_000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
			if rng.IntN(8) == 0 {
				b[i] = special[rng.IntN(len(special))]
			}
		}
		require.Equal(t, slow(string(b)), plainPrefix(string(b)), "%q", b)
	}
}

// TestEncoderPlainCache checks that the encoder's cache of plain strings
// renders every string as appendString does, twice over, when strings
// share an address: prefixes of one string, plain and needing escapes.
func TestEncoderPlainCache(t *testing.T) {
	base := "host_1\"quoted\\ and\nmore"
	var e encoder
	for range 2 {
		for n := 0; n <= len(base); n++ {
			for _, kind := range []feed.Kind{feed.KindTag, feed.KindString} {
				s := base[:n]
				require.Equal(t, string(appendString(nil, s)), string(e.value(nil, feed.Value{Kind: kind, Str: s})), "%q", s)
			}
		}
	}
	require.Equal(t, base[:6], *e.plainSlot(base), "the longest plain prefix is cached")
}

// TestSplitEscaped checks the drain's in: and has lists
// (docs/contract.md#filters): commas split, a backslash escapes a comma or
// a backslash, any other backslash stays.
func TestSplitEscaped(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"a", []string{"a"}},
		{"a,b", []string{"a", "b"}},
		{`a\,b,c`, []string{"a,b", "c"}},
		{`a\\,b`, []string{`a\`, "b"}},
		{`a\b`, []string{`a\b`}},
		{"a,", []string{"a", ""}},
		{"", []string{""}},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			require.Equal(t, tc.want, splitEscaped(tc.in))
		})
	}
}

// TestNewColumnsHeader checks the Ingestd-New-Columns header: names
// query-escaped, kinds after the last colon, and at most
// maxNewColumnsHeaderBytes of pairs, whatever the names.
func TestNewColumnsHeader(t *testing.T) {
	h, all := newColumnsHeader([]feed.Column{{Name: "a,b:c", Kind: feed.KindTag}, {Name: "é x", Kind: feed.KindFloat}})
	require.True(t, all)
	require.Equal(t, "a%2Cb%3Ac:tag,%C3%A9+x:float", h)
	long := make([]feed.Column, 100)
	for i := range long {
		long[i] = feed.Column{Name: strings.Repeat(",", 1000) + strconv.Itoa(i), Kind: feed.KindInt}
	}
	h, all = newColumnsHeader(long)
	require.False(t, all)
	require.LessOrEqual(t, len(h), maxNewColumnsHeaderBytes)
	require.Equal(t, 21, strings.Count(h, ":integer"), "the pairs that fit, each whole")
}
