package jsstore

import (
	mrand "math/rand"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"testing/quick"
)

// TestKeysInjective: the names of table records, streams and series keys
// differ for distinct names and tag-set keys, short and long (hashed)
// alike, over names full of backslashes, '=' and commas.
func TestKeysInjective(t *testing.T) {
	alphabet := []string{`\`, `=`, `,`, ` `, `.`, `a`, `é`, `*`, `>`}
	rng := rand.New(rand.NewPCG(3, 5))
	name := func() string {
		var b strings.Builder
		n := rng.IntN(8)
		if rng.IntN(8) == 0 {
			n = 120 + rng.IntN(20) // past the 200 bytes of base32 that are hashed
		}
		for range n {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	cfg := &quick.Config{MaxCount: 20000, Values: func(v []reflect.Value, _ *mrand.Rand) {
		a := name()
		b := a
		if rng.IntN(2) == 0 {
			b = name()
		}
		v[0], v[1] = reflect.ValueOf(a), reflect.ValueOf(b)
	}}
	s := &Store{}
	f := func(a, b string) bool {
		same := a == b
		return (encodeName(a) == encodeName(b)) == same && (s.tableKey(a) == s.tableKey(b)) == same &&
			(seriesKey(1, a) == seriesKey(1, b)) == same && seriesKey(1, a) != seriesKey(2, a)
	}
	if err := quick.Check(f, cfg); err != nil {
		t.Fatal(err)
	}
}
