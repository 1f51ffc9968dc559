// Package artifacts carries the manifests podtoip-controller ships into
// its binaries, for what must compare the cluster with them: the
// controller (is the admission policy in force as shipped?) and `kubectl
// ptp check`. kustomize and the chart generator read the YAML files
// beside it; they ignore this file.
package artifacts

import _ "embed"

// Policy is policy.yaml: the two ValidatingAdmissionPolicies and their
// bindings, as shipped (the exempted ServiceAccount as
// podtoip-system/podtoip-controller).
//
//go:embed policy.yaml
var Policy []byte
