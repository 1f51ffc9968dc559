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
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	admissionlisters "k8s.io/client-go/listers/admissionregistration/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// The admission policies of artifacts/policy.yaml, each bound under its
// own name: one keeps everyone but the controller from writing the
// mirrors' answers, the other from writing the history.
var policyNames = []string{"podtoip-controller", "podtoip-controller-history"}

// Policy follows whether the admission policies are in force: each policy
// and its binding exist, and the binding denies what the policy refuses.
// Nothing else shows it: without them every write is admitted and nothing
// fails. It watches the four objects by name (a list and watch each, with
// a metadata.name field selector, which RBAC's resourceNames can limit),
// so it knows at once when one is deleted, and an absent policy costs no
// request at all once watched. Until its watches have synced, or when it
// may not read them, it counts the policies as not in force, since that
// proves nothing.
type Policy struct {
	sources []policySource
	bound   atomic.Bool

	mu     sync.Mutex
	was    string // the last reason logged; "" for in force
	logger klog.Logger
}

// policySource is the cache of one policy and its binding, both named name.
type policySource struct {
	name     string
	factory  informers.SharedInformerFactory
	policies admissionlisters.ValidatingAdmissionPolicyLister
	bindings admissionlisters.ValidatingAdmissionPolicyBindingLister
	synced   []cache.InformerSynced
}

// policySyncWait bounds how long Start waits for the first read, so that
// the first reconciles know; past it they count the policies as not in
// force until the caches fill.
const policySyncWait = 10 * time.Second

// NewPolicy returns a Policy over kube's admission policies; Start runs it.
func NewPolicy(kube kubernetes.Interface) *Policy {
	p := &Policy{was: "unchecked", logger: klog.Background()}
	for _, name := range policyNames {
		f := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
		api := f.Admissionregistration().V1()
		src := policySource{name: name, factory: f,
			policies: api.ValidatingAdmissionPolicies().Lister(), bindings: api.ValidatingAdmissionPolicyBindings().Lister()}
		for _, inf := range []cache.SharedIndexInformer{api.ValidatingAdmissionPolicies().Informer(), api.ValidatingAdmissionPolicyBindings().Informer()} {
			_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc: func(any) { p.check() }, UpdateFunc: func(any, any) { p.check() }, DeleteFunc: func(any) { p.check() },
			})
			src.synced = append(src.synced, inf.HasSynced)
		}
		p.sources = append(p.sources, src)
	}
	return p
}

// Bound reports whether the policies are in force, as last seen.
func (p *Policy) Bound() bool { return p.bound.Load() }

// Start watches the policies until ctx ends, and waits (at most
// policySyncWait) for the first read.
func (p *Policy) Start(ctx context.Context) {
	p.mu.Lock()
	p.logger = klog.FromContext(ctx)
	p.mu.Unlock()
	var synced []cache.InformerSynced
	for _, src := range p.sources {
		src.factory.Start(ctx.Done())
		synced = append(synced, src.synced...)
	}
	syncCtx, cancel := context.WithTimeout(ctx, policySyncWait)
	defer cancel()
	cache.WaitForCacheSync(syncCtx.Done(), synced...)
	p.check()
}

// check reads the policies from the caches, and logs when the answer
// changes.
func (p *Policy) check() {
	why := p.missing()
	p.bound.Store(why == "")
	p.mu.Lock()
	defer p.mu.Unlock()
	if why == p.was {
		return
	}
	p.was = why
	if why == "" {
		p.logger.Info("The admission policies are in force: only this controller can write PodToIps and the history", "policies", policyNames)
		return
	}
	p.logger.Error(nil, "The admission policies are not in force: anyone with RBAC to write PodToIps or IPHistories can change the answers; "+
		"install them with 'kubectl apply -k artifacts/'", "reason", why)
}

// missing says why the policies are not in force, or "".
func (p *Policy) missing() string {
	for _, src := range p.sources {
		for _, synced := range src.synced {
			if !synced() {
				return fmt.Sprintf("the policy and binding %s are not read yet (the controller needs list and watch on them by name)", src.name)
			}
		}
		if _, err := src.policies.Get(src.name); err != nil {
			return fmt.Sprintf("ValidatingAdmissionPolicy %s: %v", src.name, err)
		}
		b, err := src.bindings.Get(src.name)
		if err != nil {
			return fmt.Sprintf("ValidatingAdmissionPolicyBinding %s: %v", src.name, err)
		}
		if why := bindingProblem(b, src.name); why != "" {
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
