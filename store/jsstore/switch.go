package jsstore

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// serverSwitch moves the NATS connection to another server of the pool
// when JetStream has been unreachable through the one it is on for
// Config.SwitchAfter without a success in between. A server cut off
// from its cluster (a network partition) keeps its client connections
// healthy while every JetStream request through it fails: a leader
// election ends (0.1-1 s after a clean stop of the leader, 4-12 s after
// its crash, in the fault tests), an isolated server never does, and
// nats.go reconnects only when the connection itself breaks (the fault tests of cmd/ingestd/crashtest, TestJetStreamFaults,
// cut the stream leader off with natstest's route proxies).
type serverSwitch struct {
	mu sync.Mutex
	// since is when the current run of failures began (zero: none);
	// last is the last forced reconnect; conn is when the connection
	// last (re)connected.
	since, last, conn time.Time
	// dropped ends when the connection drops (and is replaced by a new
	// one): the acknowledgement of a send in flight on a lost connection
	// never comes.
	dropped context.Context
	drop    context.CancelFunc
	// sendTimeout bounds one send's wait (the const sendTimeout; a test
	// raises it to tell a wait ended by the drop from one timed out).
	sendTimeout time.Duration
}

// sendContext returns the context of one send's wait for its
// acknowledgement: at most sendTimeout, and over as soon as the
// connection drops, so that publish settles at once instead of waiting
// out sendTimeout (a stopped server costs a reconnect, not 5 s; settle
// finds out whether the stream stored it).
func (s *Store) sendContext() (context.Context, context.CancelFunc) {
	s.sw.mu.Lock()
	dropped, d := s.sw.dropped, s.sw.sendTimeout
	s.sw.mu.Unlock()
	return context.WithTimeout(dropped, d)
}

// disconnected is nats.go's disconnect handler: it ends the waits of the
// sends in flight.
func (s *Store) disconnected(*nats.Conn, error) {
	s.sw.mu.Lock()
	defer s.sw.mu.Unlock()
	s.sw.drop()
	s.sw.dropped, s.sw.drop = context.WithCancel(context.Background())
}

// reconnected is nats.go's reconnect handler: failures of attempts begun
// before it were the old connection's (a server that went away, from
// which nats.go moved on its own) and start no run.
func (s *Store) reconnected(*nats.Conn) {
	s.sw.mu.Lock()
	s.sw.conn, s.sw.since = time.Now(), time.Time{}
	s.sw.mu.Unlock()
	s.kickFollowers()
}

// failed records a transient failure of an attempt begun at began (a
// publish, its settle, a DDL call, a follower's consumer set-up, Beyond's
// stream info or barrier) and forces a reconnect to the next
// server when failures have lasted Config.SwitchAfter since the run
// began and since the last switch.
func (s *Store) failed(began time.Time) {
	sw := &s.sw
	sw.mu.Lock()
	if began.Before(sw.conn) {
		sw.mu.Unlock()
		return
	}
	if sw.since.IsZero() {
		sw.since = began
	}
	now := time.Now()
	failing := now.Sub(sw.since)
	due := failing >= s.cfg.SwitchAfter && now.Sub(sw.last) >= s.cfg.SwitchAfter
	if due {
		sw.last = now
	}
	sw.mu.Unlock()
	if !due {
		return
	}
	s.m.switches.Inc()
	s.logger.Warn("jsstore: JetStream unreachable through this server; reconnecting to another",
		"server", s.nc.ConnectedUrlRedacted(), "failing_for", failing.Round(time.Millisecond))
	if err := s.nc.ForceReconnect(); err != nil {
		s.logger.Warn("jsstore: reconnect", "err", err)
	}
}

// succeeded ends the current run of failures.
func (s *Store) succeeded() {
	s.sw.mu.Lock()
	s.sw.since = time.Time{}
	s.sw.mu.Unlock()
}
