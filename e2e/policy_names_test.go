package e2e

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"example.com/podtoip-controller/e2e/framework"
)

// TestNamePrefixOverlayKeepsThePoliciesFound installs artifacts/ through
// an overlay with namePrefix: (and the controller-identity transformer,
// as docs/operations.md says), which renames the admission policies, their
// bindings, the ServiceAccount and the roles. It runs the controller as
// the renamed ServiceAccount and checks that it finds the renamed
// policies in force (podtoip_admission_policy_bound 1, where it used to
// look for the shipped names and report them unbound for ever), that it
// mirrors pods, and that the renamed policy refuses a forged write.
func TestNamePrefixOverlayKeepsThePoliciesFound(t *testing.T) {
	const prefix = "team-"
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, filepath.Join(cp.Root, "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	overlay := fmt.Sprintf("namePrefix: %s\nresources:\n  - %s\ntransformers:\n  - %s\n", prefix, rel, path.Join(rel, "controller-identity"))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	built, err := cp.Kubectl(t.Context(), "kustomize", dir)
	if err != nil {
		t.Fatalf("kubectl kustomize of the namePrefix overlay: %v\n%s", err, built)
	}
	// Everything but the CRDs and the namespace, which the overlay does not
	// rename and other tests share; no Deployment, whose pods no kubelet
	// here would run: the controller runs outside, as its ServiceAccount.
	var docs []string
	var policies []string
	for _, u := range framework.Objects(t, built) {
		switch u.GetKind() {
		case "", "CustomResourceDefinition", "Namespace", "Deployment":
			continue
		case "ValidatingAdmissionPolicy":
			policies = append(policies, u.GetName())
		}
		b, err := yaml.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	if len(policies) != 2 || !strings.HasPrefix(policies[0], prefix) || !strings.HasPrefix(policies[1], prefix) {
		t.Fatalf("the overlay renders the policies %v, want both renamed with %s", policies, prefix)
	}
	manifests := filepath.Join(dir, "manifests.yaml")
	if err := os.WriteFile(manifests, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := cp.Kubectl(t.Context(), "apply", "-f", filepath.Join(cp.Root, "artifacts", "crd.yaml"), "-f", filepath.Join(cp.Root, "artifacts", "namespace.yaml")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := cp.Kubectl(t.Context(), "apply", "-f", manifests); err != nil {
		t.Fatalf("applying the namePrefix overlay: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := cp.Kubectl(ctx, "delete", "--ignore-not-found", "-f", manifests); err != nil {
			t.Errorf("removing the overlay's objects: %v\n%s", err, out)
		}
		waitPolicyNamed(ctx, t, cp, prefix+"podtoip-controller", false)
	})
	waitPolicyNamed(t.Context(), t, cp, prefix+"podtoip-controller", true)

	sa := suite.TokenKubeconfig(t, saToken(t, cp, framework.DeployNamespace, prefix+"podtoip-controller"))
	ns := suite.NewNamespace(t)
	p := suite.StartControllerAs(t, sa, "--namespace", ns, "--history-retention=0")
	framework.WaitReady(t, p)
	var bound float64
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		bound = framework.Metric(t, framework.Scrape(t, p), "podtoip_admission_policy_bound")
		return bound == 1, nil
	}); err != nil {
		t.Fatalf("podtoip_admission_policy_bound is %v a minute after start, want 1: the controller does not find the renamed policies %v\n%s",
			bound, policies, framework.Tail(p.Output(), 40))
	}
	suite.RunningPod(t, ns, "renamed-0", []string{"10.244.43.1"})
	suite.WaitMirrorIPs(t, ns, "renamed-0", "10.244.43.1")

	// kubectl ptp check, told the renamed ServiceAccount, finds the
	// renamed policies by their label and proves them with its dry runs.
	// (The Lease is not checked: this controller runs without
	// --leader-elect.)
	out, errOut, _ := suite.KubectlPTP(t, "check", "-n", ns, "--controller-name", prefix+"podtoip-controller")
	// The columns are as wide as the longest check's name, which depends
	// on the coverages other tests left: lines are compared with their
	// runs of spaces taken as one.
	squeezed := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{
		"ok policy/podtoip-controller as this version ships it, named team-podtoip-controller: failurePolicy Fail, its matchConstraints and every validation, exempting system:serviceaccount:podtoip-system:team-podtoip-controller alone",
		"ok binding/podtoip-controller binds team-podtoip-controller with Deny",
		"ok policy/podtoip-controller-history as this version ships it, named team-podtoip-controller-history",
		"ok binding/podtoip-controller-history binds team-podtoip-controller-history with Deny",
		"ok forged-create ", "refused by the policy team-podtoip-controller ",
		"ok forged-edit ", "ok forged-finalizer ", "ok forged-metadata ",
		"ok forged-history ", "ok forged-coverage ", "refused by the policy team-podtoip-controller-history ",
	} {
		if !strings.Contains(squeezed, want) {
			t.Errorf("kubectl ptp check of the namePrefix overlay does not say %q:\n%s%s", want, out, errOut)
		}
	}
}
