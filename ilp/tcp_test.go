package ilp

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

// TestTCPMaxConns checks that a connection past TCPMaxConns is closed at
// once while the others go on.
func TestTCPMaxConns(t *testing.T) {
	tests := []struct {
		name string
		max  int
	}{
		{name: "one", max: 1},
		{name: "two", max: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, func(c *Config) { c.TCPMaxConns = tt.max }, "cpu")
			for range tt.max {
				r.dial()
			}
			eventually(t, 10*time.Second, func() bool { return r.tcpConns() == tt.max }, "connections to open")
			extra := r.dial()
			require.NoError(t, extra.SetReadDeadline(time.Now().Add(10*time.Second)))
			_, err := extra.Read(make([]byte, 1))
			require.ErrorIs(t, err, io.EOF, "the extra connection is closed")
			require.Equal(t, tt.max, r.tcpConns())
		})
	}
}
