package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
)

// ClientTLS is how a subcommand that calls an ingestd (mirror, health)
// trusts and identifies itself to a server started with --tls-cert and
// --tls-client-ca: the flags --ca-file, --client-cert and --client-key.
// The zero value is Go's default (the system's roots, no certificate).
type ClientTLS struct {
	// CAFile is a PEM file of CA certificates trusted in addition to the
	// system's roots (a private CA, or a self-signed server certificate).
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key,
	// presented to servers that ask for one (--tls-client-auth); both or
	// neither.
	CertFile, KeyFile string
}

// RegisterFlags registers --ca-file, --client-cert and --client-key on fs.
func (c *ClientTLS) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.CAFile, "ca-file", c.CAFile, "PEM file of CA certificates to trust for https:// URLs, in addition to the system's (a private CA or a self-signed ingestd)")
	fs.StringVar(&c.CertFile, "client-cert", c.CertFile, "PEM client certificate presented to an ingestd with --tls-client-ca (with --client-key)")
	fs.StringVar(&c.KeyFile, "client-key", c.KeyFile, "PEM key of --client-cert")
}

// Config loads the files and returns the TLS configuration (nil when no
// flag is set: Go's default). The error names the flag whose file is
// unreadable or holds no certificate.
func (c ClientTLS) Config() (*tls.Config, error) {
	if c.CAFile == "" && c.CertFile == "" && c.KeyFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool() // no system roots on this machine: the file alone
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file: %s holds no PEM certificate", c.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("--client-cert and --client-key go together")
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--client-cert/--client-key: %w", err)
		}
		// Always present it: Go sends none when the server's list of
		// acceptable CAs does not name the certificate's issuer.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	return cfg, nil
}

// Transport returns an HTTP transport using Config: a clone of
// http.DefaultTransport (proxy, timeouts, HTTP/2) with its TLS
// configuration replaced, or http.DefaultTransport itself when no flag is
// set.
func (c ClientTLS) Transport() (http.RoundTripper, error) {
	cfg, err := c.Config()
	if err != nil || cfg == nil {
		return http.DefaultTransport, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return tr, nil
}
