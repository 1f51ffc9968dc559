package e2e

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/framework"
)

// metricsReaderToken creates a ServiceAccount in ns bound to the shipped
// metrics reader role and returns a token of it, once the metrics
// endpoint at url admits it (the binding may take a moment to reach the
// authorizer).
func metricsReaderToken(t *testing.T, ns, url string) string {
	t.Helper()
	dir := filepath.Join(cp.Root, "artifacts")
	if out, err := cp.Kubectl(t.Context(), "apply", "-f", filepath.Join(dir, "namespace.yaml"), "-f", filepath.Join(dir, "rbac.yaml")); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	bindMetricsReader(t, ns, "scraper")
	token := saToken(t, cp, ns, "scraper")
	var code int
	var body string
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		code, body = framework.HTTPGetAs(t, url, token)
		return code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("the metrics reader's scrape: %d %.200q, want 200", code, body)
	}
	return token
}

// TestMetricsFloodLeavesWritesAlone floods the secure metrics endpoint
// with requests bearing random tokens, each of which the API server would
// have to review, and checks that the mirrors' writes go as fast as
// without the flood and that a scraper with a valid token is still
// answered. The controller runs with a small client-side rate limit, so
// that reviews drawn from the writers' budget would show at once: rounds
// without and with the flood, each creating the same number of
// pods and timing until all their mirrors exist, quiet ones first.
func TestMetricsFloodLeavesWritesAlone(t *testing.T) {
	const (
		podsPerRound = 12
		// A flooding round lasts past the token cache's 10 s, so the
		// scraper's token is reviewed again during the flood.
		floodAtLeast = 12 * time.Second
		// A round that takes this long has failed.
		roundDeadline = 90 * time.Second
		// Generous: on the shared machine the flood's TLS and HTTP work
		// takes some CPU from the API server and the controller.
		maxRatio = 3.0
	)
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns, "--metrics-secure=true",
		"--kube-api-qps=5", "--kube-api-burst=5", "--workers=4", "--history-retention=0")
	framework.WaitReady(t, p)
	url := framework.Endpoint(t, p, "metrics") + "/metrics"
	token := metricsReaderToken(t, ns, url)

	// scrape checks that the valid token is answered in time, as a
	// Prometheus scrape with its timeout.
	scrapes := 0
	scrape := func(when string) {
		t.Helper()
		scrapes++
		code, body, err := framework.GetAsWithin(t.Context(), url, token, 5*time.Second)
		if err != nil || code != http.StatusOK || !strings.Contains(body, "podtoip_controller_mirrors") {
			t.Errorf("scrape with a valid token %s: %d %.200q %v, want 200 within 5 s", when, code, body, err)
		}
	}

	fleet := suite.NewFleet(ns, 1)
	var quiet, flooded []time.Duration
	for round := range 4 {
		// Quiet rounds first: a flood's reviews may outlive it.
		flooding := round >= 2
		var flood *framework.Flood
		var floodStart time.Time
		if flooding {
			floodStart = time.Now()
			flood = framework.StartFlood(t, url, 16, 50*time.Millisecond, 500*time.Millisecond)
			// In full swing before the writes start.
			if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				return flood.Sent() >= 100, nil
			}); err != nil {
				t.Fatalf("the flood sent %d requests in 30 s", flood.Sent())
			}
			scrape("as the flood starts")
		}
		start := time.Now()
		fleet.Populate(t, podsPerRound)
		want := (round + 1) * podsPerRound
		have := waitManagedMirrors(t, ns, want, roundDeadline)
		took := time.Since(start)
		if flooding {
			// Keep flooding past the token cache, scraping every second.
			for time.Since(floodStart) < floodAtLeast || time.Since(start) < time.Second {
				scrape("during the flood")
				framework.Hold(t, time.Second)
			}
			codes := flood.Stop()
			t.Logf("round %d, flooded: %d mirrors in %v; the flood's answers: %s", round, podsPerRound, took.Round(time.Millisecond), framework.FormatCodes(codes))
			flooded = append(flooded, took)
		} else {
			t.Logf("round %d, quiet: %d mirrors in %v", round, podsPerRound, took.Round(time.Millisecond))
			quiet = append(quiet, took)
		}
		if have < want {
			t.Fatalf("round %d (flooded %v): %d of %d mirrors after %v", round, flooding, have, want, roundDeadline)
		}
	}
	scrape("after the flood")
	if scrapes < 10 {
		t.Errorf("only %d scrapes with a valid token during the floods, want 10 or more", scrapes)
	}
	var q, f time.Duration
	for i := range quiet {
		q += quiet[i]
		f += flooded[i]
	}
	ratio := float64(f) / float64(q)
	t.Logf("mirrors of %d pods: quiet %v, flooded %v; flooded/quiet = %.2f", podsPerRound, quiet, flooded, ratio)
	if ratio > maxRatio {
		t.Errorf("the flood slowed the mirrors' writes %.1f times (quiet %v, flooded %v), want at most %.0f: reviews of the flood's tokens spend the writers' budget",
			ratio, quiet, flooded, maxRatio)
	}
}

// waitManagedMirrors waits up to within until namespace ns has want
// managed mirrors, and returns how many there were at the end.
func waitManagedMirrors(t *testing.T, ns string, want int, within time.Duration) int {
	t.Helper()
	have := 0
	_ = wait.PollUntilContextTimeout(t.Context(), 25*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		list, err := suite.Mirrors(ns).List(ctx, metav1.ListOptions{LabelSelector: framework.ManagedBy + "=podtoip-controller"})
		if err != nil {
			return false, nil
		}
		have = len(list.Items)
		return have >= want, nil
	})
	return have
}

// bindMetricsReader creates the ServiceAccount ns/name and binds the
// shipped metrics reader role to it, until the test ends.
func bindMetricsReader(t *testing.T, ns, name string) {
	t.Helper()
	if _, err := cp.Kube.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-" + ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "podtoip-controller-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
	}
	if _, err := cp.Kube.RbacV1().ClusterRoleBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cp.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
}
