package feed

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store/memstore"
)

// --- Many writers, a stalled commit, consumers draining all the while (docs/contract.md#watermark) ---

// ccKey is a point of TestConcurrentWritersStalledCommit.
type ccKey struct {
	table, host string
	ts          int64
}

// ccStallTS marks the stalled writer's stalling batches: each holds one
// point at a timestamp at or below it, which the commit hook looks for.
const ccStallTS = -1_000_000

// TestConcurrentWritersStalledCommit runs writers with different batch
// sizes, overwriting each other's points and writing late timestamps, while
// one writer's batches are stalled in the middle of their group commit
// (after x_seq is stamped, before the store commit) and two consumers drain
// all the while. One stores (epoch, next) after every page; the other
// "crashes" now and then between applying a page and storing next, and
// re-reads it. At the end every fragment was delivered exactly as often as
// the pages covering it were read (once for the first consumer), none was
// skipped, and both replicas equal the writers' model.
func TestConcurrentWritersStalledCommit(t *testing.T) {
	cases := []struct {
		name    string
		sizes   [][]int // per writer: batch sizes, cycled; the last writer stalls
		batches int
		stallAt []int // batches of the last writer whose commit stalls
		queue   int   // Config.QueueLength
		limits  []int // drain page sizes, cycled
	}{
		{
			name:    "mixed batches, short queue",
			sizes:   [][]int{{1}, {7}, {64}, {300}, {1, 2, 150, 33}, {50}},
			batches: 24, stallAt: []int{3, 11, 19}, queue: 2,
			limits: []int{1, 3, 17, 100, 1000},
		},
		{
			name:    "small batches, long queue",
			sizes:   [][]int{{1}, {2}, {3}, {1, 5}, {4}, {1}, {2, 9}, {5}},
			batches: 40, stallAt: []int{0, 20, 39}, queue: 256,
			limits: []int{2, 5, 1},
		},
	}
	tables := []string{"a", "b"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.QueueLength = tc.queue
			h := openHarness(t, memstore.NewDisk(), cfg)
			defer h.close()
			ctx := context.Background()
			for _, name := range tables {
				_, _, err := h.s.CreateTable(ctx, name, true)
				require.NoError(t, err)
			}
			nw := len(tc.sizes)
			stallW := nw - 1

			// The hook (sequencer goroutine) stalls the commit holding a
			// stall marker until the test releases it; releaseAll frees
			// every stall if the test fails first.
			stalled := make(chan int64)
			release := make(chan struct{})
			releaseAll := make(chan struct{})
			defer close(releaseAll) // runs before h.close
			h.s.testHookBeforeCommit = func() {
				for _, g := range h.s.groupTables {
					for _, f := range g.frags {
						if f.Time <= ccStallTS {
							select {
							case stalled <- f.Time:
							case <-releaseAll:
								return
							}
							select {
							case <-release:
							case <-releaseAll:
							}
							return
						}
					}
				}
			}

			// The model: writer w's n-th point (1-based) went to key[w][n-1];
			// it sets field f<w> = n and s<w> = "w<w>-n" there.
			var (
				mu   sync.Mutex
				keys = make([][]ccKey, nw)
			)
			var stallFirst, stallLast atomic.Int64 // the stalled batch's numbers
			var stallDone atomic.Int32             // stalling batches acknowledged
			var wg sync.WaitGroup
			errs := make(chan error, nw+2)
			for w := range nw {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 7))
					n := 0
					for b := range tc.batches {
						size := tc.sizes[w][b%len(tc.sizes[w])]
						stall := w == stallW && contains(tc.stallAt, b)
						pts := make([]Point, 0, size+1)
						mu.Lock()
						first := n + 1
						for i := range size + btoi(stall) {
							n++
							k := ccKey{table: tables[rng.IntN(len(tables))], host: fmt.Sprint("h", rng.IntN(8)), ts: int64(rng.IntN(512))}
							if stall && i == 0 {
								k = ccKey{table: "a", host: "stall", ts: ccStallTS - int64(b)}
							}
							keys[w] = append(keys[w], k)
							pts = append(pts, pt(k.table, k.ts, tg("host", k.host),
								fld(fmt.Sprint("f", w), iv(int64(n))), fld(fmt.Sprint("s", w), sv(fmt.Sprintf("w%d-%d", w, n)))))
						}
						mu.Unlock()
						if stall {
							stallFirst.Store(int64(first))
							stallLast.Store(int64(n))
						}
						res, err := h.s.Append(ctx, &Batch{Points: pts})
						if err == nil && (res.Accepted != len(pts) || len(res.Rejected) > 0) {
							err = fmt.Errorf("accepted %d of %d: %v", res.Accepted, len(pts), res.Rejected)
						}
						if err != nil {
							errs <- fmt.Errorf("writer %d batch %d: %w", w, b, err)
							return
						}
						if stall {
							stallDone.Add(1)
						}
					}
				}()
			}

			// Two consumers follow both tables until the writers are done.
			consumers := []*ccConsumer{newCCConsumer(h.d, tables, tc.limits, 0), newCCConsumer(h.d, tables, tc.limits, 5)}
			writersDone := make(chan struct{})
			var cwg sync.WaitGroup
			for _, c := range consumers {
				cwg.Add(1)
				go func() {
					defer cwg.Done()
					for {
						select {
						case <-writersDone:
							return
						default:
						}
						for _, name := range tables {
							if err := c.pull(name); err != nil {
								errs <- err
								return
							}
						}
					}
				}()
			}

			// Each stall: nothing commits, the watermark holds below seq, the
			// stalled batch is neither acknowledged nor visible, and the
			// consumers keep draining.
			for i := range tc.stallAt {
				var marker int64
				select {
				case marker = <-stalled:
				case err := <-errs:
					require.NoError(t, err)
				}
				before := map[string]SyncStatus{}
				for _, name := range tables {
					before[name] = status(t, h.d, name)
				}
				require.Greater(t, before["a"].Seq, before["a"].Watermark, "stall %d (%d): seq handed out above the watermark", i, marker)
				pulls := consumers[0].pulls.Load()
				eventually(t, func() bool { return consumers[0].pulls.Load() >= pulls+6 }, "the consumer drains during the stall")
				first, last := stallFirst.Load(), stallLast.Load()
				for _, name := range tables {
					require.Equal(t, before[name], status(t, h.d, name), "stall %d: %s changed while the sequencer is stalled", i, name)
					for _, r := range drainAll(t, h.d, name, 0, 1000) {
						if v, ok := r.Vals[fmt.Sprint("f", stallW)]; ok {
							require.False(t, int64(v.Num) >= first && int64(v.Num) <= last,
								"stall %d: %s x_seq %d shows the stalled batch's point %d", i, name, r.Seq, v.Num)
						}
					}
				}
				require.Equal(t, int32(i), stallDone.Load(), "stall %d: the stalled batch is acknowledged before its commit", i)
				release <- struct{}{}
			}

			wg.Wait()
			close(writersDone)
			cwg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.Equal(t, int32(len(tc.stallAt)), stallDone.Load())

			// The expected rows: each writer's highest number at each key.
			want := map[ccKey]map[string]Value{}
			written := map[string]int{}
			total := 0
			for w, ks := range keys {
				for i, k := range ks {
					n := int64(i + 1)
					written[k.table]++
					total++
					row, ok := want[k]
					if !ok {
						row = map[string]Value{"time": tmv(k.ts), "host": tagv(k.host)}
						want[k] = row
					}
					row[fmt.Sprint("f", w)] = iv(n)
					row[fmt.Sprint("s", w)] = sv(fmt.Sprintf("w%d-%d", w, n))
				}
			}
			require.Less(t, len(want), total, "some points were overwritten")
			for ci, c := range consumers {
				for _, name := range tables {
					st := status(t, h.d, name)
					require.Equal(t, st.Seq, st.Watermark, "%s", name)
					require.Equal(t, uint64(written[name]), st.Seq, "%s: one x_seq per fragment, none burned", name)
					for c.cursor[name] < st.Watermark {
						require.NoError(t, c.pull(name))
					}
					for x := uint64(1); x <= st.Seq; x++ {
						require.GreaterOrEqual(t, c.covered[name][x], 1, "consumer %d, %s: x_seq %d never delivered", ci, name, x)
						require.Equal(t, c.covered[name][x], c.delivered[name][x],
							"consumer %d, %s: x_seq %d delivered %d times by pages covering it %d times", ci, name, x, c.delivered[name][x], c.covered[name][x])
						if c.reread == 0 {
							require.Equal(t, 1, c.delivered[name][x], "consumer %d, %s: x_seq %d", ci, name, x)
						}
					}
					require.Len(t, c.delivered[name], int(st.Seq), "consumer %d, %s: an x_seq above seq", ci, name)
				}
				for k, row := range want {
					require.Equal(t, row, c.replica[k], "consumer %d: row %v", ci, k)
				}
				require.Len(t, c.replica, len(want), "consumer %d: rows never written", ci)
			}
			require.Positive(t, consumers[1].rereads, "the second consumer re-read pages")
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func contains(list []int, x int) bool {
	for _, y := range list {
		if y == x {
			return true
		}
	}
	return false
}

// ccConsumer drains tables page by page into a replica, storing (epoch,
// next) after applying each page; with reread > 0 it forgets to store next
// once in reread pages (a crash between applying and storing) and reads the
// page again.
type ccConsumer struct {
	s       *Drainer
	limits  []int
	reread  int
	rng     *rand.Rand
	cursor  map[string]uint64
	replica map[ccKey]map[string]Value
	// delivered counts each x_seq's rows; covered counts the pages whose
	// range (after, next] held it.
	delivered, covered map[string]map[uint64]int
	rereads            int
	pulls              atomic.Int64
	i                  int
}

func newCCConsumer(s *Drainer, tables []string, limits []int, reread int) *ccConsumer {
	c := &ccConsumer{
		s: s, limits: limits, reread: reread, rng: rand.New(rand.NewPCG(uint64(reread), 11)),
		cursor: map[string]uint64{}, replica: map[ccKey]map[string]Value{},
		delivered: map[string]map[uint64]int{}, covered: map[string]map[uint64]int{},
	}
	for _, name := range tables {
		c.delivered[name], c.covered[name] = map[uint64]int{}, map[uint64]int{}
	}
	return c
}

// pull drains one page of table name after the stored cursor and applies
// it as upserts.
func (c *ccConsumer) pull(name string) error {
	limit := c.limits[c.i%len(c.limits)]
	c.i++
	after := c.cursor[name]
	p, err := tryDrain(c.s, DrainRequest{Table: name, After: after, Limit: limit, Epoch: 1, HasEpoch: true})
	if err == nil {
		err = pageProblem(p, after, limit)
	}
	if err != nil {
		return fmt.Errorf("drain %s after %d limit %d: %w", name, after, limit, err)
	}
	c.pulls.Add(1)
	// Nothing crashed and nothing was rejected, so no number is burned:
	// the page holds exactly after+1 … next.
	rows := p.rows()
	if uint64(len(rows)) != p.Next-after {
		return fmt.Errorf("drain %s after %d: %d rows up to next=%d: a fragment is skipped", name, after, len(rows), p.Next)
	}
	for x := after + 1; x <= p.Next; x++ {
		c.covered[name][x]++
	}
	for i, r := range rows {
		if r.Seq != after+uint64(i)+1 {
			return fmt.Errorf("drain %s after %d: row %d has x_seq %d", name, after, i, r.Seq)
		}
		c.delivered[name][r.Seq]++
		k := ccKey{table: name, host: r.Vals["host"].Str, ts: int64(r.Vals["time"].Num)}
		for col, v := range r.Vals {
			w, ok := strings.CutPrefix(col, "f")
			if !ok {
				continue
			}
			if s := r.Vals["s"+w]; s.Str != "w"+w+"-"+strconv.FormatUint(v.Num, 10) {
				return fmt.Errorf("%s x_seq %d: %s=%d with s%s=%q: a torn row", name, r.Seq, col, v.Num, w, s.Str)
			}
			if old, ok := c.replica[k][col]; ok && v.Num < old.Num {
				return fmt.Errorf("%s x_seq %d: %s went back from %d to %d", name, r.Seq, col, old.Num, v.Num)
			}
		}
		c.replica[k] = r.Vals
	}
	if c.reread > 0 && len(rows) > 0 && c.rng.IntN(c.reread) == 0 {
		c.rereads++ // "crashed" before storing next: the page is read again
		return nil
	}
	c.cursor[name] = p.Next
	return nil
}
