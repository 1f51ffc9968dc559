package framework

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"example.com/podtoip-controller/e2e/controlplane"
)

// KubeconfigWith writes a copy of the admin kubeconfig of e.CP changed by
// edit, and returns its path.
func (e *Env) KubeconfigWith(t testing.TB, edit func(server *string, caData *[]byte)) string {
	t.Helper()
	return KubeconfigFrom(t, e.CP.Kubeconfig, edit)
}

// KubeconfigFrom writes a copy of the kubeconfig at from, each cluster's
// server and CA changed by edit, and returns its path.
func KubeconfigFrom(t testing.TB, from string, edit func(server *string, caData *[]byte)) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		edit(&c.Server, &c.CertificateAuthorityData)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TokenKubeconfig writes a kubeconfig for e.CP's API server that
// authenticates with a bearer token, as a ServiceAccount's would, and
// returns its path.
func (e *Env) TokenKubeconfig(t testing.TB, token string) string {
	t.Helper()
	admin, err := clientcmd.LoadFromFile(e.CP.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var caData []byte
	for _, c := range admin.Clusters {
		caData = c.CertificateAuthorityData
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: e.CP.Host(), CertificateAuthorityData: caData}
	kc.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["sa"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "sa"}
	kc.CurrentContext = "sa"
	path := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// StartRelay puts a TCP relay in front of e.CP's API server and returns it
// with a kubeconfig (admin credentials, the cluster CA) whose server is the
// relay. The relay is closed at the end of the test.
func (e *Env) StartRelay(t testing.TB) (*controlplane.Relay, string) {
	t.Helper()
	u, err := url.Parse(e.CP.Host())
	if err != nil {
		t.Fatal(err)
	}
	relay, err := controlplane.StartRelay(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relay.Close() })
	kc := e.KubeconfigWith(t, func(server *string, _ *[]byte) { *server = "https://" + relay.Addr() })
	return relay, kc
}

// NewCAPEM returns the certificate, PEM-encoded, of a new CA that signed
// nothing the cluster uses.
func NewCAPEM(t testing.TB) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not-the-cluster-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
