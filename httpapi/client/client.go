package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/ingestd/ingestd/httpapi/wire"
)

// Client talks to one ingestd over HTTP. It is safe for concurrent use.
type Client struct {
	base    string // scheme://host[:port][/prefix], no trailing slash
	hc      *http.Client
	token   string
	strict  bool
	maxBody int64 // the most bytes of a 2xx answer's body read
}

// DefaultMaxBodyBytes is the default of WithMaxBodyBytes: the largest
// 2xx answer body the client reads, 64 MiB. The largest page a server
// with the default --drain-max-page-bytes (16 MiB) sends is those 16 MiB
// of rows plus the one row that crosses them (a page holds at least one
// row) and its envelope; a row of a line of the default --max-line-bytes
// (1 MiB) is at most 6 MiB as JSON (a control byte of a string becomes
// \u00XX), so four times the page limit leaves room for it. A client of
// a server with a larger --drain-max-page-bytes raises it to match
// (docs/security.md#client-limits).
const DefaultMaxBodyBytes = 64 << 20

// ErrBodyTooLarge is wrapped by the *ProtocolError of an answer whose
// body is longer than the client's WithMaxBodyBytes (announced by its
// Content-Length, or found while reading it): the answer is not read
// further and no memory is reserved for it.
var ErrBodyTooLarge = errors.New("answer body larger than the client's limit")

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends every request through hc (TLS roots, timeouts,
// connection pool); http.DefaultClient when not given. A long-poll drain
// holds its request up to DrainRequest.Wait, so hc's Timeout must exceed
// the longest wait used.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithMaxBodyBytes bounds the body of a 2xx answer the client reads, in
// bytes (DefaultMaxBodyBytes when not given or n < 1): a longer one ends
// the call with a *ProtocolError wrapping ErrBodyTooLarge. The bound is
// what a call holds in memory whatever the server sends; Content-Length
// is only compared with it, never used to size a buffer.
func WithMaxBodyBytes(n int64) Option {
	return func(c *Client) {
		if n > 0 {
			c.maxBody = n
		}
	}
}

// WithToken sends token as "Authorization: Token <token>" (InfluxDB 2.x's
// form, which ingestd's --auth-file takes) on every request; empty sends
// none. The token is never part of an error.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithStrictDecoding makes every JSON answer decode strictly: a field
// api.yaml does not list, or data after the JSON value, is a
// *ProtocolError. Conformance tests use it; a consumer that should
// survive a newer server leaves it off.
func WithStrictDecoding() Option { return func(c *Client) { c.strict = true } }

// New returns a client of the ingestd at baseURL ("http://localhost:8086";
// a path prefix is kept for servers behind a reverse proxy). It fails when
// baseURL is not an absolute http or https URL.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("client: base URL must be http(s)://host[:port][/path], got %q", baseURL)
	}
	c := &Client{base: strings.TrimSuffix(u.String(), "/"), hc: http.DefaultClient, maxBody: DefaultMaxBodyBytes}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// BaseURL returns the URL the client was made with, without a trailing
// slash.
func (c *Client) BaseURL() string { return c.base }

// Response is a fully read 2xx answer.
type Response struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Header holds the answer's headers.
	Header http.Header
	// Body is the whole body.
	Body []byte
}

// Do sends one request to path (with its query, "/api/v1/tables") and
// returns the answer when it is 2xx, an *Error otherwise. hdr (may be
// nil) adds headers; body may be nil. It is the escape hatch for routes
// without a method here (/query, /api/v1/sql, /metrics).
func (c *Client) Do(ctx context.Context, method, path string, hdr http.Header, body []byte) (*Response, error) {
	r := &Response{}
	var buf []byte
	resp, err := c.send(ctx, method, path, hdr, body, &buf)
	if err != nil {
		return nil, err
	}
	r.StatusCode, r.Header, r.Body = resp.StatusCode, resp.Header, buf
	return r, nil
}

// send sends one request and reads a 2xx answer's body into *buf
// (emptied first; its capacity is reused), at most c.maxBody bytes of it:
// a longer body (or a Content-Length above it) is a *ProtocolError
// wrapping ErrBodyTooLarge. The buffer grows with the bytes that arrive
// (readBody), never to a size the server announces. A non-2xx answer is
// returned as *Error.
func (c *Client) send(ctx context.Context, method, path string, hdr http.Header, body []byte, buf *[]byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("ingestd: %s %s: %w", method, opPath(path), err)
	}
	for k, vs := range hdr {
		req.Header[k] = append(req.Header[k], vs...)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Token "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ingestd: %s %s: %w", method, opPath(path), stripURL(err))
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
		return nil, newError(resp, b)
	}
	*buf = (*buf)[:0]
	op := method + " " + opPath(path)
	if resp.ContentLength > c.maxBody {
		return nil, &ProtocolError{Op: op, Err: fmt.Errorf("%w: Content-Length %d, limit %d bytes", ErrBodyTooLarge, resp.ContentLength, c.maxBody)}
	}
	b, err := readBody(*buf, resp.Body, c.maxBody)
	*buf = b[:min(len(b), int(c.maxBody))]
	if int64(len(b)) > c.maxBody {
		return nil, &ProtocolError{Op: op, Err: fmt.Errorf("%w: more than %d bytes", ErrBodyTooLarge, c.maxBody)}
	}
	if err != nil {
		return nil, fmt.Errorf("ingestd: %s: read answer: %w", op, err)
	}
	return resp, nil
}

// minBodyBuf is the first capacity readBody gives an empty buffer.
const minBodyBuf = 4 << 10

// readBody reads r into b[:0] until EOF or limit+1 bytes, whichever comes
// first, and returns the bytes read (more than limit: the body is longer).
// The buffer doubles as bytes arrive, never past limit+1 bytes: a body
// takes at most about one and a half times the limit while it is read.
func readBody(b []byte, r io.Reader, limit int64) ([]byte, error) {
	b = b[:0]
	for {
		if len(b) == cap(b) {
			if int64(len(b)) > limit {
				return b, nil
			}
			nb := make([]byte, len(b), min(int64(max(2*cap(b), minBodyBuf)), limit+1))
			copy(nb, b)
			b = nb
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// opPath is path without its query, for messages: a query may hold a
// consumer name or a token (InfluxDB 1.x's p=).
func opPath(path string) string {
	p, _, _ := strings.Cut(path, "?")
	return p
}

// stripURL drops the URL from a *url.Error (it may carry a token in p=).
func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// newError builds the *Error of a non-2xx answer with body b.
func newError(resp *http.Response, b []byte) *Error {
	e := &Error{StatusCode: resp.StatusCode}
	if s := resp.Header.Get("Retry-After"); s != "" {
		e.RetryAfter, _ = strconv.Atoi(s)
	}
	var body wire.ErrorBody
	if json.Unmarshal(b, &body) != nil || (body.Code == "" && body.Message == "" && body.Error == "") {
		e.Message = clip(b)
		return e
	}
	e.Code, e.Message, e.Line, e.Column = body.Code, body.Message, body.Line, body.Column
	if e.Message == "" {
		e.Message = body.Error
	}
	if body.Epoch != nil && body.Seq != nil && body.Watermark != nil {
		e.HasState, e.Epoch, e.Seq, e.Watermark = true, *body.Epoch, *body.Seq, *body.Watermark
	}
	if body.Horizon != nil {
		e.Horizon = *body.Horizon
	}
	return e
}

// clip returns b trimmed, cut to 300 bytes.
func clip(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// decode unmarshals a JSON answer of op into v (strictly with
// WithStrictDecoding).
func (c *Client) decode(op string, b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if c.strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return &ProtocolError{Op: op, Err: fmt.Errorf("%w: %s", err, clip(b))}
	}
	if c.strict {
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return &ProtocolError{Op: op, Err: fmt.Errorf("data after the JSON value: %s", clip(b))}
		}
	}
	return nil
}

// callJSON sends reqBody (nil: none) as JSON with method to path and
// decodes the JSON answer into v (nil: the answer is not read).
func (c *Client) callJSON(ctx context.Context, method, path string, reqBody any, v any) error {
	var hdr http.Header
	var body []byte
	if reqBody != nil {
		var err error
		if body, err = json.Marshal(reqBody); err != nil {
			return err
		}
		hdr = http.Header{"Content-Type": {"application/json"}}
	}
	r, err := c.Do(ctx, method, path, hdr, body)
	if err != nil {
		return err
	}
	if v == nil {
		return nil
	}
	return c.decode(method+" "+opPath(path), r.Body, v)
}
