package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/metrics"
)

// newTestClient is a Client for an httptest server answering with h.
func newTestClient(t *testing.T, h http.HandlerFunc, tweak func(*rest.Config)) *Client {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	cfg := &rest.Config{Host: ts.URL}
	if tweak != nil {
		tweak(cfg)
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(cfg, httpClient, httpClient, fieldManager)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var testMirror = &PodToIp{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}, PodName: "web", PodAddress: "10.244.0.5", PodIPs: []string{"10.244.0.5"}}

// TestWriteErrors: a failed write returns the API server's Status as an
// error the apierrors predicates recognize, or, for a body that is not a
// Status (a proxy's page, say), a generic error with the status code and
// the text; never a nil error.
func TestWriteErrors(t *testing.T) {
	cases := []struct {
		name        string
		code        int
		contentType string
		body        string
		check       func(error) bool
		wantInText  string
	}{
		{"conflict", 409, "application/json", `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"AlreadyExists","code":409,"message":"podtoips.example.com \"web\" already exists"}`, apierrors.IsAlreadyExists, "already exists"},
		{"forbidden", 403, "application/json", `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"podtoips.example.com is forbidden: User \"x\" cannot create resource"}`, apierrors.IsForbidden, "cannot create"},
		{"invalid", 422, "application/json", `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Invalid","code":422,"message":"PodToIp.example.com \"web\" is invalid"}`, apierrors.IsInvalid, "is invalid"},
		{"proxy page", 502, "text/plain", "bad gateway from the proxy\n", func(err error) bool { return apierrors.IsUnexpectedServerError(err) }, "bad gateway from the proxy"},
		{"not json", 500, "application/json", "{", apierrors.IsInternalError, "unknown"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.contentType)
				w.WriteHeader(tc.code)
				io.WriteString(w, tc.body)
			}, nil)
			_, err := c.PodToIps("ns").Create(t.Context(), testMirror, metav1.CreateOptions{})
			if err == nil || !tc.check(err) || !strings.Contains(err.Error(), tc.wantInText) {
				t.Errorf("Create answered %d %q: error %v, want one the predicate accepts, containing %q", tc.code, tc.body, err, tc.wantInText)
			}
			if s, ok := err.(apierrors.APIStatus); !ok || s.Status().Code != int32(tc.code) {
				t.Errorf("error %#v does not carry the status code %d", err, tc.code)
			}
		})
	}
}

// TestWriteRetryAfter: a write the API server answers with 429 and
// Retry-After is sent again after the delay, as client-go does, and the
// caller sees only the final answer.
func TestWriteRetryAfter(t *testing.T) {
	var calls atomic.Int32
	var mu sync.Mutex
	var times []time.Time
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429}`)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, mirrorJSON)
	}, nil)
	got, err := c.PodToIps("ns").Create(t.Context(), testMirror, metav1.CreateOptions{})
	if err != nil || got.ResourceVersion != "7" {
		t.Fatalf("Create = %+v, %v; want the second answer", got, err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("the server saw %d requests, want 2", n)
	}
	if gap := times[1].Sub(times[0]); gap < time.Second {
		t.Errorf("resent after %v, before the Retry-After of 1 s", gap)
	}
}

// TestWriteRetryAfterStopsWithContext: a write waiting to be resent gives
// up when its context ends.
func TestWriteRetryAfterStopsWithContext(t *testing.T) {
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusServiceUnavailable)
	}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := c.PodToIps("ns").Create(ctx, testMirror, metav1.CreateOptions{})
		errc <- err
	}()
	cancel()
	select {
	case err := <-errc:
		if err == nil {
			t.Error("Create succeeded, want the context's error")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Create kept waiting after its context ended")
	}
}

// recordingResult counts rest_client_requests_total's increments.
type recordingResult struct {
	mu  sync.Mutex
	got []string
}

func (r *recordingResult) Increment(_ context.Context, code, method, _ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, method+" "+code)
}

// TestWriteMetricsAndWarnings: every write is counted in the request
// metrics as client-go counts its requests, carries the configured user
// agent, and the API server's warnings reach the configured handler.
func TestWriteMetricsAndWarnings(t *testing.T) {
	rec := &recordingResult{}
	old := metrics.RequestResult
	metrics.RequestResult = rec
	t.Cleanup(func() { metrics.RequestResult = old })

	var warned, agents []string
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		agents = append(agents, r.UserAgent())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Add("Warning", `299 - "unknown field \"spec.x\""`)
		switch r.Method {
		case http.MethodPost:
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, mirrorJSON)
		case http.MethodPut:
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409}`)
		default:
			io.WriteString(w, mirrorJSON)
		}
	}, func(cfg *rest.Config) {
		cfg.UserAgent = "podtoip-controller/test"
		cfg.WarningHandler = warningFunc(func(code int, _ string, text string) { warned = append(warned, text) })
	})
	ctx := t.Context()
	if _, err := c.PodToIps("ns").Create(ctx, testMirror, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PodToIps("ns").Update(ctx, testMirror, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("Update: %v, want a conflict", err)
	}
	if err := c.PodToIps("ns").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"POST 201", "PUT 409", "DELETE 200"}
	if strings.Join(rec.got, ",") != strings.Join(want, ",") {
		t.Errorf("requests counted %v, want %v", rec.got, want)
	}
	for _, a := range agents {
		if a != "podtoip-controller/test" {
			t.Errorf("a write was sent with User-Agent %q, want the configured one", a)
		}
	}
	if len(warned) != 3 || warned[0] != `unknown field "spec.x"` {
		t.Errorf("warnings handled %q, want the server's on each of the 3 writes", warned)
	}
}

type warningFunc func(code int, agent string, text string)

func (f warningFunc) HandleWarningHeader(code int, agent string, text string) { f(code, agent, text) }

// TestWriteURL: the namespace and name are checked as path segments, and
// a server URL with a path keeps it.
func TestWriteURL(t *testing.T) {
	w, err := newWriter(&rest.Config{Host: "https://example.test:6443/prefix/"}, http.DefaultClient, Resource, true)
	if err != nil {
		t.Fatal(err)
	}
	got, err := w.url("ns", "web", writeOptions{fieldManager: "m", dryRun: []string{"All"}})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(got)
	if u.Path != "/prefix/apis/example.com/v1/namespaces/ns/podtoips/web" || u.Query().Get("fieldManager") != "m" || u.Query().Get("dryRun") != "All" {
		t.Errorf("url = %s", got)
	}
	for _, bad := range [][2]string{{"", "web"}, {"ns", ".."}, {"n/s", "web"}, {"ns", "a%b"}} {
		if _, err := w.url(bad[0], bad[1], writeOptions{}); err == nil {
			t.Errorf("url(%q, %q) accepted", bad[0], bad[1])
		}
	}

	cluster, err := newWriter(&rest.Config{Host: "https://example.test:6443"}, http.DefaultClient, "iphistories", false)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := cluster.url("", "fd00--5", writeOptions{}); err != nil || got != "https://example.test:6443/apis/example.com/v1/iphistories/fd00--5" {
		t.Errorf("cluster-scoped url = %s, %v", got, err)
	}
	if _, err := cluster.url("ns", "10.0.0.1", writeOptions{}); err == nil {
		t.Error("a cluster-scoped url accepted a namespace")
	}
}
