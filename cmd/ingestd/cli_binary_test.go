package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/cmd/ingestd/cli"
)

// buildIngestd builds this command into a temporary directory of t and
// returns the binary's path.
func buildIngestd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ingestd")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// runBinary runs bin with args in dir, without the caller's INGESTD_*
// variables, and returns its exit code, stdout and stderr.
func runBinary(t *testing.T, bin, dir string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "INGESTD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), stdout.String(), stderr.String()
	}
	require.NoError(t, err)
	return 0, stdout.String(), stderr.String()
}

// TestBinaryBadUsage runs the built binary: a bad flag or value of the
// daemon or of any subcommand, listen addresses and URLs included, is one
// line on stderr ending in "(see ingestd[ CMD] --help)", exit 2, nothing
// on stdout, and nothing is created in the working directory (the
// default --data-dir ./data) or at --data-dir.
func TestBinaryBadUsage(t *testing.T) {
	bin := buildIngestd(t)
	for _, c := range []struct {
		name string
		args []string
		want string // in the line
	}{
		{"http-addr without port", []string{"--http-addr", "nonsense"}, `--http-addr: "nonsense" is not HOST:PORT`},
		{"tcp-addr without port", []string{"--tcp-addr", "nonsense"}, `--tcp-addr: "nonsense" is not HOST:PORT`},
		{"port out of range", []string{"--http-addr", ":99999"}, `port "99999" is not a number from 0 to 65535`},
		{"negative port", []string{"--tcp-addr", "127.0.0.1:-1"}, `port "-1"`},
		{"service name", []string{"--http-addr", ":http"}, `port "http"`},
		{"bad host", []string{"--http-addr", "bad_host:8086"}, `host "bad_host"`},
		{"empty http-addr", []string{"--http-addr", ""}, `--http-addr: "" is not HOST:PORT`},
		{"pprof-addr", []string{"--pprof-addr", "localhost"}, `--pprof-addr`},
		{"data-dir and a bad address", []string{"--data-dir", "d", "--http-addr", "x"}, `--http-addr`},
		{"unknown flag", []string{"--no-such-flag"}, "flag provided but not defined"},
		{"bad duration", []string{"--shutdown-timeout", "soon"}, "--shutdown-timeout"},
		{"bad size", []string{"--max-body-bytes", "32XB"}, "not a size"},
		{"token scope", []string{"token", "create", "--auth-file", "auth.yaml", "--name", "x", "--scope", "root"}, `--scope: scope "root"`},
		{"token without name", []string{"token", "create", "--auth-file", "auth.yaml", "--scope", "write"}, "--name"},
		{"token command", []string{"token", "bogus", "--auth-file", "auth.yaml"}, "unknown command"},
		{"mirror metrics-addr", []string{"mirror", "--source", "http://a:8086", "--table", "t", "--target", "http://b:8086/write", "--cursor-file", "c", "--metrics-addr", "x"}, "--metrics-addr"},
		{"mirror source", []string{"mirror", "--source", "nonsense", "--table", "t", "--target", "http://b:8086/write", "--cursor-file", "c"}, "--source"},
		{"health url", []string{"health", "--url", "nonsense"}, "--url"},
		{"health port", []string{"health", "--url", "http://127.0.0.1:99999/health"}, "--url"},
		{"health timeout", []string{"health", "--timeout", "0s"}, "--timeout"},
		{"diskbench url", []string{"diskbench", "--url", "nonsense"}, "--url"},
		{"bench tcp-addr", []string{"bench", "--tcp-addr", "nonsense"}, "--tcp-addr"},
		{"bench url", []string{"bench", "--url", "ftp://x"}, "--url"},
		{"version", []string{"version", "extra"}, "unexpected argument"},
		{"command", []string{"nonsense"}, "unknown command"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			code, out, errOut := runBinary(t, bin, dir, c.args...)
			require.Equal(t, cli.ExitBadUsage, code, "stderr: %s", errOut)
			require.Empty(t, out)
			require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
			require.Regexp(t, `^ingestd( [a-z]+)?: .*\(see ingestd( [a-z]+)? --help\)\n$`, errOut)
			require.Contains(t, errOut, c.want)
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Empty(t, entries, "nothing created before the flags were checked")
		})
	}
}

// TestBinaryFilesBeforeStore: an auth file or a TLS file that cannot be
// read is a runtime failure (exit 1, logged), found before the data
// directory is created.
func TestBinaryFilesBeforeStore(t *testing.T) {
	bin := buildIngestd(t)
	for _, args := range [][]string{
		{"--auth-file", "missing.yaml"},
		{"--tls-cert", "missing.pem", "--tls-key", "missing.key"},
	} {
		dir := t.TempDir()
		code, _, errOut := runBinary(t, bin, dir, append([]string{"--data-dir", "data", "--http-addr", "127.0.0.1:0", "--tcp-addr", ""}, args...)...)
		require.Equal(t, cli.ExitFailure, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, "missing", "%v", args)
		_, err := os.Stat(filepath.Join(dir, "data"))
		require.ErrorIs(t, err, os.ErrNotExist, "%v: the data directory was not created", args)
	}
}

// TestBinaryHelpPlaceholders: in the help of the daemon and of every
// subcommand, each flag's placeholder is a type (STRING, DURATION, ADDR…),
// never a word of its usage; booleans have none.
func TestBinaryHelpPlaceholders(t *testing.T) {
	bin := buildIngestd(t)
	flagLine := regexp.MustCompile(`^  --([a-z0-9-]+)(?: ([^ ]+))?  \(`)
	types := map[string]bool{}
	for _, typ := range strings.Fields("STRING INT UINT FLOAT DURATION SIZE ADDR FILE DIR URL URLS GLOBS SCOPE TIME PIDS") {
		types[typ] = true
	}
	for _, cmd := range []string{"", "mirror", "bench", "diskbench", "health", "token"} {
		args := []string{"--help"}
		if cmd != "" {
			args = []string{cmd, "--help"}
		}
		code, out, errOut := runBinary(t, bin, t.TempDir(), args...)
		require.Equal(t, cli.ExitOK, code, errOut)
		n := 0
		for _, line := range strings.Split(out, "\n") {
			m := flagLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			n++
			if m[2] != "" {
				require.True(t, types[m[2]], "ingestd %s --help: --%s has placeholder %q: %s", cmd, m[1], m[2], line)
			}
		}
		require.Positive(t, n, "ingestd %s --help lists flags", cmd)
	}
	_, out, _ := runBinary(t, bin, t.TempDir(), "--help")
	for _, want := range []string{"--auth-file FILE ", "--http-addr ADDR ", "--tcp-addr ADDR ", "--data-dir DIR ", "--feed-history DURATION ", "--insecure-open  ("} {
		require.Contains(t, out, want)
	}
}
