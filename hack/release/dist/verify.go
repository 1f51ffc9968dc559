package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"sigs.k8s.io/krew/pkg/index"
	"sigs.k8s.io/yaml"

	"example.com/podtoip-controller/hack/release/internal/helmchart"
)

// checkBinary checks that b is an executable for p: an ELF file for the
// architecture on linux, a Mach-O one on darwin, so that a mix-up of the
// Makefile's output directories cannot ship the wrong binary.
func checkBinary(b []byte, p platform) error {
	switch p.os {
	case "linux":
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.arch]
		f, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			return fmt.Errorf("not an ELF executable for %s: %w", p, err)
		}
		defer f.Close()
		if f.Machine != want || f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
			return fmt.Errorf("an ELF %s for %s, want an executable for %s (%s)", f.Type, f.Machine, p, want)
		}
	case "darwin":
		want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[p.arch]
		f, err := macho.NewFile(bytes.NewReader(b))
		if err != nil {
			return fmt.Errorf("not a Mach-O executable for %s: %w", p, err)
		}
		defer f.Close()
		if f.Cpu != want || f.Type != macho.TypeExec {
			return fmt.Errorf("a Mach-O %s for %s, want an executable for %s (%s)", f.Type, f.Cpu, p, want)
		}
	default:
		return fmt.Errorf("no check for the binaries of %s", p)
	}
	return nil
}

// verify checks the release in dir: the checksums, every archive (its
// three files, the binary for its platform), the host's binaries'
// versions, install.yaml's image and the krew manifest's platforms. It
// returns a summary.
func verify(dir string, r release) (string, error) {
	sums, err := readChecksums(filepath.Join(dir, checksumsFile))
	if err != nil {
		return "", err
	}
	var want []string
	for _, p := range r.platforms {
		want = append(want, r.archiveName(controllerBin, p), r.archiveName(pluginBin, p))
	}
	want = append(want, installFile, krewFile, r.chartFile())
	if got := slices.Sorted(maps.Keys(sums)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		return "", fmt.Errorf("%s lists %q, want %q", checksumsFile, got, want)
	}
	files := map[string][]byte{}
	for _, name := range want {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", err
		}
		s := sha256.Sum256(b)
		if got := hex.EncodeToString(s[:]); got != sums[name] {
			return "", fmt.Errorf("%s has SHA-256 %s, %s says %s", name, got, checksumsFile, sums[name])
		}
		files[name] = b
	}

	var report strings.Builder
	host := platform{runtime.GOOS, runtime.GOARCH}
	for _, p := range r.platforms {
		for _, bin := range []string{controllerBin, pluginBin} {
			name := r.archiveName(bin, p)
			headers, bodies, err := archiveEntries(files[name])
			if err != nil {
				return "", fmt.Errorf("%s: %w", name, err)
			}
			if got, want := slices.Sorted(maps.Keys(headers)), slices.Sorted(slices.Values(append([]string{bin}, docs...))); !slices.Equal(got, want) {
				return "", fmt.Errorf("%s holds %q, want %q", name, got, want)
			}
			if headers[bin].Mode&0o111 == 0 {
				return "", fmt.Errorf("%s: %s is not executable (mode %#o)", name, bin, headers[bin].Mode)
			}
			if err := checkBinary(bodies[bin], p); err != nil {
				return "", fmt.Errorf("%s: %s: %w", name, bin, err)
			}
			if p != host {
				continue
			}
			got, err := runVersion(bodies[bin], bin)
			if err != nil {
				return "", fmt.Errorf("%s: %w", name, err)
			}
			if want := bin + " " + r.version; got != want {
				return "", fmt.Errorf("%s: the binary says it is %q, want %q", name, got, want)
			}
			fmt.Fprintf(&report, "  %s: %s\n", name, got)
		}
	}
	if err := checkInstallYAML(files[installFile], r.image); err != nil {
		return "", err
	}
	if err := checkChart(filepath.Join(dir, r.chartFile()), r); err != nil {
		return "", err
	}
	plugin, err := checkKrewManifest(files[krewFile], r, sums)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&report, "  %s: image %s\n  %s: chart %s, image %s\n  %s: %s %s, %d platforms\n", installFile, r.image,
		r.chartFile(), r.chartVersion(), r.image, krewFile, plugin.Name, plugin.Spec.Version, len(plugin.Spec.Platforms))
	return fmt.Sprintf("verified release %s in %s (%d files in %s)\n%s", r.version, dir, len(want), checksumsFile, report.String()), nil
}

// readChecksums reads a sha256sum listing into file name -> hex digest.
func readChecksums(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != sha256.Size*2 {
			return nil, fmt.Errorf("%s: line %q is not \"SHA256  FILE\"", path, sc.Text())
		}
		sums[name] = sum
	}
	return sums, sc.Err()
}

// checkInstallYAML checks that install.yaml runs the release's image, and
// nothing else.
func checkInstallYAML(b []byte, image string) error {
	if images := images(string(b)); !slices.Equal(images, []string{image}) {
		return fmt.Errorf("%s runs the images %q, want exactly %s", installFile, images, image)
	}
	return nil
}

// images lists the images the manifests run.
func images(manifests string) []string {
	var images []string
	for _, line := range strings.Split(manifests, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "image: "); ok {
			images = append(images, strings.Trim(v, `"'`))
		}
	}
	return images
}

// checkChart renders the packed chart with its defaults, as `helm install`
// would, and checks that it is the packed release's and runs its image.
func checkChart(path string, r release) error {
	chrt, err := loader.Load(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if chrt.Metadata.Version != r.chartVersion() {
		return fmt.Errorf("%s is chart version %s, want %s", path, chrt.Metadata.Version, r.chartVersion())
	}
	manifests, err := helmchart.Manifests(path, helmchart.Options{})
	if err != nil {
		return fmt.Errorf("rendering %s: %w", path, err)
	}
	if images := images(manifests); !slices.Equal(images, []string{r.image}) {
		return fmt.Errorf("%s runs the images %q by default, want exactly %s", r.chartFile(), images, r.image)
	}
	return nil
}

// checkKrewManifest checks that the krew manifest names the packed release, and
// has one platform for each plugin archive, downloaded from the release's
// URL with the archive's SHA-256. (krew's own validation is run on it by
// make dist and the tests: validate-krew-manifest.)
func checkKrewManifest(b []byte, r release, sums map[string]string) (*index.Plugin, error) {
	var p index.Plugin
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", krewFile, err)
	}
	if p.Name != pluginName || p.Spec.Version != krewVersion(r.version) {
		return nil, fmt.Errorf("%s is plugin %s %s, want %s %s", krewFile, p.Name, p.Spec.Version, pluginName, krewVersion(r.version))
	}
	if len(p.Spec.Platforms) != len(r.platforms) {
		return nil, fmt.Errorf("%s has %d platforms, want %d", krewFile, len(p.Spec.Platforms), len(r.platforms))
	}
	for i, pl := range p.Spec.Platforms {
		want := r.platforms[i]
		name := r.archiveName(pluginBin, want)
		if sel := pl.Selector; sel == nil || sel.MatchLabels["os"] != want.os || sel.MatchLabels["arch"] != want.arch {
			return nil, fmt.Errorf("%s: platform %d selects %v, want %s", krewFile, i, sel, want)
		}
		if !strings.HasSuffix(pl.URI, "/"+name) || pl.Sha256 != sums[name] {
			return nil, fmt.Errorf("%s: platform %s downloads %s (SHA-256 %s), want .../%s (%s)", krewFile, want, pl.URI, pl.Sha256, name, sums[name])
		}
	}
	return &p, nil
}

// runVersion runs the binary's version command (--version, or version for
// the plugin) from a temporary file and returns its trimmed output.
func runVersion(binary []byte, bin string) (string, error) {
	dir, err := os.MkdirTemp("", "podtoip-dist-verify-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, bin)
	if err := os.WriteFile(path, binary, 0o755); err != nil {
		return "", err
	}
	arg := "--version"
	if bin == pluginBin {
		arg = "version"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, arg).CombinedOutput()
	if err != nil {
		return "", errors.Join(fmt.Errorf("%s %s: %w", bin, arg, err), errors.New(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}
