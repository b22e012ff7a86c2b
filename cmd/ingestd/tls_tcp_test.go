package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/httpapi/auth"
)

// TestTLSTCPEndings: every complete line a client sent over TLS is
// committed however the connection ends, as on plain TCP
// (docs/contract.md#tcp-writes): close_notify, a close without it, a reset,
// a half-close with or without close_notify, a TLS record cut short after
// the lines, the idle timeout; with TLS 1.2 and 1.3, with and without a
// client certificate asked for (TLS 1.3 then sends its session tickets
// after the client's first flight, which a client that resets may never
// read).
func TestTLSTCPEndings(t *testing.T) {
	pki := newPKI(t, "ingestd-test")
	certFile, keyFile, _ := pki.issue(t, "server", true)
	pool := x509.NewCertPool()
	pool.AddCert(pki.ca)
	endings := []struct {
		name string
		end  func(t *testing.T, raw *net.TCPConn, tc *tls.Conn)
		// held: the client's writes after its ClientHello are held and
		// sent in one, then the reset, as a client that writes and exits
		// at once (the server may not have read its last flight yet).
		held bool
	}{
		{"close_notify", func(t *testing.T, _ *net.TCPConn, tc *tls.Conn) { require.NoError(t, tc.Close()) }, false},
		{"close without close_notify", func(t *testing.T, raw *net.TCPConn, _ *tls.Conn) { require.NoError(t, raw.Close()) }, false},
		{"reset", func(t *testing.T, raw *net.TCPConn, _ *tls.Conn) {
			require.NoError(t, raw.SetLinger(0))
			require.NoError(t, raw.Close())
		}, false},
		{"half-close with close_notify", func(t *testing.T, raw *net.TCPConn, tc *tls.Conn) {
			require.NoError(t, tc.CloseWrite())
			require.NoError(t, raw.CloseWrite())
			closedByPeer(t, raw)
		}, false},
		{"half-close without close_notify", func(t *testing.T, raw *net.TCPConn, _ *tls.Conn) {
			require.NoError(t, raw.CloseWrite())
			closedByPeer(t, raw)
		}, false},
		{"truncated record", func(t *testing.T, raw *net.TCPConn, _ *tls.Conn) {
			// An application-data record header announcing 64 bytes, and 10.
			_, err := raw.Write(append([]byte{23, 3, 3, 0, 64}, make([]byte, 10)...))
			require.NoError(t, err)
			require.NoError(t, raw.Close())
		}, false},
		{"reset with the last flight", func(t *testing.T, raw *net.TCPConn, _ *tls.Conn) {
			require.NoError(t, raw.SetLinger(0))
			require.NoError(t, raw.Close())
		}, true},
		{"idle timeout", func(t *testing.T, raw *net.TCPConn, _ *tls.Conn) { closedByPeer(t, raw) }, false},
	}
	for _, mtls := range []bool{false, true} {
		t.Run(fmt.Sprintf("client certificates asked %v", mtls), func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			cfg.auth.TLSCert, cfg.auth.TLSKey = certFile, keyFile
			if mtls {
				cfg.auth.TLSClientCA, cfg.auth.TLSClientAuth = pki.caFile, auth.ClientAuthVerifyIfSent
			}
			cfg.ilp.TCPIdleTimeout = time.Second
			d := startDaemon(t, cfg)
			tr := &http.Transport{TLSClientConfig: clientTLS(pool, nil), DisableKeepAlives: true}
			t.Cleanup(tr.CloseIdleConnections)
			c := newAPIClient(t, strings.Replace(d.URL, "http://", "https://", 1), &http.Client{Transport: tr, Timeout: time.Minute})
			for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
				for i, e := range endings {
					table := fmt.Sprintf("t%d_%d", version&0xff, i)
					if e.held && version != tls.VersionTLS13 {
						continue // a TLS 1.2 client waits for the server's Finished
					}
					t.Run(fmt.Sprintf("%s %s", tls.VersionName(version), e.name), func(t *testing.T) {
						c.createSyncTable(t, table)
						raw, err := net.DialTimeout("tcp", d.TCPAddr, 10*time.Second)
						require.NoError(t, err)
						t.Cleanup(func() { _ = raw.Close() })
						tcfg := clientTLS(pool, nil)
						tcfg.MinVersion, tcfg.MaxVersion, tcfg.ServerName = version, version, "127.0.0.1"
						// Ask for session tickets, as OpenSSL clients do.
						tcfg.ClientSessionCache = tls.NewLRUClientSessionCache(1)
						hold := &heldConn{Conn: raw, on: e.held}
						tc := tls.Client(hold, tcfg)
						require.NoError(t, tc.SetDeadline(time.Now().Add(30*time.Second)))
						require.NoError(t, tc.Handshake())
						// Complete lines, then part of one (never committed).
						_, err = io.WriteString(tc, idLines(table, 0, 50)+table+",id=partial v=1i")
						require.NoError(t, err)
						require.NoError(t, hold.release())
						e.end(t, raw.(*net.TCPConn), tc)
						pollUntil(t, 20*time.Second, func() bool { return c.syncStatus(t, table).Watermark >= 50 },
							"the 50 complete lines are committed")
						require.Equal(t, idRange(0, 50), drainColumn(t, c, table, "id"))
					})
				}
			}
		})
	}
}

// closedByPeer waits until the server has closed raw (EOF or a reset on
// read), reading and dropping what the server sends.
func closedByPeer(t *testing.T, raw net.Conn) {
	t.Helper()
	require.NoError(t, raw.SetReadDeadline(time.Now().Add(30*time.Second)))
	_, err := io.Copy(io.Discard, raw)
	var ne net.Error
	require.False(t, err != nil && errors.As(err, &ne) && ne.Timeout(), "the server did not close the connection: %v", err)
}

// heldConn, when on, passes its first write and holds the next ones until
// release sends them in one write.
type heldConn struct {
	net.Conn
	on     bool
	writes int
	held   []byte
}

func (h *heldConn) Write(b []byte) (int, error) {
	h.writes++
	if !h.on || h.writes == 1 {
		return h.Conn.Write(b)
	}
	h.held = append(h.held, b...)
	return len(b), nil
}

// release writes what was held.
func (h *heldConn) release() error {
	if len(h.held) == 0 {
		return nil
	}
	_, err := h.Conn.Write(h.held)
	h.held = nil
	return err
}

// TestTLSTCPNoWriteAfterClientFlight: the TCP listener's TLS 1.3 server,
// asking for client certificates, completes the handshake and reads the
// lines when every write after its first flight fails, as writes to a
// client that has already reset the connection do. With session tickets
// (ServerConfig, the HTTP listener's) it writes them after the client's
// certificate, and the handshake fails.
func TestTLSTCPNoWriteAfterClientFlight(t *testing.T) {
	pki := newPKI(t, "ingestd-test")
	certFile, keyFile, _ := pki.issue(t, "server", true)
	_, _, clientCert := pki.issue(t, "client", false)
	cfg := auth.DefaultConfig()
	cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA, cfg.TLSClientAuth = certFile, keyFile, pki.caFile, auth.ClientAuthVerifyIfSent
	tl, err := auth.NewTLS(cfg, nil, nil)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(pki.ca)
	for _, c := range []struct {
		name   string
		server *tls.Config
		ok     bool
	}{
		{"tcp listener", tl.TCPServerConfig(), true},
		{"with session tickets", tl.ServerConfig(), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, cert := range []*tls.Certificate{nil, &clientCert} {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				t.Cleanup(func() { _ = ln.Close() })
				got := make(chan error, 1)
				var read []byte
				go func() {
					s, err := ln.Accept()
					if err != nil {
						got <- err
						return
					}
					defer func() { _ = s.Close() }()
					_ = s.SetDeadline(time.Now().Add(30 * time.Second))
					sc := tls.Server(&resetAfterFirstWrite{Conn: s}, c.server)
					if err := sc.Handshake(); err != nil {
						got <- err
						return
					}
					read, err = io.ReadAll(sc)
					if errors.Is(err, io.EOF) {
						err = nil
					}
					got <- err
				}()
				tcfg := clientTLS(pool, cert)
				tcfg.MinVersion, tcfg.ServerName = tls.VersionTLS13, "127.0.0.1"
				// Ask for tickets, as OpenSSL clients do (Go's ask only with a cache).
				tcfg.ClientSessionCache = tls.NewLRUClientSessionCache(1)
				cc, err := tls.Dial("tcp", ln.Addr().String(), tcfg)
				require.NoError(t, err)
				_, err = io.WriteString(cc, "m v=1i 1\n")
				require.NoError(t, err)
				// The server may have closed first (the case with tickets): the
				// close_notify then meets a broken pipe, which says nothing of
				// what the server read.
				_ = cc.Close()
				err = <-got
				if c.ok {
					require.NoError(t, err)
					require.Equal(t, "m v=1i 1\n", string(read))
				} else {
					require.ErrorIs(t, err, syscall.ECONNRESET)
				}
			}
		})
	}
}

// resetAfterFirstWrite fails every write after the first with ECONNRESET,
// as writes to a peer that has reset the connection fail.
type resetAfterFirstWrite struct {
	net.Conn
	writes int
}

func (r *resetAfterFirstWrite) Write(b []byte) (int, error) {
	r.writes++
	if r.writes > 1 {
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return r.Conn.Write(b)
}
