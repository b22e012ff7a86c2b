package rowengine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/klauspost/compress/s2"

	"github.com/ingestd/ingestd/store"
)

// Keyspace tags; see doc.go. ksMeta and ksConsumer are the owner's
// (OwnerKeyspaces): the engine never reads or writes them.
const (
	ksMeta     = 'm'
	ksNext     = 'n'
	ksVersion  = 'v'
	ksSeries   = 's'
	ksSync     = 'l'
	ksUnsync   = 'u'
	ksPoint    = 'p'
	ksDup      = 'd'
	ksConsumer = 'c'
	ksRun      = 'r'
	ksDrop     = 'x'
	ksRef      = 'q'
	ksTorn     = 'w'
	ksHead     = 'k'
	ksOver     = 'o'
)

// layoutVersion is the on-disk layout this build writes. It opens
// versions 1 (no series runs: every point had a point-index entry) and 2
// (a point-index entry listed every fragment at its point): Open converts
// their entries of overwritten points into unions (see points.go), then
// upgrades the version mark. Version 3 had no head records ('k'): an
// older build would not see the runs they hold, so 4 keeps it out.
// Version 4 never compressed a block's body (appendBlock): its blocks
// read as they are, and an older build cannot read 5's. Version 5 wrote
// an overwritten point's entry and a reference entry ('q') at every
// commit; 6 keeps them in the head and stores the references as
// overwrite runs ('o'). A 5 store reads as it is (its 'q' entries stay
// valid); an older build would not see 6's overwrite runs. Version 7
// writes compact block bodies (bodyCompact), which a 6 build refuses to
// decode; older blocks read as they are. Version 8 writes head-record
// sections of one point (headSingle), which a 7 build would misread
// after a crash; older records replay as they are. Version 9 writes run
// values of deltas of deltas (runDoD), which an 8 build refuses as an
// unknown run kind; older runs read as they are. Version 10 writes head
// records whose one-point runs name their fragment in the block
// (headFrag), which a 9 build would misread after a crash; older records
// replay as they are. Version 11 is the default backend's: it stores a
// table's columns in chunks after its metadata (badgerstore's meta.go),
// which a 10 build would read as a table without columns; older
// metadata reads as it is.
const layoutVersion = 11

// Block metadata (badger's user meta byte of a block's key).
const (
	// metaNoFirst marks a block none of whose fragments is its point's
	// first: every one overwrites a point stored before it. A read that
	// returns each point once, at its first fragment (readRows), skips
	// such a block without reading its value.
	metaNoFirst = 1
)

var errShort = errors.New("truncated encoding")

// A keyspace's floor is two empty keys below all of its keys, its tag
// alone and its tag and a zero byte ('r', 'r' 0; 'p', 'p' 0), written by
// Open. A reverse badger iterator does not stop at its prefix: a seek
// that finds no live key of the keyspace at or below its target walks
// on, key by key, past every deleted key and every version newer than
// its view (a split commit's own writes), until it holds two live keys,
// whatever their keyspace: a backfill's look-ups then cost the size of
// the commit each. The floor's two live keys end that walk. Scans of a
// whole keyspace skip them (keyspaceFloor).
func keyspaceFloor(k []byte) bool { return len(k) <= 2 }

// tableKey returns ks|tid|a (17 bytes).
func tableKey(ks byte, tid, a uint64) []byte {
	k := make([]byte, 17)
	k[0] = ks
	binary.BigEndian.PutUint64(k[1:], tid)
	binary.BigEndian.PutUint64(k[9:], a)
	return k
}

func tablePrefix(ks byte, tid uint64) []byte {
	k := make([]byte, 9)
	k[0] = ks
	binary.BigEndian.PutUint64(k[1:], tid)
	return k
}

// pointKey returns ks|tid|sid|ts (25 bytes) with the sign of ts flipped.
func pointKey(dst []byte, ks byte, tid, sid uint64, ts int64) []byte {
	dst = append(dst[:0], ks)
	dst = binary.BigEndian.AppendUint64(dst, tid)
	dst = binary.BigEndian.AppendUint64(dst, sid)
	return binary.BigEndian.AppendUint64(dst, uint64(ts)^(1<<63))
}

func pointKeyTime(k []byte) int64 { return int64(binary.BigEndian.Uint64(k[17:]) ^ (1 << 63)) }

// ref names one stored fragment: a synced one by its x_seq, an unsynced one
// by block number and index.
type ref struct {
	seq   uint64 // x_seq; 0 for an unsynced fragment
	block uint64
	idx   uint64
}

func appendRef(dst []byte, r ref) []byte {
	if r.seq != 0 {
		dst = append(dst, 'L')
		return binary.AppendUvarint(dst, r.seq)
	}
	dst = append(dst, 'U')
	dst = binary.AppendUvarint(dst, r.block)
	return binary.AppendUvarint(dst, r.idx)
}

// decodeRefs appends the references of a legacy point-index entry (a
// list of references) to refs.
func decodeRefs(refs []ref, b []byte) ([]ref, error) {
	for len(b) > 0 {
		r, n, err := decodeRef(b)
		if err != nil {
			return nil, err
		}
		refs = append(refs, r)
		b = b[n:]
	}
	return refs, nil
}

// decodeRef decodes the reference at the start of b and its length.
func decodeRef(b []byte) (r ref, n int, err error) {
	if len(b) == 0 {
		return r, 0, errShort
	}
	switch b[0] {
	case 'L':
		var k int
		if r.seq, k = binary.Uvarint(b[1:]); k <= 0 || r.seq == 0 {
			return r, 0, errShort
		}
		return r, 1 + k, nil
	case 'U':
		var k, j int
		if r.block, k = binary.Uvarint(b[1:]); k <= 0 {
			return r, 0, errShort
		}
		if r.idx, j = binary.Uvarint(b[1+k:]); j <= 0 {
			return r, 0, errShort
		}
		return r, 1 + k + j, nil
	}
	return r, 0, fmt.Errorf("unknown reference tag %q", b[0])
}

// skipEvery is the fragment interval of a block's skip index: a reader
// positions itself at any fragment by decoding at most skipEvery-1 others.
const skipEvery = 64

// appendBlock encodes fragments as a block (see doc.go) with a compact
// body (bodyCompact). body and offs are scratch space for the fragments
// and the skip index and are returned for reuse; dst grows at most once,
// to the block's size. A body of at least minCompressBytes is compressed
// when that saves an eighth of it (bodyS2).
func appendBlock(dst []byte, firstSeq uint64, commitTime int64, frags []store.Fragment, body []byte, offs []uint64) ([]byte, []byte, []uint64) {
	body = body[:0]
	offs = offs[:0]
	var prev *store.Fragment
	for i := range frags {
		if i%skipEvery == 0 {
			offs = append(offs, uint64(len(body)))
			prev = nil
		}
		body = appendCompactFragment(body, &frags[i], prev)
		prev = &frags[i]
	}
	room := len(body)
	if len(body) >= minCompressBytes {
		room = max(room, s2.MaxEncodedLen(len(body)))
	}
	dst = slices.Grow(dst, (6+len(offs))*binary.MaxVarintLen64+room)
	dst = binary.AppendUvarint(dst, firstSeq)
	dst = binary.AppendVarint(dst, commitTime)
	dst = binary.AppendUvarint(dst, uint64(len(frags)))
	h := len(dst)
	dst = append(dst, 0, bodyCompact) // no skip index has 0 entries: the mark of a format byte
	dst = binary.AppendUvarint(dst, uint64(len(offs)))
	for _, o := range offs {
		dst = binary.AppendUvarint(dst, o)
	}
	if len(body) >= minCompressBytes {
		sizeAt := len(dst)
		dst = binary.AppendUvarint(dst, uint64(len(body)))
		// Encoded in place: dst has room for the largest encoding.
		if enc := s2.Encode(dst[len(dst):cap(dst)], body); len(enc) <= len(body)-len(body)/8 {
			dst[h+1] |= bodyS2
			return dst[:len(dst)+len(enc)], body, offs
		}
		dst = dst[:sizeAt] // not worth it: stored as it is
	}
	return append(dst, body...), body, offs
}

// A block's body is a list of fragments stored as it is unless its header
// says otherwise: a skip index of 0 entries (a block holds at least one
// fragment, so an index at least one) followed by a format byte, a set of
// the flags below. Without the format byte (layout 4 and older) the
// fragments are plain (appendFragment) and the body uncompressed.
const (
	// bodyS2: the body is one S2 block (a Snappy-compatible encoding,
	// klauspost/compress/s2), preceded by its decoded size. S2 rather
	// than zstd: zstd's fastest level stored a TSBS backfill in 6.5 MB
	// where S2 takes 8.6 MB (15.1 uncompressed), but cost the sequencer
	// 12 % of its backfill rate; S2's cost is within the runs' noise.
	bodyS2 = 1
	// bodyCompact (layout 7): the fragments are compact
	// (appendCompactFragment), each encoded against the one before it.
	bodyCompact = 2
)

// minCompressBytes is the smallest body appendBlock compresses: below it
// the encoding's overhead eats the saving.
const minCompressBytes = 256

// maxBodyBytes bounds the decoded size a compressed block may declare,
// checked before the body is decoded: twice the largest store value.
const maxBodyBytes = 2 * MaxValueBytes

// appendFragment appends f plainly: uvarint series, varint time, uvarint
// field count and per field uvarint column, kind byte and value
// (appendValue). Point-index unions hold one such fragment, and blocks
// written before layout 7 hold such fragments.
func appendFragment(dst []byte, f *store.Fragment) []byte {
	dst = binary.AppendUvarint(dst, f.Series)
	dst = binary.AppendVarint(dst, f.Time)
	dst = binary.AppendUvarint(dst, uint64(len(f.Fields)))
	for _, fl := range f.Fields {
		dst = binary.AppendUvarint(dst, uint64(fl.Col))
		dst = appendValue(dst, fl.Value)
	}
	return dst
}

// appendCompactFragment appends f as a compact fragment, encoded against
// prev, the block's fragment before it (nil at a skip-index entry, where
// a reader may start): varint series delta and varint time delta (from
// prev's, or from 0), the shape, then each field's value without its
// kind (appendValueBody). The shape is uvarint 0 when f has prev's
// columns with prev's kinds in prev's order, else uvarint field count + 1
// followed by each field's uvarint column and kind byte.
//
// What it saves: a load of many series written one point each per commit
// (the Telegraf case) gives a block one fragment per series, in which
// consecutive fragments share their measurement's columns and lie close
// in time, so a line of integer fields costs about a byte per field plus
// three, against three per field plus eleven plainly. Within a block,
// nothing is encoded against another series' earlier points: a reader of
// any fragment decodes at most skipEvery-1 before it.
func appendCompactFragment(dst []byte, f, prev *store.Fragment) []byte {
	var prevSid uint64
	var prevTime int64
	if prev != nil {
		prevSid, prevTime = prev.Series, prev.Time
	}
	dst = binary.AppendVarint(dst, int64(f.Series-prevSid))
	dst = binary.AppendVarint(dst, f.Time-prevTime)
	if prev != nil && store.SameColumns(f.Fields, prev.Fields) {
		dst = append(dst, 0)
	} else {
		dst = binary.AppendUvarint(dst, uint64(len(f.Fields))+1)
		for _, fl := range f.Fields {
			dst = binary.AppendUvarint(dst, uint64(fl.Col))
			dst = append(dst, byte(fl.Value.Kind))
		}
	}
	for _, fl := range f.Fields {
		dst = appendValueBody(dst, fl.Value)
	}
	return dst
}

// appendValue appends v's kind byte and its value (appendValueBody).
func appendValue(dst []byte, v store.Value) []byte {
	return appendValueBody(append(dst, byte(v.Kind)), v)
}

// appendValueBody appends v's value: a float as 8 bytes little-endian, an
// integer as a zig-zag varint, an unsigned one as a uvarint, a boolean as
// a byte, a string or tag as a uvarint length and its bytes.
func appendValueBody(dst []byte, v store.Value) []byte {
	switch v.Kind {
	case store.KindFloat:
		return binary.LittleEndian.AppendUint64(dst, v.Num)
	case store.KindInt:
		return binary.AppendVarint(dst, int64(v.Num))
	case store.KindUint:
		return binary.AppendUvarint(dst, v.Num)
	case store.KindBool:
		return append(dst, byte(v.Num))
	default: // KindString, KindTag
		dst = binary.AppendUvarint(dst, uint64(len(v.Str)))
		return append(dst, v.Str...)
	}
}

// blockReader decodes a block in place, or its body once decompressed.
// Strings it returns alias the block's bytes (or the decoded body), which
// the caller must own and never modify.
type blockReader struct {
	b          []byte
	body       []byte
	offs       []uint64
	firstSeq   uint64
	commitTime int64
	count      uint64
	read       uint64
	fields     []store.Field

	// A compact body's fragments are decoded against the one before
	// (appendCompactFragment): its series, time and shape.
	compact  bool
	prevSid  uint64
	prevTime int64
	shape    []shapeField // valid when the fragment before is in the same skip interval
}

// shapeField is one field of a compact fragment's shape.
type shapeField struct {
	col  uint32
	kind store.Kind
}

func (r *blockReader) init(b []byte) error {
	var n int
	r.firstSeq, n = binary.Uvarint(b)
	if n <= 0 {
		return errShort
	}
	b = b[n:]
	r.commitTime, n = binary.Varint(b)
	if n <= 0 {
		return errShort
	}
	b = b[n:]
	r.count, n = binary.Uvarint(b)
	if n <= 0 {
		return errShort
	}
	b = b[n:]
	format := byte(0)
	if len(b) >= 2 && b[0] == 0 {
		if format = b[1]; format&^(bodyS2|bodyCompact) != 0 {
			return fmt.Errorf("unknown block body format %d", format)
		}
		b = b[2:]
	}
	r.compact = format&bodyCompact != 0
	nskip, n := binary.Uvarint(b)
	if n <= 0 || nskip != (r.count+skipEvery-1)/skipEvery {
		return errShort
	}
	b = b[n:]
	r.offs = r.offs[:0]
	for range nskip {
		o, n := binary.Uvarint(b)
		if n <= 0 {
			return errShort
		}
		r.offs = append(r.offs, o)
		b = b[n:]
	}
	if format&bodyS2 != 0 {
		size, n := binary.Uvarint(b)
		if n <= 0 || size > maxBodyBytes {
			return errShort
		}
		if dl, err := s2.DecodedLen(b[n:]); err != nil || uint64(dl) != size {
			return errShort // checked before s2 sizes its buffer by it
		}
		body, err := s2.Decode(make([]byte, size), b[n:])
		if err != nil || uint64(len(body)) != size {
			return errors.Join(errShort, err)
		}
		b = body
	}
	r.body = b
	r.b = b
	r.read = 0
	return nil
}

// seek positions the reader so that the next call to next decodes fragment
// i (0-based).
func (r *blockReader) seek(i uint64) error {
	if i >= r.count {
		r.read = r.count
		return nil
	}
	if i < r.read || i/skipEvery > r.read/skipEvery {
		k := i / skipEvery
		if r.offs[k] > uint64(len(r.body)) {
			return errShort
		}
		r.b = r.body[r.offs[k]:]
		r.read = k * skipEvery
	}
	var f store.Fragment
	for r.read < i {
		if err := r.next(&f); err != nil {
			return err
		}
	}
	return nil
}

// next decodes the next fragment. Its Fields are valid until the next call.
func (r *blockReader) next(f *store.Fragment) error {
	if r.read >= r.count {
		return errShort
	}
	if r.compact {
		return r.nextCompact(f)
	}
	b := r.b
	sid, n := binary.Uvarint(b)
	if n <= 0 {
		return errShort
	}
	b = b[n:]
	ts, n := binary.Varint(b)
	if n <= 0 {
		return errShort
	}
	b = b[n:]
	nf, n := binary.Uvarint(b)
	if n <= 0 || nf > uint64(len(b)) {
		return errShort
	}
	b = b[n:]
	fs := r.fields[:0] // a local: appends through r would reload r.fields
	for range nf {
		// Column numbers below 128 (every table's first 127 columns) are
		// one byte: decoded here, not by a call, as this loop runs for
		// every field of every drained fragment.
		col, n := uint64(0), 1
		if len(b) >= 2 && b[0] < 0x80 {
			col = uint64(b[0])
		} else if col, n = binary.Uvarint(b); n <= 0 || col > math.MaxUint32 || len(b) < n+1 {
			return errShort
		}
		kind := store.Kind(b[n])
		b = b[n+1:]
		// The field is appended zero and set member by member: a Field
		// built on the stack and copied in stalled each copy (its wide
		// loads waited on the narrow stores that built it). Appended one
		// by one, the slice grows with the bytes actually decoded, not
		// with a count a corrupt block may overstate.
		fs = append(fs, store.Field{})
		fl := &fs[len(fs)-1]
		fl.Col, fl.Value.Kind = uint32(col), kind
		if kind == store.KindInt && len(b) > 0 && b[0] < 0x80 { // -64..63: one zig-zag byte
			fl.Value.Num = uint64(int64(b[0]>>1) ^ -int64(b[0]&1))
			b = b[1:]
			continue
		}
		var err error
		if b, err = readValue(b, &fl.Value); err != nil {
			return err
		}
	}
	r.fields = fs
	r.b = b
	r.read++
	*f = store.Fragment{Series: sid, Time: ts, Fields: fs}
	return nil
}

// nextCompact is next of a compact body.
func (r *blockReader) nextCompact(f *store.Fragment) error {
	b, err := r.compactHead()
	if err != nil {
		return err
	}
	shape := r.shape
	fs := r.fields[:0]
	for i := range shape {
		fs = append(fs, store.Field{}) // as in next
		fl := &fs[len(fs)-1]
		kind := shape[i].kind
		fl.Col, fl.Value.Kind = shape[i].col, kind
		if kind == store.KindInt && len(b) > 0 && b[0] < 0x80 {
			fl.Value.Num = uint64(int64(b[0]>>1) ^ -int64(b[0]&1))
			b = b[1:]
			continue
		}
		if b, err = readValue(b, &fl.Value); err != nil {
			return err
		}
	}
	r.fields = fs
	r.b = b
	r.read++
	*f = store.Fragment{Series: r.prevSid, Time: r.prevTime, Fields: fs}
	return nil
}

// compactHead decodes the series, time and shape of the next compact
// fragment into r.prevSid, r.prevTime and r.shape, and returns the bytes
// of its values.
func (r *blockReader) compactHead() ([]byte, error) {
	if r.read%skipEvery == 0 { // a skip-index entry: encoded against nothing
		r.prevSid, r.prevTime, r.shape = 0, 0, r.shape[:0]
	}
	b := r.b
	ds, n := binary.Varint(b)
	if n <= 0 {
		return nil, errShort
	}
	b = b[n:]
	dt, n := binary.Varint(b)
	if n <= 0 {
		return nil, errShort
	}
	b = b[n:]
	nf, n := binary.Uvarint(b)
	if n <= 0 || nf > uint64(len(b))+1 {
		return nil, errShort
	}
	b = b[n:]
	if nf == 0 {
		if r.read%skipEvery == 0 {
			return nil, errShort // no fragment before to take the shape of
		}
	} else {
		r.shape = r.shape[:0]
		for range nf - 1 {
			col, n := binary.Uvarint(b)
			if n <= 0 || col > math.MaxUint32 || len(b) < n+1 {
				return nil, errShort
			}
			r.shape = append(r.shape, shapeField{col: uint32(col), kind: store.Kind(b[n])})
			b = b[n+1:]
		}
	}
	r.prevSid += uint64(ds)
	r.prevTime += dt
	return b, nil
}

// readValue decodes a value of v.Kind from the start of b into v and
// returns the rest of b. A string aliases b.
func readValue(b []byte, v *store.Value) ([]byte, error) {
	switch v.Kind {
	case store.KindFloat:
		if len(b) < 8 {
			return nil, errShort
		}
		v.Num = binary.LittleEndian.Uint64(b)
		return b[8:], nil
	case store.KindInt:
		x, n := binary.Varint(b)
		if n <= 0 {
			return nil, errShort
		}
		v.Num = uint64(x)
		return b[n:], nil
	case store.KindUint:
		x, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, errShort
		}
		v.Num = x
		return b[n:], nil
	case store.KindBool:
		if len(b) < 1 {
			return nil, errShort
		}
		v.Num = uint64(b[0])
		return b[1:], nil
	case store.KindString, store.KindTag:
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, errShort
		}
		v.Str = bytesString(b[n : n+int(l)])
		return b[n+int(l):], nil
	}
	return nil, fmt.Errorf("unknown value kind %d", v.Kind)
}

// skipValue returns b past the value of kind at its start.
func skipValue(b []byte, kind store.Kind) ([]byte, error) {
	var n int
	switch kind {
	case store.KindFloat:
		n = 8
	case store.KindBool:
		n = 1
	case store.KindInt, store.KindUint:
		if _, n = binary.Uvarint(b); n <= 0 {
			return nil, errShort
		}
	case store.KindString, store.KindTag:
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, errShort
		}
		n = k + int(l)
	default:
		return nil, fmt.Errorf("unknown value kind %d", kind)
	}
	if len(b) < n {
		return nil, errShort
	}
	return b[n:], nil
}

// head decodes the series and time of the next fragment without moving
// past it: a filtered read decides on them whether to decode the fragment
// (next) or step over it (skip).
func (r *blockReader) head() (sid uint64, ts int64, err error) {
	if r.read >= r.count {
		return 0, 0, errShort
	}
	if r.compact {
		var base uint64
		var baseTime int64
		if r.read%skipEvery != 0 {
			base, baseTime = r.prevSid, r.prevTime
		}
		ds, n := binary.Varint(r.b)
		if n <= 0 {
			return 0, 0, errShort
		}
		dt, k := binary.Varint(r.b[n:])
		if k <= 0 {
			return 0, 0, errShort
		}
		return base + uint64(ds), baseTime + dt, nil
	}
	sid, n := binary.Uvarint(r.b)
	if n <= 0 {
		return 0, 0, errShort
	}
	ts, k := binary.Varint(r.b[n:])
	if k <= 0 {
		return 0, 0, errShort
	}
	return sid, ts, nil
}

// skip moves past the next fragment without building its fields: it reads
// only the lengths it needs to find the fragment's end.
func (r *blockReader) skip() error {
	if r.read >= r.count {
		return errShort
	}
	if r.compact {
		b, err := r.compactHead()
		if err != nil {
			return err
		}
		for _, sf := range r.shape {
			if b, err = skipValue(b, sf.kind); err != nil {
				return err
			}
		}
		r.b = b
		r.read++
		return nil
	}
	b := r.b
	for range 2 { // the series and the time: varints alike
		_, n := binary.Uvarint(b)
		if n <= 0 {
			return errShort
		}
		b = b[n:]
	}
	nf, n := binary.Uvarint(b)
	if n <= 0 || nf > uint64(len(b)) {
		return errShort
	}
	b = b[n:]
	for range nf {
		_, n := binary.Uvarint(b)
		if n <= 0 || len(b) < n+1 {
			return errShort
		}
		kind := store.Kind(b[n])
		var err error
		if b, err = skipValue(b[n+1:], kind); err != nil {
			return err
		}
	}
	r.b = b
	r.read++
	return nil
}

// appendSeries encodes a series' tag set.
func appendSeries(dst []byte, tags []store.Field) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(tags)))
	for _, t := range tags {
		dst = binary.AppendUvarint(dst, uint64(t.Col))
		dst = binary.AppendUvarint(dst, uint64(len(t.Value.Str)))
		dst = append(dst, t.Value.Str...)
	}
	return dst
}

func decodeSeries(b []byte) ([]store.Field, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, errShort
	}
	b = b[k:]
	tags := make([]store.Field, 0, n)
	for range n {
		col, k := binary.Uvarint(b)
		if k <= 0 || col > math.MaxUint32 {
			return nil, errShort
		}
		b = b[k:]
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, errShort
		}
		tags = append(tags, store.Field{Col: uint32(col), Value: store.Value{Kind: store.KindTag, Str: string(b[k : k+int(l)])}})
		b = b[k+int(l):]
	}
	return tags, nil
}

// runBuilder collects one run of one series' fragments of one block:
// strictly ascending times and their ascending indexes in the block.
type runBuilder struct {
	sid     uint64
	firstTs int64
	ts      []int64
	idx     []uint64
	// A series' in-order points of one block form one run per write
	// (TableCommit.Writes): write is this run's, next the series' run of
	// the block's following write, last (kept by the first run) the
	// series' run of the latest write so far.
	write      int
	next, last *runBuilder
	gap        bool // a gap run (committer.gapFor), not an in-order one
	// top, kept by a series' first in-order run of the block once set
	// (hasTop), is the series' last head run as the runs of the block
	// so far leave it (committer.index).
	top    runTop
	hasTop bool
}

// step is the smallest time between two of rb's points (0: one point).
func (rb *runBuilder) step() int64 {
	s := int64(0)
	for i := 1; i < len(rb.ts); i++ {
		s = minStep(s, rb.ts[i]-rb.ts[i-1])
	}
	return s
}

// runArena hands out the run builders of one block from a few shared
// arrays: a block of one point per series (a load of many series, each
// written every few seconds) starts a run per fragment, and three
// allocations each cost more than indexing the fragment. A builder stays
// valid until the arena is dropped; a run that outgrows its room grows
// on its own. Not safe for concurrent use.
type runArena struct {
	rbs []runBuilder
	ts  []int64
	idx []uint64
}

// newArena returns an arena with room for runs runs and slots fragments
// (each run takes its hint of them).
func newArena(runs, slots int) runArena {
	return runArena{rbs: make([]runBuilder, 0, runs), ts: make([]int64, 0, slots), idx: make([]uint64, 0, slots)}
}

// run starts the run of series sid at firstTs for write, with room for
// hint fragments.
func (a *runArena) run(sid uint64, firstTs int64, write, hint int) *runBuilder {
	if len(a.rbs) == cap(a.rbs) {
		a.rbs = make([]runBuilder, 0, max(16, cap(a.rbs))) // the full array stays with its builders
	}
	if cap(a.ts)-len(a.ts) < hint {
		a.ts, a.idx = make([]int64, 0, max(256, 4*hint)), make([]uint64, 0, max(256, 4*hint))
	}
	n := len(a.ts)
	a.ts, a.idx = a.ts[:n+hint], a.idx[:n+hint]
	a.rbs = append(a.rbs, runBuilder{sid: sid, firstTs: firstTs, write: write, ts: a.ts[n : n : n+hint], idx: a.idx[n : n : n+hint]})
	return &a.rbs[len(a.rbs)-1]
}

func (rb *runBuilder) add(ts int64, idx uint64) {
	rb.ts = append(rb.ts, ts)
	rb.idx = append(rb.idx, idx)
}

// find returns the block index of the fragment at ts in rb or the runs
// following it (binary search in the one whose times span ts: a series'
// runs of one block are disjoint and ascending, their times strictly
// ascending).
func (rb *runBuilder) find(ts int64) (uint64, bool) {
	for ; rb != nil; rb = rb.next {
		if ts > rb.ts[len(rb.ts)-1] {
			continue
		}
		i := sort.Search(len(rb.ts), func(i int) bool { return rb.ts[i] >= ts })
		if i < len(rb.ts) && rb.ts[i] == ts {
			return rb.idx[i], true
		}
		break
	}
	return 0, false
}

// runDoD marks, in the kind byte of a run value, a body of deltas of
// deltas (layout 9): 'l' and 'u' are 'L' and 'U' runs with such a body.
const runDoD = 0x20

// encode renders the run value: kind ('L' synced, base = the block's first
// x_seq; 'U' unsynced, base = the block number) with runDoD set, then the
// run's body (appendBodyDoD).
func (rb *runBuilder) encode(kind byte, base uint64) []byte {
	b := make([]byte, 0, 12+2*len(rb.ts))
	b = append(b, kind|runDoD)
	b = binary.AppendUvarint(b, base)
	return rb.appendBodyDoD(b)
}

// appendBodyDoD appends the body of a run value: uvarint count, then per
// fragment the varint (zig-zag) change of its time delta and the varint
// change of its block-index delta from the fragment before's (the first
// fragment's deltas are from the key's first time and from 0, and change
// from 0). A series written at a fixed interval, one point per commit of
// a steady load, costs two bytes a point instead of the five to six of
// two plain deltas (a 10-s interval is a 5-byte uvarint of nanoseconds).
// The index may go down (signed deltas), which no run writes today.
func (rb *runBuilder) appendBodyDoD(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(rb.ts)))
	prevTs, prevIdx := rb.firstTs, int64(0)
	var prevDt, prevDi int64
	for i, t := range rb.ts {
		dt, di := t-prevTs, int64(rb.idx[i])-prevIdx
		b = binary.AppendVarint(b, dt-prevDt)
		b = binary.AppendVarint(b, di-prevDi)
		prevTs, prevIdx, prevDt, prevDi = t, int64(rb.idx[i]), dt, di
	}
	return b
}

// appendBody appends the run's body as head records hold it, and run
// values did before layout 9: uvarint count, then per fragment uvarint
// time delta (from the previous time, the first from the key's first
// time) and uvarint index delta (from the previous index).
func (rb *runBuilder) appendBody(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(rb.ts)))
	prevTs, prevIdx := rb.firstTs, uint64(0)
	for i, t := range rb.ts {
		b = binary.AppendUvarint(b, uint64(t-prevTs))
		b = binary.AppendUvarint(b, rb.idx[i]-prevIdx)
		prevTs, prevIdx = t, rb.idx[i]
	}
	return b
}

// runScan walks a run value, calling fn with each fragment's time and
// block index until fn returns false.
func runScan(v []byte, firstTs int64, fn func(ts int64, idx uint64) bool) (kind byte, base uint64, err error) {
	kind, base, v, dod, err := runHeader(v)
	if err != nil {
		return 0, 0, err
	}
	return kind, base, runScanBody(v, firstTs, dod, fn)
}

// runHeader splits a run value (or a head record's overwrite section,
// appendHeadOver) into its kind ('L' or 'U'), its base and the rest, and
// reports whether the body is of deltas of deltas (runDoD).
func runHeader(v []byte) (kind byte, base uint64, body []byte, dod bool, err error) {
	if len(v) < 1 {
		return 0, 0, nil, false, errShort
	}
	kind, dod = v[0]&^runDoD, v[0]&runDoD != 0
	if kind != 'L' && kind != 'U' {
		return 0, 0, nil, false, fmt.Errorf("unknown run kind %q", v[0])
	}
	base, n := binary.Uvarint(v[1:])
	if n <= 0 {
		return 0, 0, nil, false, errShort
	}
	return kind, base, v[1+n:], dod, nil
}

// runScanBody calls fn with each time and block index of a run's body
// (runBuilder.appendBodyDoD when dod, else appendBody) until fn returns
// false.
func runScanBody(v []byte, firstTs int64, dod bool, fn func(ts int64, idx uint64) bool) error {
	count, n := binary.Uvarint(v)
	if n <= 0 || count > uint64(len(v)) {
		return errShort
	}
	v = v[n:]
	ts, idx := firstTs, uint64(0)
	var dt, di int64
	for range count {
		a, n := runDelta(v, dod)
		if n <= 0 {
			return errShort
		}
		v = v[n:]
		b, n := runDelta(v, dod)
		if n <= 0 {
			return errShort
		}
		v = v[n:]
		if dod {
			a, b = dt+a, di+b
		}
		dt, di = a, b
		ts, idx = ts+dt, idx+uint64(di)
		if !fn(ts, idx) {
			break
		}
	}
	return nil
}

// runDelta reads one number of a run body: a zig-zag varint in a body of
// deltas of deltas, else a uvarint. n is binary.Uvarint's.
func runDelta(v []byte, dod bool) (int64, int) {
	if dod {
		return binary.Varint(v)
	}
	u, n := binary.Uvarint(v)
	return int64(u), n
}

// runLastTs returns the last time of a run value.
func runLastTs(v []byte, firstTs int64) (int64, error) {
	last := firstTs
	_, _, err := runScan(v, firstTs, func(t int64, _ uint64) bool {
		last = t
		return true
	})
	return last, err
}

// overKey returns the key of an overwrite run of series sid of table
// instance tid: 'o' tid sid firstTs, then the reference of the run's first
// fragment (appendRef), which no other run holds: a run names fragments
// of one head flush, and a fragment is flushed once.
func overKey(tid, sid uint64, firstTs int64, first ref) []byte {
	return appendRef(pointKey(make([]byte, 0, 40), ksOver, tid, sid, firstTs), first)
}

// appendOverRun encodes an overwrite run (see doc.go, "Overwritten
// points"): uvarint count, then per fragment in ascending time the uvarint
// time delta (the first from firstTs) and its reference (appendRef).
func appendOverRun(dst []byte, firstTs int64, ents []runEntry) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ents)))
	prev := firstTs
	for _, e := range ents {
		dst = binary.AppendUvarint(dst, uint64(e.ts-prev))
		dst = appendRef(dst, e.r)
		prev = e.ts
	}
	return dst
}

// decodeOverRun decodes an overwrite run whose key holds firstTs.
func decodeOverRun(v []byte, firstTs int64) ([]runEntry, error) {
	count, n := binary.Uvarint(v)
	if n <= 0 || count > uint64(len(v)) {
		return nil, errShort
	}
	v = v[n:]
	ents := make([]runEntry, 0, count)
	prev := firstTs
	for range count {
		d, n := binary.Uvarint(v)
		if n <= 0 {
			return nil, errShort
		}
		r, k, err := decodeRef(v[n:])
		if err != nil {
			return nil, err
		}
		prev += int64(d)
		ents = append(ents, runEntry{ts: prev, r: r})
		v = v[n+k:]
	}
	if len(v) != 0 {
		return nil, errShort
	}
	return ents, nil
}
