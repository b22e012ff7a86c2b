package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// ValidateLog checks the --log-level and --log-format flags every command
// shares: a level slog knows (debug, info, warn, error) and text or json.
func ValidateLog(level, format string) error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	if format != "text" && format != "json" {
		return fmt.Errorf("--log-format must be text or json, got %q", format)
	}
	return nil
}

// NewLogger returns a slog logger writing to w at level (as ValidateLog
// accepts it; an invalid one is info) in format, text or json.
func NewLogger(w io.Writer, level, format string) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lvl}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// LimitedHandler passes at most one record of each message per interval
// to the handler it wraps, by the records' times, and drops the rest: the
// next record of that message passed carries the number dropped before it
// as "suppressed". It bounds the log lines a peer can cause (each failed
// request to a hostile server would otherwise be one); its messages must
// be constants, not built from what peers send. Safe for concurrent use;
// only Handle is limited, so wrap the handler of a logger that already has
// its attributes.
type LimitedHandler struct {
	slog.Handler
	every time.Duration

	mu   sync.Mutex // guards seen
	seen map[string]*limitState
}

// limitState is one message's last record passed and the records dropped
// since.
type limitState struct {
	last       time.Time
	suppressed int
}

// NewLimitedHandler returns h limited to one record of each message per
// every.
func NewLimitedHandler(h slog.Handler, every time.Duration) *LimitedHandler {
	return &LimitedHandler{Handler: h, every: every, seen: map[string]*limitState{}}
}

// Handle passes r on unless a record of its message was passed less than
// every before it.
func (h *LimitedHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	st := h.seen[r.Message]
	if st == nil {
		st = &limitState{}
		h.seen[r.Message] = st
	} else if r.Time.Sub(st.last) < h.every {
		st.suppressed++
		h.mu.Unlock()
		return nil
	}
	n := st.suppressed
	st.last, st.suppressed = r.Time, 0
	h.mu.Unlock()
	if n > 0 {
		r.AddAttrs(slog.Int("suppressed", n))
	}
	return h.Handler.Handle(ctx, r)
}
