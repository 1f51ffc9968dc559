// Command demo starts a throwaway control plane (kube-apiserver + etcd on
// loopback), installs the PodToIp CRD, creates a few pods with IPs, runs
// podtoip-controller against it and shows `kubectl get ptp -A` catching up.
// It keeps running until Ctrl-C, then removes everything it started.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/podtoip-controller/e2e/controlplane"
)

type demoPod struct {
	ns, name, node string
	ips            []string
	hostNetwork    bool
}

var demoPods = []demoPod{
	{"default", "web-0", "node-1", []string{"10.244.1.7"}, false},
	{"default", "web-1", "node-2", []string{"10.244.2.9", "fd00::2:9"}, false},
	{"shop", "cart-0", "node-1", []string{"10.244.1.12"}, false},
	{"shop", "db-0", "node-2", []string{"10.244.2.20"}, false},
	{"kube-system", "node-agent-1", "node-1", []string{"172.18.0.2"}, true},
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	step("Starting a throwaway kube-apiserver + etcd on 127.0.0.1")
	logFile, err := os.CreateTemp("", "podtoip-demo-controlplane-*.log")
	if err != nil {
		return err
	}
	defer os.Remove(logFile.Name())
	cp, err := controlplane.Start(controlplane.Options{Output: logFile})
	if err != nil {
		return err
	}
	defer func() {
		step("Stopping the control plane and removing its files")
		_ = cp.Stop()
	}()

	step("Installing the CRD: kubectl apply -f artifacts/crd.yaml")
	if err := cp.InstallCRD(ctx); err != nil {
		return err
	}

	step("Creating demo pods and giving them IPs (there is no kubelet here, so the demo writes pod status itself)")
	for _, p := range demoPods {
		if err := createPod(ctx, cp, p); err != nil {
			return err
		}
	}
	show(ctx, cp, "kubectl get pods -A -o wide", "get", "pods", "-A", "-o", "custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,IP:.status.podIP,NODE:.spec.nodeName")

	// Port 0 on loopback: metrics and probes get free ports that only this
	// machine can reach, read back from the controller's log.
	args := []string{"--kubeconfig", cp.Kubeconfig, "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"}
	step("Starting the controller: bin/podtoip-controller " + strings.Join(args, " "))
	cmd := exec.Command(filepath.Join(cp.Root, "bin", "podtoip-controller"), args...)
	// Ctrl-C signals the terminal's whole foreground process group. In a
	// group of its own, the controller gets only the SIGTERM sent below; a
	// SIGINT as well would be a second signal, which makes it exit at once.
	// (envtest starts kube-apiserver and etcd in their own groups too.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	ctrl, err := controlplane.StartCmd(cmd, "")
	if err != nil {
		return err
	}
	defer func() {
		step("Stopping the controller (SIGTERM)")
		code, err := ctrl.Stop(15 * time.Second)
		fmt.Printf("controller exited with code %d %v\n", code, errOrEmpty(err))
	}()

	addrs, err := servingAddresses(ctx, ctrl)
	if err != nil {
		fmt.Println(ctrl.Output())
		return err
	}
	if err := waitForMirrors(ctx, cp, len(demoPods)); err != nil {
		fmt.Println(ctrl.Output())
		return err
	}
	show(ctx, cp, "kubectl get ptp -A", "get", "ptp", "-A")
	show(ctx, cp, "Who has 10.244.2.20?  kubectl get ptp -A --field-selector podAddress=10.244.2.20",
		"get", "ptp", "-A", "--field-selector", "podAddress=10.244.2.20")

	step("Changing web-0's IP to 10.244.1.8 and deleting db-0")
	if err := setIPs(ctx, cp, demoPods[0], "10.244.1.8"); err != nil {
		return err
	}
	if err := cp.Kube.CoreV1().Pods("shop").Delete(ctx, "db-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		return err
	}
	if err := waitForMirrors(ctx, cp, len(demoPods)-1); err != nil {
		return err
	}
	show(ctx, cp, "kubectl get ptp -A", "get", "ptp", "-A")

	fmt.Printf(`
The control plane keeps running. Point your own kubectl at it:

    export KUBECONFIG=%s
    kubectl get ptp -A
    kubectl get ptp -A --field-selector podAddress=10.244.1.8
    kubectl get ptp -A --field-selector nodeName=node-2

Create pods and set their IPs to watch mirrors appear (the demo has no kubelet):

    kubectl run demo --image=registry.k8s.io/pause:3.10
    kubectl patch pod demo --subresource=status --type=merge \
      -p '{"status":{"phase":"Running","podIP":"10.244.3.3","podIPs":[{"ip":"10.244.3.3"}]}}'

The controller's metrics and readiness:

    curl -s http://%s/metrics | grep ^podtoip_
    curl http://%s/readyz

Press Ctrl-C to stop the controller and the control plane.
`, cp.Kubeconfig, addrs["metrics"], addrs["health probes"])

	<-ctx.Done()
	fmt.Println()
	return nil
}

func step(msg string) { fmt.Printf("\n==> %s\n", msg) }

var servingRE = regexp.MustCompile(`"Serving (metrics|health probes)" address="([^"]+)"`)

// servingAddresses waits for the controller to log where it serves metrics
// and health probes, and returns those addresses by what they serve.
func servingAddresses(ctx context.Context, ctrl *controlplane.Process) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Health probes are set up after metrics, so both are logged by then.
	if err := ctrl.WaitForOutput(ctx, `"Serving health probes"`); err != nil {
		return nil, err
	}
	addrs := map[string]string{}
	for _, m := range servingRE.FindAllStringSubmatch(ctrl.Output(), -1) {
		addrs[m[1]] = m[2]
	}
	return addrs, nil
}

func errOrEmpty(err error) string {
	if err != nil {
		return err.Error()
	}
	return ""
}

func show(ctx context.Context, cp *controlplane.ControlPlane, title string, args ...string) {
	out, err := cp.Kubectl(ctx, args...)
	fmt.Printf("\n$ %s\n%s", title, out)
	if err != nil {
		fmt.Println(err)
	}
}

func createPod(ctx context.Context, cp *controlplane.ControlPlane, p demoPod) error {
	if p.ns != "default" && p.ns != "kube-system" {
		if _, err := cp.Kube.CoreV1().Namespaces().Get(ctx, p.ns, metav1.GetOptions{}); err != nil {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.ns}}
			if _, err := cp.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.ns},
		Spec: corev1.PodSpec{
			NodeName:    p.node,
			HostNetwork: p.hostNetwork,
			Containers:  []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if _, err := cp.Kube.CoreV1().Pods(p.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating pod %s/%s: %w", p.ns, p.name, err)
	}
	return setIPs(ctx, cp, p, p.ips...)
}

func setIPs(ctx context.Context, cp *controlplane.ControlPlane, p demoPod, ips ...string) error {
	pod, err := cp.Kube.CoreV1().Pods(p.ns).Get(ctx, p.name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = ips[0]
	pod.Status.PodIPs = nil
	for _, ip := range ips {
		pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	_, err = cp.Kube.CoreV1().Pods(p.ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return err
}

// waitForMirrors prints `kubectl get ptp -A` as it changes until it shows
// want mirrors matching the pods.
func waitForMirrors(ctx context.Context, cp *controlplane.ControlPlane, want int) error {
	deadline := time.Now().Add(time.Minute)
	last := ""
	for time.Now().Before(deadline) {
		out, err := cp.Kubectl(ctx, "get", "ptp", "-A", "--no-headers", "-o", "custom-columns=NS:.metadata.namespace,POD:.podName,ADDRESS:.podAddress")
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		if out != last {
			n := 0
			if s := strings.TrimSpace(out); s != "" && !strings.HasPrefix(s, "No resources") {
				n = len(strings.Split(s, "\n"))
			}
			fmt.Printf("  ... %d of %d mirrors\n", n, want)
			last = out
			if n == want && mirrorsMatchPods(ctx, cp) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("mirrors did not catch up within a minute")
}

func mirrorsMatchPods(ctx context.Context, cp *controlplane.ControlPlane) bool {
	pods, err := cp.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	out, err := cp.Kubectl(ctx, "get", "ptp", "-A", "--no-headers", "-o", "custom-columns=NS:.metadata.namespace,POD:.podName,ADDRESS:.podAddress")
	if err != nil {
		return false
	}
	for _, p := range pods.Items {
		if p.Status.PodIP != "" && !strings.Contains(out, p.Namespace) {
			return false
		}
		if p.Status.PodIP != "" && !strings.Contains(out, p.Status.PodIP) {
			return false
		}
	}
	return true
}
