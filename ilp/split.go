package ilp

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
