package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/controlplane"
)

// convergence compares every pod with every PodToIp in some namespaces, as
// the reliability scenarios judge the controller.
type convergence struct {
	// Missing: a pod that should have a mirror has none.
	Missing int
	// Stale: a managed mirror whose address, IPs, node, pod name or pod UID
	// (or owner reference) differ from its pod's.
	Stale int
	// Orphan: a managed mirror whose pod is gone or should have no mirror.
	Orphan int
	// ForeignTouched: an unmanaged PodToIp the test registered was changed or
	// deleted.
	ForeignTouched int
	// Details names the first few offenders, for the failure message.
	Details []string
}

func (c convergence) ok() bool {
	return c.Missing == 0 && c.Stale == 0 && c.Orphan == 0 && c.ForeignTouched == 0
}

func (c convergence) String() string {
	s := fmt.Sprintf("missing=%d stale=%d orphan=%d foreign-touched=%d", c.Missing, c.Stale, c.Orphan, c.ForeignTouched)
	if len(c.Details) > 0 {
		s += "; e.g. " + strings.Join(c.Details, "; ")
	}
	return s
}

func (c *convergence) note(format string, args ...any) {
	if len(c.Details) < 8 {
		c.Details = append(c.Details, fmt.Sprintf(format, args...))
	}
}

// foreignObjects records unmanaged PodToIps a test created ("ns/name" ->
// resourceVersion at creation), to prove the controller never changed them.
type foreignObjects map[string]string

// wantsMirror is the specification, written independently of the product:
// a pod has a mirror iff it has an IP, is not terminating and not terminal.
func podWantsMirror(p *corev1.Pod) bool {
	return p.Status.PodIP != "" && p.DeletionTimestamp == nil &&
		p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

func podIPList(p *corev1.Pod) []string {
	var ips []string
	for _, ip := range p.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if len(ips) == 0 && p.Status.PodIP != "" {
		ips = []string{p.Status.PodIP}
	}
	return ips
}

// measureConvergence lists the pods and PodToIps of the namespaces on on
// (from the API server, not a cache) and counts the differences.
func measureConvergence(ctx context.Context, on *controlplane.ControlPlane, foreign foreignObjects, namespaces ...string) (convergence, error) {
	var c convergence
	for _, ns := range namespaces {
		pods, err := on.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return c, fmt.Errorf("listing pods in %s: %w", ns, err)
		}
		list, err := on.Dynamic.Resource(ptpGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return c, fmt.Errorf("listing PodToIps in %s: %w", ns, err)
		}
		have := map[string]*mirror{}
		for i := range list.Items {
			m, err := toMirror(&list.Items[i])
			if err != nil {
				return c, err
			}
			have[m.Name] = m
		}
		podByName := map[string]*corev1.Pod{}
		for i := range pods.Items {
			podByName[pods.Items[i].Name] = &pods.Items[i]
		}

		for name, m := range have {
			key := ns + "/" + name
			if rv, ok := foreign[key]; ok {
				if m.ResourceVersion != rv {
					c.ForeignTouched++
					c.note("foreign %s changed (rv %s -> %s)", key, rv, m.ResourceVersion)
				}
				continue
			}
			if m.Labels[managedBy] != "podtoip-controller" {
				continue // unmanaged and not registered: not ours to judge
			}
			pod := podByName[name]
			if pod == nil || !podWantsMirror(pod) {
				c.Orphan++
				c.note("orphan %s", key)
				continue
			}
			ownerOK := len(m.OwnerReferences) == 1 && m.OwnerReferences[0].UID == pod.UID &&
				m.OwnerReferences[0].Kind == "Pod" && m.OwnerReferences[0].Name == pod.Name
			if m.PodAddress != pod.Status.PodIP || !slices.Equal(m.PodIPs, podIPList(pod)) ||
				m.NodeName != pod.Spec.NodeName || m.PodUID != pod.UID || m.PodName != pod.Name || !ownerOK {
				c.Stale++
				c.note("stale %s: has %s, pod uid=%s ips=%v node=%s", key, describe(m), pod.UID, podIPList(pod), pod.Spec.NodeName)
			}
		}
		for name, pod := range podByName {
			if !podWantsMirror(pod) {
				continue
			}
			if _, ok := have[name]; !ok {
				c.Missing++
				c.note("missing %s/%s", ns, name)
			}
		}
		for key := range foreign {
			if strings.HasPrefix(key, ns+"/") {
				if _, ok := have[strings.TrimPrefix(key, ns+"/")]; !ok {
					c.ForeignTouched++
					c.note("foreign %s deleted", key)
				}
			}
		}
	}
	return c, nil
}

// waitConverged polls until missing, stale, orphan and foreign-touched are
// all 0 on the shared control plane, failing the test with the last counts
// after within. It returns how long convergence took.
func waitConverged(t *testing.T, within time.Duration, foreign foreignObjects, namespaces ...string) time.Duration {
	t.Helper()
	return waitConvergedOn(t, cp, within, foreign, namespaces...)
}

// waitConvergedOn is waitConverged on a test's own control plane.
func waitConvergedOn(t *testing.T, on *controlplane.ControlPlane, within time.Duration, foreign foreignObjects, namespaces ...string) time.Duration {
	t.Helper()
	start := time.Now()
	// last keeps the latest complete measurement: the poll that the deadline
	// cuts off returns an error and zero counts, which would read as success.
	var last convergence
	var lastErr error
	measured := false
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		c, err := measureConvergence(ctx, on, foreign, namespaces...)
		if err != nil {
			lastErr = err
			return false, nil
		}
		last, measured = c, true
		return c.ok(), nil
	})
	if err != nil {
		if !measured {
			t.Fatalf("not converged within %v: could not measure (%v)", within, lastErr)
		}
		t.Fatalf("not converged within %v: %v (last error: %v)", within, last, lastErr)
	}
	took := time.Since(start)
	t.Logf("converged in %v", took.Round(time.Millisecond))
	return took
}
