package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"example.com/podtoip-controller/e2e/controlplane"
)

// ptpGVR is the PodToIp resource; the tests read it through the dynamic
// client, independently of the controller's hand-written client.
var ptpGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "podtoips"}

const managedBy = "app.kubernetes.io/managed-by"

// mirror is what the tests read back from a PodToIp.
type mirror struct {
	metav1.ObjectMeta `json:"metadata"`
	PodName           string    `json:"podName"`
	PodUID            types.UID `json:"podUID"`
	PodAddress        string    `json:"podAddress"`
	PodIPs            []string  `json:"podIPs"`
	PodIPv4           string    `json:"podIPv4"`
	PodIPv6           string    `json:"podIPv6"`
	NodeName          string    `json:"nodeName"`
	HostNetwork       bool      `json:"hostNetwork"`
	Conflict          bool      `json:"conflict"`
	ConflictsWith     []string  `json:"conflictsWith"`
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	name := strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, strings.ToLower(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.Trim(name, "-")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-"}}
	ns, err := cp.Kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// startController runs the binary under test with the admin kubeconfig and
// stops it gracefully at the end of the test, failing the test unless it
// exits 0. If it has exited before then, the test fails unless it declared
// that exit (p.ExpectExit before a signal it sends or a fault that ends the
// process; p.Kill and p.Stop declare theirs): every exit a test did not
// cause is a failure, also after its last check.
func startController(t *testing.T, args ...string) *controlplane.Process {
	t.Helper()
	return startControllerAs(t, cp.Kubeconfig, args...)
}

func startControllerAs(t *testing.T, kubeconfig string, args ...string) *controlplane.Process {
	t.Helper()
	return startControllerEnv(t, nil, append([]string{"--kubeconfig", kubeconfig}, args...)...)
}

// startControllerEnv is startController with env added to the test's own
// environment (later entries win) and no --kubeconfig unless args has one.
func startControllerEnv(t *testing.T, env []string, args ...string) *controlplane.Process {
	t.Helper()
	logFile := filepath.Join(artifacts, strings.ReplaceAll(t.Name(), "/", "_")+".log")
	// Random loopback ports, read back from the log, let replicas run side by side.
	all := append([]string{"-v=2",
		"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"}, args...)
	p, err := controlplane.StartProcess(controllerBin, env, logFile, all...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-p.Done():
			if err := p.UnexpectedExit(); err != nil {
				t.Errorf("%v; output:\n%s", err, tail(p.Output(), 40))
			}
			return
		default:
		}
		if code, err := p.Stop(30 * time.Second); err != nil || code != 0 {
			t.Errorf("controller did not stop cleanly on SIGTERM (exit %d, %v); output:\n%s", code, err, tail(p.Output(), 40))
		}
	})
	return p
}

// waitReady waits until the controller runs its workers.
func waitReady(t *testing.T, p *controlplane.Process) {
	t.Helper()
	if err := p.WaitForOutput(ctxFor(t, time.Minute), "Starting workers"); err != nil {
		t.Fatalf("controller did not start: %v\n%s", err, tail(p.Output(), 40))
	}
}

type podOpt func(*corev1.Pod)

func onNode(n string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = n } }
func hostNetwork() podOpt    { return func(p *corev1.Pod) { p.Spec.HostNetwork = true } }

// createPod creates a pod; there is no kubelet, so it never runs.
func createPod(t *testing.T, ns, name string, opts ...podOpt) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	for _, o := range opts {
		o(pod)
	}
	pod, err := cp.Kube.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
	return pod
}

// setPodIPs plays the kubelet: it writes the pod's IPs (and a phase)
// through the status subresource.
func setPodIPs(t *testing.T, ns, name string, phase corev1.PodPhase, ips ...string) *corev1.Pod {
	t.Helper()
	var out *corev1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		pod, err := cp.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod.Status.Phase = phase
		pod.Status.PodIP = ""
		pod.Status.PodIPs = nil
		if len(ips) > 0 {
			pod.Status.PodIP = ips[0]
		}
		for _, ip := range ips {
			pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		out, err = cp.Kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("setting IPs of pod %s/%s: %v", ns, name, err)
	}
	return out
}

// runningPod creates a pod and gives it IPs.
func runningPod(t *testing.T, ns, name string, ips []string, opts ...podOpt) *corev1.Pod {
	t.Helper()
	createPod(t, ns, name, opts...)
	return setPodIPs(t, ns, name, corev1.PodRunning, ips...)
}

func deletePod(t *testing.T, ns, name string, force bool) {
	t.Helper()
	opts := metav1.DeleteOptions{}
	if force {
		zero := int64(0)
		opts.GracePeriodSeconds = &zero
	}
	if err := cp.Kube.CoreV1().Pods(ns).Delete(t.Context(), name, opts); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting pod %s/%s: %v", ns, name, err)
	}
}

func mirrors(ns string) dynamic.ResourceInterface { return cp.Dynamic.Resource(ptpGVR).Namespace(ns) }

// getMirror returns the PodToIp ns/name, or nil if there is none. It lists
// by name instead of GETting, so the API server's GET counter shows only the
// controller's reads (which must be zero).
func getMirror(ctx context.Context, ns, name string) (*mirror, error) {
	// (A list selecting metadata.name is counted as a GET, so list the namespace.)
	list, err := mirrors(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		if list.Items[i].GetName() == name {
			return toMirror(&list.Items[i])
		}
	}
	return nil, nil
}

func toMirror(u *unstructured.Unstructured) (*mirror, error) {
	var m mirror
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// waitMirror polls until the mirror of ns/name satisfies ok, and returns it.
func waitMirror(t *testing.T, ns, name string, what string, ok func(*mirror) bool) *mirror {
	t.Helper()
	var last *mirror
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		m, err := getMirror(ctx, ns, name)
		if err != nil {
			return false, err
		}
		last = m
		return ok(m), nil
	})
	if err != nil {
		t.Fatalf("PodToIp %s/%s: waiting for %s: %v; last seen: %+v", ns, name, what, err, describe(last))
	}
	return last
}

// waitMirrorIPs waits until the mirror exists with exactly these IPs
// (canonical, primary first), and each in the field of its family.
func waitMirrorIPs(t *testing.T, ns, name string, ips ...string) *mirror {
	t.Helper()
	var v4, v6 string
	for _, ip := range ips {
		if strings.Contains(ip, ":") {
			v6 = ip
		} else {
			v4 = ip
		}
	}
	return waitMirror(t, ns, name, fmt.Sprintf("IPs %v", ips), func(m *mirror) bool {
		return m != nil && m.PodAddress == ips[0] && fmt.Sprint(m.PodIPs) == fmt.Sprint(ips) && m.PodIPv4 == v4 && m.PodIPv6 == v6
	})
}

func waitNoMirror(t *testing.T, ns, name string) {
	t.Helper()
	waitMirror(t, ns, name, "deletion", func(m *mirror) bool { return m == nil })
}

func describe(m *mirror) string {
	if m == nil {
		return "<none>"
	}
	return fmt.Sprintf("{uid=%s rv=%s labels=%v podUID=%s address=%s ips=%v v4=%s v6=%s node=%s hostNetwork=%v conflict=%v conflictsWith=%q owners=%d}",
		m.UID, m.ResourceVersion, m.Labels, m.PodUID, m.PodAddress, m.PodIPs, m.PodIPv4, m.PodIPv6, m.NodeName, m.HostNetwork,
		m.Conflict, m.ConflictsWith, len(m.OwnerReferences))
}

// podtoipRequests reads the API server's own request counters for podtoips.
func podtoipRequests(t *testing.T) controlplane.Requests {
	t.Helper()
	r, err := cp.ResourceRequests(t.Context(), "podtoips")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// kubectlStdin runs kubectl with the admin kubeconfig and the given input.
func kubectlStdin(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "kubectl", append([]string{"--kubeconfig", cp.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var servingRE = regexp.MustCompile(`"Serving (metrics|health probes)" address="([^"]+)"`)

// endpoint returns the http://address the controller logged for what
// ("metrics" or "health probes").
func endpoint(t *testing.T, p *controlplane.Process, what string) string {
	t.Helper()
	if err := p.WaitForOutput(ctxFor(t, 30*time.Second), `"Serving `+what+`"`); err != nil {
		t.Fatal(err)
	}
	for _, m := range servingRE.FindAllStringSubmatch(p.Output(), -1) {
		if m[1] == what {
			return "http://" + m[2]
		}
	}
	t.Fatalf("no %s address in output", what)
	return ""
}

// waitProbe waits until p's probe path answers code with exactly the body
// want (trailing newline aside).
func waitProbe(t *testing.T, p *controlplane.Process, path string, code int, want string) {
	t.Helper()
	url := endpoint(t, p, "health probes") + path
	var got int
	var body string
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		got, body = httpGet(t, url)
		return got == code && strings.TrimSpace(body) == want, nil
	}); err != nil {
		t.Fatalf("%s = %d %q, want %d %q", path, got, body, code, want)
	}
}

// httpGet returns the status code and body of url.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// scrape parses the controller's /metrics into "name{labels}" -> value, with
// labels in Prometheus text order.
func scrape(t *testing.T, p *controlplane.Process) map[string]float64 {
	t.Helper()
	code, body := httpGet(t, endpoint(t, p, "metrics")+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out
}

// metric is sumSeries for series that must be present: it fails the test
// when none matches, so that a renamed or unregistered metric cannot read
// as 0 and pass an assertion of 0.
func metric(t *testing.T, m map[string]float64, prefix string, labels ...string) float64 {
	t.Helper()
	v, ok := sumSeries(m, prefix, labels...)
	if !ok {
		t.Fatalf("no series %s %v in /metrics", prefix, labels)
	}
	return v
}

// sumSeries adds the values of all series whose name and labels start with
// prefix and contain every one of the label matchers; found is false when
// there is none. Callers must check found, or use metric: a counter with
// labels has no series until its first increment, but a missing series is
// just as often a renamed metric.
func sumSeries(m map[string]float64, prefix string, labels ...string) (float64, bool) {
	var sum float64
	found := false
next:
	for k, v := range m {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(k, l) {
				continue next
			}
		}
		sum += v
		found = true
	}
	return sum, found
}

// TestProcessExitMustBeDeclared checks what startController's cleanup
// relies on: an exit nobody declared is reported with its code, a declared
// one only with the declared code, and Kill and Stop declare their own.
func TestProcessExitMustBeDeclared(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-kubeconfig")
	p, err := controlplane.StartProcess(controllerBin, nil, "", "--kubeconfig", missing)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := p.UnexpectedExit(); err == nil || !strings.Contains(err.Error(), "exit status 1") {
		t.Errorf("undeclared exit 1: %v, want an error naming exit status 1", err)
	}
	p.ExpectExit(0)
	if err := p.UnexpectedExit(); err == nil {
		t.Error("exit 1 where 0 was declared: no error")
	}
	p.ExpectExit(1)
	if err := p.UnexpectedExit(); err != nil {
		t.Errorf("declared exit 1: %v", err)
	}
	// Kill after the process has exited on its own declares nothing.
	p.Kill()
	p.ExpectExit(0)
	if err := p.UnexpectedExit(); err == nil {
		t.Error("Kill excused an earlier exit")
	}

	ns := newNamespace(t)
	for name, end := range map[string]func(*controlplane.Process){
		"SIGKILL": func(p *controlplane.Process) { p.Kill() },
		"SIGTERM": func(p *controlplane.Process) { _, _ = p.Stop(30 * time.Second) },
	} {
		p, err := controlplane.StartProcess(controllerBin, nil, "", "--kubeconfig", cp.Kubeconfig, "--namespace", ns,
			"--metrics-bind-address=0", "--health-probe-bind-address=0")
		if err != nil {
			t.Fatal(err)
		}
		waitReady(t, p)
		if err := p.UnexpectedExit(); err != nil {
			t.Errorf("running: %v", err)
		}
		end(p)
		if err := p.UnexpectedExit(); err != nil {
			t.Errorf("%s by the test: %v", name, err)
		}
	}
}
