package access

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
)

// shippedPolicies returns the policies and bindings of
// artifacts/policy.yaml, as kube-apiserver returns them: with its
// defaults filled in, which are no weakening.
func shippedPolicies(t *testing.T) []runtime.Object {
	t.Helper()
	shipped, err := ShippedPolicies()
	if err != nil {
		t.Fatal(err)
	}
	var out []runtime.Object
	for _, name := range policyNames {
		p, b := shipped[name].Policy.DeepCopy(), shipped[name].Binding.DeepCopy()
		equivalent, all := admissionv1.Equivalent, admissionv1.AllScopes
		mc := p.Spec.MatchConstraints
		mc.MatchPolicy, mc.NamespaceSelector, mc.ObjectSelector = &equivalent, &metav1.LabelSelector{}, &metav1.LabelSelector{}
		for i := range mc.ResourceRules {
			mc.ResourceRules[i].Scope = &all
		}
		out = append(out, p, b)
	}
	return out
}

// renamed gives the objects of shippedPolicies the prefix, as kustomize's
// namePrefix does: their names and the bindings' policyName.
func renamed(o []runtime.Object, prefix string) []runtime.Object {
	for _, obj := range o {
		switch x := obj.(type) {
		case *admissionv1.ValidatingAdmissionPolicy:
			x.Name = prefix + x.Name
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			x.Name = prefix + x.Name
			x.Spec.PolicyName = prefix + x.Spec.PolicyName
		}
	}
	return o
}

// The objects of shippedPolicies, by index.
func mirrorPolicyOf(o []runtime.Object) *admissionv1.ValidatingAdmissionPolicy {
	return o[0].(*admissionv1.ValidatingAdmissionPolicy)
}
func mirrorBindingOf(o []runtime.Object) *admissionv1.ValidatingAdmissionPolicyBinding {
	return o[1].(*admissionv1.ValidatingAdmissionPolicyBinding)
}
func historyPolicyOf(o []runtime.Object) *admissionv1.ValidatingAdmissionPolicy {
	return o[2].(*admissionv1.ValidatingAdmissionPolicy)
}

// TestPolicyBound checks what counts as in force: both policies and their
// bindings, each as strong as the shipped one: each binding denying on
// every object its policy matches, each policy matching every request the
// shipped one does, with every validation, failing closed. The exemption
// may name another ServiceAccount (an overlay in another namespace).
func TestPolicyBound(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(objs []runtime.Object) []runtime.Object
		// weaker is what missing() must name; "" for bound.
		weaker string
	}{
		{"as shipped", nil, ""},
		{"exempting the ServiceAccount of an overlay in another namespace", func(o []runtime.Object) []runtime.Object {
			c := &mirrorPolicyOf(o).Spec.MatchConditions[0]
			c.Expression = strings.Replace(c.Expression, `"podtoip-system"`, `"infra"`, 1)
			return o
		}, ""},
		{"another validation added", func(o []runtime.Object) []runtime.Object {
			p := mirrorPolicyOf(o)
			p.Spec.Validations = append(p.Spec.Validations, admissionv1.Validation{Expression: "true"})
			return o
		}, ""},
		{"binding missing", func(o []runtime.Object) []runtime.Object { return o[:3] }, "podtoip-controller-history"},
		{"policy missing", func(o []runtime.Object) []runtime.Object { return o[1:] }, "the policy podtoip-controller is missing"},
		// A namePrefix overlay renames the policies and the bindings'
		// policyName, and leaves their labels.
		{"renamed by a namePrefix overlay", func(o []runtime.Object) []runtime.Object { return renamed(o, "team-") }, ""},
		{"renamed, a binding still naming the old policy", func(o []runtime.Object) []runtime.Object {
			o = renamed(o, "team-")
			mirrorBindingOf(o).Spec.PolicyName = "podtoip-controller"
			return o
		}, "no ValidatingAdmissionPolicyBinding labelled podtoip.example.com/policy=podtoip-controller binds ValidatingAdmissionPolicy team-podtoip-controller"},
		{"a policy without its label", func(o []runtime.Object) []runtime.Object {
			delete(historyPolicyOf(o).Labels, PolicyLabel)
			return o
		}, "no ValidatingAdmissionPolicy labelled podtoip.example.com/policy=podtoip-controller-history"},
		{"audit only", func(o []runtime.Object) []runtime.Object {
			mirrorBindingOf(o).Spec.ValidationActions = []admissionv1.ValidationAction{admissionv1.Audit}
			return o
		}, "spec.validationActions [Audit] lack Deny"},
		{"warn only", func(o []runtime.Object) []runtime.Object {
			mirrorBindingOf(o).Spec.ValidationActions = []admissionv1.ValidationAction{admissionv1.Warn}
			return o
		}, "spec.validationActions [Warn] lack Deny"},
		{"binds another policy", func(o []runtime.Object) []runtime.Object {
			o[3].(*admissionv1.ValidatingAdmissionPolicyBinding).Spec.PolicyName = "other"
			return o
		}, "binds ValidatingAdmissionPolicy podtoip-controller-history: it is not enforced"},
		{"binding narrowed to some namespaces", func(o []runtime.Object) []runtime.Object {
			mirrorBindingOf(o).Spec.MatchResources = &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}}}
			return o
		}, "spec.matchResources.namespaceSelector is set"},
		{"binding with empty selectors, as defaulted", func(o []runtime.Object) []runtime.Object {
			mirrorBindingOf(o).Spec.MatchResources = &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{}, ObjectSelector: &metav1.LabelSelector{}}
			return o
		}, ""},
		{"a validation removed", func(o []runtime.Object) []runtime.Object {
			p := mirrorPolicyOf(o)
			p.Spec.Validations = slices.Delete(p.Spec.Validations, 4, 5)
			return o
		}, "spec.validations[4] (only podtoip-controller adds finalizers"},
		{"the answer fields' comparison loosened", func(o []runtime.Object) []runtime.Object {
			v := &mirrorPolicyOf(o).Spec.Validations[1]
			v.Expression = strings.Replace(v.Expression, "object.?terminating == oldObject.?terminating &&", "", 1)
			return o
		}, "spec.validations[1] (the fields of a PodToIp"},
		{"a variable changed", func(o []runtime.Object) []runtime.Object {
			mirrorPolicyOf(o).Spec.Variables[0].Expression = "0"
			return o
		}, "spec.variables[metadataBytes] is missing or changed"},
		{"failing open", func(o []runtime.Object) []runtime.Object {
			ignore := admissionv1.Ignore
			mirrorPolicyOf(o).Spec.FailurePolicy = &ignore
			return o
		}, "spec.failurePolicy is Ignore"},
		{"matchConstraints narrowed to CREATE", func(o []runtime.Object) []runtime.Object {
			mirrorPolicyOf(o).Spec.MatchConstraints.ResourceRules[0].Operations = []admissionv1.OperationType{admissionv1.Create}
			return o
		}, "spec.matchConstraints.resourceRules no longer match UPDATE of podtoips "},
		{"matchConstraints narrowed to some namespaces", func(o []runtime.Object) []runtime.Object {
			mirrorPolicyOf(o).Spec.MatchConstraints.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}}
			return o
		}, "spec.matchConstraints.namespaceSelector is set"},
		{"the history policy without DELETE", func(o []runtime.Object) []runtime.Object {
			historyPolicyOf(o).Spec.MatchConstraints.ResourceRules[0].Operations = []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}
			return o
		}, "no longer match DELETE of iphistories "},
		{"the history policy without coverages", func(o []runtime.Object) []runtime.Object {
			historyPolicyOf(o).Spec.MatchConstraints.ResourceRules[0].Resources = []string{"iphistories", "iphistories/*"}
			return o
		}, "no longer match CREATE of iphistorycoverages "},
		{"the exemption broadened", func(o []runtime.Object) []runtime.Object {
			c := &mirrorPolicyOf(o).Spec.MatchConditions[0]
			c.Expression += ` && !request.userInfo.username.startsWith("tenant")`
			return o
		}, "spec.matchConditions[not-the-controller] is"},
		{"the exemption of a user", func(o []runtime.Object) []runtime.Object {
			mirrorPolicyOf(o).Spec.MatchConditions[0].Expression = `request.userInfo.username != "tenant"`
			return o
		}, "not the exemption of one ServiceAccount"},
		{"a matchCondition added", func(o []runtime.Object) []runtime.Object {
			p := mirrorPolicyOf(o)
			p.Spec.MatchConditions = append(p.Spec.MatchConditions, admissionv1.MatchCondition{Name: "only-default", Expression: `request.namespace == "default"`})
			return o
		}, "spec.matchConditions[only-default] is added"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := shippedPolicies(t)
			if tc.edit != nil {
				objs = tc.edit(objs)
			}
			p := NewPolicy(fake.NewClientset(objs...), "")
			if p.Bound() {
				t.Fatal("bound before the policies were read")
			}
			p.Start(t.Context())
			if got := p.missing(); p.Bound() != (tc.weaker == "") || !strings.Contains(got, tc.weaker) {
				t.Errorf("Bound() = %v (%s), want %v naming %q", p.Bound(), got, tc.weaker == "", tc.weaker)
			}
		})
	}
}

// TestPolicyExemptsTheControllersIdentity checks that a controller that
// knows who it runs as counts the policies in force only while their
// exemption names it: exempting another ServiceAccount lets that one
// forge the answers, and refuses the controller's own writes.
func TestPolicyExemptsTheControllersIdentity(t *testing.T) {
	const me = "system:serviceaccount:podtoip-system:podtoip-controller"
	p := NewPolicy(fake.NewClientset(shippedPolicies(t)...), me)
	p.Start(t.Context())
	if !p.Bound() {
		t.Errorf("the shipped policies, exempting %s, are not in force for it: %s", me, p.missing())
	}
	objs := shippedPolicies(t)
	c := &mirrorPolicyOf(objs).Spec.MatchConditions[0]
	c.Expression = strings.Replace(c.Expression, `"podtoip-controller"`, `"tenant-bot"`, 1)
	p = NewPolicy(fake.NewClientset(objs...), me)
	p.Start(t.Context())
	if got := p.missing(); p.Bound() || !strings.Contains(got, "exempts system:serviceaccount:podtoip-system:tenant-bot, not the controller's ServiceAccount "+me) {
		t.Errorf("a policy exempting another ServiceAccount: Bound() = %v (%s), want false naming both", p.Bound(), got)
	}
}

// TestPolicyFollowsChanges checks that a deleted binding, and one put back,
// are noticed from the watch, with no read of their own.
func TestPolicyFollowsChanges(t *testing.T) {
	kube := fake.NewClientset(shippedPolicies(t)...)
	p := NewPolicy(kube, "")
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
