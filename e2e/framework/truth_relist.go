package framework

// The forced relist of TestHistoryTruth: the resourceVersion the
// replicas' watches hold is compacted away, so that a watch resumed from it
// ends with 410 Gone and the informer lists again, learning what changed
// meanwhile from the objects' last versions only.

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// watchExpiry answers, in front of the WriteRelay's transport, every watch
// that resumes from a resourceVersion below the compacted revision with
// what the API server answers when it cannot serve it: 410 Gone, reason
// Expired, "too old resource version". The API server's own watch cache
// keeps 75 s of events whatever etcd has compacted (so compaction alone
// expires no watch: TestFaultNetworkExpiredWatches restarts the API
// server for that), and a restart would break every other client of the
// shared cluster, the truth's own watch included; the relay stands for
// the restarted API server, for the replicas only.
type watchExpiry struct {
	next  http.RoundTripper
	below atomic.Int64

	mu      sync.Mutex
	expired []ExpiredWatch
}

// ExpiredWatch is one watch answered 410 Gone.
type ExpiredWatch struct {
	At   time.Time `json:"at"`
	Path string    `json:"path"`
	RV   int64     `json:"rv"`
}

func (w *watchExpiry) RoundTrip(req *http.Request) (*http.Response, error) {
	below := w.below.Load()
	if below <= 0 || req.Method != http.MethodGet {
		return w.next.RoundTrip(req)
	}
	q := req.URL.Query()
	if q.Get("watch") != "true" && q.Get("watch") != "1" || q.Get("sendInitialEvents") == "true" {
		return w.next.RoundTrip(req)
	}
	rv, err := strconv.ParseInt(q.Get("resourceVersion"), 10, 64)
	if err != nil || rv <= 0 || rv >= below {
		return w.next.RoundTrip(req)
	}
	w.mu.Lock()
	w.expired = append(w.expired, ExpiredWatch{At: time.Now(), Path: req.URL.Path, RV: rv})
	w.mu.Unlock()
	body := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: %d (%d)","reason":"Expired","code":410}`, rv, below)
	return &http.Response{
		StatusCode: http.StatusGone, Status: "410 Gone", Proto: req.Proto, ProtoMajor: req.ProtoMajor, ProtoMinor: req.ProtoMinor,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}, nil
}

// installWatchExpiry puts a watchExpiry in front of the WriteRelay's
// transport. Call it before any client uses the relay.
func (r *WriteRelay) installWatchExpiry() (*watchExpiry, error) {
	proxy, ok := r.srv.Config.Handler.(*httputil.ReverseProxy)
	if !ok {
		return nil, fmt.Errorf("the WriteRelay's handler is a %T, not a reverse proxy", r.srv.Config.Handler)
	}
	w := &watchExpiry{next: proxy.Transport}
	proxy.Transport = w
	return w, nil
}

// ExpireWatches makes every watch the replicas resume from a
// resourceVersion below rev end with 410 Gone, as after a compaction at rev
// and a restart of the API server; 0 stops it.
func (r *TruthRelays) ExpireWatches(rev int64) {
	r.expiry.below.Store(rev)
}

// Expired returns the watches answered 410 Gone so far.
func (r *TruthRelays) Expired() []ExpiredWatch {
	r.expiry.mu.Lock()
	defer r.expiry.mu.Unlock()
	return append([]ExpiredWatch(nil), r.expiry.expired...)
}

// podWatch reports whether path is a watch of pods (every namespace's, or
// one's).
func podWatch(path string) bool {
	return path == "/api/v1/pods" || strings.HasPrefix(path, "/api/v1/namespaces/") && strings.HasSuffix(path, "/pods")
}

// ExpiredPodWatches counts the pod watches among Expired.
func (r *TruthRelays) ExpiredPodWatches() int {
	n := 0
	for _, w := range r.Expired() {
		if podWatch(w.Path) {
			n++
		}
	}
	return n
}
