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
	admissionv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
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
	controllerNamespace, name := defaultControllerNamespace, controllerName
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check that podtoip-controller is installed safely and running",
		Long: `Check that podtoip-controller is installed safely and running, from what the
API server shows, and print one line per check: ok, warn (information,
nothing wrong proven) or fail, with what is wrong and what to do.

  crd/NAME      the CRDs of PodToIp, IPHistory and IPHistoryCoverage are
                Established, serve v1 and have the fields this plugin reads
  policy/NAME   the ValidatingAdmissionPolicies podtoip-controller and
  binding/NAME  podtoip-controller-history and their bindings (found by
                their label podtoip.example.com/policy, whatever an overlay
                named them) are as strong
                as the ones this version ships (built in): failing closed,
                matching every request they should, exempting the
                ServiceAccount of --controller-namespace alone, every
                validation kept, each binding denying on every object; any
                difference that weakens them fails, naming the field
  forged-create a PodToIp created by you, in the namespace of -n (the
                kubeconfig's namespace when unset), is refused by the policy
  forged-edit   a change by you of each answer field of an existing
                PodToIp, in turn, is refused by the policy
  forged-finalizer a finalizer added by you to it is refused
  forged-metadata an annotation by you growing its labels and annotations
                past 4096 bytes is refused
  forged-history an IPHistory created by you is refused by the policy
  forged-coverage an IPHistoryCoverage created, changed or deleted by you
                is refused by the policy
  namespace     the namespace of --controller-namespace exists (warn: the
                policies exempt a ServiceAccount there, which whoever
                creates it again gets) and holds no ServiceAccounts or pods
                but the controller's (warn: whoever controls them may act
                as the controller)
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
namespace of --controller-namespace; the exempted ServiceAccount and the
Deployment are named --controller-name (podtoip-controller unless an
overlay renamed them).

With -o json|yaml it prints a CheckList (apiVersion
kubectl-ptp.example.com/v1) whose items each have check, status and detail.

` + exitCodesHelp,
		Example: `  kubectl ptp check
  kubectl ptp check -n shop -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.check(cmd.Context(), controllerNamespace, name)
		},
	}
	cmd.Flags().StringVar(&controllerNamespace, "controller-namespace", controllerNamespace,
		"Namespace of the controller's ServiceAccount, Lease and Deployment.")
	cmd.Flags().StringVar(&name, "controller-name", name,
		"Name of the controller's ServiceAccount and Deployment, which a namePrefix or nameSuffix overlay changes (the Lease keeps --leader-elect-resource-name's).")
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

func (o *options) check(ctx context.Context, controllerNamespace, name string) error {
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
	c := &checker{kube: kube, dyn: dyn, namespace: ns, controllerNamespace: controllerNamespace, name: name, now: o.now}
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
	// name is the controller's ServiceAccount's and Deployment's
	// (--controller-name); "" for controllerName.
	name string
	now  func() time.Time
	// livePolicy is the live name of each shipped policy, found by its
	// label (an overlay may rename it); the shipped name until found.
	livePolicy map[string]string
}

// policyName is the live name of the shipped policy name, for matching
// the API server's refusals, which name the live policy.
func (c *checker) policyName(name string) string {
	if n := c.livePolicy[name]; n != "" {
		return n
	}
	return name
}

// serviceAccount is the user name of the controller's ServiceAccount,
// which the policy lets write.
func (c *checker) serviceAccount() string {
	return "system:serviceaccount:" + c.controllerNamespace + ":" + c.controllerName()
}

// controllerName is the name of the controller's ServiceAccount and
// Deployment.
func (c *checker) controllerName() string { return cmp.Or(c.name, controllerName) }

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
	results = append(results, c.checkPolicies(ctx)...)
	results = append(results, c.checkForged(ctx, user)...)
	results = append(results, c.checkNamespace(ctx), c.checkLeader(ctx), c.checkDeployment(ctx))
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

// checkPolicies checks, for each shipped policy, that a
// ValidatingAdmissionPolicy labelled as it (access.PolicyLabel, whatever
// an overlay renamed it to) exists and is as strong as the one this
// version ships (built in from artifacts/policy.yaml), and that a binding
// of it is too: with the comparison the controller makes for
// podtoip_admission_policy_bound (access.InForce), every weakening named.
func (c *checker) checkPolicies(ctx context.Context) []checkResult {
	names := []string{mirrorPolicy, historyPolicy}
	fail := func(detail string) []checkResult {
		var out []checkResult
		for _, name := range names {
			out = append(out, checkResult{Check: "policy/" + name}.failed(detail), checkResult{Check: "binding/" + name}.failed(detail))
		}
		return out
	}
	shipped, err := access.ShippedPolicies()
	if err != nil {
		return fail(err.Error())
	}
	api := c.kube.AdmissionregistrationV1()
	byLabel := metav1.ListOptions{LabelSelector: access.PolicyLabel}
	policies, err := api.ValidatingAdmissionPolicies().List(ctx, byLabel)
	if err != nil {
		return fail(c.readError(err, "ValidatingAdmissionPolicies", "run check as a user who may list them (a cluster admin)"))
	}
	bindings, err := api.ValidatingAdmissionPolicyBindings().List(ctx, byLabel)
	if err != nil {
		return fail(c.readError(err, "ValidatingAdmissionPolicyBindings", "run check as a user who may list them (a cluster admin)"))
	}
	var ps []*admissionv1.ValidatingAdmissionPolicy
	for i := range policies.Items {
		ps = append(ps, &policies.Items[i])
	}
	var bs []*admissionv1.ValidatingAdmissionPolicyBinding
	for i := range bindings.Items {
		bs = append(bs, &bindings.Items[i])
	}
	c.livePolicy = map[string]string{}
	var out []checkResult
	for _, name := range names {
		f := access.InForce(name, shipped[name], ps, bs, c.serviceAccount())
		pr, br := checkResult{Check: "policy/" + name}, checkResult{Check: "binding/" + name}
		if f.Policy == nil {
			out = append(out, pr.fail("%s; restore it: %s", f.PolicyWhy, policyHint),
				br.fail("the policy %s is missing, so no binding enforces it; restore both: %s", name, policyHint))
			continue
		}
		c.livePolicy[name] = f.Policy.Name
		if f.PolicyWhy != "" {
			pr = pr.fail("%s; restore it: %s", f.PolicyWhy, policyHint)
		} else {
			named := ""
			if f.Policy.Name != name {
				named = ", named " + f.Policy.Name
			}
			pr = pr.ok(fmt.Sprintf("as this version ships it%s: failurePolicy Fail, its matchConstraints and every validation, exempting %s alone", named, c.serviceAccount()))
		}
		if f.BindingWhy != "" {
			br = br.fail("%s; restore it: %s", f.BindingWhy, policyHint)
		} else {
			named := ""
			if f.Binding.Name != f.Policy.Name {
				named = " (binding " + f.Binding.Name + ")"
			}
			br = br.ok(fmt.Sprintf("binds %s with Deny, on every object it matches%s", f.Policy.Name, named))
		}
		out = append(out, pr, br)
	}
	return out
}

// checkNamespace checks the controller's namespace: the policies exempt
// its ServiceAccount there by name, so whoever creates the namespace
// again, once deleted, or runs a pod or holds a ServiceAccount in it, may
// come to act as the controller. Missing, or holding ServiceAccounts or
// pods other than the controller's, is a warning: nothing is wrong yet,
// but the answers are only as safe as that namespace.
func (c *checker) checkNamespace(ctx context.Context) checkResult {
	r := checkResult{Check: "namespace"}
	ns := c.controllerNamespace
	if _, err := c.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return r.warn("namespace %s does not exist, yet the admission policies exempt %s: whoever creates it and a ServiceAccount %s there writes as the controller; reinstall (%s), or delete the cluster-scoped objects too",
			ns, c.serviceAccount(), c.controllerName(), policyHint)
	} else if err != nil {
		return r.failed(c.readError(err, "namespace "+ns, "run check as a user who may get namespaces (a cluster admin)"))
	}
	var others []string
	sas, err := c.kube.CoreV1().ServiceAccounts(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return r.failed(c.readError(err, "ServiceAccounts in "+ns, "run check as a user who may list them (a cluster admin)"))
	}
	for _, sa := range sas.Items {
		// default is made in every namespace by the API server.
		if sa.Name != c.controllerName() && sa.Name != "default" {
			others = append(others, "ServiceAccount "+sa.Name)
		}
	}
	pods, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return r.failed(c.readError(err, "pods in "+ns, "run check as a user who may list them (a cluster admin)"))
	}
	for _, p := range pods.Items {
		if !controllersPod(&p, c.controllerName()) {
			others = append(others, fmt.Sprintf("pod %s (ServiceAccount %s)", p.Name, cmp.Or(p.Spec.ServiceAccountName, "default")))
		}
	}
	if len(others) > 0 {
		shown := others
		if len(shown) > 5 {
			shown = append(slices.Clone(shown[:5]), fmt.Sprintf("and %d more", len(others)-5))
		}
		return r.warn("namespace %s holds %s beside the controller's: anyone who can create pods, tokens or secrets, or exec, there can act as %s and write the answers; run the controller in a namespace of its own",
			ns, strings.Join(shown, ", "), c.serviceAccount())
	}
	return r.ok(fmt.Sprintf("namespace %s holds only the controller's ServiceAccount and pods", ns))
}

// controllersPod reports whether p is a replica of the controller's
// Deployment name: run as its ServiceAccount name, by a ReplicaSet named
// after it.
func controllersPod(p *corev1.Pod, name string) bool {
	if p.Spec.ServiceAccountName != name {
		return false
	}
	ref := metav1.GetControllerOf(p)
	return ref != nil && ref.Kind == "ReplicaSet" && strings.HasPrefix(ref.Name, name+"-")
}

// checkForged tries, as the caller, the writes the policies refuse, as
// dry runs: a PodToIp created; each answer field of a PodToIp changed, a
// finalizer added to one, its metadata grown past the bound; an IPHistory
// created; an IPHistoryCoverage created, changed and deleted.
func (c *checker) checkForged(ctx context.Context, user string) []checkResult {
	checks := []string{"forged-create", "forged-edit", "forged-finalizer", "forged-metadata", "forged-history", "forged-coverage"}
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
		create = judgeForged(create, err, c.policyName(mirrorPolicy), "creating PodToIp "+c.namespace+"/"+forgedName, user)
	}
	out := []checkResult{create}
	out = append(out, c.checkForgedEdits(ctx, user)...)
	_, err = c.dyn.Resource(history.GroupVersionResource).Create(ctx, forgedHistory(), dry)
	out = append(out, judgeForged(checkResult{Check: "forged-history"}, err, c.policyName(historyPolicy), "creating IPHistory "+forgedAddress, user))
	return append(out, c.checkForgedCoverage(ctx, user))
}

// forgedEdit is one forged change of a PodToIp: what it changes, and the
// change, made to a copy of the PodToIp.
type forgedEdit struct {
	what   string
	change func(m *unstructured.Unstructured)
}

// forgedFieldEdits returns, for each answer field (access.AnswerFields),
// a change of it to another value that the CRD's schema accepts, so that
// only the policy can refuse it; nil for a field this plugin does not
// know how to forge (a test holds every answer field to this list). conflict
// must go with conflictsWith (a rule of the CRD), so both change together.
func forgedFieldEdits(field string, m *unstructured.Unstructured) func(*unstructured.Unstructured) {
	str := func(f string) string { v, _, _ := unstructured.NestedString(m.Object, f); return v }
	boolean := func(f string) bool { v, _, _ := unstructured.NestedBool(m.Object, f); return v }
	other := func(f, a, b string) string {
		if str(f) == a {
			return b
		}
		return a
	}
	holder := "Pod " + m.GetNamespace() + "/" + forgedName
	conflicting := func(u *unstructured.Unstructured) {
		if boolean("conflict") {
			_ = unstructured.SetNestedField(u.Object, false, "conflict")
			unstructured.RemoveNestedField(u.Object, "conflictsWith")
			return
		}
		_ = unstructured.SetNestedField(u.Object, true, "conflict")
		_ = unstructured.SetNestedStringSlice(u.Object, []string{holder}, "conflictsWith")
	}
	set := func(f string, v any) func(*unstructured.Unstructured) {
		return func(u *unstructured.Unstructured) { _ = unstructured.SetNestedField(u.Object, v, f) }
	}
	switch field {
	case "podName":
		// The CRD refuses any change of it first (it must equal the
		// object's name); that refusal counts.
		return set(field, m.GetName()+"-forged")
	case "podUID":
		return set(field, other(field, "0badc0de-0000-4000-8000-00000000c4ec", "0badc0de-0000-4000-8000-00000000c4ed"))
	case "podAddress", "podIPv4":
		return set(field, other(field, forgedAddress, "192.0.2.2"))
	case "podIPs":
		return set(field, []any{other("podAddress", forgedAddress, "192.0.2.2")})
	case "podIPv6":
		return set(field, other(field, "2001:db8::c4ec", "2001:db8::c4ed"))
	case "nodeName":
		return set(field, other(field, forgedName, forgedName+"-2"))
	case "hostNetwork", "terminating":
		return set(field, !boolean(field))
	case "conflict":
		return conflicting
	case "conflictsWith":
		if !boolean("conflict") {
			return conflicting
		}
		return func(u *unstructured.Unstructured) {
			list, _, _ := unstructured.NestedStringSlice(m.Object, "conflictsWith")
			to := holder
			if slices.Contains(list, to) {
				to += "-2"
			}
			_ = unstructured.SetNestedStringSlice(u.Object, []string{to}, "conflictsWith")
		}
	}
	return nil
}

// forgedMetadataBytes is how much an annotation adds in forged-metadata:
// past the 4096 bytes of labels and annotations the policy lets anyone
// but the controller reach.
const forgedMetadataBytes = 5000

// checkForgedEdits changes, as dry runs, a PodToIp that exists (in the
// namespace of -n, or else anywhere): each answer field in turn
// (forged-edit), a finalizer added (forged-finalizer), an annotation past
// the bound on metadata (forged-metadata). Each is ok only when the
// policy refuses every change it makes.
func (c *checker) checkForgedEdits(ctx context.Context, user string) []checkResult {
	mirrorPolicyName := c.policyName(mirrorPolicy)
	fieldEdits := func(m *unstructured.Unstructured) []forgedEdit {
		var edits []forgedEdit
		for _, f := range access.AnswerFields {
			change := forgedFieldEdits(f, m)
			if change == nil {
				change = func(*unstructured.Unstructured) {}
			}
			edits = append(edits, forgedEdit{what: f, change: change})
		}
		return edits
	}
	probes := []struct {
		check, what string
		edits       func(m *unstructured.Unstructured) []forgedEdit
	}{
		{"forged-edit", "changing each answer field (" + strings.Join(access.AnswerFields, ", ") + ") of PodToIp %s", fieldEdits},
		{"forged-finalizer", "adding a finalizer to PodToIp %s", func(*unstructured.Unstructured) []forgedEdit {
			return []forgedEdit{{what: "a finalizer", change: func(u *unstructured.Unstructured) {
				u.SetFinalizers(append(u.GetFinalizers(), "example.com/"+forgedName))
			}}}
		}},
		{"forged-metadata", fmt.Sprintf("adding a %d-byte annotation to PodToIp %%s (past the 4096 bytes of labels and annotations)", forgedMetadataBytes), func(*unstructured.Unstructured) []forgedEdit {
			return []forgedEdit{{what: "an annotation", change: func(u *unstructured.Unstructured) {
				ann := u.GetAnnotations()
				if ann == nil {
					ann = map[string]string{}
				}
				ann["example.com/"+forgedName] = strings.Repeat("x", forgedMetadataBytes)
				u.SetAnnotations(ann)
			}}}
		}},
	}
	var out []checkResult
	for _, probe := range probes {
		r := checkResult{Check: probe.check}
		m, err := c.someMirror(ctx)
		if err != nil {
			out = append(out, r.failed(c.readError(err, "PodToIps", "run check as a user who may list them (a cluster admin)")))
			continue
		}
		if m == nil {
			out = append(out, r.warn("no PodToIp exists to try an edit on (none in namespace %s, nor in any namespace you may list): nothing to protect yet; forged-create still shows whether the policy refuses writes", c.namespace))
			continue
		}
		what := fmt.Sprintf(probe.what, m.GetNamespace()+"/"+m.GetName())
		var accepted []string
		var failed error
		for _, e := range probe.edits(m) {
			err := c.dryRunUpdate(ctx, m, e.change)
			switch {
			case refusedBy(err, mirrorPolicyName):
			case e.what == "podName" && apierrors.IsInvalid(err):
				// The CRD's own rule refuses it before the policy.
			case err == nil:
				accepted = append(accepted, e.what)
			case failed == nil:
				failed = err
			}
		}
		as := ""
		if user != "" {
			as = " as " + user
		}
		switch {
		case len(accepted) > 0:
			r = r.fail("%s%s: the change of %s was accepted (dry run, nothing written): the policy %s does not refuse it; restore the policy and its binding: %s",
				what, as, strings.Join(accepted, ", "), mirrorPolicyName, policyHint)
		case failed != nil:
			r = judgeForged(r, failed, mirrorPolicyName, what, user)
		default:
			r = r.ok(fmt.Sprintf("%s%s is refused by the policy %s (dry runs, nothing written)", what, as, mirrorPolicyName))
		}
		out = append(out, r)
	}
	return out
}

// dryRunUpdate applies change to a copy of m and updates it as a dry run;
// on a conflict (the controller updated m meanwhile) it reads m again and
// retries, a few times.
func (c *checker) dryRunUpdate(ctx context.Context, m *unstructured.Unstructured, change func(*unstructured.Unstructured)) error {
	return dryRunUpdate(ctx, c.dyn.Resource(mirrorResource).Namespace(m.GetNamespace()), m, change)
}

// dryRunUpdate is checker.dryRunUpdate with client, the resource of m.
func dryRunUpdate(ctx context.Context, client dynamic.ResourceInterface, m *unstructured.Unstructured, change func(*unstructured.Unstructured)) error {
	var err error
	for range 3 {
		u := m.DeepCopy()
		change(u)
		_, err = client.Update(ctx, u, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsConflict(err) {
			return err
		}
		fresh, getErr := client.Get(ctx, m.GetName(), metav1.GetOptions{})
		if getErr != nil {
			return getErr
		}
		m = fresh
	}
	return err
}

// forgedCoverageNamespace names the forged IPHistoryCoverage's scope: no
// namespace is likely to be called so.
const forgedCoverageNamespace = "kubectl-ptp-check-forged"

// checkForgedCoverage creates an IPHistoryCoverage, and changes and
// deletes one that exists, as dry runs: the history's record of how far
// it is complete is the controller's alone, as the history is.
func (c *checker) checkForgedCoverage(ctx context.Context, user string) checkResult {
	r := checkResult{Check: "forged-coverage"}
	policy := c.policyName(historyPolicy)
	client := c.dyn.Resource(history.CoverageGroupVersionResource)
	forged := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": history.GroupVersion.String(), "kind": history.CoverageKind,
		"metadata":  map[string]any{"name": "namespace." + forgedCoverageNamespace},
		"namespace": forgedCoverageNamespace, "retention": "1h0m0s",
	}}
	_, err := client.Create(ctx, forged, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !refusedBy(err, policy) {
		return judgeForged(r, err, policy, "creating IPHistoryCoverage "+forged.GetName(), user)
	}
	list, err := client.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return r.failed(c.readError(err, "IPHistoryCoverages", "ask for the ClusterRole podtoip-controller-view"))
	}
	if len(list.Items) == 0 {
		return r.ok(fmt.Sprintf("creating IPHistoryCoverage %s is refused by the policy %s (dry run, nothing written); none exists to try a change or a deletion on (the history is off)", forged.GetName(), policy))
	}
	cov := &list.Items[0]
	// The leader extends it every 2 s: a conflict is read again.
	err = dryRunUpdate(ctx, client, cov, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "8760h0m0s", "retention")
	})
	if !refusedBy(err, policy) {
		return judgeForged(r, err, policy, "changing the retention of IPHistoryCoverage "+cov.GetName(), user)
	}
	err = client.Delete(ctx, cov.GetName(), metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	if !refusedBy(err, policy) {
		return judgeForged(r, err, policy, "deleting IPHistoryCoverage "+cov.GetName(), user)
	}
	return judgeForged(r, err, policy, fmt.Sprintf("creating IPHistoryCoverage %s, changing and deleting %s", forged.GetName(), cov.GetName()), user)
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
	name := c.controllerName()
	key := c.controllerNamespace + "/" + name
	d, err := c.kube.AppsV1().Deployments(c.controllerNamespace).Get(ctx, name, metav1.GetOptions{})
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
		return r.fail("Deployment %s is scaled to 0: nothing mirrors the pods; kubectl -n %s scale deployment %s --replicas=2", key, c.controllerNamespace, name)
	case have == 0:
		return r.fail("Deployment %s has none of its %d replicas available (ready): see kubectl -n %s describe deployment %s, and the pods' /readyz", key, want, c.controllerNamespace, name)
	case have < want:
		return r.warn("%d of %d replicas of Deployment %s available: one can lead, but a failover may wait for a replica; see kubectl -n %s describe deployment %s",
			have, want, key, c.controllerNamespace, name)
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
