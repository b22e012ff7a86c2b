package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store/testdeadline"
)

// daemon is the whole ingestd running in-process on 127.0.0.1:0.
type daemon struct {
	URL     string // http://127.0.0.1:port
	TCPAddr string
	// hc, when set, is the client of the cl* helpers of clients_test.go
	// (TLS roots, a token); nil is http.DefaultClient.
	hc     *http.Client
	cancel context.CancelFunc
	done   chan error
}

// testConfig returns the defaults with loopback listeners on free ports and
// the data in dir.
func testConfig(dir string) config {
	cfg := defaultConfig()
	cfg.httpAddr = "127.0.0.1:0"
	cfg.memoryLimitBytes = 0 // the test binary's runtime is shared
	cfg.store.Dir = dir
	cfg.ilp.TCPAddr = "127.0.0.1:0"
	// Writes slowed by the race detector on a busy machine would trip
	// the overload refusals, which ilp's tests check on their own.
	cfg.ilp.MaxWriteDelay = 0
	cfg.ilp.WriteQueueTimeout = time.Minute
	return cfg
}

// startDaemon runs serve with cfg until the test ends (or stop is called).
func startDaemon(t testing.TB, cfg config) *daemon {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{cancel: cancel, done: make(chan error, 1)}
	addrs := make(chan [2]string, 1)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() {
		d.done <- serve(ctx, cfg, logger, func(h, tcp string) { addrs <- [2]string{h, tcp} })
	}()
	select {
	case a := <-addrs:
		d.URL, d.TCPAddr = "http://"+a[0], a[1]
	case err := <-d.done:
		cancel()
		t.Fatalf("daemon did not start: %v", err)
	case <-time.After(testdeadline.Scale(30 * time.Second)):
		cancel()
		t.Fatal("daemon did not start")
	}
	t.Cleanup(func() { d.stop(t) })
	return d
}

// client is d.hc, or http.DefaultClient.
func (d *daemon) client() *http.Client {
	if d.hc != nil {
		return d.hc
	}
	return http.DefaultClient
}

// stop shuts the daemon down gracefully and requires a clean exit. It may
// be called more than once.
func (d *daemon) stop(t testing.TB) {
	t.Helper()
	if d.done == nil {
		return
	}
	d.cancel()
	require.NoError(t, <-d.done)
	d.done = nil
}
