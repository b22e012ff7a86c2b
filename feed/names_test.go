package feed

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store/memstore"
)

func TestCheckName(t *testing.T) {
	cases := []struct {
		name, in string
		max      int
		rule     string // "" = valid
	}{
		{name: "plain", in: "cpu", max: 10},
		{name: "utf-8, replacement character and non-characters", in: "é\uFFFD\uFFFF\U0010FFFF", max: 64},
		{name: "line separator is not a control character", in: "a\u2028b", max: 10},
		{name: "exactly the limit", in: "abcd", max: 4},
		{name: "empty", in: "", max: 4, rule: RuleEmpty},
		{name: "one byte too long", in: "abcde", max: 4, rule: RuleLength},
		{name: "invalid utf-8", in: "a\xffb", max: 10, rule: RuleUTF8},
		{name: "truncated utf-8", in: "a\xc3", max: 10, rule: RuleUTF8},
		{name: "NUL", in: "a\x00b", max: 10, rule: RuleControl},
		{name: "C0", in: "a\x1fb", max: 10, rule: RuleControl},
		{name: "newline", in: "a\nb", max: 10, rule: RuleControl},
		{name: "DEL", in: "a\x7f", max: 10, rule: RuleControl},
		{name: "C1", in: "a\u0085", max: 10, rule: RuleControl},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckName("table", tc.in, tc.max)
			if tc.rule == "" {
				require.NoError(t, err)
				return
			}
			var ne *NameError
			require.ErrorAs(t, err, &ne)
			require.Equal(t, tc.rule, ne.Rule)
			require.ErrorIs(t, err, ErrInvalidName)
			require.ErrorIs(t, err, ErrInvalidTableName)
			require.NotErrorIs(t, CheckName("consumer", tc.in, tc.max), ErrInvalidTableName)
		})
	}
	long := strings.Repeat("\xff", 100_000)
	msg := CheckName("tag key", long, 10).Error()
	require.Less(t, len(msg), 4*MaxEchoBytes+200, "the error echoes a bounded part of the name")
	require.Contains(t, msg, "100000 bytes, longer than the limit of 10 (--max-name-bytes)")
}

// TestInvalidNamesRefused checks that every way a name enters refuses one
// that breaks CheckName's rules, and that nothing is created.
func TestInvalidNamesRefused(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxNameBytes = 16
	h := openHarness(t, memstore.NewDisk(), cfg)
	defer h.close()
	ctx := context.Background()
	_, _, err := h.s.CreateTable(ctx, "ok", true)
	require.NoError(t, err)
	for _, bad := range []string{"\xff", "a\x00b", "a\tb", strings.Repeat("n", 17)} {
		_, _, err := h.s.CreateTable(ctx, bad, true)
		require.ErrorIs(t, err, ErrInvalidName, "create %q", bad)
		_, err = h.d.Status(bad)
		require.ErrorIs(t, err, ErrInvalidName, "status %q: 400, not 404", bad)

		res := appendBatch(t, h.s,
			pt(bad, 1, nil, fld("v", iv(1))),
			pt("ok", 1, tg(bad, "x"), fld("v", iv(1))),
			pt("ok", 2, nil, fld(bad, iv(1))),
			pt("ok", 3, nil, fld("v", iv(3))),
		)
		require.Equal(t, 1, res.Accepted, "only the good line of %q", bad)
		require.Len(t, res.Rejected, 3)
		for i, r := range res.Rejected {
			require.ErrorIs(t, r, ErrInvalidName, "line %d of %q", i+1, bad)
			require.Equal(t, i+1, r.Line)
		}

		_, err = tryDrain(h.d, DrainRequest{Table: "ok", Limit: 1, Consumer: bad})
		require.ErrorIs(t, err, ErrInvalidName, "consumer %q", bad)
		require.ErrorIs(t, h.d.DeleteConsumer("ok", bad, Principal{}), ErrInvalidName)
	}
	require.Len(t, h.d.Tables(), 1)
	require.Equal(t, []Column{{Name: "time", Kind: KindTime}, {Name: "v", Kind: KindInt}}, columns(t, h.d, "ok"))
	cs, err := h.d.Consumers("ok")
	require.NoError(t, err)
	require.Empty(t, cs)
}

// TestHostileNamesSurviveRestart round-trips odd but valid names (the
// longest allowed, names that are prefixes of each other, non-ASCII bytes
// next to 0x00 and 0xFF, U+FFFD itself) through a restart on a real store:
// every table, column, row and consumer comes back under its exact name,
// no two collide, and no (epoch, x_seq) is handed out twice.
func TestHostileNamesSurviveRestart(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxNameBytes = MaxNameBytesCeiling // the longest keys the store must hold
	cfg.MaxConsumerNameBytes = MaxNameBytesCeiling
	cfg.MaxColumnsPerTable = 64 // so that the metadata stays bounded (Validate)
	longest := strings.Repeat("é", MaxNameBytesCeiling/2)
	names := []string{
		"a", "ab", "a b", "a,b=c", "a\u0100", "a\u00ff", "\u0100", "\uFFFD", "\uFFFF", "\U0010FFFF",
		"a\u2028", "é", "e\u0301", longest, longest[:len(longest)-2] + "e", "x" + longest[:len(longest)-2],
	}
	disk := memstore.NewDisk()
	h := openHarness(t, disk, cfg)
	ctx := context.Background()
	type pos struct {
		epoch, seq uint64
	}
	seen := map[string]map[pos]bool{}
	maxSeq := map[string]uint64{}
	// drainNew drains name above after and checks each row's position is
	// new and above every x_seq the table had before.
	drainNew := func(name string, after uint64) {
		t.Helper()
		st := status(t, h.d, name)
		rows := drainAll(t, h.d, name, after, 100)
		require.NotEmpty(t, rows)
		for _, r := range rows {
			p := pos{st.Epoch, r.Seq}
			if seen[name] == nil {
				seen[name] = map[pos]bool{}
			}
			require.False(t, seen[name][p], "table %.20q: (epoch %d, x_seq %d) handed out twice", name, p.epoch, p.seq)
			require.Greater(t, r.Seq, maxSeq[name], "table %.20q: x_seq ran backwards", name)
			seen[name][p] = true
			maxSeq[name] = r.Seq
		}
	}
	for i, name := range names {
		_, _, err := h.s.CreateTable(ctx, name, true)
		require.NoError(t, err, "table %d", i)
		mustAppend(t, h.s, pt(name, 1, tg("t", name), fld(name, iv(int64(i)))))
		drainNew(name, 0)
	}
	for _, name := range names {
		_, err := tryDrain(h.d, DrainRequest{Table: names[1], Limit: 1, Consumer: name}) // names[1] is never dropped
		require.NoError(t, err)
	}
	// Drop and re-create every other table: the tombstone must bring it back
	// above its old epoch and sequence.
	for i := 0; i < len(names); i += 2 {
		require.NoError(t, h.s.Drop(ctx, names[i]))
		_, _, err := h.s.CreateTable(ctx, names[i], true)
		require.NoError(t, err)
		mustAppend(t, h.s, pt(names[i], 2, tg("t", names[i]), fld(names[i], iv(int64(i)))))
		drainNew(names[i], 0)
	}
	h.close()

	h = openHarness(t, disk, cfg)
	defer func() { h.close() }()
	var got []string
	for _, ti := range h.d.Tables() {
		got = append(got, ti.Name)
	}
	want := append([]string(nil), names...)
	sort.Strings(want)
	require.True(t, slices.Equal(want, got), "every table under its exact name (%d of %d)", len(got), len(want))
	cs, err := h.d.Consumers(names[1])
	require.NoError(t, err)
	var cnames []string
	for _, c := range cs {
		cnames = append(cnames, c.Name)
	}
	require.True(t, slices.Equal(want, cnames), "every consumer under its exact name (%d of %d)", len(cnames), len(want))
	for i, name := range names {
		ts := int64(1)
		if i%2 == 0 {
			ts = 2
		}
		rows := drainAll(t, h.d, name, 0, 100)
		require.Len(t, rows, 1, "table %d", i)
		require.True(t, maps.Equal(map[string]Value{"time": tmv(ts), "t": tagv(name), name: iv(int64(i))}, rows[0].Vals), "table %d: row", i)
		mustAppend(t, h.s, pt(name, 3, nil, fld(name, iv(-1))))
		drainNew(name, rows[0].Seq)
	}
}
