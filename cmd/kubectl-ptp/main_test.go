package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// TestMain fails the package if any test leaves a goroutine behind, as
// the other packages' do.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeAPI serves canned answers of the API server: PodToIp lists by field
// selector, IPHistory and IPHistoryCoverage objects by name, and chosen
// failures. It checks the
// label selector every list must carry, and pages lists of more than
// pageSize items as the API server does, with continue tokens.
type fakeAPI struct {
	t   *testing.T
	url string
	// lists maps a field selector to the PodToIps it selects (JSON).
	lists map[string][]string
	// histories maps a name to its IPHistory (JSON).
	histories map[string]string
	// coverages maps a name to its IPHistoryCoverage (JSON).
	coverages map[string]string
	// fail maps a resource ("podtoips", "iphistories",
	// "iphistorycoverages") to the status code and body every request for
	// it gets.
	fail     map[string]failure
	pageSize int

	mu       sync.Mutex
	requests []string
}

type failure struct {
	code int
	body string // a Status object; plain text when it does not start with '{'
}

func newFakeAPI(t *testing.T) *fakeAPI {
	api := &fakeAPI{t: t, lists: map[string][]string{}, histories: map[string]string{}, coverages: map[string]string{}, fail: map[string]failure{}, pageSize: 500}
	srv := httptest.NewServer(http.HandlerFunc(api.serve))
	t.Cleanup(srv.Close)
	api.url = srv.URL
	return api
}

func (api *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	api.mu.Lock()
	api.requests = append(api.requests, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
	api.mu.Unlock()
	path := strings.TrimPrefix(r.URL.Path, "/apis/example.com/v1/")
	namespace := ""
	if rest, ok := strings.CutPrefix(path, "namespaces/"); ok {
		namespace, path, _ = strings.Cut(rest, "/")
	}
	resource, name, _ := strings.Cut(path, "/")
	if f, ok := api.fail[resource]; ok {
		if strings.HasPrefix(f.body, "{") {
			w.Header().Set("Content-Type", "application/json")
		} else {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		}
		w.WriteHeader(f.code)
		fmt.Fprint(w, f.body)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && resource == "podtoips" && name == "":
		api.list(w, r, namespace)
	case r.Method == http.MethodGet && resource == "iphistories" && name != "" && namespace == "":
		api.get(w, resource, name, api.histories)
	case r.Method == http.MethodGet && resource == "iphistorycoverages" && name != "" && namespace == "":
		api.get(w, resource, name, api.coverages)
	default:
		api.t.Errorf("unexpected request %s %s", r.Method, r.URL)
		w.WriteHeader(http.StatusNotFound)
	}
}

// get serves the object name of resource from objects, or NotFound.
func (api *fakeAPI) get(w http.ResponseWriter, resource, name string, objects map[string]string) {
	if obj, ok := objects[name]; ok {
		fmt.Fprint(w, obj)
		return
	}
	w.WriteHeader(http.StatusNotFound)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"%s.example.com \"%s\" not found","reason":"NotFound","details":{"name":%q,"group":"example.com","kind":%q},"code":404}`,
		resource, name, name, resource)
}

func (api *fakeAPI) list(w http.ResponseWriter, r *http.Request, namespace string) {
	q := r.URL.Query()
	if got := q.Get("labelSelector"); got != managedBy {
		api.t.Errorf("LIST with labelSelector %q, want %q", got, managedBy)
	}
	var items []string
	for _, item := range api.lists[q.Get("fieldSelector")] {
		if namespace == "" || strings.Contains(item, `"namespace":"`+namespace+`"`) {
			items = append(items, item)
		}
	}
	start, _ := strconv.Atoi(q.Get("continue"))
	end, next := len(items), ""
	if start+api.pageSize < end {
		end, next = start+api.pageSize, strconv.Itoa(start+api.pageSize)
	}
	fmt.Fprintf(w, `{"apiVersion":"example.com/v1","kind":"PodToIpList","metadata":{"resourceVersion":"7","continue":%q},"items":[%s]}`,
		next, strings.Join(items[start:end], ","))
}

// requestLog returns the requests served so far.
func (api *fakeAPI) requestLog() []string {
	api.mu.Lock()
	defer api.mu.Unlock()
	return append([]string(nil), api.requests...)
}

// mirrorJSON is a PodToIp as the API server returns it.
type mirrorJSON struct {
	namespace, pod, uid, node string
	ips                       []string
	hostNetwork, conflict     bool
	conflictsWith             []string
	// terminating is the pod's being deleted; deleting the PodToIp's.
	terminating, deleting bool
}

func (m mirrorJSON) String() string {
	obj := map[string]any{
		"apiVersion": "example.com/v1", "kind": "PodToIp",
		"metadata": map[string]any{
			"name": m.pod, "namespace": m.namespace, "uid": "mirror-" + m.uid, "resourceVersion": "5",
			"labels": map[string]string{"app.kubernetes.io/managed-by": "podtoip-controller"},
		},
		"podName": m.pod, "podUID": m.uid, "podAddress": m.ips[0], "podIPs": m.ips,
		"nodeName": m.node, "hostNetwork": m.hostNetwork, "conflict": m.conflict,
	}
	if len(m.conflictsWith) > 0 {
		obj["conflictsWith"] = m.conflictsWith
	}
	if m.terminating {
		obj["terminating"] = true
	}
	if m.deleting {
		meta := obj["metadata"].(map[string]any)
		meta["deletionTimestamp"], meta["finalizers"] = "2026-05-01T15:00:00Z", []string{"example.com/keep"}
	}
	data, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	return string(data)
}

// runPtp runs kubectl ptp args against api at now, and returns what it
// printed and its exit code.
func runPtp(t *testing.T, api *fakeAPI, now time.Time, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(kubeconfig, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	server := "http://127.0.0.1:1" // nothing listens: a test without api makes no request
	if api != nil {
		server = api.url
	}
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	code = run(t.Context(), append(args, "--kubeconfig", kubeconfig, "--server", server), streams, func() time.Time { return now })
	return out.String(), errOut.String(), code
}

// testNow is the time the tests run at.
var testNow = time.Date(2026, 5, 1, 16, 0, 0, 0, time.UTC)
