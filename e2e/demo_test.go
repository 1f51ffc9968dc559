package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/demo").CombinedOutput(); err != nil {
		t.Fatalf("building the demo: %v\n%s", err, out)
	}

	t.Run("Ctrl-C after the reader of its output went away", func(t *testing.T) {
		d := startDemo(t, t, bin)
		checkDemoShows(t, d.output())
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
		ctx := ctxFor(t, 3*time.Minute)
		for d.runDir == "" {
			if m := runDirRE.FindStringSubmatch(d.output()); m != nil {
				d.runDir = m[1]
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the demo did not say where it keeps its files: %v\n%s", ctx.Err(), tail(d.output(), 40))
			case <-d.done:
				t.Fatalf("the demo exited (%v):\n%s", d.cmd.ProcessState, tail(d.output(), 40))
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
				t.Errorf("the demo did not report cleaning up after the killed run (pid %d):\n%s", killed.pid, tail(d.output(), 40))
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
		if err := waitOutput(ctxFor(t, time.Minute), d, "==> Stopping: received hangup"); err != nil {
			t.Fatal(err)
		}
		d.signalGroup(syscall.SIGINT)
		if err := waitOutput(ctxFor(t, time.Minute), d, "Received interrupt: still stopping"); err != nil {
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
	log, err := os.Create(filepath.Join(artifacts, strings.ReplaceAll(t.Name(), "/", "_")+".log"))
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
	ctx := ctxFor(t, 3*time.Minute)
	for !strings.Contains(d.output(), "Press Ctrl-C") {
		select {
		case <-ctx.Done():
			t.Fatalf("the demo did not come up: %v\n%s", ctx.Err(), tail(d.output(), 40))
		case <-d.done:
			<-d.readDone
			if !strings.Contains(d.output(), "Press Ctrl-C") {
				t.Fatalf("the demo exited (%v) before it was up:\n%s", d.cmd.ProcessState, tail(d.output(), 40))
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
			return fmt.Errorf("waiting for %q: %w\n%s", substr, ctx.Err(), tail(d.output(), 30))
		case <-d.readDone:
			if strings.Contains(d.output(), substr) {
				return nil
			}
			return fmt.Errorf("the demo's output ended without %q:\n%s", substr, tail(d.output(), 30))
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
	for _, n := range []string{"demo", "kube-apiserver", "etcd", "podtoip-controller"} {
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
		t.Fatalf("%v\n%s", err, tail(d.output(), 30))
	}
	if said != "" {
		<-d.readDone // the demo and everything it started have closed the pipe
	}
	out := d.output()
	if !state.Exited() || state.ExitCode() != 0 {
		t.Errorf("the demo ended with %v, want exit code 0:\n%s", state, tail(out, 30))
	}
	if said != "" {
		if !strings.Contains(out, "==> Stopping: "+said) {
			t.Errorf("the demo did not say it was stopping because it %s:\n%s", said, tail(out, 30))
		}
		if !strings.Contains(out, "controller exited with code 0") {
			t.Errorf("the controller did not stop cleanly:\n%s", tail(out, 30))
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

// checkDemoShows checks what the demo shows once it is up: the listings,
// the field selector's answer, and instructions that work.
func checkDemoShows(t *testing.T, out string) {
	t.Helper()
	gets := shown(out, "kubectl get ptp -A")
	if len(gets) != 2 {
		t.Fatalf("want two `kubectl get ptp -A` listings, got %d:\n%s", len(gets), out)
	}
	for _, want := range []string{"web-0", "10.244.1.7", "web-1", "10.244.2.9", "cart-0", "db-0", "10.244.2.20", "node-agent-1"} {
		if !strings.Contains(gets[0], want) {
			t.Errorf("the first listing lacks %s:\n%s", want, gets[0])
		}
	}
	if !strings.Contains(gets[1], "10.244.1.8") || strings.Contains(gets[1], "db-0") {
		t.Errorf("the second listing does not show web-0's new IP and db-0 gone:\n%s", gets[1])
	}
	if who := shown(out, "Who has 10.244.2.20?"); len(who) != 1 || !strings.Contains(who[0], "db-0") || strings.Contains(who[0], "web-0") {
		t.Errorf("the field selector did not answer db-0 alone: %q", who)
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
		if code, body := httpGet(t, m[1]); code != 200 || !strings.Contains(body, c.body) {
			t.Errorf("GET %s: %d, want 200 with %q:\n%s", m[1], code, c.body, tail(body, 20))
		}
	}
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
