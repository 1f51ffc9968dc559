#!/usr/bin/env bash
# Runs the end-to-end suite as three test processes at once, each with its
# own kube-apiserver and etcd (and simulated cluster, if its tests use one).
#
# Most of the suite's time is spent waiting: for a controller to stay idle,
# a lease to expire, a fault to heal. Tests within one process run one after
# another, because they count the requests their API server receives; three
# processes with three API servers cut the wall time on two cores without
# weakening that. A test's shard follows from its name:
#   faults:  the fault and readiness scenarios (fault_*_test.go, readiness_test.go)
#   history: the demo (its own simulated cluster) and the history's tests,
#            the randomized truth test among them
#   rest:    everything else (the simulated cluster, conflicts, addresses,
#            the command line, startup, the plugin)
# They take about the same time.
#
# Usage: hack/e2e.sh [go test flags for every shard, e.g. -test.v]
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
HISTORY='^Test(Demo|History)'
start=$SECONDS
shard faults -test.run "$FAULTS" "$@" &
a=$!
shard history -test.run "$HISTORY" "$@" &
b=$!
shard rest -test.skip "$FAULTS|$HISTORY" "$@" &
c=$!
rc=0
wait "$a" || rc=1
wait "$b" || rc=1
wait "$c" || rc=1
if [ "$rc" -ne 0 ]; then
	echo "FAIL: end-to-end suite ($((SECONDS - start)) s); see the [faults], [history] and [rest] lines above, logs in e2e/_artifacts/"
	exit 1
fi
echo "ok: end-to-end suite, all three shards passed ($((SECONDS - start)) s)"
