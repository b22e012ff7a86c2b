package cli

import (
	"fmt"
	"io"
	"log/slog"
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
