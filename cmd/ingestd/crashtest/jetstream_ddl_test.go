package crashtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/httpapi/client"
	"github.com/ingestd/ingestd/store/jsstore/natstest"
)

// ddlFollow is how long a node is given to follow a table change made
// through the other node (a KV update on one embedded server: well under
// a second when it works).
const ddlFollow = 15 * time.Second

// ddlPage is one drained page as a client sees it: the envelope, the
// columns and every cell's JSON text.
type ddlPage struct {
	Epoch, After, Next, Seq, Watermark uint64
	More                               bool
	Columns                            []string
	Rows                               [][]string
}

// ddlNodes is two ingestd nodes on one JetStream server, and the test's
// line counter (every line its own series and time).
type ddlNodes struct {
	t    *testing.T
	hc   *http.Client
	a, b *jsNode
	mu   sync.Mutex
	id   int
}

// line appends the next line to b: table, tags node=NODE and line=lID
// (every line its own series), field FIELD=ID at time jsBaseTS + ID µs;
// a field other than v comes with a tag of its own too (tFIELD=NODE). It
// returns the line's id.
func (d *ddlNodes) line(b []byte, table, node, field string) ([]byte, int) {
	d.mu.Lock()
	d.id++
	id := d.id
	d.mu.Unlock()
	tags := "node=" + node
	if field != "v" {
		tags += ",t" + field + "=" + node // a tag column of its own too
	}
	return fmt.Appendf(b, "%s,%s,line=l%d %s=%di %d\n", table, tags, id, field, id, jsBaseTS+int64(id)*1000), id
}

// write sends one request of lines lines of field v to table through
// node n (called name in the lines' node tag and in messages) and
// requires 204; it returns the lines' ids.
func (d *ddlNodes) write(n *jsNode, name, table string, lines int) []int {
	var body []byte
	var ids []int
	for range lines {
		var id int
		body, id = d.line(body, table, name, "v")
		ids = append(ids, id)
	}
	resp := mustDo(d.t, d.hc, http.MethodPost, n.url()+"/write", body)
	require.Equal(d.t, http.StatusNoContent, resp.Status, "write to %s through node %s: %s", table, name, resp.Body)
	return ids
}

// alive requires that neither process exited.
func (d *ddlNodes) alive(step string) {
	for name, n := range map[string]*jsNode{"A": d.a, "B": d.b} {
		require.False(d.t, n.proc().exited(), "%s: node %s exited:\n%s", step, name, n.proc().log(d.t))
	}
}

// drain reads table's whole feed at epoch from 0 through base in pages of
// 4 rows (no columns asked: the full schema).
func (d *ddlNodes) drain(base, table string, epoch uint64) ([]ddlPage, error) {
	api, err := client.New(base, client.WithHTTPClient(d.hc))
	if err != nil {
		return nil, err
	}
	var out []ddlPage
	var pg client.Page
	for after := uint64(0); ; {
		req := client.DrainRequest{Table: table, Epoch: epoch, After: after, Limit: 4, TimeFormat: "ns"}
		if err := api.DrainInto(context.Background(), req, &pg); err != nil {
			return nil, err
		}
		p := ddlPage{Epoch: pg.Epoch, After: pg.After, Next: pg.Next, Seq: pg.Seq, Watermark: pg.Watermark, More: pg.More,
			Columns: slices.Clone(pg.Columns)}
		for _, r := range pg.Rows {
			p.Rows = append(p.Rows, client.CellTexts(r))
		}
		out = append(out, p)
		if !pg.More {
			return out, nil
		}
		after = pg.Next
	}
}

// equalPages polls until a drain of table at epoch from 0 returns the same
// pages through both nodes, holding every line of want (by its value in
// column col), and returns them.
func (d *ddlNodes) equalPages(table string, epoch uint64, col string, want []int, what string) []ddlPage {
	var pa, pb []ddlPage
	var errA, errB error
	poll(d.t, ddlFollow, func() bool {
		pa, errA = d.drain(d.a.url(), table, epoch)
		pb, errB = d.drain(d.b.url(), table, epoch)
		return errA == nil && errB == nil && len(values(d.t, pa, col)) == len(want) && slices.EqualFunc(pa, pb, pageEqual)
	}, "%s: equal pages of %s epoch %d through A and B with the %d lines written (%s)", what, table, epoch, len(want),
		lazy(func() string {
			return fmt.Sprintf("%s; A: %v, B: %v; pages A %+v, B %+v", d.exits(), errA, errB, pa, pb)
		}))
	require.ElementsMatch(d.t, want, values(d.t, pa, col), "%s: the lines of %s", what, table)
	return pa
}

func pageEqual(a, b ddlPage) bool {
	return a.Epoch == b.Epoch && a.After == b.After && a.Next == b.Next && a.Seq == b.Seq && a.Watermark == b.Watermark &&
		a.More == b.More && slices.Equal(a.Columns, b.Columns) && slices.EqualFunc(a.Rows, b.Rows, slices.Equal)
}

// values returns, in x_seq order, the cells of column col of every row
// that has it (not null), as integers.
func values(t testing.TB, pages []ddlPage, col string) []int {
	var out []int
	for _, p := range pages {
		i := slices.Index(p.Columns, col)
		if i < 0 {
			continue
		}
		for _, r := range p.Rows {
			if r[i] == "null" {
				continue
			}
			v, err := strconv.Atoi(r[i])
			require.NoError(t, err, "column %s of row %v", col, r)
			out = append(out, v)
		}
	}
	return out
}

// seqs returns the x_seq of every row, in order.
func seqs(t testing.TB, pages []ddlPage) []int { return values(t, pages, "x_seq") }

// lazy is a poll message's argument rendered when the poll fails (poll's
// arguments are evaluated when it is called, before the last try).
type lazy func() string

func (f lazy) String() string { return f() }

// exits says whether the nodes exited, for a failed poll's message.
func (d *ddlNodes) exits() string {
	return fmt.Sprintf("A exited: %t, B exited: %t", d.a.proc().exited(), d.b.proc().exited())
}

// refused requires that err is a refusal of status with code.
func refused(t testing.TB, err error, status int, code string, what string) {
	t.Helper()
	var e *client.Error
	require.True(t, errors.As(err, &e), "%s: want HTTP %d %s, got %v", what, status, code, err)
	require.Equal(t, status, e.StatusCode, "%s: %v", what, err)
	require.Equal(t, code, e.Code, "%s: %v", what, err)
}

// listed reports whether the node at base lists table in GET
// /api/v1/tables, and its sync state there.
func (d *ddlNodes) listed(base, table string) (client.SyncStatus, bool) {
	ts, err := apiClient(d.t, d.hc, base).Tables(context.Background())
	require.NoError(d.t, err, "GET /api/v1/tables through %s", base)
	for _, tb := range ts {
		if tb.Name == table {
			return tb.Sync, true
		}
	}
	return client.SyncStatus{}, false
}

// TestJetStreamTwoNodesTableChanges has two ingestd nodes on one
// JetStream server and makes table changes through one of them (A): the
// other (B) follows each without a restart and without having written
// the table. A table created through A is listed by B and drained through
// B with A's rows; after TRUNCATE through A, B reports the new epoch,
// refuses the old one (409 stale_epoch) and accepts writes numbered above
// everything before; after DROP through A, B answers 404, and a write
// through B re-creates the table (born WITH SYNC by --sync-tables), which
// A then serves at a higher epoch and above every x_seq before. Two nodes
// adding different columns to a table at once end with one schema holding
// both. Neither node exits, both drain the same pages after each step,
// and each counts the changes it followed
// (ingestd_jetstream_followed_changes_total).
func TestJetStreamTwoNodesTableChanges(t *testing.T) {
	const table, cols = "ddlfollow", "ddlcols"
	cluster := natstest.Start(t, 1)
	cluster.WaitJetStream()
	d := &ddlNodes{t: t, hc: newHTTPClient(t, 8)}
	var nodes []*jsNode
	for i := range 2 {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("node%d", i))
		require.NoError(t, os.MkdirAll(dir, 0o750))
		n := &jsNode{dir: dir, args: daemonArgs(filepath.Join(dir, "data"), "--store", "jetstream", "--nats-url", cluster.URLs(),
			"--jetstream-replicas", "1", "--sync-tables", "ddl*")}
		n.start(t)
		nodes = append(nodes, n)
	}
	d.a, d.b = nodes[0], nodes[1]
	apiA, apiB := apiClient(t, d.hc, d.a.url()), apiClient(t, d.hc, d.b.url())
	ctx := context.Background()

	// 1. A table created and written through A only: B lists it and
	// drains A's rows.
	createSyncTable(t, d.hc, d.a.url(), table)
	var ids []int
	for range 3 {
		ids = append(ids, d.write(d.a, "a", table, 3)...)
	}
	stA, err := apiA.Sync(ctx, table)
	require.NoError(t, err)
	require.True(t, stA.Enabled)
	poll(t, ddlFollow, func() bool { _, ok := d.listed(d.b.url(), table); return ok },
		"1: node B lists %s, created and written through A only (%s)", table, lazy(d.exits))
	stB, _ := d.listed(d.b.url(), table)
	require.True(t, stB.Enabled, "1: B shows %s WITH SYNC", table)
	require.Equal(t, stA.Epoch, stB.Epoch, "1: B shows A's epoch")
	pages := d.equalPages(table, stA.Epoch, "v", ids, "1: created through A")
	require.Len(t, seqs(t, pages), len(ids))
	d.alive("1")

	// 2. Writes through both nodes, then TRUNCATE through A.
	for range 3 {
		ids = append(ids, d.write(d.a, "a", table, 2)...)
		ids = append(ids, d.write(d.b, "b", table, 2)...)
	}
	pages = d.equalPages(table, stA.Epoch, "v", ids, "2: written through both")
	before := slices.Max(seqs(t, pages))
	old := stA.Epoch
	trunc, err := apiA.Truncate(ctx, table)
	require.NoError(t, err, "2: TRUNCATE %s through A", table)
	require.Equal(t, old+1, trunc.Epoch, "2: TRUNCATE bumps the epoch")
	require.GreaterOrEqual(t, trunc.Seq, uint64(before), "2: TRUNCATE keeps seq")
	var stBErr error
	poll(t, ddlFollow, func() bool { stB, stBErr = apiB.Sync(ctx, table); return stBErr == nil && stB.Epoch == old+1 },
		"2: node B reports epoch %d after TRUNCATE through A (%s)", old+1,
		lazy(func() string { return fmt.Sprintf("%s; B: %+v, %v", d.exits(), stB, stBErr) }))
	_, err = apiB.Drain(ctx, client.DrainRequest{Table: table, Epoch: old, After: 0, Limit: 10})
	refused(t, err, http.StatusConflict, "stale_epoch", "2: a drain through B at the epoch before TRUNCATE")
	ids = d.write(d.b, "b", table, 3)
	ids = append(ids, d.write(d.a, "a", table, 2)...)
	ids = append(ids, d.write(d.b, "b", table, 2)...)
	pages = d.equalPages(table, old+1, "v", ids, "2: written after TRUNCATE")
	for _, s := range seqs(t, pages) {
		require.Greater(t, s, int(trunc.Seq), "2: x_seq after TRUNCATE above every x_seq before it (%d)", trunc.Seq)
	}
	d.alive("2")

	// 2b. SET SYNC OFF, then ON, through B: A takes both (OFF refuses its
	// drains; ON bumps the epoch there too).
	_, err = apiB.SetSync(ctx, table, false)
	require.NoError(t, err, "2b: SET SYNC OFF through B")
	poll(t, ddlFollow, func() bool {
		_, err = apiA.Drain(ctx, client.DrainRequest{Table: table, Epoch: old + 1, After: 0, Limit: 10})
		return errors.Is(err, client.ErrSyncOff)
	}, "2b: a drain through A is refused sync_off after SET SYNC OFF through B (%s)",
		lazy(func() string { return fmt.Sprintf("%s; last: %v", d.exits(), err) }))
	on, err := apiB.SetSync(ctx, table, true)
	require.NoError(t, err, "2b: SET SYNC ON through B")
	require.Equal(t, old+2, on.Epoch, "2b: SET SYNC ON bumps the epoch")
	poll(t, ddlFollow, func() bool { stA, err = apiA.Sync(ctx, table); return err == nil && stA.Enabled && stA.Epoch == old+2 },
		"2b: node A reports sync on at epoch %d (%s)", old+2,
		lazy(func() string { return fmt.Sprintf("%s; A: %+v, %v", d.exits(), stA, err) }))
	d.alive("2b")

	// 3. DROP through A; a write through B re-creates the table.
	beforeDrop, epochDrop := slices.Max(seqs(t, pages)), old+2
	require.NoError(t, apiA.DropTable(ctx, table), "3: DROP %s through A", table)
	_, err = apiA.Drain(ctx, client.DrainRequest{Table: table, After: 0, Limit: 10})
	refused(t, err, http.StatusNotFound, "table_not_found", "3: a drain through A after DROP")
	poll(t, ddlFollow, func() bool {
		_, err = apiB.Drain(ctx, client.DrainRequest{Table: table, After: 0, Limit: 10})
		return errors.Is(err, client.ErrTableNotFound)
	}, "3: a drain through B answers 404 after DROP through A (%s)",
		lazy(func() string { return fmt.Sprintf("%s; last: %v", d.exits(), err) }))
	_, ok := d.listed(d.b.url(), table)
	require.False(t, ok, "3: B no longer lists %s", table)
	ids = d.write(d.b, "b", table, 3)
	var stAErr error
	poll(t, ddlFollow, func() bool {
		stA, stAErr = apiA.Sync(ctx, table)
		return stAErr == nil && stA.Epoch > epochDrop
	}, "3: node A shows %s again, re-created through B, at an epoch above %d (%s)", table, epochDrop,
		lazy(func() string { return fmt.Sprintf("%s; A: %+v, %v", d.exits(), stA, stAErr) }))
	require.True(t, stA.Enabled, "3: re-created WITH SYNC (--sync-tables)")
	ids = append(ids, d.write(d.a, "a", table, 2)...)
	pages = d.equalPages(table, stA.Epoch, "v", ids, "3: re-created through B")
	for _, s := range seqs(t, pages) {
		require.Greater(t, s, beforeDrop, "3: x_seq after DROP + re-create above every x_seq before DROP")
	}
	d.alive("3")

	// 4. Two nodes add different columns (a field and a tag each) to a
	// new table at once.
	createSyncTable(t, d.hc, d.a.url(), cols)
	poll(t, ddlFollow, func() bool { _, ok := d.listed(d.b.url(), cols); return ok }, "4: node B lists %s (%s)", cols, lazy(d.exits))
	st, err := apiA.Sync(ctx, cols)
	require.NoError(t, err)
	const writers, requests, lines = 2, 4, 3 // per node
	var wg sync.WaitGroup
	errs := make(chan error, 2*writers)
	var idsA, idsB []int
	var idsMu sync.Mutex
	for w := range 2 * writers {
		n, name, field, mine := d.a, "a", "a", &idsA
		if w%2 == 1 {
			n, name, field, mine = d.b, "b", "b", &idsB
		}
		wg.Go(func() {
			for range requests {
				var body []byte
				var got []int
				for range lines {
					var id int
					body, id = d.line(body, cols, name, field)
					got = append(got, id)
				}
				if err := writeAcked(ctx, d.hc, n.url(), body, "write through node "+name); err != nil {
					errs <- err
					return
				}
				idsMu.Lock()
				*mine = append(*mine, got...)
				idsMu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err, "4: concurrent writes")
	}
	d.equalPages(cols, st.Epoch, "a", idsA, "4: field a through A")
	pages = d.equalPages(cols, st.Epoch, "b", idsB, "4: field b through B")
	require.Len(t, seqs(t, pages), len(idsA)+len(idsB), "4: every line one row")
	for _, c := range []string{"node", "line", "ta", "tb", "a", "b", "x_seq"} {
		require.Contains(t, pages[0].Columns, c, "4: the drain's full schema")
	}
	var ta, tb client.Table
	poll(t, ddlFollow, func() bool {
		ta, err = apiA.Table(ctx, cols)
		require.NoError(t, err)
		tb, err = apiB.Table(ctx, cols)
		require.NoError(t, err)
		return slices.Equal(ta.Columns, tb.Columns)
	}, "4: SHOW COLUMNS equal through A and B (%s)",
		lazy(func() string { return fmt.Sprintf("A %v, B %v", ta.Columns, tb.Columns) }))
	names := make([]string, 0, len(ta.Columns))
	for _, c := range ta.Columns {
		names = append(names, c.Name)
	}
	for _, c := range []string{"time", "node", "line", "ta", "tb", "a", "b"} {
		require.Contains(t, names, c, "4: SHOW COLUMNS")
	}
	d.alive("4")

	// 5. Both nodes healthy at the end; each counted the changes it
	// followed (B: both CREATEs, the TRUNCATE and the DROP through A; A:
	// the re-create through B), and no write was acknowledged to an ended
	// instance (each went to a node that had taken the change).
	follows := map[string]map[string]float64{
		"A": {"create": 1, "truncate": 0, "drop": 0},
		"B": {"create": 2, "truncate": 1, "drop": 1},
	}
	for name, n := range map[string]*jsNode{"A": d.a, "B": d.b} {
		resp := mustDo(t, d.hc, http.MethodGet, n.url()+"/health", nil)
		require.Equal(t, http.StatusOK, resp.Status, "5: /health of node %s: %s", name, resp.Body)
		requireCleanLog(t, n.proc().log(t))
		for kind, want := range follows[name] {
			got, _ := metric(t, d.hc, n.url(), `ingestd_jetstream_followed_changes_total{kind="`+kind+`"}`) // absent: 0
			require.Equal(t, want, got, "5: node %s followed %s", name, kind)
		}
		voided, ok := metric(t, d.hc, n.url(), "ingestd_jetstream_voided_lines_total")
		require.True(t, ok, "5: node %s exposes ingestd_jetstream_voided_lines_total", name)
		require.Zero(t, voided, "5: node %s acknowledged lines to an ended instance", name)
	}
	d.alive("5")
}
