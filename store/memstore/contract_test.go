package memstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/memstore"
	"github.com/ingestd/ingestd/store/storetest"
)

// TestContract runs the store contract suite on the in-memory backend,
// restarts and crashes included: a restart opens a Store on the same
// Disk, a crash on the Disk's clone taken while the Store is open.
func TestContract(t *testing.T) {
	open := func(t testing.TB, d *memstore.Disk) store.Backend {
		s, err := memstore.Open(d)
		require.NoError(t, err)
		return s
	}
	storetest.Run(t, storetest.Harness{
		New: func(t testing.TB) store.Backend { return memstore.New() },
		Restart: func(t testing.TB, b store.Backend) store.Backend {
			require.NoError(t, b.Close())
			return open(t, b.(*memstore.Store).Disk())
		},
		Crash: func(t testing.TB, b store.Backend) store.Backend {
			d := b.(*memstore.Store).Disk().Clone()
			require.NoError(t, b.Close())
			return open(t, d)
		},
		Reads: func(b store.Backend) (uint64, uint64) { return b.(*memstore.Store).ReadCounts() },
	})
}

// TestOneStorePerDisk: a Disk is held by one Store at a time, as a data
// directory by one process.
func TestOneStorePerDisk(t *testing.T) {
	s := memstore.New()
	_, err := memstore.Open(s.Disk())
	require.ErrorIs(t, err, store.ErrLocked)
	require.NoError(t, s.Close())
	s2, err := memstore.Open(s.Disk())
	require.NoError(t, err)
	require.NoError(t, s2.Close())
}
