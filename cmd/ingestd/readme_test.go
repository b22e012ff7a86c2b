package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// blockEnd separates the outputs of a section's blocks, which run in one
// shell as a reader pastes them into one terminal.
const blockEnd = "--- end of README block ---"

// docSection is a section of the documentation whose ```sh blocks run
// against a fresh daemon: file is relative to the repository's root,
// anchor is the section's "## " heading's.
type docSection struct {
	file, anchor string
}

// walkthroughSections are the sections TestREADMEWalkthrough runs: the
// README's walkthrough and the guide's SQL steps.
var walkthroughSections = []docSection{
	{"README.md", "walkthrough"},
	{"docs/guide.md", "sql"},
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
		t.Run(sec.anchor, func(t *testing.T) {
			blocks := sectionFences(t, sec.file, sec.anchor)
			d := startDaemon(t, newConfig(t))
			outs := runBlocks(t, d, bin, blocks)
			for i, b := range blocks {
				require.True(t, outputMatches(b.want, outs[i]), "%s:%d: the block's output differs from its # lines\nwant:\n%s\ngot:\n%s", sec.file, b.line, b.want, outs[i])
			}
			if sec.anchor != "walkthrough" {
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
func runBlocks(t *testing.T, d *daemon, bin string, blocks []docFence) []string {
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
