package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"example.com/podtoip-controller/internal/access"
	"example.com/podtoip-controller/internal/history"
)

// installation is a cluster for the checks: what the shipped manifests
// create, with a controller leading, unless a test takes some away.
type installation struct {
	user       string
	crds       []*unstructured.Unstructured
	policies   []*admissionv1.ValidatingAdmissionPolicy
	bindings   []*admissionv1.ValidatingAdmissionPolicyBinding
	lease      *coordinationv1.Lease
	deployment *appsv1.Deployment
	coverages  []*unstructured.Unstructured
	mirrors    []*unstructured.Unstructured
	// accepts, when set, says which dry-run updates of a PodToIp the
	// policy lets through (given the object before and after).
	accepts func(before, after *unstructured.Unstructured) bool
	// prefix is the policies' names' prefix, as a namePrefix overlay gives
	// them; the API server's refusals name the renamed policies.
	prefix string
	// inNamespace are the controller's namespace and what it holds.
	inNamespace []runtime.Object
	// enforced is whether the API server refuses forged writes by the
	// policy; rbac, whether RBAC refuses them before.
	enforced, rbac bool
	// whoAmIErr is the answer to SelfSubjectReview, when it fails.
	whoAmIErr error
}

func newInstallation() *installation {
	in := &installation{user: "kubernetes-admin", enforced: true}
	for _, crd := range expectedCRDs {
		in.crds = append(in.crds, crdObject(crd.name, "True", true, crd.fields, crd.selectable))
	}
	// The shipped policies and bindings, as the API server returns them,
	// defaults filled in.
	shipped, err := access.ShippedPolicies()
	if err != nil {
		panic(err)
	}
	for _, name := range []string{mirrorPolicy, historyPolicy} {
		p := shipped[name].Policy.DeepCopy()
		mc := p.Spec.MatchConstraints
		mc.MatchPolicy, mc.NamespaceSelector, mc.ObjectSelector = ptr.To(admissionv1.Equivalent), &metav1.LabelSelector{}, &metav1.LabelSelector{}
		for i := range mc.ResourceRules {
			mc.ResourceRules[i].Scope = ptr.To(admissionv1.AllScopes)
		}
		in.policies = append(in.policies, p)
		in.bindings = append(in.bindings, shipped[name].Binding.DeepCopy())
	}
	in.lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: controllerName, Namespace: defaultControllerNamespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-1_abc"), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: &metav1.MicroTime{Time: testNow.Add(-3 * time.Second)}}}
	in.deployment = &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: controllerName, Namespace: defaultControllerNamespace},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)}, Status: appsv1.DeploymentStatus{AvailableReplicas: 2}}
	ns := defaultControllerNamespace
	in.inNamespace = []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: controllerName, Namespace: ns}},
		controllerPod("podtoip-controller-7d9f8b-abcde"),
	}
	in.coverages = append(in.coverages, coverageObject("all", "", testNow.Add(-time.Hour), testNow.Add(-2*time.Second)))
	in.mirrors = append(in.mirrors, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "PodToIp",
		"metadata": map[string]any{"name": "web-0", "namespace": "shop", "resourceVersion": "5",
			"labels": map[string]any{"app.kubernetes.io/managed-by": controllerName}},
		"podName": "web-0", "podUID": "0badc0de-0000-4000-8000-000000000001", "podAddress": "10.244.1.7",
	}})
	return in
}

// controllerPod is a replica of the controller's Deployment, as its
// ReplicaSet makes them.
func controllerPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: defaultControllerNamespace, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "podtoip-controller-7d9f8b", UID: "1", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{ServiceAccountName: controllerName},
	}
}

func crdObject(name, established string, served bool, fields, selectable []string) *unstructured.Unstructured {
	props := map[string]any{}
	for _, f := range fields {
		props[f] = map[string]any{"type": "string"}
	}
	var sel []any
	for _, s := range selectable {
		sel = append(sel, map[string]any{"jsonPath": s})
	}
	v1 := map[string]any{"name": "v1", "served": served, "storage": true,
		"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "properties": props}}}
	if sel != nil {
		v1["selectableFields"] = sel
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"versions": []any{v1}},
		"status":   map[string]any{"conditions": []any{map[string]any{"type": "Established", "status": established}}},
	}}
}

func coverageObject(name, namespace string, from, to time.Time) *unstructured.Unstructured {
	cov := &history.IPHistoryCoverage{
		TypeMeta:   metav1.TypeMeta{APIVersion: history.GroupVersion.String(), Kind: history.CoverageKind},
		ObjectMeta: metav1.ObjectMeta{Name: name}, Namespace: namespace,
		Retention: metav1.Duration{Duration: 24 * time.Hour}, Writer: "node-1_abc",
		Intervals: []history.Interval{{From: history.NewTime(from.Truncate(time.Second)), To: history.NewTime(to.Truncate(time.Second))}},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cov)
	if err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

// policyRefusal is the error the API server returns when policy refuses
// a write of resource.
func policyRefusal(policy, resource, name string) error {
	return apierrors.NewForbidden(schema.GroupResource{Group: "example.com", Resource: resource}, name,
		errors.New("ValidatingAdmissionPolicy '"+policy+"' with binding '"+policy+"' denied request: only podtoip-controller writes them"))
}

// checker returns a checker of in, asking about namespace default.
func (in *installation) checker() *checker {
	var typed []runtime.Object
	for _, p := range in.policies {
		typed = append(typed, p)
	}
	for _, b := range in.bindings {
		typed = append(typed, b)
	}
	typed = append(typed, in.inNamespace...)
	if in.lease != nil {
		typed = append(typed, in.lease)
	}
	if in.deployment != nil {
		typed = append(typed, in.deployment)
	}
	kube := fake.NewClientset(typed...)
	kube.PrependReactor("create", "selfsubjectreviews", func(clienttesting.Action) (bool, runtime.Object, error) {
		if in.whoAmIErr != nil {
			return true, nil, in.whoAmIErr
		}
		return true, &authenticationv1.SelfSubjectReview{Status: authenticationv1.SelfSubjectReviewStatus{UserInfo: authenticationv1.UserInfo{Username: in.user}}}, nil
	})
	var objs []runtime.Object
	for _, o := range append(append(append([]*unstructured.Unstructured{}, in.crds...), in.coverages...), in.mirrors...) {
		objs = append(objs, o)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		crdResource: "CustomResourceDefinitionList", mirrorResource: "PodToIpList",
		history.GroupVersionResource: history.ListKind, history.CoverageGroupVersionResource: history.CoverageListKind,
	}, objs...)
	refuse := func(verb, resource, policy string) {
		dyn.PrependReactor(verb, resource, func(a clienttesting.Action) (bool, runtime.Object, error) {
			dryRun := false
			switch a := a.(type) {
			case clienttesting.CreateActionImpl:
				dryRun = slices.Equal(a.CreateOptions.DryRun, []string{metav1.DryRunAll})
			case clienttesting.UpdateActionImpl:
				dryRun = slices.Equal(a.UpdateOptions.DryRun, []string{metav1.DryRunAll})
			case clienttesting.DeleteActionImpl:
				dryRun = slices.Equal(a.DeleteOptions.DryRun, []string{metav1.DryRunAll})
			}
			if !dryRun {
				// Fails the check, and so the test.
				return true, nil, errors.New("a write without dryRun=All")
			}
			if u, ok := a.(clienttesting.UpdateActionImpl); ok && in.accepts != nil && resource == "podtoips" {
				after := u.Object.(*unstructured.Unstructured)
				for _, m := range in.mirrors {
					if m.GetName() == after.GetName() && in.accepts(m, after) {
						return true, after, nil
					}
				}
			}
			switch {
			case in.rbac:
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "example.com", Resource: resource}, "",
					errors.New(`User "`+in.user+`" cannot `+verb+` resource "`+resource+`" in API group "example.com"`))
			case in.enforced:
				return true, nil, policyRefusal(in.prefix+policy, resource, "x")
			}
			return true, nil, nil // accepted; a dry run stores nothing
		})
	}
	refuse("create", "podtoips", mirrorPolicy)
	refuse("update", "podtoips", mirrorPolicy)
	refuse("create", "iphistories", historyPolicy)
	for _, verb := range []string{"create", "update", "delete"} {
		refuse(verb, "iphistorycoverages", historyPolicy)
	}
	return &checker{kube: kube, dyn: dyn, namespace: "default", controllerNamespace: defaultControllerNamespace, now: func() time.Time { return testNow }}
}

// run makes the checks and returns them by name.
func (in *installation) run(t *testing.T) ([]checkResult, map[string]checkResult) {
	t.Helper()
	results, err := in.checker().run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]checkResult{}
	for _, r := range results {
		byName[r.Check] = r
	}
	return results, byName
}

func TestCheckInstalled(t *testing.T) {
	results, _ := newInstallation().run(t)
	var out bytes.Buffer
	if err := printChecks(&out, results); err != nil {
		t.Fatal(err)
	}
	want := `ok    crd/podtoips.example.com            Established, serves v1
ok    crd/iphistories.example.com         Established, serves v1
ok    crd/iphistorycoverages.example.com  Established, serves v1
ok    policy/podtoip-controller           as this version ships it: failurePolicy Fail, its matchConstraints and every validation, exempting system:serviceaccount:podtoip-system:podtoip-controller alone
ok    binding/podtoip-controller          binds podtoip-controller with Deny, on every object it matches
ok    policy/podtoip-controller-history   as this version ships it: failurePolicy Fail, its matchConstraints and every validation, exempting system:serviceaccount:podtoip-system:podtoip-controller alone
ok    binding/podtoip-controller-history  binds podtoip-controller-history with Deny, on every object it matches
ok    forged-create                       creating PodToIp default/kubectl-ptp-check-forged as kubernetes-admin is refused by the policy podtoip-controller (dry run, nothing written)
ok    forged-edit                         changing each answer field (podName, podUID, podAddress, podIPs, podIPv4, podIPv6, nodeName, hostNetwork, terminating, conflict, conflictsWith) of PodToIp shop/web-0 as kubernetes-admin is refused by the policy podtoip-controller (dry runs, nothing written)
ok    forged-finalizer                    adding a finalizer to PodToIp shop/web-0 as kubernetes-admin is refused by the policy podtoip-controller (dry runs, nothing written)
ok    forged-metadata                     adding a 5000-byte annotation to PodToIp shop/web-0 (past the 4096 bytes of labels and annotations) as kubernetes-admin is refused by the policy podtoip-controller (dry runs, nothing written)
ok    forged-history                      creating IPHistory 192.0.2.1 as kubernetes-admin is refused by the policy podtoip-controller-history (dry run, nothing written)
ok    forged-coverage                     creating IPHistoryCoverage namespace.kubectl-ptp-check-forged, changing and deleting all as kubernetes-admin is refused by the policy podtoip-controller-history (dry run, nothing written)
ok    namespace                           namespace podtoip-system holds only the controller's ServiceAccount and pods
ok    leader                              node-1_abc leads: renewed Lease podtoip-system/podtoip-controller 3s ago (lease duration 15s)
ok    deployment                          2 of 2 replicas of Deployment podtoip-system/podtoip-controller available
ok    history/all                         on for all namespaces: retention 24h0m0s, covered until 2026-05-01T15:59:58Z (2s ago), from 2026-05-01T15:00:00Z in 1 interval(s), written by node-1_abc
`
	if out.String() != want {
		t.Errorf("check printed\n%s\nwant\n%s", out.String(), want)
	}
	if err := checkVerdict(results); err != nil {
		t.Errorf("every check ok, yet the verdict is %v", err)
	}
}

// TestCheckBindingRemoved: without the binding the policy is not enforced:
// the binding's line says so and what to do, the forged writes it guarded
// are accepted, and check exits 5.
func TestCheckBindingRemoved(t *testing.T) {
	in := newInstallation()
	in.bindings, in.enforced = in.bindings[1:], false
	results, got := in.run(t)
	b := got["binding/podtoip-controller"]
	if b.Status != statusFail || !strings.Contains(b.Detail, "no ValidatingAdmissionPolicyBinding labelled podtoip.example.com/policy=podtoip-controller binds ValidatingAdmissionPolicy podtoip-controller") || !strings.Contains(b.Detail, policyHint) {
		t.Errorf("binding line: %+v", b)
	}
	for _, name := range []string{"forged-create", "forged-edit", "forged-finalizer", "forged-metadata", "forged-history", "forged-coverage"} {
		if r := got[name]; r.Status != statusFail || !strings.Contains(r.Detail, "was accepted (dry run, nothing written)") {
			t.Errorf("%s: %+v", name, r)
		}
	}
	err := checkVerdict(results)
	if exitCode(err) != exitCheckFailed || !strings.HasPrefix(err.Error(), "7 of 17 checks failed: binding/podtoip-controller, forged-create, forged-edit, forged-finalizer, forged-metadata, forged-history, forged-coverage") {
		t.Errorf("verdict %v, exit %d; want exit 5 naming the failed checks", err, exitCode(err))
	}
}

// TestCheckForgedProvesOnlyThePolicy: a refusal by RBAC, or no refusal
// because the caller is the controller, proves nothing about the policy.
func TestCheckForgedProvesOnlyThePolicy(t *testing.T) {
	in := newInstallation()
	in.rbac = true
	_, got := in.run(t)
	for _, name := range []string{"forged-create", "forged-edit", "forged-history"} {
		if r := got[name]; r.Status != statusFail || !strings.Contains(r.Detail, "RBAC refused") || !strings.Contains(r.Detail, "a cluster admin") {
			t.Errorf("refused by RBAC, %s: %+v", name, r)
		}
	}

	in = newInstallation()
	in.user = "system:serviceaccount:podtoip-system:podtoip-controller"
	_, got = in.run(t)
	for _, name := range []string{"forged-create", "forged-edit", "forged-history"} {
		if r := got[name]; r.Status != statusFail || !strings.Contains(r.Detail, "the controller's ServiceAccount, which the policy lets write") {
			t.Errorf("as the controller, %s: %+v", name, r)
		}
	}

	in = newInstallation()
	in.mirrors = nil
	_, got = in.run(t)
	if r := got["forged-edit"]; r.Status != statusWarn || !strings.Contains(r.Detail, "no PodToIp exists") {
		t.Errorf("without a PodToIp, forged-edit: %+v", r)
	}
}

func TestJudgeForged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		status string
		detail string
	}{
		{"refused by the policy", policyRefusal(mirrorPolicy, "podtoips", "x"), statusOK, "is refused by the policy podtoip-controller"},
		{"refused by another policy", policyRefusal("someone-else", "podtoips", "x"), statusFail, "not refused by the policy podtoip-controller"},
		{"refused by the schema", apierrors.NewInvalid(schema.GroupKind{Group: "example.com", Kind: "PodToIp"}, "x", nil), statusFail, "not refused by the policy"},
		{"accepted", nil, statusFail, "was accepted"},
	} {
		r := judgeForged(checkResult{Check: "forged-create"}, tc.err, mirrorPolicy, "creating PodToIp default/x", "alice")
		if r.Status != tc.status || !strings.Contains(r.Detail, tc.detail) || !strings.Contains(r.Detail, "as alice") {
			t.Errorf("%s: %+v; want %s with %q", tc.name, r, tc.status, tc.detail)
		}
	}
}

func TestCheckNamespaceMissing(t *testing.T) {
	err := apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "nope")
	if !namespaceMissing(err) || namespaceMissing(apierrors.NewNotFound(schema.GroupResource{Group: "example.com", Resource: "podtoips"}, "x")) {
		t.Error("namespaceMissing does not tell a missing namespace from another missing object")
	}
}

// TestCheckForgedEditOfEachAnswerField: forged-edit changes every answer
// field, each to a value the CRD's schema accepts (conflict and
// conflictsWith together, as its rule wants), and fails naming the field
// whose change the policy lets through, as it would had one been left out
// of the policy; the finalizer and the metadata probes likewise.
func TestCheckForgedEditOfEachAnswerField(t *testing.T) {
	for _, conflict := range []bool{false, true} {
		m := newInstallation().mirrors[0]
		if conflict {
			_ = unstructured.SetNestedField(m.Object, true, "conflict")
			_ = unstructured.SetNestedStringSlice(m.Object, []string{"Pod shop/web-1"}, "conflictsWith")
		}
		for _, f := range access.AnswerFields {
			change := forgedFieldEdits(f, m)
			if change == nil {
				t.Errorf("no forged edit of the answer field %s: add one to forgedFieldEdits", f)
				continue
			}
			u := m.DeepCopy()
			change(u)
			before, _, _ := unstructured.NestedFieldCopy(m.Object, f)
			after, _, _ := unstructured.NestedFieldCopy(u.Object, f)
			if reflect.DeepEqual(before, after) {
				t.Errorf("conflict %v: the forged edit of %s leaves it %v", conflict, f, after)
			}
			c, _, _ := unstructured.NestedBool(u.Object, "conflict")
			with, _, _ := unstructured.NestedStringSlice(u.Object, "conflictsWith")
			if c != (len(with) > 0) {
				t.Errorf("conflict %v: the forged edit of %s breaks the CRD's rule: conflict %v, conflictsWith %v", conflict, f, c, with)
			}
		}
	}

	for _, tc := range []struct {
		check, want string
		accepts     func(before, after *unstructured.Unstructured) bool
	}{
		{"forged-edit", "the change of terminating was accepted", func(b, a *unstructured.Unstructured) bool {
			bt, _, _ := unstructured.NestedBool(b.Object, "terminating")
			at, _, _ := unstructured.NestedBool(a.Object, "terminating")
			return bt != at
		}},
		{"forged-finalizer", "the change of a finalizer was accepted", func(b, a *unstructured.Unstructured) bool {
			return len(a.GetFinalizers()) > len(b.GetFinalizers())
		}},
		{"forged-metadata", "the change of an annotation was accepted", func(b, a *unstructured.Unstructured) bool {
			return len(a.GetAnnotations()) > len(b.GetAnnotations())
		}},
	} {
		in := newInstallation()
		in.accepts = tc.accepts
		results, got := in.run(t)
		if r := got[tc.check]; r.Status != statusFail || !strings.Contains(r.Detail, tc.want) {
			t.Errorf("%s: %+v; want a failure saying %q", tc.check, r, tc.want)
		}
		for _, r := range results {
			if strings.HasPrefix(r.Check, "forged-") && r.Check != tc.check && r.Status != statusOK {
				t.Errorf("with only %s let through, %s: %+v", tc.check, r.Check, r)
			}
		}
	}
}

// TestCheckNamespace: the controller's namespace missing, or holding
// ServiceAccounts or pods other than the controller's, is a warning
// naming them, since whoever controls them may act as the controller.
func TestCheckNamespace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(*installation)
		status string
		detail string
	}{
		{"as installed", func(*installation) {}, statusOK, "holds only the controller's ServiceAccount and pods"},
		{"missing", func(in *installation) { in.inNamespace = nil }, statusWarn,
			"namespace podtoip-system does not exist, yet the admission policies exempt system:serviceaccount:podtoip-system:podtoip-controller"},
		{"another ServiceAccount", func(in *installation) {
			in.inNamespace = append(in.inNamespace, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "ci-bot", Namespace: defaultControllerNamespace}})
		}, statusWarn, "holds ServiceAccount ci-bot beside the controller's"},
		{"another pod", func(in *installation) {
			in.inNamespace = append(in.inNamespace, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "debug", Namespace: defaultControllerNamespace}})
		}, statusWarn, "holds pod debug (ServiceAccount default) beside the controller's"},
		{"a pod as the controller, not its Deployment's", func(in *installation) {
			in.inNamespace = append(in.inNamespace, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "impostor", Namespace: defaultControllerNamespace},
				Spec: corev1.PodSpec{ServiceAccountName: controllerName}})
		}, statusWarn, "holds pod impostor (ServiceAccount podtoip-controller)"},
	} {
		in := newInstallation()
		tc.edit(in)
		results, got := in.run(t)
		if r := got["namespace"]; r.Status != tc.status || !strings.Contains(r.Detail, tc.detail) {
			t.Errorf("%s: %+v; want %s with %q", tc.name, r, tc.status, tc.detail)
		}
		if err := checkVerdict(results); tc.status == statusWarn && err != nil {
			t.Errorf("%s: a warning fails the verdict: %v", tc.name, err)
		}
	}
}

// TestCheckRenamedPolicies: policies and bindings renamed by a namePrefix
// overlay are found by their label, judged as the shipped ones exempting
// the renamed ServiceAccount (--controller-name), and the forged writes
// are matched to the refusals of the renamed policies; the renamed
// Deployment and ServiceAccount are the controller's.
func TestCheckRenamedPolicies(t *testing.T) {
	in := newInstallation()
	in.prefix = "team-"
	for _, p := range in.policies {
		p.Name = "team-" + p.Name
		// The overlay's controller-identity transformer exempts the
		// renamed ServiceAccount.
		c := &p.Spec.MatchConditions[0]
		c.Expression = strings.Replace(c.Expression, `"podtoip-controller"`, `"team-podtoip-controller"`, 1)
	}
	for _, b := range in.bindings {
		b.Name, b.Spec.PolicyName = "team-"+b.Name, "team-"+b.Spec.PolicyName
	}
	in.deployment.Name = "team-podtoip-controller"
	ns := defaultControllerNamespace
	in.inNamespace = []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "team-podtoip-controller", Namespace: ns}},
	}
	c := in.checker()
	c.name = "team-podtoip-controller"
	results, err := c.run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]checkResult{}
	for _, r := range results {
		got[r.Check] = r
	}
	if err := checkVerdict(results); err != nil {
		t.Errorf("renamed policies: %v\n%+v", err, results)
	}
	if r := got["policy/podtoip-controller"]; !strings.Contains(r.Detail, "named team-podtoip-controller") {
		t.Errorf("policy line: %+v, want it naming the live policy", r)
	}
	if r := got["forged-history"]; !strings.Contains(r.Detail, "refused by the policy team-podtoip-controller-history") {
		t.Errorf("forged-history line: %+v, want the renamed policy's refusal", r)
	}
	for check, want := range map[string]string{
		"policy/podtoip-controller": "exempting system:serviceaccount:podtoip-system:team-podtoip-controller alone",
		"deployment":                "2 of 2 replicas of Deployment podtoip-system/team-podtoip-controller available",
		"namespace":                 "holds only the controller's ServiceAccount and pods",
	} {
		if r := got[check]; r.Status != statusOK || !strings.Contains(r.Detail, want) {
			t.Errorf("%s: %+v, want ok saying %q", check, r, want)
		}
	}
}

func TestCheckPolicyAndBinding(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(*installation)
		check  string
		status string
		detail string
	}{
		{"policy missing", func(in *installation) { in.policies = in.policies[:1] }, "policy/podtoip-controller-history", statusFail,
			"no ValidatingAdmissionPolicy labelled podtoip.example.com/policy=podtoip-controller-history: the policy podtoip-controller-history is missing; restore it: kubectl apply -k artifacts/ (or your overlay of it)"},
		{"fails open", func(in *installation) { in.policies[0].Spec.FailurePolicy = ptr.To(admissionv1.Ignore) }, "policy/podtoip-controller", statusFail, "failurePolicy is Ignore"},
		{"binds another policy", func(in *installation) { in.bindings[0].Spec.PolicyName = "other" }, "binding/podtoip-controller", statusFail, `ValidatingAdmissionPolicyBinding podtoip-controller binds "other", not podtoip-controller`},
		{"warns only", func(in *installation) {
			in.bindings[0].Spec.ValidationActions = []admissionv1.ValidationAction{admissionv1.Warn, admissionv1.Audit}
		}, "binding/podtoip-controller", statusFail, "lack Deny"},
		{"binding narrowed", func(in *installation) {
			in.bindings[1].Spec.MatchResources = &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}}
		}, "binding/podtoip-controller-history", statusFail,
			"weaker than the one this version ships: spec.matchResources.namespaceSelector is set: namespaces it does not select are not protected; restore it: " + policyHint},
		{"a validation removed", func(in *installation) {
			in.policies[0].Spec.Validations = in.policies[0].Spec.Validations[:5]
		}, "policy/podtoip-controller", statusFail, "spec.validations[5] (the labels and annotations of a PodToIp may hold at most 4096 …) is missing or changed"},
		{"matchConstraints narrowed", func(in *installation) {
			in.policies[1].Spec.MatchConstraints.ResourceRules[0].Operations = []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}
		}, "policy/podtoip-controller-history", statusFail, "spec.matchConstraints.resourceRules no longer match DELETE of iphistories "},
		{"exempting another ServiceAccount", func(in *installation) {
			c := &in.policies[0].Spec.MatchConditions[0]
			c.Expression = strings.Replace(c.Expression, `"podtoip-system"`, `"tenant-a"`, 1)
		}, "policy/podtoip-controller", statusFail,
			"spec.matchConditions[not-the-controller] exempts system:serviceaccount:tenant-a:podtoip-controller, not the controller's ServiceAccount system:serviceaccount:podtoip-system:podtoip-controller"},
	} {
		in := newInstallation()
		tc.edit(in)
		_, got := in.run(t)
		if r := got[tc.check]; r.Status != tc.status || !strings.Contains(r.Detail, tc.detail) {
			t.Errorf("%s: %+v; want %s with %q", tc.name, r, tc.status, tc.detail)
		}
	}
}

func TestCheckCRDs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		crd    *unstructured.Unstructured
		detail string
	}{
		{"missing", nil, "CustomResourceDefinition iphistories.example.com does not exist: install the CRDs: kubectl apply -f artifacts/crd.yaml"},
		{"not established", crdObject(history.CRDName, "False", true, expectedCRDs[1].fields, nil), "not Established"},
		{"v1 not served", crdObject(history.CRDName, "True", false, expectedCRDs[1].fields, nil), "v1 is not served"},
		{"older", crdObject(history.CRDName, "True", true, []string{"address", "holders"}, nil), "older than this plugin: v1 lacks recordedFrom"},
	} {
		in := newInstallation()
		in.crds = []*unstructured.Unstructured{in.crds[0], in.crds[2]}
		if tc.crd != nil {
			in.crds = append(in.crds, tc.crd)
		}
		_, got := in.run(t)
		if r := got["crd/"+history.CRDName]; r.Status != statusFail || !strings.Contains(r.Detail, tc.detail) {
			t.Errorf("%s: %+v; want fail with %q", tc.name, r, tc.detail)
		}
	}
	in := newInstallation()
	in.crds[0] = crdObject("podtoips.example.com", "True", true, expectedCRDs[0].fields, []string{".podIPv4"})
	if _, got := in.run(t); !strings.Contains(got["crd/podtoips.example.com"].Detail, "lacks selectable .podIPv6, selectable .conflict") {
		t.Errorf("a PodToIp CRD without the selectable fields: %+v", got["crd/podtoips.example.com"])
	}
}

func TestCheckLeaderAndDeployment(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(*installation)
		check  string
		status string
		detail string
	}{
		{"no Lease", func(in *installation) { in.lease = nil }, "leader", statusFail, "no Lease podtoip-system/podtoip-controller"},
		{"released", func(in *installation) { in.lease.Spec.HolderIdentity = ptr.To("") }, "leader", statusFail, "has no holder"},
		{"expired", func(in *installation) { in.lease.Spec.RenewTime = &metav1.MicroTime{Time: testNow.Add(-time.Minute)} }, "leader", statusFail,
			"node-1_abc last renewed Lease podtoip-system/podtoip-controller 60s ago, longer than its lease duration (15s)"},
		{"no Deployment", func(in *installation) { in.deployment = nil }, "deployment", statusWarn, "the controller runs outside the cluster"},
		{"scaled to 0", func(in *installation) { in.deployment.Spec.Replicas = ptr.To[int32](0) }, "deployment", statusFail, "scaled to 0"},
		{"none available", func(in *installation) { in.deployment.Status.AvailableReplicas = 0 }, "deployment", statusFail, "none of its 2 replicas available"},
		{"one available", func(in *installation) { in.deployment.Status.AvailableReplicas = 1 }, "deployment", statusWarn, "1 of 2 replicas"},
	} {
		in := newInstallation()
		tc.edit(in)
		_, got := in.run(t)
		if r := got[tc.check]; r.Status != tc.status || !strings.Contains(r.Detail, tc.detail) {
			t.Errorf("%s: %+v; want %s with %q", tc.name, r, tc.status, tc.detail)
		}
	}
}

func TestCheckHistory(t *testing.T) {
	in := newInstallation()
	in.coverages = nil
	if _, got := in.run(t); got["history"].Status != statusWarn || !strings.Contains(got["history"].Detail, "off: there is no IPHistoryCoverage") {
		t.Errorf("no coverage: %+v", got["history"])
	}
	in = newInstallation()
	in.coverages = append(in.coverages, coverageObject("namespace.shop", "shop", testNow.Add(-48*time.Hour), testNow.Add(-3*time.Hour)))
	_, got := in.run(t)
	if r := got["history/namespace.shop"]; r.Status != statusWarn || !strings.Contains(r.Detail, "off or behind for namespace shop: covered until 2026-05-01T13:00:00Z (3h ago) only, retention 24h0m0s") {
		t.Errorf("a stale coverage: %+v", r)
	}
	if r := got["history/all"]; r.Status != statusOK {
		t.Errorf("a current coverage: %+v", r)
	}
}

// TestCheckUnreachable: a cluster that cannot be asked is an API error
// (exit 3), not thirteen failed checks.
func TestCheckUnreachable(t *testing.T) {
	in := newInstallation()
	in.whoAmIErr = errors.New(`Post "https://127.0.0.1:1/apis/authentication.k8s.io/v1/selfsubjectreviews": dial tcp 127.0.0.1:1: connect: connection refused`)
	_, err := in.checker().run(t.Context())
	if exitCode(err) != exitAPI || !strings.Contains(err.Error(), "check that the cluster is reachable") {
		t.Errorf("unreachable: %v, exit %d", err, exitCode(err))
	}
	// A server that will not say who the caller is is still checked.
	in.whoAmIErr = apierrors.NewForbidden(schema.GroupResource{Group: "authentication.k8s.io", Resource: "selfsubjectreviews"}, "", errors.New("no"))
	if _, got := in.run(t); got["forged-create"].Status != statusOK || strings.Contains(got["forged-create"].Detail, " as ") {
		t.Errorf("without SelfSubjectReview: %+v", got["forged-create"])
	}
}

func TestCheckJSON(t *testing.T) {
	results, _ := newInstallation().run(t)
	results[4] = results[4].fail("missing")
	var out bytes.Buffer
	o := &options{streams: genericiooptions.IOStreams{Out: &out}, output: "json"}
	err := o.reportChecks(results)
	if exitCode(err) != exitCheckFailed {
		t.Errorf("exit %d, want 5", exitCode(err))
	}
	var got struct {
		APIVersion, Kind string
		Items            []checkResult
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if got.APIVersion != "kubectl-ptp.example.com/v1" || got.Kind != "CheckList" || len(got.Items) != len(results) || got.Items[4] != results[4] {
		t.Errorf("-o json printed\n%s", out.String())
	}
}
