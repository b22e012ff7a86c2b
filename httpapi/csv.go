package httpapi

import (
	"strings"

	"github.com/ingestd/ingestd/feed"
)

// contentTypeCSV is the Content-Type of CSV results, as InfluxDB's /query
// answers Accept: application/csv or text/csv.
const contentTypeCSV = "text/csv; charset=utf-8"

// csvHeader is the header line of InfluxDB /query's CSV: name and tags
// (the measurement and, for grouped results, the tag set), then the
// result's columns.
func csvHeader(names []string) []byte {
	b := append([]byte(nil), "name,tags"...)
	for _, n := range names {
		b = append(b, ',')
		b = appendCSVField(b, n)
	}
	return append(b, '\n')
}

// columnNames returns the names of cols.
func columnNames(cols []feed.Column) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = c.Name
	}
	return out
}

// csvRow renders a row as one CSV record of InfluxDB /query's shape: the
// name (the table), an empty tags field (results are not grouped), then
// the values: time per the time format, integers exact, absent values
// empty, strings quoted when RFC 4180 needs it.
func (e *encoder) csvRow(name string, vals []feed.Value) {
	e.buf = appendCSVField(e.buf, name)
	e.buf = append(e.buf, ',')
	for _, v := range vals {
		e.buf = append(e.buf, ',')
		switch v.Kind {
		case 0:
		case feed.KindString, feed.KindTag:
			e.buf = appendCSVField(e.buf, v.Str)
		case feed.KindOp:
			e.buf = append(e.buf, opName(v)...)
		case feed.KindTime:
			if e.timeFormat == timeRFC3339 {
				e.buf = e.appendRFC3339Nano(e.buf, int64(v.Num))
				break
			}
			e.buf = e.value(e.buf, v)
		default:
			e.buf = e.value(e.buf, v)
		}
	}
	e.buf = append(e.buf, '\n')
}

// appendCSVField appends s as an RFC 4180 field: quoted, with quotes
// doubled, when it holds a comma, a quote, a line break or leading or
// trailing space (as encoding/csv writes it).
func appendCSVField(b []byte, s string) []byte {
	if s == "" || !strings.ContainsAny(s, ",\"\r\n") && s[0] != ' ' && s[0] != '\t' && s[len(s)-1] != ' ' {
		return append(b, s...)
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' {
			b = append(b, '"')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}
