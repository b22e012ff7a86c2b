package feed

import (
	"errors"
	mrand "math/rand"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/quick"
)

// keyAlphabet favours the bytes the series key escapes, and a byte of
// UTF-8 beyond ASCII.
var keyAlphabet = []string{`\`, `\`, `=`, `=`, `,`, ` `, `a`, `b`, `é`, `\\`, `\=`, `\,`}

// randomTags returns up to 4 tags of random keys and values over
// keyAlphabet (empty ones included), sorted by key, without duplicates.
func randomTags(rng *rand.Rand) []Tag {
	word := func() string {
		var b strings.Builder
		for range rng.IntN(5) {
			b.WriteString(keyAlphabet[rng.IntN(len(keyAlphabet))])
		}
		return b.String()
	}
	var tags []Tag
	for range rng.IntN(5) {
		k := word()
		if !slices.ContainsFunc(tags, func(t Tag) bool { return t.Key == k }) {
			tags = append(tags, Tag{Key: k, Value: word()})
		}
	}
	slices.SortFunc(tags, func(x, y Tag) int { return strings.Compare(x.Key, y.Key) })
	return tags
}

// decodeSeries reads a series key back into its tags as the rules of
// AppendEscapedTag say; it fails on a key no tag set renders.
func decodeSeries(s string) ([]Tag, error) {
	if s == "" {
		return nil, nil
	}
	var tags []Tag
	var cur strings.Builder
	var key string
	inValue := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && tagEscaped[s[i+1]]:
			cur.WriteByte(s[i+1])
			i++
		case c == '\\' && i+1 == len(s):
			return nil, errors.New("a lone backslash ends the key")
		case c == '=' && !inValue:
			key, inValue = cur.String(), true
			cur.Reset()
		case c == ',' && inValue:
			tags = append(tags, Tag{Key: key, Value: cur.String()})
			cur.Reset()
			inValue = false
		case c == '=' || c == ',' || c == ' ':
			return nil, errors.New("an unescaped separator out of place")
		default:
			cur.WriteByte(c)
		}
	}
	if !inValue {
		return nil, errors.New("a tag without '='")
	}
	return append(tags, Tag{Key: key, Value: cur.String()}), nil
}

// TestSeriesKeyInjective: every tag set's series key reads back to that
// tag set alone (so no two tag sets share one), over random keys and
// values full of backslashes, equals signs, commas and spaces.
func TestSeriesKeyInjective(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cfg := &quick.Config{MaxCount: 20000, Values: func(v []reflect.Value, _ *mrand.Rand) {
		v[0] = reflect.ValueOf(randomTags(rng))
	}}
	roundTrip := func(tags []Tag) bool {
		got, err := decodeSeries(string(AppendSeries(nil, tags)))
		return err == nil && (len(got) == 0 && len(tags) == 0 || reflect.DeepEqual(got, tags))
	}
	require := func(ok bool, err error) {
		t.Helper()
		if !ok || err != nil {
			t.Fatal(err)
		}
	}
	require(true, quick.Check(roundTrip, cfg))
	// The pairs that shared a key before backslashes were escaped.
	for _, pair := range [][2][]Tag{
		{{{Key: `a=\`, Value: "v"}}, {{Key: `a\`, Value: "=v"}}},
		{{{Key: "a", Value: `x\`}, {Key: "b", Value: "y"}}, {{Key: "a", Value: `x\,b=y`}}},
		{{{Key: "k", Value: `\`}}, {{Key: "k", Value: `\\`}}},
	} {
		x, y := string(AppendSeries(nil, pair[0])), string(AppendSeries(nil, pair[1]))
		require(x != y, nil)
	}
	// A backslash before any other byte is kept as ILP writes it.
	require(string(AppendEscapedTag(nil, `C:\Windows`)) == `C:\Windows`, nil)
}
