package feed

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store/memstore"
)

// TestDefineTable checks CREATE TABLE with declared columns: the schema is
// there before any write (tags listed first), writes of the declared types
// fit it and others are rejected, it survives a restart, an existing table
// is refused untouched, and bad declarations are refused before anything
// changes.
func TestDefineTable(t *testing.T) {
	ctx := context.Background()
	disk := memstore.NewDisk()
	cfg := DefaultConfig()
	cfg.MaxColumnsPerTable = 4
	h := openHarness(t, disk, cfg)
	declared := []Column{{"p00", KindFloat}, {"host", KindTag}, {"n", KindInt}, {"ok", KindBool}}
	st, err := h.s.DefineTable(ctx, "sensor", true, declared)
	require.NoError(t, err)
	require.Equal(t, SyncStatus{Enabled: true, Epoch: 1, Horizon: 1}, st)
	want := []Column{{"time", KindTime}, {"host", KindTag}, {"p00", KindFloat}, {"n", KindInt}, {"ok", KindBool}}
	info, err := h.d.Table("sensor")
	require.NoError(t, err)
	require.Equal(t, want, info.Columns)

	res := appendBatch(t, h.s,
		pt("sensor", 1, tg("host", "a"), fld("p00", fv(1.5)), fld("n", iv(2))),
		pt("sensor", 2, tg("host", "a"), fld("p00", iv(1))),
		pt("sensor", 3, nil, fld("host", sv("x"))),
	)
	require.Equal(t, 1, res.Accepted)
	require.Len(t, res.Rejected, 2)
	require.ErrorIs(t, res.Rejected[0], ErrFieldTypeConflict)
	require.ErrorIs(t, res.Rejected[1], ErrTagFieldConflict)

	_, err = h.s.DefineTable(ctx, "sensor", false, nil)
	require.ErrorIs(t, err, ErrTableExists)
	st, err = h.d.Status("sensor")
	require.NoError(t, err)
	require.Equal(t, SyncStatus{Enabled: true, Epoch: 1, Seq: 1, Watermark: 1, Horizon: 1}, st, "an existing table is left as it was")

	for _, tc := range []struct {
		name  string
		table string
		cols  []Column
		err   error
	}{
		{"reserved prefix", "t", []Column{{"x_seq", KindInt}}, ErrInvalidName},
		{"time", "t", []Column{{"time", KindInt}}, ErrInvalidName},
		{"empty name", "t", []Column{{"", KindInt}}, ErrInvalidName},
		{"control character", "t", []Column{{"a\x00b", KindInt}}, ErrInvalidName},
		{"time kind", "t", []Column{{"ts", KindTime}}, ErrInvalidName},
		{"duplicate", "t", []Column{{"a", KindInt}, {"a", KindFloat}}, ErrDuplicateColumn},
		{"too many", "t", []Column{{"a", KindInt}, {"b", KindInt}, {"c", KindInt}, {"d", KindInt}, {"e", KindInt}}, ErrColumnLimit},
		{"reserved table", "x_t", nil, ErrInvalidTableName},
		{"long table name", strings.Repeat("t", DefaultMaxNameBytes+1), nil, ErrInvalidTableName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.s.DefineTable(ctx, tc.table, false, tc.cols)
			require.ErrorIs(t, err, tc.err)
			_, err = h.d.Table(tc.table)
			require.Error(t, err, "nothing was created")
		})
	}

	// Dropped and defined again: above the old epoch and sequence.
	require.NoError(t, h.s.Drop(ctx, "sensor"))
	st, err = h.s.DefineTable(ctx, "sensor", true, declared[:1])
	require.NoError(t, err)
	require.Equal(t, uint64(2), st.Epoch)
	require.GreaterOrEqual(t, st.Seq, uint64(1))
	h.close()

	h = openHarness(t, disk, cfg)
	defer h.close()
	info, err = h.d.Table("sensor")
	require.NoError(t, err)
	require.Equal(t, []Column{{"time", KindTime}, {"p00", KindFloat}}, info.Columns, "declared columns are durable")
}

// TestNoCreate checks that a NoCreate batch (SQL INSERT) writes to
// existing tables only: a point of a missing table is rejected with
// ErrTableNotFound and creates nothing, the others are stored.
func TestNoCreate(t *testing.T) {
	h := openHarness(t, memstore.NewDisk(), DefaultConfig())
	defer h.close()
	_, err := h.s.DefineTable(context.Background(), "known", true, []Column{{"v", KindFloat}})
	require.NoError(t, err)
	b := &Batch{NoCreate: true, Points: []Point{
		pt("missing", 1, nil, fld("v", fv(1))),
		pt("known", 2, nil, fld("v", fv(2))),
	}}
	b.Points[0].Line, b.Points[1].Line = 1, 2
	res, err := AppendWithin(context.Background(), h.s, b, time.Second)
	require.NoError(t, err)
	require.Equal(t, 1, res.Accepted)
	require.Len(t, res.Rejected, 1)
	require.ErrorIs(t, res.Rejected[0], ErrTableNotFound)
	require.Equal(t, 1, res.Rejected[0].Line)
	_, err = h.d.Table("missing")
	require.ErrorIs(t, err, ErrTableNotFound)
	st, err := h.d.Status("known")
	require.NoError(t, err)
	require.Equal(t, uint64(1), st.Watermark)
}

// TestDefineTableOnSharedStore: on a shared store CREATE TABLE with
// declared columns creates the instance and places its columns through
// the resolver; the table then takes the declared writes, and a second
// CREATE TABLE is refused.
func TestDefineTableOnSharedStore(t *testing.T) {
	ctx := context.Background()
	st, h := openShared(t, DefaultConfig())
	defer h.close()
	declared := []Column{{"p00", KindFloat}, {"host", KindTag}, {"n", KindInt}}
	status, err := h.s.DefineTable(ctx, "sensor", true, declared)
	require.NoError(t, err)
	require.Equal(t, SyncStatus{Enabled: true, Epoch: 1, Horizon: 1}, status)
	info, err := h.d.Table("sensor")
	require.NoError(t, err)
	require.Equal(t, []Column{{"time", KindTime}, {"host", KindTag}, {"p00", KindFloat}, {"n", KindInt}}, info.Columns)
	st.mu.Lock()
	placed := 0
	for _, cols := range st.cols {
		placed += len(cols)
	}
	st.mu.Unlock()
	require.Equal(t, 3, placed, "the columns are the shared store's")

	mustAppend(t, h.s, pt("sensor", 1, tg("host", "a"), fld("p00", fv(1.5)), fld("n", iv(2))))
	_, err = h.s.DefineTable(ctx, "sensor", false, nil)
	require.ErrorIs(t, err, ErrTableExists)
	require.Len(t, drainAll(t, h.d, "sensor", 0, 10), 1)
}
