package serving

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// Secure is how the metrics endpoint is protected: HTTPS, and every request
// authenticated (TokenReview) and authorized (SubjectAccessReview) by the
// API server, as kube-controller-manager protects its secure port, with
// k8s.io/apiserver's delegating authenticator and authorizer and their
// caches.
type Secure struct {
	// CertFile and KeyFile hold the serving certificate, reloaded when
	// they change; empty: a self-signed certificate made at start.
	CertFile, KeyFile string
	// Config is the process's client configuration. The reviews are made
	// with a copy that has a rate limiter of its own (reviewConfig).
	Config *rest.Config
}

// The delegating authenticator's and authorizer's settings, as
// kube-controller-manager's defaults: answers are cached so that a scrape
// every few seconds costs the API server one review per TTL, not one per
// scrape.
const (
	tokenCacheTTL  = 10 * time.Second
	allowCacheTTL  = 10 * time.Second
	denyCacheTTL   = 10 * time.Second
	reviewTimeout  = 10 * time.Second
	selfSignedHost = "podtoip-controller"
)

// What a caller the API server has not vouched for can cost. Anyone who
// reaches the port can send a token, and each new token is a TokenReview:
// without bounds, a flood of made-up tokens would spend the controller's
// API budget (and the API server's time) on reviews instead of on the
// mirrors' writes.
const (
	// reviewQPS and reviewBurst limit the reviews' own client. A few
	// scrapers whose answers are cached for 10 s need a review every few
	// seconds. kube-controller-manager's delegated authentication allows
	// 200 (k8s.io/apiserver's default for servers that review every
	// request of their API this way); a tenth of that is plenty here, and
	// keeps a flood from loading the API server too.
	reviewQPS   = 20
	reviewBurst = 40
	// maxInFlightReviews is how many requests whose credentials have not
	// been admitted may be under review at once.
	maxInFlightReviews = 8
	// A request that finds every place taken waits for one, at most one
	// request from each source address at a time and at most
	// maxWaitingSources sources, each for at most maxReviewWait; the
	// others are refused with 429 at once. Places go to the waiters in
	// turn, so a flood from a few addresses, however many tokens it
	// makes up, is one waiter each: a scraper with a token just rotated
	// (never admitted yet) has at most maxWaitingSources requests ahead
	// of it, reviewed at reviewQPS (64 / 20 per second: 3.2 s), inside
	// maxReviewWait and far inside a scrape interval (30 s), where
	// refusing it whenever the places were full kept it out for as long
	// as the flood lasted.
	maxWaitingSources = 64
	maxReviewWait     = 5 * time.Second
	// admittedTTL is how long a token that was admitted (authenticated and
	// authorized) keeps skipping the bound on reviews after its last
	// admission: a scraper keeps being served during a flood. It is still
	// reviewed every tokenCacheTTL, so a revoked token is refused as
	// before; only its exemption from the bound lasts.
	admittedTTL = 15 * time.Minute
	// maxAdmitted bounds the admitted tokens remembered: a handful of
	// scrapers each rotating their token.
	maxAdmitted = 256
	// retryAfterSeconds is the Retry-After of a refused request.
	retryAfterSeconds = "1"
	// requestReadTimeout is how long a request to the metrics endpoint may
	// take to be read, body included; longer than a review may take.
	requestReadTimeout = 30 * time.Second
)

// reviewsThrottledTotal counts the requests refused because the bound on
// reviews was reached.
var reviewsThrottledTotal = metrics.NewCounter(&metrics.CounterOpts{
	Namespace: "podtoip", Subsystem: "controller", Name: "metrics_requests_throttled_total",
	Help: "Requests to the metrics endpoint answered 429 because as many requests with credentials not yet admitted were already under review " +
		"(TokenReview, SubjectAccessReview) as allowed at once, and this one could not wait for a place (another request from its address was waiting, " +
		"too many addresses were, or it waited 5 s). Rising: someone sends the endpoint tokens faster than the API server is asked to review them.",
	StabilityLevel: metrics.ALPHA,
})

var registerOnce sync.Once

func reviewBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
}

// reviewConfig returns a copy of cfg for the reviews, with a rate limiter
// of its own: reviews never wait for, nor take from, the budget of the
// mirrors' writes, whatever --kube-api-qps says (-1 included).
func reviewConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = reviewQPS, reviewBurst
	c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	return c
}

// Handler wraps h: a request without valid credentials gets 401, one whose
// identity may not get the path 403 (the ClusterRole that grants it is
// named in the answer), one beyond the bound on reviews 429, and the rest
// reach h.
func (s Secure) Handler(h http.Handler, role string) (http.Handler, error) {
	kube, err := kubernetes.NewForConfig(reviewConfig(s.Config))
	if err != nil {
		return nil, fmt.Errorf("building the metrics endpoint's review client: %w", err)
	}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		TokenAccessReviewClient:  kube.AuthenticationV1(),
		TokenAccessReviewTimeout: reviewTimeout,
		WebhookRetryBackoff:      reviewBackoff(),
		CacheTTL:                 tokenCacheTTL,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("building the metrics endpoint's authenticator: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: kube.AuthorizationV1(),
		AllowCacheTTL:             allowCacheTTL,
		DenyCacheTTL:              denyCacheTTL,
		WebhookRetryBackoff:       reviewBackoff(),
	}.New()
	if err != nil {
		return nil, fmt.Errorf("building the metrics endpoint's authorizer: %w", err)
	}
	registerOnce.Do(func() { legacyregistry.MustRegister(reviewsThrottledTotal) })
	return guard(authn, authz, newGate(maxInFlightReviews), h, role), nil
}

// guard admits only requests authn authenticates and authz allows. A
// request whose bearer token was admitted recently goes straight to them;
// any other takes a place in g, waiting for one in its source's turn, or
// is refused with 429 if it may not wait.
func guard(authn authenticator.Request, authz authorizer.Authorizer, g *gate, h http.Handler, role string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Nothing here reads a body, and the listener sets no ReadTimeout
		// (for the profiles' sake): a body sent slowly must not hold the
		// connection for ever. (A recorder in tests cannot set one.)
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(requestReadTimeout))
		logger := klog.FromContext(r.Context())
		token := bearerToken(r)
		ar := r
		if !g.admitted(token) {
			if !g.enter(r.Context(), source(r)) {
				reviewsThrottledTotal.Inc()
				w.Header().Set("Retry-After", retryAfterSeconds)
				http.Error(w, "Too many requests awaiting review of their credentials; retry later", http.StatusTooManyRequests)
				return
			}
			defer g.leave()
			// A review is shared by the requests with the same token and
			// outlives a caller that hangs up; waiting for it to end,
			// whatever the caller does, keeps the place taken until then,
			// so callers that hang up at once cannot start reviews beyond
			// the bound.
			ar = r.WithContext(context.WithoutCancel(r.Context()))
		}
		res, ok, err := authn.AuthenticateRequest(ar)
		if err != nil || !ok {
			g.forget(token)
			if reviewFailed(err) {
				// The API server could not review the credentials (the
				// controller may not create TokenReviews, or it is
				// unreachable): an operator must hear of it.
				logger.Error(err, "Could not authenticate a request; the controller needs create on tokenreviews and subjectaccessreviews (artifacts/rbac.yaml)", "path", r.URL.Path, "remote", r.RemoteAddr)
			} else {
				// The API server refused the credentials: anyone can send
				// a made-up token, so this is no news for the operator.
				logger.V(4).Info("Refused a request the API server did not authenticate", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
			}
			http.Error(w, "Unauthorized: send a bearer token the API server accepts (TokenReview)", http.StatusUnauthorized)
			return
		}
		attrs := authorizer.AttributesRecord{User: res.User, Verb: strings.ToLower(r.Method), Path: r.URL.Path}
		decision, reason, err := authz.Authorize(ar.Context(), attrs)
		if decision != authorizer.DecisionAllow {
			g.forget(token)
			logger.V(2).Info("Refused an unauthorized request", "path", r.URL.Path, "user", res.User.GetName(), "reason", reason, "err", err)
			http.Error(w, fmt.Sprintf("Forbidden: user %q may not %s %s; bind the ClusterRole %s to it",
				res.User.GetName(), attrs.Verb, r.URL.Path, role), http.StatusForbidden)
			return
		}
		g.admit(token)
		h.ServeHTTP(w, r)
	})
}

// reviewFailed says whether err is a review that failed (refused, timed
// out, the API server unreachable), rather than the API server's answer
// that the credentials are not valid: that answer comes as a plain error
// made from its message, or as none.
func reviewFailed(err error) bool {
	if err == nil {
		return false
	}
	var agg utilerrors.Aggregate
	if errors.As(err, &agg) {
		return slices.ContainsFunc(agg.Errors(), reviewFailed)
	}
	var status apierrors.APIStatus
	var transport *url.Error
	return errors.As(err, &status) || errors.As(err, &transport) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// bearerToken returns the request's bearer token as the authenticator
// reads it, or "".
func bearerToken(r *http.Request) string {
	parts := strings.SplitN(strings.TrimSpace(r.Header.Get("Authorization")), " ", 3)
	if len(parts) < 2 || !strings.EqualFold(parts[0], "bearer") {
		return ""
	}
	return parts[1]
}

// source is the address a request comes from, without its port: the unit
// in which waiting for a place is shared.
func source(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// gate bounds the requests under review, and remembers the tokens that
// were admitted so that their requests need no place in it: under a flood,
// places are scarce, and a scraper that was served before must not have to
// win one each time.
type gate struct {
	now func() time.Time
	// wait is how long a request may wait for a place (maxReviewWait).
	wait time.Duration

	mu sync.Mutex
	// places is how many requests may be under review, inUse how many are.
	places, inUse int
	// queue holds the requests waiting for a place, first come first
	// served; waiting the sources that have one there.
	queue   []*waiter
	waiting map[string]bool
	// known holds when each admitted token (by its SHA-256: the tokens
	// themselves are not kept) stops skipping the bound.
	known map[[sha256.Size]byte]time.Time
}

// waiter is one request waiting for a place; ready is closed when leave
// hands it one (granted, under the gate's lock).
type waiter struct {
	source  string
	ready   chan struct{}
	granted bool
}

func newGate(places int) *gate {
	return &gate{places: places, now: time.Now, wait: maxReviewWait,
		waiting: map[string]bool{}, known: map[[sha256.Size]byte]time.Time{}}
}

// enter takes a place for a request from src, waiting for one (until ctx
// ends or g.wait has passed) when src has no request waiting already and
// fewer than maxWaitingSources do; false: no place.
func (g *gate) enter(ctx context.Context, src string) bool {
	g.mu.Lock()
	if g.inUse < g.places && len(g.queue) == 0 {
		g.inUse++
		g.mu.Unlock()
		return true
	}
	if g.waiting[src] || len(g.queue) >= maxWaitingSources {
		g.mu.Unlock()
		return false
	}
	w := &waiter{source: src, ready: make(chan struct{})}
	g.queue = append(g.queue, w)
	g.waiting[src] = true
	g.mu.Unlock()

	timer := time.NewTimer(g.wait)
	defer timer.Stop()
	select {
	case <-w.ready:
		return true
	case <-ctx.Done():
	case <-timer.C:
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if w.granted {
		// Handed a place as it gave up: it is this request's to use.
		return true
	}
	g.queue = slices.DeleteFunc(g.queue, func(o *waiter) bool { return o == w })
	delete(g.waiting, src)
	return false
}

// leave gives back the place enter took: to the first waiter, if any.
func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.queue) == 0 {
		g.inUse--
		return
	}
	w := g.queue[0]
	g.queue = g.queue[1:]
	delete(g.waiting, w.source)
	w.granted = true
	close(w.ready)
}

// admitted says whether token was admitted within admittedTTL.
func (g *gate) admitted(token string) bool {
	if token == "" {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	until, ok := g.known[sha256.Sum256([]byte(token))]
	return ok && g.now().Before(until)
}

// admit remembers token as admitted now. When maxAdmitted are remembered,
// the expired ones are dropped, then if need be the one admitted longest
// ago.
func (g *gate) admit(token string) {
	if token == "" {
		return
	}
	key := sha256.Sum256([]byte(token))
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if _, ok := g.known[key]; !ok && len(g.known) >= maxAdmitted {
		var oldest [sha256.Size]byte
		var oldestUntil time.Time
		for k, until := range g.known {
			if !now.Before(until) {
				delete(g.known, k)
				continue
			}
			if oldestUntil.IsZero() || until.Before(oldestUntil) {
				oldest, oldestUntil = k, until
			}
		}
		if len(g.known) >= maxAdmitted {
			delete(g.known, oldest)
		}
	}
	g.known[key] = now.Add(admittedTTL)
}

// forget drops token from the admitted ones: it was refused.
func (g *gate) forget(token string) {
	if token == "" {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.known, sha256.Sum256([]byte(token)))
}

// TLSConfig returns the serving configuration: the certificate files,
// watched and reloaded as they change (a rotation needs no restart), or a
// self-signed certificate made now.
func (s Secure) TLSConfig(ctx context.Context) (*tls.Config, error) {
	var current atomic.Pointer[tls.Certificate]
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return current.Load(), nil
		},
	}
	if s.CertFile == "" && s.KeyFile == "" {
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(selfSignedHost, nil, []string{"localhost"})
		if err != nil {
			return nil, fmt.Errorf("making a self-signed certificate for the metrics endpoint: %w", err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, err
		}
		current.Store(&cert)
		return cfg, nil
	}
	if s.CertFile == "" || s.KeyFile == "" {
		return nil, errors.New("--tls-cert-file and --tls-private-key-file go together: give both, or neither for a self-signed certificate")
	}
	content, err := dynamiccertificates.NewDynamicServingContentFromFiles("metrics serving certificate", s.CertFile, s.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the metrics serving certificate: %w", err)
	}
	load := func() error {
		cert, err := tls.X509KeyPair(content.CurrentCertKeyContent())
		if err != nil {
			return fmt.Errorf("the metrics serving certificate %s with key %s: %w", s.CertFile, s.KeyFile, err)
		}
		current.Store(&cert)
		return nil
	}
	if err := load(); err != nil {
		return nil, err
	}
	content.AddListener(listenerFunc(func() {
		if err := load(); err != nil {
			klog.FromContext(ctx).Error(err, "Keeping the previous metrics serving certificate")
		}
	}))
	go content.Run(ctx, 1)
	return cfg, nil
}

// listenerFunc is a dynamiccertificates.Listener.
type listenerFunc func()

func (f listenerFunc) Enqueue() { f() }
