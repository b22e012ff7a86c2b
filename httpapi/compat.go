package httpapi

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"sync"

	"github.com/ingestd/ingestd/feed"
	"github.com/ingestd/ingestd/httpapi/wire"
)

// DefaultMaxDatabases is the default Config.MaxDatabases.
const DefaultMaxDatabases = 1000

// defaultDatabase is the database SHOW DATABASES always lists.
const defaultDatabase = "ingestd"

var (
	createDatabase = regexp.MustCompile(`(?is)^\s*CREATE\s+DATABASE\s+("(?:[^"\\]|\\.)*"|[^\s;"]+)(?:\s+WITH\s[^;]*)?\s*;?\s*$`)
	showDatabases  = regexp.MustCompile(`(?i)^\s*SHOW\s+DATABASES\s*;?\s*$`)
)

// databases is the set of databases clients created with CREATE DATABASE,
// kept in memory (until restart) and bounded by Options.MaxDatabases.
// They do not namespace tables: a measurement is a table whichever
// database a write names.
type databases struct {
	mu    sync.Mutex // guards names
	names map[string]struct{}
}

// query answers the InfluxQL statements real writers send (docs/guide.md#influxdb-compatibility-routes):
// CREATE DATABASE (Telegraf's v1 output at start; POST only: a GET, which
// a browser sends cross-site without asking, is 405) records the name, which
// SHOW DATABASES then lists with "ingestd", as InfluxDB 1.x does; databases
// do not namespace tables. A name breaking the name rules (docs/contract.md#names) and a
// create past Options.MaxDatabases are 400 invalid_parameter; anything else
// is 400 with an error key.
func (a *API) query(w http.ResponseWriter, r *http.Request) {
	q, ok := a.queryStatement(w, r)
	if !ok {
		return
	}
	if m := createDatabase.FindStringSubmatch(q); m != nil {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			msg := "CREATE DATABASE changes state: send it with POST (GET /query carries SELECT and SHOW only, as InfluxDB 1.x's does)"
			writeJSON(w, http.StatusMethodNotAllowed, wire.ErrorBody{Code: wire.CodeMethodNotAllowed, Message: msg, Error: msg})
			return
		}
		if err := a.createDatabase(m[1]); err != nil {
			writeClientErr(w, wire.CodeInvalidParameter, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"results": []any{map[string]any{"statement_id": 0}}})
		return
	}
	if showDatabases.MatchString(q) {
		names := a.databaseNames()
		// Reserved in the response budget like a table list: a thousand
		// names of 4 KB that escape six times over are a 24 MB answer,
		// which a client that does not read holds until
		// --http-write-timeout.
		res := pageBytes{b: a.budget, client: requestClient(r)}
		defer res.release()
		if err := res.reserve(r.Context(), databaseListBytes(names)); err != nil {
			writeErr(w, err)
			return
		}
		values := [][]string{}
		for _, n := range names {
			values = append(values, []string{n})
		}
		writeJSON(w, http.StatusOK, map[string]any{"results": []any{map[string]any{
			"statement_id": 0,
			"series": []any{map[string]any{
				"name": "databases", "columns": []string{"name"}, "values": values,
			}},
		}}})
		return
	}
	msg := "InfluxQL: ingestd answers only CREATE DATABASE and SHOW DATABASES; read data with SQL at /api/v1/sql (SELECT … FROM table … LIMIT n) or the change feed at GET /drain"
	writeJSON(w, http.StatusBadRequest, wire.ErrorBody{Code: wire.CodeInvalidParameter, Message: msg, Error: msg})
}

// databaseListBytes bounds SHOW DATABASES' answer listing names: each
// JSON-escaped at worst (6 bytes a byte) with its brackets, and the
// envelope.
func databaseListBytes(names []string) int64 {
	n := int64(256)
	for _, name := range names {
		n += 6*int64(len(name)) + 8
	}
	return n
}

// queryStatement returns /query's q: from the query string, or from a
// POST's URL-encoded form body of at most --sql-max-statement-bytes
// (413 past it). Any other body is refused with 415 before a byte is
// read: a multipart body would be parsed by Go's form reader, which
// spools files over 32 MiB to the temporary directory (and, on a request
// a middleware copied, never removes them).
func (a *API) queryStatement(w http.ResponseWriter, r *http.Request) (string, bool) {
	if r.Method == http.MethodPost && r.ContentLength != 0 {
		ct := r.Header.Get("Content-Type")
		if mt, _, err := mime.ParseMediaType(ct); ct != "" && (err != nil || mt != "application/x-www-form-urlencoded") {
			a.m.refused.WithLabelValues(refusedContentType).Inc()
			writeJSONErr(w, http.StatusUnsupportedMediaType, wire.CodeUnsupportedMediaType,
				"a /query body must be application/x-www-form-urlencoded (q=...), got "+feed.QuoteInput(ct))
			return "", false
		}
		r.Body = http.MaxBytesReader(w, r.Body, int64(a.opts.SQLMaxStatementBytes))
		if err := r.ParseForm(); err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				writeJSONErr(w, http.StatusRequestEntityTooLarge, wire.CodeTooLarge,
					fmt.Sprintf("a /query body is at most --sql-max-statement-bytes=%d", a.opts.SQLMaxStatementBytes))
				return "", false
			}
			writeClientErr(w, wire.CodeInvalidBody, "form body cannot be read: "+err.Error())
			return "", false
		}
		if q := r.PostForm.Get("q"); q != "" {
			return q, true
		}
	}
	return r.URL.Query().Get("q"), true
}

// createDatabase records name (an InfluxQL identifier: bare or double
// quoted with backslash escapes). Creating an existing database is a no-op,
// as in InfluxDB.
func (a *API) createDatabase(ident string) error {
	name := ident
	if ident[0] == '"' {
		var err error
		if name, err = strconv.Unquote(ident); err != nil {
			return fmt.Errorf("database name %s cannot be read", feed.QuoteInput(ident))
		}
	}
	if err := feed.CheckName("database", name, feed.DefaultMaxNameBytes); err != nil {
		return err
	}
	d := &a.databases
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.names[name]; ok || name == defaultDatabase {
		return nil
	}
	if len(d.names) >= a.opts.MaxDatabases {
		return fmt.Errorf("database limit reached: at most %d databases (--query-max-databases); databases do not namespace tables, write with any db", a.opts.MaxDatabases)
	}
	d.names[name] = struct{}{}
	return nil
}

// databaseNames lists "ingestd" first, then the created databases by name.
func (a *API) databaseNames() []string {
	d := &a.databases
	d.mu.Lock()
	out := make([]string, 0, len(d.names)+1)
	for n := range d.names {
		out = append(out, n)
	}
	d.mu.Unlock()
	sort.Strings(out)
	return append([]string{defaultDatabase}, out...)
}
