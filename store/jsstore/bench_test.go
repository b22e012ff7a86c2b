package jsstore

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/badgerstore"
	"github.com/ingestd/ingestd/store/rowengine"
)

// BenchmarkAppend commits groups of fragments (10 numeric fields each,
// 100 series, TSBS-like) to one table, on badger (fsync per commit) and
// on JetStream (embedded 1 and 3 servers, sync_interval always, on
// loopback), and reports fragments per second: the cost of replication
// against one machine's fsync on the same machine.
//
//	go test ./store/jsstore -run '^$' -bench BenchmarkAppend -benchtime 100x
func BenchmarkAppend(b *testing.B) {
	backends := []struct {
		name string
		open func(b *testing.B) store.Backend
	}{
		{"badger", func(b *testing.B) store.Backend {
			cfg := rowengine.DefaultConfig()
			cfg.Dir = b.TempDir()
			db, err := badgerstore.Open(cfg, nil, nil)
			require.NoError(b, err)
			return db
		}},
	}
	for _, n := range []int{1, 3} {
		backends = append(backends, struct {
			name string
			open func(b *testing.B) store.Backend
		}{fmt.Sprintf("jetstream-%d", n), func(b *testing.B) store.Backend {
			h := newHarness(b, n)
			return h.open(b, h.config(b))
		}})
	}
	for _, be := range backends {
		for _, size := range []int{100, 5000} {
			b.Run(fmt.Sprintf("%s/%d", be.name, size), func(b *testing.B) {
				db := be.open(b)
				b.Cleanup(func() { _ = db.Close() })
				id, err := db.NewTableID(ctx)
				require.NoError(b, err)
				m, err := db.PutTable(ctx, store.TableMeta{Name: "cpu", ID: id, Sync: true, Epoch: 1})
				require.NoError(b, err)
				var series []store.Series
				for i := range 100 {
					series = append(series, store.Series{ID: uint64(i + 1), Tags: []store.Field{{Col: 1, Value: store.Value{Kind: store.KindTag, Str: fmt.Sprint("host_", i)}}}})
				}
				ts := int64(0)
				b.ResetTimer()
				for i := range b.N {
					tc := store.TableCommit{TableID: m.ID, Sync: true, CommitTime: ts}
					if i == 0 {
						tc.NewSeries = series
					}
					for j := range size {
						f := store.Fragment{Series: uint64(j%100 + 1), Time: ts}
						for c := range 10 {
							f.Fields = append(f.Fields, store.Field{Col: uint32(c + 2), Value: store.Value{Kind: store.KindInt, Num: uint64(i*j + c)}})
						}
						tc.Fragments = append(tc.Fragments, f)
						if j%100 == 99 {
							ts += 10e9
						}
					}
					require.NoError(b, db.Append(ctx, []store.TableCommit{tc}, nil))
				}
				b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "fragments/s")
			})
		}
	}
}
