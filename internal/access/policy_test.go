package access

import (
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
				t.Fatal("bound before any check")
			}
			p.Check(t.Context())
			if p.Bound() != tc.bound {
				t.Errorf("Bound() = %v, want %v (%s)", p.Bound(), tc.bound, p.missing(t.Context()))
			}
		})
	}
}
