package history

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"example.com/podtoip-controller/internal/kubeclient"
)

// scheme knows only the history's types (plus the meta types every group
// needs, such as ListOptions and Status), for the Client's reads. It is
// private so registering them never touches client-go's global scheme.
var (
	scheme         = runtime.NewScheme()
	codecs         = serializer.NewCodecFactory(scheme)
	parameterCodec = runtime.NewParameterCodec(scheme)
)

func init() {
	scheme.AddKnownTypes(GroupVersion, &IPHistory{}, &IPHistoryList{},
		&IPHistoryCoverage{}, &IPHistoryCoverageList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
}

// API is the set of calls the Historian makes on IPHistory
// objects. *Client implements it; unit tests substitute a fake API
// server. A write returns the written object's resourceVersion: the
// Historian keeps its own Record of what it wrote (see Historian).
type API interface {
	Create(ctx context.Context, h *IPHistory) (string, error)
	// Patch applies a JSON patch, as the function Patch makes, to the
	// object name.
	Patch(ctx context.Context, name string, patch []byte) (string, error)
	// Update replaces the object; h carries the resourceVersion it
	// expects.
	Update(ctx context.Context, h *IPHistory) (string, error)
	Delete(ctx context.Context, name string, pre metav1.Preconditions) error
	Get(ctx context.Context, name string) (*IPHistory, error)
	List(ctx context.Context, opts metav1.ListOptions) (*IPHistoryList, error)

	// GetCoverage reads the coverage object name; SaveCoverage creates c
	// (no resourceVersion) or replaces it (the version it expects) and
	// returns what the API server stored.
	GetCoverage(ctx context.Context, name string) (*IPHistoryCoverage, error)
	SaveCoverage(ctx context.Context, c *IPHistoryCoverage) (*IPHistoryCoverage, error)
}

// Client writes IPHistory objects through the hand-written writer the
// mirrors use, reading of each response only the resourceVersion, and
// reads them (a list when the controller starts to lead, a GET after a
// conflict) through client-go's REST client.
type Client struct {
	rest         rest.Interface
	write        *kubeclient.Writer
	fieldManager string
}

// NewClient builds a Client that reads through httpClient and writes
// through writeHTTP, as the mirrors' client does, attributing its writes
// to fieldManager.
func NewClient(cfg *rest.Config, httpClient, writeHTTP *http.Client, fieldManager string) (*Client, error) {
	rc, w, err := kubeclient.CustomResourceClients(cfg, httpClient, writeHTTP, GroupVersion, Resource, false, codecs.WithoutConversion())
	if err != nil {
		return nil, err
	}
	return &Client{rest: rc, write: w, fieldManager: fieldManager}, nil
}

func (c *Client) List(ctx context.Context, opts metav1.ListOptions) (*IPHistoryList, error) {
	out := &IPHistoryList{}
	err := c.rest.Get().Resource(Resource).VersionedParams(&opts, parameterCodec).
		Timeout(kubeclient.ListTimeout(opts)).Do(ctx).Into(out)
	return out, err
}

func (c *Client) Get(ctx context.Context, name string) (*IPHistory, error) {
	out := &IPHistory{}
	err := c.rest.Get().Resource(Resource).Name(name).Do(ctx).Into(out)
	return out, err
}

func (c *Client) GetCoverage(ctx context.Context, name string) (*IPHistoryCoverage, error) {
	out := &IPHistoryCoverage{}
	err := c.rest.Get().Resource(CoverageResource).Name(name).Do(ctx).Into(out)
	return out, err
}

// SaveCoverage writes the one coverage object of this controller, a few
// times a minute: client-go's REST client, not the mirrors' writer, is
// plenty for that.
func (c *Client) SaveCoverage(ctx context.Context, cov *IPHistoryCoverage) (*IPHistoryCoverage, error) {
	out := &IPHistoryCoverage{}
	req := c.rest.Post().Resource(CoverageResource)
	if cov.ResourceVersion != "" {
		req = c.rest.Put().Resource(CoverageResource).Name(cov.Name)
	}
	err := req.Param("fieldManager", c.fieldManager).Body(cov).Do(ctx).Into(out)
	return out, err
}

func (c *Client) Create(ctx context.Context, h *IPHistory) (string, error) {
	return c.send(ctx, http.MethodPost, "", h)
}

func (c *Client) Update(ctx context.Context, h *IPHistory) (string, error) {
	return c.send(ctx, http.MethodPut, h.Name, h)
}

func (c *Client) Patch(ctx context.Context, name string, patch []byte) (string, error) {
	return c.do(ctx, http.MethodPatch, name, patch)
}

func (c *Client) send(ctx context.Context, method, name string, h *IPHistory) (string, error) {
	body, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("encoding IPHistory %s: %w", h.Name, err)
	}
	return c.do(ctx, method, name, body)
}

func (c *Client) do(ctx context.Context, method, name string, body []byte) (string, error) {
	res, err := c.write.Do(ctx, method, "", name, kubeclient.WriteOptions{FieldManager: c.fieldManager}, body)
	if err != nil {
		return "", err
	}
	defer res.Release()
	m, err := res.Meta()
	if err != nil {
		return "", err
	}
	return m.ResourceVersion, nil
}

func (c *Client) Delete(ctx context.Context, name string, pre metav1.Preconditions) error {
	body, err := json.Marshal(&metav1.DeleteOptions{
		TypeMeta:      metav1.TypeMeta{APIVersion: "v1", Kind: "DeleteOptions"},
		Preconditions: &pre,
	})
	if err != nil {
		return fmt.Errorf("encoding the options to delete IPHistory %s: %w", name, err)
	}
	res, err := c.write.Do(ctx, http.MethodDelete, "", name, kubeclient.WriteOptions{}, body)
	if err != nil {
		return err
	}
	res.Release()
	return nil
}
