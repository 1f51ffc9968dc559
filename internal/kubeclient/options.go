package kubeclient

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Options are how every client of the process talks to the API server.
type Options struct {
	// UserAgent names the controller and its version in the API server's
	// audit log.
	UserAgent string
	// QPS and Burst limit the requests of the whole process; QPS <= 0
	// disables client-side limiting. The metrics endpoint's reviews of its
	// callers are the exception: they have a limiter of their own
	// (package serving), so callers cannot spend this budget.
	QPS   float64
	Burst int
	// Compression asks for gzip-compressed responses.
	Compression bool
}

// Apply sets o on cfg, before any client is built from it.
func (o Options) Apply(cfg *rest.Config) {
	cfg.UserAgent = o.UserAgent
	if o.QPS > 0 {
		// One limiter shared by every client of the process.
		cfg.QPS, cfg.Burst = float32(o.QPS), o.Burst
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	} else {
		cfg.QPS = -1
	}
	if !o.Compression {
		cfg.DisableCompression = true
	}
	// Pods are read as protobuf: smaller and cheaper to decode than JSON.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
}

// ListTimeout turns the server-side timeout of a list or watch into the
// matching client-side one, as generated clients do.
func ListTimeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
