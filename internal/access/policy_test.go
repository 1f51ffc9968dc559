package access

import (
	"context"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
)

func shippedPolicies() []runtime.Object {
	var out []runtime.Object
	for _, name := range policyNames {
		out = append(out,
			&admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}},
			&admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}}})
	}
	return out
}

// TestPolicyBound checks what counts as in force: both policies and their
// bindings, each binding denying on every object its policy matches.
func TestPolicyBound(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(objs []runtime.Object) []runtime.Object
		bound bool
	}{
		{"as shipped", nil, true},
		{"binding missing", func(o []runtime.Object) []runtime.Object { return o[:3] }, false},
		{"policy missing", func(o []runtime.Object) []runtime.Object { return o[1:] }, false},
		{"audit only", func(o []runtime.Object) []runtime.Object {
			o[1].(*admissionv1.ValidatingAdmissionPolicyBinding).Spec.ValidationActions = []admissionv1.ValidationAction{admissionv1.Audit}
			return o
		}, false},
		{"binds another policy", func(o []runtime.Object) []runtime.Object {
			o[3].(*admissionv1.ValidatingAdmissionPolicyBinding).Spec.PolicyName = "other"
			return o
		}, false},
		{"narrowed to some namespaces", func(o []runtime.Object) []runtime.Object {
			o[1].(*admissionv1.ValidatingAdmissionPolicyBinding).Spec.MatchResources = &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}}}
			return o
		}, false},
		{"empty selectors, as defaulted", func(o []runtime.Object) []runtime.Object {
			o[1].(*admissionv1.ValidatingAdmissionPolicyBinding).Spec.MatchResources = &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{}, ObjectSelector: &metav1.LabelSelector{}}
			return o
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := shippedPolicies()
			if tc.edit != nil {
				objs = tc.edit(objs)
			}
			p := NewPolicy(fake.NewClientset(objs...))
			if p.Bound() {
				t.Fatal("bound before the policies were read")
			}
			p.Start(t.Context())
			if p.Bound() != tc.bound {
				t.Errorf("Bound() = %v, want %v (%s)", p.Bound(), tc.bound, p.missing())
			}
		})
	}
}

// TestPolicyFollowsChanges checks that a deleted binding, and one put back,
// are noticed from the watch, with no read of their own.
func TestPolicyFollowsChanges(t *testing.T) {
	kube := fake.NewClientset(shippedPolicies()...)
	p := NewPolicy(kube)
	p.Start(t.Context())
	if !p.Bound() {
		t.Fatalf("not bound as shipped: %s", p.missing())
	}
	bindings := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	b, err := bindings.Get(t.Context(), "podtoip-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := bindings.Delete(t.Context(), b.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitBound(t, p, false)
	b.ResourceVersion = ""
	if _, err := bindings.Create(t.Context(), b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitBound(t, p, true)
}

func waitBound(t *testing.T, p *Policy, want bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return p.Bound() == want, nil
	}); err != nil {
		t.Fatalf("Bound() stayed %v: %s", !want, p.missing())
	}
}
