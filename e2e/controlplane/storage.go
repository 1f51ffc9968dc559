package controlplane

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

// RewriteStoredPod changes a pod the way only its stored copy can be
// changed: it reads the pod's object from etcd, applies mutate and writes it
// back in the API server's storage format (protobuf, v1), without going
// through the API server's validation. This is how a test puts in front of
// a client what an older API server may have stored, values today's
// validation refuses (an IPv4 address with leading zeros, an IPv4-mapped
// IPv6 address, something that is not an IP at all). The API server's watch
// cache sees the write like any other and sends a MODIFIED event to
// watchers. The write is a compare-and-swap on the revision read, so it
// never overwrites a concurrent change.
func (cp *ControlPlane) RewriteStoredPod(ctx context.Context, namespace, name string, mutate func(*corev1.Pod)) error {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{cp.EtcdURL()},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
		Context:     ctx,
	})
	if err != nil {
		return fmt.Errorf("connecting to etcd at %s: %w", cp.EtcdURL(), err)
	}
	defer cli.Close()

	// kube-apiserver's default --etcd-prefix, which envtest keeps.
	key := "/registry/pods/" + namespace + "/" + name
	get, err := cli.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("reading %s from etcd: %w", key, err)
	}
	if len(get.Kvs) != 1 {
		return fmt.Errorf("pod %s/%s is not stored under %s", namespace, name, key)
	}
	serializer := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	obj, _, err := serializer.Decode(get.Kvs[0].Value, nil, nil)
	if err != nil {
		return fmt.Errorf("decoding the stored pod %s: %w", key, err)
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return fmt.Errorf("%s holds a %T, not a pod", key, obj)
	}
	mutate(pod)
	// The API server stores objects without a resourceVersion (etcd's
	// revision is the resourceVersion).
	pod.ResourceVersion = ""
	data, err := runtime.Encode(scheme.Codecs.EncoderForVersion(serializer, corev1.SchemeGroupVersion), pod)
	if err != nil {
		return fmt.Errorf("encoding pod %s: %w", key, err)
	}
	txn, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", get.Kvs[0].ModRevision)).
		Then(clientv3.OpPut(key, string(data))).
		Commit()
	if err != nil {
		return fmt.Errorf("writing %s to etcd: %w", key, err)
	}
	if !txn.Succeeded {
		return fmt.Errorf("pod %s/%s changed while it was being rewritten; retry", namespace, name)
	}
	return nil
}
