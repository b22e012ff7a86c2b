package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ingestd/ingestd/httpapi/auth"
	"github.com/ingestd/ingestd/ilp"
)

// security is the daemon's access control (--auth-file), TLS and audit
// log, built from auth.Config.
type security struct {
	cfg       auth.Config
	authn     *auth.Authenticator // nil without --auth-file
	protected *auth.Protected     // on without --auth-file and --insecure-open
	tls       *auth.TLS           // nil without --tls-cert
	audit     *auth.Audit
	auditFile *os.File // nil: the audit log goes to the main log
	logger    *slog.Logger
}

// newSecurity opens the audit log, loads the auth file and the TLS files.
func newSecurity(cfg auth.Config, logger *slog.Logger, reg prometheus.Registerer) (*security, error) {
	s := &security{cfg: cfg, logger: logger}
	auditLogger := logger
	if cfg.AuditLogFile != "" {
		f, err := os.OpenFile(cfg.AuditLogFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open --audit-log-file: %w", err)
		}
		s.auditFile = f
		auditLogger = slog.New(slog.NewJSONHandler(f, nil))
	}
	s.audit = auth.NewAudit(auditLogger, cfg.AuditMaxFailuresPerSecond, reg)
	s.protected = auth.NewProtected(cfg.File == "" && !cfg.InsecureOpen, reg)
	var err error
	if s.authn, err = auth.New(cfg, logger, s.audit, reg); err != nil {
		return nil, errors.Join(err, s.close())
	}
	if s.tls, err = auth.NewTLS(cfg, logger, reg); err != nil {
		return nil, errors.Join(err, s.close())
	}
	return s, nil
}

// close closes the audit log file.
func (s *security) close() error {
	if s.auditFile == nil {
		return nil
	}
	err := s.auditFile.Close()
	s.auditFile = nil
	return err
}

// run reloads the auth file when it changes, and the auth and TLS files on
// SIGHUP, until ctx ends; the channel is closed when it has stopped.
func (s *security) run(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer close(done)
		defer signal.Stop(hup)
		watch := make(chan struct{})
		go func() {
			defer close(watch)
			_ = s.authn.Run(ctx)
		}()
		for {
			select {
			case <-ctx.Done():
				<-watch
				return
			case <-hup:
				s.logger.Info("sighup: reloading the auth and tls files")
				// Each failure is logged and counted where it happens.
				_ = s.authn.Reload()
				_ = s.tls.Reload()
			}
		}
	}()
	return done
}

// ilpAuth connects the ILP listeners to the auth file and TLS.
func (s *security) ilpAuth() ilp.Auth {
	var a ilp.Auth
	if s.authn != nil {
		a.Request = func(r *http.Request) ilp.Grant {
			if g := auth.FromContext(r.Context()); g != nil {
				return g
			}
			return nil
		}
	}
	if s.authn != nil || s.tls != nil || s.protected.On() {
		a.Conn = func(ctx context.Context, c net.Conn) (ilp.Grant, error) {
			if err := s.protected.Conn(c); err != nil {
				return nil, err
			}
			g, err := s.authn.Conn(ctx, c, s.cfg.TLSHandshakeTimeout)
			if g == nil {
				return nil, err
			}
			return g, nil
		}
	}
	return a
}

// warnAtStart says once, at start, how clients not on loopback are
// served when a listener can be reached by them: without --auth-file,
// refused by protected mode (info) or, with --insecure-open, served
// without authentication (warn); and it warns when an auth file admits no
// TCP connection at all.
func (s *security) warnAtStart(logger *slog.Logger, httpAddr net.Addr, tcpLn net.Listener) {
	addrs := []net.Addr{httpAddr}
	if tcpLn != nil {
		addrs = append(addrs, tcpLn.Addr())
	}
	if s.authn == nil {
		var open []string
		for _, a := range addrs {
			if ta, ok := a.(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
				open = append(open, a.String())
			}
		}
		switch {
		case len(open) == 0:
		case s.protected.On():
			logger.Info("protected mode: without --auth-file only loopback clients are served; set --auth-file, or --insecure-open to serve every client without authentication",
				"addrs", strings.Join(open, ","))
		default:
			logger.Warn("serving without authentication on a non-loopback address (--insecure-open): anyone who reaches it can write, drain, truncate and drop; set --auth-file",
				"addrs", strings.Join(open, ","))
		}
		return
	}
	if tcpLn != nil && s.authn.TCPRefusedWithoutRule(s.cfg.TLSClientCA != "") {
		logger.Warn("the auth file admits no tcp connection: add tcp.allow addresses, or --tls-client-ca with certificates naming tokens",
			"tcp_addr", tcpLn.Addr().String())
	}
}
