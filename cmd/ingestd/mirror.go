package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// mirrorConfig configures `ingestd mirror`.
type mirrorConfig struct {
	source      string        // base URL of the source ingestd
	table       string        // table to mirror
	target      string        // full write URL of the target (…/write?db=… or …/api/v2/write?bucket=…)
	targetToken string        // sent as "Authorization: Token …" when set
	sourceToken string        // sent to the source as "Authorization: Token …" when set
	cursorFile  string        // where (epoch, next) is kept
	consumer    string        // consumer name reported to the source
	limit       int           // rows per page
	wait        time.Duration // long-poll wait per drain
	maxBackoff  time.Duration // longest pause between retries
	metricsAddr string        // serve /metrics here when set
	logLevel    string
	logFormat   string
}

func (c *mirrorConfig) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.source, "source", c.source, "base URL of the source ingestd, e.g. http://localhost:8086")
	fs.StringVar(&c.table, "table", c.table, "table to mirror")
	fs.StringVar(&c.target, "target", c.target, "write URL of any InfluxDB-compatible target, e.g. http://replica:8086/write?db=mirror or …/api/v2/write?org=o&bucket=b")
	fs.StringVar(&c.targetToken, "target-token", c.targetToken, "token for the target: InfluxDB 2.x's, or an ingestd one with write and admin on the table (sent as Authorization: Token …; never logged)")
	fs.StringVar(&c.sourceToken, "source-token", c.sourceToken, "token for a source ingestd with --auth-file, with the drain scope on the table (sent as Authorization: Token …; never logged)")
	fs.StringVar(&c.cursorFile, "cursor-file", c.cursorFile, "file holding the mirror's (epoch, next); written only after the target acknowledged")
	fs.StringVar(&c.consumer, "consumer", c.consumer, "consumer name reported to the source (lag metrics); default mirror-<table>")
	fs.IntVar(&c.limit, "limit", c.limit, "rows per drained or copied page")
	fs.DurationVar(&c.wait, "wait", c.wait, "long-poll wait of each drain (at most 60s)")
	fs.DurationVar(&c.maxBackoff, "max-backoff", c.maxBackoff, "longest pause between retries after an error")
	fs.StringVar(&c.metricsAddr, "metrics-addr", c.metricsAddr, "serve the mirror's Prometheus metrics at this address (empty: off)")
	fs.StringVar(&c.logLevel, "log-level", c.logLevel, "log level: debug, info, warn, error")
	fs.StringVar(&c.logFormat, "log-format", c.logFormat, "log format: text or json")
}

func (c *mirrorConfig) validate() error {
	var errs []error
	for _, f := range []struct{ name, val string }{{"--source", c.source}, {"--table", c.table}, {"--target", c.target}, {"--cursor-file", c.cursorFile}} {
		if f.val == "" {
			errs = append(errs, fmt.Errorf("%s is required", f.name))
		}
	}
	for _, u := range []struct{ name, val string }{{"--source", c.source}, {"--target", c.target}} {
		if p, err := url.Parse(u.val); u.val != "" && (err != nil || p.Scheme == "" || p.Host == "") {
			errs = append(errs, fmt.Errorf("%s must be an http(s) URL, got %q", u.name, u.val))
		}
	}
	if c.limit < 1 {
		errs = append(errs, errors.New("--limit must be positive"))
	}
	if c.wait < 0 || c.wait > 60*time.Second {
		errs = append(errs, errors.New("--wait must be within 0s..60s"))
	}
	if c.maxBackoff < 10*time.Millisecond {
		errs = append(errs, errors.New("--max-backoff must be at least 10ms"))
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.logLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level: %w", err))
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		errs = append(errs, fmt.Errorf("--log-format must be text or json, got %q", c.logFormat))
	}
	return errors.Join(errs...)
}

// runMirror is `ingestd mirror`: it keeps a replica of one table in any
// InfluxDB-compatible server.
func runMirror(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := mirrorConfig{limit: 5000, wait: 10 * time.Second, maxBackoff: 30 * time.Second, logLevel: "info", logFormat: "text"}
	fs := flag.NewFlagSet("ingestd mirror", flag.ContinueOnError)
	cfg.registerFlags(fs)
	cmd := &command{
		name: "ingestd mirror", envPrefix: "INGESTD_MIRROR",
		usage: `Usage:
  ingestd mirror --source URL --table T --target URL --cursor-file F [flags]
Keeps a replica of one table in any InfluxDB-compatible server (README, "ingestd mirror").
`,
		required: map[string]bool{"source": true, "table": true, "target": true, "cursor-file": true},
	}
	if code, done := cmd.parse(fs, args, stdout, stderr); done {
		return code
	}
	if err := cfg.validate(); err != nil {
		return cmd.usageError(stderr, "invalid configuration: "+strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if cfg.consumer == "" {
		cfg.consumer = "mirror-" + cfg.table
	}
	logger := newLogger(stderr, cfg.logLevel, cfg.logFormat).With("component", "mirror", "table", cfg.table)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := newMirror(cfg, logger, reg)
	if cfg.metricsAddr != "" {
		ln, err := net.Listen("tcp", cfg.metricsAddr)
		if err != nil {
			logger.Error("listen on --metrics-addr", "err", err)
			return 1
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer func() { _ = srv.Close() }()
	}
	if err := m.run(ctx); err != nil && ctx.Err() == nil {
		logger.Error("mirror stopped", "err", err)
		return 1
	}
	logger.Info("mirror stopped")
	return 0
}

// mirrorCursor is what the cursor file holds: the mirror has applied every
// fragment of Table up to Next in Epoch.
type mirrorCursor struct {
	Source string `json:"source"`
	Table  string `json:"table"`
	Epoch  uint64 `json:"epoch"`
	Next   uint64 `json:"next"`
}

type mirrorMetrics struct {
	rows       prometheus.Counter
	pages      prometheus.Counter
	resyncs    prometheus.Counter
	errors     *prometheus.CounterVec
	rejected   prometheus.Counter
	position   prometheus.Gauge
	lag        prometheus.Gauge
	lastCommit prometheus.Gauge
}

type mirror struct {
	cfg          mirrorConfig
	logger       *slog.Logger
	client       *http.Client
	m            mirrorMetrics
	lastProgress time.Time
}

func newMirror(cfg mirrorConfig, logger *slog.Logger, reg prometheus.Registerer) *mirror {
	f := promauto.With(reg)
	return &mirror{
		cfg: cfg, logger: logger,
		client: &http.Client{Timeout: cfg.wait + 60*time.Second},
		m: mirrorMetrics{
			rows:     f.NewCounter(prometheus.CounterOpts{Name: "ingestd_mirror_rows_total", Help: "Rows written to the target (copy and drain)."}),
			pages:    f.NewCounter(prometheus.CounterOpts{Name: "ingestd_mirror_pages_total", Help: "Pages written to the target."}),
			resyncs:  f.NewCounter(prometheus.CounterOpts{Name: "ingestd_mirror_resyncs_total", Help: "Full resyncs (bootstrap included)."}),
			errors:   f.NewCounterVec(prometheus.CounterOpts{Name: "ingestd_mirror_errors_total", Help: "Failed requests by side (source, target) before a retry."}, []string{"side"}),
			rejected: f.NewCounter(prometheus.CounterOpts{Name: "ingestd_mirror_target_rejected_total", Help: "Pages the target answered with a partial write (bad lines dropped there)."}),
			position: f.NewGauge(prometheus.GaugeOpts{Name: "ingestd_mirror_position", Help: "The x_seq up to which the target holds the table."}),
			lag:      f.NewGauge(prometheus.GaugeOpts{Name: "ingestd_mirror_lag_fragments", Help: "Source watermark minus position at the last page."}),
			lastCommit: f.NewGauge(prometheus.GaugeOpts{
				Name: "ingestd_mirror_last_commit_timestamp_seconds", Help: "When the cursor file was last written (Unix seconds).",
			}),
		},
	}
}

// errResync asks run to copy the table in full again.
var errResync = errors.New("resync in full")

func (mr *mirror) run(ctx context.Context) error {
	cur, err := mr.loadCursor()
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		if cur == nil {
			if cur, err = mr.bootstrap(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if errors.Is(err, errResync) {
					mr.logger.Error("source changed during the copy: starting over", "err", err)
					continue
				}
				return err
			}
		}
		err := mr.follow(ctx, cur)
		if errors.Is(err, errResync) {
			mr.logger.Error("source refused the cursor: resyncing in full", "epoch", cur.Epoch, "next", cur.Next, "err", err)
			cur = nil
			continue
		}
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

// bootstrap copies the table by time range and returns the cursor to drain
// from: the epoch and watermark the source read before the copy began.
func (mr *mirror) bootstrap(ctx context.Context) (*mirrorCursor, error) {
	mr.m.resyncs.Inc()
	st, err := mr.sourceSync(ctx)
	if err != nil {
		return nil, err
	}
	if !st.Enabled {
		return nil, fmt.Errorf("sync is OFF for table %q on the source: enable it first (PUT %s/api/v1/tables/%s/sync {\"enabled\":true})",
			mr.cfg.table, mr.cfg.source, mr.cfg.table)
	}
	// The target answers ingestd's table API: truncate the target table
	// first, so that rows deleted at the source go too.
	targetIngestd, err := mr.probeTargetIngestd(ctx)
	if err != nil {
		return nil, err
	}
	if targetIngestd {
		if err := mr.truncateTarget(ctx); err != nil {
			return nil, err
		}
	}
	mr.logger.Info("copying table", "source", mr.cfg.source)
	var cur *mirrorCursor
	cursor := ""
	rows := 0
	for {
		q := url.Values{"limit": {strconv.Itoa(mr.cfg.limit)}, "format": {"lp"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var hdr http.Header
		var body []byte
		err := mr.retry(ctx, "source", func() error {
			var err error
			hdr, body, err = mr.get(ctx, mr.cfg.source+"/api/v1/tables/"+url.PathEscape(mr.cfg.table)+"/rows?"+q.Encode(), mr.cfg.sourceToken)
			return err
		})
		if err != nil {
			return nil, err
		}
		if cur == nil {
			e, err1 := strconv.ParseUint(hdr.Get("Ingestd-Epoch"), 10, 64)
			w, err2 := strconv.ParseUint(hdr.Get("Ingestd-Watermark"), 10, 64)
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("source rows page without epoch and watermark headers: %w", err)
			}
			cur = &mirrorCursor{Source: mr.cfg.source, Table: mr.cfg.table, Epoch: e, Next: w}
		}
		if err := mr.write(ctx, body); err != nil {
			return nil, err
		}
		rows += bytes.Count(body, []byte{'\n'})
		if cursor = hdr.Get("Ingestd-Cursor"); cursor == "" {
			break
		}
	}
	if err := mr.saveCursor(cur); err != nil {
		return nil, err
	}
	mr.logger.Info("table copied; following the feed", "rows", rows, "epoch", cur.Epoch, "from", cur.Next)
	return cur, nil
}

// follow drains the feed from cur with long-polls, writing each page to the
// target and then persisting the cursor, until ctx ends or a resync is due.
func (mr *mirror) follow(ctx context.Context, cur *mirrorCursor) error {
	for ctx.Err() == nil {
		q := url.Values{
			"table": {mr.cfg.table}, "epoch": {strconv.FormatUint(cur.Epoch, 10)},
			"after": {strconv.FormatUint(cur.Next, 10)}, "limit": {strconv.Itoa(mr.cfg.limit)},
			"format": {"lp"}, "wait": {mr.cfg.wait.String()}, "consumer": {mr.cfg.consumer},
		}
		var hdr http.Header
		var body []byte
		err := mr.retry(ctx, "source", func() error {
			var err error
			hdr, body, err = mr.get(ctx, mr.cfg.source+"/drain?"+q.Encode(), mr.cfg.sourceToken)
			return err
		})
		if err != nil {
			return err
		}
		next, err1 := strconv.ParseUint(hdr.Get("Ingestd-Next"), 10, 64)
		wm, err2 := strconv.ParseUint(hdr.Get("Ingestd-Watermark"), 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("drain page without envelope headers: %w", err)
		}
		if len(body) > 0 {
			if err := mr.write(ctx, body); err != nil {
				return err
			}
		}
		// The lag is published before the cursor is persisted (as
		// saveCursor publishes the position): the target holds the page
		// already, and whoever sees the cursor file move must find the
		// metrics there too.
		mr.m.lag.Set(float64(wm - min(wm, next)))
		if next != cur.Next {
			cur.Next = next
			if err := mr.saveCursor(cur); err != nil {
				return err
			}
		}
		if time.Since(mr.lastProgress) >= 10*time.Second {
			mr.lastProgress = time.Now()
			mr.logger.Info("mirror progress", "epoch", cur.Epoch, "position", cur.Next, "watermark", wm)
		}
	}
	return nil
}

// httpStatusError is a non-2xx answer.
type httpStatusError struct {
	status int
	code   string
	body   string
}

func (e *httpStatusError) Error() string {
	return fmt.Sprintf("HTTP %d: %s", e.status, strings.TrimSpace(e.body))
}

// get fetches a URL with token (none when empty); 409 stale_epoch,
// cursor_beyond_sequence and history_expired become errResync.
func (mr *mirror) get(ctx context.Context, u, token string) (http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, nil, err
	}
	setToken(req, token)
	resp, err := mr.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(body, &e)
		if resp.StatusCode == http.StatusConflict && (e.Code == "stale_epoch" || e.Code == "cursor_beyond_sequence" || e.Code == "history_expired") {
			return nil, nil, fmt.Errorf("%w: %s", errResync, e.Code)
		}
		return nil, nil, &httpStatusError{status: resp.StatusCode, code: e.Code, body: string(body)}
	}
	return resp.Header, body, nil
}

// write posts ILP to the target, retrying until it is acknowledged. A
// partial write (400/422: bad lines dropped by the target) is logged and
// counted, not retried: the target kept the good lines and resending cannot
// fix the bad ones.
func (mr *mirror) write(ctx context.Context, body []byte) error {
	if len(body) == 0 {
		return nil
	}
	err := mr.retry(ctx, "target", func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, mr.cfg.target, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "text/plain; charset=utf-8")
		setToken(req, mr.cfg.targetToken)
		resp, err := mr.client.Do(req)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		switch {
		case resp.StatusCode/100 == 2:
			return nil
		case resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusUnprocessableEntity:
			mr.m.rejected.Inc()
			mr.logger.Error("target dropped lines of a page", "status", resp.StatusCode, "response", strings.TrimSpace(string(msg)))
			return nil
		}
		return &httpStatusError{status: resp.StatusCode, body: string(msg)}
	})
	if err != nil {
		return err
	}
	mr.m.pages.Inc()
	mr.m.rows.Add(float64(bytes.Count(body, []byte{'\n'})))
	return nil
}

// retry runs fn until it succeeds, ctx ends or it asks for a resync,
// pausing with jittered exponential backoff between attempts. A source
// table that is gone or has sync OFF is retried too: an operator may fix it.
func (mr *mirror) retry(ctx context.Context, side string, fn func() error) error {
	backoff := min(100*time.Millisecond, mr.cfg.maxBackoff)
	for {
		err := fn()
		if err == nil || errors.Is(err, errResync) || ctx.Err() != nil {
			return err
		}
		mr.m.errors.WithLabelValues(side).Inc()
		mr.logger.Warn("request failed; retrying", "side", side, "err", err, "backoff", backoff)
		select {
		case <-time.After(backoff/2 + rand.N(backoff/2+1)):
		case <-ctx.Done():
			return ctx.Err()
		}
		backoff = min(2*backoff, mr.cfg.maxBackoff)
	}
}

type syncStatus struct {
	Enabled   bool   `json:"enabled"`
	Epoch     uint64 `json:"epoch"`
	Watermark uint64 `json:"watermark"`
}

func (mr *mirror) sourceSync(ctx context.Context) (syncStatus, error) {
	var st syncStatus
	err := mr.retry(ctx, "source", func() error {
		_, body, err := mr.get(ctx, mr.cfg.source+"/api/v1/tables/"+url.PathEscape(mr.cfg.table)+"/sync", mr.cfg.sourceToken)
		if err != nil {
			return err
		}
		return json.Unmarshal(body, &st)
	})
	return st, err
}

// targetBase returns the target URL without path and query.
func (mr *mirror) targetBase() string {
	u, _ := url.Parse(mr.cfg.target)
	return u.Scheme + "://" + u.Host
}

// probeTargetIngestd reports whether the target serves ingestd's table API.
// It asks until the target answers (below 500): a target that is down must
// not pass for another kind of server, or the resync would skip its
// truncation.
func (mr *mirror) probeTargetIngestd(ctx context.Context) (bool, error) {
	ingestd := false
	err := mr.retry(ctx, "target", func() error {
		_, _, err := mr.get(ctx, mr.targetBase()+"/api/v1/tables", mr.cfg.targetToken)
		var se *httpStatusError
		switch {
		case err == nil:
			ingestd = true
		case errors.As(err, &se) && se.status < 500:
			ingestd = false
		default:
			return err
		}
		return nil
	})
	return ingestd, err
}

// truncateTarget empties the target table (target is an ingestd); a table
// that does not exist there yet is fine.
func (mr *mirror) truncateTarget(ctx context.Context) error {
	return mr.retry(ctx, "target", func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, mr.targetBase()+"/api/v1/tables/"+url.PathEscape(mr.cfg.table)+"/truncate", nil)
		if err != nil {
			return err
		}
		setToken(req, mr.cfg.targetToken)
		resp, err := mr.client.Do(req)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNotFound {
			mr.logger.Warn("target table truncated for a full resync")
			return nil
		}
		return &httpStatusError{status: resp.StatusCode, body: "truncate target table"}
	})
}

// setToken sends token as "Authorization: Token …" (InfluxDB 2.x's form,
// which ingestd takes too) when set.
func setToken(req *http.Request, token string) {
	if token != "" {
		req.Header.Set("Authorization", "Token "+token)
	}
}

// loadCursor reads the cursor file; nil when there is none (bootstrap).
func (mr *mirror) loadCursor() (*mirrorCursor, error) {
	b, err := os.ReadFile(mr.cfg.cursorFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read cursor file: %w", err)
	}
	var c mirrorCursor
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("cursor file %s is corrupt (delete it to resync in full): %w", mr.cfg.cursorFile, err)
	}
	if c.Table != mr.cfg.table {
		return nil, fmt.Errorf("cursor file %s is for table %q, not %q", mr.cfg.cursorFile, c.Table, mr.cfg.table)
	}
	mr.logger.Info("resuming from cursor file", "epoch", c.Epoch, "next", c.Next)
	mr.m.position.Set(float64(c.Next))
	return &c, nil
}

// saveCursor writes the cursor durably: a temporary file, fsync, atomic
// rename, fsync of the directory. It publishes the position first: the
// target already holds everything up to c.Next, and the gauge must never
// be behind a cursor file that others (a test, an operator) can read.
func (mr *mirror) saveCursor(c *mirrorCursor) error {
	mr.m.position.Set(float64(c.Next))
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	dir := filepath.Dir(mr.cfg.cursorFile)
	f, err := os.CreateTemp(dir, filepath.Base(mr.cfg.cursorFile)+".tmp*")
	if err != nil {
		return fmt.Errorf("write cursor file: %w", err)
	}
	_, werr := f.Write(append(b, '\n'))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("write cursor file: %w", err)
	}
	if err := os.Rename(f.Name(), mr.cfg.cursorFile); err != nil {
		return fmt.Errorf("write cursor file: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		err = d.Sync()
		_ = d.Close()
		if err != nil {
			return fmt.Errorf("sync cursor directory: %w", err)
		}
	}
	mr.m.lastCommit.SetToCurrentTime()
	return nil
}
