package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/internal/enrich"
	"example.com/podtoip-controller/internal/export"
	"example.com/podtoip-controller/internal/history"
	"example.com/podtoip-controller/internal/trail"
)

var (
	nodeResource      = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	ipAddressResource = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ipaddresses"}
)

// loadCluster reads the coverages, then the IPHistories in pages, then
// the Nodes' and Services' addresses now. The read time, taken after the
// last page, bounds when the histories were read.
func (c *client) loadCluster(ctx context.Context, now func() time.Time, notes io.Writer) (*enrich.Builder, time.Time, error) {
	reads, err := c.coverages(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	b := enrich.NewBuilder(c.namespace, coverageObjects(reads))
	if b.Coverages() == 0 {
		fmt.Fprintf(notes, "note: the history cannot vouch for any time: %s; every answer is at most uncertain\n", noCoverage(reads))
	}
	err = c.listPages(ctx, history.GroupVersionResource, func(u *unstructured.Unstructured) error {
		var h history.IPHistory
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &h); err != nil {
			return apiError(fmt.Errorf("reading IPHistory %s: %w", u.GetName(), err))
		}
		b.AddHistory(&h)
		return nil
	})
	if err != nil {
		return nil, time.Time{}, explainHistoryList(err)
	}
	read := now()
	c.loadCurrent(ctx, b, notes)
	return b, read, nil
}

func explainHistoryList(err error) error {
	var e *exitError
	switch {
	case errors.As(err, &e):
		return err
	case apierrors.IsForbidden(err):
		return apiError(fmt.Errorf("listing IPHistories is forbidden: %w; ask for list on %s, which the ClusterRole podtoip-controller-view grants", err, history.CRDName))
	case apierrors.IsNotFound(err):
		return apiError(fmt.Errorf("the API server does not serve IPHistory (%w): %s with the history on", err, installHint))
	}
	return apiError(explainCommon(fmt.Errorf("listing IPHistories: %w", err)))
}

// listPages lists a cluster-scoped resource listPage objects at a time.
func (c *client) listPages(ctx context.Context, gvr schema.GroupVersionResource, each func(*unstructured.Unstructured) error) error {
	opts := metav1.ListOptions{Limit: listPage}
	for {
		list, err := c.dyn.Resource(gvr).List(ctx, opts)
		if err != nil {
			return err
		}
		for i := range list.Items {
			if err := each(&list.Items[i]); err != nil {
				return err
			}
		}
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return nil
		}
	}
}

// loadCurrent labels the Nodes' InternalIPs and the Services' ClusterIPs
// (IPAddress objects, networking.k8s.io/v1). They are a convenience, not
// evidence: what cannot be read is a note, not an error.
func (c *client) loadCurrent(ctx context.Context, b *enrich.Builder, notes io.Writer) {
	err := c.listPages(ctx, nodeResource, func(u *unstructured.Unstructured) error {
		addrs, _, _ := unstructured.NestedSlice(u.Object, "status", "addresses")
		for _, a := range addrs {
			m, _ := a.(map[string]any)
			if m["type"] == "InternalIP" {
				s, _ := m["address"].(string)
				b.AddCurrent(s, "node/"+u.GetName())
			}
		}
		return nil
	})
	if err != nil {
		fmt.Fprintf(notes, "note: Nodes' addresses are not labelled: listing Nodes: %v\n", err)
	}
	err = c.listPages(ctx, ipAddressResource, func(u *unstructured.Unstructured) error {
		addIPAddress(b, u.GetName(), u.Object)
		return nil
	})
	if err != nil {
		fmt.Fprintf(notes, "note: Services' ClusterIPs are not labelled: listing IPAddresses (networking.k8s.io/v1): %v\n", err)
	}
}

// addIPAddress labels the address an IPAddress names with its Service.
func addIPAddress(b *enrich.Builder, name string, obj map[string]any) {
	ref, _, _ := unstructured.NestedStringMap(obj, "spec", "parentRef")
	if ref["resource"] == "services" && ref["group"] == "" {
		b.AddCurrent(name, "service/"+ref["namespace"]+"/"+ref["name"])
	}
}

// loadFiles reads --history-file: one saved list (loadFile), or exported
// files (loadExports); a directory stands for the files in it.
func loadFiles(paths []string, namespace string, notes io.Writer) (*enrich.Builder, time.Time, error) {
	var files, exports []string
	for _, p := range paths {
		names := []string{p}
		if st, err := os.Stat(p); err != nil {
			return nil, time.Time{}, usageErrorf("--history-file: %w", err)
		} else if st.IsDir() {
			entries, err := os.ReadDir(p)
			if err != nil {
				return nil, time.Time{}, usageErrorf("--history-file: %w", err)
			}
			names = names[:0]
			for _, e := range entries {
				if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") { // .*.tmp: a run in progress
					names = append(names, filepath.Join(p, e.Name()))
				}
			}
		}
		for _, name := range names {
			head, err := fileHead(name)
			switch {
			case err != nil:
				return nil, time.Time{}, usageErrorf("--history-file: %w", err)
			case len(head) == 0:
				continue // an export's table without rows
			case len(names) > 1 && export.IsState(head):
				continue // the state of the runs that wrote the directory
			case bytes.HasPrefix(head, []byte("cluster,")):
				return nil, time.Time{}, usageErrorf("--history-file %s: a CSV export cannot be read back (its types are not in it): export with -o parquet or -o jsonl", name)
			}
			if export.IsExport(head) {
				exports = append(exports, name)
			} else {
				files = append(files, name)
			}
		}
	}
	switch {
	case len(exports) == 0 && len(files) == 0:
		return nil, time.Time{}, usageErrorf("--history-file %s: every file is empty", strings.Join(paths, ", "))
	case len(exports) == 0 && len(files) == 1:
		return loadFile(files[0], namespace, notes)
	case len(exports) == 0:
		return nil, time.Time{}, usageErrorf("--history-file: %d saved lists (%s): give one, or the files of 'kubectl ptp export -o parquet|jsonl'", len(files), strings.Join(files, ", "))
	case len(files) > 0:
		return nil, time.Time{}, usageErrorf("--history-file %s: neither Parquet nor JSON lines of 'kubectl ptp export', and a saved list cannot be mixed with exported files", files[0])
	}
	return loadExports(exports, namespace, notes)
}

func fileHead(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	head := make([]byte, 16)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return head[:n], nil
}

// loadExports reads the files of 'kubectl ptp export': every coverage row
// first, then the holds and gaps, as the cluster is read. They must be of
// one cluster: the holds of two clusters' addresses are not one history.
// The time returned is zero: the coverage rows already start no earlier
// than an address without holds answers for.
func loadExports(paths []string, namespace string, notes io.Writer) (*enrich.Builder, time.Time, error) {
	var covs []export.Coverage
	clusters := map[string]bool{}
	for _, p := range paths {
		err := export.Read(p, export.Rows{Coverage: func(c *export.Coverage) {
			covs = append(covs, *c)
			clusters[c.Cluster] = true
		}})
		if err != nil {
			return nil, time.Time{}, usageErrorf("--history-file %w", err)
		}
	}
	if len(clusters) > 1 {
		return nil, time.Time{}, usageErrorf("--history-file: files of %d clusters (%s): enrich answers from one cluster's history at a time; give the files of one", len(clusters), strings.Join(slices.Sorted(maps.Keys(clusters)), ", "))
	}
	b := enrich.NewExportBuilder(namespace, covs)
	if b.Coverages() == 0 {
		fmt.Fprintf(notes, "note: --history-file: no coverage rows that vouch for %s: every answer is at most uncertain\n", cmp.Or(namespace, "every namespace"))
	}
	var other string
	for _, p := range paths {
		err := export.Read(p, export.Rows{
			Hold: func(h *export.Hold) {
				if len(clusters) > 0 && !clusters[h.Cluster] {
					other = h.Cluster
				}
				b.AddExportedHold(h)
			},
			Gap: func(g *export.Gap) {
				if len(clusters) > 0 && !clusters[g.Cluster] {
					other = g.Cluster
				}
				b.AddExportedGap(g)
			},
		})
		if err != nil {
			return nil, time.Time{}, usageErrorf("--history-file %w", err)
		}
		if other != "" {
			return nil, time.Time{}, usageErrorf("--history-file %s: rows of cluster %q, where the coverage rows are of another: give the files of one cluster", p, other)
		}
	}
	return b, time.Time{}, nil
}

// loadFile reads a saved list, as `kubectl get iphc,iph -o json` writes
// it, one item at a time: the coverages must come before the IPHistories
// (they were read first, so what they vouch for is in them); a coverage
// after one is not trusted. Nodes and IPAddresses in it label addresses
// as at the time of the snapshot. The file's modification time stands for
// when it was read: no later than that.
func loadFile(path, namespace string, notes io.Writer) (*enrich.Builder, time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, time.Time{}, usageErrorf("--history-file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, time.Time{}, usageErrorf("--history-file: %w", err)
	}
	var covs []*history.IPHistoryCoverage
	var b *enrich.Builder
	late, n := 0, 0
	start := func() {
		if b == nil {
			b = enrich.NewBuilder(namespace, covs)
		}
	}
	err = enrich.ReadSaved(f, func(it *enrich.SavedItem) {
		n++
		switch it.Kind {
		case history.CoverageKind:
			if b != nil {
				late++
				return
			}
			covs = append(covs, &history.IPHistoryCoverage{ObjectMeta: it.Metadata, Namespace: it.Namespace, Retention: it.Retention, Intervals: it.Intervals})
		case history.Kind:
			start()
			h := &history.IPHistory{ObjectMeta: it.Metadata, Address: it.Address, RecordedFrom: it.RecordedFrom, Overflow: it.Overflow, Holders: make([]history.Hold, len(it.Holders))}
			for i := range it.Holders {
				h.Holders[i] = it.Holders[i].Hold()
			}
			b.AddHistory(h)
		case "Node":
			start()
			for _, a := range it.Status.Addresses {
				if a.Type == "InternalIP" {
					b.AddCurrent(a.Address, "node/"+it.Metadata.Name)
				}
			}
		case "IPAddress":
			start()
			if r := it.Spec.ParentRef; r.Group == "" && r.Resource == "services" {
				b.AddCurrent(it.Metadata.Name, "service/"+r.Namespace+"/"+r.Name)
			}
		}
	})
	if err != nil {
		return nil, time.Time{}, usageErrorf("--history-file %s: item %d: %w; save it with 'kubectl get iphc,iph -o json'", path, n+1, err)
	}
	start()
	if late > 0 {
		fmt.Fprintf(notes, "note: --history-file %s: %d IPHistoryCoverage item(s) after the IPHistories are not trusted (read after them, they may vouch for writes the IPHistories miss): save with 'kubectl get iphc,iph -o json', coverages first\n", path, late)
	}
	if b.Coverages() == 0 {
		fmt.Fprintf(notes, "note: --history-file %s has no IPHistoryCoverage %s before its IPHistories: every answer is at most uncertain; save with 'kubectl get iphc,iph -o json'\n", path, coverageNames(namespace))
	}
	return b, st.ModTime(), nil
}

func coverageNames(namespace string) string {
	if namespace == "" {
		return history.CoverageName("")
	}
	return history.CoverageName("") + " or " + history.CoverageName(namespace)
}

// loadTrail adds the closed holds of trail lines: the controller's JSON
// log lines "PodToIp trail" whose event is released or changed, with
// heldFrom, each a hold from heldFrom to observed. Other lines are
// skipped.
func loadTrail(b *enrich.Builder, path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, usageErrorf("--trail: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	holds := 0
	for sc.Scan() {
		var l struct {
			Msg string `json:"msg"`
			Pod struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"pod"`
			Event    string            `json:"event"`
			PodUID   string            `json:"podUID"`
			Node     string            `json:"node"`
			HeldFrom map[string]string `json:"heldFrom"`
			Observed string            `json:"observed"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Msg != trail.Message || (l.Event != trail.Released && l.Event != trail.Changed) {
			continue
		}
		to, err := time.Parse(time.RFC3339Nano, l.Observed)
		if err != nil {
			continue
		}
		p := enrich.Pod{Namespace: l.Pod.Namespace, Name: l.Pod.Name, UID: types.UID(l.PodUID), Node: l.Node}
		for a, s := range l.HeldFrom {
			if from, err := time.Parse(time.RFC3339Nano, s); err == nil {
				b.AddTrail(a, p, from, to)
				holds++
			}
		}
	}
	if err := sc.Err(); err != nil {
		return holds, usageErrorf("--trail %s: %w", path, err)
	}
	return holds, nil
}
