package ilp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/klauspost/compress/gzip"

	"github.com/ingestd/ingestd/feed"
)

// InfluxDB v2 error codes, which the client libraries read.
const (
	codeInvalid       = "invalid"
	codeUnprocessable = "unprocessable entity"
	codeTooLarge      = "request too large"
	codeUnsupported   = "unsupported media type"
	codeUnavailable   = "unavailable"
	codeInternal      = "internal error"
	codeTimeout       = "request timeout"
)

// HandlerV1 returns the InfluxDB 1.x write handler (POST /write: db, rp,
// precision = ns|n|u|us|ms|s|m|h, u, p, consistency; db and rp do not
// namespace tables). A batch with bad lines stores the good ones and
// answers 400 "partial write: <first error> dropped=N".
func (in *Ingest) HandlerV1() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { in.serveWrite(w, r, true) })
}

// HandlerV2 returns the InfluxDB 2.x write handler (POST /api/v2/write:
// org, orgID, bucket, precision = ns|us|ms|s; org and bucket do not
// namespace tables). A batch with bad lines stores the good ones and
// answers 422 when some were stored, 400 when none were.
func (in *Ingest) HandlerV2() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { in.serveWrite(w, r, false) })
}

// writeError writes the one JSON error object every client reads:
// code and message (InfluxDB 2.x), error (1.x, Telegraf) and line.
func writeError(w http.ResponseWriter, status int, code, msg string, line int) {
	body := struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Error   string `json:"error"`
		Line    int    `json:"line,omitempty"`
	}{code, msg, msg, line}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// writeBodyTimeout answers a body cut off by the server's body deadline
// (set by the HTTP server that serves the handler); the connection is
// closed after it.
func writeBodyTimeout(w http.ResponseWriter) {
	writeError(w, http.StatusRequestTimeout, codeTimeout,
		"request body arrived too slowly (--http-body-timeout, --http-body-min-bytes-per-second); nothing was written", 0)
}

// Request bodies and gzip readers are reused: growing a fresh buffer to a
// body's size (and clearing each new allocation) cost a fifth of the
// server's CPU under load. The parser copies every string it keeps, so a
// body's buffer is free again once the body is parsed. Buffers wait in a
// bounded free list rather than a sync.Pool, which every garbage
// collection empties: at most pooledBodies buffers of at most
// maxPooledBodyBytes each (32 MiB in all) stay allocated between writes.
var (
	bodyBuffers = make(chan *bytes.Buffer, pooledBodies)
	gzipPool    sync.Pool // *gzip.Reader
)

const (
	pooledBodies = 8
	// maxPooledBodyBytes is the largest body buffer kept for reuse: a
	// larger one (a rare body near --max-body-bytes) is left to the
	// garbage collector.
	maxPooledBodyBytes = 4 << 20
)

func getBodyBuffer() *bytes.Buffer {
	select {
	case b := <-bodyBuffers:
		b.Reset()
		return b
	default:
		return new(bytes.Buffer)
	}
}

func putBodyBuffer(b *bytes.Buffer) {
	if b.Cap() > maxPooledBodyBytes {
		return
	}
	select {
	case bodyBuffers <- b:
	default:
	}
}

// parserPool holds idle Parsers of the HTTP handler, each with the points
// array of the last batch it parsed: a body parsed by a pooled Parser finds
// the series of the bodies before it known (their measurement and tag
// sections are not parsed again, a fifth of a 5,000-line TSBS body's
// parse), its field sets go into the slabs the earlier bodies' used
// (Parser.Reuse) and its points into an earlier batch's array, instead of
// fresh memory the kernel must clear first. At most pooledParsers wait,
// each holding at most its known-series bounds (maxKnownSeries,
// maxKnownSeriesBytes), maxReusedSlabs field slabs and maxPooledPoints
// points; a Parser whose batch may still be read (its write failed or was
// abandoned) is not pooled.
type parserPool chan *pooledParser

type pooledParser struct {
	p      *Parser
	points []feed.Point // empty, the array of the last batch parsed
}

const (
	pooledParsers   = pooledBodies
	maxPooledPoints = 16 << 10 // 1.5 MiB of points
)

// get returns an idle Parser, or a new one enforcing lim.
func (pp parserPool) get(newParser func() *Parser) *pooledParser {
	select {
	case x := <-pp:
		return x
	default:
		return &pooledParser{p: newParser()}
	}
}

// put makes x idle again, with b, the batch it parsed; call it only once
// nothing reads b any more (the sequencer answered it, or it was never
// submitted).
func (pp parserPool) put(x *pooledParser, b *feed.Batch) {
	x.p.Reuse()
	x.points = nil
	if cap(b.Points) <= maxPooledPoints {
		clear(b.Points)
		x.points = b.Points[:0]
	}
	select {
	case pp <- x:
	default:
		x.p.Release() // not kept: its caches' bytes go back
	}
}

// getGzipReader returns a pooled gzip reader reset to r, or a new one. The
// reader is returned even with an error (reading the header failed) so
// that the caller can put it back.
func getGzipReader(r io.Reader) (*gzip.Reader, error) {
	if zr, ok := gzipPool.Get().(*gzip.Reader); ok {
		return zr, zr.Reset(r)
	}
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, err
	}
	return zr, nil
}

// discardSmallBody reads and drops the body of a write refused unparsed
// when it declares at most overloadUnitBytes, so that its connection
// stays open for the client's next request. Left unread, net/http
// closes a connection whose body exceeds 256 KiB (a 1,000-line body of
// 10 fields does) after half a second in which it still counts against
// --http-max-conns-per-client: an overloaded server refusing a few
// hundred writes a second then refused the client's new connections,
// its tailing consumers' among them. Reading a body costs a copy, a
// hundredth of parsing it; a larger or undeclared one is left unread.
func discardSmallBody(r *http.Request) {
	if r.ContentLength > 0 && r.ContentLength <= overloadUnitBytes {
		_, _ = io.Copy(io.Discard, r.Body)
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (in *Ingest) serveWrite(w http.ResponseWriter, r *http.Request, v1 bool) {
	recv := in.now()
	prec, err := ParsePrecision(r.URL.Query().Get("precision"), v1)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeInvalid, err.Error(), 0)
		return
	}
	admitted, cause, delay := in.overload.admit(recv)
	if !admitted {
		in.m.overloadRefused.WithLabelValues(cause).Inc()
		discardSmallBody(r)
		w.Header().Set("Retry-After", overloadRetryAfter())
		writeError(w, http.StatusServiceUnavailable, codeUnavailable,
			fmt.Sprintf("overloaded: writes take %s or more in the server, over --http-write-max-delay=%s, and a share of them is refused until they are faster; nothing was written, retry later",
				delay.Round(time.Millisecond), in.cfg.MaxWriteDelay), 0)
		return
	}
	wire := &countingReader{r: r.Body}
	defer func() { in.m.bytes.WithLabelValues(transportHTTP).Add(float64(wire.n)) }()
	var body io.Reader = wire
	var zr *gzip.Reader // pooled: put back as soon as the body is read
	defer func() {
		if zr != nil {
			gzipPool.Put(zr)
		}
	}()
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
		if r.ContentLength > in.cfg.MaxBodyBytes {
			in.m.tooLarge.Inc()
			writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge,
				fmt.Sprintf("body of %d bytes exceeds --max-body-bytes=%d", r.ContentLength, in.cfg.MaxBodyBytes), 0)
			return
		}
	case "gzip", "x-gzip":
		var err error
		zr, err = getGzipReader(wire)
		if errors.Is(err, io.EOF) {
			w.WriteHeader(http.StatusNoContent) // an empty gzip body is an empty write
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			writeBodyTimeout(w)
			return
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, codeInvalid, "corrupt gzip body: "+err.Error(), 0)
			return
		}
		body = zr
	default:
		writeError(w, http.StatusUnsupportedMediaType, codeUnsupported,
			fmt.Sprintf("unsupported Content-Encoding %s: send identity or gzip", feed.QuoteInput(enc)), 0)
		return
	}
	// The buffer grows as bytes arrive, never by the declared
	// Content-Length: a client could declare 32 MiB and send nothing.
	buf := getBodyBuffer()
	defer func() {
		if buf != nil {
			putBodyBuffer(buf)
		}
	}()
	held, err := in.readBody(r.Context(), body, buf)
	defer in.release(held)
	if zr != nil {
		gzipPool.Put(zr)
		zr = nil
	}
	n := int64(buf.Len())
	if errors.Is(err, errInflightFull) {
		in.writeInflightFull(w)
		return
	}
	if errors.Is(err, context.Canceled) {
		return // the client went away while its write waited for room
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		writeBodyTimeout(w)
		return
	}
	if err != nil {
		msg := "read body: " + err.Error()
		if body != io.Reader(wire) {
			msg = "corrupt gzip body: " + err.Error()
		}
		writeError(w, http.StatusBadRequest, codeInvalid, msg+" (nothing was written)", 0)
		return
	}
	if n > in.cfg.MaxBodyBytes {
		in.m.tooLarge.Inc()
		writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge,
			fmt.Sprintf("body exceeds --max-body-bytes=%d (counted after decompression)", in.cfg.MaxBodyBytes), 0)
		return
	}
	// The parsed batch is larger than its body, and bodies of tiny lines
	// most of all (a 33 MB body of "x v=1" lines is 5.5 million points):
	// its estimate is held too, before the parse takes it.
	parsed := parsedBytes(buf.Bytes())
	if n+parsed > in.cfg.MaxInflightWriteBytes {
		in.m.tooLarge.Inc()
		writeError(w, http.StatusRequestEntityTooLarge, codeTooLarge,
			fmt.Sprintf("body of %d bytes parses to about %d bytes more (its lines and keys), over --http-max-inflight-write-bytes=%d together; send it in smaller bodies (nothing was written)",
				n, parsed, in.cfg.MaxInflightWriteBytes), 0)
		return
	}
	wctx, cancel := context.WithTimeout(r.Context(), in.submitTimeout)
	err = in.inflight.acquire(wctx, parsed, held > 0)
	cancel()
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away while its write waited for room
		}
		in.writeInflightFull(w)
		return
	}
	in.m.inflight.Add(float64(parsed))
	defer in.release(parsed)
	read := in.now()
	in.overload.begin(read, n)
	committed := false // reached the sequencer: its latency counts
	defer func() { in.overload.done(read, in.now(), committed, n) }()
	taken, err := in.slots.acquire(r.Context(), in.overload.refusing(read))
	if err != nil {
		if q := (*queueRefusal)(nil); errors.As(err, &q) {
			in.overload.refused(in.now())
			in.m.queueRefused.Inc()
			w.Header().Set("Retry-After", overloadRetryAfter())
			within := "came free within"
			if q.predicted {
				within = "would come free, as predicted from the bodies ahead, within"
			}
			timeout := fmt.Sprintf("--http-write-queue-timeout=%s", in.cfg.WriteQueueTimeout)
			switch {
			case q.overloaded:
				timeout = fmt.Sprintf("--http-write-overload-queue-timeout=%s (writes are being refused as overloaded)", in.slots.overloadTimeout)
			case q.predicted:
				timeout = "twice " + timeout
			}
			writeError(w, http.StatusServiceUnavailable, codeUnavailable,
				fmt.Sprintf("overloaded: no parse slot of %d (--http-write-concurrency) %s %s; nothing was written, retry later",
					cap(in.slots.c), within, timeout), 0)
		}
		return // else the client went away while its write waited
	}
	parser := in.parsers.get(in.newParser)
	batch := &feed.Batch{Points: parser.points}
	perrs, _ := parser.p.ParseAll(batch, TrimBOM(buf.Bytes()), 1, prec, recv.UnixNano())
	in.slots.release(taken)
	// Pooled again unless the sequencer may still read the batch.
	pool := true
	defer func() {
		if pool {
			in.parsers.put(parser, batch)
		}
	}()
	// The batch holds copies (the parser's arena), so the body goes back
	// now rather than while the write waits for its commit; its bytes stay
	// counted against MaxInflightWriteBytes until the answer, standing for
	// the parsed batch.
	putBodyBuffer(buf)
	buf = nil
	if in.auth.Request != nil {
		if g := in.auth.Request(r); g != nil {
			if err := checkTables(g, batch, r.RemoteAddr); err != nil {
				writeGrantError(w, err)
				return
			}
		}
	}
	var res feed.Result
	if len(batch.Points) > 0 {
		res, err = in.append(r.Context(), batch)
		committed = err == nil
		if err != nil {
			pool = false
			in.writeAppendError(w, err)
			return
		}
	}
	in.m.lines.WithLabelValues(transportHTTP).Add(float64(res.Accepted))
	dropped := len(perrs) + len(res.Rejected)
	if dropped == 0 {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	line, msg := in.firstError(transportHTTP, perrs, res.Rejected)
	switch {
	case v1:
		writeError(w, http.StatusBadRequest, codeInvalid, fmt.Sprintf("partial write: %s dropped=%d", msg, dropped), line)
	case res.Accepted > 0:
		writeError(w, http.StatusUnprocessableEntity, codeUnprocessable, fmt.Sprintf("partial write: %s dropped=%d", msg, dropped), line)
	default:
		writeError(w, http.StatusBadRequest, codeInvalid, fmt.Sprintf("%s dropped=%d", msg, dropped), line)
	}
}

// checkTables checks that g may write every table of batch (each distinct
// run of points once): one forbidden table refuses the whole request, so
// nothing is written (InfluxDB answers a write to a bucket the token may
// not write with 403 and writes nothing).
func checkTables(g Grant, batch *feed.Batch, remote string) error {
	last := ""
	for i := range batch.Points {
		t := batch.Points[i].Table
		if i > 0 && t == last {
			continue
		}
		if err := g.CheckWrite(t, remote); err != nil {
			return err
		}
		last = t
	}
	return nil
}

// writeGrantError answers a write refused by its grant: the error's own
// status and code when it has them, else 403 forbidden; nothing was
// written.
func writeGrantError(w http.ResponseWriter, err error) {
	status, code := http.StatusForbidden, "forbidden"
	var se interface {
		Status() int
		Code() string
	}
	if errors.As(err, &se) {
		status, code = se.Status(), se.Code()
	}
	writeError(w, status, code, err.Error()+"; nothing was written", 0)
}

// writeInflightFull answers a write that found no room under
// Config.MaxInflightWriteBytes within the submit timeout (503, counted).
func (in *Ingest) writeInflightFull(w http.ResponseWriter) {
	in.m.inflightRefused.Inc()
	w.Header().Set("Retry-After", retryAfter(in.submitTimeout))
	writeError(w, http.StatusServiceUnavailable, codeUnavailable,
		fmt.Sprintf("write bodies in flight hold --http-max-inflight-write-bytes=%d for %s (--feed-submit-timeout); nothing was written, retry later",
			in.cfg.MaxInflightWriteBytes, in.submitTimeout), 0)
}

// parsedBytes estimates what parsing body adds to it: twice a point for
// each line (the batch's slice grows by doubling, and a bad line's error
// takes as much) and a field or tag for each '=' (a string value's own
// '=' counts too: an estimate from above). The strings are copied into
// the parser's arena, which the body's own bytes stand for.
func parsedBytes(body []byte) int64 {
	lines := int64(bytes.Count(body, []byte{'\n'})) + 1
	keys := int64(bytes.Count(body, []byte{'='}))
	return lines*2*int64(unsafe.Sizeof(feed.Point{})) + keys*int64(unsafe.Sizeof(feed.PointField{}))
}

// bodyChunk is how many bytes of a write body are held against
// Config.MaxInflightWriteBytes before they are read.
const bodyChunk = 64 << 10

// errInflightFull marks a write whose body found no room under
// Config.MaxInflightWriteBytes within the submit timeout.
var errInflightFull = errors.New("ilp: write bodies in flight at --http-max-inflight-write-bytes")

// readBody reads body into buf, at most MaxBodyBytes+1 bytes (one more
// tells a body too large), holding each chunk against the in-flight bytes
// before reading it. When there is no room it waits as writeQuota allows,
// at most the submit timeout from the start in all, then returns
// errInflightFull. It
// returns what it holds (release it once the write is answered), the
// bytes read so far and nothing more.
func (in *Ingest) readBody(ctx context.Context, body io.Reader, buf *bytes.Buffer) (held int64, err error) {
	var deadline time.Time
	limit := in.cfg.MaxBodyBytes + 1
	for int64(buf.Len()) < limit {
		chunk := min(bodyChunk, limit-int64(buf.Len()))
		if deadline.IsZero() {
			deadline = time.Now().Add(in.submitTimeout)
		}
		wctx, cancel := context.WithDeadline(ctx, deadline)
		err := in.inflight.acquire(wctx, chunk, held > 0)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return held, ctx.Err()
			}
			return held, errInflightFull
		}
		held += chunk
		in.m.inflight.Add(float64(chunk))
		n, err := buf.ReadFrom(io.LimitReader(body, chunk))
		if n < chunk {
			in.release(chunk - n)
			held -= chunk - n
			return held, err // the body ended, or failed
		}
		if err != nil {
			return held, err
		}
	}
	return held, nil
}

// release gives back n bytes held by readBody.
func (in *Ingest) release(n int64) {
	if n > 0 {
		in.inflight.release(n)
		in.m.inflight.Sub(float64(n))
	}
}

// errBusy marks a write refused because the sequencer queue stayed full.
var errBusy = feed.ErrBusy

// append submits a batch, waiting at most submitTimeout for queue room, then
// waits for the commit.
func (in *Ingest) append(ctx context.Context, b *feed.Batch) (feed.Result, error) {
	return feed.AppendWithin(ctx, in.app, b, in.submitTimeout)
}

func (in *Ingest) writeAppendError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errBusy):
		w.Header().Set("Retry-After", retryAfter(in.submitTimeout))
		writeError(w, http.StatusServiceUnavailable, codeUnavailable,
			fmt.Sprintf("write queue full for %s (--feed-submit-timeout); retry later", in.submitTimeout), 0)
	case errors.Is(err, feed.ErrClosed):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "server is shutting down", 0)
	case errors.Is(err, feed.ErrUnavailable):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, err.Error(), 0)
	case errors.Is(err, context.Canceled):
		// The client went away; the batch may still commit.
	default:
		if ok, suppressed := in.storeLog.allow(time.Now()); ok {
			in.logger.Error("write failed", "err", err, "suppressed", suppressed)
		}
		writeError(w, http.StatusInternalServerError, codeInternal, "storage error: "+err.Error(), 0)
	}
}

// retryAfter is the Retry-After of a 503 after waiting d for queue room:
// d in whole seconds, rounded up, at least 1.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(max(1, int64((d+time.Second-1)/time.Second)), 10)
}

// firstError counts every rejection by reason and returns the first one's
// line and message.
func (in *Ingest) firstError(transport string, perrs []*ParseError, rejs []*feed.RejectError) (int, string) {
	type lineErr struct {
		line int
		msg  string
	}
	// Only the first is rendered: a body of millions of bad lines has as
	// many errors.
	first := lineErr{line: math.MaxInt}
	for _, e := range perrs {
		in.m.rejected.WithLabelValues(transport, e.Reason).Inc()
		if e.Line < first.line {
			first = lineErr{e.Line, e.Error()}
		}
	}
	for _, e := range rejs {
		in.m.rejected.WithLabelValues(transport, rejectReason(e)).Inc()
		if e.Line < first.line {
			first = lineErr{e.Line, e.Error()}
		}
	}
	return first.line, first.msg
}
