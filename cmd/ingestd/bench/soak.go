package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ingestd/ingestd/httpapi/client"
)

// Soak mode: a long open-loop load at a fixed offered rate, generated
// while it is sent (the harness's memory does not grow with the run's
// length), reported per window.
//
// Line i of the run is series i mod S (S = --series, spread over the
// first --soak-tables TSBS devops measurements) at the time it is
// scheduled to be sent: start + i/rate. So every series is written once
// per S/rate seconds, in time order, the way Telegraf agents write the
// current time, and a consumer's lag is the age of the newest row it has
// read. Requests of --latency-lines lines are due one every
// lines/rate seconds; at most --max-inflight are outstanding, and a
// request's latency counts from when it was due, so a server that falls
// behind is charged for the queue it causes. Nothing is retried: a 503 or
// 429 is counted as refused (its latency apart from the others: the p99
// of a window is that of the requests not refused), any other answer but
// 204 as failed.

// soakSLO is the window criterion of a sustainable rate: at least this
// share of the offered lines acknowledged, with p99 at most soakP99.
const (
	soakAckShare = 0.99
	soakP99      = 100 * time.Millisecond
)

// soakGen renders the run's lines. It holds one tag-set prefix per series
// (about 200 bytes: 200 MB at a million series) and nothing per line.
type soakGen struct {
	prefixes [][]byte // per series: "measurement,tags "
	fields   [][]string
	table    []int // per series: index into tables
	tables   []string
	t0       int64
	stepNs   float64 // ns between two consecutive lines
}

func newSoakGen(series, tables int, t0 time.Time, rate float64, seed uint64) *soakGen {
	tables = min(max(tables, 1), len(benchDevopsMeasurements))
	g := &soakGen{t0: t0.UnixNano(), stepNs: 1e9 / rate}
	for _, m := range benchDevopsMeasurements[:tables] {
		g.tables = append(g.tables, m.name)
		g.fields = append(g.fields, m.fields)
	}
	for s := range series {
		h, m := s/tables, s%tables
		reg := benchRegions[int(mix(seed, uint64(h))%uint64(len(benchRegions)))]
		p := fmt.Sprintf("%s,hostname=host_%d,region=%s,datacenter=%s%c,rack=%d,os=%s,arch=%s,team=%s,service=%d,service_version=%d,service_environment=%s ",
			g.tables[m], h, reg.name, reg.name, reg.dcs[mix(seed+1, uint64(h))%uint64(len(reg.dcs))], mix(seed+2, uint64(h))%100,
			benchOS[mix(seed+3, uint64(h))%uint64(len(benchOS))], benchArch[mix(seed+4, uint64(h))%2], benchTeam[mix(seed+5, uint64(h))%4],
			mix(seed+6, uint64(h))%20, mix(seed+7, uint64(h))%2, benchEnv[mix(seed+8, uint64(h))%3])
		g.prefixes = append(g.prefixes, []byte(p))
		g.table = append(g.table, m)
	}
	return g
}

// mix is SplitMix64's finaliser of seed+x: a cheap, well-spread hash.
func mix(seed, x uint64) uint64 {
	z := seed + x*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// time is line i's timestamp (ns).
func (g *soakGen) time(i int64) int64 { return g.t0 + int64(float64(i)*g.stepNs) }

// appendLines appends lines [from, from+n) to b. A field's value moves by
// at most 2 between a series' consecutive lines (a walk between 0 and
// 100, as TSBS's do), so servers that encode deltas see realistic data.
func (g *soakGen) appendLines(b []byte, from int64, n int) []byte {
	S := int64(len(g.prefixes))
	for i := from; i < from+int64(n); i++ {
		s, round := i%S, uint64(i/S)
		b = append(b, g.prefixes[s]...)
		for f, name := range g.fields[g.table[s]] {
			if f > 0 {
				b = append(b, ',')
			}
			b = append(b, name...)
			b = append(b, '=')
			h := mix(uint64(s), uint64(f))
			v := (h%100 + round*(h>>32%3)) % 200 // a triangle wave: up to 100, back down
			if v > 100 {
				v = 200 - v
			}
			b = strconv.AppendUint(b, v, 10)
			b = append(b, 'i')
		}
		b = append(b, ' ')
		b = strconv.AppendInt(b, g.time(i), 10)
		b = append(b, '\n')
	}
	return b
}

// soakHist is a latency histogram with buckets 2 % wide from 10 µs: p50,
// p99 and max within 2 %, in constant memory.
type soakHist struct {
	counts []int64
	n      int64
	max    time.Duration
}

const soakHistBase = 10 * time.Microsecond

var soakHistLog = math.Log(1.02)

func (h *soakHist) add(d time.Duration) {
	i := 0
	if d > soakHistBase {
		i = int(math.Log(float64(d)/float64(soakHistBase))/soakHistLog) + 1
	}
	if i >= len(h.counts) {
		h.counts = append(h.counts, make([]int64, i+1-len(h.counts))...)
	}
	h.counts[i]++
	h.n++
	h.max = max(h.max, d)
}

func (h *soakHist) merge(o *soakHist) {
	for i, c := range o.counts {
		if c == 0 {
			continue
		}
		if i >= len(h.counts) {
			h.counts = append(h.counts, make([]int64, i+1-len(h.counts))...)
		}
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// pct is the upper edge of the bucket holding the p-th quantile (the
// maximum itself for p = 1), 0 when empty.
func (h *soakHist) pct(p float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if p >= 1 {
		return h.max
	}
	rank := int64(math.Ceil(float64(h.n) * p))
	var seen int64
	for i, c := range h.counts {
		if seen += c; seen >= max(rank, 1) {
			if i == 0 {
				return min(soakHistBase, h.max)
			}
			return min(time.Duration(float64(soakHistBase)*math.Pow(1.02, float64(i))), h.max)
		}
	}
	return h.max
}

// soakWindow is what one reporting window saw.
type soakWindow struct {
	acked, refused, failed int64    // lines
	reqs                   soakHist // latencies of the requests not refused
	refusals               soakHist // latencies of the refusals (503, 429)
	// refusalAnswers holds the refusals' times from the request's send to
	// its answer: how fast the server refused, without the wait for a
	// slot that the latency from the scheduled send time includes.
	refusalAnswers soakHist
}

// soakTail is one tailing consumer: it long-polls its table's feed and
// keeps the age of the newest row it read.
type soakTail struct {
	table string
	// start is when the line stamped t0 was due, with the monotonic
	// clock's reading: a row's age is counted on that clock, so that a
	// wall clock that is stepped or slewed during the run does not add
	// to or hide the lag.
	start    time.Time
	t0       int64
	rows     atomic.Int64
	newest   atomic.Int64 // ns timestamp of the newest row read
	maxAge   atomic.Int64 // the window's largest age of a page's newest row when it arrived (ns)
	caughtUp atomic.Bool  // the last page ended at the watermark
	err      atomic.Pointer[error]
}

func (c *soakTail) run(ctx context.Context, api *client.Client, limit int) {
	var pg client.Page
	after := uint64(0)
	for ctx.Err() == nil {
		err := api.DrainInto(ctx, client.DrainRequest{Table: c.table, After: after, Limit: limit, Format: client.FormatLP, Wait: time.Second, Consumer: "soak"}, &pg)
		if err != nil {
			if ctx.Err() == nil {
				c.err.Store(&err)
			}
			return
		}
		if n := pg.Lines(); n > 0 {
			c.rows.Add(int64(n))
			if ts, ok := lastLineTime(pg.Body); ok {
				c.newest.Store(ts)
				age := int64(c.age(time.Now(), ts))
				for old := c.maxAge.Load(); age > old && !c.maxAge.CompareAndSwap(old, age); old = c.maxAge.Load() {
				}
			}
		}
		c.caughtUp.Store(!pg.More)
		after = pg.Next
	}
}

// lag is how far behind c was over the window ending at now, and starts
// the next: the largest age a page's newest row had when it arrived (a
// row is stamped with the time it was due, so this counts the write's
// latency too), or the age of the newest row read when c is behind the
// watermark now.
func (c *soakTail) lag(now time.Time) time.Duration {
	lag := time.Duration(c.maxAge.Swap(0))
	if !c.caughtUp.Load() {
		lag = max(lag, c.age(now, max(c.newest.Load(), c.t0)))
	}
	return lag
}

// age is how long before now a line stamped ts was due.
func (c *soakTail) age(now time.Time, ts int64) time.Duration {
	return now.Sub(c.start) - time.Duration(ts-c.t0)
}

// lastLineTime is the timestamp of the last ILP line in b (its last
// space-separated token).
func lastLineTime(b []byte) (int64, bool) {
	b = bytes.TrimRight(b, "\n")
	i := bytes.LastIndexByte(b, ' ')
	if i < 0 {
		return 0, false
	}
	ts, err := strconv.ParseInt(string(b[i+1:]), 10, 64)
	return ts, err == nil
}

// diskProbe measures the machine's storage apart from the server: it
// rewrites one 4 KiB block of its own file in place and fdatasyncs it
// every interval, and keeps the slowest sync of the window. The block is
// allocated once, so a slow sync is the device's or the file system's
// journal's, which a server's fsync waits for as well.
type diskProbe struct {
	f       *os.File
	slowest atomic.Int64 // ns, this window
	stop    chan struct{}
	done    chan struct{}
}

// startDiskProbe starts a probe writing to a file in dir, removed by stop.
func startDiskProbe(dir string, every time.Duration) (*diskProbe, error) {
	f, err := os.CreateTemp(dir, ".ingestd-bench-disk-probe-*")
	if err != nil {
		return nil, err
	}
	block := make([]byte, 4096)
	if _, err := f.WriteAt(block, 0); err == nil {
		err = f.Sync()
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return nil, err
	}
	p := &diskProbe{f: f, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for n := byte(0); ; n++ {
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
			block[0] = n
			began := time.Now()
			if _, err := f.WriteAt(block, 0); err != nil {
				return
			}
			if err := syscall.Fdatasync(int(f.Fd())); err != nil {
				return
			}
			d := int64(time.Since(began))
			for old := p.slowest.Load(); d > old && !p.slowest.CompareAndSwap(old, d); old = p.slowest.Load() {
			}
		}
	}()
	return p, nil
}

// window returns the slowest sync since the last call and starts the
// next window (0 for a nil probe).
func (p *diskProbe) window() time.Duration {
	if p == nil {
		return 0
	}
	return time.Duration(p.slowest.Swap(0))
}

func (p *diskProbe) close() {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.done
	_ = p.f.Close()
	_ = os.Remove(p.f.Name())
}

// soakSample is the server's state at a window's end.
type soakSample struct {
	cpu             time.Duration
	rssAnon, rssFil int64 // bytes, -1 unknown
	store           int64 // bytes, -1 unknown
}

func sampleServer(pid int, dir string) soakSample {
	s := soakSample{rssAnon: -1, rssFil: -1, store: -1}
	if pid > 0 {
		s.cpu, _ = readProcCPU(pid)
		s.rssAnon, s.rssFil = readProcRSS(pid)
	}
	if dir != "" {
		s.store = dirBytes(dir)
	}
	return s
}

// readProcRSS returns RssAnon and RssFile of /proc/PID/status, in bytes
// (-1 when unknown).
func readProcRSS(pid int) (anon, file int64) {
	anon, file = -1, -1
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "RssAnon" && k != "RssFile") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			continue
		}
		if k == "RssAnon" {
			anon = kb * 1024
		} else {
			file = kb * 1024
		}
	}
	return
}

// dirBytes is the disk space the regular files under dir take (allocated
// blocks, as du counts them: badger's preallocated files count for what
// they hold), -1 on error.
func dirBytes(dir string) int64 {
	var sum int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil // removed while walking (a compaction)
			}
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					sum += st.Blocks * 512
				} else {
					sum += fi.Size()
				}
			}
		}
		return nil
	})
	if err != nil {
		return -1
	}
	return sum
}

// benchSoak runs soak mode against t.
func benchSoak(ctx context.Context, cfg *benchConfig, t *benchTarget, out io.Writer, res *benchResult) error {
	g := newSoakGen(cfg.series, cfg.soakTables, time.Now(), cfg.rate, cfg.seed)
	if err := t.prepare(ctx, g.tables); err != nil {
		return err
	}
	// The schedule starts once the series are generated and the tables
	// made (100,000 series take a fifth of a second to generate, a
	// table's creation an fsync): the first requests are not late by
	// the harness's own set-up.
	start := time.Now().Add(50 * time.Millisecond)
	g.t0 = start.UnixNano()
	lines := cfg.latLines
	every := time.Duration(float64(time.Second) * float64(lines) / cfg.rate)
	total := int64(cfg.soakDuration / every)
	fmt.Fprintf(out, "soak (%s): %d series over %d tables, %.0f lines/s offered in requests of %d lines (one every %s), at most %d in flight, for %s; windows of %s\n",
		cfg.target, len(g.prefixes), len(g.tables), cfg.rate, lines, every, cfg.maxInflight, cfg.soakDuration, cfg.window)

	var probe *diskProbe
	if cfg.storeDir != "" && cfg.diskProbe > 0 {
		// Beside the data directory: the same file system, not the
		// server's files.
		p, err := startDiskProbe(filepath.Dir(filepath.Clean(cfg.storeDir)), cfg.diskProbe)
		if err != nil {
			return fmt.Errorf("--disk-probe: %w", err)
		}
		probe = p
		defer probe.close()
	}

	runCtx, stopTails := context.WithCancel(ctx)
	defer stopTails()
	var tails []*soakTail
	if t.kind == benchIngestd {
		for _, name := range g.tables[:min(cfg.tails, len(g.tables))] {
			c := &soakTail{table: name, start: start, t0: g.t0}
			tails = append(tails, c)
			go c.run(runCtx, t.api, cfg.drainLimit)
		}
	}

	var (
		mu  sync.Mutex
		win soakWindow
		all soakHist
		// allRefusals holds every refusal's latency, allAnswers its time
		// from the send
		allRefusals, allAnswers soakHist
		sums                    soakWindow // totals
		codes                   = map[int]int64{}
		firstE                  error
		wg                      sync.WaitGroup
		slots                   = make(chan struct{}, cfg.maxInflight)
		late                    time.Duration
	)
	done := func(due, sent time.Time, n int, code int, err error) {
		d := time.Since(due)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil && code == http.StatusNoContent:
			win.reqs.add(d)
			win.acked += int64(n)
		case err == nil && (code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests):
			win.refusals.add(d)
			win.refusalAnswers.add(time.Since(sent))
			win.refused += int64(n)
			codes[code]++
		default:
			win.reqs.add(d)
			win.failed += int64(n)
			if err != nil && firstE == nil {
				firstE = err
			}
			if err == nil {
				codes[code]++
			}
		}
	}

	fmt.Fprintf(out, "%7s %9s %9s %8s %8s %8s %8s %10s %8s %6s %9s %9s %9s %8s %8s\n",
		"t_s", "offered", "acked/s", "p50_ms", "p99_ms", "max_ms", "refused", "ref_p99_ms", "failed", "cpu_s", "anon_mib", "file_mib", "store_mb", "lag_s", "disk_ms")
	prev := sampleServer(cfg.serverPID, cfg.storeDir)
	first := prev
	others, _ := parsePIDs(cfg.otherPIDs) // validated
	other0, otherErr := sumProcCPU(others)
	winStart := start
	windows, good := 0, 0
	// Windows that missed while the disk probe saw a sync slower than
	// soakP99, and windows in which it did.
	missedStalled, stalled := 0, 0
	var worstLag time.Duration
	var peakAnon, peakFile int64 = -1, -1
	// The requests due by at: offered load follows the schedule, whether
	// or not the pacer could send them (a slot free) on time.
	dueBy := func(at time.Time) int64 {
		if at.Before(start) {
			return 0
		}
		return min(total, int64(at.Sub(start)/every)+1)
	}
	report := func(now time.Time) {
		offered := int64(lines) * (dueBy(now) - dueBy(winStart))
		mu.Lock()
		w := win
		win = soakWindow{}
		mu.Unlock()
		all.merge(&w.reqs)
		allRefusals.merge(&w.refusals)
		allAnswers.merge(&w.refusalAnswers)
		sums.acked += w.acked
		sums.refused += w.refused
		sums.failed += w.failed
		secs := now.Sub(winStart).Seconds()
		winStart = now
		s := sampleServer(cfg.serverPID, cfg.storeDir)
		lag := time.Duration(0)
		for _, c := range tails {
			lag = max(lag, c.lag(now))
		}
		worstLag = max(worstLag, lag)
		peakAnon, peakFile = max(peakAnon, s.rssAnon), max(peakFile, s.rssFil)
		disk := probe.window()
		ok := float64(w.acked) >= soakAckShare*float64(offered) && w.reqs.pct(0.99) <= soakP99
		if ok {
			good++
		}
		if disk > soakP99 {
			stalled++
			if !ok {
				missedStalled++
			}
		}
		windows++
		fmt.Fprintf(out, "%7.0f %9.0f %9.0f %8.1f %8.1f %8.1f %8d %10.1f %8d %6.1f %9.0f %9.0f %9.0f %8.2f %8.1f\n",
			now.Sub(start).Seconds(), float64(offered)/secs, float64(w.acked)/secs,
			ms(w.reqs.pct(0.5)), ms(w.reqs.pct(0.99)), ms(w.reqs.pct(1)), w.refused, ms(w.refusals.pct(0.99)), w.failed,
			(s.cpu - prev.cpu).Seconds(), mib(s.rssAnon), mib(s.rssFil), float64(s.store)/1e6, lag.Seconds(), ms(disk))
		prev = s
	}

	// Windows end on the clock, whatever the pacer waits for; the last
	// one, reported once every answer is in, holds the rest of the run.
	stopReports, reportsDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(reportsDone)
		for k := 1; time.Duration(k)*cfg.window < cfg.soakDuration; k++ {
			if !sleepUntil(stopReports, start.Add(time.Duration(k)*cfg.window)) {
				return
			}
			report(time.Now())
		}
	}()
	defer func() {
		select {
		case <-stopReports:
		default:
			close(stopReports)
		}
		<-reportsDone
	}()
	buf := make([]byte, 0, lines*256)
	// A request still unsent a window after the run's end is not sent
	// (a server far behind would otherwise stretch the run by its
	// backlog): it counts as offered and not acknowledged.
	cutoff := start.Add(cfg.soakDuration + cfg.window)
	var unsent int64
	for i := int64(0); i < total; i++ {
		due := start.Add(time.Duration(i) * every)
		if w := time.Until(due); w > 0 && !sleepCtx(ctx, w) {
			return ctx.Err()
		}
		cut, cancelCut := context.WithDeadline(ctx, cutoff)
		select {
		case slots <- struct{}{}:
		case <-cut.Done():
		}
		cancelCut()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(cutoff) {
			unsent = (total - i) * int64(lines)
			break
		}
		late = max(late, time.Since(due))
		buf = g.appendLines(buf[:0], i*int64(lines), lines)
		body := bytes.Clone(buf)
		wg.Go(func() {
			defer func() { <-slots }()
			sent := time.Now()
			code, err := t.postOnce(ctx, body)
			done(due, sent, lines, code, err)
		})
	}
	wg.Wait()
	end := time.Now()
	close(stopReports)
	<-reportsDone
	report(end)

	// Let the consumers read what was acknowledged (each table's share
	// when they tail them all).
	consumed := func() (n int64) {
		for _, c := range tails {
			if e := c.err.Load(); e != nil {
				return -1
			}
			n += c.rows.Load()
		}
		return n
	}
	want := sums.acked
	if len(tails) < len(g.tables) {
		want = 0
	}
	for caught := time.Now(); len(tails) > 0 && consumed() >= 0 && consumed() < want && time.Since(caught) < 30*time.Second; {
		time.Sleep(20 * time.Millisecond)
	}
	stopTails()
	for _, c := range tails {
		if e := c.err.Load(); e != nil {
			return fmt.Errorf("tailing consumer of %s: %w", c.table, *e)
		}
	}

	dur := end.Sub(start)
	last := prev
	other1, err := sumProcCPU(others)
	otherErr = errors.Join(otherErr, err)
	sent := total * int64(lines)
	fmt.Fprintf(out, "soak summary: %d lines offered over %s (%.0f lines/s): %.0f lines/s acknowledged, %d refused, %d failed; latency p50 %s, p99 %s, max %s; pacer at most %s late\n",
		sent, dur.Round(time.Millisecond), float64(sent)/dur.Seconds(), float64(sums.acked)/dur.Seconds(), sums.refused, sums.failed,
		all.pct(0.5).Round(100*time.Microsecond), all.pct(0.99).Round(100*time.Microsecond), all.pct(1).Round(time.Millisecond), late.Round(time.Millisecond))
	if sums.refused > 0 {
		fmt.Fprintf(out, "soak refusals: %d lines refused (503 or 429), answered in p99 %s, max %s from the scheduled send time; the server answered them in p99 %s, max %s from the send\n",
			sums.refused, allRefusals.pct(0.99).Round(100*time.Microsecond), allRefusals.pct(1).Round(time.Millisecond),
			allAnswers.pct(0.99).Round(100*time.Microsecond), allAnswers.pct(1).Round(time.Millisecond))
	}
	if unsent > 0 {
		fmt.Fprintf(out, "soak: %d lines were due but never sent: the server was more than a window behind at the run's end\n", unsent)
	}
	fmt.Fprintf(out, "soak windows: %d of %d met %.0f %% acknowledged with p99 <= %s (sustained: %v)\n", good, windows, soakAckShare*100, soakP99, good == windows)
	if probe != nil {
		fmt.Fprintf(out, "disk probe: a sync slower than %s in %d of %d windows; %d of the %d windows missed were among them\n",
			soakP99, stalled, windows, missedStalled, windows-good)
		res.set("disk_stall_windows", stalled)
		res.set("missed_disk_stall_windows", missedStalled)
	}
	res.set("rate", cfg.rate)
	res.set("series", len(g.prefixes))
	res.set("secs", dur.Seconds())
	res.set("acked_per_s", float64(sums.acked)/dur.Seconds())
	res.set("refused", sums.refused)
	res.set("failed", sums.failed)
	res.set("unsent", unsent)
	res.set("p50_ms", all.pct(0.5))
	res.set("p99_ms", all.pct(0.99))
	res.set("max_ms", all.pct(1))
	res.set("refused_p99_ms", allRefusals.pct(0.99))
	res.set("refused_answer_p99_ms", allAnswers.pct(0.99))
	res.set("windows", windows)
	res.set("windows_ok", good)
	res.set("sustained", good == windows)
	res.set("pacer_late_ms", late)
	if cfg.serverPID > 0 {
		cpu := (last.cpu - first.cpu).Seconds()
		res.set("cpu_s", cpu)
		res.set("cpu_s_per_mline", cpu/(float64(sums.acked)/1e6))
		res.set("rss_anon_max_mib", mib(peakAnon))
		res.set("rss_file_max_mib", mib(peakFile))
	}
	if len(others) > 0 {
		if otherErr != nil {
			return fmt.Errorf("--other-pids CPU time: %w", otherErr)
		}
		cpu := (other1 - other0).Seconds()
		fmt.Fprintf(out, "other processes' CPU (%s): %.2f s (user+system) over the run: %.2f cores, %.2f s per million lines acknowledged\n",
			cfg.otherPIDs, cpu, cpu/dur.Seconds(), cpu/(float64(max(sums.acked, 1))/1e6))
		res.set("cpu_other_s", cpu)
		res.set("cpu_other_s_per_mline", cpu/(float64(max(sums.acked, 1))/1e6))
	}
	if last.store >= 0 {
		res.set("store_mb", float64(last.store)/1e6)
		res.set("store_bytes_per_line", float64(last.store)/float64(max(sums.acked, 1)))
	}
	if t.kind == benchIngestd {
		sc, err := t.serverCounts(ctx)
		if err != nil {
			return fmt.Errorf("read the server's metrics: %w", err)
		}
		fmt.Fprintf(out, "LSM keys written: %.0f for %.0f lines (%.4f per line; ingestd_store_keys_written_total)\n", sc.keys, sc.lines, sc.keys/max(sc.lines, 1))
		res.set("lsm_keys_per_line", sc.keys/max(sc.lines, 1))
		if sc.refusals > 0 {
			fmt.Fprintf(out, "server's own time for its %.0f write refusals (ingestd_http_request_duration_seconds, 503): %.2f %% within 64 ms, %.2f %% within 128 ms; refused for %s\n",
				sc.refusals, 100*sc.within64/sc.refusals, 100*sc.within128/sc.refusals, sc.causes)
			res.set("refusals_server_le128ms", sc.within128/sc.refusals)
		}
	}
	if len(tails) > 0 {
		res.set("tails", len(tails))
		res.set("lag_max_s", worstLag.Seconds())
		fmt.Fprintf(out, "tailing consumers: %d, lag at most %.2f s (the age of the newest row read, due time to arrival); %d rows read\n", len(tails), worstLag.Seconds(), consumed())
		if want > 0 && consumed() < want {
			return fmt.Errorf("the tailing consumers read %d rows, %d lines were acknowledged", consumed(), want)
		}
	}
	if len(codes) > 0 {
		keys := make([]int, 0, len(codes))
		for k := range codes {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(out, "answers %d: %d requests\n", k, codes[k])
		}
	}
	if firstE != nil {
		fmt.Fprintf(out, "first failure: %v\n", firstE)
	}
	return nil
}

func ms(d time.Duration) float64 { return d.Seconds() * 1000 }

// serverTotals is what the harness reads from an ingestd's /metrics
// after a run.
type serverTotals struct {
	keys  float64 // keys written to the LSM tree (ingestd_store_keys_written_total)
	lines float64 // lines taken, every transport (ingestd_ilp_lines_total)
	// refusals counts the writes answered 503, within64 and within128
	// those the server answered within 64 and 128 ms of their arrival
	// (ingestd_http_request_duration_seconds' buckets on POST /write and
	// /api/v2/write).
	refusals, within64, within128 float64
	// causes lists the refusals by reason: the overload counter's
	// causes, then the parse-slot queue's and in-flight bytes'.
	causes string
	// commits and commitSecs count the group commits and their time
	// (ingestd_feed_commit_duration_seconds), publishes and publishSecs
	// their publishing on --store=jetstream
	// (ingestd_jetstream_commit_publish_duration_seconds).
	commits, commitSecs, publishes, publishSecs float64
}

// The histograms reportCommits reads.
const (
	commitHistogram  = "ingestd_feed_commit_duration_seconds"
	publishHistogram = "ingestd_jetstream_commit_publish_duration_seconds"
)

// reportCommits prints the mean time of the server's group commits so
// far and, on --store=jetstream, of their publishing (the --url node's),
// and sets commits, commit_ms and publish_ms ("na" without any).
func (t *benchTarget) reportCommits(ctx context.Context, out io.Writer, res *benchResult) error {
	sc, err := t.serverCounts(ctx)
	if err != nil {
		return fmt.Errorf("read the server's metrics: %w", err)
	}
	res.set("commits", sc.commits)
	if sc.commits == 0 {
		res.set("commit_ms", "na")
		res.set("publish_ms", "na")
		return nil
	}
	fmt.Fprintf(out, "group commits: %.0f, %.2f ms each on average in the store's write (ingestd_feed_commit_duration_seconds)", sc.commits, 1000*sc.commitSecs/sc.commits)
	res.set("commit_ms", 1000*sc.commitSecs/sc.commits)
	if sc.publishes > 0 {
		fmt.Fprintf(out, ", of which %.2f ms publishing to JetStream (ingestd_jetstream_commit_publish_duration_seconds)", 1000*sc.publishSecs/sc.publishes)
		res.set("publish_ms", 1000*sc.publishSecs/sc.publishes)
	} else {
		res.set("publish_ms", "na")
	}
	fmt.Fprintln(out)
	return nil
}

// serverCounts reads an ingestd's serverTotals.
func (t *benchTarget) serverCounts(ctx context.Context) (serverTotals, error) {
	var st serverTotals
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.base+"/metrics", nil)
	if err != nil {
		return st, err
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return st, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	var causes []string
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 64<<20))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		write503 := strings.Contains(name, `code="503"`) && strings.Contains(name, `method="POST"`) &&
			(strings.Contains(name, `route="/write"`) || strings.Contains(name, `route="/api/v2/write"`))
		switch {
		case name == "ingestd_store_keys_written_total":
			st.keys = v
		case name == commitHistogram+"_count":
			st.commits = v
		case name == commitHistogram+"_sum":
			st.commitSecs = v
		case name == publishHistogram+"_count":
			st.publishes = v
		case name == publishHistogram+"_sum":
			st.publishSecs = v
		case strings.HasPrefix(name, "ingestd_ilp_lines_total{"):
			st.lines += v
		case strings.HasPrefix(name, "ingestd_http_request_duration_seconds_count{") && write503:
			st.refusals += v
		case strings.HasPrefix(name, "ingestd_http_request_duration_seconds_bucket{") && write503 && strings.Contains(name, `le="0.064"`):
			st.within64 += v
		case strings.HasPrefix(name, "ingestd_http_request_duration_seconds_bucket{") && write503 && strings.Contains(name, `le="0.128"`):
			st.within128 += v
		case strings.HasPrefix(name, "ingestd_http_write_overload_refused_total{"):
			_, cause, _ := strings.Cut(name, `cause="`)
			cause, _, _ = strings.Cut(cause, `"`)
			causes = append(causes, fmt.Sprintf("overload (%s) %.0f", cause, v))
		case name == "ingestd_http_write_queue_refused_total":
			causes = append(causes, fmt.Sprintf("parse-slot queue %.0f", v))
		case name == "ingestd_http_write_inflight_refused_total":
			causes = append(causes, fmt.Sprintf("in-flight bytes %.0f", v))
		}
	}
	st.causes = strings.Join(causes, ", ")
	return st, sc.Err()
}

// sleepUntil sleeps until t; false when stop was closed first.
func sleepUntil(stop <-chan struct{}, t time.Time) bool {
	tm := time.NewTimer(time.Until(t))
	defer tm.Stop()
	select {
	case <-stop:
		return false
	case <-tm.C:
		return true
	}
}

// sleepCtx sleeps d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// postOnce sends one uncompressed body to the write endpoint and returns
// the status (no retry).
func (t *benchTarget) postOnce(ctx context.Context, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.writeURL(), bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	resp, err := t.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
