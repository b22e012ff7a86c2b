package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/ingestd/ingestd/cmd/ingestd/cli"
)

// runHealth is `ingestd health`: it asks a running ingestd's /health,
// prints its state on stdout ("pass: ready for queries and writes (ingestd
// 0.1.0)") and exits 0 when it answers 200 (ready), 1 otherwise (the state
// then goes to stderr). Container images without a shell use it as their
// health check. An https:// URL is checked with the system's roots plus
// --ca-file, presenting --client-cert when the server requires one.
func runHealth(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ingestd health", flag.ContinueOnError)
	url := fs.String("url", "http://127.0.0.1:8086/health", "health URL of the ingestd to probe")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	var ctls cli.ClientTLS
	ctls.RegisterFlags(fs)
	cmd := &cli.Command{Name: "ingestd health", Usage: `Usage:
  ingestd health [--url URL] [--timeout DURATION] [--ca-file FILE] [--client-cert FILE --client-key FILE]
Prints a running ingestd's state from its /health; exit 0 when ready, 1 otherwise.
`}
	if code, done := cmd.Parse(fs, args, stdout, stderr); done {
		return code
	}
	if err := cli.ValidateURL(*url); err != nil {
		return cmd.UsageError(stderr, "--url: "+err.Error())
	}
	if *timeout <= 0 {
		return cmd.UsageError(stderr, "--timeout must be positive")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return cmd.UsageError(stderr, "--url: "+err.Error())
	}
	tr, err := ctls.Transport()
	if err != nil {
		return cmd.UsageError(stderr, err.Error())
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		fmt.Fprintln(stderr, "ingestd health: fail:", err)
		return cli.ExitFailure
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Status  string `json:"status"`
		Message string `json:"message"`
		Version string `json:"version"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body); err != nil || body.Status == "" {
		fmt.Fprintf(stderr, "ingestd health: fail: %s answered %s without a health body\n", *url, resp.Status)
		return cli.ExitFailure
	}
	state := fmt.Sprintf("%s: %s (ingestd %s)", body.Status, body.Message, body.Version)
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "ingestd health: %s, HTTP %d\n", state, resp.StatusCode)
		return cli.ExitFailure
	}
	fmt.Fprintln(stdout, state)
	return cli.ExitOK
}
