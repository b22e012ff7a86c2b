package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/httpapi"
	"github.com/ingestd/ingestd/ilp"
	"github.com/ingestd/ingestd/store/badgerstore"
	"github.com/ingestd/ingestd/store/rowengine"
)

// serverURL is the in-process ingestd the examples and tests talk to
// (started by TestMain: real badger in a temporary directory, the real
// sequencer, ILP handlers and HTTP API on a loopback listener).
var serverURL string

func TestMain(m *testing.M) {
	url, stop, err := startIngestd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start ingestd:", err)
		os.Exit(1)
	}
	serverURL = url
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop ingestd:", err)
		code = 1
	}
	os.Exit(code)
}

// startIngestd wires an ingestd as cmd/ingestd does (without TCP and
// access control) and serves its API; stop shuts it down in order.
func startIngestd() (string, func() error, error) {
	dir, err := os.MkdirTemp("", "ingestd-client-test")
	if err != nil {
		return "", nil, err
	}
	logger := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	scfg := rowengine.DefaultConfig()
	scfg.Dir = dir
	db, err := badgerstore.Open(scfg, logger, reg)
	if err != nil {
		return "", nil, err
	}
	fcfg := feed.DefaultConfig()
	seq, drainer, err := feed.Open(fcfg, db, logger, reg)
	if err != nil {
		return "", nil, err
	}
	icfg := ilp.DefaultConfig()
	// Writes slowed by the race detector would find no parse slot in
	// time; ilp's tests check that refusal.
	icfg.WriteQueueTimeout = time.Minute
	in, err := ilp.New(icfg, seq, fcfg.SubmitTimeout, logger, reg)
	if err != nil {
		return "", nil, err
	}
	api := httpapi.New(httpapi.Options{
		Tables: drainer, Drains: drainer, Rows: drainer, Consumers: drainer, Stats: drainer,
		Creator: seq, Admin: seq, Writer: seq, WriteV1: in.HandlerV1(), WriteV2: in.HandlerV2(), Logger: logger,
		MaxPageBytes: httpapi.DefaultConfig().DrainMaxPageBytes, MaxDrainLimit: fcfg.MaxDrainLimit, SubmitTimeout: fcfg.SubmitTimeout,
		MaxDatabases: httpapi.DefaultConfig().MaxDatabases,
	}, reg)
	ctx, cancel := context.WithCancel(context.Background())
	seqDone := make(chan error, 1)
	go func() { seqDone <- seq.Run(ctx) }()
	api.SetReady(true)
	srv := httptest.NewServer(api)
	stop := func() error {
		api.BeginShutdown()
		srv.Close()
		cancel()
		err := <-seqDone
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		_ = os.RemoveAll(dir)
		return err
	}
	return srv.URL, stop, nil
}
