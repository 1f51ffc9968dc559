package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestResourceOf(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/pods":                                   "pods",
		"/api/v1/namespaces/ns1/pods/p1":                 "pods",
		"/api/v1/namespaces/ns1/pods/p1/status":          "pods",
		"/apis/example.com/v1/podtoips":                  "podtoips",
		"/apis/example.com/v1/namespaces/ns1/podtoips/x": "podtoips",
		"/api/v1/namespaces/ns1":                         "namespaces",
		"/apis/example.com/v1":                           "",
		"/version":                                       "",
		"/":                                              "",
	} {
		if got := resourceOf(path); got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestAccessTracker(t *testing.T) {
	a := newAccessTracker(context.Background(), "pods", "podtoips")
	now := time.Unix(1000, 0)
	a.now = func() time.Time { return now }
	req := func(method, url string) *http.Request { return httptest.NewRequest(method, url, nil) }

	a.record(req("GET", "/api/v1/pods?watch=true"), http.StatusOK)
	a.record(req("POST", "/api/v1/namespaces/ns/events"), http.StatusForbidden) // not watched
	a.record(req("GET", "/api/v1/pods"), http.StatusInternalServerError)        // not about access
	if err := a.check(); err != nil {
		t.Fatalf("check() = %v, want nil", err)
	}

	a.record(req("GET", "/api/v1/pods?limit=500"), http.StatusForbidden)
	a.record(req("POST", "/apis/example.com/v1/namespaces/ns/podtoips"), http.StatusForbidden)
	err := a.check()
	if err == nil || !strings.Contains(err.Error(), "get/list pods (403 Forbidden)") || !strings.Contains(err.Error(), "create podtoips") {
		t.Fatalf("check() = %v, want both refusals named", err)
	}

	// A success of the same call clears it; the other stays.
	a.record(req("GET", "/api/v1/pods"), http.StatusOK)
	if err := a.check(); err == nil || strings.Contains(err.Error(), "pods (") && strings.Contains(err.Error(), "get/list pods") {
		t.Fatalf("check() = %v, want only the create refusal", err)
	}

	// A refusal not seen again for denialTTL stops counting.
	now = now.Add(denialTTL + time.Second)
	if err := a.check(); err != nil {
		t.Fatalf("check() after the TTL = %v, want nil", err)
	}
}
