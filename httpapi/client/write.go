package client

import (
	"bytes"
	"context"
	"net/http"
	"net/url"

	"github.com/klauspost/compress/gzip"
)

// WriteOptions says how Write sends a body of line protocol.
type WriteOptions struct {
	// Path is the write route: "/write" (InfluxDB 1.x, the default when
	// empty) or "/api/v2/write" (2.x), or a target's own path (any
	// InfluxDB-compatible server).
	Path string
	// Query adds parameters to the route (db, rp, bucket, org …; ingestd
	// accepts and ignores them: one namespace per server).
	Query url.Values
	// Precision is the unit of the body's timestamps: n (or ns, the
	// default when empty), u (us), ms, s, as InfluxDB reads it; 1.x's h and
	// m are accepted by /write too.
	Precision string
	// Gzip compresses the body and sends Content-Encoding: gzip.
	Gzip bool
}

// Write POSTs body, lines of ILP, and returns nil once the server
// acknowledged it (204: every line is durable, docs/contract.md#durable-writes). A body with bad
// lines is an *Error with Code CodeWriteInvalid (400) or CodeWritePartial
// (422, /api/v2/write with some lines stored) and Line the first bad line;
// the good lines of such a body are stored. 503 (ErrUnavailable) asks for
// a retry after Error.RetryAfter seconds. An empty body sends nothing.
func (c *Client) Write(ctx context.Context, body []byte, o WriteOptions) error {
	if len(body) == 0 {
		return nil
	}
	path := o.Path
	if path == "" {
		path = "/write"
	}
	q := url.Values{}
	for k, v := range o.Query {
		q[k] = v
	}
	if o.Precision != "" {
		q.Set("precision", o.Precision)
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	hdr := http.Header{"Content-Type": {"text/plain; charset=utf-8"}}
	if o.Gzip {
		var buf bytes.Buffer
		zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		if err != nil {
			return err
		}
		if _, err := zw.Write(body); err != nil {
			return err
		}
		if err := zw.Close(); err != nil {
			return err
		}
		body = buf.Bytes()
		hdr.Set("Content-Encoding", "gzip")
	}
	_, err := c.Do(ctx, http.MethodPost, path, hdr, body)
	return err
}
