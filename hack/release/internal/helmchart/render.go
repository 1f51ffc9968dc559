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

// releaseName is the release the chart is rendered as; the chart uses it
// only in Helm's labels.
const releaseName = "podtoip-controller"

// DefaultNamespace is the release namespace Render uses when none is
// given: the namespace of artifacts/, so that the chart's defaults render
// what `kubectl apply -k artifacts/` applies.
const DefaultNamespace = "podtoip-system"

// Options are what `helm install` is told besides the chart.
type Options struct {
	// Namespace is the release's namespace (helm install -n);
	// DefaultNamespace when empty.
	Namespace string
	// Set are values in helm's --set syntax.
	Set string
	// SkipSchemaValidation renders without checking the values against
	// values.schema.json, as helm's --skip-schema-validation does.
	SkipSchemaValidation bool
}

// Rendered is what helm install renders: the manifests, in the order it
// applies them, and the notes it prints.
type Rendered struct {
	Manifests []releaseutil.Manifest
	Notes     string
}

// Render renders the chart in chartPath (a directory or a .tgz) with the
// default options.
func Render(chartPath, set string) ([]releaseutil.Manifest, error) {
	r, err := RenderWith(chartPath, Options{Set: set})
	if err != nil {
		return nil, err
	}
	return r.Manifests, nil
}

// RenderWith renders the chart in chartPath as helm install does: the
// values checked against the chart's schema (unless told not to), the
// manifests in the order it applies them, and the notes.
func RenderWith(chartPath string, o Options) (Rendered, error) {
	chrt, err := loader.Load(chartPath)
	if err != nil {
		return Rendered{}, fmt.Errorf("loading the chart: %w", err)
	}
	vals := map[string]any{}
	if o.Set != "" {
		if err := strvals.ParseInto(o.Set, vals); err != nil {
			return Rendered{}, fmt.Errorf("values %q: %w", o.Set, err)
		}
	}
	if err := chartutil.ProcessDependenciesWithMerge(chrt, vals); err != nil {
		return Rendered{}, err
	}
	ns := o.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	caps := chartutil.DefaultCapabilities.Copy()
	top, err := chartutil.ToRenderValuesWithSchemaValidation(chrt, vals, chartutil.ReleaseOptions{
		Name: releaseName, Namespace: ns, IsInstall: true,
	}, caps, o.SkipSchemaValidation)
	if err != nil {
		return Rendered{}, fmt.Errorf("values: %w", err)
	}
	files, err := engine.Render(chrt, top)
	if err != nil {
		return Rendered{}, err
	}
	var out Rendered
	for name, content := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			out.Notes = content
			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, caps.APIVersions, releaseutil.InstallOrder)
	if err != nil {
		return Rendered{}, err
	}
	if len(hooks) > 0 {
		return Rendered{}, fmt.Errorf("the chart has %d hooks; it is meant to have none", len(hooks))
	}
	out.Manifests = manifests
	return out, nil
}

// Manifests is RenderWith's manifests as one YAML stream.
func Manifests(chartPath string, o Options) (string, error) {
	r, err := RenderWith(chartPath, o)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, m := range r.Manifests {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Name, strings.TrimSpace(m.Content))
	}
	return b.String(), nil
}
