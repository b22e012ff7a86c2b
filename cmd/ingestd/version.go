package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ingestd/ingestd/cmd/ingestd/cli"
	"github.com/ingestd/ingestd/httpapi"
)

// buildInfo describes this binary: what `ingestd version` prints and
// ingestd_build_info reports.
type buildInfo struct {
	Version   string // the product version (httpapi.Version, also in X-Influxdb-Version)
	Revision  string // VCS commit, "-dirty" appended when built from a modified tree; "unknown" without VCS data
	BuildDate string // the commit's time (vcs.time, RFC 3339); "unknown" without VCS data
	GoVersion string // the Go toolchain that built the binary
}

// readBuildInfo reads the VCS stamps `go build` embeds
// (runtime/debug.ReadBuildInfo); `go run` and test binaries carry none.
func readBuildInfo() buildInfo {
	b := buildInfo{Version: httpapi.Version, Revision: "unknown", BuildDate: "unknown", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.BuildDate = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && b.Revision != "unknown" {
		b.Revision += "-dirty"
	}
	return b
}

// newBuildInfoGauge is ingestd_build_info: always 1, the build in its
// labels (the Prometheus convention of go_build_info and
// prometheus_build_info).
func newBuildInfoGauge(b buildInfo) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ingestd_build_info",
		Help: "Always 1; the labels describe the running build: version, revision (VCS commit), build_date (commit time) and goversion.",
		ConstLabels: prometheus.Labels{
			"version": b.Version, "revision": b.Revision, "build_date": b.BuildDate, "goversion": b.GoVersion,
		},
	})
	g.Set(1)
	return g
}

// runVersion is `ingestd version` (and --version): the version, VCS commit,
// build date and Go version on stdout.
func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ingestd version", flag.ContinueOnError)
	cmd := &cli.Command{Name: "ingestd version", Usage: "Usage:\n  ingestd version   print the version, VCS commit, build date and Go version (also ingestd --version)\n"}
	if code, done := cmd.Parse(fs, args, stdout, stderr); done {
		return code
	}
	b := readBuildInfo()
	fmt.Fprintf(stdout, "ingestd %s\ncommit: %s\nbuilt:  %s\ngo:     %s\n", b.Version, b.Revision, b.BuildDate, b.GoVersion)
	return cli.ExitOK
}
