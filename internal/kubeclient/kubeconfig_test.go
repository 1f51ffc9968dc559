package kubeclient

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// writeKubeconfig writes a kubeconfig for server with a bearer token.
func writeKubeconfig(t *testing.T, dir, server string) string {
	t.Helper()
	path := filepath.Join(dir, "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	kc := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "` + server + `", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: secret-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLoadConfigPrecedence checks the order kubectl users expect: the flag,
// then $KUBECONFIG, then the pod's ServiceAccount, then ~/.kube/config, with
// --master overriding the server of whichever is used.
func TestLoadConfigPrecedence(t *testing.T) {
	tmp := t.TempDir()
	flagFile := writeKubeconfig(t, filepath.Join(tmp, "flag"), "https://flag.example:6443")
	envFile := writeKubeconfig(t, filepath.Join(tmp, "env"), "https://env.example:6443")
	home := filepath.Join(tmp, "home")
	writeKubeconfig(t, filepath.Join(home, ".kube"), "https://home.example:6443")
	emptyHome := filepath.Join(tmp, "empty-home")

	inPodWithToken := func() (*rest.Config, error) {
		return &rest.Config{Host: "https://10.96.0.1:443", BearerToken: "sa-token"}, nil
	}
	inPodWithoutToken := func() (*rest.Config, error) {
		return nil, errors.New("open " + serviceAccountDir + "/token: no such file or directory")
	}
	type env struct {
		home, kubeconfig string
		inPod            func() (*rest.Config, error)
	}
	for name, tc := range map[string]struct {
		env              env
		flag, master     string
		wantHost, source string
		wantErr          string
	}{
		"flag wins over everything":   {env: env{home, envFile, inPodWithToken}, flag: flagFile, wantHost: "https://flag.example:6443", source: "--kubeconfig"},
		"$KUBECONFIG wins in a pod":   {env: env{home, envFile, inPodWithToken}, wantHost: "https://env.example:6443", source: "$KUBECONFIG"},
		"$KUBECONFIG without token":   {env: env{home, envFile, inPodWithoutToken}, wantHost: "https://env.example:6443", source: "$KUBECONFIG"},
		"in-cluster before home":      {env: env{home, "", inPodWithToken}, wantHost: "https://10.96.0.1:443", source: "in-cluster ServiceAccount"},
		"home outside a pod":          {env: env{home, "", nil}, wantHost: "https://home.example:6443", source: "~/.kube/config"},
		"--master overrides flag":     {env: env{home, "", nil}, flag: flagFile, master: "https://m.example", wantHost: "https://m.example", source: "--kubeconfig"},
		"--master with in-cluster":    {env: env{home, "", inPodWithToken}, master: "https://m.example", wantHost: "https://m.example", source: "server from --master"},
		"--master in a tokenless pod": {env: env{emptyHome, "", inPodWithoutToken}, master: "https://m.example", wantHost: "https://m.example", source: "without credentials"},
		"tokenless pod, nothing else": {env: env{emptyHome, "", inPodWithoutToken}, wantErr: "its ServiceAccount credentials cannot be loaded"},
		"nothing at all":              {env: env{emptyHome, "", nil}, wantErr: "no Kubernetes configuration found"},
		"$KUBECONFIG names nothing":   {env: env{home, filepath.Join(tmp, "missing"), inPodWithToken}, wantErr: "loading $KUBECONFIG " + filepath.Join(tmp, "missing") + ": no configuration has been provided"},
		"flag names a missing file":   {env: env{home, "", nil}, flag: filepath.Join(tmp, "nope"), wantErr: "reading --kubeconfig"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("HOME", tc.env.home)
			vars := map[string]string{"KUBECONFIG": tc.env.kubeconfig}
			if tc.env.inPod != nil {
				vars["KUBERNETES_SERVICE_HOST"] = "10.96.0.1"
			}
			inCluster := tc.env.inPod
			if inCluster == nil {
				inCluster = func() (*rest.Config, error) { t.Fatal("in-cluster configuration read outside a pod"); return nil, nil }
			}
			cc, err := loadConfig(tc.flag, tc.master, configEnv{getenv: func(k string) string { return vars[k] }, inCluster: inCluster})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("loadConfig error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("loadConfig: %v", err)
			}
			if cc.Host != tc.wantHost || !strings.Contains(cc.Source, tc.source) {
				t.Errorf("loadConfig = host %q from %q, want host %q from %q", cc.Host, cc.Source, tc.wantHost, tc.source)
			}
			if strings.Contains(cc.Source, "without credentials") && strings.Contains(cc.Credentials, "kubeconfig") && !strings.Contains(cc.Credentials, "pass --kubeconfig") {
				t.Errorf("advice for anonymous requests talks about a kubeconfig's token: %q", cc.Credentials)
			}
			if strings.Contains(cc.Source, "in-cluster") && !strings.Contains(cc.Credentials, serviceAccountDir) {
				t.Errorf("advice for in-cluster credentials = %q, want it to name the ServiceAccount token", cc.Credentials)
			}
		})
	}
}
