package natstest

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"
)

// ClientProxy is a TCP proxy in front of one server's client port, for
// tests that must lose a client's connection at a chosen moment: Hold
// withholds the server's answers (Release forwards them again), Sent tells when the client has sent
// something since, Drop closes every connection and refuses new ones.
// Its methods are safe for concurrent use.
type ClientProxy struct {
	l      net.Listener
	target string
	sent   atomic.Int64 // bytes forwarded from clients to the server
	held   atomic.Bool
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// ClientProxy starts a proxy in front of server i's client port; it is
// closed at the end of the test.
func (c *Cluster) ClientProxy(i int) *ClientProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	p := &ClientProxy{l: l, target: net.JoinHostPort(c.opts[i].Host, strconv.Itoa(c.opts[i].Port)), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	c.t.Cleanup(p.Drop)
	return p
}

// URL is the proxy's client URL.
func (p *ClientProxy) URL() string { return "nats://" + p.l.Addr().String() }

// Hold withholds from the clients everything the server sends from now
// on (read and discarded): requests in flight get no answer.
func (p *ClientProxy) Hold() { p.held.Store(true) }

// Release forwards what the server sends again after Hold (what was
// withheld meanwhile stays lost).
func (p *ClientProxy) Release() { p.held.Store(false) }

// Sent is how many bytes clients sent to the server through the proxy.
func (p *ClientProxy) Sent() int64 { return p.sent.Load() }

// Drop closes the listener and every connection, and waits until the
// proxy's goroutines are gone: the clients see their connection drop and
// cannot come back through the proxy.
func (p *ClientProxy) Drop() {
	_ = p.l.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *ClientProxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		p.mu.Lock()
		if err != nil || p.closed {
			p.mu.Unlock()
			_ = in.Close()
			if out != nil {
				_ = out.Close()
			}
			continue
		}
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(out, in, func(n int) { p.sent.Add(int64(n)) }, false)
		go p.pipe(in, out, nil, true)
	}
}

// pipe copies from src to dst until either closes (then closes both);
// when holdable, what arrives while the proxy holds is discarded.
func (p *ClientProxy) pipe(dst, src net.Conn, counted func(int), holdable bool) {
	defer p.wg.Done()
	defer func() {
		_ = dst.Close()
		_ = src.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !(holdable && p.held.Load()) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			if counted != nil {
				counted(n)
			}
		}
		if err != nil {
			return
		}
	}
}
