package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// krewModule is krew, pinned: its own manifest validation (the one the
// krew-index repository runs) and the krew command users install with.
const krewModule = "sigs.k8s.io/krew@v0.4.3"

func TestKrewVersion(t *testing.T) {
	for v, want := range map[string]string{
		"v1.2.3":                  "v1.2.3",
		"v1.2.3-4-gabcdef0":       "v1.2.3-4-gabcdef0",
		"v1.2.3-4-gabcdef0-dirty": "v1.2.3-4-gabcdef0-dirty",
		"a772eca":                 "v0.0.0-git-a772eca",
		"0123456-dirty":           "v0.0.0-git-0123456-dirty",
		"1.2.3":                   "v0.0.0-git-1-2-3",
		"dev":                     "v0.0.0-git-dev",
	} {
		if got := krewVersion(v); got != want {
			t.Errorf("krewVersion(%q) = %q, want %q", v, got, want)
		}
	}
}

// goCmd runs the go command in dir and returns its output.
func goCmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestPackForThisMachine packs a release for this machine's platform as
// make dist does for all of them, from binaries built as make dist builds
// them, then: verifies it (checksums, the archives' files, each binary's
// version, install.yaml's image), validates the krew manifest with krew's
// own validator, and installs the plugin from it with krew as the README
// says, offline, from the archive.
func TestPackForThisMachine(t *testing.T) {
	const version = "v0.3.1-2-gabcdef0"
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	host := platform{runtime.GOOS, runtime.GOARCH}
	bin := t.TempDir()
	ldflags := "-s -w -X main.version=" + version
	for pkg, name := range map[string]string{".": controllerBin, "./cmd/kubectl-ptp": pluginBin} {
		goCmd(t, root, []string{"CGO_ENABLED=0"}, "build", "-trimpath", "-ldflags", ldflags, "-o", filepath.Join(bin, host.String(), name), pkg)
	}

	r := release{
		version: version, image: "registry.example/podtoip-controller:" + version,
		releaseURL: "https://example.com/releases/" + version, homepage: "https://example.com/podtoip",
		platforms: []platform{host},
	}
	out := filepath.Join(t.TempDir(), "dist")
	if _, err := pack(root, bin, out, r); err != nil {
		t.Fatal(err)
	}
	report, err := verify(out, r)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(report)
	for _, want := range []string{controllerBin + " " + version, pluginBin + " " + version, "image " + r.image, "chart 0.3.1-2-gabcdef0, image " + r.image} {
		if !strings.Contains(report, want) {
			t.Errorf("the verification did not report %q:\n%s", want, report)
		}
	}
	if _, err := pack(root, bin, out, r); err == nil {
		t.Error("packing into a directory that holds a release did not fail")
	}

	manifest := filepath.Join(out, krewFile)
	t.Run("krew validates the manifest", func(t *testing.T) {
		goCmd(t, root, nil, "run", strings.Replace(krewModule, "@", "/cmd/validate-krew-manifest@", 1), "-manifest", manifest, "-skip-install")
	})

	t.Run("krew installs the plugin from the manifest and the archive", func(t *testing.T) {
		gobin := t.TempDir()
		goCmd(t, root, []string{"GOBIN=" + gobin}, "install", strings.Replace(krewModule, "@", "/cmd/krew@", 1))
		krewRoot := t.TempDir()
		archive := filepath.Join(out, r.archiveName(pluginBin, host))
		cmd := exec.CommandContext(t.Context(), filepath.Join(gobin, "krew"), "install", "--manifest="+manifest, "--archive="+archive)
		// Offline: no check for a newer krew.
		cmd.Env = append(os.Environ(), "KREW_ROOT="+krewRoot, "KREW_NO_UPGRADE_CHECK=1")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("krew install --manifest --archive: %v\n%s", err, b)
		}
		b, err := exec.CommandContext(t.Context(), filepath.Join(krewRoot, "bin", pluginBin), "version").CombinedOutput()
		if got := strings.TrimSpace(string(b)); err != nil || got != pluginBin+" "+version {
			t.Errorf("the installed plugin says %q (%v), want %q", got, err, pluginBin+" "+version)
		}
		if _, err := os.Stat(filepath.Join(krewRoot, "store", pluginName, krewVersion(version), "LICENSE")); err != nil {
			t.Errorf("krew did not install the LICENSE: %v", err)
		}
	})
}
