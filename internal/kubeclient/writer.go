package kubeclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	sjson "sigs.k8s.io/json"

	"example.com/podtoip-controller/internal/jsonscan"
)

// Writer sends the controller's writes of one resource of its group
// (create, update, patch, delete): a PodToIp's, one per pod and per
// change, are the requests the controller makes most; an IPHistory's, one
// per hold that starts or ends, come next. It builds each request directly
// on the process's HTTP client (the same connections, credentials, user
// agent and access tracking as every other request), where client-go's
// generic request builder assembles and parses the URL several times per
// request, clones headers and allocates for every step
// (docs/performance.md measures the difference). It keeps what that
// builder gives a write: the shared client-side rate limit, waiting and resending as the API server asks (Retry-After, at
// most maxWriteRetries times), the API server's warnings, the rest_client_*
// metrics, and errors as the API server's Status (apierrors.IsNotFound,
// IsConflict, IsForbidden, ... work as before).
type Writer struct {
	http    *http.Client
	limiter flowcontrol.RateLimiter
	warn    rest.WarningHandlerWithContext
	// userAgent is set on each request, as the transport would set it, so
	// that the transport need not copy the request to set it.
	userAgent string
	// resource is what it writes: PodToIps (in a namespace) or IPHistories
	// (cluster-scoped, when namespaced is false).
	resource   string
	group      string
	namespaced bool
	// prefix is the URL up to the namespace or resource:
	// ".../apis/example.com/v1/" (then "namespaces/NS/" for a namespaced
	// resource).
	prefix string
	host   string
	// template is the URL the request metrics are labelled with, as
	// client-go labels a named request in a namespace.
	template url.URL
}

// maxWriteRetries is how often a write is resent when the API server
// answers 429 or 5xx with a Retry-After header, as client-go's default.
const maxWriteRetries = 10

// NewWriter builds the Writer of resource (namespaced or not) for cfg's API
// server; httpClient is the client built from cfg (rest.HTTPClientFor),
// which carries its transport and credentials.
func NewWriter(cfg *rest.Config, httpClient *http.Client, gv schema.GroupVersion, resource string, namespaced bool) (*Writer, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath, c.GroupVersion = "/apis", &gv
	base, versioned, err := rest.DefaultServerUrlFor(c)
	if err != nil {
		return nil, fmt.Errorf("building the API server's URL from %q: %w", cfg.Host, err)
	}
	u := *base
	u.Path = strings.TrimSuffix(u.Path, "/") + versioned
	w := &Writer{
		http:       httpClient,
		limiter:    cfg.RateLimiter,
		warn:       cfg.WarningHandlerWithContext,
		userAgent:  cfg.UserAgent,
		resource:   resource,
		group:      gv.Group,
		namespaced: namespaced,
		prefix:     u.String() + "/",
		host:       u.Host,
	}
	if w.warn == nil && cfg.WarningHandler != nil {
		w.warn = warningHandlerWithoutContext{cfg.WarningHandler}
	}
	if w.warn == nil {
		w.warn = rest.WarningLogger{}
	}
	w.template = u
	w.template.Path = u.Path + "/" + resource + "/{name}"
	if namespaced {
		w.template.Path = u.Path + "/namespaces/{namespace}/" + resource + "/{name}"
	}
	if w.limiter == nil && cfg.QPS >= 0 {
		// As client-go limits a client configured without a limiter.
		qps, burst := cfg.QPS, cfg.Burst
		if qps == 0 {
			qps = rest.DefaultQPS
		}
		if burst == 0 {
			burst = rest.DefaultBurst
		}
		w.limiter = flowcontrol.NewTokenBucketRateLimiter(qps, burst)
	}
	return w, nil
}

type warningHandlerWithoutContext struct{ rest.WarningHandler }

func (h warningHandlerWithoutContext) HandleWarningHeaderWithContext(_ context.Context, code int, agent, text string) {
	h.HandleWarningHeader(code, agent, text)
}

// WriteOptions are the query parameters of a write.
type WriteOptions struct {
	DryRun          []string
	FieldManager    string
	FieldValidation string
}

// do sends one write: method to the object name in namespace ("" for a
// cluster-scoped resource; "" name: the collection), with body (JSON, or a
// JSON patch for PATCH), and returns the response body, which is the
// caller's until it calls release. name is "" for a create.
func (w *Writer) Do(ctx context.Context, method, namespace, name string, opts WriteOptions, body []byte) (*ResponseBody, error) {
	u, err := w.url(namespace, name, opts)
	if err != nil {
		return nil, err
	}
	for retries := 0; ; retries++ {
		if err := w.throttle(ctx, method); err != nil {
			return nil, err
		}
		resp, err := w.send(ctx, method, u, body)
		if err != nil {
			return nil, err
		}
		wait, retry := retryAfter(resp)
		if !retry || retries >= maxWriteRetries {
			metrics.RequestResult.Increment(ctx, strconv.Itoa(resp.StatusCode), method, w.host)
			return w.result(ctx, method, namespace, name, resp)
		}
		metrics.RequestRetry.IncrementRetry(ctx, strconv.Itoa(resp.StatusCode), method, w.host)
		drain(resp)
		klog.FromContext(ctx).V(4).Info("Resending a write as the API server asked", "verb", method, "URL", u, "status", resp.StatusCode, "retryAfter", wait, "retries", retries+1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// url is the write's URL; namespace and name are checked as client-go
// checks path segments.
func (w *Writer) url(namespace, name string, opts WriteOptions) (string, error) {
	switch {
	case w.namespaced && namespace == "":
		return "", fmt.Errorf("writing a %s: the namespace is empty", w.resource)
	case !w.namespaced && namespace != "":
		return "", fmt.Errorf("writing a %s: it is cluster-scoped, but namespace %q was given", w.resource, namespace)
	}
	for _, seg := range []string{namespace, name} {
		if seg == "" {
			continue
		}
		if msgs := path.IsValidPathSegmentName(seg); len(msgs) != 0 {
			return "", fmt.Errorf("invalid name %q for a %s: %s", seg, w.resource, strings.Join(msgs, ";"))
		}
	}
	var b strings.Builder
	b.Grow(len(w.prefix) + len(namespace) + len(name) + 64)
	b.WriteString(w.prefix)
	if w.namespaced {
		b.WriteString("namespaces/")
		b.WriteString(namespace)
		b.WriteByte('/')
	}
	b.WriteString(w.resource)
	if name != "" {
		b.WriteByte('/')
		b.WriteString(name)
	}
	q := url.Values{}
	for _, d := range opts.DryRun {
		q.Add("dryRun", d)
	}
	if opts.FieldManager != "" {
		q.Set("fieldManager", opts.FieldManager)
	}
	if opts.FieldValidation != "" {
		q.Set("fieldValidation", opts.FieldValidation)
	}
	if len(q) > 0 {
		b.WriteByte('?')
		b.WriteString(q.Encode())
	}
	return b.String(), nil
}

// throttle waits for the shared client-side rate limiter.
func (w *Writer) throttle(ctx context.Context, method string) error {
	if w.limiter == nil {
		return nil
	}
	start := time.Now()
	err := w.limiter.Wait(ctx)
	metrics.RateLimiterLatency.Observe(ctx, method, w.template, time.Since(start))
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("client rate limiter Wait returned an error: %w", err)
	}
	return err
}

// send makes one attempt.
func (w *Writer) send(ctx context.Context, method, u string, body []byte) (*http.Response, error) {
	start := time.Now()
	defer func() { metrics.RequestLatency.Observe(ctx, method, w.template, time.Since(start)) }()
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	contentType := runtime.ContentTypeJSON
	if method == http.MethodPatch {
		contentType = string(types.JSONPatchType)
	}
	req.Header = http.Header{
		"Accept":       {runtime.ContentTypeJSON},
		"Content-Type": {contentType},
	}
	if w.userAgent != "" {
		req.Header["User-Agent"] = []string{w.userAgent}
	}
	metrics.RequestSize.Observe(ctx, method, w.host, float64(len(body)))
	resp, err := w.http.Do(req)
	if err != nil {
		metrics.RequestResult.Increment(ctx, "<error>", method, w.host)
		return nil, err
	}
	return resp, nil
}

// retryAfter reports whether the API server asked for the request to be
// sent again (429 or 5xx with Retry-After), and after how long.
func retryAfter(resp *http.Response) (time.Duration, bool) {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode < 500 {
		return 0, false
	}
	s, ok := retryAfterSeconds(resp)
	return time.Duration(s) * time.Second, ok
}

func retryAfterSeconds(resp *http.Response) (int, bool) {
	s, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	return s, err == nil
}

// result reads the response: its body for a 2xx, else the error it
// stands for.
func (w *Writer) result(ctx context.Context, method, namespace, name string, resp *http.Response) (*ResponseBody, error) {
	defer resp.Body.Close()
	if len(resp.Header["Warning"]) > 0 {
		warnings, _ := utilnet.ParseWarningHeaders(resp.Header["Warning"])
		for _, h := range warnings {
			w.warn.HandleWarningHeaderWithContext(ctx, h.Code, h.Agent, h.Text)
		}
	}
	body := newResponseBody()
	if _, err := body.ReadFrom(resp.Body); err != nil {
		body.Release()
		return nil, fmt.Errorf("reading the response to %s %s of %s/%s: %w", method, w.resource, namespace, name, err)
	}
	metrics.ResponseSize.Observe(ctx, method, w.host, float64(body.Len()))
	if resp.StatusCode >= http.StatusOK && resp.StatusCode <= http.StatusPartialContent {
		return body, nil
	}
	defer body.Release()
	return nil, responseError(resp, body.Bytes(), method, schema.GroupResource{Group: w.group, Resource: w.resource}, name)
}

// responseError is the error a failed write stands for: the API server's
// Status when the body is one, else a generic error with the status code,
// as client-go makes them.
func responseError(resp *http.Response, body []byte, method string, resource schema.GroupResource, name string) error {
	var status metav1.Status
	if json.Unmarshal(body, &status) == nil && (status.Kind == "" || status.Kind == "Status") && status.Status == metav1.StatusFailure {
		return &apierrors.StatusError{ErrStatus: status}
	}
	const maxText = 2048
	if len(body) > maxText {
		body = body[:maxText]
	}
	message := "unknown"
	if isText(resp) {
		message = strings.TrimSpace(string(body))
	}
	s, _ := retryAfterSeconds(resp)
	return apierrors.NewGenericServerResponse(resp.StatusCode, method, resource, name, message, s, true)
}

func isText(resp *http.Response) bool {
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		return true
	}
	media, _, err := mime.ParseMediaType(ct)
	return err == nil && strings.HasPrefix(media, "text/")
}

// drain reads and closes a response that is not used, so its connection
// is reused.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
}

// ResponseBody is a write's response, in a buffer the next write reuses
// once release is called: responses are read at the rate of writes, and
// reading each into a new slice was most of what a write allocated.
type ResponseBody struct{ bytes.Buffer }

var responseBodies = sync.Pool{New: func() any { return new(ResponseBody) }}

func newResponseBody() *ResponseBody { return responseBodies.Get().(*ResponseBody) }

// release returns the buffer for reuse; the caller must hold nothing that
// points into it (strings it made from it are copies).
func (b *ResponseBody) Release() {
	if b.Cap() > 64<<10 {
		return // an unusually large response: let it go
	}
	b.Reset()
	responseBodies.Put(b)
}

// Meta returns the metadata of the object a create or update responded
// with (name, namespace, UID and resourceVersion; what a writer keeps of
// its write): scanned by jsonscan, or, where it declines, decoded by
// sigs.k8s.io/json, the rest skipped either way. Decoding the whole
// response, managedFields included, would be the larger part of a write's
// CPU.
func (b *ResponseBody) Meta() (metav1.ObjectMeta, error) {
	body := b.Bytes()
	if len(body) == 0 {
		return metav1.ObjectMeta{}, fmt.Errorf("empty response to a write")
	}
	if m, ok := scanWrittenMeta(body); ok {
		return m, nil
	}
	var written struct {
		Metadata struct {
			Name            string    `json:"name"`
			Namespace       string    `json:"namespace"`
			UID             types.UID `json:"uid"`
			ResourceVersion string    `json:"resourceVersion"`
		} `json:"metadata"`
	}
	// Case-sensitive, as the API machinery decodes.
	if err := sjson.UnmarshalCaseSensitivePreserveInts(body, &written); err != nil {
		return metav1.ObjectMeta{}, fmt.Errorf("decoding the response to a write: %w", err)
	}
	m := written.Metadata
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion}, nil
}

// scanWrittenMeta reads the metadata of a written object with jsonscan,
// skipping the rest; ok is false for anything it declines.
func scanWrittenMeta(body []byte) (metav1.ObjectMeta, bool) {
	var out metav1.ObjectMeta
	c := jsonscan.New(body)
	ok := c.Object(func(key []byte) bool {
		if string(key) != "metadata" {
			return c.Skip()
		}
		return c.Object(func(key []byte) (ok bool) {
			var uid string
			switch string(key) {
			case "name":
				out.Name, ok = c.Str()
			case "namespace":
				out.Namespace, ok = c.Str()
			case "uid":
				uid, ok = c.Str()
				out.UID = types.UID(uid)
			case "resourceVersion":
				out.ResourceVersion, ok = c.Str()
			default:
				ok = c.Skip()
			}
			return ok
		})
	})
	return out, ok && c.End()
}

// CustomResourceClients returns the two clients of a custom resource: the
// REST client of its reads, in JSON (the only encoding custom resources
// are served in) decoded by ns, through httpClient; and the Writer of its
// writes, through writeHTTP.
func CustomResourceClients(cfg *rest.Config, httpClient, writeHTTP *http.Client, gv schema.GroupVersion, resource string, namespaced bool,
	ns runtime.NegotiatedSerializer) (rest.Interface, *Writer, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion, c.APIPath = &gv, "/apis"
	c.ContentType, c.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
	c.NegotiatedSerializer = ns
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientForConfigAndClient(c, httpClient)
	if err != nil {
		return nil, nil, fmt.Errorf("building REST client for %s: %w", gv.WithResource(resource), err)
	}
	w, err := NewWriter(c, writeHTTP, gv, resource, namespaced)
	if err != nil {
		return nil, nil, err
	}
	return rc, w, nil
}
