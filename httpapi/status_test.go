package httpapi

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

func TestSparkline(t *testing.T) {
	require.Empty(t, sparkline(nil, formatRate))
	require.Empty(t, sparkline([]float64{5}, formatRate), "one value draws no line")
	require.Equal(t, Sparkline{Points: "0.0,19.0 50.0,1.0 100.0,10.0", Max: "10.0/s"}, sparkline([]float64{0, 10, 5}, formatRate),
		"the largest value at the top, labelled")
	require.Equal(t, Sparkline{Points: "0.0,19.0 100.0,19.0", Max: "0.0/s"}, sparkline([]float64{0, 0}, formatRate), "all zero: a flat line at the bottom")
	require.Equal(t, "2.5ms", sparkline([]float64{0.001, 0.0025}, formatSeconds).Max)
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 20: "3.0 MiB", 5 << 40: "5.0 TiB"} {
		require.Equal(t, want, formatBytes(n))
	}
}

// TestStatusRates: rates and the commit latency are averaged over the
// window, from the newest sample at least that old to the counts now, so
// that they do not drop to 0 between two samples or just after writes
// stop; the sparklines show each interval.
func TestStatusRates(t *testing.T) {
	t0 := time.Unix(0, 0)
	s := func(sec int, points uint64, commits uint64, commitSec float64) statusSample {
		return statusSample{at: t0.Add(time.Duration(sec) * time.Second), points: map[string]uint64{"cpu": points}, commits: commits, commitSeconds: commitSec}
	}
	samples := []statusSample{s(0, 0, 0, 0), s(10, 100, 4, 0.02), s(20, 50, 4, 0.02), s(30, 350, 6, 0.03), s(40, 600, 8, 0.04)}
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

	base := windowBase(samples, at(43), 20*time.Second)
	require.Equal(t, at(20), base.at, "the newest sample at least 20 s old")
	rate, spark := tableRate(samples, base, at(43), "cpu", 600)
	require.Equal(t, "23.9", rate, "(600-50) points / 23 s, though nothing came since the last sample")
	require.Equal(t, "30.0/s", spark.Max)
	require.NotEmpty(t, spark.Points)
	rate, _ = tableRate(samples, base, at(43), "new", 46)
	require.Equal(t, "2.0", rate, "a table born since the base counts from 0")
	rate, _ = tableRate(samples, base, at(43), "cpu", 10)
	require.Equal(t, "0.0", rate, "a count that went down: the table was dropped")
	require.Equal(t, at(0), windowBase(samples, at(43), time.Hour).at, "samples spanning less than the window: the oldest")
	require.Nil(t, windowBase(nil, at(43), time.Minute))
	rate, spark = tableRate(nil, nil, at(43), "cpu", 600)
	require.Empty(t, rate, "no rate before the first sample")
	require.Empty(t, spark.Points)

	lat, spark := commitLatency(samples, base, 9, 0.05)
	require.Equal(t, "6ms", lat, "(0.05-0.02) s / (9-4) commits")
	require.Equal(t, "5ms", spark.Max, "the slowest interval's mean")
	lat, _ = commitLatency(samples, base, 4, 0.02)
	require.Equal(t, "no commits", lat)
	lat, _ = commitLatency(nil, nil, 4, 0.02)
	require.Equal(t, "no commits", lat)
}

// TestFavicon: the icon is served at /favicon.ico (no 404 for browsers
// that ask) and inlined in the page as a data: URL.
func TestFavicon(t *testing.T) {
	api := New(Options{}, nil)
	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/favicon.ico", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "image/svg+xml", rec.Header().Get("Content-Type"))
	require.Equal(t, faviconSVG, rec.Body.String())
	require.True(t, strings.HasPrefix(string(faviconDataURL), "data:image/svg+xml,%3Csvg"), faviconDataURL)
	require.NotContains(t, string(faviconDataURL), "#", "a # would end the URL")
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
