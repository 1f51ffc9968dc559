// Package helmchart renders a Helm chart as `helm template` and `helm
// install` do, with Helm's own packages, so that the tests and the release
// check the chart users install without a helm binary.
package helmchart

import (
	"fmt"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/strvals"
)

// releaseName and releaseNamespace are the release the chart is rendered
// as; the chart uses neither in names or namespaces (only in Helm's labels).
const (
	releaseName      = "podtoip-controller"
	releaseNamespace = "default"
)

// Render renders the chart in chartPath (a directory or a .tgz) with the
// values set (helm's --set syntax) and returns the manifests in the order
// helm install applies them, as Helm's engine renders them for `helm
// template`.
func Render(chartPath, set string) ([]releaseutil.Manifest, error) {
	chrt, err := loader.Load(chartPath)
	if err != nil {
		return nil, fmt.Errorf("loading the chart: %w", err)
	}
	vals := map[string]any{}
	if set != "" {
		if err := strvals.ParseInto(set, vals); err != nil {
			return nil, fmt.Errorf("values %q: %w", set, err)
		}
	}
	if err := chartutil.ProcessDependenciesWithMerge(chrt, vals); err != nil {
		return nil, err
	}
	caps := chartutil.DefaultCapabilities.Copy()
	top, err := chartutil.ToRenderValues(chrt, vals, chartutil.ReleaseOptions{
		Name: releaseName, Namespace: releaseNamespace, IsInstall: true,
	}, caps)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	files, err := engine.Render(chrt, top)
	if err != nil {
		return nil, err
	}
	for name := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, caps.APIVersions, releaseutil.InstallOrder)
	if err != nil {
		return nil, err
	}
	if len(hooks) > 0 {
		return nil, fmt.Errorf("the chart has %d hooks; it is meant to have none", len(hooks))
	}
	return manifests, nil
}

// Manifests is Render as one YAML stream.
func Manifests(chartPath, set string) (string, error) {
	manifests, err := Render(chartPath, set)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, m := range manifests {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Name, strings.TrimSpace(m.Content))
	}
	return b.String(), nil
}
