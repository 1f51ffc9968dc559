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
// It also has that writer, run by the controller's leader: the Historian
// (historian.go), its queue of addresses and what the pod handlers saw;
// the sync of one IPHistory (reconcile.go); the proof of how far the
// history has seen (proof.go), with Progress following the pod informer
// (progress.go); and the Client of the IPHistory API (apiclient.go). It
// reads the pods through the controller's pod cache of podinfo.Pod
// records (Pods).
//
// The object is a contract between the writer and its readers, spelled out
// in docs/history.md and validated by the CRD in artifacts/crd.yaml; change
// them together.
package history
