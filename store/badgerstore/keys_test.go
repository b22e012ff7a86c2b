package badgerstore

import (
	"bytes"
	mrand "math/rand"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"testing/quick"

	"github.com/ingestd/ingestd/store/rowengine"
)

// TestKeysInjective: the keys this backend keeps names in map distinct
// names to distinct keys, over arbitrary names (backslashes, '=' and
// commas included, and bytes of UTF-8 beyond ASCII; no NUL, which
// feed.CheckName refuses in every name), and no table's consumer prefix
// is a prefix of another table's consumer keys.
func TestKeysInjective(t *testing.T) {
	alphabet := []string{`\`, `=`, `,`, ` `, `a`, `b`, `é`, `\\`, `\=`, `m`, `c`}
	rng := rand.New(rand.NewPCG(7, 11))
	names := &quick.Config{MaxCount: 20000, Values: func(v []reflect.Value, _ *mrand.Rand) {
		for i := range v {
			var b strings.Builder
			for range rng.IntN(6) {
				b.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
			v[i] = reflect.ValueOf(b.String())
		}
	}}
	if err := quick.Check(func(a, b, _, _ string) bool {
		return bytes.Equal(metaKey(a), metaKey(b)) == (a == b)
	}, names); err != nil {
		t.Fatalf("metaKey: %v", err)
	}
	if err := quick.Check(func(t1, n1, t2, n2 string) bool {
		same := t1 == t2 && n1 == n2
		prefix := bytes.HasPrefix(consumerKey(t2, n2), consumerPrefix(t1))
		return bytes.Equal(consumerKey(t1, n1), consumerKey(t2, n2)) == same && prefix == (t1 == t2)
	}, names); err != nil {
		t.Fatalf("consumerKey: %v", err)
	}
}

// TestKeysAreTheOwners: every key this backend writes lies where the row
// engine leaves keys to its owner.
func TestKeysAreTheOwners(t *testing.T) {
	for _, k := range [][]byte{metaKey("t"), consumerKey("t", "c")} {
		if !bytes.Contains(rowengine.OwnerKeyspaces, k[:1]) {
			t.Fatalf("key %q is not in the owner's keyspaces %q", k, rowengine.OwnerKeyspaces)
		}
	}
	if !bytes.Equal(nextTIDKey, []byte{'n', 't'}) {
		t.Fatalf("the instance id high-water is at %q, not the owner's 'nt'", nextTIDKey)
	}
}
