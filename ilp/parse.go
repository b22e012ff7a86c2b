package ilp

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/influxdata/line-protocol/v2/lineprotocol"

	"github.com/ingestd/ingestd/feed"
)

// Default limits (docs/reference.md#daemon-flags).
const (
	DefaultMaxLineBytes   = 1 << 20
	DefaultMaxKeyBytes    = feed.DefaultMaxNameBytes
	DefaultMaxStringBytes = 1 << 20
)

// maxAbsTimestamp bounds timestamps to ±9223372036854775806 ns, the range
// every write path accepts (feed.CheckTime, docs/guide.md#line-rules).
const maxAbsTimestamp = feed.MaxTime

// Limits bound what one line may carry; a line past any of them is rejected
// like any bad line.
type Limits struct {
	// MaxLineBytes is the longest line in bytes, newline excluded.
	MaxLineBytes int
	// MaxKeyBytes is the longest measurement, tag key or field key in bytes,
	// 1..feed.MaxNameBytesCeiling; cmd/ingestd sets it to --max-name-bytes
	// (a name must fit a whole storage key, docs/contract.md#names).
	MaxKeyBytes int
	// MaxStringBytes is the longest tag value or string field value in
	// bytes (default 1 MiB, InfluxDB's limit).
	MaxStringBytes int
}

// DefaultLimits returns the default limits of docs/reference.md#daemon-flags.
func DefaultLimits() Limits {
	return Limits{MaxLineBytes: DefaultMaxLineBytes, MaxKeyBytes: DefaultMaxKeyBytes, MaxStringBytes: DefaultMaxStringBytes}
}

var bom = []byte("\xef\xbb\xbf")

// TrimBOM strips one leading UTF-8 byte-order mark.
func TrimBOM(b []byte) []byte { return bytes.TrimPrefix(b, bom) }

// Parser turns ILP lines into feed points. Everything the points it returns
// hold lives in memory the Parser never writes again, so a batch may be
// handed to the sequencer while the Parser goes on; only Reuse, once the
// batch is answered, hands the memory of their field sets out again. Not
// safe for concurrent use.
type Parser struct {
	lim    Limits
	intern map[string]string
	// lastKeys are the interned keys of the previous line by position.
	lastKeys [64]string
	arena    []byte
	// copied counts the bytes copied into the arena since the last Reuse.
	copied int
	tags   []feed.Tag
	fields []feed.PointField
	key    []byte
	// series caches parsed measurement and tag sections by their bytes
	// (see parseKnown); seriesBytes is the sum of its keys' lengths and
	// of their shapes' (knownSeries.shapeBytes).
	series      map[string]*knownSeries
	seriesBytes int
	// internedBytes is the sum of intern's keys' lengths.
	internedBytes int
	// budget, when set, is the server's budget the caches' bytes are
	// taken from (charged: what they hold of it, Release gives it back).
	budget  *cacheBudget
	charged int64
	// cacheArena and cacheTags hold the known series' copies of their
	// tags and series keys (remember), apart from the points' memory,
	// never written below their length.
	cacheArena []byte
	cacheTags  []feed.Tag
	rest       []byte // a field section behind a one-byte measurement
	// usedSlabs are the field slabs handed out since the last Reuse (at
	// most maxReusedSlabs of them are remembered), spareSlabs the ones
	// Reuse gave back, handed out again before any new one is made.
	usedSlabs, spareSlabs [][]feed.PointField
}

// knownSeries is a measurement and tag section parsed before: what every
// later line starting with the same bytes shares.
type knownSeries struct {
	table  string
	tags   []feed.Tag // sorted; shared by every point of the series, never written
	series string
	// shape is the field keys, in line order, of the series' last line
	// that plainFields accepted (interned, each checked): a later line with
	// the same keys skips their checks.
	shape []string
	// shapeBytes is what shape holds: its keys' lengths and 16 bytes of
	// string header each (keepShape).
	shapeBytes int
}

// Bounds of one Parser's caches: the measurement and key intern table
// (entries and bytes: a full table takes no more), and the known series
// (entries, and bytes of their tag sections, each at most maxKnownPrefix,
// and of their shapes' keys). A full series cache is emptied and
// refilled, so a long TCP connection follows its writer's current
// series; a shape that does not fit is not kept. Every pooled HTTP
// parser and every TCP connection has its caches: without the byte
// bounds, lines of long keys made each hold gigabytes.
const (
	maxInterned         = 4096
	maxInternedBytes    = 1 << 20
	maxKnownSeries      = 4096
	maxKnownSeriesBytes = 1 << 20
	maxKnownPrefix      = 4096
)

// NewParser returns a parser enforcing lim.
func NewParser(lim Limits) *Parser {
	return &Parser{lim: lim, intern: make(map[string]string), series: make(map[string]*knownSeries)}
}

// Parse parses one line (without its newline; a trailing \r is ignored) and
// appends its point to b. lineNo is reported in errors; now (nanoseconds)
// truncated to prec is the time of a line without a timestamp. A blank or comment line adds
// nothing and returns nil.
func (p *Parser) Parse(b *feed.Batch, line []byte, lineNo int, prec Precision, now int64) *ParseError {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if len(line) > p.lim.MaxLineBytes {
		return &ParseError{Line: lineNo, Reason: ReasonLineTooLong,
			Err: fmt.Errorf("line is %d bytes, longer than --max-line-bytes=%d", len(line), p.lim.MaxLineBytes)}
	}
	if isBlank(line) {
		return nil
	}
	pt, perr := p.parse(line, prec, now)
	if perr != nil {
		perr.Line = lineNo
		return perr
	}
	if pt.Table != "" {
		pt.Line = lineNo
		b.Points = append(b.Points, pt)
	}
	return nil
}

// isBlank reports whether line holds only spaces and tabs or is a comment
// (its first other byte is '#'), as InfluxDB skips them. The decoder alone
// would reject a tab there.
func isBlank(line []byte) bool {
	for _, c := range line {
		if c != ' ' && c != '\t' {
			return c == '#'
		}
	}
	return true
}

// maxDecoderMessage bounds a decoder error message: the decoder quotes
// whole keys, and an error must not repeat a large input.
const maxDecoderMessage = 2*feed.MaxEchoBytes + 64

func syntaxErr(err error) *ParseError {
	pe := &ParseError{Reason: ReasonSyntax, Err: err}
	var de *lineprotocol.DecodeError
	if errors.As(err, &de) {
		pe.Column, pe.Err = de.Column, de.Err
	}
	if msg := pe.Err.Error(); len(msg) > maxDecoderMessage {
		cut := maxDecoderMessage
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		pe.Err = errors.New(msg[:cut] + "…")
	}
	return pe
}

// noFieldsOr returns the rejection of a line without a field set, which
// the decoder reports as a syntax error such as "empty tag name", or err as
// a syntax error when line has a field set.
func noFieldsOr(line []byte, err error) *ParseError {
	if hasFieldSet(line) {
		return syntaxErr(err)
	}
	return &ParseError{Reason: ReasonNoFields, Err: errors.New("line has no fields")}
}

// hasFieldSet reports whether anything follows the first unescaped space
// of line (the end of the measurement and tag set; a backslash always
// escapes a space there).
func hasFieldSet(line []byte) bool {
	line = bytes.TrimLeft(line, " ")
	for i, c := range line {
		if c == ' ' && line[i-1] != '\\' {
			return len(bytes.TrimLeft(line[i:], " ")) > 0
		}
	}
	return false
}

// column returns the 1-based column of line[off], counted from the last
// newline before it (a string field may hold raw newlines).
func column(line []byte, off int) int {
	return off - bytes.LastIndexByte(line[:off], '\n')
}

// columnOf returns the column of v in line when v is a part of line (the
// decoder returns numbers and booleans in place), else 0.
func columnOf(line, v []byte) int {
	off := offsetOf(line, v)
	if off < 0 {
		return 0
	}
	return column(line, off)
}

// offsetOf returns the offset of v in line when v is a part of line, else
// -1 (the decoder returns an unescaped copy of a key with escapes).
func offsetOf(line, v []byte) int {
	if len(v) == 0 || cap(v) > cap(line) {
		return -1
	}
	off := cap(line) - cap(v)
	if off+len(v) > len(line) || &line[off] != &v[0] {
		return -1
	}
	return off
}

// invalidUTF8 returns the column of the first byte of line that is not
// valid UTF-8, or 0 when line is valid.
func invalidUTF8(line []byte) int {
	if utf8.Valid(line) {
		return 0
	}
	for off := 0; off < len(line); {
		r, n := utf8.DecodeRune(line[off:])
		if r == utf8.RuneError && n == 1 {
			return column(line, off)
		}
		off += n
	}
	return 0
}

// q quotes part of a line for an error message, at most feed.MaxEchoBytes
// of it.
func q(b []byte) string { return feed.QuoteInput(unsafe.String(unsafe.SliceData(b), len(b))) }

// checkKey applies the key rules every write path applies
// (feed.CheckKey: length, UTF-8, control characters, a trailing
// backslash, the reserved keys) to a measurement, tag key or field key.
func (p *Parser) checkKey(what string, k []byte) *ParseError {
	if err := feed.CheckKey(what, unsafe.String(unsafe.SliceData(k), len(k)), p.lim.MaxKeyBytes); err != nil {
		var ne *feed.NameError
		reason := ReasonInvalidName
		if errors.As(err, &ne) {
			switch ne.Rule {
			case feed.RuleLength:
				reason = ReasonKeyTooLong
			case feed.RuleUTF8:
				reason = ReasonInvalidUTF8
			case feed.RuleReserved:
				reason = ReasonReservedKey
			}
		}
		// The message must not alias the line's buffer.
		return &ParseError{Reason: reason, Err: errors.New(err.Error())}
	}
	return nil
}

// valueErr turns a refusal of feed.CheckTagValue into the line's error,
// its message copied (the refusal may alias the line's buffer).
func valueErr(err error) *ParseError {
	reason := ReasonSyntax
	var ve *feed.ValueError
	if errors.As(err, &ve) {
		switch ve.Rule {
		case feed.RuleLength:
			reason = ReasonStringTooLong
		case feed.RuleUTF8:
			reason = ReasonInvalidUTF8
		}
	}
	return &ParseError{Reason: reason, Err: errors.New(err.Error())}
}

func (p *Parser) parse(line []byte, prec Precision, now int64) (feed.Point, *ParseError) {
	sp := bytes.IndexByte(line, ' ')
	if sp > 0 && sp <= maxKnownPrefix {
		if ks := p.series[string(line[:sp])]; ks != nil {
			if pt, ok := p.parseKnown(ks, line[sp:], prec, now); ok {
				return pt, nil
			}
			// A bad field section: the full parse below reports it exactly.
		}
	}
	var pt feed.Point
	dec := lineprotocol.NewDecoderWithBytes(line)
	if !dec.Next() {
		return pt, nil // blank or comment
	}
	// Checked first: the decoder reports invalid UTF-8 as a syntax error.
	if col := invalidUTF8(line); col > 0 {
		return pt, &ParseError{Column: col, Reason: ReasonInvalidUTF8, Err: errors.New("line is not valid UTF-8")}
	}
	m, err := dec.Measurement()
	if err != nil {
		return pt, syntaxErr(err)
	}
	if perr := p.checkKey("measurement", m); perr != nil {
		return pt, perr
	}
	tags := p.tags[len(p.tags):]
	for {
		k, v, err := dec.NextTag()
		if err != nil {
			return pt, noFieldsOr(line, err)
		}
		if k == nil {
			break
		}
		if perr := p.checkKey("tag key", k); perr != nil {
			return pt, perr
		}
		if err := feed.CheckTagValue(unsafe.String(unsafe.SliceData(k), len(k)), unsafe.String(unsafe.SliceData(v), len(v)), p.lim.MaxStringBytes); err != nil {
			return pt, valueErr(err)
		}
		// Insertion sort: tags usually arrive sorted.
		i := len(tags)
		tags = append(tags, feed.Tag{})
		for i > 0 && tags[i-1].Key > string(k) {
			tags[i] = tags[i-1]
			i--
		}
		if i > 0 && tags[i-1].Key == string(k) {
			return pt, &ParseError{Reason: ReasonDuplicateTag, Err: fmt.Errorf("duplicate tag key %s", q(k))}
		}
		tags[i] = feed.Tag{Key: p.internAt(1+len(tags), k), Value: p.copyString(v)}
	}
	fields, ts, fieldsAt, perr := p.parseFields(dec, line, tags, prec, now)
	if perr != nil {
		return pt, perr
	}
	// Commit the slabs only now: a rejected line leaves nothing behind.
	p.tags = p.growTags(tags)
	p.fields = p.growFields(fields)
	pt.Table = p.internAt(0, m)
	pt.Tags = tags[:len(tags):len(tags)]
	pt.Fields = fields[:len(fields):len(fields)]
	pt.Time = ts
	p.key = p.key[:0]
	for i, t := range tags {
		if i > 0 {
			p.key = append(p.key, ',')
		}
		p.key = feed.AppendEscapedTag(p.key, t.Key)
		p.key = append(p.key, '=')
		p.key = feed.AppendEscapedTag(p.key, t.Value)
	}
	pt.Series = p.copyString(p.key)
	p.remember(line, sp, fieldsAt, &pt)
	return pt, nil
}

// remember caches the measurement and tag section of a line just parsed
// into pt when it is line[:sp] exactly: it holds no backslash (so its
// first space ends it, whatever the escaping rules), and the decoder found
// the field set after nothing but spaces (fieldsAt, the offset of the
// first field key in line, -1 when unknown).
func (p *Parser) remember(line []byte, sp, fieldsAt int, pt *feed.Point) {
	if sp <= 0 || sp > maxKnownPrefix || fieldsAt <= sp || bytes.IndexByte(line[:sp], '\\') >= 0 ||
		len(bytes.Trim(line[sp:fieldsAt], " ")) > 0 {
		return
	}
	// The cache keeps copies of the tags and series key: the point's live
	// in the tag slab and the arena, whose chunks hold other lines'
	// strings too (a long string field beside each new series' tags kept
	// a 64 KiB chunk alive per series).
	n := len(pt.Series)
	for _, t := range pt.Tags {
		n += len(t.Value)
	}
	if len(p.series) >= maxKnownSeries || p.seriesBytes+sp+n > maxKnownSeriesBytes {
		p.uncharge(int64(p.seriesBytes) + int64(len(p.series))*knownSeriesOverhead)
		clear(p.series)
		p.seriesBytes = 0
		p.cacheArena, p.cacheTags = nil, nil
	}
	if !p.charge(int64(sp+n) + knownSeriesOverhead) {
		return
	}
	if len(p.cacheArena)+n > cap(p.cacheArena) {
		p.cacheArena = make([]byte, 0, max(cacheChunk, n))
	}
	own := func(s string) string {
		if s == "" {
			return ""
		}
		start := len(p.cacheArena)
		p.cacheArena = append(p.cacheArena, s...)
		return unsafe.String(&p.cacheArena[start], len(s))
	}
	if len(p.cacheTags)+len(pt.Tags) > cap(p.cacheTags) {
		p.cacheTags = make([]feed.Tag, 0, max(cacheChunk/32, len(pt.Tags)))
	}
	start := len(p.cacheTags)
	for _, t := range pt.Tags {
		p.cacheTags = append(p.cacheTags, feed.Tag{Key: t.Key, Value: own(t.Value)}) // keys are interned or their own
	}
	tags := p.cacheTags[start:len(p.cacheTags):len(p.cacheTags)]
	p.series[string(line[:sp])] = &knownSeries{table: pt.Table, tags: tags, series: own(pt.Series)}
	p.seriesBytes += sp + n
}

// parseKnown parses a line whose measurement and tag section is ks, rest
// being the line from the space that ends that section: only the field set
// and timestamp are decoded, by plainFields when they are plain, else by
// the decoder behind a one-byte measurement. It reports false for any
// error, for the full parse to report it with its column.
func (p *Parser) parseKnown(ks *knownSeries, rest []byte, prec Precision, now int64) (feed.Point, bool) {
	if !utf8.Valid(rest) {
		return feed.Point{}, false
	}
	if fields, ts, ok := p.plainFields(rest, ks, prec, now); ok {
		p.fields = p.growFields(fields)
		return feed.Point{Table: ks.table, Series: ks.series, Tags: ks.tags, Fields: fields[:len(fields):len(fields)], Time: ts}, true
	}
	p.rest = append(append(p.rest[:0], 'm'), rest...)
	dec := lineprotocol.NewDecoderWithBytes(p.rest)
	if !dec.Next() {
		return feed.Point{}, false
	}
	if _, err := dec.Measurement(); err != nil {
		return feed.Point{}, false
	}
	if k, _, err := dec.NextTag(); k != nil || err != nil {
		return feed.Point{}, false
	}
	fields, ts, _, perr := p.parseFields(dec, p.rest, ks.tags, prec, now)
	if perr != nil {
		return feed.Point{}, false
	}
	p.fields = p.growFields(fields)
	return feed.Point{Table: ks.table, Series: ks.series, Tags: ks.tags, Fields: fields[:len(fields):len(fields)], Time: ts}, true
}

// parseFields decodes the field set and timestamp that follow the tag
// set tags, checking the field keys and values, the tag–field rule and
// the end of the line. fieldsAt is the offset of the first field key in
// line (-1 when the decoder returned an unescaped copy of it). The fields
// are a tail of the field slab, not yet committed.
func (p *Parser) parseFields(dec *lineprotocol.Decoder, line []byte, tags []feed.Tag, prec Precision, now int64) (fields []feed.PointField, ts int64, fieldsAt int, _ *ParseError) {
	fieldsAt = -1
	fields = p.fields[len(p.fields):]
	for {
		k, kind, v, err := dec.NextFieldBytes()
		if err != nil {
			if len(fields) == 0 {
				return nil, 0, -1, noFieldsOr(line, err)
			}
			return nil, 0, -1, syntaxErr(err)
		}
		if k == nil {
			break
		}
		if fieldsAt < 0 && len(fields) == 0 {
			fieldsAt = offsetOf(line, k)
		}
		// A key the previous line had at the same position passed the
		// checks then.
		pos := 1 + len(tags) + len(fields)
		if pos >= len(p.lastKeys) || p.lastKeys[pos] != string(k) || len(k) == 0 {
			if perr := p.checkKey("field key", k); perr != nil {
				return nil, 0, -1, perr
			}
		}
		val, perr := p.fieldValue(k, kind, v)
		if perr != nil {
			if perr.Reason == ReasonSyntax {
				perr.Column = columnOf(line, v)
			}
			return nil, 0, -1, perr
		}
		dup := false
		for i := range fields {
			if fields[i].Key == string(k) {
				if fields[i].Value.Kind != val.Kind {
					return nil, 0, -1, &ParseError{Reason: ReasonFieldType, Err: fmt.Errorf("field %s appears twice with types %s and %s", q(k), fields[i].Value.Kind, val.Kind)}
				}
				fields[i].Value, dup = val, true
			}
		}
		if !dup {
			fields = append(fields, feed.PointField{Key: p.internAt(pos, k), Value: val})
		}
	}
	if len(fields) == 0 {
		return nil, 0, -1, &ParseError{Reason: ReasonNoFields, Err: errors.New("line has no fields")}
	}
	for i := range tags {
		for j := range fields {
			if tags[i].Key == fields[j].Key {
				return nil, 0, -1, &ParseError{Reason: ReasonTagField, Err: fmt.Errorf("%s is used as a tag and a field", feed.QuoteInput(tags[i].Key))}
			}
		}
	}
	tb, err := dec.TimeBytes()
	if err != nil {
		return nil, 0, -1, syntaxErr(err)
	}
	// Without a timestamp: the receive time truncated to the precision, as
	// InfluxDB, Telegraf and line-protocol do.
	ts = now - now%int64(prec)
	if tb != nil {
		var perr *ParseError
		if ts, perr = parseTime(tb, prec); perr != nil {
			perr.Column = columnOf(line, tb)
			return nil, 0, -1, perr
		}
	}
	if dec.Next() {
		return nil, 0, -1, &ParseError{Reason: ReasonSyntax, Err: errors.New("unexpected data after the timestamp")}
	}
	return fields, ts, fieldsAt, nil
}

func (p *Parser) fieldValue(k []byte, kind lineprotocol.ValueKind, v []byte) (feed.Value, *ParseError) {
	bad := func(reason string, err error) (feed.Value, *ParseError) {
		return feed.Value{}, &ParseError{Reason: reason, Err: fmt.Errorf("field %s: %w", q(k), err)}
	}
	switch kind {
	case lineprotocol.Float:
		// strconv.ParseFloat, under the decoder, also takes hex floats,
		// NaN, Inf/infinity and digits separated by underscores.
		if bytes.ContainsAny(v, "xXnN_") {
			return bad(ReasonSyntax, fmt.Errorf("invalid float %s (hex floats, NaN, Inf and underscores are not allowed)", q(v)))
		}
	case lineprotocol.String:
		// feed.CheckFieldValue's rules: the length here, UTF-8 for the
		// whole line before.
		if len(v) > p.lim.MaxStringBytes {
			return bad(ReasonStringTooLong, fmt.Errorf("string is %d bytes, longer than --ilp-max-string-bytes=%d", len(v), p.lim.MaxStringBytes))
		}
		return feed.Value{Kind: feed.KindString, Str: p.copyString(v)}, nil
	}
	lv, err := lineprotocol.NewValueFromBytes(kind, v)
	if err != nil {
		return bad(ReasonSyntax, err)
	}
	switch kind {
	case lineprotocol.Float:
		return feed.Value{Kind: feed.KindFloat, Num: math.Float64bits(lv.FloatV())}, nil
	case lineprotocol.Int:
		return feed.Value{Kind: feed.KindInt, Num: uint64(lv.IntV())}, nil
	case lineprotocol.Uint:
		return feed.Value{Kind: feed.KindUint, Num: lv.UintV()}, nil
	case lineprotocol.Bool:
		if lv.BoolV() {
			return feed.Value{Kind: feed.KindBool, Num: 1}, nil
		}
		return feed.Value{Kind: feed.KindBool}, nil
	}
	return bad(ReasonSyntax, fmt.Errorf("unknown value kind %v", kind))
}

func parseTime(b []byte, prec Precision) (int64, *ParseError) {
	x, err := strconv.ParseInt(unsafe.String(&b[0], len(b)), 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return 0, &ParseError{Reason: ReasonTimestamp, Err: fmt.Errorf("timestamp %s is out of range ±%d ns", q(b), int64(maxAbsTimestamp))}
	}
	if err != nil {
		return 0, &ParseError{Reason: ReasonSyntax, Err: fmt.Errorf("invalid timestamp %s", q(b))}
	}
	if prec != Nanosecond {
		if x > maxAbsTimestamp/int64(prec) || x < -maxAbsTimestamp/int64(prec) {
			return 0, &ParseError{Reason: ReasonTimestamp, Err: fmt.Errorf("timestamp %s×%dns is out of range ±%d ns", q(b), int64(prec), int64(maxAbsTimestamp))}
		}
		x *= int64(prec)
	}
	if x > maxAbsTimestamp || x < -maxAbsTimestamp {
		return 0, &ParseError{Reason: ReasonTimestamp, Err: fmt.Errorf("timestamp %d is out of range ±%d ns", x, int64(maxAbsTimestamp))}
	}
	return x, nil
}

// internAt returns b interned, comparing it first with the key found at the
// same position (0 the measurement, then tags and fields in line order) of
// the previous line: consecutive lines mostly repeat their keys, and a
// comparison costs less than hashing.
func (p *Parser) internAt(pos int, b []byte) string {
	if pos >= len(p.lastKeys) {
		return p.internBytes(b)
	}
	if s := p.lastKeys[pos]; s == string(b) && s != "" {
		return s
	}
	s := p.internBytes(b)
	p.lastKeys[pos] = s
	return s
}

// charge takes n bytes of the caches' budget (true without one).
func (p *Parser) charge(n int64) bool {
	if p.budget == nil {
		return true
	}
	if !p.budget.take(n) {
		return false
	}
	p.charged += n
	return true
}

// uncharge gives n bytes of the caches' budget back.
func (p *Parser) uncharge(n int64) {
	if p.budget != nil {
		p.budget.give(n)
		p.charged -= n
	}
}

// Release empties the Parser's caches and gives what they held of the
// server's cache budget back: call it when the Parser is done with (a TCP
// connection closed, an idle HTTP parser not kept). The points it returned
// stay valid.
func (p *Parser) Release() {
	clear(p.series)
	clear(p.intern)
	p.seriesBytes, p.internedBytes = 0, 0
	p.cacheArena, p.cacheTags = nil, nil
	p.uncharge(p.charged)
}

// internBytes returns b as a string shared by equal keys.
func (p *Parser) internBytes(b []byte) string {
	if s, ok := p.intern[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(p.intern) < maxInterned && p.internedBytes+len(s) <= maxInternedBytes && p.charge(int64(len(s))+internedOverhead) {
		p.intern[s] = s
		p.internedBytes += len(s)
	}
	return s
}

// copyString copies b into the arena and returns it as a string. The arena
// is never written below its length, so the string stays valid.
func (p *Parser) copyString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(p.arena)+len(b) > cap(p.arena) {
		p.arena = make([]byte, 0, max(arenaChunk, len(b)))
	}
	start := len(p.arena)
	p.arena = append(p.arena, b...)
	p.copied += len(b)
	return unsafe.String(&p.arena[start], len(b))
}

const slabLen = 4096

// arenaChunk is the size of the arena's chunks; a longer string gets a
// chunk of its own.
const arenaChunk = 64 << 10

// cacheChunk is the size of the known series' chunks of bytes, and of
// their tag slabs (in bytes): small, for they are outside the budget's
// count.
const cacheChunk = 8 << 10

// growTags makes s (a tail of the tag slab, possibly reallocated by append)
// part of the slab and ensures room for another line.
func (p *Parser) growTags(s []feed.Tag) []feed.Tag {
	if cap(s)-len(s) < 64 {
		return make([]feed.Tag, 0, slabLen)
	}
	return s[len(s):]
}

func (p *Parser) growFields(s []feed.PointField) []feed.PointField {
	if cap(s)-len(s) < 256 {
		return p.newFieldSlab()
	}
	return s[len(s):]
}

// maxReusedSlabs bounds the field slabs Reuse gives back (each slabLen
// fields, 192 KiB): enough for the field sets of a 5,000-line TSBS body
// (about 55,000 fields) and no more held by an idle Parser.
const maxReusedSlabs = 16

// newFieldSlab returns an empty field slab, a spare one when there is.
func (p *Parser) newFieldSlab() []feed.PointField {
	var s []feed.PointField
	if n := len(p.spareSlabs); n > 0 {
		s, p.spareSlabs = p.spareSlabs[n-1][:0], p.spareSlabs[:n-1]
	} else {
		s = make([]feed.PointField, 0, slabLen)
	}
	if len(p.usedSlabs) < maxReusedSlabs {
		p.usedSlabs = append(p.usedSlabs, s)
	}
	return s
}

// Reuse lets the Parser write again the memory of the field sets of every
// point it returned so far, so that a Parser that parses batch after batch
// (a pooled HTTP parser) does not allocate (and the kernel clear) theirs
// anew each time. Call it only when no such point is read any more: the
// sequencer has answered the batch holding them (a batch whose wait was
// abandoned may still be read). Everything else a point holds (tags,
// series key, strings) stays where it is, never written again: known
// series share it.
//
// An idle Parser keeps at most half an arena chunk of the batch's strings
// alive (a pooled parser would else hold up to a body's worth of them):
// the slabs given back are cleared when more than a chunk was copied into
// the arena since the last Reuse, and the arena's last chunk is let go
// when more than half of it is used (a long string's own chunk is full).
func (p *Parser) Reuse() {
	if p.copied > arenaChunk {
		for _, s := range p.usedSlabs {
			clear(s[:cap(s)])
		}
	}
	p.copied = 0
	p.spareSlabs = append(p.spareSlabs, p.usedSlabs...)
	clear(p.usedSlabs)
	p.usedSlabs = p.usedSlabs[:0]
	p.fields = p.newFieldSlab()
	if len(p.arena) > arenaChunk/2 {
		p.arena = nil
	}
}

// Detach makes the Parser refer to none of the memory of the points it
// returned so far: the next line starts a new field slab, tag slab and
// arena chunk, and no slab is remembered for Reuse. A parser whose
// batches overlap (a TCP connection fills one while the previous one
// commits) calls it as it hands a batch over, so that the batch's
// strings go with it once committed instead of staying reachable from
// the connection's parser for as long as it lives.
func (p *Parser) Detach() {
	p.copied = 0
	clear(p.usedSlabs)
	p.usedSlabs = p.usedSlabs[:0]
	p.fields, p.tags, p.arena = nil, nil, nil
}

// ParseAll splits data into lines and parses each into b, numbering lines
// from firstLine. It returns the bad lines' errors in line order and the
// number of the next line. A final line without a newline is parsed too.
func (p *Parser) ParseAll(b *feed.Batch, data []byte, firstLine int, prec Precision, now int64) ([]*ParseError, int) {
	var errs []*ParseError
	var sp Splitter
	line := firstLine
	// Room for every line at once instead of growing by doubling, bounded
	// for bodies of tiny lines (a TSBS line is about 400 bytes).
	b.Points = slices.Grow(b.Points, min(bytes.Count(data, []byte{'\n'})+1, len(data)/64+1))
	for len(data) > 0 {
		end := sp.Next(data)
		l := data
		if end >= 0 {
			l, data = data[:end], data[end+1:]
		} else {
			data = nil
		}
		if perr := p.Parse(b, l, line, prec, now); perr != nil {
			errs = append(errs, perr)
		}
		line += 1 + strings.Count(unsafe.String(unsafe.SliceData(l), len(l)), "\n")
	}
	return errs, line
}
