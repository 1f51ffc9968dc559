package kubeclient

import (
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
)

// TestDefaultHTTP2HealthCheck: the binary turns client-go's HTTP/2 health
// check down from 30 s + 15 s to 10 s + 5 s when the environment says
// nothing, so a silently dead connection is dropped in about 15 s, and
// leaves whatever an operator set alone (including an empty value, which
// client-go reads as "off").
func TestDefaultHTTP2HealthCheck(t *testing.T) {
	const (
		readIdle = "HTTP2_READ_IDLE_TIMEOUT_SECONDS"
		ping     = "HTTP2_PING_TIMEOUT_SECONDS"
	)
	want := map[string]string{readIdle: "10", ping: "5"}
	if len(http2HealthCheck) != len(want) {
		t.Fatalf("http2HealthCheck = %v, want exactly %v", http2HealthCheck, want)
	}

	tests := []struct {
		name string
		set  map[string]string // the operator's environment; unset otherwise
		want map[string]string
	}{
		{name: "unset", want: want},
		{name: "both set", set: map[string]string{readIdle: "30", ping: "15"}, want: map[string]string{readIdle: "30", ping: "15"}},
		{name: "one set", set: map[string]string{ping: "2"}, want: map[string]string{readIdle: "10", ping: "2"}},
		{name: "set empty", set: map[string]string{readIdle: "", ping: ""}, want: map[string]string{readIdle: "", ping: ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k := range want {
				// Setenv restores the test process's value afterwards.
				t.Setenv(k, "")
				if v, ok := tc.set[k]; ok {
					t.Setenv(k, v)
				} else if err := os.Unsetenv(k); err != nil {
					t.Fatal(err)
				}
			}
			DefaultHTTP2HealthCheck()
			for k, v := range tc.want {
				got, ok := os.LookupEnv(k)
				if !ok || got != v {
					t.Errorf("%s = %q (set: %v), want %q", k, got, ok, v)
				}
			}
		})
	}
}

// TestNewHTTPClientHasItsOwnConnection: two clients built by client-go from
// one configuration share one HTTP/2 connection; a client from
// NewHTTPClient opens its own, so requests on it never queue behind the
// others' (and the others' watches never behind its writes).
func TestNewHTTPClientHasItsOwnConnection(t *testing.T) {
	var mu sync.Mutex
	conns := 0
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "want HTTP/2, got "+r.Proto, http.StatusHTTPVersionNotSupported)
		}
	}))
	ts.EnableHTTP2 = true
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	cfg := &rest.Config{Host: ts.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}

	count := func(c *http.Client) int {
		t.Helper()
		resp, err := c.Get(ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET: %s", resp.Status)
		}
		mu.Lock()
		defer mu.Unlock()
		return conns
	}
	shared1, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	shared2, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	own, err := NewHTTPClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(shared1); n != 1 {
		t.Fatalf("first client: %d connections, want 1", n)
	}
	if n := count(shared2); n != 1 {
		t.Fatalf("a second client from the same configuration opened a connection of its own (%d in all): the premise of NewHTTPClient no longer holds", n)
	}
	if n := count(own); n != 2 {
		t.Fatalf("NewHTTPClient's client: %d connections in all, want 2 (one of its own)", n)
	}
	if n := count(own); n != 2 {
		t.Fatalf("NewHTTPClient's client opened another connection for its second request (%d in all), want it to keep its own", n)
	}
}
