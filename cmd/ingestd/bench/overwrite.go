package bench

import (
	"bytes"
	"context"
	"errors"
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
// each from its latest write); then it drains the table in line protocol
// pages of --drain-limit rows and copies it by time range (/rows, pages of
// up to 10,000), each read repeated for at least a second, timing both and
// checking the counts.
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
	// Each read is repeated until a second has passed (at least once): a
	// small table's single drain is over in a few milliseconds, which one
	// scheduling hiccup would halve.
	var rows, pages, drains int
	t0 := time.Now()
	for drains == 0 || time.Since(t0) < overwriteReadFor {
		n, p, err := overwriteDrain(ctx, t, st.Epoch, cfg.drainLimit, cfg.overwrites)
		if err != nil {
			return err
		}
		if want := points * cfg.overwrites; n != want {
			return fmt.Errorf("drain: %d rows, want %d (one per fragment)", n, want)
		}
		rows, pages, drains = rows+n, pages+p, drains+1
	}
	drain := time.Since(t0)
	fmt.Fprintf(out, "drain (lp, pages of %d): %d rows in %d pages (%d drains of the table) in %s: %.0f rows/s\n",
		cfg.drainLimit, rows, pages, drains, drain.Round(time.Millisecond), float64(rows)/drain.Seconds())
	res.set("drain_rows_per_s", float64(rows)/drain.Seconds())

	copied, copies := 0, 0
	t0 = time.Now()
	for copies == 0 || time.Since(t0) < overwriteReadFor {
		n, err := overwriteCopy(ctx, t)
		if err != nil {
			return err
		}
		if n != points {
			return fmt.Errorf("rows: %d rows, want %d (one per point)", n, points)
		}
		copied, copies = copied+n, copies+1
	}
	dur := time.Since(t0)
	fmt.Fprintf(out, "rows copy (lp, pages of 10000): %d rows (%d copies of the table) in %s: %.0f rows/s\n", copied, copies, dur.Round(time.Millisecond), float64(copied)/dur.Seconds())
	res.set("rows_rows_per_s", float64(copied)/dur.Seconds())
	res.set("verified", "ok")
	return nil
}

// overwriteReadFor is how long overwrite mode repeats each read.
const overwriteReadFor = time.Second

// overwriteDrain drains the overwrite table from the start of epoch in
// line protocol pages of limit rows, checking that the cursor advances and
// that the first row and the last are their points' current rows (the
// value of pass overwrites-1). It returns the rows and pages read.
func overwriteDrain(ctx context.Context, t *benchTarget, epoch uint64, limit, overwrites int) (rows, pages int, err error) {
	var pg client.Page
	var after uint64
	wantV := []byte(fmt.Sprintf(" v=%di", overwrites-1))
	for {
		req := client.DrainRequest{Table: overwriteTable, Epoch: epoch, After: after, Limit: limit, Format: client.FormatLP}
		if err := t.api.DrainInto(ctx, req, &pg); err != nil {
			return rows, pages, fmt.Errorf("drain after %d: %w", after, err)
		}
		if after == 0 && len(pg.Body) > 0 {
			// The first write of the first point reads as its current row.
			if first, _, _ := bytes.Cut(pg.Body, []byte{'\n'}); !bytes.Contains(first, wantV) {
				return rows, pages, fmt.Errorf("drain: the first row %q is not its point's current row (%s)", first, wantV)
			}
		}
		rows += pg.Lines()
		pages++
		if pg.Next < after || (pg.Lines() > 0 && pg.Next == after) {
			return rows, pages, fmt.Errorf("drain: cursor did not advance (after %d, next %d)", after, pg.Next)
		}
		after = pg.Next
		if !pg.More {
			break
		}
	}
	if len(pg.Body) == 0 {
		return rows, pages, errors.New("drain: the last page is empty")
	}
	lastLine := pg.Body[bytes.LastIndexByte(pg.Body[:len(pg.Body)-1], '\n')+1:]
	if !bytes.Contains(lastLine, wantV) {
		return rows, pages, fmt.Errorf("drain: the last row %q is not its point's current row (%s)", lastLine, wantV)
	}
	return rows, pages, nil
}

// overwriteCopy copies the overwrite table by time range (/rows, line
// protocol pages of up to 10,000) and returns the rows copied.
func overwriteCopy(ctx context.Context, t *benchTarget) (int, error) {
	var cursor string
	copied := 0
	for {
		p, err := t.api.Rows(ctx, client.RowsRequest{Table: overwriteTable, Limit: 10000, Cursor: cursor, Format: client.FormatLP})
		if err != nil {
			return copied, fmt.Errorf("rows: %w", err)
		}
		copied += bytes.Count(p.Body, []byte{'\n'})
		if cursor = p.Cursor; cursor == "" {
			return copied, nil
		}
	}
}
