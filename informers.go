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

	"example.com/podtoip-controller/internal/conflicts"
	"example.com/podtoip-controller/internal/history"
	"example.com/podtoip-controller/internal/kubeclient"
	"example.com/podtoip-controller/internal/podinfo"
)

// newPodInformer builds the pod informer. Its cache keys pods by
// namespace/name only (the controller never lists by namespace, so it needs
// no namespace index; the pod handlers keep the index by address, see
// conflicts.HolderIndex) and holds podinfo.Pod records, not Pods.
//
// progress follows what the informer is given, for the history's proof of
// how far it has seen (see history.Progress); nil leaves it out.
func newPodInformer(kube kubernetes.Interface, namespace string, progress *history.Progress) (cache.SharedIndexInformer, error) {
	pods := kube.CoreV1().Pods(namespace)
	return newInformer(kube, progress.Wrap(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return pods.List(ctx, opts)
		},
		WatchFuncWithContext: pods.Watch,
	}), &corev1.Pod{}, podinfo.Slim, nil)
}

// newMirrorInformer builds the PodToIp informer on the hand-written client.
// Its objects are decoded by the standard JSON serializer and slimmed by
// slimMirror before they are stored.
func newMirrorInformer(client *Client, namespace string) (cache.SharedIndexInformer, error) {
	mirrors := client.PodToIps(namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return mirrors.List(ctx, opts)
		},
		WatchFuncWithContext: mirrors.Watch,
	}
	return newInformer(nil, lw, &PodToIp{}, slimMirror, nil)
}

// newConflictChecks builds the informers of the optional conflict checks:
// Nodes and IPAddresses, cluster-wide whatever --namespace says, slimmed to
// what the checks read. See conflicts.Check for what happens when they may
// not list.
func newConflictChecks(kube kubernetes.Interface) (nodes, ipAddresses *conflicts.Check, err error) {
	nodeClient, addrClient := kube.CoreV1().Nodes(), kube.NetworkingV1().IPAddresses()
	nodeInf, err := newInformer(kube, &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return nodeClient.List(ctx, opts)
		},
		WatchFuncWithContext: nodeClient.Watch,
	}, &corev1.Node{}, conflicts.SlimNode, cache.Indexers{conflicts.AddressIndex: conflicts.NodeAddressIndexFunc})
	if err != nil {
		return nil, nil, err
	}
	addrInf, err := newInformer(kube, &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return addrClient.List(ctx, opts)
		},
		WatchFuncWithContext: addrClient.Watch,
	}, &networkingv1.IPAddress{}, conflicts.SlimIPAddress, nil)
	if err != nil {
		return nil, nil, err
	}
	if nodes, err = conflicts.NewCheck(conflicts.CheckNodes, nodeInf); err != nil {
		return nil, nil, fmt.Errorf("setting up the nodes conflict check: %w", err)
	}
	if ipAddresses, err = conflicts.NewCheck(conflicts.CheckServices, addrInf); err != nil {
		return nil, nil, fmt.Errorf("setting up the services conflict check: %w", err)
	}
	return nodes, ipAddresses, nil
}

// newInformer builds an informer of lw's objects (of obj's type) that waits
// out an unreachable API server (kubeclient.RetryWhileUnreachable) and keeps what
// transform makes of each object. With kube set, the initial list streams
// (WatchList) where the API server supports it.
func newInformer(kube kubernetes.Interface, lw *cache.ListWatch, obj runtime.Object, transform cache.TransformFunc, indexers cache.Indexers) (cache.SharedIndexInformer, error) {
	var listWatcher cache.ListerWatcher = lw
	if kube != nil {
		listWatcher = cache.ToListWatcherWithWatchListSemantics(lw, kube)
	}
	inf := cache.NewSharedIndexInformerWithOptions(kubeclient.RetryWhileUnreachable(listWatcher), obj, cache.SharedIndexInformerOptions{Indexers: indexers})
	if err := inf.SetTransform(transform); err != nil {
		return nil, fmt.Errorf("setting the transform of the %T informer: %w", obj, err)
	}
	return inf, nil
}
