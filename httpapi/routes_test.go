package httpapi

import (
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// TestRoutesMatchAPISpec walks the chi router and requires its routes to
// equal api.yaml's operations, in both directions (docs/design.md#engineering-rules).
func TestRoutesMatchAPISpec(t *testing.T) {
	h := http.NotFoundHandler()
	api := New(Options{WriteV1: h, WriteV2: h, Metrics: h}, nil)
	var routes []string
	err := chi.Walk(api.Router(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.TrimSuffix(strings.ReplaceAll(route, "/*", ""), "/")
		if route == "" {
			route = "/" // the status page
		}
		routes = append(routes, method+" "+route)
		return nil
	})
	require.NoError(t, err)

	raw, err := os.ReadFile("../api.yaml")
	require.NoError(t, err)
	var spec struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &spec))
	var documented []string
	for path, ops := range spec.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	sort.Strings(routes)
	sort.Strings(documented)
	require.Equal(t, documented, routes)
}
