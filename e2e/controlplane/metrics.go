package controlplane

import (
	"bytes"
	"context"
	"fmt"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Requests counts API server requests by "VERB CODE" (e.g. "POST 201").
type Requests map[string]float64

// Writes sums the requests that change objects.
func (r Requests) Writes() float64 {
	var n float64
	for k, v := range r {
		switch verbOf(k) {
		case "POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION":
			n += v
		}
	}
	return n
}

// Verb sums the requests of one verb, all codes.
func (r Requests) Verb(verb string) float64 {
	var n float64
	for k, v := range r {
		if verbOf(k) == verb {
			n += v
		}
	}
	return n
}

// Sub returns r minus before, dropping zero entries.
func (r Requests) Sub(before Requests) Requests {
	out := Requests{}
	for k, v := range r {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func verbOf(k string) string {
	for i := range k {
		if k[i] == ' ' {
			return k[:i]
		}
	}
	return k
}

// ResourceRequests reads apiserver_request_total from the API server's own
// /metrics and returns the counts for one resource (e.g. "podtoips"). This
// is the server's view, independent of anything the controller reports.
func (cp *ControlPlane) ResourceRequests(ctx context.Context, resource string) (Requests, error) {
	raw, err := cp.scrapeMetrics(ctx)
	if err != nil {
		return nil, err
	}
	return ParseResourceRequests(raw, resource)
}

// scrapeMetrics returns the API server's /metrics text.
func (cp *ControlPlane) scrapeMetrics(ctx context.Context) ([]byte, error) {
	raw, err := cp.Kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scraping API server /metrics: %w", err)
	}
	return raw, nil
}

// parseMetrics reads the API server's /metrics text into its families.
func parseMetrics(raw []byte) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parsing API server /metrics: %w", err)
	}
	return families, nil
}

// ParseResourceRequests reads the apiserver_request_total counts of one
// resource from the API server's /metrics text. A missing metric, or one
// whose series lack the resource, verb and code labels, is an error rather
// than an empty count: read as zero, it would pass every "no writes"
// assertion. A resource with no series while others have them is a true
// zero (the server creates a series at a resource's first request).
func ParseResourceRequests(raw []byte, resource string) (Requests, error) {
	families, err := parseMetrics(raw)
	if err != nil {
		return nil, err
	}
	fam := families["apiserver_request_total"]
	if fam == nil || len(fam.GetMetric()) == 0 {
		return nil, fmt.Errorf("API server /metrics has no apiserver_request_total: cannot count requests to %s", resource)
	}
	out := Requests{}
	labelled := false
	for _, m := range fam.GetMetric() {
		l := labels(m)
		_, hasResource := l["resource"]
		_, hasVerb := l["verb"]
		_, hasCode := l["code"]
		if !hasResource || !hasVerb || !hasCode {
			continue
		}
		labelled = true
		if l["resource"] != resource || l["subresource"] != "" {
			continue
		}
		out[l["verb"]+" "+l["code"]] += m.GetCounter().GetValue()
	}
	if !labelled {
		return nil, fmt.Errorf("API server /metrics: no apiserver_request_total series has the resource, verb and code labels: cannot count requests to %s", resource)
	}
	return out, nil
}

func labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// TerminatedWatchers reads apiserver_terminated_watchers_total for one
// resource of a group: the watches the API server's watch cache ended
// because their client did not take events as fast as they came (the
// client then watches again from the last event it had). Such ends also
// count as WATCH 200 in apiserver_request_total, like any other end.
func (cp *ControlPlane) TerminatedWatchers(ctx context.Context, group, resource string) (float64, error) {
	raw, err := cp.scrapeMetrics(ctx)
	if err != nil {
		return 0, err
	}
	return ParseTerminatedWatchers(raw, group, resource)
}

// ParseTerminatedWatchers reads the apiserver_terminated_watchers_total
// count of one resource from the API server's /metrics text. The counter
// has a series only from a resource's first termination, so no series (or
// no such metric at all, until any watcher of any resource was ended)
// reads as zero.
func ParseTerminatedWatchers(raw []byte, group, resource string) (float64, error) {
	families, err := parseMetrics(raw)
	if err != nil {
		return 0, err
	}
	var n float64
	for _, m := range families["apiserver_terminated_watchers_total"].GetMetric() {
		if l := labels(m); l["group"] == group && l["resource"] == resource {
			n += m.GetCounter().GetValue()
		}
	}
	return n, nil
}

// RequestsOf reads the apiserver_request_total counts of several resources
// from one scrape, so that counts read together are of the same moment.
func (cp *ControlPlane) RequestsOf(ctx context.Context, resources ...string) (map[string]Requests, error) {
	raw, err := cp.scrapeMetrics(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Requests, len(resources))
	for _, r := range resources {
		if out[r], err = ParseResourceRequests(raw, r); err != nil {
			return nil, err
		}
	}
	return out, nil
}
