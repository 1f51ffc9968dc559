package serving

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
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
	// Kube makes the reviews.
	Kube kubernetes.Interface
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

func reviewBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
}

// Handler wraps h: a request without valid credentials gets 401, one whose
// identity may not get the path 403 (the ClusterRole that grants it is
// named in the answer), and the rest reach h.
func (s Secure) Handler(h http.Handler, role string) (http.Handler, error) {
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		TokenAccessReviewClient:  s.Kube.AuthenticationV1(),
		TokenAccessReviewTimeout: reviewTimeout,
		WebhookRetryBackoff:      reviewBackoff(),
		CacheTTL:                 tokenCacheTTL,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("building the metrics endpoint's authenticator: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: s.Kube.AuthorizationV1(),
		AllowCacheTTL:             allowCacheTTL,
		DenyCacheTTL:              denyCacheTTL,
		WebhookRetryBackoff:       reviewBackoff(),
	}.New()
	if err != nil {
		return nil, fmt.Errorf("building the metrics endpoint's authorizer: %w", err)
	}
	return guard(authn, authz, h, role), nil
}

// guard admits only requests authn authenticates and authz allows.
func guard(authn authenticator.Request, authz authorizer.Authorizer, h http.Handler, role string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context())
		res, ok, err := authn.AuthenticateRequest(r)
		if err != nil || !ok {
			if err != nil {
				// The API server could not review the credentials (the
				// controller may not create TokenReviews, or it is
				// unreachable): an operator must hear of it.
				logger.Error(err, "Could not authenticate a request; the controller needs create on tokenreviews and subjectaccessreviews (artifacts/rbac.yaml)", "path", r.URL.Path, "remote", r.RemoteAddr)
			}
			http.Error(w, "Unauthorized: send a bearer token the API server accepts (TokenReview)", http.StatusUnauthorized)
			return
		}
		attrs := authorizer.AttributesRecord{User: res.User, Verb: strings.ToLower(r.Method), Path: r.URL.Path}
		decision, reason, err := authz.Authorize(r.Context(), attrs)
		if decision != authorizer.DecisionAllow {
			logger.V(2).Info("Refused an unauthorized request", "path", r.URL.Path, "user", res.User.GetName(), "reason", reason, "err", err)
			http.Error(w, fmt.Sprintf("Forbidden: user %q may not %s %s; bind the ClusterRole %s to it",
				res.User.GetName(), attrs.Verb, r.URL.Path, role), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
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
