package ilp

import (
	"bytes"

	"github.com/influxdata/line-protocol/v2/lineprotocol"

	"github.com/ingestd/ingestd/feed"
)

// plainFields decodes the field set and timestamp of rest, the part of a
// line after its measurement and tag set (from the separating space), when
// it has the plain form almost every writer sends:
//
//	' '+ key=value (',' key=value)* [' '+ timestamp]
//
// with keys and values free of backslashes, and strings free of
// backslashes. The values are converted by fieldValue, as the decoder's
// are, and the keys checked by checkKey unless the previous line had the
// same key at the same position. It reports false for anything else and
// for any error, leaving the line to lineprotocol's decoder, which reports
// errors with their columns: plainFields only ever accepts what the decoder
// accepts, with the same result (FuzzPlainFields checks it).
func (p *Parser) plainFields(rest []byte, tags []feed.Tag, prec Precision, now int64) (fields []feed.PointField, ts int64, ok bool) {
	i := 0
	for i < len(rest) && rest[i] == ' ' {
		i++
	}
	if i == 0 || i == len(rest) || bytes.IndexByte(rest, '\\') >= 0 {
		return nil, 0, false
	}
	fields = p.fields[len(p.fields):]
	for {
		// The key: up to '=', none of the bytes that end a key.
		start := i
		for i < len(rest) && rest[i] != '=' {
			if c := rest[i]; c == ',' || c == ' ' || c < 0x20 || c == 0x7f {
				return nil, 0, false
			}
			i++
		}
		if i == start || i+1 >= len(rest) {
			return nil, 0, false
		}
		k := rest[start:i]
		i++ // '='
		pos := 1 + len(tags) + len(fields)
		if pos >= len(p.lastKeys) || p.lastKeys[pos] != string(k) {
			if p.checkKey("field key", k) != nil {
				return nil, 0, false
			}
		}
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
		for j := range fields {
			if fields[j].Key == string(k) {
				return nil, 0, false // a repeated key: the decoder's path merges it
			}
		}
		fields = append(fields, feed.PointField{Key: p.internAt(pos, k), Value: val})
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
		return p.tagFieldOK(tags, fields, ts)
	}
	return p.tagFieldOK(tags, fields, now-now%int64(prec))
}

// tagFieldOK reports whether no field key is also a tag key.
func (p *Parser) tagFieldOK(tags []feed.Tag, fields []feed.PointField, ts int64) ([]feed.PointField, int64, bool) {
	for i := range tags {
		for j := range fields {
			if tags[i].Key == fields[j].Key {
				return nil, 0, false
			}
		}
	}
	return fields, ts, true
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
