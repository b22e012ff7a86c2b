package natstest

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestCutAndHeal: with RouteProxies, Cut leaves the server running with
// no route to its peers (which keep theirs to each other) and Heal lets
// the routes connect again.
func TestCutAndHeal(t *testing.T) {
	c := Start(t, 3, RouteProxies())
	c.WaitJetStream()
	// routes counts the peers server i has a route to (a route is a pool
	// of connections).
	routes := func(i int) int {
		c.mu.Lock()
		s := c.servers[i]
		c.mu.Unlock()
		rz, err := s.Routez(nil)
		if err != nil {
			t.Fatal(err)
		}
		peers := map[string]bool{}
		for _, r := range rz.Routes {
			peers[r.RemoteID] = true
		}
		return len(peers)
	}
	waitRoutes := func(want [3]int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := [3]int{routes(0), routes(1), routes(2)}
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("routes per server %v, want %v", got, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitRoutes([3]int{2, 2, 2})
	c.Cut(0)
	waitRoutes([3]int{0, 1, 1})
	c.Heal(0)
	waitRoutes([3]int{2, 2, 2})
}
