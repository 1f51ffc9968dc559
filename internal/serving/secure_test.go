package serving

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// TestGuardAdmitsOnlyAuthorizedCallers checks the answers a scraper sees:
// 401 without credentials the authenticator accepts, 403 naming the role to
// bind when the authorizer says no, and the handler's answer otherwise;
// the authorizer is asked about the request's verb and path.
func TestGuardAdmitsOnlyAuthorizedCallers(t *testing.T) {
	authn := authenticator.RequestFunc(func(r *http.Request) (*authenticator.Response, bool, error) {
		switch r.Header.Get("Authorization") {
		case "Bearer reader", "Bearer stranger":
			return &authenticator.Response{User: &user.DefaultInfo{Name: strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")}}, true, nil
		}
		return nil, false, nil
	})
	var asked authorizer.Attributes
	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		asked = a
		if a.GetUser().GetName() == "reader" {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
	h := guard(authn, authz, newGate(maxInFlightReviews), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }), "metrics-reader")
	for _, tc := range []struct {
		token    string
		code     int
		contains string
	}{
		{"", http.StatusUnauthorized, "Unauthorized"},
		{"forged", http.StatusUnauthorized, "Unauthorized"},
		{"stranger", http.StatusForbidden, `user "stranger" may not get /metrics; bind the ClusterRole metrics-reader`},
		{"reader", http.StatusOK, "metrics"},
	} {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.contains) {
			t.Errorf("token %q: %d %q, want %d containing %q", tc.token, rec.Code, rec.Body.String(), tc.code, tc.contains)
		}
	}
	if asked == nil || asked.GetVerb() != "get" || asked.GetPath() != "/metrics" || asked.IsResourceRequest() {
		t.Errorf("authorizer asked %+v, want a non-resource get of /metrics", asked)
	}
}

// TestTLSConfigServesTheGivenOrASelfSignedCertificate checks both sources
// of the serving certificate, and that half a pair is refused with an
// error naming both flags.
func TestTLSConfigServesTheGivenOrASelfSignedCertificate(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	self, err := Secure{}.TLSConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := self.GetCertificate(&tls.ClientHelloInfo{}); err != nil || c == nil || len(c.Certificate) == 0 {
		t.Fatalf("self-signed: %v, %v", c, err)
	}

	dir := t.TempDir()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("given.example", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	given, err := Secure{CertFile: certFile, KeyFile: keyFile}.TLSConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := given.GetCertificate(&tls.ClientHelloInfo{})
	want, _ := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil || c == nil || string(c.Certificate[0]) != string(want.Certificate[0]) {
		t.Errorf("given files: served another certificate (%v)", err)
	}

	if _, err := (Secure{CertFile: certFile}).TLSConfig(ctx); err == nil || !strings.Contains(err.Error(), "--tls-private-key-file") {
		t.Errorf("half a pair: %v, want an error naming both flags", err)
	}
}

// blockingAuthn is an authenticator whose reviews of tokens other than
// the ones in valid wait until release is closed, as reviews do while the
// API server is slow to answer, and end early if the request's context
// does (as the caching authenticator stops waiting for a shared review
// that goes on without it).
type blockingAuthn struct {
	valid   map[string]bool
	release chan struct{}
	waiting atomic.Int32
}

func (a *blockingAuthn) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	token := bearerToken(r)
	if a.valid[token] {
		return &authenticator.Response{User: &user.DefaultInfo{Name: token}}, true, nil
	}
	a.waiting.Add(1)
	defer a.waiting.Add(-1)
	select {
	case <-a.release:
		return nil, false, nil
	case <-r.Context().Done():
		return nil, false, r.Context().Err()
	}
}

// serve runs one request with token through h and returns the answer.
func serve(ctx context.Context, h http.Handler, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestGuardBoundsRequestsUnderReview checks what a flood of unknown
// tokens meets: at most maxInFlightReviews requests under review at once,
// the next ones refused with 429 and a Retry-After once they have waited
// for a place in vain, a caller that
// hangs up keeping its place until its review ends (the review goes on
// without it), and a scraper whose token was admitted before served all
// along. A valid token never admitted waits for a place like any other,
// and a token refused later loses its standing.
func TestGuardBoundsRequestsUnderReview(t *testing.T) {
	authn := &blockingAuthn{valid: map[string]bool{"scraper": true, "newcomer": true}, release: make(chan struct{})}
	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionAllow, "", nil
	})
	g := newGate(maxInFlightReviews)
	// Reviews here never end, so a request that waits for a place is
	// refused once it has waited; a short wait keeps the test short.
	g.wait = 50 * time.Millisecond
	h := guard(authn, authz, g, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }), "metrics-reader")
	if rec := serve(t.Context(), h, "scraper"); rec.Code != http.StatusOK {
		t.Fatalf("the scraper before the flood: %d %q", rec.Code, rec.Body.String())
	}

	// Fill every place with reviews that do not end; the first caller
	// hangs up at once.
	hungUp, hangUp := context.WithCancel(t.Context())
	answers := make(chan int, maxInFlightReviews)
	var wg sync.WaitGroup
	for i := range maxInFlightReviews {
		ctx := t.Context()
		if i == 0 {
			ctx = hungUp
		}
		wg.Go(func() { answers <- serve(ctx, h, fmt.Sprintf("made-up-%d", i)).Code })
	}
	defer func() { close(authn.release); wg.Wait() }()
	if err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return authn.waiting.Load() == maxInFlightReviews, nil
	}); err != nil {
		t.Fatalf("%d reviews under way, want %d", authn.waiting.Load(), maxInFlightReviews)
	}

	full := func(when string) {
		t.Helper()
		for _, token := range []string{"made-up-next", "", "newcomer"} {
			rec := serve(t.Context(), h, token)
			if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
				t.Errorf("%s, token %q: %d (Retry-After %q), want 429 with a Retry-After", when, token, rec.Code, rec.Header().Get("Retry-After"))
			}
		}
		if rec := serve(t.Context(), h, "scraper"); rec.Code != http.StatusOK || rec.Body.String() != "metrics" {
			t.Errorf("%s, the admitted scraper: %d %q, want 200", when, rec.Code, rec.Body.String())
		}
	}
	full("all places taken")
	// The caller that hangs up keeps its place while its review runs; had
	// it left, its answer would come at once.
	hangUp()
	select {
	case code := <-answers:
		t.Fatalf("a caller that hung up left its place (answered %d) before its review ended", code)
	case <-time.After(200 * time.Millisecond):
	}
	if got := authn.waiting.Load(); got != maxInFlightReviews {
		t.Errorf("%d reviews under way after a caller hung up, want %d", got, maxInFlightReviews)
	}
	full("after a caller hung up")
}

// TestGuardLetsARotatedTokenInDuringAFlood checks that a flood of made-up
// tokens from one address, keeping every place under review taken, does
// not keep out a scraper from another address whose token was just
// rotated (valid, never admitted): each new token is served on its first
// scrape, having waited its turn behind at most the flood's one waiter.
// The flood's other requests are refused at once, never queued.
func TestGuardLetsARotatedTokenInDuringAFlood(t *testing.T) {
	// Each review of a made-up token takes reviewLatency, as the API
	// server's answers do under load.
	const reviewLatency = 20 * time.Millisecond
	var underReview atomic.Int32
	authn := authenticator.RequestFunc(func(r *http.Request) (*authenticator.Response, bool, error) {
		token := bearerToken(r)
		if strings.HasPrefix(token, "rotated-") {
			return &authenticator.Response{User: &user.DefaultInfo{Name: "prometheus"}}, true, nil
		}
		underReview.Add(1)
		defer underReview.Add(-1)
		select {
		case <-time.After(reviewLatency):
		case <-r.Context().Done():
		}
		return nil, false, nil
	})
	authz := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionAllow, "", nil
	})
	h := guard(authn, authz, newGate(maxInFlightReviews), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }), "metrics-reader")

	from := func(ctx context.Context, addr, token string) int {
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/metrics", nil)
		req.RemoteAddr = addr
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	floodCtx, stopFlood := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var sent, refused atomic.Int64
	for i := range 4 * maxInFlightReviews {
		wg.Go(func() {
			for n := 0; floodCtx.Err() == nil; n++ {
				sent.Add(1)
				if from(floodCtx, "10.0.0.1:40000", fmt.Sprintf("made-up-%d-%d", i, n)) == http.StatusTooManyRequests {
					refused.Add(1)
				}
			}
		})
	}
	defer func() { stopFlood(); wg.Wait() }()

	for rotation := range 5 {
		if err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return underReview.Load() == maxInFlightReviews, nil
		}); err != nil {
			t.Fatalf("the flood keeps %d places taken, want all %d", underReview.Load(), maxInFlightReviews)
		}
		start := time.Now()
		if code := from(t.Context(), "10.0.0.2:50000", fmt.Sprintf("rotated-%d", rotation)); code != http.StatusOK {
			t.Errorf("rotation %d: the new token's first scrape during the flood answered %d after %v, want 200", rotation, code, time.Since(start).Round(time.Millisecond))
		} else {
			t.Logf("rotation %d: the new token served after %v", rotation, time.Since(start).Round(time.Millisecond))
		}
	}
	t.Logf("the flood: %d requests, %d refused at once", sent.Load(), refused.Load())
	if refused.Load() == 0 {
		t.Error("no request of the flood was refused: its requests are queued without bound")
	}
}

// TestGuardForgetsRefusedTokens checks that a token admitted once loses
// its standing when it is refused: revoked, it waits for a place again.
func TestGuardForgetsRefusedTokens(t *testing.T) {
	var revoked atomic.Bool
	authn := authenticator.RequestFunc(func(r *http.Request) (*authenticator.Response, bool, error) {
		if bearerToken(r) == "scraper" && !revoked.Load() {
			return &authenticator.Response{User: &user.DefaultInfo{Name: "scraper"}}, true, nil
		}
		return nil, false, nil
	})
	authz := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionAllow, "", nil
	})
	g := newGate(1)
	h := guard(authn, authz, g, http.NotFoundHandler(), "metrics-reader")
	if rec := serve(t.Context(), h, "scraper"); rec.Code != http.StatusNotFound || !g.admitted("scraper") {
		t.Fatalf("scraper: %d, admitted %v; want it through and admitted", rec.Code, g.admitted("scraper"))
	}
	revoked.Store(true)
	if rec := serve(t.Context(), h, "scraper"); rec.Code != http.StatusUnauthorized || g.admitted("scraper") {
		t.Errorf("revoked scraper: %d, admitted %v; want 401 and no longer admitted", rec.Code, g.admitted("scraper"))
	}
}

// TestGateRemembersAdmittedTokensForALimitedTime checks the admitted
// tokens' expiry and their bound: when full, expired ones go first, then
// the one admitted longest ago.
func TestGateRemembersAdmittedTokensForALimitedTime(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	g := newGate(1)
	g.now = func() time.Time { return now }
	if g.admitted("") || g.admitted("a") {
		t.Fatal("admitted before any admission")
	}
	g.admit("")
	if g.admitted("") || len(g.known) != 0 {
		t.Error("a request without a bearer token was remembered")
	}
	g.admit("a")
	now = now.Add(admittedTTL - time.Second)
	if !g.admitted("a") {
		t.Error("forgotten before admittedTTL")
	}
	now = now.Add(2 * time.Second)
	if g.admitted("a") {
		t.Error("remembered past admittedTTL")
	}
	g.admit("a") // admitted again: remembered anew
	if !g.admitted("a") {
		t.Error("not admitted again")
	}

	// Fill the rest; the oldest is "a" (admitted first), then t1, t2...
	for i := 1; i < maxAdmitted; i++ {
		now = now.Add(time.Millisecond)
		g.admit(fmt.Sprintf("t%d", i))
	}
	if len(g.known) != maxAdmitted {
		t.Fatalf("%d remembered, want %d", len(g.known), maxAdmitted)
	}
	g.admit("newest")
	if len(g.known) != maxAdmitted || g.admitted("a") || !g.admitted("t1") || !g.admitted("newest") {
		t.Errorf("full: %d remembered, a %v, t1 %v, newest %v; want %d, the oldest (a) dropped",
			len(g.known), g.admitted("a"), g.admitted("t1"), g.admitted("newest"), maxAdmitted)
	}
	// Expired entries go before live ones.
	now = now.Add(admittedTTL)
	g.admit("t1") // renewed; every other one has expired
	g.admit("after")
	if len(g.known) != 2 || !g.admitted("t1") || !g.admitted("after") {
		t.Errorf("after expiry: %d remembered, want t1 and after only", len(g.known))
	}
}

// TestReviewsHaveTheirOwnRateLimiter sends many unknown tokens through the
// endpoint's real authenticator, against an API server that answers
// TokenReviews, and checks that none of the reviews took from the
// process's rate limiter: the writers' budget is untouched, whatever
// --kube-api-qps says, and the reviews are limited on their own. Tokens
// the API server does not accept are no error for the log; a review it
// refuses is, with the advice to grant it.
func TestReviewsHaveTheirOwnRateLimiter(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(t.Context(), logger)
	var reviews atomic.Int32
	var forbidden atomic.Bool
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/apis/authentication.k8s.io/v1/tokenreviews" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		reviews.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if forbidden.Load() {
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"Forbidden","code":403,"message":"tokenreviews.authentication.k8s.io is forbidden"}`)
			return
		}
		_, _ = io.WriteString(w, `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","status":{"authenticated":false,"error":"invalid bearer token"}}`)
	}))
	defer api.Close()

	writers := flowcontrol.NewTokenBucketRateLimiter(1, 1)
	cfg := &rest.Config{Host: api.URL, QPS: 1, Burst: 1, RateLimiter: writers}
	h, err := Secure{Config: cfg}.Handler(http.NotFoundHandler(), "metrics-reader")
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	for i := range n {
		if rec := serve(ctx, h, fmt.Sprintf("made-up-%d", i)); rec.Code != http.StatusUnauthorized {
			t.Fatalf("made-up token: %d %q, want 401", rec.Code, rec.Body.String())
		}
	}
	if got := reviews.Load(); got != n {
		t.Errorf("%d TokenReviews for %d unknown tokens, want one each", got, n)
	}
	if !writers.TryAccept() {
		t.Error("the reviews took from the process's rate limiter")
	}
	logged := func() string { return logger.GetSink().(ktesting.Underlier).GetBuffer().String() }
	if strings.Contains(logged(), "Could not authenticate") {
		t.Errorf("tokens the API server does not accept were logged as failed reviews:\n%s", logged())
	}
	forbidden.Store(true)
	if rec := serve(ctx, h, "made-up-forbidden"); rec.Code != http.StatusUnauthorized {
		t.Errorf("review refused: %d %q, want 401", rec.Code, rec.Body.String())
	}
	if !strings.Contains(logged(), "Could not authenticate a request; the controller needs create on tokenreviews") {
		t.Errorf("a refused review was not logged with the advice:\n%s", logged())
	}

	for _, qps := range []float32{5, -1} {
		base := &rest.Config{Host: api.URL, QPS: qps}
		if qps > 0 {
			base.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(qps, 5)
		}
		rc := reviewConfig(base)
		if rc.RateLimiter == nil || rc.RateLimiter == base.RateLimiter || rc.QPS != reviewQPS || rc.Burst != reviewBurst {
			t.Errorf("--kube-api-qps=%v: reviews limited by %v at %v/%d, want a limiter of their own at %d/%d", qps, rc.RateLimiter, rc.QPS, rc.Burst, reviewQPS, reviewBurst)
		}
		if base.QPS != qps {
			t.Errorf("--kube-api-qps=%v: the process's configuration changed to %v", qps, base.QPS)
		}
	}
}

// writeKubeletStyle writes cert and key into dir as the kubelet updates a
// Secret volume: the files are links into a versioned directory, swapped
// for the next version by one rename, so a reader never sees half of a
// pair.
func writeKubeletStyle(t *testing.T, dir, version string, certPEM, keyPEM []byte) {
	t.Helper()
	versioned := filepath.Join(dir, ".."+version)
	if err := os.Mkdir(versioned, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(versioned, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Symlink(".."+version, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTLSConfigReloadsReplacedFiles checks that a certificate rotated in
// place, as cert-manager and the kubelet rotate a mounted Secret, is
// served without a restart.
func TestTLSConfigReloadsReplacedFiles(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pair := func(host string) (certPEM, keyPEM, der []byte) {
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return certPEM, keyPEM, c.Certificate[0]
	}
	dir := t.TempDir()
	firstCert, firstKey, first := pair("first.example")
	writeKubeletStyle(t, dir, "1", firstCert, firstKey)
	cfg, err := Secure{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}.TLSConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	served := func() []byte {
		c, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil || c == nil {
			t.Fatalf("GetCertificate: %v, %v", c, err)
		}
		return c.Certificate[0]
	}
	if !bytes.Equal(served(), first) {
		t.Fatal("not serving the given certificate")
	}
	secondCert, secondKey, second := pair("second.example")
	writeKubeletStyle(t, dir, "2", secondCert, secondKey)
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return bytes.Equal(served(), second), nil
	}); err != nil {
		t.Fatal("still serving the first certificate 30 s after the files were replaced")
	}
}
