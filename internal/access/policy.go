package access

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	admissionlisters "k8s.io/client-go/listers/admissionregistration/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// The admission policies of artifacts/policy.yaml, each bound under its
// own name: one keeps everyone but the controller from writing the
// mirrors' answers, the other from writing the history. These are the
// shipped names; an overlay may rename them (namePrefix:), so the live
// objects are found by PolicyLabel, whose value is the shipped name.
var policyNames = []string{"podtoip-controller", "podtoip-controller-history"}

// PolicyLabel marks each shipped policy and binding with the shipped
// policy's name, which kustomize's name transformers leave alone: a
// namePrefix overlay renames the objects (and the bindings' policyName),
// not their labels.
const PolicyLabel = "podtoip.example.com/policy"

// Policy follows whether the admission policies are in force: each policy
// and a binding of it exist and are as strong as the ones this version
// ships (artifacts/policy.yaml, built in; InForce, the comparison
// `kubectl ptp check` makes too). Nothing else shows it: without them, or
// with a validation removed or the binding narrowed, the writes they no
// longer refuse are admitted and nothing fails; and the controller trusts
// the mirrors it has not written since it started only while they are in
// force. It watches the policies and bindings labelled PolicyLabel (a
// list and watch of each kind, with a label selector), whatever they are
// named, so it knows at once when one is deleted or renamed. Until its
// watches have synced, or when it may not read them, it counts the
// policies as not in force, since that proves nothing.
type Policy struct {
	// informers are the two watches (policies, bindings): built one by
	// one, as client-go's informer factory would link an informer for
	// every API group into the binary.
	informers []cache.SharedIndexInformer
	policies  admissionlisters.ValidatingAdmissionPolicyLister
	bindings  admissionlisters.ValidatingAdmissionPolicyBindingLister
	synced    []cache.InformerSynced
	bound     atomic.Bool
	// shipped are the policies built in; shippedErr says why not (a
	// broken build), and keeps the policies counted as not in force.
	shipped    map[string]Shipped
	shippedErr error
	// exempt is who the exemption must name (see NewPolicy).
	exempt string

	mu     sync.Mutex
	was    string // the last reason logged; "" for in force
	logger klog.Logger
}

// policySyncWait bounds how long Start waits for the first read, so that
// the first reconciles know; past it they count the policies as not in
// force until the caches fill.
const policySyncWait = 10 * time.Second

// NewPolicy returns a Policy over kube's admission policies; Start runs it.
//
// exempt is the username the controller runs as: the policies' exemption
// must name it. "" accepts the exemption of any one ServiceAccount, for a
// controller that could not learn who it is.
func NewPolicy(kube kubernetes.Interface, exempt string) *Policy {
	p := &Policy{was: "unchecked", logger: klog.Background(), exempt: exempt}
	p.shipped, p.shippedErr = ShippedPolicies()
	api := kube.AdmissionregistrationV1()
	policies := labelledInformer(kube, api.ValidatingAdmissionPolicies(), &admissionv1.ValidatingAdmissionPolicy{})
	bindings := labelledInformer(kube, api.ValidatingAdmissionPolicyBindings(), &admissionv1.ValidatingAdmissionPolicyBinding{})
	p.policies = admissionlisters.NewValidatingAdmissionPolicyLister(policies.GetIndexer())
	p.bindings = admissionlisters.NewValidatingAdmissionPolicyBindingLister(bindings.GetIndexer())
	p.informers = []cache.SharedIndexInformer{policies, bindings}
	for _, inf := range p.informers {
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { p.check() }, UpdateFunc: func(any, any) { p.check() }, DeleteFunc: func(any) { p.check() },
		})
		p.synced = append(p.synced, inf.HasSynced)
	}
	return p
}

// labelledInformer is an informer of the objects client lists and
// watches that carry PolicyLabel, whatever they are named.
func labelledInformer[L runtime.Object](kube kubernetes.Interface, client interface {
	List(context.Context, metav1.ListOptions) (L, error)
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
}, obj runtime.Object) cache.SharedIndexInformer {
	return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = PolicyLabel
			return client.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = PolicyLabel
			return client.Watch(ctx, o)
		},
	}, kube), obj, 0, cache.Indexers{})
}

// Bound reports whether the policies are in force, as last seen.
func (p *Policy) Bound() bool { return p.bound.Load() }

// Start watches the policies until ctx ends, and waits (at most
// policySyncWait) for the first read.
func (p *Policy) Start(ctx context.Context) {
	p.mu.Lock()
	p.logger = klog.FromContext(ctx)
	p.mu.Unlock()
	for _, inf := range p.informers {
		go inf.RunWithContext(ctx)
	}
	syncCtx, cancel := context.WithTimeout(ctx, policySyncWait)
	defer cancel()
	cache.WaitForCacheSync(syncCtx.Done(), p.synced...)
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
	if p.shippedErr != nil {
		return p.shippedErr.Error()
	}
	for _, synced := range p.synced {
		if !synced() {
			return "the admission policies and bindings labelled " + PolicyLabel + " are not read yet (the controller needs list and watch on them)"
		}
	}
	policies, err := p.policies.List(labels.Everything())
	if err != nil {
		return err.Error()
	}
	bindings, err := p.bindings.List(labels.Everything())
	if err != nil {
		return err.Error()
	}
	for _, name := range policyNames {
		if f := InForce(name, p.shipped[name], policies, bindings, p.exempt); f.Why != "" {
			return f.Why
		}
	}
	return ""
}

// Found is what InForce found of one shipped policy: the live policy and
// binding that enforce it, or why none does.
type Found struct {
	Policy  *admissionv1.ValidatingAdmissionPolicy
	Binding *admissionv1.ValidatingAdmissionPolicyBinding
	// PolicyWhy and BindingWhy say what is wrong with the policy, or with
	// its binding; Why is the first of them, "" when it is in force.
	PolicyWhy, BindingWhy, Why string
}

// InForce finds, among live policies and bindings, the ones labelled
// PolicyLabel=name (the shipped policy name, whatever the live objects
// are called) and reports whether one such policy is as strong as the
// shipped one (PolicyWeakenings, with exempt) and bound by one such
// binding as strong as the shipped one (BindingWeakenings, the binding
// naming that live policy). When several are labelled alike, any one
// pair in force suffices (more bindings only add refusals); otherwise it
// names what is wrong with the first, by name.
func InForce(name string, shipped Shipped, policies []*admissionv1.ValidatingAdmissionPolicy, bindings []*admissionv1.ValidatingAdmissionPolicyBinding, exempt string) Found {
	byName := func(a, b metav1.Object) int { return strings.Compare(a.GetName(), b.GetName()) }
	var ps []*admissionv1.ValidatingAdmissionPolicy
	for _, p := range policies {
		if p.Labels[PolicyLabel] == name {
			ps = append(ps, p)
		}
	}
	slices.SortFunc(ps, func(a, b *admissionv1.ValidatingAdmissionPolicy) int { return byName(a, b) })
	var bs []*admissionv1.ValidatingAdmissionPolicyBinding
	for _, b := range bindings {
		if b.Labels[PolicyLabel] == name {
			bs = append(bs, b)
		}
	}
	slices.SortFunc(bs, func(a, b *admissionv1.ValidatingAdmissionPolicyBinding) int { return byName(a, b) })
	if len(ps) == 0 {
		why := fmt.Sprintf("no ValidatingAdmissionPolicy labelled %s=%s: the policy %s is missing", PolicyLabel, name, name)
		return Found{PolicyWhy: why, Why: why}
	}
	var first *Found
	for _, p := range ps {
		f := Found{Policy: p}
		if weaker := PolicyWeakenings(shipped.Policy, p, exempt); len(weaker) > 0 {
			f.PolicyWhy = fmt.Sprintf("ValidatingAdmissionPolicy %s is weaker than the one this version ships: %s", p.Name, strings.Join(weaker, "; "))
		}
		// The shipped binding names the shipped policy; compared with
		// this one, it names p, as a rename carries it.
		want := shipped.Binding.DeepCopy()
		want.Spec.PolicyName = p.Name
		for _, b := range bs {
			if b.Spec.PolicyName != p.Name {
				continue
			}
			weaker := BindingWeakenings(want, b)
			if len(weaker) == 0 {
				f.Binding, f.BindingWhy = b, ""
				break
			}
			if f.Binding == nil && f.BindingWhy == "" {
				f.Binding = b
				f.BindingWhy = fmt.Sprintf("ValidatingAdmissionPolicyBinding %s is weaker than the one this version ships: %s", b.Name, strings.Join(weaker, "; "))
			}
		}
		if f.Binding == nil {
			var elsewhere []string
			for _, b := range bs {
				elsewhere = append(elsewhere, fmt.Sprintf("ValidatingAdmissionPolicyBinding %s binds %q, not %s", b.Name, b.Spec.PolicyName, p.Name))
			}
			f.BindingWhy = fmt.Sprintf("no ValidatingAdmissionPolicyBinding labelled %s=%s binds ValidatingAdmissionPolicy %s: it is not enforced, and anyone RBAC lets write may forge what it protects",
				PolicyLabel, name, p.Name)
			if len(elsewhere) > 0 {
				f.BindingWhy += " (" + strings.Join(elsewhere, "; ") + ")"
			}
		}
		f.Why = cmp.Or(f.PolicyWhy, f.BindingWhy)
		if f.Why == "" {
			return f
		}
		if first == nil {
			first = &f
		}
	}
	return *first
}
