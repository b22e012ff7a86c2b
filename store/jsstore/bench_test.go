package jsstore

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/badgerstore"
	"github.com/ingestd/ingestd/store/jsstore/natstest"
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

// BenchmarkCommitLayout measures what one group commit touching nine
// tables (TSBS devops has nine measurements) costs to publish on three
// embedded servers (replicas 3, sync_interval always), by where the nine
// blocks go: "streams" is this store's layout, a stream per table, the
// nine published at once and each acknowledged by its own stream's
// quorum; the others put them in one stream (a subject per table) as nine
// asynchronous publishes, as one atomic batch, or as one message. It
// reports milliseconds per commit, the wait the sequencer spends per
// commit on replication, which bounds a node's rate
// (docs/performance.md#jetstream), and the CPU milliseconds the process
// (the three servers and the client) spent per commit.
//
//	go test ./store/jsstore -run '^$' -bench BenchmarkCommitLayout -benchtime 300x
func BenchmarkCommitLayout(b *testing.B) {
	cluster := natstest.Start(b, 3)
	cluster.WaitJetStream()
	nc, err := nats.Connect(cluster.URLs())
	require.NoError(b, err)
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	const tables = 9
	for _, size := range []int{2 << 10, 16 << 10} { // a table's block: about 100 and 800 TSBS lines
		body := make([]byte, size)
		for i := range body {
			body[i] = byte(i * 31)
		}
		newStream := func(name string, subjects ...string) {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subjects, Replicas: 3,
				Storage: jetstream.FileStorage, AllowAtomicPublish: true})
			require.NoError(b, err)
		}
		layouts := []struct {
			name   string
			setup  func(p string)
			commit func(p string, n int)
		}{
			{"streams", func(p string) {
				for i := range tables {
					newStream(fmt.Sprintf("%s_%d", p, i), fmt.Sprintf("%s.%d", p, i))
				}
			}, func(p string, _ int) {
				var wg sync.WaitGroup
				for i := range tables {
					wg.Go(func() {
						_, err := js.Publish(ctx, fmt.Sprintf("%s.%d", p, i), body)
						require.NoError(b, err)
					})
				}
				wg.Wait()
			}},
			{"one-stream-async", func(p string) { newStream(p, p+".*") }, func(p string, _ int) {
				acks := make([]jetstream.PubAckFuture, tables)
				for i := range tables {
					acks[i], err = js.PublishAsync(fmt.Sprintf("%s.%d", p, i), body)
					require.NoError(b, err)
				}
				for _, a := range acks {
					select {
					case <-a.Ok():
					case err := <-a.Err():
						require.NoError(b, err)
					}
				}
			}},
			{"one-stream-batch", func(p string) { newStream(p, p+".*") }, func(p string, n int) {
				for i := range tables {
					m := nats.NewMsg(fmt.Sprintf("%s.%d", p, i))
					m.Data = body
					m.Header.Set("Nats-Batch-Id", fmt.Sprintf("%s-%d", p, n))
					m.Header.Set("Nats-Batch-Sequence", fmt.Sprint(i+1))
					if i < tables-1 {
						require.NoError(b, nc.PublishMsg(m))
						continue
					}
					m.Header.Set("Nats-Batch-Commit", "1")
					reply, err := nc.RequestMsg(m, sendTimeout)
					require.NoError(b, err)
					require.NotContains(b, string(reply.Data), `"error"`)
				}
			}},
			{"one-message", func(p string) { newStream(p, p+".*") }, func(p string, _ int) {
				_, err := js.Publish(ctx, p+".all", bytes.Repeat(body, tables))
				require.NoError(b, err)
			}},
		}
		for _, l := range layouts {
			b.Run(fmt.Sprintf("%s/%dKiB", l.name, size>>10), func(b *testing.B) {
				p := fmt.Sprintf("L%d_%s", size, strings.ReplaceAll(l.name, "-", "_"))
				l.setup(p)
				cpu0 := processCPU(b)
				b.ResetTimer()
				for n := range b.N {
					l.commit(p, n)
				}
				b.ReportMetric(b.Elapsed().Seconds()*1000/float64(b.N), "ms/commit")
				b.ReportMetric((processCPU(b)-cpu0).Seconds()*1000/float64(b.N), "cpu-ms/commit")
			})
		}
	}
}

// processCPU is the CPU time (user and system) this process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
