package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
// back: same address and same serving certificate.
//
// envtest's APIServer.Stop deletes its temporary certificate directory, and
// APIServer.Start then mints a new serving CA in a new one: every client
// holding the old CA (cp.Config, the kubeconfigs handed to controllers)
// would fail TLS verification after a plain StopAPIServer/StartAPIServer.
// The port is kept by envtest itself (SecureServing.Port stays set), and so
// is the client-certificate CA, so existing client credentials keep working.
// To keep the serving certificate too, copy the directory before stopping
// and point the server at the copy.
func (cp *ControlPlane) StopAPIServerForRestart() error {
	api := cp.env.ControlPlane.APIServer
	keep := filepath.Join(cp.Dir, "apiserver-certs")
	if api.CertDir != keep {
		if err := copyDir(api.CertDir, keep); err != nil {
			return fmt.Errorf("saving the API server's certificates: %w", err)
		}
	}
	if err := api.Stop(); err != nil {
		return err
	}
	// A directory envtest did not create is neither removed on Stop nor
	// regenerated on Start.
	api.CertDir = keep
	return nil
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
