package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/cmd/ingestd/mirror"
	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/httpapi/client"
	"github.com/ingestd/ingestd/ilp"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// corpusPoint is one point of the hostile corpus: tag tagKey (default
// "k") = tag when tag is set, the string field s = str, the integer
// field id (its number in the corpus, which tells the stored points
// apart), at time.
type corpusPoint struct {
	name, tagKey, tag, str string
	time                   int64
}

// corpusMaxString is the daemon's --ilp-max-string-bytes in the corpus
// test (small, so that a string past it is not a line past
// --max-line-bytes).
const corpusMaxString = 64

var hostileCorpus = []corpusPoint{
	{name: "plain", tag: "a", str: "x"},
	{name: "time at the latest", tag: "a", str: "x", time: feed.MaxTime},
	{name: "time at int64's max", tag: "a", str: "x", time: 1<<63 - 1},
	{name: "time at the earliest", tag: "b", str: "x", time: feed.MinTime},
	{name: "time at int64's min", tag: "b", str: "x", time: -1 << 63},
	{name: "NUL in a tag value", tag: "a\x00b", str: "x"},
	{name: "0x01 in a tag value", tag: "a\x01b", str: "x"},
	{name: "DEL in a tag value", tag: "a\x7fb", str: "x"},
	{name: "tab in a tag value", tag: "a\tb", str: "x"},
	{name: "newline in a tag value", tag: "a\nb", str: "x"},
	{name: "C1 in a tag value", tag: "a\u0085b", str: "x"},
	{name: "tag value ending with a backslash", tag: `a\`, str: "x"},
	{name: "backslashes inside a tag value", tag: `C:\dir\\x`, str: "x"},
	{name: "separators in a tag value", tag: "a=b,c d", str: "x"},
	{name: "invalid UTF-8 in a tag value", tag: "a\xffb", str: "x"},
	{name: "tag value at the limit", tag: strings.Repeat("t", corpusMaxString), str: "x"},
	{name: "tag value past the limit", tag: strings.Repeat("t", corpusMaxString+1), str: "x"},
	{name: "NUL and newline in a string", tag: "a", str: "x\x00y\nz"},
	{name: "quotes and backslashes in a string", tag: "a", str: `q"\x\`},
	{name: "string at the limit", tag: "a", str: strings.Repeat("s", corpusMaxString)},
	{name: "string past the limit", tag: "a", str: strings.Repeat("s", corpusMaxString+1)},
	{name: "invalid UTF-8 in a string", tag: "a", str: "x\xc3"},
	{name: "tag key ending with a backslash", tagKey: `k\`, tag: "a", str: "x"},
	{name: "reserved tag key", tagKey: "x_k", tag: "a", str: "x"},
	{name: "tag key time", tagKey: "time", tag: "a", str: "x"},
	{name: "tag key with '=' and ','", tagKey: "k=1,2", tag: "a", str: "x"},
	{name: "C1 in a tag key", tagKey: "k\u0085", tag: "a", str: "x"},
	{name: "DEL in a tag key", tagKey: "k\x7f", tag: "a", str: "x"},
}

// key is p's tag key.
func (p corpusPoint) key() string {
	if p.tagKey == "" {
		return "k"
	}
	return p.tagKey
}

// ts is p's time, or one of its own (1000 + id) when p does not test
// times.
func (p corpusPoint) ts(id int) int64 {
	if p.time == 0 {
		return int64(1000 + id)
	}
	return p.time
}

// line renders p as the line of id in table, escaped as ILP escapes
// what it can (a byte ILP cannot carry is written as it is, as a source
// would).
func (p corpusPoint) line(table string, id int) string {
	key := strings.NewReplacer(",", `\,`, "=", `\=`, " ", `\ `)
	str := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	var b strings.Builder
	b.WriteString(table)
	if p.tag != "" {
		fmt.Fprintf(&b, ",%s=%s", key.Replace(p.key()), key.Replace(p.tag))
	}
	fmt.Fprintf(&b, " s=\"%s\",id=%di %d\n", str.Replace(p.str), id, p.ts(id))
	return b.String()
}

// point is p as the sequencer would get it.
func (p corpusPoint) point(table string, id int) feed.Point {
	pt := feed.Point{Table: table, Time: p.ts(id), Fields: []feed.PointField{
		{Key: "s", Value: feed.Value{Kind: feed.KindString, Str: p.str}},
		{Key: "id", Value: feed.Value{Kind: feed.KindInt, Num: uint64(id)}},
	}}
	if p.tag != "" {
		pt.Tags = []feed.Tag{{Key: p.key(), Value: p.tag}}
	}
	return pt
}

// sqlString quotes s as a SQL 'string', sqlIdent as an "identifier".
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
func sqlIdent(s string) string  { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// TestOneValidation feeds the same hostile corpus to every write path of
// a real daemon: /write, ILP over TCP, SQL INSERT, and `ingestd mirror`
// from a source whose drain page holds the point. Each path stores
// exactly the points feed.CheckPoint accepts, and the mirror refuses the
// others itself (ErrProtocol) rather than leave them to the target.
func TestOneValidation(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.ilp.Limits.MaxStringBytes = corpusMaxString
	d := startDaemon(t, cfg)
	ctx := context.Background()
	c, err := client.New(d.URL)
	require.NoError(t, err)
	lim := feed.PointLimits{MaxNameBytes: cfg.feed.MaxNameBytes, MaxStringBytes: corpusMaxString}
	for _, tb := range []string{"c_http", "c_tcp", "c_mirror"} {
		_, _, err := c.CreateTable(ctx, tb, client.TableOptions{Sync: new(true)})
		require.NoError(t, err)
	}

	// /write: one request per point, its answer says.
	viaHTTP := map[int]bool{}
	for id, p := range hostileCorpus {
		err := c.Write(ctx, []byte(p.line("c_http", id)), client.WriteOptions{})
		var e *client.Error
		require.True(t, err == nil || errors.As(err, &e), "%s: %v", p.name, err)
		viaHTTP[id] = err == nil
	}

	// TCP: every line on one connection, then a last one; the stored ids
	// say once it is there.
	conn, err := net.Dial("tcp", d.TCPAddr)
	require.NoError(t, err)
	w := bufio.NewWriter(conn)
	for id, p := range hostileCorpus {
		_, _ = w.WriteString(p.line("c_tcp", id))
	}
	_, _ = fmt.Fprintf(w, "c_tcp s=\"end\",id=%di 1\n", len(hostileCorpus))
	require.NoError(t, w.Flush())
	require.NoError(t, conn.Close())
	var tcp map[int]bool
	require.Eventually(t, func() bool {
		tcp, err = storedIDs(c, "c_tcp")
		return err == nil && tcp[len(hostileCorpus)]
	}, testdeadline.Scale(30*time.Second), 20*time.Millisecond, "the last TCP line is not stored")

	// SQL INSERT: a table of the point's tag key (CREATE TABLE, then
	// INSERT); both answer.
	sql := map[int]bool{}
	for id, p := range hostileCorpus {
		tb := fmt.Sprintf("c_sql_%d", id)
		code, body := runSQL(t, d, sqlCase{stmt: fmt.Sprintf("CREATE TABLE %s (%s VARCHAR TAG, s VARCHAR, id BIGINT)", tb, sqlIdent(p.key()))})
		if code != 200 {
			sql[id] = false
			t.Logf("%s: CREATE TABLE: %d %s", p.name, code, body)
			continue
		}
		cols, vals := `"time", s, id`, fmt.Sprintf("%d, %s, %d", p.ts(id), sqlString(p.str), id)
		if p.tag != "" {
			cols, vals = cols+", "+sqlIdent(p.key()), vals+", "+sqlString(p.tag)
		}
		code, body = runSQL(t, d, sqlCase{stmt: fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", tb, cols, vals)})
		sql[id] = code == 200
		require.True(t, code == 200 || code == 400, "%s: %d %s", p.name, code, body)
	}

	// The mirror: a source whose feed holds the point's line, the daemon
	// its target.
	mirrored := map[int]bool{}
	for id, p := range hostileCorpus {
		mirrored[id] = mirrorOne(t, d, p.line("c_mirror", id), corpusMaxString)
	}
	mirrorStored, err := storedIDs(c, "c_mirror")
	require.NoError(t, err)
	httpStored, err := storedIDs(c, "c_http")
	require.NoError(t, err)

	for id, p := range hostileCorpus {
		pt := p.point("c_x", id)
		want := feed.CheckPoint(&pt, lim) == nil
		require.Equal(t, want, viaHTTP[id], "/write: %s (%v)", p.name, feed.CheckPoint(&pt, lim))
		require.Equal(t, want, httpStored[id], "/write stored: %s", p.name)
		require.Equal(t, want, tcp[id], "TCP: %s", p.name)
		require.Equal(t, want, sql[id], "SQL INSERT: %s", p.name)
		require.Equal(t, want, mirrored[id], "mirror: %s", p.name)
		require.Equal(t, want, mirrorStored[id], "mirror target: %s", p.name)
	}
}

// storedIDs returns the ids of table's stored points (a drain from 0); an
// error when it cannot tell (a table without an id column yet is one).
func storedIDs(c *client.Client, table string) (map[int]bool, error) {
	ids := map[int]bool{}
	pg, err := c.Drain(context.Background(), client.DrainRequest{Table: table, Limit: 10000, Columns: []string{"id"}})
	if err != nil {
		return nil, err
	}
	for _, row := range pg.Rows {
		id, err := strconv.Atoi(string(row[0]))
		if err != nil {
			return nil, err
		}
		ids[id] = true
	}
	return ids, nil
}

// mirrorOne runs `ingestd mirror` of table c_mirror from a source whose
// drain after 5 holds line (then nothing) to d, until the cursor file
// shows the page applied or the mirror stops; it reports whether the
// mirror took the line (it stopped with mirror.ErrProtocol else). The
// mirror's line limits are the daemon's.
func mirrorOne(t *testing.T, d *daemon, line string, maxString int) bool {
	t.Helper()
	src := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/drain" {
			http.NotFound(w, r)
			return
		}
		after, body := r.URL.Query().Get("after"), ""
		next := after
		if after == "5" {
			body, next = line, "6"
		}
		h := w.Header()
		for k, v := range map[string]string{"Epoch": "1", "After": after, "Next": next, "Seq": "6", "Watermark": "6", "More": "false"} {
			h.Set("Ingestd-"+k, v)
		}
		_, _ = w.Write([]byte(body))
	}))
	defer src.Close()
	cursor := filepath.Join(t.TempDir(), "cursor")
	b, err := json.Marshal(mirror.Cursor{Source: src.URL, Table: "c_mirror", Epoch: 1, Next: 5})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(cursor, b, 0o600))
	mc := mirror.DefaultConfig()
	mc.Source, mc.Table, mc.Target, mc.CursorFile = src.URL, "c_mirror", d.URL+"/write?"+url.Values{"db": {"m"}}.Encode(), cursor
	mc.Wait, mc.MaxBackoff = 0, 10*time.Millisecond
	mc.Limits = ilp.DefaultLimits()
	mc.Limits.MaxStringBytes = maxString
	mr, err := mirror.New(mc, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mr.Run(ctx) }()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case err := <-done:
			require.ErrorIs(t, err, mirror.ErrProtocol)
			return false
		case <-deadline:
			t.Fatal("the mirror neither applied the page nor stopped within 30s")
		case <-time.After(5 * time.Millisecond):
		}
		if cur, _ := os.ReadFile(cursor); strings.Contains(string(cur), `"next":6`) {
			cancel()
			require.NoError(t, <-done)
			return true
		}
	}
}
