package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// denialTTL is how long a refusal counts without being seen again. Workers
// retry refused writes and informers refused lists at most every 30 s, so a
// refusal that still holds is seen again well within it; one that is not
// (the pod that needed the write is gone) stops counting.
const denialTTL = 75 * time.Second

// accessTracker remembers which of the controller's API calls the server
// currently refuses (401 or 403). Permissions can be taken away while the
// controller runs: the informers then keep retrying their lists and the
// workers their writes, which is right, but nothing would tell an operator
// beyond repeated log lines. The tracker makes /readyz fail with the refused
// calls, and clears an entry at the next success of the same call, so
// readiness comes back on its own once RBAC is restored.
//
// It sits in the HTTP transport, so it sees every request of every client in
// the process without each call site having to report.
type accessTracker struct {
	logger klog.Logger
	// watched lists the resources whose refusal makes the controller unready.
	watched []string

	now    func() time.Time
	mu     sync.Mutex
	denied map[string]denial // by "verb resource"
}

type denial struct {
	status string
	at     time.Time
}

func newAccessTracker(ctx context.Context, resources ...string) *accessTracker {
	return &accessTracker{logger: klog.FromContext(ctx), watched: resources, now: time.Now, denied: map[string]denial{}}
}

// wrap returns a RoundTripper that records the outcome of each request.
func (a *accessTracker) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil {
			a.record(req, resp.StatusCode)
		}
		return resp, err
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// record notes a refusal, or clears one when the same call succeeds.
func (a *accessTracker) record(req *http.Request, code int) {
	resource := resourceOf(req.URL.Path)
	if !slices.Contains(a.watched, resource) {
		return
	}
	op := verbOf(req) + " " + resource
	refused := code == http.StatusForbidden || code == http.StatusUnauthorized
	if !refused && (code < 200 || code > 299) {
		return // other errors say nothing about permissions
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_, was := a.denied[op]
	switch {
	case refused:
		a.denied[op] = denial{status: fmt.Sprintf("%d %s", code, http.StatusText(code)), at: a.now()}
		if was {
			return
		}
		a.logger.Error(nil, "The API server refuses a call the controller needs; not ready until access is restored (see artifacts/rbac.yaml for the permissions)",
			"call", op, "status", code)
	case !refused && was:
		delete(a.denied, op)
		a.logger.Info("The API server allows the call again", "call", op)
	}
}

// check returns an error naming the refused calls, or nil.
func (a *accessTracker) check() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ops []string
	for op, d := range a.denied {
		if a.now().Sub(d.at) > denialTTL {
			delete(a.denied, op)
			continue
		}
		ops = append(ops, op+" ("+d.status+")")
	}
	if len(ops) == 0 {
		return nil
	}
	slices.Sort(ops)
	return fmt.Errorf("the API server refuses: %s; grant the permissions in artifacts/rbac.yaml", strings.Join(ops, ", "))
}

// resourceOf extracts the resource from an API path such as
// /api/v1/namespaces/ns/pods/name or /apis/example.com/v1/podtoips.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return ""
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	if len(parts) == 0 {
		return ""
	}
	return parts[0]
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
