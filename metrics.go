package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	// Registers client-go's metric hooks (REST client requests and latency,
	// rate-limiter wait, workqueues, leader election) with legacyregistry.
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
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
	registerOnce sync.Once

	apiRejectionsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "podtoip", Subsystem: "controller", Name: "api_rejections_total",
		Help: "Calls the API server refused with 403 for a reason other than permissions, by reason " +
			"(namespace_terminating, quota, admission_webhook, other), verb and resource. They do not make the controller unready.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason", "verb", "resource"})
	registerAccessOnce sync.Once
)

// registerAccessMetrics registers the access tracker's metrics. The tracker
// counts from the first request, before the controller exists.
func registerAccessMetrics() {
	registerAccessOnce.Do(func() { legacyregistry.MustRegister(apiRejectionsTotal) })
}

// registerMetrics registers the controller's metrics; the gauges read the
// controller's caches when scraped, so they can never drift from them.
func registerMetrics(c *Controller) {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(syncsTotal, writesTotal, conflictsDetectedTotal)
		legacyregistry.RawMustRegister(
			metrics.NewGaugeFunc(&metrics.GaugeOpts{
				Namespace: "podtoip", Subsystem: "controller", Name: "mirrors",
				Help:           "PodToIp objects managed by this controller, as seen in its cache.",
				StabilityLevel: metrics.ALPHA,
			}, func() float64 { return float64(c.managedMirrors()) }),
			metrics.NewGaugeFunc(&metrics.GaugeOpts{
				Namespace: "podtoip", Subsystem: "controller", Name: "foreign_objects",
				Help:           "PodToIp objects under a pod's name that are not managed by this controller and are left alone.",
				StabilityLevel: metrics.ALPHA,
			}, func() float64 { return float64(c.foreign.count()) }),
			metrics.NewGaugeFunc(&metrics.GaugeOpts{
				Namespace: "podtoip", Subsystem: "controller", Name: "invalid_address_pods",
				Help:           "Pods that have no PodToIp because an address in their status is not an IP address (each has a PodToIpInvalidAddress event).",
				StabilityLevel: metrics.ALPHA,
			}, func() float64 { return float64(c.invalid.count()) }),
			metrics.NewGaugeFunc(&metrics.GaugeOpts{
				Namespace: "podtoip", Subsystem: "controller", Name: "conflicting_addresses",
				Help: "Addresses held by more than one live holder (pods, a Service ClusterIP, a Node) right now, as the leader's reconciles found them; " +
					"each pod involved has conflict=true on its PodToIp. 0 on standbys.",
				StabilityLevel: metrics.ALPHA,
			}, func() float64 { return float64(c.conflicts.Addresses()) }),
		)
		for _, k := range c.checks {
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

// managedMirrors counts the managed PodToIps in the cache.
func (c *Controller) managedMirrors() int {
	n := 0
	for _, obj := range c.mirrors.List() {
		if isManaged(obj.(*mirrorInfo)) {
			n++
		}
	}
	return n
}

// health answers the liveness and readiness probes. It serves from the
// moment the process starts, so an orchestrator sees a live process (and
// why it is not ready) while the startup checks wait for the API server,
// the CRD or permissions, instead of restarting it for not answering.
type health struct {
	access   *accessTracker                 // nil: not checked
	election *leaderelection.HealthzAdaptor // nil without leader election
	leading  func() bool                    // nil without leader election

	mu      sync.Mutex
	startup error                  // the startup check failing now, if any
	synced  []cache.InformerSynced // nil until the startup checks pass
}

// startupFailed records the startup check that is failing, for readyz.
func (h *health) startupFailed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.startup = err
}

// started marks the startup checks as passed; from now on readiness
// follows the informers.
func (h *health) started(synced ...cache.InformerSynced) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.startup, h.synced = nil, synced
}

// healthz is liveness: it fails only when restarting would help, which is a
// leader whose lease renewal is stuck.
func (h *health) healthz(w http.ResponseWriter, r *http.Request) {
	if h.election != nil {
		if err := h.election.Check(r); err != nil {
			http.Error(w, "leader election: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	fmt.Fprintln(w, "ok")
}

// readyz is readiness: the startup checks have passed, both informer
// caches have synced, and the API server is reachable (or has been
// unreachable for less than unreachableGrace), still serves the PodToIp
// API and does not refuse the calls the controller needs (see
// accessTracker). A standby is ready (its caches are warm for a fast
// takeover) and says it waits for the lease. None of this is checked by
// liveness: a restart fixes none of it.
func (h *health) readyz(w http.ResponseWriter, _ *http.Request) {
	h.mu.Lock()
	startup, synced := h.startup, h.synced
	h.mu.Unlock()
	switch {
	case synced == nil && startup != nil:
		http.Error(w, "startup check failing: "+startup.Error(), http.StatusServiceUnavailable)
		return
	case synced == nil:
		http.Error(w, "startup checks running", http.StatusServiceUnavailable)
		return
	}
	for _, synced := range synced {
		if !synced() {
			http.Error(w, "informer caches not synced yet", http.StatusServiceUnavailable)
			return
		}
	}
	if h.access != nil {
		if err := h.access.check(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	switch {
	case h.leading == nil:
		fmt.Fprintln(w, "ok")
	case h.leading():
		fmt.Fprintln(w, "ok: leader")
	default:
		fmt.Fprintln(w, "ok: standby, waiting for the leader lease")
	}
}

// serve listens on addr ("0" disables) and serves handler until ctx ends.
// It returns once listening, so a taken port is reported at startup.
func serve(ctx context.Context, what, flagName, addr string, handler http.Handler) error {
	if addr == "0" || addr == "" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("serving %s on %s: %w; choose another address with %s, or 0 to disable", what, addr, err, flagName)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	klog.FromContext(ctx).Info("Serving "+what, "address", l.Addr().String())
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Serving "+what+" failed")
		}
	}()
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	return nil
}

// metricsHandler serves Prometheus text at /metrics.
func metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", legacyregistry.Handler())
	return mux
}

func (h *health) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", h.healthz)
	mux.HandleFunc("/livez", h.healthz)
	mux.HandleFunc("/readyz", h.readyz)
	return mux
}
