package client

import "bytes"

// lpLines splits an lp page into its lines the way line protocol does: a
// newline ends a line except inside a quoted string field value, where
// the server writes it raw. It calls fn with each line (without its
// newline) until fn returns false, and reports whether the body ended
// with a complete line (or was empty). A line holding no double quote
// (no string field: the usual metrics line) ends at its first newline,
// found by bytes.IndexByte; only a line holding one is scanned byte by
// byte (lineEnd).
func lpLines(body []byte, fn func(line []byte) bool) bool {
	start := 0
	for start < len(body) {
		nl := bytes.IndexByte(body[start:], '\n')
		if nl < 0 {
			nl = len(body) - start
		}
		if bytes.IndexByte(body[start:start+nl], '"') >= 0 {
			if nl = lineEnd(body[start:]); nl < 0 {
				return false
			}
		} else if start+nl == len(body) {
			return false // no newline after the last line
		}
		if !fn(body[start : start+nl]) {
			return true
		}
		start += nl + 1
	}
	return true
}

// lineEnd returns the index in b of the newline that ends b's first line
// as line protocol reads it (a newline inside a quoted string field value
// does not), or -1 when b holds none.
func lineEnd(b []byte) int {
	const (
		inKey = iota // measurement and tag set
		inFields
		inString
		inTime
	)
	state, escaped, afterEq := inKey, false, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if escaped {
			escaped = false
			if c != '\n' {
				continue
			}
		}
		wasEq := afterEq
		afterEq = false
		switch {
		case c == '\n' && state != inString:
			return i
		case c == '\\' && state != inTime:
			escaped = true
		case state == inKey && c == ' ':
			state = inFields
		case state == inFields && c == '=':
			afterEq = true
		case state == inFields && c == '"' && wasEq:
			state = inString
		case state == inFields && c == ' ':
			state = inTime
		case state == inString && c == '"':
			state = inFields
		}
	}
	return -1
}

// countLines returns the lines of an lp page (lpLines).
func countLines(body []byte) int {
	n := 0
	lpLines(body, func([]byte) bool { n++; return true })
	return n
}
