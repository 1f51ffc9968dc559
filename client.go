package main

import (
	"context"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"example.com/podtoip-controller/internal/kubeclient"
)

// scheme knows only the PodToIp types (plus the meta types every group
// needs, such as ListOptions and Status). It is private so registering our
// types never touches client-go's global scheme.
var (
	scheme         = runtime.NewScheme()
	codecs         = serializer.NewCodecFactory(scheme)
	parameterCodec = runtime.NewParameterCodec(scheme)
)

func init() {
	scheme.AddKnownTypes(GroupVersion, &PodToIp{}, &PodToIpList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
}

// PodToIpInterface is the set of calls the controller (and its tests) make on
// PodToIp objects in one namespace, or in all namespaces for List and Watch
// when the namespace is "". Create and Update return the written object's
// metadata only (name, namespace, UID, resourceVersion): the write tracker
// needs nothing else, and decoding the whole response (managedFields
// included) for every write is the larger part of a write's CPU.
type PodToIpInterface interface {
	List(ctx context.Context, opts metav1.ListOptions) (*PodToIpList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, obj *PodToIp, opts metav1.CreateOptions) (*PodToIp, error)
	Update(ctx context.Context, obj *PodToIp, opts metav1.UpdateOptions) (*PodToIp, error)
	// Patch sends a JSON patch (RFC 6902) of the object name.
	Patch(ctx context.Context, name string, patch []byte, opts metav1.PatchOptions) (*PodToIp, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// Client is a typed REST client for the example.com/v1 API group. It is
// written by hand instead of generated: the group has a single kind and the
// controller needs only the basic verbs. Reads go through client-go's
// rest.RESTClient and are decoded for the controller's cache
// (cacheDecoder): a PodToIp comes without managedFields, creationTimestamp
// and generation. Writes, one per pod and per change, go through writer,
// which keeps what rest.RESTClient gives a write at a fraction of its cost
// (docs/performance.md).
type Client struct {
	rest rest.Interface
	// write sends creates, updates and deletes (see writer).
	write        *kubeclient.Writer
	fieldManager string
}

// NewClient builds a Client that reads through httpClient, shared with the
// other clients of the process (its connections and, through
// cfg.RateLimiter, client-side rate limits), and writes through writeHTTP,
// which may be the same client or one on connections of its own
// (kubeclient.NewHTTPClient). Writes are attributed to fieldManager unless
// the caller sets one.
func NewClient(cfg *rest.Config, httpClient, writeHTTP *http.Client, fieldManager string) (*Client, error) {
	rc, w, err := kubeclient.CustomResourceClients(cfg, httpClient, writeHTTP, GroupVersion, Resource, true, cacheNegotiator{codecs.WithoutConversion()})
	if err != nil {
		return nil, err
	}
	return &Client{rest: rc, write: w, fieldManager: fieldManager}, nil
}

// PodToIps returns the calls for one namespace; "" means all namespaces and is
// valid only for List and Watch.
func (c *Client) PodToIps(namespace string) PodToIpInterface {
	return &podToIps{client: c, ns: namespace}
}

type podToIps struct {
	client *Client
	ns     string
}

// List passes every ListOptions field through, so callers can page, select by
// label or field, and pin resource versions.
func (p *podToIps) List(ctx context.Context, opts metav1.ListOptions) (*PodToIpList, error) {
	result := &PodToIpList{}
	err := p.client.rest.Get().
		Namespace(p.ns).Resource(Resource).
		VersionedParams(&opts, parameterCodec).
		Timeout(kubeclient.ListTimeout(opts)).
		Do(ctx).Into(result)
	return result, err
}

// Watch passes every ListOptions field through, including SendInitialEvents
// and ResourceVersionMatch, which is what lets an informer stream its initial
// list (WatchList) instead of loading one large response.
func (p *podToIps) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return p.client.rest.Get().
		Namespace(p.ns).Resource(Resource).
		VersionedParams(&opts, parameterCodec).
		Timeout(kubeclient.ListTimeout(opts)).
		Watch(ctx)
}

func (p *podToIps) Create(ctx context.Context, obj *PodToIp, opts metav1.CreateOptions) (*PodToIp, error) {
	body, err := bodyOf(obj)
	if err != nil {
		return nil, err
	}
	return p.send(ctx, http.MethodPost, "", body, kubeclient.WriteOptions{DryRun: opts.DryRun, FieldManager: opts.FieldManager, FieldValidation: opts.FieldValidation})
}

func (p *podToIps) Update(ctx context.Context, obj *PodToIp, opts metav1.UpdateOptions) (*PodToIp, error) {
	if obj.Name == "" {
		return nil, fmt.Errorf("updating a %s in %q: the object has no name", Resource, p.ns)
	}
	body, err := bodyOf(obj)
	if err != nil {
		return nil, err
	}
	return p.send(ctx, http.MethodPut, obj.Name, body, kubeclient.WriteOptions{DryRun: opts.DryRun, FieldManager: opts.FieldManager, FieldValidation: opts.FieldValidation})
}

func (p *podToIps) Patch(ctx context.Context, name string, patch []byte, opts metav1.PatchOptions) (*PodToIp, error) {
	if name == "" {
		return nil, fmt.Errorf("patching a %s in %q: the name is empty", Resource, p.ns)
	}
	return p.send(ctx, http.MethodPatch, name, patch, kubeclient.WriteOptions{DryRun: opts.DryRun, FieldManager: opts.FieldManager, FieldValidation: opts.FieldValidation})
}

// send writes body (a create when name is "") and returns the metadata of
// the object the API server wrote (see PodToIpInterface).
func (p *podToIps) send(ctx context.Context, method, name string, body []byte, opts kubeclient.WriteOptions) (*PodToIp, error) {
	if opts.FieldManager == "" {
		opts.FieldManager = p.client.fieldManager
	}
	res, err := p.client.write.Do(ctx, method, p.ns, name, opts, body)
	if err != nil {
		return nil, err
	}
	defer res.Release()
	meta, err := res.Meta()
	if err != nil {
		return nil, err
	}
	return &PodToIp{ObjectMeta: meta}, nil
}

// bodyOf is what a write sends: the JSON encodeMirror writes, or, when it
// declines, the standard encoding.
func bodyOf(obj *PodToIp) ([]byte, error) {
	if b, ok := encodeMirror(obj); ok {
		return b, nil
	}
	b, err := runtime.Encode(codecs.LegacyCodec(GroupVersion), obj)
	if err != nil {
		return nil, fmt.Errorf("encoding %s %s/%s: %w", Resource, obj.Namespace, obj.Name, err)
	}
	return b, nil
}

func (p *podToIps) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	if name == "" {
		return fmt.Errorf("deleting a %s in %q: the name is empty", Resource, p.ns)
	}
	// As client-go sends it: DeleteOptions of the group's version.
	body, err := runtime.Encode(codecs.LegacyCodec(GroupVersion), &opts)
	if err != nil {
		return fmt.Errorf("encoding the options to delete %s %s/%s: %w", Resource, p.ns, name, err)
	}
	res, err := p.client.write.Do(ctx, http.MethodDelete, p.ns, name, kubeclient.WriteOptions{}, body)
	if err != nil {
		return err
	}
	res.Release()
	return nil
}
