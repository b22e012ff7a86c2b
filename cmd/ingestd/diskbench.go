package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ingestd/ingestd/cmd/ingestd/cli"
	"github.com/ingestd/ingestd/httpapi/client"
)

// diskBenchConfig configures `ingestd diskbench`.
type diskBenchConfig struct {
	url        string
	table      string
	rounds     int
	rows       int
	batchLines int
	settle     time.Duration
	timeout    time.Duration
}

// runDiskBench is `ingestd diskbench`: it writes --rows rows to a table
// of a running ingestd and truncates it, --rounds times, and after each
// round waits until the server's ingestd_store_size_bytes (the data
// directory on disk, lsm + vlog) has not shrunk for --settle, so that its
// value-log collector has given back what it will. It prints each round's
// size and, at the end, the ratio of the last round's size to the first's.
func runDiskBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := diskBenchConfig{}
	fs := flag.NewFlagSet("ingestd diskbench", flag.ContinueOnError)
	fs.StringVar(&c.url, "url", "http://127.0.0.1:8086", "the ingestd's HTTP base URL")
	fs.StringVar(&c.table, "table", "diskbench", "the table to write and truncate (created WITH SYNC)")
	fs.IntVar(&c.rounds, "rounds", 20, "write+truncate rounds")
	fs.IntVar(&c.rows, "rows", 200_000, "rows per round (TSBS cpu-shaped: 2 tags, 10 float fields, 100 hosts)")
	fs.IntVar(&c.batchLines, "batch-lines", 5000, "lines per gzip request")
	fs.DurationVar(&c.settle, "settle", 5*time.Second, "after a round, wait until the size has not shrunk for this long (run the server with a --store-gc-interval well below it)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "give up after this long")
	cmd := &cli.Command{Name: "ingestd diskbench", Usage: `Usage:
  ingestd diskbench [flags]
Write+truncate rounds against a running ingestd: is disk space given back?
`}
	if code, done := cmd.Parse(fs, args, stdout, stderr); done {
		return code
	}
	if c.rounds < 1 || c.rows < 1 || c.batchLines < 1 || c.settle <= 0 || c.timeout <= 0 {
		return cmd.UsageError(stderr, "--rounds, --rows, --batch-lines, --settle and --timeout must be positive")
	}
	if _, err := client.New(c.url); err != nil {
		return cmd.UsageError(stderr, "--url: "+err.Error())
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := c.run(ctx, stdout); err != nil {
		fmt.Fprintln(stderr, "ingestd diskbench:", err)
		return cli.ExitFailure
	}
	return cli.ExitOK
}

func (c *diskBenchConfig) run(ctx context.Context, out io.Writer) error {
	api, err := client.New(c.url, client.WithHTTPClient(&http.Client{Timeout: time.Minute}))
	if err != nil {
		return fmt.Errorf("--url: %w", err)
	}
	if _, _, err := api.CreateTable(ctx, c.table, client.TableOptions{Sync: new(true)}); err != nil {
		return err
	}
	var first int64
	ts := time.Now().Add(-time.Hour).UnixNano()
	for round := 1; round <= c.rounds; round++ {
		start := time.Now()
		for sent := 0; sent < c.rows; {
			n := min(c.batchLines, c.rows-sent)
			var raw bytes.Buffer
			for i := range n {
				row := sent + i
				fmt.Fprintf(&raw, "%s,hostname=host_%d,region=r%d", c.table, row%100, row%7)
				for f := range 10 {
					sep := ","
					if f == 0 {
						sep = " "
					}
					fmt.Fprintf(&raw, "%susage_%d=%d.%d", sep, f, (row*(f+3))%100, row%10)
				}
				fmt.Fprintf(&raw, " %d\n", ts+int64(row/100)*int64(time.Second))
			}
			if err := api.Write(ctx, raw.Bytes(), client.WriteOptions{Gzip: true}); err != nil {
				return err
			}
			sent += n
		}
		if _, err := api.Truncate(ctx, c.table); err != nil {
			return err
		}
		size, err := c.settled(ctx, api)
		if err != nil {
			return err
		}
		if round == 1 {
			first = size
		}
		fmt.Fprintf(out, "round %d: %d rows written and truncated in %s; data directory %d bytes (%.2f× round 1)\n",
			round, c.rows, time.Since(start).Round(time.Millisecond), size, float64(size)/float64(first))
	}
	return nil
}

// settled polls the size until it has not shrunk for c.settle.
func (c *diskBenchConfig) settled(ctx context.Context, api *client.Client) (int64, error) {
	low, since := int64(-1), time.Now()
	for {
		size, err := c.size(ctx, api)
		if err != nil {
			return 0, err
		}
		if low < 0 || size < low {
			low, since = size, time.Now()
		}
		if time.Since(since) >= c.settle {
			return low, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// size is ingestd_store_size_bytes summed over its parts.
func (c *diskBenchConfig) size(ctx context.Context, api *client.Client) (int64, error) {
	resp, err := api.Do(ctx, http.MethodGet, "/metrics", nil, nil)
	if err != nil {
		return 0, err
	}
	body := resp.Body
	var total int64
	found := false
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "ingestd_store_size_bytes{") {
			continue
		}
		f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("read %q: %w", line, err)
		}
		total += int64(f)
		found = true
	}
	if !found {
		return 0, errors.New("/metrics has no ingestd_store_size_bytes")
	}
	return total, nil
}
