package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// readmeBlock is one ```sh code block of a documentation section: the script
// (every line that is not an output line) and the output it must print
// (its "# " lines, in order).
type readmeBlock struct {
	line   int // of the opening fence, 1-based
	script string
	want   string
}

// readmeBlocks returns the ```sh blocks of the Markdown section headed
// "## "+title (up to the next "## " heading).
func readmeBlocks(t *testing.T, readme, title string) []readmeBlock {
	t.Helper()
	lines := strings.Split(readme, "\n")
	start := -1
	for i, l := range lines {
		if l == "## "+title {
			start = i
			break
		}
	}
	require.GreaterOrEqual(t, start, 0, "no section %q", title)
	var blocks []readmeBlock
	var cur *readmeBlock
	var script, want []string
	for i := start + 1; i < len(lines) && !strings.HasPrefix(lines[i], "## "); i++ {
		l := lines[i]
		switch {
		case cur == nil && l == "```sh":
			cur = &readmeBlock{line: i + 1}
			script, want = nil, nil
		case cur == nil:
		case l == "```":
			cur.script = strings.Join(script, "\n") + "\n"
			if len(want) > 0 {
				cur.want = strings.Join(want, "\n") + "\n"
			}
			blocks = append(blocks, *cur)
			cur = nil
		case l == "#" || strings.HasPrefix(l, "# "):
			want = append(want, strings.TrimPrefix(strings.TrimPrefix(l, "#"), " "))
		default:
			script = append(script, l)
		}
	}
	require.Nil(t, cur, "unclosed code block in %q", title)
	require.NotEmpty(t, blocks, "no ```sh block in %q", title)
	return blocks
}

// blockEnd separates the outputs of a section's blocks, which run in one
// shell as a reader pastes them into one terminal.
const blockEnd = "--- end of README block ---"

// docSection is a section of the documentation whose ```sh blocks run
// against a fresh daemon: file is relative to the repository's root.
type docSection struct {
	file, title string
}

// walkthroughSections are the sections TestREADMEWalkthrough runs: the
// README's walkthrough and the guide's SQL steps.
var walkthroughSections = []docSection{
	{"README.md", "Walkthrough"},
	{"docs/guide.md", "SQL"},
}

// TestREADMEWalkthrough runs the code blocks of the README's Walkthrough
// and of the guide's SQL section from the files themselves, each section in
// one bash session (as pasted into one terminal) against a fresh daemon on
// an empty data directory, and requires each block to print exactly its
// "# " lines (curl's header lines end in \r\n, compared as \n).
// localhost:8086 becomes the daemon's address and `go run ./cmd/ingestd` a
// binary built once. So the documentation cannot drift from what the
// commands print. On the same daemon it then runs the walkthrough's first
// steps again and checks what the README says differs on a reused data
// directory: later epochs and x_seq, and stale_epoch for the old cursors.
func TestREADMEWalkthrough(t *testing.T) {
	runREADMESections(t, func(t *testing.T) config { return testConfig(t.TempDir()) })
}

// runREADMESections runs walkthroughSections against a fresh daemon per
// section configured by newConfig (see TestREADMEWalkthrough).
func runREADMESections(t *testing.T, newConfig func(t *testing.T) config) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("the documentation's commands need curl on PATH")
	}
	bin := filepath.Join(t.TempDir(), "ingestd")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	for _, sec := range walkthroughSections {
		t.Run(sec.title, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("..", "..", sec.file))
			require.NoError(t, err)
			blocks := readmeBlocks(t, string(raw), sec.title)
			d := startDaemon(t, newConfig(t))
			outs := runBlocks(t, d, bin, blocks)
			for i, b := range blocks {
				require.Equal(t, b.want, outs[i], "%s:%d: the block's output differs from its # lines", sec.file, b.line)
			}
			if sec.title != "Walkthrough" {
				// Again on the same data directory: the guide says the
				// re-created table starts above the dropped one.
				again := runBlocks(t, d, bin, blocks[:1])
				m := regexp.MustCompile(`^\{"columns":\["enabled","epoch","seq","watermark","horizon"\],"rows":\[\[true,3,(\d+),\d+,1\]\]\}\n200\n`).FindStringSubmatch(again[0])
				require.NotNil(t, m, "CREATE TABLE on a reused data directory is at epoch 3, as the guide says: %s", again[0])
				seq, err := strconv.ParseUint(m[1], 10, 64)
				require.NoError(t, err)
				require.GreaterOrEqual(t, seq, uint64(3), "and above the dropped table's x_seq")
				require.Contains(t, again[0], `"code":"stale_epoch"`, "so the drains at x_epoch = 1 are stale")
				return
			}
			// Again on the same data directory: the README says the
			// outputs differ, and how.
			again := runBlocks(t, d, bin, blocks[:3])
			require.Equal(t, `{"name":"sensor","sync":{"enabled":true,"epoch":2,"seq":4,"watermark":4,"horizon":1},"retention":"0"}`+"\nHTTP/1.1 204 No Content\n", again[0],
				"step 1 on a reused data directory, as the README describes it")
			require.Equal(t, 2, strings.Count(again[2], `"code":"stale_epoch"`), "step 3's drains on a reused data directory: %s", again[2])
			require.Contains(t, again[2], `"epoch":2,"seq":7,"watermark":7`, "step 1's writes got x_seq 5 to 7")
		})
	}
}

// runBlocks runs blocks in one bash session against d (localhost:8086 is
// d's address, `go run ./cmd/ingestd` is bin) and returns each block's
// output.
func runBlocks(t *testing.T, d *daemon, bin string, blocks []readmeBlock) []string {
	t.Helper()
	subst := strings.NewReplacer("localhost:8086", strings.TrimPrefix(d.URL, "http://"), "go run ./cmd/ingestd", bin)
	var script strings.Builder
	for _, b := range blocks {
		script.WriteString(subst.Replace(b.script))
		script.WriteString("echo '" + blockEnd + "'\n")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script.String())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "the section's commands failed: %s\n%s", stderr.String(), stdout.String())
	outs := strings.Split(strings.ReplaceAll(stdout.String(), "\r\n", "\n"), blockEnd+"\n")
	require.Len(t, outs, len(blocks)+1, "every block ran")
	return outs
}

// TestReadmeBlocks: a section's blocks, each split into its script and
// its output lines ("#" alone is an empty output line).
func TestReadmeBlocks(t *testing.T) {
	readme := "# x\n## A\n```sh\nnot in B\n```\n## B\ntext\n```sh\nprintf 'a\\n\\nb\\n'\n# a\n#\n# b\necho c\n# c\n```\n```sh\ntrue\n```\n## C\n```sh\nno\n```\n"
	got := readmeBlocks(t, readme, "B")
	require.Equal(t, []readmeBlock{
		{line: 8, script: "printf 'a\\n\\nb\\n'\necho c\n", want: "a\n\nb\nc\n"},
		{line: 16, script: "true\n"},
	}, got)
}
