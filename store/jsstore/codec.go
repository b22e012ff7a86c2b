package jsstore

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/ingestd/ingestd/store"
)

// The encodings of a block message's body, named by its Ingestd-Encoding
// header (doc.go, "Block messages"). A message without the header is
// encodingPlain: streams written before encodingCompact keep decoding.
const (
	// encodingPlain: every fragment plainly (series, time, fields with
	// column, kind and value each).
	encodingPlain = ""
	// encodingCompact: each fragment encoded against the one before it
	// (appendCompactFragment). It is what Append writes: on TSBS devops
	// it stores 21 bytes a line where encodingPlain takes 47, and every
	// byte is stored, fsynced and replicated by each of the stream's
	// servers.
	encodingCompact = "2"
)

// appendBody encodes one block message's body in encodingCompact: the new
// series of the commit (its first message only), the write boundaries
// relative to frags and the fragments (layout in doc.go, "Block
// messages").
func appendBody(b []byte, series []store.Series, writes []int, frags []store.Fragment) []byte {
	b = binary.AppendUvarint(b, uint64(len(series)))
	for _, s := range series {
		b = binary.AppendUvarint(b, s.ID)
		b = appendFields(b, s.Tags)
	}
	b = binary.AppendUvarint(b, uint64(len(writes)))
	for _, w := range writes {
		b = binary.AppendUvarint(b, uint64(w))
	}
	b = binary.AppendUvarint(b, uint64(len(frags)))
	for i := range frags {
		var prev *store.Fragment
		if i > 0 {
			prev = &frags[i-1]
		}
		b = appendCompactFragment(b, &frags[i], prev)
	}
	return b
}

// appendCompactFragment appends f encoded against prev (nil: against a
// fragment of series 0 at time 0 without fields): zig-zag varint series
// and time deltas, the shape, then each field's value without its column
// or kind. The shape is uvarint 0 when f has prev's columns with prev's
// kinds in prev's order, else uvarint field count + 1 followed by each
// field's uvarint column and kind byte. A value is a float's 8 bytes
// little-endian, a zig-zag varint integer, a uvarint unsigned one, a
// boolean's byte, or a string's uvarint length and bytes: at least one
// byte each, so that a fragment takes at least 3 bytes and a field 1.
//
// What it saves: a message holds one table's part of a commit, rows of
// one measurement lying close in time, so consecutive fragments share
// their columns and a line of integer fields costs about a byte a field
// plus three, against three a field plus eleven plainly. The row
// engine's blocks use the same scheme, written separately on purpose: a
// stream's messages are read by every node, of this build and the next,
// and must not change when the cache's layout does.
func appendCompactFragment(b []byte, f, prev *store.Fragment) []byte {
	var pf store.Fragment
	if prev != nil {
		pf = *prev
	}
	b = binary.AppendVarint(b, int64(f.Series-pf.Series))
	b = binary.AppendVarint(b, f.Time-pf.Time)
	if prev != nil && store.SameColumns(f.Fields, pf.Fields) {
		b = append(b, 0)
	} else {
		b = binary.AppendUvarint(b, uint64(len(f.Fields))+1)
		for _, fl := range f.Fields {
			b = binary.AppendUvarint(b, uint64(fl.Col))
			b = append(b, byte(fl.Value.Kind))
		}
	}
	for _, fl := range f.Fields {
		switch v := fl.Value; v.Kind {
		case store.KindFloat:
			b = binary.LittleEndian.AppendUint64(b, v.Num)
		case store.KindInt:
			b = binary.AppendVarint(b, int64(v.Num))
		case store.KindBool:
			b = append(b, byte(v.Num))
		case store.KindTag, store.KindString:
			b = binary.AppendUvarint(b, uint64(len(v.Str)))
			b = append(b, v.Str...)
		default: // KindUint
			b = binary.AppendUvarint(b, v.Num)
		}
	}
	return b
}

func appendFields(b []byte, fields []store.Field) []byte {
	b = binary.AppendUvarint(b, uint64(len(fields)))
	for _, f := range fields {
		b = binary.AppendUvarint(b, uint64(f.Col))
		b = append(b, byte(f.Value.Kind))
		if f.Value.Kind == store.KindTag || f.Value.Kind == store.KindString {
			b = binary.AppendUvarint(b, uint64(len(f.Value.Str)))
			b = append(b, f.Value.Str...)
		} else {
			b = binary.AppendUvarint(b, f.Value.Num)
		}
	}
	return b
}

// fragmentBytes is an upper bound of f's encoded size.
func fragmentBytes(f *store.Fragment) int {
	n := 3 * binary.MaxVarintLen64
	for _, fl := range f.Fields {
		n += 2*binary.MaxVarintLen64 + 1 + len(fl.Value.Str)
	}
	return n
}

// body is a decoded block message body. cols is one more than the
// highest column position it uses (0: none).
type body struct {
	series []store.Series
	writes []int
	frags  []store.Fragment
	cols   int
}

// decoder reads a body; the first error sticks. cols is one more than
// the highest column position read.
type decoder struct {
	b    []byte
	err  error
	cols int
}

// fieldSlab is how many fields decodeBody allocates at a time for the
// fragments beyond a scratch's room: one allocation for hundreds of
// fragments instead of one each (a message's fragments are read once, by
// the cache, and dropped).
const fieldSlab = 1024

// scratch is room for decodeBody's fragments and their fields, reused
// by a caller that drops a body's fragments before the room decodes
// another: after the first few messages, decoding allocates nothing but
// string values (a node applying another's blocks spent most of their
// decoding allocating and clearing fields). Not safe for concurrent use.
type scratch struct {
	frags  []store.Fragment
	fields []store.Field // room for the next body's fields: the last body's count
	shape  []store.Field // compactFragments' current shape
}

// scratches holds the scratches followers are not decoding into: as many
// as decode at once, and the garbage collector empties it when idle.
var scratches = sync.Pool{New: func() any { return new(scratch) }}

// maxScratchFields bounds the room a scratch keeps between bodies (about
// 10 MiB of fields); a body needing more allocates it, and drops it.
const maxScratchFields = 256 << 10

func getScratch() *scratch { return scratches.Get().(*scratch) }

// putScratch gives scr back once the fragments decoded into it are
// dropped.
func putScratch(scr *scratch) {
	if cap(scr.fields) > maxScratchFields || cap(scr.frags) > maxScratchFields {
		return
	}
	scratches.Put(scr)
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%w: bad varint", errCodec)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// varint reads a zig-zag varint (binary.AppendVarint).
func (d *decoder) varint() int64 {
	u := d.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

// count reads a length that must fit what is left of the body, at least
// min bytes per element: a hostile or damaged length cannot make the
// decoder allocate more than the message's size.
func (d *decoder) count(min int) int {
	v := d.uvarint()
	if d.err == nil && v > uint64(len(d.b)/min) {
		d.err = fmt.Errorf("%w: count %d exceeds the message", errCodec, v)
		return 0
	}
	return int(v)
}

// fields reads a field list into slab's spare capacity, or into a new
// slab with room for up to chunk more fields when it has too little
// (chunk 0: exactly the list), and returns the list and the slab.
func (d *decoder) fields(slab []store.Field, chunk int) (list, rest []store.Field) {
	n := d.count(3)
	if n == 0 {
		return nil, slab
	}
	if cap(slab)-len(slab) < n {
		// No more than the rest of the message can hold (3 bytes a field).
		slab = make([]store.Field, 0, n+min(chunk, len(d.b)/3))
	}
	start := len(slab)
	slab = slab[:start+n]
	out := slab[start : start+n : start+n]
	for i := range out {
		col := d.uvarint()
		if d.err != nil || len(d.b) == 0 || col > math.MaxUint32 {
			d.err = cmpErr(d.err)
			return nil, slab
		}
		d.cols = max(d.cols, int(col)+1)
		kind := store.Kind(d.b[0])
		d.b = d.b[1:]
		out[i] = store.Field{Col: uint32(col), Value: store.Value{Kind: kind}}
		if kind == store.KindTag || kind == store.KindString {
			l := d.count(1)
			if d.err != nil || l > len(d.b) {
				d.err = cmpErr(d.err)
				return nil, slab
			}
			out[i].Value.Str = string(d.b[:l])
			d.b = d.b[l:]
		} else {
			out[i].Value.Num = d.uvarint()
		}
	}
	return out, slab
}

func cmpErr(err error) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: truncated field", errCodec)
}

// decodeBody decodes a body of encoding enc (encodingCompact, what
// appendBody writes, or encodingPlain). The fragments and their fields
// are in scr's room, valid until scr decodes again (nil: their own);
// the series are always their own (the feed keeps their tags).
func decodeBody(b []byte, enc string, scr *scratch) (body, error) {
	keep := scr != nil
	if !keep {
		scr = &scratch{}
	}
	d := &decoder{b: b}
	var out body
	switch enc {
	case encodingPlain, encodingCompact:
	default:
		return out, fmt.Errorf("%w: unknown encoding %q", errCodec, enc)
	}
	if n := d.count(2); n > 0 {
		out.series = make([]store.Series, n)
		for i := range out.series {
			// Each its own: the feed keeps a series' tags.
			id := d.uvarint()
			out.series[i].ID = id
			out.series[i].Tags, _ = d.fields(nil, 0)
		}
	}
	if n := d.count(1); n > 0 {
		out.writes = make([]int, n)
		for i := range out.writes {
			out.writes[i] = int(min(d.uvarint(), math.MaxInt32))
		}
	}
	if n := d.count(3); n > 0 {
		if cap(scr.frags) < n {
			scr.frags = make([]store.Fragment, n)
		}
		out.frags = scr.frags[:n:n]
		var fields int
		if enc == encodingCompact {
			fields = d.compactFragments(out.frags, scr)
		} else {
			fields = d.plainFragments(out.frags, scr.fields[:0])
		}
		if keep && d.err == nil && cap(scr.fields) < fields {
			// Room for as many next time, in one slab (this body took
			// several).
			scr.fields = make([]store.Field, 0, fields)
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", errCodec, len(d.b))
	}
	out.cols = d.cols
	return out, d.err
}

// plainFragments reads len(frags) fragments of encodingPlain into frags,
// their fields into slab's room or, once it is full, new slabs, and
// returns how many fields they hold.
func (d *decoder) plainFragments(frags []store.Fragment, slab []store.Field) int {
	n := 0
	for i := range frags {
		sid := d.uvarint()
		ts := d.varint()
		if d.err != nil {
			return n
		}
		frags[i] = store.Fragment{Series: sid, Time: ts}
		frags[i].Fields, slab = d.fields(slab, fieldSlab)
		n += len(frags[i].Fields)
	}
	return n
}

// compactFragments reads len(frags) fragments of encodingCompact
// (appendCompactFragment) into frags, their fields into scr's room or,
// once it is full, new slabs, and returns how many fields they hold.
func (d *decoder) compactFragments(frags []store.Fragment, scr *scratch) int {
	var (
		slab  = scr.fields[:0]
		shape []store.Field // the previous fragment's columns and kinds
		prev  store.Fragment
		total int
	)
	for i := range frags {
		sid := prev.Series + uint64(d.varint())
		ts := prev.Time + d.varint()
		switch n := d.uvarint(); {
		case d.err != nil:
			return total
		case n == 0 && i == 0:
			d.err = fmt.Errorf("%w: the first fragment takes the shape of none", errCodec)
			return total
		case n > 0:
			// Two bytes a column at least, and a byte a value.
			if n-1 > uint64(len(d.b)/3) {
				d.err = fmt.Errorf("%w: %d fields exceed the message", errCodec, n-1)
				return total
			}
			shape = slices.Grow(scr.shape[:0], int(n-1))[:n-1]
			scr.shape = shape
			for j := range shape {
				col := d.uvarint()
				if d.err != nil || len(d.b) == 0 || col > math.MaxUint32 {
					d.err = cmpErr(d.err)
					return total
				}
				shape[j] = store.Field{Col: uint32(col), Value: store.Value{Kind: store.Kind(d.b[0])}}
				d.b = d.b[1:]
				d.cols = max(d.cols, int(col)+1)
			}
		}
		frags[i] = store.Fragment{Series: sid, Time: ts}
		if len(shape) > 0 {
			if len(shape) > len(d.b) { // a byte a value at least
				d.err = cmpErr(nil)
				return total
			}
			if cap(slab)-len(slab) < len(shape) {
				slab = make([]store.Field, 0, len(shape)+min(fieldSlab, len(d.b)))
			}
			fs := slab[len(slab) : len(slab)+len(shape) : len(slab)+len(shape)]
			slab = slab[:len(slab)+len(shape)]
			copy(fs, shape)
			for j := range fs {
				d.value(&fs[j].Value)
			}
			frags[i].Fields = fs
			total += len(fs)
		}
		if d.err != nil {
			return total
		}
		prev = frags[i]
	}
	return total
}

// value reads a value of v.Kind in encodingCompact into v.
func (d *decoder) value(v *store.Value) {
	if d.err != nil {
		return
	}
	switch v.Kind {
	case store.KindFloat:
		if len(d.b) < 8 {
			d.err = cmpErr(nil)
			return
		}
		v.Num = binary.LittleEndian.Uint64(d.b)
		d.b = d.b[8:]
	case store.KindInt:
		v.Num = uint64(d.varint())
	case store.KindUint:
		v.Num = d.uvarint()
	case store.KindBool:
		if len(d.b) == 0 {
			d.err = cmpErr(nil)
			return
		}
		v.Num, d.b = uint64(d.b[0]), d.b[1:]
	case store.KindTag, store.KindString:
		l := d.count(1)
		if d.err == nil && l > len(d.b) {
			d.err = cmpErr(nil)
		}
		if d.err == nil {
			v.Str, d.b = string(d.b[:l]), d.b[l:]
		}
	default:
		d.err = fmt.Errorf("%w: unknown kind %d", errCodec, v.Kind)
	}
}
