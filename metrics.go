package main

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	// Registers client-go's metric hooks (REST client requests and latency,
	// rate-limiter wait, workqueues, leader election) with legacyregistry.
	_ "k8s.io/component-base/metrics/prometheus/clientgo"

	"example.com/podtoip-controller/internal/conflicts"
	"example.com/podtoip-controller/internal/history"
)

// The controller's own metrics, next to client-go's standard series.
var (
	syncsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "podtoip", Subsystem: "controller", Name: "syncs_total",
		Help:           "Reconciles of pod keys, by result (success or error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	writesTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "podtoip", Subsystem: "controller", Name: "writes_total",
		Help:           "Successful writes of PodToIp objects, by operation (create, update, delete).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"operation"})
	conflictsDetectedTotal = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "podtoip", Subsystem: "controller", Name: "address_conflicts_total",
		Help: "Address conflicts found: each time an address came to be held by more than one live holder (pods, a Service ClusterIP, a Node). " +
			"A restarted controller counts the conflicts it finds still present again.",
		StabilityLevel: metrics.ALPHA,
	})
	editsRevertedTotal = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "podtoip", Subsystem: "controller", Name: "edits_reverted_total",
		Help: "Mirrors that another field manager had changed and the controller rewrote from their pod. " +
			"With the admission policy (artifacts/policy.yaml) installed, only an identity it exempts can make such an edit.",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

// registerMetrics registers the controller's metrics; the gauges read the
// controller's caches when scraped, so they can never drift from them.
// gauges are what the controller's gauges read (Controller.gauges).
type gauges struct {
	policyBound                                   func() bool
	mirrors, foreign, invalid, conflictingAddress func() int
	checks                                        []*conflicts.Check
}

func registerMetrics(g gauges) {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(syncsTotal, writesTotal, conflictsDetectedTotal, editsRevertedTotal)
		history.RegisterMetrics()
		legacyregistry.RawMustRegister(
			metrics.NewGaugeFunc(&metrics.GaugeOpts{
				Namespace: "podtoip", Name: "admission_policy_bound",
				Help: "1 when the admission policies (artifacts/policy.yaml) and their bindings are in force, as the controller watches them; 0 when one is missing or does not deny, " +
					"or the controller may not read them: then anyone with RBAC to write PodToIps or IPHistories can change the answers.",
				StabilityLevel: metrics.ALPHA,
			}, func() float64 {
				if g.policyBound() {
					return 1
				}
				return 0
			}),
			metrics.NewGaugeFunc(&metrics.GaugeOpts{
				Namespace: "podtoip", Subsystem: "controller", Name: "mirrors",
				Help:           "PodToIp objects managed by this controller, as seen in its cache.",
				StabilityLevel: metrics.ALPHA,
			}, func() float64 { return float64(g.mirrors()) }),
			metrics.NewGaugeFunc(&metrics.GaugeOpts{
				Namespace: "podtoip", Subsystem: "controller", Name: "foreign_objects",
				Help:           "PodToIp objects under a pod's name that are not managed by this controller and are left alone.",
				StabilityLevel: metrics.ALPHA,
			}, func() float64 { return float64(g.foreign()) }),
			metrics.NewGaugeFunc(&metrics.GaugeOpts{
				Namespace: "podtoip", Subsystem: "controller", Name: "invalid_address_pods",
				Help:           "Pods that have no PodToIp because an address in their status is not an IP address (each has a PodToIpInvalidAddress event).",
				StabilityLevel: metrics.ALPHA,
			}, func() float64 { return float64(g.invalid()) }),
			metrics.NewGaugeFunc(&metrics.GaugeOpts{
				Namespace: "podtoip", Subsystem: "controller", Name: "conflicting_addresses",
				Help: "Addresses held by more than one live holder (pods, a Service ClusterIP, a Node) right now, as the leader's reconciles found them; " +
					"each pod involved has conflict=true on its PodToIp. 0 on standbys.",
				StabilityLevel: metrics.ALPHA,
			}, func() float64 { return float64(g.conflictingAddress()) }),
		)
		for _, k := range g.checks {
			legacyregistry.RawMustRegister(metrics.NewGaugeFunc(&metrics.GaugeOpts{
				Namespace: "podtoip", Subsystem: "controller", Name: "conflict_check_enabled",
				Help: "1 while an optional address conflict check runs, 0 while it is off (its informer may not list, or the API is not served) or not synced yet. " +
					"check is nodes (Node addresses) or services (Service ClusterIPs); the check between pods always runs.",
				ConstLabels:    map[string]string{"check": k.Name},
				StabilityLevel: metrics.ALPHA,
			}, func() float64 {
				if k.Enabled() {
					return 1
				}
				return 0
			}))
		}
	})
}
