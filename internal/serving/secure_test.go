package serving

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	certutil "k8s.io/client-go/util/cert"
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
	h := guard(authn, authz, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }), "metrics-reader")
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
