package feed

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSmokeWriteAndDrain(t *testing.T) {
	h := openHarness(t, t.TempDir(), DefaultConfig())
	defer h.close()
	ctx := context.Background()
	_, _, err := h.s.CreateTable(ctx, "sensor", true)
	require.NoError(t, err)
	res, err := h.s.Append(ctx, &Batch{Points: []Point{
		{Table: "sensor", Series: "host=a", Tags: []Tag{{"host", "a"}}, Fields: []PointField{{"v", Value{Kind: KindInt, Num: 1}}}, Time: 10, Line: 1},
	}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Accepted)
	var rows [][]Value
	pg, err := h.s.Drain(ctx, DrainRequest{Table: "sensor", Limit: 10}, func(v []Value) error {
		rows = append(rows, append([]Value(nil), v...))
		return nil
	})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, uint64(1), pg.Next)
}
