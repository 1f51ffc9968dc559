package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

const (
	// denialTTL is how long a refusal counts without being seen again.
	// Workers retry refused writes and informers refused lists at most every
	// 30 s, so a refusal that still holds is seen again well within it; one
	// that is not (the pod that needed the write is gone) stops counting.
	denialTTL = 75 * time.Second

	// unreachableGrace is how long the API server may be unreachable before
	// the controller reports itself unready. A connection reset or an API
	// server restart behind a load balancer is over in a few seconds, and
	// the informers and workers ride it out on their own; readiness should
	// not flap for it. Past this, the controller is blind and writes
	// nothing, which is what readiness is for.
	unreachableGrace = 15 * time.Second

	// rejectionLogQuiet is how long a kind of rejection must go unseen for
	// its next occurrence to be logged again: each episode (a namespace
	// being deleted, a quota filling up) gets one line, not one per object.
	rejectionLogQuiet = 5 * time.Minute

	// statusPeekLimit bounds how much of a 403 body is read to classify it.
	// API server Status bodies are a few hundred bytes; the authorizer's
	// message comes first in them.
	statusPeekLimit = 16 << 10
)

// Why the API server refused a call with 403 other than for lack of
// permissions; the values are the reason label of
// podtoip_controller_api_rejections_total.
const (
	rejectNamespaceTerminating = "namespace_terminating"
	rejectQuota                = "quota"
	rejectAdmissionWebhook     = "admission_webhook"
	rejectOther                = "other"
)

// accessTracker follows what the API server says to the controller's calls,
// for readiness and for the operator. It sits in the HTTP transport, so it
// sees every request of every client in the process without each call site
// having to report. It learns three things that make the controller
// unready, because it cannot do its job until someone acts, and it clears
// each on its own once the server shows the problem is gone:
//
//   - Refused permissions (401, or a 403 from the authorizer) on pods or
//     podtoips. Permissions can be taken away while the controller runs:
//     the informers keep retrying their lists and the workers their
//     writes, which is right, but nothing would tell an operator beyond
//     repeated log lines. Cleared at the next success of the same call.
//   - The API server unreachable (requests fail before any answer) for
//     longer than unreachableGrace. Cleared at the first answer.
//   - The PodToIp API gone (a 404 listing or watching podtoips: the CRD was
//     deleted). Cleared at the next success on podtoips.
//
// Other 403s are not about permissions: creates in a namespace being
// deleted, ResourceQuota and admission webhooks refuse single writes for
// reasons of their own. They are counted by reason and logged once per
// kind and call, and leave readiness alone.
type accessTracker struct {
	logger klog.Logger
	// watched lists the resources whose refusal makes the controller unready.
	watched []string

	now func() time.Time
	mu  sync.Mutex
	// denied holds the refused calls, by "verb resource".
	denied map[string]denial
	// rejected holds when each kind of other refusal was last seen, by
	// reason and call, to log each episode once.
	rejected map[[2]string]time.Time

	// lastContact is when the server last answered any request.
	lastContact time.Time
	// failingSince is when requests started failing to reach the server;
	// zero while they reach it.
	failingSince time.Time
	lastFailure  string
	// unreachableReported: the outage has lasted past the grace and was
	// logged.
	unreachableReported bool

	// apiMissing: listing or watching podtoips answered 404.
	apiMissing bool
}

type denial struct {
	status string
	at     time.Time
}

func newAccessTracker(ctx context.Context, resources ...string) *accessTracker {
	registerAccessMetrics()
	return &accessTracker{
		logger:   klog.FromContext(ctx),
		watched:  resources,
		now:      time.Now,
		denied:   map[string]denial{},
		rejected: map[[2]string]time.Time{},
	}
}

// wrap returns a RoundTripper that records the outcome of each request.
func (a *accessTracker) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		start := a.now()
		resp, err := rt.RoundTrip(req)
		if err != nil {
			// A request its caller gave up on says nothing about the server.
			if req.Context().Err() == nil && !errors.Is(err, context.Canceled) {
				a.unreachable(start, err)
			}
			return resp, err
		}
		a.reached()
		a.record(req, resp)
		return resp, nil
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// unreachable notes a request, started at start, that got no answer.
func (a *accessTracker) unreachable(start time.Time, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failingSince.IsZero() {
		// Unreachable since this request was sent, or since the last
		// answer if that came later: an old request failing now does not
		// make the outage older than the last sign of life.
		a.failingSince = start
		if a.lastContact.After(start) {
			a.failingSince = a.lastContact
		}
	}
	a.lastFailure = err.Error()
	a.reportUnreachableLocked()
}

// reportUnreachableLocked logs the outage once it has lasted past the grace.
func (a *accessTracker) reportUnreachableLocked() {
	if a.failingSince.IsZero() || a.unreachableReported {
		return
	}
	if d := a.now().Sub(a.failingSince); d > unreachableGrace {
		a.unreachableReported = true
		a.logger.Error(nil, "Cannot reach the API server; not ready until it answers again (the controller keeps retrying)",
			"for", d.Round(time.Second), "lastError", a.lastFailure)
	}
}

// reached notes that the server answered a request.
func (a *accessTracker) reached() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lastContact = a.now()
	if a.failingSince.IsZero() {
		return
	}
	if a.unreachableReported {
		a.logger.Info("The API server answers again", "unreachableFor", a.lastContact.Sub(a.failingSince).Round(time.Second))
	}
	a.failingSince, a.lastFailure, a.unreachableReported = time.Time{}, "", false
}

// record notes a refusal, a rejection or a missing API, or clears them when
// the same call succeeds.
func (a *accessTracker) record(req *http.Request, resp *http.Response) {
	resource, name := parsePath(req.URL.Path)
	if !slices.Contains(a.watched, resource) {
		return
	}
	verb := verbOf(req)
	op := verb + " " + resource
	code := resp.StatusCode
	switch {
	case code >= 200 && code <= 299:
		a.allowed(op, resource)
	case code == http.StatusUnauthorized:
		a.refused(op, code)
	case code == http.StatusForbidden:
		reason, msg := classifyForbidden(peekBody(resp))
		if reason == "" {
			a.refused(op, code)
			return
		}
		a.rejection(reason, verb, resource, msg)
	case code == http.StatusNotFound && resource == Resource && name == "" && (verb == "get/list" || verb == "watch"):
		a.missingAPI(op)
	}
}

func (a *accessTracker) allowed(op, resource string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, was := a.denied[op]; was {
		delete(a.denied, op)
		a.logger.Info("The API server allows the call again", "call", op)
	}
	if resource == Resource && a.apiMissing {
		a.apiMissing = false
		a.logger.Info("The PodToIp API is served again", "crd", CRDName, "call", op)
	}
}

func (a *accessTracker) refused(op string, code int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, was := a.denied[op]
	a.denied[op] = denial{status: fmt.Sprintf("%d %s", code, http.StatusText(code)), at: a.now()}
	if !was {
		a.logger.Error(nil, "The API server refuses a call the controller needs; not ready until access is restored (see artifacts/rbac.yaml for the permissions)",
			"call", op, "status", code)
	}
}

// rejection counts a 403 that is not about permissions and logs the first
// of each episode.
func (a *accessTracker) rejection(reason, verb, resource, msg string) {
	apiRejectionsTotal.WithLabelValues(reason, verb, resource).Inc()
	a.mu.Lock()
	defer a.mu.Unlock()
	key := [2]string{reason, verb + " " + resource}
	now := a.now()
	last, seen := a.rejected[key]
	a.rejected[key] = now
	if seen && now.Sub(last) < rejectionLogQuiet {
		return
	}
	kv := []any{"reason", strings.ReplaceAll(reason, "_", " "), "call", key[1], "message", msg}
	switch reason {
	case rejectNamespaceTerminating:
		// Expected whenever a namespace with running pods is deleted.
		a.logger.Info("The API server refuses writes in a namespace being deleted; those pods are not mirrored (further ones are counted in podtoip_controller_api_rejections_total, not logged)", kv...)
	case rejectQuota:
		a.logger.Error(nil, "A ResourceQuota refuses PodToIp writes; pods in its namespace are not mirrored until it allows them (this is not a permissions problem; further ones are counted in podtoip_controller_api_rejections_total)", kv...)
	case rejectAdmissionWebhook:
		a.logger.Error(nil, "An admission webhook refuses the controller's writes; pods it covers are not mirrored until its policy allows them (this is not a permissions problem; further ones are counted in podtoip_controller_api_rejections_total)", kv...)
	default:
		a.logger.Error(nil, "The API server refuses a call for a reason other than permissions; the affected pods are not mirrored (further ones are counted in podtoip_controller_api_rejections_total)", kv...)
	}
}

func (a *accessTracker) missingAPI(op string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.apiMissing {
		return
	}
	a.apiMissing = true
	a.logger.Error(nil, "The PodToIp API is no longer served; not ready until the CRD is installed again with 'kubectl apply -f artifacts/crd.yaml'",
		"crd", CRDName, "call", op)
}

// check returns an error naming what keeps the controller from working, or
// nil.
func (a *accessTracker) check() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var problems []string
	a.reportUnreachableLocked()
	if a.unreachableReported {
		problems = append(problems, fmt.Sprintf("the API server has been unreachable for %v (last error: %s)",
			a.now().Sub(a.failingSince).Round(time.Second), a.lastFailure))
	}
	if a.apiMissing {
		problems = append(problems, errCRDMissing.Error())
	}
	var ops []string
	for op, d := range a.denied {
		if a.now().Sub(d.at) > denialTTL {
			delete(a.denied, op)
			continue
		}
		ops = append(ops, op+" ("+d.status+")")
	}
	if len(ops) > 0 {
		slices.Sort(ops)
		problems = append(problems, fmt.Sprintf("the API server refuses: %s; grant the permissions in artifacts/rbac.yaml", strings.Join(ops, ", ")))
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(problems, "; "))
}

// peekBody returns up to statusPeekLimit bytes of resp's body and puts them
// back, so the caller reads the whole body as if untouched.
func peekBody(resp *http.Response) []byte {
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	head, err := io.ReadAll(io.LimitReader(resp.Body, statusPeekLimit))
	resp.Body = &peekedBody{Reader: io.MultiReader(bytes.NewReader(head), resp.Body), Closer: resp.Body}
	if err != nil {
		return nil // the caller will see the error when it reads on
	}
	return head
}

type peekedBody struct {
	io.Reader
	io.Closer
}

// authorizerDenial matches the message of a 403 from the API server's
// authorizer (k8s.io/apiserver's responsewriters.Forbidden):
// `<resource> ["<name>"] is forbidden: User "<user>" cannot <verb> resource
// "<resource>" in API group "<group>" (in the namespace "<ns>"|at the
// cluster scope)`, or `... cannot <verb> path "<path>"`, optionally followed
// by the authorizer's reason.
var authorizerDenial = regexp.MustCompile(`^(?:\S+(?: "(?:[^"\\]|\\.)*")? is )?forbidden: User "(?:[^"\\]|\\.)*" cannot \S+ (?:resource "[^"]*" in API group "[^"]*" (?:in the namespace "[^"]*"|at the cluster scope)|path "[^"]*")`)

// authorizerDenialRaw is the same pattern, looser, on an undecodable body:
// in JSON the quotes are escaped, in protobuf they are not.
var authorizerDenialRaw = regexp.MustCompile(`forbidden: User \\?".*?\\?" cannot \S+ (?:resource|path) \\?"`)

// classifyForbidden tells a 403 body apart: reason "" for an authorization
// refusal (missing permissions), else the kind of rejection; and the
// server's message. The body is a metav1.Status in JSON or protobuf,
// whichever the request accepted (pods are read as protobuf, podtoips as
// JSON).
func classifyForbidden(body []byte) (reason, message string) {
	var status metav1.Status
	_, _, err := codecs.UniversalDeserializer().Decode(body, nil, &status)
	if err != nil || status.Kind != "Status" {
		// Not a Status we can read (truncated, or not from an API server):
		// fall back to the raw text.
		message = strings.ToValidUTF8(string(body), "")
		switch {
		case authorizerDenialRaw.Match(body):
			return "", message
		case bytes.Contains(body, []byte(corev1.NamespaceTerminatingCause)):
			return rejectNamespaceTerminating, message
		}
		return rejectionOf(message), message
	}
	message = status.Message
	if authorizerDenial.MatchString(message) {
		return "", message
	}
	if status.Details != nil {
		for _, c := range status.Details.Causes {
			if c.Type == corev1.NamespaceTerminatingCause {
				return rejectNamespaceTerminating, message
			}
		}
	}
	return rejectionOf(message), message
}

// rejectionOf classifies a non-authorization 403 by its message, as
// written by the admission plugins: NamespaceLifecycle, ResourceQuota
// ("exceeded quota: …", or "status unknown for quota: …" before the quota
// controller has computed its usage) and the webhook dispatchers
// ("admission webhook "<name>" denied the request…").
func rejectionOf(msg string) string {
	switch {
	case strings.Contains(msg, "because it is being terminated"):
		return rejectNamespaceTerminating
	case strings.Contains(msg, "exceeded quota:"), strings.Contains(msg, "status unknown for quota:"):
		return rejectQuota
	case strings.Contains(msg, "admission webhook ") && strings.Contains(msg, "denied the request"):
		return rejectAdmissionWebhook
	}
	return rejectOther
}

// parsePath extracts the resource and the object's name (empty for the
// collection) from an API path such as /api/v1/namespaces/ns/pods/name or
// /apis/example.com/v1/podtoips.
func parsePath(path string) (resource, name string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "", ""
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return "", ""
	case 1:
		return parts[0], ""
	}
	return parts[0], parts[1]
}

// verbOf names the API verb of a request the way RBAC does.
func verbOf(req *http.Request) string {
	switch req.Method {
	case http.MethodGet:
		if w := req.URL.Query().Get("watch"); w == "true" || w == "1" {
			return "watch"
		}
		return "get/list"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return strings.ToLower(req.Method)
}
