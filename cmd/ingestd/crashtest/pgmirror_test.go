package crashtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/cmd/ingestd/pgtest"
	"github.com/ingestd/ingestd/httpapi/client"
)

// startMirror launches `ingestd mirror` into the postgres:// target pgURL,
// with its log in logPath; it is killed when the test ends if it runs.
func startMirror(t *testing.T, logPath, source, pgURL string) *proc {
	t.Helper()
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	cmd := exec.Command(ingestdBinary(t), "mirror", "--source", source, "--table", "sensor", "--target", pgURL,
		"--limit", "40", "--wait", "200ms", "--max-backoff", "100ms", "--log-level", "debug")
	cmd.Stdout, cmd.Stderr = f, f
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "INGESTD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	require.NoError(t, cmd.Start())
	p := &proc{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.done)
	}()
	t.Cleanup(func() { p.kill(t) })
	return p
}

// pgWriter writes the source's sensor table until stop is closed: few
// series and times, so that points are written many times, by fragments
// carrying different fields (each merges into its point), and one point
// per batch written once (a page lost would miss it); a tag and
// fields of every kind appear after a while (columns the target adds),
// and the table is truncated once (an epoch change: a resync).
func pgWriter(t *testing.T, c *client.Client, seed uint64, stop <-chan struct{}, truncateAt int) func() int {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	var wg sync.WaitGroup
	var batches int
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i == truncateAt {
				if _, werr = c.Truncate(context.Background(), "sensor"); werr != nil {
					return
				}
			}
			var b strings.Builder
			for range 1 + rng.IntN(30) {
				fmt.Fprintf(&b, "sensor,host=h%d", rng.IntN(5))
				if i > 20 && rng.IntN(2) == 0 {
					fmt.Fprintf(&b, ",region=r%d", rng.IntN(2))
				}
				b.WriteString(" ")
				var fields []string
				if rng.IntN(2) == 0 {
					fields = append(fields, fmt.Sprintf("temp=%g", float64(rng.IntN(1000))/8))
				}
				if rng.IntN(3) == 0 {
					fields = append(fields, fmt.Sprintf("count=%di", rng.Int64N(1<<40)-1<<39))
				}
				if i > 10 {
					switch rng.IntN(4) {
					case 0:
						fields = append(fields, fmt.Sprintf("ok=%t", rng.IntN(2) == 0))
					case 1:
						fields = append(fields, fmt.Sprintf(`note="n%d \"q\" é"`, rng.IntN(100)))
					case 2:
						fields = append(fields, fmt.Sprintf("big=%du", rng.Uint64()))
					}
				}
				if len(fields) == 0 {
					fields = append(fields, fmt.Sprintf("seen=%di", i))
				}
				fmt.Fprintf(&b, "%s %d\n", strings.Join(fields, ","), int64(1_700_000_000_000_000_000)+int64(rng.IntN(40))*1_000_000_007)
			}
			// And one point written once: a page lost would be missed.
			fmt.Fprintf(&b, "sensor,host=once seen=%di %d\n", i, int64(1_600_000_000_000_000_000)+int64(i))
			if werr = c.Write(context.Background(), []byte(b.String()), client.WriteOptions{}); werr != nil {
				return
			}
			batches++
		}
	}()
	return func() int {
		wg.Wait()
		require.NoError(t, werr, "the writer")
		return batches
	}
}

// sourcePoints reads the source's sensor table (the copy by time range,
// one row per point) as canonical rows: point key → "col=value" list.
func sourcePoints(t *testing.T, c *client.Client) map[string][]string {
	t.Helper()
	tbl, err := c.Table(context.Background(), "sensor")
	require.NoError(t, err)
	kinds := map[string]string{}
	for _, col := range tbl.Columns {
		kinds[col.Name] = col.Type
	}
	out := map[string][]string{}
	req := client.RowsRequest{Table: "sensor", Limit: 10000, TimeFormat: "ns"}
	for {
		pg, err := c.Rows(context.Background(), req)
		require.NoError(t, err)
		for _, row := range pg.Rows {
			var key, cells []string
			var tm string
			for i, name := range pg.Columns {
				cell := row[i]
				if string(cell) == "null" {
					continue
				}
				switch kinds[name] {
				case "time":
					tm = string(cell)
				case "tag":
					var s string
					require.NoError(t, json.Unmarshal(cell, &s))
					key = append(key, name+"="+s)
				default:
					cells = append(cells, name+"="+canonical(t, kinds[name], cell))
				}
			}
			slices.Sort(key)
			slices.Sort(cells)
			out[strings.Join(key, ",")+" "+tm] = cells
		}
		if req.Cursor = pg.Cursor; req.Cursor == "" {
			return out
		}
	}
}

// canonical renders a JSON cell of a field of kind as targetPoints
// renders PostgreSQL's value.
func canonical(t *testing.T, kind string, cell json.RawMessage) string {
	t.Helper()
	switch kind {
	case "float":
		f, err := strconv.ParseFloat(string(cell), 64)
		require.NoError(t, err)
		return "f" + strconv.FormatFloat(f, 'g', -1, 64)
	case "string":
		var s string
		require.NoError(t, json.Unmarshal(cell, &s))
		return "s" + strconv.Quote(s)
	case "boolean":
		return "b" + string(cell)
	case "integer":
		return "i" + string(cell)
	}
	return "u" + string(cell)
}

// targetPoints reads the target's sensor table as sourcePoints does.
func targetPoints(t *testing.T, conn *pgx.Conn) map[string][]string {
	t.Helper()
	ctx := context.Background()
	tags := map[string]bool{}
	rows, err := conn.Query(ctx, `SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey::int2[])
		WHERE i.indrelid = 'sensor'::regclass AND i.indisunique`)
	require.NoError(t, err)
	var name string
	_, err = pgx.ForEachRow(rows, []any{&name}, func() error { tags[name] = name != "time"; return nil })
	require.NoError(t, err)
	rows, err = conn.Query(ctx, "SELECT * FROM sensor")
	require.NoError(t, err)
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		vals, err := rows.Values()
		require.NoError(t, err)
		var key, cells []string
		var tm string
		for i, fd := range rows.FieldDescriptions() {
			v := vals[i]
			if v == nil {
				continue
			}
			switch {
			case fd.Name == "time":
				tm = strconv.FormatInt(v.(int64), 10)
			case tags[fd.Name]:
				if v.(string) != "" {
					key = append(key, fd.Name+"="+v.(string))
				}
			default:
				var c string
				switch x := v.(type) {
				case float64:
					c = "f" + strconv.FormatFloat(x, 'g', -1, 64)
				case string:
					c = "s" + strconv.Quote(x)
				case bool:
					c = "b" + strconv.FormatBool(x)
				case int64:
					c = "i" + strconv.FormatInt(x, 10)
				case pgtype.Numeric:
					n := new(big.Int).Set(x.Int)
					if x.Exp > 0 {
						n.Mul(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(x.Exp)), nil))
					}
					c = "u" + n.String()
				default:
					t.Fatalf("column %s: unexpected %T", fd.Name, v)
				}
				cells = append(cells, fd.Name+"="+c)
			}
		}
		slices.Sort(key)
		slices.Sort(cells)
		out[strings.Join(key, ",")+" "+tm] = cells
	}
	require.NoError(t, rows.Err())
	return out
}

// pgCursor reads the target's cursor of sensor ((0, 0) when none).
func pgCursor(t *testing.T, conn *pgx.Conn) (epoch, next int64) {
	t.Helper()
	err := conn.QueryRow(context.Background(), "SELECT epoch, next FROM ingestd_mirror_cursor WHERE table_name = 'sensor'").Scan(&epoch, &next)
	var pe *pgconn.PgError
	if errors.Is(err, pgx.ErrNoRows) || (errors.As(err, &pe) && pe.Code == "42P01") { // no cursor, or no cursor table yet
		return 0, 0
	}
	require.NoError(t, err)
	return epoch, next
}

// watchCursor reads the target's cursor every few milliseconds until the
// returned function is called, which fails the test if the cursor ever
// moved backwards (a lower epoch, or a lower next in one epoch) and
// returns how many moves it saw.
func watchCursor(t *testing.T, pgURL string) func() int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), pgURL)
	require.NoError(t, err)
	stop, done := make(chan struct{}), make(chan struct{})
	var back []string
	moves := 0
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		var pe, pn int64
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			var e, n int64
			err := conn.QueryRow(context.Background(), "SELECT epoch, next FROM ingestd_mirror_cursor WHERE table_name = 'sensor'").Scan(&e, &n)
			if err != nil {
				continue // no cursor table or row yet
			}
			if (e < pe || (e == pe && n < pn)) && len(back) < 10 {
				back = append(back, fmt.Sprintf("(%d, %d) after (%d, %d)", e, n, pe, pn))
			}
			if e != pe || n != pn {
				moves++
			}
			pe, pn = e, n
		}
	}()
	return func() int {
		close(stop)
		<-done
		_ = conn.Close(context.Background())
		require.Empty(t, back, "the cursor moved backwards")
		return moves
	}
}

// requireMirrored waits until the target's cursor is at the source's
// epoch and watermark, then compares the two tables point by point.
func requireMirrored(t *testing.T, c *client.Client, conn *pgx.Conn, mirrors ...*proc) int {
	t.Helper()
	st, err := c.Sync(context.Background(), "sensor")
	require.NoError(t, err)
	poll(t, 60*time.Second, func() bool {
		for _, m := range mirrors {
			require.False(t, m.exited(), "the mirror exited:\n%s", m.log(t))
		}
		e, n := pgCursor(t, conn)
		return uint64(e) == st.Epoch && uint64(n) == st.Watermark
	}, "the target's cursor to reach epoch %d, watermark %d", st.Epoch, st.Watermark)
	want, got := sourcePoints(t, c), targetPoints(t, conn)
	require.NotEmpty(t, want)
	for k, w := range want {
		require.Equal(t, w, got[k], "point %s", k)
	}
	require.Len(t, got, len(want), "points only in the target")
	return len(want)
}

// TestPGMirrorCrash SIGKILLs `ingestd mirror --target postgres://…` at
// random moments while the source is written (fragments merging into
// points, new columns, a TRUNCATE), restarts it each time, and at the end
// requires the PostgreSQL table to equal the source point for point: the
// cursor commits with the rows, so no page is lost or applied twice.
func TestPGMirrorCrash(t *testing.T) {
	pgURL := pgtest.Start(t)
	dir := t.TempDir()
	src := startIngestd(t, filepath.Join(dir, "source.log"), daemonArgs(filepath.Join(dir, "data"))...)
	hc := newHTTPClient(t, 4)
	createSyncTable(t, hc, src.URL, "sensor")
	c := apiClient(t, hc, src.URL)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	stop := make(chan struct{})
	wait := pgWriter(t, c, seed, stop, 60)
	watched := watchCursor(t, pgURL)
	conn, err := pgx.Connect(context.Background(), pgURL)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()

	const cycles = 15
	logPath := filepath.Join(dir, "mirror.log")
	for range cycles {
		m := startMirror(t, logPath, src.URL, pgURL)
		time.Sleep(time.Duration(50+rng.IntN(600)) * time.Millisecond) // the random moment of the kill
		require.False(t, m.exited(), "the mirror exited before the kill:\n%s", m.log(t))
		m.kill(t)
	}
	close(stop)
	batches := wait()
	m := startMirror(t, logPath, src.URL, pgURL)
	points := requireMirrored(t, c, conn, m)
	require.Equal(t, 0, m.terminate(t, 30*time.Second), m.log(t))
	requireCleanLog(t, m.log(t))
	e, n := pgCursor(t, conn)
	t.Logf("%d kills; %d write batches; %d points equal at epoch %d, x_seq %d; the cursor moved %d times, never back", cycles, batches, points, e, n, watched())
}

// TestPGMirrorConcurrent runs two mirrors of one source into one
// PostgreSQL target at once, each killed and restarted now and then,
// while the source is written with points overwritten again and again:
// the target ends equal to the source, as with one mirror (the cursor
// row's lock lets one page commit at a time, on top of the cursor it was
// drained from).
func TestPGMirrorConcurrent(t *testing.T) {
	pgURL := pgtest.Start(t)
	dir := t.TempDir()
	src := startIngestd(t, filepath.Join(dir, "source.log"), daemonArgs(filepath.Join(dir, "data"))...)
	hc := newHTTPClient(t, 4)
	createSyncTable(t, hc, src.URL, "sensor")
	c := apiClient(t, hc, src.URL)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	stop := make(chan struct{})
	wait := pgWriter(t, c, seed, stop, 80)
	watched := watchCursor(t, pgURL)
	conn, err := pgx.Connect(context.Background(), pgURL)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()

	a := startMirror(t, filepath.Join(dir, "a.log"), src.URL, pgURL)
	b := startMirror(t, filepath.Join(dir, "b.log"), src.URL, pgURL)
	for range 6 {
		time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond) // the random moment of the kill
		if rng.IntN(2) == 0 {
			a.kill(t)
			a = startMirror(t, filepath.Join(dir, "a.log"), src.URL, pgURL)
		} else {
			b.kill(t)
			b = startMirror(t, filepath.Join(dir, "b.log"), src.URL, pgURL)
		}
	}
	close(stop)
	wait()
	points := requireMirrored(t, c, conn, a, b)
	for _, m := range []*proc{a, b} {
		require.Equal(t, 0, m.terminate(t, 30*time.Second), m.log(t))
		requireCleanLog(t, m.log(t))
	}
	stale := strings.Count(a.log(t)+b.log(t), "another mirror moved the cursor")
	t.Logf("%d points equal; the cursor moved %d times, never back; %d log lines (at most one a second) of a mirror finding the cursor moved by the other", points, watched(), stale)
}
