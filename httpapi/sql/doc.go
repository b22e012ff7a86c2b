// Package sql parses the SQL statements that ingestd serves at
// POST /api/v1/sql (docs/guide.md#sql): one statement per request, turned into a
// Statement (the AST) that package httpapi executes through the feed.
//
// # Grammar
//
//	CREATE TABLE [IF NOT EXISTS] t [(col TYPE [TAG], …)] [WITH (SYNC)]
//	    TYPE: DOUBLE | BIGINT | UBIGINT | VARCHAR | TEXT | BOOLEAN | TIMESTAMP | TAG
//	ALTER TABLE t SET SYNC [OFF]
//	SHOW SYNC FROM t | SHOW COLUMNS FROM t | SHOW TABLES
//	TRUNCATE [TABLE] t
//	DROP TABLE [IF EXISTS] t
//	INSERT INTO t (col, …) VALUES (value, …)[, (value, …)]…
//	SELECT * | col, … FROM t WHERE [x_epoch = E AND] x_seq > N LIMIT L          -- a drain
//	SELECT * | col, … FROM t [WHERE time >= a AND time < b AND tag = 'v' …]
//	    [ORDER BY time [ASC | DESC]] LIMIT L                                    -- a read
//
// Keywords are case-insensitive; identifiers are bare ([letter or _]
// followed by letters, digits, _) or double-quoted ("…", "" for a quote,
// any name ILP allows); string literals are single-quoted ('…', a quote
// doubled inside); numbers are decimal integers or floats, optionally negative;
// TRUE, FALSE and NULL. A trailing ';' is allowed, "--" starts a comment
// to the end of the line.
//
// # Errors
//
// Every error is an *Error with the 1-based line and column (counted in
// characters) of the token at fault and what was expected there, e.g.
// "syntax error at line 1, column 23: expected LIMIT". The seed's rules are
// checked here, with positions: LIMIT is required on every SELECT
// (Error.LimitRequired), x_seq and x_epoch are never writable and appear
// only in a drain.
//
// # Why a parser of our own
//
// The language is eleven statements with no expressions beyond AND-ed
// comparisons. A hand-written lexer and recursive-descent parser is a few
// hundred lines, knows the exact position of every token and can say what
// it expected there in the statement's own terms ("expected LIMIT",
// "x_seq is never writable"). General SQL parser libraries (vitess's
// sqlparser, pingcap's TiDB parser) are generated LALR parsers for the
// MySQL dialect: they report "syntax error at position N near 'x'" with
// no expectation, accept far more than ingestd can run (every rejection
// would then be a second, position-less pass over their AST), and pull in
// tens of thousands of lines.
//
// Parse is pure (no I/O) and safe for concurrent use.
package sql
