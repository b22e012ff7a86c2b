package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/httpapi/client"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// ---- helpers of the drain, consumer and copy tests (and mirror_test.go) ----

// feedEnvelope returns the Ingestd-* headers of an ndjson or lp page.
func feedEnvelope(h http.Header) map[string]string {
	out := map[string]string{}
	for _, k := range []string{"Ingestd-Epoch", "Ingestd-After", "Ingestd-Next", "Ingestd-Seq", "Ingestd-Watermark", "Ingestd-More"} {
		out[k] = h.Get(k)
	}
	return out
}

// feedCopy copies table by time range through the client, page by page
// (extra: start, end and time_format), checking that every page is JSON,
// repeats the first page's epoch and watermark and lists no x_ column. It
// returns the first page and every row as column name -> JSON text
// (absent values left out).
func feedCopy(t testing.TB, c *apiClient, table string, limit int, extra url.Values) (*client.RowsPage, []map[string]string) {
	t.Helper()
	var first *client.RowsPage
	var rows []map[string]string
	req := client.RowsRequest{Table: table, Limit: limit, Start: extra.Get("start"), End: extra.Get("end"), TimeFormat: extra.Get("time_format")}
	for k := range extra {
		require.Contains(t, []string{"start", "end", "time_format"}, k, "feedCopy takes no %s", k)
	}
	for page := 0; ; page++ {
		require.Less(t, page, 100_000, "the copy of %s does not end", table)
		p, err := c.api.Rows(context.Background(), req)
		require.NoError(t, err, "copy %s", table)
		require.Equal(t, "application/json", p.Header.Get("Content-Type"))
		require.LessOrEqual(t, len(p.Rows), limit)
		for _, col := range p.Columns {
			require.False(t, strings.HasPrefix(col, "x_"), "the copy lists %s", col)
		}
		if page == 0 {
			first = p
			require.Equal(t, table, p.Table)
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
		if p.Cursor == "" {
			return first, rows
		}
		req.Cursor = p.Cursor
	}
}

// feedColumns returns SHOW COLUMNS as name -> type.
func feedColumns(t testing.TB, c *apiClient, table string) map[string]string {
	t.Helper()
	info, err := c.api.Table(context.Background(), table)
	require.NoError(t, err)
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
func feedRowsByPoint(t testing.TB, c *apiClient, table string) map[string]map[string]string {
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

// ---- drain formats (docs/contract.md#formats) ----

func TestDrainHTTPFormats(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	c := newClientURL(t, d.URL)
	c.createSyncTable(t, "sensor")
	// Fragment 4 overwrites fragment 1's point (p00), so both are
	// delivered as the coalesced row.
	c.mustWrite(t, `sensor,site=north,host=h1 p00=1.5,p01=20i 1764410400000000000
sensor,host=h2 p00=2.5,p02=true 1764410400000000000
sensor,host=h1,site=north p01=-9223372036854775808i,p03=18446744073709551615u,s="a \"q\" \\ b" 1764410410000000000
sensor,host=h1,site=north p00=1.6 1764410400000000000`)
	c.createSyncTable(t, "times")
	c.mustWrite(t, "times v=1i 1764410400123456789\ntimes v=2i -1500000000\ntimes v=3i 0")

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
					`{"x_schema":{"new_columns":[{"name":"host","kind":"tag"},{"name":"site","kind":"tag"},{"name":"p00","kind":"float"},{"name":"p01","kind":"integer"},{"name":"p02","kind":"boolean"},{"name":"p03","kind":"unsigned"},{"name":"s","kind":"string"}]}}`,
					`{"time":"2025-11-29T10:00:00Z","host":"h1","site":"north","p00":1.6,"p01":20,"x_seq":1,"x_op":"insert"}`,
					`{"time":"2025-11-29T10:00:00Z","host":"h2","p00":2.5,"p02":true,"x_seq":2,"x_op":"insert"}`,
					`{"time":"2025-11-29T10:00:10Z","host":"h1","site":"north","p01":-9223372036854775808,"p03":18446744073709551615,"s":"a \"q\" \\ b","x_seq":3,"x_op":"insert"}`,
				},
			},
			{
				name: "last page", query: "table=sensor&after=3&limit=3&format=ndjson",
				env:   map[string]string{"Ingestd-Epoch": "1", "Ingestd-After": "3", "Ingestd-Next": "4", "Ingestd-Seq": "4", "Ingestd-Watermark": "4", "Ingestd-More": "false"},
				lines: []string{`{"time":"2025-11-29T10:00:00Z","host":"h1","site":"north","p00":1.6,"p01":20,"x_seq":4,"x_op":"update"}`},
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
				require.Equal(t, "application/x-ndjson", r.Header.Get("Content-Type"))
				require.Equal(t, tc.env, feedEnvelope(r.Header))
				want := ""
				for _, l := range tc.lines {
					want += l + "\n"
				}
				require.Equal(t, want, string(r.Body))
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
				require.Equal(t, "text/plain; charset=utf-8", r.Header.Get("Content-Type"))
				require.Equal(t, tc.env, feedEnvelope(r.Header))
				require.Equal(t, tc.body, string(r.Body))
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
				p, _ := c.drainOK(t, url.Values{"table": {"times"}, "after": {"0"}, "limit": {"10"}, "columns": {"time,x_seq"}, "time_format": {tc.format}})
				require.Equal(t, []string{"time", "x_seq"}, p.Columns)
				got := [][]string{}
				for _, row := range p.Rows {
					got = append(got, client.CellTexts(row))
				}
				require.Equal(t, tc.want, got)
			})
		}
		t.Run("unknown unit", func(t *testing.T) {
			requireCode(t, c.get(t, "/drain?table=times&after=0&limit=10&time_format=h"), http.StatusBadRequest, "invalid_parameter")
		})
	})

	t.Run("columns", func(t *testing.T) {
		p, _ := c.drainOK(t, url.Values{"table": {"sensor"}, "after": {"0"}, "limit": {"10"}, "columns": {"x_seq,p03,host"}})
		require.Equal(t, []string{"x_seq", "p03", "host"}, p.Columns)
		got := [][]string{}
		for _, row := range p.Rows {
			got = append(got, client.CellTexts(row))
		}
		require.Equal(t, [][]string{
			{"1", "null", `"h1"`}, {"2", "null", `"h2"`}, {"3", "18446744073709551615", `"h1"`}, {"4", "null", `"h1"`},
		}, got)

		p, _ = c.drainOK(t, url.Values{"table": {"sensor"}, "after": {"0"}, "limit": {"10"}})
		require.Equal(t, []string{"time", "host", "site", "p00", "p01", "p02", "p03", "s", "x_seq", "x_op"}, p.Columns, "schema order, x_seq and x_op last")

		requireCode(t, c.get(t, "/drain?table=sensor&after=0&limit=10&columns=time,nope"), http.StatusBadRequest, "unknown_column")
		requireCode(t, c.get(t, "/drain?table=sensor&after=0&limit=10&format=lp&columns=time,host"), http.StatusBadRequest, "invalid_parameter")
		requireCode(t, c.get(t, "/drain?table=sensor&after=0&limit=10&format=xml"), http.StatusBadRequest, "invalid_parameter")
	})
}

// TestDrainHTTPLPRoundTrip POSTs lp pages of one daemon as is to another's
// /write and requires identical rows there.
func TestDrainHTTPLPRoundTrip(t *testing.T) {
	a := newClientURL(t, startDaemon(t, testConfig(t.TempDir())).URL)
	b := newClientURL(t, startDaemon(t, testConfig(t.TempDir())).URL)
	const table = "we ird,m"
	a.createSyncTable(t, table)
	// Escapes in the measurement, tag keys and values and field keys;
	// strings with a quote, a backslash, a raw newline and the two
	// characters \n; integers at their limits; floats that print in every
	// form; booleans; a point overwritten by a later line; a tagless line.
	a.mustWrite(t, `we\ ird\,m,tag\ key\,x\=y=v\ 1\,2\=3,host=h1 f\ 1\=k=1.5,s="first",lit="two chars \\n",i=-9223372036854775808i,imax=9223372036854775807i,u=18446744073709551615u,u0=0u,b=true,fneg=-0.1,fsmall=1e-7,fbig=1.5e300,fint=3,f01=0.30000000000000004 1700000000000000000
we\ ird\,m,host=h2 b=false,s="quote \" backslash \\ raw newline:
here",fneg=-2.5e-300,fz=0 -1
we\ ird\,m,host=h1,tag\ key\,x\=y=v\ 1\,2\=3 s="overwritten \"again\"",i=42i 1700000000000000000
we\ ird\,m,host=h3 lit="unicode: h\u00e9llo, 日本 \\",fz=-0 1700000000000000001
we\ ird\,m u=7u 1700000000000000002`)
	require.Equal(t, uint64(5), a.syncStatus(t, table).Watermark)

	for after, limit := 0, 2; ; {
		r := a.getOK(t, fmt.Sprintf("/drain?table=%s&after=%d&limit=%d&format=lp", url.QueryEscape(table), after, limit))
		require.NotEmpty(t, r.Body)
		b.mustWrite(t, string(r.Body))
		if r.Header.Get("Ingestd-More") != "true" {
			break
		}
		next, err := strconv.Atoi(r.Header.Get("Ingestd-Next"))
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

// ---- named consumers over HTTP (docs/contract.md#consumers) ----

// feedConsumer is one entry of GET /api/v1/tables/{t}/consumers, without
// its last_seen.
type feedConsumer struct {
	Name     string
	Epoch    uint64
	Position uint64
}

// listConsumers lists table's consumers through the client and checks
// that last_seen is set and not in the future.
func (c *apiClient) listConsumers(t testing.TB, table string) []feedConsumer {
	t.Helper()
	cs, err := c.api.Consumers(context.Background(), table)
	require.NoError(t, err)
	require.NotNil(t, cs, "an empty list, not null")
	out := []feedConsumer{}
	for _, cons := range cs {
		require.False(t, cons.LastSeen.IsZero(), "last_seen of %s", cons.Name)
		require.False(t, cons.LastSeen.After(time.Now()), "last_seen of %s is in the future", cons.Name)
		out = append(out, feedConsumer{Name: cons.Name, Epoch: cons.Epoch, Position: cons.Position})
	}
	return out
}

// feedMetric returns the value of the sample whose line starts with
// series (name{labels} as the exposition format prints it).
func feedMetric(t testing.TB, c *apiClient, series string) (float64, bool) {
	t.Helper()
	for _, line := range strings.Split(string(c.getOK(t, "/metrics").Body), "\n") {
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
	c := newClientURL(t, d.URL)
	c.createSyncTable(t, "t")
	c.createSyncTable(t, "u")
	c.mustWrite(t, "t v=1i 1\nt v=2i 2\nt v=3i 3\nt v=4i 4\nt v=5i 5")
	drainAs := func(t *testing.T, table, name string, after int) response {
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
				require.Equal(t, http.StatusOK, drainAs(t, "t", "m1", 3).Status)
				lag, ok := feedMetric(t, c, `ingestd_feed_consumer_lag_fragments{consumer="m1",table="t"}`)
				require.True(t, ok, "lag metric of m1")
				require.InDelta(t, 2, lag, 0)
			},
			want: []feedConsumer{{Name: "m1", Epoch: 1, Position: 3}},
		},
		{
			name: "moved, and a second one",
			do: func(t *testing.T) {
				require.Equal(t, http.StatusOK, drainAs(t, "t", "m1", 5).Status)
				require.Equal(t, http.StatusOK, drainAs(t, "t", "a name/with?odd&chars", 0).Status)
			},
			want: []feedConsumer{{Name: "a name/with?odd&chars", Epoch: 1, Position: 0}, {Name: "m1", Epoch: 1, Position: 5}},
		},
		{
			name: "a third is refused",
			do: func(t *testing.T) {
				e := requireCode(t, drainAs(t, "t", "m3", 0), http.StatusConflict, "too_many_consumers")
				require.Contains(t, e.Message, "--max-consumers-per-table")
				require.Equal(t, http.StatusOK, drainAs(t, "u", "m3", 0).Status, "the bound is per table")
			},
			want: []feedConsumer{{Name: "a name/with?odd&chars", Epoch: 1, Position: 0}, {Name: "m1", Epoch: 1, Position: 5}},
		},
		{
			name: "delete one",
			do: func(t *testing.T) {
				r := c.send(t, http.MethodDelete, tablePath("t")+"/consumers/"+url.PathEscape("a name/with?odd&chars"), "")
				require.Equal(t, http.StatusNoContent, r.Status, "%s", r)
				_, ok := feedMetric(t, c, `ingestd_feed_consumer_lag_fragments{consumer="a name/with?odd&chars",table="t"}`)
				require.False(t, ok, "a deleted consumer has no lag")
			},
			want: []feedConsumer{{Name: "m1", Epoch: 1, Position: 5}},
		},
		{
			name: "then the third fits",
			do: func(t *testing.T) {
				require.Equal(t, http.StatusOK, drainAs(t, "t", "m3", 4).Status)
			},
			want: []feedConsumer{{Name: "m1", Epoch: 1, Position: 5}, {Name: "m3", Epoch: 1, Position: 4}},
		},
		{
			name: "unknown consumer and table",
			do: func(t *testing.T) {
				requireCode(t, c.send(t, http.MethodDelete, tablePath("t")+"/consumers/nope", ""), http.StatusNotFound, "consumer_not_found")
				requireCode(t, c.send(t, http.MethodDelete, tablePath("nope")+"/consumers/m1", ""), http.StatusNotFound, "table_not_found")
				requireCode(t, c.get(t, tablePath("nope")+"/consumers"), http.StatusNotFound, "table_not_found")
			},
			want: []feedConsumer{{Name: "m1", Epoch: 1, Position: 5}, {Name: "m3", Epoch: 1, Position: 4}},
		},
		{
			name: "they survive truncate",
			do: func(t *testing.T) {
				require.Equal(t, http.StatusOK, c.send(t, http.MethodPost, tablePath("t")+"/truncate", "").Status)
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
		require.Equal(t, http.StatusNoContent, c.send(t, http.MethodDelete, tablePath("t"), "").Status)
		c.createSyncTable(t, "t")
		require.Empty(t, c.listConsumers(t, "t"))
	})
}

// ---- copy by time range over HTTP (docs/contract.md#bootstrap) ----

func TestRowsHTTP(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	c := newClientURL(t, d.URL)
	// 2026-01-01T00:00:00Z + k s, k = 0..9, written out of time order: ten
	// points, then an overwrite of k=4 and one of k=9, each returned once.
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ts := func(k int) int64 { return t0.Add(time.Duration(k) * time.Second).UnixNano() }
	var lp strings.Builder
	for _, k := range []int{5, 6, 7, 8, 9, 0, 1, 2, 3, 4} {
		fmt.Fprintf(&lp, "r,host=h%d v=%di,s=\"k%d\" %d\n", k%2, k, k, ts(k))
	}
	c.mustWrite(t, lp.String()) // auto-created, sync OFF: the copy has it anyway
	require.Equal(t, http.StatusOK, c.send(t, http.MethodPut, tablePath("r")+"/sync", `{"enabled": true}`).Status)
	c.mustWrite(t, fmt.Sprintf("r,host=h0 v=40i %d\nr,host=h1 w=9.5 %d", ts(4), ts(9)))
	require.Equal(t, syncState{Enabled: true, Epoch: 1, Seq: 2, Watermark: 2, Horizon: 1}, c.syncStatus(t, "r"))
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
			r := c.getOK(t, tablePath("r")+"/rows?"+q.Encode())
			require.Equal(t, "text/plain; charset=utf-8", r.Header.Get("Content-Type"))
			require.Equal(t, "1", r.Header.Get("Ingestd-Epoch"))
			require.Equal(t, "2", r.Header.Get("Ingestd-Watermark"))
			lines = append(lines, strings.Split(strings.TrimSuffix(string(r.Body), "\n"), "\n")...)
			if cursor = r.Header.Get("Ingestd-Cursor"); cursor == "" {
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
		requireCode(t, c.get(t, tablePath("r")+"/rows"), http.StatusBadRequest, "limit_required")
		requireCode(t, c.get(t, tablePath("r")+"/rows?limit=0"), http.StatusBadRequest, "invalid_limit")
		requireCode(t, c.get(t, tablePath("r")+"/rows?limit=1&start=yesterday"), http.StatusBadRequest, "invalid_parameter")
		requireCode(t, c.get(t, tablePath("r")+"/rows?limit=1&end=2026-01-01"), http.StatusBadRequest, "invalid_parameter")
		requireCode(t, c.get(t, tablePath("r")+"/rows?limit=1&cursor=bogus!"), http.StatusBadRequest, "invalid_cursor")
		requireCode(t, c.get(t, tablePath("r")+"/rows?limit=1&format=ndjson"), http.StatusBadRequest, "invalid_parameter")
		requireCode(t, c.get(t, tablePath("nope")+"/rows?limit=1"), http.StatusNotFound, "table_not_found")

		p, err := c.api.Rows(context.Background(), client.RowsRequest{Table: "r", Limit: 2})
		require.NoError(t, err)
		require.NotEmpty(t, p.Cursor)
		require.Equal(t, http.StatusOK, c.send(t, http.MethodPost, tablePath("r")+"/truncate", "").Status)
		e := requireCode(t, c.get(t, tablePath("r")+"/rows?limit=2&cursor="+url.QueryEscape(p.Cursor)), http.StatusConflict, "stale_epoch")
		require.NotNil(t, e.Epoch)
		require.Equal(t, uint64(2), *e.Epoch, "the refusal carries the new epoch")
	})
}

// ---- shutdown ends a long-poll (docs/contract.md#long-poll) ----

func TestDrainHTTPShutdownEndsLongPoll(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	c := newClientURL(t, d.URL)
	c.createSyncTable(t, "t")
	c.mustWrite(t, "t v=1i 1\nt v=2i 2")
	type result struct {
		p   *client.Page
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, err := c.api.Drain(context.Background(), client.DrainRequest{Table: "t", Epoch: 1, After: 2, Limit: 10, Wait: 60 * time.Second, Consumer: "poller"})
		done <- result{p, err}
	}()
	// A long-poll records its consumer before it starts to wait.
	pollUntil(t, 30*time.Second, func() bool { return len(c.listConsumers(t, "t")) == 1 }, "%s", "the long-poll is waiting")
	// Shutdown waits up to --shutdown-timeout (10s) for requests, then
	// closes their connections: a long-poll that shutdown did not end
	// fails with a connection error, not 200.
	d.stop(t)
	var res result
	select {
	case res = <-done:
	case <-time.After(testdeadline.Scale(30 * time.Second)):
		t.Fatal("the long-poll did not end with the shutdown")
	}
	require.NoError(t, res.err, "200, not a connection error")
	p := res.p
	require.Empty(t, p.Rows)
	require.Equal(t, uint64(2), p.Next)
	require.Equal(t, uint64(2), p.Watermark)
	require.False(t, p.More)
}

// TestDrainHTTPLongPollOutlivesWriteTimeout checks that --http-write-timeout
// counts from a page's first byte, not from the request: a long-poll
// waiting five times as long as the timeout is answered, then the next
// request on its connection too.
func TestDrainHTTPLongPollOutlivesWriteTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	cfg := testConfig(t.TempDir())
	cfg.http.WriteTimeout = timeout
	d := startDaemon(t, cfg)
	c := newClientURL(t, d.URL)
	c.createSyncTable(t, "t")
	c.mustWrite(t, "t v=1i 1")
	start := time.Now()
	p, err := c.api.Drain(context.Background(), client.DrainRequest{Table: "t", After: 1, Limit: 10, Wait: 5 * timeout})
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), 5*timeout, "the poll waited")
	require.Empty(t, p.Rows)
	require.Equal(t, uint64(1), p.Next)
	p, err = c.api.Drain(context.Background(), client.DrainRequest{Table: "t", Limit: 10})
	require.NoError(t, err)
	require.Len(t, p.Rows, 1)
}

// TestTableAPIEscapedNames reaches tables and consumers whose names need
// escaping in a path segment, escaped as url.PathEscape does (as `ingestd
// mirror` does).
func TestTableAPIEscapedNames(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	c := newClientURL(t, d.URL)
	for _, name := range []string{"a/b", "x,y z", "100%", "a%41", "q?&=#"} {
		t.Run(name, func(t *testing.T) {
			path := "/api/v1/tables/" + url.PathEscape(name)
			r := c.send(t, http.MethodPut, path, `{"sync": true}`)
			require.Equal(t, http.StatusCreated, r.Status, "%s", r)
			measurement := strings.NewReplacer(",", `\,`, " ", `\ `).Replace(name)
			c.mustWrite(t, measurement+" v=1i 1\n"+measurement+" v=2i 2")
			require.Equal(t, syncState{Enabled: true, Epoch: 1, Seq: 2, Watermark: 2, Horizon: 1}, c.syncStatus(t, name))
			p, err := c.api.Rows(context.Background(), client.RowsRequest{Table: name, Limit: 10})
			require.NoError(t, err)
			require.Equal(t, name, p.Table)
			require.Len(t, p.Rows, 2)
			consumer := "c/" + name
			require.Equal(t, http.StatusOK, c.get(t, "/drain?limit=1&after=1&table="+url.QueryEscape(name)+"&consumer="+url.QueryEscape(consumer)).Status)
			cs := c.listConsumers(t, name)
			require.Equal(t, []feedConsumer{{Name: consumer, Epoch: 1, Position: 1}}, cs)
			r = c.send(t, http.MethodDelete, path+"/consumers/"+url.PathEscape(consumer), "")
			require.Equal(t, http.StatusNoContent, r.Status, "%s", r)
			require.Empty(t, c.listConsumers(t, name))
			require.Equal(t, http.StatusOK, c.send(t, http.MethodPost, path+"/truncate", "").Status)
			r = c.send(t, http.MethodDelete, path, "")
			require.Equal(t, http.StatusNoContent, r.Status, "%s", r)
			requireCode(t, c.get(t, path), http.StatusNotFound, "table_not_found")
		})
	}
}
