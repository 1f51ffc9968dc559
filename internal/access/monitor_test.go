package access

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2/ktesting"
)

// testMonitor returns a monitor on a settable clock, logging into a buffer.
func testMonitor(t *testing.T) (*Monitor, *time.Time, func() string) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	a := NewMonitor(context.Background(), testCRD, "pods", "podtoips")
	a.logger = logger
	now := time.Unix(1000, 0)
	a.now = func() time.Time { return now }
	logs := func() string { return logger.GetSink().(ktesting.Underlier).GetBuffer().String() }
	return a, &now, logs
}

// respond makes a response with a status code and no body.
func respond(code int) *http.Response {
	return &http.Response{StatusCode: code, Body: http.NoBody, Header: http.Header{}}
}

// forbidden makes a 403 response carrying err's Status.
func forbidden(t *testing.T, err *apierrors.StatusError, proto bool) *http.Response {
	body, ct := encodeStatus(t, err, proto)
	return &http.Response{StatusCode: http.StatusForbidden, Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(bytes.NewReader(body))}
}

func TestAccessMonitor(t *testing.T) {
	a, now, _ := testMonitor(t)
	req := func(method, url string) *http.Request { return httptest.NewRequest(method, url, nil) }

	a.record(req("GET", "/api/v1/pods?watch=true"), respond(http.StatusOK))
	a.record(req("POST", "/api/v1/namespaces/ns/events"), forbidden(t, authzDenial(schema.GroupResource{Resource: "events"}, "", "create", "ns", ""), false)) // not watched
	a.record(req("GET", "/api/v1/pods"), respond(http.StatusForbidden))                                                                                       // no Status: not the authorizer
	a.record(req("GET", "/api/v1/pods"), respond(http.StatusInternalServerError))                                                                             // not about access
	if err := a.Check(); err != nil {
		t.Fatalf("Check() = %v, want nil", err)
	}

	a.record(req("GET", "/api/v1/pods?limit=500"), forbidden(t, authzDenial(podsGR, "", "list", "", ""), true))
	a.record(req("POST", "/apis/example.com/v1/namespaces/ns/podtoips"), respond(http.StatusUnauthorized))
	err := a.Check()
	if err == nil || !strings.Contains(err.Error(), "get/list pods (403 Forbidden)") || !strings.Contains(err.Error(), "create podtoips (401 Unauthorized)") {
		t.Fatalf("Check() = %v, want both refusals named", err)
	}

	// A success of the same call clears it; the other stays.
	a.record(req("GET", "/api/v1/pods"), respond(http.StatusOK))
	if err := a.Check(); err == nil || strings.Contains(err.Error(), "get/list pods") {
		t.Fatalf("Check() = %v, want only the create refusal", err)
	}

	// A refusal not seen again for denialTTL stops counting.
	*now = now.Add(denialTTL + time.Second)
	if err := a.Check(); err != nil {
		t.Fatalf("Check() after the TTL = %v, want nil", err)
	}
}

// TestAccessMonitorRejections runs real 403 bodies through the transport:
// the caller still reads each body whole, only the authorizer's refusal
// makes readiness fail, and the others are counted by reason and logged
// once per reason and call.
func TestAccessMonitorRejections(t *testing.T) {
	a, now, logs := testMonitor(t)
	var body []byte
	var contentType string
	rt := a.Wrap(roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusForbidden, Header: http.Header{"Content-Type": {contentType}},
			Body: io.NopCloser(bytes.NewReader(body))}, nil
	}))
	call := func(method, url string, err *apierrors.StatusError, proto bool) {
		t.Helper()
		body, contentType = encodeStatus(t, err, proto)
		resp, rerr := rt.RoundTrip(httptest.NewRequest(method, url, nil))
		if rerr != nil {
			t.Fatal(rerr)
		}
		got, rerr := io.ReadAll(resp.Body)
		if rerr != nil || !bytes.Equal(got, body) {
			t.Fatalf("the caller read %q (%v), want the server's body %q", got, rerr, body)
		}
	}
	count := func(reason, verb, resource string) float64 {
		t.Helper()
		return scrapeMetric(t, fmt.Sprintf(`podtoip_controller_api_rejections_total{reason=%q,resource=%q,verb=%q}`, reason, resource, verb))
	}
	const create = "/apis/example.com/v1/namespaces/ns1/podtoips"
	terminatingBefore, quotaBefore := count(rejectNamespaceTerminating, "create", testCRD.Resource), count(rejectQuota, "create", testCRD.Resource)
	webhookBefore := count(rejectAdmissionWebhook, "update", testCRD.Resource)
	policyBefore := count(rejectAdmissionPolicy, "update", testCRD.Resource)

	for range 3 {
		call("POST", create, namespaceTerminating("ns1"), false)
		call("POST", create, apierrors.NewForbidden(podtoipsGR, "p1", errors.New("exceeded quota: q, requested: count/podtoips.example.com=1, used: count/podtoips.example.com=0, limited: count/podtoips.example.com=0")), false)
		call("PUT", create+"/p1", webhookDenial("validation.gatekeeper.sh", "no"), false)
		call("PUT", create+"/p1", apierrors.NewForbidden(podtoipsGR, "p1", errors.New("ValidatingAdmissionPolicy 'podtoip-controller' with binding 'podtoip-controller' denied request: only podtoip-controller creates PodToIps")), false)
	}
	if err := a.Check(); err != nil {
		t.Errorf("Check() after rejections that are not about permissions = %v, want nil", err)
	}
	if d := count(rejectNamespaceTerminating, "create", testCRD.Resource) - terminatingBefore; d != 3 {
		t.Errorf("namespace_terminating rejections counted %v, want 3", d)
	}
	if d := count(rejectQuota, "create", testCRD.Resource) - quotaBefore; d != 3 {
		t.Errorf("quota rejections counted %v, want 3", d)
	}
	if d := count(rejectAdmissionWebhook, "update", testCRD.Resource) - webhookBefore; d != 3 {
		t.Errorf("admission_webhook rejections counted %v, want 3", d)
	}
	if d := count(rejectAdmissionPolicy, "update", testCRD.Resource) - policyBefore; d != 3 {
		t.Errorf("admission_policy rejections counted %v, want 3", d)
	}
	out := logs()
	for _, want := range []string{`reason="namespace terminating" call="create podtoips"`, `reason="quota" call="create podtoips"`, `reason="admission webhook" call="update podtoips"`,
		`The ValidatingAdmissionPolicy podtoip-controller refuses the controller's writes`} {
		if n := strings.Count(out, want); n != 1 {
			t.Errorf("%d log lines with %s, want 1:\n%s", n, want, out)
		}
	}
	// A new episode after a quiet period is logged again.
	*now = now.Add(rejectionLogQuiet + time.Second)
	call("POST", create, namespaceTerminating("ns2"), true)
	if n := strings.Count(logs(), `reason="namespace terminating"`); n != 2 {
		t.Errorf("%d log lines about terminating namespaces after a quiet period, want 2", n)
	}

	// The authorizer's refusal, in either encoding, still fails readiness.
	call("GET", "/api/v1/pods?limit=500", authzDenial(podsGR, "", "list", "", ""), true)
	call("POST", create, authzDenial(podtoipsGR, "", "create", "ns1", ""), false)
	err := a.Check()
	if err == nil || !strings.Contains(err.Error(), "get/list pods (403 Forbidden)") || !strings.Contains(err.Error(), "create podtoips (403 Forbidden)") ||
		!strings.Contains(err.Error(), "artifacts/rbac.yaml") {
		t.Errorf("Check() after authorizer refusals = %v, want both named", err)
	}
}

// TestAccessMonitorUnreachable walks through an outage on a fake clock:
// failures within the grace leave the controller ready, past it readiness
// fails, and the first answer brings it back. Each transition is logged
// once.
func TestAccessMonitorUnreachable(t *testing.T) {
	a, now, logs := testMonitor(t)
	refused := fmt.Errorf("dial tcp 127.0.0.1:6443: %w", syscall.ECONNREFUSED)
	var fail bool
	rt := a.Wrap(roundTripFunc(func(*http.Request) (*http.Response, error) {
		if fail {
			return nil, refused
		}
		return respond(http.StatusOK), nil
	}))
	get := func(ctx context.Context) {
		t.Helper()
		_, _ = rt.RoundTrip(httptest.NewRequestWithContext(ctx, "GET", "/api/v1/pods", nil))
	}
	get(t.Context())
	fail = true
	*now = now.Add(time.Minute) // a long idle time since the last answer
	get(t.Context())
	if err := a.Check(); err != nil {
		t.Fatalf("Check() right after a failure = %v; a single failure must not make the controller unready", err)
	}
	*now = now.Add(unreachableGrace - time.Second)
	get(t.Context())
	if err := a.Check(); err != nil {
		t.Fatalf("Check() within the grace = %v, want nil", err)
	}
	*now = now.Add(2 * time.Second)
	if err := a.Check(); err == nil || !strings.Contains(err.Error(), "the API server has been unreachable for 16s") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Check() past the grace = %v, want unreachable for 16s with the last error", err)
	}
	_ = a.Check()
	get(t.Context())
	if n := strings.Count(logs(), "Cannot reach the API server"); n != 1 {
		t.Errorf("outage logged %d times, want once:\n%s", n, logs())
	}

	// Requests cancelled by their callers say nothing about the server.
	fail = false
	get(t.Context())
	if err := a.Check(); err != nil {
		t.Fatalf("Check() after an answer = %v, want nil", err)
	}
	if n := strings.Count(logs(), "The API server answers again"); n != 1 {
		t.Errorf("recovery logged %d times, want once:\n%s", n, logs())
	}
	fail = true
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	get(ctx)
	*now = now.Add(time.Hour)
	if err := a.Check(); err != nil {
		t.Fatalf("Check() after a cancelled request = %v, want nil", err)
	}

	// A request sent before the last answer, failing now, dates the outage
	// from that answer, not from when it was sent.
	b, bnow, _ := testMonitor(t)
	slow := b.Wrap(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Path == "/slow" {
			*bnow = bnow.Add(time.Minute) // an answer comes meanwhile
			b.reached()
			*bnow = bnow.Add(time.Second)
			return nil, refused
		}
		return respond(http.StatusOK), nil
	}))
	_, _ = slow.RoundTrip(httptest.NewRequest("GET", "/slow", nil))
	if err := b.Check(); err != nil {
		t.Fatalf("Check() = %v: the outage is dated from the request's start, not the last answer", err)
	}
}

// TestAccessMonitorCRDMissing: a 404 listing or watching podtoips means the
// CRD is gone; readiness fails naming it, until podtoips work again. A 404
// on one object is an ordinary answer.
func TestAccessMonitorCRDMissing(t *testing.T) {
	a, _, logs := testMonitor(t)
	req := func(method, url string) *http.Request { return httptest.NewRequest(method, url, nil) }
	a.record(req("DELETE", "/apis/example.com/v1/namespaces/ns/podtoips/p1"), respond(http.StatusNotFound))
	a.record(req("PUT", "/apis/example.com/v1/namespaces/ns/podtoips/p1"), respond(http.StatusNotFound))
	a.record(req("GET", "/apis/example.com/v1/namespaces/ns/podtoips/p1"), respond(http.StatusNotFound))
	a.record(req("GET", "/api/v1/pods"), respond(http.StatusNotFound))
	if err := a.Check(); err != nil {
		t.Fatalf("Check() after 404s on objects = %v, want nil", err)
	}
	a.record(req("GET", "/apis/example.com/v1/podtoips?limit=500"), respond(http.StatusNotFound))
	a.record(req("GET", "/apis/example.com/v1/podtoips?watch=true"), respond(http.StatusNotFound))
	if err := a.Check(); err == nil || err.Error() != testCRD.missing().Error() {
		t.Fatalf("Check() after a 404 listing podtoips = %v, want %q", err, testCRD.missing())
	}
	a.record(req("GET", "/api/v1/pods"), respond(http.StatusOK))
	if err := a.Check(); err == nil {
		t.Fatal("Check() = nil after a success on pods; only podtoips tell the CRD is back")
	}
	a.record(req("GET", "/apis/example.com/v1/namespaces/ns/podtoips"), respond(http.StatusOK))
	if err := a.Check(); err != nil {
		t.Fatalf("Check() after podtoips are listed again = %v, want nil", err)
	}
	out := logs()
	if strings.Count(out, "The PodToIp API is no longer served") != 1 || strings.Count(out, "The PodToIp API is served again") != 1 ||
		!strings.Contains(out, "kubectl apply -f artifacts/crd.yaml") {
		t.Errorf("want one line when the API goes, naming how to reinstall the CRD, and one when it is back:\n%s", out)
	}
}

// scrapeMetric reads one series from /metrics as Prometheus serves it; 0
// if absent.
func scrapeMetric(t *testing.T, series string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	legacyregistry.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				t.Fatalf("series %s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
