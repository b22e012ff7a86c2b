package rowengine

import (
	"bytes"
	"encoding/binary"
	"math"
	mrand "math/rand"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"testing/quick"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
)

// nameAlphabet favours the bytes that escape or separate elsewhere, and
// a byte of UTF-8 beyond ASCII; no NUL (feed.CheckName refuses it in
// every name).
var nameAlphabet = []string{`\`, `=`, `,`, ` `, `a`, `b`, `é`, `\\`, `\=`, `m`, `c`}

func randomName(rng *rand.Rand) string {
	var b strings.Builder
	for range rng.IntN(6) {
		b.WriteString(nameAlphabet[rng.IntN(len(nameAlphabet))])
	}
	return b.String()
}

// quickRand makes testing/quick draw its arguments with gen from one
// seeded generator (the run is reproducible).
func quickRand(n int, gen func(rng *rand.Rand, v []reflect.Value)) *quick.Config {
	rng := rand.New(rand.NewPCG(7, 11))
	return &quick.Config{MaxCount: n, Values: func(v []reflect.Value, _ *mrand.Rand) { gen(rng, v) }}
}

// TestKeysInjective: every key encoding of the engine maps distinct
// arguments to distinct keys, over arbitrary numbers, and a series' tag
// set, whatever its names, reads back exactly.
func TestKeysInjective(t *testing.T) {
	check := func(name string, f any, cfg *quick.Config) {
		t.Helper()
		if err := quick.Check(f, cfg); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// nums draws each argument of f by its type: a byte, an int64 of any
	// sign, or a uint64 of any magnitude.
	nums := func(f any) *quick.Config {
		ft := reflect.TypeOf(f)
		return quickRand(20000, func(rng *rand.Rand, v []reflect.Value) {
			for i := range v {
				switch ft.In(i).Kind() {
				case reflect.Uint8:
					v[i] = reflect.ValueOf(byte(rng.IntN(256)))
				case reflect.Int64:
					v[i] = reflect.ValueOf(int64(rng.Uint64()))
				default:
					v[i] = reflect.ValueOf(rng.Uint64() >> (rng.IntN(4) * 16))
				}
			}
		})
	}
	tk := func(ks byte, tid, a uint64) bool {
		k := tableKey(ks, tid, a)
		return len(k) == 17 && k[0] == ks && binary.BigEndian.Uint64(k[1:]) == tid && binary.BigEndian.Uint64(k[9:]) == a
	}
	check("tableKey", tk, nums(tk))
	pk := func(tid, sid uint64, ts, ts2 int64) bool {
		k, k2 := pointKey(nil, ksPoint, tid, sid, ts), pointKey(nil, ksPoint, tid, sid, ts2)
		return len(k) == 25 && pointKeyTime(k) == ts && binary.BigEndian.Uint64(k[1:]) == tid &&
			binary.BigEndian.Uint64(k[9:]) == sid && bytes.Compare(k, k2) == cmpInt(ts, ts2)
	}
	check("pointKey", pk, nums(pk))
	rk := func(tid, sid uint64, ts int64, n uint64) bool {
		k := refKey(tid, sid, ts, n)
		return len(k) == 33 && bytes.Equal(k[:25], pointKey(nil, ksRef, tid, sid, ts)) && binary.BigEndian.Uint64(k[25:]) == n
	}
	check("refKey", rk, nums(rk))
	// A series' stored tag set reads back exactly, whatever its values.
	tagSets := quickRand(20000, func(rng *rand.Rand, v []reflect.Value) {
		var tags []store.Field
		for c := range uint32(rng.IntN(5)) {
			tags = append(tags, store.Field{Col: c * uint32(rng.IntN(300)+1), Value: store.Value{Kind: store.KindTag, Str: randomName(rng)}})
		}
		v[0] = reflect.ValueOf(tags)
	})
	check("appendSeries", func(tags []store.Field) bool {
		got, err := decodeSeries(appendSeries(nil, tags))
		return err == nil && len(got) == len(tags) && (len(tags) == 0 || reflect.DeepEqual(got, tags))
	}, tagSets)
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestRunValues checks run values both ways: the deltas-of-deltas body
// (layout 9) and the plain one of layout 8 name the same times and
// references, for regular series, jittered ones, indexes that go down and
// deltas near the int64 limits; a series at a fixed interval costs two
// bytes a point.
func TestRunValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const step = int64(10e9) // 10 s in nanoseconds, a 5-byte uvarint
	cases := map[string]func(i int) (int64, uint64){
		"regular":  func(i int) (int64, uint64) { return 1_700_000_000e9 + int64(i)*step, uint64(3 * i) },
		"jittered": func(i int) (int64, uint64) { return int64(i)*step + rng.Int64N(1e6), uint64(i*50 + rng.IntN(9)) },
		"extreme":  func(i int) (int64, uint64) { return math.MinInt64 + int64(i)*(math.MaxInt64/64), uint64(i) << 57 },
	}
	for name, at := range cases {
		for _, n := range []int{1, 2, 128} {
			rb := runBuilder{}
			for i := range n {
				ts, idx := at(i)
				if i == 0 {
					rb.firstTs = ts
				}
				rb.add(ts, idx)
			}
			for _, kind := range []byte{'L', 'U'} {
				base := uint64(1 << 40)
				want := make(storedRun, n)
				for i := range n {
					want[i] = runEntry{ts: rb.ts[i], r: ref{block: base, idx: rb.idx[i]}}
					if kind == 'L' {
						want[i].r = ref{seq: base + rb.idx[i]}
					}
				}
				plain := rb.appendBody(binary.AppendUvarint([]byte{kind}, base))
				if name != "extreme" { // the plain body takes ascending times and indexes only
					got, err := decodeRun(plain, rb.firstTs)
					require.NoError(t, err)
					require.Equal(t, want, got, "%s/%d/%c layout 8", name, n, kind)
				}
				v := rb.encode(kind, base)
				got, err := decodeRun(v, rb.firstTs)
				require.NoError(t, err)
				require.Equal(t, want, got, "%s/%d/%c", name, n, kind)
				last, err := runLastTs(v, rb.firstTs)
				require.NoError(t, err)
				require.Equal(t, rb.ts[n-1], last)
				if name == "regular" && n == 128 {
					require.LessOrEqual(t, len(v), 1+6+2+4+2*n, "two bytes a point, and the interval once")
					require.Greater(t, len(plain), 6*n, "against six")
				}
			}
		}
	}
	// Descending indexes (no run writes them today) survive too.
	rb := runBuilder{firstTs: 5}
	for i := range 5 {
		rb.add(5+int64(i), uint64(100-7*i))
	}
	got, err := decodeRun(rb.encode('U', 1), 5)
	require.NoError(t, err)
	for i, e := range got {
		require.Equal(t, ref{block: 1, idx: uint64(100 - 7*i)}, e.r)
	}
}
