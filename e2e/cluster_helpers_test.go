package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"example.com/podtoip-controller/e2e/controlplane"
)

// The simulated cluster is started on first use by a test that needs
// workloads, a scheduler, kubelets (kwok), the garbage collector or the
// namespace controller, and shared by those tests; TestMain stops it. The
// other tests keep the plain API server, where they play the kubelet and
// nothing deletes behind the controller's back.
var (
	simOnce sync.Once
	sim     *controlplane.Cluster
	simErr  error
	simLog  *os.File
)

// simCluster returns the shared simulated cluster, starting it (and
// installing the CRD) on first use. Failing to start is a failure of the
// test, never a skip.
func simCluster(t *testing.T) *controlplane.Cluster {
	t.Helper()
	simOnce.Do(func() {
		start := time.Now()
		simLog, simErr = os.Create(processLog("cluster.log"))
		if simErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		sim, simErr = controlplane.StartCluster(ctx, controlplane.ClusterOptions{Output: simLog})
		if simErr != nil {
			return
		}
		simErr = sim.InstallCRD(ctx)
		t.Logf("simulated cluster (%d kwok nodes, controller manager, scheduler) up in %v", len(sim.Nodes), time.Since(start).Round(time.Millisecond))
	})
	if simErr != nil {
		t.Fatalf("starting the simulated cluster: %v (logs in %s)", simErr, processLog("cluster.log"))
	}
	if err := sim.Healthy(); err != nil {
		t.Fatalf("simulated cluster: %v", err)
	}
	return sim
}

// stopSimCluster stops the simulated cluster if a test started it.
func stopSimCluster() {
	if sim != nil {
		_ = sim.Stop()
	}
	if simLog != nil {
		_ = simLog.Close()
	}
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
	out, err := c.Kubectl(ctxFor(t, 3*time.Minute), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kcApply pipes manifest into kubectl apply -f - on the simulated cluster.
func kcApply(t *testing.T, c *controlplane.Cluster, manifest string) {
	t.Helper()
	cmd := exec.CommandContext(ctxFor(t, time.Minute), "kubectl", "--kubeconfig", c.Kubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
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
	start := time.Now()
	var last convergence
	var lastErr error
	measured := false
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		nss, err := c.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			lastErr = err
			return false, nil
		}
		var names []string
		for _, n := range nss.Items {
			names = append(names, n.Name)
		}
		cv, err := measureConvergence(ctx, c.ControlPlane, nil, names...)
		if err != nil {
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			lastErr = err
			return false, nil
		}
		last, measured = cv, true
		return cv.ok(), nil
	})
	if err != nil {
		if !measured {
			t.Fatalf("not converged within %v: could not measure (%v)", within, lastErr)
		}
		t.Fatalf("not converged over every namespace within %v: %v (last error: %v)", within, last, lastErr)
	}
	took := time.Since(start)
	t.Logf("converged over every namespace in %v", took.Round(time.Millisecond))
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
		if !podWantsMirror(&p) {
			continue
		}
		node, ok := c.NodeFor(p.Spec.NodeName)
		if !ok {
			t.Errorf("pod %s/%s with IPs %v runs on %q, not a node of the cluster", p.Namespace, p.Name, podIPList(&p), p.Spec.NodeName)
			continue
		}
		for _, ip := range podIPList(&p) {
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
	for k, v := range scrape(t, p) {
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

// tokenKubeconfig writes a kubeconfig for on's API server that
// authenticates with a bearer token, as a ServiceAccount's would.
func tokenKubeconfig(t *testing.T, on *controlplane.ControlPlane, token string) string {
	t.Helper()
	admin, err := clientcmd.LoadFromFile(on.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var caData []byte
	for _, c := range admin.Clusters {
		caData = c.CertificateAuthorityData
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: on.Host(), CertificateAuthorityData: caData}
	kc.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["sa"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "sa"}
	kc.CurrentContext = "sa"
	path := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}
