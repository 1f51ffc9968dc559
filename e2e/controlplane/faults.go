package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
)

// faultPodToIps is the PodToIp resource, for readiness checks after a restart.
var faultPodToIps = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "podtoips"}

// EtcdURL is the client URL of the control plane's etcd (plain HTTP on
// loopback).
func (cp *ControlPlane) EtcdURL() string {
	return cp.env.ControlPlane.Etcd.URL.String()
}

// compactRevKey is where kube-apiserver's compactor records the last
// compacted revision (k8s.io/apiserver/pkg/storage/etcd3/compact.go).
const compactRevKey = "compact_rev_key"

// CompactEtcd compacts etcd's history up to its current revision and
// returns that revision. Like the API server's own compactor it first
// records the revision under compact_rev_key, which the API server watches
// to learn how far history goes; it then compacts, so that any read or
// watch of an older revision served by etcd fails with "required revision
// has been compacted" (410 Gone to API clients).
func (cp *ControlPlane) CompactEtcd(ctx context.Context) (int64, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{cp.EtcdURL()},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
		Context:     ctx,
	})
	if err != nil {
		return 0, fmt.Errorf("connecting to etcd at %s: %w", cp.EtcdURL(), err)
	}
	defer cli.Close()

	get, err := cli.Get(ctx, compactRevKey)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", compactRevKey, err)
	}
	rev := get.Header.Revision
	var version int64
	if len(get.Kvs) > 0 {
		version = get.Kvs[0].Version
	}
	// The same compare-and-swap the API server uses, so that a compaction
	// it might run concurrently and this one never disagree.
	txn, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Version(compactRevKey), "=", version)).
		Then(clientv3.OpPut(compactRevKey, strconv.FormatInt(rev, 10))).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("recording the compaction revision: %w", err)
	}
	if !txn.Succeeded {
		return 0, fmt.Errorf("%s changed while compacting; retry", compactRevKey)
	}
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return 0, fmt.Errorf("compacting etcd at revision %d: %w", rev, err)
	}
	return rev, nil
}

// StopAPIServerForRestart stops the API server (etcd keeps running and
// keeps the data) so that StartAPIServerAndWait can bring the same server
// back: same address and same serving certificate. It sends SIGTERM and,
// if the server has not exited after grace, SIGKILL. It reports whether the
// server exited on its own.
//
// Two things keep envtest's StopAPIServer/StartAPIServer from doing this:
//
//   - kube-apiserver's graceful shutdown waits for open connections for up
//     to its request timeout (60 s by default) and does not end watch
//     requests (--shutdown-watch-termination-grace-period=0), so any
//     controller holding a watch keeps it alive that long. envtest waits 30 s
//     (ControlPlaneStopTimeout), then kills it and returns an error.
//   - APIServer.Stop deletes its temporary certificate directory and
//     APIServer.Start then mints a new serving CA in a new one: every client
//     holding the old CA (cp.Config, kubeconfigs handed to controllers)
//     would fail TLS verification. The port is kept by envtest itself
//     (SecureServing.Port stays set), and so is the client-certificate CA,
//     so client credentials keep working. Keeping the serving certificate
//     needs a copy of the directory, made before stopping, for the server
//     to start from.
func (cp *ControlPlane) StopAPIServerForRestart(grace time.Duration) (graceful bool, err error) {
	api := cp.env.ControlPlane.APIServer
	keep := filepath.Join(cp.Dir, "apiserver-certs")
	if api.CertDir != keep {
		if err := copyDir(api.CertDir, keep); err != nil {
			return false, fmt.Errorf("saving the API server's certificates: %w", err)
		}
	}
	pid, err := apiServerPID(api.SecureServing.Port)
	if err != nil {
		return false, err
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return false, fmt.Errorf("signalling kube-apiserver (pid %d): %w", pid, err)
	}
	graceful = waitGone(pid, grace)
	if !graceful {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		if !waitGone(pid, 30*time.Second) {
			return false, fmt.Errorf("kube-apiserver (pid %d) still running after SIGKILL", pid)
		}
	}
	// The process is gone; let envtest clean up after it. Its own exit
	// bookkeeping may lag the reaping by a moment, in which case it tries to
	// signal a finished process; nothing is left to do then.
	if err := api.Stop(); err != nil && !errors.Is(err, os.ErrProcessDone) && !errors.Is(err, syscall.ESRCH) {
		api.CertDir = keep
		return graceful, err
	}
	// A directory envtest did not create is neither removed on Stop nor
	// regenerated on Start.
	api.CertDir = keep
	return graceful, nil
}

// apiServerPID finds the kube-apiserver this process started on port.
func apiServerPID(port string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if filepath.Base(args[0]) != "kube-apiserver" || !slices.Contains(args, "--secure-port="+port) {
			continue
		}
		if ppid, err := parentPID(pid); err == nil && ppid == self {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no kube-apiserver child of this process serves port %s", port)
}

func parentPID(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...; comm may contain spaces, so cut after ")".
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(fields) < 2 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	return strconv.Atoi(fields[1])
}

// waitGone waits up to d for pid to exit and be reaped (envtest waits for
// its child, so it is reaped as soon as it exits).
func waitGone(pid int, d time.Duration) bool {
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, d, true, func(context.Context) (bool, error) {
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH), nil
	})
	return err == nil
}

// StartAPIServerAndWait starts the API server stopped by
// StopAPIServerForRestart and waits until the admin client can use it and
// the PodToIp API is served again (custom resources are served only once
// the restarted server has re-read the CRDs).
func (cp *ControlPlane) StartAPIServerAndWait(ctx context.Context) error {
	if err := cp.StartAPIServer(); err != nil {
		return fmt.Errorf("restarting kube-apiserver: %w", err)
	}
	return cp.WaitAPIReady(ctx)
}

// WaitAPIReady waits until /readyz passes and PodToIps can be listed.
func (cp *ControlPlane) WaitAPIReady(ctx context.Context) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if last = cp.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error(); last != nil {
			return false, nil
		}
		_, last = cp.Dynamic.Resource(faultPodToIps).List(ctx, metav1.ListOptions{Limit: 1})
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("API server not ready after restart: %w (last error: %v)", err, last)
	}
	return nil
}

func copyDir(from, to string) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(to, 0o700); err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
