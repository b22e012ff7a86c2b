// Command ingestd takes InfluxDB line protocol over HTTP and TCP, stores
// every line durably in badger and serves each sync table's change feed at
// GET /drain (see README.md and docs/). `ingestd mirror` keeps a replica of one table
// in any InfluxDB-compatible server; `ingestd health` probes a running
// ingestd (exit 0 when ready), for container health checks.
//
// Exit codes, the same for every subcommand: 0 after a clean shutdown
// (SIGINT or SIGTERM) and for --help and version, 1 on a runtime error
// (e.g. the data directory is locked by another process or not writable),
// 2 on bad flags or arguments.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rungroup "github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ingestd/ingestd"
	"github.com/ingestd/ingestd/cmd/ingestd/bench"
	"github.com/ingestd/ingestd/cmd/ingestd/cli"
	"github.com/ingestd/ingestd/cmd/ingestd/mirror"
	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/httpapi"
	"github.com/ingestd/ingestd/httpapi/auth"
	"github.com/ingestd/ingestd/ilp"
	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/badgerstore"
	"github.com/ingestd/ingestd/store/jsstore"
	"github.com/ingestd/ingestd/store/rowengine"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is the whole daemon's configuration.
type config struct {
	// backend is --store: "badger" (store/badgerstore, the default) or
	// "jetstream" (store/jsstore, with the badger settings for its cache).
	backend         string
	store           rowengine.Config
	jetstream       jsstore.Config
	feed            feed.Config
	ilp             ilp.Config
	http            httpapi.Config
	auth            auth.Config
	httpAddr        string
	logLevel        string
	logFormat       string
	shutdownTimeout time.Duration
	// shutdownLimit bounds the whole shutdown (--shutdown-limit);
	// shutdownStuck, when set, is called once it passed with the
	// shutdown unfinished (run then returns without waiting for it).
	shutdownLimit time.Duration
	shutdownStuck func()
	pprofAddr     string
	// portsFile, when set, receives the bound addresses as JSON once both
	// listeners are bound (--ports-file).
	portsFile string
	// memoryLimitBytes is the Go runtime's soft memory limit
	// (debug.SetMemoryLimit); 0 leaves it to GOMEMLIMIT.
	memoryLimitBytes int64
}

// DefaultMemoryLimitBytes is the default --memory-limit-bytes. Without a
// limit, the garbage collector lets the heap grow to twice what is live:
// a burst of badger memtable flushes (each DROP or TRUNCATE flushes one, a
// table create+drop churn thousands) kept RSS near 1 GiB long after, and
// so did an open-loop load above capacity (1,000-line bodies: the bodies
// and parsed batches in flight, bounded by
// --http-max-inflight-write-bytes, are about 300 MiB live, the heap grew
// to twice that), where 512 MiB held it at 500 MiB without slowing it.
// What is live in the memory table of docs/operations.md#memory for the default flags and a
// load in flight stays below it; a store with millions of series (their
// dictionaries live in memory) needs a higher limit.
const DefaultMemoryLimitBytes = 512 << 20

// registerFlags registers every flag of the daemon on fs and returns the
// help sections they belong to: HTTP, writes, TCP, feed, store, logging,
// process.
func (c *config) registerFlags(fs *flag.FlagSet) *cli.FlagGroups {
	g := cli.NewFlagGroups()
	g.Register(fs, "HTTP", nil, func(fs *flag.FlagSet) {
		fs.StringVar(&c.httpAddr, "http-addr", c.httpAddr, "HTTP listen address (writes, drain, tables, metrics, status page)")
		c.http.RegisterFlags(fs)
	})
	g.Register(fs, "", func(name string) string {
		if strings.Contains(name, "tcp") {
			return "TCP (line protocol over TCP)"
		}
		return "Writes (line protocol over HTTP and TCP)"
	}, c.ilp.RegisterFlags)
	g.Register(fs, "Security (tokens, TLS)", nil, c.auth.RegisterFlags)
	g.Register(fs, "Feed (sequencer, tables, drain)", nil, c.feed.RegisterFlags)
	g.Register(fs, "Store (badger)", nil, func(fs *flag.FlagSet) {
		fs.StringVar(&c.backend, "store", c.backend, "storage backend: badger (one machine) or jetstream (a NATS JetStream cluster, the --nats-* and --jetstream-* flags; badger then holds the local row cache)")
		c.store.RegisterFlags(fs)
	})
	g.Register(fs, "Store (NATS JetStream, with --store=jetstream)", nil, c.jetstream.RegisterFlags)
	g.Register(fs, "Logging", nil, func(fs *flag.FlagSet) {
		fs.StringVar(&c.logLevel, "log-level", c.logLevel, "log level: debug, info, warn, error")
		fs.StringVar(&c.logFormat, "log-format", c.logFormat, "log format: text or json")
	})
	g.Register(fs, "Process", nil, func(fs *flag.FlagSet) {
		fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", c.shutdownTimeout, "how long in-flight HTTP requests may finish on shutdown")
		fs.DurationVar(&c.shutdownLimit, "shutdown-limit", c.shutdownLimit, "how long the whole shutdown may take (above --shutdown-timeout): past it ingestd exits 1 without finishing it, as a crash would, which loses nothing acknowledged (a store that cannot be reached, e.g. every NATS server gone, is retried for --jetstream-publish-timeout per call)")
		fs.StringVar(&c.portsFile, "ports-file", c.portsFile, `write {"http":"HOST:PORT","tcp":"HOST:PORT"} (and "pprof" with --pprof-addr) here (atomically: temporary file + rename) once both listeners are bound, and remove it on exit; for harnesses that start ingestd on port 0 (empty: off)`)
		fs.StringVar(&c.pprofAddr, "pprof-addr", c.pprofAddr, "serve Go's net/http/pprof profiles on this separate address (empty: off; keep it on loopback)")
		fs.Int64Var(&c.memoryLimitBytes, "memory-limit-bytes", c.memoryLimitBytes, "soft memory limit of the Go runtime: the garbage collector works harder near it (0: none, or GOMEMLIMIT when set; GOMEMLIMIT also wins over the default)")
	})
	return g
}

// defaultConfig is the daemon's configuration without flags.
func defaultConfig() config {
	return config{
		backend: "badger", store: rowengine.DefaultConfig(), jetstream: jsstore.DefaultConfig(), feed: feed.DefaultConfig(), ilp: ilp.DefaultConfig(), http: httpapi.DefaultConfig(),
		auth: auth.DefaultConfig(), httpAddr: ":8086", logLevel: "info", logFormat: "text", shutdownTimeout: 10 * time.Second, shutdownLimit: 45 * time.Second,
		memoryLimitBytes: DefaultMemoryLimitBytes,
	}
}

func (c *config) validate() error {
	if err := cli.ValidateLog(c.logLevel, c.logFormat); err != nil {
		return err
	}
	if c.shutdownTimeout <= 0 {
		return errors.New("--shutdown-timeout must be positive")
	}
	if c.shutdownLimit <= c.shutdownTimeout {
		return errors.New("--shutdown-limit must be above --shutdown-timeout")
	}
	if c.memoryLimitBytes < 0 {
		return errors.New("--memory-limit-bytes must not be negative")
	}
	if err := validateAddrs(map[string]string{"http-addr": c.httpAddr, "tcp-addr": c.ilp.TCPAddr, "pprof-addr": c.pprofAddr}, "http-addr"); err != nil {
		return err
	}
	var backendErr error
	switch c.backend {
	case "badger":
	case "jetstream":
		if c.jetstream.CacheDir == "" {
			c.jetstream.CacheDir = filepath.Join(c.store.Dir, jsstore.DefaultCacheDirName)
		}
		backendErr = c.jetstream.Validate()
	default:
		backendErr = fmt.Errorf("--store must be badger or jetstream, not %q", c.backend)
	}
	return errors.Join(backendErr, c.store.Validate(), c.feed.Validate(), c.ilp.Validate(), c.http.Validate(), c.auth.Validate())
}

// validateAddrs checks each listen address by its flag's name (without
// the dashes): HOST:PORT with a port from 0 to 65535, so that a typo is a
// usage error before the data directory is opened. An empty address
// disables its listener, except for the flags named in required.
func validateAddrs(addrs map[string]string, required ...string) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(addrs)) {
		addr := addrs[name]
		if addr == "" && !slices.Contains(required, name) {
			continue
		}
		if err := cli.ValidateAddr(addr); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// openStore opens the backend --store names: badger in --data-dir, or
// JetStream with its row cache in --jetstream-cache-dir.
func openStore(cfg config, logger *slog.Logger, reg prometheus.Registerer) (store.Backend, error) {
	if cfg.backend == "jetstream" {
		return jsstore.Open(cfg.jetstream, cfg.store, logger, reg)
	}
	return badgerstore.Open(cfg.store, logger, reg)
}

// usage heads `ingestd --help`.
const usage = `Usage:
  ingestd [flags]        run the daemon (ILP over HTTP and TCP, the change feed, the status page at /)
  ingestd mirror         keep a replica of one table in an InfluxDB-compatible server or PostgreSQL
  ingestd bench          load harness: send TSBS data, wait, drain, report
  ingestd diskbench      write+truncate rounds against a running ingestd: is disk given back?
  ingestd health         print a running ingestd's state (exit 0 when ready)
  ingestd token          create, list or revoke the tokens of an --auth-file
  ingestd version        print the version, commit, build date and Go version (also --version)
  ingestd help [CMD]     this help, or a command's (also CMD --help)

Without --auth-file only clients on loopback are served (protected mode; --insecure-open
serves every client without authentication).

Every flag can also be set as the environment variable shown beside it (INGESTD_ + the
flag's name in upper case with - as _). Sizes take units: 32MiB, 1GB, 4096 (bytes).
Durations: 100ms, 5s, 2m. Exit codes: 0 clean shutdown (SIGINT, SIGTERM) or help,
1 runtime error (data directory locked, unwritable or full; storage failure),
2 bad flags or arguments.
`

// run starts the daemon (or a subcommand) and blocks until ctx ends or a
// component fails. Help and version go to stdout, errors and logs to
// stderr; it returns the exit code (see the exit* constants).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return runCommand(ctx, args[0], args[1:], stdout, stderr)
	}
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		return runVersion(nil, stdout, stderr)
	}
	cfg := defaultConfig()
	fs := flag.NewFlagSet("ingestd", flag.ContinueOnError)
	cmd := &cli.Command{Name: "ingestd", Usage: usage, EnvPrefix: "INGESTD", Groups: cfg.registerFlags(fs),
		// The flags whose value is a type of the daemon's own.
		Placeholders: map[string]string{"sync-tables": "GLOBS", "default-retention": "DURATION", "feed-history": "DURATION", "nats-url": "URLS"}}
	if code, done := cmd.Parse(fs, args, stdout, stderr); done {
		return code
	}
	if err := cfg.validate(); err != nil {
		return cmd.UsageError(stderr, "invalid configuration: "+strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	logger := cli.NewLogger(stderr, cfg.logLevel, cfg.logFormat)
	stuck := make(chan struct{})
	cfg.shutdownStuck = func() { close(stuck) }
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, logger, nil) }()
	select {
	case err := <-done:
		if err != nil {
			logger.Error("ingestd stopped", "err", err)
			return cli.ExitFailure
		}
		return cli.ExitOK
	case <-stuck:
		logger.Error("ingestd stopped: the shutdown did not finish within --shutdown-limit; exiting as a crash would, which loses nothing acknowledged", "shutdown_limit", cfg.shutdownLimit)
		return cli.ExitFailure
	}
}

// runCommand runs subcommand name; `help CMD` is `CMD --help`.
func runCommand(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	switch name {
	case "mirror":
		return mirror.Run(ctx, args, stdout, stderr)
	case "health":
		return runHealth(ctx, args, stdout, stderr)
	case "bench":
		return bench.Run(ctx, args, stdout, stderr)
	case "token":
		return runToken(args, stdout, stderr)
	case "diskbench":
		return runDiskBench(ctx, args, stdout, stderr)
	case "version":
		return runVersion(args, stdout, stderr)
	case "help":
		if len(args) == 0 {
			return run(ctx, []string{"--help"}, stdout, stderr)
		}
		if args[0] != "help" {
			return runCommand(ctx, args[0], []string{"--help"}, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "ingestd: unknown command %q: mirror, bench, diskbench, health, token, version or help (see ingestd --help)\n", name)
	return cli.ExitBadUsage
}

// serve runs every component as one actor of a run group (oklog/run) and
// shuts them down in order (docs/design.md#engineering-rules) once the first returns: a signal
// (ctx ends), or the HTTP server, the TCP listener or the sequencer
// failing. The group interrupts the actors in the order they were added,
// each interrupt returning only once its actor has finished what it must:
// readiness off and HTTP (in-flight requests get --shutdown-timeout), TCP
// (each connection commits what it read), the sequencer (commits
// everything queued); then the status sampler, the SIGHUP reloader and
// pprof; the store is closed last (the audit log file after it). The
// auth and TLS files are loaded before the store is opened. started, when
// non-nil, is called with the bound addresses once everything is set up
// (tcpAddr is empty when TCP is disabled). The error joins the first actor's failure with those of
// TCP and the sequencer during the shutdown; nil after a clean shutdown.
func serve(ctx context.Context, cfg config, logger *slog.Logger, started func(httpAddr, tcpAddr string)) (err error) {
	setMemoryLimit(cfg.memoryLimitBytes, logger)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newBuildInfoGauge(readBuildInfo()))

	// The auth file and the TLS files first: one missing or malformed
	// stops the start before the data directory is touched.
	sec, err := newSecurity(cfg.auth, logger, reg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, sec.close()) }()
	db, err := openStore(cfg, logger, reg)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer func() {
		if cerr := db.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close store: %w", cerr))
		}
	}()
	seq, in, api, err := wire(cfg, db, logger, reg, sec)
	if err != nil {
		return err
	}
	srv, err := httpapi.NewServer(cfg.http, api, logger, reg)
	if err != nil {
		return err
	}
	lns, err := listen(cfg)
	if err != nil {
		return err
	}

	var (
		g        rungroup.Group
		failures actorFailures
	)
	// The whole shutdown, whatever began it, is bounded by
	// --shutdown-limit (docs/operations.md#stopping): the group's first
	// interrupt starts the clock.
	if cfg.shutdownStuck != nil {
		quit := make(chan struct{})
		var limit *time.Timer
		g.Add(func() error { <-quit; return nil }, func(error) {
			close(quit)
			limit = time.AfterFunc(cfg.shutdownLimit, cfg.shutdownStuck)
		})
		defer func() {
			if limit != nil {
				limit.Stop()
			}
		}()
	}
	addSignal(&g, ctx, logger)
	addHTTP(&g, &failures, srv, lns.http, sec.tls.ServerConfig(), api, cfg.shutdownTimeout, logger)
	tcpAddr := ""
	if lns.tcp != nil {
		tcpAddr = lns.tcp.Addr().String()
		tcpLn := lns.tcp
		if tc := sec.tls.TCPServerConfig(); tc != nil {
			tcpLn = tls.NewListener(tcpLn, tc)
		}
		addUntilDone(&g, func(ctx context.Context) error {
			err := in.ServeTCP(ctx, tcpLn)
			if err == nil && ctx.Err() == nil {
				err = errors.New("stopped")
			}
			return failures.add("tcp server", err)
		})
	}
	addUntilDone(&g, func(ctx context.Context) error {
		err := seq.Run(ctx)
		if err == nil && ctx.Err() == nil {
			return failures.add("", errors.New("sequencer stopped"))
		}
		return failures.add("sequencer", err)
	})
	addUntilDone(&g, func(ctx context.Context) error { api.RunStatusSampler(ctx); return nil })
	// The SIGHUP handler is installed now, before anyone is told the
	// daemon runs: a SIGHUP before it would end the process.
	secCtx, secCancel := context.WithCancel(context.Background())
	secDone := sec.run(secCtx)
	stopSec := func() { secCancel(); <-secDone }
	g.Add(func() error { <-secDone; return nil }, func(error) { stopSec() })
	if lns.pprof != nil {
		addPprof(&g, lns.pprof)
		logger.Info("pprof listening", "pprof_addr", lns.pprof.Addr().String())
	}

	sec.warnAtStart(logger, lns.http.Addr(), lns.tcp)
	api.SetReady(true)
	if cfg.portsFile != "" {
		pf := portsFile{HTTP: lns.http.Addr().String(), TCP: tcpAddr}
		if lns.pprof != nil {
			pf.Pprof = lns.pprof.Addr().String()
		}
		if err := writePortsFile(cfg.portsFile, pf); err != nil {
			stopSec()
			lns.close()
			return err
		}
		defer func() { _ = os.Remove(cfg.portsFile) }()
	}
	if started != nil {
		started(lns.http.Addr().String(), tcpAddr)
	}
	logger.Info("ingestd started", "http_addr", lns.http.Addr().String(), "tcp_addr", tcpAddr,
		"data_dir", cfg.store.Dir, "sync_tables", strings.Join(cfg.feed.SyncTables, ","))

	_ = g.Run() // the first actor's error is failures' first
	failure := failures.join()
	if failure == nil {
		logger.Info("ingestd stopped cleanly")
	}
	return failure
}

// actorFailures collects, in the order they happen, the errors of the
// actors of serve's run group: the one that ended the group first, then
// those returned while shutting down. It is safe for concurrent use.
type actorFailures struct {
	mu   sync.Mutex // guards errs
	errs []error
}

// add records err (nil: nothing) prefixed with what ("http server"; none
// when empty) and returns what it recorded.
func (f *actorFailures) add(what string, err error) error {
	if err == nil {
		return nil
	}
	if what != "" {
		err = fmt.Errorf("%s: %w", what, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, err)
	return err
}

// join returns every recorded error, joined; nil when none.
func (f *actorFailures) join() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

// addSignal adds the actor that ends the group when ctx ends (SIGINT or
// SIGTERM in main), logging "shutting down"; it ends quietly when another
// actor ended first.
func addSignal(g *rungroup.Group, ctx context.Context, logger *slog.Logger) {
	addUntilDone(g, func(stop context.Context) error {
		select {
		case <-ctx.Done():
			logger.Info("shutting down")
		case <-stop.Done():
		}
		return nil
	})
}

// addUntilDone adds an actor running fn until its context is cancelled;
// its interrupt cancels the context and returns only once fn has
// returned, so that the next actor is interrupted after this one finished
// (TCP commits what it read before the sequencer stops).
func addUntilDone(g *rungroup.Group, fn func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	g.Add(func() error {
		defer close(done)
		return fn(ctx)
	}, func(error) {
		cancel()
		<-done
	})
}

// addHTTP adds the HTTP server (TLS when tc is set). Its interrupt turns
// readiness off and shuts the server down, giving in-flight requests
// timeout before closing their connections; a server that failed on its
// own is not shut down.
func addHTTP(g *rungroup.Group, failures *actorFailures, srv *httpapi.Server, ln net.Listener, tc *tls.Config, api *httpapi.API, timeout time.Duration, logger *slog.Logger) {
	var stopping atomic.Bool
	done := make(chan struct{})
	g.Add(func() error {
		defer close(done)
		var err error
		if tc != nil {
			err = srv.ServeTLS(ln, tc)
		} else {
			err = srv.Serve(ln)
		}
		if stopping.Load() {
			return nil
		}
		return failures.add("http server", err)
	}, func(error) {
		api.BeginShutdown()
		select {
		case <-done:
			return
		default:
		}
		stopping.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			logger.Warn("http shutdown timed out; closing connections", "err", err)
			_ = srv.Close()
		}
	})
}

// addPprof adds Go's net/http/pprof profiles served on ln, apart from the
// API. A failure of it is ignored: profiles are not worth stopping for.
func addPprof(g *rungroup.Group, ln net.Listener) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	addUntilDone(g, func(ctx context.Context) error {
		stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
		defer stop()
		_ = srv.Serve(ln)
		<-ctx.Done()
		return nil
	})
}

// listeners are the daemon's bound sockets; tcp and pprof are nil when
// disabled.
type listeners struct {
	http, tcp, pprof net.Listener
}

// listen binds --http-addr, --tcp-addr and --pprof-addr (the last two when
// set); on an error it closes what it had bound.
func listen(cfg config) (listeners, error) {
	var lns listeners
	var err error
	if lns.http, err = net.Listen("tcp", cfg.httpAddr); err != nil {
		return lns, fmt.Errorf("listen on --http-addr: %w", err)
	}
	if cfg.ilp.TCPAddr != "" {
		if lns.tcp, err = net.Listen("tcp", cfg.ilp.TCPAddr); err != nil {
			lns.close()
			return lns, fmt.Errorf("listen on --tcp-addr: %w", err)
		}
	}
	if cfg.pprofAddr != "" {
		if lns.pprof, err = net.Listen("tcp", cfg.pprofAddr); err != nil {
			lns.close()
			return lns, fmt.Errorf("listen on --pprof-addr: %w", err)
		}
	}
	return lns, nil
}

// close closes every bound listener.
func (l listeners) close() {
	for _, ln := range []net.Listener{l.http, l.tcp, l.pprof} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// portsFile is what --ports-file holds: the bound addresses, so that a
// harness started ingestd on port 0 can find it.
type portsFile struct {
	HTTP string `json:"http"`
	TCP  string `json:"tcp"`
	// Pprof is --pprof-addr's bound address, absent when it is off.
	Pprof string `json:"pprof,omitempty"`
}

// writePortsFile writes the bound addresses to path atomically (temporary
// file, fsync, rename): a reader sees the whole file or none.
func writePortsFile(path string, pf portsFile) error {
	b, err := json.Marshal(pf)
	if err != nil {
		return err
	}
	if err := cli.WriteFileAtomic(path, append(b, '\n')); err != nil {
		return fmt.Errorf("--ports-file: %w", err)
	}
	return nil
}

// wire opens the feed over db (the sequencer, its write side, is returned
// to be run; the drainer, its read side, goes to the API), the ILP ingest
// and the HTTP API that serves both, registering their metrics on reg (and
// serving reg's), with sec's access control and audit log (nil: none).
func wire(cfg config, db store.Backend, logger *slog.Logger, reg *prometheus.Registry, sec *security) (*feed.Sequencer, *ilp.Ingest, *httpapi.API, error) {
	// One string limit for every write path (docs/security.md#write-validation).
	cfg.feed.MaxStringBytes = cfg.ilp.Limits.MaxStringBytes
	seq, drainer, err := feed.Open(cfg.feed, db, logger, reg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("start feed: %w", err)
	}
	// One name limit for every way a name enters (docs/contract.md#names).
	cfg.ilp.Limits.MaxKeyBytes = cfg.feed.MaxNameBytes
	in, err := ilp.New(cfg.ilp, seq, cfg.feed.SubmitTimeout, logger, reg)
	if err != nil {
		return nil, nil, nil, err
	}
	opts := httpapi.Options{
		Tables: drainer, Drains: drainer, Rows: drainer, Consumers: drainer,
		Creator: seq, Admin: seq, Writer: seq, WriteV1: in.HandlerV1(), WriteV2: in.HandlerV2(),
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		APISpec: ingestd.APISpec(), Logger: logger, MaxPageBytes: cfg.http.DrainMaxPageBytes, MaxResponseBytesInflight: cfg.http.MaxResponseBytesInflight,
		MaxResponseBytesPerClient: cfg.http.MaxResponseBytesPerClient,
		MaxDrainLimit:             cfg.feed.MaxDrainLimit, SubmitTimeout: cfg.feed.SubmitTimeout,
		SQLMaxStatementBytes: cfg.http.SQLMaxStatementBytes, SQLMaxScanRows: cfg.http.SQLMaxScanRows,
		SQLMaxInsertRows: cfg.http.SQLMaxInsertRows, SQLMaxInflightBytes: cfg.http.SQLMaxInflightBytes, SQLMaxColumns: cfg.feed.MaxColumnsPerTable + 1, SQLMaxInValues: cfg.feed.MaxDrainFilterValues,
		Stats: drainer, Gatherer: reg, StatusSampleInterval: cfg.http.StatusSampleInterval,
		StatusSamples: cfg.http.StatusSamples, StatusMaxTables: cfg.http.StatusMaxTables, StatusMaxConsumers: cfg.http.StatusMaxConsumers, MaxDatabases: cfg.http.MaxDatabases,
		TLS: describeTLS(cfg.auth), Store: describeStore(cfg),
	}
	if hr, ok := db.(store.HealthReporter); ok {
		opts.Health = hr.Unhealthy
	}
	if sec != nil {
		opts.Auth, opts.Audit, opts.Protected = sec.authn, sec.audit, sec.protected
		in.SetAuth(sec.ilpAuth())
	}
	api := httpapi.New(opts, reg)
	return seq, in, api, nil
}

// describeTLS says, for the status page, whether the listeners use TLS
// and what they ask of client certificates.
func describeTLS(c auth.Config) string {
	switch {
	case c.TLSCert == "":
		return "off"
	case c.TLSClientCA == "":
		return "on"
	case c.TLSClientAuth == auth.ClientAuthRequire:
		return "on, client certificates required"
	}
	return "on, client certificates verified if given"
}

// describeStore names the storage backend for the status page.
func describeStore(cfg config) string {
	if cfg.backend == "jetstream" {
		return fmt.Sprintf("jetstream (%d replicas)", cfg.jetstream.Replicas)
	}
	return "badger"
}

// setMemoryLimit sets the runtime's soft memory limit to limit bytes unless
// it is 0 or GOMEMLIMIT is set (the environment wins, as Go documents for
// its own variable).
func setMemoryLimit(limit int64, logger *slog.Logger) {
	if limit == 0 || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetMemoryLimit(limit)
	logger.Debug("memory limit set", "bytes", limit)
}
