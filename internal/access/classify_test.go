package access

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
)

// testCRD is the controller's own.
var testCRD = CRD{
	Kind:         "PodToIp",
	GroupVersion: schema.GroupVersion{Group: "example.com", Version: "v1"},
	Resource:     "podtoips",
	Name:         "podtoips.example.com",
	InstallHint:  "kubectl apply -f artifacts/crd.yaml",
	RBAC:         "artifacts/rbac.yaml",
}

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

var (
	podsGR     = schema.GroupResource{Resource: "pods"}
	podtoipsGR = schema.GroupResource{Group: testCRD.GroupVersion.Group, Resource: testCRD.Resource}
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
	if err := protobuf.NewSerializer(statusScheme, statusScheme).Encode(&s, &buf); err != nil {
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
		{"admission policy", apierrors.NewForbidden(podtoipsGR, "p1", errors.New("ValidatingAdmissionPolicy 'deny' with binding 'deny' denied request: no")), rejectAdmissionPolicy},
		{"webhook quoting a policy", webhookDenial("w.example.com", "ValidatingAdmissionPolicy 'x' denied"), rejectAdmissionWebhook},
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
