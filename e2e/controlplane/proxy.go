package controlplane

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Relay is a TCP relay on 127.0.0.1 that sits between a client (the
// controller) and an upstream address (the API server) and injects the
// network faults a long-running client must survive: connections reset
// under it, added latency, and a blackhole in which nothing moves but no
// connection is closed either.
//
// It relays bytes, not HTTP: TLS is end to end, so the client keeps
// verifying the API server's serving certificate (valid for 127.0.0.1 on
// any port) and authenticating with its own credentials.
type Relay struct {
	upstream string
	ln       net.Listener

	mu         sync.Mutex
	conns      map[*relayConn]struct{}
	history    []*relayConn
	blackholed bool
	latMin     time.Duration
	latMax     time.Duration
	closed     bool

	wg sync.WaitGroup
}

// ConnStats describes one connection the relay accepted.
type ConnStats struct {
	// Accepted is when the client connected.
	Accepted time.Time
	// ClientGone is when the client closed its end (zero while it is open).
	// While a connection is blackholed the relay still reads, and drops,
	// what the client sends, so it sees the moment the client gives up.
	ClientGone time.Time
	// Dead is set for connections left behind by RestoreNewConnections.
	Dead bool
}

// StartRelay listens on a random loopback port and relays every
// connection to upstream ("host:port").
func StartRelay(upstream string) (*Relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("starting relay: %w", err)
	}
	r := &Relay{upstream: upstream, ln: ln, conns: map[*relayConn]struct{}{}}
	r.wg.Add(1)
	go r.acceptLoop()
	return r, nil
}

// Addr is the relay's "127.0.0.1:port".
func (r *Relay) Addr() string { return r.ln.Addr().String() }

func (r *Relay) acceptLoop() {
	defer r.wg.Done()
	for {
		client, err := r.ln.Accept()
		if err != nil {
			return // closed
		}
		c := newRelayConn(client)
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			client.Close()
			return
		}
		if r.blackholed {
			// The kernel has completed the handshake, but not a byte will
			// move until the blackhole lifts: to the client this is a TLS
			// handshake that never answers.
			c.state = connPaused
		}
		r.conns[c] = struct{}{}
		r.history = append(r.history, c)
		r.wg.Add(1)
		r.mu.Unlock()
		go r.serve(c)
	}
}

func (r *Relay) serve(c *relayConn) {
	defer r.wg.Done()
	defer func() {
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
		c.close(false)
	}()
	if forward, ok := c.await(); !ok || !forward {
		return
	}
	server, err := net.DialTimeout("tcp", r.upstream, 10*time.Second)
	if err != nil {
		// Upstream is down: refuse the client the way the server would.
		c.close(true)
		return
	}
	if !c.setServer(server) {
		server.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.pipe(c, c.client, server, true) }()
	go func() { defer wg.Done(); r.pipe(c, server, c.client, false) }()
	wg.Wait()
}

// chunk is what one read returned, stamped so that latency is added from
// the moment the bytes reached the relay.
type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies src to dst through a queue; the writer applies the
// connection's state and the relay's latency. While the connection is
// paused, the server's side is not read at all, so the API server feels the
// back-pressure of a stalled peer (and ends watches that stop draining)
// instead of streaming into the relay's memory; the client's side is still
// read (what it sends is held back, not forwarded), so that a client giving
// up on the connection is noticed.
func (r *Relay) pipe(c *relayConn, src, dst net.Conn, fromClient bool) {
	queue := make(chan chunk, 64)
	go func() {
		defer close(queue)
		for {
			if !fromClient {
				if _, ok := c.await(); !ok {
					return
				}
			}
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case queue <- chunk{b: buf[:n], at: time.Now()}:
				case <-c.closed:
					return
				}
			}
			if err != nil {
				if fromClient {
					c.clientGone()
				}
				return
			}
		}
	}()

	var last time.Time
	// broken: dst refused a write (its end is gone). The rest of this
	// direction is lost, but the source is still read, so that its peer
	// learns about the end from the other direction (the bytes the gone end
	// sent last, then EOF), as it would through a TCP middlebox, rather
	// than from a reset that races with them.
	broken := false
	for ch := range queue {
		forward, ok := c.await()
		if !ok {
			return
		}
		if !forward || broken {
			continue // dead connection: the bytes are lost
		}
		if d := r.latency(); d > 0 {
			// Keep the byte stream in order: a chunk never overtakes the
			// one before it, whatever delay it drew.
			due := ch.at.Add(d)
			if due.Before(last) {
				due = last
			}
			last = due
			if wait := time.Until(due); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-c.closed:
					t.Stop()
					return
				}
			}
			// A blackhole may have started while the chunk was in flight.
			if forward, ok = c.await(); !ok {
				return
			} else if !forward {
				continue
			}
		}
		if _, err := dst.Write(ch.b); err != nil {
			broken = true
		}
	}
	// The source finished: pass the half-close on, unless the connection
	// is dead, in which case the client's departure ends it.
	if forward, ok := c.await(); ok && forward {
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		return
	}
	c.close(false)
}

func (r *Relay) latency() time.Duration {
	r.mu.Lock()
	lo, hi := r.latMin, r.latMax
	r.mu.Unlock()
	if hi <= lo {
		return lo
	}
	return lo + rand.N(hi-lo)
}

// SetLatency delays every chunk of bytes, in both directions, by a random
// duration in [min, max] (order is preserved). Zero turns it off.
func (r *Relay) SetLatency(min, max time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.latMin, r.latMax = min, max
}

// Cut resets every open connection on both sides, as a crashed load
// balancer or a rebooted middlebox would, and returns how many it cut.
// New connections are accepted as before.
func (r *Relay) Cut() int {
	r.mu.Lock()
	conns := make([]*relayConn, 0, len(r.conns))
	for c := range r.conns {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	for _, c := range conns {
		c.close(true)
	}
	return len(conns)
}

// Blackhole stops forwarding bytes in both directions on every connection,
// keeping them open, and leaves new connections hanging after the TCP
// handshake, until Restore or RestoreNewConnections. It returns how many
// connections were open.
func (r *Relay) Blackhole() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.blackholed = true
	for c := range r.conns {
		c.setState(connPaused)
	}
	return len(r.conns)
}

// Restore ends a blackhole: every connection resumes where it stopped, as
// TCP connections do when a partition heals before they time out.
func (r *Relay) Restore() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.blackholed = false
	for c := range r.conns {
		c.setState(connForwarding)
	}
}

// RestoreNewConnections ends a blackhole for connections made from now on
// (and those left hanging in the handshake), while the connections that
// were established when it began stay silent for good: what a client sees
// when a NAT or load balancer lost its connection table during the outage.
// Only the client can notice such a connection is dead and abandon it. It
// returns how many such connections the client still held.
func (r *Relay) RestoreNewConnections() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.blackholed = false
	held := 0
	for c := range r.conns {
		if !c.hasServer() {
			c.setState(connForwarding)
			continue
		}
		c.setState(connDropping)
		if c.stats().ClientGone.IsZero() {
			held++
		}
	}
	return held
}

// Connections reports every connection accepted so far, in order.
func (r *Relay) Connections() []ConnStats {
	r.mu.Lock()
	hist := append([]*relayConn(nil), r.history...)
	r.mu.Unlock()
	out := make([]ConnStats, len(hist))
	for i, c := range hist {
		out[i] = c.stats()
	}
	return out
}

// Close stops accepting, resets every connection and waits for the relay's
// goroutines.
func (r *Relay) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	err := r.ln.Close()
	r.Cut()
	r.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

type connState int

const (
	connForwarding connState = iota
	connPaused
	connDropping
)

// relayConn is one client connection and, once dialed, its upstream.
type relayConn struct {
	client net.Conn

	mu       sync.Mutex
	server   net.Conn
	state    connState
	changed  chan struct{} // closed and replaced on every state change
	accepted time.Time
	gone     time.Time
	dead     bool

	closed    chan struct{}
	closeOnce sync.Once
}

func newRelayConn(client net.Conn) *relayConn {
	return &relayConn{client: client, changed: make(chan struct{}), accepted: time.Now(), closed: make(chan struct{})}
}

func (c *relayConn) setState(s connState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == s || c.state == connDropping {
		return // a dead connection never comes back
	}
	c.state = s
	if s == connDropping {
		c.dead = true
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// await blocks while the connection is paused. It returns whether bytes
// are to be forwarded (false: dropped), and ok=false once it is closed.
func (c *relayConn) await() (forward, ok bool) {
	for {
		c.mu.Lock()
		s, changed := c.state, c.changed
		c.mu.Unlock()
		switch s {
		case connForwarding:
			return true, true
		case connDropping:
			return false, true
		}
		select {
		case <-changed:
		case <-c.closed:
			return false, false
		}
	}
}

func (c *relayConn) setServer(s net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.closed:
		return false
	default:
	}
	c.server = s
	return true
}

func (c *relayConn) hasServer() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.server != nil
}

func (c *relayConn) clientGone() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone.IsZero() {
		c.gone = time.Now()
	}
}

func (c *relayConn) stats() ConnStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ConnStats{Accepted: c.accepted, ClientGone: c.gone, Dead: c.dead}
}

// close closes both sides; reset sends an RST instead of a FIN.
func (c *relayConn) close(reset bool) {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.mu.Lock()
		server := c.server
		c.mu.Unlock()
		for _, conn := range []net.Conn{c.client, server} {
			if conn == nil {
				continue
			}
			if tc, ok := conn.(*net.TCPConn); ok && reset {
				_ = tc.SetLinger(0)
			}
			_ = conn.Close()
		}
	})
}
