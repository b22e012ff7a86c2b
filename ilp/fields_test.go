package ilp

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
	// The first line's point has its own tags; the later ones share the
	// known series' copy.
	for _, pt := range b.Points[1:] {
		require.Same(t, &b.Points[1].Tags[0], &pt.Tags[0], "line %d: tags shared with line 2", pt.Line)
		require.Equal(t, "dc=x,host=a", pt.Series)
	}
	require.Equal(t, b.Points[0].Tags, b.Points[1].Tags)
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

// TestFieldShape checks lines of a known series against the keys of its
// last plain line (its shape): the same keys, more, fewer, reordered, a
// key that extends or shortens a shape key, a repeated key, a tag key or
// a reserved key after shape keys, and a shape key without its '='. Each
// body must parse exactly as its lines do alone.
func TestFieldShape(t *testing.T) {
	tests := []struct {
		name string
		body string
	}{
		{"same keys", "m,t=a x=1i,y=2i 1\nm,t=a x=3i,y=4i 2\nm,t=a x=5i,y=6i 3"},
		{"one more", "m,t=a x=1i 1\nm,t=a x=2i,y=3i 2\nm,t=a x=4i,y=5i 3"},
		{"one fewer", "m,t=a x=1i,y=2i 1\nm,t=a x=3i 2\nm,t=a x=4i,y=5i 3"},
		{"reordered", "m,t=a x=1i,y=2i 1\nm,t=a y=3i,x=4i 2\nm,t=a x=5i,y=6i 3"},
		{"longer key", "m,t=a x=1i 1\nm,t=a xx=2i 2\nm,t=a x=3i 3"},
		{"shorter key", "m,t=a xy=1i 1\nm,t=a x=2i 2\nm,t=a xy=3i 3"},
		{"repeated key", "m,t=a x=1i,y=2i 1\nm,t=a x=3i,y=4i,x=5i 2"},
		{"tag key", "m,t=a x=1i 1\nm,t=a x=2i,t=3i 2\nm,t=a x=4i 3"},
		{"reserved key", "m,t=a x=1i 1\nm,t=a x=2i,x_seq=1i 2\nm,t=a x=2i,time=1i 3"},
		{"no equals sign", "m,t=a x=1i 1\nm,t=a x 2\nm,t=a x=\nm,t=a x= 4\nm,t=a xy1i 5"},
		{"another type", "m,t=a x=1i,y=true 1\nm,t=a x=1.5,y=\"s\" 2\nm,t=a x=2u,y=F 3"},
		{"without timestamp", "m,t=a x=1i,y=2i\nm,t=a x=3i,y=4i\nm,t=a x=5i,y=6i 3"},
		{"two series", "m,t=a x=1i 1\nm,t=b y=1i 1\nm,t=a x=2i 2\nm,t=b x=2i 2\nm,t=a y=3i 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The first line twice: parsed in full, then by plainFields,
			// which makes its keys the shape.
			first, _, _ := strings.Cut(tt.body, "\n")
			body := []byte(first + "\n" + tt.body)
			require.Equal(t, parseAlone(body, DefaultLimits(), Nanosecond), parseWhole(body, DefaultLimits(), Nanosecond))
		})
	}
}

// TestParserReuseFields checks that after Reuse a Parser parses a body of
// known series into the field slabs of the bodies before it (no
// allocation at all, given the batch's points array), with the same points
// a fresh Parser returns.
func TestParserReuseFields(t *testing.T) {
	var body []byte
	for i := range 2 * slabLen {
		body = fmt.Appendf(body, "m,host=h%d a=%di,b=%d.5,c=%q %d\n", i%7, i, i, "s", i)
	}
	p := NewParser(DefaultLimits())
	b := &feed.Batch{}
	parse := func() {
		p.Reuse() // the previous body answered: its points are not read
		b.Points = b.Points[:0]
		errs, _ := p.ParseAll(b, body, 1, Nanosecond, 0)
		require.Empty(t, errs)
	}
	parse() // the series become known, the slabs and points are allocated
	require.Zero(t, testing.AllocsPerRun(3, parse))
	want, errs := parseWholePoints(body, DefaultLimits(), Nanosecond)
	require.Empty(t, errs)
	require.Equal(t, want, b.Points)
}

// TestParserCachesBounded checks the byte bounds of a Parser's caches
// against lines of long field keys: series whose lines carry 255 keys of
// 4,000 bytes made every pooled HTTP parser and every TCP connection keep
// a megabyte of keys per series as its shape (4,096 series: 4 GB), and the
// intern table 4,096 such keys. Summed from the caches themselves, what
// they hold stays within their bounds, and the lines still parse.
func TestParserCachesBounded(t *testing.T) {
	p := NewParser(DefaultLimits())
	for s := range 64 {
		var line strings.Builder
		fmt.Fprintf(&line, "shp,s=%d ", s)
		for f := range 255 {
			if f > 0 {
				line.WriteByte(',')
			}
			fmt.Fprintf(&line, "%s=1", strings.Repeat(string(rune('a'+f%26)), 3990)+fmt.Sprintf("_%d_%d", s, f))
		}
		for _, l := range []string{fmt.Sprintf("shp,s=%d f=1", s), line.String(), line.String()} {
			b := &feed.Batch{}
			require.Nil(t, p.Parse(b, []byte(l), 1, Nanosecond, 0))
			require.Len(t, b.Points, 1)
		}
	}
	series, interned := 0, 0
	for prefix, ks := range p.series {
		series += len(prefix) + len(ks.series)
		for _, tag := range ks.tags {
			series += len(tag.Value)
		}
		for _, k := range ks.shape {
			series += len(k) + 16
		}
	}
	for k := range p.intern {
		interned += len(k)
	}
	require.LessOrEqual(t, series, maxKnownSeriesBytes, "known series' prefixes and shapes")
	require.LessOrEqual(t, interned, maxInternedBytes, "interned keys")
	require.Equal(t, series, p.seriesBytes)
	require.Equal(t, interned, p.internedBytes)
}

// TestParserCacheBudget checks Config.MaxParserCacheBytes: the caches of
// every parser take from one budget (each TCP connection's and idle HTTP
// parser's caches are bounded, but 1,024 connections filled on purpose
// would hold gigabytes). A cache that finds no room does not grow (the
// refusals are counted), every line parses as a fresh parser's would, and
// Release gives a parser's bytes back.
func TestParserCacheBudget(t *testing.T) {
	const limit = 64 << 10
	b := &cacheBudget{limit: limit, refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "refused"})}
	var body []byte
	for i := range 2000 {
		body = fmt.Appendf(body, "m,host=h%04d%s,dc=x a=%di,b=%d.5 %d\n", i, strings.Repeat("v", 100), i, i, i+1)
	}
	want, errs := parseWholePoints(body, DefaultLimits(), Nanosecond)
	require.Empty(t, errs)
	var parsers []*Parser
	for range 2 {
		p := NewParser(DefaultLimits())
		p.budget = b
		for range 2 { // the second pass finds the series it kept known
			got := &feed.Batch{}
			errs, _ := p.ParseAll(got, body, 1, Nanosecond, 0)
			require.Empty(t, errs)
			require.Equal(t, want, got.Points)
			require.LessOrEqual(t, b.used.Load(), int64(limit))
		}
		parsers = append(parsers, p)
	}
	require.Positive(t, testutil.ToFloat64(b.refused), "entries refused at the budget")
	require.NotEmpty(t, parsers[0].series, "the first parser kept what fitted")
	for _, p := range parsers {
		p.Release()
	}
	require.Zero(t, b.used.Load(), "every byte given back")
}
