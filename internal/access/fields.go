package access

// AnswerFields are the fields of a PodToIp that answer "who has this IP?":
// every top-level field of its schema but apiVersion, kind and metadata.
// Only the controller writes them. This list is the one place that says
// which they are: the admission policy (artifacts/policy.yaml) refuses any
// other identity changing one of them, the controller's fingerprint of its
// own writes hashes each of them (codec.go), and docs/operations.md names
// them. The tests hold every one of those to this list, and this list to
// the CRD (artifacts/crd.yaml), so a field added to the CRD and not
// guarded fails them: an unguarded answer field is one a tenant can forge.
var AnswerFields = []string{
	"podName", "podUID", "podAddress", "podIPs", "podIPv4", "podIPv6",
	"nodeName", "hostNetwork", "terminating", "conflict", "conflictsWith",
}
