package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/ingestd/ingestd/httpapi/wire"
)

// TestRoutesMatchAPISpec walks the chi router and requires its routes to
// equal api.yaml's operations, in both directions (docs/design.md#engineering-rules).
func TestRoutesMatchAPISpec(t *testing.T) {
	h := http.NotFoundHandler()
	api := New(Options{WriteV1: h, WriteV2: h, Metrics: h}, nil)
	var routes []string
	err := chi.Walk(api.Router(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.TrimSuffix(strings.ReplaceAll(route, "/*", ""), "/")
		if route == "" {
			route = "/" // the status page
		}
		routes = append(routes, method+" "+route)
		return nil
	})
	require.NoError(t, err)

	raw, err := os.ReadFile("../api.yaml")
	require.NoError(t, err)
	var spec struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &spec))
	var documented []string
	for path, ops := range spec.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	sort.Strings(routes)
	sort.Strings(documented)
	require.Equal(t, documented, routes)
}

// TestUnroutedAnswersJSON: a path no route serves is 404 not_found and a
// routed path asked with another method 405 method_not_allowed with
// Allow, both as the JSON error object api.yaml documents (never Go's
// plain-text "404 page not found"); /query's refusal of other InfluxQL
// names the SQL endpoint.
func TestUnroutedAnswersJSON(t *testing.T) {
	h := http.NotFoundHandler()
	api := New(Options{WriteV1: h, WriteV2: h, Metrics: h}, nil)
	raw, err := os.ReadFile("../api.yaml")
	require.NoError(t, err)
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	require.NoError(t, err)
	errSchema := doc.Components.Schemas["Error"].Value
	for _, c := range []struct {
		method, target string
		status         int
		code, allow    string
		message        string
	}{
		{http.MethodGet, "/nope", http.StatusNotFound, wire.CodeNotFound, "", `no route GET "/nope"`},
		{http.MethodGet, "/api/v1/tables/cpu/nope", http.StatusNotFound, wire.CodeNotFound, "", "see GET /api.yaml"},
		{http.MethodPost, "/favicon.ico/x", http.StatusNotFound, wire.CodeNotFound, "", "no route"},
		{http.MethodDelete, "/drain", http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "GET", `method "DELETE" is not allowed on "/drain"`},
		{http.MethodPut, "/ping", http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "GET, HEAD", "allowed: GET, HEAD"},
		{"PATCH", "/api/v1/tables/cpu", http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "GET, PUT, DELETE", "PATCH"},
		{"PATCH", "/api/v1/tables/cpu/", http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "GET, PUT, DELETE", "PATCH"},
		{http.MethodHead, "/", http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "GET", "HEAD"},
		{http.MethodGet, "/query?q=SELECT+*+FROM+cpu", http.StatusBadRequest, wire.CodeInvalidParameter, "", "/api/v1/sql"},
	} {
		t.Run(c.method+" "+c.target, func(t *testing.T) {
			rec := httptest.NewRecorder()
			api.ServeHTTP(rec, httptest.NewRequest(c.method, c.target, nil))
			require.Equal(t, c.status, rec.Code, rec.Body.String())
			require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			require.Equal(t, Version, rec.Header().Get("X-Influxdb-Version"))
			require.Equal(t, c.allow, rec.Header().Get("Allow"))
			var body map[string]any
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
			require.NoError(t, errSchema.VisitJSON(body), "api.yaml's Error: %s", rec.Body.String())
			require.Equal(t, c.code, body["code"])
			require.Contains(t, body["message"], c.message)
		})
	}
}
