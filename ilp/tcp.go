package ilp

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ingestd/ingestd/feed"
)

// tcpShutdownRead is how long a connection goes on reading at shutdown or
// when it is evicted, so that lines its peer has already sent are
// committed too.
const tcpShutdownRead = 100 * time.Millisecond

// Backoff of the accept loop after a failed accept (as net/http's Serve):
// from acceptBackoffMin, doubling, at most acceptBackoffMax.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// retryableAccept reports whether a failed accept may succeed later: out
// of file descriptors (EMFILE, ENFILE) or kernel memory, or a connection
// reset before it was accepted.
func retryableAccept(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// nextBackoff is the wait after one more failed accept in a row; d is the
// previous wait (0 after a success).
func nextBackoff(d time.Duration) time.Duration {
	if d == 0 {
		return acceptBackoffMin
	}
	return min(2*d, acceptBackoffMax)
}

// tcpSlot is one accepted connection as the accept loop sees it.
type tcpSlot struct {
	c    net.Conn
	host string // the peer's IP address (peerHost)
	// lastRead is when the connection last delivered bytes (or was
	// accepted), lastLine when it last completed a line (or was
	// accepted), in Unix nanoseconds.
	lastRead, lastLine atomic.Int64
	// evicted is set (once) when the accept loop closes the connection to
	// make room; serveConn then reads for tcpShutdownRead and closes.
	evicted atomic.Bool
}

// peerHost is addr's IP address, or the whole address when it has no
// port (a listener of another kind).
func peerHost(addr net.Addr) string {
	if addr == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return host
}

// admit runs Auth.Conn on a new connection: its grant, and whether it may
// stay open. A grant's end wakes the connection's read (wake); stop that
// watch when the connection ends.
func (in *Ingest) admit(ctx context.Context, c net.Conn) (g Grant, ok bool, stop func()) {
	stop = func() {}
	if in.auth.Conn == nil {
		return nil, true, stop
	}
	g, err := in.auth.Conn(ctx, c)
	if err != nil {
		in.m.closed.WithLabelValues(closedRefused).Inc()
		if ok, suppressed := in.acceptLog.allow(time.Now()); ok {
			in.logger.Warn("tcp connection refused", "peer", c.RemoteAddr().String(), "err", err, "suppressed", suppressed)
		}
		return nil, false, stop
	}
	if g == nil {
		return nil, true, stop
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-g.Done():
			_ = c.SetReadDeadline(time.Unix(1, 0))
		case <-done:
		}
	}()
	return g, true, func() { close(done) }
}

// ServeTCP accepts newline-delimited ILP on ln until ctx ends (docs/contract.md#tcp-writes).
// Lines are handed to the sequencer at least every TCPFlushInterval or
// when TCPBatchLines or TCPBatchBytes accumulate; bad lines are dropped, counted and logged
// (rate-limited, with peer and line number) and the connection stays open.
// While the sequencer is saturated a connection stops reading (TCP flow
// control). A connection that sends nothing for TCPIdleTimeout is closed.
// At TCPMaxConns open connections a new one is accepted and the
// one of the peer address holding the most connections that has gone
// longest without a complete line is evicted: like a connection at shutdown it reads for
// tcpShutdownRead more what its peer has sent, commits every complete line
// and closes. A failed accept that may succeed later (EMFILE, ENFILE) is
// retried after a backoff of 5 ms doubling up to 1 s. When ctx ends it
// closes ln, lets every connection read what the peers have already sent
// for tcpShutdownRead, commits every complete line read and returns once
// every connection is closed. It returns nil after ctx ends, else the
// listener's error.
func (in *Ingest) ServeTCP(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	var mu sync.Mutex // guards conns and live
	conns := map[*tcpSlot]struct{}{}
	live := 0 // connections in conns not evicted
	stop := context.AfterFunc(ctx, func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for s := range conns {
			// Wake blocked reads; each connection then flushes and closes.
			_ = s.c.SetReadDeadline(time.Unix(1, 0))
		}
	})
	defer stop()
	var (
		err   error
		delay time.Duration
	)
	for {
		var c net.Conn
		c, err = ln.Accept()
		if err != nil {
			if ctx.Err() != nil || !retryableAccept(err) {
				break
			}
			in.m.acceptErrors.Inc()
			delay = nextBackoff(delay)
			if ok, suppressed := in.acceptLog.allow(time.Now()); ok {
				in.logger.Warn("tcp accept failed; retrying", "err", err, "retry_in", delay, "suppressed", suppressed)
			}
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			continue
		}
		delay = 0
		s := &tcpSlot{c: c, host: peerHost(c.RemoteAddr())}
		s.lastRead.Store(time.Now().UnixNano())
		s.lastLine.Store(s.lastRead.Load())
		mu.Lock()
		if live >= in.cfg.TCPMaxConns {
			in.evictLocked(conns)
			live--
		}
		conns[s] = struct{}{}
		live++
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			in.serveConn(ctx, s)
			mu.Lock()
			delete(conns, s)
			if !s.evicted.Load() {
				live--
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if ctx.Err() != nil && errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// evictLocked closes, among the connections of conns not already evicted
// (there is one: the caller found as many as the cap), the one of the
// peer address holding the most of them that has gone longest without
// completing a line. Picking the connection that had gone longest without
// a byte evicted the honest writer that sends a line every few seconds,
// over and over, while other connections (from one address or from a
// thousand) were kept busy with a byte each: the address holding the most
// connections gives way first, and bytes that never make a line do not
// keep a connection. ServeTCP's mu must be held.
func (in *Ingest) evictLocked(conns map[*tcpSlot]struct{}) {
	held := map[string]int{}
	for s := range conns {
		if !s.evicted.Load() {
			held[s.host]++
		}
	}
	var victim *tcpSlot
	for s := range conns {
		if s.evicted.Load() {
			continue
		}
		if victim == nil || held[s.host] > held[victim.host] ||
			held[s.host] == held[victim.host] && s.lastLine.Load() < victim.lastLine.Load() {
			victim = s
		}
	}
	victim.evicted.Store(true)
	// Wake its read; serveConn sees evicted after setting its own deadline.
	_ = victim.c.SetReadDeadline(time.Unix(1, 0))
	in.m.closed.WithLabelValues(closedEvicted).Inc()
	idle := time.Since(time.Unix(0, victim.lastLine.Load()))
	if ok, suppressed := in.acceptLog.allow(time.Now()); ok {
		in.logger.Warn("tcp connection evicted to make room", "peer", victim.c.RemoteAddr().String(),
			"since_last_line", idle, "max_conns", in.cfg.TCPMaxConns, "suppressed", suppressed)
	}
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
	// grant limits the tables written (nil: none).
	grant Grant
	// ctx is the connection's context for its submits and waits (it
	// outlives the server's: shutdown commits what was read).
	ctx context.Context
	// filling are the bytes taken from the TCP budget (tcpBudget) for
	// the batch being filled, credit the part of them no line uses yet;
	// flying those of the batch in flight, given back once it is
	// committed. failed is set when the sequencer stopped taking batches.
	filling, credit, flying int64
	failed                  bool
}

func (in *Ingest) serveConn(srvCtx context.Context, s *tcpSlot) {
	c := s.c
	in.m.conns.Inc()
	defer in.m.conns.Dec()
	defer func() { _ = c.Close() }()
	// Submits outlive ctx: shutdown commits what was read, and the
	// sequencer stops only after every connection has returned.
	ctx := context.WithoutCancel(srvCtx)
	grant, ok, stopWatch := in.admit(srvCtx, c)
	defer stopWatch()
	if !ok {
		return
	}
	var ended <-chan struct{} // nil (never ready) without a grant
	if grant != nil {
		ended = grant.Done()
	}
	tc := &tcpConn{in: in, c: c, peer: c.RemoteAddr().String(), parser: in.newParser(), batch: &feed.Batch{}, grant: grant, ctx: ctx}
	defer tc.parser.Release()
	var (
		lr      = newLineReader(in.cfg.Limits.MaxLineBytes)
		drainBy time.Time // at shutdown or eviction: when to stop reading
	)
	lr.room = func(delta int64) bool {
		if delta < 0 {
			in.tcpBudget.giveLine(-delta)
			return true
		}
		return in.tcpBudget.tryLine(delta)
	}
	defer func() {
		lr.release()
		in.tcpBudget.give(tc.filling + tc.flying)
	}()
	tooLong := func(no int) {
		tc.reject(&ParseError{Line: no, Reason: ReasonLineTooLong, Err: errLineTooLong(in.cfg.Limits.MaxLineBytes)})
	}
	for {
		deadline := time.Time{}
		reap := false // on timeout, wait for the batch in flight
		idle := false // on timeout, close if idle for TCPIdleTimeout
		switch {
		case !drainBy.IsZero():
			deadline = drainBy
		case len(tc.batch.Points) > 0:
			deadline = tc.flushAt
		case tc.pending != nil:
			// Idle with a batch in flight: wake to count its outcome.
			deadline, reap = time.Now().Add(in.cfg.TCPFlushInterval), true
		default:
			deadline, idle = time.Unix(0, s.lastRead.Load()).Add(in.cfg.TCPIdleTimeout), true
		}
		_ = c.SetReadDeadline(deadline)
		// After setting the deadline: shutdown, eviction and a grant's
		// end set it too.
		select {
		case <-ended:
			// Lines read from now on are refused by the grant anyway.
			in.m.closed.WithLabelValues(closedRevoked).Inc()
			if ok, suppressed := in.acceptLog.allow(time.Now()); ok {
				in.logger.Info("tcp connection closed: its token was revoked or changed", "peer", tc.peer, "suppressed", suppressed)
			}
			tc.flush(ctx)
			tc.wait(ctx)
			return
		default:
		}
		if srvCtx.Err() != nil || s.evicted.Load() {
			if drainBy.IsZero() {
				// Read what the peer has already sent.
				drainBy = time.Now().Add(tcpShutdownRead)
				continue
			}
			if !time.Now().Before(drainBy) {
				break
			}
		}
		n, err := c.Read(lr.spare())
		if n > 0 {
			s.lastRead.Store(time.Now().UnixNano())
		}
		in.m.bytes.WithLabelValues(transportTCP).Add(float64(n))
		now := in.now()
		// Hand every complete line to the parser; keep the partial one.
		before := lr.line
		lr.add(n, func(b []byte, no int) { tc.parse(b, no, now) }, tooLong)
		if lr.line > before {
			s.lastLine.Store(time.Now().UnixNano())
		}
		if tc.failed {
			return
		}
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
				if idle && n == 0 && !time.Now().Before(deadline) && drainBy.IsZero() && srvCtx.Err() == nil && !s.evicted.Load() {
					in.m.closed.WithLabelValues(closedIdleTimeout).Inc()
					if ok, suppressed := in.acceptLog.allow(time.Now()); ok {
						in.logger.Debug("tcp connection idle; closed", "peer", tc.peer, "idle_timeout", in.cfg.TCPIdleTimeout, "suppressed", suppressed)
					}
					break // a partial line is dropped, as at EOF
				}
				continue
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				if ok, suppressed := in.acceptLog.allow(time.Now()); ok {
					in.logger.Debug("tcp read ended", "peer", tc.peer, "err", err, "suppressed", suppressed)
				}
			}
			break // a partial line at EOF is dropped (docs/contract.md#tcp-writes)
		}
	}
	// Commit every complete line read, on EOF, shutdown, eviction and
	// idle timeout alike.
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
	if tc.failed || !tc.reserve(int64(len(line))+1) {
		return
	}
	if len(tc.batch.Points) == 0 {
		tc.flushAt = now.Add(tc.in.cfg.TCPFlushInterval)
	}
	tc.batchBytes += len(line) + 1
	n := len(tc.batch.Points)
	if perr := tc.parser.Parse(tc.batch, line, lineNo, Nanosecond, now.UnixNano()); perr != nil {
		tc.reject(perr)
		return
	}
	if tc.grant == nil || len(tc.batch.Points) == n {
		return
	}
	if err := tc.grant.CheckWrite(tc.batch.Points[n].Table, tc.peer); err != nil {
		tc.batch.Points = tc.batch.Points[:n]
		tc.in.m.rejected.WithLabelValues(transportTCP, ReasonForbidden).Inc()
		tc.logReject(lineNo, ReasonForbidden, err)
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

// tcpBudgetChunk is how much of the TCP budget a connection takes at a
// time for the lines of its batch.
const tcpBudgetChunk = 64 << 10

// reserve takes room in the TCP budget for a line of n bytes about to be
// parsed into the batch. When the budget is full it first submits its
// batch and waits for it, giving back what it held, then waits for room
// (its socket unread meanwhile). It reports false when the sequencer
// stopped (failed is set).
func (tc *tcpConn) reserve(n int64) bool {
	if tc.credit >= n {
		tc.credit -= n
		return true
	}
	b := tc.in.tcpBudget
	chunk := max(n, tcpBudgetChunk)
	if !b.tryBatch(chunk) {
		if !tc.flush(tc.ctx) || !tc.wait(tc.ctx) {
			tc.failed = true
			return false
		}
		if err := b.takeBatch(tc.ctx, chunk); err != nil {
			tc.failed = true
			return false
		}
	}
	tc.filling += chunk
	tc.credit += chunk - n
	return true
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
		tc.in.tcpBudget.give(tc.filling)
		tc.filling, tc.credit = 0, 0
		return true
	}
	p, err := tc.in.app.Submit(ctx, tc.batch)
	if err != nil {
		if ok, suppressed := tc.in.storeLog.allow(time.Now()); ok {
			tc.in.logger.Warn("tcp batch not committed", "peer", tc.peer, "lines", len(tc.batch.Points), "err", err, "suppressed", suppressed)
		}
		return false
	}
	tc.pending = p
	tc.parser.Detach() // the batch's memory goes with it once committed
	tc.batch, tc.batchBytes = &feed.Batch{}, 0
	tc.flying, tc.filling, tc.credit = tc.filling, 0, 0
	return true
}

func (tc *tcpConn) wait(ctx context.Context) bool {
	if tc.pending == nil {
		return true
	}
	res, err := tc.pending.Wait(ctx)
	tc.pending = nil
	tc.in.tcpBudget.give(tc.flying)
	tc.flying = 0
	if err != nil {
		if ok, suppressed := tc.in.storeLog.allow(time.Now()); ok {
			tc.in.logger.Error("tcp batch commit failed", "peer", tc.peer, "err", err, "suppressed", suppressed)
		}
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
