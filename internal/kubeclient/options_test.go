package kubeclient

import (
	"testing"

	"k8s.io/client-go/rest"
)

// TestOptionsApply checks the client settings the flags map to: one rate
// limiter for the whole process or none, and compression off unless asked
// for, while a kubeconfig that disables it keeps it disabled.
func TestOptionsApply(t *testing.T) {
	var limited rest.Config
	Options{UserAgent: "c/v1", QPS: 5, Burst: 10}.Apply(&limited)
	if limited.UserAgent != "c/v1" || limited.QPS != 5 || limited.Burst != 10 || limited.RateLimiter == nil {
		t.Errorf("with --kube-api-qps=5: user agent %q, QPS %v, burst %d, limiter %v", limited.UserAgent, limited.QPS, limited.Burst, limited.RateLimiter)
	}
	if !limited.DisableCompression {
		t.Error("compression not disabled by default")
	}
	if limited.ContentType != "application/vnd.kubernetes.protobuf" {
		t.Errorf("content type %q, want protobuf", limited.ContentType)
	}

	var unlimited rest.Config
	Options{QPS: -1, Compression: true}.Apply(&unlimited)
	if unlimited.QPS != -1 || unlimited.RateLimiter != nil || unlimited.DisableCompression {
		t.Errorf("with --kube-api-qps=-1 --api-compression: QPS %v, limiter %v, compression disabled %v", unlimited.QPS, unlimited.RateLimiter, unlimited.DisableCompression)
	}
	kubeconfigOff := rest.Config{DisableCompression: true}
	Options{QPS: 1, Burst: 1, Compression: true}.Apply(&kubeconfigOff)
	if !kubeconfigOff.DisableCompression {
		t.Error("--api-compression turned on compression a kubeconfig disables")
	}
}
