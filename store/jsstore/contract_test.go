package jsstore

import (
	"fmt"
	"maps"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/jsstore/natstest"
	"github.com/ingestd/ingestd/store/rowengine"
	"github.com/ingestd/ingestd/store/storetest"
)

// harness opens stores on one embedded cluster, each under its own
// prefix (its own bucket and streams) and cache directory.
type harness struct {
	cluster *natstest.Cluster
	prefix  atomic.Int64
	mu      sync.Mutex
	cfgs    map[store.Backend]Config // guarded by mu
}

func newHarness(t testing.TB, servers int) *harness {
	c := natstest.Start(t, servers)
	c.WaitJetStream()
	return &harness{cluster: c, cfgs: map[store.Backend]Config{}}
}

// config is a fresh store's configuration: a new prefix and cache.
func (h *harness) config(t testing.TB) Config {
	cfg := DefaultConfig()
	cfg.URLs = h.cluster.URLs()
	cfg.Replicas = h.cluster.Size()
	cfg.Prefix = fmt.Sprintf("t%d", h.prefix.Add(1))
	cfg.CacheDir = filepath.Join(t.TempDir(), "cache")
	return cfg
}

func (h *harness) open(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg, rowengine.DefaultConfig(), nil, nil)
	require.NoError(t, err)
	h.mu.Lock()
	h.cfgs[s] = cfg
	h.mu.Unlock()
	return s
}

func (h *harness) cfgOf(b store.Backend) Config {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cfgs[b]
}

// crash ends s as a crash would: nothing released, no lease lowered.
func crash(s *Store) {
	_ = s.gate.Close()
	s.abandon()
}

func (h *harness) storetest() storetest.Harness {
	return storetest.Harness{
		New: func(t testing.TB) store.Backend { return h.open(t, h.config(t)) },
		Restart: func(t testing.TB, b store.Backend) store.Backend {
			require.NoError(t, b.Close())
			return h.open(t, h.cfgOf(b))
		},
		Crash: func(t testing.TB, b store.Backend) store.Backend {
			crash(b.(*Store))
			cfg := h.cfgOf(b)
			cfg.CacheDir = filepath.Join(t.TempDir(), "cache") // the local cache is lost too
			return h.open(t, cfg)
		},
		Reads: func(b store.Backend) (uint64, uint64) { return b.(*Store).ReadCounts() },
		Peer: func(t testing.TB, b store.Backend) store.Backend {
			cfg := h.cfgOf(b)
			cfg.CacheDir = filepath.Join(t.TempDir(), "cache") // its own row cache
			return h.open(t, cfg)
		},
		Applied: applied,
	}
}

// applied snapshots every name's record revision and, for a live
// instance, the stream sequence a's follower applied; the check holds
// once b knows each record at least as recent and, where it still has
// the same instance, applied as far the messages of that instance (after
// its anchor), and holds no name a no longer holds (a pruned tombstone).
func applied(a, b store.Backend) func() bool {
	type mark struct {
		rev, tid, applied, anchor uint64
	}
	marks := map[string]mark{}
	for name, t := range tablesOf(a.(*Store)) {
		a.(*Store).mu.Lock()
		m := mark{rev: t.rev}
		if t.rec.live() {
			m.tid, m.anchor = t.rec.Meta.ID, t.anchor().Seq
		}
		a.(*Store).mu.Unlock()
		if m.tid != 0 {
			m.applied, _ = t.position()
		}
		marks[name] = m
	}
	sb := b.(*Store)
	return func() bool {
		tables := tablesOf(sb)
		for name := range tables {
			if _, ok := marks[name]; !ok {
				return false
			}
		}
		for name, m := range marks {
			t := tables[name]
			if t == nil {
				return false
			}
			sb.mu.Lock()
			rev, tid := t.rev, t.rec.Meta.ID
			sb.mu.Unlock()
			if rev < m.rev {
				return false
			}
			// Only the instance's own messages, after its anchor, need
			// applying: those before it are an ended instance's, which a
			// TRUNCATE may purge before b's follower reads them (b then
			// passes them at its next message).
			if m.tid != 0 && tid == m.tid && m.applied > m.anchor {
				if applied, _ := t.position(); applied < m.applied {
					return false
				}
			}
		}
		return true
	}
}

// tablesOf copies s's tables by name.
func tablesOf(s *Store) map[string]*table {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.byName)
}

// TestContract runs the store contract suite against an embedded
// 1-server JetStream and an embedded 3-server JetStream cluster (streams
// and bucket with 3 replicas).
func TestContract(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d servers", n), func(t *testing.T) {
			storetest.Run(t, newHarness(t, n).storetest())
		})
	}
}
