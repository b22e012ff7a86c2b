package cli

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWriteFileAtomic: the file is replaced whole, no temporary file is
// left beside it, and a directory that does not exist is an error.
func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cursor.json")
	require.NoError(t, WriteFileAtomic(path, []byte("first\n")))
	require.NoError(t, WriteFileAtomic(path, []byte("second\n")))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "second\n", string(b))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	err = WriteFileAtomic(filepath.Join(dir, "missing", "f"), []byte("x"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestValidateLog and EnvName: the shared flags' rules.
func TestValidateLog(t *testing.T) {
	require.NoError(t, ValidateLog("debug", "json"))
	require.ErrorContains(t, ValidateLog("loud", "text"), "--log-level")
	require.ErrorContains(t, ValidateLog("info", "xml"), `--log-format must be text or json, got "xml"`)
	require.Equal(t, "INGESTD_MIRROR_MAX_BACKOFF", EnvName("INGESTD_MIRROR", "max-backoff"))
}

// TestParse: flags from the environment and sizes with units; help on
// stdout with exit 0; a bad flag one line on stderr with exit 2.
func TestParse(t *testing.T) {
	t.Setenv("X_LIMIT_BYTES", "2KiB")
	var limit int64
	var name string
	newFS := func() *flag.FlagSet {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.Int64Var(&limit, "limit-bytes", 1, "a size")
		fs.StringVar(&name, "name", "n", "a name")
		return fs
	}
	cmd := &Command{Name: "x", Usage: "Usage: x\n", EnvPrefix: "X", Required: map[string]bool{"name": true}}
	var stdout, stderr bytes.Buffer
	code, done := cmd.Parse(newFS(), []string{"--name", "a"}, &stdout, &stderr)
	require.False(t, done, "exit %d: %s", code, stderr.String())
	require.Equal(t, int64(2048), limit)
	require.Equal(t, "a", name)

	code, done = cmd.Parse(newFS(), []string{"--help"}, &stdout, &stderr)
	require.True(t, done)
	require.Equal(t, ExitOK, code)
	require.Contains(t, stdout.String(), "--limit-bytes SIZE  ($X_LIMIT_BYTES, default 1)")
	require.Contains(t, stdout.String(), "--name STRING  (required, $X_NAME)")

	code, done = cmd.Parse(newFS(), []string{"--nope"}, &stdout, &stderr)
	require.True(t, done)
	require.Equal(t, ExitBadUsage, code)
	require.Equal(t, "x: flag provided but not defined: --nope (see x --help)\n", stderr.String())
}

// TestLimitedHandler: one record of each message per interval passes, by
// the records' times; the next one passed counts those dropped.
func TestLimitedHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewLimitedHandler(slog.NewTextHandler(&buf, nil), time.Second))
	t0 := time.Now()
	emit := func(at time.Duration, msg string) {
		r := slog.NewRecord(t0.Add(at), slog.LevelWarn, msg, 0)
		require.NoError(t, log.Handler().Handle(context.Background(), r))
	}
	for i := range 10 {
		emit(time.Duration(i)*time.Millisecond, "a")
	}
	emit(0, "b")
	emit(1100*time.Millisecond, "a")
	out := buf.String()
	require.Equal(t, 3, strings.Count(out, "\n"), "%s", out)
	require.Contains(t, out, "msg=b")
	require.Contains(t, out, "msg=a suppressed=9")
}
