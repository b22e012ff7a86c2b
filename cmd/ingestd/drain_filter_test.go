package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/httpapi/client"
)

// filterRow is what TestDrainFilters knows of one drained fragment.
type filterRow struct {
	seq    uint64
	host   string
	region string
	time   int64
	system bool // usage_system set in the row
	update bool // x_op
}

// TestDrainFilters drains a table through the client with tag, IN, has,
// time-range and operation filters (docs/contract.md#filters) in small
// pages, on a daemon whose --max-drain-scan is small enough that pages end
// empty: every filtered drain returns exactly the unfiltered drain's rows
// filtered client-side, none lost or repeated, with next covering what a
// page skipped. It also checks x_op (docs/contract.md#operation), a column
// added mid-stream (docs/contract.md#schema-changes) in every format, lag
// (docs/contract.md#lag) and lp with op_tag written back.
func TestDrainFilters(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.feed.MaxDrainLimit, cfg.feed.MaxDrainScan = 40, 40
	d := startDaemon(t, cfg)
	c := newClient(t, d)
	c.createSyncTable(t, "cpu")
	const base = int64(1767225600000000000)
	var lp strings.Builder
	line := func(i int, extra string) {
		host := i % 10
		fmt.Fprintf(&lp, "cpu,host=h%d,region=%s usage_user=%di", host, []string{"eu", "us", "ap"}[host%3], i)
		if i%3 == 0 {
			fmt.Fprintf(&lp, ",usage_system=%di", i)
		}
		fmt.Fprintf(&lp, "%s %d\n", extra, base+int64(i/10))
	}
	for i := range 200 {
		line(i, "")
	}
	c.mustWrite(t, lp.String())
	lp.Reset()
	// A column added mid-stream, and points written again (updates).
	for i := 150; i < 260; i++ {
		line(i, ",temp=1.5")
	}
	c.mustWrite(t, lp.String())

	ctx := context.Background()
	var all []filterRow
	var firstTemp uint64
	reported := map[string]int{}
	for after, more := uint64(0), true; more; {
		pg, err := c.api.Drain(ctx, client.DrainRequest{Table: "cpu", After: after, Limit: 7, TimeFormat: "ns"})
		require.NoError(t, err)
		col := func(name string) int { return slices.Index(pg.Columns, name) }
		for _, nc := range pg.NewColumns {
			reported[nc.Name+":"+nc.Kind]++
		}
		if pg.After > 0 {
			require.Equal(t, pg.After <= 200, slices.Contains(pg.NewColumns, client.NewColumn{Name: "temp", Kind: "float"}),
				"page after %d: temp, added at x_seq 200, is reported from every cursor at or below it", pg.After)
		}
		for _, row := range pg.Rows {
			var r filterRow
			var op string
			require.NoError(t, json.Unmarshal(row[col("x_seq")], &r.seq))
			require.NoError(t, json.Unmarshal(row[col("host")], &r.host))
			require.NoError(t, json.Unmarshal(row[col("region")], &r.region))
			require.NoError(t, json.Unmarshal(row[col("time")], &r.time))
			require.NoError(t, json.Unmarshal(row[col("x_op")], &op))
			r.system, r.update = string(row[col("usage_system")]) != "null", op == "update"
			if ct := col("temp"); ct >= 0 && string(row[ct]) != "null" && firstTemp == 0 {
				firstTemp = r.seq
				require.Positive(t, reported["temp:float"], "temp is reported before or with the first row carrying it (a coalesced row of a point written again)")
			}
			all = append(all, r)
		}
		require.Equal(t, pg.Seq-pg.Next, pg.LagFragments, "lag_fragments is seq - next")
		if pg.More {
			require.Positive(t, pg.Lag, "a page behind the table lags in seconds")
		} else {
			require.Zero(t, pg.Lag)
		}
		after, more = pg.Next, pg.More
	}
	require.Len(t, all, 310)
	require.NotZero(t, firstTemp)
	require.Equal(t, map[string]int{"host:tag": 1, "region:tag": 1, "usage_user:integer": 1, "usage_system:integer": 1, "temp:float": 200/7 + 1}, reported,
		"the first columns on the first page, temp on every page from a cursor at or below 200")
	updates := 0
	for i, r := range all {
		require.Equal(t, i >= 200 && i < 250, r.update, "x_seq %d: the second write of a point is its update", r.seq)
		if r.update {
			updates++
		}
	}
	require.Equal(t, 50, updates)

	cases := []struct {
		name string
		req  client.DrainRequest
		keep func(r filterRow) bool
	}{
		{"tag", client.DrainRequest{Tags: map[string][]string{"host": {"h3"}}}, func(r filterRow) bool { return r.host == "h3" }},
		{"tag in, and a second tag", client.DrainRequest{Tags: map[string][]string{"region": {"eu", "ap"}, "host": {"h0", "h2", "h3"}}},
			func(r filterRow) bool {
				return (r.region == "eu" || r.region == "ap") && slices.Contains([]string{"h0", "h2", "h3"}, r.host)
			}},
		{"rare", client.DrainRequest{Tags: map[string][]string{"host": {"h7"}}, Start: time.Unix(0, base+3), End: time.Unix(0, base+4), HasStart: true, HasEnd: true},
			func(r filterRow) bool { return r.host == "h7" && r.time == base+3 }},
		{"has", client.DrainRequest{Has: []string{"usage_system"}}, func(r filterRow) bool { return r.system }},
		{"updates", client.DrainRequest{Operation: client.OpUpdate}, func(r filterRow) bool { return r.update }},
		{"inserts of one region", client.DrainRequest{Operation: client.OpInsert, Tags: map[string][]string{"region": {"us"}}},
			func(r filterRow) bool { return !r.update && r.region == "us" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var want, got []uint64
			for _, r := range all {
				if tc.keep(r) {
					want = append(want, r.seq)
				}
			}
			require.NotEmpty(t, want)
			req := tc.req
			req.Table, req.Limit, req.Columns = "cpu", 3, []string{"x_seq"}
			limited := 0
			for more := true; more; {
				pg, err := c.api.Drain(ctx, req)
				require.NoError(t, err)
				for _, row := range pg.Rows {
					s, err := strconv.ParseUint(string(row[0]), 10, 64)
					require.NoError(t, err)
					got = append(got, s)
				}
				if pg.ScanLimited {
					limited++
					require.True(t, pg.More)
					require.Greater(t, pg.Next, req.After, "a page that ends at the scan bound advances next")
				} else if len(pg.Rows) < req.Limit {
					require.Equal(t, pg.Watermark, pg.Next, "a short page that did not hit the bound reached the watermark")
				}
				req.After, more = pg.Next, pg.More
			}
			require.Equal(t, want, got, "the filtered drain is the unfiltered one filtered")
			if tc.name == "rare" {
				require.Positive(t, limited, "a drain matching 1 fragment of 310 meets the scan bound")
			}
		})
	}

	t.Run("sql", func(t *testing.T) {
		var want []uint64
		for _, r := range all {
			if r.update && (r.host == "h1" || r.host == "h4") && r.system && r.time >= base+17 {
				want = append(want, r.seq)
			}
		}
		require.NotEmpty(t, want)
		var got []uint64
		for after, more := uint64(0), true; more; {
			q := fmt.Sprintf("SELECT x_seq FROM cpu WHERE x_seq > %d AND host IN ('h1', 'h4') AND x_op = 'update' AND usage_system IS NOT NULL AND time >= %d LIMIT 2", after, base+17)
			resp, err := http.PostForm(d.URL+"/api/v1/sql", url.Values{"q": {q}})
			require.NoError(t, err)
			var pg struct {
				Next        uint64
				More        bool
				ScanLimited bool `json:"scan_limited"`
				Rows        [][]uint64
			}
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&pg))
			require.NoError(t, resp.Body.Close())
			for _, r := range pg.Rows {
				got = append(got, r[0])
			}
			after, more = pg.Next, pg.More
		}
		require.Equal(t, want, got, "a SQL drain filters as GET /drain does")
		resp, err := http.PostForm(d.URL+"/api/v1/sql", url.Values{"q": {"SELECT * FROM cpu WHERE x_seq > 0 AND nosuch = 'a' LIMIT 2"}})
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "an unknown tag")
	})

	t.Run("new columns in every format", func(t *testing.T) {
		after := uint64(200)
		pg, err := c.api.Drain(ctx, client.DrainRequest{Table: "cpu", After: after, Limit: 1})
		require.NoError(t, err)
		require.Contains(t, pg.NewColumns, client.NewColumn{Name: "temp", Kind: "float"})
		for _, format := range []string{client.FormatNDJSON, client.FormatLP} {
			pg, err := c.api.Drain(ctx, client.DrainRequest{Table: "cpu", After: after, Limit: 1, Format: format})
			require.NoError(t, err)
			require.Contains(t, pg.NewColumns, client.NewColumn{Name: "temp", Kind: "float"}, format)
			require.Equal(t, 1, pg.Lines(), format)
			if format == client.FormatNDJSON {
				first, _, _ := strings.Cut(string(pg.Body), "\n")
				require.Contains(t, first, `{"x_schema":{"new_columns":[`)
				require.Contains(t, first, `{"name":"temp","kind":"float"}`)
			}
		}
		pg, err = c.api.Drain(ctx, client.DrainRequest{Table: "cpu", After: after + 1, Limit: 1, Format: client.FormatLP})
		require.NoError(t, err)
		require.Empty(t, pg.NewColumns, "not from a cursor above the x_seq it was added at")
		require.Empty(t, pg.Header.Get("Ingestd-New-Columns"))
	})

	t.Run("lp with op_tag writes back", func(t *testing.T) {
		pg, err := c.api.Drain(ctx, client.DrainRequest{Table: "cpu", After: 195, Limit: 10, Format: client.FormatLP, OpTag: "op"})
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSuffix(string(pg.Body), "\n"), "\n")
		require.Len(t, lines, 10)
		for i, l := range lines {
			want := ",op=insert"
			if all[195+i].update {
				want = ",op=update"
			}
			require.Contains(t, l, want, "line %d", i)
		}
		require.Equal(t, pg.Lag > 0, pg.LagFragments > 0)
		body := strings.ReplaceAll(string(pg.Body), "cpu,", "cpu_copy,")
		c.mustWrite(t, body)
		r := c.get(t, "/api/v1/tables/cpu_copy")
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		require.Contains(t, string(r.Body), `"op"`)
		r = c.drain(t, url.Values{"table": {"cpu"}, "after": {"0"}, "limit": {"1"}, "format": {"lp"}, "op_tag": {"host"}})
		require.Equal(t, http.StatusBadRequest, r.Status, "op_tag naming a column: %s", r.Body)
	})
}

// TestDrainFiltersRefused checks that every malformed filter, and every
// filter past a budget, is a 400 naming it and counted
// (docs/security.md#drain-filters).
func TestDrainFiltersRefused(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.feed.MaxDrainFilters, cfg.feed.MaxDrainFilterValues, cfg.feed.MaxDrainFilterValueBytes = 2, 3, 8
	d := startDaemon(t, cfg)
	c := newClient(t, d)
	c.createSyncTable(t, "t")
	c.mustWrite(t, "t,host=a v=1 1\n")
	cases := []struct {
		name, query, code, names, reason string
	}{
		{"unknown tag", "tag.nosuch=a", "invalid_filter", `"nosuch"`, "unknown_tag"},
		{"field as a tag", "tag.v=1", "invalid_filter", `"v"`, "unknown_tag"},
		{"has of a tag", "has=host", "invalid_filter", `"host"`, "unknown_field"},
		{"has of nothing", "has=zz", "invalid_filter", `"zz"`, "unknown_field"},
		{"empty tag key", "tag.=a", "invalid_filter", "names no tag", ""},
		{"bad operation", "operation=delete", "invalid_filter", `"delete"`, ""},
		{"bad start", "start=yesterday", "invalid_filter", `"yesterday"`, ""},
		{"bad precision", "start=1&precision=d", "invalid_filter", `"d"`, ""},
		{"empty range", "start=5&end=5", "invalid_filter", "start 5 is not before end 5", "time_range"},
		{"too many filters", "tag.host=a&has=v,v", "filter_limit", "--max-drain-filters=2", "filters"},
		{"in list too long", "tag.host=in:a,b,c,d", "filter_limit", "--max-drain-filter-values=3", "values"},
		{"value too long", "tag.host=abcdefghi", "filter_limit", "--max-drain-filter-value-bytes=8", "value_bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := c.get(t, "/drain?table=t&after=0&limit=10&"+tc.query)
			require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
			require.Equal(t, "application/json", r.Header.Get("Content-Type"))
			var body struct{ Code, Message string }
			require.NoError(t, json.Unmarshal(r.Body, &body))
			require.Equal(t, tc.code, body.Code)
			require.Contains(t, body.Message, tc.names)
			if tc.reason != "" {
				n, ok := sampleValue(scrapeMetrics(t, d), "ingestd_feed_drain_filter_refusals_total", map[string]string{"reason": tc.reason})
				require.True(t, ok)
				require.Positive(t, n)
			}
		})
	}
	resp, err := http.PostForm(d.URL+"/api/v1/sql", url.Values{"q": {"SELECT * FROM t WHERE x_seq > 0 AND host IN ('a', 'b', 'c', 'd') LIMIT 1"}})
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "a SQL IN list past --max-drain-filter-values")
	n, ok := sampleValue(scrapeMetrics(t, d), "ingestd_sql_limit_refusals_total", map[string]string{"limit": "in_values"})
	require.True(t, ok)
	require.Equal(t, float64(1), n)
	r := c.get(t, "/drain?table=t&after=0&limit=10&tag.host=a&has=v&start=0&end=2&precision=ns&operation=insert")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), `"rows":[["1970-01-01T00:00:00.000000001Z","a",1,1,"insert"]]`)
}
