package crashtest

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/httpapi/client"
	"github.com/ingestd/ingestd/store/jsstore/natstest"
)

var firstWriteRounds = flag.Int("jetstream.first-write-rounds", 20, "TestJetStreamConcurrentFirstWrites: rounds of fresh tables")

// TestJetStreamConcurrentFirstWrites has three ingestd nodes on one
// 3-server JetStream cluster write the same new tables, series and
// columns at once, four writers each, in -jetstream.first-write-rounds
// rounds of fresh tables: the nodes race to create each table, to number
// each series and to add each column. Every request must be
// acknowledged, every node must keep running, and a drain of each table
// through each node must hold every line once.
func TestJetStreamConcurrentFirstWrites(t *testing.T) {
	const (
		nodes, writers = 3, 4
		requests       = 2  // per writer and round
		series         = 24 // every writer writes each one
	)
	cluster := natstest.Start(t, 3)
	cluster.WaitJetStream()
	hc := newHTTPClient(t, nodes*writers)
	var ns []*jsNode
	for i := range nodes {
		d := filepath.Join(t.TempDir(), fmt.Sprintf("node%d", i))
		require.NoError(t, os.MkdirAll(d, 0o750))
		n := &jsNode{dir: d, args: daemonArgs(filepath.Join(d, "data"), "--store", "jetstream", "--nats-url", cluster.URLs(), "--sync-tables", "*")}
		n.start(t)
		ns = append(ns, n)
	}
	tables := make([]string, *firstWriteRounds)
	for round := range tables {
		tables[round] = fmt.Sprintf("fresh%d", round)
		var wg sync.WaitGroup
		errs := make(chan error, nodes*writers)
		for n := range nodes {
			for w := range writers {
				wg.Go(func() {
					for r := range requests {
						// A time per writer and request: every line is a point of its own.
						ts := jsBaseTS + int64((n*writers+w)*requests+r)
						var body []byte
						for s := range series {
							body = fmt.Appendf(body, "%s,host=h%d,rack=r%d c%d=%di,v=%d.5 %d\n", tables[round], s, s%4, s%6, s, r, ts)
						}
						what := fmt.Sprintf("round %d, node %d, writer %d: write", round, n, w)
						if err := writeAcked(context.Background(), hc, ns[n].url(), body, what); err != nil {
							errs <- err
							return
						}
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		for i, n := range ns {
			resp, err := do(context.Background(), hc, http.MethodGet, n.url()+"/health", nil, nil)
			require.NoError(t, err, "round %d: node %d", round, i)
			require.Equal(t, http.StatusOK, resp.Status, "round %d: node %d is unhealthy: %s", round, i, clip(resp.Body))
		}
	}
	// Every line once, through every node once it applied the others'
	// blocks.
	want := nodes * writers * requests * series
	for i, n := range ns {
		api := apiClient(t, hc, n.url())
		for _, table := range tables {
			rows := 0
			poll(t, time.Minute, func() bool {
				rows = 0
				var pg client.Page
				for after := uint64(0); ; {
					req := client.DrainRequest{Table: table, Epoch: 1, After: after, Limit: 1000}
					if err := api.DrainInto(context.Background(), req, &pg); err != nil {
						return false
					}
					rows += len(pg.Rows)
					if !pg.More {
						return rows == want
					}
					after = pg.Next
				}
			}, "node %d holds every line of %s", i, table)
		}
	}
	for _, n := range ns {
		requireCleanLog(t, n.proc().log(t))
	}
}
