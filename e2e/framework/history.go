package framework

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"example.com/podtoip-controller/e2e/controlplane"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// IPHistoryGVR is the IPHistory resource (cluster-scoped, one object per
// address, named by it).
var IPHistoryGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "iphistories"}

// History is what the tests read back from an IPHistory: the JSON a user's
// client gets, read by a definition of its own rather than the controller's
// type, so that a field the type and the CRD spell differently fails a test
// instead of reading the same way on both sides.
type History struct {
	metav1.ObjectMeta `json:"metadata"`
	Address           string        `json:"address"`
	Holders           []HistoryHold `json:"holders"`
	Holder            string        `json:"holder"`
	Holds             int           `json:"holds"`
	Overflow          *struct {
		From metav1.Time  `json:"from"`
		To   *metav1.Time `json:"to"`
	} `json:"overflow"`
}

// HistoryHold is one pod's hold of an address.
type HistoryHold struct {
	Namespace     string       `json:"namespace"`
	Pod           string       `json:"pod"`
	PodUID        types.UID    `json:"podUID"`
	Node          string       `json:"node"`
	From          metav1.Time  `json:"from"`
	To            *metav1.Time `json:"to"`
	EndedAfter    *metav1.Time `json:"endedAfter"`
	StartedBefore *metav1.Time `json:"startedBefore"`
}

// GetHistory reads the IPHistory named name, nil if there is none.
func (e *Env) GetHistory(ctx context.Context, name string) (*History, error) {
	u, err := e.CP.Dynamic.Resource(IPHistoryGVR).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	b, err := u.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var h History
	return &h, json.Unmarshal(b, &h)
}

// WaitHistory waits until the IPHistory name satisfies ok (which is given
// nil while there is none) and returns it.
func (e *Env) WaitHistory(t testing.TB, name, what string, ok func(*History) bool) *History {
	t.Helper()
	var h *History
	var last error
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		h, last = e.GetHistory(ctx, name)
		return last == nil && ok(h), nil
	}); err != nil {
		b, _ := json.Marshal(h)
		t.Fatalf("IPHistory %s: waiting for %s: %v (last error %v); last seen: %s", name, what, err, last, b)
	}
	return h
}

// KubectlPTP runs `kubectl ptp args...` as a user does, with the plugin on
// PATH and e.CP's admin kubeconfig in $KUBECONFIG, and returns its standard
// output, standard error and exit code.
func (e *Env) KubectlPTP(t testing.TB, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.CommandContext(CtxFor(t, time.Minute), "kubectl", append([]string{"ptp"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(e.PluginBin)+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+e.CP.Kubeconfig)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("kubectl ptp %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// HistoryRequests returns the requests on iphistories the API server has
// counted, by verb and code.
func (e *Env) HistoryRequests(t testing.TB) controlplane.Requests {
	t.Helper()
	r, err := e.CP.ResourceRequests(t.Context(), "iphistories")
	if err != nil {
		t.Fatal(err)
	}
	return r
}
