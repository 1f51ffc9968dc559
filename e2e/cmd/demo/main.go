// Command demo starts a throwaway simulated cluster on loopback
// (kube-apiserver + etcd, kube-controller-manager, kube-scheduler, and kwok
// playing the kubelets of three fake nodes, one of them dual-stack),
// installs the CRDs, RBAC and admission policy of artifacts/, runs
// podtoip-controller against it as its ServiceAccount, deploys a first
// workload, shows `kubectl get ptp -A` following it, and `kubectl ptp check`
// proving the install. Then it tells the user how to drive the cluster with
// ordinary kubectl commands, and keeps running until Ctrl-C, SIGTERM or
// SIGHUP (or until nothing reads its output any more); then it stops
// everything it started and removes its files. A run that could not clean
// up (killed with SIGKILL) is cleaned up by the next one.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"example.com/podtoip-controller/e2e/controlplane"
)

// The first workload: a Deployment the demo creates the way a user would,
// whose pods the scheduler spreads over the nodes.
const (
	demoNamespace = "shop"
	demoApp       = "cart"
	demoReplicas  = 4
	pauseImage    = "registry.k8s.io/pause:3.10"
)

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

	step("Starting a simulated cluster on 127.0.0.1 (files in " + dir + "):\n" +
		"    kube-apiserver + etcd, kube-controller-manager, kube-scheduler, and kwok as the kubelets\n" +
		"    of 3 fake nodes (node-3 dual-stack). Pods are scheduled and get addresses; no container runs.")
	logFile, err := os.Create(filepath.Join(dir, "controlplane.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	cl, err := controlplane.StartCluster(ctx, controlplane.ClusterOptions{Output: logFile})
	if err != nil {
		return err
	}
	defer func() {
		step("Stopping the simulated cluster and removing its files")
		_ = cl.Stop()
	}()
	show(ctx, cl, "kubectl get nodes -o wide", "get", "nodes", "-o", "custom-columns=NAME:.metadata.name,READY:.status.conditions[?(@.type==\"Ready\")].status,INTERNAL-IP:.status.addresses[?(@.type==\"InternalIP\")].address,POD-CIDRS:.spec.podCIDRs")

	// What `kubectl apply -k artifacts/` installs, but the Deployment and
	// what serves it: kwok would run its pods as fakes, so the real binary
	// runs here instead, as the Deployment's ServiceAccount.
	step("Installing the CRDs, the controller's namespace, ServiceAccount and RBAC, and the admission policy that lets\n" +
		"    only that ServiceAccount write PodToIps and IPHistories:\n" +
		"    kubectl apply " + strings.Join(installFlags(), " "))
	if err := install(ctx, cl); err != nil {
		return err
	}

	// As in a pod: a token of the ServiceAccount from the TokenRequest API,
	// and leader election in the namespace the Deployment runs in. The
	// token is written to the controller's kubeconfig, never shown.
	saKubeconfig := filepath.Join(dir, "podtoip-controller.kubeconfig")
	step(fmt.Sprintf("Running the controller as its ServiceAccount %s/%s: a token from the TokenRequest API\n"+
		"    (kubectl -n %s create token %s --duration=%s) in a kubeconfig of its own, %s",
		controllerNamespace, controllerName, controllerNamespace, controllerName, tokenDuration, saKubeconfig))
	if err := writeServiceAccountKubeconfig(ctx, cl, saKubeconfig); err != nil {
		return err
	}
	// Port 0 on loopback: metrics and probes get free ports that only this
	// machine can reach, read back from the controller's log.
	args := []string{"--kubeconfig", saKubeconfig, "--leader-elect", "--leader-elect-resource-namespace=" + controllerNamespace,
		"--metrics-bind-address=127.0.0.1:0", "--metrics-secure=false", "--health-probe-bind-address=127.0.0.1:0"}
	step("Starting the controller: bin/podtoip-controller " + strings.Join(args, " "))
	cmd := exec.Command(filepath.Join(cl.Root, "bin", "podtoip-controller"), args...)
	// Ctrl-C signals the terminal's whole foreground process group. In a
	// group of its own, the controller gets only the SIGTERM sent below; a
	// SIGINT as well would be a second signal, which makes it exit at once.
	// (The cluster's processes run in their own groups too.)
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

	step(fmt.Sprintf("Deploying a first workload: kubectl create namespace %s; kubectl -n %s create deployment %s --image=%s --replicas=%d",
		demoNamespace, demoNamespace, demoApp, pauseImage, demoReplicas))
	if _, err := cl.Kubectl(ctx, "create", "namespace", demoNamespace); err != nil {
		return err
	}
	if err := waitForServiceAccount(ctx, cl, demoNamespace); err != nil {
		return err
	}
	if _, err := cl.Kubectl(ctx, "-n", demoNamespace, "create", "deployment", demoApp, "--image="+pauseImage, fmt.Sprintf("--replicas=%d", demoReplicas)); err != nil {
		return err
	}
	if _, err := cl.Kubectl(ctx, "-n", demoNamespace, "rollout", "status", "deployment/"+demoApp, "--timeout=2m"); err != nil {
		return err
	}
	if err := waitForMirrors(ctx, cl); err != nil {
		fmt.Fprintln(out, ctrl.Output())
		return err
	}
	show(ctx, cl, "kubectl get pods -A -o wide", "get", "pods", "-A", "-o", "custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,IPS:.status.podIPs[*].ip,NODE:.spec.nodeName")
	show(ctx, cl, "kubectl get ptp -A -o wide", "get", "ptp", "-A", "-o", "wide")
	ip4, ip6, err := someAddresses(ctx, cl)
	if err != nil {
		return err
	}
	show(ctx, cl, "Who has "+ip4+"?  kubectl get ptp -A --field-selector podIPv4="+ip4,
		"get", "ptp", "-A", "--field-selector", "podIPv4="+ip4)
	show(ctx, cl, "Who has "+ip6+"?  kubectl get ptp -A --field-selector podIPv6="+ip6+"  (any address of either family)",
		"get", "ptp", "-A", "--field-selector", "podIPv6="+ip6)

	// The history keeps whole seconds, and two holds that follow each other
	// within a second both answer for it: the scale-down starts in the
	// second after the one asked about, so that only the pods of before
	// held the address then. (A wait for the clock, not for a condition.)
	// The history vouches only from the leader's start on (rounded up to
	// the second): ask about a time after it, once its coverage has
	// reached the present.
	if err := waitCoverage(ctx, cl, time.Now().UTC().Truncate(time.Second), reaches); err != nil {
		return err
	}
	before := time.Now().UTC().Truncate(time.Second)
	time.Sleep(time.Until(before.Add(time.Second)))
	step(fmt.Sprintf("Scaling %s to 2 replicas: kubectl -n %s scale deployment %s --replicas=2", demoApp, demoNamespace, demoApp))
	if _, err := cl.Kubectl(ctx, "-n", demoNamespace, "scale", "deployment", demoApp, "--replicas=2"); err != nil {
		return err
	}
	if _, err := cl.Kubectl(ctx, "-n", demoNamespace, "rollout", "status", "deployment/"+demoApp, "--timeout=2m"); err != nil {
		return err
	}
	if err := waitForMirrors(ctx, cl); err != nil {
		return err
	}
	show(ctx, cl, "kubectl get ptp -A", "get", "ptp", "-A")

	step(fmt.Sprintf("Scaling %s back to %d: the freed addresses go to the new pods at once", demoApp, demoReplicas))
	if _, err := cl.Kubectl(ctx, "-n", demoNamespace, "scale", "deployment", demoApp, fmt.Sprintf("--replicas=%d", demoReplicas)); err != nil {
		return err
	}
	if _, err := cl.Kubectl(ctx, "-n", demoNamespace, "rollout", "status", "deployment/"+demoApp, "--timeout=2m"); err != nil {
		return err
	}
	if err := waitForMirrors(ctx, cl); err != nil {
		return err
	}
	reused, err := reusedAddress(ctx, cl, before)
	if err != nil {
		return err
	}
	if err := waitCoverage(ctx, cl, before, includes); err != nil {
		return err
	}
	at := before.Format(time.RFC3339)
	showPlugin(ctx, cl, "Who had "+reused+" before the scale-down?  kubectl ptp who-had "+reused+" --at "+at, "who-had", reused, "--at", at)
	showPlugin(ctx, cl, "Who has it now?  kubectl ptp who-has "+reused, "who-has", reused)
	showPlugin(ctx, cl, "kubectl ptp history "+reused, "history", reused)

	step("Checking the installation as the admin: the CRDs, the policy and its bindings, forged writes refused (dry runs),\n" +
		"    the leader's Lease and the history (no Deployment here: the controller runs outside the cluster)")
	showPlugin(ctx, cl, "kubectl ptp check", "check")

	fmt.Fprintf(out, `
The cluster keeps running. Point your own kubectl at it:

    export KUBECONFIG=%s

Watch the mirrors in one terminal:

    kubectl get ptp -A -w

and drive the cluster in another, as you would a real one:

    kubectl create deployment web --image=nginx --replicas=3
    kubectl scale deployment web --replicas=6
    kubectl delete pod -l app=web --wait=false      # replacements get new names; freed addresses are reused at once
    kubectl get ptp -A --field-selector podIPv4=%s
    kubectl get ptp -A --field-selector podIPv6=%s
    kubectl get ptp -A --field-selector nodeName=node-3
    kubectl get ptp -A --field-selector conflict=true   # addresses held twice

Ask who had an address, with the kubectl plugin:

    export PATH=%s:$PATH
    kubectl ptp who-had %s --at 2m        # or --at 2026-11-25T14:05:00Z
    kubectl ptp history %s
    kubectl get iph                             # every address's history
    kubectl ptp check                           # is the install safe, and the controller leading?

    kubectl delete namespace %s

The nodes are kwok's: pods are scheduled, become Running and get addresses
from their node's pod CIDRs, but no container runs and nothing can be
reached at those addresses (there is no network between pods).

The controller's metrics and readiness:

    curl -s http://%s/metrics | grep ^podtoip_
    curl http://%s/readyz

Press Ctrl-C to stop the controller and the cluster and remove their files.
`, cl.Kubeconfig, ip4, ip6, filepath.Join(cl.Root, "bin"), reused, reused, demoNamespace, addrs["metrics"], addrs["health probes"])

	<-ctx.Done()
	fmt.Fprintln(out)
	step(fmt.Sprintf("Stopping: %v", context.Cause(ctx)))
	return nil
}

func step(msg string) { fmt.Fprintf(out, "\n==> %s\n", msg) }

// The controller's identity and home, as artifacts/rbac.yaml and
// artifacts/policy.yaml name them.
const (
	controllerNamespace = "podtoip-system"
	controllerName      = "podtoip-controller"
	// tokenDuration outlasts a demo: nothing renews the token, as a
	// kubelet renews a pod's.
	tokenDuration = "24h"
)

// installManifests are the files of artifacts/ the demo applies, in order.
var installManifests = []string{"namespace.yaml", "rbac.yaml", "crd.yaml", "policy.yaml"}

func installFlags() []string {
	var flags []string
	for _, f := range installManifests {
		flags = append(flags, "-f", "artifacts/"+f)
	}
	return flags
}

// install applies installManifests and waits until the CRDs are served.
// The policy is loaded in the background within seconds; the controller,
// which it lets write, does not wait for it.
func install(ctx context.Context, cl *controlplane.Cluster) error {
	args := []string{"apply"}
	for _, f := range installManifests {
		args = append(args, "-f", filepath.Join(cl.Root, "artifacts", f))
	}
	if _, err := cl.Kubectl(ctx, args...); err != nil {
		return err
	}
	_, err := cl.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/podtoips.example.com", "crd/iphistories.example.com", "crd/iphistorycoverages.example.com")
	return err
}

// writeServiceAccountKubeconfig writes to path a kubeconfig for the
// cluster's API server that authenticates with a new token of the
// controller's ServiceAccount.
func writeServiceAccountKubeconfig(ctx context.Context, cl *controlplane.Cluster, path string) error {
	token, err := cl.Kubectl(ctx, "-n", controllerNamespace, "create", "token", controllerName, "--duration="+tokenDuration)
	if err != nil {
		return fmt.Errorf("requesting a token of ServiceAccount %s/%s: %w", controllerNamespace, controllerName, err)
	}
	admin, err := clientcmd.LoadFromFile(cl.Kubeconfig)
	if err != nil {
		return err
	}
	var caData []byte
	for _, c := range admin.Clusters {
		caData = c.CertificateAuthorityData
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["demo"] = &clientcmdapi.Cluster{Server: cl.Host(), CertificateAuthorityData: caData}
	kc.AuthInfos[controllerName] = &clientcmdapi.AuthInfo{Token: strings.TrimSpace(token)}
	kc.Contexts[controllerName] = &clientcmdapi.Context{Cluster: "demo", AuthInfo: controllerName}
	kc.CurrentContext = controllerName
	return clientcmd.WriteToFile(*kc, path)
}

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

func show(ctx context.Context, cl *controlplane.Cluster, title string, args ...string) {
	res, err := cl.Kubectl(ctx, args...)
	fmt.Fprintf(out, "\n$ %s\n%s", title, res)
	if err != nil {
		fmt.Fprintln(out, err)
	}
}

// waitForServiceAccount waits for the namespace's default ServiceAccount,
// which the controller manager creates: pods cannot be created before it.
func waitForServiceAccount(ctx context.Context, cl *controlplane.Cluster, ns string) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cl.Kube.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// someAddresses returns an IPv4 and an IPv6 address of the first
// workload's pods: the scheduler spreads four replicas over the three
// nodes, so one of them normally runs on the dual-stack node-3.
func someAddresses(ctx context.Context, cl *controlplane.Cluster) (ip4, ip6 string, err error) {
	pods, err := cl.Kube.CoreV1().Pods(demoNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + demoApp})
	if err != nil {
		return "", "", err
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, ip := range p.Status.PodIPs {
			switch {
			case strings.Contains(ip.IP, ":") && ip6 == "":
				ip6 = ip.IP
			case !strings.Contains(ip.IP, ":") && ip4 == "":
				ip4 = ip.IP
			}
		}
	}
	if ip4 == "" {
		return "", "", fmt.Errorf("no pod of deployment %s has an address", demoApp)
	}
	if ip6 == "" {
		// All four on the IPv4-only nodes: point at the address node-3's
		// first pod will get.
		ip6 = "fd00:0:0:3::1"
	}
	return ip4, ip6, nil
}

// waitForMirrors prints the number of mirrors as it changes until every
// pod that should have a mirror has one with its address, and no other
// mirror is left.
func waitForMirrors(ctx context.Context, cl *controlplane.Cluster) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	last := ""
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		have, want, err := mirrorState(ctx, cl)
		if err != nil {
			return false, nil
		}
		if progress := fmt.Sprintf("  ... %d of %d mirrors", len(have), len(want)); progress != last {
			fmt.Fprintln(out, progress)
			last = progress
		}
		return maps.Equal(have, want), nil
	})
	if err != nil {
		return fmt.Errorf("mirrors did not catch up with the pods within a minute: %w", err)
	}
	return nil
}

// mirrorState returns the mirrors ("ns/name" -> address) and what they
// should be according to the pods: those with an address that have not
// finished and whose deletion is not final (a terminating pod keeps its
// mirror until it is gone).
func mirrorState(ctx context.Context, cl *controlplane.Cluster) (have, want map[string]string, err error) {
	pods, err := cl.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	want = map[string]string{}
	for _, p := range pods.Items {
		final := p.DeletionTimestamp != nil && p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds == 0
		if p.Status.PodIP != "" && !final && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			want[p.Namespace+"/"+p.Name] = p.Status.PodIP
		}
	}
	list, err := cl.Dynamic.Resource(ptpGVR).Namespace("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	have = map[string]string{}
	for _, m := range list.Items {
		addr, _, _ := unstructured.NestedString(m.Object, "podAddress")
		have[m.GetNamespace()+"/"+m.GetName()] = addr
	}
	return have, want, nil
}

var ptpGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "podtoips"}

// coverageGVR is the history's coverage: how far it can vouch.
var coverageGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "iphistorycoverages"}

// waitCoverage waits, for at most a minute, until one of the intervals of
// the history's coverage satisfies ok for t. The controller proves its
// history every few seconds.
func waitCoverage(ctx context.Context, cl *controlplane.Cluster, t time.Time, ok func(t, from, to time.Time) bool) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		c, err := cl.Dynamic.Resource(coverageGVR).Get(ctx, "all", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		intervals, _, _ := unstructured.NestedSlice(c.Object, "intervals")
		for _, iv := range intervals {
			m, _ := iv.(map[string]any)
			from, err1 := time.Parse(time.RFC3339, fmt.Sprint(m["from"]))
			to, err2 := time.Parse(time.RFC3339, fmt.Sprint(m["to"]))
			if err1 == nil && err2 == nil && ok(t, from, to) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		// The answer then says that the history cannot vouch for t.
		fmt.Fprintf(os.Stderr, "note: the history's coverage does not reach %s after a minute\n", t.Format(time.RFC3339))
	}
	return nil
}

// includes: the history vouches for t, so a question about t is answered
// as evidence, not as "the history cannot vouch for that time".
func includes(t, from, to time.Time) bool { return !t.Before(from) && !t.After(to) }

// reaches: the history has proven everything up to t. Its interval may
// start after t (a leader that started within t's second begins at the
// next one), but every time from then on will be included as it goes on.
func reaches(t, _, to time.Time) bool { return !t.After(to) }

// showPlugin runs the kubectl plugin as a user would, kubectl ptp with
// bin/ on PATH, and shows what it says.
func showPlugin(ctx context.Context, cl *controlplane.Cluster, title string, args ...string) {
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"ptp"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(cl.Root, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+cl.Kubeconfig)
	res, err := cmd.CombinedOutput()
	fmt.Fprintf(out, "\n$ %s\n%s", title, res)
	if err != nil {
		fmt.Fprintln(out, err)
	}
}

// reusedAddress returns an address of the demo's namespace that a pod held
// at before, a pod that is gone now, and that another pod holds now.
func reusedAddress(ctx context.Context, cl *controlplane.Cluster, before time.Time) (string, error) {
	var found string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := cl.Dynamic.Resource(iphGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, item := range list.Items {
			holders, _, _ := unstructured.NestedSlice(item.Object, "holders")
			var then, now string
			for _, h := range holders {
				hold, _ := h.(map[string]any)
				if hold["namespace"] != demoNamespace {
					continue
				}
				from, _ := time.Parse(time.RFC3339, fmt.Sprint(hold["from"]))
				to, closed := hold["to"].(string)
				end, _ := time.Parse(time.RFC3339, to)
				switch {
				case closed && !from.After(before) && end.After(before):
					then = fmt.Sprint(hold["pod"])
				case !closed:
					now = fmt.Sprint(hold["pod"])
				}
			}
			if then != "" && now != "" && then != now {
				found, _, _ = unstructured.NestedString(item.Object, "address")
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("no address of %s changed hands after the scale-down: %w", demoNamespace, err)
	}
	return found, nil
}

var iphGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "iphistories"}
