package main

import (
	"context"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"example.com/podtoip-controller/internal/history"
)

func init() {
	scheme.AddKnownTypes(history.GroupVersion, &history.IPHistory{}, &history.IPHistoryList{})
}

// historyWriter is the set of writes the historian makes on IPHistory
// objects. *historyClient implements it; unit tests substitute a recorder.
type historyWriter interface {
	Create(ctx context.Context, h *history.IPHistory) (*history.IPHistory, error)
	Update(ctx context.Context, h *history.IPHistory) (*history.IPHistory, error)
	Delete(ctx context.Context, name string, pre metav1.Preconditions) error
}

// historyClient reads and writes IPHistory objects through client-go's
// REST client with the standard JSON serializer. Unlike PodToIps, they are
// written once per hold that starts or ends, not once per pod event, so the
// library's request path costs nothing worth a hand-written one.
type historyClient struct {
	rest rest.Interface
}

func newHistoryClient(cfg *rest.Config, httpClient *http.Client) (*historyClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &history.GroupVersion
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.NegotiatedSerializer = codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientForConfigAndClient(c, httpClient)
	if err != nil {
		return nil, fmt.Errorf("building REST client for %s: %w", history.GroupVersionResource, err)
	}
	return &historyClient{rest: rc}, nil
}

func (c *historyClient) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	out := &history.IPHistoryList{}
	err := c.rest.Get().Resource(history.Resource).VersionedParams(&opts, parameterCodec).
		Timeout(timeoutOf(opts)).Do(ctx).Into(out)
	return out, err
}

func (c *historyClient) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rest.Get().Resource(history.Resource).VersionedParams(&opts, parameterCodec).
		Timeout(timeoutOf(opts)).Watch(ctx)
}

func (c *historyClient) Create(ctx context.Context, h *history.IPHistory) (*history.IPHistory, error) {
	out := &history.IPHistory{}
	err := c.rest.Post().Resource(history.Resource).Param("fieldManager", fieldManager).Body(h).Do(ctx).Into(out)
	return out, err
}

func (c *historyClient) Update(ctx context.Context, h *history.IPHistory) (*history.IPHistory, error) {
	out := &history.IPHistory{}
	err := c.rest.Put().Resource(history.Resource).Name(h.Name).Param("fieldManager", fieldManager).Body(h).Do(ctx).Into(out)
	return out, err
}

func (c *historyClient) Delete(ctx context.Context, name string, pre metav1.Preconditions) error {
	return c.rest.Delete().Resource(history.Resource).Name(name).Body(&metav1.DeleteOptions{Preconditions: &pre}).Do(ctx).Error()
}

// newHistoryInformer builds the IPHistory informer (cluster-scoped: one
// object per address). Its cache keeps objects without managedFields.
func newHistoryInformer(c *historyClient) (cache.SharedIndexInformer, error) {
	return newInformer(nil, &cache.ListWatch{ListWithContextFunc: c.list, WatchFuncWithContext: c.watch},
		&history.IPHistory{}, slimHistory, nil)
}

// slimHistory is the IPHistory informer's transform: the cache keeps the
// holds and the identity a write needs, not managedFields, which an update
// leaves as the API server has them.
func slimHistory(obj any) (any, error) {
	if h, ok := obj.(*history.IPHistory); ok {
		h.ManagedFields = nil
		h.Annotations = nil
	}
	return obj, nil
}
