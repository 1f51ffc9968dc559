package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

var historyResource = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "iphistories"}

// historyName is the name of the IPHistory of a canonical address (its
// own copy of the rule in docs/history.md: the baseline writes histories
// as the controller does, without its code): IPv4
// as written, IPv6 with every ':' as '-' and a '0' where the name would
// start or end with '-'.
func historyName(addr string) string {
	if netip.MustParseAddr(addr).Is4() {
		return addr
	}
	name := strings.ReplaceAll(addr, ":", "-")
	if strings.HasPrefix(name, "-") {
		name = "0" + name
	}
	if strings.HasSuffix(name, "-") {
		name += "0"
	}
	return name
}

// historyJSON is the IPHistory the controller creates when p starts to hold
// addr at from: one open hold.
func (p benchPod) historyJSON(apiVersion, addr string, from time.Time) []byte {
	since := from.UTC().Format(time.RFC3339)
	obj := map[string]any{
		"apiVersion": apiVersion,
		"kind":       "IPHistory",
		"metadata": map[string]any{
			"name":   historyName(addr),
			"labels": map[string]string{managedBy: controllerName},
		},
		"address": addr,
		"holders": []map[string]any{{
			"namespace": benchNamespace, "pod": p.name, "podUID": string(p.uid), "node": p.node, "from": since,
		}},
		"holder": benchNamespace + "/" + p.name,
		"since":  since,
		"holds":  1,
	}
	b, _ := json.Marshal(obj)
	return b
}

// historyObserver follows every IPHistory through an informer and keeps how
// many exist and how many holds are open, with the time of the event that
// last changed either: a phase that waits for a count reads when it was
// reached, not when it polled.
type historyObserver struct {
	mu      sync.Mutex
	open    map[string]int // holds without an end, by object name
	objects map[string]*unstructured.Unstructured
	openAll int
	lastAt  time.Time
}

func startHistoryObserver(ctx context.Context, client dynamic.Interface) (*historyObserver, error) {
	o := &historyObserver{open: map[string]int{}, objects: map[string]*unstructured.Unstructured{}}
	res := client.Resource(historyResource)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return res.List(ctx, opts)
		},
		WatchFuncWithContext: res.Watch,
	}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &unstructured.Unstructured{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { o.set(obj.(*unstructured.Unstructured)) },
			UpdateFunc: func(_, obj any) { o.set(obj.(*unstructured.Unstructured)) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				if u, ok := obj.(*unstructured.Unstructured); ok {
					o.remove(u.GetName())
				}
			},
		},
	})
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil, fmt.Errorf("IPHistory informer did not sync: %w", ctx.Err())
	}
	return o, nil
}

func (o *historyObserver) set(u *unstructured.Unstructured) {
	holders, _, _ := unstructured.NestedSlice(u.Object, "holders")
	open := 0
	for _, h := range holders {
		if m, ok := h.(map[string]any); ok && m["to"] == nil {
			open++
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.openAll += open - o.open[u.GetName()]
	o.open[u.GetName()] = open
	o.objects[u.GetName()] = u
	o.lastAt = time.Now()
}

func (o *historyObserver) remove(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.openAll -= o.open[name]
	delete(o.open, name)
	delete(o.objects, name)
	o.lastAt = time.Now()
}

// waitFor polls until cond holds of (objects, open holds) and returns the
// time of the event that made it hold.
func (o *historyObserver) waitFor(ctx context.Context, cond func(objects, open int) bool) (time.Time, error) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		o.mu.Lock()
		ok, at, objects, open := cond(len(o.objects), o.openAll), o.lastAt, len(o.objects), o.openAll
		o.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%w (IPHistories: %d, open holds: %d)", ctx.Err(), objects, open)
		case <-t.C:
		}
	}
}

// size is the number of IPHistories and the bytes of their JSON, as the
// API server stores custom resources.
func (o *historyObserver) size() (objects int, bytes int64, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, u := range o.objects {
		b, err := json.Marshal(u.Object)
		if err != nil {
			return 0, 0, err
		}
		bytes += int64(len(b))
	}
	return len(o.objects), bytes, nil
}
