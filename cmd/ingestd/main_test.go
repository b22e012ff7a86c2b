package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	rungroup "github.com/oklog/run"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ingestd/ingestd/cmd/ingestd/cli"
	"github.com/ingestd/ingestd/store/testdeadline"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestMemoryLimit checks --memory-limit-bytes: the runtime's soft limit is
// set from the flag, 0 leaves it alone, GOMEMLIMIT wins, and a negative
// value is refused.
func TestMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	logger := slog.New(slog.DiscardHandler)

	t.Setenv("GOMEMLIMIT", "")
	setMemoryLimit(3<<30, logger)
	require.Equal(t, int64(3<<30), debug.SetMemoryLimit(-1))
	setMemoryLimit(0, logger)
	require.Equal(t, int64(3<<30), debug.SetMemoryLimit(-1), "0 leaves the limit as it is")

	t.Setenv("GOMEMLIMIT", "5GiB")
	setMemoryLimit(2<<30, logger)
	require.Equal(t, int64(3<<30), debug.SetMemoryLimit(-1), "GOMEMLIMIT wins over the flag")

	var stderr bytes.Buffer
	require.Equal(t, 2, run(context.Background(), []string{"--memory-limit-bytes", "-1"}, io.Discard, &stderr))
	require.Contains(t, stderr.String(), "--memory-limit-bytes must not be negative")
}

// TestShutdownLimitAboveTimeout: a --shutdown-limit that leaves the HTTP
// requests' --shutdown-timeout no room is refused at start.
func TestShutdownLimitAboveTimeout(t *testing.T) {
	var stderr bytes.Buffer
	require.Equal(t, 2, run(context.Background(), []string{"--shutdown-timeout", "10s", "--shutdown-limit", "10s"}, io.Discard, &stderr))
	require.Contains(t, stderr.String(), "--shutdown-limit must be above --shutdown-timeout")
}

// TestPortsFile: --ports-file holds the bound addresses as JSON while the
// daemon runs (--pprof-addr's too when it is on) and is gone after it
// stopped; a file that cannot be written stops the start with exit 1.
func TestPortsFile(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.portsFile = filepath.Join(t.TempDir(), "ports.json")
	d := startDaemon(t, cfg)
	b, err := os.ReadFile(cfg.portsFile)
	require.NoError(t, err)
	require.JSONEq(t, fmt.Sprintf(`{"http":%q,"tcp":%q}`, strings.TrimPrefix(d.URL, "http://"), d.TCPAddr), string(b))
	d.stop(t)

	cfg.pprofAddr = "127.0.0.1:0"
	d = startDaemon(t, cfg)
	b, err = os.ReadFile(cfg.portsFile)
	require.NoError(t, err)
	var ports portsFile
	require.NoError(t, json.Unmarshal(b, &ports))
	resp, err := http.Get("http://" + ports.Pprof + "/debug/pprof/goroutine?debug=1")
	require.NoError(t, err, "pprof at the ports file's address")
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	entries, err := os.ReadDir(filepath.Dir(cfg.portsFile))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file is left beside it")
	d.stop(t)
	_, err = os.Stat(cfg.portsFile)
	require.ErrorIs(t, err, os.ErrNotExist, "removed on exit")

	var stderr bytes.Buffer
	code := run(context.Background(), []string{"--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--tcp-addr", "",
		"--ports-file", filepath.Join(t.TempDir(), "missing", "ports.json")}, io.Discard, &stderr)
	require.Equal(t, cli.ExitFailure, code)
	require.Contains(t, stderr.String(), "--ports-file")
}

// TestRunGroupOrder: the first actor to fail stops the group (the signal
// actor too, though no signal came), the others are stopped in the order
// they were added, each after the one before it finished, and the error
// joins the first failure with those returned while stopping.
func TestRunGroupOrder(t *testing.T) {
	var (
		g        rungroup.Group
		failures actorFailures
		mu       sync.Mutex
		stopped  []string
	)
	note := func(name string) {
		mu.Lock()
		defer mu.Unlock()
		stopped = append(stopped, name)
	}
	var logs bytes.Buffer
	addSignal(&g, context.Background(), slog.New(slog.NewTextHandler(&logs, nil)))
	fail := make(chan struct{})
	addUntilDone(&g, func(ctx context.Context) error {
		select {
		case <-fail:
			return failures.add("first", errors.New("broken"))
		case <-ctx.Done():
			return nil
		}
	})
	for _, name := range []string{"tcp", "sequencer"} {
		addUntilDone(&g, func(ctx context.Context) error {
			<-ctx.Done()
			time.Sleep(20 * time.Millisecond) // a slow commit: the next must wait for it
			note(name)
			return failures.add(name, errors.New("while stopping"))
		})
	}
	done := make(chan error, 1)
	go func() { done <- g.Run() }()
	close(fail)
	select {
	case <-done:
	case <-time.After(testdeadline.Scale(10 * time.Second)):
		t.Fatal("the group did not stop after an actor failed")
	}
	require.Equal(t, []string{"tcp", "sequencer"}, stopped)
	require.EqualError(t, failures.join(), "first: broken\ntcp: while stopping\nsequencer: while stopping")
	require.NotContains(t, logs.String(), "shutting down", "no signal came")
}
