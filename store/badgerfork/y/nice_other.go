//go:build !linux

package y

// RunLowered runs f; only on Linux does it lower the priority of the
// thread f runs on (ingestd's change).
func RunLowered(nice int, f func()) { f() }
