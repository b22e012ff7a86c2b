package mirror

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/httpapi/client"
)

// TestRefusalsResync: the drain refusals that ask for a full resync
// (stale_epoch, cursor_beyond_sequence, history_expired) become errResync;
// any other 409 stays an error to retry.
func TestRefusalsResync(t *testing.T) {
	code := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintf(w, `{"code":%q,"message":"refused"}`, <-code)
	}))
	defer srv.Close()
	mr, err := New(Config{Source: srv.URL, Target: srv.URL + "/write", Table: "t"}, nil, prometheus.NewRegistry())
	require.NoError(t, err)
	for c, want := range map[string]bool{"stale_epoch": true, "cursor_beyond_sequence": true, "history_expired": true, "too_many_consumers": false} {
		code <- c
		_, err := mr.src.Drain(context.Background(), client.DrainRequest{Table: "t", Limit: 1})
		err = resync(err)
		require.Equal(t, want, errors.Is(err, errResync), "%s: %v", c, err)
	}
}
