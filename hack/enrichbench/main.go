// Command enrichbench writes the inputs of make bench-enrich: a saved
// history (as 'kubectl get iphc,iph -o json' writes it) of addresses that
// pods held one after another over a day, and aws-vpc flow records
// between those addresses and others at random times of that day.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/internal/export"
	"example.com/podtoip-controller/internal/history"
)

func main() {
	addresses := flag.Int("addresses", 10000, "addresses in the history")
	records := flag.Int("records", 1000000, "flow records")
	historyFile := flag.String("history", "history.json", "where to write the history")
	flowsFile := flag.String("flows", "flows.log", "where to write the flow records")
	exports := flag.String("exports", "", "also write the history as three hourly runs of kubectl ptp export -o parquet into this directory")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()
	rng := rand.New(rand.NewPCG(*seed, 0))
	end := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	begin := end.Add(-24 * time.Hour)
	cov, hs, err := writeHistory(*historyFile, rng, *addresses, begin, end)
	if err != nil {
		log.Fatal(err)
	}
	if *exports != "" {
		if err := writeExports(*exports, cov, hs, begin, end); err != nil {
			log.Fatal(err)
		}
	}
	if err := writeFlows(*flowsFile, rng, *addresses, *records, begin, end); err != nil {
		log.Fatal(err)
	}
}

func address(i int) string { return fmt.Sprintf("10.%d.%d.%d", 244+i>>16, i>>8&0xff, i&0xff) }

func mt(t time.Time) history.Time { return history.NewTime(t.Truncate(time.Second)) }

func mtp(t time.Time) *history.Time {
	m := mt(t)
	return &m
}

// writeHistory writes the coverage (a day with two gaps: a restart and a
// failover) and then, one per address, an IPHistory of 1 to 8 holds, each
// pod's start or end sometimes unobserved, the last one sometimes lasting.
func writeHistory(path string, rng *rand.Rand, n int, begin, end time.Time) (*history.IPHistoryCoverage, []*history.IPHistory, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	var hs []*history.IPHistory
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	cov := history.IPHistoryCoverage{
		TypeMeta:   metav1.TypeMeta{APIVersion: history.GroupVersion.String(), Kind: history.CoverageKind},
		ObjectMeta: metav1.ObjectMeta{Name: history.AllNamespaces},
		Retention:  metav1.Duration{Duration: 24 * time.Hour},
		Intervals: []history.Interval{
			{From: mt(begin), To: mt(begin.Add(8 * time.Hour))},
			{From: mt(begin.Add(8*time.Hour + 40*time.Second)), To: mt(begin.Add(17 * time.Hour))},
			{From: mt(begin.Add(17*time.Hour + 5*time.Second)), To: mt(end)},
		},
	}
	fmt.Fprint(w, `{"apiVersion":"v1","kind":"List","items":[`)
	if err := enc.Encode(cov); err != nil {
		return nil, nil, err
	}
	for i := range n {
		h, err := history.New(address(i))
		if err != nil {
			return nil, nil, err
		}
		h.CreationTimestamp = metav1.NewTime(begin.Add(-time.Hour))
		t := begin.Add(time.Duration(rng.IntN(3600)) * time.Second)
		for k := range 1 + rng.IntN(8) {
			uid := types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", i, k))
			hold := history.Hold{Namespace: fmt.Sprintf("team-%d", rng.IntN(50)), Pod: fmt.Sprintf("web-%d-%d", i, k),
				PodUID: uid, Node: fmt.Sprintf("node-%d", rng.IntN(200)), From: mt(t)}
			if rng.IntN(10) == 0 {
				hold.StartedBefore = mtp(t.Add(time.Duration(1+rng.IntN(30)) * time.Second))
			}
			t = t.Add(time.Duration(600+rng.IntN(4*3600)) * time.Second)
			if t.Before(end) {
				hold.To = mtp(t)
				if rng.IntN(10) == 0 {
					hold.EndedAfter = mtp(t.Add(-time.Duration(1+rng.IntN(30)) * time.Second))
				}
			}
			h.Holders = append(h.Holders, hold)
			if hold.To == nil {
				break
			}
			t = t.Add(time.Duration(rng.IntN(120)) * time.Second)
		}
		history.Refresh(h)
		hs = append(hs, h)
		fmt.Fprint(w, ",")
		if err := enc.Encode(h); err != nil {
			return nil, nil, err
		}
	}
	fmt.Fprintln(w, `]}`)
	if err := w.Flush(); err != nil {
		return nil, nil, err
	}
	return &cov, hs, f.Close()
}

// writeExports writes the history as three runs of an incremental export
// would, split where the coverage has its gaps (nine files).
func writeExports(dir string, cov *history.IPHistoryCoverage, hs []*history.IPHistory, begin, end time.Time) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	after := time.Time{}
	for _, until := range []time.Time{begin.Add(8 * time.Hour), begin.Add(17 * time.Hour), end} {
		a := after
		w := export.Window{After: &a, Until: until, Absent: begin}
		out, err := export.NewDirWriter(dir, "parquet", export.FileName("bench", w))
		if err != nil {
			return err
		}
		if err := out.Coverage(export.Coverages("bench", cov, w)); err != nil {
			return err
		}
		for _, h := range hs {
			if err := out.Holds(export.Holds("bench", h, w)); err != nil {
				return err
			}
			if err := out.Gaps(export.Gaps("bench", h, cov, w)); err != nil {
				return err
			}
		}
		if _, err := out.Commit(); err != nil {
			return err
		}
		after = until
	}
	return nil
}

// writeFlows writes records in the default format after its header line,
// each from or to an address of the history, the other side inside or
// outside it; one in a hundred NODATA.
func writeFlows(path string, rng *rand.Rand, n, records int, begin, end time.Time) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	fmt.Fprintln(w, "version account-id interface-id srcaddr dstaddr srcport dstport protocol packets bytes start end action log-status")
	span := int(end.Sub(begin) / time.Second)
	for range records {
		start := begin.Unix() + int64(rng.IntN(span-60))
		eni := fmt.Sprintf("eni-%017x", rng.IntN(1<<30))
		if rng.IntN(100) == 0 {
			fmt.Fprintf(w, "2 123456789010 %s - - - - - - - %d %d - NODATA\n", eni, start, start+60)
			continue
		}
		src, dst := address(rng.IntN(n)), fmt.Sprintf("203.0.%d.%d", rng.IntN(256), rng.IntN(256))
		if rng.IntN(2) == 0 {
			dst = address(rng.IntN(n))
		}
		if rng.IntN(2) == 0 {
			src, dst = dst, src
		}
		fmt.Fprintf(w, "2 123456789010 %s %s %s %d %d 6 %d %d %d %d ACCEPT OK\n", eni, src, dst,
			1024+rng.IntN(60000), 443, 1+rng.IntN(100), 40+rng.IntN(100000), start, start+int64(rng.IntN(60)))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}
