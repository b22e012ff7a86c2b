package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ingestd/ingestd/httpapi/client"
)

// The servers the harness can drive.
const (
	benchIngestd  = "ingestd"
	benchInfluxDB = "influxdb"
	benchVM       = "victoriametrics"
)

// benchTarget talks to one server over HTTP: where to write, how to prepare
// it and how to check what it stored.
type benchTarget struct {
	kind   string
	base   string // http://host:port
	db     string // InfluxDB database
	client *http.Client
	api    *client.Client // ingestd's API (kind ingestd), on client

	writeBases []string      // base, then --write-urls: where the requests go in turn
	writes     atomic.Uint64 // requests sent, for the turn
}

// writeURL is where the next request of the load is POSTed. Safe for
// concurrent use.
func (t *benchTarget) writeURL() string {
	if t.kind == benchInfluxDB {
		return t.base + "/write?db=" + url.QueryEscape(t.db)
	}
	if len(t.writeBases) > 1 {
		return t.writeBases[(t.writes.Add(1)-1)%uint64(len(t.writeBases))] + "/write"
	}
	return t.base + "/write"
}

func (t *benchTarget) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, t.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// prepare readies a fresh server for the load: ingestd gets every table
// created WITH SYNC, InfluxDB its database; VictoriaMetrics needs nothing.
func (t *benchTarget) prepare(ctx context.Context, tables []string) error {
	switch t.kind {
	case benchIngestd:
		for _, name := range tables {
			tb, _, err := t.api.CreateTable(ctx, name, client.TableOptions{Sync: new(true)})
			if err != nil {
				return fmt.Errorf("create table %s: %w", name, err)
			}
			if st := tb.Sync; st.Seq != 0 {
				return fmt.Errorf("table %s already holds %d fragments: run the harness against a fresh server", name, st.Seq)
			}
		}
	case benchInfluxDB:
		code, b, err := t.do(ctx, http.MethodPost, "/query?q="+url.QueryEscape("CREATE DATABASE "+strconv.Quote(t.db)), nil)
		if err != nil {
			return fmt.Errorf("create database: %w", err)
		}
		if code != http.StatusOK {
			return fmt.Errorf("create database: %d %s", code, b)
		}
	}
	return nil
}

// waitReady polls the server until it answers, for at most d.
func (t *benchTarget) waitReady(ctx context.Context, d time.Duration) error {
	path := "/ping"
	if t.kind == benchVM {
		path = "/health"
	}
	deadline := time.Now().Add(d)
	for {
		code, _, err := t.do(ctx, http.MethodGet, path, nil)
		if err == nil && code < 300 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s at %s not ready after %s (last: %d %v)", t.kind, t.base, d, code, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// syncStatus is SHOW SYNC of an ingestd's table.
func (t *benchTarget) syncStatus(ctx context.Context, table string) (client.SyncStatus, error) {
	st, err := t.api.Sync(ctx, table)
	if err != nil {
		return st, fmt.Errorf("sync status of %s: %w", table, err)
	}
	return st, nil
}

// waitCovered polls every table's watermark (ingestd) until it covers
// what was sent, for at most timeout.
func (t *benchTarget) waitCovered(ctx context.Context, d *benchData, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, name := range d.tables() {
		want := uint64(d.stats[name].lines)
		for {
			st, err := t.syncStatus(ctx, name)
			if err != nil {
				return err
			}
			if st.Watermark >= want {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("table %s: watermark %d after %s, want %d", name, st.Watermark, timeout, want)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	return nil
}

// count returns what the server holds for table: ingestd's seq and
// watermark (both must equal the lines), InfluxDB's points (the largest
// per-field count), VictoriaMetrics' samples.
func (t *benchTarget) count(ctx context.Context, d *benchData, table string) (int64, error) {
	switch t.kind {
	case benchIngestd:
		st, err := t.syncStatus(ctx, table)
		if err != nil {
			return 0, err
		}
		if st.Seq != st.Watermark {
			return 0, fmt.Errorf("table %s: seq %d != watermark %d", table, st.Seq, st.Watermark)
		}
		return int64(st.Watermark), nil
	case benchInfluxDB:
		q := url.Values{"db": {t.db}, "q": {fmt.Sprintf("SELECT count(*) FROM %q", table)}}
		code, b, err := t.do(ctx, http.MethodGet, "/query?"+q.Encode(), nil)
		if err != nil || code != http.StatusOK {
			return 0, fmt.Errorf("count %s: %d %s %v", table, code, clipBytes(b), err)
		}
		var r struct {
			Results []struct {
				Series []struct {
					Values [][]any `json:"values"`
				} `json:"series"`
				Error string `json:"error"`
			} `json:"results"`
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&r); err != nil {
			return 0, fmt.Errorf("count %s: %w", table, err)
		}
		var n int64
		for _, res := range r.Results {
			if res.Error != "" {
				return 0, fmt.Errorf("count %s: %s", table, res.Error)
			}
			for _, s := range res.Series {
				for _, row := range s.Values {
					for _, v := range row[1:] { // row[0] is the time
						if c, ok := v.(json.Number); ok {
							if c, err := c.Int64(); err == nil {
								n = max(n, c)
							}
						}
					}
				}
			}
		}
		return n, nil
	case benchVM:
		// Every sample of table_* within the data's span.
		window := time.Duration(d.last-d.first) + time.Hour
		q := url.Values{
			"query":   {fmt.Sprintf(`sum(count_over_time({__name__=~"%s_.+"}[%ds]))`, table, int64(window/time.Second))},
			"time":    {strconv.FormatInt(d.last/int64(time.Second)+1, 10)},
			"nocache": {"1"},
		}
		code, b, err := t.do(ctx, http.MethodGet, "/api/v1/query?"+q.Encode(), nil)
		if err != nil || code != http.StatusOK {
			return 0, fmt.Errorf("count %s: %d %s %v", table, code, clipBytes(b), err)
		}
		var r struct {
			Data struct {
				Result []struct {
					Value []any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			return 0, fmt.Errorf("count %s: %w", table, err)
		}
		if len(r.Data.Result) == 0 || len(r.Data.Result[0].Value) != 2 {
			return 0, nil
		}
		s, _ := r.Data.Result[0].Value[1].(string)
		f, err := strconv.ParseFloat(s, 64)
		return int64(f), err
	}
	return 0, fmt.Errorf("unknown target %q", t.kind)
}

// want is what count should return for table once every line was sent
// sends times: ingestd keeps every fragment (each has its own x_seq), and
// VictoriaMetrics every sample (it deduplicates only with
// -dedup.minScrapeInterval, which compare.sh does not set); InfluxDB keeps
// one point per series and time.
func (t *benchTarget) want(d *benchData, table string, sends int) int64 {
	switch t.kind {
	case benchVM:
		return d.stats[table].samples * int64(sends)
	case benchIngestd:
		return d.stats[table].lines * int64(sends)
	}
	return d.stats[table].lines
}

// verify checks every table's count after every line was sent sends
// times, polling for at most wait (the time VictoriaMetrics takes to make
// acknowledged samples searchable).
func (t *benchTarget) verify(ctx context.Context, d *benchData, sends int, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	var errs []error
	for _, name := range d.tables() {
		want := t.want(d, name, sends)
		for {
			got, err := t.count(ctx, d, name)
			if err == nil && got == want {
				break
			}
			if time.Now().After(deadline) || (err == nil && got > want) {
				if err == nil {
					err = fmt.Errorf("table %s holds %d, want %d", name, got, want)
				}
				errs = append(errs, err)
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return errors.Join(errs...)
}

// drainResult is what draining every table took.
type drainResult struct {
	rows  int64
	pages int
	bytes int64
	dur   time.Duration
}

// drainAll drains every table of an ingestd from the start in JSON pages of
// limit rows, one table after another on one connection, and checks that
// each yields exactly one row per fragment: its lines times sends.
func (t *benchTarget) drainAll(ctx context.Context, d *benchData, sends, limit int) (drainResult, error) {
	var res drainResult
	epochs := map[string]uint64{}
	for _, name := range d.tables() {
		st, err := t.syncStatus(ctx, name)
		if err != nil {
			return res, err
		}
		epochs[name] = st.Epoch
	}
	var pg client.Page
	start := time.Now()
	for _, name := range d.tables() {
		var after uint64
		var rows int64
		for {
			req := client.DrainRequest{Table: name, Epoch: epochs[name], After: after, Limit: limit}
			if err := t.api.DrainInto(ctx, req, &pg); err != nil {
				return res, fmt.Errorf("drain %s after %d: %w", name, after, err)
			}
			n := len(pg.Rows)
			rows += int64(n)
			res.pages++
			res.bytes += int64(len(pg.Body))
			if pg.Next < after || (n > 0 && pg.Next == after) {
				return res, fmt.Errorf("drain %s: cursor did not advance (after %d, next %d, %d rows)", name, after, pg.Next, n)
			}
			after = pg.Next
			if !pg.More {
				break
			}
		}
		if want := d.stats[name].lines * int64(sends); rows != want {
			return res, fmt.Errorf("drain %s: %d rows, want %d", name, rows, want)
		}
		res.rows += rows
	}
	res.dur = time.Since(start)
	return res, nil
}

func clipBytes(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// rssSampler records a process's resident memory: VmRSS every interval
// (the largest seen) and VmHWM (the kernel's peak since the process
// started) at the end.
type rssSampler struct {
	pid  int
	stop chan struct{}
	done chan int64 // largest VmRSS seen, kB
}

func startRSS(pid int, every time.Duration) *rssSampler {
	s := &rssSampler{pid: pid, stop: make(chan struct{}), done: make(chan int64, 1)}
	if pid <= 0 {
		s.done <- -1
		return s
	}
	go func() {
		var peak int64 = -1
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			if rss, _, err := readProcMem(pid); err == nil {
				peak = max(peak, rss)
			}
			select {
			case <-s.stop:
				s.done <- peak
				return
			case <-tk.C:
			}
		}
	}()
	return s
}

// finish stops sampling and returns the largest VmRSS seen and VmHWM, in
// bytes (-1 when unknown).
func (s *rssSampler) finish() (int64, int64) {
	close(s.stop)
	peak := <-s.done
	hwm := int64(-1)
	if s.pid > 0 {
		if _, h, err := readProcMem(s.pid); err == nil {
			hwm = h * 1024
		}
	}
	if peak > 0 {
		peak *= 1024
	}
	return peak, hwm
}

// parsePIDs parses a comma-separated list of process ids ("": none).
func parsePIDs(list string) ([]int, error) {
	var pids []int
	for f := range strings.SplitSeq(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("%q is not a process id", f)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// sumProcCPU is readProcCPU summed over pids.
func sumProcCPU(pids []int) (time.Duration, error) {
	var sum time.Duration
	for _, pid := range pids {
		d, err := readProcCPU(pid)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}

// readProcCPU returns the CPU time pid has used, user and system, from
// /proc/PID/stat (in clock ticks of 1/100 s, Linux's USER_HZ); 0 when pid
// is not positive.
func readProcCPU(pid int) (time.Duration, error) {
	if pid <= 0 {
		return 0, nil
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2, in parentheses) may hold spaces and
	// parentheses; the fields after its last ")" start with the state
	// (field 3), so utime and stime (fields 14 and 15) are the 12th and
	// 13th.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, clipBytes(b))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / 100), nil
}

// readProcMem returns VmRSS and VmHWM of pid in kB.
func readProcMem(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = n
		case "VmHWM":
			hwm = n
		}
	}
	return rss, hwm, nil
}
