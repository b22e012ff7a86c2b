package crashtest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/httpapi/client"
	"github.com/ingestd/ingestd/store/jsstore/natstest"
)

var jsKills = flag.Int("jetstream.kills", 3, "TestJetStreamLeaderKills: stream-leader kills to run (a long run: 100)")

// The JetStream fault tests' load: jsWriters writers each number their
// lines 1, 2, 3, … and never send a line twice, so every line is its own
// row (series writer=wW, time jsBaseTS + n µs) that must keep one x_seq
// for good, whether or not it was acknowledged.
const (
	jsTable   = "jsfault"
	jsWriters = 3
	jsBaseTS  = int64(1767225600000000000)
)

// jsColumns is the column order the consumer asks for.
var jsColumns = []string{"writer", "time", "n", "s", "x_seq"}

// jsKey names one line: writer w's n-th.
type jsKey struct{ w, n int }

func (k jsKey) String() string { return fmt.Sprintf("w%d-%d", k.w, k.n) }

// jsLine appends writer w's n-th line.
func jsLine(b []byte, k jsKey) []byte {
	return fmt.Appendf(b, "%s,writer=w%d n=%di,s=\"%s\" %d\n", jsTable, k.w, k.n, k, jsBaseTS+int64(k.n)*1000)
}

// jsNode is one ingestd node on --store=jetstream: its process, restarted
// with the same data directory and flags (a new HTTP port each time).
type jsNode struct {
	dir    string
	args   []string
	mu     sync.Mutex
	p      *proc
	starts int
}

func (n *jsNode) start(t testing.TB) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.starts++
	p := startIngestd(t, filepath.Join(n.dir, fmt.Sprintf("ingestd-%03d.log", n.starts)), n.args...)
	n.p = p
	// The log lives in the test's temporary directory: a failed test shows
	// it before the directory goes.
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(p.logPath); err == nil {
				t.Logf("ingestd log %s (exited: %t):\n%s", filepath.Base(p.logPath), p.exited(), b)
			}
		}
	})
}

func (n *jsNode) proc() *proc {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.p
}

func (n *jsNode) url() string { return n.proc().URL }

// jsLedger is what the writers sent and what was acknowledged (204).
type jsLedger struct {
	mu      sync.Mutex
	next    [jsWriters]int
	acked   map[jsKey]bool
	since   [jsWriters]int  // acknowledged requests since mark
	unknown int             // lines without an answer (the node killed, or the cycle's end): stored or not
	refused int             // lines answered 503: stored or not
	refusal string          // the first 503's body
	latency []time.Duration // of every acknowledged request
}

// mark resets the per-writer counts of acknowledged requests.
func (l *jsLedger) mark() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.since = [jsWriters]int{}
}

// resumed reports whether every writer had a request acknowledged since
// mark.
func (l *jsLedger) resumed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !slices.Contains(l.since[:], 0)
}

// jsConsumer drains the table into a replica, keeping its cursor as the
// mirror does (stored after applying each page), and remembers the x_seq
// of every line it saw.
type jsConsumer struct {
	hc      *http.Client
	cursor  uint64
	replica map[jsKey]uint64 // line → x_seq
	bySeq   map[uint64]jsKey
	pages   int
}

// decodePage checks a page read after after with limit limit and returns
// its rows as (x_seq, line), in order.
func decodePage(pg *client.Page, after uint64, limit int) ([]seqLine, error) {
	if !slices.Equal(pg.Columns, jsColumns) {
		return nil, fmt.Errorf("columns %v, want %v", pg.Columns, jsColumns)
	}
	out := make([]seqLine, 0, len(pg.Rows))
	seqs := make([]uint64, 0, len(pg.Rows))
	for _, row := range pg.Rows {
		r, err := decodeJSRow(row)
		if err != nil {
			return nil, err
		}
		out, seqs = append(out, r), append(seqs, r.seq)
	}
	return out, checkPage(pg, after, limit, seqs)
}

// seqLine is one drained row: its x_seq and line.
type seqLine struct {
	seq uint64
	k   jsKey
}

// decodeJSRow reads a row of jsColumns and checks that its cells are the
// line's: the time, n and s agree.
func decodeJSRow(row []json.RawMessage) (seqLine, error) {
	if len(row) != len(jsColumns) {
		return seqLine{}, fmt.Errorf("%d cells for %d columns", len(row), len(jsColumns))
	}
	var cells [5]string
	for i, c := range row {
		if err := json.Unmarshal(c, &cells[i]); err != nil {
			cells[i] = string(c) // a number
		}
	}
	w, errW := strconv.Atoi(strings.TrimPrefix(cells[0], "w"))
	ts, errT := strconv.ParseInt(cells[1], 10, 64)
	n, errN := strconv.Atoi(cells[2])
	seq, errS := strconv.ParseUint(cells[4], 10, 64)
	if err := errors.Join(errW, errT, errN, errS); err != nil || w < 0 || w >= jsWriters {
		return seqLine{}, fmt.Errorf("row %s: %v", row, err)
	}
	k := jsKey{w, n}
	if ts != jsBaseTS+int64(n)*1000 || cells[3] != k.String() {
		return seqLine{}, fmt.Errorf("row %s is not line %s (a torn fragment)", row, k)
	}
	return seqLine{seq, k}, nil
}

// pull drains one page through base and applies it: a line seen before
// must come at the same x_seq, an x_seq seen before must name the same
// line.
func (c *jsConsumer) pull(ctx context.Context, base string, limit int, wait bool) (*client.Page, error) {
	api, err := client.New(base, client.WithHTTPClient(c.hc))
	if err != nil {
		return nil, err
	}
	req := client.DrainRequest{Table: jsTable, Epoch: 1, After: c.cursor, Limit: limit, Columns: jsColumns, TimeFormat: "ns"}
	if wait {
		req.Wait = 100 * time.Millisecond
	}
	var pg client.Page
	if err := api.DrainInto(ctx, req, &pg); err != nil {
		return nil, err
	}
	rows, err := decodePage(&pg, req.After, limit)
	if err != nil {
		return nil, fmt.Errorf("drain after %d limit %d: %w", req.After, limit, err)
	}
	for _, r := range rows {
		if err := c.see(r); err != nil {
			return nil, err
		}
	}
	c.pages++
	c.cursor = pg.Next
	return &pg, nil
}

// see checks one row against what the consumer saw and records it.
func (c *jsConsumer) see(r seqLine) error {
	if err := c.agrees(r); err != nil {
		return err
	}
	c.bySeq[r.seq], c.replica[r.k] = r.k, r.seq
	return nil
}

// agrees checks one row against what the consumer saw: no x_seq names
// another line, no line moved to another x_seq.
func (c *jsConsumer) agrees(r seqLine) error {
	if k, ok := c.bySeq[r.seq]; ok && k != r.k {
		return fmt.Errorf("x_seq %d named %s and now names %s", r.seq, k, r.k)
	}
	if s, ok := c.replica[r.k]; ok && s != r.seq {
		return fmt.Errorf("line %s was at x_seq %d and is now at %d", r.k, s, r.seq)
	}
	return nil
}

// jsRun is one run of the JetStream fault tests: a 3-server embedded
// cluster, jsNodes ingestd nodes in front of it (writers alternate them
// per request, the consumer drains through each in turn, every check goes
// through each), writers and a consumer.
type jsRun struct {
	t       *testing.T
	cluster *natstest.Cluster
	stream  string // the table's
	meta    string // the meta bucket's
	hc      *http.Client
	nodes   []*jsNode
	ledger  *jsLedger
	c       *jsConsumer
	rng     *rand.Rand
	cycles  int
	// elections are the times from a leader's stop until another server
	// led the stream.
	elections []time.Duration
}

// jsNodes is how many ingestd nodes write the table at once.
const jsNodes = 2

// startJSRun starts the cluster and the first ingestd node on it, creates
// the sync table, finds its stream and starts the other nodes.
func startJSRun(t *testing.T) *jsRun {
	cluster := natstest.Start(t, 3, natstest.RouteProxies())
	cluster.WaitJetStream()
	before := cluster.StreamNames()
	dir := t.TempDir()
	hc := newHTTPClient(t, 16)
	r := &jsRun{t: t, cluster: cluster, hc: hc, ledger: &jsLedger{acked: map[jsKey]bool{}},
		c:   &jsConsumer{hc: hc, replica: map[jsKey]uint64{}, bySeq: map[uint64]jsKey{}},
		rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x15))}
	n := &jsNode{dir: dir, args: daemonArgs(filepath.Join(dir, "data"), "--store", "jetstream", "--nats-url", cluster.URLs())}
	n.start(t)
	r.nodes = append(r.nodes, n)
	defer func() {
		for i := 1; i < jsNodes; i++ {
			d := filepath.Join(dir, fmt.Sprintf("node%d", i))
			n := &jsNode{dir: d, args: daemonArgs(filepath.Join(d, "data"), "--store", "jetstream", "--nats-url", cluster.URLs())}
			require.NoError(t, os.MkdirAll(d, 0o750))
			n.start(t)
			r.nodes = append(r.nodes, n)
		}
	}()
	createSyncTable(t, hc, n.url(), jsTable)
	// The first line defines the columns the consumer asks for.
	resp := mustDo(t, hc, http.MethodPost, n.url()+"/write", jsLine(nil, jsKey{0, 1}))
	require.Equal(t, http.StatusNoContent, resp.Status, "%s", resp.Body)
	r.ledger.next[0], r.ledger.acked[jsKey{0, 1}] = 1, true
	var added, buckets []string
	for _, s := range cluster.StreamNames() {
		switch {
		case slices.Contains(before, s):
		case strings.HasPrefix(s, "KV_"):
			buckets = append(buckets, s)
		default:
			added = append(added, s)
		}
	}
	require.Len(t, added, 1, "CREATE TABLE adds one stream: %v (before: %v)", added, before)
	require.Len(t, buckets, 1, "ingestd adds its meta bucket: %v (before: %v)", buckets, before)
	r.stream, r.meta = added[0], buckets[0]
	poll(t, r.electionBound(), r.current, "streams %s and %s current on every replica", r.stream, r.meta)
	return r
}

// current reports whether the table's stream and the meta bucket's have a
// leader and every replica current, and JetStream's meta group too (a
// server back from a fault may still be catching up with it: losing
// another server then leaves no quorum to create consumers, which the
// nodes' followers need after a stream leader's loss, and the next fault
// would be two).
func (r *jsRun) current() bool {
	return r.cluster.StreamCurrent(r.stream) && r.cluster.StreamCurrent(r.meta) && r.cluster.MetaCurrent()
}

// write sends batches of new lines until ctx ends, each request to the
// next node of the list; a 204 acknowledges its lines.
func (r *jsRun) write(ctx context.Context, w int, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, uint64(w)))
	var body []byte
	for i := 0; ctx.Err() == nil; i++ {
		l := r.ledger
		l.mu.Lock()
		first, count := l.next[w]+1, 1+rng.IntN(10)
		l.next[w] += count
		l.mu.Unlock()
		body = body[:0]
		for n := first; n < first+count; n++ {
			body = jsLine(body, jsKey{w, n})
		}
		began := time.Now()
		resp, err := do(ctx, r.hc, http.MethodPost, r.nodes[(w+i)%len(r.nodes)].url()+"/write", nil, body)
		took := time.Since(began)
		switch {
		case err != nil && !isConnErr(err) && ctx.Err() == nil:
			return err
		case err == nil && resp.Status == http.StatusNoContent:
			l.mu.Lock()
			for n := first; n < first+count; n++ {
				l.acked[jsKey{w, n}] = true
			}
			l.since[w]++
			l.latency = append(l.latency, took)
			l.mu.Unlock()
		case err == nil && resp.Status != http.StatusServiceUnavailable:
			return fmt.Errorf("write answered %d: %s", resp.Status, clip(resp.Body))
		case err == nil: // 503: stored or not
			l.mu.Lock()
			l.refused += count
			l.refusal = cmp.Or(l.refusal, string(resp.Body))
			l.mu.Unlock()
		default: // no answer (the node killed): stored or not
			l.mu.Lock()
			l.unknown += count
			l.mu.Unlock()
		}
		if ctx.Err() == nil {
			time.Sleep(time.Duration(10+rng.IntN(30)) * time.Millisecond) // pacing
		}
	}
	return nil
}

// consume drains continuously, through the nodes in turn, until ctx
// ends; a node being down is retried.
func (r *jsRun) consume(ctx context.Context) error {
	idle := false
	for i := 0; ctx.Err() == nil; i++ {
		pg, err := r.c.pull(ctx, r.nodes[i%len(r.nodes)].url(), []int{1, 7, 100, 1000}[i%4], idle)
		switch {
		case ctx.Err() != nil:
			return nil
		case isConnErr(err):
			time.Sleep(5 * time.Millisecond) // pacing while the node is down
			continue
		case err != nil:
			return err
		}
		idle = len(pg.Rows) == 0
	}
	return nil
}

// cycle runs the load, applies fault once writes flow, requires writes to
// resume after it, stops the load and verifies.
func (r *jsRun) cycle(name string, fault func()) {
	t := r.t
	r.cycles++
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, jsWriters+1)
	for w := range jsWriters {
		seed := r.rng.Uint64()
		wg.Go(func() { errs <- r.write(ctx, w, seed) })
	}
	wg.Go(func() { errs <- r.consume(ctx) })
	stop := func() {
		cancel()
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err, "cycle %d (%s)", r.cycles, name)
		}
	}
	defer func() {
		if ctx.Err() == nil {
			stop()
		}
	}()
	r.ledger.mark()
	poll(t, r.electionBound(), r.ledger.resumed, "cycle %d (%s): every writer acknowledged before the fault", r.cycles, name)
	r.ledger.mu.Lock()
	from := len(r.ledger.latency)
	r.ledger.mu.Unlock()
	began := time.Now()
	fault()
	r.ledger.mark()
	poll(t, r.electionBound(), r.ledger.resumed, "cycle %d (%s): writes resume after the fault", r.cycles, name)
	stop()
	r.ledger.mu.Lock()
	worst := slices.Max(r.ledger.latency[from:])
	r.ledger.mu.Unlock()
	t.Logf("cycle %d (%s): fault and recovery in %s; slowest acknowledged write %s", r.cycles, name,
		time.Since(began).Round(time.Millisecond), worst.Round(time.Millisecond))
	r.verify(name)
}

// lastBody formats, when a poll fails, the last body it read.
type lastBody struct{ b []byte }

func (l *lastBody) String() string { return clip(l.b) }

// upTo returns the rows (in x_seq order) at or below x_seq w.
func upTo(rows []seqLine, w uint64) []seqLine {
	n, _ := slices.BinarySearchFunc(rows, w+1, func(r seqLine, s uint64) int { return cmp.Compare(r.seq, s) })
	return rows[:n]
}

// verify checks, with the load stopped: the consumer catches up to the
// watermark; a drain from 0 through every node returns the same pages,
// equal to the consumer's replica; every acknowledged line is in it; every
// x_seq the consumer saw names the same line.
func (r *jsRun) verify(name string) {
	t := r.t
	for i, n := range r.nodes {
		requireCleanLog(t, n.proc().log(t))
		require.False(t, n.proc().exited(), "cycle %d (%s): ingestd exited:\n%s", r.cycles, name, n.proc().log(t))
		// A node whose row cache stopped applying the stream says so.
		var health lastBody
		poll(t, r.electionBound(), func() bool {
			resp, err := do(context.Background(), r.hc, http.MethodGet, n.url()+"/health", nil, nil)
			require.NoError(t, err)
			health.b = resp.Body
			return resp.Status == http.StatusOK
		}, "cycle %d (%s): node %d healthy (last /health: %s)", r.cycles, name, i, &health)
	}
	// A write whose request the stopped writers abandoned may still
	// commit: the source is compared up to the first drain's watermark.
	first, w := r.drainAll(r.nodes[0].url())
	for i, n := range r.nodes[1:] {
		// The other node serves what it applied: once it reached node 0's
		// watermark, its pages up to it are node 0's.
		poll(t, r.electionBound(), func() bool {
			all, wn := r.drainAll(n.url())
			if wn < w {
				return false
			}
			require.Equal(t, first, upTo(all, w), "cycle %d (%s): node %d drains other rows than node 0", r.cycles, name, i+1)
			return true
		}, "cycle %d (%s): node %d reaches node 0's watermark %d", r.cycles, name, i+1, w)
	}
	poll(t, r.electionBound(), func() bool {
		_, err := r.c.pull(context.Background(), r.nodes[0].url(), 1000, false)
		require.NoError(t, err, "cycle %d (%s): catch up", r.cycles, name)
		return r.c.cursor >= w
	}, "cycle %d (%s): the consumer catches up to x_seq %d", r.cycles, name, w)
	var replica []seqLine
	for s, k := range r.c.bySeq {
		replica = append(replica, seqLine{s, k})
	}
	slices.SortFunc(replica, func(a, b seqLine) int { return cmp.Compare(a.seq, b.seq) })
	require.Equal(t, first, upTo(replica, w), "cycle %d (%s): a drain from 0 has other rows than the consumer's replica", r.cycles, name)
	r.ledger.mu.Lock()
	defer r.ledger.mu.Unlock()
	var missing []string
	for k := range r.ledger.acked {
		if _, ok := r.c.replica[k]; !ok {
			missing = append(missing, k.String())
		}
	}
	slices.Sort(missing)
	require.Empty(t, missing, "cycle %d (%s): acknowledged lines missing", r.cycles, name)
}

// drainAll reads the whole table from after=0 through base, checking
// every page and that no row contradicts what the consumer saw (without
// adding to it: verify compares the two); it returns the rows and the
// last page's watermark.
func (r *jsRun) drainAll(base string) ([]seqLine, uint64) {
	t := r.t
	api := apiClient(t, r.hc, base)
	var out []seqLine
	var pg client.Page
	for after := uint64(0); ; {
		req := client.DrainRequest{Table: jsTable, Epoch: 1, After: after, Limit: 5000, Columns: jsColumns, TimeFormat: "ns"}
		require.NoError(t, api.DrainInto(context.Background(), req, &pg))
		rows, err := decodePage(&pg, after, req.Limit)
		require.NoError(t, err, "drain from 0 via %s", base)
		for _, row := range rows {
			require.NoError(t, r.c.agrees(row), "drain from 0 via %s", base)
		}
		out = append(out, rows...)
		if !pg.More {
			return out, pg.Watermark
		}
		after = pg.Next
	}
}

const leaderCut = "the leader cut off"

func leader(l int) int { return l }

// killStreamLeader kills the server leading the table's stream as a crash
// would (natstest.Kill: no leadership handover), requires writes to go on
// without it (the others elect a leader once they notice), restarts it and
// waits until it is current.
func (r *jsRun) killStreamLeader() {
	r.serverFault("the leader killed", leader, r.cluster.Kill, r.cluster.Restart)
}

// stopStreamLeader is killStreamLeader with a clean shutdown, in which the
// leader hands its leadership over.
func (r *jsRun) stopStreamLeader() {
	r.serverFault("the leader stopped", leader, r.cluster.Stop, r.cluster.Restart)
}

// stopFollower stops a server that does not lead the table's stream (the
// stream keeps its leader), requires writes to go on, restarts it and
// waits until it is current.
func (r *jsRun) stopFollower() {
	r.serverFault("a follower stopped", func(leader int) int { return (leader + 1 + r.rng.IntN(2)) % r.cluster.Size() },
		r.cluster.Stop, r.cluster.Restart)
}

// partition cuts the server leading the table's stream off its peers
// without stopping it (natstest's route proxies drop its routes; its
// clients, ingestd perhaps, stay connected to it), requires writes to go
// on (the majority elects another leader), heals the cut and waits until
// the server is current again.
func (r *jsRun) partition() {
	r.serverFault(leaderCut, leader, r.cluster.Cut, r.cluster.Heal)
}

// serverFault applies down to the server pick chooses (given the stream's
// leader), requires writes to go on while it is down, applies up and
// waits until every replica of the stream is current. When the leader is
// stopped or killed, the time until another server leads is recorded (a
// leader cut off claims the lead until it notices it lost its quorum).
func (r *jsRun) serverFault(what string, pick func(leader int) int, down, up func(int)) {
	var leader int
	poll(r.t, r.electionBound(), r.current, "the cluster current before %s", what)
	poll(r.t, r.electionBound(), func() bool { leader = r.cluster.StreamLeader(r.stream); return leader >= 0 }, "a leader of %s", r.stream)
	i := pick(leader)
	began := time.Now()
	down(i)
	if i == leader && what != leaderCut {
		poll(r.t, r.electionBound(), func() bool { l := r.cluster.StreamLeader(r.stream); return l >= 0 && l != i }, "a new leader of %s", r.stream)
		r.elections = append(r.elections, time.Since(began))
	}
	r.ledger.mark()
	poll(r.t, r.electionBound(), r.ledger.resumed, "writes go on with server %d down (%s)", i, what)
	r.t.Logf("every writer acknowledged %s after server %d went down (%s)", time.Since(began).Round(time.Millisecond), i, what)
	up(i)
	back := time.Now()
	poll(r.t, r.electionBound(), r.current, "server %d current again on %s, %s and the meta group (%s)", i, r.stream, r.meta, what)
	r.t.Logf("server %d current again %s after it came back (%s)", i, time.Since(back).Round(time.Millisecond), what)
}

// electionBound is how long a stream election, and whatever waits on one
// (writes resuming, a server current again, a node catching up), may
// take: ten times the slowest election this run measured, at least a
// minute (NATS' own timeouts bound an election on an idle machine); poll
// stretches it further by the machine's load. Every deadline of the fault
// tests is this bound.
func (r *jsRun) electionBound() time.Duration {
	bound := time.Minute
	for _, e := range r.elections {
		bound = max(bound, 10*e)
	}
	return bound
}

// killNode SIGKILLs ingestd node i mid-write and restarts it on the same
// data directory (its row cache is rebuilt from the streams).
func (r *jsRun) killNode(i int) {
	r.nodes[i].proc().kill(r.t)
	r.nodes[i].start(r.t)
}

// summary logs the run's figures: lines, and the acknowledged writes'
// latency.
func (r *jsRun) summary(began time.Time, kills int) {
	l := r.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	lat := slices.Clone(l.latency)
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	sent := 0
	for _, n := range l.next {
		sent += n
	}
	var top uint64
	for s := range r.c.bySeq {
		top = max(top, s)
	}
	r.t.Logf("%d faults (%d stream-leader kills) in %s: %d lines sent, %d acknowledged (204) in %d requests, %d refused (503: %q), %d without an answer; the consumer read %d pages, %d rows, highest x_seq %d",
		r.cycles, kills, time.Since(began).Round(time.Millisecond), sent, len(l.acked), len(lat), l.refused, l.refusal, l.unknown, r.c.pages, len(r.c.replica), top)
	r.t.Logf("acknowledged write latency: p50 %s, p99 %s, p99.9 %s, max %s", q(0.5), q(0.99), q(0.999), lat[len(lat)-1])
	if len(r.elections) > 0 {
		el := slices.Clone(r.elections)
		slices.Sort(el)
		r.t.Logf("stream-leader elections (the leader's stop or kill until a new leader): %d, median %s, max %s", len(el), el[len(el)/2], el[len(el)-1])
	}
}

// TestJetStreamFaults runs two real ingestd binaries on --store=jetstream
// against an embedded 3-server cluster (route proxies in front of every
// server) under continuous HTTP writers (each request to the other node)
// and a consumer draining through either node, and
// applies each fault of docs/design.md#fault-tests in turn: the table stream's leader
// stopped cleanly (it hands its leadership over), killed (natstest.Kill:
// no handover, the others must notice), a follower stopped, the leader cut
// off its peers while running (its clients, ingestd perhaps, stay
// connected to it: jsstore's --jetstream-switch-after moves them), the
// second ingestd node SIGKILLed mid-write and restarted (its row cache
// rebuilt from the stream), then the leader killed again; each server
// restarted or healed and caught up. After each: every acknowledged line
// is present, no x_seq repeats or moves, a drain from 0 equals the
// consumer's replica, a drain from 0 through the other node returns the
// same pages, and writes resumed.
func TestJetStreamFaults(t *testing.T) {
	r := startJSRun(t)
	began := time.Now()
	r.cycle("stream leader stopped", r.stopStreamLeader)
	r.cycle("stream leader killed", r.killStreamLeader)
	r.cycle("follower stopped", r.stopFollower)
	r.cycle("stream leader cut off", r.partition)
	r.cycle("ingestd killed", func() { r.killNode(r.cycles % len(r.nodes)) })
	r.cycle("stream leader killed after an ingestd restart", r.killStreamLeader)
	r.summary(began, 3) // the leader killed twice, cut off once
}

// TestJetStreamLeaderKills kills the table stream's leader -jetstream.kills
// times (3 by default; a long run is 100), with the checks of
// TestJetStreamFaults after each kill.
func TestJetStreamLeaderKills(t *testing.T) {
	r := startJSRun(t)
	began := time.Now()
	for range *jsKills {
		r.cycle("stream leader killed", r.killStreamLeader)
		if t.Failed() {
			return
		}
	}
	r.summary(began, *jsKills)
}

// TestJetStreamTwoNodesOverwrite has two ingestd nodes on one JetStream
// server overwrite the same points (the same series and times) at once,
// each request through either node: a marker line, a point of its own
// (series marker, time its id), then v=id on a random subset of the
// shared points. The markers' x_seq give the requests' order in the
// stream; once every request is acknowledged, every shared point's row,
// in a drain from 0 and in /rows, holds the v of the last request in
// that order that wrote it, and both nodes return the same pages.
func TestJetStreamTwoNodesOverwrite(t *testing.T) {
	const (
		table    = "overwrite"
		points   = 24
		writers  = 4
		requests = 40 // per writer
	)
	cluster := natstest.Start(t, 1)
	cluster.WaitJetStream()
	hc := newHTTPClient(t, 2*writers)
	var nodes []*jsNode
	for i := range 2 {
		d := filepath.Join(t.TempDir(), fmt.Sprintf("node%d", i))
		require.NoError(t, os.MkdirAll(d, 0o750))
		n := &jsNode{dir: d, args: daemonArgs(filepath.Join(d, "data"), "--store", "jetstream", "--nats-url", cluster.URLs(), "--jetstream-replicas", "1")}
		n.start(t)
		nodes = append(nodes, n)
	}
	createSyncTable(t, hc, nodes[0].url(), table)
	line := func(b []byte, host string, v, ts int64) []byte {
		return fmt.Appendf(b, "%s,host=%s v=%di %d\n", table, host, v, jsBaseTS+ts)
	}
	// wrote[id] are the shared points request id wrote.
	wrote := make([][]int, writers*requests+1)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w)))
		wg.Go(func() {
			for i := range requests {
				id := w*requests + i + 1
				body := line(nil, "marker", int64(id), int64(id))
				for p := range points {
					if rng.IntN(2) == 0 {
						body = line(body, fmt.Sprintf("h%d", p%3), int64(id), int64(1_000_000+p))
						wrote[id] = append(wrote[id], p)
					}
				}
				if err := writeAcked(context.Background(), hc, nodes[(w+i)%2].url(), body, fmt.Sprintf("write %d", id)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	type row struct {
		host  string
		ts, v int64
		seq   uint64
	}
	cols := []string{"host", "time", "v", "x_seq"}
	drain := func(base string) ([]row, uint64) {
		api := apiClient(t, hc, base)
		var out []row
		var pg client.Page
		for after := uint64(0); ; {
			req := client.DrainRequest{Table: table, Epoch: 1, After: after, Limit: 100, Columns: cols, TimeFormat: "ns"}
			require.NoError(t, api.DrainInto(context.Background(), req, &pg))
			require.Equal(t, cols, pg.Columns)
			for _, cells := range pg.Rows {
				var r row
				require.NoError(t, json.Unmarshal(cells[0], &r.host))
				for i, dst := range []*int64{&r.ts, &r.v} {
					n, err := strconv.ParseInt(strings.Trim(string(cells[i+1]), `"`), 10, 64)
					require.NoError(t, err, "%s", cells)
					*dst = n
				}
				seq, err := strconv.ParseUint(string(cells[3]), 10, 64)
				require.NoError(t, err)
				r.seq = seq
				out = append(out, r)
			}
			if !pg.More {
				return out, pg.Watermark
			}
			after = pg.Next
		}
	}
	// Each node serves every request once it applied the other's (a
	// coalesced row shows every write applied, so the pages agree once
	// both applied everything): then the pages through both are equal.
	markers := func(rows []row) int {
		n := 0
		for _, r := range rows {
			if r.host == "marker" {
				n++
			}
		}
		return n
	}
	var got []row
	for i, n := range nodes {
		var rows []row
		poll(t, time.Minute, func() bool { rows, _ = drain(n.url()); return markers(rows) == writers*requests }, "node %d applied every request", i)
		// Pages are read one after the other: the first ones of the drain
		// that found every marker may predate the last blocks' overwrites.
		// A drain begun once the node applied everything is read again.
		rows, _ = drain(n.url())
		if i == 0 {
			got = rows
		} else {
			require.Equal(t, got, rows, "node %d drains other pages than node 0", i)
		}
	}
	// The requests in stream order, by their markers' x_seq.
	order := map[int64]uint64{}
	final := map[int64]int64{} // shared point -> v of its row
	for i, r := range got {
		if i > 0 {
			require.Greater(t, r.seq, got[i-1].seq, "x_seq ascends")
		}
		if r.host == "marker" {
			require.Equal(t, r.ts-jsBaseTS, r.v)
			order[r.v] = r.seq
			continue
		}
		p := r.ts - jsBaseTS - 1_000_000
		if v, ok := final[p]; ok {
			require.Equal(t, v, r.v, "every fragment of point %d shows its one coalesced row", p)
		}
		final[p] = r.v
	}
	require.Len(t, order, writers*requests, "every acknowledged request is in the drain")
	last := map[int64]int64{}
	lastSeq := map[int64]uint64{}
	for id := 1; id <= writers*requests; id++ {
		for _, p := range wrote[id] {
			if s := order[int64(id)]; s > lastSeq[int64(p)] {
				last[int64(p)], lastSeq[int64(p)] = int64(id), s
			}
		}
	}
	require.Equal(t, last, final, "every point holds the last acknowledged write in stream order")
	// The copy by time range holds one row per point, the same through
	// both nodes.
	var copies []string
	for _, n := range nodes {
		pg, err := apiClient(t, hc, n.url()).Rows(context.Background(), client.RowsRequest{Table: table, Limit: 1000, TimeFormat: "ns",
			Start: strconv.FormatInt(jsBaseTS+1_000_000, 10), End: strconv.FormatInt(jsBaseTS+1_000_000+points, 10)})
		require.NoError(t, err)
		require.Len(t, pg.Rows, len(final), "one row per point")
		copies = append(copies, fmt.Sprint(pg.Rows))
	}
	require.Equal(t, copies[0], copies[1], "/rows through both nodes")
	for _, n := range nodes {
		requireCleanLog(t, n.proc().log(t))
	}
}
