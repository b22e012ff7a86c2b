package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var updateSQL = flag.Bool("update", false, "rewrite cmd/ingestd/testdata/sql/*.txt with the current answers")

// sqlCase is one statement of a golden file and its answer.
type sqlCase struct {
	opts   string // the "===" line's options: POST (form, default), GET, JSON; csv; time_format=…
	stmt   string
	status int
	body   string
}

// parseSQLGolden splits a golden file into its preamble (comments) and
// cases: "=== options", the statement's lines, "--- status", the answer's
// lines up to the next "===".
func parseSQLGolden(t *testing.T, text string) (string, []sqlCase) {
	t.Helper()
	blocks := strings.Split("\n"+text, "\n=== ")
	var cases []sqlCase
	for _, b := range blocks[1:] {
		head, rest, _ := strings.Cut(b, "\n")
		stmt, answer, ok := strings.Cut(rest, "\n--- ")
		require.True(t, ok, "case %q has no --- line", head)
		statusLine, body, _ := strings.Cut(answer, "\n")
		status, _ := strconv.Atoi(strings.TrimSpace(statusLine))
		cases = append(cases, sqlCase{opts: head, stmt: stmt, status: status, body: strings.TrimRight(body, "\n")})
	}
	return strings.TrimPrefix(blocks[0], "\n"), cases
}

// runSQL sends one statement as the case's options say and returns the
// status and body.
func runSQL(t *testing.T, d *daemon, c sqlCase) (int, string) {
	t.Helper()
	method, ctype, body := http.MethodPost, "application/x-www-form-urlencoded", ""
	q := url.Values{"q": {c.stmt}}
	var accept string
	for _, o := range strings.Fields(c.opts) {
		switch {
		case o == "GET":
			method = http.MethodGet
		case o == "JSON":
			ctype = "application/json"
		case o == "csv":
			accept = "text/csv"
		case strings.HasPrefix(o, "time_format="):
			q.Set("time_format", strings.TrimPrefix(o, "time_format="))
		}
	}
	target := d.URL + "/api/v1/sql"
	switch {
	case method == http.MethodGet:
		target += "?" + q.Encode()
	case ctype == "application/json":
		in := map[string]string{"q": c.stmt}
		if tf := q.Get("time_format"); tf != "" {
			in["time_format"] = tf
		}
		b, err := json.Marshal(in)
		require.NoError(t, err)
		body = string(b)
	default:
		body = q.Encode()
	}
	req, err := http.NewRequest(method, target, strings.NewReader(body))
	require.NoError(t, err)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", ctype)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	// The lag in seconds depends on when the statement runs.
	got = lagSeconds.ReplaceAll(got, []byte(`"lag_seconds":0`))
	return resp.StatusCode, strings.TrimRight(string(got), "\n")
}

// lagSeconds matches a JSON page's lag in seconds.
var lagSeconds = regexp.MustCompile(`"lag_seconds":[0-9.]+`)

// TestSQLGolden runs every statement of testdata/sql/*.txt, in order,
// against a fresh daemon per file, and compares each status and answer
// with the file's; -update rewrites the files with the current answers.
func TestSQLGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/sql/*.txt")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			require.NoError(t, err)
			preamble, cases := parseSQLGolden(t, string(raw))
			require.NotEmpty(t, cases)
			d := startDaemon(t, testConfig(t.TempDir()))
			var out bytes.Buffer
			out.WriteString(preamble)
			for i, c := range cases {
				status, body := runSQL(t, d, c)
				if !*updateSQL {
					require.Equal(t, c.status, status, "case %d: %s\nbody: %s", i+1, c.stmt, body)
					require.Equal(t, c.body, body, "case %d: %s", i+1, c.stmt)
				}
				out.WriteString("\n=== " + c.opts + "\n" + c.stmt + "\n--- " + strconv.Itoa(status) + "\n" + body + "\n")
			}
			if *updateSQL {
				require.NoError(t, os.WriteFile(file, out.Bytes(), 0o644))
			}
		})
	}
}

// TestSQLBounds checks the limits of SQL requests against a real daemon:
// a tag filter or ORDER BY walking more than --sql-max-scan-rows rows is
// refused (400 scan_limit), a result past --drain-max-page-bytes ends
// before the row that would cross it ("partial": true) and is still the
// exact prefix of the order asked for, a request past
// --sql-max-statement-bytes, an INSERT of more than --sql-max-insert-rows
// rows or a list of more columns than a table may have is 413, and each is
// counted.
func TestSQLBounds(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.http.SQLMaxScanRows = 10
	cfg.http.DrainMaxPageBytes = 20
	cfg.http.SQLMaxStatementBytes = 300
	cfg.http.SQLMaxInsertRows = 2
	cfg.feed.MaxColumnsPerTable = 3
	d := startDaemon(t, cfg)
	var lines strings.Builder
	for i := 1; i <= 20; i++ {
		lines.WriteString("m,host=h" + strconv.Itoa(i%2) + " v=" + strconv.Itoa(i) + "i " + strconv.Itoa(i) + "\n")
	}
	resp, err := http.Post(d.URL+"/write", "text/plain", strings.NewReader(lines.String()))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusNoContent, resp.StatusCode)

	type answer struct {
		Code    string   `json:"code"`
		Columns []string `json:"columns"`
		Rows    [][]any  `json:"rows"`
		Partial bool     `json:"partial"`
	}
	get := func(q string) (int, answer) {
		t.Helper()
		status, body := runSQL(t, d, sqlCase{opts: "GET time_format=ns", stmt: q})
		var a answer
		require.NoError(t, json.Unmarshal([]byte(body), &a), body)
		return status, a
	}
	times := func(a answer) []float64 {
		var out []float64
		for _, r := range a.Rows {
			out = append(out, r[0].(float64))
		}
		return out
	}

	status, a := get("SELECT * FROM m WHERE host = 'none' LIMIT 1")
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "scan_limit", a.Code)
	status, a = get("SELECT * FROM m ORDER BY time LIMIT 1")
	require.Equal(t, http.StatusBadRequest, status, "ORDER BY walks the whole range")
	require.Equal(t, "scan_limit", a.Code)

	status, a = get("SELECT time, v FROM m WHERE time >= 1 AND time < 9 ORDER BY time DESC LIMIT 8")
	require.Equal(t, http.StatusOK, status)
	require.True(t, a.Partial, "8 rows do not fit 20 bytes")
	require.NotEmpty(t, a.Rows)
	require.Less(t, len(a.Rows), 8)
	for i, ts := range times(a) {
		require.Equal(t, float64(8-i), ts, "the result is the head of the descending order")
	}

	status, a = get("SELECT time, v FROM m WHERE time > 0 LIMIT 10")
	require.Equal(t, http.StatusOK, status)
	require.True(t, a.Partial)
	for i, ts := range times(a) {
		require.Equal(t, float64(i+1), ts, "storage order")
	}

	status, a = get("SELECT time, v FROM m WHERE host = 'h0' AND time <= 8 ORDER BY time LIMIT 2")
	require.Equal(t, http.StatusOK, status)
	require.False(t, a.Partial)
	require.Equal(t, []float64{2, 4}, times(a))

	status, _ = runSQL(t, d, sqlCase{opts: "POST", stmt: "SELECT * FROM m LIMIT 1 -- " + strings.Repeat("x", 300)})
	require.Equal(t, http.StatusRequestEntityTooLarge, status)
	status, body := runSQL(t, d, sqlCase{opts: "POST", stmt: "INSERT INTO m (time, v) VALUES (1, 1), (2, 2), (3, 3)"})
	require.Equal(t, http.StatusRequestEntityTooLarge, status)
	require.Contains(t, body, `"line":1,"column":48`)
	status, _ = runSQL(t, d, sqlCase{opts: "POST", stmt: "SELECT a, b, c, d, e FROM m LIMIT 1"})
	require.Equal(t, http.StatusRequestEntityTooLarge, status, "more columns than a table can have")
	status, body = runSQL(t, d, sqlCase{opts: "POST", stmt: "INSERT INTO m (time, v) VALUES (1, 1), (2, 2)"})
	require.Equal(t, http.StatusOK, status, body)

	fams := scrapeMetrics(t, d)
	for _, m := range []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"ingestd_sql_limit_refusals_total", map[string]string{"limit": "scan_rows"}, 2},
		{"ingestd_sql_limit_refusals_total", map[string]string{"limit": "statement_bytes"}, 1},
		{"ingestd_sql_limit_refusals_total", map[string]string{"limit": "insert_rows"}, 1},
		{"ingestd_sql_limit_refusals_total", map[string]string{"limit": "columns"}, 1},
		{"ingestd_sql_statements_total", map[string]string{"statement": "insert", "outcome": "ok"}, 1},
		{"ingestd_sql_statements_total", map[string]string{"statement": "read", "outcome": "ok"}, 3},
		{"ingestd_sql_statements_total", map[string]string{"statement": "read", "outcome": "error"}, 2},
		{"ingestd_sql_scanned_rows_total", nil, 20},
	} {
		v, ok := sampleValue(fams, m.name, m.labels)
		require.True(t, ok, "%s%v", m.name, m.labels)
		require.GreaterOrEqual(t, v, m.min, "%s%v", m.name, m.labels)
	}
}
