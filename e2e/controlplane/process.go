package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BuildController builds the product binary into bin/ of the repository, so
// tests always run the code under test. It builds into a temporary file and
// renames it into place: test processes running at once each build it, and
// a rename never changes a binary another process is running or a reader
// half-written. -trimpath, as `make build` and `make controlplane` use:
// packages built with the same flags are compiled once and shared through
// Go's build cache, which matters on a fresh machine.
func BuildController(root string) (string, error) {
	return build(root, "podtoip-controller", ".")
}

// BuildPlugin builds the kubectl plugin into bin/kubectl-ptp and returns
// its path.
func BuildPlugin(root string) (string, error) {
	return build(root, "kubectl-ptp", "./cmd/kubectl-ptp")
}

// BuildSQL builds bin/ptpsql, which runs docs/sql/duckdb.sql with DuckDB
// (hack/sqlcheck/cmd/ptpsql): cgo, so it is built apart from the tests,
// which stay without.
func BuildSQL(root string) (string, error) {
	bin := filepath.Join(root, "bin", "ptpsql")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/ptpsql")
	cmd.Dir = filepath.Join(root, "hack", "sqlcheck")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building %s (DuckDB through cgo: it needs a C and C++ compiler, gcc and g++): %w", bin, err)
	}
	return bin, nil
}

func build(root, name, pkg string) (string, error) {
	bin := filepath.Join(root, "bin", name)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, pkg)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("building %s: %w", name, err)
	}
	if err := os.Rename(tmp, bin); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("installing %s: %w", name, err)
	}
	return bin, nil
}

// Process is a running podtoip-controller (or any command) whose output is
// kept in memory and, optionally, copied to a file.
type Process struct {
	Cmd *exec.Cmd

	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
	// expected is the exit the caller declared (ExpectExit, Kill, Stop),
	// nil while none is.
	expected *int
}

// StartProcess runs binary with args; its stdout and stderr are captured
// and also copied to logFile when that is non-empty.
func StartProcess(binary string, env []string, logFile string, args ...string) (*Process, error) {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	return StartCmd(cmd, logFile)
}

// StartCmd is StartProcess for a command prepared by the caller, for
// example with its own process group in SysProcAttr.
func StartCmd(cmd *exec.Cmd, logFile string) (*Process, error) {
	binary := cmd.Path
	p := &Process{Cmd: cmd, done: make(chan struct{})}
	var w io.Writer = (*lockedWriter)(p)
	if logFile != "" {
		f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		w = io.MultiWriter(w, f)
		defer func() { go func() { <-p.done; f.Close() }() }()
	}
	p.Cmd.Stdout, p.Cmd.Stderr = w, w
	if err := p.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

type lockedWriter Process

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.Write(b)
}

// Output returns everything the process printed so far.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// WaitForOutput waits until the output contains substr, the process exits,
// or ctx ends.
func (p *Process) WaitForOutput(ctx context.Context, substr string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if strings.Contains(p.Output(), substr) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %q in output: %w", substr, ctx.Err())
		case <-p.done:
			if strings.Contains(p.Output(), substr) {
				return nil
			}
			return fmt.Errorf("process exited (%v) before printing %q", p.err, substr)
		case <-tick.C:
		}
	}
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitCode returns the exit code once the process has exited (-1 if killed
// by a signal).
func (p *Process) ExitCode() int {
	<-p.done
	return p.Cmd.ProcessState.ExitCode()
}

// Wait waits for the process to exit or ctx to end.
func (p *Process) Wait(ctx context.Context) (int, error) {
	select {
	case <-p.done:
		return p.Cmd.ProcessState.ExitCode(), nil
	case <-ctx.Done():
		return 0, fmt.Errorf("waiting for %s to exit: %w", filepath.Base(p.Cmd.Path), ctx.Err())
	}
}

// Signal sends sig to the process. A signal that ends the process is the
// caller's doing: declare the exit it causes with ExpectExit.
func (p *Process) Signal(sig os.Signal) error { return p.Cmd.Process.Signal(sig) }

// ExpectExit declares that the process exits, or has exited, with code (-1:
// killed by a signal) because the caller made it or because that exit is
// the behaviour under test. UnexpectedExit then accepts that exit and no
// other.
func (p *Process) ExpectExit(code int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expected = &code
}

// UnexpectedExit returns an error describing the exit if the process has
// exited other than as declared with ExpectExit (or Kill, or Stop), and nil
// if it is still running or exited as declared. A process must not end on
// its own: a crash after a test's last check would otherwise go unnoticed.
func (p *Process) UnexpectedExit() error {
	select {
	case <-p.done:
	default:
		return nil
	}
	code := p.Cmd.ProcessState.ExitCode()
	p.mu.Lock()
	expected := p.expected
	p.mu.Unlock()
	switch {
	case expected == nil:
		return fmt.Errorf("%s exited (%v) without the test causing or expecting it", filepath.Base(p.Cmd.Path), p.Cmd.ProcessState)
	case *expected != code:
		return fmt.Errorf("%s exited (%v), want exit code %d", filepath.Base(p.Cmd.Path), p.Cmd.ProcessState, *expected)
	}
	return nil
}

// Stop sends SIGTERM and waits up to timeout for a graceful exit, then kills
// the process. It returns the exit code of the graceful exit, and declares
// 0 as the expected one. A process that had already exited is returned as
// it is, with no declaration: Stop does not excuse an earlier exit.
func (p *Process) Stop(timeout time.Duration) (int, error) {
	select {
	case <-p.done:
		return p.Cmd.ProcessState.ExitCode(), nil
	default:
	}
	p.ExpectExit(0)
	_ = p.Signal(syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	code, err := p.Wait(ctx)
	if err != nil {
		_ = p.Cmd.Process.Kill()
		<-p.done
		return -1, err
	}
	return code, nil
}

// Kill ends the process with SIGKILL and waits for it. It declares the exit
// (-1, killed by a signal) as the caller's doing, unless the process had
// already exited by itself.
func (p *Process) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.ExpectExit(-1)
	_ = p.Cmd.Process.Kill()
	<-p.done
}
