// Package httpapi is ingestd's HTTP surface (SPEC §3.1 compatibility
// endpoints, §5 table management, §6 drain, §7 metrics): a chi router,
// thin handlers (decode, call the feed, map the error) and a purpose-built
// JSON encoder for drain pages. It never imports store or ilp: the ILP
// write handlers are built by package ilp and handed in by cmd/ingestd.
//
// Every response carries X-Influxdb-Version and X-Influxdb-Build, as
// InfluxDB's do, so clients that probe them accept ingestd. Errors are one
// JSON object {"code","message"} with a stable machine-readable code (see
// errors.go); drain refusals add the table's epoch, seq and watermark.
package httpapi
