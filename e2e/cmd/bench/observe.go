package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"
)

// observed is what the benchmark reads from each PodToIp watch event: just
// enough to judge a mirror, decoded with the standard library so the
// observer costs the machine as little as possible.
type observed struct {
	Metadata struct {
		Name            string `json:"name"`
		Namespace       string `json:"namespace"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	PodUID     string   `json:"podUID"`
	PodAddress string   `json:"podAddress"`
	PodIPs     []string `json:"podIPs"`
	NodeName   string   `json:"nodeName"`
}

// want is what a pod's mirror must say.
type want struct {
	uid, node string
	ips       []string
}

func (w want) matches(o observed) bool {
	return o.PodUID == w.uid && o.NodeName == w.node && len(w.ips) > 0 &&
		o.PodAddress == w.ips[0] && slices.Equal(o.PodIPs, w.ips)
}

// observer follows every PodToIp through one watch and keeps, under a lock,
// the current objects, how many of them match the desired state, and when
// each awaited address was first seen. Waiters are woken on every event.
type observer struct {
	client *http.Client
	host   string

	mu      sync.Mutex
	cur     map[string]observed
	want    map[string]want
	matched int
	// awaited maps "ns/name|ip" to the time that address was first seen on
	// the mirror (zero until then).
	awaited map[string]time.Time
	events  int
	lastAt  time.Time // when the latest event arrived
	rv      string
	// ended counts the watches the server ended (each is resumed): the
	// API server's count of watches ended for slow reading includes the
	// benchmark's own, which this tells apart from the controller's.
	ended int
	wake  chan struct{}
	err   error
}

func newObserver(client *http.Client, host string) *observer {
	return &observer{
		client: client, host: host,
		cur: map[string]observed{}, want: map[string]want{}, awaited: map[string]time.Time{},
		wake: make(chan struct{}, 1),
	}
}

// start lists to learn the current resourceVersion (and objects), then
// follows the watch until ctx ends, resuming from the last version seen if
// the server closes it.
func (o *observer) start(ctx context.Context) error {
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []observed `json:"items"`
	}
	resp, err := o.client.Get(o.host + "/apis/example.com/v1/podtoips")
	if err != nil {
		return fmt.Errorf("listing PodToIps: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("listing PodToIps: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return fmt.Errorf("decoding PodToIp list: %w", err)
	}
	o.mu.Lock()
	for _, item := range list.Items {
		o.cur[key(item.Metadata.Namespace, item.Metadata.Name)] = item
	}
	o.rv = list.Metadata.ResourceVersion
	o.mu.Unlock()
	go o.follow(ctx)
	return nil
}

func key(ns, name string) string { return ns + "/" + name }

func (o *observer) follow(ctx context.Context) {
	for ctx.Err() == nil {
		err := o.watchOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			o.mu.Lock()
			o.err = err
			o.mu.Unlock()
			o.notify()
			return
		}
	}
}

func (o *observer) watchOnce(ctx context.Context) error {
	o.mu.Lock()
	rv := o.rv
	o.mu.Unlock()
	q := url.Values{"watch": {"true"}, "resourceVersion": {rv}, "timeoutSeconds": {"3600"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.host+"/apis/example.com/v1/podtoips?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return fmt.Errorf("watching PodToIps: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("watching PodToIps: %s", resp.Status)
	}
	dec := json.NewDecoder(bufio.NewReaderSize(resp.Body, 64<<10))
	for {
		var ev struct {
			Type   string   `json:"type"`
			Object observed `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			o.mu.Lock()
			o.ended++
			o.mu.Unlock()
			return nil // the server ended the watch; resume from o.rv
		}
		if ev.Type == "ERROR" {
			return fmt.Errorf("watch error event (the benchmark's watch expired: the run was too slow)")
		}
		o.apply(ev.Type, ev.Object, time.Now())
	}
}

// watchesEnded is how many of the observer's watches the server has ended.
func (o *observer) watchesEnded() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ended
}

// apply records one event.
func (o *observer) apply(typ string, obj observed, at time.Time) {
	k := key(obj.Metadata.Namespace, obj.Metadata.Name)
	o.mu.Lock()
	w, wanted := o.want[k]
	before, had := o.cur[k]
	if wanted && had && w.matches(before) {
		o.matched--
	}
	if typ == "DELETED" {
		delete(o.cur, k)
	} else {
		o.cur[k] = obj
		if wanted && w.matches(obj) {
			o.matched++
		}
		ak := k + "|" + obj.PodAddress
		if t, ok := o.awaited[ak]; ok && t.IsZero() {
			o.awaited[ak] = at
		}
	}
	o.rv = obj.Metadata.ResourceVersion
	o.events++
	o.lastAt = at
	o.mu.Unlock()
	o.notify()
}

func (o *observer) notify() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// setWant declares what a pod's mirror must say, keeping the match count
// right for what is already observed.
func (o *observer) setWant(k string, w want) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if cur, ok := o.cur[k]; ok {
		if old, ok := o.want[k]; ok && old.matches(cur) {
			o.matched--
		}
		if w.matches(cur) {
			o.matched++
		}
	}
	o.want[k] = w
}

// await registers an address to time its first appearance on k's mirror.
func (o *observer) await(k, ip string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.awaited[k+"|"+ip]; !ok {
		o.awaited[k+"|"+ip] = time.Time{}
	}
}

// seenAt returns when ip was first seen on k's mirror (zero if not yet).
func (o *observer) seenAt(k, ip string) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.awaited[k+"|"+ip]
}

// waitFor blocks until cond (called under the lock) holds, the watch fails
// or ctx ends. It returns the arrival time of the event that made cond hold
// (the latest event), which is more precise than the waiter's wake-up.
func (o *observer) waitFor(ctx context.Context, cond func(*observer) bool) (time.Time, error) {
	for {
		o.mu.Lock()
		ok, err, at := cond(o), o.err, o.lastAt
		o.mu.Unlock()
		if ok {
			return at, nil
		}
		if err != nil {
			return time.Time{}, err
		}
		select {
		case <-o.wake:
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}
