package mirror

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/cmd/ingestd/pgtest"
)

// pgSource is a source of table t whose copy is body (lp, epoch 1,
// watermark 10) and whose feed holds nothing more.
func pgSource(body string) *fakeSource {
	return &fakeSource{
		rows: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Ingestd-Epoch", "1")
			w.Header().Set("Ingestd-Watermark", "10")
			fmt.Fprint(w, body)
		},
		drain: lpDrainPage(10, ""),
	}
}

// runPGMirror mirrors src's table t into a new database db of the
// cluster at pgURL (where the SQL of prepare runs first, when set) until
// the mirror stops by itself (its error) or its cursor is at (1, 10)
// (nil), and returns the error, the registry and a connection to db.
func runPGMirror(t *testing.T, pgURL, db, prepare string, src http.Handler, tune func(*Config)) (error, *prometheus.Registry, *pgx.Conn) {
	t.Helper()
	admin, err := pgx.Connect(context.Background(), pgURL)
	require.NoError(t, err)
	defer func() { _ = admin.Close(context.Background()) }()
	_, err = admin.Exec(context.Background(), "CREATE DATABASE "+db)
	require.NoError(t, err)
	dbURL := strings.Replace(pgURL, "/postgres?", "/"+db+"?", 1)
	conn, err := pgx.Connect(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if prepare != "" {
		_, err = conn.Exec(context.Background(), prepare)
		require.NoError(t, err)
	}

	s := httptest.NewServer(src)
	t.Cleanup(s.Close)
	cfg := DefaultConfig()
	cfg.Source, cfg.Table, cfg.Target = s.URL, "t", dbURL
	cfg.Wait, cfg.MaxBackoff, cfg.Limit = 0, 10*time.Millisecond, 1000
	if tune != nil {
		tune(&cfg)
	}
	reg := prometheus.NewRegistry()
	mr, err := New(cfg, slog.New(slog.DiscardHandler), reg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mr.Run(ctx) }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			require.NoError(t, ctx.Err(), "the mirror must stop by itself or catch up")
			return err, reg, conn
		case <-tick.C:
		}
		// The position is published once the commit returned and the
		// page is counted (the cursor row is visible a moment before).
		if testutil.ToFloat64(mr.m.position) != 10 {
			continue
		}
		var epoch, next int64
		err := conn.QueryRow(ctx, "SELECT epoch, next FROM "+pgCursorTable+" WHERE table_name = 't'").Scan(&epoch, &next)
		if err == nil && epoch == 1 && next == 10 {
			cancel()
			require.NoError(t, <-done)
			return nil, reg, conn
		}
	}
}

// TestPGTarget: a copy lands in a PostgreSQL table typed by the fields'
// kinds, fragments of one point merge, and each budget and conflict stops
// the mirror with nothing applied, counted by reason.
func TestPGTarget(t *testing.T) {
	pgURL := pgtest.Start(t)
	ctx := context.Background()

	t.Run("types and merge", func(t *testing.T) {
		body := `t,host=a f=1.5,i=-3i,u=18446744073709551615u,b=true,s="x \"y\" é" 1
t,host=a i=4i 1
t,dc=eu,host=b f=2 2
t s="no tags" 3
`
		err, reg, conn := runPGMirror(t, pgURL, "types", "", pgSource(body), nil)
		require.NoError(t, err)
		types := map[string]string{}
		rows, err := conn.Query(ctx, "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 't'")
		require.NoError(t, err)
		var name, typ string
		_, err = pgx.ForEachRow(rows, []any{&name, &typ}, func() error { types[name] = typ; return nil })
		require.NoError(t, err)
		require.Equal(t, map[string]string{
			"time": "bigint", "host": "text", "dc": "text", "f": "double precision", "i": "bigint", "u": "numeric", "b": "boolean", "s": "text",
		}, types)
		rows, err = conn.Query(ctx, `SELECT concat_ws('|', "time", host, dc, f, i, u, b, s) FROM t ORDER BY "time"`)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		// concat_ws skips NULLs (fields a point lacks); a tag it lacks is ''.
		require.Equal(t, []string{`1|a||1.5|4|18446744073709551615|t|x "y" é`, "2|b|eu|2", "3|||no tags"}, got)
		require.Equal(t, 7.0, gathered(t, reg, "ingestd_mirror_pg_columns_added_total", ""))
		require.Equal(t, 3.0, gathered(t, reg, "ingestd_mirror_pg_statements_total", ""), "one INSERT per set of fields")
	})

	t.Run("source failing during the copy", func(t *testing.T) {
		// The first copy page fails: the copy's transaction (and its
		// TRUNCATE's lock) is rolled back, and the copy starts over.
		src := pgSource("t,host=a f=1 1\n")
		ok := src.rows
		var calls atomic.Int32
		src.rows = func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 1 {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			ok(w, r)
		}
		err, reg, conn := runPGMirror(t, pgURL, "retry", "", src, nil)
		require.NoError(t, err)
		require.Equal(t, 1.0, gathered(t, reg, "ingestd_mirror_errors_total", ""), "one failure, of the source")
		var n int
		require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n))
		require.Equal(t, 1, n)
	})

	t.Run("kind conflict", func(t *testing.T) {
		err, reg, conn := runPGMirror(t, pgURL, "kinds", `CREATE TABLE t ("time" bigint NOT NULL, f bigint)`, pgSource("t,host=a f=1.5 1\n"), nil)
		require.ErrorIs(t, err, ErrTargetRefused)
		require.Contains(t, err.Error(), `column "f" of the target table is a bigint field column, the source's is a float field (double precision)`)
		require.Equal(t, 1.0, gathered(t, reg, "ingestd_mirror_target_refused_total", refusedKind))
		requireNothingApplied(t, conn)
		var n int
		require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM information_schema.columns WHERE table_name = 't'").Scan(&n))
		require.Equal(t, 2, n, "the table was not altered")
	})

	t.Run("too many columns", func(t *testing.T) {
		err, reg, conn := runPGMirror(t, pgURL, "columns", "", pgSource("t,host=a f=1,g=2 1\n"), func(c *Config) { c.PGMaxColumns = 3 })
		require.ErrorIs(t, err, ErrTargetRefused)
		require.Contains(t, err.Error(), "past --pg-max-columns (3)")
		require.Equal(t, 1.0, gathered(t, reg, "ingestd_mirror_target_refused_total", refusedColumns))
		requireNothingApplied(t, conn)
	})

	t.Run("statements split", func(t *testing.T) {
		var b strings.Builder
		for i := range 20 {
			fmt.Fprintf(&b, "t,host=a s=%q %d\n", strings.Repeat("x", 10<<10), i)
		}
		err, reg, conn := runPGMirror(t, pgURL, "split", "", pgSource(b.String()), func(c *Config) { c.PGMaxStatementBytes = 64 << 10 })
		require.NoError(t, err)
		var n int
		require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n))
		require.Equal(t, 20, n)
		require.Equal(t, 4.0, gathered(t, reg, "ingestd_mirror_pg_statements_total", ""), "6 points of 10 KiB per statement of 64 KiB")
	})

	t.Run("point past a statement", func(t *testing.T) {
		body := fmt.Sprintf("t,host=a s=%q 1\n", strings.Repeat("x", 70<<10))
		err, reg, conn := runPGMirror(t, pgURL, "big", "", pgSource(body), func(c *Config) { c.PGMaxStatementBytes = 64 << 10 })
		require.ErrorIs(t, err, ErrTargetRefused)
		require.Contains(t, err.Error(), "past --pg-max-statement-bytes (65536)")
		require.Equal(t, 1.0, gathered(t, reg, "ingestd_mirror_target_refused_total", refusedStatement))
		requireNothingApplied(t, conn)
	})

	t.Run("name too long", func(t *testing.T) {
		body := fmt.Sprintf("t,host=a %s=1 1\n", strings.Repeat("k", 64))
		err, reg, conn := runPGMirror(t, pgURL, "names", "", pgSource(body), nil)
		require.ErrorIs(t, err, ErrTargetRefused)
		require.Contains(t, err.Error(), "longer than PostgreSQL keeps (63)")
		require.Equal(t, 1.0, gathered(t, reg, "ingestd_mirror_target_refused_total", refusedName))
		requireNothingApplied(t, conn)
	})

	t.Run("NUL in a string", func(t *testing.T) {
		err, reg, conn := runPGMirror(t, pgURL, "nul", "", pgSource("t,host=a s=\"a\x00b\" 1\n"), nil)
		require.ErrorIs(t, err, ErrTargetRefused)
		require.Contains(t, err.Error(), "holds NUL")
		require.Equal(t, 1.0, gathered(t, reg, "ingestd_mirror_target_refused_total", refusedNUL))
		requireNothingApplied(t, conn)
	})
}

// requireNothingApplied fails unless t holds no row and no cursor.
func requireNothingApplied(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	var epoch int64
	err := conn.QueryRow(context.Background(), "SELECT epoch FROM "+pgCursorTable+" WHERE table_name = 't'").Scan(&epoch)
	if !errors.Is(err, pgx.ErrNoRows) {
		require.NoError(t, err)
		require.Zero(t, epoch, "no cursor")
	}
	var n int
	err = conn.QueryRow(context.Background(), "SELECT count(*) FROM t").Scan(&n)
	if err == nil {
		require.Zero(t, n, "no row")
	}
}

// TestPGMirrorPacesResyncs: with a PostgreSQL target, a source that
// refuses every cursor (409 stale_epoch) had the mirror empty the target
// table and copy it again as fast as the requests went. The copies are
// paced as with an ingestd target: a pause that doubles from 100 ms until
// a page brings rows, so that 1.5 s see a handful of copies, not hundreds.
func TestPGMirrorPacesResyncs(t *testing.T) {
	pgURL := pgtest.Start(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgURL)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE DATABASE paced")
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	var copies atomic.Int64
	s := httptest.NewServer(&fakeSource{
		drain: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"code":"stale_epoch","message":"feed: stale epoch, resync in full","error":"stale epoch"}`)
		},
		rows: func(w http.ResponseWriter, _ *http.Request) {
			copies.Add(1)
			w.Header().Set("Ingestd-Epoch", "1")
			w.Header().Set("Ingestd-Watermark", "10")
			fmt.Fprint(w, "t v=1 1\n")
		},
	})
	t.Cleanup(s.Close)
	cfg := DefaultConfig()
	cfg.Source, cfg.Table, cfg.Target = s.URL, "t", strings.Replace(pgURL, "/postgres?", "/paced?", 1)
	cfg.Wait, cfg.MaxBackoff, cfg.Limit = 10*time.Second, time.Minute, 100
	mr, err := New(cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	require.NoError(t, err)
	run, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	require.NoError(t, mr.Run(run))
	require.Less(t, copies.Load(), int64(12), "full copies in 1.5 s")
	require.Greater(t, copies.Load(), int64(2), "the mirror resyncs on")
}
