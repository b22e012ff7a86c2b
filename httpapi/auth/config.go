package auth

import (
	"errors"
	"flag"
	"time"
)

// Default values of Config.
const (
	DefaultReloadInterval            = 2 * time.Second
	DefaultTLSHandshakeTimeout       = 10 * time.Second
	DefaultAuditMaxFailuresPerSecond = 10
)

// Client-certificate policies of Config.TLSClientAuth.
const (
	ClientAuthRequire      = "require"
	ClientAuthVerifyIfSent = "verify-if-given"
)

// Config is the security configuration (docs/operations.md#access-control): the auth file, TLS for
// the HTTP and TCP listeners, and the audit log.
type Config struct {
	// File is the auth file (--auth-file); empty serves without
	// authentication: in protected mode (loopback clients only) unless
	// InsecureOpen.
	File string
	// InsecureOpen (--insecure-open), without File, serves every client
	// without authentication instead of loopback ones only
	// (docs/cli-and-errors.md#protected-mode). It excludes File.
	InsecureOpen bool
	// ReloadInterval is how often the auth file is checked for changes
	// (its content, so editors' atomic renames and Kubernetes' secret
	// symlink swaps are seen too); a change is applied once two checks in
	// a row read the same. 0 reloads only on SIGHUP.
	ReloadInterval time.Duration
	// TLSCert and TLSKey (PEM files) turn on TLS on the HTTP and TCP
	// listeners; both are read again on SIGHUP.
	TLSCert, TLSKey string
	// TLSClientCA (PEM) verifies client certificates against these CAs;
	// TLSClientAuth says whether one is required (ClientAuthRequire) or
	// verified only when sent (ClientAuthVerifyIfSent).
	TLSClientCA   string
	TLSClientAuth string
	// TLSHandshakeTimeout bounds a TCP connection's TLS handshake.
	TLSHandshakeTimeout time.Duration
	// AuditLogFile, when set, receives the audit log as JSON lines
	// (appended, created 0600); empty writes it to the main log.
	AuditLogFile string
	// AuditMaxFailuresPerSecond bounds the audit lines of refused
	// credentials per second; the rest are counted as suppressed.
	AuditMaxFailuresPerSecond int
}

// DefaultConfig returns the defaults: no auth file, no TLS.
func DefaultConfig() Config {
	return Config{
		ReloadInterval:            DefaultReloadInterval,
		TLSClientAuth:             ClientAuthRequire,
		TLSHandshakeTimeout:       DefaultTLSHandshakeTimeout,
		AuditMaxFailuresPerSecond: DefaultAuditMaxFailuresPerSecond,
	}
}

// RegisterFlags registers the security flags on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.File, "auth-file", c.File, "token file (YAML, or TOML when it ends in .toml) made by `ingestd token create`; empty: no authentication, and protected mode (only loopback clients are served) unless --insecure-open")
	fs.BoolVar(&c.InsecureOpen, "insecure-open", c.InsecureOpen, "without --auth-file, serve clients on every address without authentication (default: protected mode, HTTP requests and TCP connections from non-loopback addresses are refused)")
	fs.DurationVar(&c.ReloadInterval, "auth-reload-interval", c.ReloadInterval, "how often the auth file is checked for changes, applied once two checks read the same (0: only on SIGHUP)")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "PEM certificate (chain) for TLS on the HTTP and TCP listeners; read again on SIGHUP (empty: no TLS)")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "PEM private key of --tls-cert; read again on SIGHUP")
	fs.StringVar(&c.TLSClientCA, "tls-client-ca", c.TLSClientCA, "PEM CA certificates that client certificates are verified against (empty: none asked for)")
	fs.StringVar(&c.TLSClientAuth, "tls-client-auth", c.TLSClientAuth, "with --tls-client-ca: require (every client presents a certificate) or verify-if-given")
	fs.DurationVar(&c.TLSHandshakeTimeout, "tls-handshake-timeout", c.TLSHandshakeTimeout, "how long a TCP connection's TLS handshake may take")
	fs.StringVar(&c.AuditLogFile, "audit-log-file", c.AuditLogFile, "append the audit log to this file as JSON lines (empty: the main log)")
	fs.IntVar(&c.AuditMaxFailuresPerSecond, "audit-max-failures-per-second", c.AuditMaxFailuresPerSecond, "most audit lines per second for refused credentials; the rest are counted in ingestd_audit_suppressed_total")
}

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	switch {
	case c.InsecureOpen && c.File != "":
		return errors.New("auth: --insecure-open and --auth-file exclude each other (with an auth file every client needs a token)")
	case c.ReloadInterval < 0:
		return errors.New("auth: --auth-reload-interval must not be negative")
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("auth: --tls-cert and --tls-key go together")
	case c.TLSClientCA != "" && c.TLSCert == "":
		return errors.New("auth: --tls-client-ca needs --tls-cert and --tls-key")
	case c.TLSClientAuth != ClientAuthRequire && c.TLSClientAuth != ClientAuthVerifyIfSent:
		return errors.New("auth: --tls-client-auth must be require or verify-if-given")
	case c.TLSHandshakeTimeout <= 0:
		return errors.New("auth: --tls-handshake-timeout must be positive")
	case c.AuditMaxFailuresPerSecond < 1:
		return errors.New("auth: --audit-max-failures-per-second must be positive")
	}
	return nil
}
