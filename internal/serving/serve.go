package serving

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// Serve listens on addr ("0" or "" disables) and serves handler until ctx
// ends, over HTTPS with tlsConfig, else plain HTTP. It returns once
// listening, so a taken port is reported at startup; what names the
// listener in logs and flagName the flag that sets addr.
func Serve(ctx context.Context, what, flagName, addr string, handler http.Handler, tlsConfig *tls.Config) error {
	if addr == "0" || addr == "" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("serving %s on %s: %w; choose another address with %s, or 0 to disable", what, addr, err, flagName)
	}
	scheme := "http"
	if tlsConfig != nil {
		l, scheme = tls.NewListener(l, tlsConfig), "https"
	}
	srv := newServer(handler)
	l = capConnections(srv, l, maxConnections)
	klog.FromContext(ctx).Info("Serving "+what, "address", l.Addr().String(), "scheme", scheme)
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Serving "+what+" failed")
		}
	}()
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	return nil
}

// The listeners' limits on what a connection may hold. The metrics port is
// open to anyone the NetworkPolicy lets in, credentials or not: a caller
// that trickles its headers, or opens connections and leaves them idle,
// must not hold them, nor their goroutines, for ever.
const (
	// readHeaderTimeout is how long a request's headers may take to come.
	readHeaderTimeout = 5 * time.Second
	// idleTimeout is how long a kept-alive connection may wait for its
	// next request: longer than Prometheus's usual 30 s between scrapes, so
	// a scraper keeps its connection (and skips a TLS handshake).
	idleTimeout = 90 * time.Second
	// maxHeaderBytes bounds a request's headers: a bearer token is a few
	// kilobytes at most.
	maxHeaderBytes = 64 << 10
	// maxConnections bounds the connections a listener holds open (each
	// some tens of KiB: TLS state, buffers, a goroutine). A few scrapers
	// and the kubelet's probes need a handful; a caller the NetworkPolicy
	// lets in could otherwise open and leave idle as many as it likes.
	maxConnections = 64
)

// connectionsRefusedTotal counts the connections closed at once because
// the listener held maxConnections, none of them idle.
var connectionsRefusedTotal = metrics.NewCounter(&metrics.CounterOpts{
	Namespace: "podtoip", Subsystem: "controller", Name: "connections_refused_total",
	Help: "Connections to the metrics, probes or profiling listener closed at once because it held as many connections as allowed (64), " +
		"none of them idle. Rising: someone keeps that many requests open at once.",
	StabilityLevel: metrics.ALPHA,
})

var registerConnectionsOnce sync.Once

// capConnections makes l hold at most max connections of srv open. A
// connection beyond that closes the one idle the longest (kept alive
// between requests: its client reconnects when it next needs one), so
// that idle connections can never keep a scraper out; when none is idle
// the new one is closed at once. It sets srv.ConnState to know which are
// idle.
func capConnections(srv *http.Server, l net.Listener, max int) net.Listener {
	registerConnectionsOnce.Do(func() { legacyregistry.MustRegister(connectionsRefusedTotal) })
	c := &cappedListener{Listener: l, max: max, conns: map[net.Conn]connInfo{}}
	srv.ConnState = c.track
	return c
}

// cappedListener is capConnections' listener.
type cappedListener struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[net.Conn]connInfo
}

// connInfo is what cappedListener knows of an open connection: whether it
// is idle, and since when.
type connInfo struct {
	idle  bool
	since time.Time
}

// Accept returns the next connection, once there is room for it.
func (c *cappedListener) Accept() (net.Conn, error) {
	for {
		conn, err := c.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		if len(c.conns) >= c.max {
			var oldest net.Conn
			var oldestSince time.Time
			for o, info := range c.conns {
				if info.idle && (oldest == nil || info.since.Before(oldestSince)) {
					oldest, oldestSince = o, info.since
				}
			}
			if oldest == nil {
				c.mu.Unlock()
				connectionsRefusedTotal.Inc()
				_ = conn.Close()
				continue
			}
			delete(c.conns, oldest)
			// Closed outside the server's loop: the server sees it end and
			// reports it closed, which track ignores (already gone).
			_ = oldest.Close()
		}
		c.conns[conn] = connInfo{since: time.Now()}
		c.mu.Unlock()
		return conn, nil
	}
}

// track is the server's ConnState hook.
func (c *cappedListener) track(conn net.Conn, state http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch state {
	case http.StateClosed, http.StateHijacked:
		delete(c.conns, conn)
	case http.StateIdle, http.StateActive:
		if _, ok := c.conns[conn]; ok {
			c.conns[conn] = connInfo{idle: state == http.StateIdle, since: time.Now()}
		}
	}
}

// open returns how many connections are held open.
func (c *cappedListener) open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.conns)
}

// newServer returns the server of a listener. It sets no ReadTimeout or
// WriteTimeout: no handler reads a body, and a CPU profile or trace is
// written for as long as asked (30 s by default), which either would cut
// short.
func newServer(handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

// MetricsHandler serves Prometheus text at /metrics: every metric
// registered with component-base's legacyregistry.
func MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", legacyregistry.Handler())
	return mux
}
