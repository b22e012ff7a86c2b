package ilp

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine (a connection, the
// sequencer, badger) outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
