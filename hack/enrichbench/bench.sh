#!/usr/bin/env bash
# make bench-enrich: kubectl ptp enrich over RECORDS aws-vpc records and a
# history of ADDRESSES addresses, against awk printing two fields of the
# same file, each the best of three runs; and the peak memory, with a
# history of 10 addresses and with fewer records, to show what grows with
# the history and what does not.
set -euo pipefail
plugin=$1 dir=$2 records=${3:-1000000} addresses=${4:-10000}
mkdir -p "$dir"
rm -rf "$dir/exports"
go run ./hack/enrichbench -addresses "$addresses" -records "$records" -history "$dir/history.json" -flows "$dir/flows.log" -exports "$dir/exports"
go run ./hack/enrichbench -addresses 10 -records 1000 -history "$dir/history-10.json" -flows "$dir/flows-1k.log"
awk=$(command -v mawk || command -v awk)
cat "$dir/flows.log" > /dev/null # into the page cache, for both

# best runs CMD three times and prints its least seconds and its largest
# max RSS (KiB).
best() {
	local s kb bs=999999 bkb=0
	for _ in 1 2 3; do
		/usr/bin/time -f '%e %M' -o "$dir/time" "$@" > /dev/null 2>> "$dir/stderr" || true
		read -r s kb < <(tail -1 "$dir/time") # after "Command exited with non-zero status", if any
		bs=$(echo "$s $bs" | awk '{print ($1 < $2) ? $1 : $2}')
		bkb=$(( kb > bkb ? kb : bkb ))
	done
	echo "$bs $bkb"
}
read -r awk_s _ < <(best "$awk" '{print $4, $5}' "$dir/flows.log")
read -r enr_s enr_kb < <(best "$plugin" enrich --history-file "$dir/history.json" "$dir/flows.log")
read -r exp_s exp_kb < <(best "$plugin" enrich --history-file "$dir/exports" "$dir/flows.log")
read -r few_s few_kb < <(best "$plugin" enrich --history-file "$dir/history.json" "$dir/flows-1k.log")
read -r base_s base_kb < <(best "$plugin" enrich --history-file "$dir/history-10.json" "$dir/flows-1k.log")
tail -1 "$dir/stderr"
awk -v n="$records" -v a="$addresses" -v awk_s="$awk_s" -v enr_s="$enr_s" -v few_s="$few_s" -v exp_s="$exp_s" -v exp_kb="$exp_kb" -v awkname="$(basename "$awk")" \
	-v enr_kb="$enr_kb" -v few_kb="$few_kb" -v base_kb="$base_kb" 'BEGIN {
	printf "%s %s records, a history of %s addresses\n", "aws-vpc", n, a
	printf "%-44s %6.2f s\n", awkname " '\''{print $4, $5}'\''", awk_s
	printf "%-44s %6.2f s (of which reading the history: %.2f s)\n", "kubectl ptp enrich --history-file", enr_s, few_s
	printf "ratio: %.2f (target <= 2)\n", enr_s / awk_s
	printf "%-44s %6.2f s, max RSS %d KiB; ratio %.2f (target <= 2.2)\n", "... --history-file (3 runs of export, Parquet)", exp_s, exp_kb, exp_s / awk_s
	printf "max RSS: %d KiB (%s records), %d KiB (1000 records), %d KiB (history of 10 addresses)\n", enr_kb, n, few_kb, base_kb
	printf "per address of history: %.2f KiB (target <= 2); the records added %d KiB\n", (few_kb - base_kb) / (a - 10), enr_kb - few_kb
}'
