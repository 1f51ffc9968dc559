package framework

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"example.com/podtoip-controller/e2e/controlplane"
)

// PodToIpGVR is the PodToIp resource; the tests read it through the dynamic
// client, independently of the controller's hand-written client.
var PodToIpGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "podtoips"}

// ManagedBy is the label the controller puts on its mirrors, with the
// value podtoip-controller.
const ManagedBy = "app.kubernetes.io/managed-by"

// Mirror is what the tests read back from a PodToIp, by a definition of its
// own (the controller's type is in package main, and a test of the wire
// format must not share the code it checks).
type Mirror struct {
	metav1.ObjectMeta `json:"metadata"`
	PodName           string    `json:"podName"`
	PodUID            types.UID `json:"podUID"`
	PodAddress        string    `json:"podAddress"`
	PodIPs            []string  `json:"podIPs"`
	PodIPv4           string    `json:"podIPv4"`
	PodIPv6           string    `json:"podIPv6"`
	NodeName          string    `json:"nodeName"`
	HostNetwork       bool      `json:"hostNetwork"`
	Terminating       bool      `json:"terminating"`
	Conflict          bool      `json:"conflict"`
	ConflictsWith     []string  `json:"conflictsWith"`
}

// Describe shows a mirror (or its absence) in a failure message.
func Describe(m *Mirror) string {
	if m == nil {
		return "<none>"
	}
	return fmt.Sprintf("{uid=%s rv=%s labels=%v podUID=%s address=%s ips=%v v4=%s v6=%s node=%s hostNetwork=%v terminating=%v conflict=%v conflictsWith=%q owners=%d}",
		m.UID, m.ResourceVersion, m.Labels, m.PodUID, m.PodAddress, m.PodIPs, m.PodIPv4, m.PodIPv6, m.NodeName, m.HostNetwork,
		m.Terminating, m.Conflict, m.ConflictsWith, len(m.OwnerReferences))
}

// ToMirror reads a PodToIp the dynamic client returned.
func ToMirror(u *unstructured.Unstructured) (*Mirror, error) {
	var m Mirror
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// Mirrors is the PodToIps of namespace ns, through the dynamic client.
func (e *Env) Mirrors(ns string) dynamic.ResourceInterface {
	return e.CP.Dynamic.Resource(PodToIpGVR).Namespace(ns)
}

// GetMirror returns the PodToIp ns/name, or nil if there is none. It lists
// by name instead of GETting, so the API server's GET counter shows only the
// controller's reads (which must be zero).
func (e *Env) GetMirror(ctx context.Context, ns, name string) (*Mirror, error) {
	// (A list selecting metadata.name is counted as a GET, so list the namespace.)
	list, err := e.Mirrors(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		if list.Items[i].GetName() == name {
			return ToMirror(&list.Items[i])
		}
	}
	return nil, nil
}

// WaitMirror polls, up to 30 s, until the mirror of ns/name satisfies ok
// (which is given nil while there is none), and returns it.
func (e *Env) WaitMirror(t testing.TB, ns, name string, what string, ok func(*Mirror) bool) *Mirror {
	t.Helper()
	var last *Mirror
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		m, err := e.GetMirror(ctx, ns, name)
		if err != nil {
			return false, err
		}
		last = m
		return ok(m), nil
	})
	if err != nil {
		t.Fatalf("PodToIp %s/%s: waiting for %s: %v; last seen: %+v", ns, name, what, err, Describe(last))
	}
	return last
}

// WaitMirrorIPs waits until the mirror exists with exactly these IPs
// (canonical, primary first), and each in the field of its family.
func (e *Env) WaitMirrorIPs(t testing.TB, ns, name string, ips ...string) *Mirror {
	t.Helper()
	var v4, v6 string
	for _, ip := range ips {
		if strings.Contains(ip, ":") {
			v6 = ip
		} else {
			v4 = ip
		}
	}
	return e.WaitMirror(t, ns, name, fmt.Sprintf("IPs %v", ips), func(m *Mirror) bool {
		return m != nil && m.PodAddress == ips[0] && fmt.Sprint(m.PodIPs) == fmt.Sprint(ips) && m.PodIPv4 == v4 && m.PodIPv6 == v6
	})
}

// WaitNoMirror waits until there is no PodToIp ns/name.
func (e *Env) WaitNoMirror(t testing.TB, ns, name string) {
	t.Helper()
	e.WaitMirror(t, ns, name, "deletion", func(m *Mirror) bool { return m == nil })
}

// AddForeign creates an unmanaged PodToIp (no managed-by label) named name
// and registers it, so the checker proves the controller never touched it.
func (e *Env) AddForeign(t testing.TB, foreign ForeignObjects, ns, name string) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "PodToIp",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"team": "net"}},
		"podName":  name, "podUID": "0badc0de-0000-4000-8000-000000000002", "podAddress": "10.255.0.1",
	}}
	created, err := e.Mirrors(ns).Create(t.Context(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating foreign PodToIp %s/%s: %v", ns, name, err)
	}
	foreign[ns+"/"+name] = created.GetResourceVersion()
}

// PodToIpRequests reads the API server's own request counters for podtoips.
func (e *Env) PodToIpRequests(t testing.TB) controlplane.Requests {
	t.Helper()
	r, err := e.CP.ResourceRequests(t.Context(), "podtoips")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// ExpectWrites fails unless the podtoips writes the API server counted
// since before are exactly want ("PUT" -> n; writes not named must be 0).
func (e *Env) ExpectWrites(t testing.TB, before controlplane.Requests, want map[string]float64, why string) {
	t.Helper()
	d := e.PodToIpRequests(t).Sub(before)
	for _, verb := range []string{"POST", "PUT", "DELETE"} {
		if got := d.Verb(verb); got != want[verb] {
			t.Errorf("%s: %v PodToIp %s requests, want %v (all requests: %v)", why, got, verb, want[verb], d)
		}
	}
}

// WatchConflicts watches every PodToIp of namespace ns (all if "") from now
// until the returned stop is called, which returns the versions that said
// conflict=true and how many versions it saw in all.
func (e *Env) WatchConflicts(t testing.TB, ns string) (stop func() (flagged []string, versions int)) {
	t.Helper()
	ptps := e.CP.Dynamic.Resource(PodToIpGVR).Namespace(ns)
	list, err := ptps.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		found []string
		seen  int
	)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		rv := list.GetResourceVersion()
		for {
			w, err := ptps.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				done <- err
				return
			}
			for ev := range w.ResultChan() {
				u, ok := ev.Object.(*unstructured.Unstructured)
				if ev.Type == watch.Error || !ok {
					w.Stop()
					if ctx.Err() != nil {
						done <- nil // stopped by the test
					} else {
						done <- fmt.Errorf("watch error: %v", ev.Object)
					}
					return
				}
				rv = u.GetResourceVersion()
				if ev.Type == watch.Bookmark {
					continue
				}
				conflict, _, _ := unstructured.NestedBool(u.Object, "conflict")
				mu.Lock()
				seen++
				if conflict {
					with, _, _ := unstructured.NestedStringSlice(u.Object, "conflictsWith")
					found = append(found, fmt.Sprintf("%s %s/%s with %q", ev.Type, u.GetNamespace(), u.GetName(), with))
				}
				mu.Unlock()
			}
			if ctx.Err() != nil {
				done <- nil
				return
			}
		}
	}()
	return func() ([]string, int) {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("watching PodToIps: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		return found, seen
	}
}
