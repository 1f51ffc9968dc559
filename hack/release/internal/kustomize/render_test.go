package kustomize

import (
	"strings"
	"testing"
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
