// Package cli is what every ingestd command shares: flags parsed from the
// command line and INGESTD_* environment variables (ff), sizes with units,
// help grouped by area, exit codes, the logger, and durable file writes.
// It is used by cmd/ingestd and by its subcommand packages (mirror, bench).
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/peterbourgon/ff/v3"
)

// Exit codes of every command, the same for each subcommand
// (docs/reference.md#exit-codes):
// 0 success (and --help, --version), 1 a runtime failure, 2 bad flags or
// arguments.
const (
	// ExitOK is success, --help and --version.
	ExitOK = 0
	// ExitFailure is a runtime failure (a locked or unwritable data
	// directory, a source or target that keeps failing).
	ExitFailure = 1
	// ExitBadUsage is a bad flag or argument.
	ExitBadUsage = 2
)

// FlagGroups records, in registration order, which help section each flag
// belongs to. It is not safe for concurrent use (flags are registered
// once, at start).
type FlagGroups struct {
	order  []string            // section titles in order of first use
	byName map[string][]string // section title -> flag names
	seen   map[string]bool
}

// NewFlagGroups returns an empty set of help sections.
func NewFlagGroups() *FlagGroups {
	return &FlagGroups{byName: map[string][]string{}, seen: map[string]bool{}}
}

// Register runs fn on fs and files every flag it registered under the
// section that classify names (title when classify is nil).
func (g *FlagGroups) Register(fs *flag.FlagSet, title string, classify func(name string) string, fn func(*flag.FlagSet)) {
	fn(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if g.seen[f.Name] {
			return
		}
		g.seen[f.Name] = true
		t := title
		if classify != nil {
			t = classify(f.Name)
		}
		if _, ok := g.byName[t]; !ok {
			g.order = append(g.order, t)
		}
		g.byName[t] = append(g.byName[t], f.Name)
	})
}

// isSizeFlag reports whether a flag counts bytes, by the naming rule every
// such flag follows (its name holds "-bytes").
func isSizeFlag(name string) bool { return strings.Contains(name, "-bytes") }

// sizeValue lets a byte-count flag take units: 32MiB, 1GB, "64 KiB" (IEC
// and SI, as go-humanize parses them) besides a plain integer, which is
// passed on unchanged (so a negative value still meets the flag's own
// validation).
type sizeValue struct{ flag.Value }

func (v sizeValue) Set(s string) error {
	if _, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
		return v.Value.Set(strings.TrimSpace(s))
	}
	n, err := humanize.ParseBytes(s)
	if err != nil {
		return fmt.Errorf("not a size (e.g. 32MiB, 1GB, 4096): %q", s)
	}
	return v.Value.Set(strconv.FormatUint(n, 10))
}

// acceptUnits wraps every byte-count flag of fs in sizeValue.
func acceptUnits(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(sizeValue); !ok && isSizeFlag(f.Name) {
			f.Value = sizeValue{f.Value}
		}
	})
}

// formatSize renders n bytes in the largest IEC unit that divides it
// exactly (32MiB), else as a plain number.
func formatSize(s string) string {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n == 0 {
		return s
	}
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return s
}

// EnvName is the environment variable ff reads for flag name under
// prefix: INGESTD + max-body-bytes is INGESTD_MAX_BODY_BYTES.
func EnvName(prefix, name string) string {
	return prefix + "_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(name))
}

// Command is one (sub)command's flags and help.
type Command struct {
	// Name is "ingestd", "ingestd mirror", …
	Name string
	// Usage is the lines heading the help.
	Usage string
	// EnvPrefix is INGESTD, INGESTD_MIRROR …: flag --a-b is also read from
	// $PREFIX_A_B; "" when the flags have no environment.
	EnvPrefix string
	// Required names the flags the help marks required (the command
	// validates them).
	Required map[string]bool
	// Groups files the flags into help sections; nil: one "Flags" section.
	Groups *FlagGroups
	// Placeholders names the type of the value of the flags whose own
	// type or name does not say it (a flag.Value of the command's own, such
	// as a list of globs): flag name -> placeholder (GLOBS, SCOPE…). The
	// others are placeholderOf's.
	Placeholders map[string]string
}

// placeholderOf returns the help's placeholder of flag f, a type in upper
// case: none for a boolean, SIZE for a byte count, ADDR, FILE, DIR or URL
// by the flag's name (--http-addr, --auth-file, --data-dir, --nats-url…),
// else the Go type of its value (STRING, INT, DURATION…). Unlike
// flag.UnquoteUsage, a `quoted` word in the usage never becomes it: the
// usage is prose, the placeholder a type.
func placeholderOf(f *flag.Flag) string {
	if isBool(f) {
		return ""
	}
	name := f.Name
	switch {
	case isSizeFlag(name):
		return "SIZE"
	case strings.HasSuffix(name, "-addr"):
		return "ADDR"
	case strings.HasSuffix(name, "-dir"):
		return "DIR"
	case strings.HasSuffix(name, "-urls"):
		return "URLS"
	case name == "url" || strings.HasSuffix(name, "-url"):
		return "URL"
	}
	for _, suffix := range []string{"-file", "-cert", "-key", "-ca", "-creds"} {
		if strings.HasSuffix(name, suffix) {
			return "FILE"
		}
	}
	return strings.ToUpper(valueType(f))
}

// valueType is the name flag gives the type of f's value ("string",
// "int", "duration", "value" for one of the program's own…), whatever f's
// usage says.
func valueType(f *flag.Flag) string {
	typ, _ := flag.UnquoteUsage(&flag.Flag{Value: f.Value})
	return typ
}

// PrintHelp writes the command's help: its usage, then each section's
// flags with their placeholder, environment variable, default (sizes in
// units) and whether they are required.
func (c *Command) PrintHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, c.Usage)
	groups := c.Groups
	if groups == nil {
		groups = NewFlagGroups()
		groups.Register(fs, "Flags", nil, func(*flag.FlagSet) {})
	}
	for _, title := range groups.order {
		names := append([]string(nil), groups.byName[title]...)
		sort.Strings(names)
		fmt.Fprintf(w, "\n%s:\n", title)
		for _, name := range names {
			f := fs.Lookup(name)
			if f == nil {
				continue
			}
			placeholder := placeholderOf(f)
			if p, ok := c.Placeholders[name]; ok {
				placeholder = p
			}
			isString := valueType(f) == "string"
			line := "  --" + name
			if placeholder != "" {
				line += " " + placeholder
			}
			var notes []string
			if c.Required[name] {
				notes = append(notes, "required")
			}
			if c.EnvPrefix != "" {
				notes = append(notes, "$"+EnvName(c.EnvPrefix, name))
			}
			if def := f.DefValue; def != "" && def != "0" && def != "false" && !c.Required[name] {
				if isSizeFlag(name) {
					def = formatSize(def)
				} else if isString {
					def = strconv.Quote(def)
				}
				notes = append(notes, "default "+def)
			}
			if len(notes) > 0 {
				line += "  (" + strings.Join(notes, ", ") + ")"
			}
			fmt.Fprintf(w, "%s\n      %s\n", line, f.Usage)
		}
	}
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Parse parses args into fs: environment variables under c.EnvPrefix (ff),
// sizes with units, help on stdout (exit 0), a bad flag as one line on
// stderr pointing at --help (exit 2). done tells the caller to return code.
func (c *Command) Parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, done bool) {
	fs.SetOutput(io.Discard) // errors and help are written below, once
	fs.Usage = func() {}
	acceptUnits(fs)
	var err error
	if c.EnvPrefix != "" {
		err = ff.Parse(fs, args, ff.WithEnvVarPrefix(c.EnvPrefix))
	} else {
		err = fs.Parse(args)
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.PrintHelp(stdout, fs)
		return ExitOK, true
	case err != nil:
		msg := strings.TrimPrefix(err.Error(), "error parsing commandline arguments: ") // ff's wrapping
		// The package flag names flags -name, the help --name.
		msg = flagDash.ReplaceAllString(msg, "${1}--")
		return c.UsageError(stderr, strings.ReplaceAll(msg, "\n", " ")), true
	case fs.NArg() > 0:
		return c.UsageError(stderr, fmt.Sprintf("unexpected argument %q", fs.Arg(0))), true
	}
	return ExitOK, false
}

// flagDash finds the single dash before a flag's name in package flag's
// errors ("flag provided but not defined: -x", "invalid value … for flag
// -x: …").
var flagDash = regexp.MustCompile(`(not defined: |for flag )-\b`)

// UsageError writes msg as one line with a pointer to --help; it returns
// ExitBadUsage.
func (c *Command) UsageError(stderr io.Writer, msg string) int {
	fmt.Fprintf(stderr, "%s: %s (see %s --help)\n", c.Name, msg, c.Name)
	return ExitBadUsage
}
