// Package bench is `ingestd bench`, the load harness of
// docs/performance.md#the-harness: it sends TSBS-shaped data (generated, or an ILP file) to
// ingestd, InfluxDB or VictoriaMetrics over HTTP or TCP, verifies what the
// server stored, drains every ingestd table through package
// httpapi/client, and prints a report and one RESULT line. Decode mode
// runs ingestd's parser alone.
package bench

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/ingestd/ingestd/cmd/ingestd/cli"
	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/httpapi/client"
	"github.com/ingestd/ingestd/ilp"
)

// Bench modes.
const (
	benchModeHTTP      = "http"      // ingest the load over HTTP as fast as it goes
	benchModeTCP       = "tcp"       // ingest the load over TCP connections
	benchModeLatency   = "latency"   // fixed-rate HTTP writes, open loop
	benchModeDecode    = "decode"    // ingestd's parser alone, one goroutine
	benchModeOverwrite = "overwrite" // points written many times, then drained and copied
	benchModeSoak      = "soak"      // a long open-loop load generated while sent, reported per window
)

// Bench patterns: the order in which http mode sends the load.
const (
	benchPatternInOrder    = "inorder"    // each writer its own part of the load (--partition-series), once
	benchPatternConcurrent = "concurrent" // consecutive batches dealt to the writers in turn: writers share series
	benchPatternResend     = "resend"     // the whole load, then all of it again (the second pass is measured)
	benchPatternBackfill   = "backfill"   // the load's batches newest first
)

// benchConfig is `ingestd bench`'s configuration.
type benchConfig struct {
	mode        string
	pattern     string
	target      string
	url         string
	tcpAddr     string
	db          string
	file        string
	scale       int
	duration    time.Duration
	interval    time.Duration
	start       string
	seed        uint64
	batchLines  int
	concurrency int
	gzip        bool
	bySeries    bool
	connections int
	rate        float64
	latLines    int
	latDuration time.Duration
	drain       bool
	drainLimit  int
	serverPID   int
	writeURLs   string
	otherPIDs   string
	rssEvery    time.Duration
	verifyWait  time.Duration
	timeout     time.Duration
	passes      int
	writeData   string

	overwrites           int
	overwritePoints      int
	overwritesPerRequest int

	series       int
	soakTables   int
	soakDuration time.Duration
	window       time.Duration
	maxInflight  int
	tails        int
	storeDir     string
	diskProbe    time.Duration
}

func (c *benchConfig) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.mode, "mode", benchModeHTTP, "http (ingest as fast as it goes), tcp (ingestd: ILP over --connections TCP connections), latency (--latency-lines bodies at --rate, open loop), decode (ingestd's parser on one goroutine, no server), overwrite (ingestd: --overwrite-points points written --overwrites times, then drained and copied) or soak (--series series at --rate for --soak-duration, open loop, generated while sent, a report line per --window)")
	fs.IntVar(&c.series, "series", 1000, "soak mode: series (spread over --soak-tables measurements)")
	fs.IntVar(&c.soakTables, "soak-tables", 9, "soak mode: tables (the first 1 to 9 TSBS devops measurements)")
	fs.DurationVar(&c.soakDuration, "soak-duration", 10*time.Minute, "soak mode: how long to send")
	fs.DurationVar(&c.window, "window", 10*time.Second, "soak mode: reporting window")
	fs.IntVar(&c.maxInflight, "max-inflight", 64, "soak mode: most requests outstanding; a due request waits for a slot, and its wait counts in its latency")
	fs.IntVar(&c.tails, "tails", 0, "soak mode, ingestd: tailing consumers, one per table (long-polling lp pages of --drain-limit rows), their lag reported per window")
	fs.StringVar(&c.storeDir, "store-dir", "", "soak mode: the server's data directory, whose size is reported per window")
	fs.DurationVar(&c.diskProbe, "disk-probe", 20*time.Millisecond, "soak mode, with --store-dir: every this long, rewrite and fdatasync one 4 KiB block of a file beside the data directory, and report per window the slowest such sync (disk_ms): a stall of the machine's storage, which every durable write waits for, apart from the server's own (0: off)")
	fs.IntVar(&c.overwrites, "overwrites", 10, "overwrite mode: fragments written per point")
	fs.IntVar(&c.overwritePoints, "overwrite-points", 10000, "overwrite mode: points (over --scale series)")
	fs.IntVar(&c.overwritesPerRequest, "overwrites-per-request", 1, "overwrite mode: fragments of every point per request (one commit)")
	fs.StringVar(&c.pattern, "pattern", benchPatternInOrder, "http mode: inorder (each writer its part of the load, see --partition-series), concurrent (consecutive batches dealt to the writers in turn, so they share series, as TSBS's loader does), resend (the whole load, then all of it again: every line of the second pass, which is measured, overwrites a stored point) or backfill (the load's batches newest first, dealt to the writers in turn)")
	fs.StringVar(&c.target, "target", benchIngestd, "the server at --url: ingestd, influxdb or victoriametrics")
	fs.StringVar(&c.url, "url", "http://127.0.0.1:8086", "the server's HTTP base URL")
	fs.StringVar(&c.tcpAddr, "tcp-addr", "127.0.0.1:9009", "ingestd's ILP-over-TCP address (--mode tcp)")
	fs.StringVar(&c.db, "db", "bench", "InfluxDB database to create and write")
	fs.StringVar(&c.file, "file", "", "ILP file to send (.gz is decompressed); empty: generate TSBS-devops-shaped data (--scale, --duration, --interval)")
	fs.IntVar(&c.scale, "scale", 10, "generated data: hosts (each sends 9 measurements)")
	fs.DurationVar(&c.duration, "duration", 6*time.Hour, "generated data: time span (latency mode generates what it sends instead)")
	fs.DurationVar(&c.interval, "interval", 10*time.Second, "generated data: time between two lines of a series")
	fs.StringVar(&c.start, "start", "2026-01-01T00:00:00Z", "generated data: first timestamp (RFC 3339)")
	fs.Uint64Var(&c.seed, "seed", 42, "generated data: random seed")
	fs.IntVar(&c.batchLines, "batch-lines", 5000, "lines per HTTP request (http mode)")
	fs.IntVar(&c.concurrency, "concurrency", 4, "concurrent HTTP writers (http mode)")
	fs.BoolVar(&c.gzip, "gzip", true, "send HTTP bodies with Content-Encoding: gzip (compressed before the clock starts)")
	fs.BoolVar(&c.bySeries, "partition-series", true, "give each writer (HTTP writer, TCP connection) its own series, so each series arrives in time order; false deals consecutive batches to the writers in turn, as TSBS's loader does")
	fs.IntVar(&c.connections, "connections", 1, "TCP connections (tcp mode)")
	fs.Float64Var(&c.rate, "rate", 0, "latency mode: offered load in lines per second (required)")
	fs.IntVar(&c.latLines, "latency-lines", 1000, "latency mode: lines per request")
	fs.DurationVar(&c.latDuration, "latency-duration", 10*time.Second, "latency mode: how long to send")
	fs.BoolVar(&c.drain, "drain", true, "ingestd, http and tcp modes: drain every table after the ingest and time it")
	fs.IntVar(&c.drainLimit, "drain-limit", 10000, "rows per drain page (JSON)")
	fs.IntVar(&c.serverPID, "server-pid", 0, "the server's process id, for its resident memory (/proc/PID/status VmRSS sampled, VmHWM) and the CPU time it spent on the measured ingest (/proc/PID/stat utime+stime); 0: not reported")
	fs.StringVar(&c.writeURLs, "write-urls", "", "ingestd, http and soak modes: further ingestd nodes' base URLs (comma-separated), to which the writers send their requests in turn with --url's (several nodes on one --store=jetstream cluster); the drain and the checks use --url")
	fs.StringVar(&c.otherPIDs, "other-pids", "", "further process ids (comma-separated: the NATS servers and the other ingestd nodes of a --store=jetstream run) whose CPU time over the measured ingest (soak: the whole run) is reported next to the server's, as cpu_other_s")
	fs.DurationVar(&c.rssEvery, "rss-interval", 100*time.Millisecond, "how often to sample the server's VmRSS")
	fs.DurationVar(&c.verifyWait, "verify-wait", 60*time.Second, "how long the counts may take to appear (VictoriaMetrics makes samples searchable about a second after acknowledging them)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "give up after this long")
	fs.IntVar(&c.passes, "passes", 3, "decode mode: passes over the data (the median is reported)")
	fs.StringVar(&c.writeData, "write-data", "", "write the load (--file, or the data generated from --scale, --duration, --interval, --start, --seed) to this new file as line protocol (gzip when it ends in .gz) and exit without contacting a server")
}

func (c *benchConfig) validate() error {
	switch c.mode {
	case benchModeHTTP, benchModeTCP, benchModeLatency, benchModeDecode:
	case benchModeOverwrite:
		if c.target != benchIngestd {
			return errors.New("--mode overwrite needs --target ingestd (it drains the table)")
		}
		if c.overwrites < 1 || c.overwritePoints < 1 || c.overwritesPerRequest < 1 {
			return errors.New("--overwrites, --overwrite-points and --overwrites-per-request must be at least 1")
		}
	case benchModeSoak:
		switch {
		case c.rate <= 0:
			return errors.New("--mode soak needs --rate (lines per second)")
		case c.series < 1 || c.soakTables < 1 || c.soakTables > len(benchDevopsMeasurements):
			return fmt.Errorf("--series must be at least 1 and --soak-tables 1 to %d", len(benchDevopsMeasurements))
		case c.window <= 0 || c.soakDuration < c.window || c.maxInflight < 1 || c.latLines < 1:
			return errors.New("--window, --max-inflight and --latency-lines must be positive and --soak-duration at least --window")
		case c.timeout < c.soakDuration+time.Minute:
			return errors.New("--timeout must exceed --soak-duration by a minute at least")
		case c.tails > 0 && c.target != benchIngestd:
			return errors.New("--tails needs --target ingestd")
		}
	default:
		return fmt.Errorf("--mode must be http, tcp, latency, decode, overwrite or soak, got %q", c.mode)
	}
	switch c.pattern {
	case benchPatternInOrder:
	case benchPatternConcurrent, benchPatternResend, benchPatternBackfill:
		if c.mode != benchModeHTTP {
			return fmt.Errorf("--pattern %s needs --mode http", c.pattern)
		}
	default:
		return fmt.Errorf("--pattern must be inorder, concurrent, resend or backfill, got %q", c.pattern)
	}
	switch c.target {
	case benchIngestd, benchInfluxDB, benchVM:
	default:
		return fmt.Errorf("--target must be ingestd, influxdb or victoriametrics, got %q", c.target)
	}
	if c.mode == benchModeTCP && c.target == benchInfluxDB {
		return errors.New("--mode tcp: InfluxDB 1.x has no line-protocol TCP listener")
	}
	if c.mode == benchModeLatency && c.rate <= 0 {
		return errors.New("--mode latency needs --rate (lines per second)")
	}
	if c.writeURLs != "" && (c.target != benchIngestd || c.mode != benchModeHTTP && c.mode != benchModeSoak) {
		return errors.New("--write-urls needs --target ingestd and --mode http or soak")
	}
	if err := cli.ValidateURL(c.url); err != nil {
		return fmt.Errorf("--url: %w", err)
	}
	if c.writeURLs != "" {
		for u := range strings.SplitSeq(c.writeURLs, ",") {
			if u = strings.TrimSpace(u); u == "" {
				continue
			}
			if err := cli.ValidateURL(u); err != nil {
				return fmt.Errorf("--write-urls: %w", err)
			}
		}
	}
	if err := cli.ValidateAddr(c.tcpAddr); err != nil {
		return fmt.Errorf("--tcp-addr: %w", err)
	}
	if _, err := parsePIDs(c.otherPIDs); err != nil {
		return fmt.Errorf("--other-pids: %w", err)
	}
	if c.batchLines < 1 || c.concurrency < 1 || c.connections < 1 || c.latLines < 1 || c.drainLimit < 1 || c.passes < 1 {
		return errors.New("--batch-lines, --concurrency, --connections, --latency-lines, --drain-limit and --passes must be positive")
	}
	return nil
}

// Run is `ingestd bench`: the load harness (see docs/performance.md#the-harness).
// It prints a readable report and one "RESULT key=value …" line to stdout.
// Exit codes: 0 when the load was stored and verified, 1 otherwise, 2 on
// bad flags.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := benchConfig{}
	fs := flag.NewFlagSet("ingestd bench", flag.ContinueOnError)
	cfg.registerFlags(fs)
	cmd := &cli.Command{Name: "ingestd bench", Usage: `Usage:
  ingestd bench [flags]
Load harness: sends TSBS data over HTTP or TCP, waits, drains, reports (docs/performance.md).
`, Placeholders: map[string]string{"write-data": "FILE", "start": "TIME", "other-pids": "PIDS"}}
	if code, done := cmd.Parse(fs, args, stdout, stderr); done {
		return code
	}
	if err := cfg.validate(); err != nil {
		return cmd.UsageError(stderr, err.Error())
	}
	if cfg.writeData != "" {
		if err := writeBenchData(&cfg, stdout); err != nil {
			fmt.Fprintln(stderr, "ingestd bench:", err)
			return 1
		}
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	res, err := runBenchMode(ctx, &cfg, stdout)
	fmt.Fprintln(stdout, res.line())
	if err != nil {
		fmt.Fprintln(stderr, "ingestd bench:", err)
		return cli.ExitFailure
	}
	return cli.ExitOK
}

// benchResult is the RESULT line: ordered key=value pairs.
type benchResult struct{ kv []string }

func (r *benchResult) set(k string, v any) {
	var s string
	switch v := v.(type) {
	case float64:
		s = strconv.FormatFloat(v, 'f', 3, 64)
	case time.Duration:
		s = strconv.FormatFloat(v.Seconds()*1000, 'f', 3, 64) // milliseconds
	default:
		s = fmt.Sprint(v)
	}
	r.kv = append(r.kv, k+"="+s)
}

func (r *benchResult) line() string { return "RESULT " + strings.Join(r.kv, " ") }

func runBenchMode(ctx context.Context, cfg *benchConfig, out io.Writer) (res benchResult, err error) {
	res.set("target", cfg.target)
	res.set("mode", cfg.mode)
	res.set("pattern", cfg.pattern)
	defer func() {
		if err != nil {
			res.set("verified", "FAILED")
		}
	}()
	if cfg.mode == benchModeOverwrite {
		t, err := newBenchTarget(ctx, cfg)
		if err != nil {
			return res, err
		}
		return res, benchOverwrite(ctx, cfg, t, out, &res)
	}
	if cfg.mode == benchModeSoak {
		t, err := newBenchTarget(ctx, cfg)
		if err != nil {
			return res, err
		}
		return res, benchSoak(ctx, cfg, t, out, &res)
	}
	d, err := benchLoad(cfg)
	if err != nil {
		return res, err
	}
	fmt.Fprintf(out, "data: %s: %d lines, %.2f MB, %d tables\n", d.name, d.lines(), float64(len(d.text))/1e6, len(d.stats))
	res.set("lines", d.lines())
	res.set("mb", float64(len(d.text))/1e6)
	if cfg.mode == benchModeDecode {
		return res, benchDecode(cfg, d, out, &res)
	}

	t, err := newBenchTarget(ctx, cfg)
	if err != nil {
		return res, err
	}
	if err := t.prepare(ctx, d.tables()); err != nil {
		return res, err
	}
	rss := startRSS(cfg.serverPID, cfg.rssEvery)
	defer func() {
		peak, hwm := rss.finish()
		res.set("rss_max_mib", mib(peak))
		res.set("rss_hwm_mib", mib(hwm))
		fmt.Fprintf(out, "server memory: VmRSS at most %.1f MiB (sampled every %s), VmHWM %.1f MiB\n", mib(peak), cfg.rssEvery, mib(hwm))
	}()

	switch cfg.mode {
	case benchModeHTTP:
		err = benchHTTP(ctx, cfg, t, d, out, &res)
	case benchModeTCP:
		err = benchTCP(ctx, cfg, t, d, out, &res)
	case benchModeLatency:
		err = benchLatency(ctx, cfg, t, d, out, &res)
	}
	if err != nil {
		return res, err
	}
	if t.kind == benchIngestd {
		if err := t.reportCommits(ctx, out, &res); err != nil {
			return res, err
		}
	}
	sends := 1 // how many times every line was sent
	if cfg.pattern == benchPatternResend {
		sends = 2
	}
	if err := t.verify(ctx, d, sends, cfg.verifyWait); err != nil {
		return res, fmt.Errorf("verify: %w", err)
	}
	what := "every table holds exactly the lines sent to it"
	switch {
	case t.kind == benchVM:
		what = "every metric prefix holds exactly the samples sent to it"
	case t.kind == benchIngestd && sends > 1:
		what = fmt.Sprintf("every table holds exactly %d fragments per line sent to it", sends)
	}
	fmt.Fprintf(out, "verified: %s\n", what)
	res.set("verified", "ok")

	if t.kind == benchIngestd && cfg.drain && cfg.mode != benchModeLatency {
		dr, err := t.drainAll(ctx, d, sends, cfg.drainLimit)
		if err != nil {
			return res, err
		}
		rate := float64(dr.rows) / dr.dur.Seconds()
		fmt.Fprintf(out, "drain: %d rows in %d JSON pages of up to %d (%.1f MB) in %s: %.0f rows/s, %.1f MB/s\n",
			dr.rows, dr.pages, cfg.drainLimit, float64(dr.bytes)/1e6, dr.dur.Round(time.Millisecond), rate, float64(dr.bytes)/1e6/dr.dur.Seconds())
		res.set("drain_rows", dr.rows)
		res.set("drain_secs", dr.dur.Seconds())
		res.set("drain_rows_per_s", rate)
	} else {
		res.set("drain_rows_per_s", "na")
	}
	return res, nil
}

// newBenchTarget connects to the server at --url (and --write-urls) and
// waits until it answers.
func newBenchTarget(ctx context.Context, cfg *benchConfig) (*benchTarget, error) {
	// At most one connection per request the mode keeps in flight and
	// per tailing consumer, and a few for the checks: a server that
	// closes connections it refuses (503, Connection: close) would
	// otherwise see the client open new ones faster than it has let the
	// old ones go, and count them against --http-max-conns-per-client.
	conns := max(cfg.concurrency, cfg.maxInflight) + cfg.tails + 8
	hc := &http.Client{
		Timeout: 2 * time.Minute,
		Transport: &http.Transport{
			MaxConnsPerHost: conns, MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute,
			DisableCompression: true,
		},
	}
	api, err := client.New(cfg.url, client.WithHTTPClient(hc))
	if err != nil {
		return nil, fmt.Errorf("--url: %w", err)
	}
	t := &benchTarget{kind: cfg.target, base: strings.TrimSuffix(cfg.url, "/"), db: cfg.db, client: hc, api: api}
	t.writeBases = []string{t.base}
	for u := range strings.SplitSeq(cfg.writeURLs, ",") {
		if u = strings.TrimSpace(u); u != "" {
			t.writeBases = append(t.writeBases, strings.TrimSuffix(u, "/"))
		}
	}
	if err := t.waitReady(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	return t, nil
}

func mib(b int64) float64 {
	if b < 0 {
		return -1
	}
	return float64(b) / (1 << 20)
}

// benchLoad reads --file or generates the data. Latency mode generates at
// least rate × duration lines.
func benchLoad(cfg *benchConfig) (*benchData, error) {
	// Latency mode sends exactly this many lines.
	need := 0
	if cfg.mode == benchModeLatency {
		need = max(1, int(cfg.rate*cfg.latDuration.Seconds())/cfg.latLines) * cfg.latLines
	}
	if cfg.file != "" {
		d, err := loadBenchFile(cfg.file)
		if err != nil || need == 0 {
			return d, err
		}
		if need > d.lines() {
			return nil, fmt.Errorf("latency mode needs %d lines, %s has %d", need, cfg.file, d.lines())
		}
		return indexBenchData(d.name, d.text[:d.offs[need]])
	}
	start, err := time.Parse(time.RFC3339, cfg.start)
	if err != nil {
		return nil, fmt.Errorf("--start: %w", err)
	}
	dur := cfg.duration
	if need > 0 {
		// The time span the run needs (--duration is ignored).
		perStep := cfg.scale * len(benchDevopsMeasurements)
		dur = time.Duration((need+perStep-1)/perStep) * cfg.interval
	}
	return generateDevops(cfg.scale, start, dur, cfg.interval, cfg.seed, need)
}

// benchBody is one prepared request.
type benchBody struct {
	wire  []byte
	lines int
	raw   int
}

func prepareBodies(batches [][]byte, gz bool) ([]benchBody, error) {
	out := make([]benchBody, len(batches))
	var zw *gzip.Writer
	for i, b := range batches {
		out[i] = benchBody{wire: b, lines: bytes.Count(b, []byte{'\n'}), raw: len(b)}
		if !gz {
			continue
		}
		var buf bytes.Buffer
		if zw == nil {
			zw = gzip.NewWriter(&buf)
		} else {
			zw.Reset(&buf)
		}
		if _, err := zw.Write(b); err != nil {
			return nil, err
		}
		if err := zw.Close(); err != nil {
			return nil, err
		}
		out[i].wire = buf.Bytes()
	}
	return out, nil
}

// post sends one body and returns once the server answered. 503 and 429
// (back-pressure: nothing was written) are retried after Retry-After (at
// most 1 s); any other status but 204 is an error.
func (t *benchTarget) post(ctx context.Context, b benchBody, gz bool, retries *atomic.Int64) error {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.writeURL(), bytes.NewReader(b.wire))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "text/plain; charset=utf-8")
		if gz {
			req.Header.Set("Content-Encoding", "gzip")
		}
		resp, err := t.client.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusNoContent:
			return nil
		case http.StatusServiceUnavailable, http.StatusTooManyRequests:
			retries.Add(1)
			wait := time.Second
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s == 0 {
				wait = 100 * time.Millisecond
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		default:
			return fmt.Errorf("write: %d %s", resp.StatusCode, clipBytes(body))
		}
	}
}

// latencies summarises request latencies.
type latencies []time.Duration

func (l latencies) pct(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	i := int(float64(len(l))*p+0.999999) - 1 // nearest rank
	return l[min(max(i, 0), len(l)-1)]
}

func (l latencies) report(res *benchResult, out io.Writer, what string) {
	slices.Sort(l)
	fmt.Fprintf(out, "%s latency over %d requests: p50 %s, p90 %s, p99 %s, p99.9 %s, max %s\n", what, len(l),
		l.pct(0.5).Round(10*time.Microsecond), l.pct(0.9).Round(10*time.Microsecond), l.pct(0.99).Round(10*time.Microsecond),
		l.pct(0.999).Round(10*time.Microsecond), l.pct(1).Round(10*time.Microsecond))
	res.set("requests", len(l))
	res.set("p50_ms", l.pct(0.5))
	res.set("p90_ms", l.pct(0.9))
	res.set("p99_ms", l.pct(0.99))
	res.set("p999_ms", l.pct(0.999))
	res.set("max_ms", l.pct(1))
}

// benchHTTP sends the load over --concurrency writers in the order
// --pattern gives, in batches of --batch-lines, each writer waiting for its
// answer before the next (as Telegraf's outputs do). The resend pattern
// sends it all twice and measures the second pass. With --server-pid the
// server's CPU time over the measured pass is reported.
func benchHTTP(ctx context.Context, cfg *benchConfig, t *benchTarget, d *benchData, out io.Writer, res *benchResult) error {
	batches := d.writerBatches(cfg.pattern, cfg.concurrency, cfg.bySeries, cfg.batchLines)
	bodies := make([][]benchBody, len(batches))
	wire := 0
	for i, bs := range batches {
		var err error
		if bodies[i], err = prepareBodies(bs, cfg.gzip); err != nil {
			return err
		}
		for _, b := range bodies[i] {
			wire += len(b.wire)
		}
	}
	what := fmt.Sprintf("%s, %d writers, %d-line bodies, gzip %t", cfg.target, cfg.concurrency, cfg.batchLines, cfg.gzip)
	switch cfg.pattern {
	case benchPatternInOrder:
		what = fmt.Sprintf("%s, partition by series %t", what, cfg.bySeries)
	case benchPatternConcurrent:
		what += ", batches dealt to the writers in turn"
	case benchPatternResend:
		what = fmt.Sprintf("%s, partition by series %t", what, cfg.bySeries)
		first, err := sendBodies(ctx, t, bodies, cfg.gzip)
		if err != nil {
			return fmt.Errorf("first pass: %w", err)
		}
		fmt.Fprintf(out, "http ingest, first pass (%s): %d lines in %s: %.0f lines/s\n",
			what, d.lines(), first.dur.Round(time.Millisecond), float64(d.lines())/first.dur.Seconds())
		res.set("first_pass_lines_per_s", float64(d.lines())/first.dur.Seconds())
		what += ", second pass: every line overwrites a stored point"
	case benchPatternBackfill:
		what += ", batches newest first, dealt to the writers in turn"
	}
	others, _ := parsePIDs(cfg.otherPIDs) // validated
	cpu0, cpuErr := readProcCPU(cfg.serverPID)
	other0, otherErr := sumProcCPU(others)
	sent, err := sendBodies(ctx, t, bodies, cfg.gzip)
	if err != nil {
		return err
	}
	cpu1, err := readProcCPU(cfg.serverPID)
	cpuErr = errors.Join(cpuErr, err)
	other1, err := sumProcCPU(others)
	otherErr = errors.Join(otherErr, err)
	dur := sent.dur
	rate := float64(d.lines()) / dur.Seconds()
	fmt.Fprintf(out, "http ingest (pattern %s: %s): %d lines in %s: %.0f lines/s, %.1f MB/s (%.1f MB/s on the wire), %d retried\n",
		cfg.pattern, what, d.lines(), dur.Round(time.Millisecond), rate,
		float64(len(d.text))/1e6/dur.Seconds(), float64(wire)/1e6/dur.Seconds(), sent.retries)
	res.set("secs", dur.Seconds())
	res.set("lines_per_s", rate)
	res.set("mb_per_s", float64(len(d.text))/1e6/dur.Seconds())
	res.set("retries", sent.retries)
	switch {
	case cfg.serverPID <= 0:
		res.set("cpu_s", "na")
	case cpuErr != nil:
		return fmt.Errorf("server CPU time: %w", cpuErr)
	default:
		cpu := cpu1 - cpu0
		fmt.Fprintf(out, "server CPU: %.2f s (user+system) over the %s measured: %.2f cores, %.1f µs per line\n",
			cpu.Seconds(), dur.Round(time.Millisecond), cpu.Seconds()/dur.Seconds(), float64(cpu.Microseconds())/float64(d.lines()))
		res.set("cpu_s", cpu.Seconds())
	}
	if len(others) > 0 {
		if otherErr != nil {
			return fmt.Errorf("--other-pids CPU time: %w", otherErr)
		}
		cpu := other1 - other0
		fmt.Fprintf(out, "other processes' CPU (%s): %.2f s (user+system) over the ingest: %.2f cores\n", cfg.otherPIDs, cpu.Seconds(), cpu.Seconds()/dur.Seconds())
		res.set("cpu_other_s", cpu.Seconds())
	}
	sent.lat.report(res, out, "write (204)")
	return nil
}

// sendResult is what one pass of sendBodies took.
type sendResult struct {
	dur     time.Duration
	lat     latencies
	retries int64
}

// sendBodies runs one writer per element of bodies, each sending its
// bodies in order and waiting for every answer before the next, and
// returns once all were answered (or at the first error, which cancels
// the others).
func sendBodies(ctx context.Context, t *benchTarget, bodies [][]benchBody, gz bool) (sendResult, error) {
	var (
		mu      sync.Mutex // guards lat
		lat     latencies
		retries atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for _, bs := range bodies {
		wg.Go(func() {
			mine := make(latencies, 0, len(bs))
			for _, b := range bs {
				t0 := time.Now()
				if err := t.post(ctx, b, gz, &retries); err != nil {
					errOnce.Do(func() { first = err; cancel() })
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return sendResult{dur: time.Since(start), lat: lat, retries: retries.Load()}, first
}

// benchLatency offers --rate lines/s in bodies of --latency-lines for
// --latency-duration, open loop: request i is due at start + i/rate
// whether or not earlier ones were answered, and its latency runs from when
// it was due (so a stalled server is not hidden by a waiting client).
func benchLatency(ctx context.Context, cfg *benchConfig, t *benchTarget, d *benchData, out io.Writer, res *benchResult) error {
	bodies, err := prepareBodies(benchStream{text: d.text, lines: d.lines()}.batches(cfg.latLines), cfg.gzip)
	if err != nil {
		return err
	}
	every := time.Duration(float64(time.Second) * float64(cfg.latLines) / cfg.rate)
	var (
		lat     = make(latencies, len(bodies))
		retries atomic.Int64
		wg      sync.WaitGroup
		failed  atomic.Int64
		errOnce sync.Once
		first   error
		late    time.Duration // worst lateness of the pacer itself
	)
	start := time.Now().Add(10 * time.Millisecond)
	for i, b := range bodies {
		due := start.Add(time.Duration(i) * every)
		if w := time.Until(due); w > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(w):
			}
		}
		late = max(late, time.Since(due))
		wg.Go(func() {
			if err := t.post(ctx, b, cfg.gzip, &retries); err != nil {
				failed.Add(1)
				errOnce.Do(func() { first = err })
			}
			lat[i] = time.Since(due)
		})
	}
	wg.Wait()
	dur := time.Since(start)
	fmt.Fprintf(out, "latency run (%s): %d requests of %d lines offered at %.0f lines/s (one every %s) for %s; achieved %.0f lines/s; pacer at most %s late; %d retried; %d failed\n",
		cfg.target, len(bodies), cfg.latLines, cfg.rate, every, dur.Round(time.Millisecond), float64(d.lines())/dur.Seconds(), late.Round(time.Microsecond), retries.Load(), failed.Load())
	res.set("rate", cfg.rate)
	res.set("secs", dur.Seconds())
	res.set("retries", retries.Load())
	res.set("failed", failed.Load())
	// The pacer's own lateness: how long this process went without CPU
	// when a request was due; latencies below it say little.
	res.set("pacer_late_ms", late)
	// A failed request counts with the time its error took.
	lat.report(res, out, "write (204, or the error)")
	if first != nil {
		return fmt.Errorf("%d of %d requests failed, first: %w", failed.Load(), len(bodies), first)
	}
	return nil
}

// benchTCP streams the load over --connections TCP connections (each its
// own series), closes them, and waits until every table's watermark covers
// what was sent: the rate counts from the first byte to that moment.
func benchTCP(ctx context.Context, cfg *benchConfig, t *benchTarget, d *benchData, out io.Writer, res *benchResult) error {
	streams := d.partition(cfg.connections, cfg.bySeries, 10_000)
	conns := make([]net.Conn, len(streams))
	var dialer net.Dialer
	for i := range conns {
		c, err := dialer.DialContext(ctx, "tcp", cfg.tcpAddr)
		if err != nil {
			return fmt.Errorf("dial --tcp-addr: %w", err)
		}
		defer func() { _ = c.Close() }()
		conns[i] = c
	}
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	start := time.Now()
	for i, c := range conns {
		wg.Go(func() {
			// A plain reader, so the bytes go out in 256 KiB writes.
			_, err := io.CopyBuffer(c, struct{ io.Reader }{bytes.NewReader(streams[i].text)}, make([]byte, 256<<10))
			if err == nil {
				err = c.(*net.TCPConn).CloseWrite()
			}
			if err != nil {
				errOnce.Do(func() { first = err })
			}
		})
	}
	wg.Wait()
	sentIn := time.Since(start)
	if first != nil {
		return fmt.Errorf("send: %w", first)
	}
	switch t.kind {
	case benchIngestd:
		if err := t.waitCovered(ctx, d, cfg.verifyWait); err != nil {
			return err
		}
	case benchVM:
		if err := t.verify(ctx, d, 1, cfg.verifyWait); err != nil {
			return err
		}
	}
	dur := time.Since(start)
	rate := float64(d.lines()) / dur.Seconds()
	fmt.Fprintf(out, "tcp ingest (%s, %d connections): %d lines sent in %s, covered by every watermark after %s: %.0f lines/s, %.1f MB/s\n",
		cfg.target, cfg.connections, d.lines(), sentIn.Round(time.Millisecond), dur.Round(time.Millisecond), rate, float64(len(d.text))/1e6/dur.Seconds())
	res.set("secs", dur.Seconds())
	res.set("lines_per_s", rate)
	res.set("mb_per_s", float64(len(d.text))/1e6/dur.Seconds())
	return nil
}

// benchDecode parses the load with ingestd's parser on this goroutine, in
// batches of 10,000 lines as a TCP connection hands them on, and reports
// the median of --passes passes: the single-core full-decode baseline.
func benchDecode(cfg *benchConfig, d *benchData, out io.Writer, res *benchResult) error {
	const batch = 10_000
	var durs []time.Duration
	for range cfg.passes {
		p := ilp.NewParser(ilp.DefaultLimits())
		now := time.Now().UnixNano()
		points := 0
		start := time.Now()
		for i := 0; i < d.lines(); i += batch {
			j := min(i+batch, d.lines())
			b := &feed.Batch{}
			perrs, _ := p.ParseAll(b, d.text[d.offs[i]:d.offs[j]], i+1, ilp.Nanosecond, now)
			if len(perrs) > 0 {
				return perrs[0]
			}
			points += len(b.Points)
		}
		durs = append(durs, time.Since(start))
		if points != d.lines() {
			return fmt.Errorf("decoded %d points from %d lines", points, d.lines())
		}
	}
	sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
	med := durs[len(durs)/2]
	rate := float64(d.lines()) / med.Seconds()
	fmt.Fprintf(out, "decode (ingestd parser, one goroutine, median of %d passes): %d lines in %s: %.0f lines/s, %.1f MB/s\n",
		cfg.passes, d.lines(), med.Round(time.Millisecond), rate, float64(len(d.text))/1e6/med.Seconds())
	res.set("secs", med.Seconds())
	res.set("lines_per_s", rate)
	res.set("mb_per_s", float64(len(d.text))/1e6/med.Seconds())
	res.set("verified", "ok")
	return nil
}
