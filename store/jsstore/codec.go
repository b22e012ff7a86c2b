package jsstore

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/ingestd/ingestd/store"
)

// appendBody encodes one block message's body: the new series (the
// commit's first message only), the write boundaries relative to frags and
// the fragments (layout in doc.go, "Block messages").
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
	for _, f := range frags {
		b = binary.AppendUvarint(b, f.Series)
		b = binary.AppendVarint(b, f.Time)
		b = appendFields(b, f.Fields)
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
// fragments: one allocation for hundreds of fragments instead of one
// each (a message's fragments are read once, by the cache, and dropped).
const fieldSlab = 1024

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

// decodeBody decodes what appendBody encoded.
func decodeBody(b []byte) (body, error) {
	d := &decoder{b: b}
	var out body
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
		out.frags = make([]store.Fragment, n)
		var slab []store.Field
		for i := range out.frags {
			sid := d.uvarint()
			var ts int64
			if d.err == nil {
				v, k := binary.Varint(d.b)
				if k <= 0 {
					d.err = fmt.Errorf("%w: bad time", errCodec)
				} else {
					ts, d.b = v, d.b[k:]
				}
			}
			out.frags[i] = store.Fragment{Series: sid, Time: ts}
			out.frags[i].Fields, slab = d.fields(slab, fieldSlab)
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", errCodec, len(d.b))
	}
	out.cols = d.cols
	return out, d.err
}
