package framework

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// DeployNamespace is the namespace of the shipped manifests
// (artifacts/namespace.yaml), where the controller runs and holds its
// Lease.
const DeployNamespace = "podtoip-system"

// KubectlStdin runs kubectl with the admin kubeconfig of e.CP and the given
// input, for up to a minute, and returns its combined output.
func (e *Env) KubectlStdin(t testing.TB, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(CtxFor(t, time.Minute), "kubectl", append([]string{"--kubeconfig", e.CP.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// HasRow reports whether one of the lines of kubectl's table output starts
// with fields, column by column.
func HasRow(lines []string, fields ...string) bool {
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) >= len(fields) && strings.Join(f[:len(fields)], " ") == strings.Join(fields, " ") {
			return true
		}
	}
	return false
}

// ShippedClusterRole reads the ClusterRole from artifacts/rbac.yaml.
func (e *Env) ShippedClusterRole(t testing.TB) *rbacv1.ClusterRole {
	t.Helper()
	f, err := os.Open(filepath.Join(e.CP.Root, "artifacts", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var role rbacv1.ClusterRole
		if err := dec.Decode(&role); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if role.Kind == "ClusterRole" {
			return &role
		}
	}
	t.Fatal("artifacts/rbac.yaml has no ClusterRole")
	return nil
}

// Objects decodes the YAML documents of manifests (what `kubectl
// kustomize` prints), skipping empty ones.
func Objects(t testing.TB, manifests string) []unstructured.Unstructured {
	t.Helper()
	var out []unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("decoding manifests: %v", err)
		}
		if u.Object != nil {
			out = append(out, u)
		}
	}
}
