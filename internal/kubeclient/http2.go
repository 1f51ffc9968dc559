package kubeclient

import "os"

// http2HealthCheck is how client-go's HTTP/2 transport decides that a
// connection is dead: a PING after this long without a frame from the
// server, and the connection is closed if the PING is not answered in time.
// All requests and both watches share one connection; one that dies
// silently (a partition, a NAT or load balancer that lost its state) holds
// every one of them until the check gives up. client-go's defaults, 30 s and
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
