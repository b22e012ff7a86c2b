package badgerstore_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/badgerstore"
	"github.com/ingestd/ingestd/store/rowengine"
	"github.com/ingestd/ingestd/store/storetest"
)

// TestContract runs the store contract suite against badger on disk and in
// memory (badger's InMemory option: nothing survives Close, so the restart
// and crash subtests run on disk only).
func TestContract(t *testing.T) {
	t.Run("disk", func(t *testing.T) {
		var (
			mu   sync.Mutex
			dirs = map[store.Backend]string{}
		)
		openDir := func(t testing.TB, dir string) store.Backend {
			cfg := rowengine.DefaultConfig()
			cfg.Dir = dir
			db, err := badgerstore.Open(cfg, nil, nil)
			require.NoError(t, err)
			mu.Lock()
			dirs[db] = dir
			mu.Unlock()
			return db
		}
		dirOf := func(b store.Backend) string {
			mu.Lock()
			defer mu.Unlock()
			return dirs[b]
		}
		storetest.Run(t, storetest.Harness{
			New: func(t testing.TB) store.Backend { return openDir(t, t.TempDir()) },
			Restart: func(t testing.TB, b store.Backend) store.Backend {
				require.NoError(t, b.Close())
				return openDir(t, dirOf(b))
			},
			Crash: func(t testing.TB, b store.Backend) store.Backend {
				// The copy is what a crash leaves: b is open, its leases
				// not released; it is closed only after the copy.
				dir := t.TempDir()
				storetest.CopyDir(t, dirOf(b), dir)
				require.NoError(t, b.Close())
				return openDir(t, dir)
			},
			Reads: reads,
		})
	})
	t.Run("memory", func(t *testing.T) {
		storetest.Run(t, storetest.Harness{New: func(t testing.TB) store.Backend {
			cfg := rowengine.DefaultConfig()
			cfg.InMemory = true
			db, err := badgerstore.Open(cfg, nil, nil)
			require.NoError(t, err)
			return db
		}, Reads: reads})
	})
}

func reads(b store.Backend) (uint64, uint64) { return b.(*badgerstore.DB).ReadCounts() }
