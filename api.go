// Package ingestd holds what belongs to the repository as a whole: the
// OpenAPI description of every HTTP route (api.yaml), embedded so that the
// binary serves it at GET /api.yaml.
package ingestd

import _ "embed"

//go:embed api.yaml
var apiSpec []byte

// APISpec returns api.yaml's bytes. Callers must not modify them.
func APISpec() []byte { return apiSpec }
