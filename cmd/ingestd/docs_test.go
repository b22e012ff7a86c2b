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
// lists) has a row in docs/reference.md#flags, and every flag in the first
// column of its tables is a flag of the daemon, so the reference cannot
// drift from the command line.
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
	sort.Strings(want)
	sort.Strings(got)
	require.Equal(t, want, got, "docs/reference.md#flags has one row entry per flag of ingestd --help")
}
