package framework

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/controlplane"
)

var servingRE = regexp.MustCompile(`"Serving (metrics|health probes)" address="([^"]+)" scheme="(https?)"`)

// Endpoint returns the http://address the controller logged for what
// ("metrics" or "health probes").
func Endpoint(t testing.TB, p *controlplane.Process, what string) string {
	t.Helper()
	if err := p.WaitForOutput(CtxFor(t, 30*time.Second), `"Serving `+what+`"`); err != nil {
		t.Fatal(err)
	}
	for _, m := range servingRE.FindAllStringSubmatch(p.Output(), -1) {
		if m[1] == what {
			return m[3] + "://" + m[2]
		}
	}
	t.Fatalf("no %s address in output", what)
	return ""
}

// WaitProbe waits until p's probe path answers code with exactly the body
// want (trailing newline aside).
func WaitProbe(t testing.TB, p *controlplane.Process, path string, code int, want string) {
	t.Helper()
	url := Endpoint(t, p, "health probes") + path
	var got int
	var body string
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		got, body = HTTPGet(t, url)
		return got == code && strings.TrimSpace(body) == want, nil
	}); err != nil {
		t.Fatalf("%s = %d %q, want %d %q", path, got, body, code, want)
	}
}

// HTTPGet returns the status code and body of url, failing the test if it
// cannot be read.
func HTTPGet(t testing.TB, url string) (int, string) {
	t.Helper()
	code, body, err := get(context.Background(), url)
	if err != nil && code == 0 { // no answer; an answer cut short is returned as far as it came
		t.Fatalf("GET %s: %v", url, err)
	}
	return code, string(body)
}

// Probe returns the status code and body (surrounding white space
// trimmed) of a probe endpoint, or the error that kept it from answering:
// for probes that may not answer yet.
func Probe(ctx context.Context, url string) (int, string, error) {
	code, body, err := get(ctx, url)
	return code, string(bytes.TrimSpace(body)), err
}

// HTTPGetAs is HTTPGet with a bearer token (none if empty), over HTTPS to
// the controller's self-signed certificate, as a scraper configured with
// insecureSkipVerify does.
func HTTPGetAs(t testing.TB, url, token string) (int, string) {
	t.Helper()
	code, body, err := getAs(context.Background(), url, token)
	if err != nil && code == 0 {
		t.Fatalf("GET %s: %v", url, err)
	}
	return code, string(body)
}

// insecureClient trusts any server certificate: the controller's is
// self-signed.
var insecureClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

func get(ctx context.Context, url string) (int, []byte, error) {
	return getAs(ctx, url, "")
}

func getAs(ctx context.Context, url, token string) (int, []byte, error) {
	return GetWith(ctx, insecureClient, url, token)
}

// GetWith gets url with client, as token ("": none), and returns the
// status code and the body.
func GetWith(ctx context.Context, client *http.Client, url, token string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Scrape parses the controller's /metrics into "name{labels}" -> value, with
// labels in Prometheus text order.
func Scrape(t testing.TB, p *controlplane.Process) map[string]float64 {
	t.Helper()
	code, body := HTTPGet(t, Endpoint(t, p, "metrics")+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out
}

// Metric is SumSeries for series that must be present: it fails the test
// when none matches, so that a renamed or unregistered metric cannot read
// as 0 and pass an assertion of 0.
func Metric(t testing.TB, m map[string]float64, prefix string, labels ...string) float64 {
	t.Helper()
	v, ok := SumSeries(m, prefix, labels...)
	if !ok {
		t.Fatalf("no series %s %v in /metrics", prefix, labels)
	}
	return v
}

// SumSeries adds the values of all series whose name and labels start with
// prefix and contain every one of the label matchers; found is false when
// there is none. Callers must check found, or use Metric: a counter with
// labels has no series until its first increment, but a missing series is
// just as often a renamed metric.
func SumSeries(m map[string]float64, prefix string, labels ...string) (float64, bool) {
	var sum float64
	found := false
next:
	for k, v := range m {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(k, l) {
				continue next
			}
		}
		sum += v
		found = true
	}
	return sum, found
}

// Counters are the controller's own counts of its work.
type Counters struct{ Syncs, SyncErrors, Retries, Adds, Depth float64 }

// CountersOf reads p's counts of its work.
func CountersOf(t testing.TB, p *controlplane.Process) Counters {
	t.Helper()
	m := Scrape(t, p)
	var c Counters
	// The sync counters appear at the first sync of each result (none is a
	// count of 0); the queue's series exist from its creation, so they must.
	c.Syncs, _ = SumSeries(m, "podtoip_controller_syncs_total")
	c.SyncErrors, _ = SumSeries(m, "podtoip_controller_syncs_total", `result="error"`)
	c.Retries = Metric(t, m, `workqueue_retries_total{name="podtoip"}`)
	c.Adds = Metric(t, m, `workqueue_adds_total{name="podtoip"}`)
	c.Depth = Metric(t, m, `workqueue_depth{name="podtoip"}`)
	return c
}

// Sub is the work done since before (the queue's depth is c's).
func (c Counters) Sub(before Counters) Counters {
	return Counters{c.Syncs - before.Syncs, c.SyncErrors - before.SyncErrors, c.Retries - before.Retries, c.Adds - before.Adds, c.Depth}
}

// WaitIdle waits, up to within, until every key put in p's queue has been
// reconciled (the queue counts an add only when the key was not queued
// already, and each add is taken by exactly one sync), so that counts taken
// afterwards include no leftover work. It looks every 1/500 of within,
// between 20 and 100 ms: often enough for a short wait, seldom enough not
// to load a busy controller with scrapes.
func WaitIdle(t testing.TB, p *controlplane.Process, within time.Duration) Counters {
	t.Helper()
	var c Counters
	interval := min(max(within/500, 20*time.Millisecond), 100*time.Millisecond)
	if err := wait.PollUntilContextTimeout(t.Context(), interval, within, true, func(context.Context) (bool, error) {
		c = CountersOf(t, p)
		return c.Depth == 0 && c.Adds == c.Syncs, nil
	}); err != nil {
		t.Fatalf("controller did not become idle within %v: %+v", within, c)
	}
	return c
}

// Syncs returns how many keys the controller has reconciled successfully.
func Syncs(t testing.TB, p *controlplane.Process) float64 {
	t.Helper()
	return Metric(t, Scrape(t, p), "podtoip_controller_syncs_total", `result="success"`)
}

// WaitSyncs waits until the controller has reconciled at least n keys
// since it started.
func WaitSyncs(t testing.TB, p *controlplane.Process, n float64) {
	t.Helper()
	var got float64
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		got = Syncs(t, p)
		return got >= n, nil
	}); err != nil {
		t.Fatalf("%v reconciles, waited for %v", got, n)
	}
}

// Writes returns p's own count of PodToIp writes. The controller creates
// the series at its first write, so none means none yet (a standby's 0);
// a renamed metric cannot pass for it, because every test that reads a
// standby's 0 also waits for the leader's count to reach the API server's.
func Writes(t testing.TB, p *controlplane.Process) float64 {
	t.Helper()
	v, found := SumSeries(Scrape(t, p), "podtoip_controller_writes_total")
	if !found {
		return 0
	}
	return v
}

// WaitWrites returns p's write count once it reaches at least min. The API
// server applies a write before the controller reads the response and counts
// it, so a count read right after the effect is observed can lag by one.
func WaitWrites(t testing.TB, p *controlplane.Process, min float64) float64 {
	t.Helper()
	var v float64
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		v = Writes(t, p)
		return v >= min, nil
	}); err != nil {
		t.Fatalf("controller counted %v writes, want at least %v", v, min)
	}
	return v
}

// ConflictMetrics returns the gauge of addresses in conflict and the counter
// of conflicts found, as the controller exports them.
func ConflictMetrics(t testing.TB, p *controlplane.Process) (inConflict, found float64) {
	t.Helper()
	m := Scrape(t, p)
	return Metric(t, m, "podtoip_controller_conflicting_addresses"), Metric(t, m, "podtoip_controller_address_conflicts_total")
}
