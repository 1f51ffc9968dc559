// Package kustomize renders the repository's install manifests
// (artifacts/) with kustomize's Go API, the same library `kubectl
// kustomize` embeds, so that a release's install.yaml and the Helm chart
// are made from exactly what `kubectl apply -k artifacts/` applies without
// needing a kubectl on the machine.
package kustomize

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// ImageName is the image name artifacts/kustomization.yaml refers to; an
// overlay's images: entry of that name sets the real reference.
const ImageName = "podtoip-controller"

// Overlay is a kustomization placed next to a copy of artifacts/, as a user's
// overlay would be. Its zero value renders artifacts/ unchanged.
type Overlay struct {
	// Image, when set, replaces the image (REGISTRY/REPOSITORY:TAG).
	Image string
	// Namespace, when set, moves the namespaced objects; the overlay then
	// runs artifacts/controller-identity so that the admission policies
	// exempt the moved ServiceAccount (docs/operations.md).
	Namespace string
	// Components are directories under artifacts/ added as kustomize
	// components, e.g. "monitoring".
	Components []string
}

// Render builds artifactsDir through the overlay and returns the YAML
// stream, in kustomize's order.
func Render(artifactsDir string, o Overlay) ([]byte, error) {
	m, err := build(artifactsDir, o)
	if err != nil {
		return nil, err
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("writing the rendered manifests as YAML: %w", err)
	}
	return out, nil
}

// Objects builds artifactsDir through the overlay and returns each object as
// a map, in kustomize's order.
func Objects(artifactsDir string, o Overlay) ([]map[string]any, error) {
	m, err := build(artifactsDir, o)
	if err != nil {
		return nil, err
	}
	var objs []map[string]any
	for _, r := range m.Resources() {
		obj, err := r.Map()
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", r.CurId(), err)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

func build(artifactsDir string, o Overlay) (resmap.ResMap, error) {
	fSys := filesys.MakeFsInMemory()
	// A copy in memory, so that the overlay sits beside it as a user's
	// would, and nothing is written into the repository.
	if err := copyTree(fSys, artifactsDir, "/artifacts"); err != nil {
		return nil, err
	}
	k := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  []string{"../artifacts"},
	}
	if o.Image != "" {
		name, tag, err := SplitImage(o.Image)
		if err != nil {
			return nil, err
		}
		k["images"] = []map[string]string{{"name": ImageName, "newName": name, "newTag": tag}}
	}
	if o.Namespace != "" {
		k["namespace"] = o.Namespace
		k["transformers"] = []string{"../artifacts/controller-identity"}
	}
	for _, c := range o.Components {
		k["components"] = append(asStrings(k["components"]), "../artifacts/"+c)
	}
	b, err := yaml.Marshal(k)
	if err != nil {
		return nil, err
	}
	if err := fSys.WriteFile("/overlay/kustomization.yaml", b); err != nil {
		return nil, err
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fSys, "/overlay")
	if err != nil {
		return nil, fmt.Errorf("kustomize build of %s: %w", artifactsDir, err)
	}
	return m, nil
}

func asStrings(v any) []string {
	s, _ := v.([]string)
	return s
}

// SplitImage splits REGISTRY/REPOSITORY:TAG at the tag's colon (a
// registry's port has one too, before the last slash).
func SplitImage(ref string) (name, tag string, err error) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") || i == len(ref)-1 {
		return "", "", fmt.Errorf("image %q has no tag: give it as REGISTRY/REPOSITORY:TAG", ref)
	}
	return ref[:i], ref[i+1:], nil
}

// copyTree copies the regular files under dir on disk to to in fSys.
func copyTree(fSys filesys.FileSystem, dir, to string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("reading the manifests: %w", err)
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		target := filepath.ToSlash(filepath.Join(to, rel))
		if d.IsDir() {
			return fSys.MkdirAll(target)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return fSys.WriteFile(target, b)
	})
}
