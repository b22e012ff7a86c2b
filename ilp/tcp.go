package ilp

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/ingestd/ingestd/feed"
)

// tcpReadBytes is the size of one TCP read.
const tcpReadBytes = 64 << 10

// tcpShutdownRead is how long a connection goes on reading at shutdown, so
// that lines its peer has already sent are committed too.
const tcpShutdownRead = 100 * time.Millisecond

// ServeTCP accepts newline-delimited ILP on ln until ctx ends (SPEC §3.2).
// Lines are handed to the sequencer at least every TCPFlushInterval or
// when TCPBatchLines accumulate; bad lines are dropped, counted and logged
// (rate-limited, with peer and line number) and the connection stays open.
// While the sequencer is saturated a connection stops reading (TCP flow
// control). When ctx ends it closes ln, reads for tcpShutdownRead more
// what the peers have already sent, commits every complete line read and
// returns once every connection is closed.
func (in *Ingest) ServeTCP(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	var mu sync.Mutex // guards conns
	conns := map[net.Conn]struct{}{}
	stop := context.AfterFunc(ctx, func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for c := range conns {
			// Wake blocked reads; each connection then flushes and closes.
			_ = c.SetReadDeadline(time.Unix(1, 0))
		}
	})
	defer stop()
	var err error
	for {
		var c net.Conn
		c, err = ln.Accept()
		if err != nil {
			break
		}
		mu.Lock()
		if len(conns) >= in.cfg.TCPMaxConns {
			mu.Unlock()
			in.logger.Warn("tcp connection refused", "peer", c.RemoteAddr().String(), "max_conns", in.cfg.TCPMaxConns)
			_ = c.Close()
			continue
		}
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			in.serveConn(ctx, c)
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if ctx.Err() != nil && errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// tcpConn is one connection's reader state.
type tcpConn struct {
	in      *Ingest
	c       net.Conn
	peer    string
	parser  *Parser
	batch   *feed.Batch
	pending *feed.Pending
	line    int
	flushAt time.Time
}

func (in *Ingest) serveConn(srvCtx context.Context, c net.Conn) {
	in.m.conns.Inc()
	defer in.m.conns.Dec()
	defer func() { _ = c.Close() }()
	// Submits outlive ctx: shutdown commits what was read, and the
	// sequencer stops only after every connection has returned.
	ctx := context.WithoutCancel(srvCtx)
	tc := &tcpConn{in: in, c: c, peer: c.RemoteAddr().String(), parser: NewParser(in.cfg.Limits), batch: &feed.Batch{}, line: 1}
	var (
		sp      Splitter
		buf     = make([]byte, 0, tcpReadBytes)
		scanned int  // bytes of buf already given to sp
		skip    bool // discarding the rest of an over-long line
		first   = true
		drainBy time.Time // at shutdown: when to stop reading
	)
	for {
		deadline := time.Time{}
		reap := false // on timeout, wait for the batch in flight
		switch {
		case !drainBy.IsZero():
			deadline = drainBy
		case len(tc.batch.Points) > 0:
			deadline = tc.flushAt
		case tc.pending != nil:
			// Idle with a batch in flight: wake to count its outcome.
			deadline, reap = time.Now().Add(in.cfg.TCPFlushInterval), true
		}
		_ = c.SetReadDeadline(deadline)
		// After setting the deadline: ServeTCP's shutdown sets it too.
		if srvCtx.Err() != nil {
			if drainBy.IsZero() {
				// Shutting down: read what the peer has already sent.
				drainBy = time.Now().Add(tcpShutdownRead)
				continue
			}
			if !time.Now().Before(drainBy) {
				break
			}
		}
		if cap(buf)-len(buf) < tcpReadBytes/4 {
			nb := make([]byte, len(buf), max(tcpReadBytes, 2*len(buf)))
			copy(nb, buf)
			buf = nb
		}
		n, err := c.Read(buf[len(buf):cap(buf)])
		in.m.bytes.WithLabelValues(transportTCP).Add(float64(n))
		buf = buf[:len(buf)+n]
		if first {
			buf, first = TrimBOM(buf), false
		}
		now := in.now()
		// Hand every complete line to the parser.
		start := 0
		for {
			end := sp.Next(buf[scanned:])
			if end < 0 {
				scanned = len(buf)
				break
			}
			end += scanned
			lineBytes := buf[start:end]
			if skip {
				skip = false
			} else {
				tc.parse(lineBytes, now)
			}
			tc.line += 1 + countNewlines(lineBytes)
			start, scanned = end+1, end+1
		}
		// Keep the partial line; drop an over-long one's bytes as they come
		// (one byte more than the limit may be the \r before its \n).
		if len(buf)-start > in.cfg.Limits.MaxLineBytes+1 {
			if !skip {
				tc.reject(&ParseError{Line: tc.line, Reason: ReasonLineTooLong, Err: errLineTooLong(in.cfg.Limits.MaxLineBytes)})
				skip = true
			}
			start = len(buf)
		}
		rest := copy(buf, buf[start:])
		buf = buf[:rest]
		scanned -= start
		if len(tc.batch.Points) >= in.cfg.TCPBatchLines || (len(tc.batch.Points) > 0 && !now.Before(tc.flushAt)) {
			if !tc.flush(ctx) {
				return
			}
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) {
				if reap && !tc.wait(ctx) {
					return
				}
				continue
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				in.logger.Debug("tcp read ended", "peer", tc.peer, "err", err)
			}
			break // a partial line at EOF is dropped (SPEC §3.2)
		}
	}
	// Commit every complete line read, on EOF and on shutdown alike.
	tc.flush(ctx)
	tc.wait(ctx)
}

func errLineTooLong(limit int) error {
	return &lineTooLongError{limit}
}

type lineTooLongError struct{ limit int }

func (e *lineTooLongError) Error() string {
	return "line is longer than --max-line-bytes=" + itoa(e.limit)
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for n >= 10 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	i--
	b[i] = byte('0' + n)
	return string(b[i:])
}

func countNewlines(b []byte) int {
	n := 0
	for _, c := range b {
		if c == '\n' {
			n++
		}
	}
	return n
}

func (tc *tcpConn) parse(line []byte, now time.Time) {
	if len(tc.batch.Points) == 0 {
		tc.flushAt = now.Add(tc.in.cfg.TCPFlushInterval)
	}
	if perr := tc.parser.Parse(tc.batch, line, tc.line, Nanosecond, now.UnixNano()); perr != nil {
		tc.reject(perr)
	}
}

func (tc *tcpConn) reject(perr *ParseError) {
	tc.in.m.rejected.WithLabelValues(transportTCP, perr.Reason).Inc()
	tc.logReject(perr.Line, perr.Reason, perr)
}

func (tc *tcpConn) logReject(line int, reason string, err error) {
	if ok, suppressed := tc.in.logLimit.allow(tc.in.now()); ok {
		tc.in.logger.Warn("ilp line rejected", "peer", tc.peer, "line", line, "reason", reason, "err", err, "suppressed", suppressed)
	}
}

// flush waits for the previous batch (at most one is in flight per
// connection, so memory stays bounded) and submits the current one.
// Submit blocks while the sequencer is saturated, which stops this
// connection's reads. It reports false when the sequencer has stopped.
func (tc *tcpConn) flush(ctx context.Context) bool {
	if !tc.wait(ctx) {
		return false
	}
	if len(tc.batch.Points) == 0 {
		return true
	}
	p, err := tc.in.app.Submit(ctx, tc.batch)
	if err != nil {
		tc.in.logger.Warn("tcp batch not committed", "peer", tc.peer, "lines", len(tc.batch.Points), "err", err)
		return false
	}
	tc.pending = p
	tc.batch = &feed.Batch{}
	return true
}

func (tc *tcpConn) wait(ctx context.Context) bool {
	if tc.pending == nil {
		return true
	}
	res, err := tc.pending.Wait(ctx)
	tc.pending = nil
	if err != nil {
		tc.in.logger.Error("tcp batch commit failed", "peer", tc.peer, "err", err)
		return false
	}
	tc.in.m.lines.WithLabelValues(transportTCP).Add(float64(res.Accepted))
	for _, r := range res.Rejected {
		reason := rejectReason(r)
		tc.in.m.rejected.WithLabelValues(transportTCP, reason).Inc()
		tc.logReject(r.Line, reason, r)
	}
	return true
}
