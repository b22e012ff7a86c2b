package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ---- helpers of the drain, consumer and copy tests (and mirror_test.go) ----

// feedClient talks to one daemon over HTTP. Its idle connections are closed
// when the test ends.
type feedClient struct {
	base string
	hc   *http.Client
}

func newFeedClient(t testing.TB, base string) *feedClient {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &feedClient{base: base, hc: &http.Client{Transport: tr, Timeout: 2 * time.Minute}}
}

// feedResp is a fully read response.
type feedResp struct {
	status int
	header http.Header
	body   []byte
}

func (r feedResp) String() string {
	return fmt.Sprintf("HTTP %d: %.2000s", r.status, r.body)
}

func (c *feedClient) do(t testing.TB, method, path, body string) feedResp {
	t.Helper()
	r, err := c.try(method, path, body)
	require.NoError(t, err, "%s %s", method, path)
	return r
}

// try is do without assertions, for goroutines.
func (c *feedClient) try(method, path, body string) (feedResp, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, c.base+path, rd)
	if err != nil {
		return feedResp{}, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return feedResp{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return feedResp{status: resp.StatusCode, header: resp.Header, body: b}, err
}

func (c *feedClient) get(t testing.TB, path string) feedResp {
	t.Helper()
	return c.do(t, http.MethodGet, path, "")
}

// getOK GETs path and requires 200.
func (c *feedClient) getOK(t testing.TB, path string) feedResp {
	t.Helper()
	r := c.get(t, path)
	require.Equal(t, http.StatusOK, r.status, "GET %s: %s", path, r)
	return r
}

// write POSTs ILP to /write and requires 204.
func (c *feedClient) write(t testing.TB, lp string) {
	t.Helper()
	r := c.do(t, http.MethodPost, "/write?db=x", lp)
	require.Equal(t, http.StatusNoContent, r.status, "write: %s", r)
}

// feedTablePath is /api/v1/tables/{table} with table escaped as a path segment
// (as `ingestd mirror` escapes it).
func feedTablePath(table string) string {
	return "/api/v1/tables/" + url.PathEscape(table)
}

// createSyncTable creates table WITH SYNC.
func (c *feedClient) createSyncTable(t testing.TB, table string) {
	t.Helper()
	r := c.do(t, http.MethodPut, feedTablePath(table), `{"sync": true}`)
	require.Equal(t, http.StatusCreated, r.status, "create %s: %s", table, r)
}

// feedSync is SHOW SYNC.
type feedSync struct {
	Enabled   bool   `json:"enabled"`
	Epoch     uint64 `json:"epoch"`
	Seq       uint64 `json:"seq"`
	Watermark uint64 `json:"watermark"`
	Horizon   uint64 `json:"horizon"`
}

func (c *feedClient) sync(t testing.TB, table string) feedSync {
	t.Helper()
	var st feedSync
	require.NoError(t, json.Unmarshal(c.getOK(t, feedTablePath(table)+"/sync").body, &st))
	return st
}

// feedError is the JSON error object.
type feedError struct {
	Code      string  `json:"code"`
	Message   string  `json:"message"`
	Error     string  `json:"error"`
	Epoch     *uint64 `json:"epoch"`
	Seq       *uint64 `json:"seq"`
	Watermark *uint64 `json:"watermark"`
}

// requireFeedError requires status and code and returns the error object.
func requireFeedError(t testing.TB, r feedResp, status int, code string) feedError {
	t.Helper()
	require.Equal(t, status, r.status, "%s", r)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	var e feedError
	require.NoError(t, json.Unmarshal(r.body, &e), "%s", r)
	require.Equal(t, code, e.Code, "%s", r)
	require.NotEmpty(t, e.Message)
	return e
}

// feedJSONPage is a JSON drain page with raw cells.
type feedJSONPage struct {
	Table     string              `json:"table"`
	Epoch     uint64              `json:"epoch"`
	After     uint64              `json:"after"`
	Next      uint64              `json:"next"`
	Seq       uint64              `json:"seq"`
	Watermark uint64              `json:"watermark"`
	More      bool                `json:"more"`
	Columns   []string            `json:"columns"`
	Rows      [][]json.RawMessage `json:"rows"`
}

// feedDecodeStrict decodes b into v, rejecting unknown fields.
func feedDecodeStrict(t testing.TB, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	require.NoError(t, dec.Decode(v), "%.2000s", b)
}

// feedCells renders a row's cells as their JSON text.
func feedCells(row []json.RawMessage) []string {
	out := make([]string, len(row))
	for i, c := range row {
		out[i] = string(c)
	}
	return out
}

// feedEnvelope returns the Ingestd-* headers of an ndjson or lp page.
func feedEnvelope(h http.Header) map[string]string {
	out := map[string]string{}
	for _, k := range []string{"Ingestd-Epoch", "Ingestd-After", "Ingestd-Next", "Ingestd-Seq", "Ingestd-Watermark", "Ingestd-More"} {
		out[k] = h.Get(k)
	}
	return out
}

// feedRowsPage is a JSON page of GET /api/v1/tables/{t}/rows.
type feedRowsPage struct {
	Table     string              `json:"table"`
	Epoch     uint64              `json:"epoch"`
	Watermark uint64              `json:"watermark"`
	Cursor    *string             `json:"cursor"`
	Columns   []string            `json:"columns"`
	Rows      [][]json.RawMessage `json:"rows"`
}

// feedCopy copies table by time range, page by page (extra adds query
// parameters), checking that every page repeats the first page's epoch and
// watermark and lists no x_ column. It returns the first page and every
// row as column name -> JSON text (absent values left out).
func feedCopy(t testing.TB, c *feedClient, table string, limit int, extra url.Values) (feedRowsPage, []map[string]string) {
	t.Helper()
	var first feedRowsPage
	var rows []map[string]string
	cursor := ""
	for page := 0; ; page++ {
		require.Less(t, page, 100_000, "the copy of %s does not end", table)
		q := url.Values{"limit": {strconv.Itoa(limit)}}
		for k, v := range extra {
			q[k] = v
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		r := c.getOK(t, feedTablePath(table)+"/rows?"+q.Encode())
		require.Equal(t, "application/json", r.header.Get("Content-Type"))
		var p feedRowsPage
		feedDecodeStrict(t, r.body, &p)
		require.Equal(t, table, p.Table)
		require.LessOrEqual(t, len(p.Rows), limit)
		for _, col := range p.Columns {
			require.False(t, strings.HasPrefix(col, "x_"), "the copy lists %s", col)
		}
		if page == 0 {
			first = p
		} else {
			require.Equal(t, first.Epoch, p.Epoch, "page %d repeats the epoch", page)
			require.Equal(t, first.Watermark, p.Watermark, "page %d repeats the watermark", page)
		}
		for _, row := range p.Rows {
			require.Len(t, row, len(p.Columns))
			m := map[string]string{}
			for i, cell := range row {
				if string(cell) != "null" {
					m[p.Columns[i]] = string(cell)
				}
			}
			rows = append(rows, m)
		}
		if p.Cursor == nil {
			return first, rows
		}
		require.NotEmpty(t, *p.Cursor)
		cursor = *p.Cursor
	}
}

// feedColumns returns SHOW COLUMNS as name -> type.
func feedColumns(t testing.TB, c *feedClient, table string) map[string]string {
	t.Helper()
	var info struct {
		Columns []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"columns"`
	}
	require.NoError(t, json.Unmarshal(c.getOK(t, feedTablePath(table)).body, &info))
	out := map[string]string{}
	for _, col := range info.Columns {
		out[col.Name] = col.Type
	}
	return out
}

// feedRowsByPoint copies the whole table with integer ns times and returns its
// rows by point: "tag=value,…@time" (tags sorted) -> the row's columns as
// JSON text. A point written several times appears once per fragment in the
// copy, always as the same coalesced row; feedRowsByPoint requires that.
func feedRowsByPoint(t testing.TB, c *feedClient, table string) map[string]map[string]string {
	t.Helper()
	cols := feedColumns(t, c, table)
	_, rows := feedCopy(t, c, table, 1000, url.Values{"time_format": {"ns"}})
	out := map[string]map[string]string{}
	for _, r := range rows {
		var tags []string
		for k, v := range r {
			if cols[k] == "tag" {
				tags = append(tags, k+"="+v)
			}
		}
		sort.Strings(tags)
		key := strings.Join(tags, ",") + "@" + r["time"]
		if prev, ok := out[key]; ok {
			require.Equal(t, prev, r, "%s: two fragments of one point as different rows", key)
		}
		out[key] = r
	}
	return out
}

// ---- drain formats (SPEC §6) ----

func TestDrainHTTPFormats(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	c := newFeedClient(t, d.URL)
	c.createSyncTable(t, "sensor")
	// Fragment 4 overwrites fragment 1's point (p00), so both are
	// delivered as the coalesced row.
	c.write(t, `sensor,site=north,host=h1 p00=1.5,p01=20i 1764410400000000000
sensor,host=h2 p00=2.5,p02=true 1764410400000000000
sensor,host=h1,site=north p01=-9223372036854775808i,p03=18446744073709551615u,s="a \"q\" \\ b" 1764410410000000000
sensor,host=h1,site=north p00=1.6 1764410400000000000`)
	c.createSyncTable(t, "times")
	c.write(t, "times v=1i 1764410400123456789\ntimes v=2i -1500000000\ntimes v=3i 0")

	t.Run("ndjson", func(t *testing.T) {
		cases := []struct {
			name  string
			query string
			env   map[string]string
			lines []string
		}{
			{
				name: "first page", query: "table=sensor&after=0&limit=3&format=ndjson&epoch=1",
				env: map[string]string{"Ingestd-Epoch": "1", "Ingestd-After": "0", "Ingestd-Next": "3", "Ingestd-Seq": "4", "Ingestd-Watermark": "4", "Ingestd-More": "true"},
				lines: []string{
					`{"time":"2025-11-29T10:00:00Z","host":"h1","site":"north","p00":1.6,"p01":20,"x_seq":1}`,
					`{"time":"2025-11-29T10:00:00Z","host":"h2","p00":2.5,"p02":true,"x_seq":2}`,
					`{"time":"2025-11-29T10:00:10Z","host":"h1","site":"north","p01":-9223372036854775808,"p03":18446744073709551615,"s":"a \"q\" \\ b","x_seq":3}`,
				},
			},
			{
				name: "last page", query: "table=sensor&after=3&limit=3&format=ndjson",
				env:   map[string]string{"Ingestd-Epoch": "1", "Ingestd-After": "3", "Ingestd-Next": "4", "Ingestd-Seq": "4", "Ingestd-Watermark": "4", "Ingestd-More": "false"},
				lines: []string{`{"time":"2025-11-29T10:00:00Z","host":"h1","site":"north","p00":1.6,"p01":20,"x_seq":4}`},
			},
			{
				name: "empty page at the watermark", query: "table=sensor&after=4&limit=3&format=ndjson",
				env: map[string]string{"Ingestd-Epoch": "1", "Ingestd-After": "4", "Ingestd-Next": "4", "Ingestd-Seq": "4", "Ingestd-Watermark": "4", "Ingestd-More": "false"},
			},
			{
				name: "columns and time_format", query: "table=sensor&after=1&limit=2&format=ndjson&columns=x_seq,p02,time&time_format=ms",
				env: map[string]string{"Ingestd-Epoch": "1", "Ingestd-After": "1", "Ingestd-Next": "3", "Ingestd-Seq": "4", "Ingestd-Watermark": "4", "Ingestd-More": "true"},
				lines: []string{
					`{"x_seq":2,"p02":true,"time":1764410400000}`,
					`{"x_seq":3,"time":1764410410000}`,
				},
			},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				r := c.getOK(t, "/drain?"+tc.query)
				require.Equal(t, "application/x-ndjson", r.header.Get("Content-Type"))
				require.Equal(t, tc.env, feedEnvelope(r.header))
				want := ""
				for _, l := range tc.lines {
					want += l + "\n"
				}
				require.Equal(t, want, string(r.body))
				for _, l := range tc.lines {
					require.True(t, json.Valid([]byte(l)))
				}
			})
		}
	})

	t.Run("lp", func(t *testing.T) {
		cases := []struct {
			name  string
			query string
			env   map[string]string
			body  string
		}{
			{
				name: "whole feed", query: "table=sensor&after=0&limit=10&format=lp&epoch=1",
				env: map[string]string{"Ingestd-Epoch": "1", "Ingestd-After": "0", "Ingestd-Next": "4", "Ingestd-Seq": "4", "Ingestd-Watermark": "4", "Ingestd-More": "false"},
				body: `sensor,host=h1,site=north p00=1.6,p01=20i 1764410400000000000
sensor,host=h2 p00=2.5,p02=true 1764410400000000000
sensor,host=h1,site=north p01=-9223372036854775808i,p03=18446744073709551615u,s="a \"q\" \\ b" 1764410410000000000
sensor,host=h1,site=north p00=1.6,p01=20i 1764410400000000000
`,
			},
			{
				name: "a full page and time_format ignored", query: "table=sensor&after=1&limit=1&format=lp&time_format=s",
				env:  map[string]string{"Ingestd-Epoch": "1", "Ingestd-After": "1", "Ingestd-Next": "2", "Ingestd-Seq": "4", "Ingestd-Watermark": "4", "Ingestd-More": "true"},
				body: "sensor,host=h2 p00=2.5,p02=true 1764410400000000000\n",
			},
			{
				name: "negative and zero times", query: "table=times&after=1&limit=10&format=lp",
				env:  map[string]string{"Ingestd-Epoch": "1", "Ingestd-After": "1", "Ingestd-Next": "3", "Ingestd-Seq": "3", "Ingestd-Watermark": "3", "Ingestd-More": "false"},
				body: "times v=2i -1500000000\ntimes v=3i 0\n",
			},
			{
				name: "columns select tags and fields", query: "table=sensor&after=0&limit=2&format=lp&columns=p00,host,x_seq",
				env:  map[string]string{"Ingestd-Epoch": "1", "Ingestd-After": "0", "Ingestd-Next": "2", "Ingestd-Seq": "4", "Ingestd-Watermark": "4", "Ingestd-More": "true"},
				body: "sensor,host=h1 p00=1.6\nsensor,host=h2 p00=2.5\n",
			},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				r := c.getOK(t, "/drain?"+tc.query)
				require.Equal(t, "text/plain; charset=utf-8", r.header.Get("Content-Type"))
				require.Equal(t, tc.env, feedEnvelope(r.header))
				require.Equal(t, tc.body, string(r.body))
			})
		}
	})

	t.Run("time_format", func(t *testing.T) {
		cases := []struct {
			format string
			want   [][]string // time, x_seq
		}{
			{format: "", want: [][]string{{`"2025-11-29T10:00:00.123456789Z"`, "1"}, {`"1969-12-31T23:59:58.5Z"`, "2"}, {`"1970-01-01T00:00:00Z"`, "3"}}},
			{format: "rfc3339", want: [][]string{{`"2025-11-29T10:00:00.123456789Z"`, "1"}, {`"1969-12-31T23:59:58.5Z"`, "2"}, {`"1970-01-01T00:00:00Z"`, "3"}}},
			{format: "ns", want: [][]string{{"1764410400123456789", "1"}, {"-1500000000", "2"}, {"0", "3"}}},
			{format: "us", want: [][]string{{"1764410400123456", "1"}, {"-1500000", "2"}, {"0", "3"}}},
			{format: "ms", want: [][]string{{"1764410400123", "1"}, {"-1500", "2"}, {"0", "3"}}},
			{format: "s", want: [][]string{{"1764410400", "1"}, {"-2", "2"}, {"0", "3"}}},
		}
		for _, tc := range cases {
			name := tc.format
			if name == "" {
				name = "default"
			}
			t.Run(name, func(t *testing.T) {
				r := c.getOK(t, "/drain?table=times&after=0&limit=10&columns=time,x_seq&time_format="+tc.format)
				var p feedJSONPage
				feedDecodeStrict(t, r.body, &p)
				require.Equal(t, []string{"time", "x_seq"}, p.Columns)
				got := [][]string{}
				for _, row := range p.Rows {
					got = append(got, feedCells(row))
				}
				require.Equal(t, tc.want, got)
			})
		}
		t.Run("unknown unit", func(t *testing.T) {
			requireFeedError(t, c.get(t, "/drain?table=times&after=0&limit=10&time_format=h"), http.StatusBadRequest, "invalid_parameter")
		})
	})

	t.Run("columns", func(t *testing.T) {
		r := c.getOK(t, "/drain?table=sensor&after=0&limit=10&columns=x_seq,p03,host")
		var p feedJSONPage
		feedDecodeStrict(t, r.body, &p)
		require.Equal(t, []string{"x_seq", "p03", "host"}, p.Columns)
		got := [][]string{}
		for _, row := range p.Rows {
			got = append(got, feedCells(row))
		}
		require.Equal(t, [][]string{
			{"1", "null", `"h1"`}, {"2", "null", `"h2"`}, {"3", "18446744073709551615", `"h1"`}, {"4", "null", `"h1"`},
		}, got)

		r = c.getOK(t, "/drain?table=sensor&after=0&limit=10")
		feedDecodeStrict(t, r.body, &p)
		require.Equal(t, []string{"time", "host", "site", "p00", "p01", "p02", "p03", "s", "x_seq"}, p.Columns, "schema order, x_seq last")

		requireFeedError(t, c.get(t, "/drain?table=sensor&after=0&limit=10&columns=time,nope"), http.StatusBadRequest, "unknown_column")
		requireFeedError(t, c.get(t, "/drain?table=sensor&after=0&limit=10&format=lp&columns=time,host"), http.StatusBadRequest, "invalid_parameter")
		requireFeedError(t, c.get(t, "/drain?table=sensor&after=0&limit=10&format=xml"), http.StatusBadRequest, "invalid_parameter")
	})
}

// TestDrainHTTPLPRoundTrip POSTs lp pages of one daemon as is to another's
// /write and requires identical rows there.
func TestDrainHTTPLPRoundTrip(t *testing.T) {
	a := newFeedClient(t, startDaemon(t, testConfig(t.TempDir())).URL)
	b := newFeedClient(t, startDaemon(t, testConfig(t.TempDir())).URL)
	const table = "we ird,m"
	a.createSyncTable(t, table)
	// Escapes in the measurement, tag keys and values and field keys;
	// strings with a quote, a backslash, a raw newline and the two
	// characters \n; integers at their limits; floats that print in every
	// form; booleans; a point overwritten by a later line; a tagless line.
	a.write(t, `we\ ird\,m,tag\ key\,x\=y=v\ 1\,2\=3,host=h1 f\ 1\=k=1.5,s="first",lit="two chars \\n",i=-9223372036854775808i,imax=9223372036854775807i,u=18446744073709551615u,u0=0u,b=true,fneg=-0.1,fsmall=1e-7,fbig=1.5e300,fint=3,f01=0.30000000000000004 1700000000000000000
we\ ird\,m,host=h2 b=false,s="quote \" backslash \\ raw newline:
here",fneg=-2.5e-300,fz=0 -1
we\ ird\,m,host=h1,tag\ key\,x\=y=v\ 1\,2\=3 s="overwritten \"again\"",i=42i 1700000000000000000
we\ ird\,m,host=h3 lit="unicode: h\u00e9llo, 日本 \\",fz=-0 1700000000000000001
we\ ird\,m u=7u 1700000000000000002`)
	require.Equal(t, uint64(5), a.sync(t, table).Watermark)

	for after, limit := 0, 2; ; {
		r := a.getOK(t, fmt.Sprintf("/drain?table=%s&after=%d&limit=%d&format=lp", url.QueryEscape(table), after, limit))
		require.NotEmpty(t, r.body)
		b.write(t, string(r.body))
		if r.header.Get("Ingestd-More") != "true" {
			break
		}
		next, err := strconv.Atoi(r.header.Get("Ingestd-Next"))
		require.NoError(t, err)
		after = next
	}
	rowsA, rowsB := feedRowsByPoint(t, a, table), feedRowsByPoint(t, b, table)
	require.Len(t, rowsA, 4)
	require.Equal(t, rowsA, rowsB)
	require.Equal(t, feedColumns(t, a, table), feedColumns(t, b, table))
	// Spot checks that the comparison compares what was written.
	require.Equal(t, map[string]string{
		"time": "1700000000000000000", "host": `"h1"`, "tag key,x=y": `"v 1,2=3"`, "f 1=k": "1.5",
		"s": `"overwritten \"again\""`, "lit": `"two chars \\n"`, "i": "42", "imax": "9223372036854775807",
		"u": "18446744073709551615", "u0": "0", "b": "true", "fneg": "-0.1", "fsmall": "1e-7", "fbig": "1.5e+300",
		"fint": "3", "f01": "0.30000000000000004",
	}, rowsB[`host="h1",tag key,x=y="v 1,2=3"@1700000000000000000`])
	require.Equal(t, map[string]string{
		"time": "-1", "host": `"h2"`, "b": "false", "s": `"quote \" backslash \\ raw newline:\nhere"`, "fneg": "-2.5e-300", "fz": "0",
	}, rowsB[`host="h2"@-1`])
	require.Equal(t, map[string]string{
		"time": "1700000000000000001", "host": `"h3"`, "lit": `"unicode: h\\u00e9llo, 日本 \\"`, "fz": "-0",
	}, rowsB[`host="h3"@1700000000000000001`])
	require.Equal(t, map[string]string{"time": "1700000000000000002", "u": "7"}, rowsB["@1700000000000000002"])
}

// ---- named consumers over HTTP (SPEC §6 consumer=NAME) ----

// feedConsumer is one entry of GET /api/v1/tables/{t}/consumers.
type feedConsumer struct {
	Name     string `json:"name"`
	Epoch    uint64 `json:"epoch"`
	Position uint64 `json:"position"`
	LastSeen string `json:"last_seen"`
}

// listConsumers lists table's consumers and checks that last_seen is RFC
// 3339 and not in the future.
func (c *feedClient) listConsumers(t testing.TB, table string) []feedConsumer {
	t.Helper()
	r := c.getOK(t, feedTablePath(table)+"/consumers")
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	var body struct {
		Consumers []feedConsumer `json:"consumers"`
	}
	feedDecodeStrict(t, r.body, &body)
	require.NotNil(t, body.Consumers, "an empty list, not null")
	for i, cons := range body.Consumers {
		ts, err := time.Parse(time.RFC3339Nano, cons.LastSeen)
		require.NoError(t, err, "last_seen of %s", cons.Name)
		require.False(t, ts.After(time.Now()), "last_seen of %s is in the future", cons.Name)
		body.Consumers[i].LastSeen = ""
	}
	return body.Consumers
}

// feedMetric returns the value of the sample whose line starts with
// series (name{labels} as the exposition format prints it).
func feedMetric(t testing.TB, c *feedClient, series string) (float64, bool) {
	t.Helper()
	for _, line := range strings.Split(string(c.getOK(t, "/metrics").body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, "%s", line)
			return f, true
		}
	}
	return 0, false
}

func TestDrainHTTPConsumers(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.feed.MaxConsumersPerTable = 2
	d := startDaemon(t, cfg)
	c := newFeedClient(t, d.URL)
	c.createSyncTable(t, "t")
	c.createSyncTable(t, "u")
	c.write(t, "t v=1i 1\nt v=2i 2\nt v=3i 3\nt v=4i 4\nt v=5i 5")
	drainAs := func(t *testing.T, table, name string, after int) feedResp {
		t.Helper()
		return c.get(t, fmt.Sprintf("/drain?table=%s&after=%d&limit=1&consumer=%s", table, after, url.QueryEscape(name)))
	}
	steps := []struct {
		name string
		do   func(t *testing.T)
		want []feedConsumer // t's consumers afterwards
	}{
		{
			name: "none yet",
			do:   func(*testing.T) {},
			want: []feedConsumer{},
		},
		{
			name: "recorded at after",
			do: func(t *testing.T) {
				require.Equal(t, http.StatusOK, drainAs(t, "t", "m1", 3).status)
				lag, ok := feedMetric(t, c, `ingestd_feed_consumer_lag_fragments{consumer="m1",table="t"}`)
				require.True(t, ok, "lag metric of m1")
				require.InDelta(t, 2, lag, 0)
			},
			want: []feedConsumer{{Name: "m1", Epoch: 1, Position: 3}},
		},
		{
			name: "moved, and a second one",
			do: func(t *testing.T) {
				require.Equal(t, http.StatusOK, drainAs(t, "t", "m1", 5).status)
				require.Equal(t, http.StatusOK, drainAs(t, "t", "a name/with?odd&chars", 0).status)
			},
			want: []feedConsumer{{Name: "a name/with?odd&chars", Epoch: 1, Position: 0}, {Name: "m1", Epoch: 1, Position: 5}},
		},
		{
			name: "a third is refused",
			do: func(t *testing.T) {
				e := requireFeedError(t, drainAs(t, "t", "m3", 0), http.StatusConflict, "too_many_consumers")
				require.Contains(t, e.Message, "--max-consumers-per-table")
				require.Equal(t, http.StatusOK, drainAs(t, "u", "m3", 0).status, "the bound is per table")
			},
			want: []feedConsumer{{Name: "a name/with?odd&chars", Epoch: 1, Position: 0}, {Name: "m1", Epoch: 1, Position: 5}},
		},
		{
			name: "delete one",
			do: func(t *testing.T) {
				r := c.do(t, http.MethodDelete, feedTablePath("t")+"/consumers/"+url.PathEscape("a name/with?odd&chars"), "")
				require.Equal(t, http.StatusNoContent, r.status, "%s", r)
				_, ok := feedMetric(t, c, `ingestd_feed_consumer_lag_fragments{consumer="a name/with?odd&chars",table="t"}`)
				require.False(t, ok, "a deleted consumer has no lag")
			},
			want: []feedConsumer{{Name: "m1", Epoch: 1, Position: 5}},
		},
		{
			name: "then the third fits",
			do: func(t *testing.T) {
				require.Equal(t, http.StatusOK, drainAs(t, "t", "m3", 4).status)
			},
			want: []feedConsumer{{Name: "m1", Epoch: 1, Position: 5}, {Name: "m3", Epoch: 1, Position: 4}},
		},
		{
			name: "unknown consumer and table",
			do: func(t *testing.T) {
				requireFeedError(t, c.do(t, http.MethodDelete, feedTablePath("t")+"/consumers/nope", ""), http.StatusNotFound, "consumer_not_found")
				requireFeedError(t, c.do(t, http.MethodDelete, feedTablePath("nope")+"/consumers/m1", ""), http.StatusNotFound, "table_not_found")
				requireFeedError(t, c.get(t, feedTablePath("nope")+"/consumers"), http.StatusNotFound, "table_not_found")
			},
			want: []feedConsumer{{Name: "m1", Epoch: 1, Position: 5}, {Name: "m3", Epoch: 1, Position: 4}},
		},
		{
			name: "they survive truncate",
			do: func(t *testing.T) {
				require.Equal(t, http.StatusOK, c.do(t, http.MethodPost, feedTablePath("t")+"/truncate", "").status)
				lag, ok := feedMetric(t, c, `ingestd_feed_consumer_lag_fragments{consumer="m1",table="t"}`)
				require.True(t, ok)
				require.InDelta(t, 5, lag, 0, "a stale epoch lags by the whole watermark")
			},
			want: []feedConsumer{{Name: "m1", Epoch: 1, Position: 5}, {Name: "m3", Epoch: 1, Position: 4}},
		},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			st.do(t)
			require.Equal(t, st.want, c.listConsumers(t, "t"))
		})
	}
	t.Run("they vanish with drop", func(t *testing.T) {
		require.Equal(t, http.StatusNoContent, c.do(t, http.MethodDelete, feedTablePath("t"), "").status)
		c.createSyncTable(t, "t")
		require.Empty(t, c.listConsumers(t, "t"))
	})
}

// ---- copy by time range over HTTP (SPEC §6 bootstrap) ----

func TestRowsHTTP(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	c := newFeedClient(t, d.URL)
	// 2026-01-01T00:00:00Z + k s, k = 0..9, written out of time order: ten
	// points, then an overwrite of k=4 and one of k=9, each returned once.
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ts := func(k int) int64 { return t0.Add(time.Duration(k) * time.Second).UnixNano() }
	var lp strings.Builder
	for _, k := range []int{5, 6, 7, 8, 9, 0, 1, 2, 3, 4} {
		fmt.Fprintf(&lp, "r,host=h%d v=%di,s=\"k%d\" %d\n", k%2, k, k, ts(k))
	}
	c.write(t, lp.String()) // auto-created, sync OFF: the copy has it anyway
	require.Equal(t, http.StatusOK, c.do(t, http.MethodPut, feedTablePath("r")+"/sync", `{"enabled": true}`).status)
	c.write(t, fmt.Sprintf("r,host=h0 v=40i %d\nr,host=h1 w=9.5 %d", ts(4), ts(9)))
	require.Equal(t, feedSync{Enabled: true, Epoch: 1, Seq: 2, Watermark: 2, Horizon: 1}, c.sync(t, "r"))
	row := func(k int) map[string]string {
		m := map[string]string{"time": strconv.FormatInt(ts(k), 10), "host": fmt.Sprintf(`"h%d"`, k%2), "v": strconv.Itoa(k), "s": fmt.Sprintf(`"k%d"`, k)}
		switch k {
		case 4:
			m["v"] = "40"
		case 9:
			m["w"] = "9.5"
		}
		return m
	}
	rows := func(ks ...int) []map[string]string {
		out := []map[string]string{}
		for _, k := range ks {
			out = append(out, row(k))
		}
		return out
	}

	cases := []struct {
		name       string
		start, end string
		want       []map[string]string
	}{
		{name: "everything", want: rows(0, 1, 2, 3, 4, 5, 6, 7, 8, 9)},
		{name: "RFC 3339 range", start: "2026-01-01T00:00:02Z", end: "2026-01-01T00:00:07Z", want: rows(2, 3, 4, 5, 6)},
		{name: "RFC 3339 with an offset and nanoseconds", start: "2026-01-01T01:00:01.000000001+01:00", end: "2026-01-01T00:00:03.000000001Z", want: rows(2, 3)},
		{name: "integer nanoseconds", start: strconv.FormatInt(ts(8), 10), end: strconv.FormatInt(ts(9)+1, 10), want: rows(8, 9)},
		{name: "end is exclusive", start: strconv.FormatInt(ts(9), 10), end: strconv.FormatInt(ts(9), 10), want: rows()},
		{name: "start only", start: "2026-01-01T00:00:08Z", want: rows(8, 9)},
		{name: "end only", end: strconv.FormatInt(ts(1), 10), want: rows(0)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := url.Values{"time_format": {"ns"}}
			if tc.start != "" {
				q.Set("start", tc.start)
			}
			if tc.end != "" {
				q.Set("end", tc.end)
			}
			for _, limit := range []int{3, 100} {
				first, got := feedCopy(t, c, "r", limit, q)
				require.Equal(t, uint64(1), first.Epoch)
				require.Equal(t, uint64(2), first.Watermark)
				require.Equal(t, []string{"time", "host", "v", "s", "w"}, first.Columns)
				require.ElementsMatch(t, tc.want, got, "limit %d", limit)
			}
		})
	}

	t.Run("format lp", func(t *testing.T) {
		var lines []string
		cursor := ""
		for page := 0; ; page++ {
			require.Less(t, page, 100)
			q := url.Values{"limit": {"5"}, "format": {"lp"}, "start": {"2026-01-01T00:00:04Z"}, "time_format": {"s"}}
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			r := c.getOK(t, feedTablePath("r")+"/rows?"+q.Encode())
			require.Equal(t, "text/plain; charset=utf-8", r.header.Get("Content-Type"))
			require.Equal(t, "1", r.header.Get("Ingestd-Epoch"))
			require.Equal(t, "2", r.header.Get("Ingestd-Watermark"))
			lines = append(lines, strings.Split(strings.TrimSuffix(string(r.body), "\n"), "\n")...)
			if cursor = r.header.Get("Ingestd-Cursor"); cursor == "" {
				break
			}
		}
		lines = slices.DeleteFunc(lines, func(l string) bool { return l == "" })
		want := []string{}
		for _, k := range []int{4, 5, 6, 7, 8, 9} {
			tags := fmt.Sprintf("r,host=h%d ", k%2)
			switch k {
			case 4:
				want = append(want, fmt.Sprintf(`%sv=40i,s="k4" %d`, tags, ts(k)))
			case 9:
				want = append(want, fmt.Sprintf(`%sv=9i,s="k9",w=9.5 %d`, tags, ts(k)))
			default:
				want = append(want, fmt.Sprintf(`%sv=%di,s="k%d" %d`, tags, k, k, ts(k)))
			}
		}
		require.ElementsMatch(t, want, lines)
	})

	t.Run("refusals", func(t *testing.T) {
		requireFeedError(t, c.get(t, feedTablePath("r")+"/rows"), http.StatusBadRequest, "limit_required")
		requireFeedError(t, c.get(t, feedTablePath("r")+"/rows?limit=0"), http.StatusBadRequest, "invalid_limit")
		requireFeedError(t, c.get(t, feedTablePath("r")+"/rows?limit=1&start=yesterday"), http.StatusBadRequest, "invalid_parameter")
		requireFeedError(t, c.get(t, feedTablePath("r")+"/rows?limit=1&end=2026-01-01"), http.StatusBadRequest, "invalid_parameter")
		requireFeedError(t, c.get(t, feedTablePath("r")+"/rows?limit=1&cursor=bogus!"), http.StatusBadRequest, "invalid_cursor")
		requireFeedError(t, c.get(t, feedTablePath("r")+"/rows?limit=1&format=ndjson"), http.StatusBadRequest, "invalid_parameter")
		requireFeedError(t, c.get(t, feedTablePath("nope")+"/rows?limit=1"), http.StatusNotFound, "table_not_found")

		var p feedRowsPage
		feedDecodeStrict(t, c.getOK(t, feedTablePath("r")+"/rows?limit=2").body, &p)
		require.NotNil(t, p.Cursor)
		require.Equal(t, http.StatusOK, c.do(t, http.MethodPost, feedTablePath("r")+"/truncate", "").status)
		e := requireFeedError(t, c.get(t, feedTablePath("r")+"/rows?limit=2&cursor="+url.QueryEscape(*p.Cursor)), http.StatusConflict, "stale_epoch")
		require.NotNil(t, e.Epoch)
		require.Equal(t, uint64(2), *e.Epoch, "the refusal carries the new epoch")
	})
}

// ---- shutdown ends a long-poll (SPEC §6 wait) ----

func TestDrainHTTPShutdownEndsLongPoll(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	c := newFeedClient(t, d.URL)
	c.createSyncTable(t, "t")
	c.write(t, "t v=1i 1\nt v=2i 2")
	type result struct {
		r   feedResp
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := c.try(http.MethodGet, "/drain?table=t&epoch=1&after=2&limit=10&wait=60s&consumer=poller", "")
		done <- result{r, err}
	}()
	// A long-poll records its consumer before it starts to wait.
	feedEventually(t, 30*time.Second, func() bool { return len(c.listConsumers(t, "t")) == 1 }, "the long-poll is waiting")
	// Shutdown waits up to --shutdown-timeout (10s) for requests, then
	// closes their connections: a long-poll that shutdown did not end
	// fails with a connection error, not 200.
	d.stop(t)
	var res result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the long-poll did not end with the shutdown")
	}
	require.NoError(t, res.err)
	require.Equal(t, http.StatusOK, res.r.status, "%s", res.r)
	var p feedJSONPage
	feedDecodeStrict(t, res.r.body, &p)
	require.Empty(t, p.Rows)
	require.Equal(t, uint64(2), p.Next)
	require.Equal(t, uint64(2), p.Watermark)
	require.False(t, p.More)
}

// feedEventually polls cond every 10ms until it holds, failing after timeout.
func feedEventually(t testing.TB, timeout time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTableAPIEscapedNames reaches tables and consumers whose names need
// escaping in a path segment, escaped as url.PathEscape does (as `ingestd
// mirror` does).
func TestTableAPIEscapedNames(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	c := newFeedClient(t, d.URL)
	for _, name := range []string{"a/b", "x,y z", "100%", "a%41", "q?&=#"} {
		t.Run(name, func(t *testing.T) {
			path := "/api/v1/tables/" + url.PathEscape(name)
			r := c.do(t, http.MethodPut, path, `{"sync": true}`)
			require.Equal(t, http.StatusCreated, r.status, "%s", r)
			measurement := strings.NewReplacer(",", `\,`, " ", `\ `).Replace(name)
			c.write(t, measurement+" v=1i 1\n"+measurement+" v=2i 2")
			var st feedSync
			require.NoError(t, json.Unmarshal(c.getOK(t, path+"/sync").body, &st))
			require.Equal(t, feedSync{Enabled: true, Epoch: 1, Seq: 2, Watermark: 2, Horizon: 1}, st)
			var p feedRowsPage
			feedDecodeStrict(t, c.getOK(t, path+"/rows?limit=10").body, &p)
			require.Equal(t, name, p.Table)
			require.Len(t, p.Rows, 2)
			consumer := "c/" + name
			require.Equal(t, http.StatusOK, c.get(t, "/drain?limit=1&after=1&table="+url.QueryEscape(name)+"&consumer="+url.QueryEscape(consumer)).status)
			cs := c.listConsumers(t, name)
			require.Equal(t, []feedConsumer{{Name: consumer, Epoch: 1, Position: 1}}, cs)
			r = c.do(t, http.MethodDelete, path+"/consumers/"+url.PathEscape(consumer), "")
			require.Equal(t, http.StatusNoContent, r.status, "%s", r)
			require.Empty(t, c.listConsumers(t, name))
			require.Equal(t, http.StatusOK, c.do(t, http.MethodPost, path+"/truncate", "").status)
			r = c.do(t, http.MethodDelete, path, "")
			require.Equal(t, http.StatusNoContent, r.status, "%s", r)
			requireFeedError(t, c.get(t, path), http.StatusNotFound, "table_not_found")
		})
	}
}
