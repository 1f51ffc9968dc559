package access

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
// and its binding exist and are as strong as the ones this version ships
// (artifacts/policy.yaml, built in; PolicyWeakenings and
// BindingWeakenings, the comparison `kubectl ptp check` makes too).
// Nothing else shows it: without them, or with a validation removed or
// the binding narrowed, the writes they no longer refuse are admitted and
// nothing fails; and the controller trusts the mirrors it has not written
// since it started only while they are in force. It watches the four objects by name (a list and watch each, with
// a metadata.name field selector, which RBAC's resourceNames can limit),
// so it knows at once when one is deleted, and an absent policy costs no
// request at all once watched. Until its watches have synced, or when it
// may not read them, it counts the policies as not in force, since that
// proves nothing.
type Policy struct {
	sources []policySource
	bound   atomic.Bool
	// shipped are the policies built in; shippedErr says why not (a
	// broken build), and keeps the policies counted as not in force.
	shipped    map[string]Shipped
	shippedErr error

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
	p.shipped, p.shippedErr = ShippedPolicies()
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
	if p.shippedErr != nil {
		return p.shippedErr.Error()
	}
	for _, src := range p.sources {
		for _, synced := range src.synced {
			if !synced() {
				return fmt.Sprintf("the policy and binding %s are not read yet (the controller needs list and watch on them by name)", src.name)
			}
		}
		live, err := src.policies.Get(src.name)
		if err != nil {
			return fmt.Sprintf("ValidatingAdmissionPolicy %s: %v", src.name, err)
		}
		b, err := src.bindings.Get(src.name)
		if err != nil {
			return fmt.Sprintf("ValidatingAdmissionPolicyBinding %s: %v", src.name, err)
		}
		shipped := p.shipped[src.name]
		// The exemption may name any one ServiceAccount: the controller
		// does not know which it runs as, and an overlay moves it.
		if weaker := PolicyWeakenings(shipped.Policy, live, ""); len(weaker) > 0 {
			return fmt.Sprintf("ValidatingAdmissionPolicy %s is weaker than the one this version ships: %s", src.name, strings.Join(weaker, "; "))
		}
		if weaker := BindingWeakenings(shipped.Binding, b); len(weaker) > 0 {
			return fmt.Sprintf("ValidatingAdmissionPolicyBinding %s is weaker than the one this version ships: %s", src.name, strings.Join(weaker, "; "))
		}
	}
	return ""
}
