package feed

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/memstore"
)

// TestTableLimit checks Config.MaxTables: a write or CREATE TABLE that
// would add a table past it is rejected, nothing else is, and a dropped
// table frees its place.
func TestTableLimit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxTables = 2
	h := openHarness(t, memstore.NewDisk(), cfg)
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
	require.Len(t, h.d.Tables(), 2)
}

// TestTombstoneBound checks Config.MaxTombstones: past it tombstones fold
// into the floor, and a pruned table re-created, also after a restart,
// still resumes above its old epoch and x_seq (docs/contract.md#epochs).
// On a shared store the DROP folds them off the sequencer (changes.go).
func TestTombstoneBound(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) { testTombstoneBound(t, shared) })
	}
}

func testTombstoneBound(t *testing.T, shared bool) {
	cfg := DefaultConfig()
	cfg.MaxTombstones = 2
	disk := memstore.NewDisk()
	open := func() *harness {
		if !shared {
			return openHarness(t, disk, cfg)
		}
		return openHarnessOn(t, disk, cfg, func(db *memstore.Store) Storage {
			return &sharedStore{Store: db, cols: map[uint64][]store.Column{}, series: map[string]uint64{}}
		})
	}
	h := open()
	defer func() { h.close() }()
	ctx := context.Background()
	old := map[string]SyncStatus{}
	for i, name := range []string{"a", "b", "c", "d", "e"} {
		_, _, err := h.s.CreateTable(ctx, name, true)
		require.NoError(t, err)
		for range i + 1 {
			mustAppend(t, h.s, pt(name, 1, nil, fld("v", iv(1))))
		}
		_, err = h.s.Truncate(ctx, name) // epoch 2
		require.NoError(t, err)
		old[name] = status(t, h.d, name)
		require.NoError(t, h.s.Drop(ctx, name))
		require.LessOrEqual(t, len(h.s.tombstones), 2)
	}
	require.Equal(t, []string{"d", "e"}, slices.Sorted(maps.Keys(h.s.tombstones)), "the lowest sequences were pruned")
	for round := range 2 {
		for _, name := range []string{"a", "e", "new"} {
			_, st, err := h.s.CreateTable(ctx, name, true)
			require.NoError(t, err)
			require.Greater(t, st.Epoch, old[name].Epoch, "round %d %s: epoch", round, name)
			require.GreaterOrEqual(t, st.Seq, old[name].Seq, "round %d %s: seq", round, name)
			mustAppend(t, h.s, pt(name, 2, nil, fld("v", iv(2))))
			rows := drainAll(t, h.d, name, 0, 10)
			require.Len(t, rows, 1)
			require.Greater(t, rows[0].Seq, old[name].Seq, "round %d %s: x_seq reused", round, name)
			old[name] = status(t, h.d, name)
			require.NoError(t, h.s.Drop(ctx, name))
		}
		h.close()
		h = open()
		require.LessOrEqual(t, len(h.s.tombstones), 2, "round %d", round)
		require.Empty(t, h.d.Tables(), "the floor is no table")
	}
}

// TestTableChurnMemory creates and drops thousands of tables with long,
// distinct names: what a dropped table leaves in memory is bounded
// (tombstones by MaxTombstones), so the heap stays flat. Before the bound
// every name stayed in memory forever (55,000 cycles of 1 KB
// names took 1 GB).
func TestTableChurnMemory(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxTombstones = 100
	db := memstore.New()
	s, _, err := Open(cfg, db, nil, nil)
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, db.Close())
	}()
	ctx := context.Background()
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	const cycles, warmup = 4000, 500
	var base uint64
	for i := range cycles {
		if i == warmup {
			base = heap()
		}
		name := fmt.Sprintf("%05d", i) + strings.Repeat("n", DefaultMaxNameBytes-5)
		_, _, err := s.CreateTable(ctx, name, true)
		require.NoError(t, err)
		require.NoError(t, s.Drop(ctx, name))
	}
	grown := int64(heap()) - int64(base)
	// Unbounded, 3,500 more tombstones of 4 KiB names would hold 14 MiB.
	require.Less(t, grown, int64(6<<20), "heap grew by %d bytes over %d cycles", grown, cycles-warmup)
	require.Len(t, s.tombstones, 100)
}

// TestGroupBytes checks Config.MaxGroupBytes: a batch whose fragments
// exceed it is committed in several store commits, each below the limit,
// and is stored whole and in order.
func TestGroupBytes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxGroupBytes = 4 << 10
	h := openHarness(t, memstore.NewDisk(), cfg)
	defer h.close()
	_, _, err := h.s.CreateTable(context.Background(), "t", true)
	require.NoError(t, err)
	commits := 0
	h.s.testHookBeforeCommit = func() { commits++ } // sequencer goroutine; read after Append returns
	var pts []Point
	for i := range 100 {
		pts = append(pts, pt("t", int64(i), nil, fld("s", sv(strings.Repeat("x", 200)))))
	}
	mustAppend(t, h.s, pts...)
	// 100 fragments bounded at 259 bytes each: 16 per group of 4 KiB.
	require.Equal(t, 7, commits)
	rows := drainAll(t, h.d, "t", 0, 1000)
	require.Len(t, rows, 100)
	for i, r := range rows {
		require.Equal(t, uint64(i+1), r.Seq)
		require.Equal(t, tmv(int64(i)), r.Vals["time"])
	}
}

func TestConfigBoundsStoredValues(t *testing.T) {
	limits := memstore.Limits
	cases := []struct {
		name string
		set  func(*Config)
		err  string
	}{
		{name: "defaults"},
		{name: "a block could outgrow the store's", set: func(c *Config) { c.MaxGroupBytes = limits.MaxBlockBytes - limits.MaxFragmentBytes + 1 }, err: "--feed-max-group-bytes"},
		{name: "name ceiling", set: func(c *Config) { c.MaxNameBytes = MaxNameBytesCeiling + 1 }, err: "--max-name-bytes"},
		{name: "names the store's keys hold", set: func(c *Config) { c.MaxNameBytes = MaxNameBytesCeiling }},
		{name: "negative tombstones", set: func(c *Config) { c.MaxTombstones = -1 }, err: "--feed-max-tombstones"},
		{name: "no tombstones", set: func(c *Config) { c.MaxTombstones = 0 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.set != nil {
				tc.set(&cfg)
			}
			err := errors.Join(cfg.Validate(), cfg.checkLimits(limits))
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
	small := store.Limits{MaxBlockBytes: 1 << 20, MaxFragmentBytes: 1 << 19, MaxMetaBytes: 1 << 16, MaxNameBytes: 100}
	cfg := DefaultConfig()
	require.ErrorContains(t, cfg.checkLimits(small), "--max-name-bytes=4096 exceeds the 100 bytes the store's keys hold")
	cfg.MaxNameBytes = 100
	require.ErrorContains(t, cfg.checkLimits(small), "--feed-max-group-bytes")
	cfg.MaxGroupBytes = 1 << 19
	require.NoError(t, cfg.checkLimits(small))
}

// smallStore is the in-memory store reporting small limits, as a backend
// that holds less (a JetStream server's max_payload).
type smallStore struct {
	*memstore.Store
	limits store.Limits
}

func (s *smallStore) Limits() store.Limits { return s.limits }

// TestStoreLimitsRefusePointsAndColumns: a point larger than the store
// holds in one fragment, and a column that would take a table's schema
// past what the store holds, are refused at the door (invalid_value,
// column_limit) instead of failing the commit; so is a CREATE TABLE
// declaring such a schema. The table goes on taking what fits.
func TestStoreLimitsRefusePointsAndColumns(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.MaxNameBytes, cfg.MaxGroupBytes = 1000, 1<<20
	h := openHarnessOn(t, memstore.NewDisk(), cfg, func(db *memstore.Store) Storage {
		return &smallStore{Store: db, limits: store.Limits{MaxBlockBytes: 4 << 20, MaxFragmentBytes: 8 << 10,
			MaxMetaBytes: 5 * store.ColumnBytes(strings.Repeat("k", 100)), MaxNameBytes: 1000}}
	})
	defer h.close()
	s, d := h.s, h.d
	_, _, err := s.CreateTable(ctx, "t", true)
	require.NoError(t, err)

	res, err := s.Append(ctx, &Batch{Points: []Point{
		pt("t", 1, nil, fld("s", sv(strings.Repeat("x", 9<<10)))),
		pt("t", 2, nil, fld("s", sv(strings.Repeat("x", 7<<10)))),
	}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Accepted, "the point that fits")
	require.Len(t, res.Rejected, 1)
	require.ErrorIs(t, res.Rejected[0].Err, ErrInvalidValue)
	require.Contains(t, res.Rejected[0].Msg, "more than the store holds in one point (8192)")

	key := func(i int) string { return fmt.Sprintf("%03d", i) + strings.Repeat("k", 97) }
	var pts []Point
	for i := range 6 {
		pts = append(pts, pt("t", int64(10+i), nil, fld(key(i), iv(1))))
	}
	res, err = s.Append(ctx, &Batch{Points: pts})
	require.NoError(t, err)
	require.Equal(t, 4, res.Accepted, "s and four 100-byte keys fit five columns' worth")
	require.Len(t, res.Rejected, 2)
	for _, r := range res.Rejected {
		require.ErrorIs(t, r.Err, ErrColumnLimit)
		require.Contains(t, r.Msg, "schema would take up to")
	}
	info, err := d.Table("t")
	require.NoError(t, err)
	require.Len(t, info.Columns, 1+5, "time, s and the four keys")

	cols := make([]Column, 6)
	for i := range cols {
		cols[i] = Column{Name: key(i), Kind: KindInt}
	}
	_, err = s.DefineTable(ctx, "declared", true, cols)
	require.ErrorIs(t, err, ErrColumnLimit)
	_, err = s.DefineTable(ctx, "declared", true, cols[:5])
	require.NoError(t, err)
}
