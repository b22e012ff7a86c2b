package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/ingestd/ingestd/httpapi/wire"
)

// SyncStatus is SHOW SYNC (docs/reference.md#tables): the body of GET, PUT
// /api/v1/tables/{t}/sync and POST …/truncate (wire.SyncStatus, which the
// server writes).
type SyncStatus = wire.SyncStatus

// Column is one column of SHOW COLUMNS (wire.Column).
type Column = wire.Column

// TableStats is what a table holds (wire.TableStats).
type TableStats = wire.TableStats

// Table is one table as the table routes show it (wire.Table).
type Table = wire.Table

// TableOptions is the body of CreateTable; nil fields are left out.
type TableOptions struct {
	// Sync: a new table's sync (false when nil); on an existing table
	// SET SYNC when set, unchanged when nil.
	Sync *bool `json:"sync,omitempty"`
	// Retention: "30d", "12h", "0" (forever) …; nil keeps it (or
	// --default-retention on a new table).
	Retention *string `json:"retention,omitempty"`
}

// tablePath is /api/v1/tables/{name}, name escaped as a path segment.
func tablePath(name string) string { return "/api/v1/tables/" + url.PathEscape(name) }

// CreateTable is CREATE TABLE (PUT /api/v1/tables/{name}), idempotent: it
// returns the table and whether this call created it (201; false: it
// existed, 200, and o's fields were applied to it). Errors: invalid table
// name (400), ErrTableExists never, table_limit (409).
func (c *Client) CreateTable(ctx context.Context, name string, o TableOptions) (Table, bool, error) {
	var t Table
	body, err := json.Marshal(o)
	if err != nil {
		return t, false, err
	}
	r, err := c.Do(ctx, http.MethodPut, tablePath(name), http.Header{"Content-Type": {"application/json"}}, body)
	if err != nil {
		return t, false, err
	}
	return t, r.StatusCode == http.StatusCreated, c.decode("PUT "+tablePath(name), r.Body, &t)
}

// SetSync is ALTER TABLE SET SYNC [OFF] and returns the new state;
// enabling a table whose sync is OFF bumps its epoch. ErrTableNotFound
// when it does not exist.
func (c *Client) SetSync(ctx context.Context, name string, enabled bool) (SyncStatus, error) {
	var st SyncStatus
	err := c.callJSON(ctx, http.MethodPut, tablePath(name)+"/sync", map[string]bool{"enabled": enabled}, &st)
	return st, err
}

// Truncate is TRUNCATE: it deletes the table's rows and columns, bumps
// the epoch, keeps seq, and returns the new state.
func (c *Client) Truncate(ctx context.Context, name string) (SyncStatus, error) {
	var st SyncStatus
	err := c.callJSON(ctx, http.MethodPost, tablePath(name)+"/truncate", nil, &st)
	return st, err
}

// DropTable is DROP TABLE; ErrTableNotFound when it does not exist.
func (c *Client) DropTable(ctx context.Context, name string) error {
	return c.callJSON(ctx, http.MethodDelete, tablePath(name), nil, nil)
}

// Tables is SHOW TABLES: every table with its sync state, by name.
func (c *Client) Tables(ctx context.Context) ([]Table, error) {
	var body struct {
		Tables []Table `json:"tables"`
	}
	err := c.callJSON(ctx, http.MethodGet, "/api/v1/tables", nil, &body)
	return body.Tables, err
}

// Table is SHOW COLUMNS: the table with its columns (and stats when the
// server counts them); ErrTableNotFound when it does not exist.
func (c *Client) Table(ctx context.Context, name string) (Table, error) {
	var t Table
	err := c.callJSON(ctx, http.MethodGet, tablePath(name), nil, &t)
	return t, err
}

// Sync is SHOW SYNC; ErrTableNotFound when the table does not exist.
func (c *Client) Sync(ctx context.Context, name string) (SyncStatus, error) {
	var st SyncStatus
	err := c.callJSON(ctx, http.MethodGet, tablePath(name)+"/sync", nil, &st)
	return st, err
}

// Consumer is one named consumer of a table (docs/contract.md#consumers).
type Consumer struct {
	// Name is the consumer's name.
	Name string `json:"name"`
	// Owner is the name of the token that owns the consumer ("" when it
	// was created without access control).
	Owner string `json:"owner,omitempty"`
	// Epoch is the epoch of the consumer's last acknowledged position.
	Epoch uint64 `json:"epoch"`
	// Position is the x_seq up to which the consumer applied the feed.
	Position uint64 `json:"position"`
	// LastSeen is when the consumer last drained.
	LastSeen time.Time `json:"last_seen"`
	// HoldsHistory reports whether the consumer holds the table's history
	// horizon at Position + 1 (--consumer-holds-history).
	HoldsHistory bool `json:"holds_history,omitempty"`
	// HoldUntil is when that hold lapses unless the consumer drains again
	// (zero when not holding).
	HoldUntil time.Time `json:"hold_until,omitzero"`
}

// Consumers lists the table's named consumers by name.
func (c *Client) Consumers(ctx context.Context, table string) ([]Consumer, error) {
	var body struct {
		Consumers []Consumer `json:"consumers"`
	}
	err := c.callJSON(ctx, http.MethodGet, tablePath(table)+"/consumers", nil, &body)
	return body.Consumers, err
}

// Position returns the named consumer of table; ErrConsumerNotFound when
// the table has none of that name.
func (c *Client) Position(ctx context.Context, table, name string) (Consumer, error) {
	cs, err := c.Consumers(ctx, table)
	if err != nil {
		return Consumer{}, err
	}
	for _, cons := range cs {
		if cons.Name == name {
			return cons, nil
		}
	}
	return Consumer{}, &Error{StatusCode: http.StatusNotFound, Code: wire.CodeConsumerNotFound, Message: "no consumer " + name + " on table " + table}
}

// Ack records that consumer name has applied table's feed up to after in
// epoch (a one-row drain with consumer=name, as docs/contract.md#consumers records it); the
// drain's refusals are returned as Drain returns them.
func (c *Client) Ack(ctx context.Context, table, name string, epoch, after uint64) error {
	_, err := c.Drain(ctx, DrainRequest{Table: table, Epoch: epoch, After: after, Limit: 1, Consumer: name})
	return err
}

// DeleteConsumer forgets the named consumer; ErrConsumerNotFound or
// ErrTableNotFound when there is none.
func (c *Client) DeleteConsumer(ctx context.Context, table, name string) error {
	return c.callJSON(ctx, http.MethodDelete, tablePath(table)+"/consumers/"+url.PathEscape(name), nil, nil)
}
