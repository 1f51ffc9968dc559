package main

import (
	"fmt"
	"strings"

	"github.com/blang/semver/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/krew/pkg/constants"
	"sigs.k8s.io/krew/pkg/index"
	"sigs.k8s.io/yaml"
)

// archive is one kubectl-ptp archive, for the krew manifest.
type archive struct {
	name     string
	platform platform
	sha256   string
}

const (
	krewShort = "Find the pod that has, or had, an IP address"

	krewDescription = `Answers "who has this IP?" and "who had it at 14:05?" for any address of
any pod, IPv4 or IPv6, from the PodToIp and IPHistory objects that
podtoip-controller keeps, one per pod and one per address:

  kubectl ptp who-has 10.244.1.7
  kubectl ptp who-had 10.244.1.7 --at 14:05
  kubectl ptp history 10.244.1.7
  kubectl ptp conflicts
  kubectl ptp check
`

	krewCaveats = `The plugin reads what podtoip-controller writes: install and run the
controller in the cluster first (see the homepage), or every lookup finds
nothing.

Reading needs the ClusterRole podtoip-controller-view: it is aggregated
into view, edit and admin, which give who-has and conflicts in their
namespace; who-had and history read cluster-scoped IPHistory objects, so
bind podtoip-controller-view cluster-wide for them, e.g.
  kubectl create clusterrolebinding oncall-podtoips \
    --clusterrole=podtoip-controller-view --group=oncall
"kubectl ptp check" proves the install safe; run it as a cluster admin.
`
)

// krewVersion is the release's version as krew requires it, a semantic
// version starting with v. A tagged release (v1.2.3, or git describe's
// v1.2.3-4-gabcdef0 past it) is one already; a build without a tag (a
// bare commit hash) becomes the pre-release v0.0.0-git-HASH.
func krewVersion(v string) string {
	if strings.HasPrefix(v, "v") {
		if _, err := semver.Parse(v[1:]); err == nil {
			return v
		}
	}
	clean := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' {
			return r
		}
		return '-'
	}, v)
	return "v0.0.0-git-" + clean
}

// krewManifest is the krew plugin manifest of the kubectl-ptp archives:
// one platform each, selected by os and arch, downloaded from the
// release's URL and checked against its SHA-256.
func krewManifest(r release, archives []archive) ([]byte, error) {
	p := index.Plugin{
		TypeMeta:   metav1.TypeMeta{APIVersion: constants.CurrentAPIVersion, Kind: constants.PluginKind},
		ObjectMeta: metav1.ObjectMeta{Name: pluginName},
		Spec: index.PluginSpec{
			Version:          krewVersion(r.version),
			Homepage:         r.homepage,
			ShortDescription: krewShort,
			Description:      krewDescription,
			Caveats:          krewCaveats,
		},
	}
	for _, a := range archives {
		p.Spec.Platforms = append(p.Spec.Platforms, index.Platform{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"os": a.platform.os, "arch": a.platform.arch}},
			URI:      r.releaseURL + "/" + a.name,
			Sha256:   a.sha256,
			Bin:      pluginBin,
			Files: []index.FileOperation{
				{From: pluginBin, To: "."},
				{From: "LICENSE", To: "."},
			},
		})
	}
	b, err := yaml.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("writing the krew manifest: %w", err)
	}
	return b, nil
}
