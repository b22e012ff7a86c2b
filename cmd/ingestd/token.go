package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ingestd/ingestd/cmd/ingestd/cli"
	"github.com/ingestd/ingestd/httpapi/auth"
)

// tokenUsage heads `ingestd token --help`.
const tokenUsage = `Usage:
  ingestd token create --auth-file FILE --name NAME --scope SCOPE [--scope SCOPE ...]
      print a new random token once and add its hashed entry to FILE (created if absent)
  ingestd token list --auth-file FILE   list the tokens of FILE (names, scopes, state; never hashes)
  ingestd token revoke --auth-file FILE --name NAME
      mark token NAME revoked (kept in FILE so its use is logged as revoked)
Scopes: write, drain or admin, optionally :glob of tables (path.Match syntax, * = all):
  --scope 'write:*' --scope 'drain:sensor*' --scope admin:room
A running ingestd picks the change up within --auth-reload-interval, or at once on SIGHUP.
`

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

// runToken runs `ingestd token create|list|revoke`. Exit codes: 0 done, 1
// the file could not be read or written, 2 bad flags or arguments (a
// malformed scope, a name already taken or not in the file).
func runToken(args []string, stdout, stderr io.Writer) int {
	var (
		file, name string
		scopes     stringList
	)
	fset := flag.NewFlagSet("ingestd token", flag.ContinueOnError)
	fset.StringVar(&file, "auth-file", "", "the auth file (YAML, or TOML when it ends in .toml)")
	fset.StringVar(&name, "name", "", "the token's name (create, revoke)")
	fset.Var(&scopes, "scope", "a scope of the new token, repeatable (create)")
	c := &cli.Command{Name: "ingestd token", Usage: tokenUsage, EnvPrefix: "INGESTD", Required: map[string]bool{"auth-file": true},
		Placeholders: map[string]string{"scope": "SCOPE"}}
	switch {
	case len(args) == 0:
		return c.UsageError(stderr, "a command is required: create, list or revoke")
	case args[0] == "-h" || args[0] == "-help" || args[0] == "--help":
		c.PrintHelp(stdout, fset)
		return cli.ExitOK
	case strings.HasPrefix(args[0], "-"):
		return c.UsageError(stderr, "the command (create, list or revoke) comes before the flags")
	}
	cmd := args[0]
	if code, done := c.Parse(fset, args[1:], stdout, stderr); done {
		return code
	}
	if file == "" {
		return c.UsageError(stderr, "--auth-file is required")
	}
	var err error
	switch cmd {
	case "create":
		if name == "" || len(scopes) == 0 {
			return c.UsageError(stderr, "create: --name and at least one --scope are required")
		}
		for _, s := range scopes {
			if _, _, err := auth.ParseScope(s); err != nil {
				return c.UsageError(stderr, "--scope: "+err.Error())
			}
		}
		err = tokenCreate(file, name, scopes, stdout, stderr)
	case "list":
		err = tokenList(file, stdout)
	case "revoke":
		if name == "" {
			return c.UsageError(stderr, "revoke: --name is required")
		}
		err = tokenRevoke(file, name, stderr)
	default:
		return c.UsageError(stderr, fmt.Sprintf("unknown command %q (create, list, revoke)", cmd))
	}
	var bad badNameError
	switch {
	case errors.As(err, &bad):
		return c.UsageError(stderr, bad.Error())
	case err != nil:
		fmt.Fprintln(stderr, "ingestd token:", err)
		return cli.ExitFailure
	}
	return cli.ExitOK
}

// badNameError is a --name the auth file refuses (already taken, or no
// such token): a usage error (exit 2), unlike a file that cannot be read
// or written (exit 1).
type badNameError struct{ msg string }

func (e badNameError) Error() string { return e.msg }

// readOrEmpty reads the auth file, or returns an empty one when absent.
func readOrEmpty(file string) (auth.File, error) {
	f, err := auth.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return auth.File{}, nil
	}
	return f, err
}

func tokenCreate(file, name string, scopes []string, stdout, stderr io.Writer) error {
	f, err := readOrEmpty(file)
	if err != nil {
		return err
	}
	for _, e := range f.Tokens {
		if e.Name == name {
			return badNameError{fmt.Sprintf("--name: a token named %q is already in %s (revoked or not): choose another name", name, file)}
		}
	}
	tok, hash, err := auth.NewToken()
	if err != nil {
		return err
	}
	f.Tokens = append(f.Tokens, auth.Entry{Name: name, Hash: hash, Scopes: scopes, Created: time.Now().UTC().Format(time.RFC3339)})
	if err := auth.WriteFile(file, f); err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	fmt.Fprintf(stderr, "token %q (%s) added to %s; it is shown only this once\n", name, strings.Join(scopes, " "), file)
	return nil
}

func tokenList(file string, stdout io.Writer) error {
	f, err := auth.ReadFile(file)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tSCOPES\tCREATED\tREVOKED")
	for _, e := range f.Tokens {
		state := "active"
		if e.Revoked != "" {
			state = "revoked"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Name, state, strings.Join(e.Scopes, " "), dash(e.Created), dash(e.Revoked))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func tokenRevoke(file, name string, stderr io.Writer) error {
	f, err := auth.ReadFile(file)
	if err != nil {
		return err
	}
	for i := range f.Tokens {
		e := &f.Tokens[i]
		if e.Name != name {
			continue
		}
		if e.Revoked != "" {
			return badNameError{fmt.Sprintf("--name: token %q was already revoked at %s", name, e.Revoked)}
		}
		e.Revoked = time.Now().UTC().Format(time.RFC3339)
		if err := auth.WriteFile(file, f); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "token %q revoked in %s\n", name, file)
		return nil
	}
	return badNameError{fmt.Sprintf("--name: no token named %q in %s", name, file)}
}
