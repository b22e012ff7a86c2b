// Package client is the Go client of ingestd's HTTP API (docs/guide.md#from-go,
// api.yaml): ILP writes (/write and /api/v2/write, with precision and
// gzip), table management (create, SET SYNC, TRUNCATE, DROP, list, SHOW
// COLUMNS, SHOW SYNC), the change feed (/drain, with long-poll and named
// consumers) and the copy by time range (/api/v1/tables/{t}/rows).
//
// It speaks HTTP and JSON only: it imports no other package of ingestd, so
// a program that consumes a feed links none of the daemon.
//
// Lifecycle: New → calls → nothing to close (idle connections belong to
// the *http.Client given with WithHTTPClient, http.DefaultClient else).
// A *Client is safe for concurrent use by any number of goroutines; a
// *Page or *RowsPage belongs to the caller that asked for it.
//
// Every refusal of the server is an *Error carrying the HTTP status and
// the code of docs/reference.md#error-codes (stale_epoch, history_expired, table_not_found …);
// drain refusals also carry the table's epoch, seq, watermark and, for
// history_expired, its horizon. Compare with errors.Is against the
// sentinels (ErrStaleEpoch …) or read the fields with errors.As:
//
//	pg, err := c.Drain(ctx, client.DrainRequest{Table: "sensor", Epoch: cur.Epoch, After: cur.Next, Limit: 1000})
//	var refusal *client.Error
//	switch {
//	case errors.Is(err, client.ErrStaleEpoch), errors.Is(err, client.ErrHistoryExpired):
//		// resync in full (copy with Rows, then drain from its epoch and watermark)
//	case errors.As(err, &refusal):
//		// refusal.Code, refusal.StatusCode, refusal.Epoch …
//	}
//
// The client trusts no server: it reads at most WithMaxBodyBytes of an
// answer (DefaultMaxBodyBytes, derived from the server's page limits;
// Content-Length is compared with it, never used to size a buffer), and
// checks every drain and copy page against the request before returning
// it (table, epoch, cursor, next never below the cursor, x_seq ascending
// within (after, next], row counts, the measurement of lp lines). A page
// that breaks the contract is a *ProtocolError wrapping ErrBadPage, one
// too large wraps ErrBodyTooLarge (docs/security.md#client-limits).
//
// Failures of the transport (connection refused, a deadline) are returned
// as net/http returns them, wrapped with the request's method and path.
package client
