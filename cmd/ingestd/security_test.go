package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	influxdb2 "github.com/influxdata/influxdb-client-go/v2"
	influx1 "github.com/influxdata/influxdb1-client/v2"
	"github.com/stretchr/testify/require"

	"github.com/ingestd/ingestd/cmd/ingestd/cli"
	"github.com/ingestd/ingestd/cmd/ingestd/mirror"
	"github.com/ingestd/ingestd/httpapi/auth"
)

// secTokens creates the tokens of scopes (name → scopes) with `ingestd
// token create` in file and returns them by name.
func secTokens(t testing.TB, file string, scopes map[string][]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, sc := range scopes {
		args := []string{"create", "--auth-file", file, "--name", name}
		for _, s := range sc {
			args = append(args, "--scope", s)
		}
		var stdout, stderr bytes.Buffer
		require.Equal(t, 0, runToken(args, &stdout, &stderr), stderr.String())
		out[name] = strings.TrimSpace(stdout.String())
	}
	return out
}

// tokenClient is newClient sending tok as "Authorization: Token tok".
func tokenClient(t testing.TB, d *daemon, tok string) *apiClient {
	t.Helper()
	c := newClient(t, d)
	c.hc.Transport = tokenTransport{tok: tok, rt: c.hc.Transport}
	return c
}

type tokenTransport struct {
	tok string
	rt  http.RoundTripper
}

func (tt tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Token "+tt.tok)
	return tt.rt.RoundTrip(r)
}

// authDaemon starts a daemon with an auth file holding scopes' tokens
// (reloaded only on SIGHUP) and returns it, the file and the tokens.
func authDaemon(t testing.TB, scopes map[string][]string, mod func(*config)) (*daemon, string, map[string]string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "auth.yaml")
	tok := secTokens(t, file, scopes)
	cfg := testConfig(t.TempDir())
	cfg.auth.File = file
	cfg.auth.ReloadInterval = 0
	if mod != nil {
		mod(&cfg)
	}
	return startDaemon(t, cfg), file, tok
}

// TestAuthScopes checks every route against every scope and credential
// form (docs/operations.md#refusals): 401 without a valid token, 403 without the scope,
// InfluxDB's codes in the error body of docs/contract.md#error-body; the open routes stay open.
func TestAuthScopes(t *testing.T) {
	d, _, tok := authDaemon(t, map[string][]string{
		"admin":  {"admin:*"},
		"writer": {"write:sensor*"},
		"reader": {"drain:sensor*"},
		"room":   {"admin:room", "drain:room"},
		"any":    {"write:*"},
	}, nil)
	admin := tokenClient(t, d, tok["admin"])
	admin.createSyncTable(t, "sensor")
	admin.createSyncTable(t, "room")
	tokenClient(t, d, tok["writer"]).mustWrite(t, "sensor v=1 1\n")
	r := tokenClient(t, d, tok["reader"]).drain(t, url.Values{"table": {"sensor"}, "after": {"0"}, "limit": {"10"}, "consumer": {"c1"}})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)

	anon := newClient(t, d)
	type call struct {
		method, path, body string
		ok                 int    // the status with the right token
		okTok              string // the token that holds the scope
		badTok             string // a valid token without it (403)
	}
	calls := []call{
		{"POST", "/write", "sensor v=2 2\n", 204, "writer", "reader"},
		{"POST", "/api/v2/write?org=o&bucket=b", "sensor v=3 3\n", 204, "writer", "admin"},
		{"POST", "/write", "room v=2 2\n", 204, "any", "writer"},
		{"GET", "/query?q=SHOW+DATABASES", "", 200, "reader", ""},
		{"GET", "/api/v1/tables", "", 200, "reader", ""},
		{"GET", "/api/v1/tables/sensor", "", 200, "reader", "writer"},
		{"GET", "/api/v1/tables/sensor/sync", "", 200, "admin", "writer"},
		{"GET", "/api/v1/tables/sensor/rows?limit=5", "", 200, "reader", "admin"},
		{"GET", "/api/v1/tables/sensor/consumers", "", 200, "reader", "room"},
		{"GET", "/drain?table=sensor&after=0&limit=5", "", 200, "reader", "admin"},
		{"GET", "/drain?table=room&after=0&limit=5", "", 200, "room", "reader"},
		{"PUT", "/api/v1/tables/room/sync", `{"enabled":true}`, 200, "room", "reader"},
		{"POST", "/api/v1/tables/room/truncate", "", 200, "room", "writer"},
		{"PUT", "/api/v1/tables/sensor2", `{"sync":true}`, 201, "admin", "room"},
		{"DELETE", "/api/v1/tables/sensor/consumers/c1", "", 204, "admin", "writer"},
		{"DELETE", "/api/v1/tables/sensor2", "", 204, "admin", "writer"},
	}
	for _, c := range calls {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			body := func() io.Reader { return strings.NewReader(c.body) }
			e := decodeError(t, anon.do(t, c.method, c.path, nil, body()), http.StatusUnauthorized)
			require.Equal(t, "unauthorized", e.Code)
			e = decodeError(t, tokenClient(t, d, "ingestd_not_a_token").do(t, c.method, c.path, nil, body()), http.StatusUnauthorized)
			require.Equal(t, "unauthorized", e.Code)
			if c.badTok != "" {
				e = decodeError(t, tokenClient(t, d, tok[c.badTok]).do(t, c.method, c.path, nil, body()), http.StatusForbidden)
				require.Equal(t, "forbidden", e.Code)
			}
			r := tokenClient(t, d, tok[c.okTok]).do(t, c.method, c.path, nil, body())
			require.Equal(t, c.ok, r.Status, "%s", r.Body)
		})
	}
	t.Run("the table list shows only the token's tables", func(t *testing.T) {
		r := tokenClient(t, d, tok["room"]).get(t, "/api/v1/tables")
		require.Equal(t, http.StatusOK, r.Status)
		require.Contains(t, string(r.Body), `"room"`)
		require.NotContains(t, string(r.Body), `"sensor"`)
	})
	t.Run("open routes", func(t *testing.T) {
		for _, p := range []string{"/ping", "/health", "/metrics", "/api.yaml"} {
			r := anon.get(t, p)
			require.Less(t, r.Status, 300, "%s: %s", p, r.Body)
		}
	})
	t.Run("credential forms", func(t *testing.T) {
		forms := []struct {
			name   string
			hdr    http.Header
			query  string
			status int
		}{
			{"Token", http.Header{"Authorization": {"Token " + tok["writer"]}}, "", 204},
			{"Bearer", http.Header{"Authorization": {"Bearer " + tok["writer"]}}, "", 204},
			{"Basic", http.Header{"Authorization": {basicAuth("telegraf", tok["writer"])}}, "", 204},
			{"u/p", nil, "?u=telegraf&p=" + url.QueryEscape(tok["writer"]), 204},
			{"p repeated", nil, "?p=a&p=" + url.QueryEscape(tok["writer"]), 400},
			{"Digest", http.Header{"Authorization": {"Digest " + tok["writer"]}}, "", 401},
			{"unknown token", http.Header{"Authorization": {"Token " + tok["writer"] + "x"}}, "", 401},
		}
		for _, f := range forms {
			r := anon.do(t, "POST", "/write"+f.query, f.hdr, strings.NewReader("sensor v=9 9\n"))
			require.Equal(t, f.status, r.Status, "%s: %s", f.name, r.Body)
		}
	})
	t.Run("failures counted by reason", func(t *testing.T) {
		m := anon.get(t, "/metrics")
		for _, reason := range []string{"missing", "unknown", "forbidden", "malformed"} {
			require.Regexp(t, `ingestd_auth_failures_total\{reason="`+reason+`"\} [1-9]`, string(m.Body))
		}
	})
}

func basicAuth(user, pass string) string {
	req, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
	req.SetBasicAuth(user, pass)
	return req.Header.Get("Authorization")
}

// sighup sends SIGHUP to this process: the running daemon reloads its
// auth and TLS files. Only call it while a daemon runs (its handler is
// installed; without one SIGHUP would end the test binary).
func sighup(t testing.TB) {
	t.Helper()
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
}

// TestRealClientsWithTokens: influxdb-client-go (Token header) and the
// InfluxDB 1.x client (u/p) write with a token; a wrong token is an error
// each reports.
func TestRealClientsWithTokens(t *testing.T) {
	d, _, tok := authDaemon(t, map[string][]string{"w": {"write"}, "a": {"admin", "drain"}}, nil)
	tokenClient(t, d, tok["a"]).createSyncTable(t, "cpu")

	c2 := influxdb2.NewClient(d.URL, tok["w"])
	defer c2.Close()
	require.NoError(t, c2.WriteAPIBlocking("o", "b").WriteRecord(context.Background(), "cpu,host=a v=1 1"))
	bad := influxdb2.NewClient(d.URL, "nope")
	defer bad.Close()
	err := bad.WriteAPIBlocking("o", "b").WriteRecord(context.Background(), "cpu,host=a v=2 2")
	require.ErrorContains(t, err, "unauthorized")

	c1, err := influx1.NewHTTPClient(influx1.HTTPConfig{Addr: d.URL, Username: "telegraf", Password: tok["w"]})
	require.NoError(t, err)
	defer c1.Close()
	bp, err := influx1.NewBatchPoints(influx1.BatchPointsConfig{Database: "telegraf"})
	require.NoError(t, err)
	pt, err := influx1.NewPoint("cpu", map[string]string{"host": "b"}, map[string]any{"v": 3.0}, time.Unix(0, 3))
	require.NoError(t, err)
	bp.AddPoint(pt)
	require.NoError(t, c1.Write(bp))
	c1bad, err := influx1.NewHTTPClient(influx1.HTTPConfig{Addr: d.URL, Username: "telegraf", Password: "nope"})
	require.NoError(t, err)
	defer c1bad.Close()
	require.Error(t, c1bad.Write(bp))

	p, _ := tokenClient(t, d, tok["a"]).drainOK(t, url.Values{"table": {"cpu"}, "after": {"0"}, "limit": {"10"}})
	require.Equal(t, uint64(2), p.Next, "both clients' points arrived")
}

// TestRevokeEndsLongPolls: revoking a token (ingestd token revoke, then
// SIGHUP) ends at once, with 401, the three long-polls it holds, refuses
// its next request, and leaves other tokens' requests alone; narrowing a
// token's scopes ends its long-poll with 403 (checked again on every pull).
func TestRevokeEndsLongPolls(t *testing.T) {
	d, file, tok := authDaemon(t, map[string][]string{"a": {"admin"}, "d": {"drain"}, "n": {"drain"}, "other": {"drain"}}, nil)
	tokenClient(t, d, tok["a"]).createSyncTable(t, "sensor")
	anon := newClient(t, d)
	waiting := func(n int) {
		// The drains wait on active connections; /metrics is one more.
		pollUntil(t, 10*time.Second, func() bool {
			return strings.Contains(string(anon.get(t, "/metrics").Body), `ingestd_http_connections{state="active"} `+strconv.Itoa(n+1)+"\n")
		}, "%d drains waiting", n)
	}
	// longPoll starts a drain that waits up to 30s; its answer (or the
	// failure to get one) arrives on the channel. No require in its
	// goroutine.
	longPoll := func(tk string, consumer string) <-chan response {
		c := tokenClient(t, d, tk)
		out := make(chan response, 1)
		q := url.Values{"table": {"sensor"}, "after": {"0"}, "limit": {"10"}, "wait": {"30s"}, "consumer": {consumer}}
		go func() {
			var r response
			resp, err := c.hc.Get(c.base + "/drain?" + q.Encode())
			if err == nil {
				r.Status, r.Header = resp.StatusCode, resp.Header
				r.Body, _ = io.ReadAll(resp.Body)
				_ = resp.Body.Close()
			}
			out <- r
		}()
		return out
	}

	var results []<-chan response
	for i := range 3 {
		results = append(results, longPoll(tok["d"], "c"+strconv.Itoa(i)))
	}
	waiting(3)
	start := time.Now()
	var stderr bytes.Buffer
	require.Equal(t, 0, runToken([]string{"revoke", "--auth-file", file, "--name", "d"}, io.Discard, &stderr), stderr.String())
	sighup(t)
	for _, res := range results {
		select {
		case r := <-res:
			e := decodeError(t, r, http.StatusUnauthorized)
			require.Equal(t, "unauthorized", e.Code)
			require.Contains(t, e.Message, "revoked")
		case <-time.After(10 * time.Second):
			t.Fatal("a long-poll of the revoked token did not end within 10s (its wait is 30s)")
		}
	}
	t.Logf("3 long-polls ended %s after the revoke", time.Since(start))
	require.Less(t, time.Since(start), 10*time.Second)
	e := decodeError(t, tokenClient(t, d, tok["d"]).get(t, "/drain?table=sensor&after=0&limit=1"), http.StatusUnauthorized)
	require.Contains(t, e.Message, "revoked")
	r := tokenClient(t, d, tok["other"]).get(t, "/drain?table=sensor&after=0&limit=1")
	require.Equal(t, http.StatusOK, r.Status, "another token is untouched: %s", r.Body)

	t.Run("narrowed scopes answer 403", func(t *testing.T) {
		out := longPoll(tok["n"], "cn")
		waiting(1)
		f, err := auth.ReadFile(file)
		require.NoError(t, err)
		for i := range f.Tokens {
			if f.Tokens[i].Name == "n" {
				f.Tokens[i].Scopes = []string{"drain:other*"}
			}
		}
		require.NoError(t, auth.WriteFile(file, f))
		sighup(t)
		select {
		case r := <-out:
			require.Equal(t, "forbidden", decodeError(t, r, http.StatusForbidden).Code)
		case <-time.After(10 * time.Second):
			t.Fatal("the long-poll did not end within 10s of its scopes changing")
		}
	})
}

// TestCrossSite: a state-changing request a browser sends from another
// site (Origin or Sec-Fetch-Site) is refused with 403 before anything
// changes, including a cross-site truncate; control routes take
// only application/json bodies (415), and no route but the writes a
// compressed one (415: a gzip body sent to truncate truncated the table
// before, its body unread); writers without those headers (Telegraf,
// client libraries, curl) are unaffected.
func TestCrossSite(t *testing.T) {
	d := startDaemon(t, testConfig(t.TempDir()))
	c := newClient(t, d)
	c.createSyncTable(t, "sensor")
	c.mustWrite(t, "sensor v=1 1\n")
	host := strings.TrimPrefix(d.URL, "http://")
	cases := []struct {
		name, method, path, body string
		hdr                      http.Header
		status                   int
		code                     string
	}{
		{"a cross-site truncate", "POST", "/api/v1/tables/sensor/truncate", "x", http.Header{"Origin": {"http://evil.example"}, "Content-Type": {"text/plain"}}, 403, "forbidden"},
		{"Sec-Fetch-Site cross-site", "POST", "/api/v1/tables/sensor/truncate", "", http.Header{"Sec-Fetch-Site": {"cross-site"}}, 403, "forbidden"},
		{"Sec-Fetch-Site same-site", "DELETE", "/api/v1/tables/sensor", "", http.Header{"Sec-Fetch-Site": {"same-site"}}, 403, "forbidden"},
		{"cross-site write", "POST", "/write", "sensor v=2 2\n", http.Header{"Origin": {"https://evil.example"}}, 403, "forbidden"},
		{"cross-site PUT sync", "PUT", "/api/v1/tables/sensor/sync", `{"enabled":false}`, http.Header{"Origin": {"http://evil.example"}, "Content-Type": {"application/json"}}, 403, "forbidden"},
		{"cross-site consumer delete", "DELETE", "/api/v1/tables/sensor/consumers/x", "", http.Header{"Origin": {"http://evil.example"}}, 403, "forbidden"},
		{"an <img> drain that records a consumer", "GET", "/drain?table=sensor&after=1&limit=1&consumer=img", "", http.Header{"Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Dest": {"image"}}, 403, "forbidden"},
		{"a cross-origin drain that records a consumer", "GET", "/drain?table=sensor&after=1&limit=1&consumer=fetch", "", http.Header{"Origin": {"http://evil.example"}}, 403, "forbidden"},
		{"GET /query CREATE DATABASE", "GET", "/query?q=" + url.QueryEscape(`CREATE DATABASE "evil"`), "", nil, 405, "method_not_allowed"},
		{"GET /api/v1/sql TRUNCATE", "GET", "/api/v1/sql?q=" + url.QueryEscape("TRUNCATE sensor"), "", nil, 405, "method_not_allowed"},
		{"form body on a control route", "PUT", "/api/v1/tables/t2", `{"sync":true}`, http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, 415, "unsupported_media_type"},
		{"text/plain truncate", "POST", "/api/v1/tables/sensor/truncate", "", http.Header{"Content-Type": {"text/plain"}}, 415, "unsupported_media_type"},
		{"multipart sync", "PUT", "/api/v1/tables/sensor/sync", "", http.Header{"Content-Type": {"multipart/form-data; boundary=x"}}, 415, "unsupported_media_type"},
		{"gzip truncate", "POST", "/api/v1/tables/sensor/truncate", "\x1f\x8b", http.Header{"Content-Encoding": {"gzip"}}, 415, "unsupported_media_type"},
		{"gzip SQL", "POST", "/api/v1/sql", "\x1f\x8b", http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}, 415, "unsupported_media_type"},
		{"gzip /query", "POST", "/query", "\x1f\x8b", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "Content-Encoding": {"gzip"}}, 415, "unsupported_media_type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := decodeError(t, c.do(t, tc.method, tc.path, tc.hdr, strings.NewReader(tc.body)), tc.status)
			require.Equal(t, tc.code, e.Code)
		})
	}
	st := c.syncStatus(t, "sensor")
	require.Equal(t, syncState{Enabled: true, Epoch: 1, Seq: 1, Watermark: 1, Horizon: 1}, st, "nothing changed: no truncate, no write, sync on")
	require.Empty(t, c.listConsumers(t, "sensor"), "no consumer recorded")
	require.NotContains(t, string(c.getOK(t, "/query?q=SHOW+DATABASES").Body), "evil", "no database recorded")

	allowed := []struct {
		name, method, path, body string
		hdr                      http.Header
		status                   int
	}{
		{"same origin", "POST", "/write", "sensor v=3 3\n", http.Header{"Origin": {"http://" + host}}, 204},
		{"Sec-Fetch-Site same-origin", "POST", "/write", "sensor v=4 4\n", http.Header{"Sec-Fetch-Site": {"same-origin"}}, 204},
		{"curl without Origin", "POST", "/write", "sensor v=5 5\n", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, 204},
		{"JSON with charset", "PUT", "/api/v1/tables/sensor/sync", `{"enabled":true}`, http.Header{"Content-Type": {"application/json; charset=utf-8"}}, 200},
		{"identity encoding", "PUT", "/api/v1/tables/sensor/sync", `{"enabled":true}`, http.Header{"Content-Encoding": {"Identity"}}, 200},
		{"no Content-Type", "POST", "/api/v1/tables/sensor/truncate", "", nil, 200},
		{"cross-site read", "GET", "/drain?table=sensor&after=0&limit=1", "", http.Header{"Origin": {"http://evil.example"}, "Sec-Fetch-Site": {"cross-site"}}, 200},
		{"same-origin drain with a consumer", "GET", "/drain?table=sensor&after=0&limit=1&consumer=page", "", http.Header{"Sec-Fetch-Site": {"same-origin"}}, 200},
		{"typed-in drain with a consumer", "GET", "/drain?table=sensor&after=0&limit=1&consumer=tab", "", http.Header{"Sec-Fetch-Site": {"none"}}, 200},
		{"curl drain with a consumer", "GET", "/drain?table=sensor&after=0&limit=1&consumer=curl", "", nil, 200},
		{"POST /query CREATE DATABASE", "POST", "/query", "q=CREATE+DATABASE+telegraf", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, 200},
	}
	for _, tc := range allowed {
		t.Run(tc.name, func(t *testing.T) {
			r := c.do(t, tc.method, tc.path, tc.hdr, strings.NewReader(tc.body))
			require.Equal(t, tc.status, r.Status, "%s", r.Body)
		})
	}
	m := string(c.get(t, "/metrics").Body)
	require.Contains(t, m, `ingestd_http_requests_refused_total{reason="cross_site"} 8`)
	require.Len(t, c.listConsumers(t, "sensor"), 3, "page, tab and curl")
	require.Contains(t, m, `ingestd_http_requests_refused_total{reason="content_type"} 3`)
}

// TestAuditLog: control actions, a consumer's first drain and refused
// credentials go to --audit-log-file as JSON lines with the token's name,
// the action, the table, the outcome and the remote address; no token,
// password or cursor value is ever written.
func TestAuditLog(t *testing.T) {
	auditFile := filepath.Join(t.TempDir(), "audit.log")
	d, _, tok := authDaemon(t, map[string][]string{"ops": {"admin", "drain"}}, func(c *config) { c.auth.AuditLogFile = auditFile })
	c := tokenClient(t, d, tok["ops"])
	c.createSyncTable(t, "sensor")
	c.setSync(t, "sensor", true)
	const cursor = "4242424242"
	for range 2 { // the consumer's first drain only is recorded
		r := c.drain(t, url.Values{"table": {"sensor"}, "after": {"0"}, "limit": {"5"}, "consumer": {"mirror1"}})
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	}
	r := c.drain(t, url.Values{"table": {"sensor"}, "after": {cursor}, "limit": {"5"}})
	require.Equal(t, http.StatusConflict, r.Status)
	require.Equal(t, http.StatusNoContent, c.do(t, "DELETE", "/api/v1/tables/sensor/consumers/mirror1", nil, nil).Status)
	require.Equal(t, http.StatusOK, c.do(t, "POST", "/api/v1/tables/sensor/truncate", nil, nil).Status)
	require.Equal(t, http.StatusNotFound, c.do(t, "POST", "/api/v1/tables/nosuch/truncate", nil, nil).Status)
	require.Equal(t, http.StatusNoContent, c.do(t, "DELETE", "/api/v1/tables/sensor", nil, nil).Status)
	newClient(t, d).do(t, "POST", "/write?u=joe&p=secretpassword", nil, strings.NewReader("x v=1\n"))
	d.stop(t)

	raw, err := os.ReadFile(auditFile)
	require.NoError(t, err)
	var got []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		var rec map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec), sc.Text())
		require.Equal(t, "audit", rec["msg"])
		require.Contains(t, rec["remote_addr"], "127.0.0.1:")
		got = append(got, rec["token"].(string)+" "+rec["action"].(string)+" "+rec["table"].(string)+" "+rec["outcome"].(string))
	}
	require.Equal(t, []string{
		"ops table.create sensor ok",
		"ops sync.set sensor ok",
		"ops consumer.first_drain sensor ok",
		"ops consumer.delete sensor ok",
		"ops table.truncate sensor ok",
		"ops table.truncate nosuch table_not_found",
		"ops table.drop sensor ok",
		" write  refused_unknown",
	}, got)
	for _, secret := range []string{tok["ops"], "secretpassword", cursor} {
		require.NotContains(t, string(raw), secret)
	}
}

// TestTokenCommand: `ingestd token create|list|revoke` in YAML and TOML.
func TestTokenCommand(t *testing.T) {
	for _, name := range []string{"auth.yaml", "auth.toml"} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "sub-"+name)
			run := func(args ...string) (int, string, string) {
				var out, errb bytes.Buffer
				code := runToken(args, &out, &errb)
				return code, out.String(), errb.String()
			}
			code, out, _ := run("create", "--auth-file", file, "--name", "tg", "--scope", "write:*", "--scope", "drain:sensor*")
			require.Equal(t, 0, code)
			tk := strings.TrimSpace(out)
			require.Regexp(t, `^ingestd_[A-Za-z0-9_-]{43}$`, tk)
			raw, err := os.ReadFile(file)
			require.NoError(t, err)
			require.NotContains(t, string(raw), tk, "the file holds only the hash")
			require.Contains(t, string(raw), "sha256:")

			// Argument errors are usage errors (exit 2); the file's
			// content decides some of them.
			code, _, errs := run("create", "--auth-file", file, "--name", "tg", "--scope", "write")
			require.Equal(t, 2, code)
			require.Contains(t, errs, "already")
			code, _, _ = run("create", "--auth-file", file, "--name", "x", "--scope", "root")
			require.Equal(t, 2, code)
			code, _, _ = run("create", "--auth-file", file, "--name", "x")
			require.Equal(t, 2, code)
			code, _, _ = run("create", "--name", "x", "--scope", "write")
			require.Equal(t, 2, code)

			code, out, _ = run("list", "--auth-file", file)
			require.Equal(t, 0, code)
			require.Regexp(t, `tg +active +write:\* drain:sensor\*`, out)
			require.NotContains(t, out, "sha256")

			code, _, _ = run("revoke", "--auth-file", file, "--name", "tg")
			require.Equal(t, 0, code)
			code, out, _ = run("list", "--auth-file", file)
			require.Equal(t, 0, code)
			require.Regexp(t, `tg +revoked`, out)
			code, _, errs = run("revoke", "--auth-file", file, "--name", "tg")
			require.Equal(t, 2, code)
			require.Contains(t, errs, "already revoked")
			code, _, errs = run("revoke", "--auth-file", file, "--name", "nobody")
			require.Equal(t, 2, code)
			require.Contains(t, errs, "no token named")
			code, _, errs = run("list", "--auth-file", filepath.Join(t.TempDir(), "missing.yaml"))
			require.Equal(t, 1, code, "a file that cannot be read is a runtime error")
			require.Contains(t, errs, "no such file")
			code, _, _ = run("bogus", "--auth-file", file)
			require.Equal(t, 2, code)
		})
	}
}

// TestUnauthenticatedWarning: without --auth-file, a non-loopback listener
// is reported once at start: at WARN with --insecure-open, at INFO in
// protected mode; loopback ones are not.
func TestUnauthenticatedWarning(t *testing.T) {
	for _, c := range []struct {
		addr      string
		open      bool
		warn      bool
		protected bool
	}{{"127.0.0.1:0", true, false, false}, {"0.0.0.0:0", true, true, false}, {"0.0.0.0:0", false, false, true}, {"127.0.0.1:0", false, false, false}} {
		t.Run(c.addr+" open="+strconv.FormatBool(c.open), func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			cfg.httpAddr = c.addr
			cfg.auth.InsecureOpen = c.open
			var buf mirrorLogBuffer
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			started := make(chan struct{})
			go func() {
				done <- serve(ctx, cfg, slog.New(slog.NewJSONHandler(&buf, nil)), func(string, string) { close(started) })
			}()
			<-started
			cancel()
			require.NoError(t, <-done)
			n := strings.Count(buf.String(), "serving without authentication on a non-loopback address")
			if c.warn {
				require.Equal(t, 1, n, buf.String())
				require.Contains(t, buf.String(), `"level":"WARN"`)
			} else {
				require.Zero(t, n, buf.String())
			}
			p := strings.Count(buf.String(), `"level":"INFO","msg":"protected mode:`)
			if c.protected {
				require.Equal(t, 1, p, buf.String())
			} else {
				require.Zero(t, p, buf.String())
			}
		})
	}
}

// ---- TLS ----

// testPKI is a CA and certificates it signed, written as PEM files.
type testPKI struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caFile string
	serial int64
}

func newPKI(t testing.TB, name string) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir(), serial: 1}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	p.ca, err = x509.ParseCertificate(der)
	require.NoError(t, err)
	p.caKey = key
	p.caFile = filepath.Join(p.dir, name+"-ca.pem")
	require.NoError(t, os.WriteFile(p.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	return p
}

// issue writes a certificate for cn (a server one for 127.0.0.1 when
// server) and its key; it returns the files and the certificate.
func (p *testPKI) issue(t testing.TB, cn string, server bool) (certFile, keyFile string, cert tls.Certificate) {
	t.Helper()
	p.serial++
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	certFile, keyFile = filepath.Join(p.dir, cn+"-cert.pem"), filepath.Join(p.dir, cn+"-key.pem")
	require.NoError(t, os.WriteFile(certFile, certPEM, 0o600))
	require.NoError(t, os.WriteFile(keyFile, keyPEM, 0o600))
	cert, err = tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	return certFile, keyFile, cert
}

// clientTLS trusts roots and always presents cert when set (Go's default
// would send none when cert's CA is not among those the server names).
func clientTLS(roots *x509.CertPool, cert *tls.Certificate) *tls.Config {
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return cfg
}

// tlsClient is an HTTPS client trusting p's CA, presenting cert when set,
// sending tok.
func (p *testPKI) tlsClient(t testing.TB, base, tok string, cert *tls.Certificate) *apiClient {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	cfg := clientTLS(pool, cert)
	tr := &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return newAPIClient(t, base, &http.Client{Transport: tokenTransport{tok: tok, rt: tr}, Timeout: time.Minute})
}

// TestTLS: HTTP and TCP over TLS with certificates made here, with and
// without client certificates; a TCP client certificate names the token it
// writes with; SIGHUP reloads the server certificate.
func TestTLS(t *testing.T) {
	pki := newPKI(t, "ingestd-test")
	certFile, keyFile, _ := pki.issue(t, "server", true)
	_, _, tcpw := pki.issue(t, "tcpw", false)
	_, _, nobody := pki.issue(t, "nobody", false)
	rogue := newPKI(t, "rogue")
	_, _, rogueCert := rogue.issue(t, "tcpw", false)

	d, _, tok := authDaemon(t, map[string][]string{"tcpw": {"write:sensor*"}, "admin": {"admin", "drain"}}, func(c *config) {
		c.auth.TLSCert, c.auth.TLSKey, c.auth.TLSClientCA = certFile, keyFile, pki.caFile
		c.auth.TLSClientAuth = auth.ClientAuthVerifyIfSent
	})
	base := strings.Replace(d.URL, "http://", "https://", 1)
	admin := pki.tlsClient(t, base, tok["admin"], nil)
	admin.createSyncTable(t, "sensor")
	admin.createSyncTable(t, "other")

	t.Run("https without a client certificate", func(t *testing.T) {
		r := pki.tlsClient(t, base, tok["tcpw"], nil).write(t, "/write", nil, strings.NewReader("sensor,via=https v=1 1\n"))
		require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
	})
	t.Run("https with a client certificate", func(t *testing.T) {
		r := pki.tlsClient(t, base, tok["tcpw"], &tcpw).write(t, "/write", nil, strings.NewReader("sensor,via=mtls v=2 2\n"))
		require.Equal(t, http.StatusNoContent, r.Status, "%s", r.Body)
	})
	t.Run("https with a certificate of another CA", func(t *testing.T) {
		c := pki.tlsClient(t, base, tok["tcpw"], &rogueCert)
		req, err := http.NewRequest(http.MethodGet, base+"/ping", nil)
		require.NoError(t, err)
		resp, err := c.hc.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		require.Error(t, err, "the handshake fails")
	})
	t.Run("plain http to the tls port", func(t *testing.T) {
		// net/http answers a plain request on a TLS port with a bare 400.
		resp, err := http.Get(d.URL + "/ping")
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	})

	dialTLS := func(cert *tls.Certificate) (*tls.Conn, error) {
		pool := x509.NewCertPool()
		pool.AddCert(pki.ca)
		cfg := clientTLS(pool, cert)
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", d.TCPAddr, cfg)
		if err == nil {
			t.Cleanup(func() { _ = c.Close() })
		}
		return c, err
	}
	closedByServer := func(c net.Conn) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := c.Read(make([]byte, 1))
		require.Error(t, err)
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "the server closed it: %v", err)
	}
	t.Run("tcp with a certificate naming a token", func(t *testing.T) {
		c, err := dialTLS(&tcpw)
		require.NoError(t, err)
		_, err = io.WriteString(c, "sensor,via=tcp v=3 3\nother,via=tcp v=4 4\n")
		require.NoError(t, err)
		require.NoError(t, c.Close())
		pollUntil(t, 10*time.Second, func() bool {
			p, _ := admin.drainOK(t, url.Values{"table": {"sensor"}, "after": {"0"}, "limit": {"10"}})
			return p.Next == 3
		}, "the TCP line in sensor")
		p, _ := admin.drainOK(t, url.Values{"table": {"other"}, "after": {"0"}, "limit": {"10"}})
		require.Zero(t, p.Next, "write:sensor* may not write other")
		m := string(admin.get(t, "/metrics").Body)
		require.Contains(t, m, `ingestd_ilp_rejected_lines_total{reason="forbidden",transport="tcp"} 1`)
	})
	t.Run("tcp without a certificate, not allowlisted", func(t *testing.T) {
		c, err := dialTLS(nil)
		require.NoError(t, err)
		closedByServer(c)
	})
	t.Run("tcp with a certificate naming no token", func(t *testing.T) {
		c, err := dialTLS(&nobody)
		require.NoError(t, err)
		closedByServer(c)
	})
	t.Run("plain tcp to the tls port", func(t *testing.T) {
		c := dialTCP(t, d)
		_, _ = io.WriteString(c, "sensor v=5 5\n")
		closedByServer(c)
		m := string(admin.get(t, "/metrics").Body)
		require.Regexp(t, `ingestd_auth_failures_total\{reason="tcp_denied"\} [2-9]`, m)
		require.Regexp(t, `ingestd_ilp_tcp_connections_closed_total\{reason="refused"\} [3-9]`, m)
	})
	t.Run("SIGHUP reloads the server certificate", func(t *testing.T) {
		serial := func() *big.Int {
			c, err := dialTLS(&tcpw)
			require.NoError(t, err)
			defer c.Close()
			return c.ConnectionState().PeerCertificates[0].SerialNumber
		}
		before := serial()
		newCert, newKey, _ := pki.issue(t, "server2", true)
		for src, dst := range map[string]string{newCert: certFile, newKey: keyFile} {
			b, err := os.ReadFile(src)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(dst, b, 0o600))
		}
		sighup(t)
		pollUntil(t, 10*time.Second, func() bool { return serial().Cmp(before) != 0 }, "a new handshake shows the new certificate")
		require.Contains(t, string(admin.get(t, "/metrics").Body), `ingestd_tls_reloads_total{outcome="ok"} 1`)
	})
}

// TestTLSRequireClientCert: with --tls-client-auth require (the default
// with --tls-client-ca), a client without a certificate cannot connect;
// with one it can, and a TCP address allowlist admits certificate-less
// TCP writers only when no certificate is required.
func TestTLSRequireClientCert(t *testing.T) {
	pki := newPKI(t, "ingestd-test")
	certFile, keyFile, _ := pki.issue(t, "server", true)
	_, _, client := pki.issue(t, "someone", false)
	d, _, tok := authDaemon(t, map[string][]string{"w": {"write", "drain", "admin"}}, func(c *config) {
		c.auth.TLSCert, c.auth.TLSKey, c.auth.TLSClientCA = certFile, keyFile, pki.caFile
	})
	base := strings.Replace(d.URL, "http://", "https://", 1)
	req, err := http.NewRequest(http.MethodGet, base+"/ping", nil)
	require.NoError(t, err)
	resp, err := pki.tlsClient(t, base, tok["w"], nil).hc.Do(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	require.Error(t, err, "no client certificate: refused")
	r := pki.tlsClient(t, base, tok["w"], &client).get(t, "/ping")
	require.Equal(t, http.StatusNoContent, r.Status)
	r = pki.tlsClient(t, base, "", &client).get(t, "/api/v1/tables")
	require.Equal(t, http.StatusUnauthorized, r.Status, "a certificate is not a token on HTTP")
}

// TestMirrorWithTokens: `ingestd mirror` reads a source with --auth-file
// through --source-token (drain scope) and writes to, and truncates, a
// target with --auth-file through --target-token (write and admin).
func TestMirrorWithTokens(t *testing.T) {
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections) // the mirror's client
	src, _, stok := authDaemon(t, map[string][]string{"ops": {"admin", "write", "drain"}, "mirror": {"drain:m"}}, nil)
	dst, _, dtok := authDaemon(t, map[string][]string{"ops": {"admin", "drain"}, "mirror": {"write:m", "admin:m"}}, nil)
	a := newClientURL(t, src.URL)
	a.hc.Transport = tokenTransport{tok: stok["ops"], rt: a.hc.Transport}
	b := newClientURL(t, dst.URL)
	b.hc.Transport = tokenTransport{tok: dtok["ops"], rt: b.hc.Transport}
	a.createSyncTable(t, "m")
	a.mustWrite(t, "m,host=h1 v=1i 1\nm,host=h2 v=2i 2")
	b.createSyncTable(t, "m")
	tokenClient(t, dst, dtok["mirror"]).mustWrite(t, "m,host=stale v=9i 9\n")

	cursorFile := filepath.Join(t.TempDir(), "m.cursor")
	cfg := mirror.Config{
		Source: src.URL, SourceToken: stok["mirror"], Table: "m", Target: dst.URL + "/write?db=x", TargetToken: dtok["mirror"],
		CursorFile: cursorFile, Consumer: "mirror-m", Limit: 100, Wait: 200 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		LogLevel: "info", LogFormat: "text",
	}
	logs, stop := startMirror(t, cfg)
	defer func() {
		stop()
		require.NotContains(t, logs.String(), stok["mirror"])
		require.NotContains(t, logs.String(), dtok["mirror"])
	}()
	pollUntil(t, time.Minute, func() bool { c, ok := readMirrorCursor(t, cursorFile); return ok && c.Next == 2 }, "the copy is acknowledged")
	require.Equal(t, feedRowsByPoint(t, a, "m"), feedRowsByPoint(t, b, "m"), "the target was truncated (admin token) before the copy")
}

// startMirror runs a mirror of cfg and returns its log and stop, which
// ends it and waits for it (also run at the test's end).
func startMirror(t *testing.T, cfg mirror.Config) (logs *mirrorLogBuffer, stop func()) {
	t.Helper()
	logs = &mirrorLogBuffer{}
	mr, err := mirror.New(cfg, cli.NewLogger(logs, "info", "text"), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- mr.Run(ctx) }()
	stop = sync.OnceFunc(func() { cancel(); <-runErr })
	t.Cleanup(stop)
	return logs, stop
}

// TestAuthFileWatched: without SIGHUP, a change of the auth file on disk is
// seen within --auth-reload-interval (a new token works, a revoked one is
// refused), and a broken file leaves the tokens in force.
func TestAuthFileWatched(t *testing.T) {
	d, file, tok := authDaemon(t, map[string][]string{"a": {"admin", "drain"}}, func(c *config) { c.auth.ReloadInterval = 20 * time.Millisecond })
	newTok := secTokens(t, file, map[string][]string{"b": {"drain"}})["b"]
	pollUntil(t, 10*time.Second, func() bool {
		return tokenClient(t, d, newTok).get(t, "/api/v1/tables").Status == http.StatusOK
	}, "the new token works")
	var stderr bytes.Buffer
	require.Equal(t, 0, runToken([]string{"revoke", "--auth-file", file, "--name", "b"}, io.Discard, &stderr), stderr.String())
	pollUntil(t, 10*time.Second, func() bool {
		return tokenClient(t, d, newTok).get(t, "/api/v1/tables").Status == http.StatusUnauthorized
	}, "the revoked token is refused")

	require.NoError(t, os.WriteFile(file, []byte("tokens: [\n"), 0o600))
	anon := newClient(t, d)
	pollUntil(t, 10*time.Second, func() bool {
		return regexp.MustCompile(`ingestd_auth_reloads_total\{outcome="error"\} [1-9]`).Match(anon.get(t, "/metrics").Body)
	}, "the broken file is seen and refused")
	require.Equal(t, http.StatusOK, tokenClient(t, d, tok["a"]).get(t, "/api/v1/tables").Status, "the tokens in force stay")
}

// TestSQLScopes: each SQL statement needs the scope of its REST twin on
// its table (CREATE, ALTER, TRUNCATE, DROP admin; INSERT write; SELECT
// drain; SHOW SYNC and SHOW COLUMNS drain or admin; SHOW TABLES any token,
// listing the token's tables), its table changes are audited, and a
// cross-site POST is refused.
func TestSQLScopes(t *testing.T) {
	auditFile := filepath.Join(t.TempDir(), "audit.log")
	d, _, tok := authDaemon(t, map[string][]string{
		"admin": {"admin:sq*"}, "w": {"write:sq*"}, "d": {"drain:sq*"}, "other": {"drain:zz", "admin:zz"},
	}, func(c *config) { c.auth.AuditLogFile = auditFile })
	sql := func(name, stmt string, hdr http.Header) response {
		tk, ok := tok[name]
		if !ok {
			tk = name // a token that is not in the file
		}
		h := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
		for k, v := range hdr {
			h[k] = v
		}
		return tokenClient(t, d, tk).do(t, http.MethodPost, "/api/v1/sql", h, strings.NewReader(url.Values{"q": {stmt}}.Encode()))
	}
	cases := []struct {
		tok, stmt string
		status    int
	}{
		{"w", "CREATE TABLE sq1 (host TAG, v DOUBLE) WITH (SYNC)", 403},
		{"admin", "CREATE TABLE sq1 (host TAG, v DOUBLE) WITH (SYNC)", 200},
		{"admin", "CREATE TABLE zz (host TAG, v DOUBLE)", 403},
		{"other", "CREATE TABLE zz (host TAG, v DOUBLE)", 200},
		{"d", "INSERT INTO sq1 (host, v) VALUES ('a', 1)", 403},
		{"w", "INSERT INTO sq1 (host, v) VALUES ('a', 1)", 200},
		{"w", "SELECT * FROM sq1 WHERE x_seq > 0 LIMIT 5", 403},
		{"d", "SELECT * FROM sq1 WHERE x_seq > 0 LIMIT 5", 200},
		{"d", "SELECT * FROM sq1 LIMIT 5", 200},
		{"other", "SELECT * FROM sq1 LIMIT 5", 403},
		{"d", "SHOW SYNC FROM sq1", 200},
		{"admin", "SHOW COLUMNS FROM sq1", 200},
		{"w", "SHOW COLUMNS FROM sq1", 403},
		{"d", "ALTER TABLE sq1 SET SYNC OFF", 403},
		{"admin", "ALTER TABLE sq1 SET SYNC", 200},
		{"d", "TRUNCATE sq1", 403},
		{"admin", "TRUNCATE sq1", 200},
		{"w", "DROP TABLE zz", 403},
		{"ingestd_unknown", "SHOW TABLES", 401},
	}
	for _, c := range cases {
		r := sql(c.tok, c.stmt, nil)
		require.Equal(t, c.status, r.Status, "%s: %s: %s", c.tok, c.stmt, r.Body)
		if c.status == 403 {
			require.Equal(t, "forbidden", decodeError(t, r, 403).Code)
		}
	}
	r := sql("other", "SHOW TABLES", nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, string(r.Body), `"zz"`)
	require.NotContains(t, string(r.Body), `"sq1"`, "SHOW TABLES lists only the token's tables")
	r = sql("admin", "DROP TABLE sq1", http.Header{"Origin": {"http://evil.example"}})
	require.Equal(t, "forbidden", decodeError(t, r, http.StatusForbidden).Code, "a cross-site SQL POST")
	require.Equal(t, http.StatusOK, sql("admin", "DROP TABLE sq1", nil).Status)
	d.stop(t)
	raw, err := os.ReadFile(auditFile)
	require.NoError(t, err)
	for _, want := range []string{`"token":"admin","action":"table.create","table":"sq1","outcome":"ok"`,
		`"token":"admin","action":"sync.set","table":"sq1","outcome":"ok"`,
		`"token":"admin","action":"table.truncate","table":"sq1","outcome":"ok"`,
		`"token":"admin","action":"table.drop","table":"sq1","outcome":"ok"`,
		`"token":"w","action":"sql","table":"sq1","outcome":"refused_forbidden"`} {
		require.Contains(t, string(raw), want)
	}
}

// TestClientTLSFlags: `ingestd health` and `ingestd mirror` reach an
// ingestd serving TLS with a private CA and requiring client certificates
// through --ca-file, --client-cert and --client-key; without the CA the
// handshake fails, without the certificate the server refuses.
func TestClientTLSFlags(t *testing.T) {
	pki := newPKI(t, "ingestd-test")
	certFile, keyFile, _ := pki.issue(t, "server", true)
	cliCert, cliKey, cert := pki.issue(t, "ops", false)
	tlsd := func(c *config) { c.auth.TLSCert, c.auth.TLSKey, c.auth.TLSClientCA = certFile, keyFile, pki.caFile }
	src, _, stok := authDaemon(t, map[string][]string{"ops": {"admin", "write", "drain"}}, tlsd)
	dst, _, dtok := authDaemon(t, map[string][]string{"ops": {"admin", "write", "drain"}}, tlsd)
	srcURL := strings.Replace(src.URL, "http://", "https://", 1)
	dstURL := strings.Replace(dst.URL, "http://", "https://", 1)

	health := srcURL + "/health"
	code, _, errOut := runCLI(t, "health", "--url", health, "--timeout", "5s")
	require.Equal(t, cli.ExitFailure, code)
	require.Contains(t, errOut, "certificate signed by unknown authority")
	code, _, errOut = runCLI(t, "health", "--url", health, "--timeout", "5s", "--ca-file", pki.caFile)
	require.Equal(t, cli.ExitFailure, code, "no client certificate: refused")
	require.Contains(t, errOut, "ingestd health: fail:")
	code, out, errOut := runCLI(t, "health", "--url", health, "--ca-file", pki.caFile, "--client-cert", cliCert, "--client-key", cliKey)
	require.Equal(t, cli.ExitOK, code, errOut)
	require.Contains(t, out, "pass: ")
	code, _, errOut = runCLI(t, "health", "--url", health, "--ca-file", cliKey)
	require.Equal(t, cli.ExitBadUsage, code)
	require.Contains(t, errOut, "--ca-file: "+cliKey+" holds no PEM certificate")
	code, _, errOut = runCLI(t, "health", "--url", health, "--client-cert", cliCert)
	require.Equal(t, cli.ExitBadUsage, code)
	require.Contains(t, errOut, "--client-cert and --client-key go together")

	a := pki.tlsClient(t, srcURL, stok["ops"], &cert)
	b := pki.tlsClient(t, dstURL, dtok["ops"], &cert)
	a.createSyncTable(t, "m")
	a.mustWrite(t, "m,host=h1 v=1i 1\nm,host=h2 v=2i 2")
	b.createSyncTable(t, "m")
	cursorFile := filepath.Join(t.TempDir(), "m.cursor")
	cfg := mirror.Config{
		Source: srcURL, SourceToken: stok["ops"], Table: "m", Target: dstURL + "/write?db=x", TargetToken: dtok["ops"],
		CursorFile: cursorFile, Limit: 100, Wait: 200 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		LogLevel: "info", LogFormat: "text",
		TLS: cli.ClientTLS{CAFile: pki.caFile, CertFile: cliCert, KeyFile: cliKey},
	}
	_, _ = startMirror(t, cfg)
	pollUntil(t, time.Minute, func() bool { c, ok := readMirrorCursor(t, cursorFile); return ok && c.Next == 2 }, "the copy over TLS is acknowledged")
	require.Equal(t, feedRowsByPoint(t, a, "m"), feedRowsByPoint(t, b, "m"))
}
