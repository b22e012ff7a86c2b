package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/httpapi/client"
)

// heapGrowth returns how many bytes fn allocated (runtime.MemStats
// TotalAlloc), the whole of what a call took whatever it freed since.
func heapGrowth(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestHugeContentLength: a Content-Length of 40 GB is refused before a
// byte of the body is read or reserved.
func TestHugeContentLength(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "40000000000")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"table":"t"`))
	}))
	defer srv.Close()
	c := newClient(t, srv.URL)
	var err error
	grew := heapGrowth(func() { _, err = c.Drain(context.Background(), client.DrainRequest{Table: "t", Limit: 10}) })
	require.ErrorIs(t, err, client.ErrBodyTooLarge)
	var pe *client.ProtocolError
	require.ErrorAs(t, err, &pe)
	t.Logf("Content-Length 40000000000: the call allocated %d bytes in all", grew)
	require.Less(t, grew, uint64(1<<20), "nothing sized by Content-Length")
}

// endless serves a 200 whose chunked body never ends (until the client
// goes away).
func endless(t *testing.T) *httptest.Server {
	chunk := make([]byte, 64<<10)
	for i := range chunk {
		chunk[i] = 'x'
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestEndlessChunkedBody: a body without end is read up to the limit,
// then the call fails; what it took stays within a few times the limit.
func TestEndlessChunkedBody(t *testing.T) {
	srv := endless(t)
	for _, limit := range []int64{1 << 20, 0} { // 0: DefaultMaxBodyBytes
		c := newClient(t, srv.URL, client.WithMaxBodyBytes(limit))
		want := limit
		if want == 0 {
			want = client.DefaultMaxBodyBytes
		}
		var err error
		grew := heapGrowth(func() {
			_, err = c.Drain(context.Background(), client.DrainRequest{Table: "t", Limit: 10, Format: client.FormatLP})
		})
		t.Logf("limit %d bytes: the call allocated %d bytes in all", want, grew)
		require.ErrorIs(t, err, client.ErrBodyTooLarge, "limit %d", want)
		require.Less(t, grew, uint64(3*want+4<<20), "limit %d", want) // the buffer, doubling, and the transport's own
		_, err = c.Do(context.Background(), http.MethodGet, "/api/v1/tables", nil, nil)
		require.ErrorIs(t, err, client.ErrBodyTooLarge)
	}
}

// lpPage serves one lp drain page with the envelope hdr and body.
func lpPage(t *testing.T, hdr map[string]uint64, more bool, body string) *httptest.Server {
	h := map[string]string{"Content-Type": "text/plain", "Ingestd-More": strconv.FormatBool(more)}
	for k, v := range hdr {
		h["Ingestd-"+k] = strconv.FormatUint(v, 10)
	}
	srv, _ := stub(t, http.StatusOK, h, body)
	return srv
}

// TestHostilePages: pages that break the feed's contract are a
// *ProtocolError wrapping ErrBadPage, whatever their format.
func TestHostilePages(t *testing.T) {
	env := func(epoch, after, next, seq, wm uint64) map[string]uint64 {
		return map[string]uint64{"Epoch": epoch, "After": after, "Next": next, "Seq": seq, "Watermark": wm}
	}
	req := client.DrainRequest{Table: "t", Epoch: 2, After: 10, Limit: 2, Format: client.FormatLP}
	for _, tc := range []struct {
		name string
		srv  *httptest.Server
		req  client.DrainRequest
	}{
		{"another measurement", lpPage(t, env(2, 10, 12, 12, 12), false, "t v=1 1\nother v=2 2\n"), req},
		{"a measurement the table prefixes", lpPage(t, env(2, 10, 11, 12, 12), true, "tt v=1 1\n"), req},
		{"next backwards", lpPage(t, env(2, 10, 5, 12, 12), true, ""), req},
		{"another epoch", lpPage(t, env(3, 10, 12, 12, 12), false, "t v=1 1\n"), req},
		{"another cursor", lpPage(t, env(2, 0, 12, 12, 12), false, "t v=1 1\n"), req},
		{"more on an empty page", lpPage(t, env(2, 10, 10, 12, 12), true, ""), req},
		{"more than next says", lpPage(t, env(2, 10, 11, 12, 12), true, "t v=1 1\nt v=2 2\n"), req},
		{"more than the limit", lpPage(t, env(2, 10, 13, 13, 13), false, "t v=1 1\nt v=2 2\nt v=3 3\n"), req},
		{"more disagrees with next", lpPage(t, env(2, 10, 12, 12, 12), true, "t v=1 1\n"), req},
		{"json of another table", jsonPage(t, `{"table":"u","epoch":2,"after":10,"next":11,"seq":11,"watermark":11,"more":false,"columns":["v","x_seq"],"rows":[[1,11]]}`),
			client.DrainRequest{Table: "t", After: 10, Limit: 5}},
		{"x_seq at the cursor", jsonPage(t, `{"table":"t","epoch":2,"after":10,"next":11,"seq":11,"watermark":11,"more":false,"columns":["v","x_seq"],"rows":[[1,10]]}`),
			client.DrainRequest{Table: "t", After: 10, Limit: 5}},
		{"x_seq descending", jsonPage(t, `{"table":"t","epoch":2,"after":10,"next":13,"seq":13,"watermark":13,"more":false,"columns":["v","x_seq"],"rows":[[1,13],[2,12]]}`),
			client.DrainRequest{Table: "t", After: 10, Limit: 5}},
		{"x_seq above next", jsonPage(t, `{"table":"t","epoch":2,"after":10,"next":11,"seq":19,"watermark":19,"more":true,"columns":["v","x_seq"],"rows":[[1,19]]}`),
			client.DrainRequest{Table: "t", After: 10, Limit: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newClient(t, tc.srv.URL).Drain(context.Background(), tc.req)
			require.ErrorIs(t, err, client.ErrBadPage)
			var pe *client.ProtocolError
			require.ErrorAs(t, err, &pe)
		})
	}
	// The same envelope, consistent, passes.
	pg, err := newClient(t, lpPage(t, env(2, 10, 12, 13, 13), true, "t,k=a v=1 1\nt v=2 2\n").URL).Drain(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, 2, pg.Lines())
	require.Equal(t, "t", pg.Table)
	// A string field holds raw newlines and escaped quotes, a tag value a
	// quote: one line each, as line protocol reads them.
	body := "t,q=\"a s=\"x\nt y\\\"\nz\" 1\nt v=2 2\n"
	pg, err = newClient(t, lpPage(t, env(2, 10, 12, 13, 13), true, body).URL).Drain(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, 2, pg.Lines())
}

func jsonPage(t *testing.T, page string) *httptest.Server {
	srv, _ := stub(t, http.StatusOK, map[string]string{"Content-Type": "application/json"}, page+"\n")
	return srv
}

// TestHostileRowsPages: copy pages of another table or measurement, past
// the limit, or whose cursor does not move, are refused.
func TestHostileRowsPages(t *testing.T) {
	lp := func(cursor, body string) *httptest.Server {
		srv, _ := stub(t, http.StatusOK, map[string]string{"Ingestd-Epoch": "1", "Ingestd-Watermark": "5", "Ingestd-Cursor": cursor}, body)
		return srv
	}
	for name, tc := range map[string]struct {
		srv *httptest.Server
		req client.RowsRequest
	}{
		"another measurement": {lp("", "t v=1 1\nu v=1 1\n"), client.RowsRequest{Table: "t", Limit: 5, Format: client.FormatLP}},
		"past the limit":      {lp("", "t v=1 1\nt v=1 2\n"), client.RowsRequest{Table: "t", Limit: 1, Format: client.FormatLP}},
		"a cursor in place":   {lp("c1", "t v=1 1\n"), client.RowsRequest{Table: "t", Limit: 5, Cursor: "c1", Format: client.FormatLP}},
		"json of another table": {jsonPage(t, `{"table":"u","epoch":1,"watermark":5,"cursor":null,"columns":["time","v"],"rows":[]}`),
			client.RowsRequest{Table: "t", Limit: 5}},
	} {
		_, err := newClient(t, tc.srv.URL).Rows(context.Background(), tc.req)
		require.True(t, errors.Is(err, client.ErrBadPage), "%s: %v", name, err)
	}
}
