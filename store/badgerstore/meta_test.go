package badgerstore

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
)

// TestMetaEncodingIsTheLayouts pins the values of a table's metadata and
// of a consumer byte for byte, and reads them as earlier versions wrote
// them (the name in the value too, from store.TableMeta's own JSON): the
// layout is this package's, whatever the contract's types become.
func TestMetaEncodingIsTheLayouts(t *testing.T) {
	ret := int64(5)
	m := store.TableMeta{Name: "cpu", ID: 3, Sync: true, Epoch: 2, Seq: 10, Retention: &ret, ColumnsSince: []uint64{0, 0, 7},
		Columns: []store.Column{{Name: "time"}, {Name: "host", Kind: store.KindTag}, {Name: "v", Kind: store.KindFloat}}}
	v, chunks, err := encodeMeta(m)
	require.NoError(t, err)
	require.JSONEq(t, `{"id":3,"sync":true,"epoch":2,"seq_lease":10,"columns":null,"retention_ns":5,"column_chunks":1}`, string(v))
	require.Len(t, chunks, 1)
	require.JSONEq(t, `{"columns":[{"name":"time","kind":0},{"name":"host","kind":1},{"name":"v","kind":2}],"since":[0,0,7]}`, string(chunks[0]))
	got, n, err := decodeMeta("cpu", v)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, addChunk(&got, chunks[0]))
	require.Equal(t, m, got)

	for _, old := range []string{
		`{"id":3,"sync":true,"epoch":2,"seq_lease":10,"columns":[{"name":"time","kind":0},{"name":"host","kind":1},{"name":"v","kind":2}],"retention_ns":5,"columns_since":[0,0,7]}`,
		`{"name":"","id":3,"sync":true,"epoch":2,"seq_lease":10,"columns":[{"name":"time","kind":0},{"name":"host","kind":1},{"name":"v","kind":2}],"retention_ns":5,"columns_since":[0,0,7]}`,
	} {
		got, n, err = decodeMeta("cpu", []byte(old))
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, m, got, "a value an earlier version wrote: %s", old)
	}
	tomb, n, err := decodeMeta("gone", []byte(`{"name":"gone","id":0,"sync":false,"epoch":4,"seq_lease":99,"columns":null,"dropped":true}`))
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, store.TableMeta{Name: "gone", Epoch: 4, Seq: 99, Dropped: true}, tomb)
	v, chunks, err = encodeMeta(tomb)
	require.NoError(t, err)
	require.Empty(t, chunks)
	got, _, err = decodeMeta("gone", v)
	require.NoError(t, err)
	require.Equal(t, tomb, got)

	c := store.Consumer{Name: "mirror", Epoch: 2, Position: 40, LastSeen: 1700, Owner: "ops"}
	cv, err := encodeConsumer(c)
	require.NoError(t, err)
	require.JSONEq(t, `{"epoch":2,"position":40,"last_seen":1700,"owner":"ops"}`, string(cv))
	got2, err := decodeConsumer("mirror", []byte(`{"name":"mirror","epoch":2,"position":40,"last_seen":1700,"owner":"ops"}`))
	require.NoError(t, err)
	require.Equal(t, c, got2, "a value an earlier version wrote")
}
