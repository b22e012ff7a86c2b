package sql

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// tokKind is a token's class.
type tokKind uint8

const (
	tokEOF    tokKind = iota
	tokIdent          // bare identifier or keyword
	tokQuoted         // "quoted identifier"
	tokString         // 'string literal'
	tokNumber         // 12, 1.5, 2e3
	tokPunct          // ( ) , * ; = < <= > >= - and others
)

// token is one lexed token. text is the decoded value of quoted
// identifiers and strings, the source text otherwise.
type token struct {
	kind tokKind
	text string
	pos  Pos
}

// describe renders the token for "found …" in an error.
func (t token) describe() string {
	switch t.kind {
	case tokEOF:
		return "end of statement"
	case tokString:
		return "string " + quote("'"+t.text+"'")
	case tokQuoted:
		return "identifier " + quote(`"`+t.text+`"`)
	}
	return quote(t.text)
}

// lexer splits a statement into tokens, tracking line and column.
type lexer struct {
	src       string
	off       int
	line, col int // of src[off]
}

func newLexer(src string) *lexer { return &lexer{src: src, line: 1, col: 1} }

// advance moves past one rune.
func (l *lexer) advance() rune {
	r, n := utf8.DecodeRuneInString(l.src[l.off:])
	l.off += n
	if r == '\n' {
		l.line++
		l.col = 1
	} else {
		l.col++
	}
	return r
}

func (l *lexer) peek() rune {
	if l.off >= len(l.src) {
		return -1
	}
	r, _ := utf8.DecodeRuneInString(l.src[l.off:])
	return r
}

func (l *lexer) pos() Pos { return Pos{Line: l.line, Column: l.col} }

// skipSpace skips white space and "--" comments.
func (l *lexer) skipSpace() {
	for l.off < len(l.src) {
		switch r := l.peek(); {
		case unicode.IsSpace(r):
			l.advance()
		case strings.HasPrefix(l.src[l.off:], "--"):
			for l.off < len(l.src) && l.peek() != '\n' {
				l.advance()
			}
		default:
			return
		}
	}
}

// next returns the next token, or an *Error for bytes that make none.
func (l *lexer) next() (token, error) {
	l.skipSpace()
	start := l.pos()
	if l.off >= len(l.src) {
		return token{kind: tokEOF, pos: start}, nil
	}
	r := l.peek()
	switch {
	case isInvalidAt(l.src, l.off):
		return token{}, errAt(start, "the statement is not valid UTF-8")
	case isIdentStart(r):
		from := l.off
		for l.off < len(l.src) && isIdentPart(l.peek()) {
			l.advance()
		}
		return token{kind: tokIdent, text: l.src[from:l.off], pos: start}, nil
	case r >= '0' && r <= '9' || r == '.' && l.off+1 < len(l.src) && isDigit(l.src[l.off+1]):
		return l.number(start)
	case r == '\'' || r == '"':
		return l.quoted(start, r)
	}
	l.advance()
	text := string(r)
	if (r == '<' || r == '>' || r == '!') && l.peek() == '=' || r == '<' && l.peek() == '>' {
		text += string(l.advance())
	}
	return token{kind: tokPunct, text: text, pos: start}, nil
}

// isInvalidAt reports whether src holds an invalid UTF-8 sequence at off.
func isInvalidAt(src string, off int) bool {
	r, n := utf8.DecodeRuneInString(src[off:])
	return r == utf8.RuneError && n <= 1
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isIdentStart(r rune) bool { return r == '_' || unicode.IsLetter(r) }

func isIdentPart(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

// number lexes digits [. digits] [e [+-] digits].
func (l *lexer) number(start Pos) (token, error) {
	from := l.off
	digits := func() int {
		n := 0
		for l.off < len(l.src) && isDigit(l.src[l.off]) {
			l.advance()
			n++
		}
		return n
	}
	digits()
	if l.peek() == '.' {
		l.advance()
		digits()
	}
	if r := l.peek(); r == 'e' || r == 'E' {
		l.advance()
		if r := l.peek(); r == '+' || r == '-' {
			l.advance()
		}
		if digits() == 0 {
			return token{}, expected(l.pos(), "digits of the exponent", l.describeHere())
		}
	}
	if r := l.peek(); isIdentStart(r) {
		return token{}, expected(l.pos(), "a space or an operator after the number", l.describeHere())
	}
	return token{kind: tokNumber, text: l.src[from:l.off], pos: start}, nil
}

// describeHere describes the character at the lexer's position.
func (l *lexer) describeHere() string {
	if l.off >= len(l.src) {
		return "end of statement"
	}
	return quote(string(l.peek()))
}

// quoted lexes a '…' string or "…" identifier whose quote is doubled
// inside it.
func (l *lexer) quoted(start Pos, q rune) (token, error) {
	l.advance()
	var b strings.Builder
	for {
		if l.off >= len(l.src) {
			what := "closing ' of the string"
			if q == '"' {
				what = `closing " of the identifier`
			}
			return token{}, expected(l.pos(), what+" opened at line "+itoa(start.Line)+", column "+itoa(start.Column), "end of statement")
		}
		if isInvalidAt(l.src, l.off) {
			return token{}, errAt(l.pos(), "the statement is not valid UTF-8")
		}
		r := l.advance()
		if r == q {
			if l.peek() != q {
				break
			}
			l.advance()
		}
		b.WriteRune(r)
	}
	kind := tokString
	if q == '"' {
		kind = tokQuoted
	}
	return token{kind: kind, text: b.String(), pos: start}, nil
}
