// Package testdeadline stretches the tests' fixed deadlines to the machine
// they run on. A deadline a test polls against ("the cluster elects a
// leader within a minute") is a bound on how slow the machine may be, not
// on the code: on a machine whose cores other processes keep busy, an
// election, a server's start or a commit under the race detector takes
// several times longer, and such a test fails without any bug. The tests'
// poll helpers pass their deadlines through Scale.
//
// A deadline only bounds how long a failing test waits: stretching it
// costs nothing while the code works, and `go test -timeout` still bounds
// the whole run.
package testdeadline

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Env names the environment variable that sets the factor: a number of
// at least 1 (CI sets it for its machines). When unset, the factor is
// measured (Factor).
const Env = "INGESTD_TEST_TIMEOUT_SCALE"

// maxLoadFactor bounds the measured factor: past it the machine is not
// busy but stuck, and a test should say so within the -timeout.
const maxLoadFactor = 8

// Scale returns d times Factor(). Safe for concurrent use.
func Scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * Factor())
}

// Factor is how much slower than an idle machine this one is now: the
// value of Env when it is set and valid (a number ≥ 1), else the load per
// core, the 1-minute load average (/proc/loadavg) over the CPUs Go may
// use, within [1, 8]; 1 where no load average can be read. It is measured
// at each call, as the load of a long test run changes. Safe for
// concurrent use.
func Factor() float64 {
	if v, ok := os.LookupEnv(Env); ok {
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f >= 1 {
			return f
		}
	}
	return loadFactor(readLoad(), runtime.GOMAXPROCS(0))
}

// readLoad returns the 1-minute load average, or 0 when it cannot be read.
func readLoad() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 0
	}
	load, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return 0
	}
	return load
}

// loadFactor is load per CPU within [1, maxLoadFactor].
func loadFactor(load float64, cpus int) float64 {
	return min(max(load/float64(max(cpus, 1)), 1), maxLoadFactor)
}
