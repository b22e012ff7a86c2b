package ilp

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testGrant may write the tables in allow until end is called.
type testGrant struct {
	allow map[string]bool
	done  chan struct{}
	once  sync.Once
}

func newTestGrant(tables ...string) *testGrant {
	g := &testGrant{allow: map[string]bool{}, done: make(chan struct{})}
	for _, t := range tables {
		g.allow[t] = true
	}
	return g
}

// statusErr is a refusal with its own HTTP status and code, as
// httpapi/auth's errors have.
type statusErr struct{ status int }

func (e statusErr) Error() string { return "token revoked" }
func (e statusErr) Status() int   { return e.status }
func (e statusErr) Code() string  { return "unauthorized" }

func (g *testGrant) CheckWrite(table, _ string) error {
	select {
	case <-g.done:
		return statusErr{http.StatusUnauthorized}
	default:
	}
	if !g.allow[table] {
		return errors.New("may not write table " + table)
	}
	return nil
}

func (g *testGrant) Done() <-chan struct{} { return g.done }
func (g *testGrant) end()                  { g.once.Do(func() { close(g.done) }) }

// TestWriteGrant: a write request holding a table its grant may not write
// is refused whole (nothing stored) with 403, or with the error's own
// status; the allowed tables are written as before.
func TestWriteGrant(t *testing.T) {
	g := newTestGrant("a", "b")
	r := newRigOpts(t, rigOptions{auth: Auth{Request: func(*http.Request) Grant { return g }}}, "a", "b", "c")

	res := r.post("/write", strings.NewReader("a v=1 1\nb v=2 2\na v=3 3\n"), nil)
	require.Equal(t, http.StatusNoContent, res.status, string(res.body))

	res = r.post("/api/v2/write", strings.NewReader("a v=4 4\nc v=5 5\n"), nil)
	require.Equal(t, http.StatusForbidden, res.status)
	require.Contains(t, string(res.body), `"code":"forbidden"`)
	require.Contains(t, string(res.body), "may not write table c; nothing was written")
	require.Len(t, r.drain("a"), 2, "the refused request wrote nothing, not even table a")
	require.Empty(t, r.drain("c"))

	g.end()
	res = r.post("/write", strings.NewReader("a v=6 6\n"), nil)
	require.Equal(t, http.StatusUnauthorized, res.status)
	require.Contains(t, string(res.body), `"code":"unauthorized"`)
	require.Len(t, r.drain("a"), 2)
}

// TestTCPGrant: a TCP connection's lines for tables its grant may not
// write are dropped and counted (forbidden); a refused connection is
// closed at once; a grant's end closes the connection after committing
// the lines read before it.
func TestTCPGrant(t *testing.T) {
	g := newTestGrant("a")
	refuse := false
	var mu sync.Mutex
	r := newRigOpts(t, rigOptions{auth: Auth{Conn: func(_ context.Context, c net.Conn) (Grant, error) {
		mu.Lock()
		defer mu.Unlock()
		if refuse {
			return nil, errors.New("not allowlisted")
		}
		return g, nil
	}}}, "a", "b")

	c := r.dial()
	r.send(c, "a v=1 1\nb v=2 2\na v=3 3\n")
	eventually(t, 10*time.Second, func() bool { return len(r.drain("a")) == 2 }, "two lines in a")
	require.Equal(t, 1, r.tcpRejected(ReasonForbidden))
	require.Empty(t, r.drain("b"))

	g.end()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	require.Error(t, err, "the server closed the connection when its grant ended")
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "closed, not timed out")
	eventually(t, 10*time.Second, func() bool { return r.tcpConns() == 0 }, "connection gone")
	require.Equal(t, 1, metricValue(t, r.in.m.closed.WithLabelValues(closedRevoked)))

	mu.Lock()
	refuse = true
	mu.Unlock()
	c2 := r.dial()
	_ = c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = c2.Read(make([]byte, 1))
	require.Error(t, err, "a refused connection is closed")
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "closed, not timed out")
	eventually(t, 10*time.Second, func() bool { return metricValue(t, r.in.m.closed.WithLabelValues(closedRefused)) == 1 }, "refusal counted")
}
