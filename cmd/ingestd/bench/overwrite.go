package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/ingestd/ingestd/httpapi/client"
)

// overwriteTable is the table overwrite mode writes.
const overwriteTable = "overwrite"

// benchOverwrite writes --overwrite-points points (--scale series ×
// points/scale timestamps, 10 s apart) --overwrites times each, one request
// per --overwrites-per-request passes over all of them (so each commit
// holds that many fragments of every point), the first pass setting the
// value column and four more, every later one the value column and one of
// the four in turn (so a point's row has the same five columns at every K,
// each from its latest write); then it drains the table in
// line protocol pages of --drain-limit rows and copies it by time range
// (/rows, pages of up to 10,000), timing both and checking the counts.
// It reports the first and the last request's rate and their ratio: a
// point's K-th write should cost what its first did.
func benchOverwrite(ctx context.Context, cfg *benchConfig, t *benchTarget, out io.Writer, res *benchResult) error {
	points, per := cfg.overwritePoints, cfg.overwritesPerRequest
	series := max(min(cfg.scale, points), 1)
	perSeries := (points + series - 1) / series
	points = series * perSeries
	requests := (cfg.overwrites + per - 1) / per
	fmt.Fprintf(out, "overwrite: %d points (%d series × %d timestamps) written %d times, %d fragments of each point per request (%d requests of %d lines)\n",
		points, series, perSeries, cfg.overwrites, per, requests, points*per)
	res.set("points", points)
	res.set("overwrites", cfg.overwrites)
	res.set("per_request", per)
	if err := t.prepare(ctx, []string{overwriteTable}); err != nil {
		return err
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var body []byte
	var first, last, total time.Duration
	cpu0, cpuErr := readProcCPU(cfg.serverPID)
	for r := range requests {
		body = body[:0]
		for m := range per {
			pass := r*per + m
			if pass >= cfg.overwrites {
				break
			}
			for s := range series {
				for j := range perSeries {
					body = append(body, overwriteTable+",host=h"...)
					body = strconv.AppendInt(body, int64(s), 10)
					body = append(body, " v="...)
					body = strconv.AppendInt(body, int64(pass), 10)
					for c := range 4 {
						if pass == 0 || c == pass%4 {
							body = append(body, "i,c"...)
							body = strconv.AppendInt(body, int64(c), 10)
							body = append(body, '=')
							body = strconv.AppendInt(body, int64(pass), 10)
						}
					}
					body = append(body, "i "...)
					body = strconv.AppendInt(body, start+int64(j)*int64(10*time.Second), 10)
					body = append(body, '\n')
				}
			}
		}
		t0 := time.Now()
		if err := t.api.Write(ctx, body, client.WriteOptions{}); err != nil {
			return fmt.Errorf("request %d: %w", r+1, err)
		}
		dur := time.Since(t0)
		total += dur
		if r == 0 {
			first = dur
		}
		last = dur
	}
	cpu1, err := readProcCPU(cfg.serverPID)
	lines := float64(points * per)
	firstRate, lastRate := lines/first.Seconds(), lines/last.Seconds()
	if requests*per > cfg.overwrites { // the last request holds fewer passes
		lastRate = float64(points*(cfg.overwrites-(requests-1)*per)) / last.Seconds()
	}
	fmt.Fprintf(out, "writes: %d lines in %s: %.0f lines/s; first request %.0f lines/s, last %.0f lines/s (last/first %.2f)\n",
		points*cfg.overwrites, total.Round(time.Millisecond), float64(points*cfg.overwrites)/total.Seconds(), firstRate, lastRate, lastRate/firstRate)
	res.set("lines_per_s", float64(points*cfg.overwrites)/total.Seconds())
	res.set("first_lines_per_s", firstRate)
	res.set("last_lines_per_s", lastRate)
	res.set("last_first_ratio", lastRate/firstRate)
	if cpuErr == nil && err == nil && cfg.serverPID > 0 {
		res.set("cpu_s", (cpu1 - cpu0).Seconds())
	}

	st, err := t.syncStatus(ctx, overwriteTable)
	if err != nil {
		return err
	}
	var pg client.Page
	var after uint64
	rows, pages := 0, 0
	t0 := time.Now()
	for {
		req := client.DrainRequest{Table: overwriteTable, Epoch: st.Epoch, After: after, Limit: cfg.drainLimit, Format: client.FormatLP}
		if err := t.api.DrainInto(ctx, req, &pg); err != nil {
			return fmt.Errorf("drain after %d: %w", after, err)
		}
		rows += pg.Lines()
		pages++
		if pg.Next < after || (pg.Lines() > 0 && pg.Next == after) {
			return fmt.Errorf("drain: cursor did not advance (after %d, next %d)", after, pg.Next)
		}
		after = pg.Next
		if !pg.More {
			break
		}
	}
	drain := time.Since(t0)
	if want := points * cfg.overwrites; rows != want {
		return fmt.Errorf("drain: %d rows, want %d (one per fragment)", rows, want)
	}
	lastLine := pg.Body[bytes.LastIndexByte(pg.Body[:len(pg.Body)-1], '\n')+1:]
	wantV := fmt.Sprintf(" v=%di", cfg.overwrites-1)
	if !bytes.Contains(lastLine, []byte(wantV)) {
		return fmt.Errorf("drain: the last row %q is not its point's current row (%s)", lastLine, wantV)
	}
	fmt.Fprintf(out, "drain (lp, pages of %d): %d rows in %d pages in %s: %.0f rows/s\n",
		cfg.drainLimit, rows, pages, drain.Round(time.Millisecond), float64(rows)/drain.Seconds())
	res.set("drain_rows_per_s", float64(rows)/drain.Seconds())

	var cursor string
	copied := 0
	t0 = time.Now()
	for {
		p, err := t.api.Rows(ctx, client.RowsRequest{Table: overwriteTable, Limit: 10000, Cursor: cursor, Format: client.FormatLP})
		if err != nil {
			return fmt.Errorf("rows: %w", err)
		}
		copied += bytes.Count(p.Body, []byte{'\n'})
		if cursor = p.Cursor; cursor == "" {
			break
		}
	}
	dur := time.Since(t0)
	if copied != points {
		return fmt.Errorf("rows: %d rows, want %d (one per point)", copied, points)
	}
	fmt.Fprintf(out, "rows copy (lp, pages of 10000): %d rows in %s: %.0f rows/s\n", copied, dur.Round(time.Millisecond), float64(copied)/dur.Seconds())
	res.set("rows_rows_per_s", float64(copied)/dur.Seconds())
	res.set("verified", "ok")
	return nil
}
