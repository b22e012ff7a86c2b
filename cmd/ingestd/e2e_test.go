package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/httpapi/client"
	"github.com/ingestd/ingestd/store"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// ---- helpers shared by every test of the package ----

// apiClient talks to one daemon: typed calls through api (package
// httpapi/client, decoding strictly), raw requests through do, try and
// get for the tests that look at the wire itself. Both go through hc,
// whose transport checks every answer's X-Influxdb-* headers.
type apiClient struct {
	base string
	hc   *http.Client
	api  *client.Client
}

// newClient returns a client for d whose idle connections are closed when
// the test ends (before the daemon stops, so goleak sees no reader left).
func newClient(t testing.TB, d *daemon) *apiClient {
	t.Helper()
	return newClientURL(t, d.URL)
}

// newClientURL is newClient for a daemon at base.
func newClientURL(t testing.TB, base string) *apiClient {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return newAPIClient(t, base, &http.Client{Transport: tr, Timeout: 2 * time.Minute})
}

// newAPIClient returns a client for base over a copy of hc whose
// transport is wrapped with the header check.
func newAPIClient(t testing.TB, base string, hc *http.Client) *apiClient {
	t.Helper()
	own := *hc
	if own.Transport == nil {
		own.Transport = http.DefaultTransport
	}
	own.Transport = influxHeaders{t: t, rt: own.Transport}
	api, err := client.New(base, client.WithHTTPClient(&own), client.WithStrictDecoding())
	require.NoError(t, err)
	return &apiClient{base: base, hc: &own, api: api}
}

// influxHeaders checks that every response, of every route and status,
// carries X-Influxdb-Version and X-Influxdb-Build (docs/reference.md#routes).
type influxHeaders struct {
	t  testing.TB
	rt http.RoundTripper
}

func (h influxHeaders) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := h.rt.RoundTrip(req)
	if err == nil && (resp.Header.Get("X-Influxdb-Version") == "" || resp.Header.Get("X-Influxdb-Build") == "") {
		h.t.Errorf("%s %s (%d): X-Influxdb-Version or X-Influxdb-Build header missing", req.Method, req.URL.Path, resp.StatusCode)
	}
	return resp, err
}

// response is a fully read HTTP response.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) String() string {
	return fmt.Sprintf("HTTP %d: %.2000s", r.Status, r.Body)
}

// do sends one request and reads the whole answer.
func (c *apiClient) do(t testing.TB, method, path string, hdr http.Header, body io.Reader) response {
	t.Helper()
	r, err := c.try(method, path, hdr, body)
	require.NoError(t, err, "%s %s", method, path)
	return r
}

// try is do without assertions, for goroutines.
func (c *apiClient) try(method, path string, hdr http.Header, body io.Reader) (response, error) {
	req, err := http.NewRequestWithContext(context.Background(), method, c.base+path, body)
	if err != nil {
		return response{}, err
	}
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return response{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}, err
}

func (c *apiClient) get(t testing.TB, path string) response {
	t.Helper()
	return c.do(t, http.MethodGet, path, nil, nil)
}

// getOK GETs path and requires 200.
func (c *apiClient) getOK(t testing.TB, path string) response {
	t.Helper()
	r := c.get(t, path)
	require.Equal(t, http.StatusOK, r.Status, "GET %s: %s", path, r)
	return r
}

// send is do with a string body (none when empty).
func (c *apiClient) send(t testing.TB, method, path, body string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	return c.do(t, method, path, nil, rd)
}

func (c *apiClient) putJSON(t testing.TB, path, body string) response {
	t.Helper()
	return c.do(t, http.MethodPut, path, http.Header{"Content-Type": {"application/json"}}, strings.NewReader(body))
}

// tablePath is /api/v1/tables/{table} with table escaped as a path segment
// (as package client escapes it).
func tablePath(table string) string {
	return "/api/v1/tables/" + url.PathEscape(table)
}

// putTable creates table (PUT /api/v1/tables/{t}) and returns the response.
func (c *apiClient) putTable(t testing.TB, table string, sync bool) response {
	t.Helper()
	return c.putJSON(t, tablePath(table), fmt.Sprintf(`{"sync":%t}`, sync))
}

// createSyncTable creates a new table WITH SYNC and requires 201.
func (c *apiClient) createSyncTable(t testing.TB, table string) {
	t.Helper()
	_, created, err := c.api.CreateTable(context.Background(), table, client.TableOptions{Sync: new(true)})
	require.NoError(t, err, "PUT %s", tablePath(table))
	require.True(t, created, "PUT %s: the table existed", tablePath(table))
}

// syncState is the body of GET|PUT /api/v1/tables/{t}/sync.
type syncState = client.SyncStatus

func (c *apiClient) syncStatus(t testing.TB, table string) syncState {
	t.Helper()
	s, err := c.api.Sync(context.Background(), table)
	require.NoError(t, err, "GET %s/sync", tablePath(table))
	return s
}

func (c *apiClient) setSync(t testing.TB, table string, enabled bool) syncState {
	t.Helper()
	s, err := c.api.SetSync(context.Background(), table, enabled)
	require.NoError(t, err, "PUT %s/sync", tablePath(table))
	return s
}

// write POSTs ILP to path (/write or /api/v2/write) with optional headers.
func (c *apiClient) write(t testing.TB, path string, hdr http.Header, body io.Reader) response {
	t.Helper()
	return c.do(t, http.MethodPost, path, hdr, body)
}

// mustWrite POSTs ILP to /write and requires 204 with an empty body.
func (c *apiClient) mustWrite(t testing.TB, lp string) {
	t.Helper()
	r := c.write(t, "/write", nil, strings.NewReader(lp))
	require.Equal(t, http.StatusNoContent, r.Status, "POST /write: %s", r.Body)
	require.Empty(t, r.Body)
}

// apiError is the JSON error object of both the API and the write routes.
type apiError struct {
	Code      string  `json:"code"`
	Message   string  `json:"message"`
	Error     string  `json:"error"`
	Line      int     `json:"line"`
	Epoch     *uint64 `json:"epoch"`
	Seq       *uint64 `json:"seq"`
	Watermark *uint64 `json:"watermark"`
}

// decodeError checks that r is a JSON error object with the given status
// and returns it.
func decodeError(t testing.TB, r response, status int) apiError {
	t.Helper()
	require.Equal(t, status, r.Status, "body: %s", r.Body)
	require.Equal(t, "application/json", r.Header.Get("Content-Type"), "error bodies are JSON: %s", r.Body)
	var e apiError
	require.NoError(t, json.Unmarshal(r.Body, &e), "error body: %s", r.Body)
	require.NotEmpty(t, e.Code, "error body without code: %s", r.Body)
	require.NotEmpty(t, e.Message, "error body without message: %s", r.Body)
	require.Equal(t, e.Message, e.Error, "error repeats message: %s", r.Body)
	return e
}

// requireCode checks that r is a JSON error object with the given status
// and code and returns it.
func requireCode(t testing.TB, r response, status int, code string) apiError {
	t.Helper()
	e := decodeError(t, r, status)
	require.Equal(t, code, e.Code, "%s", r)
	return e
}

// decodeStrict decodes b into v, failing on unknown fields and trailing data.
func decodeStrict(t testing.TB, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	require.NoError(t, dec.Decode(v), "decode %s", b)
	require.False(t, dec.More(), "trailing data after JSON value: %s", b)
}

// drain GETs /drain with q (raw, for refusals and the wire).
func (c *apiClient) drain(t testing.TB, q url.Values) response {
	t.Helper()
	return c.get(t, "/drain?"+q.Encode())
}

// drainOK asks the client for the page of q (each parameter of /drain as
// its DrainRequest field), requires a JSON page and returns it and its raw
// body.
func (c *apiClient) drainOK(t testing.TB, q url.Values) (*client.Page, []byte) {
	t.Helper()
	pg, err := c.api.Drain(context.Background(), drainRequest(t, q))
	require.NoError(t, err, "GET /drain?%s", q.Encode())
	require.Equal(t, "application/json", pg.Header.Get("Content-Type"))
	return pg, pg.Body
}

// drainRequest is q as a client.DrainRequest; it fails on a parameter it
// does not know or cannot read.
func drainRequest(t testing.TB, q url.Values) client.DrainRequest {
	t.Helper()
	var r client.DrainRequest
	num := func(k string) uint64 {
		n, err := strconv.ParseUint(q.Get(k), 10, 64)
		require.NoError(t, err, "%s=%s", k, q.Get(k))
		return n
	}
	for k := range q {
		switch k {
		case "table":
			r.Table = q.Get(k)
		case "after":
			r.After = num(k)
		case "epoch":
			r.Epoch = num(k)
			require.NotZero(t, r.Epoch, "the client sends no epoch=0")
		case "limit":
			r.Limit = int(num(k))
		case "columns":
			r.Columns = strings.Split(q.Get(k), ",")
		case "time_format":
			r.TimeFormat = q.Get(k)
		case "format":
			r.Format = q.Get(k)
		case "consumer":
			r.Consumer = q.Get(k)
		case "wait":
			d, err := time.ParseDuration(q.Get(k))
			require.NoError(t, err)
			r.Wait = d
		default:
			t.Fatalf("drainRequest: unknown parameter %s", k)
		}
	}
	return r
}

// drainSummary is what drainAll saw.
type drainSummary struct {
	Columns []string
	Epoch   uint64
	Rows    int
	Next    uint64 // the cursor after the last page
	LastSeq uint64 // the x_seq of the last row (0 without rows)
}

// drainAll follows table's feed from after=0, limit rows a page, until a
// page reports more=false and holds no row, and calls visit with every row
// (the slice is not kept by drainAll). extra adds query parameters (e.g.
// time_format); the columns must include x_seq. Every envelope is checked
// against docs/contract.md#drain on the way: the table name, a constant epoch and column
// list, after echoing the cursor, at most limit rows in strictly ascending
// x_seq above the cursor and at or below the watermark, next (last x_seq of
// a full page, else the watermark) and more = next < watermark.
func drainAll(t testing.TB, c *apiClient, table string, limit int, extra url.Values, visit func(cols []string, row []json.RawMessage)) drainSummary {
	t.Helper()
	var sum drainSummary
	after := uint64(0)
	for page := 0; ; page++ {
		require.Less(t, page, 1_000_000, "drain of %s does not end", table)
		q := url.Values{"table": {table}, "after": {strconv.FormatUint(after, 10)}, "limit": {strconv.Itoa(limit)}}
		for k, v := range extra {
			q[k] = v
		}
		pg, raw := c.drainOK(t, q)
		require.Equal(t, table, pg.Table, "page %d", page)
		require.Equal(t, after, pg.After, "page %d: after echoes the cursor", page)
		if page == 0 {
			sum.Columns, sum.Epoch = pg.Columns, pg.Epoch
		}
		require.Equal(t, sum.Epoch, pg.Epoch, "page %d: epoch changed during the drain", page)
		require.Equal(t, sum.Columns, pg.Columns, "page %d: columns changed during the drain", page)
		seqCol := slices.Index(pg.Columns, "x_seq")
		require.GreaterOrEqual(t, seqCol, 0, "drainAll needs the x_seq column: %v", pg.Columns)
		require.LessOrEqual(t, len(pg.Rows), limit, "page %d holds more than limit rows", page)
		require.LessOrEqual(t, pg.Watermark, pg.Seq, "page %d: watermark above seq", page)
		prev := after
		for i, row := range pg.Rows {
			// Plain comparisons in this hot loop (TSBS drains 194,400 rows);
			// require only reports.
			if len(row) != len(pg.Columns) {
				require.Failf(t, "row width", "page %d row %d: %d values for %d columns", page, i, len(row), len(pg.Columns))
			}
			s, err := strconv.ParseUint(string(row[seqCol]), 10, 64)
			if err != nil {
				require.Failf(t, "x_seq", "page %d row %d: x_seq %s is not an exact integer: %v", page, i, row[seqCol], err)
			}
			if s <= prev {
				require.Failf(t, "x_seq order", "page %d row %d: x_seq %d not strictly above %d (cursor %d)", page, i, s, prev, after)
			}
			if s > pg.Watermark {
				require.Failf(t, "x_seq above watermark", "page %d row %d: x_seq %d above the watermark %d", page, i, s, pg.Watermark)
			}
			prev = s
			visit(pg.Columns, row)
		}
		if len(pg.Rows) == limit {
			require.Equal(t, prev, pg.Next, "page %d is full: next is its last x_seq", page)
		} else {
			require.Equal(t, pg.Watermark, pg.Next, "page %d is not full: next is the watermark (%s)", page, clip(raw))
		}
		require.Equal(t, pg.Next < pg.Watermark, pg.More, "page %d: more = next < watermark", page)
		sum.Rows += len(pg.Rows)
		if len(pg.Rows) > 0 {
			sum.LastSeq = prev
		}
		sum.Next = pg.Next
		if !pg.More && len(pg.Rows) == 0 {
			return sum
		}
		require.True(t, len(pg.Rows) > 0 || pg.Next > after, "page %d: an empty page with more=true made no progress", page)
		after = pg.Next
	}
}

// drainColumn drains table to the end and returns column col of every row,
// in feed order, decoded from JSON (null as "<null>").
func drainColumn(t testing.TB, c *apiClient, table, col string) []string {
	t.Helper()
	var out []string
	drainAll(t, c, table, 100, nil, func(cols []string, row []json.RawMessage) {
		i := slices.Index(cols, col)
		require.GreaterOrEqual(t, i, 0, "table %s has no column %q: %v", table, col, cols)
		out = append(out, jsonText(t, row[i]))
	})
	return out
}

// jsonText decodes a JSON string cell; other values are returned as their
// JSON text (null as "<null>").
func jsonText(t testing.TB, cell json.RawMessage) string {
	t.Helper()
	if string(cell) == "null" {
		return "<null>"
	}
	if len(cell) > 0 && cell[0] == '"' {
		var s string
		require.NoError(t, json.Unmarshal(cell, &s))
		return s
	}
	return string(cell)
}

func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// pollUntil polls cond until it holds, failing the test after timeout
// (stretched on a busy machine: testdeadline.Scale). It polls more slowly for long timeouts so as not to load the daemon it waits
// for (timeout/200, within 10ms..250ms).
func pollUntil(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	timeout = testdeadline.Scale(timeout)
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(min(max(timeout/200, 10*time.Millisecond), 250*time.Millisecond))
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: "+format, append([]any{timeout}, args...)...)
		}
		<-tick.C
	}
}

// gzipBytes compresses b.
func gzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	require.NoError(t, err)
	_, err = zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// dialTCP connects to the daemon's ILP TCP listener; closed at test end.
func dialTCP(t testing.TB, d *daemon) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", d.TCPAddr, 10*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// idLines renders n lines "table,id=<from+i> v=<from+i>i <ts>".
func idLines(table string, from, n int) string {
	var b strings.Builder
	for i := from; i < from+n; i++ {
		fmt.Fprintf(&b, "%s,id=%d v=%di %d\n", table, i, i, baseTS+int64(i))
	}
	return b.String()
}

// idRange returns "from" … "from+n-1" as strings.
func idRange(from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(from + i)
	}
	return out
}

// baseTS is 2026-01-01T00:00:00Z in nanoseconds.
const baseTS int64 = 1767225600000000000

// ---- tests ----

// TestE2ETables walks a table through docs/reference.md#tables: create WITH SYNC
// (idempotent), SHOW SYNC, SET SYNC OFF/ON, SHOW COLUMNS, TRUNCATE, the
// table list, DROP and re-create.
func TestE2ETables(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	c := newClient(t, d)

	t.Run("create is idempotent", func(t *testing.T) {
		r := c.putTable(t, "t", true)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		require.JSONEq(t, `{"name":"t","sync":{"enabled":true,"epoch":1,"seq":0,"watermark":0,"horizon":1},"retention":"0"}`, string(r.Body))
		r = c.putTable(t, "t", true)
		require.Equal(t, http.StatusOK, r.Status, "repeat PUT: %s", r.Body)
		require.JSONEq(t, `{"name":"t","sync":{"enabled":true,"epoch":1,"seq":0,"watermark":0,"horizon":1},"retention":"0"}`, string(r.Body))
	})
	t.Run("show sync of a new sync table", func(t *testing.T) {
		r := c.get(t, "/api/v1/tables/t/sync")
		require.Equal(t, http.StatusOK, r.Status)
		require.JSONEq(t, `{"enabled":true,"epoch":1,"seq":0,"watermark":0,"horizon":1}`, string(r.Body))
	})
	t.Run("set sync off keeps the epoch, on bumps it, on again is a no-op", func(t *testing.T) {
		require.Equal(t, syncState{Enabled: false, Epoch: 1, Horizon: 1}, c.setSync(t, "t", false))
		require.Equal(t, syncState{Enabled: false, Epoch: 1, Horizon: 1}, c.syncStatus(t, "t"))
		require.Equal(t, syncState{Enabled: true, Epoch: 2, Horizon: 1}, c.setSync(t, "t", true))
		require.Equal(t, syncState{Enabled: true, Epoch: 2, Horizon: 1}, c.setSync(t, "t", true))
		require.Equal(t, syncState{Enabled: true, Epoch: 2, Horizon: 1}, c.syncStatus(t, "t"))
	})
	t.Run("show columns lists types in schema order and no x_ column", func(t *testing.T) {
		c.mustWrite(t, `t,region=eu,host=a v=1.5,n=2i,u=3u,s="x",b=true `+strconv.FormatInt(baseTS, 10)+"\n"+
			`t,host=b,zone=z1 v=2.5,extra=7i `+strconv.FormatInt(baseTS+1, 10)+"\n")
		r := c.get(t, "/api/v1/tables/t")
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
		require.Equal(t, "t", got.Name)
		require.Equal(t, uint64(2), got.Stats.Fragments, "two lines stored")
		require.Equal(t, syncState{Enabled: true, Epoch: 2, Seq: 2, Watermark: 2, Horizon: 1}, got.Sync)
		var cols []string
		for _, col := range got.Columns {
			require.False(t, strings.HasPrefix(col.Name, "x_"), "engine-owned column %q listed: %s", col.Name, r.Body)
			cols = append(cols, col.Name+":"+col.Type)
		}
		// docs/contract.md#columns: time, then tags, then fields, each in order of first
		// appearance (a line's tags are sorted by key). zone first appears
		// after the fields v…b, yet it is a tag, so it comes before them.
		require.Equal(t, []string{
			"time:time", "host:tag", "region:tag", "zone:tag",
			"v:float", "n:integer", "u:unsigned", "s:string", "b:boolean", "extra:integer",
		}, cols, "column order (docs/contract.md#columns): time, then every tag, then every field; a tag first seen "+
			"after some fields must still be listed before all fields")
	})
	t.Run("list tables", func(t *testing.T) {
		c.mustWrite(t, "plain v=1 "+strconv.FormatInt(baseTS, 10)+"\n") // auto-created, sync OFF
		r := c.get(t, "/api/v1/tables")
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var got struct {
			Tables []struct {
				Name      string          `json:"name"`
				Sync      syncState       `json:"sync"`
				Retention string          `json:"retention"`
				Columns   json.RawMessage `json:"columns"`
				Stats     tableStats      `json:"stats"`
			} `json:"tables"`
		}
		decodeStrict(t, r.Body, &got)
		byName := map[string]syncState{}
		for _, tb := range got.Tables {
			byName[tb.Name] = tb.Sync
		}
		require.Equal(t, map[string]syncState{
			"t":     {Enabled: true, Epoch: 2, Seq: 2, Watermark: 2, Horizon: 1},
			"plain": {Enabled: false, Epoch: 0, Seq: 0, Watermark: 0, Horizon: 1},
		}, byName, "%s", r.Body)
	})
	t.Run("truncate bumps the epoch, keeps the sequence and empties the feed", func(t *testing.T) {
		r := c.do(t, http.MethodPost, "/api/v1/tables/t/truncate", nil, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var st syncState
		decodeStrict(t, r.Body, &st)
		require.Equal(t, syncState{Enabled: true, Epoch: 3, Seq: 2, Watermark: 2, Horizon: 1}, st)
		require.Equal(t, st, c.syncStatus(t, "t"))
		sum := drainAll(t, c, "t", 10, nil, func([]string, []json.RawMessage) {})
		require.Equal(t, 0, sum.Rows, "a truncated table's feed is empty")
		require.Equal(t, uint64(3), sum.Epoch)
		require.Equal(t, uint64(2), sum.Next, "the cursor steps to the watermark")
	})
	t.Run("drop then get is 404", func(t *testing.T) {
		r := c.do(t, http.MethodDelete, "/api/v1/tables/t", nil, nil)
		require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
		require.Empty(t, r.Body)
		for _, p := range []string{"/api/v1/tables/t", "/api/v1/tables/t/sync"} {
			e := decodeError(t, c.get(t, p), http.StatusNotFound)
			require.Equal(t, "table_not_found", e.Code, "GET %s", p)
		}
		e := decodeError(t, c.do(t, http.MethodDelete, "/api/v1/tables/t", nil, nil), http.StatusNotFound)
		require.Equal(t, "table_not_found", e.Code)
		r = c.get(t, "/api/v1/tables")
		require.NotContains(t, string(r.Body), `"name":"t"`, "a dropped table is not listed")
	})
	t.Run("re-create after drop resumes above the old epoch and seq", func(t *testing.T) {
		r := c.putTable(t, "t", true)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		st := c.syncStatus(t, "t")
		require.True(t, st.Enabled)
		require.Greater(t, st.Epoch, uint64(3), "epoch must not repeat after DROP + re-create")
		require.GreaterOrEqual(t, st.Seq, uint64(2), "x_seq must not run backwards after DROP + re-create")
		c.mustWrite(t, "t v=1 "+strconv.FormatInt(baseTS, 10)+"\n")
		var seqs []uint64
		drainAll(t, c, "t", 10, nil, func(cols []string, row []json.RawMessage) {
			s, err := strconv.ParseUint(string(row[slices.Index(cols, "x_seq")]), 10, 64)
			require.NoError(t, err)
			seqs = append(seqs, s)
		})
		require.Len(t, seqs, 1)
		require.Greater(t, seqs[0], uint64(2), "an x_seq is never handed out twice")
	})
}

// TestE2EDrain writes through /write and reads the JSON feed (docs/contract.md#drain):
// paging, the envelope, column selection, time formats, exact integers and
// nulls.
func TestE2EDrain(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	c := newClient(t, d)
	c.createSyncTable(t, "d")
	c.mustWrite(t, ""+
		"d,host=a v=1.5,n=9007199254740993i,u=18446744073709551615u 1767225600000000001\n"+
		"d,host=b v=-2.25,n=-9223372036854775808i 1767225600000000002\n"+
		"d,host=a s=\"hi\",ok=true 1767225600000000003\n")
	require.Equal(t, syncState{Enabled: true, Epoch: 1, Seq: 3, Watermark: 3, Horizon: 1}, c.syncStatus(t, "d"),
		"after a 204 every line is stamped and visible")
	wantCols := []string{"time", "host", "v", "n", "u", "s", "ok", "x_seq", "x_op"}
	q := func(kv ...string) url.Values {
		v := url.Values{"table": {"d"}}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}

	var page1Next uint64
	t.Run("first page is full", func(t *testing.T) {
		r := c.drain(t, q("after", "0", "limit", "2"))
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var env map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(r.Body, &env))
		require.ElementsMatch(t, []string{"table", "epoch", "after", "next", "seq", "watermark", "more", "scan_limited", "lag_fragments", "lag_seconds", "new_columns", "columns", "rows"},
			mapKeys(env), "envelope fields: %s", r.Body)
		pg, _ := c.drainOK(t, q("after", "0", "limit", "2"))
		require.Equal(t, "d", pg.Table)
		require.Equal(t, uint64(1), pg.Epoch)
		require.Equal(t, uint64(0), pg.After)
		require.Equal(t, uint64(3), pg.Seq)
		require.Equal(t, uint64(3), pg.Watermark)
		require.Equal(t, wantCols, pg.Columns)
		require.Equal(t, "x_seq", pg.Columns[len(pg.Columns)-2])
		require.Len(t, pg.Rows, 2)
		require.True(t, pg.More)
		require.Equal(t, string(pg.Rows[1][7]), strconv.FormatUint(pg.Next, 10), "a full page's next is its last x_seq")
		require.Equal(t, []string{`"2026-01-01T00:00:00.000000001Z"`, `"a"`, `1.5`, `9007199254740993`, `18446744073709551615`, `null`, `null`}, client.CellTexts(pg.Rows[0][:7]))
		require.Equal(t, []string{`"2026-01-01T00:00:00.000000002Z"`, `"b"`, `-2.25`, `-9223372036854775808`, `null`, `null`, `null`}, client.CellTexts(pg.Rows[1][:7]))
		body := string(r.Body)
		require.Contains(t, body, ",9007199254740993,", "int64 beyond 2^53 must be exact")
		require.Contains(t, body, ",18446744073709551615,", "max uint64 must be exact")
		page1Next = pg.Next
	})
	t.Run("second page ends at the watermark", func(t *testing.T) {
		require.NotZero(t, page1Next)
		pg, _ := c.drainOK(t, q("after", strconv.FormatUint(page1Next, 10), "limit", "2", "epoch", "1"))
		require.Equal(t, page1Next, pg.After)
		require.Len(t, pg.Rows, 1)
		require.Equal(t, []string{`"2026-01-01T00:00:00.000000003Z"`, `"a"`, `null`, `null`, `null`, `"hi"`, `true`}, client.CellTexts(pg.Rows[0][:7]))
		require.False(t, pg.More)
		require.Equal(t, uint64(3), pg.Next, "a short page's next is the watermark")
		require.Equal(t, "3", string(pg.Rows[0][7]))

		pg, _ = c.drainOK(t, q("after", "3", "limit", "2"))
		require.Empty(t, pg.Rows)
		require.False(t, pg.More)
		require.Equal(t, uint64(3), pg.Next)
	})
	t.Run("columns selects exactly those in the order given", func(t *testing.T) {
		pg, _ := c.drainOK(t, q("limit", "10", "columns", "v,host"))
		require.Equal(t, []string{"v", "host"}, pg.Columns)
		var got [][]string
		for _, row := range pg.Rows {
			got = append(got, client.CellTexts(row))
		}
		require.Equal(t, [][]string{{`1.5`, `"a"`}, {`-2.25`, `"b"`}, {`null`, `"a"`}}, got)
	})
	t.Run("time formats", func(t *testing.T) {
		for _, tc := range []struct {
			name, format string
			want         []string
		}{
			{"default is RFC 3339 with nanoseconds", "", []string{`"2026-01-01T00:00:00.000000001Z"`, `"2026-01-01T00:00:00.000000002Z"`, `"2026-01-01T00:00:00.000000003Z"`}},
			{"rfc3339", "rfc3339", []string{`"2026-01-01T00:00:00.000000001Z"`, `"2026-01-01T00:00:00.000000002Z"`, `"2026-01-01T00:00:00.000000003Z"`}},
			{"ns", "ns", []string{"1767225600000000001", "1767225600000000002", "1767225600000000003"}},
			{"s", "s", []string{"1767225600", "1767225600", "1767225600"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				v := q("limit", "10", "columns", "time")
				if tc.format != "" {
					v.Set("time_format", tc.format)
				}
				pg, _ := c.drainOK(t, v)
				var got []string
				for _, row := range pg.Rows {
					got = append(got, string(row[0]))
				}
				require.Equal(t, tc.want, got)
			})
		}
	})
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestE2EDrainRefusals checks every refusal's status and code (docs/contract.md#refusals),
// with the table's current epoch, seq and watermark for the 409s, and the
// order in which they are checked.
func TestE2EDrainRefusals(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.feed.MaxDrainLimit = 50
	d := startDaemon(t, cfg)
	c := newClient(t, d)

	c.createSyncTable(t, "on")
	c.mustWrite(t, idLines("on", 0, 3))
	on := c.syncStatus(t, "on")
	require.Equal(t, syncState{Enabled: true, Epoch: 1, Seq: 3, Watermark: 3, Horizon: 1}, on)

	c.createSyncTable(t, "off")
	c.mustWrite(t, idLines("off", 0, 2))
	off := c.setSync(t, "off", false)
	require.Equal(t, syncState{Enabled: false, Epoch: 1, Seq: 2, Watermark: 2, Horizon: 1}, off)

	for _, tc := range []struct {
		name   string
		query  string
		status int
		code   string
		state  *syncState // the table's state the body must carry
	}{
		{"unknown table", "table=nope&limit=10", http.StatusNotFound, "table_not_found", nil},
		{"sync off", "table=off&limit=10", http.StatusConflict, "sync_off", &off},
		{"sync off is checked before epoch and cursor", "table=off&limit=10&epoch=9&after=99", http.StatusConflict, "sync_off", &off},
		{"stale epoch", "table=on&limit=10&epoch=2", http.StatusConflict, "stale_epoch", &on},
		{"stale epoch is checked before the cursor", "table=on&limit=10&epoch=0&after=99", http.StatusConflict, "stale_epoch", &on},
		{"after beyond seq", "table=on&limit=10&after=4", http.StatusConflict, "cursor_beyond_sequence", &on},
		{"after beyond seq with the current epoch", "table=on&limit=10&epoch=1&after=4", http.StatusConflict, "cursor_beyond_sequence", &on},
		{"missing limit", "table=on&after=0", http.StatusBadRequest, "limit_required", nil},
		{"empty limit", "table=on&limit=", http.StatusBadRequest, "limit_required", nil},
		{"limit above --max-drain-limit", "table=on&limit=51", http.StatusBadRequest, "invalid_limit", nil},
		{"limit zero", "table=on&limit=0", http.StatusBadRequest, "invalid_limit", nil},
		{"unknown column", "table=on&limit=10&columns=time,nope", http.StatusBadRequest, "unknown_column", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := decodeError(t, c.get(t, "/drain?"+tc.query), tc.status)
			require.Equal(t, tc.code, e.Code, "message: %s", e.Message)
			if tc.state != nil {
				require.NotNil(t, e.Epoch, "refusal carries the epoch")
				require.NotNil(t, e.Seq, "refusal carries the seq")
				require.NotNil(t, e.Watermark, "refusal carries the watermark")
				require.Equal(t, tc.state.Epoch, *e.Epoch)
				require.Equal(t, tc.state.Seq, *e.Seq)
				require.Equal(t, tc.state.Watermark, *e.Watermark)
			}
		})
	}
	t.Run("limit at --max-drain-limit and the cursor at seq are fine", func(t *testing.T) {
		pg, _ := c.drainOK(t, url.Values{"table": {"on"}, "limit": {"50"}, "after": {"3"}, "epoch": {"1"}})
		require.Empty(t, pg.Rows)
		require.Equal(t, uint64(3), pg.Next)
	})
}

// TestE2EBadInput sends bad writes among good ones (docs/contract.md#partial-writes): no valid
// line is ever lost, a bad body stores nothing, and the server keeps
// serving after each.
func TestE2EBadInput(t *testing.T) {
	const maxBody = 4096
	cfg := testConfig(t.TempDir())
	cfg.ilp.MaxBodyBytes = maxBody
	d := startDaemon(t, cfg)
	c := newClient(t, d)

	good := []byte(idLines("gz", 0, 5))
	gz := gzipBytes(t, good)
	badCRC := bytes.Clone(gz)
	badCRC[len(badCRC)-8] ^= 0xff // the CRC-32 trailer
	big := []byte(idLines("big", 0, 200))
	require.Greater(t, len(big), maxBody)
	bomb := gzipBytes(t, bytes.Repeat([]byte("bomb,id=1 v=1i 1767225600000000000\n"), 10_000))
	require.Less(t, len(bomb), maxBody, "the compressed bomb itself fits")
	gzipHdr := http.Header{"Content-Encoding": {"gzip"}}

	for i, tc := range []struct {
		name    string
		table   string
		setup   string // written first, must succeed
		path    string
		hdr     http.Header
		body    func() io.Reader
		status  int
		code    string
		msg     []string // substrings of the message
		line    int      // first bad line, 0 = not checked
		want    []string // ids in the feed afterwards
		noTable bool     // nothing may be stored at all
	}{
		{
			name: "bad lines among good ones on /write", table: "b1", path: "/write",
			body: textBody("b1,id=1 v=1i 1767225600000000001\n" +
				"b1,id=2 v= 1767225600000000002\n" +
				"b1,id=3 v=3i 1767225600000000003\n" +
				"this is not a line\n" +
				"b1,id=5 v=5i 1767225600000000005\n"),
			status: http.StatusBadRequest, code: "invalid", msg: []string{"partial write", "dropped=2"}, line: 2,
			want: []string{"1", "3", "5"},
		},
		{
			name: "field type conflict", table: "b2", setup: "b2,id=0 v=0i 1767225600000000000\n", path: "/write",
			body: textBody("b2,id=1 v=1i 1767225600000000001\n" +
				"b2,id=2 v=2.5 1767225600000000002\n" +
				"b2,id=3 v=3i 1767225600000000003\n"),
			status: http.StatusBadRequest, code: "invalid", msg: []string{"partial write", "field type conflict", "dropped=1"}, line: 2,
			want: []string{"0", "1", "3"},
		},
		{
			name: "x_ tag and field keys are reserved", table: "b3", path: "/write",
			body: textBody("b3,id=1 v=1i 1767225600000000001\n" +
				"b3,id=2,x_tag=a v=2i 1767225600000000002\n" +
				"b3,id=3 x_f=3i,v=3i 1767225600000000003\n" +
				"b3,id=4 v=4i 1767225600000000004\n"),
			status: http.StatusBadRequest, code: "invalid", msg: []string{"partial write", "x_tag", "dropped=2"}, line: 2,
			want: []string{"1", "4"},
		},
		{
			name: "v2 partial write is 422", table: "b4", path: "/api/v2/write?bucket=x&org=y",
			body:   textBody("b4,id=1 v=1i 1767225600000000001\nb4,id=2 v=oops 1767225600000000002\n"),
			status: http.StatusUnprocessableEntity, msg: []string{"dropped=1"}, line: 2,
			want: []string{"1"},
		},
		{
			name: "v2 with nothing valid is 400", table: "b5", path: "/api/v2/write",
			body:   textBody("b5,id=1 v= 1767225600000000001\n"),
			status: http.StatusBadRequest, code: "invalid", msg: []string{"dropped=1"}, line: 1,
			noTable: true,
		},
		{
			name: "unknown precision stores nothing", table: "b6", path: "/write?precision=fortnight",
			body:   textBody("b6,id=1 v=1i 1\n"),
			status: http.StatusBadRequest, code: "invalid", noTable: true,
		},
		{
			name: "truncated gzip stores nothing", table: "gz", path: "/write", hdr: gzipHdr,
			body:   func() io.Reader { return bytes.NewReader(gz[:len(gz)-4]) },
			status: http.StatusBadRequest, code: "invalid", msg: []string{"gzip"}, noTable: true,
		},
		{
			name: "gzip with a bad checksum stores nothing", table: "gz", path: "/write", hdr: gzipHdr,
			body:   func() io.Reader { return bytes.NewReader(badCRC) },
			status: http.StatusBadRequest, code: "invalid", msg: []string{"gzip"}, noTable: true,
		},
		{
			name: "not gzip at all", table: "gz", path: "/write", hdr: gzipHdr,
			body:   textBody(string(good)),
			status: http.StatusBadRequest, code: "invalid", msg: []string{"gzip"}, noTable: true,
		},
		{
			name: "unsupported content encoding is 415", table: "gz", path: "/write", hdr: http.Header{"Content-Encoding": {"br"}},
			body:   textBody(string(good)),
			status: http.StatusUnsupportedMediaType, noTable: true,
		},
		{
			name: "body over --max-body-bytes is 413", table: "big", path: "/write",
			body:   func() io.Reader { return bytes.NewReader(big) },
			status: http.StatusRequestEntityTooLarge, msg: []string{"max-body-bytes"}, noTable: true,
		},
		{
			name: "chunked body over --max-body-bytes is 413", table: "big", path: "/write",
			body:   func() io.Reader { return io.MultiReader(bytes.NewReader(big)) }, // no Content-Length
			status: http.StatusRequestEntityTooLarge, msg: []string{"max-body-bytes"}, noTable: true,
		},
		{
			name: "gzip bomb is 413 after decompression", table: "bomb", path: "/write", hdr: gzipHdr,
			body:   func() io.Reader { return bytes.NewReader(bomb) },
			status: http.StatusRequestEntityTooLarge, msg: []string{"max-body-bytes"}, noTable: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := c.putTable(t, tc.table, true); r.Status != http.StatusOK {
				require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
			}
			before := c.syncStatus(t, tc.table)
			if tc.setup != "" {
				c.mustWrite(t, tc.setup)
			}
			e := decodeError(t, c.write(t, tc.path, tc.hdr, tc.body()), tc.status)
			if tc.code != "" {
				require.Equal(t, tc.code, e.Code, "message: %s", e.Message)
			}
			for _, m := range tc.msg {
				require.Contains(t, e.Message, m)
			}
			if tc.line != 0 {
				require.Equal(t, tc.line, e.Line, "line of the first bad line; message: %s", e.Message)
			}
			if tc.noTable {
				require.Equal(t, before, c.syncStatus(t, tc.table), "nothing may be stored")
				require.Empty(t, drainColumn(t, c, tc.table, "x_seq"))
			} else {
				require.Equal(t, tc.want, drainColumn(t, c, tc.table, "id"), "every valid line is stored, in order")
			}
			cols := c.get(t, "/api/v1/tables/"+tc.table)
			require.Equal(t, http.StatusOK, cols.Status)
			require.NotContains(t, string(cols.Body), `"x_`, "no x_ column may be created")

			// The server keeps serving.
			require.Equal(t, http.StatusNoContent, c.get(t, "/ping").Status)
			canary := fmt.Sprintf("canary,case=%d v=1i %d\n", i, baseTS+int64(i))
			c.mustWrite(t, canary)
		})
	}
	t.Run("good gzip and chunked bodies within the limit are accepted", func(t *testing.T) {
		r := c.write(t, "/write", gzipHdr, bytes.NewReader(gz))
		require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
		r = c.write(t, "/write", nil, io.MultiReader(strings.NewReader(idLines("chunk", 0, 3))))
		require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
		require.Equal(t, idRange(0, 5), drainColumn(t, c, "gz", "id"))
	})
}

func textBody(s string) func() io.Reader {
	return func() io.Reader { return strings.NewReader(s) }
}

// TestE2ECompat covers the endpoints real InfluxDB clients call (docs/guide.md#influxdb-compatibility-routes).
// c.do checks X-Influxdb-Version and X-Influxdb-Build on every response.
func TestE2ECompat(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	c := newClient(t, d)
	form := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
	for _, tc := range []struct {
		name   string
		method string
		path   string
		hdr    http.Header
		body   string
		status int
		check  func(t testing.TB, r response)
	}{
		{
			name: "GET /ping", method: http.MethodGet, path: "/ping", status: http.StatusNoContent,
			check: func(t testing.TB, r response) { require.Empty(t, r.Body) },
		},
		{
			name: "HEAD /ping", method: http.MethodHead, path: "/ping", status: http.StatusNoContent,
			check: func(t testing.TB, r response) { require.Empty(t, r.Body) },
		},
		{
			name: "GET /health", method: http.MethodGet, path: "/health", status: http.StatusOK,
			check: func(t testing.TB, r response) {
				require.Equal(t, "application/json", r.Header.Get("Content-Type"))
				var h map[string]any
				require.NoError(t, json.Unmarshal(r.Body, &h), "%s", r.Body)
				require.Equal(t, "pass", h["status"], "%s", r.Body)
			},
		},
		{
			name: "POST /query CREATE DATABASE (form)", method: http.MethodPost, path: "/query", hdr: form,
			body: url.Values{"q": {"CREATE DATABASE telegraf"}}.Encode(), status: http.StatusOK,
			check: func(t testing.TB, r response) {
				require.JSONEq(t, `{"results":[{"statement_id":0}]}`, string(r.Body))
			},
		},
		{
			name: "POST /query CREATE DATABASE (query string)", method: http.MethodPost, path: "/query?q=" + url.QueryEscape(`CREATE DATABASE "telegraf"`),
			status: http.StatusOK,
			check: func(t testing.TB, r response) {
				require.JSONEq(t, `{"results":[{"statement_id":0}]}`, string(r.Body))
			},
		},
		{
			name: "POST /query SHOW DATABASES", method: http.MethodPost, path: "/query", hdr: form,
			body: url.Values{"q": {"SHOW DATABASES"}}.Encode(), status: http.StatusOK,
			check: func(t testing.TB, r response) {
				var got struct {
					Results []struct {
						StatementID int `json:"statement_id"`
						Series      []struct {
							Name    string     `json:"name"`
							Columns []string   `json:"columns"`
							Values  [][]string `json:"values"`
						} `json:"series"`
					} `json:"results"`
				}
				require.NoError(t, json.Unmarshal(r.Body, &got), "%s", r.Body)
				require.Len(t, got.Results, 1, "%s", r.Body)
				require.NotEmpty(t, got.Results[0].Series, "SHOW DATABASES answers a series: %s", r.Body)
				s := got.Results[0].Series[0]
				require.Equal(t, "databases", s.Name)
				require.Equal(t, []string{"name"}, s.Columns)
				require.NotEmpty(t, s.Values)
			},
		},
		{
			name: "POST /query anything else", method: http.MethodPost, path: "/query", hdr: form,
			body: url.Values{"q": {"SELECT * FROM cpu"}}.Encode(), status: http.StatusBadRequest,
			check: func(t testing.TB, r response) {
				var got map[string]any
				require.NoError(t, json.Unmarshal(r.Body, &got), "%s", r.Body)
				msg, ok := got["error"].(string)
				require.True(t, ok, "an error key: %s", r.Body)
				require.NotEmpty(t, msg)
			},
		},
		{
			name: "unknown route", method: http.MethodGet, path: "/nope", status: http.StatusNotFound,
			check: func(testing.TB, response) {},
		},
		{
			name: "empty write", method: http.MethodPost, path: "/write", status: http.StatusNoContent,
			check: func(t testing.TB, r response) { require.Empty(t, r.Body) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			r := c.do(t, tc.method, tc.path, tc.hdr, body)
			require.Equal(t, tc.status, r.Status, "%s", r.Body)
			tc.check(t, r)
		})
	}
}

// TestE2ETCP writes over TCP to a table created WITH SYNC and drains what
// arrives (docs/contract.md#tcp-writes): a bad line is dropped without closing the
// connection and a line split across writes is reassembled.
func TestE2ETCP(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	c := newClient(t, d)
	c.createSyncTable(t, "tcp")
	conn := dialTCP(t, d)

	first := idLines("tcp", 0, 300)
	_, err := io.WriteString(conn, first)
	require.NoError(t, err)
	_, err = io.WriteString(conn, "tcp,id=bad v= 1\ntcp,id=bad,x_k=1 v=1i 1\n") // dropped, connection stays
	require.NoError(t, err)
	split := idLines("tcp", 300, 1)
	_, err = io.WriteString(conn, split[:10])
	require.NoError(t, err)
	pollUntil(t, 10*time.Second, func() bool { return c.syncStatus(t, "tcp").Watermark >= 300 },
		"the first 300 TCP lines become visible")
	_, err = io.WriteString(conn, split[10:]+idLines("tcp", 301, 199))
	require.NoError(t, err)
	pollUntil(t, 30*time.Second, func() bool { return c.syncStatus(t, "tcp").Watermark >= 500 },
		"all 500 good TCP lines become visible")
	require.Equal(t, syncState{Enabled: true, Epoch: 1, Seq: 500, Watermark: 500, Horizon: 1}, c.syncStatus(t, "tcp"),
		"only the good lines get an x_seq")
	require.Equal(t, idRange(0, 500), drainColumn(t, c, "tcp", "id"))
	require.NoError(t, conn.Close())
}

// TestE2EGracefulStop checks that stopping the daemon commits every TCP line
// it has read (docs/contract.md#graceful-stop), and that a second daemon on a data directory
// in use fails at once.
func TestE2EGracefulStop(t *testing.T) {
	t.Run("stop commits buffered TCP lines", func(t *testing.T) {
		dir := t.TempDir()
		cfg := testConfig(dir)
		// The lines stay in the connection's batch until shutdown: neither
		// the flush interval nor the batch size is reached.
		cfg.ilp.TCPFlushInterval = time.Hour
		d := startDaemon(t, cfg)
		c := newClient(t, d)
		c.createSyncTable(t, "gs")
		const n = 2000
		lines := idLines("gs", 0, n)
		conn := dialTCP(t, d)
		_, err := io.WriteString(conn, lines)
		require.NoError(t, err)
		// Wait until the daemon has read every byte (wire bytes metric), so
		// the lines are buffered in the server, not in the socket.
		pollUntil(t, 30*time.Second, func() bool { return tcpWireBytes(t, c) >= float64(len(lines)) },
			"the daemon reads the %d bytes sent", len(lines))
		require.Equal(t, uint64(0), c.syncStatus(t, "gs").Seq, "nothing is committed before the stop")
		d.stop(t)
		require.NoError(t, conn.Close())

		d2 := startDaemon(t, testConfig(dir))
		c2 := newClient(t, d2)
		require.Equal(t, syncState{Enabled: true, Epoch: 1, Seq: n, Watermark: n, Horizon: 1}, c2.syncStatus(t, "gs"))
		require.Equal(t, idRange(0, n), drainColumn(t, c2, "gs", "id"), "every line read before the stop survives it")
	})
	t.Run("a second daemon on a directory in use fails at once", func(t *testing.T) {
		dir := t.TempDir()
		startDaemon(t, testConfig(dir))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		started := false
		begin := time.Now()
		err := serve(ctx, testConfig(dir), slog.New(slog.DiscardHandler), func(string, string) {
			started = true
			cancel()
		})
		require.False(t, started, "a second daemon started on %s", dir)
		require.ErrorIs(t, err, store.ErrLocked)
		require.Contains(t, err.Error(), dir, "the error names the directory")
		require.Contains(t, err.Error(), "in use")
		require.Less(t, time.Since(begin), 5*time.Second, "fails at once")
	})
}

// tcpWireBytes reads ingestd_ilp_wire_bytes_total{transport="tcp"}.
func tcpWireBytes(t testing.TB, c *apiClient) float64 {
	t.Helper()
	r := c.get(t, "/metrics")
	require.Equal(t, http.StatusOK, r.Status)
	for _, line := range strings.Split(string(r.Body), "\n") {
		if v, ok := strings.CutPrefix(line, `ingestd_ilp_wire_bytes_total{transport="tcp"} `); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, "%q", line)
			return f
		}
	}
	require.FailNow(t, "metric ingestd_ilp_wire_bytes_total{transport=\"tcp\"} not found")
	return 0
}
