package e2e

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/podtoip-controller/e2e/framework"
)

// TestMirrorTerminatingPodKeepsMirror: a pod keeps its address, and often
// its traffic (draining, preStop hooks), through its grace period; IPAM
// frees the address only when the sandbox is torn down. So its PodToIp
// stays, updated in place to say terminating: true (a column of kubectl get
// ptp), and goes only when the pod is gone. A new pod given the address
// meanwhile (in a real cluster, proof that the old sandbox let go of it) is
// in conflict with nobody, nor is the terminating pod. On this control
// plane no kubelet confirms a deletion, so a pod bound to a node stays
// terminating until it is deleted with a grace period of 0.
func TestMirrorTerminatingPodKeepsMirror(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	stop := suite.WatchConflicts(t, ns)

	const ip = "10.251.9.1"
	old := suite.RunningPod(t, ns, "old", []string{ip}, framework.OnNode("node-1"))
	first := suite.WaitMirrorIPs(t, ns, "old", ip)
	if first.Terminating || first.Conflict {
		t.Errorf("a running pod's mirror: %s, want neither terminating nor in conflict", framework.Describe(first))
	}

	// A graceful delete, as kubectl delete does it.
	before := suite.PodToIpRequests(t)
	grace := int64(300)
	if err := cp.Kube.CoreV1().Pods(ns).Delete(t.Context(), "old", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	pod, err := cp.Kube.CoreV1().Pods(ns).Get(t.Context(), "old", metav1.GetOptions{})
	if err != nil || pod.DeletionTimestamp == nil {
		t.Fatalf("pod old after a graceful delete: %v (err %v), want it terminating", pod, err)
	}
	m := suite.WaitMirror(t, ns, "old", "terminating", func(m *framework.Mirror) bool { return m != nil && m.Terminating })
	if m.UID != first.UID || m.PodUID != old.UID || m.PodAddress != ip || m.NodeName != "node-1" || m.Conflict {
		t.Errorf("terminating pod's mirror: %s, want the same object (uid %s), its pod, address and node, no conflict", framework.Describe(m), first.UID)
	}
	suite.ExpectWrites(t, before, map[string]float64{"PUT": 1}, "a pod turning terminating")

	out, err := cp.Kubectl(t.Context(), "get", "ptp", "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl get ptp, the pod terminating:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if header := strings.Join(strings.Fields(lines[0]), " "); !strings.HasPrefix(header, "NAME POD ADDRESS NODE HOSTNETWORK CONFLICT TERMINATING ") ||
		!framework.HasRow(lines, "old", "old", ip, "node-1", "false", "false", "true") {
		t.Errorf("kubectl get ptp does not show the pod terminating in its column:\n%s", out)
	}

	// The address given to a new pod while the first terminates.
	suite.RunningPod(t, ns, "new", []string{ip}, framework.OnNode("node-2"))
	waitConflict(t, ns, "new")
	if m := waitConflict(t, ns, "old"); !m.Terminating || m.UID != first.UID {
		t.Errorf("the terminating pod's mirror beside the new holder: %s, want kept, terminating", framework.Describe(m))
	}
	if out, err := cp.Kubectl(t.Context(), "get", "ptp", "-n", ns); err == nil {
		t.Logf("kubectl get ptp, a new pod on the address:\n%s", out)
	}

	// Deleted for good: its mirror goes; the new pod's is left as it is.
	before = suite.PodToIpRequests(t)
	suite.DeletePod(t, ns, "old", true)
	suite.WaitNoMirror(t, ns, "old")
	if m := waitConflict(t, ns, "new"); m.Terminating {
		t.Errorf("the new holder's mirror: %s, want it not terminating", framework.Describe(m))
	}
	suite.WaitConverged(t, 30*time.Second, nil, ns)
	// The API server marks the deletion final (grace period 0) and then
	// removes the pod: the mirror goes at the first, in one DELETE.
	suite.ExpectWrites(t, before, map[string]float64{"DELETE": 1}, "a terminating pod deleted for good")

	flagged, versions := stop()
	if len(flagged) > 0 {
		t.Errorf("%d of %d PodToIp versions said conflict=true, e.g. %q", len(flagged), versions, flagged[:min(5, len(flagged))])
	}
	if g, c := framework.ConflictMetrics(t, p); g != 0 || c != 0 {
		t.Errorf("conflicting_addresses = %v, address_conflicts_total = %v; want 0 and 0", g, c)
	}
	if strings.Contains(p.Output(), "Address conflict started") {
		t.Errorf("a conflict was logged:\n%s", framework.Tail(p.Output(), 30))
	}
	for _, name := range []string{"old", "new"} {
		if events, _ := conflictEvents(t, ns, name); len(events) != 0 {
			t.Errorf("pod %s got AddressConflict events: %+v", name, events)
		}
	}
}
