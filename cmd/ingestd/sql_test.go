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
	return resp.StatusCode, strings.TrimRight(string(got), "\n")
}

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
