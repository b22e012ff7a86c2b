package ilp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// gzipped returns s compressed.
func gzipped(t testing.TB, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, err := io.WriteString(zw, s)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return b.Bytes()
}

// onlyReader hides a body's length, so the client sends it chunked.
type onlyReader struct{ io.Reader }

// httpError is the JSON error body of a write.
type httpError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Error   string `json:"error"`
	Line    int    `json:"line"`
}

// wantHTTPError is an expected error response.
type wantHTTPError struct {
	code     string
	prefix   string   // the message starts with it
	contains []string // the message contains each
	line     int
}

// httpRecv is the receive time the tests' HTTP writes see.
var httpRecv = time.Unix(1_700_000_000, 5)

func TestHTTPWrite(t *testing.T) {
	const limit = 1024
	// A body over limit that gzip squeezes under it: a gzip bomb in small.
	bomb := strings.Repeat("cpu v=1 1\n", 1000)
	// A gzip stream cut short.
	truncated := gzipped(t, strings.Repeat("cpu,host=h v=1 1\ncpu,host=g v=2 2\n", 500))
	truncated = truncated[:len(truncated)/2]

	tests := []struct {
		name    string
		maxBody int64             // 0 means the default
		setup   []string          // bodies posted to /write first, each must get 204
		path    string            // with its query
		header  map[string]string // request headers
		body    []byte
		chunked bool // send the body without a Content-Length
		status  int
		err     *wantHTTPError // nil for 204
		rows    []row          // table cpu afterwards
	}{
		{
			name: "v1 good lines", path: "/write?db=x&rp=y&consistency=any",
			body:   []byte("cpu,host=a v=1 1\ncpu,host=b v=2,s=\"x\" 2\n"),
			status: http.StatusNoContent,
			rows:   []row{{"time": int64(1), "host": "a", "v": 1.0}, {"time": int64(2), "host": "b", "v": 2.0, "s": "x"}},
		},
		{
			name: "v2 good lines", path: "/api/v2/write?org=o&bucket=b",
			body:   []byte("cpu,host=a v=1 1\ncpu,host=b v=2 2\n"),
			status: http.StatusNoContent,
			rows:   []row{{"time": int64(1), "host": "a", "v": 1.0}, {"time": int64(2), "host": "b", "v": 2.0}},
		},
		{
			name: "v1 empty body", path: "/write",
			body: nil, status: http.StatusNoContent, rows: []row{},
		},
		{
			name: "v2 empty body", path: "/api/v2/write",
			body: []byte{}, status: http.StatusNoContent, rows: []row{},
		},
		{
			name: "comments and blank lines only", path: "/write",
			body: []byte("# nothing\n\n  \n"), status: http.StatusNoContent, rows: []row{},
		},
		{
			name: "BOM, CRLF and a raw newline in a string", path: "/write",
			body:   []byte("\xef\xbb\xbfcpu s=\"a\nb\" 1\r\ncpu v=2 2\r\n"),
			status: http.StatusNoContent,
			rows:   []row{{"time": int64(1), "s": "a\nb"}, {"time": int64(2), "v": 2.0}},
		},
		{
			name: "missing timestamp gets the receive time truncated to the precision", path: "/write?precision=s",
			body:   []byte("cpu v=1\n"),
			status: http.StatusNoContent,
			rows:   []row{{"time": httpRecv.Truncate(time.Second).UnixNano(), "v": 1.0}},
		},
		{
			name: "Content-Encoding matched case-insensitively", path: "/write", header: map[string]string{"Content-Encoding": "GZip"},
			body:   gzipped(t, "cpu v=1 1\n"),
			status: http.StatusNoContent,
			rows:   []row{{"time": int64(1), "v": 1.0}},
		},
		{
			name: "Content-Encoding x-gzip", path: "/api/v2/write", header: map[string]string{"Content-Encoding": "x-gzip"},
			body:   gzipped(t, "cpu v=1 1\n"),
			status: http.StatusNoContent,
			rows:   []row{{"time": int64(1), "v": 1.0}},
		},
		{
			name: "v1 partial write stores the good lines", path: "/write",
			body:   []byte("cpu v=1 1\ncpu v= 2\ncpu v=3 3\n"),
			status: http.StatusBadRequest,
			err:    &wantHTTPError{code: "invalid", prefix: "partial write:", contains: []string{"line 2", "dropped=1"}, line: 2},
			rows:   []row{{"time": int64(1), "v": 1.0}, {"time": int64(3), "v": 3.0}},
		},
		{
			name: "v1 partial write counts every dropped line and names the first", path: "/write",
			body:   []byte("cpu s=\"a\nb\" 1\ncpu v=2 2\nbad\ncpu v=x 4\ncpu v=5 5\n"),
			status: http.StatusBadRequest,
			err:    &wantHTTPError{code: "invalid", prefix: "partial write:", contains: []string{"line 4", "no fields", "dropped=2"}, line: 4},
			rows:   []row{{"time": int64(1), "s": "a\nb"}, {"time": int64(2), "v": 2.0}, {"time": int64(5), "v": 5.0}},
		},
		{
			name: "v1 nothing stored", path: "/write",
			body:   []byte("cpu v=\ncpu\n"),
			status: http.StatusBadRequest,
			err:    &wantHTTPError{code: "invalid", prefix: "partial write:", contains: []string{"dropped=2"}, line: 1},
			rows:   []row{},
		},
		{
			name: "v2 partial write is 422", path: "/api/v2/write",
			body:   []byte("cpu v=1 1\ncpu v= 2\ncpu v=3 3\n"),
			status: http.StatusUnprocessableEntity,
			err:    &wantHTTPError{code: "unprocessable entity", prefix: "partial write:", contains: []string{"dropped=1"}, line: 2},
			rows:   []row{{"time": int64(1), "v": 1.0}, {"time": int64(3), "v": 3.0}},
		},
		{
			name: "v2 nothing stored is 400", path: "/api/v2/write",
			body:   []byte("cpu v= 1\ncpu v=\"x 2\n"),
			status: http.StatusBadRequest,
			err:    &wantHTTPError{code: "invalid", contains: []string{"line 1", "dropped=2"}, line: 1},
			rows:   []row{},
		},
		{
			name: "v1 field type conflict", path: "/write",
			setup:  []string{"cpu v=1 1\n"},
			body:   []byte("cpu v=2i 2\ncpu v=3 3\n"),
			status: http.StatusBadRequest,
			err:    &wantHTTPError{code: "invalid", prefix: "partial write:", contains: []string{"field type conflict", `"v"`, "dropped=1"}, line: 1},
			rows:   []row{{"time": int64(1), "v": 1.0}, {"time": int64(3), "v": 3.0}},
		},
		{
			name: "v2 field type conflict with a stored line is 422", path: "/api/v2/write",
			setup:  []string{"cpu v=1 1\n"},
			body:   []byte("cpu v=3 3\ncpu v=\"s\" 2\n"),
			status: http.StatusUnprocessableEntity,
			err:    &wantHTTPError{code: "unprocessable entity", prefix: "partial write:", contains: []string{"field type conflict", "dropped=1"}, line: 2},
			rows:   []row{{"time": int64(1), "v": 1.0}, {"time": int64(3), "v": 3.0}},
		},
		{
			name: "v2 field type conflict only is 400", path: "/api/v2/write",
			setup:  []string{"cpu v=1 1\n"},
			body:   []byte("cpu v=true 2\n"),
			status: http.StatusBadRequest,
			err:    &wantHTTPError{code: "invalid", contains: []string{"field type conflict", "dropped=1"}, line: 1},
			rows:   []row{{"time": int64(1), "v": 1.0}},
		},
		{
			name: "parse and schema errors: the first by line is reported", path: "/write",
			setup:  []string{"cpu v=1 1\n"},
			body:   []byte("cpu v=2 2\ncpu v=3i 3\ncpu v= 4\n"),
			status: http.StatusBadRequest,
			err:    &wantHTTPError{code: "invalid", prefix: "partial write:", contains: []string{"field type conflict", "dropped=2"}, line: 2},
			rows:   []row{{"time": int64(1), "v": 1.0}, {"time": int64(2), "v": 2.0}},
		},
		{
			name: "x_ tag key", path: "/write",
			body:   []byte("cpu v=1 1\ncpu,x_host=a v=2 2\n"),
			status: http.StatusBadRequest,
			err:    &wantHTTPError{code: "invalid", prefix: "partial write:", contains: []string{`"x_host"`, "reserved", "dropped=1"}, line: 2},
			rows:   []row{{"time": int64(1), "v": 1.0}},
		},
		{
			name: "x_ field key", path: "/api/v2/write",
			body:   []byte("cpu x_seq=1i 1\n"),
			status: http.StatusBadRequest,
			err:    &wantHTTPError{code: "invalid", contains: []string{`"x_seq"`, "reserved"}, line: 1},
			rows:   []row{},
		},
		{
			name: "time field key", path: "/write",
			body:   []byte("cpu time=1i 1\ncpu v=1 2\n"),
			status: http.StatusBadRequest,
			err:    &wantHTTPError{code: "invalid", prefix: "partial write:", contains: []string{`"time"`, "reserved"}, line: 1},
			rows:   []row{{"time": int64(2), "v": 1.0}},
		},
		{
			name: "gzip body", path: "/write",
			header: map[string]string{"Content-Encoding": "gzip"},
			body:   gzipped(t, "cpu v=1 1\ncpu v=2 2\n"),
			status: http.StatusNoContent,
			rows:   []row{{"time": int64(1), "v": 1.0}, {"time": int64(2), "v": 2.0}},
		},
		{
			name: "chunked gzip body", path: "/api/v2/write",
			header: map[string]string{"Content-Encoding": "gzip"},
			body:   gzipped(t, "cpu v=1 1\n"), chunked: true,
			status: http.StatusNoContent,
			rows:   []row{{"time": int64(1), "v": 1.0}},
		},
		{
			name: "empty gzip body", path: "/write",
			header: map[string]string{"Content-Encoding": "gzip"},
			status: http.StatusNoContent, rows: []row{},
		},
		{
			name: "gzip of nothing", path: "/write",
			header: map[string]string{"Content-Encoding": "gzip"},
			body:   gzipped(t, ""),
			status: http.StatusNoContent, rows: []row{},
		},
		{
			name: "corrupt gzip", path: "/write",
			header: map[string]string{"Content-Encoding": "gzip"},
			body:   []byte("cpu v=1 1\ncpu v=2 2\n this is not gzip"),
			status: http.StatusBadRequest,
			err:    &wantHTTPError{code: "invalid", contains: []string{"gzip"}},
			rows:   []row{},
		},
		{
			name: "truncated gzip", path: "/api/v2/write",
			header: map[string]string{"Content-Encoding": "gzip"},
			body:   truncated,
			status: http.StatusBadRequest,
			err:    &wantHTTPError{code: "invalid", contains: []string{"gzip", "nothing was written"}},
			rows:   []row{},
		},
		{
			name: "body at the limit", path: "/write", maxBody: limit,
			body:   []byte(strings.Repeat("#", limit-len("cpu v=1 1\n")-1) + "\ncpu v=1 1\n"),
			status: http.StatusNoContent,
			rows:   []row{{"time": int64(1), "v": 1.0}},
		},
		{
			name: "body over the limit", path: "/write", maxBody: limit,
			body:   []byte(strings.Repeat("#", limit-len("cpu v=1 1\n")) + "\ncpu v=1 1\n"),
			status: http.StatusRequestEntityTooLarge,
			err:    &wantHTTPError{code: "request too large", contains: []string{"--max-body-bytes=1024"}},
			rows:   []row{},
		},
		{
			name: "chunked body over the limit", path: "/api/v2/write", maxBody: limit,
			body: []byte(bomb), chunked: true,
			status: http.StatusRequestEntityTooLarge,
			err:    &wantHTTPError{code: "request too large", contains: []string{"--max-body-bytes=1024"}},
			rows:   []row{},
		},
		{
			name: "gzip bomb", path: "/write", maxBody: limit,
			header: map[string]string{"Content-Encoding": "gzip"},
			body:   gzipped(t, bomb),
			status: http.StatusRequestEntityTooLarge,
			err:    &wantHTTPError{code: "request too large", contains: []string{"after decompression"}},
			rows:   []row{},
		},
		{
			name: "chunked gzip bomb", path: "/api/v2/write", maxBody: limit,
			header: map[string]string{"Content-Encoding": "gzip"},
			body:   gzipped(t, bomb), chunked: true,
			status: http.StatusRequestEntityTooLarge,
			err:    &wantHTTPError{code: "request too large"},
			rows:   []row{},
		},
		{
			name: "unknown Content-Encoding", path: "/write",
			header: map[string]string{"Content-Encoding": "br"},
			body:   []byte("cpu v=1 1\n"),
			status: http.StatusUnsupportedMediaType,
			err:    &wantHTTPError{code: "unsupported media type", contains: []string{`"br"`}},
			rows:   []row{},
		},
		{
			name: "identity Content-Encoding", path: "/write",
			header: map[string]string{"Content-Encoding": "identity"},
			body:   []byte("cpu v=1 1\n"),
			status: http.StatusNoContent,
			rows:   []row{{"time": int64(1), "v": 1.0}},
		},
		{
			name: "v1 unknown precision", path: "/write?precision=xs",
			body:   []byte("cpu v=1 1\n"),
			status: http.StatusBadRequest,
			err:    &wantHTTPError{code: "invalid", contains: []string{"precision", `"xs"`}},
			rows:   []row{},
		},
		{
			name: "v2 unknown precision", path: "/api/v2/write?precision=n",
			body:   []byte("cpu v=1 1\n"),
			status: http.StatusBadRequest,
			err:    &wantHTTPError{code: "invalid", contains: []string{"precision", `"n"`}},
			rows:   []row{},
		},
		{
			name: "v1 precision m", path: "/write?precision=m",
			body: []byte("cpu v=1 2\n"), status: http.StatusNoContent,
			rows: []row{{"time": int64(2 * time.Minute), "v": 1.0}},
		},
		{
			name: "v1 precision h", path: "/write?precision=h",
			body: []byte("cpu v=1 2\n"), status: http.StatusNoContent,
			rows: []row{{"time": int64(2 * time.Hour), "v": 1.0}},
		},
		{
			name: "v1 precision n", path: "/write?precision=n",
			body: []byte("cpu v=1 2\n"), status: http.StatusNoContent,
			rows: []row{{"time": int64(2), "v": 1.0}},
		},
		{
			name: "v1 precision ns", path: "/write?precision=ns",
			body: []byte("cpu v=1 2\n"), status: http.StatusNoContent,
			rows: []row{{"time": int64(2), "v": 1.0}},
		},
		{
			name: "v1 precision us", path: "/write?precision=us",
			body: []byte("cpu v=1 2\n"), status: http.StatusNoContent,
			rows: []row{{"time": int64(2 * time.Microsecond), "v": 1.0}},
		},
		{
			name: "v1 precision ms", path: "/write?precision=ms",
			body: []byte("cpu v=1 2\n"), status: http.StatusNoContent,
			rows: []row{{"time": int64(2 * time.Millisecond), "v": 1.0}},
		},
		{
			name: "v1 precision s", path: "/write?precision=s",
			body: []byte("cpu v=1 2\n"), status: http.StatusNoContent,
			rows: []row{{"time": int64(2 * time.Second), "v": 1.0}},
		},
		{
			name: "v2 precision ns", path: "/api/v2/write?precision=ns",
			body: []byte("cpu v=1 2\n"), status: http.StatusNoContent,
			rows: []row{{"time": int64(2), "v": 1.0}},
		},
		{
			name: "v2 precision us", path: "/api/v2/write?precision=us",
			body: []byte("cpu v=1 2\n"), status: http.StatusNoContent,
			rows: []row{{"time": int64(2 * time.Microsecond), "v": 1.0}},
		},
		{
			name: "v2 precision ms", path: "/api/v2/write?precision=ms",
			body: []byte("cpu v=1 2\n"), status: http.StatusNoContent,
			rows: []row{{"time": int64(2 * time.Millisecond), "v": 1.0}},
		},
		{
			name: "v1 every parameter empty", path: "/write?db=&rp=&precision=&u=&p=&consistency=",
			body: []byte("cpu v=1 2\n"), status: http.StatusNoContent,
			rows: []row{{"time": int64(2), "v": 1.0}},
		},
		{
			name: "v2 every parameter empty", path: "/api/v2/write?org=&orgID=&bucket=&precision=",
			body: []byte("cpu v=1 2\n"), status: http.StatusNoContent,
			rows: []row{{"time": int64(2), "v": 1.0}},
		},
		{
			name: "one receive time for every line without a timestamp", path: "/write",
			body:   []byte("cpu,h=a v=1\ncpu,h=b v=2\ncpu,h=c v=3 7\n"),
			status: http.StatusNoContent,
			rows: []row{
				{"time": httpRecv.UnixNano(), "h": "a", "v": 1.0},
				{"time": httpRecv.UnixNano(), "h": "b", "v": 2.0},
				{"time": int64(7), "h": "c", "v": 3.0},
			},
		},
		{
			name: "v1 precision u", path: "/write?precision=u",
			body: []byte("cpu v=1 2\n"), status: http.StatusNoContent,
			rows: []row{{"time": int64(2 * time.Microsecond), "v": 1.0}},
		},
		{
			name: "v2 precision m rejected", path: "/api/v2/write?precision=m",
			body:   []byte("cpu v=1 2\n"),
			status: http.StatusBadRequest,
			err:    &wantHTTPError{code: "invalid", contains: []string{"precision", `"m"`}},
			rows:   []row{},
		},
		{
			name: "v2 precision h rejected", path: "/api/v2/write?precision=h",
			body:   []byte("cpu v=1 2\n"),
			status: http.StatusBadRequest,
			err:    &wantHTTPError{code: "invalid", contains: []string{"precision", `"h"`}},
			rows:   []row{},
		},
		{
			name: "v2 precision s", path: "/api/v2/write?precision=s",
			body: []byte("cpu v=1 2\n"), status: http.StatusNoContent,
			rows: []row{{"time": int64(2 * time.Second), "v": 1.0}},
		},
		{
			name: "v1 empty precision means ns", path: "/write?precision=",
			body: []byte("cpu v=1 2\n"), status: http.StatusNoContent,
			rows: []row{{"time": int64(2), "v": 1.0}},
		},
		{
			name: "v2 empty precision means ns", path: "/api/v2/write?precision=&bucket=",
			body: []byte("cpu v=1 2\n"), status: http.StatusNoContent,
			rows: []row{{"time": int64(2), "v": 1.0}},
		},
		{
			name: "timestamp out of range for the precision", path: "/write?precision=h",
			body:   []byte("cpu v=1 2562048\ncpu v=2 1\n"),
			status: http.StatusBadRequest,
			err:    &wantHTTPError{code: "invalid", prefix: "partial write:", contains: []string{"out of range", "dropped=1"}, line: 1},
			rows:   []row{{"time": int64(time.Hour), "v": 2.0}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, func(c *Config) {
				if tt.maxBody > 0 {
					c.MaxBodyBytes = tt.maxBody
				}
			}, "cpu")
			r.in.now = func() time.Time { return httpRecv }
			for _, s := range tt.setup {
				res := r.post("/write", strings.NewReader(s), nil)
				require.Equal(t, http.StatusNoContent, res.status, "setup: %s", res.body)
			}
			var body io.Reader = bytes.NewReader(tt.body)
			if tt.chunked {
				body = onlyReader{body}
			}
			res := r.post(tt.path, body, tt.header)
			require.Equal(t, tt.status, res.status, "body: %s", res.body)
			if tt.err == nil {
				require.Empty(t, res.body)
			} else {
				require.Equal(t, "application/json", res.header.Get("Content-Type"))
				var e httpError
				require.NoError(t, json.Unmarshal(res.body, &e), "body: %s", res.body)
				require.Equal(t, tt.err.code, e.Code)
				require.Equal(t, e.Message, e.Error, "error repeats message")
				require.True(t, strings.HasPrefix(e.Message, tt.err.prefix), "message %q starts with %q", e.Message, tt.err.prefix)
				if tt.err.prefix == "" {
					require.NotContains(t, e.Message, "partial write")
				}
				for _, s := range tt.err.contains {
					require.Contains(t, e.Message, s)
				}
				require.Equal(t, tt.err.line, e.Line)
			}
			require.Equal(t, tt.rows, r.drain("cpu"))
			tooLarge := 0.0
			if tt.status == http.StatusRequestEntityTooLarge {
				tooLarge = 1
			}
			require.Equal(t, tooLarge, testutil.ToFloat64(r.in.m.tooLarge), "ingestd_http_write_too_large_total")
		})
	}

	t.Run("the gzip bomb is under the limit on the wire", func(t *testing.T) {
		require.Less(t, len(gzipped(t, bomb)), limit)
		require.Greater(t, len(bomb), limit)
	})
}

// TestHTTPWriteTablesOnFirstWrite checks that a write creates its tables,
// and that lines for several tables in one body land in each.
func TestHTTPWriteTablesOnFirstWrite(t *testing.T) {
	tests := []struct {
		name string
		path string
	}{
		{name: "v1", path: "/write"},
		{name: "v2", path: "/api/v2/write"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil, "a", "b")
			res := r.post(tt.path, strings.NewReader("a v=1 1\nb v=2 2\nc v=3 3\na v=4 4\n"), nil)
			require.Equal(t, http.StatusNoContent, res.status, "body: %s", res.body)
			require.Equal(t, []row{{"time": int64(1), "v": 1.0}, {"time": int64(4), "v": 4.0}}, r.drain("a"))
			require.Equal(t, []row{{"time": int64(2), "v": 2.0}}, r.drain("b"))
			info, err := r.d.Table("c")
			require.NoError(t, err, "c is created by the write")
			require.False(t, info.Sync.Enabled)
		})
	}
}

// stuckAppender is a sequencer whose queue never has room: Submit blocks
// until ctx ends. With err set, Submit fails with it at once instead.
type stuckAppender struct {
	err   error
	calls atomic.Int32
}

func (s *stuckAppender) Submit(ctx context.Context, _ *feed.Batch) (*feed.Pending, error) {
	s.calls.Add(1)
	if s.err != nil {
		return nil, s.err
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestHTTPWriteUnavailable checks back-pressure over HTTP: a write that
// finds no room in the sequencer queue within the submit timeout gets 503
// with Retry-After in whole seconds, and a closed sequencer gets 503 too.
func TestHTTPWriteUnavailable(t *testing.T) {
	tests := []struct {
		name       string
		path       string
		body       string
		err        error // what Submit fails with; nil blocks until the timeout
		timeout    time.Duration
		status     int
		retryAfter string
		contains   string
		submits    int32
	}{
		{
			name: "v1 queue stays full", path: "/write", body: "cpu v=1 1\n",
			timeout: 20 * time.Millisecond, status: http.StatusServiceUnavailable, retryAfter: "1",
			contains: "--feed-submit-timeout", submits: 1,
		},
		{
			name: "v2 queue stays full", path: "/api/v2/write?bucket=b&org=o", body: "cpu v=1 1\ncpu v=2 2\n",
			timeout: 20 * time.Millisecond, status: http.StatusServiceUnavailable, retryAfter: "1",
			contains: "--feed-submit-timeout", submits: 1,
		},
		{
			name: "sequencer closed", path: "/write", body: "cpu v=1 1\n", err: feed.ErrClosed,
			timeout: time.Minute, status: http.StatusServiceUnavailable, retryAfter: "1",
			contains: "shutting down", submits: 1,
		},
		{
			name: "an empty body needs no queue room", path: "/write", body: "",
			timeout: time.Minute, status: http.StatusNoContent, submits: 0,
		},
		{
			name: "a body of bad lines needs no queue room", path: "/api/v2/write", body: "cpu v=\n",
			timeout: time.Minute, status: http.StatusBadRequest, contains: "dropped=1", submits: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := &stuckAppender{err: tt.err}
			in, err := New(DefaultConfig(), app, tt.timeout, nil, nil)
			require.NoError(t, err)
			mux := http.NewServeMux()
			mux.Handle("POST /write", in.HandlerV1())
			mux.Handle("POST /api/v2/write", in.HandlerV2())
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)

			resp, err := srv.Client().Post(srv.URL+tt.path, "text/plain", strings.NewReader(tt.body))
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, tt.status, resp.StatusCode, "body: %s", body)
			require.Equal(t, tt.retryAfter, resp.Header.Get("Retry-After"))
			require.Equal(t, tt.submits, app.calls.Load())
			if tt.status == http.StatusNoContent {
				require.Empty(t, body)
				return
			}
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var e httpError
			require.NoError(t, json.Unmarshal(body, &e), "body: %s", body)
			require.Contains(t, e.Message, tt.contains)
			require.Equal(t, e.Message, e.Error)
			if tt.status == http.StatusServiceUnavailable {
				require.Equal(t, "unavailable", e.Code)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		name string
		d    time.Duration
		want string
	}{
		{name: "zero", d: 0, want: "1"},
		{name: "under a second", d: 20 * time.Millisecond, want: "1"},
		{name: "one second", d: time.Second, want: "1"},
		{name: "rounded up", d: 1500 * time.Millisecond, want: "2"},
		{name: "just over", d: 5*time.Second + time.Nanosecond, want: "6"},
		{name: "the default submit timeout", d: 5 * time.Second, want: "5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, retryAfter(tt.d))
		})
	}
}

// readSignal calls read once, after the first Read that returns bytes.
type readSignal struct {
	io.ReadCloser
	once sync.Once
	read func()
}

func (s *readSignal) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	if n > 0 {
		s.once.Do(s.read)
	}
	return n, err
}

// TestHTTPWriteContentLengthLie checks that a body's buffer grows as its
// bytes arrive: requests declaring 32 MiB and sending a few bytes make the
// server allocate far less than what they declare, and each is answered
// 400 once its client goes away.
func TestHTTPWriteContentLengthLie(t *testing.T) {
	const conns = 8
	in, err := New(DefaultConfig(), &stuckAppender{}, time.Second, nil, nil)
	require.NoError(t, err)
	reading := make(chan struct{}, conns)
	statuses := make(chan int, conns)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = &readSignal{ReadCloser: r.Body, read: func() { reading <- struct{}{} }}
		sw := &statusRecorder{ResponseWriter: w}
		in.HandlerV1().ServeHTTP(sw, r)
		statuses <- sw.status
	}))
	t.Cleanup(srv.Close)

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cs := make([]net.Conn, 0, conns)
	for range conns {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, err = io.WriteString(c, "POST /write HTTP/1.1\r\nHost: x\r\nContent-Length: 33554432\r\n\r\ncpu v=1 1\n")
		require.NoError(t, err)
		cs = append(cs, c)
	}
	for range conns {
		select {
		case <-reading:
		case <-time.After(testdeadline.Scale(10 * time.Second)):
			t.Fatal("the handlers did not start reading")
		}
	}
	runtime.ReadMemStats(&after)
	declared := uint64(conns) * 32 << 20
	allocated := after.TotalAlloc - before.TotalAlloc
	require.Less(t, allocated, declared/16, "allocated %d bytes for bodies declaring %d", allocated, declared)
	for _, c := range cs {
		require.NoError(t, c.Close())
	}
	for range conns {
		select {
		case st := <-statuses:
			require.Equal(t, http.StatusBadRequest, st)
		case <-time.After(testdeadline.Scale(10 * time.Second)):
			t.Fatal("the handlers did not return after their clients left")
		}
	}
}

// statusRecorder records the status a handler writes.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// heldAppender holds every Submit until gate is closed, whatever its
// context, then hands the batch on without the context's deadline (the
// submit timeout may have passed while it was held: the test measures the
// in-flight bytes, not the queue).
type heldAppender struct {
	Appender
	gate    chan struct{}
	entered chan struct{}
}

func (g *heldAppender) Submit(ctx context.Context, b *feed.Batch) (*feed.Pending, error) {
	g.entered <- struct{}{}
	<-g.gate
	return g.Appender.Submit(context.WithoutCancel(ctx), b)
}

// TestHTTPWriteInflightBytes checks --http-max-inflight-write-bytes over a
// real listener: a write holds its body's bytes (after decompression)
// until it is answered; a write that finds no room waits the submit
// timeout (1 s in the rig), then is answered 503 with Retry-After and
// stores nothing; once the first write is answered the same write goes
// through, and nothing stays held.
func TestHTTPWriteInflightBytes(t *testing.T) {
	const maxBody = 1 << 20
	lines := func(table string) string {
		var sb strings.Builder
		for i := 0; sb.Len() < maxBody-100; i++ {
			fmt.Fprintf(&sb, "%s v=%d %d\n", table, i, i+1)
		}
		return sb.String()
	}
	bodyA, bodyB := lines("a"), lines("b")
	heldA := len(bodyA) + int(parsedBytes([]byte(bodyA)))
	held := &heldAppender{gate: make(chan struct{}), entered: make(chan struct{}, 4)}
	r := newRigOpts(t, rigOptions{
		// Room for the first write and half a body more. The held write
		// would trip the overload refusal, which is not what this test
		// measures.
		mod: func(c *Config) {
			c.MaxBodyBytes, c.MaxInflightWriteBytes, c.MaxWriteDelay = maxBody, int64(heldA+maxBody/2), 0
		},
		wrap: func(app Appender) Appender { held.Appender = app; return held },
	}, "a", "b")

	first := make(chan httpResult, 1)
	go func() { first <- r.post("/write", strings.NewReader(bodyA), nil) }()
	<-held.entered
	require.Equal(t, heldA, metricValue(t, r.in.m.inflight), "the first write holds its body and its parsed form's estimate")

	// The second body, gzipped on the wire, is held as its decompressed
	// size: there is no room for it.
	start := time.Now()
	res := r.post("/write", bytes.NewReader(gzipped(t, bodyB)), map[string]string{"Content-Encoding": "gzip"})
	requireUnavailable(t, res, "--http-max-inflight-write-bytes")
	require.GreaterOrEqual(t, time.Since(start), time.Second, "answered before the submit timeout")
	require.Equal(t, 1, metricValue(t, r.in.m.inflightRefused))
	require.Equal(t, heldA, metricValue(t, r.in.m.inflight), "the refused write holds nothing")

	close(held.gate)
	require.Equal(t, http.StatusNoContent, (<-first).status)
	// The first write gives its bytes back once answered, which the
	// client may see a moment before the handler returns.
	require.Eventually(t, func() bool { return metricValue(t, r.in.m.inflight) == 0 }, testdeadline.Scale(5*time.Second), 2*time.Millisecond,
		"the answered write gives back what it held")
	res = r.post("/write", bytes.NewReader(gzipped(t, bodyB)), map[string]string{"Content-Encoding": "gzip"})
	require.Equal(t, http.StatusNoContent, res.status, "body: %s", res.body)
	require.Len(t, held.entered, 1, "the refused write never reached the sequencer")
	require.Equal(t, 0, metricValue(t, r.in.m.inflight))
	require.Len(t, r.drain("b"), strings.Count(bodyB, "\n"), "b stored once, by the write that was let through")
}

// TestHTTPWriteParsedFormBounded checks that a body is held against
// --http-max-inflight-write-bytes with its parsed form: a small body of
// millions of tiny lines (gzip makes it a few KB on the wire), valid or
// not, is refused 413 before it is parsed, and nothing is stored; the
// same lines in bodies that fit go through.
func TestHTTPWriteParsedFormBounded(t *testing.T) {
	const maxBody = 1 << 20
	r := newRigOpts(t, rigOptions{mod: func(c *Config) { c.MaxBodyBytes, c.MaxInflightWriteBytes = maxBody, 2*maxBody }}, "x")
	for _, line := range []string{"x v=1\n", "a b\n"} {
		body := strings.Repeat(line, (maxBody-1)/len(line))
		require.Greater(t, int64(len(body))+parsedBytes([]byte(body)), int64(2*maxBody), "the estimate exceeds the budget")
		res := r.post("/write", bytes.NewReader(gzipped(t, body)), map[string]string{"Content-Encoding": "gzip"})
		require.Equal(t, http.StatusRequestEntityTooLarge, res.status, "body: %s", res.body)
		require.Contains(t, string(res.body), "parses to about")
		require.Contains(t, string(res.body), "--http-max-inflight-write-bytes")
	}
	require.Equal(t, 2, metricValue(t, r.in.m.tooLarge))
	require.Equal(t, 0, metricValue(t, r.in.m.inflight), "nothing held after the answers")
	require.Empty(t, r.drain("x"), "nothing stored")
	small := strings.Repeat("x v=1\n", 5000)
	require.Equal(t, http.StatusNoContent, r.post("/write", strings.NewReader(small), nil).status)
	require.Equal(t, 5000, len(r.drain("x")), "the lines of a body that fits are stored")
}

func TestConfigInflightWriteBytes(t *testing.T) {
	c := DefaultConfig()
	require.NoError(t, c.Validate())
	c.MaxInflightWriteBytes = c.MaxBodyBytes
	require.ErrorContains(t, c.Validate(), "--http-max-inflight-write-bytes")
}

// delayedAppender is the real sequencer with the queue delay a test sets.
type delayedAppender struct {
	Appender
	delay atomic.Int64
}

func (d *delayedAppender) QueueDelay() time.Duration { return time.Duration(d.delay.Load()) }

// TestHTTPWriteOverloadRefused checks --http-write-max-delay's immediate
// test: while the sequencer's queue delay exceeds it, a write is answered
// 503 with
// Retry-After and the project's error, counted, without a byte of its
// body read or anything stored; at the bound and below, the same write
// goes through.
func TestHTTPWriteOverloadRefused(t *testing.T) {
	app := &delayedAppender{}
	r := newRigOpts(t, rigOptions{
		mod:  func(c *Config) { c.MaxWriteDelay = 500 * time.Millisecond },
		wrap: func(seq Appender) Appender { app.Appender = seq; return app },
	}, "cpu")
	body := "cpu v=1 1\ncpu v=2 2\n"
	wire := func() int { return metricValue(t, r.in.m.bytes.WithLabelValues(transportHTTP)) }

	app.delay.Store(int64(501 * time.Millisecond))
	for _, path := range []string{"/write", "/api/v2/write?bucket=b&org=o"} {
		requireUnavailable(t, r.post(path, strings.NewReader(body), nil), "--http-write-max-delay")
	}
	require.Equal(t, 2, metricValue(t, r.in.m.overloadRefused.WithLabelValues(causeStalled)))
	require.Zero(t, wire(), "no body byte read")
	require.Empty(t, r.drain("cpu"), "nothing stored")

	app.delay.Store(int64(500 * time.Millisecond))
	res := r.post("/write", strings.NewReader(body), nil)
	require.Equal(t, http.StatusNoContent, res.status, "body: %s", res.body)
	require.Len(t, r.drain("cpu"), 2)
	require.Equal(t, len(body), wire())
	require.Equal(t, 2, metricValue(t, r.in.m.overloadRefused.WithLabelValues(causeStalled)))
}

// TestHTTPWriteOverloadKeepsConnection: a write of a body up to 1 MiB
// refused while the server is overloaded is answered on a connection
// that stays open, so the client's next request reuses it instead of
// opening another (net/http closes a connection whose body over 256 KiB
// was left unread, and holds it half a second first). Nothing of the
// body is parsed or stored.
func TestHTTPWriteOverloadKeepsConnection(t *testing.T) {
	app := &delayedAppender{}
	r := newRigOpts(t, rigOptions{
		mod:  func(c *Config) { c.MaxWriteDelay = 500 * time.Millisecond },
		wrap: func(seq Appender) Appender { app.Appender = seq; return app },
	}, "cpu")
	var body strings.Builder
	for i := 0; body.Len() <= 300<<10; i++ {
		fmt.Fprintf(&body, "cpu,host=h%d usage_user=%d,usage_system=%d %d\n", i%1000, i, i, i+1)
	}
	require.Greater(t, body.Len(), 256<<10, "over what net/http drains by itself")

	app.delay.Store(int64(time.Second))
	var reused []bool
	for range 3 {
		req, err := http.NewRequest(http.MethodPost, r.srv.URL+"/write", strings.NewReader(body.String()))
		require.NoError(t, err)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(ci httptrace.GotConnInfo) { reused = append(reused, ci.Reused) },
		}))
		resp, err := r.srv.Client().Do(req)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		requireUnavailable(t, httpResult{status: resp.StatusCode, header: resp.Header, body: b}, "--http-write-max-delay")
	}
	require.Equal(t, []bool{false, true, true}, reused, "one connection for the three refusals")
	require.Equal(t, 3, metricValue(t, r.in.m.overloadRefused.WithLabelValues(causeStalled)))
	require.Empty(t, r.drain("cpu"), "nothing stored")
}

// TestHTTPWriteQueueTimeout checks --http-write-queue-timeout: a body
// that finds every parse slot (--http-write-concurrency) taken for that
// long, or whose wait is predicted past twice it, is answered 503 with
// Retry-After, counted, nothing of it stored; once a slot is free the
// same write goes through.
func TestHTTPWriteQueueTimeout(t *testing.T) {
	r := newRigOpts(t, rigOptions{mod: func(c *Config) {
		c.WriteConcurrency = 1
		c.WriteQueueTimeout = 20 * time.Millisecond
	}}, "cpu")
	body := "cpu v=1 1\ncpu v=2 2\n"
	taken, err := r.in.slots.acquire(context.Background(), false)
	require.NoError(t, err, "the only slot")
	res := r.post("/write", strings.NewReader(body), nil)
	requireUnavailable(t, res, "--http-write-queue-timeout")
	require.Contains(t, string(res.body), "no parse slot of 1 (--http-write-concurrency) came free within")
	require.Equal(t, 1, metricValue(t, r.in.m.queueRefused))
	require.Empty(t, r.drain("cpu"), "nothing stored")

	// Slots held an hour on average of late: the wait is predicted past
	// twice the timeout and the write refused unqueued, with its own
	// message. (The refusal above made the server count as overloaded
	// for a second; forgotten here, so that the queue timeout applies.)
	r.in.overload.lastRefused.Store(0)
	r.in.slots.hold.Store(int64(time.Hour))
	res = r.post("/write", strings.NewReader(body), nil)
	requireUnavailable(t, res, "--http-write-queue-timeout")
	require.Contains(t, string(res.body), "as predicted from the bodies ahead, within twice --http-write-queue-timeout=20ms")
	require.Equal(t, 2, metricValue(t, r.in.m.queueRefused))

	r.in.slots.release(taken)
	res = r.post("/write", strings.NewReader(body), nil)
	require.Equal(t, http.StatusNoContent, res.status, "body: %s", res.body)
	require.Len(t, r.drain("cpu"), 2)
	require.Equal(t, 2, metricValue(t, r.in.m.queueRefused))
}

// TestHTTPWriteOverloadQueueTimeout checks
// --http-write-overload-queue-timeout: while the server is refusing
// writes as overloaded, a body waits for a parse slot that long, not
// --http-write-queue-timeout (an hour here), and is answered 503 with
// Retry-After, counted, nothing stored.
func TestHTTPWriteOverloadQueueTimeout(t *testing.T) {
	r := newRigOpts(t, rigOptions{mod: func(c *Config) {
		c.WriteConcurrency = 1
		c.WriteQueueTimeout = time.Hour
		c.OverloadQueueTimeout = 20 * time.Millisecond
	}}, "cpu")
	taken, err := r.in.slots.acquire(context.Background(), false)
	require.NoError(t, err, "the only slot")
	r.in.overload.refused(time.Now())
	res := r.post("/write", strings.NewReader("cpu v=1 1\n"), nil)
	requireUnavailable(t, res, "--http-write-overload-queue-timeout")
	require.Contains(t, string(res.body), "came free within --http-write-overload-queue-timeout=20ms (writes are being refused as overloaded)")
	require.Equal(t, 1, metricValue(t, r.in.m.queueRefused))
	r.in.slots.release(taken)
	require.Empty(t, r.drain("cpu"), "nothing stored")
}

// TestSlowBodyHoldsNoParseSlot: a client that sends its body slowly
// (here: never finishes it) holds no parse slot, since a body is read
// before it waits for one; with a single slot another write still goes
// through at once.
func TestSlowBodyHoldsNoParseSlot(t *testing.T) {
	r := newRigOpts(t, rigOptions{mod: func(c *Config) {
		c.WriteConcurrency = 1
		c.WriteQueueTimeout = 20 * time.Millisecond
	}}, "cpu")
	pr, pw := io.Pipe()
	t.Cleanup(func() { _ = pw.CloseWithError(errors.New("test over")) })
	slow, err := http.NewRequest(http.MethodPost, r.srv.URL+"/write", pr)
	require.NoError(t, err)
	slow.ContentLength = 1 << 20
	go func() {
		if resp, err := r.srv.Client().Do(slow); err == nil {
			_ = resp.Body.Close()
		}
	}()
	_, err = pw.Write([]byte("cpu v=1 1\ncpu v="))
	require.NoError(t, err) // the server is reading the slow body now

	res := r.post("/write", strings.NewReader("cpu v=2 2\n"), nil)
	require.Equal(t, http.StatusNoContent, res.status, "body: %s", res.body)
	require.Zero(t, metricValue(t, r.in.m.queueRefused))
	require.Len(t, r.drain("cpu"), 1)
}

// TestParseSlotsOrder: writers waiting for a parse slot take it in the
// order they began to wait, and one whose client went away stops
// waiting with its context's error.
func TestParseSlotsOrder(t *testing.T) {
	s := newParseSlots(1, time.Hour, time.Hour)
	taken, err := s.acquire(context.Background(), false)
	require.NoError(t, err)
	const waiters = 5
	got := make(chan int, waiters)
	for i := range waiters {
		go func() {
			_, err := s.acquire(context.Background(), false)
			require.NoError(t, err)
			got <- i
		}()
		// The next waiter starts once this one waits (a send blocked
		// on the full channel shows as a goroutine in chan send).
		waitForBlockedSenders(t, i+1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() { _, err := s.acquire(ctx, false); gone <- err }()
	waitForBlockedSenders(t, waiters+1)
	cancel()
	require.ErrorIs(t, <-gone, context.Canceled)
	for want := range waiters {
		s.release(taken)
		require.Equal(t, want, <-got)
	}
	s.release(taken)
}

// TestParseSlotsPredictedWait: a body whose wait for a slot, predicted
// from the bodies ahead of it and the average hold, is longer than twice
// the queue timeout is refused at once (here the timeout is half an hour,
// so only the prediction can refuse it), while those predicted within it
// wait their turn; each release moves the average toward its own hold.
func TestParseSlotsPredictedWait(t *testing.T) {
	s := newParseSlots(1, 30*time.Minute, 30*time.Minute)
	s.hold.Store(int64(40 * time.Minute))
	taken, err := s.acquire(context.Background(), false)
	require.NoError(t, err)
	got := make(chan error, 2)
	for i := range 2 { // predicted 20 and 60 minutes
		go func() { _, err := s.acquire(context.Background(), false); got <- err }()
		waitForBlockedSenders(t, i+1)
	}
	_, err = s.acquire(context.Background(), false) // predicted 100 minutes
	require.Equal(t, &queueRefusal{predicted: true}, err)
	s.release(taken)
	require.NoError(t, <-got)
	require.Less(t, s.hold.Load(), int64(36*time.Minute), "an eighth of the way to a hold of microseconds")
	s.release(taken)
	require.NoError(t, <-got)
	s.release(taken)
}

// TestParseSlotsOverloaded: while overloaded a body waits at most the
// overload timeout, and is refused at once when its predicted wait is
// longer than that timeout itself, where a body of a server that keeps up
// waits its turn; once the server begins to count as overloaded
// (shorten), the bodies waiting already wait at most the overload
// timeout from their start.
func TestParseSlotsOverloaded(t *testing.T) {
	s := newParseSlots(1, 30*time.Minute, 20*time.Millisecond)
	taken, err := s.acquire(context.Background(), false)
	require.NoError(t, err)
	patient := make(chan error, 1)
	go func() { _, err := s.acquire(context.Background(), false); patient <- err }()
	waitForBlockedSenders(t, 1)
	_, err = s.acquire(context.Background(), true)
	require.Equal(t, &queueRefusal{overloaded: true}, err, "after 20 ms")
	select {
	case err := <-patient:
		t.Fatalf("the body of a server that keeps up stopped waiting: %v", err)
	default:
	}

	s.hold.Store(int64(time.Second)) // predicted: a second and a half
	_, err = s.acquire(context.Background(), true)
	require.Equal(t, &queueRefusal{predicted: true, overloaded: true}, err)

	// The server begins to count as overloaded while the patient body
	// waits: it has waited past the overload timeout, and is refused.
	s.hold.Store(0)
	s.shorten()
	require.Equal(t, &queueRefusal{overloaded: true}, <-patient)

	// A body that began to wait just now waits the overload timeout from
	// its start once shortened.
	began := time.Now()
	go func() { _, err := s.acquire(context.Background(), false); patient <- err }()
	waitForBlockedSenders(t, 1)
	s.shorten()
	require.Equal(t, &queueRefusal{overloaded: true}, <-patient)
	require.GreaterOrEqual(t, time.Since(began), 20*time.Millisecond)
	s.release(taken)
}

// waitForBlockedSenders waits until n goroutines wait in
// parseSlots.acquire.
func waitForBlockedSenders(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(testdeadline.Scale(10 * time.Second))
	buf := make([]byte, 1<<20)
	for {
		waiting := 0
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "[select") && strings.Contains(g, "ilp.(*parseSlots).acquire") {
				waiting++
			}
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d goroutines wait for a parse slot at the deadline", waiting, n)
		}
		runtime.Gosched()
	}
}

// requireUnavailable checks a 503 answer: Retry-After 1, the project's
// error with code unavailable, its message naming flag.
func requireUnavailable(t *testing.T, res httpResult, flag string) {
	t.Helper()
	require.Equal(t, http.StatusServiceUnavailable, res.status, "body: %s", res.body)
	retryAfter := []string{"1"} // --feed-submit-timeout rounded up
	if flag == "--http-write-max-delay" || flag == "--http-write-queue-timeout" || flag == "--http-write-overload-queue-timeout" {
		// Overloaded: 1 to 3 s at random, so that clients refused
		// together come back apart.
		retryAfter = []string{"1", "2", "3"}
	}
	require.Contains(t, retryAfter, res.header.Get("Retry-After"))
	var e httpError
	require.NoError(t, json.Unmarshal(res.body, &e))
	require.Equal(t, "unavailable", e.Code)
	require.Contains(t, e.Message, flag)
}

// TestStorageErrorLogLimited: a store that fails every write (a full
// disk) fails each HTTP write with 500, but logs at most one line a
// second, the next one carrying how many were suppressed.
func TestStorageErrorLogLimited(t *testing.T) {
	logs, logger := newLogRecorder()
	in, err := New(DefaultConfig(), &stuckAppender{err: errors.New("disk full")}, time.Minute, logger, nil)
	require.NoError(t, err)
	srv := httptest.NewServer(in.HandlerV1())
	t.Cleanup(srv.Close)
	const writes = 50
	start := time.Now()
	for range writes {
		resp, err := srv.Client().Post(srv.URL, "text/plain", strings.NewReader("cpu v=1 1\n"))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	}
	recs := logs.records(t, "write failed")
	require.NotEmpty(t, recs)
	require.LessOrEqual(t, len(recs), 1+int(time.Since(start)/time.Second), "one line a second at most")
	require.Less(t, len(recs), writes)
}
