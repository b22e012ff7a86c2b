package feed

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTableLimit checks Config.MaxTables: a write or CREATE TABLE that
// would add a table past it is rejected, nothing else is, and a dropped
// table frees its place.
func TestTableLimit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxTables = 2
	h := openHarness(t, t.TempDir(), cfg)
	defer h.close()
	ctx := context.Background()

	res := appendBatch(t, h.s,
		pt("a", 1, nil, fld("v", iv(1))),
		pt("b", 1, nil, fld("v", iv(1))),
		pt("c", 1, nil, fld("v", iv(1))),
		pt("a", 2, nil, fld("v", iv(2))),
	)
	require.Equal(t, 3, res.Accepted)
	require.Len(t, res.Rejected, 1)
	require.ErrorIs(t, res.Rejected[0], ErrTableLimit)
	require.Equal(t, 3, res.Rejected[0].Line)

	_, _, err := h.s.CreateTable(ctx, "d", true)
	require.ErrorIs(t, err, ErrTableLimit)
	created, _, err := h.s.CreateTable(ctx, "a", true)
	require.NoError(t, err, "an existing table is not a new one")
	require.False(t, created)

	require.NoError(t, h.s.Drop(ctx, "b"))
	created, _, err = h.s.CreateTable(ctx, "d", true)
	require.NoError(t, err)
	require.True(t, created)
	require.Len(t, h.s.Tables(), 2)
}
