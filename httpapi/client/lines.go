package client

// lpLines splits an lp page into its lines the way line protocol does: a
// newline ends a line except inside a quoted string field value, where
// the server writes it raw. It calls fn with each line (without its
// newline) until fn returns false, and reports whether the body ended
// with a complete line (or was empty).
func lpLines(body []byte, fn func(line []byte) bool) bool {
	const (
		inKey = iota // measurement and tag set
		inFields
		inString
		inTime
	)
	state, start, escaped, afterEq := inKey, 0, false, false
	for i := 0; i < len(body); i++ {
		c := body[i]
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
			if !fn(body[start:i]) {
				return true
			}
			state, start = inKey, i+1
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
	return start == len(body)
}

// countLines returns the lines of an lp page (lpLines).
func countLines(body []byte) int {
	n := 0
	lpLines(body, func([]byte) bool { n++; return true })
	return n
}
