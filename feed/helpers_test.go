package feed

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store/badgerstore"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// harness is a sequencer running on a real badger store in t.TempDir(),
// with its drainer.
type harness struct {
	t      testing.TB
	dir    string
	db     *badgerstore.DB
	s      *Sequencer
	d      *Drainer
	cancel context.CancelFunc
	done   chan error
}

// openHarness opens the store in dir and starts a sequencer on it.
func openHarness(t testing.TB, dir string, cfg Config) *harness {
	t.Helper()
	return openHarnessOn(t, dir, cfg, func(db *badgerstore.DB) Storage { return db })
}

// openHarnessOn is openHarness on the Storage wrap makes of the store (a
// test double around it).
func openHarnessOn(t testing.TB, dir string, cfg Config, wrap func(*badgerstore.DB) Storage) *harness {
	t.Helper()
	scfg := badgerstore.DefaultConfig()
	scfg.Dir = dir
	db, err := badgerstore.Open(scfg, nil, nil)
	require.NoError(t, err)
	s, d, err := Open(cfg, wrap(db), nil, nil)
	require.NoError(t, err)
	h := &harness{t: t, dir: dir, db: db, s: s, d: d, done: make(chan error, 1)}
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
