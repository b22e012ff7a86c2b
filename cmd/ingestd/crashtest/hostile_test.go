package crashtest

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAcceptLoopsSurviveEMFILE runs the binary with few file descriptors,
// fills them with idle HTTP connections and checks that both accept loops
// back off instead of failing: the TCP connection opened while no
// descriptor is free is served once some are, its line is stored, and the
// process goes on serving and stops cleanly (issue 11: it exited 1).
func TestAcceptLoopsSurviveEMFILE(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("prlimit(1) is needed to lower the child's file descriptor limit")
	}
	dir := t.TempDir()
	p := startIngestd(t, filepath.Join(dir, "1.log"), daemonArgs(filepath.Join(dir, "data"),
		"--http-read-header-timeout", "5m", "--tcp-flush-interval", "10ms")...)
	hc := newHTTPClient(t, 1)
	createSyncTable(t, hc, p.URL, "emfile")
	hc.CloseIdleConnections()

	pid := p.cmd.Process.Pid
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	require.NoError(t, err)
	limit := len(fds) + 20
	out, err := exec.Command(prlimit, "--pid", strconv.Itoa(pid), "--nofile="+strconv.Itoa(limit)+":"+strconv.Itoa(limit)).CombinedOutput()
	require.NoError(t, err, "prlimit: %s", out)

	// More idle HTTP connections than free descriptors: the last ones wait
	// in the listen backlog while the HTTP accept loop fails with EMFILE.
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			_ = c.Close()
		}
	}()
	for range 40 {
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(p.URL, "http://"), 5*time.Second)
		require.NoError(t, err)
		idle = append(idle, c)
	}
	poll(t, 30*time.Second, func() bool { return strings.Contains(p.log(t), "Accept error") }, "the HTTP accept loop to hit EMFILE")

	tcp, err := net.DialTimeout("tcp", p.TCPAddr, 5*time.Second)
	require.NoError(t, err)
	_, err = io.WriteString(tcp, "emfile v=1 1\n")
	require.NoError(t, err)
	require.NoError(t, tcp.Close())
	poll(t, 30*time.Second, func() bool {
		return p.exited() || strings.Contains(p.log(t), "tcp accept failed; retrying")
	}, "the TCP accept loop to hit EMFILE")
	require.False(t, p.exited(), "ingestd exited at EMFILE:\n%s", p.log(t))

	for _, c := range idle {
		require.NoError(t, c.Close())
	}
	idle = nil
	poll(t, 30*time.Second, func() bool {
		r, err := do(t.Context(), hc, http.MethodGet, p.URL+"/api/v1/tables/emfile/sync", nil, nil)
		return err == nil && r.Status == http.StatusOK && strings.Contains(string(r.Body), `"watermark":1`)
	}, "the line sent at EMFILE to be stored")
	v, ok := metric(t, hc, p.URL, "ingestd_ilp_tcp_accept_errors_total")
	require.True(t, ok)
	require.Positive(t, v)
	v, ok = metric(t, hc, p.URL, "ingestd_http_accept_errors_total")
	require.True(t, ok)
	require.Positive(t, v)
	hc.CloseIdleConnections()
	require.Equal(t, 0, p.terminate(t, 30*time.Second), "log:\n%s", p.log(t))
	requireCleanLog(t, p.log(t))
}
