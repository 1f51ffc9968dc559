package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func TestLayerTar(t *testing.T) {
	bin, plugin := []byte("fake binary"), []byte("fake plugin")
	tarBytes, err := layerTar(layerFiles(bin, plugin))
	if err != nil {
		t.Fatal(err)
	}

	type entry struct {
		typeflag byte
		mode     int64
		uid, gid int
		body     string
	}
	want := map[string]entry{
		"etc/":               {tar.TypeDir, 0o755, 0, 0, ""},
		"etc/group":          {tar.TypeReg, 0o644, 0, 0, group},
		"etc/passwd":         {tar.TypeReg, 0o644, 0, 0, passwd},
		"home/":              {tar.TypeDir, 0o755, 0, 0, ""},
		"home/nonroot/":      {tar.TypeDir, 0o700, 65532, 65532, ""},
		"kubectl-ptp":        {tar.TypeReg, 0o755, 0, 0, "fake plugin"},
		"podtoip-controller": {tar.TypeReg, 0o755, 0, 0, "fake binary"},
		"tmp/":               {tar.TypeDir, 0o1777, 0, 0, ""},
	}

	tr := tar.NewReader(bytes.NewReader(tarBytes))
	got := map[string]entry{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if !hdr.ModTime.Equal(epoch) {
			t.Errorf("%s: mtime %v, want %v", hdr.Name, hdr.ModTime, epoch)
		}
		got[hdr.Name] = entry{hdr.Typeflag, hdr.Mode, hdr.Uid, hdr.Gid, string(body)}
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("missing %s", name)
			continue
		}
		if g != w {
			t.Errorf("%s: got %+v, want %+v", name, g, w)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected entry %s", name)
		}
	}

	// The sticky bit must survive as os.ModeSticky for extractors.
	tr = tar.NewReader(bytes.NewReader(tarBytes))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Name == "tmp/" {
			if m := hdr.FileInfo().Mode(); m&os.ModeSticky == 0 || m.Perm() != 0o777 || !m.IsDir() {
				t.Errorf("/tmp mode %v, want drwxrwxrwt", m)
			}
		}
	}
}

func TestLayerTarReproducible(t *testing.T) {
	a, err := layerTar(layerFiles([]byte("x"), []byte("y")))
	if err != nil {
		t.Fatal(err)
	}
	b, err := layerTar(layerFiles([]byte("x"), []byte("y")))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("two layer tars from the same binary differ")
	}
}

func TestPasswdGroupNonroot(t *testing.T) {
	if !strings.Contains(passwd, "\nnonroot:x:65532:65532:") {
		t.Errorf("passwd has no nonroot 65532 entry:\n%s", passwd)
	}
	if !strings.Contains(group, "\nnonroot:x:65532:") {
		t.Errorf("group has no nonroot 65532 entry:\n%s", group)
	}
}

func TestImageConfig(t *testing.T) {
	c := imageConfig("v1.2.3", "example.com/src")
	if c.User != "65532:65532" {
		t.Errorf("User = %q", c.User)
	}
	if len(c.Entrypoint) != 1 || c.Entrypoint[0] != "/podtoip-controller" {
		t.Errorf("Entrypoint = %q", c.Entrypoint)
	}
	if c.WorkingDir != "/" {
		t.Errorf("WorkingDir = %q", c.WorkingDir)
	}
	if len(c.Env) != 1 || !strings.HasPrefix(c.Env[0], "PATH=") {
		t.Errorf("Env = %q", c.Env)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.title":   "podtoip-controller",
		"org.opencontainers.image.source":  "example.com/src",
		"org.opencontainers.image.version": "v1.2.3",
	} {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
	}
}

// TestBuildImageRoundTrip builds an image with a fake binary and reads it
// back with the checks verify uses (all but the ELF and --version checks,
// which need a real static binary: TestBuildAndVerify has them).
func TestBuildImageRoundTrip(t *testing.T) {
	bin, plugin := []byte("fake binary contents"), []byte("fake plugin contents")
	img, err := buildImage(bin, plugin, "v9", "example.com/src", "arm64")
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s", mt)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkConfig(cf, "arm64"); err != nil {
		t.Error(err)
	}
	if err := checkConfig(cf, "amd64"); err == nil || !strings.Contains(err.Error(), "platform is linux/arm64, want linux/amd64") {
		t.Errorf("the arm64 image passed as amd64: %v", err)
	}
	if cf.Config.Labels[versionLabel] != "v9" {
		t.Errorf("version label = %q", cf.Config.Labels[versionLabel])
	}
	gotBin, gotPlugin, err := checkFiles(img)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gotBin, bin) || !bytes.Equal(gotPlugin, plugin) {
		t.Errorf("binaries in image = %q and %q, want %q and %q", gotBin, gotPlugin, bin, plugin)
	}

	// Same binaries, same digest.
	again, err := buildImage(bin, plugin, "v9", "example.com/src", "arm64")
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("image digest not reproducible: %s vs %s", d1, d2)
	}
}

// fakeController is a static program that answers --version as the
// controller does.
const fakeController = `package main

import (
	"fmt"
	"os"
)

var version = "dev"

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		fmt.Println("podtoip-controller", version)
	}
}
`

// fakePlugin is a static program that answers version as kubectl-ptp
// does.
const fakePlugin = `package main

import (
	"fmt"
	"os"
)

var version = "dev"

func main() {
	if len(os.Args) == 2 && os.Args[1] == "version" {
		fmt.Println("kubectl-ptp", version)
	}
}
`

// staticBinaries builds fakeController with version linked in, static, for
// each of the image's architectures.
func staticBinaries(t *testing.T, version string) map[string]string {
	t.Helper()
	return staticBuild(t, "podtoip-controller", fakeController, version)
}

// staticPlugins builds fakePlugin as staticBinaries does fakeController.
func staticPlugins(t *testing.T, version string) map[string]string {
	t.Helper()
	return staticBuild(t, "kubectl-ptp", fakePlugin, version)
}

// staticBuild builds the program source as name, static, with version
// linked in, for each of the image's architectures.
func staticBuild(t *testing.T, name, source, version string) map[string]string {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module fake\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, arch := range imageArchs {
		path := filepath.Join(t.TempDir(), name)
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version="+version, "-o", path, ".")
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building the %s test binary: %v\n%s", arch, err, b)
		}
		out[arch] = path
	}
	return out
}

// TestBuildAndVerify builds the image index from static binaries of both
// architectures and verifies it as make image does: both images, their
// platform, entrypoint, user, files, the ELF machine of each binary, the
// controller's and the plugin's, and the --version of this machine's
// controller and the version of its plugin.
func TestBuildAndVerify(t *testing.T) {
	binaries, plugins := staticBinaries(t, "v9.8.7"), staticPlugins(t, "v9.8.7")
	dir := filepath.Join(t.TempDir(), "image")
	var w bytes.Buffer
	if err := build(&w, binaries, plugins, "v9.8.7", "example.com/src", dir, "podtoip-controller:v9.8.7"); err != nil {
		t.Fatal(err)
	}
	w.Reset()
	if err := verify(&w, dir); err != nil {
		t.Fatal(err)
	}
	t.Log(w.String())
	for _, want := range []string{
		"linux/amd64: sha256:", "static ELF for EM_X86_64", "linux/arm64: sha256:", "static ELF for EM_AARCH64",
		`entrypoint ["/podtoip-controller"]`, "user 65532:65532", "--version: podtoip-controller v9.8.7", "version:    v9.8.7",
		"/kubectl-ptp: static ELF for EM_X86_64", "/kubectl-ptp: static ELF for EM_AARCH64", "version: kubectl-ptp v9.8.7",
		"files:      /etc/ /etc/group /etc/passwd /home/ /home/nonroot/ /kubectl-ptp /podtoip-controller /tmp/",
	} {
		if !strings.Contains(w.String(), want) {
			t.Errorf("verify did not report %q", want)
		}
	}

	// The layout's one entry is the index, named by the tag, with one
	// image per platform.
	idx, desc, err := readLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Annotations[refNameAnnotation] != "podtoip-controller:v9.8.7" || desc.MediaType != types.OCIImageIndex {
		t.Errorf("layout entry %s %v", desc.MediaType, desc.Annotations)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range im.Manifests {
		if m.Platform == nil || m.Platform.OS != "linux" || m.Platform.Architecture != imageArchs[i] || m.MediaType != types.OCIManifestSchema1 {
			t.Errorf("index entry %d: %s %+v", i, m.MediaType, m.Platform)
		}
	}

	// A binary for the other architecture is refused, the controller's
	// or the plugin's.
	swapped := map[string]string{"amd64": binaries["arm64"], "arm64": binaries["amd64"]}
	if err := build(&w, swapped, plugins, "v9.8.7", "example.com/src", filepath.Join(t.TempDir(), "image"), "podtoip-controller:v9.8.7"); err == nil ||
		!strings.Contains(err.Error(), "want ELFCLASS64 EM_X86_64 (amd64)") {
		t.Errorf("an arm64 binary was accepted for amd64: %v", err)
	}
	swapped = map[string]string{"amd64": plugins["amd64"], "arm64": plugins["amd64"]}
	if err := build(&w, binaries, swapped, "v9.8.7", "example.com/src", filepath.Join(t.TempDir(), "image"), "podtoip-controller:v9.8.7"); err == nil ||
		!strings.Contains(err.Error(), "want ELFCLASS64 EM_AARCH64 (arm64)") {
		t.Errorf("an amd64 plugin was accepted for arm64: %v", err)
	}
	// The plugin must be a binary for the image: not a script.
	script := filepath.Join(t.TempDir(), "kubectl-ptp")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho kubectl-ptp v9.8.7\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := build(&w, binaries, map[string]string{"amd64": script, "arm64": plugins["arm64"]}, "v9.8.7", "example.com/src", filepath.Join(t.TempDir(), "image"), "podtoip-controller:v9.8.7"); err == nil ||
		!strings.Contains(err.Error(), "not an ELF binary") {
		t.Errorf("a script was accepted as the amd64 plugin: %v", err)
	}
}

// TestVerifyRefusesAPluginOfAnotherVersion: the plugin in the image is run
// with version, and one of another build than the controller is refused:
// it would read the history of another version.
func TestVerifyRefusesAPluginOfAnotherVersion(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "image")
	if err := build(io.Discard, staticBinaries(t, "v9.8.7"), staticPlugins(t, "v1.0.0"), "v9.8.7", "example.com/src", dir, "podtoip-controller:v9.8.7"); err != nil {
		t.Fatal(err)
	}
	err := verify(io.Discard, dir)
	if err == nil || !strings.Contains(err.Error(), `/kubectl-ptp version printed "kubectl-ptp v1.0.0", but the image's org.opencontainers.image.version label says "v9.8.7"`) {
		t.Errorf("an image whose plugin is of another version passed: %v", err)
	}
}

// TestVerifyRefusesAnImageWithoutThePlugin: an image as make image built
// it before the plugin was in it is refused, naming what is missing.
func TestVerifyRefusesAnImageWithoutThePlugin(t *testing.T) {
	img, err := buildImage([]byte("bin"), []byte("plugin"), "v9", "s", "amd64")
	if err != nil {
		t.Fatal(err)
	}
	tarBytes, err := layerTar(slices.DeleteFunc(layerFiles([]byte("bin"), nil), func(f file) bool { return f.name == pluginName }))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(tarBytes)), nil }, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	old, err := mutate.Append(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), mutate.Addendum{Layer: layer, MediaType: types.OCILayer})
	if err != nil {
		t.Fatal(err)
	}
	if old, err = mutate.ConfigFile(old, cf); err != nil {
		t.Fatal(err)
	}
	if _, _, err := checkFiles(old); err == nil || !strings.Contains(err.Error(), "missing from the image: /kubectl-ptp") {
		t.Errorf("an image without the plugin passed: %v", err)
	}
}

// TestVerifyRefusesASinglePlatformImage: a layout of one image (what
// make image wrote before the image had two platforms) is refused.
func TestVerifyRefusesASinglePlatformImage(t *testing.T) {
	img, err := buildImage([]byte("bin"), []byte("plugin"), "v9", "s", "amd64")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "image")
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{refNameAnnotation: "podtoip-controller:v9"})); err != nil {
		t.Fatal(err)
	}
	if err := verify(io.Discard, dir); err == nil || !strings.Contains(err.Error(), "want an image index") {
		t.Errorf("a single-platform layout passed: %v", err)
	}
}

func TestCheckConfigRejectsRoot(t *testing.T) {
	cf := &v1.ConfigFile{OS: "linux", Architecture: "amd64", Config: imageConfig("v1", "s")}
	cf.Config.User = ""
	cf.Config.Entrypoint = []string{"/bin/sh"}
	err := checkConfig(cf, "amd64")
	if err == nil {
		t.Fatal("checkConfig accepted a root user and a wrong entrypoint")
	}
	for _, s := range []string{"user", "entrypoint"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %s", err, s)
		}
	}
}

func TestCheckStaticELF(t *testing.T) {
	if err := checkStaticELF([]byte("#!/bin/sh\n"), "amd64"); err == nil || !strings.Contains(err.Error(), "not an ELF") {
		t.Errorf("script: got %v, want a not-an-ELF error", err)
	}
	// A dynamically linked system binary must be rejected.
	for _, p := range []string{"/bin/true", "/usr/bin/true"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if err := checkStaticELF(b, runtime.GOARCH); err == nil {
			t.Logf("%s is static; skipping the dynamic case", p)
		} else if !strings.Contains(err.Error(), "dynamic") {
			t.Errorf("%s: unexpected error %v", p, err)
		}
		return
	}
	t.Log("no /bin/true; skipping the dynamic case")
}

func TestPrepareOutRefusesUnrelatedDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := prepareOut(dir); err == nil {
		t.Fatal("prepareOut would replace a directory that is not an OCI layout")
	}
	if _, err := os.Stat(filepath.Join(dir, "keep.txt")); err != nil {
		t.Fatal("prepareOut removed an unrelated file")
	}

	layoutDir := filepath.Join(t.TempDir(), "image")
	if _, err := layout.Write(layoutDir, empty.Index); err != nil {
		t.Fatal(err)
	}
	if err := prepareOut(layoutDir); err != nil {
		t.Fatalf("prepareOut refused an OCI layout: %v", err)
	}
	if _, err := os.Stat(layoutDir); !os.IsNotExist(err) {
		t.Errorf("old layout not removed: %v", err)
	}
}
