// Package pgtest runs a PostgreSQL cluster of a test's own, for the tests
// of the mirror's postgres:// target (cmd/ingestd/mirror and the crash
// tests of cmd/ingestd/crashtest). It needs PostgreSQL's initdb and
// postgres (Debian's package postgresql: /usr/lib/postgresql/<ver>/bin).
//
// Start runs initdb in a new temporary directory, then postgres listening
// on a unix socket there only (no TCP), with trust authentication and
// fsync off, and stops it (fast shutdown) and removes the directory when
// the test ends. postgres refuses to run as root: as root, both run as the
// user nobody (through setpriv). Where PostgreSQL is not installed the
// test is skipped, saying so, except under CI=true, where it fails.
package pgtest

import (
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ingestd/ingestd/store/testdeadline"
)

// Start runs a PostgreSQL cluster for t and returns its connection URL
// (user postgres, database postgres), for pgx or `ingestd mirror
// --target`. The cluster lives until t ends. Not safe to call from any
// goroutine but t's.
func Start(t testing.TB) string {
	t.Helper()
	initdb, err := exec.LookPath("initdb")
	if err != nil {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
		if len(found) == 0 {
			if os.Getenv("CI") == "true" {
				t.Fatal("PostgreSQL is needed (initdb is neither on PATH nor in /usr/lib/postgresql/*/bin): apt-get install postgresql")
			}
			t.Skip("PostgreSQL is not installed (initdb is neither on PATH nor in /usr/lib/postgresql/*/bin): the tests of the postgres:// mirror need it")
		}
		slices.Sort(found)
		initdb = found[len(found)-1]
	}
	bin, err := filepath.EvalSymlinks(initdb)
	if err != nil {
		t.Fatalf("resolve %s: %v", initdb, err)
	}
	postgres := filepath.Join(filepath.Dir(bin), "postgres")

	// Not t.TempDir: its parent is private to the user running the test,
	// and the socket's path must stay short (108 bytes).
	dir, err := os.MkdirTemp("", "pg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var prefix []string
	if os.Geteuid() == 0 {
		u, err := user.Lookup("nobody")
		if err != nil {
			t.Fatalf("running PostgreSQL as root needs the user nobody: %v", err)
		}
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Fatalf("running PostgreSQL as root needs setpriv (util-linux): %v", err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := exec.Command("chown", u.Uid, dir).Run(); err != nil {
			t.Fatalf("chown %s %s: %v", u.Uid, dir, err)
		}
		prefix = []string{setpriv, "--reuid=" + u.Uid, "--regid=" + u.Gid, "--clear-groups", "--"}
	}
	command := func(args ...string) *exec.Cmd {
		all := append(slices.Clone(prefix), args...)
		cmd := exec.Command(all[0], all[1:]...)
		cmd.Dir = dir
		return cmd
	}
	data := filepath.Join(dir, "data")
	if out, err := command(initdb, "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	logPath := filepath.Join(dir, "postgres.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logf.Close() }() // the child has its own descriptor
	pg := command(postgres, "-D", data, "-k", dir, "-c", "listen_addresses=", "-c", "fsync=off", "-c", "max_connections=40")
	pg.Stdout, pg.Stderr = logf, logf
	if err := pg.Start(); err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = pg.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = pg.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-done:
		case <-time.After(testdeadline.Scale(30 * time.Second)):
			_ = pg.Process.Kill()
			<-done
		}
	})
	u := "postgres://postgres@/postgres?sslmode=disable&host=" + dir
	timeout := testdeadline.Scale(30 * time.Second)
	deadline := time.Now().Add(timeout)
	for {
		conn, err := pgx.Connect(context.Background(), u)
		if err == nil {
			_ = conn.Close(context.Background())
			return u
		}
		select {
		case <-done:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("postgres exited before it accepted connections:\n%s", b)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("postgres did not accept connections within %s: %v\n%s", timeout, err, b)
		}
	}
}
