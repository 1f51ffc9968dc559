package framework

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// PauseImage is the image of every pod the tests create; no container runs.
const PauseImage = "registry.k8s.io/pause:3.10"

// NewNamespace creates a namespace for one test, named after it.
func (e *Env) NewNamespace(t testing.TB) string {
	t.Helper()
	name := strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, strings.ToLower(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.Trim(name, "-")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-"}}
	ns, err := e.CP.Kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// PodOpt changes a pod before CreatePod creates it.
type PodOpt func(*corev1.Pod)

// OnNode binds the pod to node n.
func OnNode(n string) PodOpt { return func(p *corev1.Pod) { p.Spec.NodeName = n } }

// HostNetwork makes the pod use its node's network.
func HostNetwork() PodOpt { return func(p *corev1.Pod) { p.Spec.HostNetwork = true } }

// CreatePod creates a pod; there is no kubelet, so it never runs.
func (e *Env) CreatePod(t testing.TB, ns, name string, opts ...PodOpt) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: PauseImage}},
		},
	}
	for _, o := range opts {
		o(pod)
	}
	pod, err := e.CP.Kube.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
	return pod
}

// SetPodIPs plays the kubelet: it writes the pod's IPs (and a phase)
// through the status subresource.
func (e *Env) SetPodIPs(t testing.TB, ns, name string, phase corev1.PodPhase, ips ...string) *corev1.Pod {
	t.Helper()
	var out *corev1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		pod, err := e.CP.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod.Status.Phase = phase
		pod.Status.PodIP = ""
		pod.Status.PodIPs = nil
		if len(ips) > 0 {
			pod.Status.PodIP = ips[0]
		}
		for _, ip := range ips {
			pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		out, err = e.CP.Kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("setting IPs of pod %s/%s: %v", ns, name, err)
	}
	return out
}

// RunningPod creates a pod and gives it IPs.
func (e *Env) RunningPod(t testing.TB, ns, name string, ips []string, opts ...PodOpt) *corev1.Pod {
	t.Helper()
	e.CreatePod(t, ns, name, opts...)
	return e.SetPodIPs(t, ns, name, corev1.PodRunning, ips...)
}

// DeletePod deletes a pod, with a grace period of 0 if force. A pod on a
// node deleted gracefully stays Terminating: no kubelet confirms.
func (e *Env) DeletePod(t testing.TB, ns, name string, force bool) {
	t.Helper()
	opts := metav1.DeleteOptions{}
	if force {
		zero := int64(0)
		opts.GracePeriodSeconds = &zero
	}
	if err := e.CP.Kube.CoreV1().Pods(ns).Delete(t.Context(), name, opts); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting pod %s/%s: %v", ns, name, err)
	}
}

// EventsFor returns the events with reason on the pod ns/pod.
func (e *Env) EventsFor(t testing.TB, ns, pod, reason string) []corev1.Event {
	t.Helper()
	list, err := e.CP.Kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// WaitForEvent waits up to 30 s for an event with reason on the pod ns/pod.
func (e *Env) WaitForEvent(t testing.TB, ns, pod, reason string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for len(e.EventsFor(t, ns, pod, reason)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no %s event on pod %s/%s within 30s", reason, ns, pod)
		}
		<-tick.C
	}
}

// TerminateNamespace deletes ns and waits until it is Terminating. The
// bare API server has no namespace controller, so it stays so until
// RemoveTerminatingNamespace.
func (e *Env) TerminateNamespace(t testing.TB, ns string) {
	t.Helper()
	if err := e.CP.Kube.CoreV1().Namespaces().Delete(t.Context(), ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := e.CP.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return err == nil && n.Status.Phase == corev1.NamespaceTerminating, err
	}); err != nil {
		t.Fatalf("namespace %s is not terminating: %v", ns, err)
	}
}

// RemoveTerminatingNamespace finishes what the namespace controller would
// do (this control plane has none): it removes the pods, whatever holds
// them, and the PodToIps left in ns, then the namespace's finalizer, so the
// namespace is gone for the tests that follow. It runs in a cleanup, after
// the test's context is done.
func (e *Env) RemoveTerminatingNamespace(t testing.TB, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zero := int64(0)
	kube := e.CP.Kube.CoreV1()
	if pods, err := kube.Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, pod := range pods.Items {
			if len(pod.Finalizers) > 0 {
				_, _ = kube.Pods(ns).Patch(ctx, pod.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			}
			_ = kube.Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
	}
	_ = e.Mirrors(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	n, err := kube.Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		return
	}
	if n.DeletionTimestamp == nil {
		_ = kube.Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		if n, err = kube.Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
			return
		}
	}
	n.Spec.Finalizers = nil
	if _, err := kube.Namespaces().Finalize(ctx, n, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("finalizing namespace %s: %v", ns, err)
		return
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := kube.Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Errorf("namespace %s is still there after its finalizer was removed", ns)
	}
}
