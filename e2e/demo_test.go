package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/framework"
)

// TestDemo runs `make demo`'s program as a terminal would, checks what it
// shows, and then stops it each way it gets stopped in practice, one run per
// way: Ctrl-C in `make demo | tee demo.log` (the reader of its output goes
// away with the same Ctrl-C), its output closed while it starts (`make demo
// | head`), SIGKILL (which nothing survives, so the next run must clean up
// after it), SIGTERM and SIGHUP. After each stop, nothing
// the run started may still be running and none of its files may remain.
func TestDemo(t *testing.T) {
	tDemo := t
	bin := filepath.Join(t.TempDir(), "demo")
	if out, err := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/demo").CombinedOutput(); err != nil {
		t.Fatalf("building the demo: %v\n%s", err, out)
	}

	t.Run("Ctrl-C after the reader of its output went away", func(t *testing.T) {
		d := startDemo(t, t, bin)
		checkDemoShows(t, d.output())
		driveDemo(t, d.output())
		// `make demo | tee demo.log` and Ctrl-C: the terminal signals the
		// whole foreground process group, tee exits, and every write the
		// demo makes while cleaning up goes to a pipe without a reader.
		// Closing the reader first makes that certain rather than likely.
		d.closeReader()
		d.signalGroup(syscall.SIGINT)
		d.checkStopped(t, "")
	})

	t.Run("output closed while it starts", func(t *testing.T) {
		// `make demo | head`: nobody reads any more and nobody can press
		// Ctrl-C in it, so the demo stops at its next write and cleans up.
		d := launchDemo(t, t, bin)
		ctx := framework.CtxFor(t, 3*time.Minute)
		for d.runDir == "" {
			if m := runDirRE.FindStringSubmatch(d.output()); m != nil {
				d.runDir = m[1]
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the demo did not say where it keeps its files: %v\n%s", ctx.Err(), framework.Tail(d.output(), 40))
			case <-d.done:
				t.Fatalf("the demo exited (%v):\n%s", d.cmd.ProcessState, framework.Tail(d.output(), 40))
			case <-time.After(20 * time.Millisecond):
			}
		}
		// Starting the control plane takes seconds and is followed by
		// many more messages, so one of them finds the reader gone.
		d.closeReader()
		d.checkStopped(t, "")
	})

	var killed *demo
	t.Run("SIGKILL leaves what it started running", func(t *testing.T) {
		// Cleaned up (if the next run does not) at the end of the whole
		// test, not of this subtest: the next run is to find its leftovers.
		killed = startDemo(t, tDemo, bin)
		if err := syscall.Kill(killed.pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if _, err := killed.wait(time.Minute); err != nil {
			t.Fatal(err)
		}
		// The premise of the next run's cleanup: a demo that cannot clean
		// up leaves its processes and files behind. (The controller may
		// die on its own: its output went into a pipe the demo read.)
		left := map[string]bool{}
		for _, pr := range processesWith(t, killed.marker) {
			left[filepath.Base(pr.args[0])] = true
		}
		if !left["kube-apiserver"] || !left["etcd"] {
			t.Errorf("want kube-apiserver and etcd left running after SIGKILL, got %v", left)
		}
		for _, f := range killed.files {
			if _, err := os.Stat(f); err != nil {
				t.Errorf("after SIGKILL: %v", err)
			}
		}
	})

	t.Run("SIGTERM, after cleaning up the SIGKILLed run", func(t *testing.T) {
		d := startDemo(t, t, bin)
		if killed != nil {
			// The killed run is cleaned up before this one starts its own
			// control plane: it says so, and nothing of it remains.
			if !strings.Contains(d.output(), fmt.Sprintf("Cleaning up after an earlier demo (pid %d)", killed.pid)) {
				t.Errorf("the demo did not report cleaning up after the killed run (pid %d):\n%s", killed.pid, framework.Tail(d.output(), 40))
			}
			killed.checkNothingLeft(t)
		}
		// `kill PID`: the demo alone gets the signal.
		if err := syscall.Kill(d.pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		d.checkStopped(t, "received terminated")
	})

	t.Run("SIGHUP", func(t *testing.T) {
		d := startDemo(t, t, bin)
		// The terminal went away: the kernel signals its foreground group.
		d.signalGroup(syscall.SIGHUP)
		// A signal during the cleanup (an impatient Ctrl-C) must not cut
		// it short.
		if err := waitOutput(framework.CtxFor(t, time.Minute), d, "==> Stopping: received hangup"); err != nil {
			t.Fatal(err)
		}
		d.signalGroup(syscall.SIGINT)
		if err := waitOutput(framework.CtxFor(t, time.Minute), d, "Received interrupt: still stopping"); err != nil {
			t.Error(err)
		}
		d.checkStopped(t, "received hangup")
	})
}

// demo is one run of the demo program, started as a shell starts a
// foreground job, with its output going into a pipe that the test reads
// until it closes it.
type demo struct {
	t      *testing.T
	cmd    *exec.Cmd
	pid    int
	marker string // in the environment of every process the run starts
	done   chan struct{}

	reader   *os.File
	readDone chan struct{}
	mu       sync.Mutex
	out      bytes.Buffer

	// Found once the demo is up.
	runDir string   // where it says it keeps its files
	files  []string // the control plane's files, found from its processes
	procs  []proc
}

// launchDemo starts the demo. Whatever happens, owner ends with no process
// of the run alive and no file of it left, so a failing run does not burden
// the next.
func launchDemo(t, owner *testing.T, bin string) *demo {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &demo{t: t, reader: r, done: make(chan struct{}), readDone: make(chan struct{}),
		marker: fmt.Sprintf("PODTOIP_DEMO_TEST=%d", time.Now().UnixNano())}
	log, err := os.Create(suite.TestLog(t))
	if err != nil {
		t.Fatal(err)
	}
	d.cmd = exec.Command(bin)
	// Every process the demo starts inherits this variable, whatever its
	// process group, so /proc tells which of them are still alive.
	d.cmd.Env = append(os.Environ(), d.marker)
	// The demo writes straight into the pipe (an *os.File is passed as is,
	// with no copying goroutine of the test in between), as into tee's.
	d.cmd.Stdout, d.cmd.Stderr = w, w
	// A shell runs a foreground job in a process group of its own, and
	// Ctrl-C signals that whole group.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	d.pid = d.cmd.Process.Pid
	go func() {
		_ = d.cmd.Wait()
		close(d.done)
	}()
	go func() {
		defer close(d.readDone)
		defer log.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			d.mu.Lock()
			d.out.Write(buf[:n])
			d.mu.Unlock()
			log.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	owner.Cleanup(func() { d.forceCleanup(owner) })
	return d
}

// startDemo launches the demo and waits until it is up and waiting for
// Ctrl-C, then takes stock of its processes and files.
func startDemo(t, owner *testing.T, bin string) *demo {
	t.Helper()
	d := launchDemo(t, owner, bin)
	ctx := framework.CtxFor(t, 3*time.Minute)
	for !strings.Contains(d.output(), "Press Ctrl-C") {
		select {
		case <-ctx.Done():
			t.Fatalf("the demo did not come up: %v\n%s", ctx.Err(), framework.Tail(d.output(), 40))
		case <-d.done:
			<-d.readDone
			if !strings.Contains(d.output(), "Press Ctrl-C") {
				t.Fatalf("the demo exited (%v) before it was up:\n%s", d.cmd.ProcessState, framework.Tail(d.output(), 40))
			}
		case <-time.After(50 * time.Millisecond):
		}
	}
	d.takeStock(t)
	return d
}

func (d *demo) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String()
}

// closeReader makes the test stop reading the demo's output, as tee does
// when Ctrl-C kills it: from then on the demo writes into a pipe without a
// reader.
func (d *demo) closeReader() {
	d.reader.Close()
	<-d.readDone
}

// waitOutput waits until the demo has printed substr.
func waitOutput(ctx context.Context, d *demo, substr string) error {
	for !strings.Contains(d.output(), substr) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %q: %w\n%s", substr, ctx.Err(), framework.Tail(d.output(), 30))
		case <-d.readDone:
			if strings.Contains(d.output(), substr) {
				return nil
			}
			return fmt.Errorf("the demo's output ended without %q:\n%s", substr, framework.Tail(d.output(), 30))
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func (d *demo) signalGroup(sig syscall.Signal) {
	if err := syscall.Kill(-d.pid, sig); err != nil {
		d.t.Fatalf("signalling the demo's process group: %v", err)
	}
}

// wait waits up to timeout for the demo to exit and returns how it ended.
func (d *demo) wait(timeout time.Duration) (*os.ProcessState, error) {
	select {
	case <-d.done:
		return d.cmd.ProcessState, nil
	case <-time.After(timeout):
		return nil, fmt.Errorf("the demo (pid %d) did not exit within %v", d.pid, timeout)
	}
}

var (
	runDirRE     = regexp.MustCompile(`files in (\S+)\)`)
	kubeconfigRE = regexp.MustCompile(`export KUBECONFIG=(\S+)`)
)

// takeStock finds the run's processes and files while it is up: the
// printed kubeconfig's directory, the directories its processes were given
// on their command lines, and the log file the API server writes to. They
// must all be in the one directory the demo names, which it removes.
func (d *demo) takeStock(t *testing.T) {
	t.Helper()
	out := d.output()
	m := kubeconfigRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no KUBECONFIG in the instructions:\n%s", out)
	}
	d.files = []string{filepath.Dir(m[1])}
	d.procs = processesWith(t, d.marker)
	names := map[string]bool{}
	for _, pr := range d.procs {
		names[filepath.Base(pr.args[0])] = true
		for _, a := range pr.args {
			if k, v, ok := strings.Cut(a, "="); ok && (k == "--data-dir" || k == "--cert-dir") {
				d.files = append(d.files, v)
			}
		}
		if filepath.Base(pr.args[0]) == "kube-apiserver" {
			if log, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/1", pr.pid)); err == nil && strings.HasPrefix(log, os.TempDir()) {
				d.files = append(d.files, log)
			}
		}
	}
	if len(d.files) != 4 {
		t.Fatalf("want the kubeconfig's directory, etcd's data, the API server's certificates and log; got %v", d.files)
	}
	for _, n := range []string{"demo", "kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok", "podtoip-controller"} {
		if !names[n] {
			t.Fatalf("%s is not among the demo's processes %v", n, d.procs)
		}
	}
	// Ctrl-C and a hang-up must reach the demo alone, which then stops each
	// process once. The controller takes a second signal as "exit at once".
	for _, pr := range d.procs {
		if pr.pid != d.pid && pr.pgid == d.pid {
			t.Errorf("%s is in the demo's process group and would get Ctrl-C too", pr.args[0])
		}
	}
	for _, f := range d.files {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("while the demo runs: %v", err)
		}
	}
	if m := runDirRE.FindStringSubmatch(out); m == nil {
		t.Errorf("the demo does not say where it keeps its files:\n%s", out)
	} else {
		d.runDir = m[1]
		for _, f := range d.files {
			if !strings.HasPrefix(f, d.runDir+"/") {
				t.Errorf("%s is outside the demo's directory %s", f, d.runDir)
			}
		}
	}
}

// checkStopped waits for the demo to exit after it was told to stop and
// checks that it exited on its own, successfully, and left nothing behind.
// With its output still read, it must also say why it stopped (said) and
// that the controller stopped cleanly.
func (d *demo) checkStopped(t *testing.T, said string) {
	t.Helper()
	// The demo's own bounds: 15 s for the controller, 30 s for each of
	// kube-apiserver and etcd.
	state, err := d.wait(2 * time.Minute)
	if err != nil {
		t.Fatalf("%v\n%s", err, framework.Tail(d.output(), 30))
	}
	if said != "" {
		<-d.readDone // the demo and everything it started have closed the pipe
	}
	out := d.output()
	if !state.Exited() || state.ExitCode() != 0 {
		t.Errorf("the demo ended with %v, want exit code 0:\n%s", state, framework.Tail(out, 30))
	}
	if said != "" {
		if !strings.Contains(out, "==> Stopping: "+said) {
			t.Errorf("the demo did not say it was stopping because it %s:\n%s", said, framework.Tail(out, 30))
		}
		if !strings.Contains(out, "controller exited with code 0") {
			t.Errorf("the controller did not stop cleanly:\n%s", framework.Tail(out, 30))
		}
	}
	d.checkNothingLeft(t)
}

// checkNothingLeft checks that no process of the run is alive and none of
// its files remain.
func (d *demo) checkNothingLeft(t *testing.T) {
	t.Helper()
	files := d.files
	if d.runDir != "" {
		files = append(files, d.runDir)
	}
	for _, f := range files {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s was left behind (%v)", f, err)
		}
	}
	// The demo waits for everything it started, so nothing may remain once
	// it has exited.
	if err := syscall.Kill(-d.pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the demo's process group is still alive (%v)", err)
	}
	if left := processesWith(t, d.marker); len(left) > 0 {
		t.Errorf("processes left running: %v", left)
	}
}

// forceCleanup ends the run however the test went: Ctrl-C first, as a user
// would, then SIGKILL for whatever is left, and removes its files.
func (d *demo) forceCleanup(t *testing.T) {
	select {
	case <-d.done:
	default:
		_ = syscall.Kill(-d.pid, syscall.SIGINT)
		if _, err := d.wait(2 * time.Minute); err != nil {
			_ = syscall.Kill(-d.pid, syscall.SIGKILL)
			<-d.done
		}
	}
	d.reader.Close()
	for _, pr := range processesWith(t, d.marker) {
		_ = syscall.Kill(pr.pid, syscall.SIGKILL)
	}
	for _, f := range append(d.files, d.runDir) {
		if f != "" {
			_ = os.RemoveAll(f)
		}
	}
}

// checkDemoShows checks what the demo shows once it is up: the nodes, the
// listings of the first workload's mirrors, the field selector's answer,
// kubectl ptp check passing, and instructions that work.
func checkDemoShows(t *testing.T, out string) {
	t.Helper()
	if nodes := shown(out, "kubectl get nodes"); len(nodes) != 1 || strings.Count(nodes[0], "True") != 3 || !strings.Contains(nodes[0], "fd00:") {
		t.Errorf("want three Ready nodes, one dual-stack, shown:\n%s", out)
	}
	gets := shown(out, "kubectl get ptp -A")
	if len(gets) != 2 {
		t.Fatalf("want two `kubectl get ptp -A` listings, got %d:\n%s", len(gets), out)
	}
	if n := strings.Count(gets[0], "\nshop "); n != 4 {
		t.Errorf("the first listing shows %d mirrors in shop, want the 4 of the first workload:\n%s", n, gets[0])
	}
	if n := strings.Count(gets[1], "\nshop "); n != 2 {
		t.Errorf("after scaling to 2, the listing shows %d mirrors in shop, want 2:\n%s", n, gets[1])
	}
	// One lookup per family, each answered by exactly one mirror.
	whos := regexp.MustCompile(`\$ Who has (\S+)\?`).FindAllStringSubmatch(out, -1)
	if len(whos) != 2 {
		t.Errorf("the demo does not ask who has an address of each family:\n%s", out)
	}
	for _, who := range whos {
		if ans := shown(out, "Who has "+who[1]); len(ans) != 1 || len(strings.Split(strings.TrimSpace(ans[0]), "\n")) != 3 || !strings.Contains(ans[0], who[1]) {
			t.Errorf("the field selector did not answer one mirror (a title, a header and one row) with %s: %q", who[1], ans)
		}
	}

	// Who had a freed address: a pod that no longer exists, while another
	// holds the address now.
	podOf := func(title string) string {
		sections := shown(out, title)
		if len(sections) != 1 {
			return ""
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimSpace(sections[0]), "\n") {
			if !strings.HasPrefix(l, "note: ") { // what the answer cannot vouch for, on standard error
				lines = append(lines, l)
			}
		}
		if len(lines) != 3 { // the title, a header and one row
			return ""
		}
		if f := strings.Fields(lines[2]); len(f) > 1 && f[0] == "shop" {
			return f[1]
		}
		return ""
	}
	had, has := podOf("Who had "), podOf("Who has it now?")
	if had == "" || has == "" || had == has {
		t.Errorf("kubectl ptp who-had and who-has do not name a gone pod and the one holding its address now (%q, %q):\n%s", had, has, out)
	} else if listing := shown(out, "kubectl get ptp -A"); len(listing) == 2 && strings.Contains(listing[1], had+" ") {
		t.Errorf("the pod who-had names, %s, still holds an address after the scale-down:\n%s", had, listing[1])
	}

	// The installation checks out: kubectl ptp check, run as the admin
	// against the controller running as its ServiceAccount, proves every
	// check; the one line that is information says that no Deployment
	// runs the controller here.
	if checks := shown(out, "kubectl ptp check"); len(checks) != 1 {
		t.Errorf("the demo does not show kubectl ptp check once:\n%s", out)
	} else {
		lines := strings.Split(strings.TrimSpace(checks[0]), "\n")[1:]
		seen := map[string]bool{}
		for _, l := range lines {
			f := strings.Fields(l)
			switch {
			case len(f) > 1 && f[0] == "ok":
				seen[f[1]] = true
			case len(f) > 1 && f[0] == "warn" && f[1] == "deployment" && strings.Contains(l, "runs outside the cluster"):
			default:
				t.Errorf("kubectl ptp check in the demo: %q is neither ok nor the missing Deployment:\n%s", l, checks[0])
			}
		}
		for _, want := range []string{"binding/podtoip-controller", "binding/podtoip-controller-history", "forged-create", "forged-edit", "forged-history", "leader", "history/all"} {
			if !seen[want] {
				t.Errorf("kubectl ptp check in the demo does not say ok for %s:\n%s", want, checks[0])
			}
		}
	}

	// The printed curl commands work, on loopback.
	for _, c := range []struct{ re, body string }{
		{`curl -s (http://127\.0\.0\.1:\d+/metrics)`, "podtoip_controller_mirrors"},
		{`curl (http://127\.0\.0\.1:\d+/readyz)`, "ok"},
	} {
		m := regexp.MustCompile(c.re).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("no %q in the instructions:\n%s", c.re, out)
			continue
		}
		if code, body := framework.HTTPGet(t, m[1]); code != 200 || !strings.Contains(body, c.body) {
			t.Errorf("GET %s: %d, want 200 with %q:\n%s", m[1], code, c.body, framework.Tail(body, 20))
		}
	}
}

// driveDemo does what the demo's instructions suggest, as a newcomer would
// type it: export the printed KUBECONFIG, watch `kubectl get ptp -A -w`,
// create, scale and delete a workload's pods, ask who has an address, and
// delete the first workload's namespace. The mirrors must follow each step.
func driveDemo(t *testing.T, out string) {
	t.Helper()
	m := kubeconfigRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no KUBECONFIG in the instructions:\n%s", out)
	}
	for _, cmd := range []string{"kubectl get ptp -A -w", "kubectl create deployment web --image=nginx --replicas=3",
		"kubectl scale deployment web --replicas=6", "kubectl delete pod -l app=web --wait=false", "kubectl delete namespace shop"} {
		if !strings.Contains(out, "    "+cmd) {
			t.Errorf("the instructions do not suggest %q", cmd)
		}
	}
	kubectl := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(framework.CtxFor(t, 2*time.Minute), "kubectl", args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+m[1])
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	// The watch runs for the whole drive, as in the user's other terminal.
	watchCtx, stopWatch := context.WithCancel(t.Context())
	defer stopWatch()
	watch := exec.CommandContext(watchCtx, "kubectl", "get", "ptp", "-A", "-w")
	watch.Env = append(os.Environ(), "KUBECONFIG="+m[1])
	var watched syncBuffer
	watch.Stdout, watch.Stderr = &watched, &watched
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stopWatch(); _ = watch.Wait() }()

	// webMirrors lists the default namespace's mirrors of web's pods by
	// name, with their addresses, once they match the running pods.
	webMirrors := func(want int) map[string]string {
		t.Helper()
		var last string
		var got map[string]string
		err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			ptp := kubectl("get", "ptp", "-n", "default", "--no-headers", "-o", "custom-columns=POD:.podName,ADDRESS:.podAddress")
			pods := kubectl("get", "pods", "-l", "app=web", "--no-headers", "-o", "custom-columns=NAME:.metadata.name,IP:.status.podIP,DELETING:.metadata.deletionTimestamp")
			last = ptp + "\n" + pods
			want2 := map[string]string{}
			for _, l := range strings.Split(strings.TrimSpace(pods), "\n") {
				if f := strings.Fields(l); len(f) == 3 && f[1] != "<none>" && f[2] == "<none>" {
					want2[f[0]] = f[1]
				}
			}
			got = map[string]string{}
			for _, l := range strings.Split(strings.TrimSpace(ptp), "\n") {
				if f := strings.Fields(l); len(f) == 2 && strings.HasPrefix(f[0], "web-") {
					got[f[0]] = f[1]
				}
			}
			return len(want2) == want && maps.Equal(got, want2), nil
		})
		if err != nil {
			t.Fatalf("the mirrors of web's %d pods did not follow: %v\n%s", want, err, last)
		}
		return got
	}

	kubectl("create", "deployment", "web", "--image=nginx", "--replicas=3")
	webMirrors(3)
	kubectl("scale", "deployment", "web", "--replicas=6")
	before := webMirrors(6)
	kubectl("delete", "pod", "-l", "app=web", "--wait=false")
	var after map[string]string
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		after = webMirrors(6)
		for name := range after {
			if _, old := before[name]; old {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the deleted pods' mirrors were not replaced by their replacements': before %v, now %v", before, after)
	}
	for name, ip := range after {
		if got := kubectl("get", "ptp", "-A", "--field-selector", "podAddress="+ip, "--no-headers"); !strings.Contains(got, name) || strings.Count(strings.TrimSpace(got), "\n") != 0 {
			t.Errorf("who has %s? kubectl answers %q, want %s alone", ip, got, name)
		}
		break
	}
	kubectl("delete", "namespace", "shop", "--timeout=2m")
	if got := kubectl("get", "ptp", "-n", "shop", "--no-headers"); strings.TrimSpace(got) != "" && !strings.Contains(got, "No resources") {
		t.Errorf("namespace shop deleted, yet kubectl get ptp -n shop lists:\n%s", got)
	}
	// The watch saw the new workload's mirrors come.
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		return strings.Count(watched.String(), "\ndefault ") >= 6, nil
	}); err != nil {
		t.Errorf("kubectl get ptp -A -w did not follow the web pods:\n%s", watched.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a writing process and a reading
// test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// shown returns what the demo printed under each "$ title" line starting
// with title, up to the next blank line.
func shown(out, title string) []string {
	var sections []string
	for _, s := range strings.Split(out, "\n$ ")[1:] {
		if strings.HasPrefix(s, title) {
			s, _, _ = strings.Cut(s, "\n\n")
			sections = append(sections, s)
		}
	}
	return sections
}

type proc struct {
	pid, pgid int
	args      []string
}

// processesWith returns the processes whose environment holds marker.
func processesWith(t *testing.T, marker string) []proc {
	t.Helper()
	environs, err := filepath.Glob("/proc/[0-9]*/environ")
	if err != nil {
		t.Fatal(err)
	}
	var procs []proc
	for _, e := range environs {
		env, err := os.ReadFile(e)
		if err != nil || !bytes.Contains(append([]byte{0}, env...), []byte("\x00"+marker+"\x00")) {
			continue // gone meanwhile, or not ours
		}
		cmdline, err := os.ReadFile(filepath.Join(filepath.Dir(e), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue // exited meanwhile
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(e)))
		pgid, err := syscall.Getpgid(pid)
		if err != nil {
			continue // exited meanwhile
		}
		procs = append(procs, proc{pid, pgid, strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")})
	}
	return procs
}
