package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"example.com/podtoip-controller/internal/enrich"
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

// savedItem is an item of a saved list, decoded once whatever its kind:
// the fields of IPHistory, IPHistoryCoverage, Node and IPAddress that
// enrich reads.
type savedItem struct {
	Kind     string            `json:"kind"`
	Metadata metav1.ObjectMeta `json:"metadata"`
	// IPHistory
	Address      string            `json:"address"`
	Holders      []savedHold       `json:"holders"`
	RecordedFrom *metav1.Time      `json:"recordedFrom"`
	Overflow     *history.Overflow `json:"overflow"`
	// IPHistoryCoverage
	Namespace string             `json:"namespace"`
	Retention metav1.Duration    `json:"retention"`
	Intervals []history.Interval `json:"intervals"`
	// Node
	Status struct {
		Addresses []struct{ Type, Address string } `json:"addresses"`
	} `json:"status"`
	// IPAddress
	Spec struct {
		ParentRef struct{ Group, Resource, Namespace, Name string } `json:"parentRef"`
	} `json:"spec"`
}

// savedHold is a history.Hold whose times are parsed in one step:
// metav1.Time decodes a JSON string and then parses it, and a saved
// history has three times for every hold.
type savedHold struct {
	Namespace, Pod, Node          string
	PodUID                        types.UID `json:"podUID"`
	From                          stamp
	To, EndedAfter, StartedBefore *stamp
}

func (h *savedHold) hold() history.Hold {
	return history.Hold{Namespace: h.Namespace, Pod: h.Pod, PodUID: h.PodUID, Node: h.Node, From: metav1.Time(h.From),
		To: h.To.time(), EndedAfter: h.EndedAfter.time(), StartedBefore: h.StartedBefore.time()}
}

// stamp is a time as the API writes it, RFC 3339.
type stamp metav1.Time

func (s *stamp) UnmarshalJSON(b []byte) error {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return fmt.Errorf("time %s is not an RFC 3339 string", b)
	}
	t, err := time.Parse(time.RFC3339, string(b[1:len(b)-1]))
	s.Time = t
	return err
}

func (s *stamp) time() *metav1.Time {
	if s == nil {
		return nil
	}
	t := metav1.Time(*s)
	return &t
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
	err = eachItem(f, func(it *savedItem) {
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
				h.Holders[i] = it.Holders[i].hold()
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

// eachItem calls each with every item of a List, decoding one at a time,
// or with the one object the file holds. A List is framed by scanList;
// what it does not frame is read again from the start by decodeList.
func eachItem(f io.ReadSeeker, each func(*savedItem)) error {
	r := bufio.NewReaderSize(f, 1<<20)
	if err := scanList(r, each); !errors.Is(err, errNotScanned) {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	r.Reset(f)
	return decodeList(r, each)
}

// decodeList is eachItem the standard way, token by token.
func decodeList(r io.Reader, each func(*savedItem)) error {
	d := json.NewDecoder(r)
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return fmt.Errorf("not a JSON object (%v)", err)
	}
	var single map[string]json.RawMessage
	listed := false
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		if tok != "items" {
			var v json.RawMessage
			if err := d.Decode(&v); err != nil {
				return err
			}
			if single == nil {
				single = map[string]json.RawMessage{}
			}
			single[tok.(string)] = v
			continue
		}
		if tok, err := d.Token(); err != nil || tok != json.Delim('[') {
			return fmt.Errorf("items is not a list (%v)", err)
		}
		listed = true
		next := func() ([]byte, error) {
			if !d.More() {
				return nil, io.EOF
			}
			var raw json.RawMessage
			err := d.Decode(&raw)
			return raw, err
		}
		if err := decodeItems(next, each); err != nil {
			return err
		}
		if _, err := d.Token(); err != nil {
			return err
		}
	}
	if _, ok := single["kind"]; ok && !listed {
		raw, err := json.Marshal(single)
		if err != nil {
			return err
		}
		var it savedItem
		if err := decodeItem(raw, &it); err != nil {
			return err
		}
		each(&it)
	}
	return nil
}

// itemBatch is a run of a list's items: read by one goroutine, decoded by
// another, handed on in order. The first item that cannot be read
// (readErr) or decoded (err) ends it: items holds those before it.
type itemBatch struct {
	raw          [][]byte
	items        []savedItem
	readErr, err error
	done         chan struct{}
}

// decodeItems calls each with the items next returns, in order, up to
// the first that cannot be read (next's error; io.EOF after the last).
// Decoding an item into its type is most of the work of reading a saved
// history, and items depend on no other: one goroutine reads them, as
// many as there are cores decode them, in batches.
func decodeItems(next func() ([]byte, error), each func(*savedItem)) error {
	const batchSize = 64
	workers := goruntime.GOMAXPROCS(0)
	work, order := make(chan *itemBatch, workers), make(chan *itemBatch, 2*workers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for b := range work {
				b.items = make([]savedItem, 0, len(b.raw))
				for i := range b.raw {
					var it savedItem
					if b.err = decodeItem(b.raw[i], &it); b.err != nil {
						break
					}
					b.items = append(b.items, it)
				}
				close(b.done)
			}
		})
	}
	defer wg.Wait()
	go func() {
		defer close(work)
		defer close(order)
		for last := false; !last; {
			b := &itemBatch{done: make(chan struct{})}
			for len(b.raw) < batchSize && !last {
				raw, err := next()
				switch {
				case errors.Is(err, io.EOF):
					last = true
				case err != nil:
					b.readErr, last = err, true
				default:
					b.raw = append(b.raw, raw)
				}
			}
			select {
			case order <- b:
			case <-stop:
				return
			}
			work <- b
		}
	}()
	defer close(stop)
	for b := range order {
		<-b.done
		for i := range b.items {
			each(&b.items[i])
		}
		if b.err != nil {
			return b.err
		}
		if b.readErr != nil {
			return b.readErr
		}
	}
	return nil
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
