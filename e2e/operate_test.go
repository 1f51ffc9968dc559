package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/framework"
)

// TestOperateMetricsAndProbes scrapes the running binary: the standard
// client-go series and the controller's own exist, and the writes it reports
// agree with what the API server counted.
func TestOperateMetricsAndProbes(t *testing.T) {
	ns := suite.NewNamespace(t)
	before := suite.PodToIpRequests(t)
	p := suite.StartController(t, "--namespace", ns)
	framework.WaitReady(t, p)

	probes := framework.Endpoint(t, p, "health probes")
	if code, body := framework.HTTPGet(t, probes+"/readyz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/readyz = %d %q", code, body)
	}
	if code, body := framework.HTTPGet(t, probes+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %q", code, body)
	}

	for i := range 5 {
		suite.RunningPod(t, ns, fmt.Sprintf("m%d", i), []string{fmt.Sprintf("10.244.20.%d", i+1)})
	}
	for i := range 5 {
		suite.WaitMirrorIPs(t, ns, fmt.Sprintf("m%d", i), fmt.Sprintf("10.244.20.%d", i+1))
	}
	suite.DeletePod(t, ns, "m0", false)
	suite.WaitNoMirror(t, ns, "m0")

	// The API server commits the DELETE before the controller reads its
	// response and counts it, so wait for the controller's own tally; and
	// the mirrors gauge reads the controller's cache, which drops m0 only
	// when the deletion's watch event arrives, so wait for that too.
	var m map[string]float64
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		m = framework.Scrape(t, p)
		d, _ := framework.SumSeries(m, `podtoip_controller_writes_total{operation="delete"}`)
		mirrors, _ := framework.SumSeries(m, `podtoip_controller_mirrors`)
		return d >= 1 && mirrors == 4, nil
	}); err != nil {
		d, _ := framework.SumSeries(m, `podtoip_controller_writes_total{operation="delete"}`)
		mirrors, _ := framework.SumSeries(m, `podtoip_controller_mirrors`)
		t.Fatalf("within 10 s the controller counted %v deletes (want 1) and %v mirrors in its cache (want 4)", d, mirrors)
	}
	for _, series := range []string{
		`workqueue_depth{name="podtoip"}`,
		`workqueue_adds_total{name="podtoip"}`,
		`workqueue_retries_total{name="podtoip"}`,
		`workqueue_queue_duration_seconds_count{name="podtoip"}`,
		`workqueue_work_duration_seconds_count{name="podtoip"}`,
		`rest_client_requests_total`,
		`rest_client_request_duration_seconds_count`,
		`rest_client_rate_limiter_duration_seconds_count`,
		`podtoip_controller_syncs_total{result="success"}`,
		`podtoip_controller_writes_total{operation="create"}`,
		`podtoip_controller_mirrors`,
		`podtoip_controller_foreign_objects`,
		`process_resident_memory_bytes`,
	} {
		if _, ok := framework.SumSeries(m, series); !ok {
			t.Errorf("metric %s missing", series)
		}
	}
	if v := framework.Metric(t, m, "podtoip_controller_mirrors"); v != 4 {
		t.Errorf("podtoip_controller_mirrors = %v, want 4", v)
	}
	server := suite.PodToIpRequests(t).Sub(before)
	creates := framework.Metric(t, m, `podtoip_controller_writes_total{operation="create"}`)
	deletes := framework.Metric(t, m, `podtoip_controller_writes_total{operation="delete"}`)
	if creates != server["POST 201"] || deletes != server["DELETE 200"] || creates != 5 || deletes != 1 {
		t.Errorf("controller reports %v creates and %v deletes; API server saw %v", creates, deletes, server)
	}
	if posts := framework.Metric(t, m, "rest_client_requests_total", `method="POST"`, `code="201"`); posts < creates {
		t.Errorf("rest_client_requests_total POST 201 = %v, less than %v creates", posts, creates)
	}
}
