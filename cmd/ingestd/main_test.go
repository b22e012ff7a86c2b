package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestMemoryLimit checks --memory-limit-bytes: the runtime's soft limit is
// set from the flag, 0 leaves it alone, GOMEMLIMIT wins, and a negative
// value is refused.
func TestMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	logger := slog.New(slog.DiscardHandler)

	t.Setenv("GOMEMLIMIT", "")
	setMemoryLimit(3<<30, logger)
	require.Equal(t, int64(3<<30), debug.SetMemoryLimit(-1))
	setMemoryLimit(0, logger)
	require.Equal(t, int64(3<<30), debug.SetMemoryLimit(-1), "0 leaves the limit as it is")

	t.Setenv("GOMEMLIMIT", "5GiB")
	setMemoryLimit(2<<30, logger)
	require.Equal(t, int64(3<<30), debug.SetMemoryLimit(-1), "GOMEMLIMIT wins over the flag")

	var stderr bytes.Buffer
	require.Equal(t, 2, run(context.Background(), []string{"--memory-limit-bytes", "-1"}, io.Discard, &stderr))
	require.Contains(t, stderr.String(), "--memory-limit-bytes must not be negative")
}
