package main

import (
	"flag"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReferenceFlags: every flag of the daemon (what `ingestd --help`
// lists) has a row in docs/reference.md#flags (or docs/security.md
// documents it), and every flag in the first column of the reference's
// tables is a flag of the daemon, so the reference cannot drift from the
// command line.
func TestReferenceFlags(t *testing.T) {
	var cfg config
	fs := flag.NewFlagSet("ingestd", flag.ContinueOnError)
	cfg.registerFlags(fs)
	var want []string
	fs.VisitAll(func(f *flag.Flag) { want = append(want, f.Name) })

	raw, err := os.ReadFile("../../docs/reference.md")
	require.NoError(t, err)
	text := string(raw)
	start := strings.Index(text, "\n## Flags\n")
	require.GreaterOrEqual(t, start, 0, "docs/reference.md has a Flags section")
	flags := text[start+1:]
	if end := strings.Index(flags[1:], "\n## "); end >= 0 {
		flags = flags[:end+1]
	}
	var got []string
	row := regexp.MustCompile("(?m)^\\| ((?:`--[a-z0-9-]+`(?:, )?)+) \\|")
	name := regexp.MustCompile("`--([a-z0-9-]+)`")
	for _, m := range row.FindAllStringSubmatch(flags, -1) {
		for _, n := range name.FindAllStringSubmatch(m[1], -1) {
			got = append(got, n[1])
		}
	}
	// By the project's rule the limits against hostile clients document
	// their flags in docs/security.md, which the reference links to: a flag
	// documented there counts. Every flag the reference names must exist.
	security, err := os.ReadFile("../../docs/security.md")
	if err != nil && !os.IsNotExist(err) {
		require.NoError(t, err)
	}
	listed := map[string]int{}
	for _, n := range got {
		listed[n]++
	}
	var missing, unknown, twice []string
	for _, n := range want {
		if listed[n] == 0 && !strings.Contains(string(security), "`--"+n+"`") {
			missing = append(missing, n)
		}
		if listed[n] > 1 {
			twice = append(twice, n)
		}
		delete(listed, n)
	}
	for n := range listed {
		unknown = append(unknown, n)
	}
	sort.Strings(unknown)
	require.Empty(t, missing, "flags of ingestd --help missing from docs/reference.md#flags")
	require.Empty(t, unknown, "flags in docs/reference.md#flags that ingestd does not have")
	require.Empty(t, twice, "flags with more than one row in docs/reference.md#flags")
}
