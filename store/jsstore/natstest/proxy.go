package natstest

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"strings"
	"sync"
)

// routeProxy forwards the route connections into one server's cluster
// port. Every server's route URLs and advertised cluster address are the
// proxies', so every route connection passes exactly one proxy: the one
// in front of the server dialed. A proxy learns the dialing server from
// its route CONNECT (its "name" is the server's ID, which natstest maps
// to the server's index when it is needed: a route may connect before its
// server is registered), so it can drop the connections of a server cut
// off at either end.
type routeProxy struct {
	l      net.Listener
	target string              // the server's cluster address
	self   int                 // the index of the server behind the proxy
	cut    func(int) bool      // reports whether server i is cut off
	index  func(id string) int // the index of the server with this ID, or -1
	wg     sync.WaitGroup
	mu     sync.Mutex // guards what follows, and each conn's from
	conns  map[*proxyConn]struct{}
	closed bool
}

// proxyConn is one forwarded connection: the dialer's side, the server's
// side and the dialing server's ID ("" until its CONNECT is read).
type proxyConn struct {
	in, out net.Conn
	from    string
}

func (p *routeProxy) close() {
	_ = p.l.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.shut()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (c *proxyConn) shut() {
	_ = c.in.Close()
	_ = c.out.Close()
}

// serve accepts until the listener is closed.
func (p *routeProxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.forward(in)
	}
}

// forward connects in to the server, reads the dialer's CONNECT line to
// learn who it is, and copies both ways until either side closes or a
// cut drops the connection.
func (p *routeProxy) forward(in net.Conn) {
	defer p.wg.Done()
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = in.Close()
		return
	}
	c := &proxyConn{in: in, out: out}
	p.mu.Lock()
	if p.closed || p.cut(p.self) {
		p.mu.Unlock()
		c.shut()
		return
	}
	if p.conns == nil {
		p.conns = map[*proxyConn]struct{}{}
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.shut()
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(in, out) // the server's INFO comes first
		c.shut()
	}()
	r := bufio.NewReader(in)
	line, err := r.ReadString('\n')
	if err == nil {
		from := dialer(line)
		p.mu.Lock()
		c.from = from
		i := p.index(from)
		dropped := i >= 0 && p.cut(i)
		p.mu.Unlock()
		if !dropped {
			if _, err = io.WriteString(out, line); err == nil {
				_, _ = io.Copy(out, r)
			}
		}
	}
	c.shut()
	<-done
}

// dialer returns the ID of the server whose route CONNECT line this is,
// or "".
func dialer(line string) string {
	rest, ok := strings.CutPrefix(line, "CONNECT ")
	if !ok {
		return ""
	}
	var info struct {
		Name string `json:"name"`
	}
	if json.Unmarshal([]byte(strings.TrimSpace(rest)), &info) != nil {
		return ""
	}
	return info.Name
}

// drop closes the connections dialed by server i (whose ID is id), or
// all when i is the server behind the proxy.
func (p *routeProxy) drop(i int, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if i == p.self || (id != "" && c.from == id) {
			c.shut()
		}
	}
}
