package serving

import (
	"fmt"
	"net/http"
	"sync"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
)

// Health answers the liveness and readiness probes. It serves from the
// moment the process starts, so an orchestrator sees a live process (and
// why it is not ready) while the startup checks wait for the API server,
// the CRD or permissions, instead of restarting it for not answering.
type Health struct {
	// Access names what keeps the running controller from working, such as
	// refused permissions (see access.Monitor); nil: not checked.
	Access func() error
	// Election is leader election's check of the lease renewals; nil
	// without leader election.
	Election *leaderelection.HealthzAdaptor
	// Leading says whether this replica leads; nil without leader election.
	Leading func() bool

	mu      sync.Mutex
	startup error                  // the startup check failing now, if any
	synced  []cache.InformerSynced // nil until the startup checks pass
}

// StartupFailed records the startup check that is failing, for readyz.
func (h *Health) StartupFailed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.startup = err
}

// Started marks the startup checks as passed; from now on readiness
// follows the informers.
func (h *Health) Started(synced ...cache.InformerSynced) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.startup, h.synced = nil, synced
}

// Handler serves /healthz and /livez (liveness) and /readyz (readiness).
func (h *Health) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", h.healthz)
	mux.HandleFunc("/livez", h.healthz)
	mux.HandleFunc("/readyz", h.readyz)
	return mux
}

// healthz is liveness: it fails only when restarting would help, which is a
// leader whose lease renewal is stuck.
func (h *Health) healthz(w http.ResponseWriter, r *http.Request) {
	if h.Election != nil {
		if err := h.Election.Check(r); err != nil {
			http.Error(w, "leader election: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	fmt.Fprintln(w, "ok")
}

// readyz is readiness: the startup checks have passed, the informer caches
// have synced, and Access finds nothing wrong (the API server is reachable,
// still serves the CRD's API and does not refuse the calls the controller
// needs). A standby is ready (its caches are warm for a fast takeover) and
// says it waits for the lease. None of this is checked by liveness: a
// restart fixes none of it.
func (h *Health) readyz(w http.ResponseWriter, _ *http.Request) {
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
	if h.Access != nil {
		if err := h.Access(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	switch {
	case h.Leading == nil:
		fmt.Fprintln(w, "ok")
	case h.Leading():
		fmt.Fprintln(w, "ok: leader")
	default:
		fmt.Fprintln(w, "ok: standby, waiting for the leader lease")
	}
}
