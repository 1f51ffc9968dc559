package kustomize

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

const artifacts = "../../../../artifacts"

func TestRenderImage(t *testing.T) {
	plain, err := Render(artifacts, Overlay{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(plain), "image: podtoip-controller:dev\n") {
		t.Errorf("artifacts/ rendered without the kustomization's image:\n%s", plain)
	}
	got, err := Render(artifacts, Overlay{Image: "registry.example:5000/team/podtoip-controller:v1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), "image: registry.example:5000/team/podtoip-controller:v1.2.3\n") || strings.Contains(string(got), "podtoip-controller:dev") {
		t.Errorf("the image was not replaced:\n%s", got)
	}
	if _, err := Render(artifacts, Overlay{Image: "registry.example:5000/team/podtoip-controller"}); err == nil {
		t.Error("an image without a tag was accepted")
	}
}

func TestRenderNamespaceMovesTheExemption(t *testing.T) {
	got, err := Render(artifacts, Overlay{Namespace: "infra"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(got), "podtoip-system") {
		t.Errorf("the overlay in infra still names podtoip-system:\n%s", got)
	}
	if !strings.Contains(string(got), `"system:serviceaccount:" + "infra"`) {
		t.Errorf("the admission policies do not exempt the ServiceAccount in infra:\n%s", got)
	}
}

func TestObjectsWithComponent(t *testing.T) {
	objs, err := Objects(artifacts, Overlay{Components: []string{"monitoring"}})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o["kind"].(string)] = true
	}
	for _, k := range []string{"Deployment", "ServiceMonitor", "PrometheusRule", "ValidatingAdmissionPolicy"} {
		if !kinds[k] {
			t.Errorf("no %s among %v", k, kinds)
		}
	}
}

// TestObjectsAreKubectlKustomize: the library renders artifacts/ object for
// object as `kubectl kustomize artifacts/` does (kubectl is on the PATH of
// every machine that builds this project: the README's requirements), so
// that install.yaml and the chart are what `kubectl apply -k` applies.
func TestObjectsAreKubectlKustomize(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "kubectl", "kustomize", artifacts).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", artifacts, err)
	}
	want := map[string]map[string]any{}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("reading what kubectl kustomize renders: %v", err)
		}
		want[id(o)] = o
	}
	objs, err := Objects(artifacts, Overlay{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]any{}
	for _, o := range objs {
		// Through YAML, as kubectl's output is read, so that numbers
		// compare as numbers.
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var c map[string]any
		if err := yaml.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		got[id(c)] = c
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("kubectl kustomize (-) and the library (+) render artifacts/ differently:\n%s", d)
	}
	if len(got) < 10 {
		t.Errorf("only %d objects rendered", len(got))
	}
}

func id(o map[string]any) string {
	meta, _ := o["metadata"].(map[string]any)
	return fmt.Sprintf("%v %v/%v", o["kind"], meta["namespace"], meta["name"])
}
