package crashtest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/httpapi/client"
)

var (
	crashCycles   = flag.Int("crash.cycles", 20, "TestCrashCycles: SIGKILL cycles to run")
	crashDuration = flag.Duration("crash.duration", 0, "TestCrashCycles: when set, run kill cycles for this long (and at least -crash.cycles)")
	crashSeed     = flag.Uint64("crash.seed", 0, "TestCrashCycles: random seed (0: from the clock; the seed is logged)")
	crashDir      = flag.String("crash.dir", "", "TestCrashCycles: keep the data directory and logs in this new directory (default: a temporary one, removed)")
)

// The crash model's key space: every line writes one (table, entity, ts)
// of a small fixed set, so that overwrites and late timestamps are common
// and the tables stay small however long the test runs.
const (
	crashEntities = 17   // host=h00 … host=h15, and the empty tag set
	crashSlots    = 1024 // timestamps crashBaseTS + slot ms
	crashBaseTS   = int64(1767225600000000000)
	crashKeys     = len(crashTables) * crashEntities * crashSlots
)

// crashTables: a and b are created WITH SYNC over the API, c is
// auto-created WITH SYNC by its first write (--sync-tables).
var crashTables = [...]string{"crash_a", "crash_b", "crash_c"}

// The writers: each owns two fields, <name> (integer) and <name>s (string
// "<name>-<n>"), and numbers its lines 1, 2, 3, … across the whole run, so
// that the value at a key tells which line of which writer it came from
// and later lines of a writer carry higher numbers.
var crashWriters = [...]string{"h0", "h1", "h2", "t0", "t1"}

const httpWriters = 3 // crashWriters[:3] write over HTTP, the rest over TCP

// keyID numbers the model's (table, entity, ts) keys 0 … crashKeys-1.
type keyID uint32

func makeKey(table, entity, slot int) keyID {
	return keyID((table*crashEntities+entity)*crashSlots + slot)
}

func (k keyID) table() int  { return int(k) / (crashEntities * crashSlots) }
func (k keyID) entity() int { return int(k) / crashSlots % crashEntities }
func (k keyID) slot() int   { return int(k) % crashSlots }

func (k keyID) String() string {
	return fmt.Sprintf("%s/e%d/slot%d", crashTables[k.table()], k.entity(), k.slot())
}

// appendLine appends the ILP line writer w writes as its line n at key k.
func appendLine(b []byte, k keyID, w int, n uint32) []byte {
	b = append(b, crashTables[k.table()]...)
	if e := k.entity(); e < crashEntities-1 {
		b = fmt.Appendf(b, ",host=h%02d", e)
	}
	name := crashWriters[w]
	b = fmt.Appendf(b, " %s=%di,%ss=\"%s-%d\" %d\n", name, n, name, name, n, crashBaseTS+int64(k.slot())*int64(time.Millisecond))
	return b
}

// Line outcomes.
const (
	lineUnknown uint8 = iota // sent, no answer (TCP, or in flight at a kill)
	lineAcked                // its request was answered 204
	lineRefused              // its request was answered 503: nothing may be stored
)

// writerModel is what one writer sent: the source of truth.
type writerModel struct {
	key    []keyID  // key[n-1]: where line n went
	status []uint8  // status[n-1]: line n's outcome
	acked  []uint32 // by key: highest acknowledged line number
	seen   []uint32 // by key: highest line number the consumer has seen
}

// crashModel is the shared state of writers and consumer; mu guards it.
type crashModel struct {
	mu sync.Mutex
	w  [len(crashWriters)]writerModel
}

func newCrashModel() *crashModel {
	m := &crashModel{}
	for i := range m.w {
		m.w[i].acked = make([]uint32, crashKeys)
		m.w[i].seen = make([]uint32, crashKeys)
	}
	return m
}

// next records that writer w sends its next line to k and returns its
// number.
func (m *crashModel) next(w int, k keyID) uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.w[w].key = append(m.w[w].key, k)
	m.w[w].status = append(m.w[w].status, lineUnknown)
	return uint32(len(m.w[w].key))
}

// settle records the outcome of writer w's lines first…last.
func (m *crashModel) settle(w int, first, last uint32, outcome uint8) {
	m.mu.Lock()
	defer m.mu.Unlock()
	wm := &m.w[w]
	for n := first; n <= last; n++ {
		wm.status[n-1] = outcome
		if k := wm.key[n-1]; outcome == lineAcked && wm.acked[k] < n {
			wm.acked[k] = n
		}
	}
}

// validLocked checks that value n of writer w's field at k is a line w sent
// there and not one refused. m.mu must be held.
func (m *crashModel) validLocked(w int, k keyID, n uint32) error {
	wm := &m.w[w]
	switch {
	case n == 0:
		return nil
	case int(n) > len(wm.key) || wm.key[n-1] != k:
		return fmt.Errorf("%s: %s=%d, a line %s never sent there", k, crashWriters[w], n, crashWriters[w])
	case wm.status[n-1] == lineRefused:
		return fmt.Errorf("%s: %s=%d comes from a request answered 503", k, crashWriters[w], n)
	}
	return nil
}

// rowVals are a row's writer fields: the line number of each (0 = absent).
type rowVals [len(crashWriters)]uint32

// Column roles in a rowPlan: a writer's integer field is its index, its
// string field its index + colString.
const (
	colTime   = -1
	colHost   = -2
	colSeq    = -3
	colOp     = -4 // x_op: not part of the model
	colString = 100
)

// rowPlan maps a page's columns to their roles.
type rowPlan []int

func newRowPlan(cols []string) (rowPlan, error) {
	plan := make(rowPlan, len(cols))
	for i, c := range cols {
		switch w := writerIndex(strings.TrimSuffix(c, "s")); {
		case c == "time":
			plan[i] = colTime
		case c == "host":
			plan[i] = colHost
		case c == "x_seq":
			plan[i] = colSeq
		case c == "x_op":
			plan[i] = colOp
		case writerIndex(c) >= 0:
			plan[i] = writerIndex(c)
		case w >= 0:
			plan[i] = w + colString
		default:
			return nil, fmt.Errorf("unexpected column %q", c)
		}
	}
	return plan, nil
}

// decodeRow reads a drained or copied row: its key, writer fields and
// x_seq (0 when not selected). Cells are parsed by hand: the test reads
// millions of them under -race.
func (plan rowPlan) decodeRow(table int, row []json.RawMessage) (keyID, rowVals, uint64, error) {
	var (
		vals    rowVals
		strs    [len(crashWriters)][]byte
		ts      int64
		host    []byte
		seq     uint64
		hasTime bool
	)
	if len(row) != len(plan) {
		return 0, vals, 0, fmt.Errorf("%d cells for %d columns", len(row), len(plan))
	}
	for i, role := range plan {
		cell := row[i]
		if string(cell) == "null" {
			continue
		}
		var err error
		switch {
		case role == colTime:
			ts, err = strconv.ParseInt(string(cell), 10, 64)
			hasTime = true
		case role == colHost:
			host, err = plainString(cell)
		case role == colSeq:
			seq, err = strconv.ParseUint(string(cell), 10, 64)
		case role == colOp:
		case role >= colString:
			strs[role-colString], err = plainString(cell)
		default:
			var n uint64
			n, err = strconv.ParseUint(string(cell), 10, 32)
			vals[role] = uint32(n)
		}
		if err != nil {
			return 0, vals, 0, fmt.Errorf("cell %d %s: %w", i, cell, err)
		}
	}
	if !hasTime {
		return 0, vals, 0, errors.New("no time")
	}
	d := ts - crashBaseTS
	if d < 0 || d%int64(time.Millisecond) != 0 || d/int64(time.Millisecond) >= crashSlots {
		return 0, vals, 0, fmt.Errorf("time %d outside the model", ts)
	}
	entity := crashEntities - 1
	if host != nil {
		e, err := strconv.Atoi(strings.TrimPrefix(string(host), "h"))
		if err != nil || len(host) != 3 || e < 0 || e >= crashEntities-1 {
			return 0, vals, 0, fmt.Errorf("host %q outside the model", host)
		}
		entity = e
	}
	k := makeKey(table, entity, int(d/int64(time.Millisecond)))
	hasField := false
	for w, n := range vals {
		var want []byte
		if n > 0 {
			want, hasField = fmt.Appendf(nil, "%s-%d", crashWriters[w], n), true
		}
		if !bytes.Equal(strs[w], want) {
			return 0, vals, 0, fmt.Errorf("%s: %s=%d but %ss=%q (a torn fragment)", k, crashWriters[w], n, crashWriters[w], strs[w])
		}
	}
	if !hasField {
		return 0, vals, 0, fmt.Errorf("%s: a row without any field", k)
	}
	return k, vals, seq, nil
}

// plainString decodes a JSON string without escapes (all the model writes).
func plainString(cell []byte) ([]byte, error) {
	if len(cell) < 2 || cell[0] != '"' || cell[len(cell)-1] != '"' || bytes.IndexByte(cell, '\\') >= 0 {
		return nil, fmt.Errorf("not a plain JSON string: %s", cell)
	}
	return cell[1 : len(cell)-1], nil
}

func writerIndex(name string) int {
	for i, w := range crashWriters {
		if w == name {
			return i
		}
	}
	return -1
}

// ---- the consumer ----

// seqIndex maps x_seq to keyID+1 (0: not seen), in chunks, since restarts
// burn gaps of up to a lease.
type seqIndex struct {
	chunks map[uint64]*[4096]uint32
	n      int
}

func (s *seqIndex) get(x uint64) uint32 {
	if c := s.chunks[x>>12]; c != nil {
		return c[x&4095]
	}
	return 0
}

func (s *seqIndex) set(x uint64, v uint32) {
	c := s.chunks[x>>12]
	if c == nil {
		c = new([4096]uint32)
		s.chunks[x>>12] = c
	}
	if c[x&4095] == 0 {
		s.n++
	}
	c[x&4095] = v
}

// seqKey is one x_seq and the key it names.
type seqKey struct {
	seq uint64
	key keyID
}

// consumer drains every table continuously into a replica, storing (epoch,
// next) after applying each page, as docs/contract.md#client-loop tells a client to.
type consumer struct {
	m      *crashModel
	hc     *http.Client
	rng    *rand.Rand
	cursor [len(crashTables)]uint64
	rows   []rowVals // the replica, by key (zero: no row)
	seqs   [len(crashTables)]seqIndex
	// recent are the x_seq seen above verified, in order (checked against a
	// re-drain after each restart).
	recent   [len(crashTables)][]seqKey
	verified [len(crashTables)]uint64
	// maxSeq and maxWatermark are the highest seq and watermark any page
	// or SHOW SYNC reported.
	maxSeq, maxWatermark [len(crashTables)]uint64
	pages, applied       int
	replays              int // pages whose cursor update was "lost"
}

func newConsumer(m *crashModel, hc *http.Client, rng *rand.Rand) *consumer {
	c := &consumer{m: m, hc: hc, rng: rng, rows: make([]rowVals, crashKeys)}
	for i := range c.seqs {
		c.seqs[i].chunks = map[uint64]*[4096]uint32{}
	}
	return c
}

var drainLimits = []int{1, 3, 50, 500, 5000}

// pull drains one page of table ti and applies it. It returns the page
// (nil when the table does not exist yet) or the transport error.
func (c *consumer) pull(ctx context.Context, base string, ti int, wait bool) (*client.Page, error) {
	return c.pullLimit(ctx, base, ti, wait, drainLimits[c.rng.IntN(len(drainLimits))])
}

func (c *consumer) pullLimit(ctx context.Context, base string, ti int, wait bool, limit int) (*client.Page, error) {
	req := client.DrainRequest{Table: crashTables[ti], Epoch: 1, After: c.cursor[ti], Limit: limit, TimeFormat: "ns", Consumer: "crashtest"}
	if wait {
		req.Wait = 100 * time.Millisecond
	}
	after := req.After
	api, err := client.New(base, client.WithHTTPClient(c.hc))
	if err != nil {
		return nil, err
	}
	var pg client.Page
	err = api.DrainInto(ctx, req, &pg)
	if errors.Is(err, client.ErrTableNotFound) && ti == 2 && c.maxSeq[ti] == 0 {
		return nil, nil // crash_c is created by its first write
	}
	var refusal *client.Error
	if errors.As(err, &refusal) {
		return nil, fmt.Errorf("drain %s after %d: %w", crashTables[ti], after, err)
	}
	if err != nil {
		return nil, err // the transport (isConnErr) or a malformed page
	}
	if pg.Epoch != 1 {
		return nil, fmt.Errorf("drain %s: epoch %d, want 1", crashTables[ti], pg.Epoch)
	}
	if err := c.apply(ti, after, limit, &pg); err != nil {
		return nil, fmt.Errorf("drain %s after %d limit %d: %w", crashTables[ti], after, limit, err)
	}
	return &pg, nil
}

// apply checks a page and applies its rows as upserts, then stores next
// (one time in ten it "crashes" before storing it, and re-reads the page).
func (c *consumer) apply(ti int, after uint64, limit int, pg *client.Page) error {
	type decoded struct {
		k    keyID
		vals rowVals
		seq  uint64
	}
	rows := make([]decoded, len(pg.Rows))
	seqs := make([]uint64, len(pg.Rows))
	plan, err := newRowPlan(pg.Columns)
	if err != nil {
		return err
	}
	for i, raw := range pg.Rows {
		k, vals, seq, err := plan.decodeRow(ti, raw)
		if err != nil {
			return err
		}
		rows[i], seqs[i] = decoded{k, vals, seq}, seq
	}
	if err := checkPage(pg, after, limit, seqs); err != nil {
		return err
	}
	c.maxSeq[ti] = max(c.maxSeq[ti], pg.Seq)
	c.maxWatermark[ti] = max(c.maxWatermark[ti], pg.Watermark)
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	for _, r := range rows {
		switch prev := c.seqs[ti].get(r.seq); {
		case prev == 0:
			c.seqs[ti].set(r.seq, uint32(r.k)+1)
		case prev != uint32(r.k)+1:
			return fmt.Errorf("x_seq %d named %s and now names %s", r.seq, keyID(prev-1), r.k)
		}
		if n := len(c.recent[ti]); n == 0 || c.recent[ti][n-1].seq < r.seq {
			c.recent[ti] = append(c.recent[ti], seqKey{r.seq, r.k})
		}
		for w, n := range r.vals {
			if err := c.m.validLocked(w, r.k, n); err != nil {
				return fmt.Errorf("x_seq %d: %w", r.seq, err)
			}
			if n < c.rows[r.k][w] {
				return fmt.Errorf("x_seq %d: %s went back from %s=%d to %d", r.seq, r.k, crashWriters[w], c.rows[r.k][w], n)
			}
			c.m.w[w].seen[r.k] = max(c.m.w[w].seen[r.k], n)
		}
		c.rows[r.k] = r.vals
		c.applied++
	}
	c.pages++
	if len(rows) > 0 && c.rng.IntN(10) == 0 {
		c.replays++ // crashed between applying the page and storing next
		return nil
	}
	c.cursor[ti] = pg.Next
	return nil
}

// run drains every table until ctx ends; transport errors (the daemon
// killed) are retried until then.
func (c *consumer) run(ctx context.Context, base string) error {
	idle := [len(crashTables)]bool{}
	for ctx.Err() == nil {
		for ti := range crashTables {
			pg, err := c.pull(ctx, base, ti, idle[ti])
			switch {
			case ctx.Err() != nil:
				return nil
			case isConnErr(err):
				time.Sleep(5 * time.Millisecond) // pacing while the daemon is down
				continue
			case err != nil:
				return err
			}
			idle[ti] = pg == nil || len(pg.Rows) == 0
		}
	}
	return nil
}

// catchUp drains every table to its watermark (no writers running), in
// pages of 500 or 5000 rows.
func (c *consumer) catchUp(t testing.TB, base string) {
	t.Helper()
	for ti := range crashTables {
		for range 100_000 {
			pg, err := c.pullLimit(context.Background(), base, ti, false, drainLimits[3+c.rng.IntN(2)])
			require.NoError(t, err)
			if pg == nil || (!pg.More && c.cursor[ti] == pg.Watermark) {
				break
			}
		}
	}
}

// ---- the writers ----

// keyPicker chooses where a writer's next line goes: a key it wrote
// recently (an overwrite), the next slot in time order of its own, or any
// slot (mostly late).
type keyPicker struct {
	rng    *rand.Rand
	recent [64]keyID
	n      int
	slot   int
}

func (p *keyPicker) pick() keyID {
	var k keyID
	switch r := p.rng.IntN(4); {
	case r == 0 && p.n > 0:
		k = p.recent[p.rng.IntN(min(p.n, len(p.recent)))]
	case r == 1:
		p.slot = (p.slot + 1) % crashSlots
		k = makeKey(p.rng.IntN(len(crashTables)), p.rng.IntN(crashEntities), p.slot)
	default:
		k = makeKey(p.rng.IntN(len(crashTables)), p.rng.IntN(crashEntities), p.rng.IntN(crashSlots))
	}
	p.recent[p.n%len(p.recent)] = k
	p.n++
	return k
}

// writerStats are a writer's counts.
type writerStats struct {
	lines, acked, refused, unknown int
	requests                       int
	bytes                          int64 // TCP: bytes written
}

// batchSize picks an HTTP batch size: mostly small; one in sixty is large
// enough that its group commit spans several badger transactions.
func batchSize(rng *rand.Rand) int {
	if rng.IntN(60) == 0 {
		return 2000
	}
	return []int{1, 2, 10, 50, 150}[rng.IntN(5)]
}

// httpWriter sends batches until ctx ends, one request at a time, each to
// /write or /api/v2/write, plain or gzip.
// A large batch is announced on large (without blocking) as it is sent.
func httpWriter(ctx context.Context, m *crashModel, hc *http.Client, base string, w int, seed uint64, st *writerStats, large chan<- struct{}) error {
	rng := rand.New(rand.NewPCG(seed, uint64(w)))
	kp := &keyPicker{rng: rng, slot: rng.IntN(crashSlots)}
	var body []byte
	for ctx.Err() == nil {
		n := batchSize(rng)
		body = body[:0]
		var first, last uint32
		for i := range n {
			k := kp.pick()
			last = m.next(w, k)
			if i == 0 {
				first = last
			}
			body = appendLine(body, k, w, last)
		}
		u, hdr, payload := base+"/write", http.Header{}, body
		if rng.IntN(3) == 0 {
			u = base + "/api/v2/write?org=o&bucket=b"
		}
		if rng.IntN(4) == 0 {
			var zb bytes.Buffer
			zw := gzip.NewWriter(&zb)
			_, _ = zw.Write(body)
			_ = zw.Close()
			payload = zb.Bytes()
			hdr.Set("Content-Encoding", "gzip")
		}
		st.requests++
		st.lines += n
		if n >= 1000 {
			select {
			case large <- struct{}{}:
			default:
			}
		}
		r, err := do(ctx, hc, http.MethodPost, u, hdr, payload)
		switch {
		case err != nil:
			st.unknown += n // in flight at a kill: stored or not
			if ctx.Err() == nil {
				time.Sleep(5 * time.Millisecond) // pacing while the daemon is down
			}
		case r.Status == http.StatusNoContent:
			m.settle(w, first, last, lineAcked)
			st.acked += n
		case r.Status == http.StatusServiceUnavailable:
			if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 {
				return fmt.Errorf("503 with Retry-After %q", r.Header.Get("Retry-After"))
			}
			m.settle(w, first, last, lineRefused)
			st.refused += n
		default:
			return fmt.Errorf("write answered %d: %s", r.Status, clip(r.Body))
		}
		time.Sleep(time.Duration(20+rng.IntN(40)) * time.Millisecond) // pacing
	}
	return nil
}

// tcpSession is one TCP connection's lines: first…last of its writer;
// lines up to complete were written whole.
type tcpSession struct {
	w                     int
	first, last, complete uint32
}

// tcpWriter writes lines over one connection until ctx ends (then it closes
// the connection) or the connection breaks (a kill), sometimes splitting a
// line across two writes.
func tcpWriter(ctx context.Context, m *crashModel, addr string, w int, seed uint64, st *writerStats, sess *tcpSession) error {
	rng := rand.New(rand.NewPCG(seed, uint64(w)))
	kp := &keyPicker{rng: rng, slot: rng.IntN(crashSlots)}
	sess.w = w
	defer func() {
		if sess.complete > 0 {
			sess.complete += sess.first - 1 // a count until now
		}
	}()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil // killed before we connected: an empty session
	}
	defer func() { _ = conn.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	var (
		buf  []byte
		ends []int // end offset of each line of buf
	)
	for ctx.Err() == nil {
		buf, ends = buf[:0], ends[:0]
		n := 1 + rng.IntN(10)
		for range n {
			k := kp.pick()
			num := m.next(w, k)
			if sess.first == 0 {
				sess.first = num
			}
			sess.last = num
			buf = appendLine(buf, k, w, num)
			ends = append(ends, len(buf))
		}
		st.lines += n
		cut := len(buf)
		if rng.IntN(4) == 0 { // a line split across packets
			cut = 1 + rng.IntN(len(buf)-1)
		}
		written := 0
		for _, p := range [][]byte{buf[:cut], buf[cut:]} {
			if len(p) == 0 {
				continue
			}
			if ctx.Err() == nil {
				_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
			}
			k, err := conn.Write(p)
			st.bytes += int64(k)
			written += k
			if err != nil {
				for _, e := range ends {
					if e <= written {
						sess.complete++
					}
				}
				return nil // the kill, or the end of the cycle
			}
		}
		sess.complete += uint32(n)
		time.Sleep(time.Duration(5+rng.IntN(10)) * time.Millisecond) // pacing
	}
	return nil
}

// ---- the test ----

// crashRun is one run of TestCrashCycles.
type crashRun struct {
	t       *testing.T
	rng     *rand.Rand
	seed    uint64
	dir     string
	args    []string
	hc      *http.Client
	m       *crashModel
	c       *consumer
	p       *proc
	nproc   int
	stats   [len(crashWriters)]writerStats
	lostTCP int // TCP lines in flight at a kill and not stored
	burned  uint64
	// lastFull is the kill count at the last full copy of the source;
	// fullChecks counts the copies.
	lastFull, fullChecks int
	kills                int
	bootKills            int
	// aging drives the tables with retention and truncation.
	aging *agingLoad
}

func (r *crashRun) start() {
	r.nproc++
	r.p = startIngestd(r.t, filepath.Join(r.dir, fmt.Sprintf("ingestd-%04d.log", r.nproc)), r.args...)
}

// TestCrashCycles SIGKILLs ingestd at random moments while HTTP and TCP
// writers write overwrites and late points to three sync tables and a
// consumer drains them, restarts it on the same data directory and checks
// after every cycle: every 204-acknowledged line is stored; every value the
// consumer saw is still stored; no x_seq is reused, renamed or skipped;
// SHOW SYNC's seq is at least every seq seen before; the consumer, resuming
// from its stored cursor, ends with exactly the source's rows; a TCP
// connection's stored lines are, per table, a prefix of what it sent. It
// ends with a clean stop (SIGTERM, exit 0) that must keep every TCP line
// read, and a re-drain of every x_seq ever seen. Alongside run the aging
// tables (aging_test.go): one whose retention the sweeper applies all the
// time and one truncated every 100 ms, with the value-log collector
// running every 50 ms, checked after every cycle too (agingLoad.verify).
func TestCrashCycles(t *testing.T) {
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -crash.seed=%d)", seed, seed)
	dir := t.TempDir()
	if *crashDir != "" {
		dir = *crashDir
		require.NoError(t, os.Mkdir(dir, 0o750), "-crash.dir must name a new directory")
	}
	r := &crashRun{
		t: t, rng: rand.New(rand.NewPCG(seed, 0x5eed)), seed: seed, dir: dir,
		// 1 MiB memtables: badger transactions hold ~150 KiB, so group
		// commits are split into several transactions, which a kill can
		// separate; flushes and compactions run all the time.
		args: daemonArgs(filepath.Join(dir, "data"), append([]string{"--tcp-flush-interval", "5ms", "--sync-tables", "crash_c",
			"--store-memtable-bytes", "1048576", "--store-min-free-bytes", "0"}, agingArgs...)...),
		hc:    newHTTPClient(t, 16),
		m:     newCrashModel(),
		aging: newAgingLoad(),
	}
	r.c = newConsumer(r.m, r.hc, rand.New(rand.NewPCG(seed, 0xc0)))
	r.start()
	for _, tb := range crashTables[:2] {
		createSyncTable(t, r.hc, r.p.URL, tb)
	}
	r.aging.create(t, r.hc, r.p.URL)

	began := time.Now()
	for cycle := 0; cycle < *crashCycles || time.Since(began) < *crashDuration; cycle++ {
		r.aging.lagging = cycle/agingLagCycles%2 == 1
		r.cycle(cycle)
		if t.Failed() {
			return
		}
	}
	r.aging.lagging = false
	r.final()
	var sent, acked, refused, unknown, requests int
	for w := range crashWriters {
		s := r.stats[w]
		sent, acked, refused, unknown, requests = sent+s.lines, acked+s.acked, refused+s.refused, unknown+s.unknown, requests+s.requests
	}
	tcpLines := 0
	for w := httpWriters; w < len(crashWriters); w++ {
		tcpLines += r.stats[w].lines
	}
	var seqs []string
	for ti, tb := range crashTables {
		seqs = append(seqs, fmt.Sprintf("%s=%d", tb, r.c.maxSeq[ti]))
	}
	t.Logf("%d kill cycles (%d during startup) in %s, seed %d", r.kills, r.bootKills, time.Since(began).Round(time.Millisecond), seed)
	t.Logf("lines: %d sent (%d over TCP), %d HTTP requests, %d lines acknowledged (204), %d refused (503), %d without an answer (in flight at a kill, or sent while the daemon was down)",
		sent, tcpLines, requests, acked, refused, unknown)
	t.Logf("TCP lines in flight at a kill and not stored: %d; x_seq burned by crashes: %d; highest seq: %s",
		r.lostTCP, r.burned, seqs)
	t.Logf("consumer: %d pages, %d rows applied, %d pages re-read after a simulated consumer crash; replica compared with a full copy of the source %d times",
		r.c.pages, r.c.applied, r.c.replays, r.fullChecks)
	r.aging.summary(t, r.kills)
}

// cycle runs the load, kills the daemon at a random moment, restarts it
// and verifies.
func (r *crashRun) cycle(n int) {
	t := r.t
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, len(crashWriters)+2)
	sessions := make([]tcpSession, len(crashWriters))
	base, tcpAddr := r.p.URL, r.p.TCPAddr
	large := make(chan struct{})
	for w := range crashWriters {
		wseed := r.rng.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if w < httpWriters {
				err = httpWriter(ctx, r.m, r.hc, base, w, wseed, &r.stats[w], large)
			} else {
				err = tcpWriter(ctx, r.m, tcpAddr, w, wseed, &r.stats[w], &sessions[w])
			}
			if err != nil {
				errs <- fmt.Errorf("writer %s: %w", crashWriters[w], err)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := r.c.run(ctx, base); err != nil {
			errs <- fmt.Errorf("consumer: %w", err)
		}
	}()
	r.aging.start(ctx, &wg, errs, r.hc, base, r.rng.Uint64())

	// The random moment: mostly while the load runs, sometimes at once,
	// and in one cycle in three just after a large batch was sent, when its
	// group commit (split into several badger transactions) may be under
	// way.
	d := time.Duration(150+r.rng.IntN(1050)) * time.Millisecond
	switch r.rng.IntN(10) {
	case 0:
		d = time.Duration(r.rng.IntN(30)) * time.Millisecond
		time.Sleep(d)
	case 1, 2, 3:
		began := time.Now()
		select {
		case <-large:
			time.Sleep(time.Duration(r.rng.IntN(15000)) * time.Microsecond)
		case <-time.After(3 * time.Second):
		}
		d = time.Since(began)
	default:
		time.Sleep(d)
	}
	if r.p.exited() {
		cancel()
		wg.Wait()
		t.Fatalf("cycle %d: ingestd exited on its own (%s):\n%s", n, r.p.state, r.p.log(t))
	}
	require.NoError(t, r.p.cmd.Process.Kill())
	r.p.wait(t, 30*time.Second)
	ws, ok := r.p.state.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "cycle %d: ingestd ended by %s, not the kill:\n%s", n, r.p.state, r.p.log(t))
	requireCleanLog(t, r.p.log(t))
	r.kills++
	cancel()
	wg.Wait()
	r.aging.killed() // a TRUNCATE unanswered at the kill may have run until then
	close(errs)
	for err := range errs {
		require.NoError(t, err, "cycle %d", n)
	}

	// Sometimes the restart is killed too, during recovery.
	if r.rng.IntN(20) == 0 {
		r.nproc++
		p := launch(t, filepath.Join(r.dir, fmt.Sprintf("ingestd-%04d.log", r.nproc)), r.args...)
		time.Sleep(time.Duration(r.rng.IntN(80)) * time.Millisecond)
		p.kill(t)
		requireCleanLog(t, p.log(t))
		r.bootKills++
	}
	began := time.Now()
	r.start()
	r.verify(n, sessions[httpWriters:])
	if testing.Verbose() {
		t.Logf("cycle %d: killed after %s; restart and checks took %s", n, d, time.Since(began).Round(time.Millisecond))
	}
}

// verify checks the restarted daemon against the model (no writers run).
func (r *crashRun) verify(n int, sessions []tcpSession) {
	t, c, base := r.t, r.c, r.p.URL
	for ti, tb := range crashTables {
		if ti == 2 && c.maxSeq[ti] == 0 {
			if rr := mustDo(t, r.hc, http.MethodGet, base+"/api/v1/tables/"+tb+"/sync", nil); rr.Status == http.StatusNotFound {
				continue // not written yet
			}
		}
		st := getSync(t, r.hc, base, tb)
		require.Equal(t, client.SyncStatus{Enabled: true, Epoch: 1, Seq: st.Seq, Watermark: st.Seq, Horizon: st.Horizon}, st, "cycle %d: %s after the restart", n, tb)
		require.GreaterOrEqual(t, st.Seq, c.maxSeq[ti], "cycle %d: %s: SHOW SYNC's seq after the restart is below a seq seen before", n, tb)
		require.GreaterOrEqual(t, st.Watermark, c.maxWatermark[ti], "cycle %d: %s: watermark after the restart below one seen before", n, tb)
		r.burned += st.Seq - c.maxSeq[ti]
		c.maxSeq[ti], c.maxWatermark[ti] = st.Seq, st.Watermark

		// Every x_seq the consumer saw since the last check still names the
		// same key, and the range it has passed holds nothing it did not see.
		// (Pages applied after the stored cursor wait for the next check.)
		var got []seqKey
		r.drainRange(ti, c.verified[ti], c.cursor[ti], func(s seqKey) { got = append(got, s) })
		passed := 0
		for passed < len(c.recent[ti]) && c.recent[ti][passed].seq <= c.cursor[ti] {
			passed++
		}
		require.Equal(t, orEmpty(c.recent[ti][:passed]), orEmpty(got), "cycle %d: %s: x_seq in (%d, %d] before the kill and after the restart", n, tb, c.verified[ti], c.cursor[ti])
		c.verified[ti] = c.cursor[ti]
		c.recent[ti] = append(c.recent[ti][:0], c.recent[ti][passed:]...)
	}

	// The consumer resumes from its stored cursor and catches up; its
	// replica must then equal the source's rows. The copy of the rows
	// visits (and coalesces) every fragment, so once the tables hold more
	// than 200,000 fragments (long runs) it is taken every 50th cycle only;
	// the checks below then read the replica, which the last copy proved
	// equal to the source and the re-drain above proves unchanged since.
	c.catchUp(t, base)
	src := c.rows
	if n < 0 || c.applied < 200_000 || r.kills-r.lastFull >= 50 {
		src = r.sourceRows()
		var diff []string
		for k := range keyID(crashKeys) {
			if src[k] != c.rows[k] && len(diff) < 10 {
				diff = append(diff, fmt.Sprintf("%s: source %v, replica %v", k, src[k], c.rows[k]))
			}
		}
		require.Empty(t, diff, "cycle %d: the consumer's replica differs from the source's rows", n)
		r.lastFull = r.kills
		r.fullChecks++
	}
	r.aging.verify(t, r.hc, base, n)

	// Nothing acknowledged or seen is lost; every stored value was sent
	// there and not refused.
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	for k := range keyID(crashKeys) {
		for w := range crashWriters {
			got, wm := src[k][w], &r.m.w[w]
			if got < wm.acked[k] {
				t.Fatalf("cycle %d: %s: %s=%d, but its line %d was acknowledged (204)", n, k, crashWriters[w], got, wm.acked[k])
			}
			if got < wm.seen[k] {
				t.Fatalf("cycle %d: %s: %s=%d, but the consumer saw line %d there before the kill", n, k, crashWriters[w], got, wm.seen[k])
			}
			if err := r.m.validLocked(w, k, got); err != nil {
				t.Fatalf("cycle %d: %v", n, err)
			}
		}
	}
	// A TCP connection's stored lines are, per table, a prefix of what it
	// sent: its batches commit in order, and each group commit stores a
	// table's fragments as one block, all or nothing. (Across tables a
	// group commit split into several transactions may be cut by the kill.)
	for _, s := range sessions {
		if s.first == 0 {
			continue
		}
		wm := &r.m.w[s.w]
		var missing [len(crashTables)]uint32
		for num := s.first; num <= s.last; num++ {
			k := wm.key[num-1]
			stored, ti := src[k][s.w] >= num, k.table()
			switch {
			case !stored && missing[ti] == 0:
				missing[ti] = num
				r.lostTCP++
			case !stored:
				r.lostTCP++
			case missing[ti] != 0:
				t.Fatalf("cycle %d: a TCP connection's stored lines have a hole: %s line %d (%s) is stored but its earlier line %d (%s) is not",
					n, crashWriters[s.w], num, k, missing[ti], wm.key[missing[ti]-1])
			}
		}
	}
}

// drainRange re-drains table ti's x_seq in (from, to] with a fresh cursor,
// checking each page.
func (r *crashRun) drainRange(ti int, from, to uint64, visit func(seqKey)) {
	t := r.t
	after := from
	api := apiClient(t, r.hc, r.p.URL)
	for after < to {
		limit := 5000
		pg, err := api.Drain(context.Background(), client.DrainRequest{Table: crashTables[ti], Epoch: 1, After: after, Limit: limit, TimeFormat: "ns"})
		require.NoError(t, err)
		seqs := make([]uint64, len(pg.Rows))
		plan, err := newRowPlan(pg.Columns)
		require.NoError(t, err)
		for i, raw := range pg.Rows {
			k, _, seq, err := plan.decodeRow(ti, raw)
			require.NoError(t, err)
			seqs[i] = seq
			if seq <= to {
				visit(seqKey{seq, k})
			}
		}
		require.NoError(t, checkPage(pg, after, limit, seqs))
		require.Greater(t, pg.Next, after, "the drain makes progress")
		after = pg.Next
	}
}

// sourceRows reads every table's rows through the time-range copy.
func (r *crashRun) sourceRows() []rowVals {
	t := r.t
	src := make([]rowVals, crashKeys)
	seen := make([]bool, crashKeys)
	for ti, tb := range crashTables {
		if ti == 2 && r.c.maxSeq[ti] == 0 {
			continue
		}
		copyRows(t, r.hc, r.p.URL, tb, func(cols []string, rows [][]json.RawMessage) {
			plan, err := newRowPlan(cols)
			require.NoError(t, err)
			for _, row := range rows {
				k, vals, _, err := plan.decodeRow(ti, row)
				require.NoError(t, err)
				if seen[k] && src[k] != vals {
					t.Fatalf("%s: a point's fragments are copied as different rows: %v and %v", k, src[k], vals)
				}
				src[k], seen[k] = vals, true
			}
		})
	}
	return src
}

// final stops the writers cleanly, waits until the daemon has read every
// TCP byte, stops it with SIGTERM (exit 0), restarts it and checks every
// line, every x_seq ever seen, and the replica.
func (r *crashRun) final() {
	t := r.t
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, len(crashWriters)+2)
	sessions := make([]tcpSession, len(crashWriters))
	var tcpBytes [len(crashWriters)]int64
	for w := range crashWriters {
		wseed := r.rng.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if w < httpWriters {
				err = httpWriter(ctx, r.m, r.hc, r.p.URL, w, wseed, &r.stats[w], nil)
			} else {
				before := r.stats[w].bytes
				err = tcpWriter(ctx, r.m, r.p.TCPAddr, w, wseed, &r.stats[w], &sessions[w])
				tcpBytes[w] = r.stats[w].bytes - before
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := r.c.run(ctx, r.p.URL); err != nil {
			errs <- err
		}
	}()
	r.aging.start(ctx, &wg, errs, r.hc, r.p.URL, r.rng.Uint64())
	time.Sleep(500 * time.Millisecond) // the final load
	cancel()
	wg.Wait()
	r.aging.killed() // a cancelled TRUNCATE may have run until now
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var sent int64
	for _, b := range tcpBytes {
		sent += b
	}
	poll(t, 30*time.Second, func() bool {
		v, _ := metric(t, r.hc, r.p.URL, `ingestd_ilp_wire_bytes_total{transport="tcp"}`)
		return v >= float64(sent)
	}, "ingestd reads the %d TCP bytes sent", sent)
	require.Equal(t, 0, r.p.terminate(t, 60*time.Second), "SIGTERM: exit code\n%s", r.p.log(t))
	requireCleanLog(t, r.p.log(t))
	r.start()
	final := time.Now()
	r.verify(-1, sessions[httpWriters:])
	// A clean stop loses no TCP line that was read.
	src := r.sourceRows()
	for _, s := range sessions[httpWriters:] {
		for num := s.first; s.first != 0 && num <= s.complete; num++ {
			require.GreaterOrEqual(t, src[r.m.w[s.w].key[num-1]][s.w], num, "%s line %d, read before SIGTERM, is lost", crashWriters[s.w], num)
		}
	}
	// Every x_seq ever seen still names its key, and nothing below the
	// cursor was skipped.
	for ti := range crashTables {
		n := 0
		r.drainRange(ti, 0, r.c.cursor[ti], func(s seqKey) {
			require.Equal(t, uint32(s.key)+1, r.c.seqs[ti].get(s.seq), "%s: x_seq %d (%s) was never seen by the consumer, or named another key", crashTables[ti], s.seq, s.key)
			n++
		})
		require.Equal(t, r.c.seqs[ti].n, n, "%s: x_seq seen by the consumer are missing from the feed", crashTables[ti])
	}
	t.Logf("final verification (every table compared with the model, then drained from 0) took %s", time.Since(final).Round(time.Millisecond))
	require.Equal(t, 0, r.p.terminate(t, 60*time.Second), "SIGTERM: exit code\n%s", r.p.log(t))
	requireCleanLog(t, r.p.log(t))
}

func orEmpty(s []seqKey) []seqKey {
	if s == nil {
		return []seqKey{}
	}
	return s
}

func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
