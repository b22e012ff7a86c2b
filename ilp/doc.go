// Package ilp takes InfluxDB line protocol (ILP) over HTTP and TCP and hands
// parsed batches to the feed's sequencer (SPEC §3).
//
// parse.go and split.go are pure: they take bytes and return points or a
// *ParseError, and import no I/O. http.go (the /write and /api/v2/write
// handler) and tcp.go (the TCP listener) do the reading, limits,
// decompression and concurrency.
//
// Lines are split by a quote-aware scanner (a newline inside a quoted string
// field value belongs to the string, as Telegraf sends it), then each line
// is decoded by github.com/influxdata/line-protocol/v2 with the stricter
// rules of SPEC §3.1 on top: every part of every line is read; duplicate tag
// keys are rejected and tags sorted; duplicate field keys keep the last
// value unless their types clash; hex floats, NaN, ±Inf and digits
// separated by underscores are rejected;
// timestamps must lie within ±9223372036854775806 ns; measurements and keys
// follow feed.CheckName (no control character, at most Limits.MaxKeyBytes);
// a line without a timestamp gets the receive time truncated to the
// precision; invalid UTF-8 is rejected; one leading byte-order mark
// and a \r before \n are stripped; lines of only spaces and tabs are blank,
// and so are comments indented by them.
//
// Over TCP a lineReader assembles lines from the reads: it keeps only the
// partial line, drops an over-long line's bytes as they arrive, and gives
// the same lines, numbered the same way, whatever the read boundaries. A
// connection buffers at most one batch (TCPBatchLines or TCPBatchBytes) and
// one in flight; while the sequencer cannot take the next it stops reading.
//
// testdata/corpus holds the golden corpus (input, precision, expected
// points or line:column errors; regenerate with go test ./ilp -update) and
// FuzzParse checks whole against split input and re-encoding round trips.
//
// String field escapes follow line-protocol/v2: \\, \", \n, \t and \r
// decode to the character and any other backslash stays literal. InfluxDB
// 1.x and 2.x keep \n as the two characters backslash and n.
package ilp
