package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

func statusBody(code int, reason, message string) string {
	return fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":%q,"reason":%q,"code":%d}`, message, reason, code)
}

// TestListErrors: each way a LIST of PodToIps fails says what to do, and
// exits 3.
func TestListErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail failure
		want string
	}{
		{"forbidden", failure{403, statusBody(403, "Forbidden", `podtoips.example.com is forbidden: User "dev" cannot list resource "podtoips" in API group "example.com" at the cluster scope`)},
			`error: listing PodToIps in all namespaces is forbidden: podtoips.example.com is forbidden: User "dev" cannot list resource "podtoips" in API group "example.com" at the cluster scope; ask for the ClusterRole podtoip-controller-view, or pass -n for a namespace you may read`},
		{"not served", failure{404, "404 page not found\n"},
			"error: the API server does not serve PodToIps (the server could not find the requested resource): install the CRDs with 'kubectl apply -f artifacts/crd.yaml' and run podtoip-controller"},
		{"no selectable field", failure{400, statusBody(400, "BadRequest", `Unable to find "example.com/v1, Resource=podtoips" that match label selector "", field selector "podIPv4=10.244.1.7": field label not supported: podIPv4`)},
			`error: the API server cannot select PodToIps by podIPv4=10.244.1.7 (Unable to find "example.com/v1, Resource=podtoips" that match label selector "", field selector "podIPv4=10.244.1.7": field label not supported: podIPv4): it needs Kubernetes 1.32 or later and the current CRD: kubectl apply -f artifacts/crd.yaml`},
		{"unauthorized", failure{401, statusBody(401, "Unauthorized", "Unauthorized")},
			"error: listing PodToIps in all namespaces with podIPv4=10.244.1.7: Unauthorized; the API server did not accept the credentials: log in again, or check --kubeconfig and --context"},
		{"server error", failure{500, statusBody(500, "InternalError", "etcdserver: request timed out, possibly due to previous leader failure")},
			"error: listing PodToIps in all namespaces with podIPv4=10.244.1.7: etcdserver: request timed out, possibly due to previous leader failure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newFakeAPI(t)
			api.fail["podtoips"] = tc.fail
			out, errOut, code := runPtp(t, api, testNow, "who-has", "10.244.1.7")
			if out != "" || errOut != tc.want+"\n" || code != exitAPI {
				t.Errorf("who-has printed %q, stderr\n%q, exit %d; want\n%q, exit 3", out, errOut, code, tc.want)
			}
		})
	}
}

func TestUnreachable(t *testing.T) {
	_, errOut, code := runPtp(t, nil, testNow, "conflicts")
	if code != exitAPI || !strings.HasPrefix(errOut, "error: listing PodToIps in all namespaces with conflict=true: Get \"http://127.0.0.1:1/apis/example.com/v1/podtoips?") ||
		!strings.HasSuffix(errOut, "; check that the cluster is reachable (kubectl cluster-info)\n") {
		t.Errorf("conflicts against nothing: stderr %q, exit %d", errOut, code)
	}
}

func TestBadKubeconfig(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(kubeconfig, []byte("this: [is not a kubeconfig"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, stderr bytes.Buffer
	code := run(t.Context(), []string{"who-has", "10.0.0.1", "--kubeconfig", kubeconfig}, genericiooptions.IOStreams{Out: &out, ErrOut: &stderr}, time.Now)
	errOut := stderr.String()
	if code != exitAPI || !strings.HasPrefix(errOut, "error: reading the kubeconfig: ") || !strings.Contains(errOut, "check --kubeconfig, $KUBECONFIG and --context") {
		t.Errorf("who-has with a broken kubeconfig: stderr %q, exit %d", errOut, code)
	}
}

func TestObjectMissing(t *testing.T) {
	gr := schema.GroupResource{Group: "example.com", Resource: "iphistories"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"the object", apierrors.NewNotFound(gr, "10.0.0.1"), true},
		{"a plain-text 404", apierrors.NewGenericServerResponse(404, "GET", gr, "10.0.0.1", "404 page not found", 0, true), false},
		{"a Status without details", &apierrors.StatusError{ErrStatus: metav1.Status{Reason: metav1.StatusReasonNotFound, Code: 404}}, false},
		{"forbidden", apierrors.NewForbidden(gr, "10.0.0.1", errors.New("no")), false},
		{"not an API error", errors.New("EOF"), false},
		{"wrapped", fmt.Errorf("get: %w", apierrors.NewNotFound(gr, "10.0.0.1")), true},
	} {
		if got := objectMissing(tc.err); got != tc.want {
			t.Errorf("%s: objectMissing = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestExplainCommon(t *testing.T) {
	for _, tc := range []struct {
		err    error
		suffix string
	}{
		{context.DeadlineExceeded, "; the API server did not answer in time: retry, or raise --request-timeout"},
		{apierrors.NewTimeoutError("slow", 1), "; the API server did not answer in time: retry, or raise --request-timeout"},
		{apierrors.NewConflict(schema.GroupResource{}, "x", errors.New("c")), "Operation cannot be fulfilled on  \"x\": c"},
	} {
		if got := explainCommon(tc.err); !strings.HasSuffix(got.Error(), tc.suffix) || !errors.Is(got, tc.err) {
			t.Errorf("explainCommon(%v) = %q, want ...%q", tc.err, got, tc.suffix)
		}
	}
}
