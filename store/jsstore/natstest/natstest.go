// Package natstest runs embedded NATS JetStream servers for tests: one
// server, or a cluster of several routed to each other on loopback, each
// with its own store directory under t.TempDir(), in the manner of
// nats-server's own test helpers (RunServer, a cluster of explicit
// routes). A server can be stopped (cleanly, Stop, or as in a crash,
// Kill), cut off its peers while it runs (Cut and Heal, with
// RouteProxies) and restarted on the same ports and store; a client's
// connection can be lost at a chosen moment (ClientProxy). The fault
// tests of store/jsstore and cmd/ingestd/crashtest use them.
package natstest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ingestd/ingestd/store/testdeadline"
)

// startTimeout bounds how long a server may take to accept connections
// (generous: CI runs the -race tests of every package at once on 2 cores).
const startTimeout = 30 * time.Second

// Cluster is n embedded JetStream servers (n = 1: a single server without
// a cluster block). Its methods are safe for concurrent use.
type Cluster struct {
	t       testing.TB
	mu      sync.Mutex
	opts    []*server.Options
	servers []*server.Server // nil while stopped
	proxies []*routeProxy    // with RouteProxies: one per server
	cutMu   sync.Mutex
	cut     []bool // servers cut off their peers (Cut)
}

// Option changes how Start runs the cluster.
type Option func(*settings)

type settings struct{ proxies bool }

// RouteProxies puts a TCP proxy in front of every server's cluster port
// (every route URL and advertised cluster address is a proxy's), so that
// Cut can drop a server's route traffic without stopping it. Without
// effect on a single server.
func RouteProxies() Option { return func(s *settings) { s.proxies = true } }

// Start starts n servers (n >= 1) on loopback ports chosen now and kept
// across Restart, with JetStream file storage fsynced after every write
// (sync_interval: always, what docs/operations.md#running-on-nats-jetstream recommends), and stops them at the
// end of the test. It returns once every server accepts connections; with
// n > 1 the JetStream meta leader may still be being elected (clients
// retry, or call WaitJetStream). Options: RouteProxies.
func Start(t testing.TB, n int, options ...Option) *Cluster {
	t.Helper()
	var set settings
	for _, o := range options {
		o(&set)
	}
	c := &Cluster{t: t, cut: make([]bool, n)}
	// Cleanups run last first: the servers stop before their store
	// directories are removed.
	base := t.TempDir()
	t.Cleanup(c.stopAll)
	// Another test process (go test runs packages at once) picks its
	// ports the same way: a port both found free before either bound it
	// left one server never ready. The lock holds off the other processes
	// from the pick until every server of this cluster is bound.
	unlock := lockPorts(t)
	defer unlock()
	ports := freePorts(t, 2*n)
	clientPorts, clusterPorts := ports[:n], ports[n:]
	var routes, advertise []string
	for i, p := range clusterPorts {
		addr := fmt.Sprintf("127.0.0.1:%d", p)
		if set.proxies && n > 1 {
			addr = c.startProxy(i, addr)
		}
		routes, advertise = append(routes, "nats://"+addr), append(advertise, addr)
	}
	for i := range n {
		o := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       clientPorts[i],
			NoLog:      true,
			NoSigs:     true,
			JetStream:  true,
			StoreDir:   filepath.Join(base, fmt.Sprintf("n%d", i+1)),
			SyncAlways: true,
			// Bounded so that a test machine's disk size does not matter.
			JetStreamMaxMemory: 64 << 20,
			JetStreamMaxStore:  1 << 30,
		}
		if n > 1 {
			o.Cluster.Name = "ingestd-test"
			o.Cluster.Host = "127.0.0.1"
			o.Cluster.Port = clusterPorts[i]
			o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
			if set.proxies {
				o.Cluster.Advertise = advertise[i]
			}
		}
		c.opts = append(c.opts, o)
		c.servers = append(c.servers, nil)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = c.start(i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// WaitJetStream waits (up to a minute) until the cluster's JetStream
// answers an account request (its meta leader is elected) and the meta
// leader sees every other running server current: a stream with a
// replica on each can be placed (before, a server still joining made
// the placement fail with "peer offline").
func (c *Cluster) WaitJetStream() {
	c.t.Helper()
	nc, js := c.client()
	defer nc.Close()
	deadline := time.Now().Add(testdeadline.Scale(time.Minute))
	for {
		ctx, cancel := context.WithTimeout(context.Background(), testdeadline.Scale(2*time.Second))
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil && !c.metaPeersOnline() {
			err = errors.New("the meta leader does not see every running server current")
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("natstest: JetStream not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metaPeersOnline reports whether the meta leader sees every other
// running server current and online (true for a single server).
func (c *Cluster) metaPeersOnline() bool {
	c.mu.Lock()
	servers := slices.Clone(c.servers)
	c.mu.Unlock()
	running := 0
	for _, s := range servers {
		if s != nil {
			running++
		}
	}
	if len(servers) == 1 {
		return true
	}
	for _, s := range servers {
		if s == nil || !s.JetStreamIsLeader() {
			continue
		}
		jsz, err := s.Jsz(nil)
		if err != nil || jsz.Meta == nil {
			return false
		}
		online := 0
		for _, p := range jsz.Meta.Replicas {
			if p.Current && !p.Offline {
				online++
			}
		}
		return online >= running-1
	}
	return false
}

// client connects to the cluster; the caller closes the connection.
func (c *Cluster) client() (*nats.Conn, jetstream.JetStream) {
	c.t.Helper()
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		c.t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		c.t.Fatal(err)
	}
	return nc, js
}

// freePorts returns n distinct loopback TCP ports from portsFrom..portsTo-1
// free at the time of the call.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			t.Fatalf("natstest: no free port in %d..%d after %d tries", portsFrom, portsTo-1, tries)
		}
		p := portsFrom + rand.IntN(portsTo-portsFrom)
		if slices.Contains(ports, p) {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // taken
		}
		ls = append(ls, l)
		ports = append(ports, p)
	}
	return ports
}

// lockPorts takes the lock every test process of the module picks and
// binds its servers' ports under (a file lock in the temporary
// directory) and returns its release.
func lockPorts(t testing.TB) func() {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "ingestd-natstest-ports.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("natstest: port lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		t.Fatalf("natstest: port lock: %v", err)
	}
	return func() { _ = f.Close() } // closing releases the lock
}

// The servers' ports are drawn from portsFrom..portsTo-1, below Linux's
// ephemeral range (32768-60999 by default). An outgoing connection of any
// process takes its local port from that range, so a port picked there
// with :0 could be taken between the check and the server's bind, or while
// a stopped server waits for Restart on it: under CI's parallel tests a
// server then never became ready ("not ready after 10s").
const (
	portsFrom = 20000
	portsTo   = 32000
)

// start starts server i from its options.
func (c *Cluster) start(i int) error {
	o := *c.opts[i] // NewServer keeps and modifies its options
	s, err := server.NewServer(&o)
	if err != nil {
		return fmt.Errorf("natstest: server %d: %w", i, err)
	}
	s.Start()
	if timeout := testdeadline.Scale(startTimeout); !s.ReadyForConnections(timeout) {
		s.Shutdown()
		return fmt.Errorf("natstest: server %d not ready after %s", i, timeout)
	}
	c.mu.Lock()
	c.servers[i] = s
	c.mu.Unlock()
	return nil
}

// URLs returns every server's client URL, comma-separated (the form of
// --nats-url), stopped servers included.
func (c *Cluster) URLs() string {
	var urls []string
	for _, o := range c.opts {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
	}
	return strings.Join(urls, ",")
}

// Size is the number of servers, running or stopped.
func (c *Cluster) Size() int { return len(c.opts) }

// Stop shuts server i down and waits until it is gone; its store stays.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	s := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Kill stops server i as a crash would: with RouteProxies its routes are
// cut before it shuts down, so its peers get neither a leadership handover
// nor a goodbye and must notice it gone (Stop alone is a clean shutdown,
// in which a leader hands its leadership over). Its store stays; without
// RouteProxies Kill is Stop.
func (c *Cluster) Kill(i int) {
	if len(c.proxies) == 0 {
		c.Stop(i)
		return
	}
	c.Cut(i)
	c.Stop(i)
	c.Heal(i)
}

// Restart starts the stopped server i again on its ports and store.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	if err := c.start(i); err != nil {
		c.t.Fatal(err)
	}
}

// StreamLeader returns the index of the running server leading stream
// in the global account, or -1 when none does (an election under way).
func (c *Cluster) StreamLeader(stream string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.servers {
		if s == nil {
			continue
		}
		if len(c.opts) == 1 || s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// StreamCurrent reports whether stream has a leader and every running
// server holding a replica of it is current with that leader (has
// applied everything the leader committed): a restarted server has
// caught up. Servers holding no replica of the stream do not count.
func (c *Cluster) StreamCurrent(stream string) bool {
	const acc = server.DEFAULT_GLOBAL_ACCOUNT
	return c.groupCurrent(
		func(s *server.Server) bool { return s.JetStreamIsStreamAssigned(acc, stream) },
		func(s *server.Server) bool { return s.JetStreamIsStreamCurrent(acc, stream) },
		func(s *server.Server) bool { return s.JetStreamIsStreamLeader(acc, stream) })
}

// MetaCurrent reports whether JetStream's meta group (which creates
// streams and consumers: a client's consumer lost with a server is created
// again through it) has a leader and every running server's copy of it is
// current.
func (c *Cluster) MetaCurrent() bool {
	return c.groupCurrent(func(*server.Server) bool { return true },
		(*server.Server).JetStreamIsCurrent, (*server.Server).JetStreamIsLeader)
}

// groupCurrent reports whether a raft group has a leader and every running
// server that is a member is current; one server alone counts as current
// while it runs.
func (c *Cluster) groupCurrent(member, current, leads func(*server.Server) bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.opts) == 1 {
		return c.servers[0] != nil
	}
	leader := false
	for _, s := range c.servers {
		if s == nil || !member(s) {
			continue
		}
		if !current(s) {
			return false
		}
		leader = leader || leads(s)
	}
	return leader
}

// StreamNames returns the names of the global account's streams, as a
// client listing them sees them (KV buckets are the streams KV_BUCKET),
// sorted; it fails the test when the cluster does not answer within ten
// seconds (stretched on a busy machine: testdeadline.Scale).
func (c *Cluster) StreamNames() []string {
	c.t.Helper()
	nc, js := c.client()
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testdeadline.Scale(10*time.Second))
	defer cancel()
	lister := js.StreamNames(ctx)
	var names []string
	for name := range lister.Name() {
		names = append(names, name)
	}
	if err := lister.Err(); err != nil {
		c.t.Fatalf("natstest: list streams: %v", err)
	}
	slices.Sort(names)
	return names
}

func (c *Cluster) stopAll() {
	for i := range c.servers {
		c.Stop(i)
	}
	for _, p := range c.proxies {
		p.close()
	}
}

// startProxy starts the route proxy of server i, whose cluster port is
// target, and returns its address.
func (c *Cluster) startProxy(i int, target string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	p := &routeProxy{l: l, target: target, self: i, cut: c.isCut, index: c.index}
	c.proxies = append(c.proxies, p)
	p.wg.Add(1)
	go p.serve()
	return l.Addr().String()
}

func (c *Cluster) isCut(i int) bool {
	c.cutMu.Lock()
	defer c.cutMu.Unlock()
	return c.cut[i]
}

// index returns the index of the running server with this ID, or -1.
func (c *Cluster) index(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.servers {
		if s != nil && s.ID() == id {
			return i
		}
	}
	return -1
}

// Cut cuts server i off its peers without stopping it (a network
// partition of one server): its route connections are closed and new
// ones are refused until Heal, while its clients stay connected to it.
// It needs a cluster started with RouteProxies.
func (c *Cluster) Cut(i int) { c.setCut(i, true) }

// Heal lets server i's routes connect again after Cut; the servers
// reconnect on their own.
func (c *Cluster) Heal(i int) { c.setCut(i, false) }

func (c *Cluster) setCut(i int, cut bool) {
	c.t.Helper()
	if len(c.proxies) == 0 {
		c.t.Fatal("natstest: Cut and Heal need a cluster started with RouteProxies")
	}
	c.cutMu.Lock()
	c.cut[i] = cut
	c.cutMu.Unlock()
	if !cut {
		return
	}
	c.mu.Lock()
	var id string
	if s := c.servers[i]; s != nil {
		id = s.ID()
	}
	c.mu.Unlock()
	for _, p := range c.proxies {
		p.drop(i, id)
	}
}
