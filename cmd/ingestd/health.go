package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

// runHealth is `ingestd health`: it asks a running ingestd's /health and
// exits 0 when it answers 200 (ready), 1 otherwise. Container images
// without a shell use it as their health check.
func runHealth(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("ingestd health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://127.0.0.1:8086/health", "health URL of the ingestd to probe")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		fmt.Fprintln(stderr, "ingestd health:", err)
		return 2
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(stderr, "ingestd health:", err)
		return 1
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(stderr, "ingestd health: not ready:", resp.Status)
		return 1
	}
	return 0
}
