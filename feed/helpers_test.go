package feed

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/badgerstore"
	"github.com/ingestd/ingestd/store/memstore"
	"github.com/ingestd/ingestd/store/rowengine"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// harness is a sequencer running on the in-memory store (store/memstore)
// on a Disk a test may open again (a restart) or clone (a crash), with its
// drainer.
type harness struct {
	t      testing.TB
	disk   *memstore.Disk
	db     store.Backend
	s      *Sequencer
	d      *Drainer
	cancel context.CancelFunc
	done   chan error
}

// openHarness opens a store on disk and starts a sequencer on it.
func openHarness(t testing.TB, disk *memstore.Disk, cfg Config) *harness {
	t.Helper()
	return openHarnessOn(t, disk, cfg, func(db *memstore.Store) Storage { return db })
}

// openHarnessOn is openHarness on the Storage wrap makes of the store (a
// test double around it).
func openHarnessOn(t testing.TB, disk *memstore.Disk, cfg Config, wrap func(*memstore.Store) Storage) *harness {
	t.Helper()
	db, err := memstore.Open(disk)
	require.NoError(t, err)
	return startHarness(t, disk, db, cfg, wrap(db), nil, nil)
}

// openBadgerHarness is openHarness on real badger in a new directory
// (fsync on): the benchmarks measure the feed with the store it ships
// with.
func openBadgerHarness(t testing.TB, cfg Config) *harness {
	t.Helper()
	scfg := rowengine.DefaultConfig()
	scfg.Dir = t.TempDir()
	db, err := badgerstore.Open(scfg, nil, nil)
	require.NoError(t, err)
	return startHarness(t, nil, db, cfg, db, nil, nil)
}

// startHarness opens the feed on st (db, or a double around it) with the
// metrics registry reg (nil: none) and the clock clk (nil: real time),
// and starts the sequencer.
func startHarness(t testing.TB, disk *memstore.Disk, db store.Backend, cfg Config, st Storage, reg prometheus.Registerer, clk *fakeClock) *harness {
	t.Helper()
	s, d, err := Open(cfg, st, nil, reg)
	require.NoError(t, err)
	if clk != nil {
		s.now = clk.now
	}
	h := &harness{t: t, disk: disk, db: db, s: s, d: d, done: make(chan error, 1)}
	h.start()
	return h
}

func (h *harness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.s.Run(ctx) }()
}

// close stops the sequencer cleanly and closes the store.
func (h *harness) close() {
	h.t.Helper()
	h.cancel()
	require.NoError(h.t, <-h.done)
	require.NoError(h.t, h.db.Close())
}

// eventually polls cond every few milliseconds until it holds or the
// deadline passes (10s, stretched on a busy machine: testdeadline.Scale).
func eventually(t testing.TB, cond func() bool, msg string) {
	t.Helper()
	timeout := testdeadline.Scale(10 * time.Second)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %s", timeout, msg)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
