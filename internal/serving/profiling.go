package serving

import (
	"net/http"
	"net/http/pprof"
)

// ProfilingHandler serves Go's runtime profiles (net/http/pprof) under
// /debug/pprof/, for --profiling-bind-address. It is off by default: a CPU
// profile costs CPU while it runs and a heap profile or goroutine dump shows
// the caches' contents (pod names, addresses), so it is meant for a
// loopback address or a port-forward, never for the metrics port that the
// NetworkPolicy opens. The handlers are put on a mux of their own rather
// than on http.DefaultServeMux, so importing net/http/pprof exposes nothing
// on the other listeners.
func ProfilingHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
