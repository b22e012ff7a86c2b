// Package httpapi is ingestd's HTTP surface (docs/reference.md#routes: compatibility
// endpoints, §5 table management, §6 drain, §7 metrics, §11 SQL): a chi
// router, thin handlers (decode, call the feed, map the error) and a
// purpose-built JSON (and CSV) encoder for drain pages and SQL results. It
// never imports store or ilp: the ILP write handlers are built by package
// ilp and handed in by cmd/ingestd. The handlers reach the feed through
// the small interfaces feed.go declares, one per use: the read side
// (TableReader, Drainer, RowReader, Consumers, StatusStats: *feed.Drainer)
// and the write side (TableCreator, TableAdmin, Writer: *feed.Sequencer).
//
// POST /api/v1/sql parses one statement with package httpapi/sql and runs
// it through the same feed methods as the REST routes: a SQL drain is a
// /drain page (servePage), a SQL read walks the feed's Rows pages, INSERT
// submits a batch as an ILP write does.
//
// Every response carries X-Influxdb-Version and X-Influxdb-Build, as
// InfluxDB's do, so clients that probe them accept ingestd. Errors are one
// JSON object {"code","message"} with a stable machine-readable code (see
// errors.go); drain refusals add the table's epoch, seq and watermark, SQL
// errors the statement's line and column.
package httpapi
