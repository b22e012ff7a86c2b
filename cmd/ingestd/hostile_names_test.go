package main

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/httpapi"
)

// TestHostileNamesHTTP sends names and parameters no table can hold to
// every route that takes one: each is refused with 400 naming the rule,
// nothing is created, error bodies stay small, and /metrics keeps
// answering.
func TestHostileNamesHTTP(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	c := newClientURL(t, d.URL)
	c.createSyncTable(t, "t")
	c.mustWrite(t, "t,h=a v=1i 1\nt,h=a v=2i 2")
	long := strings.Repeat("n", feed.DefaultMaxNameBytes+1)
	cases := []struct {
		name, method, path, body string
		status                   int
		code                     string
		contains                 string
	}{
		{name: "invalid UTF-8 table", method: http.MethodPut, path: "/api/v1/tables/%FF", status: 400, code: "invalid_table_name", contains: "not valid UTF-8"},
		{name: "NUL in table", method: http.MethodPut, path: "/api/v1/tables/a%00b", status: 400, code: "invalid_table_name", contains: "control character"},
		{name: "table too long", method: http.MethodPut, path: "/api/v1/tables/" + long, status: 400, code: "invalid_table_name", contains: "4097 bytes, longer than the limit of 4096"},
		{name: "lookup of an impossible table", method: http.MethodGet, path: "/api/v1/tables/%FF/sync", status: 400, code: "invalid_table_name"},
		{name: "consumer with invalid UTF-8", method: http.MethodGet, path: "/drain?table=t&limit=1&consumer=%FF", status: 400, code: "invalid_name", contains: "consumer"},
		{name: "consumer with a control character", method: http.MethodGet, path: "/drain?table=t&limit=1&consumer=a%0Ab", status: 400, code: "invalid_name"},
		{name: "consumer too long", method: http.MethodGet, path: "/drain?table=t&limit=1&consumer=" + long, status: 400, code: "invalid_name"},
		{name: "delete an impossible consumer", method: http.MethodDelete, path: "/api/v1/tables/t/consumers/%FF", status: 400, code: "invalid_name"},
		{name: "column twice", method: http.MethodGet, path: "/drain?table=t&limit=1&columns=time,v,v", status: 400, code: "invalid_parameter", contains: "more than once"},
		{name: "time 12,000 times (60 KB, within --http-max-header-bytes)", method: http.MethodGet, path: "/drain?table=t&limit=10&columns=" + strings.Repeat("time,", 12_000) + "time", status: 400, code: "invalid_parameter"},
		{name: "bad percent-encoding", method: http.MethodGet, path: "/drain?table=t&limit=1&after=%zz", status: 400, code: "invalid_parameter", contains: "query string"},
		{name: "repeated parameter", method: http.MethodGet, path: "/drain?table=t&limit=1&limit=100", status: 400, code: "invalid_parameter", contains: `"limit" is given more than once`},
		{name: "rows start after 2262", method: http.MethodGet, path: "/api/v1/tables/t/rows?limit=1&start=3000-01-01T00:00:00Z", status: 400, code: "invalid_parameter"},
		{name: "rows end before 1677", method: http.MethodGet, path: "/api/v1/tables/t/rows?limit=1&end=1600-01-01T00:00:00Z", status: 400, code: "invalid_parameter"},
		{name: "rows start beyond int64", method: http.MethodGet, path: "/api/v1/tables/t/rows?limit=1&start=9223372036854775808", status: 400, code: "invalid_parameter"},
		{name: "write with repeated precision", method: http.MethodPost, path: "/write?precision=s&precision=ns", body: "t v=3i 3", status: 400, code: "invalid_parameter"},
		{name: "write with bad percent-encoding", method: http.MethodPost, path: "/api/v2/write?bucket=%G0", body: "t v=3i 3", status: 400, code: "invalid_parameter"},
		{name: "write of a C1 measurement", method: http.MethodPost, path: "/write", body: "m\u0085 v=1i 1\nt v=4i 4", status: 400, code: "invalid", contains: "partial write"},
		{name: "unknown JSON field of 60 KB", method: http.MethodPut, path: "/api/v1/tables/u", body: `{"` + strings.Repeat("f", 60_000) + `":1}`, status: 400, code: "invalid_body", contains: "unknown field"},
		{name: "write of a long field key", method: http.MethodPost, path: "/api/v2/write", body: "t " + long + "=1i 1", status: 400, code: "invalid", contains: "longer than the limit of 4096"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := c.send(t, tc.method, tc.path, tc.body)
			e := requireCode(t, r, tc.status, tc.code)
			require.Contains(t, e.Message, tc.contains)
			require.Less(t, len(r.Body), 2*httpapi.MaxErrorMessageBytes+256, "the error body echoes a bounded part of the input: %.300s", r)
		})
	}
	var tl struct {
		Tables []json.RawMessage `json:"tables"`
	}
	require.NoError(t, json.Unmarshal(c.getOK(t, "/api/v1/tables").Body, &tl))
	require.Len(t, tl.Tables, 1, "nothing was created")
	require.Equal(t, 3, int(c.syncStatus(t, "t").Seq), "the good line next to the bad one is stored")
	require.Empty(t, c.listConsumers(t, "t"))

	// TCP: the bad line is dropped and counted, its neighbours stored.
	conn, err := net.Dial("tcp", d.TCPAddr)
	require.NoError(t, err)
	w := bufio.NewWriter(conn)
	_, err = w.WriteString("t v=5i 5\nm\u0080 v=1i 1\nt," + long + "=x v=6i 6\nt v=7i 7\n")
	require.NoError(t, err)
	require.NoError(t, w.Flush())
	require.NoError(t, conn.Close())
	pollUntil(t, 10*time.Second, func() bool { return c.syncStatus(t, "t").Seq == 5 }, "the two good TCP lines are stored")
	fams := scrapeMetrics(t, d)
	for reason, want := range map[string]float64{"invalid_name": 1, "key_too_long": 1} {
		v, ok := sampleValue(fams, "ingestd_ilp_rejected_lines_total", map[string]string{"transport": "tcp", "reason": reason})
		require.True(t, ok)
		require.Equal(t, want, v, reason)
	}
}
