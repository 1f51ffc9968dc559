package framework

// Asking the history (kubectl ptp who-had) and waiting until it has
// caught up with the truth, for TestHistoryTruth.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
)

// IPHistoryCoverageGVR is the coverage of the history: per scope, the
// intervals over which the IPHistories hold every pod change.
var IPHistoryCoverageGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "iphistorycoverages"}

// HistoryName is the name of the IPHistory of an address: the canonical
// address, IPv6 with every ':' written '-' and a '0' where the name would
// start or end with '-'.
func HistoryName(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	n := strings.ReplaceAll(a.String(), ":", "-")
	if strings.HasPrefix(n, "-") {
		n = "0" + n
	}
	if strings.HasSuffix(n, "-") {
		n += "0"
	}
	return n
}

// TruthTimeFormat is how a question's time is asked: RFC 3339 to the
// millisecond.
const TruthTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// WhoHad asks `kubectl-ptp who-had ADDR --at AT -o json` with kubeconfig,
// retrying an API error (exit 3) a few times, and fills q's Exit, Answer
// and Stderr. An answer that cannot be read is an error.
func (e *Env) WhoHad(ctx context.Context, kubeconfig string, q *TruthQuery) error {
	var last error
	for attempt := range 4 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt) * 250 * time.Millisecond):
			}
		}
		cmd := exec.CommandContext(ctx, e.PluginBin, "who-had", q.Address, "--at", q.At.UTC().Format(TruthTimeFormat), "-o", "json", "--kubeconfig", kubeconfig)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		q.Exit, q.Stderr, q.Answer = 0, strings.TrimSpace(errOut.String()), nil
		var exit *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &exit):
			q.Exit = exit.ExitCode()
		default:
			q.Exit = whoHadNotStarted
			return fmt.Errorf("running %s: %w", e.PluginBin, err)
		}
		switch q.Exit {
		case WhoHadFound, WhoHadNobody, WhoHadNotCovered:
			var a WhoHad
			if err := json.Unmarshal(out.Bytes(), &a); err != nil {
				q.Exit = whoHadUnparseable
				return fmt.Errorf("who-had %s --at %s: exit %d with output that is not a WhoHad (%v): %q %q", q.Address, q.At.Format(time.RFC3339), q.Exit, err, out.String(), q.Stderr)
			}
			q.Answer = &a
			return nil
		case whoHadAPIError:
			last = fmt.Errorf("who-had %s --at %s: exit 3 (API error): %s", q.Address, q.At.Format(time.RFC3339), q.Stderr)
			continue
		default:
			return fmt.Errorf("who-had %s --at %s: exit %d: %q %q", q.Address, q.At.Format(time.RFC3339), q.Exit, out.String(), q.Stderr)
		}
	}
	return last
}

// AskAll answers every query with workers plugin processes at once, and
// returns the errors (at most the first ten).
func (e *Env) AskAll(ctx context.Context, kubeconfig string, qs []TruthQuery, workers int) []error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := e.WhoHad(ctx, kubeconfig, &qs[i]); err != nil {
					mu.Lock()
					if len(errs) < 10 {
						errs = append(errs, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range qs {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	return errs
}

// CoverageServed reports whether the API server serves the coverage of
// the history (its CRD is installed).
func (e *Env) CoverageServed() (bool, error) {
	list, err := e.CP.Kube.Discovery().ServerResourcesForGroupVersion(IPHistoryCoverageGVR.GroupVersion().String())
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == IPHistoryCoverageGVR.Resource }), nil
}

// CoveredUntil returns the end of the last interval of the coverage name
// (ok false while it has none), and the object as JSON.
func (e *Env) CoveredUntil(ctx context.Context, name string) (until time.Time, ok bool, raw string, err error) {
	u, err := e.CP.Dynamic.Resource(IPHistoryCoverageGVR).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return time.Time{}, false, "<none>", nil
	}
	if err != nil {
		return time.Time{}, false, "", err
	}
	b, _ := u.MarshalJSON()
	var c struct {
		Intervals []struct {
			From metav1.Time `json:"from"`
			To   metav1.Time `json:"to"`
		} `json:"intervals"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return time.Time{}, false, string(b), err
	}
	if len(c.Intervals) == 0 {
		return time.Time{}, false, string(b), nil
	}
	return c.Intervals[len(c.Intervals)-1].To.Time, true, string(b), nil
}

// WaitTruthCaughtUp waits, up to within, until the history has caught up
// with the truth's last change at last. With a coverage object name, that
// is the coverage proving the history past last; without one (its API not
// served, or no such object: a controller that does not write it), the
// IPHistories of the truth's addresses having an open hold for exactly the
// pods that hold each address now (no open hold of a gone pod, none
// missing). It returns which of the two it waited for, and an error (with
// what it last saw) if the deadline passed.
func (e *Env) WaitTruthCaughtUp(ctx context.Context, tr *Truth, coverage string, last time.Time, within time.Duration) (string, error) {
	served, err := e.CoverageServed()
	if err != nil {
		return "", fmt.Errorf("discovering the coverage API: %w", err)
	}
	how, seen := "open holds", ""
	var lastErr error
	var behind []string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		if served {
			until, ok, raw, err := e.CoveredUntil(ctx, coverage)
			seen, lastErr = raw, err
			if err != nil {
				return false, nil
			}
			if raw != "<none>" {
				// Intervals are kept to the second, their ends rounded down.
				how = "coverage"
				return ok && until.After(last), nil
			}
		}
		how = "open holds"
		behind = behind[:0]
		open := tr.OpenHolds()
		for _, addr := range tr.Addresses() {
			h, err := e.GetHistory(ctx, HistoryName(addr))
			if err != nil {
				behind = append(behind, addr+": "+err.Error())
				continue
			}
			var have []string
			if h != nil {
				for _, hold := range h.Holders {
					if hold.To == nil {
						have = append(have, string(hold.PodUID))
					}
				}
			}
			var want []string
			for _, th := range open[addr] {
				want = append(want, string(th.UID))
			}
			slices.Sort(have)
			slices.Sort(want)
			if !slices.Equal(have, want) {
				behind = append(behind, fmt.Sprintf("%s: open holds of %v, the truth %v", addr, have, want))
			}
		}
		return len(behind) == 0, nil
	})
	switch {
	case err == nil:
		return how, nil
	case how == "coverage":
		return how, fmt.Errorf("the coverage %s did not reach past the last change (%s) within %v (last error %v); last seen: %s", coverage, last.UTC().Format(time.RFC3339Nano), within, lastErr, seen)
	default:
		return how, fmt.Errorf("the IPHistories did not match the pods holding their addresses within %v: %s", within, strings.Join(behind[:min(len(behind), 10)], "; "))
	}
}

// HistoryJSON returns the IPHistory of addr as the API server returns it,
// indented, or why not.
func (e *Env) HistoryJSON(ctx context.Context, addr string) string {
	u, err := e.CP.Dynamic.Resource(IPHistoryGVR).Get(ctx, HistoryName(addr), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "<no IPHistory " + HistoryName(addr) + ">"
	}
	if err != nil {
		return "<" + err.Error() + ">"
	}
	delete(u.Object["metadata"].(map[string]any), "managedFields")
	b, err := json.MarshalIndent(u.Object, "", "  ")
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// Histories returns the IPHistories whose address ok accepts, by address,
// as the API server returns them (without managedFields).
func (e *Env) Histories(ctx context.Context, ok func(netip.Addr) bool) (map[string]map[string]any, error) {
	list, err := e.CP.Dynamic.Resource(IPHistoryGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]any{}
	for _, u := range list.Items {
		addr, _, _ := unstructuredString(u.Object, "address")
		a, err := netip.ParseAddr(addr)
		if err != nil || !ok(a) {
			continue
		}
		u.SetManagedFields(nil)
		out[addr] = u.Object
	}
	return out, nil
}

// DeleteHistories deletes the IPHistories whose address ok accepts (those
// an earlier run left on the addresses of this one), and returns how many.
func (e *Env) DeleteHistories(ctx context.Context, ok func(netip.Addr) bool) (int, error) {
	list, err := e.CP.Dynamic.Resource(IPHistoryGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, u := range list.Items {
		addr, _, _ := unstructuredString(u.Object, "address")
		a, err := netip.ParseAddr(addr)
		if err != nil || !ok(a) {
			continue
		}
		if err := e.CP.Dynamic.Resource(IPHistoryGVR).Delete(ctx, u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return n, err
		}
		n++
	}
	return n, nil
}

func unstructuredString(obj map[string]any, field string) (string, bool, error) {
	v, ok := obj[field]
	if !ok {
		return "", false, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", true, fmt.Errorf("%s is %T, not a string", field, v)
	}
	return s, true, nil
}
