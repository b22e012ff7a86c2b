package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/store/testdeadline"
)

// testServer is a Server on 127.0.0.1:0, closed at the end of the test.
type testServer struct {
	s    *Server
	addr string
}

func startServer(t *testing.T, cfg Config, h http.Handler) *testServer {
	t.Helper()
	return startServerTLS(t, cfg, h, nil)
}

// startServerTLS is startServer over TLS with tc (plain HTTP when nil).
func startServerTLS(t *testing.T, cfg Config, h http.Handler, tc *tls.Config) *testServer {
	t.Helper()
	s, err := NewServer(cfg, h, nil, prometheus.NewRegistry())
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	if tc != nil {
		go func() { done <- s.ServeTLS(ln, tc) }()
	} else {
		go func() { done <- s.Serve(ln) }()
	}
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		require.ErrorIs(t, <-done, http.ErrServerClosed)
	})
	return &testServer{s: s, addr: ln.Addr().String()}
}

// dial opens a raw connection, closed at the end of the test.
func (ts *testServer) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", ts.addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closed is ingestd_http_connections_closed_total{reason}.
func (ts *testServer) closed(t *testing.T, reason string) int {
	return gaugeOrCounter(t, ts.s.m.closed.WithLabelValues(reason))
}

// conns is ingestd_http_connections{state}.
func (ts *testServer) conns(t *testing.T, state string) int {
	return gaugeOrCounter(t, ts.s.m.conns.WithLabelValues(state))
}

// get sends GET path on c and reads the response.
func get(t *testing.T, c net.Conn, path string) *http.Response {
	t.Helper()
	_, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp
}

func gaugeOrCounter(t *testing.T, m prometheus.Metric) int {
	t.Helper()
	var pb dto.Metric
	require.NoError(t, m.Write(&pb))
	if pb.Gauge != nil {
		return int(pb.Gauge.GetValue())
	}
	return int(pb.Counter.GetValue())
}

// eventually polls cond until it holds or fails the test after timeout
// (stretched on a busy machine: testdeadline.Scale).
func eventually(t *testing.T, timeout time.Duration, cond func() bool, msg string) {
	t.Helper()
	timeout = testdeadline.Scale(timeout)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not met within %s: %s", timeout, msg)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitClosed reads c until the server closes it (within 10 s) and returns
// what it read.
func waitClosed(t *testing.T, c net.Conn) string {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server did not close the connection within 10s; read %q", b)
	}
	return string(b)
}

// readBody is a handler that reads the whole body and answers 204, or
// 408 when the body deadline cut it off.
var readBody = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		w.WriteHeader(http.StatusRequestTimeout)
		return
	}
	w.WriteHeader(http.StatusNoContent)
})

// TestServerBodyTimeout checks the body deadline: a body trickling in
// slower than BodyMinBytesPerSecond is cut off BodyTimeout after it began
// (not before), and one arriving faster is read whole even when it takes
// longer than BodyTimeout.
func TestServerBodyTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	cfg := DefaultConfig()
	cfg.BodyTimeout, cfg.BodyMinBytesPerSecond = timeout, 10_000
	ts := startServer(t, cfg, readBody)

	t.Run("slowloris is cut off", func(t *testing.T) {
		c := ts.dial(t)
		_, err := io.WriteString(c, "POST /write HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nc")
		require.NoError(t, err)
		start := time.Now()
		stop := make(chan struct{})
		defer close(stop)
		go func() { // one byte every 50 ms: 20 bytes per second
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := io.WriteString(c, "p"); err != nil {
						return
					}
				}
			}
		}()
		got := waitClosed(t, c)
		require.GreaterOrEqual(t, time.Since(start), timeout, "cut off before --http-body-timeout")
		require.Less(t, time.Since(start), 5*time.Second)
		require.True(t, strings.HasPrefix(got, "HTTP/1.1 408 "), "response %q", got)
		eventually(t, 10*time.Second, func() bool { return ts.closed(t, closedBodyTimeout) == 1 }, "the body timeout to be counted")
	})

	t.Run("a fast start buys no long stall", func(t *testing.T) {
		// 200,000 bytes at once would earn 20 s at the minimum rate; the
		// body then stops arriving and is cut off within 2 × the timeout.
		c := ts.dial(t)
		_, err := io.WriteString(c, "POST /write HTTP/1.1\r\nHost: x\r\nContent-Length: 400000\r\n\r\n"+strings.Repeat("x", 200_000))
		require.NoError(t, err)
		start := time.Now()
		got := waitClosed(t, c)
		require.Less(t, time.Since(start), 10*time.Second, "cut off long before the 20 s its first bytes earned")
		require.True(t, strings.HasPrefix(got, "HTTP/1.1 408 "), "response %q", got)
		eventually(t, 10*time.Second, func() bool { return ts.closed(t, closedBodyTimeout) == 2 }, "the body timeout to be counted")
	})

	t.Run("a body above the minimum rate is read whole", func(t *testing.T) {
		c := ts.dial(t)
		const chunk, chunks = 2000, 8 // 2,000 bytes every 100 ms: 20,000 bytes per second
		_, err := io.WriteString(c, "POST /write HTTP/1.1\r\nHost: x\r\nContent-Length: 16000\r\n\r\n")
		require.NoError(t, err)
		start := time.Now()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := range chunks {
			if i > 0 {
				<-tick.C
			}
			_, err := io.WriteString(c, strings.Repeat("x", chunk))
			require.NoError(t, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
		require.Greater(t, time.Since(start), timeout, "the body took longer than --http-body-timeout")
		require.Equal(t, 2, ts.closed(t, closedBodyTimeout))
	})
}

// TestServerHeaderAndIdleTimeouts checks that a connection whose request
// headers do not arrive within ReadHeaderTimeout, and a keep-alive
// connection idle for IdleTimeout, are closed, and each is counted.
func TestServerHeaderAndIdleTimeouts(t *testing.T) {
	const timeout = 200 * time.Millisecond
	cfg := DefaultConfig()
	cfg.ReadHeaderTimeout, cfg.IdleTimeout = timeout, timeout
	ts := startServer(t, cfg, readBody)

	start := time.Now()
	c := ts.dial(t)
	_, err := io.WriteString(c, "GET /ping HTTP/1.1\r\nHost: x\r\n") // no end of headers
	require.NoError(t, err)
	waitClosed(t, c)
	require.GreaterOrEqual(t, time.Since(start), timeout)
	eventually(t, 10*time.Second, func() bool { return ts.closed(t, closedHeaderTimeout) == 1 }, "the header timeout to be counted")

	c = ts.dial(t)
	idle := time.Now() // the server's idle wait starts after the response
	_, err = io.WriteString(c, "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	_, err = io.ReadAll(br)
	require.NoError(t, err, "the idle connection is closed")
	require.GreaterOrEqual(t, time.Since(idle), timeout)
	eventually(t, 10*time.Second, func() bool { return ts.closed(t, closedIdleTimeout) == 1 }, "the idle timeout to be counted")
	require.Equal(t, 1, ts.closed(t, closedHeaderTimeout))
}

// TestServerMaxHeaderBytes checks that headers past MaxHeaderBytes get 431.
func TestServerMaxHeaderBytes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxHeaderBytes = 1024
	ts := startServer(t, cfg, readBody)
	c := ts.dial(t)
	// net/http allows 4096 bytes beyond MaxHeaderBytes of slack.
	_, err := io.WriteString(c, "GET /ping HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("b", 8192)+"\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
}

// TestServerMaxConns checks the connection cap: a connection accepted at
// the cap closes the longest-idle keep-alive connection and is served;
// when every connection is busy it gets 503 with Retry-After; either way
// it is counted and the open connections never exceed the cap for long.
func TestServerMaxConns(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxConns = 2
	hold := make(chan struct{})
	entered := make(chan struct{}, 4)
	ts := startServer(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			entered <- struct{}{}
			<-hold
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	get := func(c net.Conn, path string) *http.Response { return get(t, c, path) }
	conns := func(state string) int { return ts.conns(t, state) }
	open := func() int { return conns("new") + conns("active") + conns("idle") }

	// Two idle keep-alive connections, the first idle the longest.
	first, second := ts.dial(t), ts.dial(t)
	require.Equal(t, http.StatusNoContent, get(first, "/ping").StatusCode)
	eventually(t, 10*time.Second, func() bool { return conns("idle") == 1 }, "the first connection to be idle")
	require.Equal(t, http.StatusNoContent, get(second, "/ping").StatusCode)
	eventually(t, 10*time.Second, func() bool { return conns("idle") == 2 }, "both connections to be idle")
	third := ts.dial(t)
	require.Equal(t, http.StatusNoContent, get(third, "/ping").StatusCode, "the new connection is served")
	waitClosed(t, first)
	require.Equal(t, 1, ts.closed(t, closedEvicted))
	eventually(t, 10*time.Second, func() bool { return open() == 2 }, "two connections open")
	require.Equal(t, http.StatusNoContent, get(second, "/ping").StatusCode, "the other idle connection stays")

	// Both busy: a new connection is refused with 503.
	for _, c := range []net.Conn{second, third} {
		_, err := io.WriteString(c, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		<-entered
	}
	refused := ts.dial(t)
	resp, err := http.ReadResponse(bufio.NewReader(refused), nil)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.Contains(t, string(body), "--http-max-conns")
	require.Equal(t, 1, gaugeOrCounter(t, ts.s.m.refused.WithLabelValues(refusedMaxConns)))
	require.Equal(t, 2, open())
	require.Equal(t, 2, conns("active"))
	close(hold)
}

// TestServerConfigValidate checks that every limit must be positive.
func TestServerConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		flag string
	}{
		{"max conns", func(c *Config) { c.MaxConns = 0 }, "--http-max-conns"},
		{"max conns per client", func(c *Config) { c.MaxConnsPerClient = 0 }, "--http-max-conns-per-client"},
		{"write timeout", func(c *Config) { c.WriteTimeout = 0 }, "--http-write-timeout"},
		{"response bytes in flight", func(c *Config) { c.MaxResponseBytesInflight = 0 }, "--http-max-response-bytes-inflight"},
		{"header timeout", func(c *Config) { c.ReadHeaderTimeout = 0 }, "--http-read-header-timeout"},
		{"body timeout", func(c *Config) { c.BodyTimeout = -time.Second }, "--http-body-timeout"},
		{"body rate", func(c *Config) { c.BodyMinBytesPerSecond = 0 }, "--http-body-min-bytes-per-second"},
		{"idle timeout", func(c *Config) { c.IdleTimeout = 0 }, "--http-idle-timeout"},
		{"header bytes", func(c *Config) { c.MaxHeaderBytes = 0 }, "--http-max-header-bytes"},
		{"drain page bytes", func(c *Config) { c.DrainMaxPageBytes = 0 }, "--drain-max-page-bytes"},
		{"sql statement bytes", func(c *Config) { c.SQLMaxStatementBytes = 0 }, "--sql-max-statement-bytes"},
		{"sql scan rows", func(c *Config) { c.SQLMaxScanRows = 0 }, "--sql-max-scan-rows"},
		{"sql insert rows", func(c *Config) { c.SQLMaxInsertRows = -1 }, "--sql-max-insert-rows"},
	}
	def := DefaultConfig()
	require.NoError(t, def.Validate())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.mod(&cfg)
			require.ErrorContains(t, cfg.Validate(), tt.flag)
			_, err := NewServer(cfg, readBody, nil, nil)
			require.Error(t, err)
		})
	}
}

// TestServerEarlyAnswer checks a handler that answers before reading the
// body (as a write does on a declared length past --max-body-bytes): the
// answer is not held while net/http waits for a body the client never
// sends. Past 256 KiB declared it is written at once and the connection
// closed; below, net/http's read of the rest stops at the body deadline.
func TestServerEarlyAnswer(t *testing.T) {
	refuse := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusRequestEntityTooLarge)
	})
	t.Run("large declared body", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.BodyTimeout = time.Minute
		ts := startServer(t, cfg, refuse)
		c := ts.dial(t)
		_, err := io.WriteString(c, "POST /write HTTP/1.1\r\nHost: x\r\nContent-Length: 33554433\r\n\r\n")
		require.NoError(t, err)
		start := time.Now()
		got := waitClosed(t, c)
		require.Less(t, time.Since(start), 10*time.Second)
		require.True(t, strings.HasPrefix(got, "HTTP/1.1 413 "), "response %q", got)
	})
	t.Run("small declared body", func(t *testing.T) {
		const timeout = 300 * time.Millisecond
		cfg := DefaultConfig()
		cfg.BodyTimeout = timeout
		ts := startServer(t, cfg, refuse)
		c := ts.dial(t)
		// Taken before the request is sent: the server's body deadline
		// starts once it has read the headers, never before this.
		start := time.Now()
		_, err := io.WriteString(c, "POST /write HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab")
		require.NoError(t, err)
		got := waitClosed(t, c)
		require.GreaterOrEqual(t, time.Since(start), timeout)
		require.Less(t, time.Since(start), 10*time.Second)
		require.True(t, strings.HasPrefix(got, "HTTP/1.1 413 "), "response %q", got)
	})
}

// TestServerSlowAnswerAfterBody checks that the body deadline ends with the
// body: a handler that has read its whole body may take longer than
// BodyTimeout to answer (a write waiting for its group commit under
// back-pressure) without its request's context being cancelled, and its
// answer reaches the client.
func TestServerSlowAnswerAfterBody(t *testing.T) {
	const timeout = 200 * time.Millisecond
	cfg := DefaultConfig()
	cfg.BodyTimeout = timeout
	ts := startServer(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case <-r.Context().Done():
			return // no answer: the client sees the connection close
		case <-time.After(3 * timeout):
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	resp, err := http.Post("http://"+ts.addr+"/write", "text/plain", strings.NewReader("m v=1 1\n"))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Zero(t, ts.closed(t, closedBodyTimeout), "a whole body is no timeout")
}

// TestLimitedHandler checks the bound on net/http's log lines: within one
// interval only the first record reaches the log, and the first record of
// a later interval says how many were dropped.
func TestLimitedHandler(t *testing.T) {
	var buf bytes.Buffer
	h := &limitedHandler{Handler: slog.NewTextHandler(&buf, nil), every: time.Second}
	t0 := time.Now()
	for i := range 1000 {
		r := slog.NewRecord(t0.Add(time.Duration(i)*time.Millisecond/2), slog.LevelWarn, "http: TLS handshake error", 0)
		require.NoError(t, h.Handle(context.Background(), r))
	}
	require.Equal(t, 1, strings.Count(buf.String(), "\n"), "one line in the first second: %s", buf.String())
	r := slog.NewRecord(t0.Add(time.Second), slog.LevelWarn, "http: TLS handshake error", 0)
	require.NoError(t, h.Handle(context.Background(), r))
	require.Equal(t, 2, strings.Count(buf.String(), "\n"))
	require.Contains(t, buf.String(), "suppressed=999")
}

// TestServerEvictsWaiting checks that connections without a whole request
// (nothing sent, or half the headers) do not hold a cap: at --http-max-conns
// or --http-max-conns-per-client a new connection closes the one that has
// waited the longest, counted, and is served; the other waiting one stays.
func TestServerEvictsWaiting(t *testing.T) {
	tests := []struct {
		name   string
		tls    bool
		mod    func(*Config)
		sent   string
		reason string
	}{
		{"silent at max conns", false, func(c *Config) { c.MaxConns = 2 }, "", closedEvicted},
		{"half headers at max conns", false, func(c *Config) { c.MaxConns = 2 }, "GET /ping HTTP/1.1\r\nHost: x\r\n", closedEvicted},
		{"silent per client", false, func(c *Config) { c.MaxConnsPerClient = 2 }, "", closedEvictedPerClient},
		// A TLS record header announcing a ClientHello, and no more.
		{"half a ClientHello at max conns", true, func(c *Config) { c.MaxConns = 2 }, "\x16\x03\x01\x02\x00\x01", closedEvicted},
		{"half a ClientHello per client", true, func(c *Config) { c.MaxConnsPerClient = 2 }, "\x16\x03\x01\x02\x00\x01", closedEvictedPerClient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.mod(&cfg)
			var stc *tls.Config
			if tt.tls {
				stc = selfSignedTLS(t)
			}
			ts := startServerTLS(t, cfg, readBody, stc)
			var waiting []net.Conn
			for i := range 2 {
				c := ts.dial(t)
				_, err := io.WriteString(c, tt.sent)
				require.NoError(t, err)
				waiting = append(waiting, c)
				eventually(t, 10*time.Second, func() bool { return ts.conns(t, "new") == i+1 }, "the connection accepted")
			}
			c := ts.dial(t)
			if tt.tls {
				c = tls.Client(c, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test's own self-signed server
			}
			require.Equal(t, http.StatusNoContent, get(t, c, "/ping").StatusCode, "the new connection is served")
			require.Empty(t, waitClosed(t, waiting[0]), "the longest-waiting connection is closed without an answer")
			require.Equal(t, 1, ts.closed(t, tt.reason))
			require.Zero(t, gaugeOrCounter(t, ts.s.m.refused.WithLabelValues(refusedMaxConns))+
				gaugeOrCounter(t, ts.s.m.refused.WithLabelValues(refusedPerClient)))
			eventually(t, 10*time.Second, func() bool { return ts.conns(t, "new") == 1 && ts.conns(t, "idle") == 1 },
				"the other waiting connection and the served one open")
		})
	}
}

// TestServerRefusals checks a connection refused at a cap because every
// other is serving a request: over plaintext it is answered 503 naming the
// cap, over TLS it is closed without a byte (a TLS client cannot read a
// plaintext answer); either way it is counted by reason.
func TestServerRefusals(t *testing.T) {
	tests := []struct {
		name   string
		tls    bool
		mod    func(*Config)
		reason string
		flag   string
	}{
		{"per client", false, func(c *Config) { c.MaxConnsPerClient = 1 }, refusedPerClient, "--http-max-conns-per-client"},
		{"max conns over TLS", true, func(c *Config) { c.MaxConns = 1 }, refusedMaxConns, ""},
		{"per client over TLS", true, func(c *Config) { c.MaxConnsPerClient = 1 }, refusedPerClient, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.mod(&cfg)
			hold, entered := make(chan struct{}), make(chan struct{}, 1)
			defer close(hold)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				entered <- struct{}{}
				<-hold
				w.WriteHeader(http.StatusNoContent)
			})
			s, err := NewServer(cfg, h, nil, prometheus.NewRegistry())
			require.NoError(t, err)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			done := make(chan error, 1)
			scheme, tc := "http", &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the test's own self-signed server
			if tt.tls {
				scheme = "https"
				go func() { done <- s.ServeTLS(ln, selfSignedTLS(t)) }()
			} else {
				go func() { done <- s.Serve(ln) }()
			}
			defer func() {
				require.NoError(t, s.Close())
				require.ErrorIs(t, <-done, http.ErrServerClosed)
			}()
			hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
			defer hc.CloseIdleConnections()
			held := make(chan error, 1)
			go func() {
				resp, err := hc.Get(scheme + "://" + ln.Addr().String() + "/hold")
				if err == nil {
					err = resp.Body.Close()
				}
				held <- err
			}()
			<-entered
			c, err := net.Dial("tcp", ln.Addr().String())
			require.NoError(t, err)
			defer c.Close()
			got := waitClosed(t, c)
			if tt.tls {
				require.Empty(t, got)
			} else {
				require.True(t, strings.HasPrefix(got, "HTTP/1.1 503 "), "%q", got)
				require.Contains(t, got, "Retry-After: 1\r\n")
				require.Contains(t, got, tt.flag)
			}
			require.Equal(t, 1, gaugeOrCounter(t, s.m.refused.WithLabelValues(tt.reason)))
			hold <- struct{}{}
			require.NoError(t, <-held)
		})
	}
}

// selfSignedTLS is a server TLS config with a fresh self-signed
// certificate for 127.0.0.1.
func selfSignedTLS(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
}

// TestServerWriteTimeout checks the write deadline: a client that does not
// read a large response is cut off WriteTimeout after its first byte and
// counted, while a response that starts after a wait longer than
// WriteTimeout (a long-poll) is written whole, and so is the next response
// on that connection.
func TestServerWriteTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	cfg := DefaultConfig()
	cfg.WriteTimeout = timeout
	big := make([]byte, 64<<20) // more than the socket buffers hold
	ts := startServer(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			_, _ = w.Write(big)
		case "/poll":
			select {
			case <-r.Context().Done():
				return
			case <-time.After(3 * timeout):
			}
			_, _ = io.WriteString(w, "page")
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))

	c := ts.dial(t)
	start := time.Now()
	_, err := io.WriteString(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	eventually(t, 10*time.Second, func() bool { return ts.closed(t, closedWriteTimeout) == 1 }, "the write timeout counted")
	require.GreaterOrEqual(t, time.Since(start), timeout)
	got := waitClosed(t, c)
	require.Less(t, len(got), len(big), "the response was cut off")

	c = ts.dial(t)
	br := bufio.NewReader(c)
	for _, path := range []string{"/poll", "/ping"} {
		_, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Less(t, resp.StatusCode, 300, path)
	}
	require.Equal(t, 1, ts.closed(t, closedWriteTimeout))
}
