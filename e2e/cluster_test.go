package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/controlplane"
)

// The scenarios in this file run on the simulated cluster: the scheduler
// places pods, kwok (the kubelets) makes them Running with addresses from
// their node's pod CIDRs and reuses a freed address at once, and the
// controller manager's workload, garbage-collector and namespace
// controllers act at the same time as podtoip-controller. Each ends with
// the checker over every namespace, and reports the 404 and 409 answers
// the controller met.

const pauseImage = "registry.k8s.io/pause:3.10"

// rbacRefusal matches the authorizer's answer in a log line.
var rbacRefusal = regexp.MustCompile(`User \\?"[^"\\]+\\?" cannot`)

// startSimController runs the controller against the simulated cluster
// and waits until its workers run.
func startSimController(t *testing.T, c *controlplane.Cluster, args ...string) *controlplane.Process {
	t.Helper()
	p := startControllerAs(t, c.Kubeconfig, args...)
	waitReady(t, p)
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
	c := simCluster(t)
	ns := simNamespace(t, c)
	p := startSimController(t, c)

	kc(t, c, "-n", ns, "create", "deployment", "web", "--image="+pauseImage, "--replicas=36")
	rollout(t, c, ns, "deployment/web")
	waitClusterConverged(t, c, time.Minute)
	nodes, dual := map[string]bool{}, 0
	for _, pod := range podsOf(t, c, ns, "app=web") {
		nodes[pod.Spec.NodeName] = true
		if len(pod.Status.PodIPs) == 2 {
			dual++
			m, err := getMirrorOn(t.Context(), c.ControlPlane, ns, pod.Name)
			if err != nil || m == nil || len(m.PodIPs) != 2 {
				t.Errorf("dual-stack pod %s/%s (IPs %v): mirror %v, %v", ns, pod.Name, podIPList(&pod), describeOrNil(m), err)
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
	reportFailed(t, p, map[string]float64{"DELETE 404": 72}, "the garbage collector may delete a mirror first")
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

// getMirrorOn reads a PodToIp from the given control plane (nil if none).
func getMirrorOn(ctx context.Context, on *controlplane.ControlPlane, ns, name string) (*mirror, error) {
	u, err := on.Dynamic.Resource(ptpGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return toMirror(u)
}

func describeOrNil(m *mirror) string {
	if m == nil {
		return "none"
	}
	return describe(m)
}

// TestClusterStatefulSetPodRecreated: a StatefulSet pod deleted comes back
// under its name with a new UID (and often a new address); its mirror must
// follow the new incarnation.
func TestClusterStatefulSetPodRecreated(t *testing.T) {
	c := simCluster(t)
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
`, ns, pauseImage))
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
		m := waitMirrorOn(t, c.ControlPlane, ns, "db-1", "the new incarnation", func(m *mirror) bool {
			return m.PodUID == recreated.UID && m.PodAddress == recreated.Status.PodIP
		})
		t.Logf("round %d: db-1 %s (%s) -> %s (%s); mirror follows", round, old.UID, old.Status.PodIP, m.PodUID, m.PodAddress)
	}
	waitClusterConverged(t, c, time.Minute)
	reportFailed(t, p, map[string]float64{"DELETE 404": 3, "PUT 404": 3}, "the garbage collector may delete the old incarnation's mirror first")
}

// waitMirrorOn waits until the PodToIp ns/name on the given control plane
// satisfies ok.
func waitMirrorOn(t *testing.T, on *controlplane.ControlPlane, ns, name, what string, ok func(*mirror) bool) *mirror {
	t.Helper()
	var last *mirror
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		m, err := getMirrorOn(ctx, on, ns, name)
		if err != nil || m == nil {
			return false, nil
		}
		last = m
		return ok(m), nil
	})
	if err != nil {
		t.Fatalf("PodToIp %s/%s never showed %s; last %s", ns, name, what, describeOrNil(last))
	}
	return last
}

// TestClusterJobs: Job pods run, then finish (Succeeded); a finished pod
// keeps its address in status but is no longer mirrored, and its address
// goes to the next pod.
func TestClusterJobs(t *testing.T) {
	c := simCluster(t)
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
`, ns, pauseImage))
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
	c := simCluster(t)
	ns := simNamespace(t, c)
	p := startSimController(t, c)

	kc(t, c, "-n", ns, "create", "deployment", "api", "--image="+pauseImage, "--replicas=6")
	rollout(t, c, ns, "deployment/api")
	waitClusterConverged(t, c, time.Minute)
	before := scrape(t, p)

	pods := podsOf(t, c, ns, "app=api")
	for _, pod := range pods[:3] {
		kc(t, c, "-n", ns, "delete", "pod", pod.Name, "--force", "--grace-period=0")
	}
	rollout(t, c, ns, "deployment/api")
	waitClusterConverged(t, c, time.Minute)
	for _, pod := range pods[:3] {
		if m, err := getMirrorOn(t.Context(), c.ControlPlane, ns, pod.Name); err != nil || m != nil {
			t.Errorf("force-deleted pod %s still has a mirror %s (%v)", pod.Name, describeOrNil(m), err)
		}
	}
	after := scrape(t, p)
	metric(t, after, "podtoip_controller_syncs_total", `result="success"`) // the metric exists; an error series appears with the first error
	errs := metricOr0(after, "podtoip_controller_syncs_total", `result="error"`) - metricOr0(before, "podtoip_controller_syncs_total", `result="error"`)
	if errs != 0 {
		t.Errorf("%v syncs failed around the force deletions; a mirror deleted by the garbage collector first is not an error", errs)
	}
	reportFailed(t, p, map[string]float64{"DELETE 404": 3}, "the garbage collector may delete a force-deleted pod's mirror first")
}

// metricOr0 is sumSeries that reads a missing series as 0.
func metricOr0(m map[string]float64, prefix string, labels ...string) float64 {
	v, _ := sumSeries(m, prefix, labels...)
	return v
}

// TestClusterNamespaceDeleted: deleting a namespace whose pods are mirrored
// finishes (the namespace controller deletes pods and PodToIps alike) and
// the controller does not recreate mirrors in it.
func TestClusterNamespaceDeleted(t *testing.T) {
	c := simCluster(t)
	ns := simNamespace(t, c)
	p := startSimController(t, c)

	kc(t, c, "-n", ns, "create", "deployment", "shop", "--image="+pauseImage, "--replicas=12")
	rollout(t, c, ns, "deployment/shop")
	waitClusterConverged(t, c, time.Minute)
	before := scrape(t, p)

	start := time.Now()
	kc(t, c, "delete", "namespace", ns, "--timeout=2m")
	if _, err := c.Kube.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("namespace %s still there after kubectl delete returned: %v", ns, err)
	}
	t.Logf("namespace with 12 mirrored pods deleted in %v", time.Since(start).Round(time.Millisecond))
	waitClusterConverged(t, c, time.Minute)
	after := scrape(t, p)
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
	c := simCluster(t)
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
`, ns, node.Name, pauseImage))
	m := waitMirrorOn(t, c.ControlPlane, ns, "agent", "the node's address", func(m *mirror) bool { return m.PodAddress == node.InternalIP })
	t.Logf("hostNetwork pod mirrored: %s", describe(m))
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
	c := simCluster(t)
	ns := simNamespace(t, c)
	p := startSimController(t, c)

	// Every version of every PodToIp, from before the first pod.
	stop := watchConflicts(t, c.ControlPlane, "")

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
	if g, found := conflictMetrics(t, p); g != 0 || found != 0 {
		t.Errorf("conflicting_addresses = %v, address_conflicts_total = %v after churn; want 0 and 0", g, found)
	}
	if strings.Contains(p.Output(), "Address conflict started") {
		t.Errorf("a conflict was logged under churn:\n%s", tail(p.Output(), 30))
	}
	// Each 404 answers a write to a mirror the garbage collector deleted
	// first: at most one per mirror version the watch saw.
	got := reportFailed(t, p, map[string]float64{"DELETE 404": float64(versions), "PUT 404": float64(versions)}, "the garbage collector deletes mirrors of deleted pods as well")
	recordFigure(t, figure{Name: "cluster churn: 404 answers", Value: got["DELETE 404"] + got["PUT 404"], Unit: "count",
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
	kc(t, c, "-n", ns, "create", "deployment", app, "--image="+pauseImage, "--replicas=10")
	rollout(t, c, ns, "deployment/"+app)
	seen = map[string]map[string]bool{}
	record := func() {
		for _, pod := range podsOf(t, c, ns, "app="+app) {
			for _, ip := range podIPList(&pod) {
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
// request refused.
func TestClusterShippedManifestsFailover(t *testing.T) {
	c := simCluster(t)
	ns := simNamespace(t, c)
	kc(t, c, "apply", "-k", c.Root+"/artifacts")
	token := strings.TrimSpace(kc(t, c, "-n", deployNS, "create", "token", "podtoip-controller", "--duration=1h"))
	kubeconfig := tokenKubeconfig(t, c.ControlPlane, token)

	args := []string{"--leader-elect", "--leader-elect-resource-namespace", deployNS,
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"}
	a := startControllerAs(t, kubeconfig, args...)
	if err := a.WaitForOutput(ctxFor(t, time.Minute), "Became the leader"); err != nil {
		t.Fatalf("%v\n%s", err, tail(a.Output(), 40))
	}
	b := startControllerAs(t, kubeconfig, args...)
	if err := b.WaitForOutput(ctxFor(t, 30*time.Second), "Waiting for the leader lease"); err != nil {
		t.Fatalf("%v\n%s", err, tail(b.Output(), 40))
	}

	kc(t, c, "-n", ns, "create", "deployment", "ha", "--image="+pauseImage, "--replicas=20")
	rollout(t, c, ns, "deployment/ha")
	waitClusterConverged(t, c, time.Minute)

	kc(t, c, "-n", ns, "scale", "deployment/ha", "--replicas=5")
	a.Kill()
	kc(t, c, "-n", ns, "scale", "deployment/ha", "--replicas=25")
	if err := b.WaitForOutput(ctxFor(t, 30*time.Second), "Became the leader"); err != nil {
		t.Fatalf("the standby did not take over: %v\n%s", err, tail(b.Output(), 40))
	}
	rollout(t, c, ns, "deployment/ha")
	waitClusterConverged(t, c, time.Minute)
	// RBAC refusals name the user ("User ... cannot ..."); a create in a
	// namespace an earlier test is still deleting is refused too, but for
	// that reason, and is no concern of the RBAC here.
	for _, p := range []*controlplane.Process{a, b} {
		if rbacRefusal.MatchString(p.Output()) {
			t.Errorf("a replica running as the shipped ServiceAccount was refused something by RBAC:\n%s", tail(p.Output(), 40))
		}
	}
	reportFailed(t, b, map[string]float64{"DELETE 404": 15}, "mirrors the dead leader or the garbage collector deleted first")
}
