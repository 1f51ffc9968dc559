// Command demo starts a throwaway control plane (kube-apiserver + etcd on
// loopback), installs the PodToIp CRD, creates a few pods with IPs, runs
// podtoip-controller against it and shows `kubectl get ptp -A` catching up.
// It keeps running until Ctrl-C, SIGTERM or SIGHUP (or until nothing reads
// its output any more), then stops everything it started and removes its
// files. A run that could not clean up (killed with SIGKILL) is cleaned up
// by the next one.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// out is where the demo talks to the user; run replaces it with a console
// that notices when nobody reads any more.
var out io.Writer = os.Stdout

// errOutputGone is why the demo stops when its output is closed.
var errOutputGone = errors.New("its output was closed")

func main() {
	// With `make demo | tee demo.log`, Ctrl-C kills tee too, so the demo's
	// next write goes to a pipe nobody reads. By default Go kills a program
	// with SIGPIPE when a write to stdout or stderr fails that way, which
	// would leave kube-apiserver and etcd running. Asking for SIGPIPE makes
	// those writes return EPIPE instead (see os/signal), and the cleanup goes
	// on. Unlike ignoring it, this does not pass on to the processes the demo
	// starts.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func run() (err error) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	out = &console{w: os.Stdout, gone: func() { cancel(errOutputGone) }}
	stopOnSignals(cancel)

	// Everything this run creates lives under one directory named after
	// this process, and every process it starts carries that name in its
	// environment: the next run can tell which leftovers are whose.
	tmp := os.TempDir()
	removeLeftovers(tmp)
	dir, err := newRunDir(tmp)
	if err != nil {
		return err
	}
	defer func() {
		// Reached however run ends, once the steps below have stopped what
		// they started; anything still running then is stopped here.
		if left := stopProcesses(runEnv + "=" + dir); len(left) > 0 {
			fmt.Fprintf(out, "Stopped what was still running: %s\n", strings.Join(left, ", "))
		}
		if rmErr := os.RemoveAll(dir); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("removing %s: %w", dir, rmErr))
		} else {
			fmt.Fprintf(out, "Removed %s\n", dir)
		}
		if err != nil && ctx.Err() != nil {
			// Stopped on request before the demo was up: not a failure.
			fmt.Fprintf(out, "Stopped early (%v): %v\n", context.Cause(ctx), err)
			err = nil
		}
	}()

	step("Starting a throwaway kube-apiserver + etcd on 127.0.0.1 (files in " + dir + ")")
	logFile, err := os.Create(filepath.Join(dir, "controlplane.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
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
		fmt.Fprintf(out, "controller exited with code %d %v\n", code, errOrEmpty(err))
	}()

	addrs, err := servingAddresses(ctx, ctrl)
	if err != nil {
		fmt.Fprintln(out, ctrl.Output())
		return err
	}
	if err := waitForMirrors(ctx, cp, len(demoPods)); err != nil {
		fmt.Fprintln(out, ctrl.Output())
		return err
	}
	show(ctx, cp, "kubectl get ptp -A", "get", "ptp", "-A")
	show(ctx, cp, "Who has 10.244.2.20?  kubectl get ptp -A --field-selector podIPv4=10.244.2.20",
		"get", "ptp", "-A", "--field-selector", "podIPv4=10.244.2.20")

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

	fmt.Fprintf(out, `
The control plane keeps running. Point your own kubectl at it:

    export KUBECONFIG=%s
    kubectl get ptp -A
    kubectl get ptp -A --field-selector podIPv4=10.244.1.8
    kubectl get ptp -A --field-selector podIPv6=fd00::2:9
    kubectl get ptp -A --field-selector nodeName=node-2

Create pods and set their IPs to watch mirrors appear (the demo has no kubelet):

    kubectl run demo --image=registry.k8s.io/pause:3.10
    kubectl patch pod demo --subresource=status --type=merge \
      -p '{"status":{"phase":"Running","podIP":"10.244.3.3","podIPs":[{"ip":"10.244.3.3"}]}}'

The controller's metrics and readiness:

    curl -s http://%s/metrics | grep ^podtoip_
    curl http://%s/readyz

Press Ctrl-C to stop the controller and the control plane and remove their files.
`, cp.Kubeconfig, addrs["metrics"], addrs["health probes"])

	<-ctx.Done()
	fmt.Fprintln(out)
	step(fmt.Sprintf("Stopping: %v", context.Cause(ctx)))
	return nil
}

func step(msg string) { fmt.Fprintf(out, "\n==> %s\n", msg) }

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
	res, err := cp.Kubectl(ctx, args...)
	fmt.Fprintf(out, "\n$ %s\n%s", title, res)
	if err != nil {
		fmt.Fprintln(out, err)
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
		listing, err := cp.Kubectl(ctx, "get", "ptp", "-A", "--no-headers", "-o", "custom-columns=NS:.metadata.namespace,POD:.podName,ADDRESS:.podAddress")
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		if listing != last {
			n := 0
			if s := strings.TrimSpace(listing); s != "" && !strings.HasPrefix(s, "No resources") {
				n = len(strings.Split(s, "\n"))
			}
			fmt.Fprintf(out, "  ... %d of %d mirrors\n", n, want)
			last = listing
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
	listing, err := cp.Kubectl(ctx, "get", "ptp", "-A", "--no-headers", "-o", "custom-columns=NS:.metadata.namespace,POD:.podName,ADDRESS:.podAddress")
	if err != nil {
		return false
	}
	for _, p := range pods.Items {
		if p.Status.PodIP != "" && !strings.Contains(listing, p.Namespace) {
			return false
		}
		if p.Status.PodIP != "" && !strings.Contains(listing, p.Status.PodIP) {
			return false
		}
	}
	return true
}
