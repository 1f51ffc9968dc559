package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"example.com/podtoip-controller/e2e/controlplane"
)

// TestDemo runs `make demo`'s program as a terminal would, checks what it
// shows, presses Ctrl-C and checks that everything it started stopped
// cleanly and left no files behind.
func TestDemo(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "demo")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/demo").CombinedOutput(); err != nil {
		t.Fatalf("building the demo: %v\n%s", err, out)
	}
	// Every process the demo starts inherits this variable, whatever its
	// process group, so /proc tells which of them are still alive.
	marker := fmt.Sprintf("PODTOIP_DEMO_TEST=%d", time.Now().UnixNano())
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), marker)
	// A shell runs a foreground job in a process group of its own, and
	// Ctrl-C signals that whole group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p, err := controlplane.StartCmd(cmd, filepath.Join(artifacts, "TestDemo.log"))
	if err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	ctrlC := func() {
		if err := syscall.Kill(-pgid, syscall.SIGINT); err != nil {
			t.Errorf("signalling the demo's process group: %v", err)
		}
	}
	t.Cleanup(func() {
		select {
		case <-p.Done():
		default:
			ctrlC() // it cleans up after itself; kill it only if it hangs
			if _, err := p.Wait(ctxFor(t, time.Minute)); err != nil {
				p.Kill()
			}
		}
	})

	if err := p.WaitForOutput(ctxFor(t, 2*time.Minute), "Press Ctrl-C"); err != nil {
		t.Fatalf("%v\n%s", err, p.Output())
	}
	out := p.Output()
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

	m := regexp.MustCompile(`export KUBECONFIG=(\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no KUBECONFIG in the instructions:\n%s", out)
	}
	// The control plane's files: the printed kubeconfig's directory, the
	// directories its processes were given on their command lines, and the
	// log file the API server writes to.
	files := []string{filepath.Dir(m[1])}
	procs := processesWith(t, marker)
	names := map[string]bool{}
	for _, pr := range procs {
		names[filepath.Base(pr.args[0])] = true
		for _, a := range pr.args {
			if k, v, ok := strings.Cut(a, "="); ok && (k == "--data-dir" || k == "--cert-dir") {
				files = append(files, v)
			}
		}
		if filepath.Base(pr.args[0]) == "kube-apiserver" {
			if log, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/1", pr.pid)); err == nil && strings.HasPrefix(log, os.TempDir()) {
				files = append(files, log)
			}
		}
	}
	if len(files) != 4 {
		t.Fatalf("want the kubeconfig's directory, etcd's data, the API server's certificates and log; got %v", files)
	}
	for _, n := range []string{"demo", "kube-apiserver", "etcd", "podtoip-controller"} {
		if !names[n] {
			t.Fatalf("%s is not among the demo's processes %v", n, procs)
		}
	}
	// Ctrl-C must reach the demo alone, which then stops each process once.
	// The controller takes a second signal as "exit at once"; whether the
	// demo's SIGTERM comes second depends on how fast the SIGINT shut it
	// down, so the exit code below cannot tell, but the process groups can.
	for _, pr := range procs {
		if pr.pid != pgid && pr.pgid == pgid {
			t.Errorf("%s is in the demo's process group and would get Ctrl-C too", pr.args[0])
		}
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("before Ctrl-C: %v", err)
		}
	}

	ctrlC()
	code, err := p.Wait(ctxFor(t, time.Minute))
	if err != nil {
		t.Fatalf("the demo did not exit after Ctrl-C: %v\n%s", err, tail(p.Output(), 30))
	}
	out = p.Output()
	if code != 0 {
		t.Errorf("the demo exited with code %d after Ctrl-C:\n%s", code, tail(out, 30))
	}
	if !strings.Contains(out, "controller exited with code 0") {
		t.Errorf("the controller did not stop cleanly:\n%s", tail(out, 30))
	}
	for _, f := range files {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s was left behind (%v)", f, err)
		}
	}
	// The demo waits for everything it started, so nothing may remain once
	// it has exited.
	if err := syscall.Kill(-pgid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the demo's process group is still alive (%v)", err)
	}
	if left := processesWith(t, marker); len(left) > 0 {
		t.Errorf("processes left running: %v", left)
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
