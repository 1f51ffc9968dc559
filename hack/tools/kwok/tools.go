//go:build tools

// Package tools records the command built from this module (kwok, which
// plays the kubelets of the simulated cluster), so that `go mod tidy` keeps
// what it needs.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
