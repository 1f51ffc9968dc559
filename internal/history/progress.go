package history

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Progress follows how far the pod handlers have got through what the
// API server sent. The history may say "every pod change before T is
// recorded" only once every change made before T has reached the handlers:
// a pod watch that lags (or stalls while the lease is still renewed) would
// otherwise let it vouch for changes it has not seen. So it counts what the
// informer is given (list items, watch events) and what the handlers have
// processed, and keeps the highest resourceVersion the informer was given
// (bookmarks included): when that reaches the resourceVersion of a
// consistent read made at T, and the handlers have processed everything
// given until then, every change before T has been handled.
//
// Counts are compared, not resourceVersions of objects, because a relist
// hands the informer objects in key order. Only what reaches the store
// counts: the items of a list once its last page arrived, the initial
// events of a streaming list once their end was marked; a list cut short
// is never stored, and counting it would stall the proof for good.
type Progress struct {
	mu sync.Mutex
	// rv is the highest resourceVersion given to the informer: of a list,
	// an event or a bookmark.
	rv uint64
	// delivered counts the objects given to the informer that its handlers
	// will see once each.
	delivered uint64
	// handled counts the objects the pod handlers have processed.
	handled atomic.Uint64
	// epoch counts the lists given to the informer (its initial one, and
	// each relist after a watch broke off), the last one at listedAt. A
	// relist hands over the pods as they are: those that came and went
	// since the watch broke off are not in it.
	epoch    uint64
	listedAt time.Time
	// listRV is the resourceVersion of the last list: the objects it gave
	// carry their last version, not that of the change they show, and
	// every later watch event has a higher one (see FromList).
	listRV uint64
	// now is the clock of listedAt; nil: time.Now.
	now func() time.Time
}

// Wrap returns lw with its lists and watches followed by p; p nil: lw.
func (p *Progress) Wrap(lw *cache.ListWatch) *cache.ListWatch {
	if p == nil {
		return lw
	}
	list, watchFn := lw.ListWithContextFunc, lw.WatchFuncWithContext
	var pages uint64 // items of the list being paged in
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			obj, err := list(ctx, opts)
			if err != nil {
				return obj, err
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			if opts.Continue == "" {
				pages = 0 // a new list: a cut one before it was never stored
			}
			pages += uint64(meta.LenList(obj))
			if m, err := meta.ListAccessor(obj); err == nil && m.GetContinue() == "" {
				p.delivered, pages = p.delivered+pages, 0
				p.epoch, p.listedAt = p.epoch+1, p.clock()
				p.advance(m.GetResourceVersion())
				p.listRV = parseRV(m.GetResourceVersion())
			}
			return obj, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			initial := opts.SendInitialEvents != nil && *opts.SendInitialEvents
			if !initial {
				// kube-apiserver sends a watch's bookmark two seconds before
				// its timeout, else once a minute: a short watch shows
				// within seconds that the informer has caught up when no
				// pod changes (the reflector starts the next one from
				// where this one ended). An initial list may take longer.
				timeout := int64(watchTimeout / time.Second)
				opts.TimeoutSeconds = &timeout
			}
			w, err := watchFn(ctx, opts)
			if err != nil {
				return w, err
			}
			var pending uint64
			return newRelay(w, watchTimeout, func(e watch.Event) (ended bool) {
				p.mu.Lock()
				defer p.mu.Unlock()
				m, err := meta.Accessor(e.Object)
				if err != nil {
					return false // an error event: the reflector handles it
				}
				switch e.Type {
				case watch.Added, watch.Modified, watch.Deleted:
					if initial {
						pending++
						return false
					}
					p.delivered++
				case watch.Bookmark:
					if initial && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
						p.delivered, pending, initial = p.delivered+pending, 0, false
						p.epoch, p.listedAt = p.epoch+1, p.clock()
						p.listRV = parseRV(m.GetResourceVersion())
						ended = true
					} else if initial {
						return false
					}
				default:
					return false
				}
				p.advance(m.GetResourceVersion())
				return ended
			}), nil
		},
	}
}

// relay passes a pod watch's events through see, and ends its stream
// after (watchTimeout) once see reports the end of a watch list's initial
// events: the stream would go on for the server's usual watch length,
// with a bookmark once a minute, where every later pod watch is short.
// It ends the stream as the server ends a watch that timed out, by closing
// it, so the reflector goes on with a new watch from where it stopped;
// stopping the source watch instead could hand the reflector the error of
// a read cut short, and it would list everything again.
type relay struct {
	src    watch.Interface
	after  time.Duration
	result chan watch.Event
	done   chan struct{}
	once   sync.Once
}

func newRelay(src watch.Interface, after time.Duration, see func(watch.Event) (ended bool)) *relay {
	r := &relay{src: src, after: after, result: make(chan watch.Event), done: make(chan struct{})}
	go r.run(see)
	return r
}

func (r *relay) run(see func(watch.Event) (ended bool)) {
	defer close(r.result)
	defer r.src.Stop()
	var end <-chan time.Time
	for {
		select {
		case e, ok := <-r.src.ResultChan():
			if !ok {
				return
			}
			if see(e) {
				end = time.After(r.after)
			}
			select {
			case r.result <- e:
			case <-r.done:
				return
			}
		case <-end:
			return
		case <-r.done:
			return
		}
	}
}

func (r *relay) Stop() { r.once.Do(func() { close(r.done) }) }

func (r *relay) ResultChan() <-chan watch.Event { return r.result }

// watchTimeout is how long each pod watch after the initial list lasts:
// its bookmark comes two seconds before it ends (see Wrap).
const watchTimeout = 6 * time.Second

// advance raises rv to the resourceVersion s. Kubernetes resourceVersions
// are etcd revisions, compared as integers (apimachinery's
// CompareResourceVersion does the same); one that is not counts as none.
func (p *Progress) advance(s string) {
	if v := parseRV(s); v > p.rv {
		p.rv = v
	}
}

// parseRV returns the resourceVersion s as a number, 0 if it is none.
func parseRV(s string) uint64 {
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}

// FromList reports whether an object of resourceVersion rv that the
// handlers are given may come from a list rather than a watch event: its
// version is not above the last list's. A list (after a watch that ended
// with 410 Gone, say) shows each pod as it is, carrying its latest
// version, so the version does not date the change the handlers see: a
// pod that let go of an address may have been edited since. An event
// still queued from the watch before the list counts too, which only
// loosens its bound. Without a list yet, nothing is.
func (p *Progress) FromList(rv string) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.epoch > 0 && parseRV(rv) <= p.listRV
}

func (p *Progress) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

// lastList returns how many lists the informer was given, and when the
// last one was.
func (p *Progress) lastList() (uint64, time.Time) {
	if p == nil {
		return 0, time.Time{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.epoch, p.listedAt
}

// listed returns how many lists the informer was given.
func (p *Progress) listed() uint64 {
	n, _ := p.lastList()
	return n
}

// HandledOne counts an object the pod handlers processed; the handlers
// call it last, so that what they noted is in place when it counts.
func (p *Progress) HandledOne() {
	if p != nil {
		p.handled.Add(1)
	}
}

// caughtUp waits until the handlers have processed every object the
// informer was given up to the resourceVersion rv, polling every period,
// and reports false if ctx ends first. Without a p, nothing is proven.
func (p *Progress) caughtUp(ctx context.Context, rv string, period time.Duration) bool {
	target, err := strconv.ParseUint(rv, 10, 64)
	if p == nil || err != nil {
		return false
	}
	t := time.NewTicker(period)
	defer t.Stop()
	var need uint64
	reached := false
	for {
		if !reached {
			p.mu.Lock()
			if p.rv >= target {
				reached, need = true, p.delivered
			}
			p.mu.Unlock()
		}
		if reached && p.handled.Load() >= need {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}
