// Package history owns the IPHistory API (example.com/v1, cluster-scoped):
// one object per address that pods held within the retention window, named
// by the address, listing who held it and when. It answers "who had this IP
// at 14:05?" after the pod is gone and the address reused, which a PodToIp,
// describing only the present, cannot.
//
// It has the Go types and their deep copies, the mapping between an address
// and the object's name, and pure functions on a history: the writer (the
// controller's leader) opens and closes holds, prunes those past the
// retention window and keeps the object within MaxHolds; readers (kubectl
// ptp) ask who held the address at a time. Every function that changes a
// history reports whether it did, so a writer writes only on change, and
// leaves the summary fields (holder, since, holds) current and the object
// within its bound.
//
// The object is a contract between the writer and its readers, spelled out
// in docs/history.md and validated by the CRD in artifacts/crd.yaml; change
// them together.
package history
