package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"example.com/podtoip-controller/internal/access"
	"example.com/podtoip-controller/internal/history"
)

// The names the shipped manifests give the controller (artifacts/): its
// ServiceAccount, Deployment and Lease are all podtoip-controller, in the
// namespace --controller-namespace names.
const (
	controllerName             = "podtoip-controller"
	defaultControllerNamespace = "podtoip-system"
	// mirrorPolicy and historyPolicy are the ValidatingAdmissionPolicies
	// of artifacts/policy.yaml, each bound by a binding of the same name.
	mirrorPolicy  = "podtoip-controller"
	historyPolicy = "podtoip-controller-history"
	// policyHint restores both policies and their bindings, with the
	// exempted ServiceAccount where the manifests put it (an overlay in
	// another namespace sets it; policy.yaml alone names podtoip-system).
	policyHint = "kubectl apply -k artifacts/ (or your overlay of it)"
)

// Statuses of a check. fail is something wrong, or a proof the caller
// could not make (RBAC refused it); warn is information that proves
// nothing wrong: there is nothing here to prove it on (no Deployment, no
// PodToIp to edit yet), or a setting that may be chosen (the history off).
const (
	statusOK   = "ok"
	statusWarn = "warn"
	statusFail = "fail"
)

// historyLag is how far behind now the history's coverage may end and
// still count as kept up: the leader extends it every 2 s, and one proof
// may wait up to 2 minutes for the pod watch and the writes.
const historyLag = 2 * time.Minute

// forgedAddress is the address of the forged objects: from TEST-NET-1
// (RFC 5737), which no pod is given.
const forgedAddress = "192.0.2.1"

// forgedName names the forged PodToIp: no pod is likely to be called so.
const forgedName = "kubectl-ptp-check-forged"

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// expectedCRDs are the CRDs this plugin reads, and the fields of their v1
// schema it needs: a CRD older than the plugin lacks some.
var expectedCRDs = []struct {
	name   string
	fields []string
	// selectable are the fields who-has and conflicts select by.
	selectable []string
}{
	{"podtoips.example.com", []string{"podName", "podUID", "podAddress", "podIPs", "podIPv4", "podIPv6", "terminating", "conflict", "conflictsWith"},
		[]string{".podIPv4", ".podIPv6", ".conflict"}},
	{history.CRDName, []string{"address", "holders", "recordedFrom"}, nil},
	{history.CoverageCRDName, []string{"retention", "writer", "intervals"}, nil},
}

func newCheckCommand(o *options) *cobra.Command {
	controllerNamespace := defaultControllerNamespace
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check that podtoip-controller is installed safely and running",
		Long: `Check that podtoip-controller is installed safely and running, from what the
API server shows, and print one line per check: ok, warn (information,
nothing wrong proven) or fail, with what is wrong and what to do.

  crd/NAME      the CRDs of PodToIp, IPHistory and IPHistoryCoverage are
                Established, serve v1 and have the fields this plugin reads
  policy/NAME   the ValidatingAdmissionPolicies podtoip-controller and
  binding/NAME  podtoip-controller-history and their bindings are as strong
                as the ones this version ships (built in): failing closed,
                matching every request they should, exempting the
                ServiceAccount of --controller-namespace alone, every
                validation kept, each binding denying on every object; any
                difference that weakens them fails, naming the field
  forged-create a PodToIp created by you, in the namespace of -n (the
                kubeconfig's namespace when unset), is refused by the policy
  forged-edit   a change of an existing PodToIp's podAddress by you is
                refused by the policy
  forged-history an IPHistory created by you is refused by the policy
  leader        the Lease podtoip-controller has a holder that renewed it
                within its lease duration
  deployment    the Deployment podtoip-controller has its replicas available
  history/NAME  whether the history is on, its retention, and up to when its
                IPHistoryCoverage NAME vouches for it

The forged writes are server-side dry runs (dryRun=All): the API server
authorizes and admits them as real writes, and writes nothing. They prove
the policy only when RBAC lets you make them and the policy refuses them,
so run check as a cluster admin: a refusal by RBAC, or running as the
controller's own ServiceAccount (which the policy lets write), proves
nothing and fails. The Lease and the Deployment are looked for in the
namespace of --controller-namespace.

With -o json|yaml it prints a CheckList (apiVersion
kubectl-ptp.example.com/v1) whose items each have check, status and detail.

` + exitCodesHelp,
		Example: `  kubectl ptp check
  kubectl ptp check -n shop -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.check(cmd.Context(), controllerNamespace)
		},
	}
	cmd.Flags().StringVar(&controllerNamespace, "controller-namespace", controllerNamespace,
		"Namespace of the controller's ServiceAccount, Lease and Deployment.")
	return cmd
}

// checkResult is the outcome of one check.
type checkResult struct {
	Check  string `json:"check"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// checkList is what check prints with -o json|yaml.
type checkList struct {
	metav1.TypeMeta `json:",inline"`
	Items           []checkResult `json:"items"`
}

func (l *checkList) DeepCopyObject() runtime.Object { return deepCopy(l) }

func (o *options) check(ctx context.Context, controllerNamespace string) error {
	ns, _, err := o.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return apiError(fmt.Errorf("reading the kubeconfig: %w; check --kubeconfig, $KUBECONFIG and --context", err))
	}
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return apiError(fmt.Errorf("reading the kubeconfig: %w; check --kubeconfig, $KUBECONFIG and --context", err))
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "kubectl-ptp/" + version
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return apiError(fmt.Errorf("setting up the client for %s: %w", cfg.Host, err))
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return apiError(fmt.Errorf("setting up the client for %s: %w", cfg.Host, err))
	}
	c := &checker{kube: kube, dyn: dyn, namespace: ns, controllerNamespace: controllerNamespace, now: o.now}
	results, err := c.run(ctx)
	if err != nil {
		return err
	}
	return o.reportChecks(results)
}

// reportChecks prints results as -o asks and returns check's verdict.
func (o *options) reportChecks(results []checkResult) error {
	if o.output != "" {
		if err := printObject(o.streams.Out, o.output, &checkList{TypeMeta: resultType("CheckList"), Items: results}); err != nil {
			return err
		}
	} else if err := printChecks(o.streams.Out, results); err != nil {
		return err
	}
	return checkVerdict(results)
}

// checkVerdict is check's exit: 5 when a check failed, naming them.
func checkVerdict(results []checkResult) error {
	var failed []string
	for _, r := range results {
		if r.Status == statusFail {
			failed = append(failed, r.Check)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return checkFailed(fmt.Sprintf("%d of %d checks failed: %s", len(failed), len(results), strings.Join(failed, ", ")))
}

// printChecks writes one line per check: status, check, detail, the first
// two padded so that the details line up.
func printChecks(out io.Writer, results []checkResult) error {
	width := 0
	for _, r := range results {
		width = max(width, len(r.Check))
	}
	for _, r := range results {
		if _, err := fmt.Fprintf(out, "%-4s  %-*s  %s\n", r.Status, width, r.Check, r.Detail); err != nil {
			return err
		}
	}
	return nil
}

// checker makes the checks against one cluster.
type checker struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
	// namespace is where the forged PodToIp is tried.
	namespace           string
	controllerNamespace string
	now                 func() time.Time
}

// serviceAccount is the user name of the controller's ServiceAccount,
// which the policy lets write.
func (c *checker) serviceAccount() string {
	return "system:serviceaccount:" + c.controllerNamespace + ":" + controllerName
}

// run makes every check. Only a cluster that cannot be asked at all is an
// error (exit 3); every other failure is a check's.
func (c *checker) run(ctx context.Context) ([]checkResult, error) {
	user, err := c.whoAmI(ctx)
	if err != nil {
		return nil, err
	}
	var results []checkResult
	for _, crd := range expectedCRDs {
		results = append(results, c.checkCRD(ctx, crd.name, crd.fields, crd.selectable))
	}
	for _, p := range []string{mirrorPolicy, historyPolicy} {
		results = append(results, c.checkPolicy(ctx, p), c.checkBinding(ctx, p))
	}
	results = append(results, c.checkForged(ctx, user)...)
	results = append(results, c.checkLeader(ctx), c.checkDeployment(ctx))
	return append(results, c.checkHistory(ctx)...), nil
}

// whoAmI returns the caller's user name, "" when the API server does not
// say (SelfSubjectReview forbidden or not served). A cluster that cannot
// be reached, or that refuses the credentials, ends the command.
func (c *checker) whoAmI(ctx context.Context) (string, error) {
	r, err := c.kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	var status apierrors.APIStatus
	switch {
	case err == nil:
		return r.Status.UserInfo.Username, nil
	case apierrors.IsUnauthorized(err) || !errors.As(err, &status):
		return "", apiError(explainCommon(fmt.Errorf("asking the API server who you are: %w", err)))
	}
	return "", nil
}

// checkCRD checks that the CRD name is Established, serves v1, and has
// fields (and selectable) in its v1 schema.
func (c *checker) checkCRD(ctx context.Context, name string, fields, selectable []string) checkResult {
	r := checkResult{Check: "crd/" + name}
	u, err := c.dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return r.failed(c.readError(err, "CustomResourceDefinition "+name, "install the CRDs: kubectl apply -f artifacts/crd.yaml"))
	}
	if !conditionTrue(u, "Established") {
		return r.fail("not Established: the API server does not serve it yet; see kubectl describe crd %s", name)
	}
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	for _, v := range versions {
		v, _ := v.(map[string]any)
		if v["name"] != "v1" {
			continue
		}
		if served, _ := v["served"].(bool); !served {
			return r.fail("v1 is not served: this plugin reads v1; kubectl apply -f artifacts/crd.yaml")
		}
		props, _, _ := unstructured.NestedMap(v, "schema", "openAPIV3Schema", "properties")
		var missing []string
		for _, f := range fields {
			if _, ok := props[f]; !ok {
				missing = append(missing, f)
			}
		}
		sel, _, _ := unstructured.NestedSlice(v, "selectableFields")
		for _, want := range selectable {
			if !slices.ContainsFunc(sel, func(s any) bool { m, _ := s.(map[string]any); return m["jsonPath"] == want }) {
				missing = append(missing, "selectable "+want)
			}
		}
		if len(missing) > 0 {
			return r.fail("older than this plugin: v1 lacks %s; update it: kubectl apply -f artifacts/crd.yaml", strings.Join(missing, ", "))
		}
		return r.ok("Established, serves v1")
	}
	return r.fail("no version v1: this plugin reads v1; kubectl apply -f artifacts/crd.yaml")
}

// conditionTrue reports whether the object's status has condition kind
// with status True.
func conditionTrue(u *unstructured.Unstructured, kind string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, cond := range conds {
		m, _ := cond.(map[string]any)
		if m["type"] == kind {
			return m["status"] == "True"
		}
	}
	return false
}

// checkPolicy checks that the ValidatingAdmissionPolicy name exists and
// is as strong as the one this version ships (built in from
// artifacts/policy.yaml), with the comparison the controller makes for
// podtoip_admission_policy_bound: every weakening is named.
func (c *checker) checkPolicy(ctx context.Context, name string) checkResult {
	r := checkResult{Check: "policy/" + name}
	shipped, err := access.ShippedPolicies()
	if err != nil {
		return r.failed(err.Error())
	}
	p, err := c.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return r.failed(c.readError(err, "ValidatingAdmissionPolicy "+name, "restore it: "+policyHint))
	}
	if weaker := access.PolicyWeakenings(shipped[name].Policy, p, c.serviceAccount()); len(weaker) > 0 {
		return r.fail("weaker than the one this version ships: %s; restore it: %s", strings.Join(weaker, "; "), policyHint)
	}
	return r.ok("as this version ships it: failurePolicy Fail, its matchConstraints and every validation, exempting " + c.serviceAccount() + " alone")
}

// checkBinding checks that the binding of the policy name (both are named
// alike) exists and is as strong as the shipped one: it binds that
// policy, denies, and leaves out nothing.
func (c *checker) checkBinding(ctx context.Context, name string) checkResult {
	r := checkResult{Check: "binding/" + name}
	shipped, err := access.ShippedPolicies()
	if err != nil {
		return r.failed(err.Error())
	}
	b, err := c.kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return r.fail("ValidatingAdmissionPolicyBinding %s is missing: the policy %s is not enforced, and anyone RBAC lets write may forge what it protects; restore it: %s", name, name, policyHint)
	}
	if err != nil {
		return r.failed(c.readError(err, "ValidatingAdmissionPolicyBinding "+name, "restore it: "+policyHint))
	}
	if weaker := access.BindingWeakenings(shipped[name].Binding, b); len(weaker) > 0 {
		return r.fail("weaker than the one this version ships: %s; restore it: %s", strings.Join(weaker, "; "), policyHint)
	}
	return r.ok("binds " + name + " with Deny, on every object it matches")
}

// checkForged tries, as the caller, the writes the policies refuse, as
// dry runs: a PodToIp created, a PodToIp's address changed, an IPHistory
// created.
func (c *checker) checkForged(ctx context.Context, user string) []checkResult {
	checks := []string{"forged-create", "forged-edit", "forged-history"}
	if user == c.serviceAccount() {
		out := make([]checkResult, len(checks))
		for i, name := range checks {
			out[i] = checkResult{Check: name}.fail("you are %s, the controller's ServiceAccount, which the policy lets write: this proves nothing; run check as another user (a cluster admin)", user)
		}
		return out
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	_, err := c.dyn.Resource(mirrorResource).Namespace(c.namespace).Create(ctx, forgedMirror(c.namespace), dry)
	create := checkResult{Check: "forged-create"}
	if namespaceMissing(err) {
		create = create.fail("namespace %s does not exist: pass -n with a namespace that does", c.namespace)
	} else {
		create = judgeForged(create, err, mirrorPolicy, "creating PodToIp "+c.namespace+"/"+forgedName, user)
	}
	_, err = c.dyn.Resource(history.GroupVersionResource).Create(ctx, forgedHistory(), dry)
	hist := judgeForged(checkResult{Check: "forged-history"}, err, historyPolicy, "creating IPHistory "+forgedAddress, user)
	return []checkResult{create, c.checkForgedEdit(ctx, user), hist}
}

// namespaceMissing reports whether err is the refusal of a write into a
// namespace that does not exist.
func namespaceMissing(err error) bool {
	var s apierrors.APIStatus
	return apierrors.IsNotFound(err) && errors.As(err, &s) && s.Status().Details != nil && s.Status().Details.Kind == "namespaces"
}

// forgedHistory is an IPHistory, without holds, that the CRD's schema
// accepts.
func forgedHistory() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": history.GroupVersion.String(), "kind": history.Kind,
		"metadata": map[string]any{"name": forgedAddress}, "address": forgedAddress,
	}}
}

// forgedMirror is a PodToIp the CRD's schema accepts, so that only the
// policy can refuse it.
func forgedMirror(namespace string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mirrorResource.GroupVersion().String(), "kind": "PodToIp",
		"metadata": map[string]any{"name": forgedName, "namespace": namespace,
			"labels": map[string]any{"app.kubernetes.io/managed-by": controllerName}},
		"podName": forgedName, "podUID": "0badc0de-0000-4000-8000-00000000c4ec",
		"podAddress": forgedAddress, "podIPs": []any{forgedAddress}, "podIPv4": forgedAddress,
		"hostNetwork": false, "conflict": false,
	}}
}

// checkForgedEdit changes the podAddress of a PodToIp that exists, in the
// namespace of -n or else anywhere, as a dry run.
func (c *checker) checkForgedEdit(ctx context.Context, user string) checkResult {
	r := checkResult{Check: "forged-edit"}
	var err error
	for range 3 {
		var m *unstructured.Unstructured
		if m, err = c.someMirror(ctx); err != nil || m == nil {
			break
		}
		addr, _, _ := unstructured.NestedString(m.Object, "podAddress")
		to := forgedAddress
		if addr == to {
			to = "192.0.2.2"
		}
		_ = unstructured.SetNestedField(m.Object, to, "podAddress")
		_, err = c.dyn.Resource(mirrorResource).Namespace(m.GetNamespace()).Update(ctx, m, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsConflict(err) {
			// A conflict is the controller's own update meanwhile:
			// read the PodToIp again.
			return judgeForged(r, err, mirrorPolicy, fmt.Sprintf("changing the podAddress of PodToIp %s/%s", m.GetNamespace(), m.GetName()), user)
		}
	}
	if err != nil {
		return r.failed(c.readError(err, "PodToIps", "run check as a user who may list them (a cluster admin)"))
	}
	return r.warn("no PodToIp exists to try an edit on (none in namespace %s, nor in any namespace you may list): nothing to protect yet; forged-create still shows whether the policy refuses writes", c.namespace)
}

// someMirror returns a PodToIp the controller manages, in c.namespace or
// else in any namespace; nil when there is none.
func (c *checker) someMirror(ctx context.Context) (*unstructured.Unstructured, error) {
	var firstErr error
	for _, ns := range []string{c.namespace, ""} {
		list, err := c.dyn.Resource(mirrorResource).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: managedBy, Limit: 1})
		if err != nil {
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		if len(list.Items) > 0 {
			return &list.Items[0], nil
		}
	}
	return nil, firstErr
}

// judgeForged turns the outcome of a forged dry-run write into a check:
// ok only when the policy refused it.
func judgeForged(r checkResult, err error, policy, what, user string) checkResult {
	as := ""
	if user != "" {
		as = " as " + user
	}
	switch {
	case err == nil:
		return r.fail("%s%s was accepted (dry run, nothing written): the policy %s does not refuse it; restore the policy and its binding: %s", what, as, policy, policyHint)
	case refusedBy(err, policy):
		return r.ok(fmt.Sprintf("%s%s is refused by the policy %s (dry run, nothing written)", what, as, policy))
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "cannot "):
		return r.fail("RBAC refused %s%s before the policy could: this proves nothing about the policy; run check as a user RBAC lets write them (a cluster admin)", what, as)
	}
	return r.fail("%s%s failed, not refused by the policy %s: %v", what, as, policy, explainCommon(err))
}

// refusedBy reports whether err is the refusal of ValidatingAdmissionPolicy
// policy, as the API server words it.
func refusedBy(err error, policy string) bool {
	return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'")
}

// checkLeader checks that the controller's Lease has a holder that renewed
// it within its lease duration.
func (c *checker) checkLeader(ctx context.Context) checkResult {
	r := checkResult{Check: "leader"}
	key := c.controllerNamespace + "/" + controllerName
	l, err := c.kube.CoordinationV1().Leases(c.controllerNamespace).Get(ctx, controllerName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return r.fail("no Lease %s: no controller runs with --leader-elect there (the Deployment's replicas do); a controller elsewhere: pass --controller-namespace; without --leader-elect, nothing in the API shows that it runs", key)
	}
	if err != nil {
		return r.failed(c.readError(err, "Lease "+key, "run check as a user who may get leases there (a cluster admin)"))
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if holder == "" || l.Spec.RenewTime == nil {
		return r.fail("Lease %s has no holder: no replica leads, so no PodToIp is written; see kubectl -n %s get pods,events", key, c.controllerNamespace)
	}
	d := 15 * time.Second
	if l.Spec.LeaseDurationSeconds != nil {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	ago := max(c.now().Sub(l.Spec.RenewTime.Time), 0)
	if ago > d {
		return r.fail("%s last renewed Lease %s %s ago, longer than its lease duration (%s): the leader is gone or cannot reach the API server, and no standby took over; see kubectl -n %s get pods,events",
			holder, key, duration.HumanDuration(ago), d, c.controllerNamespace)
	}
	return r.ok(fmt.Sprintf("%s leads: renewed Lease %s %s ago (lease duration %s)", holder, key, duration.HumanDuration(ago), d))
}

// checkDeployment reports the Deployment's available replicas. A
// controller may run outside the cluster, so a missing Deployment is
// information; the Lease shows whether one leads.
func (c *checker) checkDeployment(ctx context.Context) checkResult {
	r := checkResult{Check: "deployment"}
	key := c.controllerNamespace + "/" + controllerName
	d, err := c.kube.AppsV1().Deployments(c.controllerNamespace).Get(ctx, controllerName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return r.warn("no Deployment %s: the controller runs outside the cluster or under another name; its readiness is its /readyz, which the API cannot show", key)
	}
	if err != nil {
		return r.failed(c.readError(err, "Deployment "+key, "run check as a user who may get deployments there"))
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	have := d.Status.AvailableReplicas
	switch {
	case want == 0:
		return r.fail("Deployment %s is scaled to 0: nothing mirrors the pods; kubectl -n %s scale deployment %s --replicas=2", key, c.controllerNamespace, controllerName)
	case have == 0:
		return r.fail("Deployment %s has none of its %d replicas available (ready): see kubectl -n %s describe deployment %s, and the pods' /readyz", key, want, c.controllerNamespace, controllerName)
	case have < want:
		return r.warn("%d of %d replicas of Deployment %s available: one can lead, but a failover may wait for a replica; see kubectl -n %s describe deployment %s",
			have, want, key, c.controllerNamespace, controllerName)
	}
	return r.ok(fmt.Sprintf("%d of %d replicas of Deployment %s available", have, want, key))
}

// checkHistory reports, for each IPHistoryCoverage, whether its history is
// kept up now, its retention and up to when it vouches.
func (c *checker) checkHistory(ctx context.Context) []checkResult {
	r := checkResult{Check: "history"}
	list, err := c.dyn.Resource(history.CoverageGroupVersionResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []checkResult{r.failed(c.readError(err, "IPHistoryCoverages", "ask for the ClusterRole podtoip-controller-view"))}
	}
	if len(list.Items) == 0 {
		return []checkResult{r.warn("off: there is no IPHistoryCoverage, so who-had can vouch for no time; the controller runs with --history-retention=0, or has not led with the history on yet")}
	}
	now := c.now()
	out := make([]checkResult, 0, len(list.Items))
	for _, item := range list.Items {
		r := checkResult{Check: "history/" + item.GetName()}
		var cov history.IPHistoryCoverage
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &cov); err != nil {
			out = append(out, r.fail("reading IPHistoryCoverage %s: %v", item.GetName(), err))
			continue
		}
		out = append(out, judgeCoverage(r, &cov, now))
	}
	return out
}

// judgeCoverage says whether cov's history is on: its last interval ends
// within historyLag of now.
func judgeCoverage(r checkResult, cov *history.IPHistoryCoverage, now time.Time) checkResult {
	scope := "all namespaces"
	if cov.Namespace != "" {
		scope = "namespace " + cov.Namespace
	}
	until, ok := history.CoveredUntil(cov)
	if !ok {
		return r.warn("off for %s: IPHistoryCoverage %s vouches for no time yet (retention %s)", scope, cov.Name, cov.Retention.Duration)
	}
	ago := max(now.Sub(until), 0)
	if ago > historyLag {
		return r.warn("off or behind for %s: covered until %s (%s ago) only, retention %s: the controller runs with --history-retention=0 now, or its leader cannot prove the history (see its log); who-had cannot vouch for later times",
			scope, formatTime(until), duration.HumanDuration(ago), cov.Retention.Duration)
	}
	from := cov.Intervals[0].From.Time
	return r.ok(fmt.Sprintf("on for %s: retention %s, covered until %s (%s ago), from %s in %d interval(s), written by %s",
		scope, cov.Retention.Duration, formatTime(until), duration.HumanDuration(ago), formatTime(from), len(cov.Intervals), orNone(cov.Writer)))
}

// readError says why what could not be read, and what to do.
func (c *checker) readError(err error, what, fix string) string {
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("%s does not exist: %s", what, fix)
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("reading %s is forbidden: %v; run check as a cluster admin", what, err)
	}
	return fmt.Sprintf("reading %s: %v", what, explainCommon(err))
}

func (r checkResult) ok(detail string) checkResult {
	r.Status, r.Detail = statusOK, detail
	return r
}

func (r checkResult) warn(format string, args ...any) checkResult {
	r.Status, r.Detail = statusWarn, fmt.Sprintf(format, args...)
	return r
}

func (r checkResult) fail(format string, args ...any) checkResult {
	r.Status, r.Detail = statusFail, fmt.Sprintf(format, args...)
	return r
}

// failed is fail with a detail already written.
func (r checkResult) failed(detail string) checkResult {
	r.Status, r.Detail = statusFail, detail
	return r
}
