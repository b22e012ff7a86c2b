package ilp

import "bytes"

// Splitter finds where ILP lines end. A newline ends a line except inside a
// quoted string field value, where it belongs to the string (Telegraf sends
// newlines in strings raw). It keeps its state between calls, so bytes may
// arrive in any pieces (TCP reads) and give the same lines as one piece.
// The zero Splitter is ready; it is not safe for concurrent use.
type Splitter struct {
	state   uint8
	escaped bool // the previous byte was an escaping backslash
	afterEq bool // the previous byte was an unescaped '=' in the field set
	atStart bool // no non-space byte seen on this line yet
	started bool
}

const (
	splitKey     uint8 = iota // measurement and tag set
	splitFields               // field set
	splitString               // inside a quoted string field value
	splitTime                 // timestamp
	splitComment              // a comment line
)

// Next scans buf, which continues the bytes given to earlier calls, and
// returns the index in buf of the newline that ends the current line, or -1
// when buf ends inside the line (the state is kept). After a line end the
// splitter is at the start of the next line.
func (s *Splitter) Next(buf []byte) int {
	if !s.started {
		s.reset()
	}
	// Fast path: outside a quoted string, a line holding no double quote
	// ends at its first newline whatever else it holds (escapes, comments,
	// state left by earlier pieces), so two vectorised scans decide it.
	if s.state != splitString {
		if nl := bytes.IndexByte(buf, '\n'); nl >= 0 && bytes.IndexByte(buf[:nl], '"') < 0 {
			s.reset()
			return nl
		}
	}
	for i := 0; i < len(buf); i++ {
		c := buf[i]
		if s.escaped {
			s.escaped = false
			// A backslash escapes the next byte, except a newline and,
			// outside strings, another backslash: there the decoder
			// keeps the first one literal and lets the second escape
			// what follows (`\\ ` is a backslash and an escaped space).
			if c != '\n' && (c != '\\' || s.state == splitString) {
				continue
			}
		}
		if s.atStart {
			switch c {
			case ' ', '\t':
				continue
			case '#':
				s.state = splitComment
			}
			s.atStart = false
		}
		switch s.state {
		case splitKey:
			switch c {
			case '\\':
				s.escaped = true
			case ' ':
				s.state = splitFields
			case '\n':
				s.reset()
				return i
			}
		case splitFields:
			wasEq := s.afterEq
			s.afterEq = false
			switch c {
			case '\\':
				s.escaped = true
			case '=':
				s.afterEq = true
			case '"':
				if wasEq {
					s.state = splitString
				}
			case ' ':
				s.state = splitTime
			case '\n':
				s.reset()
				return i
			}
		case splitString:
			switch c {
			case '\\':
				s.escaped = true
			case '"':
				s.state = splitFields
			}
		default: // splitTime, splitComment
			if c == '\n' {
				s.reset()
				return i
			}
		}
	}
	return -1
}

// reset puts the splitter at the start of a line.
func (s *Splitter) reset() {
	*s = Splitter{state: splitKey, atStart: true, started: true}
}

// Reset forgets any partial line.
func (s *Splitter) Reset() { s.reset() }

// lineReader assembles lines from bytes that arrive in pieces (TCP reads):
// read into spare(), then hand the count to add, which yields every line
// completed so far. It keeps only the partial line, so its memory is
// bounded by the longest line allowed: the bytes of a line longer than
// maxLineBytes are dropped as they arrive and the line is reported once
// as too long. One leading byte-order mark is stripped, even when it
// arrives split across reads. Not safe for concurrent use.
type lineReader struct {
	sp       Splitter
	buf      []byte
	scanned  int  // bytes of buf already given to sp
	skip     bool // discarding the rest of an over-long line
	bomSeen  bool // the stream is past where a byte-order mark may be
	line     int  // number of the line being assembled (1-based)
	maxBytes int
	// room, when set, is asked for the bytes the buffer grows by past
	// lineReadBytes (a partial line longer than that) and told, with a
	// negative count, when they are given back; a refusal drops the
	// partial line as too long (refused: reported at the next add).
	room    func(delta int64) bool
	refused bool
}

// lineReadBytes is the least room spare offers.
const lineReadBytes = 64 << 10

func newLineReader(maxLineBytes int) *lineReader {
	return &lineReader{buf: make([]byte, 0, lineReadBytes), line: 1, maxBytes: maxLineBytes}
}

// spare returns room for the next read, at least lineReadBytes/4 bytes.
// It is valid until the next call of add.
func (lr *lineReader) spare() []byte {
	if cap(lr.buf)-len(lr.buf) < lineReadBytes/4 {
		size := max(lineReadBytes, 2*len(lr.buf))
		if lr.room != nil && !lr.room(int64(size-max(cap(lr.buf), lineReadBytes))) {
			// No room for a longer partial line: it is dropped as an
			// over-long one is (add reports it).
			if !lr.skip {
				lr.refused, lr.skip = true, true
			}
			lr.line += bytes.Count(lr.buf, newline)
			lr.buf, lr.scanned = lr.buf[:0], 0
			return lr.buf[:cap(lr.buf)]
		}
		nb := make([]byte, len(lr.buf), size)
		copy(nb, lr.buf)
		lr.buf = nb
	}
	return lr.buf[len(lr.buf):cap(lr.buf)]
}

// release gives back the room the buffer holds past lineReadBytes
// (the connection ends).
func (lr *lineReader) release() {
	if lr.room != nil && cap(lr.buf) > lineReadBytes {
		lr.room(-int64(cap(lr.buf) - lineReadBytes))
		lr.buf = nil
	}
}

// add takes the n bytes just read into spare() and calls line for each
// complete line (without its newline; valid only during the call) with
// its number, and tooLong once for each line longer than maxBytes (whose
// bytes are dropped). Lines are numbered by the newlines seen, raw
// newlines inside strings included.
func (lr *lineReader) add(n int, line func(b []byte, no int), tooLong func(no int)) {
	if lr.refused {
		lr.refused = false
		tooLong(lr.line)
	}
	lr.buf = lr.buf[:len(lr.buf)+n]
	if !lr.bomSeen {
		if len(lr.buf) < len(bom) && bytes.HasPrefix(bom, lr.buf) {
			return // maybe the start of a byte-order mark: wait for more
		}
		lr.buf, lr.bomSeen = TrimBOM(lr.buf), true
	}
	start := 0
	for {
		end := lr.sp.Next(lr.buf[lr.scanned:])
		if end < 0 {
			lr.scanned = len(lr.buf)
			break
		}
		end += lr.scanned
		b := lr.buf[start:end]
		if lr.skip {
			lr.skip = false
		} else {
			line(b, lr.line)
		}
		lr.line += 1 + bytes.Count(b, newline)
		start, lr.scanned = end+1, end+1
	}
	// Keep the partial line; drop an over-long one's bytes as they come
	// (one byte more than the limit may be the \r before its \n), still
	// counting their newlines.
	if len(lr.buf)-start > lr.maxBytes+1 {
		if !lr.skip {
			tooLong(lr.line)
			lr.skip = true
		}
		lr.line += bytes.Count(lr.buf[start:], newline)
		start = len(lr.buf)
	}
	// Only when a line ended: moving the partial line on every read would
	// cost a long line's length per read (quadratic when it trickles in).
	if start > 0 {
		rest := copy(lr.buf, lr.buf[start:])
		lr.buf = lr.buf[:rest]
		lr.scanned -= start
		// A long line ended: the room it took goes back.
		if lr.room != nil && cap(lr.buf) > lineReadBytes && rest <= lineReadBytes/2 {
			nb := make([]byte, rest, lineReadBytes)
			copy(nb, lr.buf)
			lr.room(-int64(cap(lr.buf) - lineReadBytes))
			lr.buf = nb
		}
	}
}

// partial returns the bytes of the line being assembled (nil while an
// over-long line is being dropped) and its number.
func (lr *lineReader) partial() ([]byte, int) {
	if lr.skip {
		return nil, lr.line
	}
	return lr.buf, lr.line
}

var newline = []byte{'\n'}
