package serving

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

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
)

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
