package main

import (
	"time"

	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	serverclock "example.com/podtoip-controller/internal/clock"
	"example.com/podtoip-controller/internal/history"
)

// mirrorResource is PodToIp's resource.
var mirrorResource = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "podtoips"}

// managedBy selects the PodToIps the controller manages: only they are
// answers (docs/mirror.md).
const managedBy = "app.kubernetes.io/managed-by=podtoip-controller"

// installHint says how to install both CRDs.
const installHint = "install the CRDs with 'kubectl apply -f artifacts/crd.yaml' and run podtoip-controller"

// listPage is how many PodToIps one LIST returns: a page bounds the memory
// of the API server and of this client when thousands match.
const listPage = 500

// mirror is the part of a PodToIp (docs/mirror.md) the commands show.
type mirror struct {
	metav1.ObjectMeta `json:"metadata"`
	PodName           string   `json:"podName"`
	PodUID            string   `json:"podUID"`
	PodIPs            []string `json:"podIPs,omitempty"`
	NodeName          string   `json:"nodeName,omitempty"`
	HostNetwork       bool     `json:"hostNetwork"`
	Conflict          bool     `json:"conflict"`
	ConflictsWith     []string `json:"conflictsWith,omitempty"`
	// Terminating is set while the pod is being deleted but still holds
	// its addresses: the next pod may already have one of them.
	Terminating bool `json:"terminating,omitempty"`
}

// client asks the API server about PodToIps and IPHistories.
type client struct {
	dyn dynamic.Interface
	// namespace limits the PodToIps listed; "" for all namespaces.
	namespace string
	// clock follows the API server's clock from its responses (nil: not
	// measured; see serverNow).
	clock *serverclock.Server
}

// newClient connects with the kubeconfig flags; namespace is "" for all.
func newClient(flags genericclioptions.RESTClientGetter, namespace string) (*client, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, apiError(fmt.Errorf("reading the kubeconfig: %w; check --kubeconfig, $KUBECONFIG and --context", err))
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "kubectl-ptp/" + version
	clk := serverclock.New(nil)
	cfg.Wrap(clk.Wrap)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, apiError(fmt.Errorf("setting up the client for %s: %w", cfg.Host, err))
	}
	return &client{dyn: dyn, namespace: namespace, clock: clk}, nil
}

// serverNow returns now by the API server's clock, the latest its
// responses allow, else local(): the retention window is the writer's, on
// the server's time, and a reader whose clock is slow would otherwise
// vouch for time whose holds are pruned.
func (c *client) serverNow(local func() time.Time) time.Time {
	if c.clock != nil {
		if _, hi, ok := c.clock.Offset(); ok {
			return local().Add(hi)
		}
	}
	return local()
}

// mirrors lists the PodToIps the controller manages that match
// fieldSelector, page by page.
func (c *client) mirrors(ctx context.Context, fieldSelector string) ([]mirror, error) {
	opts := metav1.ListOptions{FieldSelector: fieldSelector, LabelSelector: managedBy, Limit: listPage}
	var out []mirror
	for {
		list, err := c.dyn.Resource(mirrorResource).Namespace(c.namespace).List(ctx, opts)
		if err != nil {
			return nil, c.explainList(err, fieldSelector)
		}
		for _, item := range list.Items {
			if item.GetDeletionTimestamp() != nil {
				// A finalizer keeps it after its pod is gone: a
				// stale mirror, no holder.
				continue
			}
			var m mirror
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &m); err != nil {
				return nil, apiError(fmt.Errorf("reading PodToIp %s/%s: %w", item.GetNamespace(), item.GetName(), err))
			}
			out = append(out, m)
		}
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return out, nil
		}
	}
}

// explainList turns the error of a LIST of PodToIps into what to do.
func (c *client) explainList(err error, fieldSelector string) error {
	where := "in all namespaces"
	if c.namespace != "" {
		where = "in namespace " + c.namespace
	}
	switch {
	case apierrors.IsForbidden(err):
		return apiError(fmt.Errorf("listing PodToIps %s is forbidden: %w; ask for the ClusterRole podtoip-controller-view, or pass -n for a namespace you may read", where, err))
	case apierrors.IsNotFound(err):
		return apiError(fmt.Errorf("the API server does not serve PodToIps (%w): %s", err, installHint))
	case apierrors.IsBadRequest(err) && strings.Contains(err.Error(), "field label"):
		return apiError(fmt.Errorf("the API server cannot select PodToIps by %s (%w): it needs Kubernetes 1.32 or later and the current CRD: kubectl apply -f artifacts/crd.yaml", fieldSelector, err))
	}
	return apiError(explainCommon(fmt.Errorf("listing PodToIps %s with %s: %w", where, fieldSelector, err)))
}

// history returns the IPHistory named name, as the API server sent it and
// decoded; both nil when there is none.
func (c *client) history(ctx context.Context, name string) (*history.IPHistory, *unstructured.Unstructured, error) {
	u, err := c.dyn.Resource(history.GroupVersionResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		switch {
		case objectMissing(err):
			return nil, nil, nil
		case apierrors.IsForbidden(err):
			return nil, nil, apiError(fmt.Errorf("reading IPHistory %s is forbidden: %w; ask for get on %s", name, err, history.CRDName))
		case apierrors.IsNotFound(err):
			return nil, nil, apiError(fmt.Errorf("the API server does not serve IPHistory (%w): %s with the history on", err, installHint))
		}
		return nil, nil, apiError(explainCommon(fmt.Errorf("reading IPHistory %s: %w", name, err)))
	}
	var h history.IPHistory
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &h); err != nil {
		return nil, nil, apiError(fmt.Errorf("reading IPHistory %s: %w", name, err))
	}
	return &h, u, nil
}

// coverageRead is the outcome of reading an IPHistoryCoverage: the object,
// or why there is none to go by.
type coverageRead struct {
	name string
	obj  *history.IPHistoryCoverage
	// missing, forbidden and notServed say why obj is nil.
	missing, forbidden, notServed bool
}

// coverage reads the IPHistoryCoverage named name. One that is missing or
// may not be read leaves the history unvouched, not the question
// unanswered: the holds are still worth showing, so only other failures
// are errors.
func (c *client) coverage(ctx context.Context, name string) (coverageRead, error) {
	r := coverageRead{name: name}
	u, err := c.dyn.Resource(history.CoverageGroupVersionResource).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
	case objectMissing(err):
		r.missing = true
		return r, nil
	case apierrors.IsForbidden(err):
		r.forbidden = true
		return r, nil
	case apierrors.IsNotFound(err):
		r.notServed = true
		return r, nil
	default:
		return r, apiError(explainCommon(fmt.Errorf("reading IPHistoryCoverage %s: %w", name, err)))
	}
	var cov history.IPHistoryCoverage
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cov); err != nil {
		return r, apiError(fmt.Errorf("reading IPHistoryCoverage %s: %w", name, err))
	}
	r.obj = &cov
	return r, nil
}

// objectMissing reports whether err says that the object does not exist,
// rather than that its resource is not served: the API server answers an
// unknown resource with a plain-text 404, which client-go reports with the
// cause UnexpectedServerResponse.
func objectMissing(err error) bool {
	var s apierrors.APIStatus
	if !errors.As(err, &s) || s.Status().Reason != metav1.StatusReasonNotFound || s.Status().Details == nil {
		return false
	}
	for _, cause := range s.Status().Details.Causes {
		if cause.Type == metav1.CauseTypeUnexpectedServerResponse {
			return false
		}
	}
	return s.Status().Details.Name != ""
}

// explainCommon adds what to do about the errors any request may meet.
func explainCommon(err error) error {
	switch {
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%w; the API server did not accept the credentials: log in again, or check --kubeconfig and --context", err)
	case errors.Is(err, context.DeadlineExceeded) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err):
		return fmt.Errorf("%w; the API server did not answer in time: retry, or raise --request-timeout", err)
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return fmt.Errorf("%w; check that the cluster is reachable (kubectl cluster-info)", err)
	}
	return err
}
