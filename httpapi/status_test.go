package httpapi

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

func TestSparkline(t *testing.T) {
	require.Empty(t, sparkline(nil))
	require.Empty(t, sparkline([]float64{5}), "one value draws no line")
	require.Equal(t, Sparkline("0.0,19.0 50.0,1.0 100.0,10.0"), sparkline([]float64{0, 10, 5}))
	require.Equal(t, Sparkline("0.0,19.0 100.0,19.0"), sparkline([]float64{0, 0}), "all zero: a flat line at the bottom")
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 20: "3.0 MiB", 5 << 40: "5.0 TiB"} {
		require.Equal(t, want, formatBytes(n))
	}
}

func TestStatusRates(t *testing.T) {
	t0 := time.Unix(0, 0)
	s := func(sec int, points uint64, commits uint64, commitSec float64) statusSample {
		return statusSample{at: t0.Add(time.Duration(sec) * time.Second), points: map[string]uint64{"cpu": points}, commits: commits, commitSeconds: commitSec}
	}
	samples := []statusSample{s(0, 0, 0, 0), s(10, 100, 4, 0.02), s(20, 50, 4, 0.02), s(30, 350, 6, 0.03)}
	rate, spark := tableRate(samples, "cpu")
	require.Equal(t, "30.0", rate, "points/s over the last interval")
	require.NotEmpty(t, spark)
	rate, _ = tableRate(samples, "nosuch")
	require.Equal(t, "0.0", rate)
	rate, spark = tableRate(samples[:1], "cpu")
	require.Empty(t, rate, "no rate before two samples")
	require.Empty(t, spark)

	lat, _ := commitLatency(samples)
	require.Equal(t, "5ms", lat, "(0.03-0.02) s / 2 commits")
	lat, _ = commitLatency(samples[:1])
	require.Equal(t, "no commits", lat)
}

func TestMethodLabel(t *testing.T) {
	require.Equal(t, "GET", methodLabel("GET"))
	require.Equal(t, "other", methodLabel("BREW"), "a client cannot mint label values")
}

// failingGatherer fails every Gather.
type failingGatherer struct{}

func (failingGatherer) Gather() ([]*dto.MetricFamily, error) { return nil, errors.New("gather failed") }

// TestStatusLogLimited checks that the status page's log lines, which any
// client can cause by requesting it, pass at most one a second.
func TestStatusLogLimited(t *testing.T) {
	var buf bytes.Buffer
	a := New(Options{Gatherer: failingGatherer{}, Logger: slog.New(slog.NewTextHandler(&buf, nil))}, nil)
	for range 100 {
		a.gather()
	}
	require.Equal(t, 1, strings.Count(buf.String(), "status page: gather metrics"), "%s", buf.String())
}
