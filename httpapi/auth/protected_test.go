package auth

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:5000":        true,
		"127.8.9.10:1":          true,
		"[::1]:5000":            true,
		"[::ffff:127.0.0.1]:80": true,
		"192.0.2.1:1234":        false,
		"[fd00::2]:80":          false,
		"[::ffff:10.0.0.1]:80":  false,
		"localhost:80":          false, // RemoteAddr is an address, never a name
		"":                      false,
		"pipe":                  false,
	} {
		require.Equal(t, want, IsLoopback(addr), addr)
	}
}

// TestProtectedHTTP: on, a request from a client not on loopback is 403
// forbidden with the message saying how to proceed, counted; loopback
// clients and a protected mode that is off pass.
func TestProtectedHTTP(t *testing.T) {
	reg := prometheus.NewRegistry()
	p := NewProtected(true, reg)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	h := p.Require(ok)
	for _, c := range []struct {
		remote string
		status int
	}{{"127.0.0.1:5000", http.StatusNoContent}, {"[::1]:5000", http.StatusNoContent}, {"192.0.2.1:1234", http.StatusForbidden}, {"[fd00::2]:80", http.StatusForbidden}} {
		req := httptest.NewRequest(http.MethodGet, "/drain", nil)
		req.RemoteAddr = c.remote
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, c.status, rec.Code, c.remote)
		if c.status == http.StatusForbidden {
			require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			var body struct{ Code, Message, Error string }
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
			require.Equal(t, "forbidden", body.Code)
			require.Equal(t, ProtectedMessage, body.Message)
			require.Equal(t, body.Message, body.Error)
			require.Contains(t, body.Message, "--auth-file")
			require.Contains(t, body.Message, "--insecure-open")
		}
	}
	require.Equal(t, 2.0, value(t, p.refused.WithLabelValues(ListenerHTTP)))
	require.Equal(t, 0.0, value(t, p.refused.WithLabelValues(ListenerTCP)))

	off := NewProtected(false, nil)
	require.False(t, off.On())
	req := httptest.NewRequest(http.MethodGet, "/drain", nil) // from 192.0.2.1
	rec := httptest.NewRecorder()
	off.Require(ok).ServeHTTP(rec, req)
	require.Equal(t, http.StatusNoContent, rec.Code, "--insecure-open serves every client")
	var none *Protected
	require.False(t, none.On())
}

// remoteConn is a net.Conn whose peer address is set by the test.
type remoteConn struct {
	net.Conn
	remote net.Addr
}

func (c remoteConn) RemoteAddr() net.Addr { return c.remote }

// TestProtectedTCP: a TCP peer not on loopback reads the message, one
// line, and is refused, counted; a loopback peer is admitted silently.
func TestProtectedTCP(t *testing.T) {
	p := NewProtected(true, nil)
	for _, c := range []struct {
		remote  string
		refused bool
	}{{"127.0.0.1:40000", false}, {"198.51.100.7:40000", true}} {
		server, client := net.Pipe()
		conn := remoteConn{Conn: server, remote: net.TCPAddrFromAddrPort(mustAddrPort(t, c.remote))}
		read := make(chan string, 1)
		go func() {
			b, _ := io.ReadAll(client)
			read <- string(b)
		}()
		err := p.Conn(conn)
		require.NoError(t, server.Close())
		got := <-read
		require.NoError(t, client.Close())
		if !c.refused {
			require.NoError(t, err)
			require.Empty(t, got)
			continue
		}
		require.ErrorIs(t, err, ErrProtectedMode)
		require.Equal(t, "ERR "+ProtectedMessage+"\n", got)
	}
	require.Equal(t, 1.0, value(t, p.refused.WithLabelValues(ListenerTCP)))
}

func mustAddrPort(t testing.TB, s string) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(s)
	require.NoError(t, err)
	return ap
}
