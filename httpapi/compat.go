package httpapi

import (
	"net/http"
	"regexp"
)

var (
	createDatabase = regexp.MustCompile(`(?i)^\s*CREATE\s+DATABASE\s+`)
	showDatabases  = regexp.MustCompile(`(?i)^\s*SHOW\s+DATABASES\s*;?\s*$`)
)

// query answers the InfluxQL statements real writers send (SPEC §3.1):
// CREATE DATABASE (Telegraf's v1 output at start) succeeds without effect,
// since databases do not namespace tables; SHOW DATABASES lists one,
// "ingestd". Anything else is 400 with an error key.
func (a *API) query(w http.ResponseWriter, r *http.Request) {
	q := r.FormValue("q")
	switch {
	case createDatabase.MatchString(q):
		writeJSON(w, http.StatusOK, map[string]any{"results": []any{map[string]any{"statement_id": 0}}})
	case showDatabases.MatchString(q):
		writeJSON(w, http.StatusOK, map[string]any{"results": []any{map[string]any{
			"statement_id": 0,
			"series": []any{map[string]any{
				"name": "databases", "columns": []string{"name"}, "values": [][]string{{"ingestd"}},
			}},
		}}})
	default:
		msg := "ingestd answers only CREATE DATABASE and SHOW DATABASES; read data with GET /drain"
		writeJSON(w, http.StatusBadRequest, errorBody{Code: CodeInvalidParameter, Message: msg, Error: msg})
	}
}
