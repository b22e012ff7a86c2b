package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/require"
)

// TestResponsesMatchAPISpec sends requests covering every route and its
// error codes to a running daemon and validates each real request and
// response against api.yaml (docs/design.md#engineering-rules).
func TestResponsesMatchAPISpec(t *testing.T) {
	openapi3filter.RegisterBodyDecoder("application/x-ndjson", openapi3filter.FileBodyDecoder)
	defer openapi3filter.UnregisterBodyDecoder("application/x-ndjson")
	openapi3filter.RegisterBodyDecoder("text/csv", openapi3filter.FileBodyDecoder)
	defer openapi3filter.UnregisterBodyDecoder("text/csv")
	// The status page: its schema is a string; the DOM is checked in
	// TestStatusPage (status_test.go).
	openapi3filter.RegisterBodyDecoder("text/html", func(r io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
		b, err := io.ReadAll(r)
		return string(b), err
	})
	defer openapi3filter.UnregisterBodyDecoder("text/html")
	raw, err := os.ReadFile("../../api.yaml")
	require.NoError(t, err)
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(context.Background()))

	cfg := testConfig(t.TempDir())
	cfg.feed.MaxConsumersPerTable = 1
	cfg.ilp.MaxBodyBytes = 1 << 10
	cfg.http.SQLMaxStatementBytes = 1 << 10
	d := startDaemon(t, cfg)
	doc.Servers = openapi3.Servers{{URL: d.URL}}
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)

	type call struct {
		method, path, body string
		header             map[string]string
		status             int
	}
	big := strings.Repeat("m v=1 1\n", 200)
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	jsonBody := map[string]string{"Content-Type": "application/json"}
	calls := []call{
		{"GET", "/", "", nil, 200},
		{"GET", "/ping", "", nil, 204},
		{"HEAD", "/ping", "", nil, 204},
		{"GET", "/health", "", nil, 200},
		{"GET", "/query?q=SHOW+DATABASES", "", nil, 200},
		{"GET", "/query?q=CREATE+DATABASE+telegraf", "", nil, 405},
		{"POST", "/query", "q=CREATE+DATABASE+telegraf", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 200},
		{"POST", "/query?q=SELECT+1", "", nil, 400},
		{"PUT", "/api/v1/tables/cpu", `{"sync":true}`, nil, 201},
		{"PUT", "/api/v1/tables/cpu", `{"sync":true}`, nil, 200},
		{"PUT", "/api/v1/tables/cpu", `{"bogus":1}`, nil, 400},
		{"PUT", "/api/v1/tables/x_bad", `{"sync":true}`, nil, 400},
		{"POST", "/write?db=x&precision=s", "cpu,host=a v=1 1\ncpu,host=a v=2 2", nil, 204},
		{"POST", "/write", "", nil, 204},
		{"POST", "/write?precision=d", "cpu v=1", nil, 400},
		{"POST", "/write", "cpu,host=a v=\"s\" 3\ncpu,host=a v=3 4", nil, 400},
		{"POST", "/write", big, nil, 413},
		{"POST", "/write", "cpu v=1", map[string]string{"Content-Encoding": "br"}, 415},
		{"POST", "/write", "garbage", map[string]string{"Content-Encoding": "gzip"}, 400},
		{"POST", "/api/v2/write?org=o&bucket=b&precision=ms", "cpu,host=b v=4 5", nil, 204},
		{"POST", "/api/v2/write", "cpu,host=b v=\"s\" 6\ncpu,host=b v=5 7", nil, 422},
		{"POST", "/api/v2/write", "cpu,host=b v=\"s\" 6", nil, 400},
		{"POST", "/api/v2/write?precision=h", "cpu v=1", nil, 400},
		{"GET", "/metrics", "", nil, 200},
		{"GET", "/api.yaml", "", nil, 200},
		{"GET", "/api/v1/tables", "", nil, 200},
		{"GET", "/api/v1/tables/cpu", "", nil, 200},
		{"GET", "/api/v1/tables/nosuch", "", nil, 404},
		{"GET", "/api/v1/tables/cpu/sync", "", nil, 200},
		{"GET", "/api/v1/tables/nosuch/sync", "", nil, 404},
		{"GET", "/api/v1/tables/%FF/sync", "", nil, 400},
		{"PUT", "/api/v1/tables/a%00b", `{"sync":true}`, nil, 400},
		{"DELETE", "/api/v1/tables/cpu/consumers/%FF", "", nil, 400},
		{"GET", "/api/v1/tables?x=%zz", "", nil, 400},
		{"GET", "/drain?table=cpu&limit=1&limit=2", "", nil, 400},
		{"GET", "/drain?table=cpu&limit=1&columns=time,time", "", nil, 400},
		{"GET", "/drain?table=cpu&limit=1&consumer=%FF", "", nil, 400},
		{"POST", "/write", "cpu v=1 1", map[string]string{"Content-Encoding": "X-Gzip"}, 400},
		{"PUT", "/api/v1/tables/cpu/sync", `{"enabled":true}`, nil, 200},
		{"PUT", "/api/v1/tables/cpu/sync", `{}`, nil, 400},
		{"PUT", "/api/v1/tables/nosuch/sync", `{"enabled":true}`, nil, 404},
		{"GET", "/drain?table=cpu&after=0&limit=10", "", nil, 200},
		{"GET", "/drain?table=cpu&after=0&limit=10&format=ndjson&consumer=m1", "", nil, 200},
		{"GET", "/drain?table=cpu&after=0&limit=10&format=lp&time_format=ns", "", nil, 200},
		{"GET", "/drain?table=cpu&after=0&limit=10&consumer=m2", "", nil, 409},
		{"GET", "/drain?table=cpu&after=0&limit=10&consumer=m1", "", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"GET", "/drain?table=cpu&after=0&limit=10&wait=10ms&columns=time,host,v,x_seq", "", nil, 200},
		{"GET", "/drain?table=cpu&after=0", "", nil, 400},
		{"GET", "/drain?table=cpu&after=0&limit=0", "", nil, 400},
		{"GET", "/drain?table=cpu&after=0&limit=1&columns=nope", "", nil, 400},
		{"GET", "/drain?table=cpu&after=0&limit=1&epoch=9", "", nil, 409},
		{"GET", "/drain?table=cpu&after=999&limit=1", "", nil, 409},
		{"GET", "/drain?table=nosuch&after=0&limit=1", "", nil, 404},
		{"GET", "/api/v1/tables/cpu/consumers", "", nil, 200},
		{"GET", "/api/v1/tables/nosuch/consumers", "", nil, 404},
		{"DELETE", "/api/v1/tables/cpu/consumers/nobody", "", nil, 404},
		{"DELETE", "/api/v1/tables/cpu/consumers/m1", "", nil, 204},
		{"GET", "/api/v1/tables/cpu/rows?limit=1", "", nil, 200},
		{"GET", "/api/v1/tables/cpu/rows?limit=10&start=1970-01-01T00:00:00Z&end=3000000000&format=lp", "", nil, 200},
		{"GET", "/api/v1/tables/cpu/rows?limit=1&cursor=%21%21", "", nil, 400},
		{"GET", "/api/v1/tables/cpu/rows", "", nil, 400},
		{"GET", "/api/v1/tables/nosuch/rows?limit=1", "", nil, 404},
		{"POST", "/api/v1/sql", "q=SELECT+*+FROM+cpu+WHERE+x_seq+>+0+LIMIT+2", form, 200},
		{"GET", "/api/v1/sql?q=SELECT+*+FROM+cpu+WHERE+x_seq+>+0+LIMIT+2", "", map[string]string{"Accept": "text/csv"}, 200},
		{"GET", "/api/v1/sql?q=SHOW+SYNC+FROM+cpu&time_format=ns", "", nil, 200},
		{"GET", "/api/v1/sql?q=SELECT+time,v+FROM+cpu+WHERE+host+%3D+'a'+ORDER+BY+time+DESC+LIMIT+2", "", nil, 200},
		{"GET", "/api/v1/sql?q=SHOW+TABLES", "", map[string]string{"Accept": "application/csv"}, 200},
		{"POST", "/api/v1/sql", `{"q":"CREATE TABLE sq (host TAG, v DOUBLE) WITH (SYNC)"}`, jsonBody, 200},
		{"POST", "/api/v1/sql", `{"q":"CREATE TABLE sq (v DOUBLE)"}`, jsonBody, 409},
		{"POST", "/api/v1/sql", `{"q":"CREATE TABLE sq (v DOUBLE)","x":1}`, jsonBody, 400},
		{"POST", "/api/v1/sql", "q=INSERT+INTO+sq+(host,v)+VALUES+('a',1),('b',2)", form, 200},
		{"POST", "/api/v1/sql", "q=INSERT+INTO+sq+(host,v)+VALUES+('a','x')", form, 400},
		{"POST", "/api/v1/sql", "q=INSERT+INTO+sq+(nope)+VALUES+(1)", form, 400},
		{"POST", "/api/v1/sql?q=SHOW+COLUMNS+FROM+sq", "", nil, 200},
		{"POST", "/api/v1/sql", "q=SELECT+*+FROM+sq+WHERE+x_seq+>+5+LIMIT+1", form, 409},
		{"POST", "/api/v1/sql", "q=SELECT+*+FROM+sq+WHERE+x_epoch+%3D+7+AND+x_seq+>+0+LIMIT+1", form, 409},
		{"POST", "/api/v1/sql", "q=SELECT+*+FROM+sq", form, 400},
		{"POST", "/api/v1/sql", "q=SELEC", form, 400},
		{"POST", "/api/v1/sql", "q=SELECT+*+FROM+nosuch+LIMIT+1", form, 404},
		{"POST", "/api/v1/sql", "q=" + strings.Repeat("x", 2000), form, 413},
		{"GET", "/api/v1/sql?q=DROP+TABLE+sq", "", nil, 405},
		{"POST", "/api/v1/sql", "q=ALTER+TABLE+sq+SET+SYNC+OFF", form, 200},
		{"POST", "/api/v1/sql", "q=SELECT+*+FROM+sq+WHERE+x_seq+>+0+LIMIT+1", form, 409},
		{"POST", "/api/v1/sql", "q=TRUNCATE+sq", form, 200},
		{"POST", "/api/v1/sql", "q=DROP+TABLE+sq", form, 200},
		{"PUT", "/api/v1/tables/cpu/sync", `{"enabled":false}`, nil, 200},
		{"GET", "/drain?table=cpu&after=0&limit=1", "", nil, 409},
		{"POST", "/api/v1/tables/cpu/truncate", "", nil, 200},
		{"POST", "/api/v1/tables/nosuch/truncate", "", nil, 404},
		{"DELETE", "/api/v1/tables/cpu", "", nil, 204},
		{"DELETE", "/api/v1/tables/cpu", "", nil, 404},
	}
	// The refusals of access control, on a daemon with an auth file.
	authFile := filepath.Join(t.TempDir(), "auth.yaml")
	tok := secTokens(t, authFile, map[string][]string{"w": {"write:cpu"}})
	acfg := testConfig(t.TempDir())
	acfg.auth.File = authFile
	ad := startDaemon(t, acfg)
	doc.Servers = append(doc.Servers, &openapi3.Server{URL: ad.URL})
	router, err = gorillamux.NewRouter(doc)
	require.NoError(t, err)
	bearer := map[string]string{"Authorization": "Bearer " + tok["w"]}
	calls = append(calls,
		call{"GET", ad.URL + "/drain?table=cpu&after=0&limit=1", "", nil, 401},
		call{"POST", ad.URL + "/write", "cpu v=1", map[string]string{"Authorization": "Token nope"}, 401},
		call{"POST", ad.URL + "/write", "mem v=1", bearer, 403},
		call{"POST", ad.URL + "/api/v2/write", "mem v=1", bearer, 403},
		call{"GET", ad.URL + "/api/v1/tables/cpu", "", bearer, 403},
		call{"PUT", ad.URL + "/api/v1/tables/cpu", "", bearer, 403},
		call{"GET", ad.URL + "/ping", "", nil, 204},
		call{"POST", "/api/v1/tables/cpu/truncate", "", map[string]string{"Origin": "http://evil.example"}, 403},
		call{"PUT", "/api/v1/tables/cpu/sync", `{"enabled":true}`, map[string]string{"Content-Type": "text/plain"}, 415},
	)
	for _, c := range calls {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			target := c.path
			if !strings.HasPrefix(target, "http") {
				target = d.URL + c.path
			}
			req, err := http.NewRequest(c.method, target, strings.NewReader(c.body))
			require.NoError(t, err)
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, resp.Body.Close())
			require.NoError(t, err)
			require.Equal(t, c.status, resp.StatusCode, "body: %s", body)
			require.NotEmpty(t, resp.Header.Get("X-Influxdb-Version"))
			require.NotEmpty(t, resp.Header.Get("X-Influxdb-Build"))

			route, params, err := router.FindRoute(req)
			require.NoError(t, err, "api.yaml has no operation for %s %s", c.method, c.path)
			in := &openapi3filter.RequestValidationInput{
				Request: req, PathParams: params, Route: route,
				Options: &openapi3filter.Options{ExcludeRequestBody: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
			}
			out := &openapi3filter.ResponseValidationInput{
				RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
				Body:    io.NopCloser(bytes.NewReader(body)),
				Options: &openapi3filter.Options{IncludeResponseStatus: true},
			}
			require.NoError(t, openapi3filter.ValidateResponse(context.Background(), out), "body: %s", body)
		})
	}
}
