package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/controlplane"
	"example.com/podtoip-controller/e2e/framework"
)

// "Who has this IP?" for any address of any pod, in canonical form, and
// "who had it then?" from the controller's JSON log. Every lookup is made
// with kubectl, as a user types it.

// lookup runs `kubectl get ptp -A --field-selector selector` on on and
// returns the namespace/name of each PodToIp found, sorted.
func lookup(t *testing.T, on *controlplane.ControlPlane, selector string) []string {
	t.Helper()
	out, err := on.Kubectl(t.Context(), "get", "ptp", "-A", "--field-selector", selector,
		"-o", "custom-columns=NS:.metadata.namespace,NAME:.metadata.name", "--no-headers")
	if err != nil {
		t.Fatalf("lookup by %s: %v", selector, err)
	}
	var found []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			found = append(found, f[0]+"/"+f[1])
		}
	}
	sort.Strings(found)
	return found
}

func expectLookup(t *testing.T, on *controlplane.ControlPlane, selector string, want ...string) {
	t.Helper()
	sort.Strings(want)
	if got := lookup(t, on, selector); !slices.Equal(got, want) {
		t.Errorf("kubectl get ptp -A --field-selector %s found %q, want %q", selector, got, want)
	}
}

// TestAddressLookupAnyAddress: the secondary address of a dual-stack pod,
// IPv6 or IPv4, is one field-selector query; a pod whose status spells its
// IPv6 address in a non-canonical form (the API server accepts it with a
// warning) is found by the canonical form; hostNetwork pods say so, in the
// field and in kubectl's table.
func TestAddressLookupAnyAddress(t *testing.T) {
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)

	suite.RunningPod(t, ns, "v4-primary", []string{"10.244.80.1", "fd00::80:1"}, framework.OnNode("node-80"))
	suite.RunningPod(t, ns, "v6-primary", []string{"fd00::80:2", "10.244.80.2"}, framework.OnNode("node-80"))
	suite.WaitMirrorIPs(t, ns, "v4-primary", "10.244.80.1", "fd00::80:1")
	suite.WaitMirrorIPs(t, ns, "v6-primary", "fd00::80:2", "10.244.80.2")

	t.Run("either family, primary or secondary", func(t *testing.T) {
		expectLookup(t, cp, "podIPv6=fd00::80:1", ns+"/v4-primary")  // secondary IPv6
		expectLookup(t, cp, "podIPv4=10.244.80.2", ns+"/v6-primary") // secondary IPv4
		expectLookup(t, cp, "podIPv4=10.244.80.1", ns+"/v4-primary")
		expectLookup(t, cp, "podIPv6=fd00::80:2", ns+"/v6-primary")
		// podAddress keeps its meaning: the primary address only.
		expectLookup(t, cp, "podAddress=fd00::80:2", ns+"/v6-primary")
		expectLookup(t, cp, "podAddress=fd00::80:1")

		out, err := cp.Kubectl(t.Context(), "get", "ptp", "-n", ns, "-o", "wide")
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if got := strings.Join(strings.Fields(lines[0]), " "); got != "NAME POD ADDRESS NODE HOSTNETWORK CONFLICT TERMINATING AGE IPV4 IPV6 CONFLICTSWITH" {
			t.Errorf("kubectl get ptp -o wide header = %q", got)
		}
		for _, row := range [][]string{{"v4-primary", "10.244.80.1", "fd00::80:1"}, {"v6-primary", "10.244.80.2", "fd00::80:2"}} {
			ok := false
			for _, l := range lines[1:] {
				f := strings.Fields(l)
				// TERMINATING and CONFLICTSWITH are empty: no pod is
				// terminating, none is in conflict.
				ok = ok || (len(f) == 9 && f[0] == row[0] && f[7] == row[1] && f[8] == row[2])
			}
			if !ok {
				t.Errorf("kubectl get ptp -o wide has no row %v:\n%s", row, out)
			}
		}
	})

	t.Run("non-canonical IPv6 in pod status is found by its canonical form", func(t *testing.T) {
		const spelled = "FD00:0:0::0080:0003"
		suite.CreatePod(t, ns, "spelled", framework.OnNode("node-80"))
		out, err := cp.Kubectl(t.Context(), "patch", "pod", "spelled", "-n", ns, "--subresource=status", "--type=merge", "-p",
			`{"status":{"phase":"Running","podIP":"`+spelled+`","podIPs":[{"ip":"`+spelled+`"},{"ip":"10.244.80.3"}]}}`)
		if err != nil {
			t.Fatalf("the API server refused a non-canonical IPv6 pod address: %v", err)
		}
		// The premise: the API server only warns, and keeps the spelling.
		if !strings.Contains(out, "RFC 5952") {
			t.Errorf("kubectl patch did not relay the API server's warning about %s:\n%s", spelled, out)
		}
		if stored, err := cp.Kubectl(t.Context(), "get", "pod", "spelled", "-n", ns, "-o", "jsonpath={.status.podIP}"); err != nil || stored != spelled {
			t.Fatalf("the API server stored podIP %q (%v), want %q as written", stored, err, spelled)
		}
		suite.WaitMirrorIPs(t, ns, "spelled", "fd00::80:3", "10.244.80.3")
		expectLookup(t, cp, "podIPv6=fd00::80:3", ns+"/spelled")
		expectLookup(t, cp, "podAddress=fd00::80:3", ns+"/spelled")
		expectLookup(t, cp, "podIPv6="+spelled) // queries must use the canonical form
	})

	t.Run("hostNetwork pods share their node's address and say so", func(t *testing.T) {
		suite.RunningPod(t, ns, "host-a", []string{"10.244.80.250"}, framework.OnNode("node-80"), framework.HostNetwork())
		suite.RunningPod(t, ns, "host-b", []string{"10.244.80.250"}, framework.OnNode("node-80"), framework.HostNetwork())
		suite.WaitMirror(t, ns, "host-b", "hostNetwork mirror", func(m *framework.Mirror) bool { return m != nil && m.HostNetwork })
		suite.WaitMirror(t, ns, "host-a", "hostNetwork mirror", func(m *framework.Mirror) bool { return m != nil && m.HostNetwork })

		out, err := cp.Kubectl(t.Context(), "get", "ptp", "-A", "--field-selector", "podIPv4=10.244.80.250")
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		// Not in conflict either: hostNetwork pods share by design.
		if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "NAMESPACE NAME POD ADDRESS NODE HOSTNETWORK CONFLICT TERMINATING AGE" ||
			!framework.HasRow(lines, ns, "host-a", "host-a", "10.244.80.250", "node-80", "true", "false") ||
			!framework.HasRow(lines, ns, "host-b", "host-b", "10.244.80.250", "node-80", "true", "false") {
			t.Errorf("lookup of a node's address:\n%s\nwant both hostNetwork pods, HOSTNETWORK true", out)
		}
		expectLookup(t, cp, "podIPv4=10.244.80.250,hostNetwork=false")
		expectLookup(t, cp, "podIPv4=10.244.80.1,hostNetwork=false", ns+"/v4-primary")
	})

	suite.WaitConverged(t, 30*time.Second, nil, ns)
}

// TestAddressNonCanonicalRejected: the CRD refuses a non-canonical address
// from any writer, on create and on update, and says what the canonical
// form is; the canonical form is accepted.
func TestAddressNonCanonicalRejected(t *testing.T) {
	ns := suite.NewNamespace(t)
	object := func(name, fields string) string {
		return fmt.Sprintf("apiVersion: example.com/v1\nkind: PodToIp\nmetadata:\n  name: %s\n  namespace: %s\npodName: %s\npodUID: 0badc0de-0000-4000-8000-00000000beef\n%s\n",
			name, ns, name, fields)
	}
	const address = "podAddress must be an IPv4 or IPv6 address in canonical form: IPv4 without leading zeros, IPv6 as RFC 5952 (lower case, zeros compressed), not IPv4-mapped, no zone"
	for _, tc := range []struct{ name, fields, message string }{
		{"upper-case", `podAddress: "FD00:0:0::0080:0009"`, address},
		{"zeros-expanded", `podAddress: "fd00:0000:0000:0000:0000:0000:0080:0009"`, address},
		{"leading-zeros", `podAddress: "010.244.080.009"`, address},
		{"ipv4-mapped", `podAddress: "::ffff:10.244.80.9"`, address},
		{"podips-entry", "podAddress: \"10.244.80.9\"\npodIPs: [\"10.244.80.9\", \"FD00::80:9\"]", "each podIPs entry" + strings.TrimPrefix(address, "podAddress")},
		{"podipv6", "podAddress: \"fd00::80:9\"\npodIPv6: \"fd00:0::80:9\"", "podIPv6 must be an IPv6 address in canonical form (RFC 5952, lower case, zeros compressed)"},
		{"ipv4-as-podipv6", "podAddress: \"10.244.80.9\"\npodIPv6: \"10.244.80.9\"", "podIPv6 must be an IPv6 address in canonical form"},
		{"ipv6-as-podipv4", "podAddress: \"fd00::80:9\"\npodIPv4: \"fd00::80:9\"", "podIPv4 must be an IPv4 address in dotted decimal without leading zeros"},
	} {
		out, err := suite.KubectlStdin(t, object(tc.name, tc.fields), "apply", "-f", "-")
		if err == nil || !strings.Contains(out, tc.message) {
			t.Errorf("%s: kubectl apply: err=%v, output:\n%s\nwant it refused with %q", tc.name, err, out, tc.message)
		}
		if m, err := suite.GetMirror(t.Context(), ns, tc.name); err != nil || m != nil {
			t.Errorf("%s: stored %s (err %v)", tc.name, framework.Describe(m), err)
		}
	}

	// The canonical form is accepted, and an update away from it refused.
	out, err := suite.KubectlStdin(t, object("canonical",
		"podAddress: \"fd00::80:9\"\npodIPs: [\"fd00::80:9\", \"10.244.80.9\"]\npodIPv4: \"10.244.80.9\"\npodIPv6: \"fd00::80:9\"\nhostNetwork: false"),
		"apply", "-f", "-")
	if err != nil || !strings.Contains(out, "podtoip.example.com/canonical created") {
		t.Fatalf("kubectl apply of canonical addresses: err=%v, output:\n%s", err, out)
	}
	out, err = cp.Kubectl(t.Context(), "patch", "ptp", "canonical", "-n", ns, "--type=merge", "-p", `{"podIPv6":"FD00::80:9"}`)
	if err == nil || !strings.Contains(out, "podIPv6 must be an IPv6 address in canonical form") {
		t.Errorf("kubectl patch to a non-canonical podIPv6: err=%v, output:\n%s", err, out)
	}
}

// TestAddressStoredByOlderAPIServer: pods whose stored status holds what
// today's API server refuses but an older one stored (IPv4 with leading
// zeros, IPv4-mapped IPv6, something that is not an IP) are read as
// Kubernetes reads them: the first two are mirrored in canonical form, the
// last gets no mirror and one Warning event per pod, and no retry loop.
func TestAddressStoredByOlderAPIServer(t *testing.T) {
	ns := suite.NewNamespace(t)
	stored := func(name string, ips ...string) {
		t.Helper()
		if err := cp.RewriteStoredPod(t.Context(), ns, name, func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodRunning
			p.Status.PodIP, p.Status.PodIPs = ips[0], nil
			for _, ip := range ips {
				p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	for name, ips := range map[string][]string{
		"zeros":   {"010.244.081.001"},
		"mapped":  {"::ffff:10.244.81.2", "fd00::81:2"},
		"garbage": {"10.244.81.300"},
		"second":  {"10.244.81.4", "fd00::81::4"},
	} {
		suite.CreatePod(t, ns, name, framework.OnNode("node-81"))
		stored(name, ips...)
		// The premise: the API server serves what is stored, unvalidated.
		if got, err := cp.Kubectl(t.Context(), "get", "pod", name, "-n", ns, "-o", "jsonpath={.status.podIP}"); err != nil || got != ips[0] {
			t.Fatalf("pod %s served with podIP %q (%v), want the stored %q", name, got, err, ips[0])
		}
	}

	before := suite.PodToIpRequests(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)
	suite.WaitMirrorIPs(t, ns, "zeros", "10.244.81.1")
	suite.WaitMirrorIPs(t, ns, "mapped", "10.244.81.2", "fd00::81:2")
	expectLookup(t, cp, "podIPv4=10.244.81.1", ns+"/zeros")
	expectLookup(t, cp, "podIPv4=10.244.81.2", ns+"/mapped")
	suite.WaitForEvent(t, ns, "garbage", "PodToIpInvalidAddress")
	suite.WaitForEvent(t, ns, "second", "PodToIpInvalidAddress")

	// A user sees why with kubectl.
	out, err := cp.Kubectl(t.Context(), "get", "events", "-n", ns, "--field-selector", "reason=PodToIpInvalidAddress",
		"-o", "custom-columns=TYPE:.type,POD:.involvedObject.name,MESSAGE:.message", "--no-headers")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`Warning   garbage   status.podIP "10.244.81.300" is not an IP address`,
		`Warning   second    status.podIPs[1] "fd00::81::4" is not an IP address`} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("events:\n%s\nwant a line like %q", out, want)
		}
	}

	// The pod changing to another invalid address is not reported again;
	// a valid pod's address turning invalid removes its mirror; the
	// barrier's mirror says the queue has taken those changes.
	stored("garbage", "10.244.81.301")
	stored("zeros", "10.244.81.1.1")
	suite.RunningPod(t, ns, "barrier", []string{"10.244.81.250"})
	suite.WaitMirrorIPs(t, ns, "barrier", "10.244.81.250")
	suite.WaitNoMirror(t, ns, "zeros")
	suite.WaitForEvent(t, ns, "zeros", "PodToIpInvalidAddress")
	c := framework.WaitIdle(t, p, 10*time.Second)
	if c.SyncErrors != 0 || c.Retries != 0 {
		t.Errorf("invalid addresses caused %v failed syncs and %v retries, want none", c.SyncErrors, c.Retries)
	}
	if v := framework.Metric(t, framework.Scrape(t, p), "podtoip_controller_invalid_address_pods"); v != 3 {
		t.Errorf("podtoip_controller_invalid_address_pods = %v, want 3", v)
	}
	for _, name := range []string{"garbage", "second", "zeros"} {
		if evs := suite.EventsFor(t, ns, name, "PodToIpInvalidAddress"); len(evs) != 1 || evs[0].Count > 1 || evs[0].Type != corev1.EventTypeWarning {
			t.Errorf("events on %s = %+v, want one Warning, reported once", name, evs)
		}
	}
	suite.WaitConverged(t, 30*time.Second, nil, ns)
	framework.StopCleanly(t, p)
	// Writes: the creates of zeros, mapped and barrier, the delete of zeros.
	if w := suite.PodToIpRequests(t).Sub(before); w.Writes() != 4 || w["POST 201"] != 3 || w.Verb("DELETE") != 1 {
		t.Errorf("podtoips writes = %v, want 3 creates and 1 delete", w)
	}
}

// legacyCommit is the last commit before mirrors had podIPv4, podIPv6 and
// hostNetwork and before the controller wrote canonical addresses: the
// build the upgrade test starts from.
const legacyCommit = "20b90fc488f870d7f09f10c7fd6ba3099ef309b9"

// buildLegacy extracts commit from the repository and builds its
// controller against the current k8s.io release; it returns the binary and
// the CRD of that build.
func buildLegacy(t *testing.T, commit string) (binary, crd string) {
	t.Helper()
	dir := t.TempDir()
	archive := exec.CommandContext(t.Context(), "git", "-C", cp.Root, "archive", "--format=tar", commit)
	untar := exec.CommandContext(t.Context(), "tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	var archiveErr strings.Builder
	archive.Stderr = &archiveErr
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s (the legacy build must be in the repository's history): %v: %s", commit, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("extracting %s: %v", commit, err)
	}
	// The legacy code is built against the k8s.io patch release of the
	// current build. What it writes is its own code's doing, and its
	// dependencies are then the packages the current build compiled: a
	// tree of its own would cost minutes of both cores on a fresh machine.
	version := strings.TrimSpace(string(goCmd(t, cp.Root, "list", "-m", "-f", "{{.Version}}", "k8s.io/client-go")))
	var get []string
	for _, m := range []string{"k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go", "k8s.io/component-base"} {
		get = append(get, m+"@"+version)
	}
	goCmd(t, dir, append([]string{"get"}, get...)...)
	binary = filepath.Join(dir, "podtoip-controller-previous")
	goCmd(t, dir, "build", "-trimpath", "-o", binary, ".")
	return binary, filepath.Join(dir, "artifacts", "crd.yaml")
}

// goCmd runs the go command in dir, within ten minutes, and returns what
// it printed to standard output.
func goCmd(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(framework.CtxFor(t, 10*time.Minute), "go", args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return out
}

// TestAddressUpgradeFromLegacyShape: on a control plane of its own, the
// legacy build's CRD and controller mirror some pods (one of them with a
// non-canonical IPv6 address, kept verbatim); then the current CRD is
// applied over the installed one with kubectl apply, and the current
// controller brings every mirror to the new shape with exactly one update
// each, as the API server counts them, and writes nothing on its next
// restart.
func TestAddressUpgradeFromLegacyShape(t *testing.T) {
	oldBinary, oldCRD := buildLegacy(t, legacyCommit)
	own := suite.StartBareControlPlane(t, "upgrade-controlplane.log")
	if _, err := own.Kubectl(t.Context(), "apply", "-f", oldCRD); err != nil {
		t.Fatal(err)
	}
	if _, err := own.Kubectl(t.Context(), "wait", "--for=condition=Established", "--timeout=60s", "crd/podtoips.example.com"); err != nil {
		t.Fatal(err)
	}

	const ns = "default"
	pods := map[string][]string{
		"v4":      {"10.244.82.1"},
		"v6-dual": {"fd00::82:2", "10.244.82.2"},
		"dual":    {"10.244.82.3", "fd00::82:3"},
		"spelled": {"FD00:0:0::0082:0004"},
		"host":    {"10.244.82.5"},
	}
	for name, ips := range pods {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
			NodeName: "node-82", HostNetwork: name == "host",
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		}}
		if _, err := own.Kube.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		status := map[string]any{"phase": "Running", "podIP": ips[0]}
		var list []any
		for _, ip := range ips {
			list = append(list, map[string]any{"ip": ip})
		}
		status["podIPs"] = list
		patch, _ := json.Marshal(map[string]any{"status": status})
		if out, err := own.Kubectl(t.Context(), "patch", "pod", name, "-n", ns, "--subresource=status", "--type=merge", "-p", string(patch)); err != nil {
			t.Fatalf("setting the IPs of %s: %v\n%s", name, err, out)
		}
	}

	// The legacy build mirrors them, in its shape.
	old, err := controlplane.StartProcess(oldBinary, nil, filepath.Join(suite.Artifacts, "TestAddressUpgradeFromLegacyShape-previous.log"),
		"--kubeconfig", own.Kubeconfig, "-v=2", "--metrics-bind-address=0", "--health-probe-bind-address=0")
	if err != nil {
		t.Fatal(err)
	}
	listMirrors := func() []unstructured.Unstructured {
		t.Helper()
		list, err := own.Dynamic.Resource(framework.PodToIpGVR).Namespace(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return list.Items
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(listMirrors()) == len(pods), nil
	}); err != nil {
		old.Kill()
		t.Fatalf("the legacy build did not mirror the %d pods: %v\n%s", len(pods), err, framework.Tail(old.Output(), 30))
	}
	if code, err := old.Stop(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("stopping the legacy build: exit %d, %v", code, err)
	}
	for _, m := range listMirrors() {
		for _, field := range []string{"podIPv4", "podIPv6", "hostNetwork"} {
			if _, found, _ := unstructured.NestedFieldNoCopy(m.Object, field); found {
				t.Fatalf("the legacy build wrote %s in %s: not the shape the upgrade starts from", field, m.GetName())
			}
		}
		if address, _, _ := unstructured.NestedString(m.Object, "podAddress"); m.GetName() == "spelled" && address != "FD00:0:0::0082:0004" {
			t.Fatalf("the legacy build mirrored spelled as %q, want the pod's spelling", address)
		}
	}

	// The current CRD applies over the installed one, and its new
	// fields are served at once.
	out, err := own.Kubectl(t.Context(), "apply", "-f", filepath.Join(own.Root, "artifacts", "crd.yaml"))
	if err != nil || !strings.Contains(out, "podtoips.example.com configured") {
		t.Fatalf("kubectl apply of the new CRD over the previous one: %v\n%s", err, out)
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := own.Kubectl(ctx, "get", "ptp", "-A", "--field-selector", "podIPv6=fd00::82:4")
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the new CRD's selectable fields are not served: %v", err)
	}
	// Objects the legacy build wrote stay as they are until the
	// controller rewrites them, and users can still label one whose address
	// the new CRD would refuse (validation ratcheting: the address is not
	// changed); the controller's update keeps the label.
	if got := len(listMirrors()); got != len(pods) {
		t.Fatalf("%d mirrors after applying the CRD, want %d", got, len(pods))
	}
	if out, err := own.Kubectl(t.Context(), "label", "ptp", "spelled", "-n", ns, "team=net"); err != nil {
		t.Fatalf("labelling a mirror of the legacy build under the new CRD: %v\n%s", err, out)
	}

	before, err := own.ResourceRequests(t.Context(), "podtoips")
	if err != nil {
		t.Fatal(err)
	}
	p := suite.StartControllerAs(t, own.Kubeconfig)
	framework.WaitReady(t, p)
	suite.On(own).WaitConverged(t, 30*time.Second, nil, ns)
	c := framework.WaitIdle(t, p, 10*time.Second)
	metrics := framework.Scrape(t, p)
	framework.StopCleanly(t, p)
	after, err := own.ResourceRequests(t.Context(), "podtoips")
	if err != nil {
		t.Fatal(err)
	}
	if w := after.Sub(before); w.Writes() != float64(len(pods)) || w["PUT 200"] != float64(len(pods)) {
		t.Errorf("podtoips writes during the upgrade = %v, want exactly one update per mirror (%d)", w, len(pods))
	}
	if v := framework.Metric(t, metrics, `podtoip_controller_writes_total{operation="update"}`); v != float64(len(pods)) {
		t.Errorf("podtoip_controller_writes_total{operation=\"update\"} = %v, want %d", v, len(pods))
	}
	if c.SyncErrors != 0 {
		t.Errorf("%v failed syncs during the upgrade", c.SyncErrors)
	}
	if n := strings.Count(p.Output(), `"PodToIp trail"`); n != len(pods) || strings.Count(p.Output(), `event="changed"`) != len(pods) {
		t.Errorf("%d trail lines during the upgrade, want one changed line per mirror (%d):\n%s", n, len(pods), framework.Tail(p.Output(), 20))
	}
	expectLookup(t, own, "podIPv6=fd00::82:4", ns+"/spelled")
	expectLookup(t, own, "podIPv4=10.244.82.2", ns+"/v6-dual")
	expectLookup(t, own, "podIPv6=fd00::82:3", ns+"/dual")
	expectLookup(t, own, "hostNetwork=true", ns+"/host")
	if out, err := own.Kubectl(t.Context(), "get", "ptp", "spelled", "-n", ns, "-o", "jsonpath={.metadata.labels.team} {.podAddress}"); err != nil || out != "net fd00::82:4" {
		t.Errorf("spelled after the upgrade: label team and podAddress %q (%v), want \"net fd00::82:4\"", out, err)
	}

	// The next start finds everything in sync: the barrier's create is its
	// only write (the queue is FIFO, so every earlier key was taken by the
	// time the barrier is mirrored, and a graceful stop finishes those).
	before = after
	p2 := suite.StartControllerAs(t, own.Kubeconfig)
	framework.WaitReady(t, p2)
	if _, err := own.Kube.CoreV1().Pods(ns).Create(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "barrier", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := own.Kubectl(t.Context(), "patch", "pod", "barrier", "-n", ns, "--subresource=status", "--type=merge", "-p",
		`{"status":{"phase":"Running","podIP":"10.244.82.250","podIPs":[{"ip":"10.244.82.250"}]}}`); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		out, _ := own.Kubectl(ctx, "get", "ptp", "-A", "--field-selector", "podIPv4=10.244.82.250", "-o", "name")
		return strings.TrimSpace(out) == "podtoip.example.com/barrier", nil
	}); err != nil {
		t.Fatalf("the barrier was not mirrored: %v", err)
	}
	framework.StopCleanly(t, p2)
	after, err = own.ResourceRequests(t.Context(), "podtoips")
	if err != nil {
		t.Fatal(err)
	}
	if w := after.Sub(before); w.Writes() != 1 || w["POST 201"] != 1 {
		t.Errorf("podtoips writes on the restart after the upgrade = %v, want only the barrier's create", w)
	}
}

// trailLine is one attribution trail line of the JSON log (the keys the
// README documents).
type trailLine struct {
	Msg   string  `json:"msg"`
	TS    float64 `json:"ts"`
	Event string  `json:"event"`
	Pod   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"pod"`
	PodUID         string            `json:"podUID"`
	Node           string            `json:"node"`
	PodIPs         []string          `json:"podIPs"`
	PodIPv4        string            `json:"podIPv4"`
	PodIPv6        string            `json:"podIPv6"`
	HostNetwork    bool              `json:"hostNetwork"`
	PreviousPodIPs []string          `json:"previousPodIPs"`
	HeldFrom       map[string]string `json:"heldFrom"`
	Observed       string            `json:"observed"`
}

// holding is a pod holding an address from one trail line to another (to
// is zero while it still holds it).
type holding struct {
	address, pod, uid string
	from, to          time.Time
}

// reconstruct reads the trail, in order, into who held which address when:
// assigned starts a holding of each address, changed ends those of the
// previous addresses it no longer has and starts those of the new ones,
// released ends them all.
func reconstruct(t *testing.T, lines []trailLine) []holding {
	t.Helper()
	var out []holding
	open := map[string]int{} // address|uid -> index in out
	for _, l := range lines {
		at, err := time.Parse(time.RFC3339Nano, l.Observed)
		if err != nil {
			t.Fatalf("trail line observed %q: %v", l.Observed, err)
		}
		pod := l.Pod.Namespace + "/" + l.Pod.Name
		end := func(ip string) {
			if i, ok := open[ip+"|"+l.PodUID]; ok {
				out[i].to = at
				delete(open, ip+"|"+l.PodUID)
			}
		}
		start := func(ip string) {
			if _, ok := open[ip+"|"+l.PodUID]; !ok {
				open[ip+"|"+l.PodUID] = len(out)
				out = append(out, holding{address: ip, pod: pod, uid: l.PodUID, from: at})
			}
		}
		switch l.Event {
		case "assigned":
			for _, ip := range l.PodIPs {
				start(ip)
			}
		case "changed":
			for _, ip := range l.PreviousPodIPs {
				if !slices.Contains(l.PodIPs, ip) {
					end(ip)
				}
			}
			for _, ip := range l.PodIPs {
				start(ip)
			}
		case "released":
			for _, ip := range l.PodIPs {
				end(ip)
			}
		default:
			t.Fatalf("trail line with unknown event %q", l.Event)
		}
	}
	return out
}

// whoHad answers "who had address at time at?" from the holdings: the pods
// (namespace/name and UID) holding it then.
func whoHad(hs []holding, address string, at time.Time) []string {
	var who []string
	for _, h := range hs {
		if h.address == address && !at.Before(h.from) && (h.to.IsZero() || at.Before(h.to)) {
			who = append(who, h.pod+" "+h.uid)
		}
	}
	return who
}

// The README's queries of a JSON log, run by TestAddressTrailJSON with jq
// exactly as written there.
const (
	// readmeHistoryQuery lists every trail line about an address, oldest
	// first: when, whether the pod took it or let it go, which pod.
	readmeHistoryQuery = `select(.msg == "PodToIp trail")
  | ((.podIPs | index($ip)) != null) as $has
  | select($has or ((.previousPodIPs // []) | index($ip)) != null)
  | [.observed, (if $has and .event != "released" then "holds" else "lets go" end),
     "\(.pod.namespace)/\(.pod.name)", .podUID] | @tsv`
	// readmeAtQuery is the last such line at or before $t: the pod that
	// held the address then if it says "holds".
	readmeAtQuery = `select(.msg == "PodToIp trail" and .observed <= $t)
  | ((.podIPs | index($ip)) != null) as $has
  | select($has or ((.previousPodIPs // []) | index($ip)) != null)
  | [.observed, (if $has and .event != "released" then "holds" else "lets go" end),
     "\(.pod.namespace)/\(.pod.name)", .podUID] | @tsv`
)

// TestAddressTrailJSON runs the controller with --logging-format=json
// through an IP change (pods/status patch), a deletion, and the reuse of
// the freed address by another pod, then reads the log: every line is a
// JSON object, the trail has one line per write with times within the
// moments the test made each change and saw its mirror, and "who had this
// address at T?" reconstructed from it names the right pod at every time,
// in Go and with the README's jq queries.
func TestAddressTrailJSON(t *testing.T) {
	// The pinned jq that `make controlplane` builds (the suite builds it
	// if missing), not whatever the machine has on PATH.
	jqBin := filepath.Join(cp.Root, "_output", "bin", "jq")
	if _, err := os.Stat(jqBin); err != nil {
		t.Fatalf("the pinned jq is missing (make controlplane builds it): %v", err)
	}
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns, "--logging-format=json")
	framework.WaitReady(t, p)
	const addrA, addrB = "10.244.83.1", "10.244.83.2"

	t0 := time.Now()
	first := suite.RunningPod(t, ns, "first", []string{addrA}, framework.OnNode("node-83"))
	suite.WaitMirrorIPs(t, ns, "first", addrA)
	t1 := time.Now()
	if out, err := cp.Kubectl(t.Context(), "patch", "pod", "first", "-n", ns, "--subresource=status", "--type=merge", "-p",
		`{"status":{"podIP":"`+addrB+`","podIPs":[{"ip":"`+addrB+`"}]}}`); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	suite.WaitMirrorIPs(t, ns, "first", addrB)
	t2 := time.Now()
	suite.DeletePod(t, ns, "first", true)
	suite.WaitNoMirror(t, ns, "first")
	t3 := time.Now()
	second := suite.RunningPod(t, ns, "second", []string{addrB}, framework.OnNode("node-83"))
	suite.WaitMirrorIPs(t, ns, "second", addrB)
	t4 := time.Now()
	framework.StopCleanly(t, p)

	// The whole log is JSON lines; the trail is in it.
	logFile := filepath.Join(t.TempDir(), "controller.log")
	if err := os.WriteFile(logFile, []byte(p.Output()), 0o644); err != nil {
		t.Fatal(err)
	}
	var trail []trailLine
	sc := bufio.NewScanner(strings.NewReader(p.Output()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var l trailLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line is not JSON (%v): %s", err, sc.Text())
		}
		if l.Msg == "PodToIp trail" {
			trail = append(trail, l)
		}
	}
	type want struct {
		event, pod, uid string
		ips, previous   []string
		after, before   time.Time
	}
	wants := []want{
		{"assigned", "first", string(first.UID), []string{addrA}, nil, t0, t1},
		{"changed", "first", string(first.UID), []string{addrB}, []string{addrA}, t1, t2},
		{"released", "first", string(first.UID), []string{addrB}, nil, t2, t3},
		{"assigned", "second", string(second.UID), []string{addrB}, nil, t3, t4},
	}
	if len(trail) != len(wants) {
		t.Fatalf("%d trail lines, want %d:\n%+v", len(trail), len(wants), trail)
	}
	for i, w := range wants {
		l := trail[i]
		observed, err := time.Parse(time.RFC3339Nano, l.Observed)
		if l.Event != w.event || l.Pod.Namespace != ns || l.Pod.Name != w.pod || l.PodUID != w.uid || l.Node != "node-83" ||
			!slices.Equal(l.PodIPs, w.ips) || !slices.Equal(l.PreviousPodIPs, w.previous) || l.PodIPv4 != w.ips[0] || l.PodIPv6 != "" || l.HostNetwork {
			t.Errorf("trail line %d = %+v, want %s of %s/%s (%s) with %v (before: %v)", i, l, w.event, ns, w.pod, w.uid, w.ips, w.previous)
		}
		if err != nil || observed.Before(w.after) || observed.After(w.before) {
			t.Errorf("trail line %d observed %s (%v), want between %s and %s, when the test made the change and saw it",
				i, l.Observed, err, w.after.UTC().Format(time.RFC3339Nano), w.before.UTC().Format(time.RFC3339Nano))
		}
	}

	// The lines that let go of an address say when its hold began (from
	// the history): addrA from the assignment, addrB from the change.
	for _, c := range []struct {
		line          int
		address       string
		after, before time.Time
	}{{1, addrA, t0, t1}, {2, addrB, t1, t2}} {
		from, err := time.Parse(time.RFC3339Nano, trail[c.line].HeldFrom[c.address])
		// The start is kept as the interval it lies in, from the last
		// time the controller's view was proven current: up to a few
		// reads of the pods' resourceVersion before the change.
		if err != nil || from.Before(c.after.Add(-3*time.Second)) || from.After(c.before) {
			t.Errorf("trail line %d heldFrom = %v (%v), want %s's hold's start, between %s and %s",
				c.line, trail[c.line].HeldFrom, err, c.address, c.after.UTC().Format(time.RFC3339), c.before.UTC().Format(time.RFC3339))
		}
	}

	// Who had each address when.
	hs := reconstruct(t, trail)
	podFirst, podSecond := ns+"/first "+string(first.UID), ns+"/second "+string(second.UID)
	for _, q := range []struct {
		address string
		at      time.Time
		want    []string
	}{
		{addrA, t1, []string{podFirst}},
		{addrA, t4, nil},
		{addrB, t2, []string{podFirst}},
		{addrB, t3, nil},
		{addrB, t4, []string{podSecond}},
		{addrB, t0, nil},
	} {
		if got := whoHad(hs, q.address, q.at); !slices.Equal(got, q.want) {
			t.Errorf("who had %s at %s: %q, want %q", q.address, q.at.UTC().Format(time.RFC3339Nano), got, q.want)
		}
	}

	// The README's jq queries give the same answers.
	readme, err := os.ReadFile(filepath.Join(cp.Root, "docs", "trail.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{readmeHistoryQuery, readmeAtQuery} {
		if !strings.Contains(string(readme), q) {
			t.Errorf("the README does not show the query this test runs:\n%s", q)
		}
	}
	jq := func(args ...string) []string {
		t.Helper()
		out, err := exec.CommandContext(t.Context(), jqBin, append(args, logFile)...).CombinedOutput()
		if err != nil {
			t.Fatalf("jq %q: %v\n%s", args, err, out)
		}
		var rows []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if line != "" {
				f := strings.Split(line, "\t")
				rows = append(rows, strings.Join(f[1:], " "))
			}
		}
		return rows
	}
	history := jq("-r", "--arg", "ip", addrB, readmeHistoryQuery)
	if want := []string{"holds " + podFirst, "lets go " + podFirst, "holds " + podSecond}; !slices.Equal(history, want) {
		t.Errorf("README history query for %s: %q, want %q", addrB, history, want)
	}
	history = jq("-r", "--arg", "ip", addrA, readmeHistoryQuery)
	if want := []string{"holds " + podFirst, "lets go " + podFirst}; !slices.Equal(history, want) {
		t.Errorf("README history query for %s: %q, want %q", addrA, history, want)
	}
	at := func(ip string, when time.Time) string {
		rows := jq("-r", "--arg", "ip", ip, "--arg", "t", when.UTC().Format("2006-01-02T15:04:05.000000000Z07:00"), readmeAtQuery)
		if len(rows) == 0 {
			return ""
		}
		return rows[len(rows)-1]
	}
	for _, q := range []struct {
		ip   string
		when time.Time
		want string
	}{
		{addrB, t2, "holds " + podFirst},
		{addrB, t3, "lets go " + podFirst},
		{addrB, t4, "holds " + podSecond},
		{addrA, t0, ""},
	} {
		if got := at(q.ip, q.when); got != q.want {
			t.Errorf("README query: who had %s at %s: %q, want %q", q.ip, q.when.UTC().Format(time.RFC3339Nano), got, q.want)
		}
	}
}
