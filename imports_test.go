package ingestd

import (
	"go/build"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/ingestd/ingestd"

// importRules are, by package directory, the packages of the module each
// may import (TestImportDirection); every package has an entry
// (TestEveryPackageIsChecked).
var importRules = map[string][]string{
	"":      {},
	"store": {},
	// The row engine both disk-backed backends keep their rows in: a
	// table's blocks, late-point index and coalescing reads in badger.
	"store/rowengine": {"store"},
	// The badger backend implements the contract of store: rows in the
	// row engine, metadata, numbering and consumers beside them. No
	// backend imports another.
	"store/badgerstore": {"store", "store/rowengine"},
	// The in-memory backend the feed's unit tests run on.
	"store/memstore": {"store"},
	// The contract suite every backend runs from its tests.
	"store/storetest": {"store", "store/testdeadline"},
	// The JetStream backend: blocks in streams, metadata in a KV
	// bucket, rows materialised into a row engine of its own.
	"store/jsstore": {"store", "store/rowengine"},
	// Embedded NATS servers for tests: only the tests' deadline
	// scaling.
	"store/jsstore/natstest": {"store/testdeadline"},
	// The tests' deadlines stretched to a busy machine: no package of
	// the module.
	"store/testdeadline": {},
	"feed":               {"store"},
	"ilp":                {"feed"},
	"httpapi":            {"feed", "httpapi/sql", "httpapi/auth", "httpapi/wire"},
	// The SQL parser is pure: it borrows only the feed's column kinds
	// and its quoting of input in messages.
	"httpapi/sql": {"feed"},
	// Access control: no package of the module (ilp takes its grants
	// through its own Grant interface).
	"httpapi/auth": {},
	// The Go client of the HTTP API speaks HTTP and JSON only: a
	// program consuming a feed links none of the daemon, only the
	// error codes and shapes it shares with the server.
	"httpapi/client": {"httpapi/wire"},
	// What the server writes and the client reads: standard library only.
	"httpapi/wire": {},
	"cmd/ingestd": {"", "store", "store/rowengine", "store/badgerstore", "store/jsstore", "feed", "ilp", "httpapi", "httpapi/auth", "httpapi/client",
		"cmd/ingestd/cli", "cmd/ingestd/mirror", "cmd/ingestd/bench"},
	// What every command shares (flags, help, exit codes, logger).
	"cmd/ingestd/cli": {},
	// The subcommands: HTTP through the client only; bench's decode
	// mode runs the parser alone, and the mirror checks every line it
	// copies with the parser and the feed's write rules, as a write to
	// the source would have been.
	"cmd/ingestd/mirror": {"cmd/ingestd/cli", "httpapi/client", "feed", "ilp"},
	"cmd/ingestd/bench":  {"cmd/ingestd/cli", "httpapi/client", "feed", "ilp"},
	// The crash tests drive the built binary from outside: no package
	// of the module may be imported (their tests speak HTTP through
	// httpapi/client, which imports only httpapi/wire).
	"cmd/ingestd/crashtest": {},
	// A PostgreSQL cluster for the tests of the mirror's postgres://
	// target: only the tests' deadline scaling.
	"cmd/ingestd/pgtest": {"store/testdeadline"},
}

// TestImportDirection enforces docs/design.md#engineering-rules: imports run one way only, store ←
// feed ← ilp, httpapi ← cmd/ingestd, and badger stays inside
// store/rowengine and store/badgerstore (store itself is backend-neutral,
// so nothing above it links badger). It reads every
// package's non-test imports (tests may wire real parts together).
func TestImportDirection(t *testing.T) {
	for dir, ok := range importRules {
		name := dir
		if name == "" {
			name = "root"
		}
		t.Run(name, func(t *testing.T) {
			pkg, err := build.ImportDir(filepath.Join(".", dir), 0)
			require.NoError(t, err)
			var bad []string
			for _, imp := range pkg.Imports {
				if strings.HasPrefix(imp, "github.com/dgraph-io/badger") && dir != "store/badgerstore" && dir != "store/rowengine" {
					bad = append(bad, imp)
					continue
				}
				if strings.HasPrefix(imp, "github.com/nats-io/") && !strings.HasPrefix(dir, "store/jsstore") {
					bad = append(bad, imp)
					continue
				}
				if imp != module && !strings.HasPrefix(imp, module+"/") {
					continue
				}
				rel := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
				if !contains(ok, rel) {
					bad = append(bad, imp)
				}
			}
			sort.Strings(bad)
			require.Empty(t, bad, "package %q imports what docs/design.md#engineering-rules forbids (allowed: %q)", dir, ok)
		})
	}
}

// TestBadgerNotLinked checks what `go list -deps ./ilp ./httpapi | grep
// -e badger -e nats-io` would: no package of the module a listener, the
// feed or the store contract stands on reaches badger or NATS, through the
// module's own imports (every other package's badger and NATS import is
// refused above).
func TestBadgerNotLinked(t *testing.T) {
	for _, root := range []string{"store", "feed", "ilp", "httpapi"} {
		seen := map[string]bool{}
		var walk func(dir string)
		walk = func(dir string) {
			if seen[dir] {
				return
			}
			seen[dir] = true
			pkg, err := build.ImportDir(filepath.Join(".", dir), 0)
			require.NoError(t, err)
			for _, imp := range pkg.Imports {
				require.False(t, strings.HasPrefix(imp, "github.com/dgraph-io/badger"), "%s links badger through %s", root, dir)
				require.False(t, strings.HasPrefix(imp, "github.com/nats-io/"), "%s links NATS through %s", root, dir)
				if strings.HasPrefix(imp, module+"/") {
					walk(strings.TrimPrefix(imp, module+"/"))
				}
			}
		}
		walk(root)
		require.False(t, seen["store/rowengine"], "%s links store/rowengine", root)
		require.False(t, seen["store/badgerstore"], "%s links store/badgerstore", root)
		require.False(t, seen["store/jsstore"], "%s links store/jsstore", root)
	}
}

// TestEveryPackageIsChecked fails when a package is added without a rule
// above.
func TestEveryPackageIsChecked(t *testing.T) {
	var dirs []string
	for _, pattern := range []string{"*", "*/*", "*/*/*", "*/*/*/*"} {
		matches, err := filepath.Glob(filepath.Join(pattern, "*.go"))
		require.NoError(t, err)
		for _, m := range matches {
			if !strings.HasSuffix(m, "_test.go") && !inOtherModule(filepath.Dir(m)) {
				dirs = append(dirs, filepath.ToSlash(filepath.Dir(m)))
			}
		}
	}
	for _, d := range dirs {
		_, ok := importRules[d]
		require.True(t, ok, "package %s has no import-direction rule in importRules", d)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// inOtherModule tells whether dir lies in a module of its own below this
// one's root (isModule).
func inOtherModule(dir string) bool {
	for ; dir != "." && dir != string(filepath.Separator); dir = filepath.Dir(dir) {
		if isModule(dir) {
			return true
		}
	}
	return false
}
