package ilp

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/store/testdeadline"
)

// tcpLine is line n of table cpu ("cpu v=<n> <n>") and its drained row.
func tcpLine(n int) string { return "cpu v=" + itoa(n) + " " + itoa(n) + "\n" }

func tcpRow(n int) row { return row{"time": int64(n), "v": float64(n)} }

func tcpRows(ns ...int) []row {
	rows := make([]row, len(ns))
	for i, n := range ns {
		rows[i] = tcpRow(n)
	}
	return rows
}

func TestTCP(t *testing.T) {
	long := "cpu,host=" + strings.Repeat("h", 100) + " v=9 9\n"
	tests := []struct {
		name string
		mod  func(*Config)
		run  func(t *testing.T, r *rig)
	}{
		{
			name: "lines written in one go",
			run: func(t *testing.T, r *rig) {
				c := r.dial()
				_, err := io.WriteString(c, tcpLine(1)+"\n# comment\n"+tcpLine(2)+tcpLine(3))
				require.NoError(t, err)
				r.waitRows("cpu", tcpRows(1, 2, 3))
			},
		},
		{
			name: "line split across two writes is stored once",
			run: func(t *testing.T, r *rig) {
				c := r.dial()
				r.send(c, tcpLine(1)+"cpu v=", "2 2\n")
				r.waitRows("cpu", tcpRows(1, 2))
				r.stopTCP()
				require.Equal(t, tcpRows(1, 2), r.drain("cpu"))
			},
		},
		{
			name: "line split inside a multi-byte character",
			run: func(t *testing.T, r *rig) {
				c := r.dial()
				line := "cpu,host=h\u00e9 s=\"\u20ac\n\U0001F600\" 1\n"
				i := strings.Index(line, "\u00e9") + 1
				j := strings.Index(line, "\u20ac") + 2
				k := strings.Index(line, "\U0001F600") + 3
				r.send(c, line[:i], line[i:j], line[j:k], line[k:])
				r.waitRows("cpu", []row{{"time": int64(1), "host": "h\u00e9", "s": "\u20ac\n\U0001F600"}})
			},
		},
		{
			name: "raw newline in a string split across writes",
			run: func(t *testing.T, r *rig) {
				c := r.dial()
				r.send(c, "cpu s=\"a\n", "b\" 1\n"+tcpLine(2))
				r.waitRows("cpu", []row{{"time": int64(1), "s": "a\nb"}, {"time": int64(2), "v": 2.0}})
			},
		},
		{
			name: "connection closed mid-line keeps the complete lines",
			mod:  func(c *Config) { c.TCPFlushInterval = time.Hour },
			run: func(t *testing.T, r *rig) {
				c := r.dial()
				r.send(c, tcpLine(1)+tcpLine(2)+"cpu v=3 3")
				require.NoError(t, c.Close())
				// The connection's goroutine commits, then ends.
				eventually(t, 10*time.Second, func() bool { return r.tcpConns() == 0 }, "connection to close")
				require.Equal(t, tcpRows(1, 2), r.drain("cpu"))
				r.stopTCP()
				require.Equal(t, tcpRows(1, 2), r.drain("cpu"))
			},
		},
		{
			name: "bad lines are dropped and counted, the connection stays open",
			run: func(t *testing.T, r *rig) {
				c := r.dial()
				r.send(c, tcpLine(1)+"cpu v= 2\n"+tcpLine(3)+"cpu,x_t=a v=4 4\n"+tcpLine(5))
				r.waitRows("cpu", tcpRows(1, 3, 5))
				require.Equal(t, 1, r.tcpRejected(ReasonSyntax))
				require.Equal(t, 1, r.tcpRejected(ReasonReservedKey))
				// A schema rejection by the sequencer is counted too.
				r.send(c, "cpu v=6i 6\n"+tcpLine(7))
				r.waitRows("cpu", tcpRows(1, 3, 5, 7))
				eventually(t, 10*time.Second, func() bool { return r.tcpRejected(ReasonFieldType) == 1 }, "type conflict counted")
				// Still open: more good lines on the same connection.
				r.send(c, tcpLine(8))
				r.waitRows("cpu", tcpRows(1, 3, 5, 7, 8))
				require.Equal(t, 1, r.tcpConns())
			},
		},
		{
			name: "over-long line in one read is rejected, the connection stays open",
			mod:  func(c *Config) { c.Limits.MaxLineBytes = 32 },
			run: func(t *testing.T, r *rig) {
				c := r.dial()
				r.send(c, tcpLine(1)+long+tcpLine(2))
				r.waitRows("cpu", tcpRows(1, 2))
				require.Equal(t, 1, r.tcpRejected(ReasonLineTooLong))
				r.send(c, tcpLine(3))
				r.waitRows("cpu", tcpRows(1, 2, 3))
			},
		},
		{
			name: "over-long line across reads is rejected once, the connection stays open",
			mod:  func(c *Config) { c.Limits.MaxLineBytes = 32 },
			run: func(t *testing.T, r *rig) {
				c := r.dial()
				pieces := []string{tcpLine(1)}
				for s := long; s != ""; {
					n := min(20, len(s))
					pieces = append(pieces, s[:n])
					s = s[n:]
				}
				pieces = append(pieces, tcpLine(2))
				r.send(c, pieces...)
				r.waitRows("cpu", tcpRows(1, 2))
				require.Equal(t, 1, r.tcpRejected(ReasonLineTooLong))
				r.send(c, tcpLine(3))
				r.waitRows("cpu", tcpRows(1, 2, 3))
			},
		},
		{
			name: "line of exactly the limit across reads, CR before its newline",
			mod:  func(c *Config) { c.Limits.MaxLineBytes = len("cpu v=1 1000000000") },
			run: func(t *testing.T, r *rig) {
				c := r.dial()
				r.send(c, "cpu v=1 1000000000", "\r", "\ncpu v=2 2000000000\r\n")
				r.waitRows("cpu", []row{{"time": int64(1000000000), "v": 1.0}, {"time": int64(2000000000), "v": 2.0}})
				require.Equal(t, 0, r.tcpRejected(ReasonLineTooLong))
			},
		},
		{
			name: "lines commit within the flush interval without closing",
			mod:  func(c *Config) { c.TCPFlushInterval = 50 * time.Millisecond },
			run: func(t *testing.T, r *rig) {
				c := r.dial()
				start := time.Now()
				_, err := io.WriteString(c, tcpLine(1))
				require.NoError(t, err)
				r.waitRows("cpu", tcpRows(1))
				require.Less(t, time.Since(start), 5*time.Second)
				// Idle, then more: the next line commits too.
				_, err = io.WriteString(c, tcpLine(2)+tcpLine(3))
				require.NoError(t, err)
				r.waitRows("cpu", tcpRows(1, 2, 3))
				require.Equal(t, 1, r.tcpConns())
			},
		},
		{
			name: "a full batch commits before the flush interval",
			mod: func(c *Config) {
				c.TCPFlushInterval = time.Hour
				c.TCPBatchLines = 3
			},
			run: func(t *testing.T, r *rig) {
				c := r.dial()
				r.send(c, tcpLine(1)+tcpLine(2)+tcpLine(3))
				r.waitRows("cpu", tcpRows(1, 2, 3))
			},
		},
		{
			name: "shutdown commits every complete line read",
			mod:  func(c *Config) { c.TCPFlushInterval = time.Hour },
			run: func(t *testing.T, r *rig) {
				c := r.dial()
				r.send(c, tcpLine(1)+tcpLine(2)+"cpu v=3")
				require.Equal(t, []row{}, r.drain("cpu"), "nothing commits before the flush interval")
				r.stopTCP()
				require.Equal(t, tcpRows(1, 2), r.drain("cpu"))
			},
		},
		{
			name: "shutdown commits every complete line sent",
			mod:  func(c *Config) { c.TCPFlushInterval = time.Hour },
			run: func(t *testing.T, r *rig) {
				conns := []net.Conn{r.dial(), r.dial()}
				eventually(t, 10*time.Second, func() bool { return r.tcpConns() == 2 }, "connections to open")
				for i, c := range conns {
					_, err := io.WriteString(c, tcpLine(10*i+1)+tcpLine(10*i+2))
					require.NoError(t, err)
				}
				r.stopTCP()
				require.ElementsMatch(t, tcpRows(1, 2, 11, 12), r.drain("cpu"))
			},
		},
		{
			name: "a BOM at the start of a connection is skipped",
			run: func(t *testing.T, r *rig) {
				c := r.dial()
				r.send(c, "\xef\xbb\xbf"+tcpLine(1))
				r.waitRows("cpu", tcpRows(1))
				require.Equal(t, 0, r.tcpRejected(ReasonSyntax))
			},
		},
		{
			name: "a BOM split across the first reads is skipped",
			run: func(t *testing.T, r *rig) {
				c := r.dial()
				r.send(c, "\xef", "\xbb", "\xbf"+tcpLine(1))
				r.waitRows("cpu", tcpRows(1))
				require.Equal(t, 0, r.tcpRejected(ReasonInvalidUTF8))
				require.Equal(t, 0, r.tcpRejected(ReasonSyntax))
			},
		},
		{
			name: "several connections",
			run: func(t *testing.T, r *rig) {
				a, b := r.dial(), r.dial()
				r.send(a, "cpu v=")
				r.send(b, tcpLine(2))
				r.send(a, "1 1\n")
				eventually(t, 10*time.Second, func() bool { return len(r.drain("cpu")) == 2 }, "both lines")
				require.ElementsMatch(t, tcpRows(1, 2), r.drain("cpu"))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, tt.mod, "cpu")
			tt.run(t, r)
		})
	}
}

// TestTCPMaxConns checks that a connection accepted at TCPMaxConns makes
// room by evicting the longest-idle connection, whose lines read before
// are committed, and that the eviction is counted.
func TestTCPMaxConns(t *testing.T) {
	tests := []struct {
		name string
		max  int
		// active are the connections (by dial order) that send a line
		// after all are open; the longest-idle other one is evicted.
		active []int
		victim int
	}{
		{name: "one", max: 1, active: []int{0}, victim: 0},
		{name: "two, the first idle longest", max: 2, active: []int{1}, victim: 0},
		{name: "two, the second idle longest", max: 2, active: []int{0}, victim: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, func(c *Config) { c.TCPMaxConns = tt.max }, "cpu")
			cs := make([]net.Conn, tt.max)
			for i := range cs {
				cs[i] = r.dial()
				eventually(t, 10*time.Second, func() bool { return r.tcpConns() == i+1 }, "connection to open")
			}
			var want []int
			for _, i := range tt.active {
				r.send(cs[i], tcpLine(i+1))
				want = append(want, i+1)
			}
			// Committed, so read: the active connections' last line is
			// newer than every other's accept before the next one comes.
			r.waitRows("cpu", tcpRows(want...))
			extra := r.dial()
			require.NoError(t, cs[tt.victim].SetReadDeadline(time.Now().Add(10*time.Second)))
			_, err := cs[tt.victim].Read(make([]byte, 1))
			require.ErrorIs(t, err, io.EOF, "the longest-idle connection is closed")
			require.Equal(t, 1, metricValue(t, r.in.m.closed.WithLabelValues(closedEvicted)))
			r.send(extra, tcpLine(9))
			want = append(want, 9)
			r.waitRows("cpu", tcpRows(want...))
			eventually(t, 10*time.Second, func() bool { return r.tcpConns() == tt.max }, "the evicted connection to be gone")
			for i, c := range cs {
				if i != tt.victim {
					r.send(c, tcpLine(i+11))
					want = append(want, i+11)
				}
			}
			r.waitRows("cpu", tcpRows(want...))
		})
	}
}

// TestTCPEvictsBusiestAddress: at TCPMaxConns the connection evicted is
// the longest-idle one of the address holding the most connections, not
// the longest-idle of all: a writer sending a line now and then keeps its
// connection while another address churns connections that each send a
// byte (the finding: 1 of 20 lines of such a writer landed).
func TestTCPEvictsBusiestAddress(t *testing.T) {
	r := newRig(t, func(c *Config) { c.TCPMaxConns = 4 }, "cpu")
	honest := r.dialFrom("127.0.0.2")
	r.send(honest, tcpLine(1))
	var busy []net.Conn
	for i := range 3 { // each more recent than the honest writer's line
		busy = append(busy, r.dialFrom("127.0.0.3"))
		eventually(t, 10*time.Second, func() bool { return r.tcpConns() == i+2 }, "connection to open")
		r.send(busy[i], "c")
	}
	for round := range 3 { // each new connection of the busy address evicts one of its own
		busy = append(busy, r.dialFrom("127.0.0.3"))
		eventually(t, 10*time.Second, func() bool {
			return metricValue(t, r.in.m.closed.WithLabelValues(closedEvicted)) == round+1
		}, "an eviction")
		r.send(busy[len(busy)-1], "c")
	}
	r.send(honest, tcpLine(2))
	r.waitRows("cpu", tcpRows(1, 2))
	require.NoError(t, honest.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, err := honest.Read(make([]byte, 1))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the honest writer's connection is still open")
}

// TestTCPEvictsConnectionsWithoutLines: at TCPMaxConns among addresses
// holding one connection each, the connection evicted is the one that has
// gone longest without completing a line, not the longest without a byte:
// a writer sending a line now and then keeps its connection while
// connections from many addresses each trickle a byte and churn (the
// finding: 1 of 20 lines landed with 1,100 such connections, each from
// its own address).
func TestTCPEvictsConnectionsWithoutLines(t *testing.T) {
	r := newRig(t, func(c *Config) { c.TCPMaxConns = 4 }, "cpu")
	var busy []net.Conn
	for i := range 3 {
		busy = append(busy, r.dialFrom(fmt.Sprintf("127.0.1.%d", i+1)))
		eventually(t, 10*time.Second, func() bool { return r.tcpConns() == i+1 }, "connection to open")
		r.send(busy[i], "c")
	}
	honest := r.dialFrom("127.0.0.2")
	want := []int{}
	for round := range 3 {
		r.send(honest, tcpLine(round+1)) // a line now and then
		want = append(want, round+1)
		for _, c := range busy[round:] { // a byte each, more recent than the writer's line
			r.send(c, "c")
		}
		churn := r.dialFrom(fmt.Sprintf("127.0.2.%d", round+1))
		eventually(t, 10*time.Second, func() bool {
			return metricValue(t, r.in.m.closed.WithLabelValues(closedEvicted)) == round+1
		}, "an eviction")
		r.send(churn, "c")
		busy = append(busy, churn)
	}
	r.send(honest, tcpLine(9))
	r.waitRows("cpu", tcpRows(append(want, 9)...))
	require.NoError(t, honest.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, err := honest.Read(make([]byte, 1))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the writer's connection is still open")
}

// TestTCPIdleTimeout checks that a connection that sends nothing for
// TCPIdleTimeout is closed, not earlier, after its lines are committed, and
// that the close is counted.
func TestTCPIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	r := newRig(t, func(c *Config) { c.TCPIdleTimeout = idle }, "cpu")
	c := r.dial()
	r.send(c, tcpLine(1))
	sent := time.Now()
	r.send(c, "cpu v=2") // a partial line, dropped at the close
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err := c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the idle connection is closed")
	require.GreaterOrEqual(t, time.Since(sent), idle, "closed before the idle timeout")
	require.Equal(t, 1, metricValue(t, r.in.m.closed.WithLabelValues(closedIdleTimeout)))
	r.waitRows("cpu", tcpRows(1))
	eventually(t, 10*time.Second, func() bool { return r.tcpConns() == 0 }, "the connection to be gone")
}

// failingListener fails its first fails Accepts with err, then accepts.
type failingListener struct {
	net.Listener
	err   error
	fails atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, l.err
	}
	return l.Listener.Accept()
}

// TestTCPAcceptErrors checks that the accept loop retries a failed accept
// that may succeed later (out of file descriptors) after a backoff, counts
// it and then serves, and that it returns any other error.
func TestTCPAcceptErrors(t *testing.T) {
	emfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	enfile := &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.ENFILE)}
	tests := []struct {
		name  string
		err   error
		fails int32
		fatal bool
	}{
		{name: "EMFILE", err: emfile, fails: 4},
		{name: "ENFILE", err: enfile, fails: 2},
		{name: "another error ends the loop", err: &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EINVAL)}, fails: 1, fatal: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil, "cpu")
			in, err := New(DefaultConfig(), r.seq, time.Second, nil, nil)
			require.NoError(t, err)
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			ln := &failingListener{Listener: inner, err: tt.err}
			ln.fails.Store(tt.fails)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- in.ServeTCP(ctx, ln) }()
			if tt.fatal {
				select {
				case err := <-done:
					require.ErrorIs(t, err, syscall.EINVAL)
				case <-time.After(testdeadline.Scale(10 * time.Second)):
					t.Fatal("ServeTCP did not return on a permanent accept error")
				}
				require.NoError(t, inner.Close())
				return
			}
			c, err := net.Dial("tcp", inner.Addr().String())
			require.NoError(t, err)
			_, err = io.WriteString(c, tcpLine(1))
			require.NoError(t, err)
			require.NoError(t, c.Close())
			r.waitRows("cpu", tcpRows(1))
			require.Equal(t, int(tt.fails), metricValue(t, in.m.acceptErrors))
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(testdeadline.Scale(10 * time.Second)):
				t.Fatal("ServeTCP did not return after cancel")
			}
		})
	}
}

// gatedAppender holds every Submit until open is closed (or ctx ends),
// then hands the batch on: a sequencer that cannot keep up until the test
// lets it.
type gatedAppender struct {
	next    Appender
	open    chan struct{}
	once    sync.Once
	waiting atomic.Int32 // Submits being held now
}

func (g *gatedAppender) Submit(ctx context.Context, b *feed.Batch) (*feed.Pending, error) {
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.next.Submit(ctx, b)
}

// release lets every Submit through from now on. Safe to call twice.
func (g *gatedAppender) release() { g.once.Do(func() { close(g.open) }) }

// TestTCPBackPressure checks docs/contract.md#tcp-writes: while the sequencer cannot take a
// batch, the connection stops reading the socket, so a client writing
// faster than commits keep up is held back by TCP flow control (its
// writes block) and the server's memory stays bounded; once the sequencer
// takes batches again every line written arrives, once.
func TestTCPBackPressure(t *testing.T) {
	const (
		padBytes   = 1000
		chunkLines = 512     // about 0.5 MB per write
		maxWritten = 1 << 30 // give up: the server never pushed back
	)
	pad := strings.Repeat("x", padBytes)
	line := func(n int) string { return "cpu s=\"" + pad + "\",v=" + itoa(n) + "i " + itoa(n) + "\n" }
	// Each case's bound is the most the server may read while the
	// sequencer is held: one batch, plus one read and one partial line.
	slack := 2*lineReadBytes + len(line(1))
	tests := []struct {
		name       string
		batchLines int
		batchBytes int
		bound      int
	}{
		{name: "batches of a few lines", batchLines: 16, batchBytes: DefaultTCPBatchBytes, bound: 16*len(line(1)) + slack},
		{name: "batches of a few bytes", batchLines: DefaultTCPBatchLines, batchBytes: 32 << 10, bound: 32<<10 + slack},
		{name: "the defaults", batchLines: DefaultTCPBatchLines, batchBytes: DefaultTCPBatchBytes, bound: DefaultTCPBatchBytes + slack},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gate *gatedAppender
			r := newRigOpts(t, rigOptions{
				mod: func(c *Config) {
					c.TCPBatchLines, c.TCPBatchBytes = tt.batchLines, tt.batchBytes
				},
				wrap: func(app Appender) Appender {
					gate = &gatedAppender{next: app, open: make(chan struct{})}
					return gate
				},
			}, "cpu")
			t.Cleanup(gate.release) // runs before the rig stops, even on failure
			c := r.dial()

			// Write until a write blocks: the server has stopped reading.
			written, lines := 0, 0
			var rest []byte // the unwritten part of the chunk that blocked
			for rest == nil {
				require.Less(t, written, maxWritten, "the server never pushed back")
				var chunk strings.Builder
				for range chunkLines {
					lines++
					chunk.WriteString(line(lines))
				}
				require.NoError(t, c.SetWriteDeadline(time.Now().Add(time.Second)))
				n, err := io.WriteString(c, chunk.String())
				written += n
				if err != nil {
					require.ErrorIs(t, err, os.ErrDeadlineExceeded)
					rest = []byte(chunk.String()[n:])
				}
			}
			require.NoError(t, c.SetWriteDeadline(time.Time{}))
			eventually(t, 10*time.Second, func() bool { return gate.waiting.Load() == 1 }, "the connection to wait for the sequencer")
			read := r.tcpBytes()
			require.LessOrEqual(t, read, tt.bound, "bytes the server read while the sequencer was held")
			require.Greater(t, written, read, "the client got further than the server read: the rest waits in the kernel")
			t.Logf("client wrote %d bytes (%d lines) before blocking; the server read %d", written, lines, read)

			// The rest of the blocked chunk goes once the server reads again.
			done := make(chan error, 1)
			go func() {
				_, err := c.Write(rest)
				done <- err
			}()
			gate.release()
			require.NoError(t, <-done)
			want := make([]int64, lines)
			for i := range want {
				want[i] = int64(i + 1)
			}
			var got []int64
			eventually(t, 30*time.Second, func() bool {
				got = got[:0]
				for _, rw := range r.drain("cpu") {
					got = append(got, rw["v"].(int64))
				}
				return len(got) >= lines
			}, "every line written to arrive")
			require.Equal(t, want, got, "every line once, in order")
			require.Equal(t, written+len(rest), r.tcpBytes())
		})
	}
}

// TestTCPRejectLog checks that a bad line is logged with the peer's
// address, its line number and the reason, and counted, while the
// connection goes on.
func TestTCPRejectLog(t *testing.T) {
	long := "cpu s=\"" + strings.Repeat("a", 40) + "\n" + strings.Repeat("b", 40) + "\" 9\n"
	tests := []struct {
		name   string
		max    int      // --max-line-bytes; 0 keeps the default
		pieces []string // written one after another
		want   []row    // rows of cpu afterwards
		logged []wantLog
	}{
		{
			name:   "a syntax error",
			pieces: []string{tcpLine(1) + "cpu v= 2\n" + tcpLine(3)},
			want:   tcpRows(1, 3),
			logged: []wantLog{{line: 2, reason: ReasonSyntax}},
		},
		{
			name:   "numbers count raw newlines in strings",
			pieces: []string{"cpu s=\"a\nb\" 1\n\ncpu,x_k=1 v=2 2\n" + tcpLine(4)},
			want:   []row{{"time": int64(1), "s": "a\nb"}, tcpRow(4)},
			logged: []wantLog{{line: 4, reason: ReasonReservedKey}},
		},
		{
			name:   "a schema rejection by the sequencer",
			pieces: []string{tcpLine(1) + "cpu v=\"s\" 2\n" + tcpLine(3)},
			want:   tcpRows(1, 3),
			logged: []wantLog{{line: 2, reason: ReasonFieldType}},
		},
		{
			name: "numbers count the raw newlines of an over-long line",
			max:  32,
			// The over-long line (lines 2 and 3) is dropped as it arrives.
			pieces: []string{tcpLine(1), long[:45], long[45:60], long[60:] + "cpu v= 4\n" + tcpLine(5)},
			want:   tcpRows(1, 5),
			logged: []wantLog{{line: 2, reason: ReasonLineTooLong}, {line: 4, reason: ReasonSyntax}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs, logger := newLogRecorder()
			r := newRigOpts(t, rigOptions{
				mod: func(c *Config) {
					if tt.max > 0 {
						c.Limits.MaxLineBytes = tt.max
					}
				},
				logger: logger, logEvery: -1,
			}, "cpu")
			_, err := r.seq.Append(context.Background(), &feed.Batch{Points: []feed.Point{
				{Table: "cpu", Fields: []feed.PointField{{Key: "v", Value: fl(0)}}, Time: -1},
			}})
			require.NoError(t, err)
			c := r.dial()
			r.send(c, tt.pieces...)
			r.waitRows("cpu", append([]row{{"time": int64(-1), "v": 0.0}}, tt.want...))
			var recs []map[string]any
			eventually(t, 10*time.Second, func() bool {
				recs = logs.records(t, "ilp line rejected")
				return len(recs) >= len(tt.logged)
			}, "rejections to be logged")
			require.Len(t, recs, len(tt.logged))
			for i, want := range tt.logged {
				require.Equal(t, c.LocalAddr().String(), recs[i]["peer"], "record %d: %v", i, recs[i])
				require.Equal(t, float64(want.line), recs[i]["line"], "record %d: %v", i, recs[i])
				require.Equal(t, want.reason, recs[i]["reason"], "record %d: %v", i, recs[i])
				require.Equal(t, "ilp", recs[i]["component"])
				require.NotEmpty(t, recs[i]["err"])
				require.Equal(t, 1, r.tcpRejected(want.reason))
			}
			require.Equal(t, 1, r.tcpConns(), "the connection stays open")
		})
	}
}

// wantLog is an expected rejection log record.
type wantLog struct {
	line   int
	reason string
}

// TestTCPBufferedBytesBounded: the TCP connections together hold at most
// TCPMaxBufferedBytes. Partial lines take at most half of it: a line that
// finds no room is dropped as too long (its connection goes on), and the
// room comes back when a long line ends or its connection closes. Lines
// parsed into batches take the rest: connections sending more than it
// holds wait for their commits and lose nothing.
func TestTCPBufferedBytesBounded(t *testing.T) {
	const budget = 1 << 20
	var gate *gatedAppender
	r := newRigOpts(t, rigOptions{
		mod: func(c *Config) {
			c.TCPMaxBufferedBytes = budget
			c.Limits.MaxLineBytes = 256 << 10
			c.TCPBatchBytes = 256 << 10
		},
		wrap: func(app Appender) Appender {
			gate = &gatedAppender{next: app, open: make(chan struct{})}
			return gate
		},
	}, "cpu")
	t.Cleanup(gate.release) // runs before the rig stops, even on failure
	buffered := func() int { return metricValue(t, r.in.m.tcpBuffered) }
	tooLong := func() int {
		return metricValue(t, r.in.m.rejected.WithLabelValues(transportTCP, ReasonLineTooLong))
	}

	// Four partial lines of 200 KiB: each takes 192 KiB past its first
	// 64 KiB; the fourth no longer fits in half the budget.
	var partial []net.Conn
	for i := range 4 {
		c := r.dial()
		r.send(c, "cpu v=1 "+strings.Repeat("1", 100<<10), strings.Repeat("1", 100<<10))
		partial = append(partial, c)
		require.LessOrEqual(t, buffered(), budget/2, "partial line %d", i)
	}
	require.Equal(t, 2, tooLong(), "the lines that found no room, dropped")
	require.Positive(t, buffered())

	// Lines of batches take the rest of the budget; 4 writers sending
	// 2 MiB each wait for room while no batch commits, and once batches
	// commit again every line is committed.
	var want []int
	var wg sync.WaitGroup
	for w := range 4 {
		c := r.dial()
		var b strings.Builder
		for i := range 20_000 {
			n := 100_000*(w+1) + i
			b.WriteString("cpu v=" + itoa(n) + ",pad=\"" + strings.Repeat("p", 64) + "\" " + itoa(n) + "\n")
			want = append(want, n)
		}
		wg.Go(func() { _, _ = io.WriteString(c, b.String()) })
	}
	eventually(t, 10*time.Second, func() bool { return metricValue(t, r.in.m.tcpBudgetWaits) > 0 }, "writers waited for room")
	require.LessOrEqual(t, buffered(), budget)
	gate.release()
	wg.Wait()
	eventually(t, 60*time.Second, func() bool { return len(r.drain("cpu")) == len(want) }, "every line committed")

	// The partial lines' room comes back when their lines end (the rest
	// of each is a valid line) and the connections close.
	for _, c := range partial {
		require.NoError(t, c.Close())
	}
	eventually(t, 10*time.Second, func() bool { return buffered() == 0 }, "every byte given back")
}

// TestTCPParserCachesReleased: a TCP connection's parser caches take from
// --ilp-max-parser-cache-bytes while it lives and give it all back when it
// closes, so connections that come and go leave nothing counted.
func TestTCPParserCachesReleased(t *testing.T) {
	r := newRig(t, nil, "cpu")
	c := r.dial()
	var lines strings.Builder
	for i := range 100 {
		fmt.Fprintf(&lines, "cpu,host=h%03d v=%d %d\n", i, i, i+1)
	}
	r.send(c, lines.String())
	eventually(t, 10*time.Second, func() bool { return r.in.caches.used.Load() > 0 }, "the connection's caches counted")
	require.NoError(t, c.Close())
	eventually(t, 10*time.Second, func() bool { return r.in.caches.used.Load() == 0 }, "given back when it closes")
	eventually(t, 10*time.Second, func() bool { return len(r.drain("cpu")) == 100 }, "every line committed")
}
