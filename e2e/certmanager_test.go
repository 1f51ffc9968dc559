package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"example.com/podtoip-controller/e2e/framework"
)

// The parts of cert-manager's and the Prometheus Operator's objects the
// tests read.
type (
	issuerRef struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
	}
	certificate struct {
		Namespace  string
		SecretName string    `json:"secretName"`
		IsCA       bool      `json:"isCA"`
		DNSNames   []string  `json:"dnsNames"`
		IssuerRef  issuerRef `json:"issuerRef"`
	}
	issuer struct {
		Namespace  string
		SelfSigned *struct{} `json:"selfSigned"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca"`
	}
	monitorEndpoint struct {
		Port      string         `json:"port"`
		Scheme    string         `json:"scheme"`
		TLSConfig map[string]any `json:"tlsConfig"`
	}
)

// certManagerOverlay is what an overlay of artifacts/ with the monitoring
// and cert-manager components builds, as their kustomization says to add
// them.
type certManagerOverlay struct {
	deployment   appsv1.Deployment
	service      corev1.Service
	certificates map[string]certificate // by name
	issuers      map[string]issuer      // by name
	monitorNS    string
	endpoints    []monitorEndpoint
}

// buildCertManagerOverlay builds the overlay with kubectl kustomize.
func buildCertManagerOverlay(t *testing.T) certManagerOverlay {
	t.Helper()
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, filepath.Join(cp.Root, "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	overlay := fmt.Sprintf("resources:\n  - %s\ncomponents:\n  - %s\n  - %s\n", rel, path.Join(rel, "monitoring"), path.Join(rel, "monitoring", "cert-manager"))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	built, err := cp.Kubectl(t.Context(), "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	o := certManagerOverlay{certificates: map[string]certificate{}, issuers: map[string]issuer{}}
	for _, u := range framework.Objects(t, built) {
		into := func(out any) {
			t.Helper()
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
				t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
			}
		}
		switch gk := u.GroupVersionKind().GroupKind(); {
		case gk.Group == "apps" && gk.Kind == "Deployment" && u.GetName() == "podtoip-controller":
			into(&o.deployment)
		case gk.Group == "" && gk.Kind == "Service" && u.GetName() == "podtoip-controller-metrics":
			into(&o.service)
		case gk.Group == "cert-manager.io" && gk.Kind == "Certificate":
			var spec struct {
				Spec certificate `json:"spec"`
			}
			into(&spec)
			spec.Spec.Namespace = u.GetNamespace()
			o.certificates[u.GetName()] = spec.Spec
		case gk.Group == "cert-manager.io" && gk.Kind == "Issuer":
			var spec struct {
				Spec issuer `json:"spec"`
			}
			into(&spec)
			spec.Spec.Namespace = u.GetNamespace()
			o.issuers[u.GetName()] = spec.Spec
		case gk.Group == "monitoring.coreos.com" && gk.Kind == "ServiceMonitor":
			var spec struct {
				Spec struct {
					Endpoints []monitorEndpoint `json:"endpoints"`
				} `json:"spec"`
			}
			into(&spec)
			o.monitorNS, o.endpoints = u.GetNamespace(), spec.Spec.Endpoints
		}
	}
	if o.deployment.Name == "" || o.service.Name == "" || len(o.endpoints) != 1 {
		t.Fatalf("the overlay builds deployment %q, service %q and %d ServiceMonitor endpoints, want the controller's, its metrics Service and one endpoint",
			o.deployment.Name, o.service.Name, len(o.endpoints))
	}
	return o
}

// servingCertificate returns the certificate that is no CA: the metrics
// endpoint's.
func (o certManagerOverlay) servingCertificate(t *testing.T) certificate {
	t.Helper()
	var serving []certificate
	for _, c := range o.certificates {
		if !c.IsCA {
			serving = append(serving, c)
		}
	}
	if len(serving) != 1 {
		t.Fatalf("%d serving certificates in %+v, want 1", len(serving), o.certificates)
	}
	return serving[0]
}

// flag returns the value of the controller container's --name=value.
func (o certManagerOverlay) flag(t *testing.T, name string) string {
	t.Helper()
	for _, c := range o.deployment.Spec.Template.Spec.Containers {
		if c.Name != "controller" {
			continue
		}
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
				return v
			}
		}
	}
	t.Fatalf("the controller container has no --%s", name)
	return ""
}

// TestCertManagerComponentVerifiesMetricsTLS builds artifacts/ with the
// monitoring and cert-manager components, as their kustomization shows,
// and checks the chain they set up: a self-signed Issuer signs a CA,
// whose Issuer signs a certificate for the metrics Service's DNS name; the
// Deployment mounts that certificate's Secret and passes its files to
// --tls-cert-file and --tls-private-key-file, keeping its other flags; and
// the ServiceMonitor verifies the certificate (the Secret's CA, the
// Service's name) instead of skipping verification.
func TestCertManagerComponentVerifiesMetricsTLS(t *testing.T) {
	o := buildCertManagerOverlay(t)
	ns := o.service.Namespace
	serving := o.servingCertificate(t)
	svcName := o.service.Name + "." + ns + ".svc"
	if !slices.Contains(serving.DNSNames, svcName) || serving.Namespace != ns {
		t.Errorf("the serving certificate (namespace %s) names %v, want the metrics Service's %s", serving.Namespace, serving.DNSNames, svcName)
	}

	// The chain: serving certificate ← CA Issuer ← CA certificate ←
	// self-signed Issuer, all in the controller's namespace.
	if serving.IssuerRef.Kind != "Issuer" {
		t.Fatalf("the serving certificate's issuer is a %s, want an Issuer of the namespace", serving.IssuerRef.Kind)
	}
	caIssuer, ok := o.issuers[serving.IssuerRef.Name]
	if !ok || caIssuer.CA == nil || caIssuer.Namespace != ns {
		t.Fatalf("the serving certificate's issuer %s is %+v, want a CA Issuer in %s", serving.IssuerRef.Name, caIssuer, ns)
	}
	var ca *certificate
	for _, c := range o.certificates {
		if c.SecretName == caIssuer.CA.SecretName {
			ca = &c
		}
	}
	if ca == nil || !ca.IsCA || ca.Namespace != ns {
		t.Fatalf("the CA Issuer's secret %s comes from %+v, want a CA certificate in %s", caIssuer.CA.SecretName, ca, ns)
	}
	if root, ok := o.issuers[ca.IssuerRef.Name]; ca.IssuerRef.Kind != "Issuer" || !ok || root.SelfSigned == nil || root.Namespace != ns {
		t.Errorf("the CA certificate's issuer %s %s is %+v, want a self-signed Issuer in %s", ca.IssuerRef.Kind, ca.IssuerRef.Name, root, ns)
	}

	// The Deployment: the Secret mounted read-only where the flags read it.
	certFile, keyFile := o.flag(t, "tls-cert-file"), o.flag(t, "tls-private-key-file")
	if o.flag(t, "metrics-bind-address") != ":8443" || !slices.Contains(o.deployment.Spec.Template.Spec.Containers[0].Args, "--leader-elect") {
		t.Errorf("the Deployment lost its other flags: %v", o.deployment.Spec.Template.Spec.Containers[0].Args)
	}
	if path.Base(certFile) != corev1.TLSCertKey || path.Base(keyFile) != corev1.TLSPrivateKeyKey || path.Dir(certFile) != path.Dir(keyFile) {
		t.Errorf("--tls-cert-file=%s --tls-private-key-file=%s, want the Secret's %s and %s in one directory", certFile, keyFile, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	}
	var volume string
	for _, v := range o.deployment.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == serving.SecretName {
			volume = v.Name
		}
	}
	if volume == "" {
		t.Fatalf("no volume of the Deployment holds the Secret %s: %+v", serving.SecretName, o.deployment.Spec.Template.Spec.Volumes)
	}
	mounted := false
	for _, c := range o.deployment.Spec.Template.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if c.Name == "controller" && m.Name == volume && m.MountPath == path.Dir(certFile) && m.ReadOnly {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("the controller container does not mount volume %s read-only at %s: %+v", volume, path.Dir(certFile), o.deployment.Spec.Template.Spec.Containers)
	}

	// The ServiceMonitor: verifying, with the CA cert-manager puts in the
	// serving certificate's Secret, against the Service's name.
	ep := o.endpoints[0]
	if ep.Scheme != "https" || o.monitorNS != ns {
		t.Errorf("the ServiceMonitor (namespace %s) scrapes over %s, want https from %s", o.monitorNS, ep.Scheme, ns)
	}
	if _, ok := ep.TLSConfig["insecureSkipVerify"]; ok {
		t.Errorf("the ServiceMonitor still skips verification: %v", ep.TLSConfig)
	}
	var tlsConfig struct {
		ServerName string `json:"serverName"`
		CA         struct {
			Secret struct {
				Name string `json:"name"`
				Key  string `json:"key"`
			} `json:"secret"`
		} `json:"ca"`
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ep.TLSConfig, &tlsConfig); err != nil {
		t.Fatal(err)
	}
	if tlsConfig.CA.Secret.Name != serving.SecretName || tlsConfig.CA.Secret.Key != "ca.crt" {
		t.Errorf("the ServiceMonitor trusts the CA in %s/%s, want ca.crt of the serving certificate's Secret %s", tlsConfig.CA.Secret.Name, tlsConfig.CA.Secret.Key, serving.SecretName)
	}
	if !slices.Contains(serving.DNSNames, tlsConfig.ServerName) {
		t.Errorf("the ServiceMonitor checks the name %q, which the certificate (%v) does not hold", tlsConfig.ServerName, serving.DNSNames)
	}
}

// testCA is a CA a test makes, and the serving certificates it signs.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return testCA{cert: cert, key: key, pool: pool}
}

// serving returns the PEM certificate (with the CA after it, as
// cert-manager writes tls.crt) and key for dnsNames.
func (ca testCA) serving(t *testing.T, dnsNames ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: dnsNames[0]},
		DNSNames:     dnsNames,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})...)
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// writeSecretVolume writes files into dir as the kubelet updates a mounted
// Secret: each name links into a versioned directory, and a new version
// replaces the old in one rename.
func writeSecretVolume(t *testing.T, dir, version string, files map[string][]byte) {
	t.Helper()
	versioned := filepath.Join(dir, ".."+version)
	if err := os.Mkdir(versioned, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
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

// scrapeVerified scrapes url with token, over a new connection that
// verifies the server's certificate against pool and serverName, as the
// ServiceMonitor of the cert-manager component has Prometheus do.
func scrapeVerified(ctx context.Context, url, token, serverName string, pool *x509.CertPool) (int, string, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12},
	}}
	code, body, err := framework.GetWith(ctx, client, url, token)
	return code, string(body), err
}

// TestMetricsTLSVerifiedAndReloaded runs the controller with a certificate
// from files laid out as the cert-manager component mounts its Secret (a
// CA made here stands in for cert-manager's), checks that a scraper that
// verifies it against the CA and the name the component's ServiceMonitor
// checks is served, then renews the certificate from another CA, as
// cert-manager and the kubelet do, and checks that the controller serves
// the new one without a restart.
func TestMetricsTLSVerifiedAndReloaded(t *testing.T) {
	o := buildCertManagerOverlay(t)
	serving := o.servingCertificate(t)
	serverName, _ := o.endpoints[0].TLSConfig["serverName"].(string)
	if serverName == "" {
		t.Fatalf("the ServiceMonitor checks no server name: %v", o.endpoints[0].TLSConfig)
	}
	certName, keyName := path.Base(o.flag(t, "tls-cert-file")), path.Base(o.flag(t, "tls-private-key-file"))

	dir := t.TempDir()
	first, second := newTestCA(t, "first CA"), newTestCA(t, "second CA")
	certPEM, keyPEM := first.serving(t, serving.DNSNames...)
	writeSecretVolume(t, dir, "1", map[string][]byte{certName: certPEM, keyName: keyPEM, "ca.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: first.cert.Raw})})

	ns := suite.NewNamespace(t)
	p := suite.StartController(t, "--namespace", ns, "--metrics-secure=true",
		"--tls-cert-file="+filepath.Join(dir, certName), "--tls-private-key-file="+filepath.Join(dir, keyName))
	framework.WaitReady(t, p)
	url := framework.Endpoint(t, p, "metrics") + "/metrics"
	token := metricsReaderToken(t, ns, url)

	code, body, err := scrapeVerified(t.Context(), url, token, serverName, first.pool)
	if err != nil || code != http.StatusOK || !strings.Contains(body, "podtoip_controller_mirrors") {
		t.Fatalf("verifying scrape against the first CA: %d %.200q %v, want 200", code, body, err)
	}
	if _, _, err := scrapeVerified(t.Context(), url, token, serverName, second.pool); err == nil {
		t.Fatal("a scraper trusting only the second CA was served before the renewal")
	}

	renewed := time.Now()
	certPEM, keyPEM = second.serving(t, serving.DNSNames...)
	writeSecretVolume(t, dir, "2", map[string][]byte{certName: certPEM, keyName: keyPEM, "ca.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: second.cert.Raw})})
	// The files are watched; a missed event is caught by the one-minute
	// recheck.
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		code, body, err = scrapeVerified(ctx, url, token, serverName, second.pool)
		return err == nil && code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("verifying scrape against the second CA 90 s after the renewal: %d %.200q %v", code, body, err)
	}
	t.Logf("the renewed certificate was served %v after the files were replaced", time.Since(renewed).Round(time.Millisecond))
	if _, _, err := scrapeVerified(t.Context(), url, token, serverName, first.pool); err == nil {
		t.Error("a scraper trusting only the first CA is still served after the renewal")
	}
	framework.MustBeRunning(t, p, "after the certificate was renewed")
}
