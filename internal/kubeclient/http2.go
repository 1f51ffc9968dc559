package kubeclient

import (
	"net"
	"net/http"
	"os"
	"time"

	"k8s.io/client-go/rest"
)

// http2HealthCheck is how client-go's HTTP/2 transport decides that a
// connection is dead: a PING after this long without a frame from the
// server, and the connection is closed if the PING is not answered in time.
// The informers' lists and watches and leader election share one
// connection, the writes another (NewHTTPClient); one that dies silently (a
// partition, a NAT or load balancer that lost its state) holds every
// request on it until the check gives up. client-go's defaults, 30 s and
// 15 s, keep the controller blind for 45 s; these find out in 15 s, for a
// PING frame every 10 s on an idle connection.
var http2HealthCheck = map[string]string{
	"HTTP2_READ_IDLE_TIMEOUT_SECONDS": "10",
	"HTTP2_PING_TIMEOUT_SECONDS":      "5",
}

// DefaultHTTP2HealthCheck sets client-go's HTTP/2 health-check variables,
// read when the transport is built, unless the operator set them.
func DefaultHTTP2HealthCheck() {
	for k, v := range http2HealthCheck {
		if _, set := os.LookupEnv(k); !set {
			_ = os.Setenv(k, v)
		}
	}
}

// NewHTTPClient builds an HTTP client for cfg on connections of its own.
// client-go shares one transport among the clients built from equal
// configurations, and so one HTTP/2 connection: every request and watch of
// the process then goes through that connection's one frame writer in the
// API server and one read loop here. A burst of writes (a cold start's
// thousands of creates, 32 at a time) queues the watches' events behind
// the write responses, and the API server ends a watch whose events it
// cannot hand on in time, for a re-list or re-watch that costs it more. The
// writes get a connection of their own, so that the watches and leader
// election's renewals never wait behind them.
func NewHTTPClient(cfg *rest.Config) (*http.Client, error) {
	c := rest.CopyConfig(cfg)
	if c.Dial == nil {
		// client-go never shares the transport of a configuration with its
		// own dial function; this one dials as client-go's default does.
		c.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return rest.HTTPClientFor(c)
}
