package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
