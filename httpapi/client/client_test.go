package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/httpapi/client"
	"github.com/ingestd/ingestd/httpapi/wire"
)

func newClient(t *testing.T, base string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(base, opts...)
	require.NoError(t, err)
	return c
}

// stub serves one fixed answer to every request and records the last
// request's Authorization header.
func stub(t *testing.T, status int, hdr map[string]string, body string) (*httptest.Server, *string) {
	t.Helper()
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		for k, v := range hdr {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv, &auth
}

func TestNewRefusesBadURLs(t *testing.T) {
	for _, u := range []string{"", "localhost:8086", "ftp://h", "http://", "http://h/?q=1", "http://h/#f"} {
		_, err := client.New(u)
		require.Error(t, err, "%q", u)
	}
	c, err := client.New("https://h:1/prefix/")
	require.NoError(t, err)
	require.Equal(t, "https://h:1/prefix", c.BaseURL())
}

// TestTableManagement walks create (created, then existing), SHOW
// COLUMNS, SHOW TABLES, SET SYNC, TRUNCATE and DROP against the real
// server, strictly decoded.
func TestTableManagement(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, serverURL, client.WithStrictDecoding())
	tb, created, err := c.CreateTable(ctx, "tm", client.TableOptions{Sync: new(true), Retention: new("30d")})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, client.Table{Name: "tm", Sync: client.SyncStatus{Enabled: true, Epoch: 1, Horizon: 1}, Retention: "30d"}, tb, "30d as the server renders it")
	_, created, err = c.CreateTable(ctx, "tm", client.TableOptions{})
	require.NoError(t, err)
	require.False(t, created, "PUT of an existing table is 200")

	require.NoError(t, c.Write(ctx, []byte("tm,host=a v=1i\n"), client.WriteOptions{Path: "/api/v2/write", Query: map[string][]string{"bucket": {"b"}}}))
	tb, err = c.Table(ctx, "tm")
	require.NoError(t, err)
	require.Equal(t, []client.Column{{Name: "time", Type: "time"}, {Name: "host", Type: "tag"}, {Name: "v", Type: "integer"}}, tb.Columns)
	require.NotNil(t, tb.Stats)
	require.Equal(t, uint64(1), tb.Stats.Fragments)

	all, err := c.Tables(ctx)
	require.NoError(t, err)
	require.Contains(t, names(all), "tm")

	st, err := c.SetSync(ctx, "tm", false)
	require.NoError(t, err)
	require.False(t, st.Enabled)
	_, err = c.Drain(ctx, client.DrainRequest{Table: "tm", Limit: 1})
	require.ErrorIs(t, err, client.ErrSyncOff)
	st, err = c.SetSync(ctx, "tm", true)
	require.NoError(t, err)
	require.Equal(t, uint64(2), st.Epoch, "enabling an OFF table bumps the epoch")
	st, err = c.Truncate(ctx, "tm")
	require.NoError(t, err)
	require.Equal(t, client.SyncStatus{Enabled: true, Epoch: 3, Seq: 1, Watermark: 1, Horizon: 1}, st)

	require.NoError(t, c.DropTable(ctx, "tm"))
	_, err = c.Sync(ctx, "tm")
	require.ErrorIs(t, err, client.ErrTableNotFound)
	var e *client.Error
	require.ErrorAs(t, c.DropTable(ctx, "tm"), &e)
	require.Equal(t, http.StatusNotFound, e.StatusCode)
	require.False(t, e.HasState)
	_, _, err = c.CreateTable(ctx, "x_reserved", client.TableOptions{})
	require.ErrorAs(t, err, &e)
	require.Equal(t, wire.CodeInvalidTableName, e.Code)
}

func names(ts []client.Table) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

// TestWriteRefusals: a body with a bad line is an *Error with InfluxDB's
// code and the line; the good lines are stored.
func TestWriteRefusals(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, serverURL)
	_, _, err := c.CreateTable(ctx, "wr", client.TableOptions{Sync: new(true)})
	require.NoError(t, err)
	body := []byte("wr v=1i 1\nwr v=\"s\" 2\n")
	var e *client.Error
	require.ErrorAs(t, c.Write(ctx, body, client.WriteOptions{}), &e)
	require.Equal(t, client.Error{StatusCode: 400, Code: client.CodeWriteInvalid, Message: e.Message, Line: 2}, *e)
	require.Contains(t, e.Message, "field type conflict")
	require.ErrorAs(t, c.Write(ctx, body, client.WriteOptions{Path: "/api/v2/write", Gzip: true}), &e)
	require.Equal(t, http.StatusUnprocessableEntity, e.StatusCode)
	require.Equal(t, client.CodeWritePartial, e.Code)
	st, err := c.Sync(ctx, "wr")
	require.NoError(t, err)
	require.Equal(t, uint64(2), st.Seq, "the good line of each body was stored")
	require.ErrorAs(t, c.Write(ctx, []byte("wr v=1i 1\n"), client.WriteOptions{Precision: "fortnights"}), &e)
	require.Equal(t, http.StatusBadRequest, e.StatusCode)
}

// TestDrainPagesMatchJSON drains pages of every shape through one reused
// Page and checks the split rows against encoding/json's reading of the
// same body, strict and lenient alike.
func TestDrainPagesMatchJSON(t *testing.T) {
	ctx := context.Background()
	_, _, err := newClient(t, serverURL).CreateTable(ctx, "pm", client.TableOptions{Sync: new(true)})
	require.NoError(t, err)
	lp := `pm,host=a\ b,site=x s="q \"x\" \\ ] [ , y",i=-9223372036854775808i,u=18446744073709551615u,b=true,f=1e-7 1
pm,host=c f=2.5 2
pm s="" 3
`
	require.NoError(t, newClient(t, serverURL).Write(ctx, []byte(lp), client.WriteOptions{}))
	for _, strict := range []bool{false, true} {
		var opts []client.Option
		if strict {
			opts = append(opts, client.WithStrictDecoding())
		}
		c := newClient(t, serverURL, opts...)
		var pg client.Page
		after, pages := uint64(0), 0
		for {
			require.NoError(t, c.DrainInto(ctx, client.DrainRequest{Table: "pm", After: after, Limit: 2, TimeFormat: "ns"}, &pg))
			var want struct {
				Rows [][]json.RawMessage `json:"rows"`
			}
			require.NoError(t, json.Unmarshal(pg.Body, &want))
			require.Equal(t, len(want.Rows), len(pg.Rows))
			for i := range want.Rows {
				require.Equal(t, client.CellTexts(want.Rows[i]), client.CellTexts(pg.Rows[i]))
				require.Len(t, pg.Rows[i], len(pg.Columns))
			}
			pages++
			after = pg.Next
			if !pg.More {
				break
			}
		}
		require.Equal(t, 2, pages)
		require.Equal(t, uint64(3), after)
	}
	pg, err := newClient(t, serverURL).Drain(ctx, client.DrainRequest{Table: "pm", After: 3, Limit: 5, Columns: []string{"x_seq"}})
	require.NoError(t, err)
	require.Equal(t, [][]json.RawMessage{}, pg.Rows, "an empty page has rows, not nil")
	require.Equal(t, []string{"x_seq"}, pg.Columns)
}

// TestDrainHeaderEnvelope reads the envelope of ndjson pages from the
// Ingestd-* headers.
func TestDrainHeaderEnvelope(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, serverURL)
	_, _, err := c.CreateTable(ctx, "nd", client.TableOptions{Sync: new(true)})
	require.NoError(t, err)
	require.NoError(t, c.Write(ctx, []byte("nd v=1i 1\nnd v=2i 2\nnd v=3i 3\n"), client.WriteOptions{}))
	pg, err := c.Drain(ctx, client.DrainRequest{Table: "nd", After: 1, Limit: 1, Format: client.FormatNDJSON, Consumer: "n"})
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 1, 2, 3, 3}, []uint64{pg.Epoch, pg.After, pg.Next, pg.Seq, pg.Watermark})
	require.True(t, pg.More)
	require.Equal(t, 1, pg.Lines())
	require.Nil(t, pg.Rows)
	cons, err := c.Position(ctx, "nd", "n")
	require.NoError(t, err)
	require.Equal(t, uint64(1), cons.Position)
	require.False(t, cons.LastSeen.IsZero())
}

// TestRefusalState: drain refusals carry the table's state; history and
// beyond-sequence cursors ask for a resync.
func TestRefusalState(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, serverURL)
	_, _, err := c.CreateTable(ctx, "rs", client.TableOptions{Sync: new(true)})
	require.NoError(t, err)
	_, err = c.Drain(ctx, client.DrainRequest{Table: "rs", After: 9, Limit: 1})
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, client.Error{StatusCode: 409, Code: wire.CodeCursorBeyondSequence, Message: e.Message, HasState: true, Epoch: 1}, *e)
	require.True(t, client.IsResync(err))
	require.ErrorIs(t, err, client.ErrCursorBeyondSequence)
	require.NotErrorIs(t, err, client.ErrStaleEpoch)
	_, err = c.Drain(ctx, client.DrainRequest{Table: "rs"})
	require.ErrorAs(t, err, &e)
	require.Equal(t, wire.CodeLimitRequired, e.Code)
	require.False(t, client.IsResync(err))
	_, err = c.Drain(ctx, client.DrainRequest{Table: "rs", Limit: 1, Consumer: "bad name\x00"})
	require.ErrorAs(t, err, &e)
	require.Equal(t, wire.CodeInvalidName, e.Code)
}

// TestForeignAnswers: answers that are not ingestd's (a proxy's page, a
// malformed body) are *Error or *ProtocolError, never a page.
func TestForeignAnswers(t *testing.T) {
	ctx := context.Background()
	srv, _ := stub(t, http.StatusBadGateway, map[string]string{"Retry-After": "7"}, "<html>bad gateway</html>")
	_, err := newClient(t, srv.URL).Drain(ctx, client.DrainRequest{Table: "t", Limit: 1})
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, client.Error{StatusCode: 502, Message: "<html>bad gateway</html>", RetryAfter: 7}, *e)
	require.NotErrorIs(t, err, client.ErrUnavailable)
	require.Equal(t, "HTTP 502: <html>bad gateway</html>", err.Error())

	for name, body := range map[string]string{
		"not JSON":        "hello",
		"rows not array":  `{"table":"t","epoch":1,"after":0,"next":0,"seq":0,"watermark":0,"more":false,"columns":[],"rows":{}}`,
		"nested cell":     `{"table":"t","epoch":1,"after":0,"next":0,"seq":0,"watermark":0,"more":false,"columns":["a"],"rows":[[[1]]]}`,
		"trailing":        `{"table":"t","epoch":1,"after":0,"next":0,"seq":0,"watermark":0,"more":false,"columns":["a"],"rows":[[1]]} x`,
		"open string":     `{"table":"t","epoch":1,"after":0,"next":0,"seq":0,"watermark":0,"more":false,"columns":["a"],"rows":[["x]]}`,
		"without columns": `{"table":"t","epoch":1,"after":0,"next":0,"seq":0,"watermark":0,"more":false,"rows":[]}`,
		"bad envelope":    `{"table":"t","epoch":"one","rows":[]}`,
		"truncated rows":  `{"table":"t","columns":["a"],"rows":[[1],`,
	} {
		srv, _ := stub(t, http.StatusOK, nil, body)
		_, err := newClient(t, srv.URL).Drain(ctx, client.DrainRequest{Table: "t", Limit: 1})
		var pe *client.ProtocolError
		require.ErrorAs(t, err, &pe, name)
		require.Equal(t, "GET /drain", pe.Op, name)
	}
	srv, _ = stub(t, http.StatusOK, map[string]string{"Ingestd-Epoch": "1"}, "t v=1i 1\n")
	_, err = newClient(t, srv.URL).Drain(ctx, client.DrainRequest{Table: "t", Limit: 1, Format: client.FormatLP})
	var pe *client.ProtocolError
	require.ErrorAs(t, err, &pe, "an lp page without its envelope headers")
}

// TestStrictDecoding: a field api.yaml does not list passes by default and
// fails in strict mode.
func TestStrictDecoding(t *testing.T) {
	ctx := context.Background()
	srv, _ := stub(t, http.StatusOK, nil, `{"enabled":true,"epoch":1,"seq":0,"watermark":0,"horizon":1,"new_field":1}`)
	st, err := newClient(t, srv.URL).Sync(ctx, "t")
	require.NoError(t, err)
	require.True(t, st.Enabled)
	_, err = newClient(t, srv.URL, client.WithStrictDecoding()).Sync(ctx, "t")
	var pe *client.ProtocolError
	require.ErrorAs(t, err, &pe)
	require.Contains(t, err.Error(), "new_field")
}

// TestTokenIsSentNotShown: the token goes in Authorization and never into
// an error, not even one of the transport.
func TestTokenIsSentNotShown(t *testing.T) {
	ctx := context.Background()
	srv, auth := stub(t, http.StatusUnauthorized, nil, `{"code":"unauthorized","message":"unknown token"}`)
	_, err := newClient(t, srv.URL, client.WithToken("s3cret")).Tables(ctx)
	require.ErrorIs(t, err, client.ErrUnauthorized)
	require.Equal(t, "Token s3cret", *auth)
	require.NotContains(t, err.Error(), "s3cret")

	srv.Close()
	err = newClient(t, srv.URL+"/?", client.WithToken("s3cret")).Write(ctx, []byte("x v=1"), client.WriteOptions{Query: map[string][]string{"p": {"s3cret"}}})
	require.Error(t, err)
	require.False(t, strings.Contains(err.Error(), "s3cret"), "%v", err)
	require.False(t, errors.Is(err, client.ErrUnavailable))
}

// TestDrainPageShapes splits pages of every shape the server writes
// (ported from cmd/ingestd's TestScanDrainPage, whose scanner the client
// replaced): the row count, next and more must be read exactly.
func TestDrainPageShapes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		page  string
		rows  int
		next  uint64
		more  bool
		cells []string // of the first row
		table string   // the drained table; "t" when empty
	}{
		{"empty", `{"table":"t","epoch":1,"after":0,"next":5,"seq":5,"watermark":5,"more":false,"columns":["time","x_seq"],"rows":[]}`, 0, 5, false, nil, ""},
		{"rows", `{"table":"t","epoch":1,"after":0,"next":2,"seq":5,"watermark":5,"more":true,"columns":["time","a","x_seq"],"rows":[["2026-01-01T00:00:00Z","x",1],["2026-01-01T00:00:00Z",null,2]]}`, 2, 2, true,
			[]string{`"2026-01-01T00:00:00Z"`, `"x"`, "1"}, ""},
		{"strings with brackets, quotes and escapes", `{"table":"t","epoch":1,"after":0,"next":9,"seq":9,"watermark":9,"more":false,"columns":["time","rows","x_seq"],"rows":[["t","]\"[\\",8],["t","[[",9]]}`, 2, 9, false,
			[]string{`"t"`, `"]\"[\\"`, "8"}, ""},
		{"names holding the rows key", `{"table":"q\",\"rows\":[","epoch":1,"after":0,"next":1,"seq":1,"watermark":1,"more":false,"columns":["rows\",\"rows\":[","x_seq"],"rows":[["a\",\"rows\":[",1]]}`, 1, 1, false,
			[]string{`"a\",\"rows\":["`, "1"}, `q","rows":[`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, strict := range []bool{false, true} {
				srv, _ := stub(t, http.StatusOK, map[string]string{"Content-Type": "application/json"}, tc.page+"\n")
				opts := []client.Option{}
				if strict {
					opts = append(opts, client.WithStrictDecoding())
				}
				table := tc.table
				if table == "" {
					table = "t"
				}
				pg, err := newClient(t, srv.URL, opts...).Drain(context.Background(), client.DrainRequest{Table: table, Limit: 10})
				require.NoError(t, err)
				require.Len(t, pg.Rows, tc.rows)
				require.Equal(t, tc.next, pg.Next)
				require.Equal(t, tc.more, pg.More)
				if tc.cells != nil {
					require.Equal(t, tc.cells, client.CellTexts(pg.Rows[0]))
				}
			}
		})
	}
}

// TestDrainRowsLikeEncodingJSON splits rows of every spacing and scalar
// kind exactly as encoding/json reads them (ported from the crash
// harness's TestJSONRows, whose splitter the client replaced).
func TestDrainRowsLikeEncodingJSON(t *testing.T) {
	for _, rows := range []string{
		`[]`,
		`[[]]`,
		`[[1,"a",null],[2, "b,]\"[" ,true],[-3.5e2,""]]`,
		` [ [ 1 ] , [ null , "x" ] ] `,
		`[["a\\","b\\\"c",""],["\\\\",1]]`,
		"[[1,\n2],\t[\"x\"\r,3]]",
	} {
		var want [][]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(rows), &want), rows)
		page := `{"table":"t","epoch":1,"after":0,"next":9,"seq":9,"watermark":9,"more":false,"columns":[],"rows":` + rows + "}\n"
		srv, _ := stub(t, http.StatusOK, nil, page)
		pg, err := newClient(t, srv.URL).Drain(context.Background(), client.DrainRequest{Table: "t", Limit: 10})
		require.NoError(t, err, rows) // a page not laid out as the server writes it is decoded whole first
		require.Len(t, pg.Rows, len(want), rows)
		for i := range want {
			require.Equal(t, client.CellTexts(want[i]), client.CellTexts(pg.Rows[i]), rows)
		}
	}
}
