package auth

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// ErrProtectedMode is returned for a client refused by protected mode
// (403 forbidden over HTTP; a TCP connection is closed).
var ErrProtectedMode = errors.New("auth: protected mode: a client not on loopback")

// Listeners, the closed label set of ingestd_auth_protected_refused_total.
const (
	ListenerHTTP = "http"
	ListenerTCP  = "tcp"
)

// ProtectedMessage tells a client refused by protected mode why and how
// to proceed.
const ProtectedMessage = "ingestd is in protected mode: without --auth-file it serves only clients on its loopback " +
	"interface (127.0.0.1, ::1). To serve other hosts, restart it with --auth-file (create tokens with " +
	"`ingestd token create`), or with --insecure-open to serve every client without authentication " +
	"(docs/cli-and-errors.md#protected-mode)"

// tcpRefusalWriteTimeout bounds the write of ProtectedMessage to a refused
// TCP connection: a peer that does not read must not hold the accept path.
const tcpRefusalWriteTimeout = time.Second

// Protected is protected mode (docs/cli-and-errors.md#protected-mode): a
// server without an auth file serves only clients whose address is
// loopback, unless it is started with --insecure-open. It refuses the
// others, counting each refusal in ingestd_auth_protected_refused_total
// by listener. Its methods are safe for concurrent use; a disabled or nil
// Protected admits every client.
type Protected struct {
	on      bool
	refused *prometheus.CounterVec
}

// NewProtected returns protected mode, refusing non-loopback clients when
// on. Its counter is registered on reg (nil: none) either way, so that it
// reads 0 rather than missing on an open server.
func NewProtected(on bool, reg prometheus.Registerer) *Protected {
	p := &Protected{on: on, refused: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
		Name: "ingestd_auth_protected_refused_total",
		Help: "HTTP requests (403) and TCP connections (closed) refused by protected mode: a client not on loopback while no --auth-file is set and --insecure-open is not given, by listener: http, tcp.",
	}, []string{"listener"})}
	p.refused.WithLabelValues(ListenerHTTP)
	p.refused.WithLabelValues(ListenerTCP)
	return p
}

// On reports whether p refuses non-loopback clients.
func (p *Protected) On() bool { return p != nil && p.on }

// IsLoopback reports whether addr ("host:port", as net.Conn.RemoteAddr and
// http.Request.RemoteAddr give it) is a loopback address: 127.0.0.0/8,
// ::1 or an IPv4-mapped 127.x. Anything unparsable is not.
func IsLoopback(addr string) bool {
	ap, err := netip.ParseAddrPort(addr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// Require is middleware refusing a request from a client not on loopback
// with 403 forbidden and ProtectedMessage (the JSON error object), when p
// is on; it passes every request through otherwise.
func (p *Protected) Require(next http.Handler) http.Handler {
	if !p.On() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !IsLoopback(r.RemoteAddr) {
			p.refused.WithLabelValues(ListenerHTTP).Inc()
			WriteError(w, &Error{Reason: ReasonForbidden, Err: ErrForbidden, msg: ProtectedMessage})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Conn admits a new TCP connection when p is off or its peer is on
// loopback. Else it writes ProtectedMessage and a newline to the peer
// (unless the connection is TLS: the peer could not read it before a
// handshake) and returns ErrProtectedMode; the caller closes c.
func (p *Protected) Conn(c net.Conn) error {
	if !p.On() || IsLoopback(c.RemoteAddr().String()) {
		return nil
	}
	p.refused.WithLabelValues(ListenerTCP).Inc()
	if _, isTLS := c.(*tls.Conn); !isTLS {
		_ = c.SetWriteDeadline(time.Now().Add(tcpRefusalWriteTimeout))
		_, _ = c.Write([]byte("ERR " + ProtectedMessage + "\n"))
	}
	return ErrProtectedMode
}
