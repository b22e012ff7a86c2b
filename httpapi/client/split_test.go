package client

import (
	"encoding/json"
	"math/rand/v2"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSplitRowsRandom splits random pages as encoding/json writes them
// (strings of every length with quotes, backslashes, control and
// non-ASCII bytes among plain ones, numbers, booleans, nulls) and checks
// every cell against encoding/json's own split; each page cut short
// anywhere must fail, not split.
func TestSplitRowsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	alphabet := []rune{'a', 'b', 'z', '0', ' ', '"', '\\', '/', '\n', '\t', 0x01, 'é', '\u2028', '[', ']', ',', '{'}
	var rows [][]json.RawMessage
	var cells []json.RawMessage
	for range 2_000 {
		page := make([][]any, rng.IntN(5))
		for r := range page {
			page[r] = make([]any, rng.IntN(6))
			for c := range page[r] {
				switch rng.IntN(5) {
				case 0:
					page[r][c] = rng.Int64() >> rng.UintN(64)
				case 1:
					page[r][c] = rng.Float64() * 1e6
				case 2:
					page[r][c] = []any{nil, true, false}[rng.IntN(3)]
				default:
					s := make([]rune, rng.IntN(30))
					for k := range s {
						s[k] = alphabet[rng.IntN(len(alphabet))]
					}
					page[r][c] = string(s)
				}
			}
		}
		raw, err := json.Marshal(page)
		require.NoError(t, err)
		var want [][]json.RawMessage
		require.NoError(t, json.Unmarshal(raw, &want))
		rows, cells = rows[:0], cells[:0]
		require.NoError(t, splitRows(raw, &rows, &cells), "%s", raw)
		require.Len(t, rows, len(want), "%s", raw)
		for i := range want {
			require.Equal(t, CellTexts(want[i]), CellTexts(rows[i]), "%s", raw)
		}
		cut := rng.IntN(len(raw))
		rows, cells = rows[:0], cells[:0]
		require.Error(t, splitRows(raw[:cut], &rows, &cells), "%s cut at %d", raw, cut)
	}
}

// TestDrainQueryFilters checks how DrainRequest renders its filters: one
// value as eq:, several as an in: list, has as a list, each value's
// commas and backslashes escaped (docs/contract.md#filters).
func TestDrainQueryFilters(t *testing.T) {
	r := DrainRequest{Table: "t", Limit: 1, Tags: map[string][]string{"host": {"a,b"}, "dc": {`x\`, "y,z"}},
		Has: []string{"f,1", "g"}, Operation: OpUpdate, OpTag: "op"}
	q, err := url.ParseQuery(r.query())
	require.NoError(t, err)
	require.Equal(t, "eq:a,b", q.Get("tag.host"))
	require.Equal(t, `in:x\\,y\,z`, q.Get("tag.dc"))
	require.Equal(t, `f\,1,g`, q.Get("has"))
	require.Equal(t, "update", q.Get("operation"))
	require.Equal(t, "op", q.Get("op_tag"))
}
