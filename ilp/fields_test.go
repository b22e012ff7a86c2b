package ilp

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/feed"
)

// TestKnownSeries checks that lines of a series the Parser has seen share
// its tags and series key (the known-series path ran), whether their field
// set is plain, needs the decoder (an escaped string, a repeated key) or is
// bad, in which case the error is the full parse's, column included.
func TestKnownSeries(t *testing.T) {
	body := []byte(`cpu,host=a,dc=x usage=1i,idle=2.5 10
cpu,host=a,dc=x usage=3i,note="say \"hi\"" 20
cpu,host=a,dc=x usage=4i,usage=5i 30
cpu,host=a,dc=x usage=6i,idle=oops 40
cpu,host=a,dc=x x_seq=1i 50
cpu,host=a,dc=x host=1i 60
cpu,host=a,dc=x usage=7u,ok=true,s="plain" 70`)
	p := NewParser(DefaultLimits())
	b := &feed.Batch{}
	errs, _ := p.ParseAll(b, body, 1, Nanosecond, 0)
	require.Len(t, b.Points, 4)
	for _, pt := range b.Points[1:] {
		require.Same(t, &b.Points[0].Tags[0], &pt.Tags[0], "line %d: tags shared with line 1", pt.Line)
		require.Equal(t, "dc=x,host=a", pt.Series)
	}
	require.Equal(t, `say "hi"`, b.Points[1].Fields[1].Value.Str)
	require.Equal(t, []feed.PointField{{Key: "usage", Value: feed.Value{Kind: feed.KindInt, Num: 5}}}, b.Points[2].Fields)
	require.Equal(t, feed.Value{Kind: feed.KindUint, Num: 7}, b.Points[3].Fields[0].Value)
	require.Equal(t, feed.Value{Kind: feed.KindBool, Num: 1}, b.Points[3].Fields[1].Value)
	require.Equal(t, int64(70), b.Points[3].Time)

	require.Len(t, errs, 3)
	for i, line := range []string{
		"cpu,host=a,dc=x usage=6i,idle=oops 40",
		"cpu,host=a,dc=x x_seq=1i 50",
		"cpu,host=a,dc=x host=1i 60",
	} {
		alone := NewParser(DefaultLimits()).Parse(&feed.Batch{}, []byte(line), errs[i].Line, Nanosecond, 0)
		require.NotNil(t, alone, line)
		require.Equal(t, renderError(alone), renderError(errs[i]), "known series and alone: %s", line)
	}
	require.Equal(t, ReasonReservedKey, errs[1].Reason)
	require.Equal(t, ReasonTagField, errs[2].Reason)
}

// TestSmallInt checks smallInt against strconv.ParseInt on its domain and
// its refusals, and plainFields' use of it against the decoder's path for
// the edge cases of integers and unsigned integers.
func TestSmallInt(t *testing.T) {
	for _, s := range []string{"0", "-0", "7", "-7", "007", "123456789012345678", "-123456789012345678"} {
		x, ok := smallInt([]byte(s))
		require.True(t, ok, s)
		want, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
		require.Equal(t, want, x, s)
	}
	for _, s := range []string{"", "-", "+1", "1234567890123456789", "1_0", "1.0", "0x1", " 1"} {
		_, ok := smallInt([]byte(s))
		require.False(t, ok, s)
	}
	for _, v := range []string{"-0u", "-1u", "0u", "18446744073709551615u", "18446744073709551616u", "9223372036854775807i", "9223372036854775808i", "-9223372036854775808i", "-0i", "00i"} {
		// The first line makes the series known; the second is parsed by
		// plainFields.
		body := []byte("m,t=a f=1u 1\nm,t=a f=" + v + " 2")
		require.Equal(t, parseAlone(body, DefaultLimits(), Nanosecond), parseWhole(body, DefaultLimits(), Nanosecond), v)
	}
}
