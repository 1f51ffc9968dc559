package serving

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
)

// TestServe checks the listener's life: disabled by "0", serving once
// Serve returns, a taken port reported naming the flag to change, and
// closed when its context ends.
func TestServe(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	if err := Serve(ctx, "probes", "--probe-flag", "0", http.NotFoundHandler(), nil); err != nil {
		t.Fatalf("Serve on 0 = %v, want disabled", err)
	}

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := taken.Addr().String()
	if err := Serve(ctx, "probes", "--probe-flag", addr, http.NotFoundHandler(), nil); err == nil || !strings.Contains(err.Error(), "--probe-flag") {
		t.Errorf("Serve on a taken port = %v, want an error naming --probe-flag", err)
	}
	taken.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello") })
	if err := Serve(ctx, "probes", "--probe-flag", addr, hello, nil); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello" {
		t.Errorf("served %q, want the handler's answer", body)
	}
	cancel()
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil, nil
	}); err != nil {
		t.Error("still listening after the context ended")
	}
}

// TestHandlers checks what each listener serves: metrics at /metrics,
// profiles under /debug/pprof/ on their own mux only (net/http/pprof also
// registers on http.DefaultServeMux, which no listener uses).
func TestHandlers(t *testing.T) {
	get := func(h http.Handler, path string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code
	}
	if code := get(MetricsHandler(), "/metrics"); code != http.StatusOK {
		t.Errorf("metrics: /metrics = %d", code)
	}
	if code := get(MetricsHandler(), "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("metrics: /debug/pprof/ = %d, want 404: profiles are only on their own listener", code)
	}
	if code := get(ProfilingHandler(), "/debug/pprof/"); code != http.StatusOK {
		t.Errorf("profiling: /debug/pprof/ = %d", code)
	}
	if code := get((&Health{}).Handler(), "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("probes: /debug/pprof/ = %d, want 404: profiles are only on their own listener", code)
	}
}
