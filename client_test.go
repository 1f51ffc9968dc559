package main

import (
	"context"
	"encoding/json"
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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/metrics"
)

// TestCodecRoundTrip decodes PodToIp JSON as the API server sends it through
// the client's private codecs, and encodes it back.
func TestCodecRoundTrip(t *testing.T) {
	in := []byte(`{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web","namespace":"ns","uid":"m-1","resourceVersion":"7","labels":{"app.kubernetes.io/managed-by":"podtoip-controller"}},"podName":"web","podUID":"uid-1","podAddress":"10.244.0.5","podIPs":["10.244.0.5","fd00::5"],"nodeName":"node-1"}`)
	obj, gvk, err := codecs.UniversalDeserializer().Decode(in, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := obj.(*PodToIp)
	if !ok || gvk.Kind != "PodToIp" || gvk.GroupVersion() != GroupVersion {
		t.Fatalf("decoded %T %v", obj, gvk)
	}
	if m.Name != "web" || m.PodUID != "uid-1" || len(m.PodIPs) != 2 || m.NodeName != "node-1" || !isManaged(toMirrorInfo(m)) {
		t.Errorf("decoded %+v", m)
	}

	list := []byte(`{"apiVersion":"example.com/v1","kind":"PodToIpList","metadata":{"resourceVersion":"9","continue":"c"},"items":[` + string(in) + `]}`)
	obj, _, err = codecs.UniversalDeserializer().Decode(list, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l := obj.(*PodToIpList); len(l.Items) != 1 || l.Continue != "c" || l.Items[0].PodAddress != "10.244.0.5" {
		t.Errorf("decoded list %+v", l)
	}

	enc := codecs.LegacyCodec(GroupVersion)
	out, err := runtime.Encode(enc, m)
	if err != nil {
		t.Fatal(err)
	}
	back, _, err := codecs.UniversalDeserializer().Decode(out, nil, nil)
	if err != nil || back.(*PodToIp).PodAddress != m.PodAddress {
		t.Errorf("round trip: %v %+v", err, back)
	}
}

// TestListOptionsPassThrough checks that every list option an informer uses,
// including the WatchList ones, becomes a query parameter.
func TestListOptionsPassThrough(t *testing.T) {
	send := true
	timeout := int64(30)
	opts := &metav1.ListOptions{
		LabelSelector: "a=b", FieldSelector: "podAddress=10.0.0.1", ResourceVersion: "5",
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, SendInitialEvents: &send,
		AllowWatchBookmarks: true, TimeoutSeconds: &timeout, Limit: 500, Continue: "tok", Watch: true,
	}
	q, err := parameterCodec.EncodeParameters(opts, GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"labelSelector": "a=b", "fieldSelector": "podAddress=10.0.0.1", "resourceVersion": "5",
		"resourceVersionMatch": "NotOlderThan", "sendInitialEvents": "true", "allowWatchBookmarks": "true",
		"timeoutSeconds": "30", "limit": "500", "continue": "tok", "watch": "true",
	} {
		if got := q.Get(k); got != v {
			t.Errorf("query %s = %q, want %q (all: %v)", k, got, v, q)
		}
	}
}

// seenRequest is what the fake API server received.
type seenRequest struct {
	method, path, contentType string
	query                     url.Values
	body                      map[string]any
	raw                       []byte
}

// fakeAPIServer answers the PodToIp calls with canned JSON and records the
// requests, so the tests can check what the client puts on the wire.
type fakeAPIServer struct {
	mu   sync.Mutex
	seen []seenRequest
}

func (s *fakeAPIServer) last(t *testing.T) seenRequest {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.seen) == 0 {
		t.Fatal("no request reached the server")
	}
	return s.seen[len(s.seen)-1]
}

const mirrorJSON = `{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"web","namespace":"ns","resourceVersion":"7"},"podName":"web","podUID":"uid-1","podAddress":"10.244.0.5","podIPs":["10.244.0.5"],"nodeName":"node-1"}`

func (s *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := seenRequest{method: r.Method, path: r.URL.Path, query: r.URL.Query(), contentType: r.Header.Get("Content-Type")}
	if b, _ := io.ReadAll(r.Body); len(b) > 0 {
		req.raw = b
		_ = json.Unmarshal(b, &req.body)
	}
	s.mu.Lock()
	s.seen = append(s.seen, req)
	s.mu.Unlock()

	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/apis/example.com/v1/namespaces/ns/podtoips/gone":
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"details":{"name":"gone","group":"example.com","kind":"podtoips"}}`)
	case r.URL.Query().Get("watch") == "true":
		io.WriteString(w, `{"type":"ADDED","object":`+mirrorJSON+"}\n")
	case r.Method == http.MethodGet && r.URL.Path == "/apis/example.com/v1/podtoips":
		io.WriteString(w, `{"apiVersion":"example.com/v1","kind":"PodToIpList","metadata":{"resourceVersion":"9"},"items":[`+mirrorJSON+`]}`)
	case r.Method == http.MethodDelete:
		io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Success"}`)
	default:
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
		}
		io.WriteString(w, mirrorJSON)
	}
}

// TestClientCallsOnTheWire drives every verb of the hand-written client
// against an HTTP server and checks the path, the query (every list option,
// the field manager), the body and the decoded result.
func TestClientCallsOnTheWire(t *testing.T) {
	srv := &fakeAPIServer{}
	c := newTestClient(t, srv.ServeHTTP, nil)
	ctx := t.Context()
	wantQuery := func(req seenRequest, want map[string]string) {
		t.Helper()
		for k, v := range want {
			if got := req.query.Get(k); got != v {
				t.Errorf("%s %s: query %s = %q, want %q (all: %v)", req.method, req.path, k, got, v, req.query)
			}
		}
	}

	send, timeout := true, int64(30)
	listOpts := metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/managed-by=podtoip-controller", FieldSelector: "podAddress=10.244.0.5",
		ResourceVersion: "5", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		TimeoutSeconds: &timeout, Limit: 500, Continue: "tok",
	}
	list, err := c.PodToIps("").List(ctx, listOpts)
	if err != nil || len(list.Items) != 1 || list.ResourceVersion != "9" || list.Items[0].Name != "web" {
		t.Errorf("List = %+v, %v", list, err)
	}
	req := srv.last(t)
	if req.path != "/apis/example.com/v1/podtoips" {
		t.Errorf("List across namespaces sent %s", req.path)
	}
	wantQuery(req, map[string]string{
		"labelSelector": listOpts.LabelSelector, "fieldSelector": listOpts.FieldSelector, "resourceVersion": "5",
		"resourceVersionMatch": "NotOlderThan", "timeoutSeconds": "30", "limit": "500", "continue": "tok",
	})

	w, err := c.PodToIps("ns").Watch(ctx, metav1.ListOptions{
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, SendInitialEvents: &send,
		AllowWatchBookmarks: true, TimeoutSeconds: &timeout, LabelSelector: "a=b",
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if m, ok := ev.Object.(*PodToIp); ev.Type != watch.Added || !ok || m.Name != "web" || m.PodAddress != "10.244.0.5" {
			t.Errorf("watch event = %s %#v", ev.Type, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event")
	}
	w.Stop()
	req = srv.last(t)
	if req.path != "/apis/example.com/v1/namespaces/ns/podtoips" {
		t.Errorf("Watch sent %s", req.path)
	}
	wantQuery(req, map[string]string{
		"watch": "true", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan",
		"allowWatchBookmarks": "true", "timeoutSeconds": "30", "labelSelector": "a=b",
	})

	obj := &PodToIp{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}, PodName: "web", PodAddress: "10.244.0.5", PodIPs: []string{"10.244.0.5"}}
	if created, err := c.PodToIps("ns").Create(ctx, obj, metav1.CreateOptions{}); err != nil || created.ResourceVersion != "7" {
		t.Errorf("Create = %+v, %v", created, err)
	}
	req = srv.last(t)
	if req.method != http.MethodPost || req.path != "/apis/example.com/v1/namespaces/ns/podtoips" {
		t.Errorf("Create sent %s %s", req.method, req.path)
	}
	wantQuery(req, map[string]string{"fieldManager": "podtoip-controller"})
	if req.body["apiVersion"] != "example.com/v1" || req.body["kind"] != "PodToIp" || req.body["podAddress"] != "10.244.0.5" {
		t.Errorf("Create body = %v; want apiVersion, kind and the fields", req.body)
	}

	if _, err := c.PodToIps("ns").Update(ctx, obj, metav1.UpdateOptions{FieldManager: "someone-else"}); err != nil {
		t.Errorf("Update: %v", err)
	}
	req = srv.last(t)
	if req.method != http.MethodPut || req.path != "/apis/example.com/v1/namespaces/ns/podtoips/web" {
		t.Errorf("Update sent %s %s", req.method, req.path)
	}
	wantQuery(req, map[string]string{"fieldManager": "someone-else"})

	patch := `[{"op":"test","path":"/metadata/uid","value":"uid-9"}]`
	if patched, err := c.PodToIps("ns").Patch(ctx, "web", []byte(patch), metav1.PatchOptions{}); err != nil || patched.ResourceVersion != "7" {
		t.Errorf("Patch = %+v, %v", patched, err)
	}
	req = srv.last(t)
	if req.method != http.MethodPatch || req.path != "/apis/example.com/v1/namespaces/ns/podtoips/web" ||
		req.contentType != "application/json-patch+json" || string(req.raw) != patch {
		t.Errorf("Patch sent %s %s (%s) %s", req.method, req.path, req.contentType, req.raw)
	}
	wantQuery(req, map[string]string{"fieldManager": "podtoip-controller"})

	uid := types.UID("uid-9")
	if err := c.PodToIps("ns").Delete(ctx, "web", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil {
		t.Errorf("Delete: %v", err)
	}
	req = srv.last(t)
	if req.method != http.MethodDelete || req.path != "/apis/example.com/v1/namespaces/ns/podtoips/web" {
		t.Errorf("Delete sent %s %s", req.method, req.path)
	}
	if pre, _ := req.body["preconditions"].(map[string]any); pre["uid"] != "uid-9" {
		t.Errorf("Delete body = %v; want the UID precondition", req.body)
	}
}

// wireMirror is a PodToIp as the API server writes it in a response or a
// watch event: every field, managedFields included, keys sorted.
const wireMirror = `{"apiVersion":"example.com/v1","conflict":false,"hostNetwork":false,"kind":"PodToIp","metadata":{"creationTimestamp":"2026-11-24T03:00:00Z","generation":1,"labels":{"app.kubernetes.io/managed-by":"podtoip-controller"},"managedFields":[{"apiVersion":"example.com/v1","fieldsType":"FieldsV1","fieldsV1":{"f:hostNetwork":{},"f:metadata":{"f:labels":{".":{},"f:app.kubernetes.io/managed-by":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"0b7c1f5e-52d4-4c1e-9a43-3f1f1d2a6c11\"}":{}}},"f:nodeName":{},"f:podAddress":{},"f:podIPs":{},"f:podIPv4":{},"f:podName":{},"f:podUID":{}},"manager":"podtoip-controller","operation":"Update","time":"2026-11-24T03:00:00Z"}],"name":"web-0","namespace":"default","ownerReferences":[{"apiVersion":"v1","controller":true,"kind":"Pod","name":"web-0","uid":"0b7c1f5e-52d4-4c1e-9a43-3f1f1d2a6c11"}],"resourceVersion":"4242","uid":"9d0c3a77-1e2b-4f6a-8c5d-2a1b3c4d5e6f"},"nodeName":"node-1","podAddress":"10.244.1.7","podIPs":["10.244.1.7","fd00::7"],"podIPv4":"10.244.1.7","podIPv6":"fd00::7","podName":"web-0","podUID":"0b7c1f5e-52d4-4c1e-9a43-3f1f1d2a6c11"}`

// A watch stream read end to end through the client, as the informer
// reads it, gives the informer what it needs: events in order, the kept
// fields without managedFields, bookmarks with their annotation, and a
// Status on an error event, in any chunking of the stream.
func TestWatchStreamThroughTheClient(t *testing.T) {
	stream := `{"type":"ADDED","object":` + wireMirror + "}\n" +
		`{"type":"BOOKMARK","object":{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"resourceVersion":"4243","annotations":{"k8s.io/initial-events-end":"true"}}}}` + "\n" +
		`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version","reason":"Expired","code":410}}` + "\n"
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		for i := 0; i < len(stream); i += 7 {
			_, _ = io.WriteString(w, stream[i:min(i+7, len(stream))])
			w.(http.Flusher).Flush()
		}
	}, nil)
	wi, err := c.PodToIps("").Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer wi.Stop()
	var got []watch.Event
	for ev := range wi.ResultChan() {
		got = append(got, ev)
	}
	if len(got) != 3 {
		t.Fatalf("got %d events, want 3: %v", len(got), got)
	}
	m, ok := got[0].Object.(*PodToIp)
	if !ok || got[0].Type != watch.Added || m.Name != "web-0" || m.ResourceVersion != "4242" || len(m.ManagedFields) != 0 || m.PodIPv6 != "fd00::7" || !m.CreationTimestamp.IsZero() {
		t.Errorf("event 1: %s %#v", got[0].Type, got[0].Object)
	}
	if b, ok := got[1].Object.(*PodToIp); !ok || got[1].Type != watch.Bookmark || b.ResourceVersion != "4243" || b.Annotations["k8s.io/initial-events-end"] != "true" {
		t.Errorf("bookmark: %s %#v", got[1].Type, got[1].Object)
	}
	if s, ok := got[2].Object.(*metav1.Status); !ok || got[2].Type != watch.Error || s.Code != 410 {
		t.Errorf("error event: %s %#v", got[2].Type, got[2].Object)
	}
}

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
