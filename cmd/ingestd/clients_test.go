package main

// Real clients against the whole daemon (docs/guide.md#writing-data): influxdb-client-go v2,
// the InfluxDB 1.x client and, when INGESTD_TELEGRAF names a binary (as
// .ci/telegraf-e2e.sh does), Telegraf through its three outputs. What they
// wrote is checked through the drain.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	influxdb2 "github.com/influxdata/influxdb-client-go/v2"
	influxhttp "github.com/influxdata/influxdb-client-go/v2/api/http"
	"github.com/influxdata/influxdb-client-go/v2/api/write"
	influx1 "github.com/influxdata/influxdb1-client/v2"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/httpapi"
	"github.com/ingestd/ingestd/httpapi/auth"
	"github.com/ingestd/ingestd/httpapi/client"
)

// clRow is a drained row: column name to the cell's JSON text (time in
// integer nanoseconds); null cells and x_seq are left out.
type clRow map[string]string

// clStart runs a daemon and creates tables WITH SYNC.
func clStart(t testing.TB, mod func(*config), tables ...string) *daemon {
	t.Helper()
	cfg := testConfig(t.TempDir())
	if mod != nil {
		mod(&cfg)
	}
	d := startDaemon(t, cfg)
	clCreate(t, d, tables...)
	return d
}

// clCreate creates tables WITH SYNC through d.client().
func clCreate(t testing.TB, d *daemon, tables ...string) {
	t.Helper()
	c := newAPIClient(t, d.URL, d.client())
	for _, tb := range tables {
		c.createSyncTable(t, tb)
	}
}

// clDrain returns every row of table's feed, in x_seq order, drained
// through d.client().
func clDrain(t testing.TB, d *daemon, table string) []clRow {
	t.Helper()
	c := newAPIClient(t, d.URL, d.client())
	rows := []clRow{}
	req := client.DrainRequest{Table: table, Limit: 1000, TimeFormat: "ns"}
	for {
		page, err := c.api.Drain(context.Background(), req)
		require.NoError(t, err, "drain %s", table)
		for _, cells := range page.Rows {
			r := clRow{}
			for i, c := range cells {
				if page.Columns[i] != "x_seq" && page.Columns[i] != "x_op" && string(c) != "null" {
					r[page.Columns[i]] = string(c)
				}
			}
			rows = append(rows, r)
		}
		if !page.More {
			return rows
		}
		req.After = page.Next
	}
}

// clWaitRows polls table's feed until it holds at least len(want) rows,
// then requires exactly want (in x_seq order, or sorted by time when
// byTime).
func clWaitRows(t testing.TB, d *daemon, table string, byTime bool, want []clRow) {
	t.Helper()
	var got []clRow
	pollUntil(t, 15*time.Second, func() bool { got = clDrain(t, d, table); return len(got) >= len(want) },
		"%s: %d of %d rows arrived", table, len(got), len(want))
	if byTime {
		slices.SortStableFunc(got, func(a, b clRow) int { return strings.Compare(a["time"], b["time"]) })
	}
	require.Equal(t, want, got, "%s", table)
}

// jsonStr is s as a JSON string, the text of a tag or string cell.
func jsonStr(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// closeAndCollect closes c, which sends every buffered point and stops its
// non-blocking write APIs, and returns the errors they reported on errs.
func closeAndCollect(c influxdb2.Client, errs <-chan error) error {
	c.Close()
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// clTime is a test timestamp: base plus n nanoseconds.
func clTime(n int64) time.Time { return time.Unix(0, 1767225600000000000+n) }

func TestInfluxDBClientV2(t *testing.T) {
	// point is the client's point for line n and row its drained row.
	point := func(table string, n int64) *write.Point {
		return influxdb2.NewPoint(table,
			map[string]string{"host": fmt.Sprintf("h %d", n), "dc": "eu,1"},
			map[string]any{"v": float64(n) + 0.5, "n": n, "u": uint64(n), "s": fmt.Sprintf("s=\"%d\"\n", n), "ok": n%2 == 0},
			clTime(n))
	}
	row := func(n int64) clRow {
		return clRow{
			"time": fmt.Sprint(clTime(n).UnixNano()), "dc": jsonStr("eu,1"), "host": jsonStr(fmt.Sprintf("h %d", n)),
			"v": fmt.Sprint(float64(n) + 0.5), "n": fmt.Sprint(n), "u": fmt.Sprint(n),
			"s": jsonStr(fmt.Sprintf("s=\"%d\"\n", n)), "ok": fmt.Sprint(n%2 == 0),
		}
	}
	rows := func(ns ...int64) []clRow {
		out := make([]clRow, len(ns))
		for i, n := range ns {
			out[i] = row(n)
		}
		return out
	}
	// wantErr is the error the client reports for a bad line.
	type wantErr struct {
		status   int
		code     string
		contains []string
	}
	tests := []struct {
		name    string
		prec    time.Duration
		write   func(t *testing.T, c influxdb2.Client, table string) error
		want    []clRow
		wantErr *wantErr
	}{
		{
			name: "blocking WritePoint",
			write: func(t *testing.T, c influxdb2.Client, table string) error {
				return c.WriteAPIBlocking("org", "bucket").WritePoint(context.Background(), point(table, 1), point(table, 2))
			},
			want: rows(1, 2),
		},
		{
			name: "blocking WriteRecord in seconds",
			prec: time.Second,
			write: func(t *testing.T, c influxdb2.Client, table string) error {
				return c.WriteAPIBlocking("org", "bucket").WriteRecord(context.Background(), table+",host=a v=1 1767225600", table+",host=b v=2 1767225601")
			},
			want: []clRow{
				{"time": "1767225600000000000", "host": `"a"`, "v": "1"},
				{"time": "1767225601000000000", "host": `"b"`, "v": "2"},
			},
		},
		{
			name: "blocking with batching",
			write: func(t *testing.T, c influxdb2.Client, table string) error {
				w := c.WriteAPIBlocking("org", "bucket")
				w.EnableBatching() // batch size 3 (the options below)
				for n := int64(1); n <= 4; n++ {
					if err := w.WritePoint(context.Background(), point(table, n)); err != nil {
						return err
					}
				}
				return w.Flush(context.Background())
			},
			want: rows(1, 2, 3, 4),
		},
		{
			name: "non-blocking batching WriteAPI",
			write: func(t *testing.T, c influxdb2.Client, table string) error {
				w := c.WriteAPI("org", "bucket")
				errs := w.Errors()
				for n := int64(1); n <= 7; n++ {
					w.WritePoint(point(table, n))
				}
				return closeAndCollect(c, errs)
			},
			want: rows(1, 2, 3, 4, 5, 6, 7),
		},
		{
			name: "blocking: a bad line among good ones is 422",
			write: func(t *testing.T, c influxdb2.Client, table string) error {
				return c.WriteAPIBlocking("org", "bucket").WriteRecord(context.Background(),
					table+",host=a v=1 1767225600000000000", table+",host=b v= 1767225600000000001", table+",host=c v=3 1767225600000000002")
			},
			want: []clRow{
				{"time": "1767225600000000000", "host": `"a"`, "v": "1"},
				{"time": "1767225600000000002", "host": `"c"`, "v": "3"},
			},
			wantErr: &wantErr{status: http.StatusUnprocessableEntity, code: "unprocessable entity", contains: []string{"partial write", "line 2", "dropped=1"}},
		},
		{
			name: "blocking: only bad lines is 400",
			write: func(t *testing.T, c influxdb2.Client, table string) error {
				return c.WriteAPIBlocking("org", "bucket").WriteRecord(context.Background(), table+",x_k=1 v=1 1", table+" v=NaN 2")
			},
			want:    []clRow{},
			wantErr: &wantErr{status: http.StatusBadRequest, code: "invalid", contains: []string{`"x_k"`, "reserved", "dropped=2"}},
		},
		{
			// The client treats any message with "partial write" as not worth
			// reporting (InfluxDB 1.x's meaning): it logs a warning, and the
			// good lines are stored.
			name: "non-blocking: a partial write is not reported on Errors()",
			write: func(t *testing.T, c influxdb2.Client, table string) error {
				w := c.WriteAPI("org", "bucket")
				errs := w.Errors()
				w.WriteRecord(table + ",host=a v=1 1767225600000000000")
				w.WriteRecord(table + ",host=b v=1i 1767225600000000001") // field type conflict
				return closeAndCollect(c, errs)
			},
			want: []clRow{{"time": "1767225600000000000", "host": `"a"`, "v": "1"}},
		},
		{
			name: "non-blocking: a batch of bad lines is reported on Errors()",
			write: func(t *testing.T, c influxdb2.Client, table string) error {
				w := c.WriteAPI("org", "bucket")
				errs := w.Errors()
				w.WriteRecord(table + ",host=a v=1,v=2i 1767225600000000000") // duplicate field, clashing types
				return closeAndCollect(c, errs)
			},
			want:    []clRow{},
			wantErr: &wantErr{status: http.StatusBadRequest, code: "invalid", contains: []string{`field "v" appears twice`, "dropped=1"}},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table := fmt.Sprintf("v2c%d", i)
			d := clStart(t, nil, table)
			prec := tt.prec
			if prec == 0 {
				prec = time.Nanosecond
			}
			opts := influxdb2.DefaultOptions().SetUseGZip(true).SetPrecision(prec).
				SetBatchSize(3).SetLogLevel(0).SetMaxRetries(0)
			c := influxdb2.NewClientWithOptions(d.URL, "any-token", opts)
			defer c.Close()
			err := tt.write(t, c, table)
			if tt.wantErr == nil {
				require.NoError(t, err)
			} else {
				var he *influxhttp.Error
				require.ErrorAs(t, err, &he, "the client's error: %v", err)
				require.Equal(t, tt.wantErr.status, he.StatusCode, "%v", he)
				require.Equal(t, tt.wantErr.code, he.Code, "%v", he)
				for _, s := range tt.wantErr.contains {
					require.Contains(t, he.Message, s)
				}
				require.Equal(t, httpapi.Version, he.Header.Get("X-Influxdb-Version"))
			}
			clWaitRows(t, d, table, false, tt.want)
		})
	}

	t.Run("Ping and Health", func(t *testing.T) {
		d := clStart(t, nil)
		c := influxdb2.NewClientWithOptions(d.URL, "any-token", influxdb2.DefaultOptions().SetLogLevel(0))
		defer c.Close()
		ok, err := c.Ping(context.Background())
		require.NoError(t, err)
		require.True(t, ok)
		h, err := c.Health(context.Background())
		require.NoError(t, err)
		require.Equal(t, "pass", string(h.Status))
		require.Equal(t, "ingestd", h.Name)
		require.NotNil(t, h.Version)
		require.Equal(t, httpapi.Version, *h.Version)
	})
}

func TestInfluxDB1Client(t *testing.T) {
	newClient := func(t *testing.T, d *daemon) influx1.Client {
		t.Helper()
		c, err := influx1.NewHTTPClient(influx1.HTTPConfig{Addr: d.URL, WriteEncoding: influx1.GzipEncoding})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, c.Close()) })
		return c
	}

	t.Run("Ping reads the version header", func(t *testing.T) {
		c := newClient(t, clStart(t, nil))
		_, version, err := c.Ping(5 * time.Second)
		require.NoError(t, err)
		require.Equal(t, httpapi.Version, version)
	})

	t.Run("CREATE DATABASE and SHOW DATABASES", func(t *testing.T) {
		c := newClient(t, clStart(t, func(cfg *config) { cfg.http.MaxDatabases = 3 }))
		for _, q := range []string{`CREATE DATABASE "telegraf"`, "CREATE DATABASE telegraf", "create database metrics WITH DURATION 1d",
			`CREATE DATABASE "with \"quote\" and space";`, "CREATE DATABASE ingestd"} {
			resp, err := c.Query(influx1.NewQuery(q, "", ""))
			require.NoError(t, err)
			require.NoError(t, resp.Error(), q)
		}
		resp, err := c.Query(influx1.NewQuery("SHOW DATABASES", "", ""))
		require.NoError(t, err)
		require.NoError(t, resp.Error())
		require.Len(t, resp.Results, 1)
		require.Len(t, resp.Results[0].Series, 1)
		require.Equal(t, "databases", resp.Results[0].Series[0].Name)
		require.Equal(t, [][]any{{"ingestd"}, {"metrics"}, {"telegraf"}, {`with "quote" and space`}}, resp.Results[0].Series[0].Values,
			"ingestd first, then the created ones by name, each once")
		// Past --query-max-databases, and a name breaking the name rules.
		resp, err = c.Query(influx1.NewQuery("CREATE DATABASE fourth", "", ""))
		require.NoError(t, err)
		require.ErrorContains(t, resp.Error(), "--query-max-databases")
		resp, err = c.Query(influx1.NewQuery("CREATE DATABASE \"a\\tb\"", "", ""))
		require.NoError(t, err)
		require.ErrorContains(t, resp.Error(), "control character")
		// Anything else is refused; the client reports the body's "error".
		resp, err = c.Query(influx1.NewQuery("SELECT * FROM cpu", "telegraf", ""))
		require.NoError(t, err)
		require.ErrorContains(t, resp.Error(), "only CREATE DATABASE and SHOW DATABASES")
	})

	precisions := []struct {
		name     string
		unit     time.Duration
		rejected bool
	}{
		// The client takes precisions that parse as Go durations, so no n
		// or u (ilp's tests send those), and it formats "us" timestamps in
		// nanoseconds (its point encoder knows only "u"); those are
		// rejected as out of range rather than stored at the wrong time.
		{name: "ns", unit: time.Nanosecond},
		{name: "us", unit: time.Microsecond, rejected: true},
		{name: "ms", unit: time.Millisecond},
		{name: "s", unit: time.Second},
		{name: "m", unit: time.Minute},
		{name: "h", unit: time.Hour},
	}
	for _, p := range precisions {
		t.Run("Write in precision "+p.name, func(t *testing.T) {
			d := clStart(t, nil, "v1c")
			c := newClient(t, d)
			bp, err := influx1.NewBatchPoints(influx1.BatchPointsConfig{Database: "telegraf", Precision: p.name})
			require.NoError(t, err)
			// A time with digits below every unit: the client truncates.
			ts := clTime(int64(3*time.Hour + 4*time.Minute + 5*time.Second + 6*time.Millisecond + 7*time.Microsecond + 8))
			pt, err := influx1.NewPoint("v1c", map[string]string{"host": "a b", "dc": "x=y"},
				map[string]any{"v": 1.25, "n": int64(-7), "s": `q"\`, "ok": true}, ts)
			require.NoError(t, err)
			bp.AddPoint(pt)
			if p.rejected {
				require.ErrorContains(t, c.Write(bp), "out of range")
				require.Equal(t, []clRow{}, clDrain(t, d, "v1c"))
				return
			}
			require.NoError(t, c.Write(bp))
			clWaitRows(t, d, "v1c", false, []clRow{{
				"time": fmt.Sprint(ts.Truncate(p.unit).UnixNano()), "dc": `"x=y"`, "host": `"a b"`,
				"v": "1.25", "n": "-7", "s": jsonStr(`q"\`), "ok": "true",
			}})
		})
	}

	t.Run("a rejected point: the error is the JSON body", func(t *testing.T) {
		d := clStart(t, nil, "v1c")
		c := newClient(t, d)
		bp, err := influx1.NewBatchPoints(influx1.BatchPointsConfig{Database: "telegraf"})
		require.NoError(t, err)
		for i, fields := range []map[string]any{{"v": 1.0}, {"v": "text"}, {"x_v": 1.0}, {"v": 4.0}} {
			pt, err := influx1.NewPoint("v1c", nil, fields, clTime(int64(i)))
			require.NoError(t, err)
			bp.AddPoint(pt)
		}
		err = c.Write(bp)
		require.Error(t, err)
		// The 1.x client returns the response body as the error's text.
		var body struct {
			Code  string `json:"code"`
			Error string `json:"error"`
			Line  int    `json:"line"`
		}
		require.NoError(t, json.Unmarshal([]byte(err.Error()), &body), "error %q", err)
		require.Equal(t, "invalid", body.Code)
		require.True(t, strings.HasPrefix(body.Error, "partial write: "), body.Error)
		require.Contains(t, body.Error, "dropped=2")
		require.Equal(t, 2, body.Line)
		clWaitRows(t, d, "v1c", false, []clRow{
			{"time": fmt.Sprint(clTime(0).UnixNano()), "v": "1"},
			{"time": fmt.Sprint(clTime(3).UnixNano()), "v": "4"},
		})
	})
}

// TestInfluxHeaders checks that every response of the whole daemon carries
// X-Influxdb-Version and X-Influxdb-Build (docs/reference.md#routes), whatever its status:
// the 1.x client reads the version from /ping, influxdb-client-go the build.
func TestInfluxHeaders(t *testing.T) {
	d := clStart(t, func(c *config) { c.ilp.MaxBodyBytes = 64 }, "hdr")
	form := url.Values{"q": {`CREATE DATABASE "x"`}}.Encode()
	tests := []struct {
		name   string
		method string
		path   string
		hdr    map[string]string
		body   string
		status int
		want   string // the response body, when not empty
	}{
		{name: "write 204", method: http.MethodPost, path: "/write?db=&precision=", body: "hdr v=1 1\n", status: http.StatusNoContent},
		{name: "write empty body 204", method: http.MethodPost, path: "/write", status: http.StatusNoContent},
		{name: "write partial 400", method: http.MethodPost, path: "/write", body: "hdr v=1 2\nhdr v= 3\n", status: http.StatusBadRequest},
		{name: "v2 write partial 422", method: http.MethodPost, path: "/api/v2/write?org=&bucket=", body: "hdr v=1 4\nhdr v= 5\n", status: http.StatusUnprocessableEntity},
		{name: "write unknown precision 400", method: http.MethodPost, path: "/write?precision=d", body: "hdr v=1 6\n", status: http.StatusBadRequest},
		{name: "write too large 413", method: http.MethodPost, path: "/write", body: strings.Repeat("# padding\n", 10), status: http.StatusRequestEntityTooLarge},
		{name: "write bad encoding 415", method: http.MethodPost, path: "/api/v2/write", hdr: map[string]string{"Content-Encoding": "br"}, body: "x", status: http.StatusUnsupportedMediaType},
		{name: "ping", method: http.MethodGet, path: "/ping", status: http.StatusNoContent},
		{name: "ping HEAD", method: http.MethodHead, path: "/ping", status: http.StatusNoContent},
		{name: "health", method: http.MethodGet, path: "/health", status: http.StatusOK},
		{name: "query form", method: http.MethodPost, path: "/query", hdr: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, body: form, status: http.StatusOK, want: `{"results":[{"statement_id":0}]}`},
		{name: "query SHOW DATABASES", method: http.MethodGet, path: "/query?q=SHOW+DATABASES", status: http.StatusOK, want: `{"results":[{"statement_id":0,"series":[{"columns":["name"],"name":"databases","values":[["ingestd"],["x"]]}]}]}`},
		{name: "query other 400", method: http.MethodPost, path: "/query?q=SELECT+1", status: http.StatusBadRequest},
		{name: "drain 404", method: http.MethodGet, path: "/drain?table=nosuch&after=0&limit=1", status: http.StatusNotFound},
		{name: "unknown route", method: http.MethodGet, path: "/nosuch", status: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, d.URL+tt.path, strings.NewReader(tt.body))
			require.NoError(t, err)
			for k, v := range tt.hdr {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, tt.status, resp.StatusCode, "body: %s", body)
			if tt.want != "" {
				require.JSONEq(t, tt.want, string(body))
			}
			require.Equal(t, httpapi.Version, resp.Header.Get("X-Influxdb-Version"))
			require.NotEmpty(t, resp.Header.Get("X-Influxdb-Build"))
			if tt.status >= 400 && tt.path != "/nosuch" {
				require.Equal(t, "application/json", resp.Header.Get("Content-Type"), "body: %s", body)
			}
		})
	}
}

// clTCPConnections reads ingestd_ilp_tcp_connections from /metrics.
func clTCPConnections(t testing.TB, d *daemon) string {
	t.Helper()
	resp, err := d.client().Get(d.URL + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, "ingestd_ilp_tcp_connections "); ok {
			return v
		}
	}
	t.Fatalf("no ingestd_ilp_tcp_connections in /metrics")
	return ""
}

// clSecureDaemon starts a daemon with an auth file and TLS (client
// certificates verified when given) and creates tables WITH SYNC. Its
// token "telegraf" may write tgtok* tables, and a client certificate for
// CN=telegraf names it on TCP. It returns the daemon (its https URL, and a
// client with an admin and drain token for the cl* helpers) and the
// environment the token variants of deploy/telegraf/ read.
func clSecureDaemon(t testing.TB, tables ...string) (*daemon, []string) {
	t.Helper()
	pki := newPKI(t, "ingestd-telegraf-test")
	certFile, keyFile, _ := pki.issue(t, "server", true)
	clientCert, clientKey, _ := pki.issue(t, "telegraf", false)
	d, _, tok := authDaemon(t, map[string][]string{"telegraf": {"write:tgtok*"}, "ops": {"admin", "drain"}}, func(c *config) {
		c.auth.TLSCert, c.auth.TLSKey, c.auth.TLSClientCA = certFile, keyFile, pki.caFile
		c.auth.TLSClientAuth = auth.ClientAuthVerifyIfSent
	})
	d.URL = strings.Replace(d.URL, "http://", "https://", 1)
	d.hc = pki.tlsClient(t, d.URL, tok["ops"], nil).hc
	clCreate(t, d, tables...)
	return d, []string{"INGESTD_TOKEN=" + tok["telegraf"], "INGESTD_TLS_CA=" + pki.caFile,
		"INGESTD_TLS_CERT=" + clientCert, "INGESTD_TLS_KEY=" + clientKey}
}

// telegrafEnv names the Telegraf binary TestTelegraf runs.
const telegrafEnv = "INGESTD_TELEGRAF"

// TestTelegraf runs a real Telegraf (INGESTD_TELEGRAF; .ci/telegraf-e2e.sh
// builds v1.37 with only the plugins needed) against the daemon once per
// output of deploy/telegraf/, reading testdata/telegraf/metrics.lp with
// inputs.file, and checks through the drain that every metric arrived once
// per output with its exact values.
func TestTelegraf(t *testing.T) {
	bin := os.Getenv(telegrafEnv)
	if bin == "" {
		t.Skip(telegrafEnv + " is not set: .ci/telegraf-e2e.sh builds Telegraf and runs this test")
	}
	fi, err := os.Stat(bin)
	require.NoError(t, err, "%s=%s", telegrafEnv, bin)
	require.False(t, fi.IsDir())
	fixture, err := filepath.Abs(filepath.Join("testdata", "telegraf", "metrics.lp"))
	require.NoError(t, err)
	input, err := filepath.Abs(filepath.Join("testdata", "telegraf", "input.conf"))
	require.NoError(t, err)

	// The fixture's metrics as drained: time ns, tags, fields.
	sensor := []clRow{
		{"time": "1767225600000000001", "host": `"h1"`, "site": `"north"`, "temp": "21.5", "count": "3", "ucount": "7", "ok": "true", "label": `"plain"`},
		{"time": "1767225600000000002", "host": `"h2"`, "site": `"south pole"`, "temp": "-0.25", "count": "-9223372036854775808", "ucount": "18446744073709551615", "ok": "false", "label": jsonStr(`quote " backslash \ comma, equals= space`)},
		{"time": "1767225600000000003", "host": `"h,3"`, "site": `"a=b"`, "temp": "1e-7", "count": "9223372036854775807", "ucount": "0", "ok": "true", "label": jsonStr("line one\nline two\ttab")},
	}
	notes := []clRow{
		{"time": "1767225600123456789", "author": jsonStr("Zoë"), "text": jsonStr("naïve café ✓"), "n": "1"},
		{"time": "1767225601000000000", "author": `"ann"`, "text": `""`, "n": "-1"},
	}
	// secure: the token variants, against a daemon with --auth-file and
	// TLS (HTTPS with a token; TCP with a client certificate naming it).
	outputs := []struct {
		name, conf, prefix string
		secure             bool
	}{
		{name: "influxdb to /write", conf: "outputs-influxdb.conf", prefix: "tgv1_"},
		{name: "influxdb_v2 to /api/v2/write", conf: "outputs-influxdb_v2.conf", prefix: "tgv2_"},
		{name: "socket_writer over TCP", conf: "outputs-socket_writer.conf", prefix: "tgtcp_"},
		{name: "influxdb with a token", conf: "outputs-influxdb-token.conf", prefix: "tgtok1_", secure: true},
		{name: "influxdb_v2 with a token", conf: "outputs-influxdb_v2-token.conf", prefix: "tgtok2_", secure: true},
		{name: "socket_writer over TLS with a client certificate", conf: "outputs-socket_writer-tls.conf", prefix: "tgtoktcp_", secure: true},
	}
	var tables, secureTables []string
	for _, o := range outputs {
		if o.secure {
			secureTables = append(secureTables, o.prefix+"sensor", o.prefix+"notes")
		} else {
			tables = append(tables, o.prefix+"sensor", o.prefix+"notes")
		}
	}
	d := clStart(t, nil, tables...)
	ds, secureEnv := clSecureDaemon(t, secureTables...)
	for _, o := range outputs {
		t.Run(o.name, func(t *testing.T) {
			conf, err := filepath.Abs(filepath.Join("..", "..", "deploy", "telegraf", o.conf))
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			d, env := d, []string(nil)
			if o.secure {
				d, env = ds, secureEnv
			}
			cmd := exec.CommandContext(ctx, bin, "--once", "--strict-env-handling", "--config", input, "--config", conf)
			cmd.Env = append(append(os.Environ(), env...),
				"INGESTD_URL="+d.URL, "INGESTD_TCP="+d.TCPAddr, "TG_FIXTURE="+fixture, "TG_PREFIX="+o.prefix)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "telegraf: %s", out)
			require.NotContains(t, string(out), " E! ", "telegraf logged an error: %s", out)
			// Telegraf has exited: once its TCP connection is closed on our
			// side too, every line it sent is committed, so the rows below
			// are final (no late duplicate).
			pollUntil(t, 15*time.Second, func() bool { return clTCPConnections(t, d) == "0" }, "the TCP connection closes")
			clWaitRows(t, d, o.prefix+"sensor", true, sensor)
			clWaitRows(t, d, o.prefix+"notes", true, notes)
		})
	}
}
