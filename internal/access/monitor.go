package access

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
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
)

// Monitor follows what the API server says to the controller's calls,
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
//   - The custom resource's API gone (a 404 listing or watching it: the CRD was
//     deleted). Cleared at the next success on podtoips.
//
// Other 403s are not about permissions: creates in a namespace being
// deleted, ResourceQuota and admission webhooks refuse single writes for
// reasons of their own. They are counted by reason and logged once per
// kind and call, and leave readiness alone.
type Monitor struct {
	logger klog.Logger
	crd    CRD
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

	// apiMissing: listing or watching the custom resource answered 404.
	apiMissing bool
}

// apiRejectionsTotal counts the 403s that are not about permissions.
var apiRejectionsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
	Namespace: "podtoip", Subsystem: "controller", Name: "api_rejections_total",
	Help: "Calls the API server refused with 403 for a reason other than permissions, by reason " +
		"(namespace_terminating, quota, admission_webhook, admission_policy, other), verb and resource. They do not make the controller unready.",
	StabilityLevel: metrics.ALPHA,
}, []string{"reason", "verb", "resource"})

var registerOnce sync.Once

// registerMetrics registers the monitor's metrics, once per process.
func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(apiRejectionsTotal) })
}

type denial struct {
	status string
	at     time.Time
}

// NewMonitor returns a monitor of the calls on resources (plural names, as
// in URLs: the ones whose refusal makes the controller unready, crd's
// among them), logging to ctx's logger. It registers its metric: the
// monitor counts from the first request, before the controller exists.
func NewMonitor(ctx context.Context, crd CRD, resources ...string) *Monitor {
	registerMetrics()
	return &Monitor{
		logger:   klog.FromContext(ctx),
		crd:      crd,
		watched:  resources,
		now:      time.Now,
		denied:   map[string]denial{},
		rejected: map[[2]string]time.Time{},
	}
}

// Wrap returns a RoundTripper that records the outcome of each request,
// for rest.Config.Wrap.
func (a *Monitor) Wrap(rt http.RoundTripper) http.RoundTripper {
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
func (a *Monitor) unreachable(start time.Time, err error) {
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
func (a *Monitor) reportUnreachableLocked() {
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
func (a *Monitor) reached() {
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
func (a *Monitor) record(req *http.Request, resp *http.Response) {
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
	case code == http.StatusNotFound && resource == a.crd.Resource && name == "" && (verb == "get/list" || verb == "watch"):
		a.missingAPI(op)
	}
}

func (a *Monitor) allowed(op, resource string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, was := a.denied[op]; was {
		delete(a.denied, op)
		a.logger.Info("The API server allows the call again", "call", op)
	}
	if resource == a.crd.Resource && a.apiMissing {
		a.apiMissing = false
		a.logger.Info("The "+a.crd.Kind+" API is served again", "crd", a.crd.Name, "call", op)
	}
}

func (a *Monitor) refused(op string, code int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, was := a.denied[op]
	a.denied[op] = denial{status: fmt.Sprintf("%d %s", code, http.StatusText(code)), at: a.now()}
	if !was {
		a.logger.Error(nil, "The API server refuses a call the controller needs; not ready until access is restored (see "+a.crd.RBAC+" for the permissions)",
			"call", op, "status", code)
	}
}

// rejection counts a 403 that is not about permissions and logs the first
// of each episode.
func (a *Monitor) rejection(reason, verb, resource, msg string) {
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
		a.logger.Error(nil, "A ResourceQuota refuses "+a.crd.Kind+" writes; pods in its namespace are not mirrored until it allows them (this is not a permissions problem; further ones are counted in podtoip_controller_api_rejections_total)", kv...)
	case rejectAdmissionWebhook:
		a.logger.Error(nil, "An admission webhook refuses the controller's writes; pods it covers are not mirrored until its policy allows them (this is not a permissions problem; further ones are counted in podtoip_controller_api_rejections_total)", kv...)
	case rejectAdmissionPolicy:
		policy := admissionPolicy.FindStringSubmatch(msg)[1]
		a.logger.Error(nil, "The ValidatingAdmissionPolicy "+policy+" refuses the controller's writes: if it is the controller's own (artifacts/policy.yaml), it admits only the ServiceAccount it names, and this process runs as another identity; run it as that ServiceAccount (README, \"Running it outside the cluster\"), or, deployed in another namespace or under another name, build the manifests with artifacts/controller-identity among the overlay's transformers (docs/operations.md, \"In another namespace\"). Pods it covers are not mirrored meanwhile (further refusals are counted in podtoip_controller_api_rejections_total)", append(kv, "policy", policy)...)
	default:
		a.logger.Error(nil, "The API server refuses a call for a reason other than permissions; the affected pods are not mirrored (further ones are counted in podtoip_controller_api_rejections_total)", kv...)
	}
}

func (a *Monitor) missingAPI(op string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.apiMissing {
		return
	}
	a.apiMissing = true
	a.logger.Error(nil, "The "+a.crd.Kind+" API is no longer served; not ready until the CRD is installed again with '"+a.crd.InstallHint+"'",
		"crd", a.crd.Name, "call", op)
}

// Check returns an error naming what keeps the controller from working, or
// nil: for readiness.
func (a *Monitor) Check() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var problems []string
	a.reportUnreachableLocked()
	if a.unreachableReported {
		problems = append(problems, fmt.Sprintf("the API server has been unreachable for %v (last error: %s)",
			a.now().Sub(a.failingSince).Round(time.Second), a.lastFailure))
	}
	if a.apiMissing {
		problems = append(problems, a.crd.missing().Error())
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
		problems = append(problems, fmt.Sprintf("the API server refuses: %s; grant the permissions in %s", strings.Join(ops, ", "), a.crd.RBAC))
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(problems, "; "))
}
