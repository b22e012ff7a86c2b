package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The documentation's shell blocks are tests. Every ```sh (or bash, shell,
// console) block of README.md, deploy/README.md and docs/*.md runs, in
// page order, in one bash session against a fresh daemon, unless the line
// before its fence says why it cannot:
//
//	<!-- no-test: needs Docker -->
//
// A block's "# " lines are the output it must print ("#" alone is an empty
// line, "…" stands for any text within a line); a block without them only
// has to succeed. Two more comments, on the line before a fence, start a
// new session on a new daemon from that block on:
//
//	<!-- test: fresh daemon -->
//	<!-- test: fresh daemon after LINK -->
//
// the second first runs the shell blocks of the "## " section LINK points
// to (relative to the page, as a Markdown link: the user guide's points to
// the README's walkthrough), for pages that say they continue from it;
// their outputs are checked by their own page's run.
//
// The commands run as written but for addresses: localhost:8086 and
// 127.0.0.1/9009 (bash's /dev/tcp) are the daemon's listeners,
// localhost:8087, --http-addr :8087 and --tcp-addr :9010 (a replica's)
// free loopback ports, `go run ./cmd/ingestd` (or `ingestd` at the start
// of a line) a binary built once. A session whose blocks start the daemon
// themselves (`go run ./cmd/ingestd [FLAGS] &` without --http-addr) gets
// no daemon from the test: its listeners are free loopback ports passed to
// that command. Background jobs end with their session.

// docFence is a code block of a page, as the tests read it.
type docFence struct {
	line   int    // of the opening fence, 1-based
	lang   string // the first word of the info string
	skip   string // the reason of a no-test comment
	fresh  string // "-" after a fresh-daemon comment, or the section to replay first
	script string
	want   string // the "# " lines, "" when there are none
}

var (
	noTestRE = regexp.MustCompile(`^<!-- no-test: (\S.*?) -->$`)
	freshRE  = regexp.MustCompile(`^<!-- test: fresh daemon(?: after ([\w./-]+#[\w-]+))? -->$`)
	// shellLangs are the info strings of blocks a reader runs in a shell.
	shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}
)

// docFences returns the fenced code blocks of a Markdown page. A fence
// without a language, an unclosed one and a directive comment that is not
// right before a shell block are errors.
func docFences(page string) ([]docFence, error) {
	lines := strings.Split(page, "\n")
	var fences []docFence
	var cur *docFence
	var script, want []string
	indent := ""
	for i, l := range lines {
		trimmed := strings.TrimLeft(l, " ")
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "~~~"):
			return nil, fmt.Errorf("line %d: a ~~~ fence: use ``` so the tests read the block", i+1)
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			indent = l[:len(l)-len(trimmed)]
			info := strings.Fields(strings.TrimPrefix(trimmed, "```"))
			if len(info) == 0 {
				return nil, fmt.Errorf("line %d: a code block without a language: say ```sh, ```text, …", i+1)
			}
			cur = &docFence{line: i + 1, lang: info[0]}
			script, want = nil, nil
			if i > 0 {
				prev := strings.TrimSpace(lines[i-1])
				if m := noTestRE.FindStringSubmatch(prev); m != nil {
					cur.skip = m[1]
				} else if m := freshRE.FindStringSubmatch(prev); m != nil {
					cur.fresh = "-"
					if m[1] != "" {
						cur.fresh = m[1]
					}
				}
			}
			if (cur.skip != "" || cur.fresh != "") && !shellLangs[cur.lang] {
				return nil, fmt.Errorf("line %d: a test comment before a %s block: only shell blocks run", i, cur.lang)
			}
		case cur == nil:
			if s := strings.TrimSpace(l); strings.HasPrefix(s, "<!-- no-test") || strings.HasPrefix(s, "<!-- test:") {
				if !noTestRE.MatchString(s) && !freshRE.MatchString(s) {
					return nil, fmt.Errorf("line %d: %q is not <!-- no-test: REASON --> or <!-- test: fresh daemon [after FILE#ANCHOR] -->", i+1, s)
				}
				if i+1 >= len(lines) || !strings.HasPrefix(strings.TrimSpace(lines[i+1]), "```") {
					return nil, fmt.Errorf("line %d: a test comment belongs on the line right before a code block", i+1)
				}
			}
		case strings.TrimSpace(l) == "```":
			cur.script = strings.Join(script, "\n") + "\n"
			if len(want) > 0 {
				cur.want = strings.Join(want, "\n") + "\n"
			}
			fences = append(fences, *cur)
			cur = nil
		default:
			l = strings.TrimPrefix(l, indent)
			if l == "#" || strings.HasPrefix(l, "# ") {
				want = append(want, strings.TrimPrefix(strings.TrimPrefix(l, "#"), " "))
			} else {
				script = append(script, l)
			}
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: unclosed code block", cur.line)
	}
	return fences, nil
}

// docPages are the pages (README.md, deploy/README.md, docs/*.md) whose shell blocks run, relative to the
// repository's root.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	out := []string{"README.md", "deploy/README.md"}
	for _, p := range pages {
		out = append(out, strings.TrimPrefix(p, "../../"))
	}
	return out
}

// readFences reads the fences of file (relative to the repository's root).
func readFences(t *testing.T, file string) []docFence {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", file))
	require.NoError(t, err)
	fences, err := docFences(string(raw))
	require.NoError(t, err, file)
	return fences
}

// sectionFences returns the shell blocks of file's section with the given
// anchor (a "## " heading), the ones a no-test comment marks left out.
func sectionFences(t *testing.T, file, anchor string) []docFence {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", file))
	require.NoError(t, err)
	lines := strings.Split(string(raw), "\n")
	from, to := 0, len(lines)
	for i, l := range lines {
		if !strings.HasPrefix(l, "## ") {
			continue
		}
		if from > 0 {
			to = i
			break
		}
		if strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(l, "## ")), " ", "-") == anchor {
			from = i + 1
		}
	}
	require.Positive(t, from, "%s has no section #%s", file, anchor)
	var out []docFence
	for _, f := range readFences(t, file) {
		if f.line > from && f.line <= to && shellLangs[f.lang] && f.skip == "" {
			out = append(out, f)
		}
	}
	require.NotEmpty(t, out, "%s#%s has shell blocks", file, anchor)
	return out
}

// TestDocBlocks runs every shell block of the documentation (see the
// comment at the top of this file): each page in one bash session in a
// temporary directory against a fresh daemon on an empty data directory.
// It fails with the page, the block's line and the command on
// a failing command or an output that differs from the block's "# " lines,
// so a page cannot show a command that does not do what it says, and a
// new block either runs or says why not.
func TestDocBlocks(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("the documentation's commands need curl on PATH")
	}
	bin := filepath.Join(t.TempDir(), "ingestd")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	for _, page := range docPages(t) {
		t.Run(page, func(t *testing.T) {
			var segment []docFence
			var replay []docFence
			ran, skipped := 0, 0
			flush := func() {
				if len(segment) > 0 {
					runDocSegment(t, page, bin, replay, segment)
					ran += len(segment)
				}
				segment = nil
			}
			for _, f := range readFences(t, page) {
				if !shellLangs[f.lang] {
					continue
				}
				if f.skip != "" {
					skipped++
					continue
				}
				if f.fresh != "" {
					flush()
					replay = nil
					if f.fresh != "-" {
						file, anchor, _ := strings.Cut(f.fresh, "#")
						replay = sectionFences(t, path.Join(path.Dir(page), file), anchor)
					}
				}
				segment = append(segment, f)
			}
			flush()
			t.Logf("%s: %d shell blocks ran, %d marked no-test", page, ran, skipped)
		})
	}
}

// runDocSegment runs replay (outputs unchecked), then blocks, in one bash
// session against a fresh daemon, and checks each block's exit status and
// output. A segment that starts the daemon itself, in the background
// (`go run ./cmd/ingestd [FLAGS] &`), gets free ports for it instead.
func runDocSegment(t *testing.T, page, bin string, replay, blocks []docFence) {
	t.Helper()
	all := append(append([]docFence(nil), replay...), blocks...)
	var httpAddr, tcpAddr string
	if startsDaemon(all) {
		httpAddr, tcpAddr = freeAddr(t), freeAddr(t)
	} else {
		d := startDaemon(t, testConfig(t.TempDir()))
		httpAddr, tcpAddr = strings.TrimPrefix(d.URL, "http://"), d.TCPAddr
	}
	tcpHost, tcpPort, err := net.SplitHostPort(tcpAddr)
	require.NoError(t, err)
	// The docs' second daemon (a mirror's replica) listens on :8087 and
	// :9010: free ports on loopback here.
	replicaHTTP, replicaTCP := freeAddr(t), freeAddr(t)
	subst := strings.NewReplacer(
		"localhost:8086", httpAddr,
		"127.0.0.1/9009", tcpHost+"/"+tcpPort,
		"localhost:8087", replicaHTTP,
		"--http-addr :8087", "--http-addr "+replicaHTTP,
		"--tcp-addr :9010", "--tcp-addr "+replicaTCP,
		"go run ./cmd/ingestd", bin,
	)
	leading := regexp.MustCompile(`(?m)^ingestd `)
	const end = "--- end of block ---"
	var script strings.Builder
	// stderr is shown as a terminal shows it, among the output; a failing
	// command stops the session and names itself on the test's stderr.
	script.WriteString("exec 3>&2 2>&1\nset -eE -o pipefail\ntrap 'echo \"exit status $?: $BASH_COMMAND\" >&3' ERR\n")
	for _, b := range all {
		lines := strings.Split(b.script, "\n")
		for i, l := range lines {
			if pageDaemon(l) {
				lines[i] = strings.Replace(l, "go run ./cmd/ingestd", "go run ./cmd/ingestd --http-addr "+httpAddr+" --tcp-addr "+tcpAddr, 1)
			}
		}
		b.script = strings.Join(lines, "\n")
		script.WriteString(leading.ReplaceAllString(subst.Replace(b.script), bin+" "))
		script.WriteString("echo '" + end + "'\n")
	}
	// The script ends by stopping its background jobs, as a reader stops
	// a daemon started in a terminal.
	script.WriteString("kill $(jobs -p) 2>/dev/null || true\nwait\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = t.TempDir()
	// The session's process group goes when it ends: the daemons and
	// other jobs its blocks started in the background with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	defer func() {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	outs := strings.Split(strings.ReplaceAll(stdout.String(), "\r\n", "\n"), end+"\n")
	outs = outs[min(len(replay), len(outs)-1):]
	if runErr != nil {
		failed := blocks[0]
		if len(outs)-1 < len(blocks) {
			failed = blocks[len(outs)-1]
		}
		if len(outs) == 1 && len(replay) > 0 {
			t.Fatalf("%s:%d: replaying the section this block continues from failed: %v\n%s", page, failed.line, runErr, stderr.String())
		}
		t.Fatalf("%s:%d: the block failed: %v\n%s\ncommands:\n%sprinted:\n%s", page, failed.line, runErr, stderr.String(), failed.script, outs[len(outs)-1])
	}
	require.Len(t, outs, len(blocks)+1, "%s: every block ran", page)
	for i, b := range blocks {
		if b.want != "" && !outputMatches(subst.Replace(b.want), outs[i]) {
			t.Errorf("%s:%d: the block's output differs from its # lines\ncommands:\n%swant:\n%sgot:\n%s", page, b.line, b.script, b.want, outs[i])
		}
	}
}

// startsDaemon reports whether blocks start the daemon they talk to (see
// pageDaemon).
func startsDaemon(blocks []docFence) bool {
	for _, b := range blocks {
		for _, l := range strings.Split(b.script, "\n") {
			if pageDaemon(l) {
				return true
			}
		}
	}
	return false
}

// pageDaemon reports whether a script line starts, in the background, the
// daemon the page talks to: `go run ./cmd/ingestd [FLAGS] &` without an
// --http-addr of its own.
func pageDaemon(line string) bool {
	args, ok := strings.CutPrefix(line, "go run ./cmd/ingestd ")
	return ok && (strings.HasPrefix(args, "-") || strings.HasPrefix(args, "&")) &&
		strings.HasSuffix(strings.TrimSpace(args), "&") && !strings.Contains(args, "--http-addr")
}

// freeAddr returns a loopback address with a port that was free a moment
// ago, for a daemon a block starts itself.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// outputMatches reports whether got is want, where "…" in want stands for
// any text within a line.
func outputMatches(want, got string) bool {
	parts := strings.Split(want, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(`^` + strings.Join(parts, `[^\n]*`) + `$`).MatchString(got)
}

// TestDocFences: the blocks of a page, their languages, outputs and test
// comments, and the mistakes that fail.
func TestDocFences(t *testing.T) {
	page := "# x\n```text\na\n```\n<!-- no-test: needs Docker -->\n```sh\ndocker run x\n```\n" +
		"<!-- test: fresh daemon after ../README.md#walkthrough -->\n```sh\nprintf 'a\\n\\nb\\n'\n# a\n#\n# b\n```\n" +
		"- item\n  ```sh\n  echo c\n  # c\n  ```\n"
	got, err := docFences(page)
	require.NoError(t, err)
	require.Equal(t, []docFence{
		{line: 2, lang: "text", script: "a\n"},
		{line: 6, lang: "sh", skip: "needs Docker", script: "docker run x\n"},
		{line: 10, lang: "sh", fresh: "../README.md#walkthrough", script: "printf 'a\\n\\nb\\n'\n", want: "a\n\nb\n"},
		{line: 17, lang: "sh", script: "echo c\n", want: "c\n"},
	}, got)

	for _, bad := range []string{
		"```\nls\n```\n",                            // no language
		"```sh\nls\n",                               // unclosed
		"<!-- no-test: -->\n```sh\nls\n```\n",       // no reason
		"<!-- no-test: why -->\n\n```sh\nls\n```\n", // not right before
		"<!-- no-test: why -->\n```json\n{}\n```\n", // not a shell block
		"<!-- test: fresh -->\n```sh\nls\n```\n",    // unknown
		"~~~sh\nls\n~~~\n",                          // not a ``` fence
	} {
		_, err := docFences(bad)
		require.Error(t, err, "%q", bad)
	}

	require.True(t, outputMatches("a…c\nd\n", "abbc\nd\n"))
	require.False(t, outputMatches("a…c\n", "ab\nc\n"))
	require.False(t, outputMatches("a\n", "a\nb\n"))
}
