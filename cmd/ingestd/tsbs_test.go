package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/stretchr/testify/require"
)

// The TSBS devops data set (tsbs_generate_data --use-case=devops --seed=42
// --scale=10, 6 h from 2026-01-01; see testDataDir).
const (
	tsbsFile       = "tsbs-devops-s10-6h.lp.gz"
	tsbsLines      = 194_400
	tsbsPerTable   = 21_600
	tsbsBatchLines = 5_000
	tsbsDrainLimit = 1_000
	tsbsStart      = baseTS                      // 2026-01-01T00:00:00Z
	tsbsEnd        = baseTS + int64(6*time.Hour) // exclusive
	tsbsTCPTimeout = 2 * time.Minute             // for every watermark to reach 21,600
)

var tsbsTables = []string{"cpu", "disk", "diskio", "kernel", "mem", "net", "nginx", "postgresl", "redis"}

// testDataEnv names the directory of the test data that is not in the
// repository (the TSBS file, the peers' parser cases): CI supplies it.
// Unset, it is the data directory of CI's layout, beside the clone
// (relative to this package's directory, cmd/ingestd).
const testDataEnv = "INGESTD_TESTDATA"

// testDataDir is the directory testDataEnv names, or its default.
func testDataDir() string {
	if d := os.Getenv(testDataEnv); d != "" {
		return d
	}
	return filepath.Join("..", "..", "..", "shared", "data")
}

// tsbsPath is the TSBS data file (in testDataDir).
func tsbsPath() string { return filepath.Join(testDataDir(), tsbsFile) }

// TestTSBS ingests the whole TSBS devops file (194,400 lines, 9 tables) over
// HTTP (gzip batches) and over one TCP connection, each into a fresh daemon
// with every table created WITH SYNC, then drains every table to the end
// and checks each row against the line written at its (entity, ts).
func TestTSBS(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: ingests and drains 194,400 lines twice")
	}
	begin := time.Now()
	data := loadTSBS(t)
	t.Logf("loaded and indexed %d lines in %s", tsbsLines, time.Since(begin).Round(time.Millisecond))

	t.Run("http", func(t *testing.T) {
		d := startDaemon(t, testConfig(t.TempDir()))
		c := newClient(t, d)
		createTSBSTables(t, c)
		begin := time.Now()
		gzipHdr := http.Header{"Content-Encoding": {"gzip"}, "Content-Type": {"text/plain; charset=utf-8"}}
		batches, lines := 0, 0
		for batch := range tsbsBatches(data.text, tsbsBatchLines) {
			r := c.write(t, "/write", gzipHdr, strings.NewReader(gzipString(t, batch)))
			require.Equal(t, http.StatusNoContent, r.Status, "batch %d (lines %d…): %s", batches, lines+1, r.Body)
			batches++
			lines += strings.Count(batch, "\n")
		}
		require.Equal(t, tsbsLines, lines)
		require.Equal(t, (tsbsLines+tsbsBatchLines-1)/tsbsBatchLines, batches)
		for _, name := range tsbsTables {
			require.Equal(t, syncState{Enabled: true, Epoch: 1, Seq: tsbsPerTable, Watermark: tsbsPerTable, Horizon: 1}, c.syncStatus(t, name),
				"table %s: after every 204 each line is stamped and visible", name)
		}
		t.Logf("ingested %d lines in %d gzip batches in %s", lines, batches, time.Since(begin).Round(time.Millisecond))
		checkTSBS(t, c, data)
	})

	t.Run("tcp", func(t *testing.T) {
		d := startDaemon(t, testConfig(t.TempDir()))
		c := newClient(t, d)
		createTSBSTables(t, c)
		conn := dialTCP(t, d)
		begin := time.Now()
		require.NoError(t, conn.SetWriteDeadline(time.Now().Add(tsbsTCPTimeout)))
		// struct{io.Reader} hides strings.Reader's WriteTo, so the 83 MB
		// are sent from a small buffer instead of one []byte copy.
		n, err := io.CopyBuffer(conn, struct{ io.Reader }{strings.NewReader(data.text)}, make([]byte, 256<<10))
		require.NoError(t, err)
		require.Equal(t, int64(len(data.text)), n)
		require.NoError(t, conn.Close())
		pollUntil(t, tsbsTCPTimeout, func() bool {
			for _, name := range tsbsTables {
				if c.syncStatus(t, name).Watermark < tsbsPerTable {
					return false
				}
			}
			return true
		}, "every table's watermark reaches %d", tsbsPerTable)
		for _, name := range tsbsTables {
			require.Equal(t, syncState{Enabled: true, Epoch: 1, Seq: tsbsPerTable, Watermark: tsbsPerTable, Horizon: 1}, c.syncStatus(t, name),
				"table %s: one x_seq per line", name)
		}
		t.Logf("ingested %d bytes over TCP in %s", n, time.Since(begin).Round(time.Millisecond))
		checkTSBS(t, c, data)
	})
}

// createTSBSTables creates the 9 tables WITH SYNC.
func createTSBSTables(t testing.TB, c *apiClient) {
	t.Helper()
	for _, name := range tsbsTables {
		c.createSyncTable(t, name)
	}
}

// tsbsBatches yields text in pieces of n whole lines.
func tsbsBatches(text string, n int) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for pos := 0; pos < len(text); {
			end := pos
			for k := 0; k < n && end < len(text); k++ {
				j := strings.IndexByte(text[end:], '\n')
				if j < 0 {
					end = len(text)
					break
				}
				end += j + 1
			}
			if !yield(text[pos:end]) {
				return
			}
			pos = end
		}
	}
}

// gzipString compresses s.
func gzipString(t testing.TB, s string) string {
	t.Helper()
	var b strings.Builder
	zw, err := gzip.NewWriterLevel(&b, gzip.BestSpeed)
	require.NoError(t, err)
	_, err = io.WriteString(zw, s)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return b.String()
}

// ---- the expectation, built by an independent parser ----

// tsbsData is the decompressed file and, per table, its lines indexed by
// (entity, ts).
type tsbsData struct {
	text   string // the whole decompressed file; every line below is a substring
	tables map[string]*tsbsTable
}

type tsbsKey struct {
	series string // the canonical tag set: "k=v,…" sorted by key
	ts     int64
}

type tsbsTable struct {
	lines   []string        // in file order
	index   map[tsbsKey]int // → index into lines
	tagKeys []string        // in order of first appearance
	fields  []string        // field keys in order of first appearance
	types   map[string]string
}

// lpLine is one parsed TSBS line. The data has no escapes and no quoted
// strings (loadTSBS checks), so it splits on plain spaces, commas and '='.
type lpLine struct {
	table  string
	tags   [][2]string // in line order
	fields [][2]string // key and value text (with its i/u suffix)
	ts     int64
}

// parseLP parses one TSBS line; it reports what is wrong instead of failing
// so that the caller can name the line.
func parseLP(line string) (lpLine, error) {
	var l lpLine
	parts := strings.Split(line, " ")
	if len(parts) != 3 {
		return l, fmt.Errorf("want measurement+tags, fields and timestamp separated by single spaces, got %d parts", len(parts))
	}
	head := strings.Split(parts[0], ",")
	l.table = head[0]
	for _, kv := range head[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || v == "" {
			return l, fmt.Errorf("bad tag %q", kv)
		}
		l.tags = append(l.tags, [2]string{k, v})
	}
	for _, kv := range strings.Split(parts[1], ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || v == "" {
			return l, fmt.Errorf("bad field %q", kv)
		}
		l.fields = append(l.fields, [2]string{k, v})
	}
	ts, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return l, fmt.Errorf("bad timestamp: %w", err)
	}
	l.ts = ts
	return l, nil
}

// canonicalSeries sorts tags by key (in place) and renders them as
// "k=v,…", the line's entity.
func canonicalSeries(tags [][2]string) string {
	slices.SortFunc(tags, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	var b strings.Builder
	for i, kv := range tags {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[0])
		b.WriteByte('=')
		b.WriteString(kv[1])
	}
	return b.String()
}

// fieldType is the column type a field value's text creates.
func fieldType(v string) string {
	switch {
	case strings.HasSuffix(v, "i"):
		return "integer"
	case strings.HasSuffix(v, "u"):
		return "unsigned"
	}
	switch v {
	case "t", "T", "true", "True", "TRUE", "f", "F", "false", "False", "FALSE":
		return "boolean"
	}
	return "float"
}

// loadTSBS decompresses the data file once and indexes it, checking what the
// guide promises (docs/guide.md#loading-a-tsbs-data-set): 194,400 lines, 9 measurements of 21,600 lines each,
// nanosecond timestamps within the 6 hours, (series, ts) unique. It skips
// the test when the file is absent, except on CI (CI=true) where it fails.
func loadTSBS(t testing.TB) *tsbsData {
	t.Helper()
	path := tsbsPath()
	f, err := os.Open(path)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("TSBS data file %s is required on CI (CI=true): %v", path, err)
		}
		t.Skipf("TSBS data file %s not found (%v): set %s to the test data directory", path, err, testDataEnv)
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err, "%s", path)
	var sb strings.Builder
	sb.Grow(90 << 20)
	_, err = io.Copy(&sb, zr)
	require.NoError(t, err, "decompress %s", path)
	require.NoError(t, zr.Close())
	text := sb.String()
	require.True(t, strings.HasSuffix(text, "\n"), "the file ends with a newline")

	// The independent parser below relies on this.
	if i := strings.IndexAny(text, "\\\""); i >= 0 {
		start := strings.LastIndexByte(text[:i], '\n') + 1
		end := start + strings.IndexByte(text[start:], '\n')
		require.FailNowf(t, "unexpected TSBS data", "a line holds a backslash or a double quote, which the test's simple parser does not handle: %q", text[start:end])
	}

	data := &tsbsData{text: text, tables: map[string]*tsbsTable{}}
	for _, name := range tsbsTables {
		data.tables[name] = &tsbsTable{index: make(map[tsbsKey]int, tsbsPerTable), types: map[string]string{}}
	}
	intern := map[string]string{}
	total := 0
	for rest := text; rest != ""; {
		line, tail, _ := strings.Cut(rest, "\n")
		rest = tail
		total++
		l, err := parseLP(line)
		if err != nil {
			require.FailNowf(t, "unexpected TSBS data", "line %d: %v: %q", total, err, line)
		}
		tb := data.tables[l.table]
		if tb == nil {
			require.FailNowf(t, "unexpected TSBS data", "line %d: unknown measurement %q", total, l.table)
		}
		if l.ts < tsbsStart || l.ts >= tsbsEnd {
			require.FailNowf(t, "unexpected TSBS data", "line %d: timestamp %d is not a nanosecond time within the 6 hours", total, l.ts)
		}
		series := canonicalSeries(l.tags)
		if s, ok := intern[series]; ok {
			series = s
		} else {
			intern[series] = series
		}
		key := tsbsKey{series, l.ts}
		if prev, dup := tb.index[key]; dup {
			require.FailNowf(t, "unexpected TSBS data", "line %d: (series, ts) repeats line %q", total, tb.lines[prev])
		}
		tb.index[key] = len(tb.lines)
		tb.lines = append(tb.lines, line)
		for _, kv := range l.tags { // sorted by canonicalSeries, as the server orders a line's tags
			if !slices.Contains(tb.tagKeys, kv[0]) {
				tb.tagKeys = append(tb.tagKeys, kv[0])
			}
		}
		for _, kv := range l.fields {
			typ := fieldType(kv[1])
			if have, ok := tb.types[kv[0]]; !ok {
				tb.types[kv[0]] = typ
				tb.fields = append(tb.fields, kv[0])
			} else if have != typ {
				require.FailNowf(t, "unexpected TSBS data", "line %d: field %s changes type from %s to %s", total, kv[0], have, typ)
			}
		}
	}
	require.Equal(t, tsbsLines, total, "lines in %s", path)
	for _, name := range tsbsTables {
		require.Len(t, data.tables[name].lines, tsbsPerTable, "lines of %s", name)
	}
	return data
}

// ---- the check ----

// checkTSBS drains every table to the end (limit 1,000, time_format=ns) and
// checks: the schema (GET /api/v1/tables/{t}) holds exactly the file's tags
// and fields with their types, the drain's columns are that schema plus
// x_seq, exactly 21,600 rows in strictly ascending x_seq (drainAll), and
// each row equals the line written at its (entity, ts), each line once.
func checkTSBS(t testing.TB, c *apiClient, data *tsbsData) {
	t.Helper()
	begin := time.Now()
	for _, name := range tsbsTables {
		tb := data.tables[name]
		schema := checkTSBSSchema(t, c, name, tb)
		seen := make([]bool, len(tb.lines))
		var plan *rowPlan
		sum := drainAll(t, c, name, tsbsDrainLimit, url.Values{"time_format": {"ns"}}, func(cols []string, row []json.RawMessage) {
			if plan == nil {
				require.Equal(t, append(slices.Clone(schema), "x_seq", "x_op"), cols, "table %s: drain columns are the schema, then x_seq and x_op", name)
				plan = newRowPlan(tb, cols)
			}
			i := plan.check(t, name, tb, row)
			if seen[i] {
				require.FailNowf(t, "duplicate row", "table %s: the line %q was drained twice", name, tb.lines[i])
			}
			seen[i] = true
		})
		require.Equal(t, tsbsPerTable, sum.Rows, "table %s: rows drained", name)
		require.Equal(t, uint64(tsbsPerTable), sum.Next, "table %s: the cursor ends at the watermark", name)
		require.NotContains(t, seen, false, "table %s: a line was never drained", name)
	}
	t.Logf("drained and checked %d tables in %s", len(tsbsTables), time.Since(begin).Round(time.Millisecond))
}

// checkTSBSSchema checks SHOW COLUMNS against the file and returns the
// column names.
func checkTSBSSchema(t testing.TB, c *apiClient, name string, tb *tsbsTable) []string {
	t.Helper()
	r := c.get(t, "/api/v1/tables/"+name)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var got struct {
		Name      string    `json:"name"`
		Sync      syncState `json:"sync"`
		Retention string    `json:"retention"`
		Columns   []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"columns"`
		Stats tableStats `json:"stats"`
	}
	decodeStrict(t, r.Body, &got)
	require.Equal(t, got.Sync.Seq, got.Stats.Fragments, "every line of %s is one stored fragment", name)
	// docs/contract.md#columns: time, then tags, then fields, each in order of first
	// appearance (tags sorted within a line).
	want := []string{"time:time"}
	for _, k := range tb.tagKeys {
		want = append(want, k+":tag")
	}
	for _, k := range tb.fields {
		want = append(want, k+":"+tb.types[k])
	}
	var have, names []string
	for _, col := range got.Columns {
		have = append(have, col.Name+":"+col.Type)
		names = append(names, col.Name)
	}
	require.Equal(t, want, have, "table %s: columns and types", name)
	return names
}

// rowPlan says what each drained column is.
type rowPlan struct {
	cols      []string
	time, seq int
	op        int   // x_op: neither a tag nor a field
	tags      []int // tag columns, sorted by name (to rebuild the series)
	isTag     []bool
	sb        strings.Builder
}

func newRowPlan(tb *tsbsTable, cols []string) *rowPlan {
	p := &rowPlan{cols: cols, time: -1, seq: -1, op: -1, isTag: make([]bool, len(cols))}
	for i, col := range cols {
		switch {
		case col == "time":
			p.time = i
		case col == "x_seq":
			p.seq = i
		case col == "x_op":
			p.op = i
		case slices.Contains(tb.tagKeys, col):
			p.isTag[i] = true
			p.tags = append(p.tags, i)
		}
	}
	slices.SortFunc(p.tags, func(a, b int) int { return strings.Compare(cols[a], cols[b]) })
	return p
}

// check compares one drained row with its line and returns the line's index.
func (p *rowPlan) check(t testing.TB, table string, tb *tsbsTable, row []json.RawMessage) int {
	t.Helper()
	if p.time < 0 {
		require.FailNowf(t, "no time column", "table %s", table)
	}
	ts, err := strconv.ParseInt(string(row[p.time]), 10, 64)
	if err != nil {
		require.FailNowf(t, "time", "table %s: time %s is not an integer of nanoseconds (time_format=ns): %v", table, row[p.time], err)
	}
	// Rebuild the row's entity from its tag columns.
	p.sb.Reset()
	n := 0
	for _, i := range p.tags {
		if string(row[i]) == "null" {
			continue
		}
		if n > 0 {
			p.sb.WriteByte(',')
		}
		n++
		p.sb.WriteString(p.cols[i])
		p.sb.WriteByte('=')
		p.sb.WriteString(jsonString(t, table, row[i]))
	}
	idx, ok := tb.index[tsbsKey{p.sb.String(), ts}]
	if !ok {
		require.FailNowf(t, "row not written", "table %s: no line at entity %q, ts %d", table, p.sb.String(), ts)
	}
	line := tb.lines[idx]
	l, err := parseLP(line)
	require.NoError(t, err)
	matched := 0
	for i, cell := range row {
		if i == p.time || i == p.seq || i == p.op {
			continue
		}
		col := p.cols[i]
		var want string
		var have bool
		if p.isTag[i] {
			want, have = lookup(l.tags, col)
			if !have {
				if string(cell) != "null" {
					require.FailNowf(t, "tag", "table %s, line %q: tag %s is absent but drained as %s", table, line, col, cell)
				}
				continue
			}
			if got := jsonString(t, table, cell); got != want {
				require.FailNowf(t, "tag", "table %s, line %q: tag %s drained as %q", table, line, col, got)
			}
			matched++
			continue
		}
		want, have = lookup(l.fields, col)
		if !have {
			if string(cell) != "null" {
				require.FailNowf(t, "field", "table %s, line %q: field %s is absent but drained as %s", table, line, col, cell)
			}
			continue
		}
		if err := sameValue(want, string(cell)); err != nil {
			require.FailNowf(t, "field", "table %s, line %q: field %s: %v", table, line, col, err)
		}
		matched++
	}
	if matched != len(l.tags)+len(l.fields) {
		require.FailNowf(t, "columns", "table %s, line %q: only %d of its %d tags and fields are drained", table, line, matched, len(l.tags)+len(l.fields))
	}
	return idx
}

func lookup(kvs [][2]string, k string) (string, bool) {
	for _, kv := range kvs {
		if kv[0] == k {
			return kv[1], true
		}
	}
	return "", false
}

// jsonString decodes a JSON string cell.
func jsonString(t testing.TB, table string, cell json.RawMessage) string {
	t.Helper()
	if len(cell) >= 2 && cell[0] == '"' && !strings.ContainsRune(string(cell), '\\') {
		return string(cell[1 : len(cell)-1])
	}
	var s string
	if err := json.Unmarshal(cell, &s); err != nil {
		require.FailNowf(t, "tag", "table %s: tag value %s is not a JSON string: %v", table, cell, err)
	}
	return s
}

// sameValue compares a field's line text (with its i/u suffix) with the
// JSON text the drain sent: integers exactly, floats as float64, booleans
// by value.
func sameValue(lineText, jsonText string) error {
	switch fieldType(lineText) {
	case "integer":
		want, err := strconv.ParseInt(strings.TrimSuffix(lineText, "i"), 10, 64)
		if err != nil {
			return fmt.Errorf("line value %q: %w", lineText, err)
		}
		got, err := strconv.ParseInt(jsonText, 10, 64)
		if err != nil || got != want {
			return fmt.Errorf("want the exact integer %d, drained %s", want, jsonText)
		}
	case "unsigned":
		want, err := strconv.ParseUint(strings.TrimSuffix(lineText, "u"), 10, 64)
		if err != nil {
			return fmt.Errorf("line value %q: %w", lineText, err)
		}
		got, err := strconv.ParseUint(jsonText, 10, 64)
		if err != nil || got != want {
			return fmt.Errorf("want the exact unsigned %d, drained %s", want, jsonText)
		}
	case "boolean":
		want := strings.HasPrefix(strings.ToLower(lineText), "t")
		if jsonText != strconv.FormatBool(want) {
			return fmt.Errorf("want %t, drained %s", want, jsonText)
		}
	default:
		want, err := strconv.ParseFloat(lineText, 64)
		if err != nil {
			return fmt.Errorf("line value %q: %w", lineText, err)
		}
		got, err := strconv.ParseFloat(jsonText, 64)
		if err != nil || got != want {
			return fmt.Errorf("want the float %v, drained %s", want, jsonText)
		}
	}
	return nil
}
