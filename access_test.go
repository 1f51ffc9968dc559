package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2/ktesting"
)

func TestParsePath(t *testing.T) {
	for path, want := range map[string][2]string{
		"/api/v1/pods":                                   {"pods", ""},
		"/api/v1/namespaces/ns1/pods/p1":                 {"pods", "p1"},
		"/api/v1/namespaces/ns1/pods/p1/status":          {"pods", "p1"},
		"/apis/example.com/v1/podtoips":                  {"podtoips", ""},
		"/apis/example.com/v1/namespaces/ns1/podtoips":   {"podtoips", ""},
		"/apis/example.com/v1/namespaces/ns1/podtoips/x": {"podtoips", "x"},
		"/api/v1/namespaces/ns1":                         {"namespaces", "ns1"},
		"/apis/example.com/v1":                           {"", ""},
		"/version":                                       {"", ""},
		"/":                                              {"", ""},
	} {
		if r, n := parsePath(path); r != want[0] || n != want[1] {
			t.Errorf("parsePath(%q) = %q, %q, want %q, %q", path, r, n, want[0], want[1])
		}
	}
}

// testTracker returns a tracker on a settable clock, logging into a buffer.
func testTracker(t *testing.T) (*accessTracker, *time.Time, func() string) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	a := newAccessTracker(context.Background(), "pods", "podtoips")
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

func TestAccessTracker(t *testing.T) {
	a, now, _ := testTracker(t)
	req := func(method, url string) *http.Request { return httptest.NewRequest(method, url, nil) }

	a.record(req("GET", "/api/v1/pods?watch=true"), respond(http.StatusOK))
	a.record(req("POST", "/api/v1/namespaces/ns/events"), forbidden(t, authzDenial(schema.GroupResource{Resource: "events"}, "", "create", "ns", ""), false)) // not watched
	a.record(req("GET", "/api/v1/pods"), respond(http.StatusForbidden))                                                                                       // no Status: not the authorizer
	a.record(req("GET", "/api/v1/pods"), respond(http.StatusInternalServerError))                                                                             // not about access
	if err := a.check(); err != nil {
		t.Fatalf("check() = %v, want nil", err)
	}

	a.record(req("GET", "/api/v1/pods?limit=500"), forbidden(t, authzDenial(podsGR, "", "list", "", ""), true))
	a.record(req("POST", "/apis/example.com/v1/namespaces/ns/podtoips"), respond(http.StatusUnauthorized))
	err := a.check()
	if err == nil || !strings.Contains(err.Error(), "get/list pods (403 Forbidden)") || !strings.Contains(err.Error(), "create podtoips (401 Unauthorized)") {
		t.Fatalf("check() = %v, want both refusals named", err)
	}

	// A success of the same call clears it; the other stays.
	a.record(req("GET", "/api/v1/pods"), respond(http.StatusOK))
	if err := a.check(); err == nil || strings.Contains(err.Error(), "get/list pods") {
		t.Fatalf("check() = %v, want only the create refusal", err)
	}

	// A refusal not seen again for denialTTL stops counting.
	*now = now.Add(denialTTL + time.Second)
	if err := a.check(); err != nil {
		t.Fatalf("check() after the TTL = %v, want nil", err)
	}
}

var (
	podsGR     = schema.GroupResource{Resource: "pods"}
	podtoipsGR = schema.GroupResource{Group: GroupVersion.Group, Resource: Resource}
)

// The 403s the API server answers, built the way it builds them: the
// authorizer's (k8s.io/apiserver responsewriters.Forbidden), and the
// admission plugins' (admission.NewForbidden around their own errors, the
// webhook dispatcher's ToStatusErr).
func authzDenial(gr schema.GroupResource, name, verb, ns, reason string) *apierrors.StatusError {
	scope := fmt.Sprintf("in the namespace %q", ns)
	if ns == "" {
		scope = "at the cluster scope"
	}
	msg := fmt.Sprintf("User %q cannot %s resource %q in API group %q %s", "system:serviceaccount:podtoip-system:podtoip-controller", verb, gr.Resource, gr.Group, scope)
	if reason != "" {
		msg += ": " + reason
	}
	return apierrors.NewForbidden(gr, name, errors.New(msg))
}

func namespaceTerminating(ns string) *apierrors.StatusError {
	err := apierrors.NewForbidden(podtoipsGR, "p1", fmt.Errorf("unable to create new content in namespace %s because it is being terminated", ns))
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
		Type: corev1.NamespaceTerminatingCause, Message: fmt.Sprintf("namespace %s is being terminated", ns), Field: "metadata.namespace",
	})
	return err
}

func webhookDenial(webhook, msg string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
		Message: fmt.Sprintf("admission webhook %q denied the request: %s", webhook, msg),
	}}
}

// encodeStatus renders err's Status as the API server sends it, in JSON or
// in protobuf, with the content type to go with it.
func encodeStatus(t *testing.T, err *apierrors.StatusError, proto bool) ([]byte, string) {
	t.Helper()
	s := err.Status()
	s.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	if !proto {
		b, err := json.Marshal(&s)
		if err != nil {
			t.Fatal(err)
		}
		return b, "application/json"
	}
	var buf bytes.Buffer
	if err := protobuf.NewSerializer(scheme, scheme).Encode(&s, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), "application/vnd.kubernetes.protobuf"
}

// TestClassifyForbidden checks that only the authorizer's 403s count as
// missing permissions, whatever the encoding, and that the others are told
// apart by reason.
func TestClassifyForbidden(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  *apierrors.StatusError
		want string // "" for an authorization refusal
	}{
		{"authz namespaced create", authzDenial(podtoipsGR, "", "create", "ns1", ""), ""},
		{"authz cluster-scoped list", authzDenial(podsGR, "", "list", "", ""), ""},
		{"authz with the authorizer's reason", authzDenial(podtoipsGR, "p1", "update", "ns1", `RBAC: clusterrole.rbac.authorization.k8s.io "podtoip-controller" not found`), ""},
		{"authz on a path", apierrors.NewForbidden(schema.GroupResource{}, "", errors.New(`User "bob" cannot get path "/apis/example.com/v1"`)), ""},
		{"namespace terminating", namespaceTerminating("ns1"), rejectNamespaceTerminating},
		{"quota exceeded", apierrors.NewForbidden(podtoipsGR, "p1", errors.New("exceeded quota: no-mirrors, requested: count/podtoips.example.com=1, used: count/podtoips.example.com=0, limited: count/podtoips.example.com=0")), rejectQuota},
		{"quota status unknown", apierrors.NewForbidden(podtoipsGR, "p1", errors.New("status unknown for quota: no-mirrors, resources: count/podtoips.example.com")), rejectQuota},
		{"gatekeeper", webhookDenial("validation.gatekeeper.sh", "[no-ptp] PodToIps are not allowed in this namespace"), rejectAdmissionWebhook},
		{"kyverno", webhookDenial("validate.kyverno.svc-fail", "\n\nresource PodToIp/ns1/p1 was blocked due to the following policies\n\nno-ptp:\n  check: 'validation error: not allowed'"), rejectAdmissionWebhook},
		{"webhook quoting an authorizer message", webhookDenial("w.example.com", `User "bob" cannot create resource "podtoips" in API group "example.com" in the namespace "ns1"`), rejectAdmissionWebhook},
		{"admission policy", apierrors.NewForbidden(podtoipsGR, "p1", errors.New("ValidatingAdmissionPolicy 'deny' with binding 'deny' denied request: no")), rejectOther},
	} {
		for _, proto := range []bool{false, true} {
			body, _ := encodeStatus(t, tc.err, proto)
			got, msg := classifyForbidden(body)
			if got != tc.want {
				t.Errorf("%s (protobuf %v): reason %q, want %q; message %q", tc.name, proto, got, tc.want, msg)
			}
			if msg != tc.err.ErrStatus.Message {
				t.Errorf("%s (protobuf %v): message %q, want %q", tc.name, proto, msg, tc.err.ErrStatus.Message)
			}
		}
	}

	// Bodies that are not a whole Status fall back to the raw text.
	long := authzDenial(podtoipsGR, "", "create", "ns1", strings.Repeat("x", 2*statusPeekLimit))
	for _, proto := range []bool{false, true} {
		body, _ := encodeStatus(t, long, proto)
		if got, _ := classifyForbidden(body[:statusPeekLimit]); got != "" {
			t.Errorf("truncated authorizer denial (protobuf %v): reason %q, want an authorization refusal", proto, got)
		}
		body, _ = encodeStatus(t, namespaceTerminating("ns1"), proto)
		if got, _ := classifyForbidden(body[:len(body)-10]); got != rejectNamespaceTerminating {
			t.Errorf("truncated namespace-terminating rejection (protobuf %v): reason %q", proto, got)
		}
	}
	if got, _ := classifyForbidden([]byte("Forbidden\n")); got != rejectOther {
		t.Errorf("plain-text 403 from something that is not the API server: reason %q, want %q", got, rejectOther)
	}
}

// TestAccessTrackerRejections runs real 403 bodies through the transport:
// the caller still reads each body whole, only the authorizer's refusal
// makes readiness fail, and the others are counted by reason and logged
// once per reason and call.
func TestAccessTrackerRejections(t *testing.T) {
	a, now, logs := testTracker(t)
	var body []byte
	var contentType string
	rt := a.wrap(roundTripFunc(func(*http.Request) (*http.Response, error) {
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
	terminatingBefore, quotaBefore := count(rejectNamespaceTerminating, "create", Resource), count(rejectQuota, "create", Resource)
	webhookBefore := count(rejectAdmissionWebhook, "update", Resource)

	for range 3 {
		call("POST", create, namespaceTerminating("ns1"), false)
		call("POST", create, apierrors.NewForbidden(podtoipsGR, "p1", errors.New("exceeded quota: q, requested: count/podtoips.example.com=1, used: count/podtoips.example.com=0, limited: count/podtoips.example.com=0")), false)
		call("PUT", create+"/p1", webhookDenial("validation.gatekeeper.sh", "no"), false)
	}
	if err := a.check(); err != nil {
		t.Errorf("check() after rejections that are not about permissions = %v, want nil", err)
	}
	if d := count(rejectNamespaceTerminating, "create", Resource) - terminatingBefore; d != 3 {
		t.Errorf("namespace_terminating rejections counted %v, want 3", d)
	}
	if d := count(rejectQuota, "create", Resource) - quotaBefore; d != 3 {
		t.Errorf("quota rejections counted %v, want 3", d)
	}
	if d := count(rejectAdmissionWebhook, "update", Resource) - webhookBefore; d != 3 {
		t.Errorf("admission_webhook rejections counted %v, want 3", d)
	}
	out := logs()
	for _, want := range []string{`reason="namespace terminating" call="create podtoips"`, `reason="quota" call="create podtoips"`, `reason="admission webhook" call="update podtoips"`} {
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
	err := a.check()
	if err == nil || !strings.Contains(err.Error(), "get/list pods (403 Forbidden)") || !strings.Contains(err.Error(), "create podtoips (403 Forbidden)") ||
		!strings.Contains(err.Error(), "artifacts/rbac.yaml") {
		t.Errorf("check() after authorizer refusals = %v, want both named", err)
	}
}

// TestAccessTrackerUnreachable walks through an outage on a fake clock:
// failures within the grace leave the controller ready, past it readiness
// fails, and the first answer brings it back. Each transition is logged
// once.
func TestAccessTrackerUnreachable(t *testing.T) {
	a, now, logs := testTracker(t)
	refused := fmt.Errorf("dial tcp 127.0.0.1:6443: %w", syscall.ECONNREFUSED)
	var fail bool
	rt := a.wrap(roundTripFunc(func(*http.Request) (*http.Response, error) {
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
	if err := a.check(); err != nil {
		t.Fatalf("check() right after a failure = %v; a single failure must not make the controller unready", err)
	}
	*now = now.Add(unreachableGrace - time.Second)
	get(t.Context())
	if err := a.check(); err != nil {
		t.Fatalf("check() within the grace = %v, want nil", err)
	}
	*now = now.Add(2 * time.Second)
	if err := a.check(); err == nil || !strings.Contains(err.Error(), "the API server has been unreachable for 16s") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("check() past the grace = %v, want unreachable for 16s with the last error", err)
	}
	_ = a.check()
	get(t.Context())
	if n := strings.Count(logs(), "Cannot reach the API server"); n != 1 {
		t.Errorf("outage logged %d times, want once:\n%s", n, logs())
	}

	// Requests cancelled by their callers say nothing about the server.
	fail = false
	get(t.Context())
	if err := a.check(); err != nil {
		t.Fatalf("check() after an answer = %v, want nil", err)
	}
	if n := strings.Count(logs(), "The API server answers again"); n != 1 {
		t.Errorf("recovery logged %d times, want once:\n%s", n, logs())
	}
	fail = true
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	get(ctx)
	*now = now.Add(time.Hour)
	if err := a.check(); err != nil {
		t.Fatalf("check() after a cancelled request = %v, want nil", err)
	}

	// A request sent before the last answer, failing now, dates the outage
	// from that answer, not from when it was sent.
	b, bnow, _ := testTracker(t)
	slow := b.wrap(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Path == "/slow" {
			*bnow = bnow.Add(time.Minute) // an answer comes meanwhile
			b.reached()
			*bnow = bnow.Add(time.Second)
			return nil, refused
		}
		return respond(http.StatusOK), nil
	}))
	_, _ = slow.RoundTrip(httptest.NewRequest("GET", "/slow", nil))
	if err := b.check(); err != nil {
		t.Fatalf("check() = %v: the outage is dated from the request's start, not the last answer", err)
	}
}

// TestAccessTrackerCRDMissing: a 404 listing or watching podtoips means the
// CRD is gone; readiness fails naming it, until podtoips work again. A 404
// on one object is an ordinary answer.
func TestAccessTrackerCRDMissing(t *testing.T) {
	a, _, logs := testTracker(t)
	req := func(method, url string) *http.Request { return httptest.NewRequest(method, url, nil) }
	a.record(req("DELETE", "/apis/example.com/v1/namespaces/ns/podtoips/p1"), respond(http.StatusNotFound))
	a.record(req("PUT", "/apis/example.com/v1/namespaces/ns/podtoips/p1"), respond(http.StatusNotFound))
	a.record(req("GET", "/apis/example.com/v1/namespaces/ns/podtoips/p1"), respond(http.StatusNotFound))
	a.record(req("GET", "/api/v1/pods"), respond(http.StatusNotFound))
	if err := a.check(); err != nil {
		t.Fatalf("check() after 404s on objects = %v, want nil", err)
	}
	a.record(req("GET", "/apis/example.com/v1/podtoips?limit=500"), respond(http.StatusNotFound))
	a.record(req("GET", "/apis/example.com/v1/podtoips?watch=true"), respond(http.StatusNotFound))
	if err := a.check(); err == nil || err.Error() != errCRDMissing.Error() {
		t.Fatalf("check() after a 404 listing podtoips = %v, want %q", err, errCRDMissing)
	}
	a.record(req("GET", "/api/v1/pods"), respond(http.StatusOK))
	if err := a.check(); err == nil {
		t.Fatal("check() = nil after a success on pods; only podtoips tell the CRD is back")
	}
	a.record(req("GET", "/apis/example.com/v1/namespaces/ns/podtoips"), respond(http.StatusOK))
	if err := a.check(); err != nil {
		t.Fatalf("check() after podtoips are listed again = %v, want nil", err)
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
