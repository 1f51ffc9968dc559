package serving

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
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

// TestServerLimitsConnections checks the limits every listener sets, so a
// caller on the metrics port cannot hold connections by trickling its
// headers, by leaving them idle, or with huge headers; and that no
// ReadTimeout or WriteTimeout cuts a long profile short.
func TestServerLimitsConnections(t *testing.T) {
	srv := newServer(http.NotFoundHandler())
	if srv.ReadHeaderTimeout <= 0 || srv.ReadHeaderTimeout > 10*time.Second {
		t.Errorf("ReadHeaderTimeout %v, want a few seconds", srv.ReadHeaderTimeout)
	}
	if srv.IdleTimeout <= 30*time.Second || srv.IdleTimeout > 5*time.Minute {
		t.Errorf("IdleTimeout %v, want longer than a scrape interval and a few minutes at most", srv.IdleTimeout)
	}
	if srv.MaxHeaderBytes < 16<<10 || srv.MaxHeaderBytes >= http.DefaultMaxHeaderBytes {
		t.Errorf("MaxHeaderBytes %d, want room for a token and below the default %d", srv.MaxHeaderBytes, http.DefaultMaxHeaderBytes)
	}
	if srv.ReadTimeout != 0 || srv.WriteTimeout != 0 {
		t.Errorf("ReadTimeout %v, WriteTimeout %v: a 30 s CPU profile would be cut short", srv.ReadTimeout, srv.WriteTimeout)
	}

	// Headers beyond the bound are refused before any handler runs.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(l) }()
	defer func() {
		// Wait for the connection to close, so no goroutine outlives the test.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-served
	}()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+l.Addr().String()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.Repeat("x", 2*maxHeaderBytes))
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("headers of %d bytes: %d, want 431", 2*maxHeaderBytes, resp.StatusCode)
	}
}

// TestServeCapsConnections opens more kept-alive connections than a
// listener may hold, each left idle after one request, and checks that
// the ones idle the longest are closed to make room (a caller cannot hold
// memory with idle connections), and that a new caller is still served.
func TestServeCapsConnections(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello") })
	if err := Serve(ctx, "metrics", "--metrics-bind-address", addr, hello, nil); err != nil {
		t.Fatal(err)
	}

	// request sends one request on c, kept alive, and reads its answer.
	request := func(c net.Conn, r *bufio.Reader) error {
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return err
	}
	const extra = 16
	var closed atomic.Int32
	var conns []net.Conn
	var readers []*bufio.Reader
	for i := range maxConnections + extra {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		defer c.Close()
		r := bufio.NewReader(c)
		if err := request(c, r); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns, readers = append(conns, c), append(readers, r)
	}
	// Each connection is idle now; a read ends when the server closes it.
	for i, c := range conns[:len(conns)-1] {
		go func() {
			if _, err := readers[i].ReadByte(); err != nil {
				closed.Add(1)
				c.Close()
			}
		}()
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return closed.Load() >= extra, nil
	}); err != nil {
		t.Fatalf("%d of %d idle connections closed, want at least %d: the listener holds more than %d", closed.Load(), len(conns), extra, maxConnections)
	}
	// The newest connection is kept, and a new caller is served.
	last := len(conns) - 1
	if err := request(conns[last], readers[last]); err != nil {
		t.Errorf("the newest connection: %v, want it kept", err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := request(c, bufio.NewReader(c)); err != nil {
		t.Errorf("a new caller with the listener full of idle connections: %v, want it served", err)
	}
	if n := closed.Load(); n > extra+1 {
		t.Errorf("%d idle connections closed, want %d: only as many as make room", n, extra+1)
	}
}
