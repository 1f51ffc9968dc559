// Package controlplane runs a throwaway kube-apiserver + etcd on loopback,
// and the podtoip-controller binary against it, for the end-to-end tests,
// the demo and the benchmark.
package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func init() {
	// envtest logs through controller-runtime's logger, which complains
	// with a stack trace on first use unless one is set. Its messages are
	// not ours to show: the components' own logs go to Options.Output.
	ctrllog.SetLogger(logr.Discard())
}

// ControlPlane is a running API server with an admin kubeconfig on disk.
type ControlPlane struct {
	// Root is the repository root (where the product's go.mod is).
	Root string
	// Dir holds this control plane's files (kubeconfigs, logs).
	Dir string
	// Kubeconfig is the path of an admin (system:masters) kubeconfig.
	Kubeconfig string
	// Config is the admin client configuration.
	Config  *rest.Config
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface

	env *envtest.Environment
}

// Options tune Start.
type Options struct {
	// Output receives the API server's and etcd's logs; nil discards them.
	Output *os.File
	// ExtraAPIServerFlags are added to the API server's command line.
	ExtraAPIServerFlags map[string]string
}

// RepoRoot finds the repository root by walking up from the working
// directory to the directory holding the product's go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module example.com/podtoip-controller\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the podtoip-controller repository root (go.mod) above the working directory")
		}
		dir = parent
	}
}

// binaries are what `make controlplane` builds into _output/bin: the API
// server and etcd, what a simulated Cluster runs besides them, and the
// pinned jq a test runs the README's log queries with.
var binaries = []string{"kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok", "kwok-stages.yaml", "jq"}

// EnsureBinaries makes sure the pinned control plane exists under
// _output/bin, building it with `make controlplane` when any part is
// missing. It fails loudly rather than letting tests skip.
func EnsureBinaries(root string) (string, error) {
	dir := filepath.Join(root, "_output", "bin")
	missing := false
	for _, b := range binaries {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			missing = true
		}
	}
	if missing {
		fmt.Fprintln(os.Stderr, ">> control-plane binaries missing; building them with `make controlplane` (several minutes the first time)")
		cmd := exec.Command("make", "-C", root, "controlplane")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("building the control plane (make controlplane): %w", err)
		}
	}
	return dir, nil
}

// Start launches etcd and kube-apiserver on loopback with RBAC enforced,
// writes an admin kubeconfig into a new directory and waits until the API
// server is ready.
func Start(opts Options) (*ControlPlane, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	bins, err := EnsureBinaries(root)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "podtoip-cp-")
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    bins,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	if opts.Output != nil {
		env.ControlPlane.Etcd = &envtest.Etcd{Out: opts.Output, Err: opts.Output}
	}
	api := env.ControlPlane.GetAPIServer()
	if opts.Output != nil {
		api.Out, api.Err = opts.Output, opts.Output
	}
	args := api.Configure()
	// No kubelets or Services here: the endpoint reconciler would only fail.
	args.Set("endpoint-reconciler-type", "none")
	args.Set("authorization-mode", "RBAC")
	for k, v := range opts.ExtraAPIServerFlags {
		args.Set(k, v)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", bins, err)
	}
	cp := &ControlPlane{Root: root, Dir: dir, env: env}
	if err := cp.init(cfg); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	return cp, nil
}

func (cp *ControlPlane) init(cfg *rest.Config) error {
	admin, err := cp.env.AddUser(envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		return fmt.Errorf("adding admin user: %w", err)
	}
	cp.Config = admin.Config()
	cp.Config.QPS, cp.Config.Burst = -1, 0
	kc, err := admin.KubeConfig()
	if err != nil {
		return err
	}
	cp.Kubeconfig = filepath.Join(cp.Dir, "admin.kubeconfig")
	if err := os.WriteFile(cp.Kubeconfig, kc, 0o600); err != nil {
		return err
	}
	if cp.Kube, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return err
	}
	cp.Dynamic, err = dynamic.NewForConfig(cp.Config)
	return err
}

// AddUser provisions a client certificate for a user with the given groups
// and writes its kubeconfig, returning the path.
func (cp *ControlPlane) AddUser(name string, groups ...string) (string, *rest.Config, error) {
	u, err := cp.env.AddUser(envtest.User{Name: name, Groups: groups}, cp.Config)
	if err != nil {
		return "", nil, fmt.Errorf("adding user %s: %w", name, err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		return "", nil, err
	}
	path := filepath.Join(cp.Dir, name+".kubeconfig")
	return path, u.Config(), os.WriteFile(path, kc, 0o600)
}

// Host is the API server's URL.
func (cp *ControlPlane) Host() string { return cp.Config.Host }

// Stop shuts the API server and etcd down and removes their files.
func (cp *ControlPlane) Stop() error {
	err := cp.env.Stop()
	_ = os.RemoveAll(cp.Dir)
	return err
}

// StopAPIServer and StartAPIServer restart only the API server (etcd keeps
// its data), for fault tests.
func (cp *ControlPlane) StopAPIServer() error {
	return cp.env.ControlPlane.APIServer.Stop()
}

// StartAPIServer starts the API server again after StopAPIServer.
func (cp *ControlPlane) StartAPIServer() error {
	return cp.env.ControlPlane.APIServer.Start()
}

// Kubectl runs the machine's kubectl with the admin kubeconfig and returns
// its combined output.
func (cp *ControlPlane) Kubectl(ctx context.Context, args ...string) (string, error) {
	return Kubectl(ctx, cp.Kubeconfig, args...)
}

// Kubectl runs kubectl with the given kubeconfig, as a user would.
func Kubectl(ctx context.Context, kubeconfig string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// InstallCRD applies artifacts/crd.yaml with kubectl and waits until the API
// is established and served.
func (cp *ControlPlane) InstallCRD(ctx context.Context) error {
	if _, err := cp.Kubectl(ctx, "apply", "-f", filepath.Join(cp.Root, "artifacts", "crd.yaml")); err != nil {
		return err
	}
	if _, err := cp.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd/podtoips.example.com", "crd/iphistories.example.com"); err != nil {
		return err
	}
	return nil
}
