package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"example.com/podtoip-controller/e2e/framework"
)

// TestTenantLabelChurnHoldsOffNoWrite checks that a tenant who keeps
// patching a mirror's labels, from several clients at once, never holds
// off the controller, which runs as its ServiceAccount with the shipped
// RBAC: while they do, a change of the pod's address lands with the shipped
// admission policy in force, and, once it is removed, so does the revert
// of a forged address; the tenant's labels are kept. The controller
// reaches the API server through 100-150 ms of latency (a busy cluster):
// each label patch moves the mirror's resourceVersion, so an update sent
// on the cached one loses the race every time.
func TestTenantLabelChurnHoldsOffNoWrite(t *testing.T) {
	ns := suite.NewNamespace(t)
	sa := installShippedTrust(t, cp)
	relay, _ := suite.StartRelay(t)
	kc := framework.KubeconfigFrom(t, sa, func(server *string, _ *[]byte) { *server = "https://" + relay.Addr() })
	p := suite.StartControllerAs(t, kc, "--namespace", ns)
	framework.WaitReady(t, p)
	suite.RunningPod(t, ns, "web-0", []string{"10.244.186.1"})
	suite.WaitMirrorIPs(t, ns, "web-0", "10.244.186.1")
	relay.SetLatency(100*time.Millisecond, 150*time.Millisecond)
	t.Cleanup(func() { relay.SetLatency(0, 0) })
	tenant, err := dynamic.NewForConfig(restConfig(t, tenantIn(t, ns)))
	if err != nil {
		t.Fatal(err)
	}
	mirrors := tenant.Resource(framework.PodToIpGVR).Namespace(ns)

	var patches, failures atomic.Int64
	var firstFailure atomic.Value
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				body := fmt.Sprintf(`{"metadata":{"labels":{"churn-%d":"%d"}}}`, i, n)
				if _, err := mirrors.Patch(ctx, "web-0", types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil && ctx.Err() == nil {
					failures.Add(1)
					firstFailure.CompareAndSwap(nil, err.Error())
				} else if err == nil {
					patches.Add(1)
				}
			}
		})
	}
	stopChurn := func() { stop(); wg.Wait() }
	defer stopChurn()
	// churning waits until the label patches have moved the mirror at
	// least n more times: the writes below must land under churn.
	churning := func(n int64) {
		t.Helper()
		from := patches.Load()
		if err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return patches.Load()-from >= n, nil
		}); err != nil {
			t.Fatalf("waiting for %d label patches: %v (%d done, %d failed)", n, err, patches.Load()-from, failures.Load())
		}
	}
	churning(50)

	began := patches.Load()
	suite.SetPodIPs(t, ns, "web-0", corev1.PodRunning, "10.244.186.2")
	suite.WaitMirrorIPs(t, ns, "web-0", "10.244.186.2")
	t.Logf("the address change landed after %d label patches", patches.Load()-began)

	// Without the policy, the tenant can forge an address: the revert
	// lands under the churn too.
	if out, err := cp.Kubectl(t.Context(), "delete", "-f", filepath.Join(cp.Root, "artifacts", "policy.yaml")); err != nil {
		t.Fatalf("removing the admission policy: %v\n%s", err, out)
	}
	waitPolicy(t.Context(), t, cp, false)
	const forged = `{"podAddress":"10.244.186.66","podIPs":["10.244.186.66"],"podIPv4":"10.244.186.66"}`
	churning(50)
	began = patches.Load()
	if _, err := mirrors.Patch(t.Context(), "web-0", types.MergePatchType, []byte(forged), metav1.PatchOptions{FieldManager: "tenant"}); err != nil {
		t.Fatalf("forging the address: %v", err)
	}
	suite.WaitMirrorIPs(t, ns, "web-0", "10.244.186.2")
	t.Logf("the revert landed after %d label patches", patches.Load()-began)
	churning(50)

	stopChurn()
	m0 := framework.Scrape(t, p)
	c409, _ := framework.SumSeries(m0, "rest_client_requests_total", `code="409"`)
	c200, _ := framework.SumSeries(m0, "rest_client_requests_total", `code="200"`, `method="PATCH"`)
	t.Logf("%d label patches, %d failed (first: %v); the controller: %v conflicts, %v patches", patches.Load(), failures.Load(), firstFailure.Load(), c409, c200)
	m, err := mirrors.Get(t.Context(), "web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, ok := m.GetLabels()[fmt.Sprintf("churn-%d", i)]; !ok {
			t.Errorf("the label churn-%d is gone: labels %v", i, m.GetLabels())
		}
	}
	if err := p.WaitForOutput(framework.CtxFor(t, 10*time.Second), `event="reverted"`); err != nil {
		t.Errorf("no reverted trail line: %v\n%s", err, framework.Tail(p.Output(), 20))
	}
}

// restConfig reads the kubeconfig at path.
func restConfig(t *testing.T, path string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
