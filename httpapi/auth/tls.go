package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// TLS serves the certificate of --tls-cert/--tls-key (and verifies client
// certificates against --tls-client-ca) on the HTTP and TCP listeners,
// reading the files again on Reload (SIGHUP): new handshakes use the new
// files, established connections keep theirs. Safe for concurrent use.
type TLS struct {
	cfg     Config
	cur     atomic.Pointer[tls.Config]
	logger  *slog.Logger
	reloads *prometheus.CounterVec
}

// NewTLS reads the certificate, key and client CAs of cfg; nil (and no
// error) when cfg.TLSCert is empty. logger may be nil (discard); reg may
// be nil (no metrics).
func NewTLS(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*TLS, error) {
	if cfg.TLSCert == "" {
		return nil, nil
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	t := &TLS{cfg: cfg, logger: logger.With("component", "tls"),
		reloads: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_tls_reloads_total", Help: "Reloads of --tls-cert, --tls-key and --tls-client-ca on SIGHUP, by outcome: ok, error (the previous files stay in force).",
		}, []string{"outcome"})}
	t.reloads.WithLabelValues("ok")
	t.reloads.WithLabelValues("error")
	c, err := t.load()
	if err != nil {
		return nil, err
	}
	t.cur.Store(c)
	return t, nil
}

// load reads the files into a server tls.Config: TLS 1.2 or later,
// HTTP/1.1 only (the connection limits count HTTP/1 connections).
func (t *TLS) load() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(t.cfg.TLSCert, t.cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("auth: --tls-cert/--tls-key: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	if t.cfg.TLSClientCA != "" {
		pem, err := os.ReadFile(t.cfg.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("auth: --tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("auth: --tls-client-ca holds no PEM certificate")
		}
		c.ClientCAs = pool
		c.ClientAuth = tls.RequireAndVerifyClientCert
		if t.cfg.TLSClientAuth == ClientAuthVerifyIfSent {
			c.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	return c, nil
}

// Reload reads the files again; on an error the previous ones stay in
// force and the error is returned (and logged, counted).
func (t *TLS) Reload() error {
	if t == nil {
		return nil
	}
	c, err := t.load()
	if err != nil {
		t.reloads.WithLabelValues("error").Inc()
		t.logger.Error("tls files not reloaded; the previous ones stay", "err", err)
		return err
	}
	t.cur.Store(c)
	t.reloads.WithLabelValues("ok").Inc()
	t.logger.Info("tls files reloaded")
	return nil
}

// ServerConfig returns the tls.Config for tls.NewListener: each handshake
// uses the files as last loaded. nil for a nil *TLS.
func (t *TLS) ServerConfig() *tls.Config {
	if t == nil {
		return nil
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return t.cur.Load(), nil
		},
	}
}

// TCPServerConfig is ServerConfig for the ILP TCP listener, without
// session tickets. A TLS 1.3 server that asks for client certificates
// writes its tickets after reading the client's certificate, once the
// client may already have sent its lines and gone: a client that resets
// the connection (one that writes and exits with the tickets unread)
// fails that write, hence the handshake, and the lines it sent are lost.
// Without tickets the server writes nothing after its first flight. ILP
// TCP connections are long-lived: resumption saves little. nil for a nil
// *TLS.
func (t *TLS) TCPServerConfig() *tls.Config {
	if t == nil {
		return nil
	}
	return &tls.Config{
		MinVersion:             tls.VersionTLS12,
		SessionTicketsDisabled: true,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := t.cur.Load().Clone()
			c.SessionTicketsDisabled = true
			c.NextProtos = nil
			return c, nil
		},
	}
}

// handshake completes c's TLS handshake within timeout when c is a
// *tls.Conn and returns the identity of its verified client certificate
// (common name, else first DNS name; "" without one).
func handshake(ctx context.Context, c net.Conn, timeout time.Duration) (string, error) {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return "", nil
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		return "", fmt.Errorf("auth: tls handshake: %w", err)
	}
	chains := tc.ConnectionState().VerifiedChains
	if len(chains) == 0 || len(chains[0]) == 0 {
		return "", nil
	}
	leaf := chains[0][0]
	if leaf.Subject.CommonName != "" {
		return leaf.Subject.CommonName, nil
	}
	if len(leaf.DNSNames) > 0 {
		return leaf.DNSNames[0], nil
	}
	return "", nil
}
