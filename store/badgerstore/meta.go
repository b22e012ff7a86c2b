package badgerstore

import (
	"encoding/json"

	"github.com/ingestd/ingestd/store"
)

// metaValue is a table's metadata as this backend stores it (the value
// of its ksMeta key): JSON, the name left to the key (encodeMeta). The
// field names are the layout's, whatever store.TableMeta's are.
type metaValue struct {
	ID           uint64        `json:"id"`
	Sync         bool          `json:"sync"`
	Epoch        uint64        `json:"epoch"`
	Seq          uint64        `json:"seq_lease"`
	Columns      []columnValue `json:"columns"`
	Dropped      bool          `json:"dropped,omitempty"`
	Retention    *int64        `json:"retention_ns,omitempty"`
	ColumnsSince []uint64      `json:"columns_since,omitempty"`
}

// columnValue is a column of metaValue.
type columnValue struct {
	Name string     `json:"name"`
	Kind store.Kind `json:"kind"`
}

// encodeMeta encodes a table's metadata value: JSON without the name,
// which its key holds byte for byte. A table's name may be 1 KiB long;
// in the value it would send a name-heavy table's metadata to the value
// log (valueThreshold), where a churn of such tables left value-log
// files, each a descriptor and a mapping, until collected. Values of
// older layouts hold the name too; readers take the key's.
func encodeMeta(m store.TableMeta) ([]byte, error) {
	v := metaValue{ID: m.ID, Sync: m.Sync, Epoch: m.Epoch, Seq: m.Seq, Dropped: m.Dropped, Retention: m.Retention, ColumnsSince: m.ColumnsSince}
	if m.Columns != nil {
		v.Columns = make([]columnValue, len(m.Columns))
		for i, c := range m.Columns {
			v.Columns[i] = columnValue(c)
		}
	}
	return json.Marshal(v)
}

// decodeMeta decodes a value encodeMeta wrote, under the key of name.
func decodeMeta(name string, b []byte) (store.TableMeta, error) {
	var v metaValue
	if err := json.Unmarshal(b, &v); err != nil {
		return store.TableMeta{}, err
	}
	m := store.TableMeta{Name: name, ID: v.ID, Sync: v.Sync, Epoch: v.Epoch, Seq: v.Seq, Dropped: v.Dropped, Retention: v.Retention, ColumnsSince: v.ColumnsSince}
	if v.Columns != nil {
		m.Columns = make([]store.Column, len(v.Columns))
		for i, c := range v.Columns {
			m.Columns[i] = store.Column(c)
		}
	}
	return m, nil
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
