package ilp

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/feed"
)

// update rewrites the "--- want" sections of testdata/corpus/*.txt with
// what the parser does now: go test ./ilp -run TestCorpus -update.
var update = flag.Bool("update", false, "rewrite ilp/testdata/corpus/*.txt with the current results")

// corpusNow is the receive time of lines without a timestamp in the corpus.
const corpusNow = int64(1_700_000_000_000_000_000)

// corpusCase is one case of the golden corpus (docs/design.md#engineering-rules). A case file holds
// free comment lines ("#") before its first case, then cases:
//
//	=== name
//	precision: ns            (optional; any of /write's spellings; default ns)
//	limits: line=N key=N string=N   (optional; default DefaultLimits)
//	input: "Go-quoted bytes" (one or more lines, concatenated)
//	--- want
//	ok 1: table="m" tags{} fields{v=float(1)} time=1
//	err 2:5 syntax: <message>
//
// The want lines are generated (-update): one per accepted point ("ok
// LINE") or rejected line ("err LINE:COLUMN REASON"), in line order.
type corpusCase struct {
	name   string
	prec   string
	limits string
	input  []byte
	want   []string
}

// corpusFile is a parsed case file.
type corpusFile struct {
	header []string // the comment lines before the first case
	cases  []*corpusCase
}

func readCorpusFile(t testing.TB, path string) *corpusFile {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	cf := &corpusFile{}
	var c *corpusCase
	inWant := false
	for i, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		where := fmt.Sprintf("%s:%d", path, i+1)
		switch {
		case strings.HasPrefix(l, "=== "):
			c = &corpusCase{name: strings.TrimPrefix(l, "=== "), prec: "ns"}
			cf.cases = append(cf.cases, c)
			inWant = false
		case c == nil:
			require.True(t, l == "" || strings.HasPrefix(l, "#"), "%s: only comments before the first case", where)
			cf.header = append(cf.header, l)
		case inWant:
			if l != "" {
				c.want = append(c.want, l)
			}
		case l == "--- want":
			inWant = true
		case strings.HasPrefix(l, "precision: "):
			c.prec = strings.TrimPrefix(l, "precision: ")
		case strings.HasPrefix(l, "limits: "):
			c.limits = strings.TrimPrefix(l, "limits: ")
		case strings.HasPrefix(l, "input: "):
			s, err := strconv.Unquote(strings.TrimPrefix(l, "input: "))
			require.NoError(t, err, "%s: input must be a Go-quoted string", where)
			c.input = append(c.input, s...)
		case l == "":
		default:
			t.Fatalf("%s: unexpected line %q", where, l)
		}
	}
	return cf
}

func (cf *corpusFile) bytes() []byte {
	var b bytes.Buffer
	for _, l := range cf.header {
		b.WriteString(l + "\n")
	}
	for _, c := range cf.cases {
		fmt.Fprintf(&b, "=== %s\n", c.name)
		if c.prec != "ns" {
			fmt.Fprintf(&b, "precision: %s\n", c.prec)
		}
		if c.limits != "" {
			fmt.Fprintf(&b, "limits: %s\n", c.limits)
		}
		// Long inputs are cut after their newlines, to stay readable.
		in := c.input
		for len(in) > 0 {
			n := bytes.IndexByte(in, '\n') + 1
			if n == 0 || n > 120 {
				n = min(len(in), max(n, 120))
			}
			fmt.Fprintf(&b, "input: %s\n", strconv.Quote(string(in[:n])))
			in = in[n:]
		}
		b.WriteString("--- want\n")
		for _, w := range c.want {
			b.WriteString(w + "\n")
		}
		b.WriteString("\n")
	}
	return b.Bytes()
}

// parseLimits reads "line=N key=N string=N" (any subset) over the defaults.
func parseLimits(t testing.TB, s string) Limits {
	t.Helper()
	lim := DefaultLimits()
	for _, kv := range strings.Fields(s) {
		k, v, ok := strings.Cut(kv, "=")
		require.True(t, ok, "limit %q", kv)
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "limit %q", kv)
		switch k {
		case "line":
			lim.MaxLineBytes = n
		case "key":
			lim.MaxKeyBytes = n
		case "string":
			lim.MaxStringBytes = n
		default:
			t.Fatalf("unknown limit %q", k)
		}
	}
	return lim
}

// renderValue renders a field value with its type, exactly.
func renderValue(v feed.Value) string {
	switch v.Kind {
	case feed.KindFloat:
		x := math.Float64frombits(v.Num)
		if x == 0 && math.Signbit(x) {
			return "float(-0)"
		}
		return "float(" + strconv.FormatFloat(x, 'g', -1, 64) + ")"
	case feed.KindInt:
		return "int(" + strconv.FormatInt(int64(v.Num), 10) + ")"
	case feed.KindUint:
		return "uint(" + strconv.FormatUint(v.Num, 10) + ")"
	case feed.KindString:
		return "string(" + strconv.Quote(v.Str) + ")"
	case feed.KindBool:
		return "bool(" + strconv.FormatBool(v.Num != 0) + ")"
	}
	return fmt.Sprintf("kind%d(%d,%q)", v.Kind, v.Num, v.Str)
}

// renderPoint renders an accepted point as a want line.
func renderPoint(pt feed.Point) string {
	var b strings.Builder
	fmt.Fprintf(&b, "ok %d: table=%s tags{", pt.Line, strconv.Quote(pt.Table))
	for i, tg := range pt.Tags {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Quote(tg.Key) + "=" + strconv.Quote(tg.Value))
	}
	b.WriteString("} fields{")
	for i, f := range pt.Fields {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Quote(f.Key) + "=" + renderValue(f.Value))
	}
	fmt.Fprintf(&b, "} time=%d", pt.Time)
	if want := seriesOf(pt.Tags); pt.Series != want {
		fmt.Fprintf(&b, " BAD-SERIES=%q", pt.Series)
	}
	return b.String()
}

// seriesOf is the canonical series of sorted tags, as feed renders it.
func seriesOf(tags []feed.Tag) string {
	var s []byte
	for i, tg := range tags {
		if i > 0 {
			s = append(s, ',')
		}
		s = feed.AppendEscapedTag(s, tg.Key)
		s = append(s, '=')
		s = feed.AppendEscapedTag(s, tg.Value)
	}
	return string(s)
}

// renderError renders a rejected line as a want line.
func renderError(e *ParseError) string {
	return fmt.Sprintf("err %d:%d %s: %v", e.Line, e.Column, e.Reason, e.Err)
}

// renderResults merges points and errors in line order.
func renderResults(pts []feed.Point, errs []*ParseError) []string {
	out := make([]string, 0, len(pts)+len(errs))
	i, j := 0, 0
	for i < len(pts) || j < len(errs) {
		if j == len(errs) || (i < len(pts) && pts[i].Line < errs[j].Line) {
			out = append(out, renderPoint(pts[i]))
			i++
		} else {
			out = append(out, renderError(errs[j]))
			j++
		}
	}
	return out
}

// parseWhole parses data in one piece, as POST /write does.
func parseWhole(data []byte, lim Limits, prec Precision) []string {
	return renderResults(parseWholePoints(data, lim, prec))
}

func parseWholePoints(data []byte, lim Limits, prec Precision) ([]feed.Point, []*ParseError) {
	b := &feed.Batch{}
	errs, _ := NewParser(lim).ParseAll(b, TrimBOM(data), 1, prec, corpusNow)
	return b.Points, errs
}

// parseAlone parses each line of data with a Parser of its own, so that
// no line finds its series known.
func parseAlone(data []byte, lim Limits, prec Precision) []string {
	b := &feed.Batch{}
	var errs []*ParseError
	var sp Splitter
	data, no := TrimBOM(data), 1
	for len(data) > 0 {
		l := data
		if end := sp.Next(data); end >= 0 {
			l, data = data[:end], data[end+1:]
		} else {
			data = nil
		}
		if perr := NewParser(lim).Parse(b, l, no, prec, corpusNow); perr != nil {
			errs = append(errs, perr)
		}
		no += 1 + bytes.Count(l, []byte("\n"))
	}
	return renderResults(b.Points, errs)
}

// parseTwice parses data with one Parser twice and returns the second
// results: every series of the first pass is known in the second.
func parseTwice(data []byte, lim Limits, prec Precision) []string {
	p := NewParser(lim)
	p.ParseAll(&feed.Batch{}, TrimBOM(data), 1, prec, corpusNow)
	b := &feed.Batch{}
	errs, _ := p.ParseAll(b, TrimBOM(data), 1, prec, corpusNow)
	return renderResults(b.Points, errs)
}

// parsePieces parses data arriving in pieces cut at cuts (ascending), as
// the TCP listener reads it: through a lineReader, each complete line
// parsed as it ends. Unlike TCP (which drops a partial line at EOF) a
// final line without a newline is parsed too, as ParseAll does.
func parsePieces(data []byte, cuts []int, lim Limits, prec Precision) []string {
	p, b := NewParser(lim), &feed.Batch{}
	var errs []*ParseError
	parse := func(l []byte, no int) {
		if perr := p.Parse(b, l, no, prec, corpusNow); perr != nil {
			errs = append(errs, perr)
		}
	}
	tooLong := func(no int) {
		errs = append(errs, &ParseError{Line: no, Reason: ReasonLineTooLong, Err: errLineTooLong(lim.MaxLineBytes)})
	}
	lr := newLineReader(lim.MaxLineBytes)
	prev := 0
	for _, cut := range append(cuts, len(data)) {
		for piece := data[prev:cut]; len(piece) > 0; {
			n := copy(lr.spare(), piece)
			lr.add(n, parse, tooLong)
			piece = piece[n:]
		}
		prev = cut
	}
	if rest, no := lr.partial(); len(rest) > 0 {
		parse(rest, no)
	}
	return renderResults(b.Points, errs)
}

func TestCorpus(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "corpus", "*.txt"))
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, path := range paths {
		cf := readCorpusFile(t, path)
		require.NotEmpty(t, cf.cases, path)
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			names := map[string]bool{}
			for _, c := range cf.cases {
				require.False(t, names[c.name], "duplicate case name %q", c.name)
				names[c.name] = true
				t.Run(c.name, func(t *testing.T) {
					prec, err := ParsePrecision(c.prec, true)
					require.NoError(t, err)
					lim := parseLimits(t, c.limits)
					got := parseWhole(c.input, lim, prec)
					// Every third byte a read of its own: the TCP path agrees.
					var cuts []int
					for i := 1; i < len(c.input); i += 3 {
						cuts = append(cuts, i)
					}
					require.Equal(t, got, parsePieces(c.input, cuts, lim, prec), "whole and in pieces")
					if *update {
						c.want = got
						return
					}
					require.Equal(t, c.want, got, "regenerate with: go test ./ilp -run TestCorpus -update")
				})
			}
		})
		if *update {
			require.NoError(t, os.WriteFile(path, cf.bytes(), 0o644))
		}
	}
}
