package badgerstore

import (
	"encoding/json"
	"fmt"

	"github.com/ingestd/ingestd/store"
)

// metaValue is a table's metadata as this backend stores it (the value
// of its ksMeta key): JSON, the name left to the key (encodeMeta). The
// field names are the layout's, whatever store.TableMeta's are.
//
// A table's columns are stored in chunks after it (columnChunkKey), and
// the value says how many (ColumnChunks): a new column rewrites the last
// chunk only, where rewriting the whole schema for each made a table of
// 1,020 columns of 4,000-byte names, added one by one, write 2 GB of
// values the collector could not give back. Values of older layouts hold
// the columns inline, and a table without columns still does.
type metaValue struct {
	ID           uint64        `json:"id"`
	Sync         bool          `json:"sync"`
	Epoch        uint64        `json:"epoch"`
	Seq          uint64        `json:"seq_lease"`
	Columns      []columnValue `json:"columns"`
	Dropped      bool          `json:"dropped,omitempty"`
	Retention    *int64        `json:"retention_ns,omitempty"`
	ColumnsSince []uint64      `json:"columns_since,omitempty"`
	ColumnChunks int           `json:"column_chunks,omitempty"`
}

// chunkValue is one chunk of a table's columns (the value of a
// columnChunkKey): the columns and, when the table has them, the x_seq
// each was added at.
type chunkValue struct {
	Columns []columnValue `json:"columns"`
	Since   []uint64      `json:"since,omitempty"`
}

// Bounds of a chunk of columns: it holds at most chunkColumns columns and
// closes once its names reach chunkBytes (a longer name takes a chunk of
// its own). A closed chunk never changes: the chunks of a schema that
// grows are those of its prefix, and its last one.
const (
	chunkColumns = 64
	chunkBytes   = 16 << 10
)

// columnChunkEnds returns the end of each chunk of cols, in order.
func columnChunkEnds(cols []store.Column) []int {
	var ends []int
	n, size := 0, 0
	for i, c := range cols {
		n++
		size += len(c.Name) + 16
		if n == chunkColumns || size >= chunkBytes {
			ends = append(ends, i+1)
			n, size = 0, 0
		}
	}
	if n > 0 {
		ends = append(ends, len(cols))
	}
	return ends
}

// columnValue is a column of metaValue.
type columnValue struct {
	Name string     `json:"name"`
	Kind store.Kind `json:"kind"`
}

// encodeMeta encodes a table's metadata value: JSON without the name,
// which its key holds byte for byte, and the chunks of its columns. A
// table's name may be 1 KiB long; in the value it would send a name-heavy
// table's metadata to the value log (valueThreshold), where a churn of
// such tables left value-log files, each a descriptor and a mapping,
// until collected. Values of older layouts hold the name too; readers
// take the key's.
func encodeMeta(m store.TableMeta) (meta []byte, chunks [][]byte, err error) {
	v := metaValue{ID: m.ID, Sync: m.Sync, Epoch: m.Epoch, Seq: m.Seq, Dropped: m.Dropped, Retention: m.Retention}
	if len(m.Columns) == 0 {
		if m.Columns != nil {
			v.Columns = []columnValue{}
		}
		v.ColumnsSince = m.ColumnsSince
	} else {
		start := 0
		for _, end := range columnChunkEnds(m.Columns) {
			var c chunkValue
			c.Columns = make([]columnValue, end-start)
			for i, col := range m.Columns[start:end] {
				c.Columns[i] = columnValue(col)
			}
			if start < len(m.ColumnsSince) {
				c.Since = m.ColumnsSince[start:min(end, len(m.ColumnsSince))]
			}
			b, err := json.Marshal(c)
			if err != nil {
				return nil, nil, err
			}
			chunks = append(chunks, b)
			start = end
		}
		v.ColumnChunks = len(chunks)
	}
	meta, err = json.Marshal(v)
	return meta, chunks, err
}

// decodeMeta decodes a value encodeMeta wrote, under the key of name,
// and returns how many chunks of columns follow it (addChunk adds them).
func decodeMeta(name string, b []byte) (store.TableMeta, int, error) {
	var v metaValue
	if err := json.Unmarshal(b, &v); err != nil {
		return store.TableMeta{}, 0, err
	}
	m := store.TableMeta{Name: name, ID: v.ID, Sync: v.Sync, Epoch: v.Epoch, Seq: v.Seq, Dropped: v.Dropped, Retention: v.Retention, ColumnsSince: v.ColumnsSince}
	if v.Columns != nil {
		m.Columns = make([]store.Column, len(v.Columns))
		for i, c := range v.Columns {
			m.Columns[i] = store.Column(c)
		}
	}
	if v.ColumnChunks < 0 || v.ColumnChunks > 0 && len(v.Columns) > 0 {
		return store.TableMeta{}, 0, fmt.Errorf("badgerstore: %d chunks of columns besides %d columns inline", v.ColumnChunks, len(v.Columns))
	}
	return m, v.ColumnChunks, nil
}

// addChunk appends the columns of chunk value b to m.
func addChunk(m *store.TableMeta, b []byte) error {
	var c chunkValue
	if err := json.Unmarshal(b, &c); err != nil {
		return err
	}
	if len(c.Columns) == 0 || len(c.Since) > len(c.Columns) {
		return fmt.Errorf("badgerstore: a chunk of %d columns and %d x_seq", len(c.Columns), len(c.Since))
	}
	for _, col := range c.Columns {
		m.Columns = append(m.Columns, store.Column(col))
	}
	m.ColumnsSince = append(m.ColumnsSince, c.Since...)
	return nil
}

// consumerValue is a consumer's position as this backend stores it (the
// value of its key, which holds the name).
type consumerValue struct {
	Epoch    uint64 `json:"epoch"`
	Position uint64 `json:"position"`
	LastSeen int64  `json:"last_seen"`
	Owner    string `json:"owner,omitempty"`
}

func encodeConsumer(c store.Consumer) ([]byte, error) {
	return json.Marshal(consumerValue{Epoch: c.Epoch, Position: c.Position, LastSeen: c.LastSeen, Owner: c.Owner})
}

// decodeConsumer decodes a value encodeConsumer wrote, under the key of
// name.
func decodeConsumer(name string, b []byte) (store.Consumer, error) {
	var v consumerValue
	if err := json.Unmarshal(b, &v); err != nil {
		return store.Consumer{}, err
	}
	return store.Consumer{Name: name, Epoch: v.Epoch, Position: v.Position, LastSeen: v.LastSeen, Owner: v.Owner}, nil
}
