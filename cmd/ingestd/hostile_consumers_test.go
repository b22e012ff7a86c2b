package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/cmd/ingestd/mirror"
	"github.com/ingestd/ingestd/httpapi/client"
)

// TestHostileConsumerCardinality replays the cardinality attack without a
// token: many tables, many consumers, the longest names. The name cap
// and the consumer budget refuse past their limits, and /metrics and the
// status page grow by what --metrics-max-consumers and
// --status-max-consumers allow, not by what was created
// (docs/security.md#metric-series).
func TestHostileConsumerCardinality(t *testing.T) {
	const tables, perTable, labelled = 20, 3, 10
	cfg := testConfig(t.TempDir())
	cfg.feed.MaxConsumersPerToken = 40 // without --auth-file, every client's budget
	cfg.feed.MetricsMaxTables = 5
	cfg.feed.MetricsMaxConsumers = labelled
	cfg.http.StatusMaxConsumers = labelled
	d := startDaemon(t, cfg)
	c := newClient(t, d)
	var lp strings.Builder
	for i := range tables {
		name := fmt.Sprintf("t%02d", i)
		c.createSyncTable(t, name)
		fmt.Fprintf(&lp, "%s v=%di %d\n", name, i+1, i+1)
	}
	c.mustWrite(t, lp.String())
	metricsBefore := len(c.getOK(t, "/metrics").Body)
	statusBefore := len(c.getOK(t, "/").Body)

	drain := func(table, consumer string) response {
		return c.get(t, "/drain?table="+table+"&limit=1&consumer="+url.QueryEscape(consumer))
	}
	e := requireCode(t, drain("t00", strings.Repeat("x", 4000)), http.StatusBadRequest, "invalid_name")
	require.Contains(t, e.Message, "--max-consumer-name-bytes")
	created, refused := 0, 0
	for i := range tables {
		for j := range perTable {
			name := fmt.Sprintf("%03d-%03d-", i, j) + strings.Repeat("n", cfg.feed.MaxConsumerNameBytes-8)
			r := drain(fmt.Sprintf("t%02d", i), name)
			if r.Status == http.StatusOK {
				created++
				continue
			}
			e := requireCode(t, r, http.StatusConflict, "too_many_consumers")
			require.Contains(t, e.Message, "--max-consumers-per-token")
			refused++
		}
	}
	require.Equal(t, 40, created, "the budget of every client without a token")
	require.Equal(t, tables*perTable-40, refused)

	body := c.getOK(t, "/metrics").Body
	fams := scrapeMetrics(t, d)
	for _, fam := range []string{"ingestd_feed_consumer_lag_fragments", "ingestd_feed_consumer_lag_seconds", "ingestd_feed_consumer_position", "ingestd_feed_consumer_holds_history"} {
		n := 0
		for _, m := range fams[fam].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "consumer" && l.GetValue() != "" {
					n++
				}
			}
		}
		require.Equal(t, labelled, n, "%s: labelled consumers", fam)
	}
	require.Len(t, fams["ingestd_feed_table_seq"].GetMetric(), 5, "labelled tables")
	require.Contains(t, string(body), `ingestd_feed_metrics_unlabelled{kind="consumer"} 30`)
	require.Contains(t, string(body), `ingestd_feed_metrics_unlabelled{kind="table"} 15`)
	require.Contains(t, string(body), `ingestd_feed_consumer_lag_fragments{consumer="",table=""} 30`, "the others, summed")
	require.Contains(t, string(body), `ingestd_feed_consumer_refusals_total{reason="token_budget"} 20`)
	require.Contains(t, string(body), `ingestd_feed_consumer_refusals_total{reason="name_bytes"} 1`)
	require.Contains(t, string(body), `ingestd_feed_consumers 40`)
	// Four labelled series of about 330 bytes per labelled consumer (13
	// KB), plus the latency histograms of the 400 and 409 answers (10
	// KB); labelling all 40 created would add 53 KB.
	grown := len(body) - metricsBefore
	t.Logf("/metrics: %d bytes before, %d after 40 consumers with %d-byte names (+%d)", metricsBefore, len(body), cfg.feed.MaxConsumerNameBytes, grown)
	require.Less(t, grown, 32_000, "the scrape grows by the labelled consumers only")

	status := c.getOK(t, "/").Body
	require.Contains(t, string(status), "and 30 more")
	grown = len(status) - statusBefore
	t.Logf("status page: %d bytes before, %d after (+%d)", statusBefore, len(status), grown)
	require.Less(t, grown, 12_000, "the status page lists --status-max-consumers consumers, names cut to 128 bytes")
}

// TestConsumerOwnership replays the lock-out with tokens: a drain token
// fills a table's consumer room; `ingestd mirror` with another token still
// copies the table; the first token can neither move nor delete the
// mirror's consumer (403, the JSON error shape); an admin token deletes
// any (docs/security.md#consumers).
func TestConsumerOwnership(t *testing.T) {
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections) // the mirror's client
	src, _, tok := authDaemon(t, map[string][]string{"ops": {"admin", "write", "drain"}, "mirror": {"drain:m"}, "other": {"drain:*"}}, func(cfg *config) {
		cfg.feed.MaxConsumersPerTable = 4
	})
	dst := startDaemon(t, testConfig(t.TempDir()))
	ops, other := tokenClient(t, src, tok["ops"]), tokenClient(t, src, tok["other"])
	ops.createSyncTable(t, "m")
	ops.mustWrite(t, "m,host=h1 v=1i 1\nm,host=h2 v=2i 2")
	newClient(t, dst).createSyncTable(t, "m")

	drain := func(c *apiClient, consumer string) response {
		return c.get(t, "/drain?table=m&after=0&limit=1&consumer="+url.QueryEscape(consumer))
	}
	for i := range 4 {
		require.Equal(t, http.StatusOK, drain(other, fmt.Sprintf("squat%d", i)).Status)
	}
	e := requireCode(t, drain(other, "squat4"), http.StatusConflict, "too_many_consumers")
	require.Contains(t, e.Message, "--max-consumers-per-table")

	cursorFile := filepath.Join(t.TempDir(), "m.cursor")
	_, stop := startMirror(t, mirror.Config{
		Source: src.URL, SourceToken: tok["mirror"], Table: "m", Target: dst.URL + "/write?db=x",
		CursorFile: cursorFile, Consumer: "mirror-m", Limit: 1, Wait: 200 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		LogLevel: "info", LogFormat: "text",
	})
	pollUntil(t, time.Minute, func() bool { c, ok := readMirrorCursor(t, cursorFile); return ok && c.Next == 2 }, "the mirror copies a table another token filled")
	stop()
	mine, err := ops.api.Position(context.Background(), "m", "mirror-m")
	require.NoError(t, err)
	require.Equal(t, "mirror", mine.Owner)

	e = requireCode(t, drain(other, "mirror-m"), http.StatusForbidden, "forbidden")
	require.Contains(t, e.Message, `belongs to token "mirror"`)
	requireCode(t, other.send(t, http.MethodDelete, "/api/v1/tables/m/consumers/mirror-m", ""), http.StatusForbidden, "forbidden")
	after, err := ops.api.Position(context.Background(), "m", "mirror-m")
	require.NoError(t, err)
	require.Equal(t, mine.Position, after.Position, "another token did not move it")

	cl, err := client.New(src.URL, client.WithToken(tok["other"]))
	require.NoError(t, err)
	_, err = cl.Drain(context.Background(), client.DrainRequest{Table: "m", Limit: 1, Consumer: "mirror-m"})
	require.ErrorIs(t, err, client.ErrForbidden, "the client's typed refusal")

	require.Equal(t, http.StatusNoContent, ops.send(t, http.MethodDelete, "/api/v1/tables/m/consumers/squat0", "").Status, "an admin deletes any")
	require.Equal(t, http.StatusNoContent, other.send(t, http.MethodDelete, "/api/v1/tables/m/consumers/squat1", "").Status, "its owner deletes it")
	m := string(ops.getOK(t, "/metrics").Body)
	require.Contains(t, m, `ingestd_feed_consumer_refusals_total{reason="not_owner"} 3`)
	require.Contains(t, m, `ingestd_feed_consumer_refusals_total{reason="table_budget"} 1`)
}

// TestConsumerIdleExpiryHTTP: a consumer that has not drained for
// --consumer-idle-expiry is removed and counted, and its name is free
// again.
func TestConsumerIdleExpiryHTTP(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.feed.ConsumerIdleExpiry = 200 * time.Millisecond
	cfg.feed.SweepInterval = 20 * time.Millisecond
	d := startDaemon(t, cfg)
	c := newClient(t, d)
	c.createSyncTable(t, "t")
	require.Equal(t, http.StatusOK, c.get(t, "/drain?table=t&limit=1&consumer=idle").Status)
	pollUntil(t, 30*time.Second, func() bool { return len(c.listConsumers(t, "t")) == 0 }, "the idle consumer is removed")
	v, ok := feedMetric(t, c, "ingestd_feed_consumers_expired_total")
	require.True(t, ok)
	require.InDelta(t, 1, v, 0)
	require.Equal(t, http.StatusOK, c.get(t, "/drain?table=t&limit=1&consumer=idle").Status, "the name is free again")
}
