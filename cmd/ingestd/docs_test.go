package main

import (
	"flag"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

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

// TestReferenceFlagDefaults: the default each row of docs/reference.md#flags
// gives (the `value` its default column starts with; "(none)" and the
// like mean none) is the default `ingestd --help` prints, compared as a
// duration or a size when it is one.
func TestReferenceFlagDefaults(t *testing.T) {
	code, help, _ := runCLI(t, "--help")
	require.Zero(t, code)
	helpDefault := map[string]string{}
	line := regexp.MustCompile(`(?m)^  --([a-z0-9-]+)[^\n]*?\(\$[A-Z0-9_]+(?:, default ([^)]*))?\)$`)
	for _, m := range line.FindAllStringSubmatch(help, -1) {
		helpDefault[m[1]] = strings.Trim(m[2], `"`)
	}
	require.Greater(t, len(helpDefault), 50, "the help's flag lines were read")

	raw, err := os.ReadFile("../../docs/reference.md")
	require.NoError(t, err)
	row := regexp.MustCompile("(?m)^\\| ((?:`--[a-z0-9-]+`(?:, )?)+) \\| ([^|]*) \\|")
	name := regexp.MustCompile("`--([a-z0-9-]+)`")
	first := regexp.MustCompile("`([^`]*)`")
	var bad []string
	for _, m := range row.FindAllStringSubmatch(string(raw), -1) {
		doc := "" // "(none)", "(off)", "(the main log)": no default
		if v := first.FindStringSubmatch(m[2]); v != nil && strings.HasPrefix(m[2], "`") {
			doc = v[1]
		}
		for _, n := range name.FindAllStringSubmatch(m[1], -1) {
			want, ok := helpDefault[n[1]]
			if !ok {
				continue // TestReferenceFlags reports it
			}
			if !sameDefault(doc, want) {
				bad = append(bad, "--"+n[1]+": docs "+strconv.Quote(doc)+", --help "+strconv.Quote(want))
			}
		}
	}
	require.Empty(t, bad, "defaults in docs/reference.md#flags that differ from ingestd --help")
}

// sameDefault compares a documented default with the help's: equal text,
// equal durations or equal sizes; no default matches "", "0" and "false".
func sameDefault(doc, help string) bool {
	if doc == help {
		return true
	}
	if help == "" {
		return doc == "0" || doc == "false"
	}
	if a, err := time.ParseDuration(doc); err == nil {
		b, err := time.ParseDuration(help)
		return err == nil && a == b
	}
	a, okA := sizeBytes(doc)
	b, okB := sizeBytes(help)
	return okA && okB && a == b
}

// sizeBytes reads "33554432", "32MiB" or "1GB" as bytes.
func sizeBytes(s string) (int64, bool) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}, {"", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
			if err == nil {
				return n * u.mult, true
			}
		}
	}
	return 0, false
}
