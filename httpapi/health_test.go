package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHealthFollowsLifecycle checks that /health is not ready while the
// daemon starts (before SetReady) and once it stops (BeginShutdown), and
// that /ping answers throughout (liveness, not readiness).
func TestHealthFollowsLifecycle(t *testing.T) {
	api := New(Options{}, nil)
	get := func(path string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var body map[string]any
		if rec.Body.Len() > 0 {
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
		}
		return rec.Code, body
	}
	steps := []struct {
		name   string
		action func()
		status int
		state  string
	}{
		{"starting", func() {}, http.StatusServiceUnavailable, "fail"},
		{"ready", func() { api.SetReady(true) }, http.StatusOK, "pass"},
		{"stopping", api.BeginShutdown, http.StatusServiceUnavailable, "fail"},
		{"stopping twice", api.BeginShutdown, http.StatusServiceUnavailable, "fail"},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			s.action()
			code, body := get("/health")
			require.Equal(t, s.status, code)
			require.Equal(t, s.state, body["status"])
			code, _ = get("/ping")
			require.Equal(t, http.StatusNoContent, code)
		})
	}
	select {
	case <-api.stopCtx.Done():
	default:
		t.Fatal("BeginShutdown did not close the channel that ends long-polls")
	}
}

// TestHealthFailsWhileTheStoreLags: a ready server whose store reports
// what it does not keep up with (store.HealthReporter) fails /health
// with the store's message, and passes again once the store does.
func TestHealthFailsWhileTheStoreLags(t *testing.T) {
	lag := "jetstream: 1 table streams not applied to the row cache: T_x (stopped: corrupt)"
	api := New(Options{Health: func() string { return lag }}, nil)
	api.SetReady(true)
	get := func() (int, map[string]any) {
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
		var body map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
		return rec.Code, body
	}
	code, body := get()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "fail", body["status"])
	require.Equal(t, lag, body["message"])
	require.Equal(t, []any{map[string]any{"name": "store", "status": "fail", "message": lag}}, body["checks"])
	lag = ""
	code, body = get()
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "pass", body["status"])
}
