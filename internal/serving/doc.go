// Package serving runs the process's HTTP listeners: the liveness and
// readiness probes (Health), Prometheus metrics and, when asked for, Go's
// runtime profiles. Each listener starts before the controller does, so a
// process still waiting for the API server, the CRD or its permissions is
// seen as alive and says why it is not ready.
package serving
