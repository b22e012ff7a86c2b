package ilp

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// splitPieces feeds pieces, in order, to one Splitter and returns the lines
// it ends (without their newline) and the bytes after the last line end.
func splitPieces(pieces ...string) (lines []string, rest string) {
	var sp Splitter
	var all []byte
	start := 0 // in all, of the current line
	for _, p := range pieces {
		all = append(all, p...)
		off := len(all) - len(p) // in all, of the bytes not yet scanned
		for off < len(all) {
			end := sp.Next(all[off:])
			if end < 0 {
				break
			}
			lines = append(lines, string(all[start:off+end]))
			off += end + 1
			start = off
		}
	}
	return lines, string(all[start:])
}

func TestSplitter(t *testing.T) {
	tests := []struct {
		name  string
		data  string
		lines []string
		rest  string
	}{
		{
			name:  "plain lines",
			data:  "a v=1 1\nb,t=x v=2 2\n",
			lines: []string{"a v=1 1", "b,t=x v=2 2"},
		},
		{
			name:  "final line without newline",
			data:  "a v=1\nb v=2",
			lines: []string{"a v=1"},
			rest:  "b v=2",
		},
		{
			name:  "CRLF and blank lines",
			data:  "\n\r\na v=1\r\n\n",
			lines: []string{"", "\r", "a v=1\r", ""},
		},
		{
			name:  "raw newline in a string",
			data:  "m s=\"a\nb\" 1\nn v=1\n",
			lines: []string{"m s=\"a\nb\" 1", "n v=1"},
		},
		{
			name:  "raw newlines in several strings",
			data:  "m a=\"x\n\",b=1,c=\"\ny\" 1\nn v=1\n",
			lines: []string{"m a=\"x\n\",b=1,c=\"\ny\" 1", "n v=1"},
		},
		{
			name:  "escaped quote in a string",
			data:  "m s=\"a\\\"\nb\" 1\nn v=1\n",
			lines: []string{"m s=\"a\\\"\nb\" 1", "n v=1"},
		},
		{
			name:  "escaped backslash before the closing quote",
			data:  "m s=\"a\\\\\"\nn v=1\n",
			lines: []string{"m s=\"a\\\\\"", "n v=1"},
		},
		{
			name:  "escaped backslash then escaped quote",
			data:  "m s=\"a\\\\\\\"\nb\" 1\nn v=1\n",
			lines: []string{"m s=\"a\\\\\\\"\nb\" 1", "n v=1"},
		},
		{
			name:  "escaped newline in a string",
			data:  "m s=\"a\\\nb\" 1\nn v=1\n",
			lines: []string{"m s=\"a\\\nb\" 1", "n v=1"},
		},
		{
			name:  "comment lines with quotes",
			data:  "# a=\"b\nm v=1\n  # x=\"\nn s=\"#\n\"\n",
			lines: []string{"# a=\"b", "m v=1", "  # x=\"", "n s=\"#\n\""},
		},
		{
			name:  "quotes in the measurement and tags do not open strings",
			data:  "m\"x,t=\"y v=1\nn,t=a=\"b v=2\n",
			lines: []string{"m\"x,t=\"y v=1", "n,t=a=\"b v=2"},
		},
		{
			name:  "quote not after an equals sign or in the timestamp",
			data:  "m a=1\"\nn v=1 \"\no v=1\n",
			lines: []string{"m a=1\"", "n v=1 \"", "o v=1"},
		},
		{
			name:  "escaped spaces in the measurement and tags",
			data:  "m\\ x,t=a\\ b s=\"1\n2\"\nn v=1\n",
			lines: []string{"m\\ x,t=a\\ b s=\"1\n2\"", "n v=1"},
		},
		{
			name:  "double backslash before an escaped space in a tag",
			data:  "m,p=C:\\\\ x s=\"a\nb\" 1\nn v=1\n",
			lines: []string{"m,p=C:\\\\ x s=\"a\nb\" 1", "n v=1"},
		},
		{
			name:  "double backslash before an escaped equals sign in a field key",
			data:  "m a\\\\=\"x\ny\" 1\nn v=1\n",
			lines: []string{"m a\\\\=\"x", "y\" 1", "n v=1"},
		},
		{
			name:  "escaped space in a field key before a string",
			data:  "m a\\ b=\"x\ny\" 1\nn v=1\n",
			lines: []string{"m a\\ b=\"x\ny\" 1", "n v=1"},
		},
		{
			name:  "backslash before a newline outside a string",
			data:  "m\\\nn v=1\\\no v=1\n",
			lines: []string{"m\\", "n v=1\\", "o v=1"},
		},
		{
			name: "unterminated string keeps the line open",
			data: "m s=\"abc\nn v=1\n",
			rest: "m s=\"abc\nn v=1\n",
		},
		{
			name:  "multi-byte UTF-8",
			data:  "m\u00e9 s=\"\u20ac\n\U0001F600\" 1\nn v=1\n",
			lines: []string{"m\u00e9 s=\"\u20ac\n\U0001F600\" 1", "n v=1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines, rest := splitPieces(tt.data)
			require.Equal(t, tt.lines, lines, "one piece")
			require.Equal(t, tt.rest, rest, "one piece")
			for i := 0; i <= len(tt.data); i++ {
				lines, rest := splitPieces(tt.data[:i], tt.data[i:])
				require.Equal(t, tt.lines, lines, "split at %d", i)
				require.Equal(t, tt.rest, rest, "split at %d", i)
			}
			bytewise := make([]string, len(tt.data))
			for i := 0; i < len(tt.data); i++ {
				bytewise[i] = tt.data[i : i+1]
			}
			lines, rest = splitPieces(bytewise...)
			require.Equal(t, tt.lines, lines, "byte by byte")
			require.Equal(t, tt.rest, rest, "byte by byte")
		})
	}
}

func TestSplitterReset(t *testing.T) {
	tests := []struct {
		name    string
		partial string // fed, then Reset
		data    string
		want    int // index of the first line end in data
	}{
		{name: "inside a string", partial: "m s=\"abc", data: "m v=1\nn v=2\n", want: 5},
		{name: "after an escaping backslash", partial: "m s=\"a\\", data: "\nn v=2\n", want: 0},
		{name: "inside a comment", partial: "# x", data: "m s=\"a\nb\"\n", want: 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sp Splitter
			require.Equal(t, -1, sp.Next([]byte(tt.partial)))
			sp.Reset()
			require.Equal(t, tt.want, sp.Next([]byte(tt.data)))
		})
	}
}

// TestLineReader checks how the TCP path assembles lines from reads: what
// it yields, how it numbers lines, byte-order marks split across reads and
// over-long lines dropped as they arrive.
func TestLineReader(t *testing.T) {
	long := "m s=\"" + strings.Repeat("a", 20) + "\n" + strings.Repeat("b", 20) + "\" 1"
	tests := []struct {
		name    string
		max     int
		pieces  []string
		events  []string // "N: line" or "N: too long"
		partial string
		next    int // number of the line being assembled at the end
	}{
		{
			name:   "lines in one piece",
			max:    100,
			pieces: []string{"a v=1\nb v=2\n\nc v=3"},
			events: []string{"1: a v=1", "2: b v=2", "3: "}, partial: "c v=3", next: 4,
		},
		{
			name:   "a line across reads and a raw newline in a string",
			max:    100,
			pieces: []string{"a s=\"x", "\ny\"", " 1\nb", " v=2\n"},
			events: []string{"1: a s=\"x\ny\" 1", "3: b v=2"}, next: 4,
		},
		{
			name:   "a byte-order mark split across reads",
			max:    100,
			pieces: []string{"\xef", "\xbb", "\xbfa v=1\n"},
			events: []string{"1: a v=1"}, next: 2,
		},
		{
			name:   "a byte-order mark only at the start",
			max:    100,
			pieces: []string{"\xef\xbb\xbfa v=1\n\xef\xbb\xbfb v=2\n"},
			events: []string{"1: a v=1", "2: \xef\xbb\xbfb v=2"}, next: 3,
		},
		{
			name:    "the start of a byte-order mark, then the end",
			max:     100,
			pieces:  []string{"\xef\xbb"},
			partial: "\xef\xbb", next: 1,
		},
		{
			name:   "not a byte-order mark after all",
			max:    100,
			pieces: []string{"\xef", "a v=1\n"},
			events: []string{"1: \xefa v=1"}, next: 2,
		},
		{
			name:   "an over-long line is reported once and its newlines counted",
			max:    16,
			pieces: []string{"a v=1\n", long[:10], long[10:30], long[30:] + "\nb v=2\n"},
			events: []string{"1: a v=1", "2: too long", "4: b v=2"}, next: 5,
		},
		{
			name:   "an over-long line in one read is the parser's to reject",
			max:    16,
			pieces: []string{long + "\nb v=2\n"},
			events: []string{"1: " + long, "3: b v=2"}, next: 4,
		},
		{
			name:   "a line of the limit and its CR across reads",
			max:    5,
			pieces: []string{"a v=1", "\r", "\nb v=2\n"},
			events: []string{"1: a v=1\r", "2: b v=2"}, next: 3,
		},
		{
			name:   "an over-long partial line at the end",
			max:    4,
			pieces: []string{"a v=1", "2345"},
			events: []string{"1: too long"}, next: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lr := newLineReader(tt.max)
			events := []string{}
			for _, p := range tt.pieces {
				for len(p) > 0 {
					n := copy(lr.spare(), p)
					lr.add(n,
						func(b []byte, no int) { events = append(events, itoa(no)+": "+string(b)) },
						func(no int) { events = append(events, itoa(no)+": too long") })
					p = p[n:]
				}
			}
			if tt.events == nil {
				tt.events = []string{}
			}
			require.Equal(t, tt.events, events)
			partial, next := lr.partial()
			require.Equal(t, tt.partial, string(partial))
			require.Equal(t, tt.next, next)
		})
	}

	t.Run("a long line trickling in: the buffer grows by doubling", func(t *testing.T) {
		lr := newLineReader(DefaultMaxLineBytes)
		line := strings.Repeat("x", 200_000)
		var first *byte
		moved := 0
		for i := range len(line) {
			sp := lr.spare()
			sp[0] = line[i]
			lr.add(1, func([]byte, int) {}, func(int) {})
			if b, _ := lr.partial(); &b[0] != first {
				first, moved = &b[0], moved+1
			}
		}
		partial, _ := lr.partial()
		require.Equal(t, line, string(partial))
		require.Less(t, moved, 20, "the buffer was reallocated on %d reads", moved)
	})
}
