// Package ilp takes InfluxDB line protocol (ILP) over HTTP and TCP and hands
// parsed batches to the feed's sequencer (docs/guide.md#writing-data).
//
// parse.go and split.go are pure: they take bytes and return points or a
// *ParseError, and import no I/O. http.go (the /write and /api/v2/write
// handler) and tcp.go (the TCP listener) do the reading, limits,
// decompression and concurrency.
//
// Lines are split by a quote-aware scanner (a newline inside a quoted string
// field value belongs to the string, as Telegraf sends it), then each line
// is decoded by github.com/influxdata/line-protocol/v2 with the stricter
// rules of docs/guide.md#line-rules on top: every part of every line is read; duplicate tag
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
// Known series: a Parser remembers the measurement and tag section of the
// lines it parsed (when it holds no backslash, its first space ends it) with
// its table, sorted tags and canonical series key. A later line starting
// with the same bytes shares them and has only its field set and timestamp
// decoded: by plainFields when they are plain (keys and strings without
// backslashes, which is what writers send), else by the decoder behind a
// one-byte measurement. Any error sends the line through the full parse,
// which reports it with its column; so the results are those of the full
// parse, byte for byte, which FuzzParse checks (each line alone, and the
// same bytes parsed twice). Measurement and tag section are the bulk of a
// typical line (TSBS: two thirds), so a known series halves the cost of a
// line. A Parser holds at most 4,096 known series of at most 1 MiB of
// sections together, emptied when full. A known series also remembers the
// field keys of its last plain line (its shape): a line with the same keys
// in the same order, as writers send them, has them matched byte for byte
// instead of scanned and checked again.
//
// The HTTP handler keeps up to 8 idle Parsers (parserPool): a body finds
// the series of earlier bodies known, and, since Parser.Reuse hands out
// again the field sets' memory of a batch the sequencer has answered,
// parses into memory already in use instead of fresh memory.
//
// Over TCP a lineReader assembles lines from the reads: it keeps only the
// partial line, drops an over-long line's bytes as they arrive, and gives
// the same lines, numbered the same way, whatever the read boundaries. A
// connection buffers at most one batch (TCPBatchLines or TCPBatchBytes) and
// one in flight; while the sequencer cannot take the next it stops reading.
//
// testdata/corpus holds the golden corpus (input, precision, expected
// points or line:column errors; regenerate with go test ./ilp -update) and
// FuzzParse checks whole against split input, each line alone, a second
// pass with every series known, and re-encoding round trips.
//
// String field escapes follow line-protocol/v2: \\, \", \n, \t and \r
// decode to the character and any other backslash stays literal. InfluxDB
// 1.x and 2.x keep \n as the two characters backslash and n.
package ilp
