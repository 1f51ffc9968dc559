package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// TestStandbyHoldsNoQueue runs a leader and a standby through batch-style
// churn (every pod a new name): the standby's queue must stay empty, since
// nobody takes its keys, and once the leader is killed the standby must
// reconcile everything from its warm caches, including the changes made
// while nobody led.
func TestStandbyHoldsNoQueue(t *testing.T) {
	ns := suite.NewNamespace(t)
	args := framework.LeaderElectArgs(ns, 4*time.Second, 3*time.Second, 500*time.Millisecond)
	a, b := suite.StartController(t, args...), suite.StartController(t, args...)
	leader, _ := framework.LeaderOf(t, []*controlplane.Process{a, b}, 30*time.Second)
	standby := a
	if leader == a {
		standby = b
	}
	framework.WaitProbe(t, standby, "/readyz", 200, "ok: standby, waiting for the leader lease")

	for i := range 5 {
		suite.RunningPod(t, ns, fmt.Sprintf("keep-%d", i), []string{fmt.Sprintf("10.244.7.%d", i+1)})
	}
	for i := range 30 {
		name := fmt.Sprintf("job-%d", i)
		suite.RunningPod(t, ns, name, []string{fmt.Sprintf("10.244.8.%d", i+1)})
		suite.DeletePod(t, ns, name, false)
	}
	suite.WaitConverged(t, 30*time.Second, nil, ns)

	m := framework.Scrape(t, standby)
	for _, series := range []string{"workqueue_depth", "workqueue_adds_total"} {
		v, found := framework.SumSeries(m, series, `name="podtoip"`)
		if !found {
			t.Fatalf("the standby exports no %s{name=\"podtoip\"}", series)
		}
		if v != 0 {
			t.Errorf("standby %s{name=\"podtoip\"} = %v, want 0: a standby must hold no per-pod queue state", series, v)
		}
	}

	// The leader dies; changes made meanwhile are the new leader's to find.
	leader.Kill()
	suite.DeletePod(t, ns, "keep-0", false)
	suite.RunningPod(t, ns, "late", []string{"10.244.9.1"})
	suite.SetPodIPs(t, ns, "keep-1", corev1.PodRunning, "10.244.9.2")
	framework.LeaderOf(t, []*controlplane.Process{standby}, 30*time.Second)
	suite.WaitConverged(t, 30*time.Second, nil, ns)
}

// TestKubeconfigWinsInsideAPod runs the controller as a CI job in a pod
// would: KUBERNETES_SERVICE_HOST is set, but $KUBECONFIG names the cluster
// to work on. The controller must use $KUBECONFIG and say so.
func TestKubeconfigWinsInsideAPod(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartControllerEnv(t, []string{
		"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=1", "KUBECONFIG=" + cp.Kubeconfig,
	}, "--namespace", ns)
	framework.WaitReady(t, p)
	if want := `config="$KUBECONFIG ` + cp.Kubeconfig; !strings.Contains(p.Output(), want) {
		t.Errorf("the startup log does not name the configuration used (%s):\n%s", want, framework.Tail(p.Output(), 20))
	}
	suite.RunningPod(t, ns, "web", []string{"10.244.10.1"})
	suite.WaitMirrorIPs(t, ns, "web", "10.244.10.1")
}

// TestMasterInsideAPodWithoutCredentials runs the controller in a "pod"
// with no ServiceAccount token, no kubeconfig and --master: the request is
// anonymous and the advice must say so, not send the user looking for a
// token in a kubeconfig that does not exist.
func TestMasterInsideAPodWithoutCredentials(t *testing.T) {
	home := t.TempDir()
	p, err := controlplane.StartProcess(suite.ControllerBin, []string{
		"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=1", "KUBECONFIG=", "HOME=" + home,
	}, "", "--master", cp.Host(), "--startup-timeout=1s", "--metrics-bind-address=0", "--health-probe-bind-address=0")
	if err != nil {
		t.Fatal(err)
	}
	code, err := p.Wait(framework.CtxFor(t, 30*time.Second))
	if err != nil {
		p.Kill()
		t.Fatalf("controller did not exit: %v\n%s", err, p.Output())
	}
	out := p.Output()
	if code != 1 || !strings.Contains(out, "without credentials") || strings.Contains(out, "in the kubeconfig") {
		t.Errorf("exit %d, want 1 with advice naming --master without credentials and no kubeconfig advice:\n%s", code, framework.Tail(out, 20))
	}
}

// TestLeaseDurationMustBeWholeSeconds checks that a lease duration the
// Lease object cannot hold (leaseDurationSeconds is an integer) is refused
// at startup, instead of a replica that never leads while /readyz says ok.
func TestLeaseDurationMustBeWholeSeconds(t *testing.T) {
	for _, tc := range []struct{ lease, renew, retry, want string }{
		{"900ms", "500ms", "100ms", "(use 1s)"},
		{"1500ms", "1s", "200ms", "(use 2s)"},
	} {
		code, out, _ := suite.RunToExit(t, 10*time.Second, "--kubeconfig", cp.Kubeconfig, "--leader-elect",
			"--leader-elect-lease-duration="+tc.lease, "--leader-elect-renew-deadline="+tc.renew, "--leader-elect-retry-period="+tc.retry,
			"--metrics-bind-address=0", "--health-probe-bind-address=0")
		if code != 2 || !strings.Contains(out, "must be a whole number of seconds") || !strings.Contains(out, tc.want) {
			t.Errorf("lease %s: exit %d, want 2 saying it must be whole seconds %s:\n%s", tc.lease, code, tc.want, out)
		}
	}
}

// TestForeignPodToIpPredatesItsPod checks the Warning event for an
// unmanaged PodToIp that exists before its pod (a StatefulSet pod
// recreated under a hand-made object): the pod gets the event when it
// appears, and so does the next pod created under that name.
func TestForeignPodToIpPredatesItsPod(t *testing.T) {
	ns := suite.NewNamespace(t)
	foreign := framework.ForeignObjects{}
	suite.AddForeign(t, foreign, ns, "db-0")
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)

	first := suite.RunningPod(t, ns, "db-0", []string{"10.244.11.1"})
	waitEventFor(t, ns, first.UID)
	suite.DeletePod(t, ns, "db-0", false)
	second := suite.RunningPod(t, ns, "db-0", []string{"10.244.11.2"})
	waitEventFor(t, ns, second.UID)
	suite.WaitConverged(t, 30*time.Second, foreign, ns)
	if n := strings.Count(p.Output(), "Leaving alone a PodToIp that is not managed"); n != 1 {
		t.Errorf("logged the foreign object %d times, want once", n)
	}
}

// waitEventFor waits for the PodToIpNotManaged Warning on the pod with uid.
func waitEventFor(t *testing.T, ns string, uid types.UID) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(uid) + ",reason=PodToIpNotManaged"})
		if err != nil {
			return false, err
		}
		for _, ev := range list.Items {
			if ev.Type == corev1.EventTypeWarning {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no PodToIpNotManaged Warning event on pod %s/%s: %v", ns, uid, err)
	}
}
