#!/usr/bin/env bash
# bench-rounds.sh BENCH JQ OUT ROUNDS N A_CONTROLLER "A_FLAGS" B_CONTROLLER "B_FLAGS"
#
# Runs the benchmark BENCH (bin/bench) ROUNDS times for each of two
# setups, A then B in every round, so that both see the same machine
# within minutes of each other (docs/performance.md: a figure is a ratio
# between runs of the same sitting). Each run writes OUT/a-R.json or
# OUT/b-R.json; a table of each round's figures and their B/A ratios
# follows, then the medians of the ratios.
set -euo pipefail
bench=$1 jq=$2 out=$3 rounds=$4 n=$5 actl=$6 aflags=$7 bctl=$8 bflags=$9
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
	for side in a b; do
		if [ "$side" = a ]; then ctl=$actl flags=$aflags; else ctl=$bctl flags=$bflags; fi
		echo ">> round $r, $side: $ctl $flags" >&2
		# shellcheck disable=SC2086 # flags are words
		"$bench" -n "$n" -controller "$ctl" -out "$out/$side-$r.json" $flags >"$out/$side-$r.log" 2>&1 ||
			{ echo "bench failed, see $out/$side-$r.log" >&2; tail -20 "$out/$side-$r.log" >&2; exit 1; }
	done
done

# The figures: the controller's CPU and anonymous RSS after a cold start,
# the cold start against the raw loop, the cluster's CPU over the cold
# start, and the churn's p99.
figures='{cpu: .cold.cpuSeconds, rssAnon: .cold.rssAnonMiB, coldRaw: .cold.ratioToRawCreate,
  cluster: (.cold.cpuSeconds + .cold.serverCPU.apiserverSeconds + .cold.serverCPU.etcdSeconds),
  p99: .churn.latencyMs.p99}'
printf '%-6s %-9s %10s %10s %10s %10s %10s\n' round side "cpu s" "anon MiB" "cold÷raw" "cluster s" "p99 ms"
ratios=()
for r in $(seq 1 "$rounds"); do
	a=$("$jq" -c "$figures" "$out/a-$r.json")
	b=$("$jq" -c "$figures" "$out/b-$r.json")
	for side in a b; do
		f=$a
		[ "$side" = b ] && f=$b
		"$jq" -r --arg r "$r" --arg s "$side" '[$r, $s, (.cpu|tostring), (.rssAnon*10|round/10|tostring), (.coldRaw*100|round/100|tostring), (.cluster*10|round/10|tostring), (.p99*10|round/10|tostring)] | @tsv' <<<"$f" |
			awk -F'\t' '{printf "%-6s %-9s %10s %10s %10s %10s %10s\n", $1, $2, $3, $4, $5, $6, $7}'
	done
	ratios+=("$("$jq" -cn --argjson a "$a" --argjson b "$b" '{cpu: ($b.cpu/$a.cpu), rssAnon: ($b.rssAnon/$a.rssAnon), coldRaw: ($b.coldRaw/$a.coldRaw), cluster: ($b.cluster/$a.cluster), p99: ($b.p99/$a.p99)}')")
done
echo
echo "B/A by round, then the median:"
printf '%s\n' "${ratios[@]}" | "$jq" -sr '
  def r2: . * 100 | round / 100;
  def median: sort | .[length/2|floor];
  (.[] | "  cpu \(.cpu|r2)x  anon RSS \(.rssAnon|r2)x  cold/raw \(.coldRaw|r2)x  cluster \(.cluster|r2)x  p99 \(.p99|r2)x"),
  "median: cpu \(map(.cpu)|median|r2)x  anon RSS \(map(.rssAnon)|median|r2)x  cold/raw \(map(.coldRaw)|median|r2)x  cluster \(map(.cluster)|median|r2)x  p99 \(map(.p99)|median|r2)x"'
