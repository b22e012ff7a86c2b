package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/peterbourgon/ff/v3"
)

// Exit codes of every command (issue 17: the same for each subcommand):
// 0 success (and --help, --version), 1 a runtime failure, 2 bad flags or
// arguments.
const (
	exitOK       = 0
	exitFailure  = 1
	exitBadUsage = 2
)

// flagGroups records, in registration order, which help section each flag
// belongs to.
type flagGroups struct {
	order  []string            // section titles in order of first use
	byName map[string][]string // section title -> flag names
	seen   map[string]bool
}

func newFlagGroups() *flagGroups {
	return &flagGroups{byName: map[string][]string{}, seen: map[string]bool{}}
}

// register runs fn on fs and files every flag it registered under the
// section that classify names (title when classify is nil).
func (g *flagGroups) register(fs *flag.FlagSet, title string, classify func(name string) string, fn func(*flag.FlagSet)) {
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

// envName is the environment variable ff reads for flag name under prefix.
func envName(prefix, name string) string {
	return prefix + "_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(name))
}

// command is one (sub)command's flags and help.
type command struct {
	name      string // "ingestd", "ingestd mirror", …
	usage     string // the lines heading the help
	envPrefix string // INGESTD, INGESTD_MIRROR; "" when flags have no environment
	required  map[string]bool
	groups    *flagGroups // nil: one "Flags" section
}

// printHelp writes the command's help: its usage, then each section's
// flags with their placeholder, environment variable, default (sizes in
// units) and whether they are required.
func (c *command) printHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, c.usage)
	groups := c.groups
	if groups == nil {
		groups = newFlagGroups()
		groups.register(fs, "Flags", nil, func(*flag.FlagSet) {})
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
			placeholder, usage := flag.UnquoteUsage(f)
			isString := placeholder == "string"
			if isSizeFlag(name) {
				placeholder = "SIZE"
			} else if placeholder != "" {
				placeholder = strings.ToUpper(placeholder)
			}
			line := "  --" + name
			if placeholder != "" && !isBool(f) {
				line += " " + placeholder
			}
			var notes []string
			if c.required[name] {
				notes = append(notes, "required")
			}
			if c.envPrefix != "" {
				notes = append(notes, "$"+envName(c.envPrefix, name))
			}
			if def := f.DefValue; def != "" && def != "0" && def != "false" && !c.required[name] {
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
			fmt.Fprintf(w, "%s\n      %s\n", line, usage)
		}
	}
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// parse parses args into fs: environment variables under c.envPrefix (ff),
// sizes with units, help on stdout (exit 0), a bad flag as one line on
// stderr pointing at --help (exit 2). done tells the caller to return code.
func (c *command) parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, done bool) {
	fs.SetOutput(io.Discard) // errors and help are written below, once
	fs.Usage = func() {}
	acceptUnits(fs)
	var err error
	if c.envPrefix != "" {
		err = ff.Parse(fs, args, ff.WithEnvVarPrefix(c.envPrefix))
	} else {
		err = fs.Parse(args)
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.printHelp(stdout, fs)
		return exitOK, true
	case err != nil:
		msg := strings.TrimPrefix(err.Error(), "error parsing commandline arguments: ") // ff's wrapping
		return c.usageError(stderr, strings.ReplaceAll(msg, "\n", " ")), true
	case fs.NArg() > 0:
		return c.usageError(stderr, fmt.Sprintf("unexpected argument %q", fs.Arg(0))), true
	}
	return exitOK, false
}

// usageError writes msg as one line with a pointer to --help; it returns
// exitBadUsage.
func (c *command) usageError(stderr io.Writer, msg string) int {
	fmt.Fprintf(stderr, "%s: %s (see %s --help)\n", c.name, msg, c.name)
	return exitBadUsage
}
