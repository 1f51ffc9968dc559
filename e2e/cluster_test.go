package e2e

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// The scenarios in this file run on the simulated cluster: the scheduler
// places pods, kwok (the kubelets) makes them Running with addresses from
// their node's pod CIDRs and reuses a freed address at once, and the
// controller manager's workload, garbage-collector and namespace
// controllers act at the same time as podtoip-controller. Each ends with
// the checker over every namespace, and reports the 404 and 409 answers
// the controller met.

// rbacRefusal matches the authorizer's answer in a log line.
var rbacRefusal = regexp.MustCompile(`User \\?"[^"\\]+\\?" cannot`)

// startSimController runs the controller against the simulated cluster
// and waits until its workers run.
func startSimController(t *testing.T, c *controlplane.Cluster, args ...string) *controlplane.Process {
	t.Helper()
	p := suite.StartControllerAs(t, c.Kubeconfig, args...)
	framework.WaitReady(t, p)
	return p
}

// reportFailed logs the 404/409 answers the controller met, and fails the
// test when there are more than allowed ("METHOD CODE" -> most allowed;
// any other is allowed none). why explains the allowed ones.
func reportFailed(t *testing.T, p *controlplane.Process, allowed map[string]float64, why string) map[string]float64 {
	t.Helper()
	got := failedRequests(t, p)
	t.Logf("404/409 answers to the controller: %s", formatCounts(got))
	for k, v := range got {
		if v > allowed[k] {
			t.Errorf("%v %s answers to the controller, at most %v allowed (%s)", v, k, allowed[k], why)
		}
	}
	return got
}

// rollout waits until a Deployment or StatefulSet has rolled out.
func rollout(t *testing.T, c *controlplane.Cluster, ns, what string) {
	t.Helper()
	kc(t, c, "-n", ns, "rollout", "status", what, "--timeout=3m")
}

// TestClusterDeployment: a Deployment of 36 pods spread over three nodes,
// one dual-stack; a rolling update; scale to zero and back. Every step ends
// converged, with each mirrored address taken from its node.
func TestClusterDeployment(t *testing.T) {
	c := suite.SimCluster(t)
	ns := simNamespace(t, c)
	p := startSimController(t, c)

	kc(t, c, "-n", ns, "create", "deployment", "web", "--image="+framework.PauseImage, "--replicas=36")
	rollout(t, c, ns, "deployment/web")
	waitClusterConverged(t, c, time.Minute)
	nodes, dual := map[string]bool{}, 0
	for _, pod := range podsOf(t, c, ns, "app=web") {
		nodes[pod.Spec.NodeName] = true
		if len(pod.Status.PodIPs) == 2 {
			dual++
			m, err := suite.On(c.ControlPlane).GetMirror(t.Context(), ns, pod.Name)
			if err != nil || m == nil || len(m.PodIPs) != 2 {
				t.Errorf("dual-stack pod %s/%s (IPs %v): mirror %v, %v", ns, pod.Name, framework.PodIPList(&pod), framework.Describe(m), err)
			}
		}
	}
	t.Logf("36 pods on %d nodes, %d dual-stack", len(nodes), dual)
	if len(nodes) < 2 || dual == 0 {
		t.Errorf("the scheduler put the pods on %d nodes with %d dual-stack pods; the scenario needs several nodes and dual-stack pods", len(nodes), dual)
	}

	// A rolling update replaces every pod: new names, new addresses, old
	// pods terminating while new ones start.
	kc(t, c, "-n", ns, "set", "env", "deployment/web", "ROLLOUT=2")
	rollout(t, c, ns, "deployment/web")
	waitClusterConverged(t, c, time.Minute)

	kc(t, c, "-n", ns, "scale", "deployment/web", "--replicas=0")
	waitForPods(t, c, ns, "app=web", 0)
	waitClusterConverged(t, c, time.Minute)
	if out := kc(t, c, "-n", ns, "get", "ptp", "--no-headers"); strings.TrimSpace(out) != "" && !strings.Contains(out, "No resources") {
		t.Errorf("scaled to zero, kubectl get ptp still lists:\n%s", out)
	}

	kc(t, c, "-n", ns, "scale", "deployment/web", "--replicas=36")
	rollout(t, c, ns, "deployment/web")
	waitClusterConverged(t, c, time.Minute)
	// The garbage collector deletes the mirrors of deleted pods too (they
	// carry an owner reference), so a DELETE of a mirror may find it gone.
	// The leader reads the history's coverage when it starts to lead: on a
	// cluster where no controller recorded one yet, it is not there.
	reportFailed(t, p, map[string]float64{"DELETE 404": 72, "GET 404": 1},
		"the garbage collector may delete a mirror first; the history's coverage is read before its first write")
}

// waitForPods waits until exactly n pods match selector in ns (terminating
// ones included: gone means gone).
func waitForPods(t *testing.T, c *controlplane.Cluster, ns, selector string, n int) {
	t.Helper()
	var got int
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		got = len(list.Items)
		return got == n, nil
	})
	if err != nil {
		t.Fatalf("%d pods %s in %s, want %d: %v", got, selector, ns, n, err)
	}
}

// TestClusterStatefulSetPodRecreated: a StatefulSet pod deleted comes back
// under its name with a new UID (and often a new address); its mirror must
// follow the new incarnation.
func TestClusterStatefulSetPodRecreated(t *testing.T) {
	c := suite.SimCluster(t)
	ns := simNamespace(t, c)
	p := startSimController(t, c)

	kcApply(t, c, fmt.Sprintf(`apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: %s}
spec:
  serviceName: db
  replicas: 3
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: db, image: %s}]
`, ns, framework.PauseImage))
	rollout(t, c, ns, "statefulset/db")
	waitClusterConverged(t, c, time.Minute)

	for round := 1; round <= 3; round++ {
		old, err := c.Kube.CoreV1().Pods(ns).Get(t.Context(), "db-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		kc(t, c, "-n", ns, "delete", "pod", "db-1", "--wait=false")
		var recreated *corev1.Pod
		if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			pod, err := c.Kube.CoreV1().Pods(ns).Get(ctx, "db-1", metav1.GetOptions{})
			if err != nil || pod.UID == old.UID || pod.Status.PodIP == "" {
				return false, nil
			}
			recreated = pod
			return true, nil
		}); err != nil {
			t.Fatalf("round %d: db-1 was not recreated with an address: %v", round, err)
		}
		m := suite.On(c.ControlPlane).WaitMirror(t, ns, "db-1", "the new incarnation", func(m *framework.Mirror) bool {
			return m != nil && m.PodUID == recreated.UID && m.PodAddress == recreated.Status.PodIP
		})
		t.Logf("round %d: db-1 %s (%s) -> %s (%s); mirror follows", round, old.UID, old.Status.PodIP, m.PodUID, m.PodAddress)
	}
	waitClusterConverged(t, c, time.Minute)
	reportFailed(t, p, map[string]float64{"DELETE 404": 3, "PUT 404": 3}, "the garbage collector may delete the old incarnation's mirror first")
}

// TestClusterJobs: Job pods run, then finish (Succeeded); a finished pod
// keeps its address in status but is no longer mirrored, and its address
// goes to the next pod.
func TestClusterJobs(t *testing.T) {
	c := suite.SimCluster(t)
	ns := simNamespace(t, c)
	p := startSimController(t, c)

	kcApply(t, c, fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata: {name: batch, namespace: %s}
spec:
  completions: 12
  parallelism: 4
  template:
    spec:
      restartPolicy: Never
      containers: [{name: work, image: %s}]
`, ns, framework.PauseImage))
	kc(t, c, "-n", ns, "wait", "--for=condition=Complete", "job/batch", "--timeout=2m")
	waitClusterConverged(t, c, time.Minute)
	pods := podsOf(t, c, ns, "job-name=batch")
	succeeded := 0
	for _, pod := range pods {
		if pod.Status.Phase == corev1.PodSucceeded {
			succeeded++
		}
	}
	if succeeded < 12 {
		t.Errorf("%d of the Job's pods Succeeded, want 12", succeeded)
	}
	if out := kc(t, c, "-n", ns, "get", "ptp", "--no-headers"); strings.TrimSpace(out) != "" && !strings.Contains(out, "No resources") {
		t.Errorf("every Job pod finished, yet kubectl get ptp lists:\n%s", out)
	}
	reportFailed(t, p, nil, "")
}

// TestClusterForceDeletedPod: a force-deleted pod is gone at once; the
// garbage collector and the controller both delete its mirror. Neither may
// leave anything behind, and the controller must not loop on the mirror the
// collector deleted first.
func TestClusterForceDeletedPod(t *testing.T) {
	c := suite.SimCluster(t)
	ns := simNamespace(t, c)
	p := startSimController(t, c)

	kc(t, c, "-n", ns, "create", "deployment", "api", "--image="+framework.PauseImage, "--replicas=6")
	rollout(t, c, ns, "deployment/api")
	waitClusterConverged(t, c, time.Minute)
	before := framework.Scrape(t, p)

	pods := podsOf(t, c, ns, "app=api")
	for _, pod := range pods[:3] {
		kc(t, c, "-n", ns, "delete", "pod", pod.Name, "--force", "--grace-period=0")
	}
	rollout(t, c, ns, "deployment/api")
	waitClusterConverged(t, c, time.Minute)
	for _, pod := range pods[:3] {
		if m, err := suite.On(c.ControlPlane).GetMirror(t.Context(), ns, pod.Name); err != nil || m != nil {
			t.Errorf("force-deleted pod %s still has a mirror %s (%v)", pod.Name, framework.Describe(m), err)
		}
	}
	after := framework.Scrape(t, p)
	framework.Metric(t, after, "podtoip_controller_syncs_total", `result="success"`) // the metric exists; an error series appears with the first error
	errs := metricOr0(after, "podtoip_controller_syncs_total", `result="error"`) - metricOr0(before, "podtoip_controller_syncs_total", `result="error"`)
	if errs != 0 {
		t.Errorf("%v syncs failed around the force deletions; a mirror deleted by the garbage collector first is not an error", errs)
	}
	reportFailed(t, p, map[string]float64{"DELETE 404": 3}, "the garbage collector may delete a force-deleted pod's mirror first")
}

// metricOr0 is framework.SumSeries that reads a missing series as 0.
func metricOr0(m map[string]float64, prefix string, labels ...string) float64 {
	v, _ := framework.SumSeries(m, prefix, labels...)
	return v
}

// TestClusterNamespaceDeleted: deleting a namespace whose pods are mirrored
// finishes (the namespace controller deletes pods and PodToIps alike) and
// the controller does not recreate mirrors in it.
func TestClusterNamespaceDeleted(t *testing.T) {
	c := suite.SimCluster(t)
	ns := simNamespace(t, c)
	p := startSimController(t, c)

	kc(t, c, "-n", ns, "create", "deployment", "shop", "--image="+framework.PauseImage, "--replicas=12")
	rollout(t, c, ns, "deployment/shop")
	waitClusterConverged(t, c, time.Minute)
	before := framework.Scrape(t, p)

	start := time.Now()
	kc(t, c, "delete", "namespace", ns, "--timeout=2m")
	if _, err := c.Kube.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("namespace %s still there after kubectl delete returned: %v", ns, err)
	}
	t.Logf("namespace with 12 mirrored pods deleted in %v", time.Since(start).Round(time.Millisecond))
	waitClusterConverged(t, c, time.Minute)
	after := framework.Scrape(t, p)
	creates := metricOr0(after, "podtoip_controller_writes_total", `operation="create"`) - metricOr0(before, "podtoip_controller_writes_total", `operation="create"`)
	if creates != 0 {
		t.Errorf("the controller created %v mirrors while the namespace was deleted, want 0", creates)
	}
	rejected := metricOr0(after, "podtoip_controller_api_rejections_total") - metricOr0(before, "podtoip_controller_api_rejections_total")
	if rejected != 0 {
		t.Errorf("%v of the controller's requests were rejected while the namespace was deleted, want 0", rejected)
	}
	reportFailed(t, p, map[string]float64{"DELETE 404": 12}, "the namespace controller deletes PodToIps too, and may be first")
}

// TestClusterHostNetworkPod: a hostNetwork pod gets its node's address;
// the mirror shows it.
func TestClusterHostNetworkPod(t *testing.T) {
	c := suite.SimCluster(t)
	ns := simNamespace(t, c)
	p := startSimController(t, c)
	node := c.Nodes[0]

	kcApply(t, c, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: agent, namespace: %s}
spec:
  hostNetwork: true
  nodeName: %s
  containers: [{name: agent, image: %s}]
`, ns, node.Name, framework.PauseImage))
	m := suite.On(c.ControlPlane).WaitMirror(t, ns, "agent", "the node's address", func(m *framework.Mirror) bool { return m != nil && m.PodAddress == node.InternalIP })
	t.Logf("hostNetwork pod mirrored: %s", framework.Describe(m))
	out := kc(t, c, "get", "ptp", "-A", "--field-selector", "podAddress="+node.InternalIP)
	if !strings.Contains(out, "agent") {
		t.Errorf("kubectl get ptp -A --field-selector podAddress=%s does not find the hostNetwork pod:\n%s", node.InternalIP, out)
	}
	waitClusterConverged(t, c, time.Minute)
	reportFailed(t, p, nil, "")
}

// TestClusterChurnAddressReuse scales a Deployment up and down for a while:
// kwok hands a freed address to the next pod at once, so addresses move
// between pods within milliseconds. The controller must end converged,
// with one mirror per address holder, and must never take a terminating
// pod and the new holder of its address for a conflict: no mirror version
// says conflict=true (a watch on every PodToIp sees each one), the counter
// of conflicts found stays 0, and no conflict is logged. One churn run
// serves both checks: it is the longest scenario of the suite.
func TestClusterChurnAddressReuse(t *testing.T) {
	c := suite.SimCluster(t)
	ns := simNamespace(t, c)
	p := startSimController(t, c)

	// Every version of every PodToIp, from before the first pod.
	stop := suite.On(c.ControlPlane).WatchConflicts(t, "")

	rounds, seen, reused := churnWithReuse(t, c, ns, "churn")

	flagged, versions := stop()
	t.Logf("%d scale rounds; %d addresses seen, %d of them held by more than one pod in turn; %d PodToIp versions watched",
		rounds, len(seen), reused, versions)
	if reused == 0 {
		t.Errorf("no address was reused by another pod: the scenario did not exercise address reuse")
	}
	if versions == 0 {
		t.Error("the watch saw no PodToIp: it cannot tell whether one was marked")
	}
	if len(flagged) > 0 {
		t.Errorf("%d PodToIp versions said conflict=true under churn, e.g. %q", len(flagged), flagged[:min(5, len(flagged))])
	}
	if g, found := framework.ConflictMetrics(t, p); g != 0 || found != 0 {
		t.Errorf("conflicting_addresses = %v, address_conflicts_total = %v after churn; want 0 and 0", g, found)
	}
	if strings.Contains(p.Output(), "Address conflict started") {
		t.Errorf("a conflict was logged under churn:\n%s", framework.Tail(p.Output(), 30))
	}
	// Each 404 answers a write to a mirror the garbage collector deleted
	// first: at most one per mirror version the watch saw.
	got := reportFailed(t, p, map[string]float64{"DELETE 404": float64(versions), "PUT 404": float64(versions)}, "the garbage collector deletes mirrors of deleted pods as well")
	suite.RecordFigure(t, framework.Figure{Name: "cluster churn: 404 answers", Value: got["DELETE 404"] + got["PUT 404"], Unit: "count",
		Measures: fmt.Sprintf("404 answers to the controller over %d scale rounds on the simulated cluster (garbage collector deleting mirrors too); 409: %.0f", rounds, got["POST 409"]+got["PUT 409"])})
}

// churnWithReuse creates Deployment app in ns and scales it between 0 and
// 40 replicas for 45 s, each scale landing partly before the next: kwok
// hands freed addresses to new pods at once. It ends at 20 replicas rolled
// out and converged, and returns the scale rounds, every address seen with
// the pod UIDs that held it, and how many addresses more than one pod held
// in turn.
func churnWithReuse(t *testing.T, c *controlplane.Cluster, ns, app string) (rounds int, seen map[string]map[string]bool, reused int) {
	t.Helper()
	kc(t, c, "-n", ns, "create", "deployment", app, "--image="+framework.PauseImage, "--replicas=10")
	rollout(t, c, ns, "deployment/"+app)
	seen = map[string]map[string]bool{}
	record := func() {
		for _, pod := range podsOf(t, c, ns, "app="+app) {
			for _, ip := range framework.PodIPList(&pod) {
				if seen[ip] == nil {
					seen[ip] = map[string]bool{}
				}
				seen[ip][string(pod.UID)] = true
			}
		}
	}
	deadline := time.Now().Add(45 * time.Second)
	for sizes := []int{40, 5, 30, 0, 25, 10}; time.Now().Before(deadline); rounds++ {
		n := sizes[rounds%len(sizes)]
		kc(t, c, "-n", ns, "scale", "deployment/"+app, "--replicas="+strconv.Itoa(n))
		// Let the scale land partly before the next one, without waiting
		// for it to finish: churn, not a sequence of steady states.
		_ = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 3*time.Second, true, func(ctx context.Context) (bool, error) {
			list, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
			return err == nil && len(list.Items) >= n/2, nil
		})
		record()
	}
	kc(t, c, "-n", ns, "scale", "deployment/"+app, "--replicas=20")
	rollout(t, c, ns, "deployment/"+app)
	record()
	waitClusterConverged(t, c, time.Minute)
	for _, uids := range seen {
		if len(uids) > 1 {
			reused++
		}
	}
	return rounds, seen, reused
}

// TestClusterShippedManifestsFailover installs the shipped manifests
// (kubectl apply -k artifacts/) on the simulated cluster and runs two
// replicas as its ServiceAccount, with a token from `kubectl create token`
// and leader election in the manifests' namespace: only the shipped RBAC
// grants what they do. A Deployment is scaled while the leader is
// SIGKILLed; the standby takes over and the cluster converges, with no
// request refused. With the shipped admission policy installed, the
// garbage collector still deletes the mirror of a pod deleted while no
// controller runs, still orphans one (kubectl delete --cascade=orphan, which
// removes the owner reference the policy otherwise guards), and namespace
// deletion still removes mirrors.
func TestClusterShippedManifestsFailover(t *testing.T) {
	c := suite.SimCluster(t)
	ns := simNamespace(t, c)
	kc(t, c, "apply", "-k", c.Root+"/artifacts")
	// The policy applies to every identity; the other tests on this
	// cluster run their controllers as admin.
	removePolicyAtEnd(t, c.ControlPlane)
	token := strings.TrimSpace(kc(t, c, "-n", framework.DeployNamespace, "create", "token", "podtoip-controller", "--duration=1h"))
	kubeconfig := suite.On(c.ControlPlane).TokenKubeconfig(t, token)

	args := []string{"--leader-elect", "--leader-elect-resource-namespace", framework.DeployNamespace,
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"}
	a := suite.StartControllerAs(t, kubeconfig, args...)
	if err := a.WaitForOutput(framework.CtxFor(t, time.Minute), "Became the leader"); err != nil {
		t.Fatalf("%v\n%s", err, framework.Tail(a.Output(), 40))
	}
	b := suite.StartControllerAs(t, kubeconfig, args...)
	if err := b.WaitForOutput(framework.CtxFor(t, 30*time.Second), "Waiting for the leader lease"); err != nil {
		t.Fatalf("%v\n%s", err, framework.Tail(b.Output(), 40))
	}

	kc(t, c, "-n", ns, "create", "deployment", "ha", "--image="+framework.PauseImage, "--replicas=20")
	rollout(t, c, ns, "deployment/ha")
	waitClusterConverged(t, c, time.Minute)

	kc(t, c, "-n", ns, "scale", "deployment/ha", "--replicas=5")
	a.Kill()
	kc(t, c, "-n", ns, "scale", "deployment/ha", "--replicas=25")
	if err := b.WaitForOutput(framework.CtxFor(t, 30*time.Second), "Became the leader"); err != nil {
		t.Fatalf("the standby did not take over: %v\n%s", err, framework.Tail(b.Output(), 40))
	}
	rollout(t, c, ns, "deployment/ha")
	waitClusterConverged(t, c, time.Minute)
	// RBAC refusals name the user ("User ... cannot ..."); a create in a
	// namespace an earlier test is still deleting is refused too, but for
	// that reason, and is no concern of the RBAC here.
	for _, p := range []*controlplane.Process{a, b} {
		if rbacRefusal.MatchString(p.Output()) {
			t.Errorf("a replica running as the shipped ServiceAccount was refused something by RBAC:\n%s", framework.Tail(p.Output(), 40))
		}
	}
	reportFailed(t, b, map[string]float64{"DELETE 404": 15}, "mirrors the dead leader or the garbage collector deleted first")

	// A pod on a node kwok does not play (kwok strips every finalizer of
	// the pods it deletes, the garbage collector's orphan finalizer too).
	sim := suite.On(c.ControlPlane)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "unplayed-" + ns}}
	if _, err := c.Kube.CoreV1().Nodes().Create(t.Context(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Kube.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	sim.CreatePod(t, ns, "orphan-0", framework.OnNode(node.Name))
	sim.SetPodIPs(t, ns, "orphan-0", corev1.PodRunning, "10.244.250.1")
	sim.WaitMirrorIPs(t, ns, "orphan-0", "10.244.250.1")

	// No controller runs from here: what happens is the cluster's own doing.
	framework.StopCleanly(t, b)
	var pods []corev1.Pod
	for _, p := range podsOf(t, c, ns, "app=ha") {
		if p.DeletionTimestamp == nil {
			pods = append(pods, p)
		}
	}
	if len(pods) == 0 {
		t.Fatal("no pod left")
	}
	gone := pods[0].Name
	kc(t, c, "-n", ns, "delete", "pod", gone, "--wait=false")
	sim.WaitNoMirror(t, ns, gone)
	kc(t, c, "-n", ns, "delete", "pod", "orphan-0", "--cascade=orphan", "--force", "--grace-period=0", "--timeout=1m")
	sim.WaitMirror(t, ns, "orphan-0", "orphaned by the garbage collector", func(m *framework.Mirror) bool {
		return m != nil && len(m.OwnerReferences) == 0
	})
	kc(t, c, "delete", "namespace", ns, "--timeout=2m")
	if n := countMirrors(t, c, ns); n != 0 {
		t.Errorf("%d mirrors left after the namespace was deleted", n)
	}
}

// countMirrors counts the PodToIps in ns of the simulated cluster.
func countMirrors(t *testing.T, c *controlplane.Cluster, ns string) int {
	t.Helper()
	list, err := suite.On(c.ControlPlane).Mirrors(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// simNamespace creates a namespace for one test on the simulated cluster.
// It is deleted when the test ends; the namespace controller finishes that.
func simNamespace(t *testing.T, c *controlplane.Cluster) string {
	t.Helper()
	name := strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, strings.ToLower(strings.TrimPrefix(t.Name(), "Test")))
	if len(name) > 40 {
		name = name[:40]
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: strings.Trim(name, "-") + "-"}}
	ns, err := c.Kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	// Pods need the namespace's default ServiceAccount, which the
	// controller manager creates; kubectl create would race it otherwise.
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.Kube.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("namespace %s got no default ServiceAccount: %v", ns.Name, err)
	}
	return ns.Name
}

// kc runs kubectl against the simulated cluster as a user would, failing
// the test on error.
func kc(t *testing.T, c *controlplane.Cluster, args ...string) string {
	t.Helper()
	out, err := c.Kubectl(framework.CtxFor(t, 3*time.Minute), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kcApply pipes manifest into kubectl apply -f - on the simulated cluster.
func kcApply(t *testing.T, c *controlplane.Cluster, manifest string) {
	t.Helper()
	if out, err := suite.On(c.ControlPlane).KubectlStdin(t, manifest, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
}

// waitClusterConverged runs the checker over every namespace of the
// simulated cluster until it finds nothing missing, stale, orphaned,
// foreign-touched or unmanaged, and then checks that every mirrored address
// came from its node: a pod CIDR of the node, or the node's own address for
// hostNetwork pods.
func waitClusterConverged(t *testing.T, c *controlplane.Cluster, within time.Duration) time.Duration {
	t.Helper()
	took := suite.On(c.ControlPlane).WaitConvergedEverywhere(t, within)
	checkAddressesFromNodes(t, c)
	return took
}

// checkAddressesFromNodes fails the test if a running pod's address did not
// come from where the simulated kubelet takes it: proof that the addresses
// the controller mirrored are the cluster's, not a test's.
func checkAddressesFromNodes(t *testing.T, c *controlplane.Cluster) {
	t.Helper()
	pods, err := c.Kube.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if !framework.PodWantsMirror(&p) {
			continue
		}
		node, ok := c.NodeFor(p.Spec.NodeName)
		if !ok {
			t.Errorf("pod %s/%s with IPs %v runs on %q, not a node of the cluster", p.Namespace, p.Name, framework.PodIPList(&p), p.Spec.NodeName)
			continue
		}
		for _, ip := range framework.PodIPList(&p) {
			if p.Spec.HostNetwork && ip != node.InternalIP || !p.Spec.HostNetwork && !node.InPodCIDRs(ip) {
				t.Errorf("pod %s/%s on %s has address %s, not from the node (pod CIDRs %v, address %s, hostNetwork %v)",
					p.Namespace, p.Name, node.Name, ip, node.PodCIDRs, node.InternalIP, p.Spec.HostNetwork)
			}
		}
	}
}

// failedRequests returns the controller's own count of API answers 404
// and 409 ("METHOD CODE" -> count), from client-go's request metric.
func failedRequests(t *testing.T, p *controlplane.Process) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for k, v := range framework.Scrape(t, p) {
		if !strings.HasPrefix(k, "rest_client_requests_total{") {
			continue
		}
		for _, code := range []string{"404", "409"} {
			if strings.Contains(k, `code="`+code+`"`) {
				method := between(k, `method="`, `"`)
				out[method+" "+code] += v
			}
		}
	}
	return out
}

func between(s, from, to string) string {
	i := strings.Index(s, from)
	if i < 0 {
		return ""
	}
	s = s[i+len(from):]
	if j := strings.Index(s, to); j >= 0 {
		return s[:j]
	}
	return s
}

func formatCounts(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %.0f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// podsOf lists a namespace's pods matching a label selector.
func podsOf(t *testing.T, c *controlplane.Cluster, ns, selector string) []corev1.Pod {
	t.Helper()
	list, err := c.Kube.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// waitPodsGone waits until only n of a namespace's pods match a selector:
// the others are deleted, not only terminating.
func waitPodsGone(t *testing.T, c *controlplane.Cluster, ns, selector string, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return len(podsOf(t, c, ns, selector)) == n, nil
	})
	if err != nil {
		t.Fatalf("%s: %d pods match %s a minute later, want %d", ns, len(podsOf(t, c, ns, selector)), selector, n)
	}
}

// observedHold is a pod's hold on an address as the test saw it through
// its own watch of the pods.
type observedHold struct {
	uid        types.UID
	pod        string
	start, end time.Time // end zero while it lasts
	// terminated is when the pod was seen to begin terminating while it
	// held the address (zero if it did not): it holds it until it is gone.
	terminated time.Time
}

// watchHolds records, from a watch of ns's pods, when each pod started and
// stopped holding each of its addresses (an address, not hostNetwork, not
// finished, not gone: a terminating pod still holds its addresses), and
// when it began terminating.
// stop ends the watch and returns the holds by address, in order of start.
func watchHolds(t *testing.T, c *controlplane.Cluster, ns string) (stop func() map[string][]observedHold) {
	t.Helper()
	w, err := c.Kube.CoreV1().Pods(ns).Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holds := map[string][]observedHold{}
	held := map[types.UID][]string{} // the addresses each pod holds now
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			now := time.Now()
			var is []string
			if ev.Type != watch.Deleted && pod.Status.PodIP != "" && !pod.Spec.HostNetwork &&
				pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
				is = framework.PodIPList(pod)
			}
			if ev.Type != watch.Deleted && pod.DeletionTimestamp != nil {
				for _, a := range held[pod.UID] {
					for i := range holds[a] {
						if h := &holds[a][i]; h.uid == pod.UID && h.end.IsZero() && h.terminated.IsZero() {
							h.terminated = now
						}
					}
				}
			}
			for _, a := range held[pod.UID] {
				if !slices.Contains(is, a) {
					list := holds[a]
					for i := range list {
						if list[i].uid == pod.UID && list[i].end.IsZero() {
							list[i].end = now
						}
					}
				}
			}
			for _, a := range is {
				if !slices.Contains(held[pod.UID], a) {
					holds[a] = append(holds[a], observedHold{uid: pod.UID, pod: pod.Name, start: now})
				}
			}
			held[pod.UID] = is
		}
	}()
	return func() map[string][]observedHold {
		w.Stop()
		<-done
		return holds
	}
}

// TestClusterHistoryMatchesPodLifecycles runs a Deployment scaled down and
// up again (kwok gives freed addresses to the next pods at once), a Job
// whose pods finish, and a deleted pod, and checks every IPHistory of the
// namespace's addresses against the pods' own lifecycles as a watch of the
// pods saw them: the same holders in the same order, each hold from when
// the pod got the address to when it let go of it (to the second, give or
// take the controller's delay), open exactly while the pod holds it, and
// the end of a pod that terminated stated as between when its
// termination began and when it was gone.
func TestClusterHistoryMatchesPodLifecycles(t *testing.T) {
	c := suite.SimCluster(t)
	ns := simNamespace(t, c)
	stop := watchHolds(t, c, ns)
	p := startSimController(t, c)

	kc(t, c, "-n", ns, "create", "deployment", "web", "--image="+framework.PauseImage, "--replicas=8")
	rollout(t, c, ns, "deployment/web")
	// Scaled down and up until a new pod got a removed pod's address: kwok
	// frees an address once it has seen its pod go, which under load (after
	// the other cluster tests) can come after the next pods were given
	// theirs, several rounds running.
	for round := 1; ; round++ {
		before := map[string]bool{}
		for _, pod := range podsOf(t, c, ns, "app=web") {
			for _, a := range framework.PodIPList(&pod) {
				before[a] = true
			}
		}
		kc(t, c, "-n", ns, "scale", "deployment/web", "--replicas=3")
		rollout(t, c, ns, "deployment/web")
		// The rollout ends while the removed pods still terminate; their
		// addresses are free for the next pods only once they are gone.
		waitPodsGone(t, c, ns, "app=web", 3)
		kept := map[string]bool{}
		for _, pod := range podsOf(t, c, ns, "app=web") {
			for _, a := range framework.PodIPList(&pod) {
				kept[a] = true
			}
		}
		kc(t, c, "-n", ns, "scale", "deployment/web", "--replicas=8")
		rollout(t, c, ns, "deployment/web")
		reused := false
		for _, pod := range podsOf(t, c, ns, "app=web") {
			for _, a := range framework.PodIPList(&pod) {
				reused = reused || before[a] && !kept[a]
			}
		}
		if reused {
			break
		}
		if round == 6 {
			t.Fatal("in six rounds of scaling down and up, no new pod got a removed pod's address: the test cannot exercise address reuse")
		}
	}
	kcApply(t, c, fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata: {name: batch, namespace: %s}
spec:
  completions: 4
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: work, image: %s}]
`, ns, framework.PauseImage))
	kc(t, c, "-n", ns, "wait", "--for=condition=Complete", "job/batch", "--timeout=2m")
	kc(t, c, "-n", ns, "delete", "pod", podsOf(t, c, ns, "app=web")[0].Name, "--wait=true")
	rollout(t, c, ns, "deployment/web")
	waitClusterConverged(t, c, time.Minute)
	framework.WaitIdle(t, p, 10*time.Second)
	observed := stop()

	sim := suite.On(c.ControlPlane)
	reused := 0
	for addr, want := range observed {
		if len(want) > 1 {
			reused++
		}
		name := strings.ReplaceAll(addr, ":", "-") // the addresses here are IPv4 or start and end with a digit
		h, err := sim.GetHistory(t.Context(), name)
		if err != nil || h == nil {
			t.Errorf("no IPHistory %s (%v); the namespace's pods held it: %v", name, err, want)
			continue
		}
		var got []framework.HistoryHold
		for _, hold := range h.Holders {
			if hold.Namespace == ns {
				got = append(got, hold)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d holds of the namespace's pods recorded, %d observed:\nrecorded %+v\nobserved %+v", addr, len(got), len(want), got, want)
			continue
		}
		for i, w := range want {
			g := got[i]
			if g.PodUID != w.uid || g.Pod != w.pod {
				t.Errorf("%s hold %d: recorded %+v, observed %s (%s)", addr, i, g, w.pod, w.uid)
				continue
			}
			// Each edge is the interval it lies in: from the controller's
			// last proven view before the change to when it saw it. The
			// change happened by the time the test's watch saw it, and the
			// controller saw it close to then.
			seenStart := g.From.Time
			if g.StartedBefore != nil {
				seenStart = g.StartedBefore.Time
			}
			if g.From.Time.After(w.start) || !near(seenStart, w.start) || seenStart.Sub(g.From.Time) > maxBand {
				t.Errorf("%s hold of %s: recorded a start between %v and %v, observed %v", addr, w.pod, g.From, seenStart, w.start)
			}
			if (g.To == nil) != w.end.IsZero() {
				t.Errorf("%s hold of %s: recorded to %v, observed the end at %v", addr, w.pod, g.To, w.end)
				continue
			}
			if g.To == nil {
				continue
			}
			endedAfter := g.To.Time
			if g.EndedAfter != nil {
				endedAfter = g.EndedAfter.Time
			}
			switch {
			case !near(g.To.Time, w.end):
				t.Errorf("%s hold of %s: recorded the end seen at %v, observed %v", addr, w.pod, g.To, w.end)
			case w.terminated.IsZero() && (endedAfter.After(w.end) || g.To.Time.Sub(endedAfter) > maxBand):
				t.Errorf("%s hold of %s: recorded an end between %v and %v; observed it end at %v, not terminating", addr, w.pod, endedAfter, g.To, w.end)
			case !w.terminated.IsZero() && (endedAfter.After(w.terminated) || w.terminated.Sub(endedAfter) > maxBand):
				t.Errorf("%s hold of %s: recorded an end after %v; observed its termination begin at %v", addr, w.pod, endedAfter, w.terminated)
			}
		}
	}
	if reused == 0 {
		t.Error("no address was held by two pods in turn: the test did not exercise address reuse")
	}
	t.Logf("%d addresses checked, %d of them held by several pods in turn", len(observed), reused)
}

// maxBand bounds the interval of an edge the controller records under this
// test's load: its reads of the pods' resourceVersion come every half
// second, and its watch lags by a little.
const maxBand = 5 * time.Second

// near reports whether a time the controller recorded as seeing a change
// matches when the test's watch saw it, allowing for the controller's
// delay behind it (or its lead).
func near(recorded, observed time.Time) bool {
	return !recorded.Before(observed.Truncate(time.Second).Add(-time.Second)) && !recorded.After(observed.Add(3*time.Second))
}
