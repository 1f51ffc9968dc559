#!/usr/bin/env bash
# Runs each fuzz target for FUZZTIME, one after another, building each
# package's instrumented test binary once.
#
# `go test -fuzz` builds and links the binary again for every target; the
# root package's binary holds client-go and takes seconds to link, and six
# targets live there. The binary built with -c runs one target at a time
# with the flags `go test` would give it, from the package's directory, so
# that its seed corpus is read and a crasher is written under
# testdata/fuzz/ there.
#
# The inputs it generates go to a directory of this run, removed at its end,
# not to Go's cache: every run then starts from the committed seeds and does
# the same work on any machine. A kept corpus grows with each run, and each
# run first replays all of it, then minimizes what it adds to it
# (docs/development.md gives the figures). FUZZ_CACHE=DIR keeps the corpus
# in DIR, for longer runs that build on each other.
#
# Usage: [FUZZ_CACHE=DIR] hack/fuzz.sh FUZZTIME pkg:Target...
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
fuzztime=$1
shift
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
cache=${FUZZ_CACHE:-$bin/corpus}

built=""
for t in "$@"; do
	pkg=${t%%:*} target=${t##*:}
	name=$(echo "$pkg" | tr './' '__')
	if [[ " $built " != *" $pkg "* ]]; then
		# -vet=off: `make test-unit` vetted these packages; vet here would
		# check the same source again over the instrumented build.
		$GO test -c -vet=off -fuzz "^${target}\$" -o "$bin/$name.test" "$pkg"
		built="$built $pkg"
	fi
	importpath=$($GO list -f '{{.ImportPath}}' "$pkg")
	echo ">> $pkg $target ($fuzztime)"
	(cd "$pkg" && "$bin/$name.test" -test.run '^$' -test.fuzz "^${target}\$" -test.fuzztime "$fuzztime" \
		-test.fuzzcachedir "$cache/$importpath" -test.timeout 10m -test.paniconexit0)
done
