package jsstore

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
)

// TestRecordEncodingIsTheBuckets pins a table record's JSON in the meta
// bucket, the metadata under "meta" with this package's field names, and
// reads a record as earlier versions wrote it (store.TableMeta's own
// JSON, the name in it too); a record of the layout of a stream per table
// (no subject) is refused with what to do.
func TestRecordEncodingIsTheBuckets(t *testing.T) {
	rec := record{Name: []byte("cpu"), Stream: "P_blocks", Subject: "P_b.NMNYHK", Born: 3, Writer: "n1",
		Meta: store.TableMeta{Name: "cpu", ID: 3, Sync: true, Epoch: 2, Seq: 10,
			Columns: []store.Column{{Name: "time"}, {Name: "host", Kind: store.KindTag}}}}
	v, err := json.Marshal(rec)
	require.NoError(t, err)
	want := `{"name":"Y3B1","meta":{"id":3,"sync":true,"epoch":2,"seq_lease":10,"columns":[{"name":"time","kind":0},{"name":"host","kind":1}]},"stream":"P_blocks","subject":"P_b.NMNYHK","born":3,"writer":"n1"}`
	require.JSONEq(t, want, string(v))
	var got record
	require.NoError(t, json.Unmarshal(v, &got))
	require.Equal(t, rec, got)

	old := `{"name":"Y3B1","meta":{"name":"cpu","id":3,"sync":true,"epoch":2,"seq_lease":10,"columns":[{"name":"time","kind":0},{"name":"host","kind":1}]},"stream":"P_blocks","subject":"P_b.NMNYHK","born":3,"writer":"n1"}`
	got, err = decodeRecord(entry{key: "t.NMNYHK", value: []byte(old)})
	require.NoError(t, err)
	require.Equal(t, rec, got, "a record an earlier version wrote")

	own := `{"name":"Y3B1","meta":{"id":3,"sync":true,"epoch":2,"seq_lease":10},"stream":"P_T_NMNYHK","born":3,"writer":"n1"}`
	_, err = decodeRecord(entry{key: "t.NMNYHK", value: []byte(own)})
	require.ErrorContains(t, err, `table "cpu" is stored in a stream of its own (P_T_NMNYHK)`)
	require.ErrorContains(t, err, "new --jetstream-prefix")

	var cs consumers
	require.NoError(t, json.Unmarshal([]byte(`{"m":{"name":"m","epoch":2,"position":40,"last_seen":1700,"owner":"ops"}}`), &cs))
	require.Equal(t, consumers{"m": {Epoch: 2, Position: 40, LastSeen: 1700, Owner: "ops"}}, cs)
}

// entry is a meta bucket entry of key and value.
type entry struct {
	key   string
	value []byte
}

func (e entry) Bucket() string                  { return "P_meta" }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.value }
func (e entry) Revision() uint64                { return 1 }
func (e entry) Created() time.Time              { return time.Time{} }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }
