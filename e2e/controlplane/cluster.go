package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Cluster is a simulated Kubernetes cluster on loopback: the control plane
// (kube-apiserver with ServiceAccount admission and RBAC, etcd), plus
// kube-controller-manager (garbage collector, namespace, workload,
// ServiceAccount and node lifecycle controllers), kube-scheduler, and kwok
// playing the kubelets of fake nodes. Pods are scheduled, become Running
// with addresses from their node's pod CIDRs, finish (Job pods) and are
// deleted as in a real cluster, only with no containers, no CNI and no
// network between pods.
type Cluster struct {
	*ControlPlane
	// Nodes are the fake nodes, as created.
	Nodes []Node

	components []*component
}

// Node describes a fake node of the simulated cluster.
type Node struct {
	Name string
	// PodCIDRs are the node's pod CIDRs, one per family; kwok hands pods
	// addresses from them, primary family first, and reuses an address as
	// soon as its pod is gone.
	PodCIDRs []string
	// InternalIP is the node's address, which hostNetwork pods share.
	InternalIP string
	// MaxPods is the node's pod capacity (the scheduler's limit). kwok does
	// not bounds-check its address pools, so it stays below the number of
	// addresses in the smallest pod CIDR.
	MaxPods int
}

// kwokNodeLabel selects the nodes kwok manages; every node of a Cluster
// carries it.
const kwokNodeLabel = "kwok.x-k8s.io/node"

// DefaultNodes returns n nodes named node-1…node-n with IPv4 pod CIDRs
// 10.244.i.0/24 and InternalIPs 172.18.0.(i+1); the last one is dual-stack
// (a second pod CIDR fd00:0:0:i::/64) so that a cluster of two or more nodes
// has both kinds.
func DefaultNodes(n int) []Node {
	nodes := make([]Node, n)
	for i := range nodes {
		idx := i + 1
		nodes[i] = Node{
			Name:       fmt.Sprintf("node-%d", idx),
			PodCIDRs:   []string{fmt.Sprintf("10.244.%d.0/24", idx)},
			InternalIP: fmt.Sprintf("172.18.0.%d", idx+1),
			MaxPods:    200,
		}
		if idx == n && n > 1 {
			nodes[i].PodCIDRs = append(nodes[i].PodCIDRs, fmt.Sprintf("fd00:0:0:%x::/64", idx))
		}
	}
	return nodes
}

// ClusterOptions tune StartCluster.
type ClusterOptions struct {
	// Output receives every component's log; nil discards them.
	Output *os.File
	// Nodes are the fake nodes to create; nil means DefaultNodes(3).
	Nodes []Node
	// ExtraAPIServerFlags are added to the API server's command line.
	ExtraAPIServerFlags map[string]string
}

// StartCluster starts a simulated cluster and waits until its nodes are
// Ready and schedulable and the default ServiceAccount exists, so pods can
// be created at once.
func StartCluster(ctx context.Context, opts ClusterOptions) (*Cluster, error) {
	if opts.Nodes == nil {
		opts.Nodes = DefaultNodes(3)
	}
	flags := map[string]string{
		// As in a real cluster: pods get their namespace's default
		// ServiceAccount, which the controller manager creates.
		"disable-admission-plugins": "",
		"enable-admission-plugins":  "ServiceAccount,NamespaceLifecycle",
	}
	for k, v := range opts.ExtraAPIServerFlags {
		flags[k] = v
	}
	cp, err := Start(Options{Output: opts.Output, ExtraAPIServerFlags: flags})
	if err != nil {
		return nil, err
	}
	c := &Cluster{ControlPlane: cp, Nodes: opts.Nodes}
	if err := c.start(ctx, opts.Output); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, out *os.File) error {
	bins := filepath.Join(c.Root, "_output", "bin")
	certDir := c.env.ControlPlane.APIServer.CertDir
	// kube-controller-manager: its own credentials for each controller (as
	// kubeadm runs it), no serving port, no leader election.
	kcm := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + filepath.Join(certDir, "sa-signer.key"),
		"--root-ca-file=" + filepath.Join(certDir, "apiserver.crt"),
		"--leader-elect=false",
		"--secure-port=0",
		"--controllers=*",
		// Quick to notice a node whose kwok stopped, in tests.
		"--node-monitor-grace-period=20s",
		"--concurrent-gc-syncs=5",
	}
	sched := []string{"--kubeconfig=" + c.Kubeconfig, "--leader-elect=false", "--secure-port=0"}
	kwok := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-label-selector=" + kwokNodeLabel + "=fake",
		"--config=" + filepath.Join(bins, "kwok-stages.yaml"),
		"--node-lease-duration-seconds=40",
		"--server-address=",
	}
	for _, spec := range []struct {
		name string
		args []string
	}{
		{"kube-controller-manager", kcm},
		{"kube-scheduler", sched},
		{"kwok", kwok},
	} {
		comp, err := startComponent(filepath.Join(bins, spec.name), c.Dir, out, spec.args)
		if err != nil {
			return err
		}
		c.components = append(c.components, comp)
	}
	for _, n := range c.Nodes {
		if err := c.createNode(ctx, n); err != nil {
			return err
		}
	}
	return c.waitUsable(ctx)
}

// createNode registers a fake node as a kubelet would: with its pod CIDRs,
// its address and its capacity. kwok then makes it Ready and keeps its
// lease.
func (c *Cluster) createNode(ctx context.Context, n Node) error {
	pods := resource.MustParse(strconv.Itoa(n.MaxPods))
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   pods,
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   n.Name,
			Labels: map[string]string{kwokNodeLabel: "fake", corev1.LabelHostname: n.Name, corev1.LabelOSStable: "linux"},
			Annotations: map[string]string{
				"node.alpha.kubernetes.io/ttl": "0",
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: n.PodCIDRs[0], PodCIDRs: n.PodCIDRs},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: n.InternalIP},
				{Type: corev1.NodeHostName, Address: n.Name},
			},
		},
	}
	if _, err := c.Kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating node %s: %w", n.Name, err)
	}
	return nil
}

// waitUsable waits until every node is Ready without a not-ready or
// unreachable taint (kwok and the node lifecycle controller agree) and the
// default namespace has its ServiceAccount (the controller manager works).
func (c *Cluster) waitUsable(ctx context.Context) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.componentsRunning(); err != nil {
			return false, err
		}
		for _, n := range c.Nodes {
			node, err := c.Kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			if !nodeReady(node) {
				last = "node " + n.Name + " is not Ready yet"
				return false, nil
			}
			for _, t := range node.Spec.Taints {
				if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
					last = "node " + n.Name + " still has taint " + t.Key
					return false, nil
				}
			}
		}
		if _, err := c.Kube.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			last = "default ServiceAccount: " + err.Error()
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the simulated cluster (nodes Ready, default ServiceAccount) to be usable: %w (last: %s; see the components' log)", err, last)
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// componentsRunning returns an error naming the first component that has
// exited: a simulated cluster with a dead scheduler or kwok would only make
// tests time out later for a reason hard to see.
func (c *Cluster) componentsRunning() error {
	for _, comp := range c.components {
		select {
		case <-comp.done:
			return fmt.Errorf("%s exited: %v (see the components' log)", comp.name, comp.err)
		default:
		}
	}
	return nil
}

// Healthy reports an error if a component of the cluster has exited.
func (c *Cluster) Healthy() error { return c.componentsRunning() }

// NodeFor returns the node spec by name.
func (c *Cluster) NodeFor(name string) (Node, bool) {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// InPodCIDRs reports whether ip lies in one of the node's pod CIDRs.
func (n Node) InPodCIDRs(ip string) bool {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	for _, cidr := range n.PodCIDRs {
		if p, err := netip.ParsePrefix(cidr); err == nil && p.Contains(a) {
			return true
		}
	}
	return false
}

// Stop stops the simulated components, then the control plane.
func (c *Cluster) Stop() error {
	var errs []error
	// The reverse of the start order: kwok first, so no node goes
	// not-ready while the controller manager still watches.
	for i := len(c.components) - 1; i >= 0; i-- {
		errs = append(errs, c.components[i].stop())
	}
	errs = append(errs, c.ControlPlane.Stop())
	return errors.Join(errs...)
}

// component is one simulated-cluster process.
type component struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// startComponent runs binary in its own process group (a terminal's Ctrl-C
// reaches only the program that started it, which stops the component in
// order) and asks the kernel to kill it if its parent dies, so a killed test
// leaves nothing running.
func startComponent(binary, dir string, out *os.File, args []string) (*component, error) {
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	// kwok reads ~/.kwok/kwok.yaml when it exists; a home of its own keeps
	// whatever the machine has there out of the cluster.
	cmd.Env = append(os.Environ(), "HOME="+dir)
	if out != nil {
		cmd.Stdout, cmd.Stderr = out, out
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	comp := &component{name: filepath.Base(binary), cmd: cmd, done: make(chan struct{})}
	go func() {
		comp.err = cmd.Wait()
		close(comp.done)
	}()
	return comp, nil
}

func (comp *component) stop() error {
	select {
	case <-comp.done:
		return nil
	default:
	}
	_ = comp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-comp.done:
	case <-time.After(10 * time.Second):
		_ = comp.cmd.Process.Kill()
		<-comp.done
	}
	return nil
}
