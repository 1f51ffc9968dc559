package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// newPodInformer builds the pod informer. Its cache keys pods by
// namespace/name only (the controller never lists by namespace, so it needs
// no namespace index; the pod handlers keep the index by address, see
// holderIndex) and holds podInfo, not Pods.
func newPodInformer(kube kubernetes.Interface, namespace string) (cache.SharedIndexInformer, error) {
	pods := kube.CoreV1().Pods(namespace)
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return pods.List(ctx, opts)
		},
		WatchFuncWithContext: pods.Watch,
	}, kube)
	inf := cache.NewSharedIndexInformerWithOptions(retryWhileUnreachable(lw), &corev1.Pod{}, cache.SharedIndexInformerOptions{})
	if err := inf.SetTransform(slimPod); err != nil {
		return nil, fmt.Errorf("setting the pod transform: %w", err)
	}
	return inf, nil
}

// newConflictChecks builds the informers of the optional conflict checks:
// Nodes and IPAddresses, cluster-wide whatever --namespace says, slimmed to
// what the checks read. See conflict_checks.go for what happens when they
// may not list.
func newConflictChecks(kube kubernetes.Interface) ([]*conflictCheck, error) {
	nodes := kube.CoreV1().Nodes()
	addrs := kube.NetworkingV1().IPAddresses()
	var checks []*conflictCheck
	for _, spec := range []struct {
		name      string
		lw        *cache.ListWatch
		obj       runtime.Object
		transform cache.TransformFunc
		indexers  cache.Indexers
	}{
		{checkNodes, &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				return nodes.List(ctx, opts)
			},
			WatchFuncWithContext: nodes.Watch,
		}, &corev1.Node{}, slimNode, cache.Indexers{addressIndex: nodeAddressIndexFunc}},
		{checkServices, &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				return addrs.List(ctx, opts)
			},
			WatchFuncWithContext: addrs.Watch,
		}, &networkingv1.IPAddress{}, slimIPAddress, cache.Indexers{}},
	} {
		lw := cache.ToListWatcherWithWatchListSemantics(spec.lw, kube)
		inf := cache.NewSharedIndexInformerWithOptions(retryWhileUnreachable(lw), spec.obj, cache.SharedIndexInformerOptions{Indexers: spec.indexers})
		if err := inf.SetTransform(spec.transform); err != nil {
			return nil, fmt.Errorf("setting the %s transform: %w", spec.name, err)
		}
		k, err := newConflictCheck(spec.name, inf)
		if err != nil {
			return nil, fmt.Errorf("setting up the %s conflict check: %w", spec.name, err)
		}
		checks = append(checks, k)
	}
	return checks, nil
}

// newMirrorInformer builds the PodToIp informer on the hand-written client.
func newMirrorInformer(client *Client, namespace string) (cache.SharedIndexInformer, error) {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return client.cachePodToIps(namespace).List(ctx, opts)
		},
		WatchFuncWithContext: client.cachePodToIps(namespace).Watch,
	}
	inf := cache.NewSharedIndexInformerWithOptions(retryWhileUnreachable(lw), &PodToIp{}, cache.SharedIndexInformerOptions{})
	if err := inf.SetTransform(slimMirror); err != nil {
		return nil, fmt.Errorf("setting the PodToIp transform: %w", err)
	}
	return inf, nil
}
