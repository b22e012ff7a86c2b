package ingestd

import (
	"errors"
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExportedIdentifiersDocumented enforces docs/design.md#engineering-rules (every exported
// identifier has a doc comment, as revive's exported rule asks) in every
// package of the module: it parses each package's non-test files with
// go/parser, reads them with go/doc (which keeps exported declarations
// only) and fails on each exported const, var, type, function or method,
// interface method and struct field group without a doc comment, and on
// a type, function or method whose comment does not start with its name.
//
// A const or var is documented by its own comment (above or at the end of
// its line) or its group's. A field group is a run of fields on
// consecutive lines: it is documented when its first field has a comment
// above it, else each field needs its own (above or at the end of its
// line). Embedded fields and interfaces are documented by their type.
func TestExportedIdentifiersDocumented(t *testing.T) {
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || isModule(path)) {
			return filepath.SkipDir
		}
		dirs = append(dirs, path)
		return nil
	})
	require.NoError(t, err)
	var checked []string
	for _, dir := range dirs {
		bp, err := build.ImportDir(dir, 0)
		var none *build.NoGoError
		if errors.As(err, &none) {
			continue // no non-test Go files
		}
		require.NoError(t, err, dir)
		fset := token.NewFileSet()
		var files []*ast.File
		for _, name := range bp.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
			require.NoError(t, err)
			files = append(files, f)
		}
		p, err := doc.NewFromFiles(fset, files, module+"/"+filepath.ToSlash(dir))
		require.NoError(t, err, dir)
		checked = append(checked, filepath.ToSlash(dir))
		if m := undocumented(fset, p); len(m) > 0 {
			t.Errorf("package %s: %d exported identifiers without a doc comment (docs/design.md#engineering-rules):\n%s", dir, len(m), strings.Join(m, "\n"))
		}
	}
	require.Subset(t, checked, []string{".", "feed", "ilp", "httpapi", "httpapi/sql", "httpapi/auth", "cmd/ingestd"}, "the walk missed a package")
}

// isModule tells whether dir holds a module of its own (store/badgerfork,
// a patched dependency): not this module's code.
func isModule(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil
}

// undocumented lists "file:line: what" for each exported declaration of p
// without a doc comment, in file order.
func undocumented(fset *token.FileSet, p *doc.Package) []string {
	var out []string
	miss := func(pos token.Pos, what string) {
		ps := fset.Position(pos)
		out = append(out, filepath.ToSlash(ps.Filename)+":"+strconv.Itoa(ps.Line)+": "+what)
	}
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			if v.Doc != "" {
				continue
			}
			for _, s := range v.Decl.Specs {
				vs := s.(*ast.ValueSpec)
				if vs.Doc == nil && vs.Comment == nil {
					for _, n := range vs.Names {
						if n.IsExported() {
							miss(n.Pos(), v.Decl.Tok.String()+" "+n.Name)
						}
					}
				}
			}
		}
	}
	funcs := func(fs []*doc.Func, owner string) {
		for _, f := range fs {
			if !namedDoc(f.Doc, f.Name) {
				miss(f.Decl.Pos(), "func "+owner+f.Name)
			}
		}
	}
	values(p.Consts)
	values(p.Vars)
	funcs(p.Funcs, "")
	for _, typ := range p.Types {
		if !namedDoc(typ.Doc, typ.Name) {
			miss(typ.Decl.Pos(), "type "+typ.Name)
		}
		values(typ.Consts)
		values(typ.Vars)
		funcs(typ.Funcs, "")
		funcs(typ.Methods, typ.Name+".")
		for _, s := range typ.Decl.Specs {
			ts, ok := s.(*ast.TypeSpec)
			if !ok || ts.Name.Name != typ.Name {
				continue
			}
			switch tt := ts.Type.(type) {
			case *ast.StructType:
				fields(fset, tt.Fields, typ.Name, "field", miss)
			case *ast.InterfaceType:
				fields(fset, tt.Methods, typ.Name, "method", miss)
			}
		}
	}
	sort.Strings(out)
	return out
}

// namedDoc reports whether d is a doc comment of the form revive's
// exported rule asks of a type, function or method: its first word is
// name (after an optional "A", "An" or "The").
func namedDoc(d, name string) bool {
	for _, pre := range []string{"", "A ", "An ", "The "} {
		if rest, ok := strings.CutPrefix(d, pre+name); ok && (rest == "" || strings.ContainsAny(rest[:1], " \n")) {
			return true
		}
	}
	return false
}

// fields reports the named exported fields (or interface methods) of list
// that no comment documents, by the field-group rule of
// TestExportedIdentifiersDocumented.
func fields(fset *token.FileSet, list *ast.FieldList, owner, kind string, miss func(token.Pos, string)) {
	if list == nil {
		return
	}
	groupDoc := false
	prevEnd := -1
	for _, f := range list.List {
		line := fset.Position(f.Pos()).Line
		if f.Doc != nil || line != prevEnd+1 {
			groupDoc = f.Doc != nil // a comment above, or a blank line, starts a group
		}
		prevEnd = fset.Position(f.End()).Line
		if groupDoc || f.Comment != nil {
			continue
		}
		for _, n := range f.Names {
			if n.IsExported() {
				miss(n.Pos(), kind+" "+owner+"."+n.Name)
			}
		}
	}
}
