package e2e

import (
	"path/filepath"
	"strings"
	"testing"

	"example.com/podtoip-controller/e2e/framework"
)

// TestKubectlView checks what users see with kubectl: the printer columns,
// the server-side "who has this IP?" lookup across namespaces, the CRD's
// validation of addresses and bounds, and that the shipped example is valid.
// The controller watches all namespaces.
func TestKubectlView(t *testing.T) {
	ns1, ns2 := suite.NewNamespace(t), suite.NewNamespace(t)
	p := suite.StartController(t)
	framework.WaitReady(t, p)

	suite.RunningPod(t, ns1, "api-0", []string{"10.244.7.7"}, framework.OnNode("node-a"))
	suite.RunningPod(t, ns1, "api-1", []string{"10.244.7.8", "fd00::7:8"}, framework.OnNode("node-b"))
	suite.RunningPod(t, ns2, "cache-0", []string{"10.244.8.1"}, framework.OnNode("node-a"))
	suite.WaitMirrorIPs(t, ns1, "api-0", "10.244.7.7")
	suite.WaitMirrorIPs(t, ns1, "api-1", "10.244.7.8", "fd00::7:8")
	suite.WaitMirrorIPs(t, ns2, "cache-0", "10.244.8.1")

	out, err := cp.Kubectl(t.Context(), "get", "ptp", "-n", ns1)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "NAME POD ADDRESS NODE HOSTNETWORK CONFLICT TERMINATING AGE" {
		t.Errorf("kubectl get ptp header = %q, want NAME POD ADDRESS NODE HOSTNETWORK CONFLICT TERMINATING AGE", lines[0])
	}
	if len(lines) != 3 || !framework.HasRow(lines, "api-0", "api-0", "10.244.7.7", "node-a", "false", "false") ||
		!framework.HasRow(lines, "api-1", "api-1", "10.244.7.8", "node-b", "false", "false") {
		t.Errorf("kubectl get ptp -n %s =\n%s", ns1, out)
	}

	// "Who has 10.244.7.7?" is answered by the server (selectableFields).
	out, err = cp.Kubectl(t.Context(), "get", "ptp", "-A", "--field-selector", "podAddress=10.244.7.7", "--no-headers")
	if err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 || !framework.HasRow(lines, ns1, "api-0", "api-0", "10.244.7.7") {
		t.Errorf("lookup by podAddress returned:\n%s", out)
	}
	out, err = cp.Kubectl(t.Context(), "get", "ptp", "-A", "--field-selector", "nodeName=node-a", "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(out); len(got) != 2 || !strings.Contains(out, "/api-0") || !strings.Contains(out, "/cache-0") {
		t.Errorf("lookup by nodeName=node-a returned %q, want api-0 and cache-0", out)
	}
	out, _ = cp.Kubectl(t.Context(), "get", "ptp", "-A", "--field-selector", "podAddress=10.99.99.99")
	if !strings.Contains(out, "No resources found") {
		t.Errorf("lookup of an unused IP returned %q, want no resources", out)
	}

	// The schema rejects what is not an IP.
	bad := `{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"bad","namespace":"` + ns2 + `"},"podName":"bad","podUID":"x","podAddress":"not-an-ip","podIPs":["10.0.0.1","nope"]}`
	out, err = suite.KubectlStdin(t, bad, "create", "-f", "-")
	if err == nil || !strings.Contains(out, "podAddress must be an IPv4 or IPv6 address") || !strings.Contains(out, "each podIPs entry must be an IPv4 or IPv6 address") {
		t.Errorf("creating a PodToIp with invalid addresses: err=%v out=%s", err, out)
	}

	// The schema's bounds (artifacts/crd.yaml) are enforced by the server:
	// at most two podIPs (one per IP family), and no address longer than
	// the longest IPv6 text form (45 characters).
	tooMany := `{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"three","namespace":"` + ns2 + `"},"podName":"three","podUID":"x","podAddress":"10.0.0.1","podIPs":["10.0.0.1","fd00::1","10.0.0.2"]}`
	out, err = suite.KubectlStdin(t, tooMany, "create", "-f", "-")
	if err == nil || !strings.Contains(out, "podIPs: Too many: 3") || !strings.Contains(out, "at most 2 items") {
		t.Errorf("creating a PodToIp with 3 podIPs: err=%v out=%s", err, out)
	}
	tooLong := `{"apiVersion":"example.com/v1","kind":"PodToIp","metadata":{"name":"long","namespace":"` + ns2 + `"},"podName":"long","podUID":"x","podAddress":"` + strings.Repeat("1", 46) + `"}`
	out, err = suite.KubectlStdin(t, tooLong, "create", "-f", "-")
	if err == nil || !strings.Contains(out, "podAddress: Too long") || !strings.Contains(out, "45") {
		t.Errorf("creating a PodToIp with a 46-character podAddress: err=%v out=%s", err, out)
	}

	// The shipped example is valid. It names the namespace "default"; a
	// server-side dry run validates it there, as shipped, and stores nothing.
	example := filepath.Join(cp.Root, "artifacts", "examples", "podtoip.yaml")
	out, err = cp.Kubectl(t.Context(), "apply", "--dry-run=server", "-f", example)
	if err != nil || !strings.Contains(out, "podtoip.example.com/web-0 created (server dry run)") {
		t.Errorf("kubectl apply --dry-run=server -f %s: err=%v out=%s", example, err, out)
	}
	if m, err := suite.GetMirror(t.Context(), "default", "web-0"); err != nil || m != nil {
		t.Errorf("the dry run stored default/web-0: %s (err %v)", framework.Describe(m), err)
	}
}
