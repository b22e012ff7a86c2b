package ilp

import (
	"bytes"

	"github.com/influxdata/line-protocol/v2/lineprotocol"

	"github.com/ingestd/ingestd/feed"
)

// plainFields decodes the field set and timestamp of rest, the part of a
// line after the measurement and tag set of ks (from the separating space),
// when it has the plain form almost every writer sends:
//
//	' '+ key=value (',' key=value)* [' '+ timestamp]
//
// with keys and values free of backslashes, and strings free of
// backslashes. The values are converted by fieldValue, as the decoder's
// are. The keys are checked (checkKey unless the previous line had the same
// key at the same position, no key twice, none a tag key of ks) unless they
// are ks.shape's: the field keys of the series' last line plainFields
// accepted, in order, which passed those checks then. A line that repeats
// them (a writer sends a series' fields in the same order every time) costs
// a comparison per key and no scan for its '='; its keys are shape's
// strings. Any other accepted line becomes ks.shape. It reports false for
// anything else and for any error, leaving the line to lineprotocol's
// decoder, which reports errors with their columns: plainFields only ever
// accepts what the decoder accepts, with the same result (FuzzParse checks
// it).
func (p *Parser) plainFields(rest []byte, ks *knownSeries, prec Precision, now int64) (fields []feed.PointField, ts int64, ok bool) {
	i := 0
	for i < len(rest) && rest[i] == ' ' {
		i++
	}
	if i == 0 || i == len(rest) || bytes.IndexByte(rest, '\\') >= 0 {
		return nil, 0, false
	}
	fields = p.fields[len(p.fields):]
	// same: fields hold shape's first keys. A shape key holds none of the
	// bytes that end a key (plainFields scanned it), so where its bytes
	// and an '=' follow, the scan below would find that key.
	shape, same := ks.shape, true
	for {
		var key string
		start := i
		if n := len(fields); same && n < len(shape) {
			if e := i + len(shape[n]); e+1 < len(rest) && rest[e] == '=' && string(rest[i:e]) == shape[n] {
				key, i = shape[n], e
			} else {
				same = false
			}
		} else {
			same = false
		}
		if !same {
			// The key: up to '=', none of the bytes that end a key.
			for i < len(rest) && rest[i] != '=' {
				if c := rest[i]; c == ',' || c == ' ' || c < 0x20 || c == 0x7f {
					return nil, 0, false
				}
				i++
			}
			if i == start || i+1 >= len(rest) {
				return nil, 0, false
			}
			if key, ok = p.plainKey(rest[start:i], ks.tags, fields); !ok {
				return nil, 0, false
			}
		}
		k := rest[start:i]
		i++ // '='
		var kind lineprotocol.ValueKind
		var v []byte
		switch c := rest[i]; {
		case c == '"':
			end := bytes.IndexByte(rest[i+1:], '"')
			if end < 0 {
				return nil, 0, false
			}
			kind, v = lineprotocol.String, rest[i+1:i+1+end]
			i += end + 2
		case c == 't' || c == 'T' || c == 'f' || c == 'F' || c == '-' || c == '.' || ('0' <= c && c <= '9'):
			start := i
			for i < len(rest) && rest[i] != ',' && rest[i] != ' ' && rest[i] != '\r' && rest[i] != '\n' {
				i++
			}
			v = rest[start:i]
			switch {
			case c == 't' || c == 'T' || c == 'f' || c == 'F':
				kind = lineprotocol.Bool
			case v[len(v)-1] == 'i':
				kind, v = lineprotocol.Int, v[:len(v)-1]
			case v[len(v)-1] == 'u':
				kind, v = lineprotocol.Uint, v[:len(v)-1]
			default:
				kind = lineprotocol.Float
			}
		default:
			return nil, 0, false
		}
		var val feed.Value
		if x, ok := smallInt(v); ok && kind == lineprotocol.Int {
			val = feed.Value{Kind: feed.KindInt, Num: uint64(x)}
		} else if ok && kind == lineprotocol.Uint && v[0] != '-' {
			val = feed.Value{Kind: feed.KindUint, Num: uint64(x)}
		} else {
			var perr *ParseError
			if val, perr = p.fieldValue(k, kind, v); perr != nil {
				return nil, 0, false
			}
		}
		fields = append(fields, feed.PointField{Key: key, Value: val})
		if i == len(rest) {
			break
		}
		if rest[i] == ',' {
			i++
			continue
		}
		if rest[i] != ' ' {
			return nil, 0, false
		}
		for i < len(rest) && rest[i] == ' ' {
			i++
		}
		if i == len(rest) {
			break
		}
		// The timestamp ends the line.
		tb := rest[i:]
		for _, c := range tb {
			if c != '-' && (c < '0' || '9' < c) {
				return nil, 0, false
			}
		}
		var perr *ParseError
		if ts, perr = parseTime(tb, prec); perr != nil {
			return nil, 0, false
		}
		return p.keepShape(ks, fields, same), ts, true
	}
	return p.keepShape(ks, fields, same), now - now%int64(prec), true
}

// plainKey checks k, the key of the field that follows fields in a line
// of the series whose tags are tags, and returns it interned: false when
// it breaks the name rules (checkKey, skipped when the previous line had
// the same key at the same position), repeats a key of fields (the
// decoder's path merges it) or is a tag key (refused by the full parse).
func (p *Parser) plainKey(k []byte, tags []feed.Tag, fields []feed.PointField) (string, bool) {
	pos := 1 + len(tags) + len(fields)
	if pos >= len(p.lastKeys) || p.lastKeys[pos] != string(k) {
		if p.checkKey("field key", k) != nil {
			return "", false
		}
	}
	for j := range fields {
		if fields[j].Key == string(k) {
			return "", false
		}
	}
	for j := range tags {
		if tags[j].Key == string(k) {
			return "", false
		}
	}
	return p.internAt(pos, k), true
}

// keepShape makes the keys of fields, a line of ks that plainFields
// accepted, ks's shape unless they are already (same, and as many). A
// shape whose keys would take the known series past maxKnownSeriesBytes
// is not kept: ks then has none.
func (p *Parser) keepShape(ks *knownSeries, fields []feed.PointField, same bool) []feed.PointField {
	if !same || len(fields) != len(ks.shape) {
		n := 0
		for i := range fields {
			n += len(fields[i].Key) + 16 // and its string header in shape
		}
		p.seriesBytes -= ks.shapeBytes
		p.uncharge(int64(ks.shapeBytes))
		if p.seriesBytes+n > maxKnownSeriesBytes || !p.charge(int64(n)) {
			clear(ks.shape)
			ks.shape, ks.shapeBytes = ks.shape[:0], 0
			return fields
		}
		if cap(ks.shape) < len(fields) {
			ks.shape = make([]string, len(fields))
		}
		clear(ks.shape[len(fields):cap(ks.shape)])
		ks.shape = ks.shape[:len(fields)]
		for i := range fields {
			ks.shape[i] = fields[i].Key
		}
		ks.shapeBytes = n
		p.seriesBytes += n
	}
	return fields
}

// smallInt parses v, an optional '-' and 1 to 18 decimal digits, which
// cannot overflow an int64: the value strconv.ParseInt gives, without its
// generality. false for anything else, left to fieldValue.
func smallInt(v []byte) (int64, bool) {
	neg := len(v) > 0 && v[0] == '-'
	if neg {
		v = v[1:]
	}
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var x int64
	for _, c := range v {
		if c < '0' || '9' < c {
			return 0, false
		}
		x = x*10 + int64(c-'0')
	}
	if neg {
		x = -x
	}
	return x, true
}
