#!/usr/bin/env bash
# Runs the end-to-end suite as two test processes at once, each with its own
# kube-apiserver and etcd (and simulated cluster, if its tests use one).
#
# Most of the suite's time is spent waiting: for a controller to stay idle,
# a lease to expire, a fault to heal. Tests within one process run one after
# another, because they count the requests their API server receives; two
# processes with two API servers halve the wall time on two cores without
# weakening that. The fault and readiness scenarios (fault_*_test.go,
# readiness_test.go) make one shard, the rest (the simulated cluster, the
# demo, conflicts, addresses, the command line and startup) the other; they
# take about the same time.
#
# Usage: hack/e2e.sh [go test flags for both shards, e.g. -v]
set -euo pipefail
cd "$(dirname "$0")/../e2e"
GO=${GO:-go}
TIMEOUT=${E2E_TIMEOUT:-20m}
BIN=../_output/e2e.test

# The small packages (the harness, the demo and benchmark programs) first.
# -trimpath, like every build of the control plane and the controller: the
# packages they share (client-go, the API types) then compile once.
"$GO" test -trimpath -count=1 ./controlplane/... ./cmd/...
"$GO" test -trimpath -c -o "$BIN" .

# One shard's output, each line prefixed with its name, on the terminal as it
# comes; its exit code is that of the test process.
shard() {
	local name=$1
	shift
	set +e
	E2E_SHARD=$name "$BIN" -test.count=1 -test.timeout="$TIMEOUT" "$@" 2>&1 | sed -u "s/^/[$name] /"
	local rc=${PIPESTATUS[0]}
	set -e
	echo "[$name] exit $rc"
	return "$rc"
}

FAULTS='^Test(Fault|Readiness)'
start=$SECONDS
shard faults -test.run "$FAULTS" "$@" &
a=$!
shard rest -test.skip "$FAULTS" "$@" &
b=$!
rc=0
wait "$a" || rc=1
wait "$b" || rc=1
if [ "$rc" -ne 0 ]; then
	echo "FAIL: end-to-end suite ($((SECONDS - start)) s); see the [faults] and [rest] lines above, logs in e2e/_artifacts/"
	exit 1
fi
echo "ok: end-to-end suite, both shards passed ($((SECONDS - start)) s)"
