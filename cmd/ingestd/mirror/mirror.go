// Package mirror is `ingestd mirror`: it keeps a replica of one table of
// an ingestd in any InfluxDB-compatible server. It copies the table by
// time range (GET /api/v1/tables/{t}/rows), then follows its feed with
// long-polling drains in ILP, writing each page to the target and only
// then persisting its cursor (epoch, next) in a file; a refusal that asks
// for a resync (stale epoch, cursor beyond the sequence, expired history)
// starts over with a copy, truncating an ingestd target first. It talks to
// both servers through package httpapi/client only.
//
// A postgres:// target (pg.go) is a PostgreSQL table instead: each page is
// one transaction holding its rows and the cursor, which is kept in the
// target (docs/design.md#mirror-into-postgresql), and a resync is one
// transaction too.
//
// The source is not trusted (docs/security.md#client-limits): its answers
// are bounded by --max-page-bytes, every page is checked (client.ErrBadPage)
// and every line it holds is parsed with the rules every write path of
// ingestd applies (docs/security.md#write-validation) and must be of the
// mirrored table. The bootstrap copy is bounded: it may return at most as
// many rows as the source held when it began plus twice what was written
// since (each write adds or re-sends at most one row), so a source whose
// copy never ends is stopped. A source that breaks the protocol stops the
// mirror with an error naming what it broke; nothing of the bad page is
// written and the cursor stays where it was.
package mirror

import (
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
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ingestd/ingestd/cmd/ingestd/cli"
	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/httpapi/client"
	"github.com/ingestd/ingestd/ilp"
)

// Config configures `ingestd mirror`; its flags are registered by
// RegisterFlags (INGESTD_MIRROR_* in the environment).
type Config struct {
	// Source is the base URL of the source ingestd.
	Source string
	// Table is the table to mirror.
	Table string
	// Target is the full write URL of the target (…/write?db=… or
	// …/api/v2/write?bucket=…), or a PostgreSQL connection URL
	// (postgres://… or postgresql://…, as pgx parses it), whose table of
	// the mirrored table's name the mirror keeps, its cursor in the same
	// database (docs/guide.md#mirror-into-postgresql).
	Target string
	// TargetToken is sent to the target as "Authorization: Token …" when
	// set; never logged.
	TargetToken string
	// SourceToken is sent to the source as "Authorization: Token …" when
	// set; never logged.
	SourceToken string
	// CursorFile is where (epoch, next) is kept; http(s) targets only (a
	// PostgreSQL target keeps it in its own table).
	CursorFile string
	// Consumer is the consumer name reported to the source; empty:
	// mirror-<table>.
	Consumer string
	// Limit is the rows per drained or copied page.
	Limit int
	// Wait is the long-poll wait of each drain (0s to 60s).
	Wait time.Duration
	// MaxBackoff is the longest pause between retries (at least 10ms).
	MaxBackoff time.Duration
	// MetricsAddr serves /metrics when set.
	MetricsAddr string
	// LogLevel and LogFormat configure the log on stderr.
	LogLevel, LogFormat string
	// TLS is the trust and client certificate for https:// source and
	// target URLs (--ca-file, --client-cert, --client-key).
	TLS cli.ClientTLS
	// MaxPageBytes bounds every answer of the source and the target read,
	// in bytes (client.WithMaxBodyBytes); at least the source's
	// --drain-max-page-bytes plus its largest row. 0:
	// client.DefaultMaxBodyBytes.
	MaxPageBytes int64
	// Limits are the line rules the source's lines must pass (set them as
	// the source's --max-line-bytes, --max-name-bytes and
	// --ilp-max-string-bytes). The zero Limits: ilp.DefaultLimits().
	Limits ilp.Limits
	// PGMaxStatementBytes bounds one INSERT sent to a PostgreSQL target:
	// its SQL text plus its parameters, in bytes (a page's rows are split
	// into as many statements as it takes; one point past it stops the
	// mirror). 0: DefaultPGMaxStatementBytes.
	PGMaxStatementBytes int
	// PGMaxColumns bounds the columns of a PostgreSQL target's table (time,
	// tags and fields; at most 1600, PostgreSQL's own limit): a column
	// past it stops the mirror before the table is altered. 0:
	// DefaultPGMaxColumns.
	PGMaxColumns int
}

// DefaultConfig returns the defaults of the flags.
func DefaultConfig() Config {
	return Config{
		Limit: 5000, Wait: 10 * time.Second, MaxBackoff: 30 * time.Second, LogLevel: "info", LogFormat: "text",
		MaxPageBytes: client.DefaultMaxBodyBytes, Limits: ilp.DefaultLimits(),
		PGMaxStatementBytes: DefaultPGMaxStatementBytes, PGMaxColumns: DefaultPGMaxColumns,
	}
}

// RegisterFlags registers the mirror's flags on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Source, "source", c.Source, "base URL of the source ingestd, e.g. http://localhost:8086")
	fs.StringVar(&c.Table, "table", c.Table, "table to mirror")
	fs.StringVar(&c.Target, "target", c.Target, "write URL of any InfluxDB-compatible target, e.g. http://replica:8086/write?db=mirror or …/api/v2/write?org=o&bucket=b; or a PostgreSQL URL, e.g. postgres://user@host/db (the cursor is then kept there)")
	fs.StringVar(&c.TargetToken, "target-token", c.TargetToken, "token for the target: InfluxDB 2.x's, or an ingestd one with write and admin on the table (sent as Authorization: Token …; never logged)")
	fs.StringVar(&c.SourceToken, "source-token", c.SourceToken, "token for a source ingestd with --auth-file, with the drain scope on the table (sent as Authorization: Token …; never logged)")
	fs.StringVar(&c.CursorFile, "cursor-file", c.CursorFile, "file holding the mirror's (epoch, next); written only after the target acknowledged (required for an http(s) target; a postgres:// target keeps it in the same transaction as the rows)")
	fs.StringVar(&c.Consumer, "consumer", c.Consumer, "consumer name reported to the source (lag metrics); default mirror-<table>")
	fs.IntVar(&c.Limit, "limit", c.Limit, "rows per drained or copied page")
	fs.DurationVar(&c.Wait, "wait", c.Wait, "long-poll wait of each drain (at most 60s)")
	fs.DurationVar(&c.MaxBackoff, "max-backoff", c.MaxBackoff, "longest pause between retries after an error")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", c.MetricsAddr, "serve the mirror's Prometheus metrics at this address (empty: off)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log format: text or json")
	fs.Int64Var(&c.MaxPageBytes, "max-page-bytes", c.MaxPageBytes, "largest answer read from the source or the target, in bytes (past it the mirror stops); at least the source's --drain-max-page-bytes plus its largest row")
	fs.IntVar(&c.Limits.MaxLineBytes, "max-line-bytes", c.Limits.MaxLineBytes, "longest line a page of the source may hold (as the source's --max-line-bytes)")
	fs.IntVar(&c.Limits.MaxKeyBytes, "max-name-bytes", c.Limits.MaxKeyBytes, "longest measurement, tag key or field key a line may hold (as the source's --max-name-bytes)")
	fs.IntVar(&c.Limits.MaxStringBytes, "ilp-max-string-bytes", c.Limits.MaxStringBytes, "longest tag value or string field a line may hold (as the source's --ilp-max-string-bytes)")
	fs.IntVar(&c.PGMaxStatementBytes, "pg-max-statement-bytes", c.PGMaxStatementBytes, "largest INSERT sent to a postgres:// target, SQL text and parameters, in bytes (a page's rows are split into statements; one point past it stops the mirror)")
	fs.IntVar(&c.PGMaxColumns, "pg-max-columns", c.PGMaxColumns, "most columns of a postgres:// target's table (time, tags and fields; at most 1600): a new column past it stops the mirror")
	c.TLS.RegisterFlags(fs)
}

// Validate checks c; the error names every bad flag.
func (c *Config) Validate() error {
	var errs []error
	for _, f := range []struct{ name, val string }{{"--source", c.Source}, {"--table", c.Table}, {"--target", c.Target}} {
		if f.val == "" {
			errs = append(errs, fmt.Errorf("%s is required", f.name))
		}
	}
	pg := IsPostgresURL(c.Target)
	switch {
	case pg && c.CursorFile != "":
		errs = append(errs, errors.New("--cursor-file is not used with a postgres:// target (the cursor is kept in the target's ingestd_mirror_cursor table)"))
	case !pg && c.CursorFile == "":
		errs = append(errs, errors.New("--cursor-file is required (for an http(s) target)"))
	}
	if pg {
		if _, err := pgx.ParseConfig(c.Target); err != nil {
			errs = append(errs, fmt.Errorf("--target: %w", err))
		}
		if len(c.Table) > pgMaxNameBytes {
			errs = append(errs, fmt.Errorf("--table is %d bytes, longer than a PostgreSQL name (%d)", len(c.Table), pgMaxNameBytes))
		}
	}
	for _, u := range []struct{ name, val string }{{"--source", c.Source}, {"--target", c.Target}} {
		if u.name == "--target" && pg {
			continue
		}
		if p, err := url.Parse(u.val); u.val != "" && (err != nil || p.Scheme == "" || p.Host == "") {
			want := "an http(s) URL"
			if u.name == "--target" {
				want = "an http(s) or postgres:// URL"
			}
			errs = append(errs, fmt.Errorf("%s must be %s, got %q", u.name, want, u.val))
		}
	}
	if c.PGMaxStatementBytes < 0 || (c.PGMaxStatementBytes != 0 && c.PGMaxStatementBytes < 64<<10) {
		errs = append(errs, errors.New("--pg-max-statement-bytes must be at least 64KiB"))
	}
	if c.PGMaxColumns < 0 || c.PGMaxColumns == 1 || c.PGMaxColumns > pgMaxColumnsCeiling {
		errs = append(errs, fmt.Errorf("--pg-max-columns must be within 2..%d", pgMaxColumnsCeiling))
	}
	if c.Limit < 1 {
		errs = append(errs, errors.New("--limit must be positive"))
	}
	if c.Wait < 0 || c.Wait > 60*time.Second {
		errs = append(errs, errors.New("--wait must be within 0s..60s"))
	}
	if c.MaxBackoff < 10*time.Millisecond {
		errs = append(errs, errors.New("--max-backoff must be at least 10ms"))
	}
	if c.MetricsAddr != "" {
		if err := cli.ValidateAddr(c.MetricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-addr: %w", err))
		}
	}
	if c.MaxPageBytes < 0 {
		errs = append(errs, errors.New("--max-page-bytes must be positive"))
	}
	if c.Limits != (ilp.Limits{}) {
		if c.Limits.MaxLineBytes < 1 || c.Limits.MaxLineBytes > ilp.MaxLineBytesCeiling {
			errs = append(errs, fmt.Errorf("--max-line-bytes must be within 1..%d", ilp.MaxLineBytesCeiling))
		}
		if c.Limits.MaxKeyBytes < 1 || c.Limits.MaxKeyBytes > feed.MaxNameBytesCeiling {
			errs = append(errs, fmt.Errorf("--max-name-bytes must be within 1..%d", feed.MaxNameBytesCeiling))
		}
		if c.Limits.MaxStringBytes < 1 {
			errs = append(errs, errors.New("--ilp-max-string-bytes must be positive"))
		}
	}
	if err := cli.ValidateLog(c.LogLevel, c.LogFormat); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Run is `ingestd mirror ARGS`: it parses the flags and mirrors until ctx
// ends (exit 0) or a failure no retry can fix (exit 1; 2 for bad flags).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("ingestd mirror", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	cmd := &cli.Command{
		Name: "ingestd mirror", EnvPrefix: "INGESTD_MIRROR",
		Usage: `Usage:
  ingestd mirror --source URL --table T --target URL --cursor-file F [flags]
  ingestd mirror --source URL --table T --target postgres://user@host/db [flags]
Keeps a replica of one table in any InfluxDB-compatible server or PostgreSQL (docs/guide.md#mirror)
or in a PostgreSQL table (docs/guide.md#mirror-into-postgresql).
`,
		Required:     map[string]bool{"source": true, "table": true, "target": true},
		Placeholders: map[string]string{"source": "URL", "target": "URL"},
	}
	if code, done := cmd.Parse(fs, args, stdout, stderr); done {
		return code
	}
	if err := cfg.Validate(); err != nil {
		return cmd.UsageError(stderr, "invalid configuration: "+strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	logger := cli.NewLogger(stderr, cfg.LogLevel, cfg.LogFormat).With("component", "mirror", "table", cfg.Table)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := New(cfg, logger, reg)
	if err != nil {
		return cmd.UsageError(stderr, "invalid configuration: "+err.Error())
	}
	if cfg.MetricsAddr != "" {
		ln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			logger.Error("listen on --metrics-addr", "err", err)
			return cli.ExitFailure
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer func() { _ = srv.Close() }()
	}
	if err := m.Run(ctx); err != nil && ctx.Err() == nil {
		logger.Error("mirror stopped", "err", err)
		return cli.ExitFailure
	}
	logger.Info("mirror stopped")
	return cli.ExitOK
}

// Cursor is what the cursor file holds: the mirror has applied every
// fragment of Table up to Next in Epoch.
type Cursor struct {
	// Source is the source's base URL (--source).
	Source string `json:"source"`
	// Table is the mirrored table.
	Table string `json:"table"`
	// Epoch is the table's epoch the cursor belongs to.
	Epoch uint64 `json:"epoch"`
	// Next is the x_seq up to which the target holds the table.
	Next uint64 `json:"next"`
}

// metrics are the mirror's Prometheus metrics.
type metrics struct {
	rows       prometheus.Counter
	pages      prometheus.Counter
	resyncs    prometheus.Counter
	errors     *prometheus.CounterVec
	rejected   prometheus.Counter
	statements prometheus.Counter
	columns    prometheus.Counter
	stale      prometheus.Counter
	refused    *prometheus.CounterVec
	position   prometheus.Gauge
	lag        prometheus.Gauge
	lastCommit prometheus.Gauge
	protocol   *prometheus.CounterVec
}

// Mirror keeps one table's replica. It is driven by one goroutine (Run).
type Mirror struct {
	cfg    Config
	logger *slog.Logger
	// peerLog logs the source's and the target's failures: at most one
	// line of each message a second (a failing peer fails every request).
	peerLog      *slog.Logger
	src, tgt     *client.Client
	write        client.WriteOptions // the target's write route
	m            metrics
	lastProgress time.Time
	parser       *ilp.Parser // checks the source's lines (checkLines)
	batch        feed.Batch  // checkLines' points, reused
	pg           *pgTarget   // a PostgreSQL target; nil for an http(s) one
}

// New returns a mirror of cfg (validated) registering its metrics on reg
// (nil: none). Both clients share one *http.Client whose timeout outlasts
// the long-poll, on http.DefaultTransport or, with cfg.TLS set, a clone of
// it trusting and presenting what cfg.TLS names (an error names the flag
// whose file cannot be used). A nil logger logs nothing.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Mirror, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Consumer == "" {
		cfg.Consumer = "mirror-" + cfg.Table
	}
	tr, err := cfg.TLS.Transport()
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: tr, Timeout: cfg.Wait + 60*time.Second}
	if cfg.MaxPageBytes == 0 {
		cfg.MaxPageBytes = client.DefaultMaxBodyBytes
	}
	if cfg.Limits == (ilp.Limits{}) {
		cfg.Limits = ilp.DefaultLimits()
	}
	if cfg.PGMaxStatementBytes == 0 {
		cfg.PGMaxStatementBytes = DefaultPGMaxStatementBytes
	}
	if cfg.PGMaxColumns == 0 {
		cfg.PGMaxColumns = DefaultPGMaxColumns
	}
	src, err := client.New(cfg.Source, client.WithHTTPClient(hc), client.WithToken(cfg.SourceToken), client.WithMaxBodyBytes(cfg.MaxPageBytes))
	if err != nil {
		return nil, fmt.Errorf("--source: %w", err)
	}
	u, err := url.Parse(cfg.Target)
	if err != nil {
		return nil, fmt.Errorf("--target: %w", err)
	}
	var tgt *client.Client
	if !IsPostgresURL(cfg.Target) {
		base := url.URL{Scheme: u.Scheme, User: u.User, Host: u.Host}
		tgt, err = client.New(base.String(), client.WithHTTPClient(hc), client.WithToken(cfg.TargetToken), client.WithMaxBodyBytes(cfg.MaxPageBytes))
		if err != nil {
			return nil, fmt.Errorf("--target: %w", err)
		}
	}
	f := promauto.With(reg)
	mr := &Mirror{
		cfg: cfg, logger: logger, peerLog: slog.New(cli.NewLimitedHandler(logger.Handler(), time.Second)), src: src, tgt: tgt, parser: ilp.NewParser(cfg.Limits),
		write: client.WriteOptions{Path: u.EscapedPath(), Query: u.Query()},
		m: metrics{
			rows:     f.NewCounter(prometheus.CounterOpts{Name: "ingestd_mirror_rows_total", Help: "Rows written to the target (copy and drain)."}),
			pages:    f.NewCounter(prometheus.CounterOpts{Name: "ingestd_mirror_pages_total", Help: "Pages written to the target."}),
			resyncs:  f.NewCounter(prometheus.CounterOpts{Name: "ingestd_mirror_resyncs_total", Help: "Full resyncs (bootstrap included)."}),
			errors:   f.NewCounterVec(prometheus.CounterOpts{Name: "ingestd_mirror_errors_total", Help: "Failed requests by side (source, target) before a retry."}, []string{"side"}),
			rejected: f.NewCounter(prometheus.CounterOpts{Name: "ingestd_mirror_target_rejected_total", Help: "Pages the target answered with a partial write (bad lines dropped there)."}),
			position: f.NewGauge(prometheus.GaugeOpts{Name: "ingestd_mirror_position", Help: "The x_seq up to which the target holds the table."}),
			lag:      f.NewGauge(prometheus.GaugeOpts{Name: "ingestd_mirror_lag_fragments", Help: "Source watermark minus position at the last page."}),
			lastCommit: f.NewGauge(prometheus.GaugeOpts{
				Name: "ingestd_mirror_last_commit_timestamp_seconds", Help: "When the cursor was last committed, to the cursor file or a postgres:// target (Unix seconds).",
			}),
			protocol: f.NewCounterVec(prometheus.CounterOpts{
				Name: "ingestd_mirror_protocol_errors_total",
				Help: "Answers of the source that broke the protocol, by reason (body_too_large, bad_page, bad_line, other_table, endless_copy); each stops the mirror.",
			}, []string{"reason"}),
			statements: f.NewCounter(prometheus.CounterOpts{Name: "ingestd_mirror_pg_statements_total", Help: "INSERT statements a postgres:// target committed (split by --pg-max-statement-bytes)."}),
			columns:    f.NewCounter(prometheus.CounterOpts{Name: "ingestd_mirror_pg_columns_added_total", Help: "Columns a postgres:// target's table was altered to add."}),
			stale: f.NewCounter(prometheus.CounterOpts{
				Name: "ingestd_mirror_pg_stale_cursor_total", Help: "Transactions rolled back because another mirror had moved the cursor in the postgres:// target (this one resumes from it).",
			}),
			refused: f.NewCounterVec(prometheus.CounterOpts{
				Name: "ingestd_mirror_target_refused_total",
				Help: "Pages a postgres:// target cannot take, by reason (kind_conflict, too_many_columns, statement_bytes, name_too_long, nul_in_text, postgresql); each stops the mirror.",
			}, []string{"reason"}),
		},
	}
	for _, r := range protocolReasons {
		mr.m.protocol.WithLabelValues(r)
	}
	for _, r := range refusedReasons {
		mr.m.refused.WithLabelValues(r)
	}
	if tgt == nil {
		mr.pg = &pgTarget{
			url: cfg.Target, table: cfg.Table, key: pgKeyName(cfg.Table), source: cfg.Source,
			maxStmt: cfg.PGMaxStatementBytes, maxCols: cfg.PGMaxColumns, m: &mr.m,
		}
	}
	return mr, nil
}

// The reasons of ingestd_mirror_protocol_errors_total (a closed set).
const (
	reasonBodyTooLarge = "body_too_large"
	reasonBadPage      = "bad_page"
	reasonBadLine      = "bad_line"
	reasonOtherTable   = "other_table"
	reasonEndlessCopy  = "endless_copy"
)

var protocolReasons = []string{reasonBodyTooLarge, reasonBadPage, reasonBadLine, reasonOtherTable, reasonEndlessCopy}

// ErrProtocol is wrapped by the error Run returns when the source broke
// the protocol: an answer past --max-page-bytes, a page that breaks the
// feed's contract, a line that breaks the write rules or is of another
// table, a copy that does not end. Retrying cannot fix it.
var ErrProtocol = errors.New("the source broke the protocol")

// ErrRefused is wrapped by the error Run returns when the source refuses
// the mirror in a way only its operator can change: the token is not
// accepted (401) or lacks the drain scope on the table (403), or the
// source holds as many named consumers as its limits allow (409
// too_many_consumers). The error says what to do; the cursor file is kept,
// so a mirror restarted once it is fixed resumes where it stopped.
var ErrRefused = errors.New("the source refuses the mirror")

// refusal is the error that stops the mirror for a refusal of the source
// (ErrRefused), or nil when err is not one.
func refusal(err error) error {
	var hint string
	switch {
	case errors.Is(err, client.ErrUnauthorized):
		hint = "the source does not accept --source-token: give the mirror a token of the source's --auth-file"
	case errors.Is(err, client.ErrForbidden):
		hint = "--source-token lacks the drain scope on the table: grant it drain on the table in the source's --auth-file, or use a token that has it"
	case errors.Is(err, client.ErrTooManyConsumers):
		hint = "the source holds as many named consumers as --max-consumers, --max-consumers-per-table or --max-consumers-per-token allow: delete consumers no longer used (DELETE /api/v1/tables/{table}/consumers/{consumer}) or raise the limit on the source"
	default:
		return nil
	}
	return fmt.Errorf("%w: %w: %s; the mirror stops (restart it once fixed: it resumes from the cursor file)", ErrRefused, err, hint)
}

// protocolErr counts a protocol error of reason and returns the error that
// stops the mirror.
func (mr *Mirror) protocolErr(reason string, err error) error {
	mr.m.protocol.WithLabelValues(reason).Inc()
	return fmt.Errorf("%w (%s): %w: the mirror stops (nothing of the page was written)", ErrProtocol, reason, err)
}

// checkLines checks an lp page of the source before it is written: every
// line must pass the write rules (ilp's parser with cfg.Limits, which
// applies feed's) and be of the mirrored table. It returns the page's
// rows, in mr.batch until the next call.
func (mr *Mirror) checkLines(body []byte) (int, error) {
	mr.parser.Reuse() // the previous page's points are not read any more
	mr.batch.Points = mr.batch.Points[:0]
	errs, _ := mr.parser.ParseAll(&mr.batch, body, 1, ilp.Nanosecond, 0)
	if len(errs) > 0 {
		return 0, mr.protocolErr(reasonBadLine, errs[0])
	}
	for _, p := range mr.batch.Points {
		if p.Table != mr.cfg.Table {
			return 0, mr.protocolErr(reasonOtherTable, fmt.Errorf("line %d is of table %s, not %s", p.Line, feed.QuoteInput(p.Table), feed.QuoteInput(mr.cfg.Table)))
		}
	}
	return len(mr.batch.Points), nil
}

// errResync asks Run to copy the table in full again.
var errResync = errors.New("resync in full")

// resync turns a refusal asking for a full resync (client.IsResync) into
// errResync, keeping its code in the message.
func resync(err error) error {
	var e *client.Error
	if client.IsResync(err) && errors.As(err, &e) {
		return fmt.Errorf("%w: %s", errResync, e.Code)
	}
	return err
}

// Run mirrors until ctx ends (nil) or a failure no retry can fix: an
// unreadable cursor file, sync OFF at the source at bootstrap, a cursor
// file that cannot be written, a source that breaks the protocol
// (ErrProtocol), or refuses the mirror (ErrRefused), or a postgres://
// target that cannot take a page (ErrTargetRefused).
func (mr *Mirror) Run(ctx context.Context) error {
	if mr.pg != nil {
		return mr.runPG(ctx)
	}
	cur, err := mr.loadCursor()
	if err != nil {
		return err
	}
	// Resyncs that follow one another without a row followed in between
	// are paced: a source that refuses every cursor (409) or changes
	// during every copy would otherwise have its target truncated and
	// copied again as fast as the requests go.
	var resyncs pacer
	for ctx.Err() == nil {
		if cur == nil {
			if err := resyncs.wait(ctx, mr.cfg.MaxBackoff); err != nil {
				return nil
			}
			if cur, err = mr.bootstrap(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if errors.Is(err, errResync) {
					mr.peerLog.Error("source changed during the copy: starting over", "err", err)
					continue
				}
				return err
			}
		}
		followed, err := mr.follow(ctx, cur)
		if errors.Is(err, errResync) {
			mr.peerLog.Error("source refused the cursor: resyncing in full", "epoch", cur.Epoch, "next", cur.Next, "err", err)
			if followed {
				resyncs.reset()
			}
			cur = nil
			continue
		}
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

// resyncStatus counts a resync and returns the source's sync status of
// the table (retrying the source), an error when sync is OFF there.
func (mr *Mirror) resyncStatus(ctx context.Context) (client.SyncStatus, error) {
	mr.m.resyncs.Inc()
	var st client.SyncStatus
	err := mr.retry(ctx, "source", func() (err error) {
		st, err = mr.src.Sync(ctx, mr.cfg.Table)
		return err
	})
	if err == nil && !st.Enabled {
		err = fmt.Errorf("sync is OFF for table %q on the source: enable it first (PUT %s/api/v1/tables/%s/sync {\"enabled\":true})",
			mr.cfg.Table, mr.cfg.Source, mr.cfg.Table)
	}
	return st, err
}

// bootstrap copies the table by time range and returns the cursor to drain
// from: the epoch and watermark the source read before the copy began.
func (mr *Mirror) bootstrap(ctx context.Context) (*Cursor, error) {
	st, err := mr.resyncStatus(ctx)
	if err != nil {
		return nil, err
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
	budget, err := mr.newCopyBudget(ctx, st)
	if err != nil {
		return nil, err
	}
	mr.logger.Info("copying table", "source", mr.cfg.Source)
	var cur *Cursor
	req := client.RowsRequest{Table: mr.cfg.Table, Limit: mr.cfg.Limit, Format: client.FormatLP}
	rows := uint64(0)
	// The copy budget counts rows: copy pages without rows that go on
	// are paced instead.
	var empty pacer
	for {
		var pg *client.RowsPage
		err := mr.retry(ctx, "source", func() (err error) {
			pg, err = mr.src.Rows(ctx, req)
			return resync(err)
		})
		if err != nil {
			return nil, err
		}
		if cur == nil {
			cur = &Cursor{Source: mr.cfg.Source, Table: mr.cfg.Table, Epoch: pg.Epoch, Next: pg.Watermark}
		} else if pg.Epoch != cur.Epoch || pg.Watermark != cur.Next {
			return nil, mr.protocolErr(reasonBadPage, fmt.Errorf("copy page of epoch %d and watermark %d, the copy began at %d and %d", pg.Epoch, pg.Watermark, cur.Epoch, cur.Next))
		}
		n, err := mr.checkLines(pg.Body)
		if err != nil {
			return nil, err
		}
		rows += uint64(n)
		if err := budget.check(ctx, mr, rows); err != nil {
			return nil, err
		}
		if n > 0 {
			empty.reset()
		} else if pg.Cursor != "" {
			if err := empty.wait(ctx, mr.cfg.MaxBackoff); err != nil {
				return nil, err
			}
		}
		if err := mr.writeTarget(ctx, pg.Body, n); err != nil {
			return nil, err
		}
		if req.Cursor = pg.Cursor; req.Cursor == "" {
			break
		}
	}
	if err := mr.saveCursor(cur); err != nil {
		return nil, err
	}
	mr.logger.Info("table copied; following the feed", "rows", rows, "epoch", cur.Epoch, "from", cur.Next)
	return cur, nil
}

// copyBudget bounds the rows of a bootstrap copy: a copy visits each point
// of the table once, and a write during the copy adds at most one point or
// makes one appear again, so it returns at most the fragments the source
// held when it began (its table stats, counted up to a few seconds before,
// plus its seq then, which covers the synced writes of that while) and two
// rows per fragment written since (its seq now minus its seq then). Past
// that the copy does not end: the source is stopped as broken.
type copyBudget struct {
	fragments uint64 // the most fragments the source's stats reported
	seq0      uint64 // the source's seq when the copy began
	rows      uint64 // the rows allowed until the budget is read again
}

// newCopyBudget reads the source's table stats and returns the budget of
// a copy beginning at st.
func (mr *Mirror) newCopyBudget(ctx context.Context, st client.SyncStatus) (*copyBudget, error) {
	b := &copyBudget{seq0: st.Seq}
	if err := b.refresh(ctx, mr, st.Seq); err != nil {
		return nil, err
	}
	return b, nil
}

// refresh reads the source's stats again and recomputes b.rows with seq,
// the source's seq now.
func (b *copyBudget) refresh(ctx context.Context, mr *Mirror, seq uint64) error {
	var t client.Table
	err := mr.retry(ctx, "source", func() (err error) {
		t, err = mr.src.Table(ctx, mr.cfg.Table)
		return err
	})
	if err != nil {
		return err
	}
	if t.Stats != nil {
		b.fragments = max(b.fragments, t.Stats.Fragments)
	}
	b.rows = b.fragments + b.seq0 + 2*(max(seq, b.seq0)-b.seq0)
	return nil
}

// check returns nil while rows is within the budget, reading the source's
// state again once it is not; a copy still past it is a protocol error.
func (b *copyBudget) check(ctx context.Context, mr *Mirror, rows uint64) error {
	if rows <= b.rows {
		return nil
	}
	var st client.SyncStatus
	err := mr.retry(ctx, "source", func() (err error) {
		st, err = mr.src.Sync(ctx, mr.cfg.Table)
		return err
	})
	if err != nil {
		return err
	}
	if err := b.refresh(ctx, mr, st.Seq); err != nil {
		return err
	}
	if rows > b.rows {
		return mr.protocolErr(reasonEndlessCopy, fmt.Errorf("the copy returned %d rows and goes on, more than the %d the source held (%d fragments, seq %d) and wrote since (seq %d)",
			rows, b.rows, b.fragments, b.seq0, st.Seq))
	}
	return nil
}

// nextPage long-polls the page after cur into pg (retrying the source,
// errResync on an epoch change) and checks its lines, returning their
// count.
func (mr *Mirror) nextPage(ctx context.Context, cur *Cursor, pg *client.Page) (int, error) {
	req := client.DrainRequest{
		Table: mr.cfg.Table, Epoch: cur.Epoch, After: cur.Next, Limit: mr.cfg.Limit,
		Format: client.FormatLP, Wait: mr.cfg.Wait, Consumer: mr.cfg.Consumer,
	}
	if err := mr.retry(ctx, "source", func() error { return resync(mr.src.DrainInto(ctx, req, pg)) }); err != nil {
		return 0, err
	}
	return mr.checkLines(pg.Body)
}

// follow drains the feed from cur with long-polls, writing each page to the
// target and then persisting the cursor, until ctx ends or a resync is due;
// followed tells whether a page brought rows. An empty page answered
// before half the long-poll wait (a source that ignores wait=, or one
// whose waiting drains are full) is followed by a pause that grows up to
// the wait (or --max-backoff without one) until a page brings rows.
func (mr *Mirror) follow(ctx context.Context, cur *Cursor) (followed bool, err error) {
	var (
		pg    client.Page
		empty pacer
	)
	for ctx.Err() == nil {
		asked := time.Now()
		n, err := mr.nextPage(ctx, cur, &pg)
		if err != nil {
			return followed, err
		}
		if n > 0 {
			followed = true
			empty.reset()
		} else if time.Since(asked) < mr.cfg.Wait/2 || mr.cfg.Wait == 0 {
			limit := mr.cfg.Wait
			if limit == 0 {
				limit = mr.cfg.MaxBackoff
			}
			if err := empty.wait(ctx, limit); err != nil {
				return followed, nil
			}
		}
		if err := mr.writeTarget(ctx, pg.Body, n); err != nil {
			return followed, err
		}
		// The lag is published before the cursor is persisted (as
		// saveCursor publishes the position): the target holds the page
		// already, and whoever sees the cursor file move must find the
		// metrics there too.
		mr.m.lag.Set(float64(pg.Watermark - min(pg.Watermark, pg.Next)))
		if pg.Next != cur.Next {
			cur.Next = pg.Next
			if err := mr.saveCursor(cur); err != nil {
				return followed, err
			}
		}
		if time.Since(mr.lastProgress) >= 10*time.Second {
			mr.lastProgress = time.Now()
			mr.logger.Info("mirror progress", "epoch", cur.Epoch, "position", cur.Next, "watermark", pg.Watermark)
		}
	}
	return followed, nil
}

// pacer is a pause that doubles up to a limit each time it is waited
// (jittered: between half the pause and the pause), until reset. A zero
// pacer's first wait returns at once, the next takes about 100 ms, then
// 200 ms, …; retry's starts at 100 ms.
type pacer struct{ d time.Duration }

// wait pauses for the current pause (at most limit) and doubles it; it
// returns ctx's error when ctx ends first.
func (p *pacer) wait(ctx context.Context, limit time.Duration) error {
	d := min(p.d, limit)
	p.d = min(max(2*p.d, 100*time.Millisecond), limit)
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-time.After(d/2 + rand.N(d/2+1)):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reset makes the next wait return at once.
func (p *pacer) reset() { p.d = 0 }

// writeTarget posts ILP (rows lines) to the target, retrying until it is
// acknowledged.
// A partial write (400/422: bad lines dropped by the target) is logged and
// counted, not retried: the target kept the good lines and resending
// cannot fix the bad ones.
func (mr *Mirror) writeTarget(ctx context.Context, body []byte, rows int) error {
	if len(body) == 0 {
		return nil
	}
	err := mr.retry(ctx, "target", func() error {
		err := mr.tgt.Write(ctx, body, mr.write)
		var e *client.Error
		if errors.As(err, &e) && (e.StatusCode == http.StatusBadRequest || e.StatusCode == http.StatusUnprocessableEntity) {
			mr.m.rejected.Inc()
			mr.peerLog.Error("target dropped lines of a page", "status", e.StatusCode, "response", e.Message)
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	mr.m.pages.Inc()
	mr.m.rows.Add(float64(rows))
	return nil
}

// retry runs fn until it succeeds, ctx ends or it asks for a resync,
// pausing with jittered exponential backoff between attempts. A source
// table that is gone or has sync OFF is retried too: an operator may fix it.
// An answer of the source that breaks the protocol (*client.ProtocolError)
// is not retried: it is returned as ErrProtocol; nor is a refusal only the
// source's operator can change (ErrRefused).
func (mr *Mirror) retry(ctx context.Context, side string, fn func() error) error {
	backoff := pacer{d: min(100*time.Millisecond, mr.cfg.MaxBackoff)}
	for {
		err := fn()
		if err == nil || ctx.Err() != nil {
			return err
		}
		if ferr := mr.final(side, err); ferr != nil {
			return ferr
		}
		mr.m.errors.WithLabelValues(side).Inc()
		mr.peerLog.Warn("request failed; retrying", "side", side, "err", err, "backoff", backoff.d)
		if err := backoff.wait(ctx, mr.cfg.MaxBackoff); err != nil {
			return err
		}
	}
}

// final returns the error to stop on when err (of a request to side) is
// one no retry fixes: a resync asked for (errResync), an answer of the
// source that breaks the protocol (ErrProtocol, counted) or a refusal of
// the source (ErrRefused); nil when err is worth retrying.
func (mr *Mirror) final(side string, err error) error {
	if errors.Is(err, errResync) {
		return err
	}
	if side != "source" {
		return nil
	}
	var pe *client.ProtocolError
	if errors.As(err, &pe) {
		reason := reasonBadPage
		if errors.Is(err, client.ErrBodyTooLarge) {
			reason = reasonBodyTooLarge
		}
		return mr.protocolErr(reason, err)
	}
	return refusal(err)
}

// probeTargetIngestd reports whether the target serves ingestd's table API.
// It asks until the target answers (below 500): a target that is down must
// not pass for another kind of server, or the resync would skip its
// truncation.
func (mr *Mirror) probeTargetIngestd(ctx context.Context) (bool, error) {
	ingestd := false
	err := mr.retry(ctx, "target", func() error {
		_, err := mr.tgt.Do(ctx, http.MethodGet, "/api/v1/tables", nil, nil)
		var e *client.Error
		switch {
		case err == nil:
			ingestd = true
		case errors.As(err, &e) && e.StatusCode < 500:
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
func (mr *Mirror) truncateTarget(ctx context.Context) error {
	return mr.retry(ctx, "target", func() error {
		_, err := mr.tgt.Truncate(ctx, mr.cfg.Table)
		var e *client.Error
		if err == nil || (errors.As(err, &e) && e.StatusCode == http.StatusNotFound) {
			mr.logger.Warn("target table truncated for a full resync")
			return nil
		}
		return err
	})
}

// loadCursor reads the cursor file; nil when there is none (bootstrap).
func (mr *Mirror) loadCursor() (*Cursor, error) {
	b, err := os.ReadFile(mr.cfg.CursorFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read cursor file: %w", err)
	}
	var c Cursor
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("cursor file %s is corrupt (delete it to resync in full): %w", mr.cfg.CursorFile, err)
	}
	if c.Table != mr.cfg.Table {
		return nil, fmt.Errorf("cursor file %s is for table %q, not %q", mr.cfg.CursorFile, c.Table, mr.cfg.Table)
	}
	mr.logger.Info("resuming from cursor file", "epoch", c.Epoch, "next", c.Next)
	mr.m.position.Set(float64(c.Next))
	return &c, nil
}

// saveCursor writes the cursor durably (cli.WriteFileAtomic). It publishes
// the position first: the target already holds everything up to c.Next,
// and the gauge must never be behind a cursor file that others (a test,
// an operator) can read.
func (mr *Mirror) saveCursor(c *Cursor) error {
	mr.m.position.Set(float64(c.Next))
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := cli.WriteFileAtomic(mr.cfg.CursorFile, append(b, '\n')); err != nil {
		return fmt.Errorf("write cursor file: %w", err)
	}
	mr.m.lastCommit.SetToCurrentTime()
	return nil
}
