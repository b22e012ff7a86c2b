// Package auth is ingestd's access control (docs/operations.md#access-control): tokens
// with scopes read from an auth file, checked on every request (and again
// when a long-poll ends) and reloaded on SIGHUP or when the file changes;
// the TCP admission rule; TLS with reloadable certificates; the audit log.
//
// A token is presented the ways InfluxDB clients send one:
// "Authorization: Token X", "Authorization: Bearer X", Basic with the
// token as password (the user is ignored), or the u/p query parameters
// (p is the token). A missing, malformed, unknown or revoked token is 401
// and a valid token without the scope is 403, with InfluxDB 2.x's codes
// "unauthorized" and "forbidden" in the JSON error body (docs/contract.md#error-body).
package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Errors of authentication and authorization. Each *Error wraps one.
var (
	// ErrUnauthorized is a missing, malformed or unknown credential (401).
	ErrUnauthorized = errors.New("unauthorized access")
	// ErrRevoked is a token revoked in the auth file (401); a grant ends
	// with it as its cause when its token is revoked.
	ErrRevoked = errors.New("token revoked")
	// ErrForbidden is a valid token without the scope (403).
	ErrForbidden = errors.New("forbidden")
	// ErrChanged ends a grant whose token's scopes changed on reload; the
	// request is checked again under the new ones.
	ErrChanged = errors.New("token scopes changed")
)

// Reasons of refused credentials, the closed label set of
// ingestd_auth_failures_total.
const (
	ReasonMissing   = "missing"
	ReasonMalformed = "malformed"
	ReasonUnknown   = "unknown"
	ReasonRevoked   = "revoked"
	ReasonForbidden = "forbidden"
	ReasonTCPDenied = "tcp_denied"
)

var reasons = []string{ReasonMissing, ReasonMalformed, ReasonUnknown, ReasonRevoked, ReasonForbidden, ReasonTCPDenied}

// Error is a refused credential: Reason is one of the Reason constants and
// Err wraps ErrUnauthorized, ErrRevoked or ErrForbidden.
type Error struct {
	Reason string // one of the Reason constants (the label of the refusal metric)
	Err    error  // ErrUnauthorized, ErrRevoked or ErrForbidden
	msg    string
}

// Error returns the message a client is shown (never the token).
func (e *Error) Error() string { return e.msg }

// Unwrap returns Err, so that errors.Is finds the refusal's sentinel.
func (e *Error) Unwrap() error { return e.Err }

// Status is the HTTP status of e: 403 for a missing scope, else 401.
func (e *Error) Status() int {
	if errors.Is(e.Err, ErrForbidden) {
		return http.StatusForbidden
	}
	return http.StatusUnauthorized
}

// Code is e's InfluxDB 2.x error code: "forbidden" or "unauthorized".
func (e *Error) Code() string {
	if e.Status() == http.StatusForbidden {
		return "forbidden"
	}
	return "unauthorized"
}

// Grant is what one token (or the TCP address allowlist) may do, as of one
// load of the auth file. A reload keeps the grant of a token whose name and
// scopes are unchanged; it ends the others, with ErrRevoked as the cause
// when the token is gone or revoked and ErrChanged otherwise. Safe for
// concurrent use.
type Grant struct {
	spec grantSpec
	ctx  context.Context
	end  context.CancelCauseFunc
	a    *Authenticator
}

// Name is the token's name ("tcp-allow" for the TCP address allowlist).
func (g *Grant) Name() string { return g.spec.name }

// Done is closed when the grant ends (revoke or changed scopes).
func (g *Grant) Done() <-chan struct{} { return g.ctx.Done() }

// Context ends when the grant ends, with ErrRevoked or ErrChanged as its
// cause.
func (g *Grant) Context() context.Context { return g.ctx }

// Err is nil while the grant holds, else ErrRevoked or ErrChanged.
func (g *Grant) Err() error {
	if g.ctx.Err() == nil {
		return nil
	}
	return context.Cause(g.ctx)
}

// Allows reports whether the grant holds one of the scopes in s on table
// ("" asks whether it holds them on any table). It ignores whether the
// grant has ended.
func (g *Grant) Allows(s Scope, table string) bool {
	for i, n := range scopeNames {
		if s&n.s == 0 {
			continue
		}
		for _, glob := range g.spec.globs[i] {
			if table == "" || glob == "*" {
				return true
			}
			if ok, _ := path.Match(glob, table); ok {
				return true
			}
		}
	}
	return false
}

// CheckWrite returns nil when the grant, not ended, may write table, else
// an *Error (ErrRevoked once ended, ErrForbidden without the scope),
// counted and audited with remote as the peer's address.
func (g *Grant) CheckWrite(table, remote string) error {
	if err := g.Err(); err != nil {
		return g.a.refuse(ReasonRevoked, ErrRevoked, g.spec.name, "write", table, remote, "token "+quote(g.spec.name)+" was revoked or changed")
	}
	if g.Allows(Write, table) {
		return nil
	}
	return g.a.refuse(ReasonForbidden, ErrForbidden, g.spec.name, "write", table, remote,
		"token "+quote(g.spec.name)+" may not write table "+quote(table)+" (no write scope matching it)")
}

// tokenSet is one load of the auth file.
type tokenSet struct {
	grants  []*Grant
	byName  map[string]*Grant
	revoked map[[sha256.Size]byte]string
	allow   []netip.Prefix
	// allowGrant is the grant of allowlisted TCP peers (write on every
	// table); nil without an allowlist.
	allowGrant *Grant
	// sum is the SHA-256 of the file's bytes, to skip unchanged reloads.
	sum [sha256.Size]byte
}

// Authenticator checks credentials against the auth file. A nil
// *Authenticator (no --auth-file) admits everything: its Require is a
// pass-through and Conn admits every connection. Safe for concurrent use.
type Authenticator struct {
	cfg Config
	cur atomic.Pointer[tokenSet]
	mu  sync.Mutex // serializes reloads; guards pending and failed
	// pending is the SHA-256 of a changed file the watcher saw once and
	// will apply when it sees it again; failed that of the last content
	// that could not be loaded (reported once by the watcher).
	pending, failed *[sha256.Size]byte
	logger          *slog.Logger
	audit           *Audit
	m               *metrics
}

type metrics struct {
	failures *prometheus.CounterVec
	reloads  *prometheus.CounterVec
	tokens   prometheus.Gauge
}

// New loads cfg.File and returns its Authenticator; nil (and no error)
// when cfg.File is empty. audit receives auth failures; logger reloads.
// Either may be nil (discard); reg may be nil (no metrics).
func New(cfg Config, logger *slog.Logger, audit *Audit, reg prometheus.Registerer) (*Authenticator, error) {
	if cfg.File == "" {
		return nil, nil
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if audit == nil {
		audit = NewAudit(nil, cfg.AuditMaxFailuresPerSecond, nil)
	}
	f := promauto.With(reg)
	a := &Authenticator{cfg: cfg, logger: logger.With("component", "auth"), audit: audit, m: &metrics{
		failures: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_auth_failures_total",
			Help: "Refused credentials, by reason: missing, malformed, unknown, revoked (401), forbidden (403: a valid token without the scope), tcp_denied (a TCP connection neither allowlisted nor with a certificate naming a token).",
		}, []string{"reason"}),
		reloads: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ingestd_auth_reloads_total", Help: "Loads of the auth file that changed it, by outcome: ok, error (the previous tokens stay in force).",
		}, []string{"outcome"}),
		tokens: f.NewGauge(prometheus.GaugeOpts{
			Name: "ingestd_auth_tokens", Help: "Tokens in force (not revoked) in the auth file.",
		}),
	}}
	for _, r := range reasons {
		a.m.failures.WithLabelValues(r)
	}
	a.m.reloads.WithLabelValues("ok")
	a.m.reloads.WithLabelValues("error")
	if _, err := a.reload(false); err != nil {
		return nil, err
	}
	return a, nil
}

// Reload reads the auth file again (SIGHUP). A file that cannot be read
// or checked leaves the tokens in force as they were and is returned.
// Tokens gone or revoked end their grants with ErrRevoked (their waiting
// long-polls answer 401 at once); tokens whose scopes changed end theirs
// with ErrChanged.
func (a *Authenticator) Reload() error {
	if a == nil {
		return nil
	}
	_, err := a.reload(false)
	return err
}

// reload loads the file and reports whether it changed. With settle (the
// watcher), a changed content is applied only once it has been read the
// same twice in a row, one interval apart, so that a file caught
// mid-write (truncated, half written) is never applied, and content that
// could not be loaded is reported once.
func (a *Authenticator) reload(settle bool) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	raw, err := os.ReadFile(a.cfg.File)
	if err != nil {
		err = fmt.Errorf("auth: %w", err)
		raw = []byte(err.Error()) // settles and is reported like content
	}
	sum := sha256.Sum256(raw)
	old := a.cur.Load()
	if old != nil && old.sum == sum {
		a.pending, a.failed = nil, nil
		return false, nil
	}
	if settle {
		if a.pending == nil || *a.pending != sum {
			a.pending = &sum
			return false, nil
		}
		if a.failed != nil && *a.failed == sum {
			return false, nil
		}
	}
	if err == nil && len(bytes.TrimSpace(raw)) == 0 {
		err = fmt.Errorf("auth: %s is empty (write \"tokens: []\" to serve with no token)", a.cfg.File)
	}
	var f File
	if err == nil {
		f, err = decodeFile(a.cfg.File, raw)
	}
	var p parsed
	if err == nil {
		p, err = f.check()
	}
	if err != nil {
		a.failed = &sum
		return a.reloadFailed(err)
	}
	next := &tokenSet{byName: map[string]*Grant{}, revoked: p.revoked, allow: p.allow, sum: sum}
	kept := map[*Grant]bool{}
	for _, spec := range p.active {
		g := a.newGrant(spec)
		if old != nil {
			if prev := old.byName[spec.name]; prev != nil && sameSpec(prev.spec, spec) {
				g = prev
			}
		}
		kept[g] = true
		next.grants = append(next.grants, g)
		next.byName[spec.name] = g
	}
	if len(p.allow) > 0 {
		next.allowGrant = a.newGrant(grantSpec{name: "tcp-allow", globs: [len(scopeNames)][]string{{"*"}}})
		if old != nil && old.allowGrant != nil && samePrefixes(old.allow, p.allow) {
			next.allowGrant = old.allowGrant
		}
	}
	a.cur.Store(next)
	a.m.tokens.Set(float64(len(next.grants)))
	if old != nil {
		a.m.reloads.WithLabelValues("ok").Inc()
		ended := 0
		for _, g := range old.grants {
			if kept[g] {
				continue
			}
			ended++
			cause := ErrChanged
			if next.byName[g.spec.name] == nil || next.byName[g.spec.name].spec.hash != g.spec.hash {
				cause = ErrRevoked
			}
			g.end(cause)
		}
		if old.allowGrant != nil && old.allowGrant != next.allowGrant {
			old.allowGrant.end(ErrChanged)
		}
		a.logger.Info("auth file reloaded", "tokens", len(next.grants), "revoked", len(next.revoked), "ended_grants", ended)
	}
	return true, nil
}

func (a *Authenticator) reloadFailed(err error) (bool, error) {
	if a.cur.Load() != nil {
		a.m.reloads.WithLabelValues("error").Inc()
		a.logger.Error("auth file not reloaded; the tokens in force stay", "err", err)
	}
	return false, err
}

func (a *Authenticator) newGrant(spec grantSpec) *Grant {
	ctx, end := context.WithCancelCause(context.Background())
	return &Grant{spec: spec, ctx: ctx, end: end, a: a}
}

func sameSpec(x, y grantSpec) bool {
	if x.hash != y.hash {
		return false
	}
	for i := range x.globs {
		if strings.Join(x.globs[i], "\x00") != strings.Join(y.globs[i], "\x00") {
			return false
		}
	}
	return true
}

func samePrefixes(x, y []netip.Prefix) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}

// Run checks the auth file every cfg.ReloadInterval until ctx ends and
// reloads it when its content changed and stayed the same for one
// interval (a failed reload is logged and counted once; the tokens in
// force stay). It returns nil when ctx ends; with a
// 0 interval or a nil Authenticator it only waits for ctx.
func (a *Authenticator) Run(ctx context.Context) error {
	if a == nil || a.cfg.ReloadInterval == 0 {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(a.cfg.ReloadInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			_, _ = a.reload(true)
		}
	}
}

// TCPRefusedWithoutRule reports whether no TCP connection can be admitted:
// no address allowlist and no client-certificate verification (tlsClientCA
// false). cmd/ingestd warns about it at start.
func (a *Authenticator) TCPRefusedWithoutRule(tlsClientCA bool) bool {
	return a != nil && !tlsClientCA && len(a.cur.Load().allow) == 0
}

// credential extracts the token a request presents, or an *Error.
func credential(r *http.Request) (string, *Error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		if p := r.URL.Query().Get("p"); p != "" {
			return checkLen(p)
		}
		return "", &Error{Reason: ReasonMissing, Err: ErrUnauthorized,
			msg: "unauthorized access: no token (send it as Authorization: Token or Bearer, as the Basic password, or as the p parameter)"}
	}
	scheme, rest, _ := strings.Cut(h, " ")
	rest = strings.TrimSpace(rest)
	switch {
	case strings.EqualFold(scheme, "Token"), strings.EqualFold(scheme, "Bearer"):
		return checkLen(rest)
	case strings.EqualFold(scheme, "Basic"):
		if len(rest) > 2*MaxTokenBytes {
			return "", malformed(fmt.Sprintf("Basic credentials are longer than %d bytes", 2*MaxTokenBytes))
		}
		raw, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return "", malformed("Basic credentials are not base64")
		}
		_, pass, ok := bytes.Cut(raw, []byte{':'})
		if !ok {
			return "", malformed("Basic credentials lack user:password")
		}
		return checkLen(string(pass))
	}
	return "", malformed("Authorization scheme must be Token, Bearer or Basic")
}

func checkLen(tok string) (string, *Error) {
	if tok == "" || len(tok) > MaxTokenBytes {
		return "", malformed(fmt.Sprintf("token is empty or longer than %d bytes", MaxTokenBytes))
	}
	return tok, nil
}

func malformed(why string) *Error {
	return &Error{Reason: ReasonMalformed, Err: ErrUnauthorized, msg: "unauthorized access: " + why}
}

// lookup returns the grant of tok, comparing its hash with every token in
// constant time, or an *Error (unknown, or revoked with the token's name).
func (s *tokenSet) lookup(tok string) (*Grant, string, *Error) {
	sum := sha256.Sum256([]byte(tok))
	var found *Grant
	for _, g := range s.grants {
		if subtle.ConstantTimeCompare(sum[:], g.spec.hash[:]) == 1 {
			found = g
		}
	}
	if found != nil {
		return found, found.spec.name, nil
	}
	if name, ok := s.revoked[sum]; ok {
		return nil, name, &Error{Reason: ReasonRevoked, Err: ErrRevoked, msg: "unauthorized access: token revoked"}
	}
	return nil, "", &Error{Reason: ReasonUnknown, Err: ErrUnauthorized, msg: "unauthorized access: unknown token"}
}

// Check authenticates r and checks that its token holds one of the scopes
// in s on table ("" for any table). It returns the token's grant, or an
// *Error, counted and audited (action names the route for the audit log).
func (a *Authenticator) Check(r *http.Request, s Scope, table, action string) (*Grant, error) {
	tok, cerr := credential(r)
	if cerr != nil {
		return nil, a.refuse(cerr.Reason, cerr.Err, "", action, table, r.RemoteAddr, cerr.msg)
	}
	g, name, lerr := a.cur.Load().lookup(tok)
	if lerr != nil {
		return nil, a.refuse(lerr.Reason, lerr.Err, name, action, table, r.RemoteAddr, lerr.msg)
	}
	if !g.Allows(s, table) {
		what := "any table"
		if table != "" {
			what = "table " + quote(table)
		}
		return nil, a.refuse(ReasonForbidden, ErrForbidden, g.spec.name, action, table, r.RemoteAddr,
			"token "+quote(g.spec.name)+" lacks the "+s.String()+" scope on "+what)
	}
	return g, nil
}

// refuse counts and audits a refusal and returns its *Error.
func (a *Authenticator) refuse(reason string, err error, name, action, table, remote, msg string) *Error {
	a.m.failures.WithLabelValues(reason).Inc()
	a.audit.failure(reason, name, action, table, remote)
	return &Error{Reason: reason, Err: err, msg: msg}
}

type grantKey struct{}

// FromContext returns the grant Require admitted the request with, nil
// when none (no auth file, or an open route).
func FromContext(ctx context.Context) *Grant {
	g, _ := ctx.Value(grantKey{}).(*Grant)
	return g
}

// Require returns middleware admitting a request whose token holds one of
// the scopes in s on the table tableFrom names (nil, or "", for any
// table), with its grant in the request's context (FromContext); others
// get the *Error's status and JSON body (WriteError). action names the
// route in the audit log. A nil Authenticator's middleware passes every
// request through unchanged.
func (a *Authenticator) Require(s Scope, action string, tableFrom func(*http.Request) string) func(http.Handler) http.Handler {
	if a == nil {
		return func(next http.Handler) http.Handler { return next }
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			table := ""
			if tableFrom != nil {
				table = tableFrom(r)
			}
			g, err := a.Check(r, s, table, action)
			if err != nil {
				WriteError(w, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), grantKey{}, g)))
		})
	}
}

// WriteError writes err's status and the JSON error body (docs/contract.md#error-body)
// ({"code","message","error"}): an *Error's own, else 401 unauthorized.
// A 401 carries WWW-Authenticate (RFC 9110).
func WriteError(w http.ResponseWriter, err error) {
	e := &Error{Reason: ReasonUnknown, Err: ErrUnauthorized, msg: err.Error()}
	errors.As(err, &e)
	if e.Status() == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="ingestd"`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status())
	_ = json.NewEncoder(w).Encode(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Error   string `json:"error"`
	}{e.Code(), e.msg, e.msg})
}

// Conn admits a TCP connection (the TCP rule of the auth file): after the
// TLS handshake (bounded by cfg.TLSHandshakeTimeout), a verified client
// certificate whose identity (common name, else first DNS name) names a
// token in force gets that token's grant; else a peer address in
// tcp.allow gets the allowlist's grant (write on every table); else an
// *Error (tcp_denied), counted and audited. A nil Authenticator admits
// every connection with a nil grant, after the handshake.
func (a *Authenticator) Conn(ctx context.Context, c net.Conn, handshakeTimeout time.Duration) (*Grant, error) {
	id, herr := handshake(ctx, c, handshakeTimeout)
	if a == nil || herr != nil {
		return nil, herr
	}
	s := a.cur.Load()
	if id != "" {
		if g := s.byName[id]; g != nil {
			return g, nil
		}
	}
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil && s.allowGrant != nil {
		for _, p := range s.allow {
			if p.Contains(ap.Addr().Unmap()) {
				return s.allowGrant, nil
			}
		}
	}
	msg := "tcp connection is not allowlisted (tcp.allow) and presents no certificate naming a token"
	if id != "" {
		msg = "tcp client certificate " + quote(id) + " names no token in force"
	}
	return nil, a.refuse(ReasonTCPDenied, ErrUnauthorized, id, "tcp.connect", "", c.RemoteAddr().String(), msg)
}

// quote quotes s for a message, cut to 64 bytes.
func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return fmt.Sprintf("%q", s)
}
