package badgerstore

import (
	"bytes"
	"encoding/binary"
	mrand "math/rand"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"testing/quick"

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

// TestKeysInjective: every key encoding of the store maps distinct
// arguments to distinct keys, over arbitrary names (backslashes, '=' and
// commas included) and numbers, and no table's consumer prefix is a
// prefix of another table's consumer keys.
func TestKeysInjective(t *testing.T) {
	check := func(name string, f any, cfg *quick.Config) {
		t.Helper()
		if err := quick.Check(f, cfg); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	names4 := quickRand(20000, func(rng *rand.Rand, v []reflect.Value) {
		for i := range v {
			v[i] = reflect.ValueOf(randomName(rng))
		}
	})
	check("metaKey", func(a, b, _, _ string) bool {
		return bytes.Equal(metaKey(a), metaKey(b)) == (a == b)
	}, names4)
	check("consumerKey", func(t1, n1, t2, n2 string) bool {
		same := t1 == t2 && n1 == n2
		prefix := bytes.HasPrefix(consumerKey(t2, n2), consumerPrefix(t1))
		return bytes.Equal(consumerKey(t1, n1), consumerKey(t2, n2)) == same && prefix == (t1 == t2)
	}, names4)
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
