package access

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// The admission policies of artifacts/policy.yaml, each bound under its
// own name: one keeps everyone but the controller from writing the
// mirrors' answers, the other from writing the history.
var policyNames = []string{"podtoip-controller", "podtoip-controller-history"}

// PolicyPeriod is how often Policy reads the policies again.
const PolicyPeriod = 30 * time.Second

// Policy follows whether the admission policies are in force: each policy
// and its binding exist, and the binding denies what the policy refuses.
// Nothing else shows it: without them every write is admitted and nothing
// fails. It reads the four objects by name (a get each, no watch), so the
// RBAC it needs names them; a refused read counts as not in force, since
// it proves nothing.
type Policy struct {
	kube  kubernetes.Interface
	bound atomic.Bool

	mu  sync.Mutex
	was string // the last reason logged; "" for in force
}

// NewPolicy returns a Policy that has not checked yet: not in force.
func NewPolicy(kube kubernetes.Interface) *Policy {
	return &Policy{kube: kube, was: "unchecked"}
}

// Bound reports whether the policies were in force at the last check.
func (p *Policy) Bound() bool { return p.bound.Load() }

// Start checks once, so that the first reconciles know, then every
// PolicyPeriod until ctx ends.
func (p *Policy) Start(ctx context.Context) {
	p.Check(ctx)
	go func() {
		_ = wait.PollUntilContextCancel(ctx, PolicyPeriod, false, func(ctx context.Context) (bool, error) {
			p.Check(ctx)
			return false, nil
		})
	}()
}

// Check reads the policies once, and logs when the answer changes.
func (p *Policy) Check(ctx context.Context) {
	why := p.missing(ctx)
	p.bound.Store(why == "")
	p.mu.Lock()
	defer p.mu.Unlock()
	if why == p.was {
		return
	}
	p.was = why
	logger := klog.FromContext(ctx)
	if why == "" {
		logger.Info("The admission policies are in force: only this controller can write PodToIps and the history", "policies", policyNames)
		return
	}
	logger.Error(nil, "The admission policies are not in force: anyone with RBAC to write PodToIps or IPHistories can change the answers; "+
		"install them with 'kubectl apply -f artifacts/policy.yaml'", "reason", why)
}

// missing says why the policies are not in force, or "".
func (p *Policy) missing(ctx context.Context) string {
	api := p.kube.AdmissionregistrationV1()
	for _, name := range policyNames {
		if _, err := api.ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{}); err != nil {
			return fmt.Sprintf("reading ValidatingAdmissionPolicy %s: %v", name, err)
		}
		b, err := api.ValidatingAdmissionPolicyBindings().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Sprintf("reading ValidatingAdmissionPolicyBinding %s: %v", name, err)
		}
		if why := bindingProblem(b, name); why != "" {
			return why
		}
	}
	return ""
}

// bindingProblem says why binding b does not enforce the policy named
// policy on every object, or "".
func bindingProblem(b *admissionv1.ValidatingAdmissionPolicyBinding, policy string) string {
	switch {
	case b.Spec.PolicyName != policy:
		return fmt.Sprintf("ValidatingAdmissionPolicyBinding %s binds policy %q, not %q", b.Name, b.Spec.PolicyName, policy)
	case !slices.Contains(b.Spec.ValidationActions, admissionv1.Deny):
		return fmt.Sprintf("ValidatingAdmissionPolicyBinding %s does not Deny (validationActions %v)", b.Name, b.Spec.ValidationActions)
	case narrows(b.Spec.MatchResources):
		return fmt.Sprintf("ValidatingAdmissionPolicyBinding %s narrows the objects it applies to (matchResources)", b.Name)
	}
	return ""
}

// narrows reports whether m leaves out some of the objects the policy
// matches; the API server fills in empty selectors when m is set.
func narrows(m *admissionv1.MatchResources) bool {
	if m == nil {
		return false
	}
	empty := func(s *metav1.LabelSelector) bool {
		return s == nil || (len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0)
	}
	return len(m.ResourceRules) > 0 || len(m.ExcludeResourceRules) > 0 || !empty(m.NamespaceSelector) || !empty(m.ObjectSelector)
}
