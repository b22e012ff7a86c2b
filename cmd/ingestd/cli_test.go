package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/cmd/ingestd/cli"
	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/httpapi"
	"github.com/ingestd/ingestd/ilp"
	"github.com/ingestd/ingestd/store/rowengine"
)

// runCLI runs the command line as main does and returns its exit code,
// stdout and stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestHelp: the daemon's help is on stdout, exit 0, in sections by area,
// every flag once with its environment variable, sizes in units.
func TestHelp(t *testing.T) {
	code, out, errOut := runCLI(t, "--help")
	require.Equal(t, cli.ExitOK, code)
	require.Empty(t, errOut)
	var cfg config
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	cfg.registerFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		require.Equal(t, 1, strings.Count(out, "\n  --"+f.Name+" "), "--%s listed once", f.Name)
		require.Contains(t, out, "$"+cli.EnvName("INGESTD", f.Name), f.Name)
	})
	last := -1
	for _, section := range []string{"\nHTTP:\n", "\nWrites (line protocol over HTTP and TCP):\n", "\nTCP (line protocol over TCP):\n", "\nSecurity (tokens, TLS):\n",
		"\nFeed (sequencer, tables, drain):\n", "\nStore (badger):\n", "\nLogging:\n", "\nProcess:\n"} {
		i := strings.Index(out, section)
		require.Greater(t, i, last, "section %q in order", section)
		last = i
	}
	tcp := out[strings.Index(out, "\nTCP (line"):strings.Index(out, "\nSecurity (")]
	require.Contains(t, tcp, "--tcp-addr ADDR")
	require.NotContains(t, tcp, "--max-body-bytes", "an HTTP write flag is not under TCP")
	for _, want := range []string{
		"--max-body-bytes SIZE  ($INGESTD_MAX_BODY_BYTES, default 32MiB)",
		"--store-min-free-bytes SIZE  ($INGESTD_STORE_MIN_FREE_BYTES, default 256MiB)",
		"--http-read-header-timeout DURATION  ($INGESTD_HTTP_READ_HEADER_TIMEOUT, default 10s)",
		"--data-dir DIR  ($INGESTD_DATA_DIR, default \"./data\")",
		"--http-addr ADDR  ($INGESTD_HTTP_ADDR, default \":8086\")",
		"--auth-file FILE  ($INGESTD_AUTH_FILE)",
		"--sync-tables GLOBS  ($INGESTD_SYNC_TABLES)",
		"--store-unsafe-no-sync  ($INGESTD_STORE_UNSAFE_NO_SYNC)",
	} {
		require.Contains(t, out, want)
	}
	code, same, _ := runCLI(t, "help")
	require.Equal(t, cli.ExitOK, code)
	require.Equal(t, out, same, "ingestd help is ingestd --help")
}

// TestSubcommandHelp: every subcommand's --help, and help CMD, is on
// stdout with exit 0; the mirror marks its required flags.
func TestSubcommandHelp(t *testing.T) {
	for _, cmd := range []string{"mirror", "bench", "diskbench", "health", "token", "version"} {
		for _, args := range [][]string{{cmd, "--help"}, {cmd, "-h"}, {"help", cmd}} {
			code, out, errOut := runCLI(t, args...)
			require.Equal(t, cli.ExitOK, code, "%v", args)
			require.Empty(t, errOut, "%v", args)
			require.True(t, strings.HasPrefix(out, "Usage:\n  ingestd "+cmd), "%v: %s", args, out)
		}
	}
	_, out, _ := runCLI(t, "mirror", "--help")
	for f, typ := range map[string]string{"source": "URL", "table": "STRING", "target": "URL"} {
		require.Contains(t, out, "--"+f+" "+typ+"  (required, $INGESTD_MIRROR_"+strings.ToUpper(strings.ReplaceAll(f, "-", "_"))+")")
	}
	// Required for an http(s) target only: a postgres:// one keeps its cursor.
	require.Contains(t, out, "--cursor-file FILE  ($INGESTD_MIRROR_CURSOR_FILE)")
	require.Contains(t, out, "--limit INT  ($INGESTD_MIRROR_LIMIT, default 5000)")
}

// TestBadUsage: a bad flag, value or command is one line on stderr that
// points at --help, exit 2, nothing on stdout.
func TestBadUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--max-body-bytes", "32XB"},
		{"--no-such-flag"},
		{"--log-level", "loud"},
		{"stray-argument-is-a-command"},
		{"--data-dir", "x", "stray"},
		{"mirror", "--limit", "many"},
		{"mirror"},
		{"health", "--timeout", "soon"},
		{"bench", "--bogus"},
		{"version", "extra"},
		{"token"},
		{"token", "--auth-file", "f"},
		{"token", "create", "--auth-file", "f"},
	} {
		code, out, errOut := runCLI(t, args...)
		require.Equal(t, cli.ExitBadUsage, code, "%v", args)
		require.Empty(t, out, "%v", args)
		require.Equal(t, 1, strings.Count(errOut, "\n"), "%v: one line: %q", args, errOut)
		require.Contains(t, errOut, "--help", "%v", args)
	}
	_, _, errOut := runCLI(t, "--max-body-bytes", "32XB")
	require.Contains(t, errOut, `not a size (e.g. 32MiB, 1GB, 4096): "32XB"`)
}

// TestSizeFlags: byte counts take units on the command line and in the
// environment; plain integers still work.
func TestSizeFlags(t *testing.T) {
	t.Setenv("INGESTD_STORE_MEMTABLE_BYTES", "1 GiB")
	cfg := config{store: rowengine.DefaultConfig(), feed: feed.DefaultConfig(), ilp: ilp.DefaultConfig(), http: httpapi.DefaultConfig()}
	fs := flag.NewFlagSet("ingestd", flag.ContinueOnError)
	cmd := &cli.Command{Name: "ingestd", EnvPrefix: "INGESTD", Groups: cfg.registerFlags(fs)}
	code, done := cmd.Parse(fs, []string{"--max-body-bytes", "32MiB", "--http-max-inflight-write-bytes=1GB", "--max-line-bytes", "4096",
		"--store-block-cache-bytes", "64kib"}, io.Discard, io.Discard)
	require.False(t, done, "exit %d", code)
	require.Equal(t, int64(32<<20), cfg.ilp.MaxBodyBytes)
	require.Equal(t, int64(1_000_000_000), cfg.ilp.MaxInflightWriteBytes)
	require.Equal(t, 4096, cfg.ilp.Limits.MaxLineBytes)
	require.Equal(t, int64(64<<10), cfg.store.BlockCacheBytes)
	require.Equal(t, int64(1<<30), cfg.store.MemTableBytes)
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errOut := runCLI(t, args...)
		require.Equal(t, cli.ExitOK, code)
		require.Empty(t, errOut)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		require.Len(t, lines, 4, out)
		require.Equal(t, "ingestd "+httpapi.Version, lines[0])
		require.True(t, strings.HasPrefix(lines[1], "commit: "))
		require.True(t, strings.HasPrefix(lines[2], "built:  "))
		require.Equal(t, "go:     "+runtime.Version(), lines[3])
	}
}

// TestHealthCommand prints a live server's state and exits 0; a server
// that does not answer is exit 1 with the reason on stderr.
func TestHealthCommand(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	code, out, errOut := runCLI(t, "health", "--url", d.URL+"/health")
	require.Equal(t, cli.ExitOK, code, errOut)
	require.Equal(t, "pass: ready for queries and writes (ingestd "+httpapi.Version+")\n", out)
	require.Empty(t, errOut)

	code, out, errOut = runCLI(t, "health", "--url", d.URL+"/ping", "--timeout", "2s")
	require.Equal(t, cli.ExitFailure, code)
	require.Empty(t, out)
	require.Contains(t, errOut, "without a health body")
	d.stop(t)
	code, _, errOut = runCLI(t, "health", "--url", d.URL+"/health", "--timeout", "2s")
	require.Equal(t, cli.ExitFailure, code)
	require.Contains(t, errOut, "ingestd health: fail:")
}
