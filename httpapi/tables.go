package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/httpapi/auth"
	"github.com/ingestd/ingestd/httpapi/wire"
)

// maxControlBody bounds table-management request bodies.
const maxControlBody = 64 << 10

func syncBody(s feed.SyncStatus) wire.SyncStatus {
	return wire.SyncStatus{Enabled: s.Enabled, Epoch: s.Epoch, Seq: s.Seq, Watermark: s.Watermark, Horizon: s.Horizon}
}

// withStats adds the table's counted contents to out when Options.Stats
// is set.
func (a *API) withStats(out *wire.Table) error {
	if a.opts.Stats == nil {
		return nil
	}
	st, err := a.opts.Stats.TableStats(out.Name)
	if errors.Is(err, feed.ErrNotServed) {
		return nil // no counts here: another node keeps the rows
	}
	if err != nil {
		return err
	}
	out.Stats = &wire.TableStats{
		Fragments: st.Fragments, RowsEstimate: st.RowsEstimate, Series: st.Series, Bytes: st.Bytes,
		CountedAt: st.ComputedAt.UTC().Format(time.RFC3339Nano),
	}
	return nil
}

func tableBody(t feed.TableInfo, withColumns bool) wire.Table {
	out := wire.Table{Name: t.Name, Sync: syncBody(t.Sync), Retention: feed.FormatRetention(t.Retention)}
	if withColumns {
		out.Columns = make([]wire.Column, len(t.Columns))
		for i, c := range t.Columns {
			typ := c.Kind.String()
			if c.Kind == feed.KindTime {
				typ = "time"
			}
			out.Columns[i] = wire.Column{Name: c.Name, Type: typ}
		}
	}
	return out
}

// decodeBody decodes a JSON request body into v, rejecting unknown fields.
// An empty body leaves v as is when optional.
func decodeBody(r *http.Request, v any, optional bool) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxControlBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) {
		if optional {
			return nil
		}
		return errors.New("request body is empty")
	}
	if err != nil {
		return fmt.Errorf("decode JSON body: %w", err)
	}
	return nil
}

// listTables lists the tables; with an auth file, those on which the
// token holds some scope.
func (a *API) listTables(w http.ResponseWriter, r *http.Request) {
	g := auth.FromContext(r.Context())
	ts := a.opts.Tables.Tables()
	res := pageBytes{b: a.budget, client: requestClient(r)}
	defer res.release()
	if err := res.reserve(r.Context(), tableListBytes(ts, g)); err != nil {
		writeErr(w, err)
		return
	}
	out := make([]wire.Table, 0, len(ts))
	for _, t := range ts {
		if g != nil && !g.Allows(auth.Any, t.Name) {
			continue
		}
		tj := tableBody(t, false)
		if err := a.withStats(&tj); err != nil && !errors.Is(err, feed.ErrTableNotFound) {
			writeErr(w, err)
			return
		}
		out = append(out, tj)
	}
	writeJSON(w, http.StatusOK, map[string]any{"tables": out})
}

// tableListBytes bounds the bytes of a list of ts as g sees them (GET
// /api/v1/tables, SHOW TABLES): each name JSON-escaped (at most 6 bytes a
// byte) and the fields around it. The list reserves them in the response
// budget before it is built, as a page does: 10,000 tables of long names
// are tens of megabytes, which a client that does not read holds until
// --http-write-timeout.
func tableListBytes(ts []feed.TableInfo, g *auth.Grant) int64 {
	n := int64(64)
	for _, t := range ts {
		if g == nil || g.Allows(auth.Any, t.Name) {
			n += 6*int64(len(t.Name)) + tableListEntryBytes
		}
	}
	return n
}

// tableListEntryBytes bounds a listed table's bytes besides its name (its
// sync state, retention and counts).
const tableListEntryBytes = 512

// columnsListBytes bounds the bytes of table's columns as an answer lists
// them (SHOW COLUMNS, the "columns" of a JSON page): each name
// JSON-escaped at worst and its type. Such a list is reserved in the
// response budget with the answer: 1,020 columns of 4,000-byte names make
// an 8 MB list, which a reader that does not read would otherwise hold
// outside it. 0 for a table that does not exist (the answer is an error).
func (a *API) columnsListBytes(table string) int64 {
	t, err := a.opts.Tables.Table(table)
	if err != nil {
		return 0
	}
	n := int64(tableListEntryBytes)
	for _, c := range t.Columns {
		n += 6*int64(len(c.Name)) + columnListEntryBytes
	}
	return n
}

// columnListEntryBytes bounds a listed column's bytes besides its name.
const columnListEntryBytes = 48

// audit records r's control action on table in the audit log: outcome
// "ok", or err's error code.
func (a *API) audit(r *http.Request, action, table string, err error, attrs ...any) {
	outcome := "ok"
	if err != nil {
		status, code := errorStatus(err)
		outcome = code
		if status == statusClientClosed {
			outcome = "client_closed"
		}
	}
	token := ""
	if g := auth.FromContext(r.Context()); g != nil {
		token = g.Name()
	}
	a.opts.Audit.Record(token, action, table, outcome, r.RemoteAddr, attrs...)
}

func (a *API) getTable(w http.ResponseWriter, r *http.Request) {
	res := pageBytes{b: a.budget, client: requestClient(r)}
	defer res.release()
	if err := res.reserve(r.Context(), a.columnsListBytes(pathParam(r, "table"))); err != nil {
		writeErr(w, err)
		return
	}
	t, err := a.opts.Tables.Table(pathParam(r, "table"))
	if err != nil {
		writeErr(w, err)
		return
	}
	out := tableBody(t, true)
	if err := a.withStats(&out); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) putTable(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Sync      *bool   `json:"sync"`
		Retention *string `json:"retention"`
	}
	if err := decodeBody(r, &body, true); err != nil {
		writeClientErr(w, wire.CodeInvalidBody, err.Error())
		return
	}
	opts := feed.TableOptions{Sync: body.Sync}
	if body.Retention != nil {
		d, err := feed.ParseRetention(*body.Retention)
		if err != nil {
			writeClientErr(w, wire.CodeInvalidBody, err.Error())
			return
		}
		opts.Retention = &d
	}
	name := pathParam(r, "table")
	created, info, err := a.opts.Creator.PutTable(r.Context(), name, opts)
	attrs := []any{"created", created}
	if body.Sync != nil {
		attrs = append(attrs, "sync", *body.Sync)
	}
	if opts.Retention != nil {
		attrs = append(attrs, "retention", feed.FormatRetention(*opts.Retention))
	}
	a.audit(r, "table.create", name, err, attrs...)
	if err != nil {
		writeErr(w, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	info.Name = name
	writeJSON(w, status, tableBody(info, false))
}

func (a *API) deleteTable(w http.ResponseWriter, r *http.Request) {
	err := a.opts.Admin.Drop(r.Context(), pathParam(r, "table"))
	a.audit(r, "table.drop", pathParam(r, "table"), err)
	if err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) getSync(w http.ResponseWriter, r *http.Request) {
	st, err := a.opts.Tables.Status(pathParam(r, "table"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, syncBody(st))
}

func (a *API) putSync(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Enabled *bool `json:"enabled"`
	}
	if err := decodeBody(r, &body, false); err != nil {
		writeClientErr(w, wire.CodeInvalidBody, err.Error())
		return
	}
	if body.Enabled == nil {
		writeClientErr(w, wire.CodeInvalidBody, `body must be {"enabled": true|false}`)
		return
	}
	st, err := a.opts.Admin.SetSync(r.Context(), pathParam(r, "table"), *body.Enabled)
	a.audit(r, "sync.set", pathParam(r, "table"), err, "enabled", *body.Enabled)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, syncBody(st))
}

func (a *API) truncate(w http.ResponseWriter, r *http.Request) {
	st, err := a.opts.Admin.Truncate(r.Context(), pathParam(r, "table"))
	a.audit(r, "table.truncate", pathParam(r, "table"), err)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, syncBody(st))
}

type consumerJSON struct {
	Name string `json:"name"`
	// Owner is the name of the token that owns the consumer (omitted
	// without access control).
	Owner    string `json:"owner,omitempty"`
	Epoch    uint64 `json:"epoch"`
	Position uint64 `json:"position"`
	LastSeen string `json:"last_seen"`
	// HoldsHistory and HoldUntil report a hold on the history horizon.
	HoldsHistory bool   `json:"holds_history,omitempty"`
	HoldUntil    string `json:"hold_until,omitempty"`
}

func (a *API) listConsumers(w http.ResponseWriter, r *http.Request) {
	cs, err := a.opts.Consumers.Consumers(pathParam(r, "table"))
	if err != nil {
		writeErr(w, err)
		return
	}
	out := make([]consumerJSON, len(cs))
	for i, c := range cs {
		out[i] = consumerJSON{Name: c.Name, Owner: c.Owner, Epoch: c.Epoch, Position: c.Position, LastSeen: c.LastSeen.Format(time.RFC3339Nano), HoldsHistory: c.HoldsHistory}
		if c.HoldsHistory {
			out[i].HoldUntil = c.HoldUntil.Format(time.RFC3339Nano)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"consumers": out})
}

func (a *API) deleteConsumer(w http.ResponseWriter, r *http.Request) {
	table := pathParam(r, "table")
	err := a.opts.Consumers.DeleteConsumer(table, pathParam(r, "consumer"), principal(r, table))
	a.audit(r, "consumer.delete", pathParam(r, "table"), err, "consumer", pathParam(r, "consumer"))
	if err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
