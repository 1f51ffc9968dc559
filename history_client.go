package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"example.com/podtoip-controller/internal/history"
	"example.com/podtoip-controller/internal/kubeclient"
)

func init() {
	scheme.AddKnownTypes(history.GroupVersion, &history.IPHistory{}, &history.IPHistoryList{},
		&history.IPHistoryCoverage{}, &history.IPHistoryCoverageList{})
}

// historyWriter is the set of calls the historian makes on IPHistory
// objects. *historyClient implements it; unit tests substitute a fake API
// server. A write returns the written object's resourceVersion: the
// historian keeps its own Record of what it wrote (see historian).
type historyWriter interface {
	Create(ctx context.Context, h *history.IPHistory) (string, error)
	// Patch applies a JSON patch (history.Patch) to the object name.
	Patch(ctx context.Context, name string, patch []byte) (string, error)
	// Update replaces the object; h carries the resourceVersion it
	// expects.
	Update(ctx context.Context, h *history.IPHistory) (string, error)
	Delete(ctx context.Context, name string, pre metav1.Preconditions) error
	Get(ctx context.Context, name string) (*history.IPHistory, error)
	List(ctx context.Context, opts metav1.ListOptions) (*history.IPHistoryList, error)

	// GetCoverage reads the coverage object name; SaveCoverage creates c
	// (no resourceVersion) or replaces it (the version it expects) and
	// returns what the API server stored.
	GetCoverage(ctx context.Context, name string) (*history.IPHistoryCoverage, error)
	SaveCoverage(ctx context.Context, c *history.IPHistoryCoverage) (*history.IPHistoryCoverage, error)
}

// historyClient writes IPHistory objects through the hand-written writer
// the mirrors use, reading of each response only the resourceVersion, and reads them (a list when the controller starts to
// lead, a GET after a conflict) through client-go's REST client.
type historyClient struct {
	rest  rest.Interface
	write *kubeclient.Writer
}

func newHistoryClient(cfg *rest.Config, httpClient, writeHTTP *http.Client) (*historyClient, error) {
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
	w, err := kubeclient.NewWriter(c, writeHTTP, GroupVersion, history.Resource, false)
	if err != nil {
		return nil, err
	}
	return &historyClient{rest: rc, write: w}, nil
}

func (c *historyClient) List(ctx context.Context, opts metav1.ListOptions) (*history.IPHistoryList, error) {
	out := &history.IPHistoryList{}
	err := c.rest.Get().Resource(history.Resource).VersionedParams(&opts, parameterCodec).
		Timeout(kubeclient.ListTimeout(opts)).Do(ctx).Into(out)
	return out, err
}

func (c *historyClient) Get(ctx context.Context, name string) (*history.IPHistory, error) {
	out := &history.IPHistory{}
	err := c.rest.Get().Resource(history.Resource).Name(name).Do(ctx).Into(out)
	return out, err
}

func (c *historyClient) GetCoverage(ctx context.Context, name string) (*history.IPHistoryCoverage, error) {
	out := &history.IPHistoryCoverage{}
	err := c.rest.Get().Resource(history.CoverageResource).Name(name).Do(ctx).Into(out)
	return out, err
}

// SaveCoverage writes the one coverage object of this controller, a few
// times a minute: client-go's REST client, not the mirrors' writer, is
// plenty for that.
func (c *historyClient) SaveCoverage(ctx context.Context, cov *history.IPHistoryCoverage) (*history.IPHistoryCoverage, error) {
	out := &history.IPHistoryCoverage{}
	req := c.rest.Post().Resource(history.CoverageResource)
	if cov.ResourceVersion != "" {
		req = c.rest.Put().Resource(history.CoverageResource).Name(cov.Name)
	}
	err := req.Param("fieldManager", fieldManager).Body(cov).Do(ctx).Into(out)
	return out, err
}

func (c *historyClient) Create(ctx context.Context, h *history.IPHistory) (string, error) {
	return c.send(ctx, http.MethodPost, "", h)
}

func (c *historyClient) Update(ctx context.Context, h *history.IPHistory) (string, error) {
	return c.send(ctx, http.MethodPut, h.Name, h)
}

func (c *historyClient) Patch(ctx context.Context, name string, patch []byte) (string, error) {
	return c.do(ctx, http.MethodPatch, name, patch)
}

func (c *historyClient) send(ctx context.Context, method, name string, h *history.IPHistory) (string, error) {
	body, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("encoding IPHistory %s: %w", h.Name, err)
	}
	return c.do(ctx, method, name, body)
}

func (c *historyClient) do(ctx context.Context, method, name string, body []byte) (string, error) {
	res, err := c.write.Do(ctx, method, "", name, kubeclient.WriteOptions{FieldManager: fieldManager}, body)
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

func (c *historyClient) Delete(ctx context.Context, name string, pre metav1.Preconditions) error {
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
