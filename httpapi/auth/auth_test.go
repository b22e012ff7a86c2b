package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ingestd/ingestd/store/testdeadline"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// value reads a counter's or gauge's value.
func value(t testing.TB, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// tokens writes an auth file at p with one token per name and scopes
// and returns the tokens by name.
func tokens(t testing.TB, p string, scopes map[string][]string, allow ...string) map[string]string {
	t.Helper()
	f := File{TCP: TCPRule{Allow: allow}}
	out := map[string]string{}
	for name, sc := range scopes {
		tok, hash, err := NewToken()
		require.NoError(t, err)
		out[name] = tok
		f.Tokens = append(f.Tokens, Entry{Name: name, Hash: hash, Scopes: sc})
	}
	require.NoError(t, WriteFile(p, f))
	return out
}

func newAuth(t testing.TB, p string, reg prometheus.Registerer) *Authenticator {
	t.Helper()
	cfg := DefaultConfig()
	cfg.File = p
	cfg.ReloadInterval = 0
	a, err := New(cfg, nil, nil, reg)
	require.NoError(t, err)
	return a
}

func TestParseScope(t *testing.T) {
	cases := []struct {
		in   string
		s    Scope
		glob string
		err  bool
	}{
		{"write", Write, "*", false},
		{"write:*", Write, "*", false},
		{"drain:sensor*", Drain, "sensor*", false},
		{"admin:room", Admin, "room", false},
		{"admin:", Admin, "*", false},
		{"read:x", 0, "", true},
		{"drain:[", 0, "", true},
		{"", 0, "", true},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			s, g, err := ParseScope(c.in)
			if c.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.s, s)
			require.Equal(t, c.glob, g)
		})
	}
}

func TestFileFormats(t *testing.T) {
	for _, name := range []string{"auth.yaml", "auth.toml"} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), name)
			_, hash, err := NewToken()
			require.NoError(t, err)
			want := File{Tokens: []Entry{{Name: "tg", Hash: hash, Scopes: []string{"write:*", "drain:s*"}, Created: "2026-12-01T20:00:00Z"}},
				TCP: TCPRule{Allow: []string{"10.0.0.0/8", "127.0.0.1"}}}
			require.NoError(t, WriteFile(p, want))
			fi, err := os.Stat(p)
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
			got, err := ReadFile(p)
			require.NoError(t, err)
			require.Equal(t, want, got)
			raw, err := os.ReadFile(p)
			require.NoError(t, err)
			if strings.HasSuffix(name, ".toml") {
				require.Contains(t, string(raw), "[[tokens]]")
			} else {
				require.Contains(t, string(raw), "tokens:\n")
			}
		})
	}
	_, hash, err := NewToken()
	require.NoError(t, err)
	bad := []struct{ name, file, content, want string }{
		{"unknown yaml key", "a.yaml", "tokens:\n  - name: a\n    hash: " + hash + "\n    secret: x\n", "field secret not found"},
		{"unknown toml key", "a.toml", "[[tokens]]\nname = \"a\"\nhash = \"" + hash + "\"\nsecret = 1\n", "unknown key"},
		{"clear token", "a.yaml", "tokens:\n  - name: a\n    hash: ingestd_abc\n", "sha256"},
		{"same name twice", "a.yaml", "tokens:\n  - {name: a, hash: " + hash + "}\n  - {name: a, hash: sha256:" + strings.Repeat("0", 64) + "}\n", "used twice"},
		{"same hash twice", "a.yaml", "tokens:\n  - {name: a, hash: " + hash + "}\n  - {name: b, hash: " + hash + "}\n", "used twice"},
		{"bad scope", "a.yaml", "tokens:\n  - {name: a, hash: " + hash + ", scopes: [root]}\n", "must be write, drain or admin"},
		{"bad allow", "a.yaml", "tcp: {allow: [10.0.0.0/99]}\n", "tcp.allow"},
		{"empty name", "a.yaml", "tokens:\n  - {name: '', hash: " + hash + "}\n", "name is empty"},
		{"bad time", "a.yaml", "tokens:\n  - {name: a, hash: " + hash + ", revoked: yesterday}\n", "RFC 3339"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), c.file)
			require.NoError(t, os.WriteFile(p, []byte(c.content), 0o600))
			_, err := ReadFile(p)
			require.ErrorContains(t, err, c.want)
		})
	}
	t.Run("empty file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "a.yaml")
		require.NoError(t, os.WriteFile(p, nil, 0o600))
		f, err := ReadFile(p)
		require.NoError(t, err)
		require.Empty(t, f.Tokens)
	})
}

// errBody is the JSON error body of a refusal.
type errBody struct{ Code, Message, Error string }

func TestRequire(t *testing.T) {
	p := filepath.Join(t.TempDir(), "auth.yaml")
	tok := tokens(t, p, map[string][]string{
		"w":     {"write:sensor*"},
		"d":     {"drain:sensor*"},
		"a":     {"admin:room"},
		"all":   {"write", "drain", "admin"},
		"gone":  {"write"},
		"empty": nil,
	})
	f, err := ReadFile(p)
	require.NoError(t, err)
	for i := range f.Tokens {
		if f.Tokens[i].Name == "gone" {
			f.Tokens[i].Revoked = "2026-12-01T20:00:00Z"
		}
	}
	require.NoError(t, WriteFile(p, f))
	reg := prometheus.NewRegistry()
	a := newAuth(t, p, reg)

	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	cases := []struct {
		name   string
		scope  Scope
		table  string
		header string
		query  string
		status int
		reason string
		grant  string
	}{
		{name: "Token", scope: Write, table: "sensor1", header: "Token " + tok["w"], status: 200, grant: "w"},
		{name: "Bearer", scope: Write, table: "sensor1", header: "Bearer " + tok["w"], status: 200, grant: "w"},
		{name: "lower-case scheme", scope: Write, table: "sensor1", header: "token " + tok["w"], status: 200, grant: "w"},
		{name: "Basic, user ignored", scope: Write, table: "sensor1", header: basic("anyone", tok["w"]), status: 200, grant: "w"},
		{name: "u/p query", scope: Write, table: "sensor1", query: "u=x&p=" + tok["w"], status: 200, grant: "w"},
		{name: "header wins over p", scope: Write, table: "sensor1", header: "Token " + tok["w"], query: "p=bogus", status: 200, grant: "w"},
		{name: "missing", scope: Write, table: "sensor1", status: 401, reason: ReasonMissing},
		{name: "unknown scheme", scope: Write, header: "Digest " + tok["w"], status: 401, reason: ReasonMalformed},
		{name: "Basic not base64", scope: Write, header: "Basic !!!", status: 401, reason: ReasonMalformed},
		{name: "Basic without colon", scope: Write, header: "Basic " + base64.StdEncoding.EncodeToString([]byte(tok["w"])), status: 401, reason: ReasonMalformed},
		{name: "too long", scope: Write, header: "Token " + strings.Repeat("x", MaxTokenBytes+1), status: 401, reason: ReasonMalformed},
		{name: "empty token", scope: Write, header: "Token ", status: 401, reason: ReasonMalformed},
		{name: "unknown", scope: Write, header: "Token ingestd_nope", status: 401, reason: ReasonUnknown},
		{name: "revoked", scope: Write, header: "Token " + tok["gone"], status: 401, reason: ReasonRevoked},
		{name: "write outside its glob", scope: Write, table: "room", header: "Token " + tok["w"], status: 403, reason: ReasonForbidden},
		{name: "write any table", scope: Write, header: "Token " + tok["w"], status: 200, grant: "w"},
		{name: "drain with a write token", scope: Drain, table: "sensor1", header: "Token " + tok["w"], status: 403, reason: ReasonForbidden},
		{name: "drain in its glob", scope: Drain, table: "sensorX", header: "Token " + tok["d"], status: 200, grant: "d"},
		{name: "drain outside its glob", scope: Drain, table: "room", header: "Token " + tok["d"], status: 403, reason: ReasonForbidden},
		{name: "admin on its table", scope: Admin, table: "room", header: "Token " + tok["a"], status: 200, grant: "a"},
		{name: "admin on another", scope: Admin, table: "room2", header: "Token " + tok["a"], status: 403, reason: ReasonForbidden},
		{name: "drain|admin with admin", scope: Drain | Admin, table: "room", header: "Token " + tok["a"], status: 200, grant: "a"},
		{name: "admin with drain token", scope: Admin, table: "sensor1", header: "Token " + tok["d"], status: 403, reason: ReasonForbidden},
		{name: "all scopes", scope: Admin, table: "anything/with/slashes", header: "Token " + tok["all"], status: 200, grant: "all"},
		{name: "no scopes at all", scope: Any, header: "Token " + tok["empty"], status: 403, reason: ReasonForbidden},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := value(t, a.m.failures.WithLabelValues(c.reason))
			var seen *Grant
			h := a.Require(c.scope, "test", func(*http.Request) string { return c.table })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen = FromContext(r.Context())
				w.WriteHeader(http.StatusOK)
			}))
			req := httptest.NewRequest(http.MethodGet, "/x?"+c.query, nil)
			if c.header != "" {
				req.Header.Set("Authorization", c.header)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			require.Equal(t, c.status, rec.Code, rec.Body.String())
			if c.status == 200 {
				require.NotNil(t, seen)
				require.Equal(t, c.grant, seen.Name())
				return
			}
			require.Nil(t, seen)
			var body errBody
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
			want := map[int]string{401: "unauthorized", 403: "forbidden"}[c.status]
			require.Equal(t, want, body.Code)
			require.Equal(t, body.Message, body.Error)
			require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			if c.status == 401 {
				require.NotEmpty(t, rec.Header().Get("WWW-Authenticate"))
			}
			require.Equal(t, before+1, value(t, a.m.failures.WithLabelValues(c.reason)), "reason %s counted", c.reason)
			for _, tk := range tok {
				require.NotContains(t, rec.Body.String(), tk, "a refusal never echoes a token")
			}
		})
	}
	t.Run("nil Authenticator passes through", func(t *testing.T) {
		var none *Authenticator
		called := false
		h := none.Require(Admin, "test", nil)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true }))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
		require.True(t, called)
	})
}

func TestReload(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "auth.yaml")
	tok := tokens(t, p, map[string][]string{"keep": {"drain"}, "narrow": {"drain"}, "drop": {"drain"}})
	reg := prometheus.NewRegistry()
	a := newAuth(t, p, reg)
	grant := func(name string) *Grant {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("Authorization", "Token "+tok[name])
		g, err := a.Check(req, Drain, "t", "test")
		require.NoError(t, err)
		return g
	}
	keep, narrow, drop := grant("keep"), grant("narrow"), grant("drop")

	f, err := ReadFile(p)
	require.NoError(t, err)
	var next []Entry
	for _, e := range f.Tokens {
		switch e.Name {
		case "narrow":
			e.Scopes = []string{"drain:other"}
		case "drop":
			continue // deleted outright: revoked too
		}
		next = append(next, e)
	}
	f.Tokens = next
	require.NoError(t, WriteFile(p, f))
	require.NoError(t, a.Reload())

	require.NoError(t, keep.Err(), "an unchanged token keeps its grant")
	require.ErrorIs(t, narrow.Err(), ErrChanged)
	require.ErrorIs(t, drop.Err(), ErrRevoked)
	select {
	case <-drop.Done():
	default:
		t.Fatal("a revoked grant's Done is closed")
	}
	require.Same(t, keep, grant("keep"))
	require.Equal(t, 1.0, value(t, a.m.reloads.WithLabelValues("ok")))
	require.Equal(t, 2.0, value(t, a.m.tokens))

	t.Run("a broken file keeps the tokens in force", func(t *testing.T) {
		require.NoError(t, os.WriteFile(p, []byte("tokens: [\n"), 0o600))
		require.Error(t, a.Reload())
		require.NoError(t, keep.Err())
		require.Same(t, keep, grant("keep"))
		require.Equal(t, 1.0, value(t, a.m.reloads.WithLabelValues("error")))
	})

	t.Run("Run sees a change on disk", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.File, cfg.ReloadInterval = p, 10*time.Millisecond
		tok2 := tokens(t, p, map[string][]string{"w": {"write"}})
		b, err := New(cfg, nil, nil, nil)
		require.NoError(t, err)
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("Authorization", "Token "+tok2["w"])
		g, err := b.Check(req, Write, "", "test")
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		tokens(t, p, map[string][]string{"other": {"write"}})
		select {
		case <-g.Done():
		case <-time.After(testdeadline.Scale(10 * time.Second)):
			t.Fatal("the grant did not end after the file changed")
		}
		require.ErrorIs(t, g.Err(), ErrRevoked)
		cancel()
		require.NoError(t, <-done)
	})
}

func TestCheckWrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "auth.yaml")
	tok := tokens(t, p, map[string][]string{"w": {"write:a*", "write:b"}})
	a := newAuth(t, p, nil)
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Authorization", "Token "+tok["w"])
	g, err := a.Check(req, Write, "", "write")
	require.NoError(t, err)
	require.NoError(t, g.CheckWrite("abc", "peer"))
	require.NoError(t, g.CheckWrite("b", "peer"))
	err = g.CheckWrite("c", "peer")
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, http.StatusForbidden, e.Status())
	tokens(t, p, nil)
	require.NoError(t, a.Reload())
	err = g.CheckWrite("abc", "peer")
	require.ErrorAs(t, err, &e)
	require.Equal(t, http.StatusUnauthorized, e.Status())
	require.True(t, errors.Is(err, ErrRevoked))
}

func TestConnAllowlist(t *testing.T) {
	p := filepath.Join(t.TempDir(), "auth.yaml")
	tokens(t, p, map[string][]string{"w": {"write"}}, "127.0.0.0/8")
	a := newAuth(t, p, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			_ = c.Close()
		}
	}()
	c, err := ln.Accept()
	require.NoError(t, err)
	defer c.Close()
	g, err := a.Conn(context.Background(), c, time.Second)
	require.NoError(t, err)
	require.Equal(t, "tcp-allow", g.Name())
	require.NoError(t, g.CheckWrite("anything", c.RemoteAddr().String()))

	tokens(t, p, map[string][]string{"w": {"write"}}, "10.0.0.0/8")
	require.NoError(t, a.Reload())
	require.ErrorIs(t, g.Err(), ErrChanged, "a changed allowlist ends the old grant")
	_, err = a.Conn(context.Background(), c, time.Second)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, ReasonTCPDenied, e.Reason)
}

// TestAudit: records bypass the logger's level; refused credentials are
// limited per second and the rest counted.
func TestAudit(t *testing.T) {
	var buf strings.Builder
	reg := prometheus.NewRegistry()
	a := NewAudit(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError})), 2, reg)
	clock := time.Unix(1_800_000_000, 0)
	a.now = func() time.Time { return clock }
	a.Record("ops", "table.truncate", "sensor", "ok", "127.0.0.1:1")
	for range 5 {
		a.failure(ReasonUnknown, "", "drain", "t", "127.0.0.1:2")
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 3, buf.String())
	require.Contains(t, lines[0], `"level":"INFO","msg":"audit","log":"audit","token":"ops","action":"table.truncate","table":"sensor","outcome":"ok","remote_addr":"127.0.0.1:1"`)
	require.Contains(t, lines[1], `"outcome":"refused_unknown"`)
	require.Equal(t, 3.0, value(t, a.suppressed))
	clock = clock.Add(time.Second)
	a.failure(ReasonRevoked, "old", "drain", "t", "127.0.0.1:2")
	require.Contains(t, buf.String(), `"token":"old"`, "a new second, a new quota")
	var none *Audit
	none.Record("x", "y", "z", "ok", "r") // no panic, nothing recorded
}

// TestAuditRefusalsBounded: a control action a client makes fail (a
// 60 KB table name answered 400) wrote a line of the whole name each
// time, 92 MB of log a second. Failed actions share the refused
// credentials' lines per second, and every name is cut to 256 bytes with
// its length; successful actions are all written.
func TestAuditRefusalsBounded(t *testing.T) {
	var buf strings.Builder
	a := NewAudit(slog.New(slog.NewJSONHandler(&buf, nil)), 2, prometheus.NewRegistry())
	clock := time.Unix(1_800_000_000, 0)
	a.now = func() time.Time { return clock }
	long := strings.Repeat("x", 60_000)
	for range 5 {
		a.Record("d", "consumer.delete", long, "invalid_table_name", "127.0.0.1:1", "consumer", long)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2, "two refusals a second")
	require.Equal(t, 3.0, value(t, a.suppressed))
	for _, l := range lines {
		require.Less(t, len(l), 1024, "names cut")
		require.Equal(t, 2, strings.Count(l, "…(60000 bytes)"), l)
	}
	buf.Reset()
	for range 5 {
		a.Record("ops", "table.truncate", "sensor", "ok", "127.0.0.1:1")
	}
	require.Len(t, strings.Split(strings.TrimSpace(buf.String()), "\n"), 5, "successful actions are not limited")
}

// TestReloadSettles: the watcher applies a changed file only once it has
// read the same content twice in a row (a file caught mid-write is never
// applied), reports content it cannot load once, and refuses an empty
// file (a truncation caught before the write) instead of revoking every
// token.
func TestReloadSettles(t *testing.T) {
	p := filepath.Join(t.TempDir(), "auth.yaml")
	tok := tokens(t, p, map[string][]string{"a": {"drain"}})
	a := newAuth(t, p, prometheus.NewRegistry())
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Authorization", "Token "+tok["a"])
	g, err := a.Check(req, Drain, "t", "test")
	require.NoError(t, err)

	require.NoError(t, os.WriteFile(p, nil, 0o600)) // truncated, not yet written
	changed, err := a.reload(true)
	require.NoError(t, err)
	require.False(t, changed, "seen once: not applied")
	changed, err = a.reload(true)
	require.ErrorContains(t, err, "is empty")
	require.False(t, changed)
	require.NoError(t, g.Err(), "an empty file revokes nothing")
	_, err = a.reload(true)
	require.NoError(t, err, "reported once")
	require.Equal(t, 1.0, value(t, a.m.reloads.WithLabelValues("error")))

	tokens(t, p, map[string][]string{"b": {"drain"}})
	changed, err = a.reload(true)
	require.NoError(t, err)
	require.False(t, changed)
	require.NoError(t, g.Err())
	changed, err = a.reload(true)
	require.NoError(t, err)
	require.True(t, changed, "the same content twice: applied")
	require.ErrorIs(t, g.Err(), ErrRevoked)

	require.NoError(t, os.WriteFile(p, nil, 0o600))
	cfg := DefaultConfig()
	cfg.File = p
	_, err = New(cfg, nil, nil, nil)
	require.ErrorContains(t, err, "is empty", "an empty file does not start")
}
