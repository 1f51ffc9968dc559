package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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

	// rotated scrapes with a token made now, as a scraper's is after a
	// rotation (never admitted before), from another address than the
	// flood's, as Prometheus's pod is: it must be answered within a
	// scrape's timeout, inside one scrape interval.
	var rotations []time.Duration
	rotated := func(when string) {
		t.Helper()
		fresh := saToken(t, cp, ns, "scraper")
		start := time.Now()
		code, body, err := getFromWithin(t.Context(), url, fresh, scraperAddr, scrapeTimeout)
		took := time.Since(start)
		rotations = append(rotations, took)
		if err != nil || code != http.StatusOK || !strings.Contains(body, "podtoip_controller_mirrors") {
			t.Errorf("first scrape with a newly rotated token %s: %d %.200q %v after %v, want 200 within %v (one scrape's timeout, inside the %v interval)",
				when, code, body, err, took.Round(time.Millisecond), scrapeTimeout, scrapeInterval)
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
			rotated("as the flood starts")
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
			rotated("during the flood")
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
	t.Logf("valid scrapes during the floods: %d; first scrapes with a newly rotated token took %v (each must answer 200)", scrapes, rotations)
	if ratio > maxRatio {
		t.Errorf("the flood slowed the mirrors' writes %.1f times (quiet %v, flooded %v), want at most %.0f: reviews of the flood's tokens spend the writers' budget",
			ratio, quiet, flooded, maxRatio)
	}
}

// How a Prometheus scrapes: every scrapeInterval (the ServiceMonitor's),
// each scrape given up after scrapeTimeout (Prometheus's default).
const (
	scrapeInterval = 30 * time.Second
	scrapeTimeout  = 10 * time.Second
)

// scraperAddr is the local address the rotated scraper connects from:
// another than the flood's (127.0.0.1), as Prometheus's pod is another
// than a flooding pod. Linux answers for all of 127.0.0.0/8 on loopback.
const scraperAddr = "127.0.0.2"

// getFromWithin is framework.GetAsWithin with the connection made from
// the local address local.
func getFromWithin(ctx context.Context, url, token, local string, within time.Duration) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	client := &http.Client{Transport: &http.Transport{
		DialContext: dialer.DialContext,
		// The controller's certificate is self-signed.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	defer client.CloseIdleConnections()
	code, body, err := framework.GetWith(ctx, client, url, token)
	return code, string(body), err
}

// TestMetricsIdleConnectionsAreCapped opens many kept-alive connections
// to the secure metrics endpoint, each left idle after one authorized
// scrape, as a caller in a permitted namespace could to hold the
// controller's memory, and checks that the controller closes the ones
// idle the longest once it holds its cap, and still answers a scraper.
func TestMetricsIdleConnectionsAreCapped(t *testing.T) {
	const (
		opened = 150
		// The listener's cap (internal/serving maxConnections).
		maxHeld = 64
	)
	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns, "--metrics-secure=true", "--history-retention=0")
	framework.WaitReady(t, p)
	url := framework.Endpoint(t, p, "metrics") + "/metrics"
	token := metricsReaderToken(t, ns, url)
	host := strings.TrimPrefix(strings.TrimSuffix(url, "/metrics"), "https://")

	var closed atomic.Int32
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range opened {
		c, err := tls.Dial("tcp", host, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		defer c.Close()
		r := bufio.NewReader(c)
		fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", host, token)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("connection %d: %s, want 200", i, resp.Status)
		}
		// Idle now; the read ends when the controller closes it.
		wg.Go(func() {
			if _, err := r.ReadByte(); err != nil {
				closed.Add(1)
			}
			c.Close()
		})
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return int(closed.Load()) >= opened-maxHeld, nil
	}); err != nil {
		t.Fatalf("the controller closed %d of %d idle connections, want at least %d: it holds more than %d open", closed.Load(), opened, opened-maxHeld, maxHeld)
	}
	t.Logf("%d idle connections opened, %d closed by the controller, at most %d held", opened, closed.Load(), maxHeld)
	if code, body, err := framework.GetAsWithin(t.Context(), url, token, scrapeTimeout); err != nil || code != http.StatusOK {
		t.Errorf("a scrape with %d connections opened: %d %.200q %v, want 200", opened, code, body, err)
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
