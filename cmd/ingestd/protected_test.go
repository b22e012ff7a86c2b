package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/cmd/ingestd/cli"
	"github.com/ingestd/ingestd/httpapi/auth"
)

// nonLoopbackIP returns an address of this host's that is not loopback:
// a connection to it comes from it, so the daemon sees a client that is
// not on loopback.
func nonLoopbackIP(t *testing.T) net.IP {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP
		}
	}
	require.FailNow(t, "this test needs an IPv4 interface address other than loopback")
	return nil
}

// protectedDaemon starts a daemon listening on every interface, open with
// insecureOpen, and returns it with the port numbers of its listeners.
func protectedDaemon(t *testing.T, insecureOpen bool) (d *daemon, httpPort, tcpPort string) {
	t.Helper()
	cfg := testConfig(t.TempDir())
	cfg.httpAddr, cfg.ilp.TCPAddr = "0.0.0.0:0", "0.0.0.0:0"
	cfg.auth.InsecureOpen = insecureOpen
	d = startDaemon(t, cfg)
	_, httpPort, err := net.SplitHostPort(strings.TrimPrefix(d.URL, "http://"))
	require.NoError(t, err)
	_, tcpPort, err = net.SplitHostPort(d.TCPAddr)
	require.NoError(t, err)
	d.URL = "http://127.0.0.1:" + httpPort // the helpers' requests come from loopback
	return d, httpPort, tcpPort
}

// TestProtectedMode: without --auth-file and --insecure-open, an HTTP
// request from a client not on loopback is 403 forbidden (the JSON error
// object, saying how to proceed) and a TCP connection is closed after one
// line saying the same, each counted in /metrics; the routes open with an
// auth file (/health, /ping, /metrics, /api.yaml) stay open, and loopback
// clients are served. --insecure-open serves everyone.
func TestProtectedMode(t *testing.T) {
	raw, err := os.ReadFile("../../api.yaml")
	require.NoError(t, err)
	spec, err := openapi3.NewLoader().LoadFromData(raw)
	require.NoError(t, err)
	ip := nonLoopbackIP(t)
	d, httpPort, tcpPort := protectedDaemon(t, false)
	remote := "http://" + net.JoinHostPort(ip.String(), httpPort)

	for _, c := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/api/v1/tables", http.StatusForbidden},
		{http.MethodGet, "/", http.StatusForbidden},
		{http.MethodPost, "/write", http.StatusForbidden},
		{http.MethodPost, "/api/v2/write", http.StatusForbidden},
		{http.MethodGet, "/drain?table=cpu&after=0&limit=1", http.StatusForbidden},
		{http.MethodPost, "/api/v1/sql?q=SHOW+TABLES", http.StatusForbidden},
		{http.MethodGet, "/health", http.StatusOK},
		{http.MethodGet, "/ping", http.StatusNoContent},
		{http.MethodGet, "/metrics", http.StatusOK},
	} {
		req, err := http.NewRequest(c.method, remote+c.path, strings.NewReader("cpu v=1 1"))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, c.status, resp.StatusCode, "%s %s: %s", c.method, c.path, body)
		if c.status == http.StatusForbidden {
			schema := "Error" // api.yaml's Forbidden; the writes' WriteForbidden
			if strings.HasSuffix(c.path, "write") {
				schema = "WriteError"
			}
			var doc any
			require.NoError(t, json.Unmarshal(body, &doc))
			require.NoError(t, spec.Components.Schemas[schema].Value.VisitJSON(doc), "%s %s: %s", c.method, c.path, body)
			var e struct{ Code, Message string }
			require.NoError(t, json.Unmarshal(body, &e), string(body))
			require.Equal(t, "forbidden", e.Code)
			require.Equal(t, auth.ProtectedMessage, e.Message)
		}
	}
	// Loopback clients are served; nothing was written from afar.
	require.Equal(t, http.StatusNoContent, postBody(t, d.URL+"/write", "cpu v=1 1"))
	require.Equal(t, http.StatusOK, getStatus(t, d.URL+"/api/v1/tables"))

	c, err := net.DialTimeout("tcp", net.JoinHostPort(ip.String(), tcpPort), 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	_, _ = c.Write([]byte("cpu v=2 2\n")) // refused: may meet a closed connection
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ERR "+auth.ProtectedMessage+"\n", line)
	require.NoError(t, c.Close())

	fams := scrapeMetrics(t, d)
	v, ok := sampleValue(fams, "ingestd_auth_protected_refused_total", map[string]string{"listener": "http"})
	require.True(t, ok)
	require.Equal(t, 6.0, v, "the six refused requests")
	pollUntil(t, 10*time.Second, func() bool {
		v, _ := sampleValue(scrapeMetrics(t, d), "ingestd_auth_protected_refused_total", map[string]string{"listener": "tcp"})
		return v == 1
	}, "the refused TCP connection is counted")
	lines, _ := sampleValue(fams, "ingestd_ilp_lines_total", map[string]string{"transport": "tcp"})
	require.Zero(t, lines, "no line of the refused connection was written")

	open, openPort, _ := protectedDaemon(t, true)
	require.Equal(t, http.StatusOK, getStatus(t, "http://"+net.JoinHostPort(ip.String(), openPort)+"/api/v1/tables"), "--insecure-open serves every client")
	v, ok = sampleValue(scrapeMetrics(t, open), "ingestd_auth_protected_refused_total", map[string]string{"listener": "http"})
	require.True(t, ok, "the counter is there, at 0, on an open server")
	require.Zero(t, v)
}

// TestInsecureOpenWithAuthFile: the two flags exclude each other, a usage
// error before anything is opened.
func TestInsecureOpenWithAuthFile(t *testing.T) {
	code, out, errOut := runCLI(t, "--data-dir", t.TempDir(), "--auth-file", "auth.yaml", "--insecure-open")
	require.Equal(t, cli.ExitBadUsage, code)
	require.Empty(t, out)
	require.Contains(t, errOut, "--insecure-open and --auth-file exclude each other")
	require.Equal(t, 1, strings.Count(errOut, "\n"))
}

func getStatus(t *testing.T, u string) int {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}
