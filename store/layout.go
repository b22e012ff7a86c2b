package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Keyspace tags; see doc.go.
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
)

// layoutVersion is the on-disk layout this build writes and reads.
const layoutVersion = 1

var errShort = errors.New("truncated encoding")

func metaKey(name string) []byte { return append([]byte{ksMeta}, name...) }

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

func decodeRefs(b []byte) ([]ref, error) {
	var refs []ref
	for len(b) > 0 {
		var r ref
		var n int
		switch b[0] {
		case 'L':
			r.seq, n = binary.Uvarint(b[1:])
			if n <= 0 {
				return nil, errShort
			}
			b = b[1+n:]
		case 'U':
			r.block, n = binary.Uvarint(b[1:])
			if n <= 0 {
				return nil, errShort
			}
			b = b[1+n:]
			r.idx, n = binary.Uvarint(b)
			if n <= 0 {
				return nil, errShort
			}
			b = b[n:]
		default:
			return nil, fmt.Errorf("unknown reference tag %q", b[0])
		}
		refs = append(refs, r)
	}
	return refs, nil
}

// skipEvery is the fragment interval of a block's skip index: a reader
// positions itself at any fragment by decoding at most skipEvery-1 others.
const skipEvery = 64

// appendBlock encodes fragments as a block (see doc.go). offs is scratch
// space for the skip index and is returned for reuse.
func appendBlock(dst []byte, firstSeq uint64, commitTime int64, frags []Fragment, body []byte, offs []uint64) ([]byte, []byte, []uint64) {
	body = body[:0]
	offs = offs[:0]
	for i := range frags {
		if i%skipEvery == 0 {
			offs = append(offs, uint64(len(body)))
		}
		body = appendFragment(body, &frags[i])
	}
	dst = binary.AppendUvarint(dst, firstSeq)
	dst = binary.AppendVarint(dst, commitTime)
	dst = binary.AppendUvarint(dst, uint64(len(frags)))
	dst = binary.AppendUvarint(dst, uint64(len(offs)))
	for _, o := range offs {
		dst = binary.AppendUvarint(dst, o)
	}
	return append(dst, body...), body, offs
}

func appendFragment(dst []byte, f *Fragment) []byte {
	dst = binary.AppendUvarint(dst, f.Series)
	dst = binary.AppendVarint(dst, f.Time)
	dst = binary.AppendUvarint(dst, uint64(len(f.Fields)))
	for _, fl := range f.Fields {
		dst = binary.AppendUvarint(dst, uint64(fl.Col))
		dst = appendValue(dst, fl.Value)
	}
	return dst
}

func appendValue(dst []byte, v Value) []byte {
	dst = append(dst, byte(v.Kind))
	switch v.Kind {
	case KindFloat:
		return binary.LittleEndian.AppendUint64(dst, v.Num)
	case KindInt:
		return binary.AppendVarint(dst, int64(v.Num))
	case KindUint:
		return binary.AppendUvarint(dst, v.Num)
	case KindBool:
		return append(dst, byte(v.Num))
	default: // KindString, KindTag
		dst = binary.AppendUvarint(dst, uint64(len(v.Str)))
		return append(dst, v.Str...)
	}
}

// blockReader decodes a block in place. Strings it returns alias the block's
// bytes, which the caller must own and never modify.
type blockReader struct {
	b          []byte
	body       []byte
	offs       []uint64
	firstSeq   uint64
	commitTime int64
	count      uint64
	read       uint64
	fields     []Field
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
	var f Fragment
	for r.read < i {
		if err := r.next(&f); err != nil {
			return err
		}
	}
	return nil
}

// next decodes the next fragment. Its Fields are valid until the next call.
func (r *blockReader) next(f *Fragment) error {
	if r.read >= r.count {
		return errShort
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
	r.fields = r.fields[:0]
	for range nf {
		col, n := binary.Uvarint(b)
		if n <= 0 || col > math.MaxUint32 || len(b) < n+1 {
			return errShort
		}
		kind := Kind(b[n])
		b = b[n+1:]
		v := Value{Kind: kind}
		switch kind {
		case KindFloat:
			if len(b) < 8 {
				return errShort
			}
			v.Num = binary.LittleEndian.Uint64(b)
			b = b[8:]
		case KindInt:
			x, n := binary.Varint(b)
			if n <= 0 {
				return errShort
			}
			v.Num = uint64(x)
			b = b[n:]
		case KindUint:
			x, n := binary.Uvarint(b)
			if n <= 0 {
				return errShort
			}
			v.Num = x
			b = b[n:]
		case KindBool:
			if len(b) < 1 {
				return errShort
			}
			v.Num = uint64(b[0])
			b = b[1:]
		case KindString, KindTag:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return errShort
			}
			v.Str = bytesString(b[n : n+int(l)])
			b = b[n+int(l):]
		default:
			return fmt.Errorf("unknown value kind %d", kind)
		}
		r.fields = append(r.fields, Field{Col: uint32(col), Value: v})
	}
	r.b = b
	r.read++
	*f = Fragment{Series: sid, Time: ts, Fields: r.fields}
	return nil
}

// appendSeries encodes a series' tag set.
func appendSeries(dst []byte, tags []Field) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(tags)))
	for _, t := range tags {
		dst = binary.AppendUvarint(dst, uint64(t.Col))
		dst = binary.AppendUvarint(dst, uint64(len(t.Value.Str)))
		dst = append(dst, t.Value.Str...)
	}
	return dst
}

func decodeSeries(b []byte) ([]Field, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, errShort
	}
	b = b[k:]
	tags := make([]Field, 0, n)
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
		tags = append(tags, Field{Col: uint32(col), Value: Value{Kind: KindTag, Str: string(b[k : k+int(l)])}})
		b = b[k+int(l):]
	}
	return tags, nil
}
