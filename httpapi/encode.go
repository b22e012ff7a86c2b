package httpapi

import (
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/ingestd/ingestd/feed"
)

// maxPooledPage is the largest page buffer kept for reuse, in bytes.
const maxPooledPage = 16 << 20

// maxFreePages is how many page buffers pageBufList keeps, at most
// maxPooledPage bytes each.
const maxFreePages = 4

// pageBufList is a free list of page buffers (drain, rows and SQL pages).
// Not a sync.Pool: a pool's buffer put on one P is not seen from another
// until it moves to the shared list, and the pool empties itself over two
// garbage collections, so a drain's page often grew a new buffer from 64
// KiB, copying it about twice and, on a heap without free spans (after a
// load that kept its parsers' memory), touching memory the kernel first
// had to fault in: 35 MB of growth in the first drain of 194,400 rows.
// Safe for concurrent use.
type pageBufList struct {
	mu   sync.Mutex // guards free
	free [][]byte
}

// pageBuf returns an empty buffer for a page, recycled when one is free.
func (a *API) pageBuf() []byte {
	l := &a.pageBufs
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.free); n > 0 {
		b := l.free[n-1]
		l.free[n-1] = nil
		l.free = l.free[:n-1]
		return b[:0]
	}
	return make([]byte, 0, 64<<10)
}

// releasePageBuf hands b back for reuse once the page has been written.
func (a *API) releasePageBuf(b []byte) {
	if cap(b) > maxPooledPage {
		return
	}
	l := &a.pageBufs
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.free) < maxFreePages {
		l.free = append(l.free, b)
	}
}

// timeFormat is how the time column is rendered: RFC 3339 with nanoseconds,
// or an integer count of a unit (ns integers exceed JavaScript's safe range,
// hence the default).
type timeFormat int64

const timeRFC3339 timeFormat = 0

func parseTimeFormat(s string) (timeFormat, bool) {
	switch s {
	case "", "rfc3339":
		return timeRFC3339, true
	case "ns":
		return timeFormat(time.Nanosecond), true
	case "us":
		return timeFormat(time.Microsecond), true
	case "ms":
		return timeFormat(time.Millisecond), true
	case "s":
		return timeFormat(time.Second), true
	}
	return 0, false
}

// encoder renders drain rows as JSON arrays. Integers (int64, uint64 and
// x_seq) are exact JSON numbers; floats use encoding/json's shortest form.
type encoder struct {
	timeFormat timeFormat
	buf        []byte
	// secs caches RFC 3339 renderings of whole seconds (UTC, without
	// fraction and zone), direct-mapped by the second: the rows of a page
	// mostly share a few seconds, and formatting a date costs more than
	// the rest of a row.
	secs [16]secText
	// plain caches strings appendString found to need no escaping,
	// direct-mapped by their address: a tag value is one string shared
	// by every row of its series (feed's published tags), and a Go
	// string never changes, so the same address and length is the same
	// text, copied without being scanned again. Holding the string
	// keeps its memory from being reused for another.
	plain [256]string
	// lpTags lists lpCols' tag and x_op columns in name order (line
	// writes a row's tags in key order), lpFields its field columns in
	// column order and lpTime its time column (-1: none); every row of a
	// page has the same columns. lpKeys holds each column's name escaped
	// as an ILP key followed by '=', and lpTable the measurement escaped:
	// made once per page, not per row.
	lpCols   []feed.Column
	lpTags   []int
	lpFields []int
	lpTime   int
	lpKeys   [][]byte
	lpName   string
	lpTable  []byte
	// opTag, when set, is the tag key line renders x_op under
	// (docs/contract.md#operation): a name of the client's choosing, so
	// that the lines can be written back.
	opTag string
}

// plainSlot returns the slot of e.plain for s's address (a Fibonacci
// hash of it, as strings cut from one buffer differ only in the low bits
// of their addresses).
func (e *encoder) plainSlot(s string) *string {
	return &e.plain[uint64(uintptr(unsafe.Pointer(unsafe.StringData(s))))*0x9e3779b97f4a7c15>>56]
}

// appendString appends s as appendString does, skipping the scan for
// bytes to escape when s is a string found plain before.
func (e *encoder) appendString(b []byte, s string) []byte {
	if len(s) == 0 {
		return append(b, '"', '"')
	}
	c := e.plainSlot(s)
	if len(*c) != len(s) || unsafe.StringData(*c) != unsafe.StringData(s) {
		if plainPrefix(s) != len(s) {
			return appendString(b, s)
		}
		*c = s
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

type secText struct {
	sec  int64
	n    uint8 // length of text; 0: empty slot
	text [32]byte
}

// row appends vals as one JSON array (a row of a JSON page).
func (e *encoder) row(vals []feed.Value) {
	b := append(e.buf, '[') // a local: appends through e would reload e.buf
	for i := range vals {
		if i > 0 {
			b = append(b, ',')
		}
		b = e.value(b, vals[i])
	}
	e.buf = append(b, ']')
}

func (e *encoder) value(b []byte, v feed.Value) []byte {
	switch v.Kind {
	case feed.KindTime:
		ns := int64(v.Num)
		if e.timeFormat == timeRFC3339 {
			b = append(b, '"')
			b = e.appendRFC3339Nano(b, ns)
			return append(b, '"')
		}
		d := int64(e.timeFormat)
		q := ns / d
		if ns%d < 0 {
			q-- // floor, so that a negative time still orders correctly
		}
		return strconv.AppendInt(b, q, 10)
	case feed.KindSeq, feed.KindUint:
		return appendUint(b, v.Num)
	case feed.KindInt:
		return appendInt(b, int64(v.Num))
	case feed.KindFloat:
		return appendFloat(b, v.Float())
	case feed.KindBool:
		return strconv.AppendBool(b, v.Num != 0)
	case feed.KindString, feed.KindTag:
		return e.appendString(b, v.Str)
	case feed.KindOp:
		b = append(b, '"')
		b = append(b, opName(v)...)
		return append(b, '"')
	}
	return append(b, "null"...)
}

// opName renders an x_op value (docs/contract.md#operation).
func opName(v feed.Value) string {
	if v.Num != 0 {
		return "update"
	}
	return "insert"
}

// appendRFC3339Nano appends ns as time.RFC3339Nano renders it in UTC (the
// fraction without trailing zeros, none when zero), reusing the rendering of
// the whole second when it repeats.
func (e *encoder) appendRFC3339Nano(b []byte, ns int64) []byte {
	sec, frac := ns/1e9, ns%1e9
	if frac < 0 {
		sec, frac = sec-1, frac+1e9
	}
	c := &e.secs[uint64(sec)%uint64(len(e.secs))]
	if c.n == 0 || c.sec != sec {
		start := len(b)
		b = time.Unix(sec, 0).UTC().AppendFormat(b, "2006-01-02T15:04:05")
		if n := len(b) - start; n <= len(c.text) {
			c.sec, c.n = sec, uint8(n)
			copy(c.text[:], b[start:])
		}
	} else {
		b = append(b, c.text[:c.n]...)
	}
	if frac != 0 {
		var digits [10]byte
		digits[0] = '.'
		for i := 9; i >= 1; i-- {
			digits[i] = byte('0' + frac%10)
			frac /= 10
		}
		n := 10
		for digits[n-1] == '0' {
			n--
		}
		b = append(b, digits[:n]...)
	}
	return append(b, 'Z')
}

// digitPairs holds "00" to "99", the two digits of each value below 100.
const digitPairs = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"

// appendUint appends v in decimal, as strconv.AppendUint does: the one- and
// two-digit values (most metrics) directly, longer ones (x_seq, counters,
// byte counts) two digits at a time straight into b, without strconv's
// copy through a scratch buffer. Every integer cell of a drain page goes
// through here.
func appendUint(b []byte, v uint64) []byte {
	switch {
	case v < 10:
		return append(b, byte('0'+v))
	case v < 100:
		return append(b, digitPairs[2*v], digitPairs[2*v+1])
	}
	n := decimalDigits(v)
	b = slices.Grow(b, n)
	start := len(b)
	b = b[:start+n]
	d := b[start:]
	i := n
	for v >= 100 {
		q := v / 100
		r := 2 * (v - 100*q)
		i -= 2
		d[i], d[i+1] = digitPairs[r], digitPairs[r+1]
		v = q
	}
	if v >= 10 {
		d[0], d[1] = digitPairs[2*v], digitPairs[2*v+1]
	} else {
		d[0] = byte('0' + v)
	}
	return b
}

// appendInt appends v in decimal as appendUint does, with a '-' when
// negative (math.MinInt64 included: its magnitude fits a uint64).
func appendInt(b []byte, v int64) []byte {
	if v < 0 {
		return appendUint(append(b, '-'), uint64(^v)+1)
	}
	return appendUint(b, uint64(v))
}

// pow10 holds 10^0 to 10^19.
var pow10 = func() (p [20]uint64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = 10 * p[i-1]
	}
	return p
}()

// decimalDigits returns how many decimal digits v has (1 for 0): log10
// estimated from the bit length (1233/4096 ≈ log10 2), corrected by one
// comparison.
func decimalDigits(v uint64) int {
	t := bits.Len64(v) * 1233 >> 12
	if v < pow10[t] {
		return max(t, 1)
	}
	return t + 1
}

// appendFloat formats f as encoding/json does.
func appendFloat(b []byte, f float64) []byte {
	abs := math.Abs(f)
	fmt := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		fmt = 'e'
	}
	b = strconv.AppendFloat(b, f, fmt, -1, 64)
	if fmt == 'e' {
		// Clean up e-09 to e-9.
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

const hexDigits = "0123456789abcdef"

// jsonPlain holds the bytes appendString copies as they are: printable
// ASCII but '"' and '\\'.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// Bytes of 0x01 and of 0x80 in each of a word's eight lanes.
const (
	lanes01 = 0x0101010101010101
	lanes80 = 0x8080808080808080
)

// plainPrefix returns the length of s's longest prefix of bytes jsonPlain
// holds, testing eight bytes per step (a word's lanes: none below 0x20,
// none at or above 0x80, none '"' or '\\'), then byte by byte from the
// first word that holds another.
func plainPrefix(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		// A lane's high bit ends up set in bad when the lane is below
		// 0x20, at or above 0x80, or zero after xor with '"' or '\\' (the
		// borrow of a subtraction only reaches a lane above a zero one,
		// which is reported anyway).
		q, bs := x^(lanes01*'"'), x^(lanes01*'\\')
		bad := (x - lanes01*0x20) | x | (q-lanes01)&^q | (bs-lanes01)&^bs
		if bad&lanes80 != 0 {
			break
		}
	}
	for i < len(s) && jsonPlain[s[i]] {
		i++
	}
	return i
}

// appendString appends s as a JSON string, escaping as encoding/json does
// (without HTML escaping); invalid UTF-8 becomes U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	// Most strings (tag values, column names) need no escaping.
	i := plainPrefix(s)
	if i == len(s) {
		b = append(b, s...)
		return append(b, '"')
	}
	start := 0
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// object renders a row as one NDJSON object: absent values are omitted and
// x_seq is always present.
func (e *encoder) object(cols []feed.Column, vals []feed.Value) {
	e.buf = append(e.buf, '{')
	first := true
	for i, v := range vals {
		if v.Kind == 0 {
			continue
		}
		if !first {
			e.buf = append(e.buf, ',')
		}
		first = false
		e.buf = appendString(e.buf, cols[i].Name)
		e.buf = append(e.buf, ':')
		e.buf = e.value(e.buf, v)
	}
	e.buf = append(e.buf, '}', '\n')
}

// line renders a row as one ILP line of measurement table: tag columns as
// tags (sorted by key, as ILP writers send them), other columns as fields,
// time in nanoseconds; x_seq is left out. Strings escape only " and \ and
// keep newlines raw, as Telegraf sends them. It reports false, writing
// nothing, when the row has no field value.
func (e *encoder) line(table string, cols []feed.Column, vals []feed.Value) bool {
	start := len(e.buf)
	if table != e.lpName || e.lpTable == nil {
		e.lpName, e.lpTable = table, appendLPEscaped(e.lpTable[:0], table, &lpMeasurementSpecial)
	}
	if len(cols) != len(e.lpCols) || (len(cols) > 0 && &cols[0] != &e.lpCols[0]) {
		e.columns(cols)
	}
	b := append(e.buf, e.lpTable...) // a local: appends through e would reload e.buf
	for _, i := range e.lpTags {
		switch v := &vals[i]; {
		case v.Kind == feed.KindTag && v.Str != "":
			b = append(b, ',')
			b = append(b, e.lpKeys[i]...)
			b = appendLPEscaped(b, v.Str, &lpKeySpecial)
		case v.Kind == feed.KindOp && e.opTag != "":
			b = append(b, ',')
			b = appendLPEscaped(b, e.opTag, &lpKeySpecial)
			b = append(b, '=')
			b = append(b, opName(*v)...)
		}
	}
	sep := byte(' ')
	for _, i := range e.lpFields {
		v := &vals[i]
		if v.Kind == 0 {
			continue
		}
		b = append(b, sep)
		sep = ','
		b = append(b, e.lpKeys[i]...)
		switch v.Kind {
		case feed.KindFloat:
			b = appendFloat(b, v.Float())
		case feed.KindInt:
			b = append(appendInt(b, int64(v.Num)), 'i')
		case feed.KindUint:
			b = append(appendUint(b, v.Num), 'u')
		case feed.KindBool:
			b = strconv.AppendBool(b, v.Num != 0)
		case feed.KindString:
			b = append(b, '"')
			b = appendLPEscaped(b, v.Str, &lpStringSpecial)
			b = append(b, '"')
		}
	}
	if sep == ' ' {
		e.buf = b[:start]
		return false
	}
	if e.lpTime >= 0 && vals[e.lpTime].Kind == feed.KindTime {
		b = appendInt(append(b, ' '), int64(vals[e.lpTime].Num))
	}
	e.buf = append(b, '\n')
	return true
}

// columns prepares line for the columns of a page: their ILP keys, the
// tags in name order, the fields and the time column.
func (e *encoder) columns(cols []feed.Column) {
	e.lpCols, e.lpTags, e.lpFields, e.lpTime, e.lpKeys = cols, e.lpTags[:0], e.lpFields[:0], -1, e.lpKeys[:0]
	for i, c := range cols {
		e.lpKeys = append(e.lpKeys, append(appendLPEscaped(nil, c.Name, &lpKeySpecial), '='))
		switch c.Kind {
		case feed.KindTag, feed.KindOp:
			e.lpTags = append(e.lpTags, i)
		case feed.KindTime:
			e.lpTime = i
		case feed.KindSeq:
		default:
			e.lpFields = append(e.lpFields, i)
		}
	}
	slices.SortFunc(e.lpTags, func(a, b int) int { return strings.Compare(cols[a].Name, cols[b].Name) })
}

// lpSpecial marks the bytes ILP escapes with a backslash in one kind of
// token.
type lpSpecial [256]bool

func newLPSpecial(bytes string) (s lpSpecial) {
	for i := 0; i < len(bytes); i++ {
		s[bytes[i]] = true
	}
	return s
}

var (
	lpMeasurementSpecial = newLPSpecial(", ")
	lpKeySpecial         = newLPSpecial(",= ") // tag keys, tag values, field keys
	lpStringSpecial      = newLPSpecial(`"\`)  // string field values
)

// appendLPEscaped appends s with a backslash before each byte in special.
func appendLPEscaped(b []byte, s string, special *lpSpecial) []byte {
	i := 0
	for i < len(s) && !special[s[i]] {
		i++
	}
	b = append(b, s[:i]...) // the usual case: all of s, one scan and one copy
	for ; i < len(s); i++ {
		if special[s[i]] {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return b
}
