package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/httpapi/client"
)

// TestSlowWriteBody checks the body deadline end to end: a /write body
// sent one byte at a time, far below --http-body-min-bytes-per-second, is
// cut off once --http-body-timeout has passed, answered 408 and nothing of
// it is stored, while a normal write on another connection goes on.
func TestSlowWriteBody(t *testing.T) {
	const timeout = 300 * time.Millisecond
	cfg := testConfig(t.TempDir())
	cfg.http.BodyTimeout = timeout
	d := startDaemon(t, cfg)
	c := newClient(t, d)
	c.createSyncTable(t, "slow")

	conn, err := net.Dial("tcp", strings.TrimPrefix(d.URL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	body := "slow v=1 1\n"
	start := time.Now()
	_, err = io.WriteString(conn, "POST /write HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"+body[:1])
	require.NoError(t, err)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := io.WriteString(conn, body[i%len(body):i%len(body)+1]); err != nil {
					return
				}
			}
		}
	}()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	msg, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode, "body: %s", msg)
	require.Contains(t, string(msg), "--http-body-timeout")
	require.GreaterOrEqual(t, time.Since(start), timeout)

	c.mustWrite(t, "slow v=2 2\n")
	pg, _ := c.drainOK(t, url.Values{"table": {"slow"}, "limit": {"10"}})
	require.Len(t, pg.Rows, 1, "only the normal write is stored")
	v, ok := sampleValue(scrapeMetrics(t, d), "ingestd_http_connections_closed_total", map[string]string{"reason": "body_timeout"})
	require.True(t, ok)
	require.Equal(t, 1.0, v)
}

// TestDrainPageBytes checks --drain-max-page-bytes: in every format a page
// ends before the row that would take its rows past the bound (a row
// bigger than the bound comes alone), next is the page's last x_seq and
// more is true, and following next returns every fragment exactly once,
// in order.
func TestDrainPageBytes(t *testing.T) {
	const maxBytes, n = 300, 60
	cfg := testConfig(t.TempDir())
	cfg.http.DrainMaxPageBytes = maxBytes
	d := startDaemon(t, cfg)
	c := newClient(t, d)
	c.createSyncTable(t, "pb")
	var lp strings.Builder
	for i := 1; i <= n; i++ {
		s := "x"
		if i == 30 {
			s = strings.Repeat("y", 2*maxBytes) // one row over the bound
		}
		lp.WriteString("pb,host=h" + strconv.Itoa(i) + " v=" + strconv.Itoa(i) + ",s=\"" + s + "\" " + strconv.Itoa(i) + "\n")
	}
	c.mustWrite(t, lp.String())

	for _, format := range []string{"json", "ndjson", "lp"} {
		t.Run(format, func(t *testing.T) {
			var after uint64
			seen := 0
			for pages := 0; ; pages++ {
				require.Less(t, pages, n, "the drain does not end")
				q := url.Values{"table": {"pb"}, "after": {strconv.FormatUint(after, 10)}, "limit": {"1000"}, "format": {format}}
				var rows [][]byte
				pg, err := c.api.Drain(context.Background(), drainRequest(t, q))
				require.NoError(t, err)
				if format == "json" {
					require.Equal(t, "application/json", pg.Header.Get("Content-Type"))
					for _, row := range pg.Rows {
						b, err := json.Marshal(row)
						require.NoError(t, err)
						rows = append(rows, b)
						require.Equal(t, strconv.Itoa(seen+len(rows)), string(row[len(row)-2]), "x_seq in order, once")
					}
				} else {
					for _, l := range strings.SplitAfter(string(pg.Body), "\n") {
						if l == "" || strings.HasPrefix(l, `{"x_schema":`) {
							continue
						}
						rows = append(rows, []byte(l))
						want := `"x_seq":` + strconv.Itoa(seen+len(rows)) + `,"x_op":"insert"}`
						if format == "lp" {
							want = "v=" + strconv.Itoa(seen+len(rows)) + ","
						}
						require.Contains(t, l, want, "rows in order, once")
					}
				}
				next, more := pg.Next, pg.More
				requirePageBytes(t, rows, maxBytes)
				seen += len(rows)
				if seen < n {
					require.True(t, more)
					require.Equal(t, uint64(seen), next, "next is the page's last x_seq")
				} else {
					require.False(t, more)
					require.Equal(t, uint64(n), next)
					break
				}
				after = next
			}
			require.Equal(t, n, seen)
		})
	}
}

// TestRowsPageBytes checks --drain-max-page-bytes on the copy by time
// range: in both formats a page ends before the row that would take its
// rows past the bound (a row bigger than the bound comes alone), and
// following the cursor returns every point of the range exactly once,
// across the unsynced and the synced blocks, overwritten points coalesced.
func TestRowsPageBytes(t *testing.T) {
	const maxBytes, n = 300, 60
	cfg := testConfig(t.TempDir())
	cfg.http.DrainMaxPageBytes = maxBytes
	d := startDaemon(t, cfg)
	c := newClient(t, d)
	line := func(i int, v string) string {
		s := "x"
		if i == 30 {
			s = strings.Repeat("y", 2*maxBytes) // one row over the bound
		}
		return "rb,host=h" + strconv.Itoa(i) + " v=" + v + ",s=\"" + s + "\" " + strconv.Itoa(i) + "\n"
	}
	var lp strings.Builder
	for i := 1; i <= n/2; i++ {
		lp.WriteString(line(i, "0")) // overwritten below
	}
	c.mustWrite(t, lp.String()) // sync OFF: unsynced blocks
	r := c.do(t, http.MethodPut, "/api/v1/tables/rb", nil, strings.NewReader(`{"sync": true}`))
	require.Equal(t, http.StatusOK, r.Status, "SET SYNC: %s", r.Body)
	lp.Reset()
	for i := 1; i <= n; i++ {
		lp.WriteString(line(i, strconv.Itoa(i)))
	}
	c.mustWrite(t, lp.String())

	for _, format := range []string{"json", "lp"} {
		t.Run(format, func(t *testing.T) {
			cursor := ""
			var seen []int
			for pages := 0; ; pages++ {
				require.Less(t, pages, 2*n, "the copy does not end")
				pg, err := c.api.Rows(context.Background(), client.RowsRequest{Table: "rb", Limit: 1000, Format: format, TimeFormat: "ns", Start: "1", Cursor: cursor})
				require.NoError(t, err)
				var rows []string
				if format == "json" {
					require.Equal(t, []string{"time", "host", "v", "s"}, pg.Columns)
					for _, row := range pg.Rows {
						b, err := json.Marshal(row)
						require.NoError(t, err)
						rows = append(rows, string(b))
						v, err := strconv.Atoi(string(row[2]))
						require.NoError(t, err)
						seen = append(seen, v)
					}
				} else {
					for _, l := range strings.SplitAfter(string(pg.Body), "\n") {
						if l == "" {
							continue
						}
						rows = append(rows, l)
						_, after, ok := strings.Cut(l, " v=")
						require.True(t, ok, "%s", l)
						v, err := strconv.Atoi(strings.TrimSuffix(after[:strings.IndexByte(after, ',')], "i"))
						require.NoError(t, err, "%s", l)
						seen = append(seen, v)
					}
				}
				requirePageBytes(t, rows, maxBytes)
				if pg.Cursor == "" {
					break
				}
				cursor = pg.Cursor
			}
			slices.Sort(seen)
			want := make([]int, n)
			for i := range want {
				want[i] = i + 1
			}
			require.Equal(t, want, seen, "every point once, at its latest value")
		})
	}
}

// requirePageBytes checks a page against --drain-max-page-bytes: at least
// one row, and several rows only when they fit maxBytes (each row's
// separator counted as one byte).
func requirePageBytes[R ~[]byte | ~string](t *testing.T, rows []R, maxBytes int) {
	t.Helper()
	require.NotEmpty(t, rows, "a page holds at least one row")
	size := 0
	for _, b := range rows {
		size += len(b)
	}
	if len(rows) > 1 {
		require.LessOrEqual(t, size, maxBytes+len(rows), "page of %d rows", len(rows))
	}
}

// TestQueryBodyBounded checks /query's body: a multipart body, which Go's
// form reader would spool to the temporary directory past 32 MiB, is
// refused with 415 before it is read (counted; the temporary directory
// stays empty), a URL-encoded form past --sql-max-statement-bytes gets
// 413, and the statements InfluxDB clients send still work, in the query
// string or a form body.
func TestQueryBodyBounded(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	cfg := testConfig(t.TempDir())
	d := startDaemon(t, cfg)

	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	require.NoError(t, mw.WriteField("q", "CREATE DATABASE spooled"))
	part, err := mw.CreateFormFile("file", "big.txt")
	require.NoError(t, err)
	_, err = part.Write(bytes.Repeat([]byte("x"), 33<<20))
	require.NoError(t, err)
	require.NoError(t, mw.Close())
	resp, err := http.Post(d.URL+"/query", mw.FormDataContentType(), &body)
	if err == nil { // the server may close the connection before the client has sent the body
		msg, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode, "body: %s", msg)
		require.Contains(t, string(msg), "application/x-www-form-urlencoded")
	}
	v, ok := sampleValue(scrapeMetrics(t, d), "ingestd_http_requests_refused_total", map[string]string{"reason": "content_type"})
	require.True(t, ok)
	require.Equal(t, 1.0, v, "the multipart /query is refused")
	entries, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing spooled to the temporary directory")

	big := url.Values{"q": {"CREATE DATABASE " + strings.Repeat("x", cfg.http.SQLMaxStatementBytes)}}.Encode()
	resp, err = http.Post(d.URL+"/query", "application/x-www-form-urlencoded", strings.NewReader(big))
	require.NoError(t, err)
	msg, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "body: %s", msg)
	require.Contains(t, string(msg), "--sql-max-statement-bytes")

	resp, err = http.PostForm(d.URL+"/query", url.Values{"q": {"CREATE DATABASE formed"}})
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = http.Get(d.URL + "/query?q=" + url.QueryEscape("SHOW DATABASES"))
	require.NoError(t, err)
	msg, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(msg), `"formed"`)
	require.NotContains(t, string(msg), "spooled")
}
