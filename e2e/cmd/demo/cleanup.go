package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// runEnv names a run's directory in the environment of every process the
// run starts (kube-apiserver, etcd and the controller inherit it, whatever
// their process group), so that what a run left running can be found and
// told apart from anyone else's API servers on the same machine.
const runEnv = "PODTOIP_DEMO_RUN"

// runDirRE matches a run's directory, named after the demo's process ID and
// start time (clock ticks since boot, from /proc/PID/stat): a new process
// that happens to reuse the ID has another start time.
var runDirRE = regexp.MustCompile(`^podtoip-demo-(\d+)-(\d+)-\d+$`)

// newRunDir creates the directory that holds all of this run's files and
// makes it the temporary directory of this process and of everything it
// starts, so the control plane's data, certificates and kubeconfigs land in
// it too. Removing it removes them all.
func newRunDir(tmp string) (string, error) {
	start, err := startTime(os.Getpid())
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(tmp, fmt.Sprintf("podtoip-demo-%d-%d-", os.Getpid(), start))
	if err != nil {
		return "", err
	}
	for k, v := range map[string]string{"TMPDIR": dir, runEnv: dir} {
		if err := os.Setenv(k, v); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// removeLeftovers stops the processes and removes the files of earlier runs
// whose demo process is gone without cleaning up (killed with SIGKILL, or
// the machine's OOM killer). Runs whose demo is still alive are left alone:
// they clean up after themselves. Their ports need nothing: every run picks
// free ones.
func removeLeftovers(tmp string) {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		m := runDirRE.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		if info, err := e.Info(); err != nil || info.Sys().(*syscall.Stat_t).Uid != uint32(os.Getuid()) {
			continue // someone else's
		}
		pid, _ := strconv.Atoi(m[1])
		start, _ := strconv.ParseUint(m[2], 10, 64)
		if s, err := startTime(pid); err == nil && s == start && !gone(pid) {
			continue // still running; it cleans up after itself
		}
		dir := filepath.Join(tmp, e.Name())
		step(fmt.Sprintf("Cleaning up after an earlier demo (pid %d) that was killed before it could", pid))
		if stopped := stopProcesses(runEnv + "=" + dir); len(stopped) > 0 {
			fmt.Fprintf(out, "Stopped what it left running: %s\n", strings.Join(stopped, ", "))
		}
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(out, "Could not remove %s: %v\n", dir, err)
			continue
		}
		fmt.Fprintf(out, "Removed %s\n", dir)
	}
}

// stopProcesses kills the processes other than this one whose environment
// holds marker (KEY=VALUE), waits until they are gone and returns them, as
// "name (pid N)". They are throwaway and their files are removed next, so
// there is nothing for a graceful stop to save.
func stopProcesses(marker string) []string {
	procs := processesWith(marker)
	var stopped []string
	for pid, name := range procs {
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			stopped = append(stopped, fmt.Sprintf("%s (pid %d)", name, pid))
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for pid := range procs {
		for !gone(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // polling /proc; no event to wait on for a non-child
		}
	}
	return stopped
}

// processesWith returns the live processes other than this one whose
// environment holds marker, by process ID, with their program's name.
func processesWith(marker string) map[int]string {
	procs := map[int]string{}
	environs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, e := range environs {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(e)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(e)
		if err != nil || !bytes.Contains(append([]byte{0}, env...), []byte("\x00"+marker+"\x00")) {
			continue // gone meanwhile, not ours to read, or not ours
		}
		cmdline, err := os.ReadFile(filepath.Join(filepath.Dir(e), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue // exited, a zombie
		}
		name, _, _ := strings.Cut(string(cmdline), "\x00")
		procs[pid] = filepath.Base(name)
	}
	return procs
}

// procStat returns the fields of /proc/PID/stat after the command name,
// starting with the state.
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	// pid (comm) state ppid ...; comm may contain spaces and parentheses.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(fields) < 20 {
		return nil, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, b)
	}
	return fields, nil
}

// startTime is when pid started, in clock ticks since boot.
func startTime(pid int) (uint64, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// gone reports whether pid has exited: no longer listed, or a zombie whose
// parent has not collected it yet (an orphan's new parent may never do so).
func gone(pid int) bool {
	f, err := procStat(pid)
	return err != nil || f[0] == "Z" || f[0] == "X"
}

// stopOnSignals cancels the run on the signals that mean "stop": Ctrl-C
// (SIGINT, sent to the terminal's whole foreground process group), SIGTERM
// (kill, timeout, process managers) and SIGHUP (the terminal went away).
// Later signals do not cut the cleanup short: it is bounded (15 s for the
// controller, 30 s for each control-plane process) and cutting it short is
// what leaves processes and files behind.
func stopOnSignals(cancel context.CancelCauseFunc) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigs
		cancel(fmt.Errorf("received %v", s))
		for s := range sigs {
			fmt.Fprintf(out, "Received %v: still stopping and cleaning up (at most about a minute)\n", s)
		}
	}()
}

// console is the demo's output. The first write that fails means nobody
// reads it any more (a pipe whose reader exited, a terminal that hung up),
// and the demo then stops as if interrupted: nobody can see it, nor press
// Ctrl-C in it.
type console struct {
	w    io.Writer
	once sync.Once
	gone func()
}

func (c *console) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil {
		c.once.Do(c.gone)
	}
	return n, err
}
