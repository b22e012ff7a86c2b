// Package docs holds no code: its tests keep the documentation honest.
// TestLinks fails on a link, a repository path or a Markdown anchor in the
// README, docs/*.md, deploy/README.md or any Go comment that does not
// resolve; TestReferenceMetrics, TestReferenceRoutes and
// TestReferenceErrorCodes fail when reference.md and the code disagree.
// (The flags are checked in cmd/ingestd, TestReferenceFlags, where they
// are defined.)
package docs

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// root is the repository's root, relative to this package's directory
// (where go test runs it).
const root = ".."

// markdownFiles are the documents whose links and references are checked,
// relative to root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	rel := []string{"README.md", "deploy/README.md"}
	for _, f := range files {
		r, err := filepath.Rel(root, f)
		require.NoError(t, err)
		rel = append(rel, filepath.ToSlash(r))
	}
	return rel
}

var (
	fenceRE    = regexp.MustCompile("^\\s*(```|~~~)")
	headingRE  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	explicitRE = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	tagRE      = regexp.MustCompile(`<[^>]*>`)
	mdLinkRE   = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeSpanRE = regexp.MustCompile("`([^`\n]+)`")
	// A path into the repository: a top-level directory, then at least one
	// more segment ("docs/contract.md", "store/badgerstore/doc.go",
	// "deploy/telegraf/"). Globs are allowed.
	repoPathRE = regexp.MustCompile(`(?:^|[\s(\[` + "`" + `"',])((?:\.ci|cmd|deploy|docs|feed|httpapi|ilp|store)/[\w./*-]*[\w*/])`)
	// A Markdown file, optionally with an anchor ("README.md",
	// "docs/contract.md#epochs", "../deploy/README.md").
	mdRefRE = regexp.MustCompile(`(?:^|[\s(\[` + "`" + `"',])((?:\.\./|\./)?(?:[\w.-]+/)*[\w.-]+\.md)(#[\w-]+)?`)
)

// anchors returns every anchor of a Markdown document: its headings' slugs
// as GitHub computes them (duplicates get -1, -2, …) and explicit
// <a id=…> or <a name=…> anchors; headings and anchors inside fenced code
// blocks do not count.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if fenceRE.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range explicitRE.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			s := slug(m[2])
			if n := seen[s]; n > 0 {
				out[s+"-"+itoa(n)] = true
			} else {
				out[s] = true
			}
			seen[s]++
		}
	}
	return out
}

func itoa(n int) string {
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// slug is GitHub's anchor of a heading: HTML tags and Markdown link
// targets and emphasis dropped, lower case, letters, digits, spaces, "-"
// and "_" kept, every space a "-".
func slug(heading string) string {
	h := tagRE.ReplaceAllString(heading, "")
	h = mdLinkRE.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Retention and the feed's history":          "retention-and-the-feeds-history",
		"`ingestd mirror`":                          "ingestd-mirror",
		"1. Run a 3-server NATS cluster":            "1-run-a-3-server-nats-cluster",
		`<a id="x-seq"></a>x_seq is never reused`:   "x_seq-is-never-reused",
		"Conformance with the peers' parser tests":  "conformance-with-the-peers-parser-tests",
		"NATS JetStream (with `--store=jetstream`)": "nats-jetstream-with---storejetstream",
		"[Link](x.md) text":                         "link-text",
	} {
		require.Equal(t, want, slug(heading), heading)
	}
	got := anchors("# A\n## A\n```sh\n# A\n```\n### <a id=\"b\"></a>C\n")
	require.Equal(t, map[string]bool{"a": true, "a-1": true, "b": true, "c": true}, got)
}

// checker resolves references and remembers what failed.
type checker struct {
	t       *testing.T
	anchors map[string]map[string]bool // by path relative to root
	bad     []string
}

func (c *checker) anchorsOf(rel string) map[string]bool {
	if a, ok := c.anchors[rel]; ok {
		return a
	}
	raw, err := os.ReadFile(filepath.Join(root, rel))
	require.NoError(c.t, err)
	a := anchors(string(raw))
	c.anchors[rel] = a
	return a
}

// exists reports whether the repository path rel (relative to root, or a
// glob) names at least one file or directory.
func exists(rel string) bool {
	p := filepath.Join(root, filepath.FromSlash(strings.TrimSuffix(rel, "/")))
	if strings.ContainsAny(rel, "*?[") {
		m, _ := filepath.Glob(p)
		return len(m) > 0
	}
	_, err := os.Stat(p)
	return err == nil
}

// resolve returns the path, relative to root, that ref names when written
// in a file of directory dir (relative to root): relative to dir, else
// relative to the repository's root; ok is false when neither exists.
func resolve(dir, ref string) (string, bool) {
	if strings.HasPrefix(ref, "../") || strings.HasPrefix(ref, "./") {
		p := filepath.ToSlash(filepath.Clean(filepath.Join(dir, ref)))
		return p, !strings.HasPrefix(p, "../") && exists(p)
	}
	if p := filepath.ToSlash(filepath.Join(dir, ref)); dir != "." && exists(p) {
		return p, true
	}
	return ref, exists(ref)
}

// elsewhere are pages other branches add, linked before they land: a
// reference to one is not checked while it is absent.
var elsewhere = map[string]bool{"docs/security.md": true}

// ref checks one reference to a file, with an optional "#anchor", written
// at where in a file of directory dir.
func (c *checker) ref(where, dir, target, anchor string) {
	p, ok := resolve(dir, target)
	if !ok && elsewhere[p] {
		return
	}
	if !ok {
		c.bad = append(c.bad, where+": no such file: "+target)
		return
	}
	if anchor == "" {
		return
	}
	if !strings.HasSuffix(p, ".md") {
		c.bad = append(c.bad, where+": an anchor into a file that is not Markdown: "+target+"#"+anchor)
		return
	}
	if !c.anchorsOf(p)[anchor] {
		c.bad = append(c.bad, where+": no anchor #"+anchor+" in "+p)
	}
}

// text checks the file paths and Markdown anchors of a piece of
// prose (a Go comment, a code span).
func (c *checker) text(where, dir, s string) {
	done := map[string]bool{}
	for _, m := range mdRefRE.FindAllStringSubmatch(s, -1) {
		c.ref(where, dir, m[1], strings.TrimPrefix(m[2], "#"))
		done[m[1]] = true
	}
	for _, m := range repoPathRE.FindAllStringSubmatch(s, -1) {
		if done[m[1]] {
			continue
		}
		if _, ok := resolve(dir, m[1]); !ok {
			c.bad = append(c.bad, where+": no such path: "+m[1])
		}
	}
}

// TestLinks checks every link of the Markdown documents (relative files,
// and anchors in them or in the same document), every repository path and
// Markdown anchor they quote in code spans, and the same references in
// every Go comment of the module.
func TestLinks(t *testing.T) {
	c := &checker{t: t, anchors: map[string]map[string]bool{}}
	for _, rel := range markdownFiles(t) {
		raw, err := os.ReadFile(filepath.Join(root, rel))
		require.NoError(t, err)
		dir := filepath.ToSlash(filepath.Dir(rel))
		inFence := false
		sc := bufio.NewScanner(strings.NewReader(string(raw)))
		sc.Buffer(nil, 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			where := rel + ":" + itoa(n)
			if fenceRE.MatchString(line) {
				inFence = !inFence
				continue
			}
			if inFence {
				continue
			}
			for _, m := range mdLinkRE.FindAllStringSubmatch(line, -1) {
				target := m[2]
				switch {
				case strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:"):
				case strings.HasPrefix(target, "#"):
					if !c.anchorsOf(rel)[target[1:]] {
						c.bad = append(c.bad, where+": no anchor "+target+" in "+rel)
					}
				default:
					file, anchor, _ := strings.Cut(target, "#")
					if !strings.HasPrefix(file, "../") && !strings.HasPrefix(file, "./") {
						file = "./" + file // links are relative to their document
					}
					c.ref(where, dir, file, anchor)
				}
			}
			for _, m := range codeSpanRE.FindAllStringSubmatch(line, -1) {
				c.text(where, dir, m[1])
			}
		}
		require.NoError(t, sc.Err())
	}

	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != root {
				return filepath.SkipDir // another module (store/badgerfork): not our comments
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		for _, g := range f.Comments {
			for _, cm := range g.List {
				where := filepath.ToSlash(rel) + ":" + itoa(fset.Position(cm.Pos()).Line)
				c.text(where, dir, commentText(cm))
			}
		}
		return nil
	})
	require.NoError(t, err)
	sort.Strings(c.bad)
	require.Empty(t, c.bad, "references that do not resolve")
}

// commentText is a comment without its markers.
func commentText(c *ast.Comment) string {
	s := strings.TrimPrefix(c.Text, "//")
	s = strings.TrimPrefix(s, "/*")
	return strings.TrimSuffix(s, "*/")
}

// section returns the part of Markdown text under the heading line
// heading, up to the next heading of the same or a higher level.
func section(t *testing.T, text, heading string) string {
	t.Helper()
	level := strings.Index(heading, " ")
	i := strings.Index(text, "\n"+heading+"\n")
	require.GreaterOrEqual(t, i, 0, "no heading %q", heading)
	rest := text[i+len(heading)+2:]
	inFence := false
	lines := strings.SplitAfter(rest, "\n")
	for n, line := range lines {
		if fenceRE.MatchString(line) {
			inFence = !inFence
		}
		if m := headingRE.FindStringSubmatch(strings.TrimRight(line, "\n")); !inFence && m != nil && len(m[1]) <= level {
			return strings.Join(lines[:n], "")
		}
	}
	return rest
}

// securityPage is the text of docs/security.md, or "" while it is absent.
// By the project's rule the limits against hostile clients document their
// flags, metrics and codes there (one section per limit), and the
// reference links to it: a flag, metric or error code documented there
// counts as documented. The other direction (everything the reference
// names exists) is checked against the reference alone.
func securityPage(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "docs", "security.md"))
	if os.IsNotExist(err) {
		return ""
	}
	require.NoError(t, err)
	return string(raw)
}

func readReference(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "docs", "reference.md"))
	require.NoError(t, err)
	return string(raw)
}

// TestReferenceMetrics: every metric name the code registers (a string
// literal "ingestd_…" in a non-test Go file) is in reference.md's Metrics
// section (or docs/security.md documents it), and every name there is
// registered.
func TestReferenceMetrics(t *testing.T) {
	nameRE := regexp.MustCompile(`"(ingestd_[a-z0-9_]*[a-z0-9])"`)
	code := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "deploy") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range nameRE.FindAllStringSubmatch(string(raw), -1) {
			code[m[1]] = true
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, len(code), 50, "the scan found the registered metrics")

	metrics := section(t, readReference(t), "## Metrics")
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile(`\bingestd_[a-z0-9_]*[a-z0-9]\b`).FindAllString(metrics, -1) {
		documented[m] = true
	}
	var missing, unknown []string
	security := securityPage(t)
	for name := range code {
		if !strings.Contains(metrics, "`"+name+"`") && !regexp.MustCompile(`\b`+name+`\b`).MatchString(security) {
			missing = append(missing, name)
		}
	}
	for name := range documented {
		if !code[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(missing)
	sort.Strings(unknown)
	require.Empty(t, missing, "metrics registered in the code but not in docs/reference.md#metrics")
	require.Empty(t, unknown, "metrics in docs/reference.md#metrics that the code does not register")
}

// TestReferenceRoutes: the routes table of reference.md names exactly the
// operations of api.yaml (which TestRoutesMatchAPISpec keeps equal to the
// router).
func TestReferenceRoutes(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "api.yaml"))
	require.NoError(t, err)
	var spec struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &spec))
	var want []string
	for path, ops := range spec.Paths {
		for method := range ops {
			if method != "parameters" {
				want = append(want, strings.ToUpper(method)+" "+path)
			}
		}
	}
	routes := section(t, readReference(t), "## Routes")
	var got []string
	for _, m := range regexp.MustCompile("`((?:GET|HEAD|POST|PUT|DELETE|PATCH) /[^`?]*)`").FindAllStringSubmatch(routes, -1) {
		got = append(got, m[1])
	}
	sort.Strings(want)
	sort.Strings(got)
	require.Equal(t, want, got, "docs/reference.md#routes lists api.yaml's operations, each once")
}

// TestReferenceErrorCodes: the error-code table of reference.md has one row
// per code of httpapi/wire (or docs/security.md documents it), and no
// other.
func TestReferenceErrorCodes(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "httpapi", "wire", "wire.go"))
	require.NoError(t, err)
	var want []string
	for _, m := range regexp.MustCompile(`(?m)^\s+Code\w+\s*=\s*"(\w+)"`).FindAllStringSubmatch(string(raw), -1) {
		want = append(want, m[1])
	}
	require.Greater(t, len(want), 20, "the scan found the codes")
	codes := section(t, readReference(t), "## Error codes")
	var got []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(\\w+)` \\|").FindAllStringSubmatch(codes, -1) {
		got = append(got, m[1])
	}
	security := securityPage(t)
	listed := map[string]bool{}
	for _, c := range got {
		listed[c] = true
	}
	var missing []string
	for _, c := range want {
		if !listed[c] && !strings.Contains(security, "`"+c+"`") {
			missing = append(missing, c)
		}
		delete(listed, c)
	}
	var unknown []string
	for c := range listed {
		unknown = append(unknown, c)
	}
	sort.Strings(missing)
	sort.Strings(unknown)
	require.Empty(t, missing, "httpapi/wire's codes missing from docs/reference.md#error-codes")
	require.Empty(t, unknown, "codes in docs/reference.md#error-codes that httpapi/wire does not define")
	require.Equal(t, len(got), len(uniq(got)), "each code once in docs/reference.md#error-codes")
}

// TestReadmeSize: the README stays a front door.
func TestReadmeSize(t *testing.T) {
	fi, err := os.Stat(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	require.LessOrEqual(t, fi.Size(), int64(20<<10), "README.md is at most 20 KB: move material to docs/")
}

// TestContractTestsExist: every test a promise of contract.md names in its
// "Proved by" paragraph exists in the package named after it ("`TestA`
// and `TestB` (`feed`)"); `TestContract/Name` names a subtest of the
// storage contract suite, store/storetest.
func TestContractTestsExist(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "docs", "contract.md"))
	require.NoError(t, err)
	suite, err := os.ReadFile(filepath.Join(root, "store", "storetest", "storetest.go"))
	require.NoError(t, err)
	testRE := regexp.MustCompile(`^(?:Test|Fuzz)\w+(?:/\w+)?$`)
	funcs := map[string]string{} // package directory → its test files
	testsIn := func(pkg string) string {
		if s, ok := funcs[pkg]; ok {
			return s
		}
		files, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(pkg), "*_test.go"))
		require.NoError(t, err)
		var b strings.Builder
		for _, f := range files {
			raw, err := os.ReadFile(f)
			require.NoError(t, err)
			b.Write(raw)
		}
		funcs[pkg] = b.String()
		return funcs[pkg]
	}
	var bad []string
	proofs := 0
	for _, para := range strings.Split(string(raw), "\n\n") {
		if !strings.HasPrefix(para, "Proved by ") {
			continue
		}
		proofs++
		var pending []string
		for _, loc := range codeSpanRE.FindAllStringSubmatchIndex(para, -1) {
			span := para[loc[2]:loc[3]]
			if testRE.MatchString(span) {
				pending = append(pending, span)
				continue
			}
			if !exists(span) {
				bad = append(bad, "not a package directory: "+span)
				continue
			}
			require.NotEmpty(t, pending, "package %s follows no test in: %s", span, para)
			src := testsIn(span)
			for _, name := range pending {
				fn, sub, _ := strings.Cut(name, "/")
				if !strings.Contains(src, "func "+fn+"(") {
					bad = append(bad, name+": no func "+fn+" in "+span)
				}
				if sub != "" && !strings.Contains(string(suite), `{"`+sub+`",`) {
					bad = append(bad, name+": no subtest "+sub+" in store/storetest")
				}
			}
			// A package list ("(`a`, `b`)") applies to the same tests.
			if rest := para[loc[1]:]; !strings.HasPrefix(strings.TrimLeft(strings.TrimPrefix(rest, ","), " \n"), "`") || !strings.HasPrefix(rest, ",") {
				pending = nil
			}
		}
		require.Empty(t, pending, "tests without a package in: %s", para)
	}
	require.Greater(t, proofs, 20, "contract.md's promises each name their proof")
	sort.Strings(bad)
	require.Empty(t, bad, "tests contract.md names that do not exist")
}

// uniq returns ss without repeats.
func uniq(ss []string) map[string]bool {
	m := map[string]bool{}
	for _, s := range ss {
		m[s] = true
	}
	return m
}

// TestNoOutsideCitations: the code, the documentation, api.yaml, the CI
// scripts and the deployment files cite the project's own docs
// (docs/<page>.md#anchor), never notes outside the repository: a contract
// section, a style rule, an issue number or a design seed.
func TestNoOutsideCitations(t *testing.T) {
	// Built from parts so that this file does not match itself.
	cite := regexp.MustCompile(`SP` + `EC §|\bSP` + `EC\b|ST` + `YLE R\d|\bse` + `ed 00\d|\bis` + `sue \d|\bis` + `sue point`)
	var bad []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && name != ".ci" && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(name) {
		case ".go", ".md", ".yaml", ".yml", ".sh", ".json", ".conf", ".service", ".toml":
		default:
			if name != "Dockerfile" && filepath.Base(filepath.Dir(path)) != ".ci" {
				return nil
			}
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for n, line := range strings.Split(string(raw), "\n") {
			if cite.MatchString(line) {
				rel, _ := filepath.Rel(root, path)
				bad = append(bad, filepath.ToSlash(rel)+":"+itoa(n+1)+": "+strings.TrimSpace(line))
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, bad, "cite docs/<page>.md#anchor instead, or drop the citation")
}

// TestReadmeTestCommand: the README's test command is the one CI runs
// (the line after "# The README's test command:" in .ci/run).
func TestReadmeTestCommand(t *testing.T) {
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(ci), "# The README's test command:\n")
	require.True(t, ok, ".ci/run marks the README's test command")
	cmd, _, _ := strings.Cut(after, "\n")
	require.True(t, strings.HasPrefix(cmd, "go test "), "%q", cmd)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	require.Contains(t, string(readme), "\n"+cmd+"\n", "README.md shows .ci/run's test command as is, on a line of its own")
}
