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

// tcpShutdownRead is how long a connection goes on reading at shutdown, so
// that lines its peer has already sent are committed too.
const tcpShutdownRead = 100 * time.Millisecond

// ServeTCP accepts newline-delimited ILP on ln until ctx ends (SPEC §3.2).
// Lines are handed to the sequencer at least every TCPFlushInterval or
// when TCPBatchLines or TCPBatchBytes accumulate; bad lines are dropped, counted and logged
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
	in     *Ingest
	c      net.Conn
	peer   string
	parser *Parser
	batch  *feed.Batch
	// batchBytes counts the bytes of the lines parsed into batch.
	batchBytes int
	pending    *feed.Pending
	flushAt    time.Time
}

func (in *Ingest) serveConn(srvCtx context.Context, c net.Conn) {
	in.m.conns.Inc()
	defer in.m.conns.Dec()
	defer func() { _ = c.Close() }()
	// Submits outlive ctx: shutdown commits what was read, and the
	// sequencer stops only after every connection has returned.
	ctx := context.WithoutCancel(srvCtx)
	tc := &tcpConn{in: in, c: c, peer: c.RemoteAddr().String(), parser: NewParser(in.cfg.Limits), batch: &feed.Batch{}}
	var (
		lr      = newLineReader(in.cfg.Limits.MaxLineBytes)
		drainBy time.Time // at shutdown: when to stop reading
	)
	tooLong := func(no int) {
		tc.reject(&ParseError{Line: no, Reason: ReasonLineTooLong, Err: errLineTooLong(in.cfg.Limits.MaxLineBytes)})
	}
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
		n, err := c.Read(lr.spare())
		in.m.bytes.WithLabelValues(transportTCP).Add(float64(n))
		now := in.now()
		// Hand every complete line to the parser; keep the partial one.
		lr.add(n, func(b []byte, no int) { tc.parse(b, no, now) }, tooLong)
		if len(tc.batch.Points) >= in.cfg.TCPBatchLines || tc.batchBytes >= in.cfg.TCPBatchBytes ||
			(len(tc.batch.Points) > 0 && !now.Before(tc.flushAt)) {
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

func (tc *tcpConn) parse(line []byte, lineNo int, now time.Time) {
	if len(tc.batch.Points) == 0 {
		tc.flushAt = now.Add(tc.in.cfg.TCPFlushInterval)
	}
	tc.batchBytes += len(line) + 1
	if perr := tc.parser.Parse(tc.batch, line, lineNo, Nanosecond, now.UnixNano()); perr != nil {
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
		tc.batchBytes = 0 // only bad lines, blank lines and comments
		return true
	}
	p, err := tc.in.app.Submit(ctx, tc.batch)
	if err != nil {
		tc.in.logger.Warn("tcp batch not committed", "peer", tc.peer, "lines", len(tc.batch.Points), "err", err)
		return false
	}
	tc.pending = p
	tc.batch, tc.batchBytes = &feed.Batch{}, 0
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
