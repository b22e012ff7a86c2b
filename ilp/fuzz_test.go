package ilp

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/influxdata/line-protocol/v2/lineprotocol"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/feed"
)

// fuzzPrecisions are the precisions FuzzParse picks from.
var fuzzPrecisions = []Precision{Nanosecond, Microsecond, Millisecond, Second, Minute, Hour}

// FuzzParse checks, for any bytes (docs/design.md#engineering-rules):
//   - parsing never panics;
//   - the bytes split at random boundaries, as TCP reads deliver them (a
//     lineReader over the pieces), give exactly the points and errors of
//     the bytes in one piece (ParseAll, as HTTP parses a body);
//   - so do each line parsed alone by a fresh Parser (the decoder's path
//     only), and the bytes parsed a second time by the Parser that parsed
//     them (every series known: plainFields or the decoder behind a
//     one-byte measurement, falling back to the full parse on errors);
//   - every accepted point that line-protocol's encoder can write, written
//     back as ILP and parsed again, is the same point.
//
// It is seeded from the golden corpus (testdata/corpus). CI runs it for a
// short time: go test ./ilp -run '^$' -fuzz '^FuzzParse$' -fuzztime 20s.
func FuzzParse(f *testing.F) {
	paths, err := filepath.Glob(filepath.Join("testdata", "corpus", "*.txt"))
	require.NoError(f, err)
	require.NotEmpty(f, paths)
	for _, path := range paths {
		for i, c := range readCorpusFile(f, path).cases {
			prec, err := ParsePrecision(c.prec, true)
			require.NoError(f, err)
			if c.limits != "" {
				continue // the fuzz target uses the default limits
			}
			f.Add(c.input, uint8(slices.Index(fuzzPrecisions, prec)), uint64(i))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, precIdx uint8, seed uint64) {
		lim := DefaultLimits()
		prec := fuzzPrecisions[int(precIdx)%len(fuzzPrecisions)]
		pts, errs := parseWholePoints(data, lim, prec)
		whole := renderResults(pts, errs)

		rng := rand.New(rand.NewPCG(seed, uint64(len(data))))
		var cuts []int
		if len(data) > 1 {
			switch rng.IntN(4) {
			case 0: // every byte a read of its own
				for i := 1; i < len(data); i++ {
					cuts = append(cuts, i)
				}
			default:
				for range rng.IntN(min(len(data), 16)) + 1 {
					cuts = append(cuts, 1+rng.IntN(len(data)-1))
				}
				slices.Sort(cuts)
				cuts = slices.Compact(cuts)
			}
		}
		require.Equal(t, whole, parsePieces(data, cuts, lim, prec), "whole and cut at %v", cuts)
		require.Equal(t, whole, parseAlone(data, lim, prec), "whole and each line by a fresh parser")
		require.Equal(t, whole, parseTwice(data, lim, prec), "whole and the same bytes again through a parser that knows their series")

		for _, pt := range pts {
			line, ok := encodePoint(pt)
			if !ok {
				continue // a key the encoder refuses (non-printable, trailing backslash)
			}
			b := &feed.Batch{}
			perr := NewParser(lim).Parse(b, line, pt.Line, Nanosecond, 0)
			require.Nil(t, perr, "re-encoded point of %q: %q", data, line)
			require.Len(t, b.Points, 1, "re-encoded point %q", line)
			require.Equal(t, renderPoint(pt), renderPoint(b.Points[0]), "re-encoded as %q", line)
		}
	})
}

// encodePoint writes pt as one ILP line (without its newline) with
// line-protocol's encoder; false when the encoder refuses it.
func encodePoint(pt feed.Point) ([]byte, bool) {
	var enc lineprotocol.Encoder
	enc.StartLine(pt.Table)
	for _, tg := range pt.Tags {
		enc.AddTag(tg.Key, tg.Value)
	}
	for _, fd := range pt.Fields {
		var v lineprotocol.Value
		ok := true
		switch fd.Value.Kind {
		case feed.KindFloat:
			v, ok = lineprotocol.FloatValue(math.Float64frombits(fd.Value.Num))
		case feed.KindInt:
			v = lineprotocol.IntValue(int64(fd.Value.Num))
		case feed.KindUint:
			v = lineprotocol.UintValue(fd.Value.Num)
		case feed.KindString:
			v, ok = lineprotocol.StringValue(fd.Value.Str)
		case feed.KindBool:
			v = lineprotocol.BoolValue(fd.Value.Num != 0)
		default:
			ok = false
		}
		if !ok {
			return nil, false
		}
		enc.AddField(fd.Key, v)
	}
	enc.EndLine(time.Unix(0, pt.Time))
	if enc.Err() != nil {
		return nil, false
	}
	out := enc.Bytes()
	return out[:len(out)-1], true
}
