package auth

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Audit is the audit log (docs/operations.md#audit-log: control actions recorded without keys
// or tokens): its own slog logger, one "audit" line per table or sync
// change, truncate, drop, consumer deletion, consumer's first drain and
// refused credential, with the token's name, the action, the table, the
// outcome and the remote address. It never records a token, a password or
// a cursor value. Records bypass the logger's level (--log-level warn
// still writes them). Refused credentials and actions that failed are
// limited to a number of lines per second together (a client cannot flood
// the log), the rest counted, and names are cut to 256 bytes. A nil
// *Audit records nothing. Safe for concurrent use.
type Audit struct {
	handler    slog.Handler
	perSecond  int
	mu         sync.Mutex // guards second and n
	second     int64
	n          int
	suppressed prometheus.Counter
	now        func() time.Time
}

// NewAudit returns the audit log writing to logger (nil: discard), with at
// most failuresPerSecond lines per second for refused credentials. reg
// may be nil (no metrics).
func NewAudit(logger *slog.Logger, failuresPerSecond int, reg prometheus.Registerer) *Audit {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Audit{handler: logger.With("log", "audit").Handler(), perSecond: failuresPerSecond, now: time.Now,
		suppressed: promauto.With(reg).NewCounter(prometheus.CounterOpts{
			Name: "ingestd_audit_suppressed_total",
			Help: "Audit lines of refused credentials and of control actions that failed not written because --audit-max-failures-per-second was reached.",
		})}
}

// Record writes one audit line: token is the token's name ("" without an
// auth file), action what was done ("table.truncate", …), outcome "ok" or
// the error code; attrs are more key-value pairs (a consumer's name).
// Names (table and string attrs) longer than maxAuditName bytes are cut
// to it, with their length. An outcome other than "ok" is a refusal a
// client can repeat at will: it shares the refused credentials' lines
// per second.
func (a *Audit) Record(token, action, table, outcome, remote string, attrs ...any) {
	if a == nil {
		return
	}
	if outcome != "ok" && !a.allow() {
		return
	}
	rec := append([]any{"token", token, "action", action, "table", auditName(table), "outcome", outcome, "remote_addr", remote}, attrs...)
	for i := 11; i < len(rec); i += 2 { // the attrs' values
		if s, ok := rec[i].(string); ok {
			rec[i] = auditName(s)
		}
	}
	a.write(slog.LevelInfo, rec)
}

// maxAuditName is the longest name an audit line carries whole: a name
// may be up to --max-name-bytes, and a refusal's line repeats whatever
// the client sent (60 KB names wrote 92 MB of log a second).
const maxAuditName = 256

// auditName returns s, or its first maxAuditName bytes with its length.
func auditName(s string) string {
	if len(s) <= maxAuditName {
		return s
	}
	return fmt.Sprintf("%s…(%d bytes)", strings.ToValidUTF8(s[:maxAuditName], ""), len(s))
}

// allow reports whether this second's quota of refusal lines has room,
// counting the line as written, or counts it suppressed.
func (a *Audit) allow() bool {
	now := a.now().Unix()
	a.mu.Lock()
	if now != a.second {
		a.second, a.n = now, 0
	}
	a.n++
	ok := a.n <= a.perSecond
	a.mu.Unlock()
	if !ok {
		a.suppressed.Inc()
	}
	return ok
}

// write hands one record to the handler directly, whatever its level.
func (a *Audit) write(level slog.Level, attrs []any) {
	r := slog.NewRecord(a.now(), level, "audit", 0)
	r.Add(attrs...)
	_ = a.handler.Handle(context.Background(), r)
}

// failure records a refused credential unless this second's quota is
// spent.
func (a *Audit) failure(reason, token, action, table, remote string) {
	if a == nil || !a.allow() {
		return
	}
	a.write(slog.LevelWarn, []any{"token", token, "action", action, "table", auditName(table), "outcome", "refused_" + reason, "remote_addr", remote})
}
