package ilp

import (
	"math"
	"runtime"
	"strings"
	"testing"
	"unsafe"
	"weak"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/feed"
)

// Value constructors for expected points.
func fl(x float64) feed.Value { return feed.Value{Kind: feed.KindFloat, Num: math.Float64bits(x)} }
func in(x int64) feed.Value   { return feed.Value{Kind: feed.KindInt, Num: uint64(x)} }
func ui(x uint64) feed.Value  { return feed.Value{Kind: feed.KindUint, Num: x} }
func st(s string) feed.Value  { return feed.Value{Kind: feed.KindString, Str: s} }
func bo(b bool) feed.Value {
	if b {
		return feed.Value{Kind: feed.KindBool, Num: 1}
	}
	return feed.Value{Kind: feed.KindBool}
}

// f is one expected field.
func f(k string, v feed.Value) feed.PointField { return feed.PointField{Key: k, Value: v} }

// wantErr is an expected *ParseError; contains are substrings of its
// message.
type wantErr struct {
	reason   string
	column   int
	contains []string
}

// parseNow is the receive time handed to the parser in these tests.
const parseNow = int64(1_700_000_000_123_456_789)

// parseLineNo is the line number handed to Parse in these tests.
const parseLineNo = 7

// requireParseError checks a *ParseError against want.
func requireParseError(t testing.TB, want wantErr, line int, got *ParseError) {
	t.Helper()
	require.NotNil(t, got, "want a %s error", want.reason)
	require.Equal(t, line, got.Line, "line of %v", got)
	require.Equal(t, want.reason, got.Reason, "reason of %v", got)
	require.Equal(t, want.column, got.Column, "column of %v", got)
	if want.reason == ReasonSyntax {
		require.Positive(t, got.Column, "a syntax error has a column: %v", got)
	}
	for _, s := range want.contains {
		require.Contains(t, got.Error(), s)
	}
	require.NotNil(t, got.Err)
	require.ErrorIs(t, got, got.Err, "ParseError unwraps to Err")
}

func TestParse(t *testing.T) {
	small := Limits{MaxLineBytes: 16, MaxKeyBytes: 4, MaxStringBytes: 5}
	tests := []struct {
		name string
		line string
		prec Precision // zero means Nanosecond
		lim  *Limits   // nil means DefaultLimits()
		// want is the point (Line is checked separately); nil with a nil
		// err means the line adds nothing.
		want *feed.Point
		err  *wantErr
	}{
		// Escapes.
		{
			name: "measurement escapes space and comma",
			line: `my\ meas\,ure v=1 1`,
			want: &feed.Point{Table: "my meas,ure", Fields: []feed.PointField{f("v", fl(1))}, Time: 1},
		},
		{
			name: "measurement keeps equals sign, quotes and other backslashes",
			line: `a=b"c\d v=1 1`,
			want: &feed.Point{Table: `a=b"c\d`, Fields: []feed.PointField{f("v", fl(1))}, Time: 1},
		},
		{
			name: "tag key and value escapes",
			line: `m,k\ 1\,\==v\ 1\,\= v=1 1`,
			want: &feed.Point{
				Table: "m", Series: `k\ 1\,\==v\ 1\,\=`,
				Tags:   []feed.Tag{{Key: "k 1,=", Value: "v 1,="}},
				Fields: []feed.PointField{f("v", fl(1))}, Time: 1,
			},
		},
		{
			name: "tag value keeps quotes and backslashes literal",
			line: `m,p=C:\dir\\x,q="a" v=1 1`,
			want: &feed.Point{
				// The series key doubles a backslash before a backslash.
				Table: "m", Series: `p=C:\dir\\\x,q="a"`,
				Tags:   []feed.Tag{{Key: "p", Value: `C:\dir\\x`}, {Key: "q", Value: `"a"`}},
				Fields: []feed.PointField{f("v", fl(1))}, Time: 1,
			},
		},
		{
			name: "double backslash before an escaped space in a tag value",
			line: `m,p=C:\\ x v=1 1`,
			want: &feed.Point{
				// The series key doubles a backslash before a space.
				Table: "m", Series: `p=C:\\\ x`,
				Tags:   []feed.Tag{{Key: "p", Value: `C:\ x`}},
				Fields: []feed.PointField{f("v", fl(1))}, Time: 1,
			},
		},
		{
			name: "field key escapes",
			line: `m f\ 1\,\=x=1 1`,
			want: &feed.Point{Table: "m", Fields: []feed.PointField{f("f 1,=x", fl(1))}, Time: 1},
		},
		{
			name: "string escapes decode to the character",
			line: `m s="back\\slash quote\" nl\n tab\t cr\r" 1`,
			want: &feed.Point{Table: "m", Fields: []feed.PointField{f("s", st("back\\slash quote\" nl\n tab\t cr\r"))}, Time: 1},
		},
		{
			name: "other backslashes in a string stay literal",
			line: `m s="C:\path\x\ \,\=" 1`,
			want: &feed.Point{Table: "m", Fields: []feed.PointField{f("s", st(`C:\path\x\ \,\=`))}, Time: 1},
		},
		{
			name: "escaped backslash before the closing quote",
			line: `m s="a\\",v=1 1`,
			want: &feed.Point{Table: "m", Fields: []feed.PointField{f("s", st(`a\`)), f("v", fl(1))}, Time: 1},
		},
		{
			name: "string with spaces, commas and equals signs",
			line: `m s="a b,c=d" 1`,
			want: &feed.Point{Table: "m", Fields: []feed.PointField{f("s", st("a b,c=d"))}, Time: 1},
		},
		{
			name: "raw newline inside a string",
			line: "m s=\"a\nb\" 1",
			want: &feed.Point{Table: "m", Fields: []feed.PointField{f("s", st("a\nb"))}, Time: 1},
		},
		{
			name: "empty string",
			line: `m s="" 1`,
			want: &feed.Point{Table: "m", Fields: []feed.PointField{f("s", st(""))}, Time: 1},
		},

		// Tags.
		{
			name: "tags are sorted and the series is canonical",
			line: `m,zone=b\ 1,host=h\,1,az=x\=y v=1 1`,
			want: &feed.Point{
				Table: "m", Series: `az=x\=y,host=h\,1,zone=b\ 1`,
				Tags:   []feed.Tag{{Key: "az", Value: "x=y"}, {Key: "host", Value: "h,1"}, {Key: "zone", Value: "b 1"}},
				Fields: []feed.PointField{f("v", fl(1))}, Time: 1,
			},
		},
		{
			name: "no tags is the empty series",
			line: `m v=1 1`,
			want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: 1},
		},
		{
			name: "duplicate tag key",
			line: `m,a=1,b=2,a=3 v=1 1`,
			err:  &wantErr{reason: ReasonDuplicateTag, contains: []string{`duplicate tag key "a"`}},
		},
		{
			name: "duplicate tag key with the same value",
			line: `m,b=1,b=1 v=1 1`,
			err:  &wantErr{reason: ReasonDuplicateTag, contains: []string{`"b"`}},
		},
		{
			name: "key used as tag and field",
			line: `m,a=1 a=1 1`,
			err:  &wantErr{reason: ReasonTagField, contains: []string{`"a"`}},
		},

		// Fields.
		{
			name: "duplicate field key of one type: last wins",
			line: `m a=1,b=2i,a=3 1`,
			want: &feed.Point{Table: "m", Fields: []feed.PointField{f("a", fl(3)), f("b", in(2))}, Time: 1},
		},
		{
			name: "duplicate field key with clashing types",
			line: `m a=1,a=1i 1`,
			err:  &wantErr{reason: ReasonFieldType, contains: []string{`field "a" appears twice`, "float", "integer"}},
		},
		{
			name: "duplicate string and boolean field",
			line: `m a="t",a=t 1`,
			err:  &wantErr{reason: ReasonFieldType, contains: []string{`"a"`}},
		},
		{
			name: "every field type",
			line: `m f=1.5,i=-2i,u=3u,s="x",b=t 1`,
			want: &feed.Point{Table: "m", Fields: []feed.PointField{
				f("f", fl(1.5)), f("i", in(-2)), f("u", ui(3)), f("s", st("x")), f("b", bo(true)),
			}, Time: 1},
		},
		{
			name: "integer limits",
			line: `m a=9223372036854775807i,b=-9223372036854775808i,c=18446744073709551615u,d=0u 1`,
			want: &feed.Point{Table: "m", Fields: []feed.PointField{
				f("a", in(math.MaxInt64)), f("b", in(math.MinInt64)), f("c", ui(math.MaxUint64)), f("d", ui(0)),
			}, Time: 1},
		},
		{
			name: "integer overflow",
			line: `m a=9223372036854775808i 1`,
			err:  &wantErr{reason: ReasonSyntax, column: 5, contains: []string{`field "a"`, "out of range"}},
		},
		{
			name: "integer underflow",
			line: `m a=1i,b=-9223372036854775809i 1`,
			err:  &wantErr{reason: ReasonSyntax, column: 10, contains: []string{`field "b"`, "out of range"}},
		},
		{
			name: "unsigned overflow",
			line: `m a=18446744073709551616u 1`,
			err:  &wantErr{reason: ReasonSyntax, column: 5, contains: []string{`field "a"`, "out of range"}},
		},
		{
			name: "negative unsigned",
			line: `m a=-1u 1`,
			err:  &wantErr{reason: ReasonSyntax, column: 5, contains: []string{`field "a"`}},
		},
		{
			name: "fractional integer",
			line: `m a=1.5i 1`,
			err:  &wantErr{reason: ReasonSyntax, column: 5, contains: []string{`field "a"`}},
		},
		{
			name: "float forms",
			line: `m a=1,b=1.5,c=-1.5e3,d=.5,e=-0,g=1E2,h=5. 1`,
			want: &feed.Point{Table: "m", Fields: []feed.PointField{
				f("a", fl(1)), f("b", fl(1.5)), f("c", fl(-1500)), f("d", fl(0.5)), f("e", fl(math.Copysign(0, -1))), f("g", fl(100)), f("h", fl(5)),
			}, Time: 1},
		},
		{
			name: "float overflow",
			line: `m a=1e400 1`,
			err:  &wantErr{reason: ReasonSyntax, column: 5, contains: []string{`field "a"`}},
		},
		{
			name: "underscores in a float",
			line: `m a=1_000 1`,
			err:  &wantErr{reason: ReasonSyntax, column: 5, contains: []string{`field "a"`, "1_000"}},
		},
		{
			name: "hex float",
			line: `m a=1,b=0x1p-2 1`,
			err:  &wantErr{reason: ReasonSyntax, column: 9, contains: []string{`field "b"`, "0x1p-2"}},
		},
		{
			name: "NaN",
			line: `m a=NaN 1`,
			err:  &wantErr{reason: ReasonSyntax, column: 5},
		},
		{
			name: "negative NaN",
			line: `m a=-nan 1`,
			err:  &wantErr{reason: ReasonSyntax, column: 5, contains: []string{`field "a"`}},
		},
		{
			name: "Inf",
			line: `m a=Inf 1`,
			err:  &wantErr{reason: ReasonSyntax, column: 5},
		},
		{
			name: "+Inf",
			line: `m a=+Inf 1`,
			err:  &wantErr{reason: ReasonSyntax, column: 5},
		},
		{
			name: "-Inf",
			line: `m a=-Inf 1`,
			err:  &wantErr{reason: ReasonSyntax, column: 5, contains: []string{`field "a"`}},
		},
		{
			name: "-Infinity",
			line: `m a=-Infinity 1`,
			err:  &wantErr{reason: ReasonSyntax, column: 5, contains: []string{`field "a"`}},
		},
		{
			name: "true spellings",
			line: `m a=t,b=T,c=true,d=True,e=TRUE 1`,
			want: &feed.Point{Table: "m", Fields: []feed.PointField{
				f("a", bo(true)), f("b", bo(true)), f("c", bo(true)), f("d", bo(true)), f("e", bo(true)),
			}, Time: 1},
		},
		{
			name: "false spellings",
			line: `m a=f,b=F,c=false,d=False,e=FALSE 1`,
			want: &feed.Point{Table: "m", Fields: []feed.PointField{
				f("a", bo(false)), f("b", bo(false)), f("c", bo(false)), f("d", bo(false)), f("e", bo(false)),
			}, Time: 1},
		},
		{
			name: "mixed-case boolean",
			line: `m a=tRUE 1`,
			err:  &wantErr{reason: ReasonSyntax, column: 5, contains: []string{`field "a"`}},
		},
		{
			name: "unknown value type",
			line: `m a=yes 1`,
			err:  &wantErr{reason: ReasonSyntax, column: 5},
		},
		{
			name: "unterminated string",
			line: `m a="abc`,
			err:  &wantErr{reason: ReasonSyntax, column: 5, contains: []string{"closing quote"}},
		},

		// Reserved keys.
		{
			name: "x_ tag key",
			line: `m,x_host=a v=1 1`,
			err:  &wantErr{reason: ReasonReservedKey, contains: []string{`"x_host"`}},
		},
		{
			name: "x_ field key",
			line: `m v=1,x_seq=2i 1`,
			err:  &wantErr{reason: ReasonReservedKey, contains: []string{`"x_seq"`}},
		},
		{
			name: "tag key time",
			line: `m,time=a v=1 1`,
			err:  &wantErr{reason: ReasonReservedKey, contains: []string{`"time"`}},
		},
		{
			name: "field key time",
			line: `m time=1i 1`,
			err:  &wantErr{reason: ReasonReservedKey, contains: []string{`"time"`}},
		},
		{
			name: "keys merely containing x_ or time are fine",
			line: `m,ax_=1,times=2 timex=1,y_x=2 1`,
			want: &feed.Point{
				Table: "m", Series: "ax_=1,times=2",
				Tags:   []feed.Tag{{Key: "ax_", Value: "1"}, {Key: "times", Value: "2"}},
				Fields: []feed.PointField{f("timex", fl(1)), f("y_x", fl(2))}, Time: 1,
			},
		},

		// Missing fields and syntax errors.
		{
			name: "measurement only",
			line: `m`,
			err:  &wantErr{reason: ReasonNoFields, contains: []string{"no fields"}},
		},
		{
			name: "measurement and space",
			line: `m `,
			err:  &wantErr{reason: ReasonNoFields, contains: []string{"no fields"}},
		},
		{
			name: "tags only",
			line: `m,t=1`,
			err:  &wantErr{reason: ReasonNoFields, contains: []string{"no fields"}},
		},
		{
			name: "field key without value",
			line: `m f`,
			err:  &wantErr{reason: ReasonSyntax, column: 4},
		},
		{
			name: "field without value",
			line: `m f=`,
			err:  &wantErr{reason: ReasonSyntax, column: 5},
		},
		{
			name: "tag without value",
			line: `m,t= v=1`,
			err:  &wantErr{reason: ReasonSyntax, column: 5},
		},
		{
			name: "tag without equals sign",
			line: `m,t v=1`,
			err:  &wantErr{reason: ReasonSyntax, column: 3},
		},
		{
			name: "no measurement",
			line: `,t=1 v=1`,
			err:  &wantErr{reason: ReasonSyntax, column: 1},
		},
		{
			name: "trailing comma after fields",
			line: `m v=1,`,
			err:  &wantErr{reason: ReasonSyntax, column: 7},
		},
		{
			name: "garbage after a string",
			line: `m s="a"b 1`,
			err:  &wantErr{reason: ReasonSyntax, column: 8},
		},
		{
			name: "error column counts from a raw newline in a string",
			line: "m s=\"a\nbc\",v=x 1",
			err:  &wantErr{reason: ReasonSyntax, column: 7},
		},

		// Timestamps.
		{name: "ns", line: `m v=1 5`, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: 5}},
		{name: "us", line: `m v=1 5`, prec: Microsecond, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: 5_000}},
		{name: "ms", line: `m v=1 5`, prec: Millisecond, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: 5_000_000}},
		{name: "s", line: `m v=1 5`, prec: Second, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: 5_000_000_000}},
		{name: "m", line: `m v=1 5`, prec: Minute, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: 300_000_000_000}},
		{name: "h", line: `m v=1 5`, prec: Hour, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: 18_000_000_000_000}},
		{name: "negative s", line: `m v=1 -5`, prec: Second, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: -5_000_000_000}},
		{name: "zero", line: `m v=1 0`, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: 0}},
		{name: "max ns accepted", line: `m v=1 9223372036854775806`, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: 9223372036854775806}},
		{name: "min ns accepted", line: `m v=1 -9223372036854775806`, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: -9223372036854775806}},
		{name: "MaxInt64 ns rejected", line: `m v=1 9223372036854775807`, err: &wantErr{reason: ReasonTimestamp, column: 7, contains: []string{"9223372036854775807"}}},
		{name: "-MaxInt64 ns rejected", line: `m v=1 -9223372036854775807`, err: &wantErr{reason: ReasonTimestamp, column: 7, contains: []string{"-9223372036854775807"}}},
		{name: "MinInt64 ns rejected", line: `m v=1 -9223372036854775808`, err: &wantErr{reason: ReasonTimestamp, column: 7}},
		{name: "beyond int64 rejected", line: `m v=1 9223372036854775808`, err: &wantErr{reason: ReasonTimestamp, column: 7}},
		{name: "max us accepted", line: `m v=1 9223372036854775`, prec: Microsecond, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: 9223372036854775000}},
		{name: "us overflow rejected", line: `m v=1 9223372036854776`, prec: Microsecond, err: &wantErr{reason: ReasonTimestamp, column: 7}},
		{name: "max ms accepted", line: `m v=1 -9223372036854`, prec: Millisecond, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: -9223372036854000000}},
		{name: "ms overflow rejected", line: `m v=1 -9223372036855`, prec: Millisecond, err: &wantErr{reason: ReasonTimestamp, column: 7}},
		{name: "max s accepted", line: `m v=1 9223372036`, prec: Second, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: 9223372036000000000}},
		{name: "s overflow rejected", line: `m v=1 9223372037`, prec: Second, err: &wantErr{reason: ReasonTimestamp, column: 7}},
		{name: "max m accepted", line: `m v=1 153722867`, prec: Minute, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: 153722867 * 60_000_000_000}},
		{name: "m overflow rejected", line: `m v=1 153722868`, prec: Minute, err: &wantErr{reason: ReasonTimestamp, column: 7}},
		{name: "max h accepted", line: `m v=1 -2562047`, prec: Hour, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: -2562047 * 3_600_000_000_000}},
		{name: "h overflow rejected", line: `m v=1 -2562048`, prec: Hour, err: &wantErr{reason: ReasonTimestamp, column: 7}},
		{name: "h overflow of int64 rejected", line: `m v=1 9223372036854775807`, prec: Hour, err: &wantErr{reason: ReasonTimestamp, column: 7}},
		{name: "missing timestamp gets now", line: `m v=1`, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: parseNow}},
		{name: "missing timestamp gets now truncated to the hour", line: `m v=1`, prec: Hour, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: parseNow - parseNow%int64(Hour)}},
		{name: "missing timestamp gets now truncated to the millisecond", line: `m v=1`, prec: Millisecond, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: 1_700_000_000_123_000_000}},
		{name: "trailing space without timestamp gets now", line: `m v=1 `, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: parseNow}},
		{name: "spaces around the timestamp", line: `m v=1  5 `, want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: 5}},
		{name: "fractional timestamp", line: `m v=1 1.5`, err: &wantErr{reason: ReasonSyntax, column: 7, contains: []string{"timestamp"}}},
		{name: "letters in timestamp", line: `m v=1 12a`, err: &wantErr{reason: ReasonSyntax, column: 7, contains: []string{"timestamp"}}},
		{name: "text after timestamp", line: `m v=1 1 x`, err: &wantErr{reason: ReasonSyntax, column: 9}},
		{name: "lone minus timestamp", line: `m v=1 -`, err: &wantErr{reason: ReasonSyntax, column: 7, contains: []string{"timestamp"}}},

		// Limits.
		{
			name: "keys at the limit",
			line: `abcd,abcd=vvvvv efgh="sssss" 1`, lim: &Limits{MaxLineBytes: 64, MaxKeyBytes: 4, MaxStringBytes: 5},
			want: &feed.Point{
				Table: "abcd", Series: "abcd=vvvvv",
				Tags:   []feed.Tag{{Key: "abcd", Value: "vvvvv"}},
				Fields: []feed.PointField{f("efgh", st("sssss"))}, Time: 1,
			},
		},
		{
			name: "measurement too long", line: `abcde v=1`, lim: &small,
			err: &wantErr{reason: ReasonKeyTooLong, contains: []string{"measurement", "5 bytes"}},
		},
		{
			name: "tag key too long", line: `m,abcde=1 v=1`, lim: &small,
			err: &wantErr{reason: ReasonKeyTooLong, contains: []string{"tag key"}},
		},
		{
			name: "field key too long", line: `m abcde=1`, lim: &small,
			err: &wantErr{reason: ReasonKeyTooLong, contains: []string{"field key"}},
		},
		{
			name: "escaped key counted unescaped", line: `m a\ \ =1`, lim: &small,
			want: &feed.Point{Table: "m", Fields: []feed.PointField{f("a  ", fl(1))}, Time: parseNow},
		},
		{
			name: "default key limit", line: "m " + strings.Repeat("k", DefaultMaxKeyBytes+1) + "=1",
			err: &wantErr{reason: ReasonKeyTooLong, contains: []string{"4097 bytes, longer than the limit of 4096 (--max-name-bytes)"}},
		},
		{
			name: "C0 control in measurement", line: "m\x01x v=1",
			err: &wantErr{reason: ReasonSyntax, column: 2},
		},
		{
			name: "C1 control in measurement", line: "m\u009fx v=1",
			err: &wantErr{reason: ReasonInvalidName, contains: []string{"measurement", "control character"}},
		},
		{
			name: "C1 control in tag key", line: "m,t\u0080=a v=1",
			err: &wantErr{reason: ReasonInvalidName, contains: []string{"tag key", "control character"}},
		},
		{
			name: "decoder message echoes at most MaxEchoBytes", line: "m," + strings.Repeat("t", 1000) + "\x7f=a v=1",
			err: &wantErr{reason: ReasonSyntax, column: 3, contains: []string{`…`}},
		},
		{
			name: "C1 control in field key", line: "m v\u0085=1",
			err: &wantErr{reason: ReasonInvalidName, contains: []string{"field key", "control character"}},
		},
		{
			name: "long input echoed at most MaxEchoBytes", line: "m v=" + strings.Repeat("1", 10_000) + "x",
			err: &wantErr{reason: ReasonSyntax, column: 5, contains: []string{`"` + strings.Repeat("1", feed.MaxEchoBytes) + `"…`}},
		},
		{
			name: "default key limit accepted", line: "m " + strings.Repeat("k", DefaultMaxKeyBytes) + "=1i 1",
			want: &feed.Point{Table: "m", Fields: []feed.PointField{f(strings.Repeat("k", DefaultMaxKeyBytes), in(1))}, Time: 1},
		},
		{
			name: "tag value too long", line: `m,t=abcdef v=1`, lim: &small,
			err: &wantErr{reason: ReasonStringTooLong, contains: []string{`"t"`}},
		},
		{
			name: "string too long", line: `m s="abcdef"`, lim: &small,
			err: &wantErr{reason: ReasonStringTooLong, contains: []string{`"s"`}},
		},
		{
			name: "line at the limit", line: `m v=1 1234567890`, lim: &small,
			want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: 1234567890},
		},
		{
			name: "line at the limit with a trailing CR", line: "m v=1 1234567890\r", lim: &small,
			want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: 1234567890},
		},
		{
			name: "line too long", line: `m v=1 12345678901`, lim: &small,
			err: &wantErr{reason: ReasonLineTooLong, contains: []string{"17 bytes", "--max-line-bytes=16"}},
		},

		// Encoding and blank lines.
		{name: "invalid UTF-8 measurement", line: "\xffm v=1", err: &wantErr{reason: ReasonInvalidUTF8, column: 1, contains: []string{"UTF-8"}}},
		{name: "invalid UTF-8 tag value", line: "m,t=a\xff v=1", err: &wantErr{reason: ReasonInvalidUTF8, column: 6, contains: []string{"UTF-8"}}},
		{name: "invalid UTF-8 field key", line: "m a\xc3=1", err: &wantErr{reason: ReasonInvalidUTF8, column: 4, contains: []string{"UTF-8"}}},
		{name: "invalid UTF-8 string", line: "m s=\"\xe2\x82\"", err: &wantErr{reason: ReasonInvalidUTF8, column: 6, contains: []string{"UTF-8"}}},
		{name: "overlong UTF-8 encoding", line: "m s=\"\xc0\xaf\"", err: &wantErr{reason: ReasonInvalidUTF8, column: 6}},
		{
			name: "valid multi-byte UTF-8",
			line: "m\u00e9,h\u00f4te=\u6771\u4eac v\u00e4l=\"\U0001F600\" 1",
			want: &feed.Point{
				Table: "m\u00e9", Series: "h\u00f4te=\u6771\u4eac",
				Tags:   []feed.Tag{{Key: "h\u00f4te", Value: "\u6771\u4eac"}},
				Fields: []feed.PointField{f("v\u00e4l", st("\U0001F600"))}, Time: 1,
			},
		},
		{name: "empty line", line: ""},
		{name: "spaces", line: "   "},
		{name: "lone CR", line: "\r"},
		{name: "comment", line: "# m v=1 1"},
		{name: "indented comment", line: "  # comment \"with a quote"},
		{name: "comment with invalid UTF-8", line: "# \xff"},
		{name: "tabs and spaces", line: "\t \t"},
		{name: "comment indented with a tab", line: "\t# it's \"quoted"},
		{name: "tab before the measurement", line: "\tm v=1", err: &wantErr{reason: ReasonSyntax, column: 1}},
		{name: "trailing CR stripped", line: "m v=1 1\r", want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: 1}},
		{name: "trailing CR without timestamp", line: "m v=1\r", want: &feed.Point{Table: "m", Fields: []feed.PointField{f("v", fl(1))}, Time: parseNow}},
		{name: "CR inside the line", line: "m v=1\r 1", err: &wantErr{reason: ReasonSyntax, column: 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := DefaultLimits()
			if tt.lim != nil {
				lim = *tt.lim
			}
			prec := tt.prec
			if prec == 0 {
				prec = Nanosecond
			}
			b := &feed.Batch{Points: []feed.Point{{Table: "earlier"}}}
			perr := NewParser(lim).Parse(b, []byte(tt.line), parseLineNo, prec, parseNow)
			if tt.err != nil {
				requireParseError(t, *tt.err, parseLineNo, perr)
				require.Len(t, b.Points, 1, "a rejected line adds no point")
				return
			}
			require.Nil(t, perr)
			if tt.want == nil {
				require.Len(t, b.Points, 1, "the line adds no point")
				return
			}
			require.Len(t, b.Points, 2)
			want := *tt.want
			want.Line = parseLineNo
			got := b.Points[1]
			if len(got.Tags) == 0 {
				require.Empty(t, want.Tags)
				got.Tags = nil // nil or empty, as the slab has it
			}
			require.Equal(t, want, got)
			// Series is the escaped tag set as feed renders it.
			var series []byte
			for i, tag := range got.Tags {
				if i > 0 {
					series = append(series, ',')
				}
				series = feed.AppendEscapedTag(series, tag.Key)
				series = append(series, '=')
				series = feed.AppendEscapedTag(series, tag.Value)
			}
			require.Equal(t, string(series), got.Series)
		})
	}
}

// TestParserReuse checks that the points of earlier lines survive the
// parser going on (they share its arena and slabs), including lines
// rejected half-way.
func TestParserReuse(t *testing.T) {
	tests := []struct {
		name  string
		lines int
	}{
		{name: "a few lines", lines: 10},
		{name: "past one tag and field slab", lines: 3 * slabLen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewParser(DefaultLimits())
			b := &feed.Batch{}
			for i := range tt.lines {
				line := "m,b=" + strings.Repeat("x", 1+i%50) + ",a=" + itoa(i) + " s=\"" + itoa(i) + "\",v=" + itoa(i) + "i " + itoa(i)
				require.Nil(t, p.Parse(b, []byte(line), i+1, Nanosecond, 0))
				// A line rejected after its tags and fields were read.
				require.NotNil(t, p.Parse(b, []byte("m,z=1,y=2 q=1,r=2 x"), i+1, Nanosecond, 0))
			}
			require.Len(t, b.Points, tt.lines)
			for i, pt := range b.Points {
				require.Equal(t, []feed.Tag{{Key: "a", Value: itoa(i)}, {Key: "b", Value: strings.Repeat("x", 1+i%50)}}, pt.Tags, "line %d", i+1)
				require.Equal(t, []feed.PointField{f("s", st(itoa(i))), f("v", in(int64(i)))}, pt.Fields, "line %d", i+1)
				require.Equal(t, "a="+itoa(i)+",b="+strings.Repeat("x", 1+i%50), pt.Series)
				require.Equal(t, int64(i), pt.Time)
				require.Equal(t, i+1, pt.Line)
			}
		})
	}
}

// TestParserLetsBatchesGo checks that a parser keeps no string of a
// batch alive once the batch is handed over (Detach, a TCP connection's)
// or answered (Reuse, a pooled HTTP parser's): 300 TCP connections
// flooding 1 KB string lines held 971 MB of them through their parsers'
// slabs and arena, with every batch committed. A weak pointer to a
// string's arena chunk shows it collected.
func TestParserLetsBatchesGo(t *testing.T) {
	lines := []struct{ name, line string }{
		// A string past the arena's chunk size gets a chunk of its own.
		{"a long string", `m,host=a s="` + strings.Repeat("q", 200<<10) + `" 1`},
		// The new series' tag value and the string share a chunk, and
		// the known series cache keeps the series: it must keep copies
		// (it kept the chunk, 64 KiB per series).
		{"a string beside a new series' tags", `pin,s=1 v="` + strings.Repeat("q", 65000) + `" 1`},
	}
	for _, l := range lines {
		for _, how := range []string{"Detach", "Reuse"} {
			t.Run(l.name+"/"+how, func(t *testing.T) {
				lim := DefaultLimits()
				lim.MaxLineBytes, lim.MaxStringBytes = 1<<20, 1<<20
				p := NewParser(lim)
				b := &feed.Batch{}
				require.Nil(t, p.Parse(b, []byte(l.line), 1, Nanosecond, 0))
				chunk := weak.Make(unsafe.StringData(b.Points[0].Fields[0].Value.Str))
				if how == "Detach" {
					p.Detach()
				} else {
					p.Reuse()
				}
				// The parser goes on: the next batch is parsed as before.
				next := &feed.Batch{}
				require.Nil(t, p.Parse(next, []byte(`m,host=a s="x",v=2i 2`), 1, Nanosecond, 0))
				require.Equal(t, []feed.PointField{f("s", st("x")), f("v", in(2))}, next.Points[0].Fields)
				require.Equal(t, []feed.Tag{{Key: "host", Value: "a"}}, next.Points[0].Tags)
				b = nil
				runtime.GC()
				require.Nil(t, chunk.Value(), "the handed-over batch's string is still reachable from the parser")
				runtime.KeepAlive(p)
			})
		}
	}
}

func TestTrimBOM(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{name: "one BOM", in: "\xef\xbb\xbfm v=1", want: "m v=1"},
		{name: "only one of two", in: "\xef\xbb\xbf\xef\xbb\xbfm v=1", want: "\xef\xbb\xbfm v=1"},
		{name: "no BOM", in: "m v=1", want: "m v=1"},
		{name: "BOM not at the start", in: "m\xef\xbb\xbf v=1", want: "m\xef\xbb\xbf v=1"},
		{name: "partial BOM", in: "\xef\xbbm", want: "\xef\xbbm"},
		{name: "empty", in: "", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, string(TrimBOM([]byte(tt.in))))
		})
	}
}

func TestParseAll(t *testing.T) {
	// got is a parsed point reduced to what these cases check.
	type got struct {
		Line   int
		Table  string
		Fields []feed.PointField
		Time   int64
	}
	type gotErr struct {
		Line   int
		Reason string
	}
	tests := []struct {
		name      string
		data      string
		firstLine int
		want      []got
		errs      []gotErr
		next      int
	}{
		{
			name: "lines, blank lines and comments", firstLine: 1,
			data: "m v=1 1\n\n# comment\n  \nm v=2 2\n",
			want: []got{{1, "m", []feed.PointField{f("v", fl(1))}, 1}, {5, "m", []feed.PointField{f("v", fl(2))}, 2}},
			next: 6,
		},
		{
			name: "final line without newline", firstLine: 1,
			data: "m v=1 1\nm v=2 2",
			want: []got{{1, "m", []feed.PointField{f("v", fl(1))}, 1}, {2, "m", []feed.PointField{f("v", fl(2))}, 2}},
			next: 3,
		},
		{
			name: "CRLF line ends", firstLine: 1,
			data: "m v=1 1\r\nm v=2\r\n\r\n",
			want: []got{{1, "m", []feed.PointField{f("v", fl(1))}, 1}, {2, "m", []feed.PointField{f("v", fl(2))}, parseNow}},
			next: 4,
		},
		{
			name: "raw newlines inside strings belong to the string", firstLine: 1,
			data: "m s=\"a\nb\" 1\nm s=\"\n\n\",v=1 2\nm v=3 3\n",
			want: []got{
				{1, "m", []feed.PointField{f("s", st("a\nb"))}, 1},
				{3, "m", []feed.PointField{f("s", st("\n\n")), f("v", fl(1))}, 2},
				{6, "m", []feed.PointField{f("v", fl(3))}, 3},
			},
			next: 7,
		},
		{
			name: "escaped quote and escaped backslash before the closing quote", firstLine: 1,
			data: "m s=\"a\\\"\nb\" 1\nm s=\"c\\\\\" 2\nm v=1 3\n",
			want: []got{
				{1, "m", []feed.PointField{f("s", st("a\"\nb"))}, 1},
				{3, "m", []feed.PointField{f("s", st(`c\`))}, 2},
				{4, "m", []feed.PointField{f("v", fl(1))}, 3},
			},
			next: 5,
		},
		{
			name: "quotes in the measurement, tags and comments do not open strings", firstLine: 1,
			data: "m\"a,t=\"x v=1 1\n# it's \"quoted\nm v=2 2\n",
			want: []got{
				{1, "m\"a", []feed.PointField{f("v", fl(1))}, 1},
				{3, "m", []feed.PointField{f("v", fl(2))}, 2},
			},
			next: 4,
		},
		{
			name: "double backslash before an escaped space in a tag, then a raw newline in a string", firstLine: 1,
			data: "m,p=C:\\\\ x s=\"a\nb\" 1\nm v=2 2\n",
			want: []got{
				{1, "m", []feed.PointField{f("s", st("a\nb"))}, 1},
				{3, "m", []feed.PointField{f("v", fl(2))}, 2},
			},
			next: 4,
		},
		{
			name: "bad lines are reported with their physical line numbers", firstLine: 1,
			data: "m s=\"a\nb\" 1\nm v= 2\n\nm s=\"x\ny\",v=1 3\nm,x_t=1 v=1\nm v=4 4\n",
			want: []got{
				{1, "m", []feed.PointField{f("s", st("a\nb"))}, 1},
				{5, "m", []feed.PointField{f("s", st("x\ny")), f("v", fl(1))}, 3},
				{8, "m", []feed.PointField{f("v", fl(4))}, 4},
			},
			errs: []gotErr{{3, ReasonSyntax}, {7, ReasonReservedKey}},
			next: 9,
		},
		{
			name: "numbering starts at firstLine", firstLine: 10,
			data: "m v=1 1\nbad\nm v=2 2\n",
			want: []got{{10, "m", []feed.PointField{f("v", fl(1))}, 1}, {12, "m", []feed.PointField{f("v", fl(2))}, 2}},
			errs: []gotErr{{11, ReasonNoFields}},
			next: 13,
		},
		{
			name: "empty input", firstLine: 1, data: "", next: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &feed.Batch{}
			perrs, next := NewParser(DefaultLimits()).ParseAll(b, []byte(tt.data), tt.firstLine, Nanosecond, parseNow)
			var gots []got
			for _, pt := range b.Points {
				gots = append(gots, got{pt.Line, pt.Table, pt.Fields, pt.Time})
			}
			require.Equal(t, tt.want, gots)
			var errs []gotErr
			for _, e := range perrs {
				errs = append(errs, gotErr{e.Line, e.Reason})
			}
			require.Equal(t, tt.errs, errs)
			require.Equal(t, tt.next, next)
		})
	}
}
