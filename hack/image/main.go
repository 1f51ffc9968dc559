// Command image builds the podtoip-controller container image as an OCI image
// layout without a Docker engine or a base-image download, and verifies such
// a layout. The layout holds one image index, for linux/amd64 and
// linux/arm64, so that one reference runs on nodes of either architecture.
//
// The image is equivalent to the one the repository's Dockerfile produces: a
// single layer holding the static controller at /podtoip-controller (the
// entrypoint), the static kubectl plugin at /kubectl-ptp (for `kubectl ptp
// export` run in the cluster, artifacts/export), /etc/passwd and /etc/group
// with the distroless "nonroot" user (65532), the nonroot home directory and
// a world-writable /tmp; it runs as 65532:65532.
//
// Build:
//
//	go run . -binary linux/amd64=PATH -binary linux/arm64=PATH \
//	  -plugin linux/amd64=PATH -plugin linux/arm64=PATH -version V -out DIR [-tag NAME:TAG]
//
// Verify:
//
//	go run . -verify DIR
//
// Both binaries must be static (built with CGO_ENABLED=0): the image has no
// dynamic loader or libc.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

const (
	imageTitle = "podtoip-controller"
	// binaryName is the controller's path in the image, relative to /.
	binaryName = "podtoip-controller"
	entrypoint = "/" + binaryName
	// pluginName is the kubectl plugin's path in the image, relative to /:
	// a CronJob runs it as its command (artifacts/export), the entrypoint
	// stays the controller.
	pluginName = "kubectl-ptp"
	pluginPath = "/" + pluginName

	// The distroless "nonroot" user and group.
	nonrootID = 65532
	imageUser = "65532:65532"

	imageOS   = "linux"
	imagePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

	refNameAnnotation = "org.opencontainers.image.ref.name"
	titleLabel        = "org.opencontainers.image.title"
	sourceLabel       = "org.opencontainers.image.source"
	versionLabel      = "org.opencontainers.image.version"

	// versionPrefix starts the controller's --version output,
	// pluginVersionPrefix the plugin's version output.
	versionPrefix       = "podtoip-controller "
	pluginVersionPrefix = "kubectl-ptp "
	runTimeout          = 30 * time.Second
)

// imageArchs are the architectures the image index holds an image for, in
// its order; each image's binary is an ELF file for the machine given.
var imageArchs = []string{"amd64", "arm64"}

var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// binariesFlag collects -binary (or -plugin) OS/ARCH=PATH, one per
// architecture.
type binariesFlag map[string]string

func (b binariesFlag) String() string { return fmt.Sprint(map[string]string(b)) }

func (b binariesFlag) Set(v string) error {
	platform, path, ok := strings.Cut(v, "=")
	goos, arch, ok2 := strings.Cut(platform, "/")
	if !ok || !ok2 || goos != imageOS || elfMachines[arch] == 0 || path == "" {
		return fmt.Errorf("%q: want %s/ARCH=PATH, ARCH one of %v", v, imageOS, imageArchs)
	}
	b[arch] = path
	return nil
}

// epoch is the timestamp of every file and of the image itself, so that the
// same binary always yields the same image digest.
var epoch = time.Unix(0, 0).UTC()

// Exit codes.
const (
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	binaries, plugins := binariesFlag{}, binariesFlag{}
	flag.Var(binaries, "binary", "OS/ARCH=PATH: the static podtoip-controller binary for that platform (one for each of linux/amd64 and linux/arm64, required to build).")
	flag.Var(plugins, "plugin", "OS/ARCH=PATH: the static kubectl-ptp binary for that platform (one for each of linux/amd64 and linux/arm64, required to build).")
	var (
		version   = flag.String("version", "dev", "Image version, recorded in the org.opencontainers.image.version label.")
		source    = flag.String("source", "example.com/podtoip-controller", "Value of the org.opencontainers.image.source label.")
		out       = flag.String("out", "", "Directory to write the OCI image layout to (required to build). An existing OCI layout there is replaced.")
		tag       = flag.String("tag", "podtoip-controller:dev", "Image reference recorded in the "+refNameAnnotation+" annotation of the layout's index.")
		verifyDir = flag.String("verify", "", "Verify the OCI image layout in this directory instead of building one.")
	)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage:\n  %[1]s -binary linux/amd64=PATH -binary linux/arm64=PATH -plugin linux/amd64=PATH -plugin linux/arm64=PATH -version V -out DIR [-tag NAME:TAG] [-source S]\n  %[1]s -verify DIR\n\nFlags:\n", filepath.Base(os.Args[0]))
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		usageError("unexpected arguments %q", flag.Args())
	}

	if *verifyDir != "" {
		if len(binaries) > 0 || len(plugins) > 0 || *out != "" {
			usageError("-verify cannot be combined with -binary, -plugin or -out")
		}
		if err := verify(os.Stdout, *verifyDir); err != nil {
			fail("verify %s: %v", *verifyDir, err)
		}
		return
	}

	if len(binaries) != len(imageArchs) || len(plugins) != len(imageArchs) || *out == "" {
		usageError("-binary and -plugin for each of %v, and -out, are required (or use -verify DIR)", imageArchs)
	}
	if *version == "" {
		usageError("-version must not be empty")
	}
	if _, err := name.NewTag(*tag); err != nil {
		usageError("-tag %q: %v", *tag, err)
	}
	if err := build(os.Stdout, binaries, plugins, *version, *source, *out, *tag); err != nil {
		fail("build image: %v", err)
	}
}

func usageError(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "error: "+format+"\n", args...)
	flag.Usage()
	os.Exit(exitUsage)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
	os.Exit(exitFailure)
}

// file is one entry of the image's only layer.
type file struct {
	name     string // slash-separated, relative to /; directories end in "/"
	typeflag byte
	mode     int64 // permission bits, including sticky
	uid, gid int
	body     []byte
}

// passwd and group hold the same users and groups as distroless images.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		"tty:x:5:\n" +
		"staff:x:50:\n" +
		"nonroot:x:65532:\n"
)

// layerFiles returns the image's files in the order they appear in the layer:
// binary is the controller's, plugin the kubectl plugin's. It is also the
// list verify expects, exactly.
func layerFiles(binary, plugin []byte) []file {
	return []file{
		{name: "etc/", typeflag: tar.TypeDir, mode: 0o755},
		{name: "etc/group", typeflag: tar.TypeReg, mode: 0o644, body: []byte(group)},
		{name: "etc/passwd", typeflag: tar.TypeReg, mode: 0o644, body: []byte(passwd)},
		{name: "home/", typeflag: tar.TypeDir, mode: 0o755},
		{name: "home/nonroot/", typeflag: tar.TypeDir, mode: 0o700, uid: nonrootID, gid: nonrootID},
		{name: pluginName, typeflag: tar.TypeReg, mode: 0o755, body: plugin},
		{name: binaryName, typeflag: tar.TypeReg, mode: 0o755, body: binary},
		{name: "tmp/", typeflag: tar.TypeDir, mode: 0o1777},
	}
}

// layerTar returns the uncompressed tar stream of files, with fixed
// timestamps so that it is reproducible.
func layerTar(files []file) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		hdr := &tar.Header{
			Typeflag: f.typeflag,
			Name:     f.name,
			Mode:     f.mode,
			Uid:      f.uid,
			Gid:      f.gid,
			ModTime:  epoch,
			Format:   tar.FormatPAX,
		}
		if f.typeflag == tar.TypeReg {
			hdr.Size = int64(len(f.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("tar header %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, fmt.Errorf("tar body %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// imageConfig returns the runtime configuration, matching the Dockerfile's
// USER and ENTRYPOINT on top of distroless/static:nonroot.
func imageConfig(version, source string) v1.Config {
	return v1.Config{
		Entrypoint: []string{entrypoint},
		User:       imageUser,
		WorkingDir: "/",
		Env:        []string{imagePath},
		Labels: map[string]string{
			titleLabel:   imageTitle,
			sourceLabel:  source,
			versionLabel: version,
		},
	}
}

// buildImage assembles the OCI image for arch from the contents of the
// controller's binary and the plugin's.
func buildImage(binary, plugin []byte, version, source, arch string) (v1.Image, error) {
	tarBytes, err := layerTar(layerFiles(binary, plugin))
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}

	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: epoch},
			CreatedBy: "hack/image: COPY podtoip-controller, kubectl-ptp, /etc/passwd, /etc/group, /home/nonroot, /tmp",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS = imageOS
	cf.Architecture = arch
	cf.Created = v1.Time{Time: epoch}
	cf.Config = imageConfig(version, source)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	return img, nil
}

// build reads the controller's binaries and the plugin's, checks that each
// is static and for its architecture, and writes the image index of their
// images to the OCI layout at out, replacing a previous layout there.
func build(w io.Writer, binaries, plugins map[string]string, version, source, out, tag string) error {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range imageArchs {
		binary, err := readStatic(binaries[arch], arch)
		if err != nil {
			return err
		}
		plugin, err := readStatic(plugins[arch], arch)
		if err != nil {
			return err
		}
		img, err := buildImage(binary, plugin, version, source, arch)
		if err != nil {
			return err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: imageOS, Architecture: arch}},
		})
	}
	if err := prepareOut(out); err != nil {
		return err
	}
	lp, err := layout.Write(out, empty.Index)
	if err != nil {
		return fmt.Errorf("write layout: %w", err)
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{refNameAnnotation: tag})); err != nil {
		return fmt.Errorf("write image index: %w", err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %s to %s\n  index digest: %s (%s/%s)\n", tag, out, digest, imageOS, strings.Join(imageArchs, ", "+imageOS+"/"))
	return nil
}

// readStatic reads the binary at path and checks that it is static and for
// arch.
func readStatic(path, arch string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := checkStaticELF(b, arch); err != nil {
		return nil, fmt.Errorf("%s: %w (build it with CGO_ENABLED=0 GOOS=%s GOARCH=%s)", path, err, imageOS, arch)
	}
	return b, nil
}

// prepareOut makes sure out can receive a fresh layout: it must not exist,
// be an empty directory, or hold an OCI layout, which is removed. Anything
// else is left alone, so a mistyped -out cannot delete unrelated files.
func prepareOut(out string) error {
	entries, err := os.ReadDir(out)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case len(entries) == 0:
		return nil
	}
	if _, err := os.Stat(filepath.Join(out, "oci-layout")); err != nil {
		return fmt.Errorf("-out %s exists and is not an OCI image layout; refusing to replace it", out)
	}
	return os.RemoveAll(out)
}

// imageSize is the total size of the image's blobs: manifest, config and
// compressed layers.
func imageSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	mSize, err := img.Size()
	if err != nil {
		return 0, err
	}
	total := mSize + m.Config.Size
	for _, l := range m.Layers {
		total += l.Size
	}
	return total, nil
}

func humanSize(n int64) string {
	return fmt.Sprintf("%d bytes (%.1f MiB)", n, float64(n)/(1<<20))
}

// verify checks the OCI layout in dir: one image index, with one image for
// each of linux/amd64 and linux/arm64, each running the static binary for
// its architecture at /podtoip-controller as 65532:65532, with the static
// plugin for its architecture at /kubectl-ptp and exactly the expected
// files; then runs the binaries of this machine's architecture: the
// controller with --version, the plugin with version.
func verify(w io.Writer, dir string) error {
	idx, desc, err := readLayout(dir)
	if err != nil {
		return err
	}
	if err := validate.Index(idx); err != nil {
		return fmt.Errorf("image index blobs are inconsistent: %w", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	var archs []string
	for _, m := range im.Manifests {
		if m.Platform == nil {
			return fmt.Errorf("index entry %s names no platform", m.Digest)
		}
		archs = append(archs, m.Platform.OS+"/"+m.Platform.Architecture)
	}
	var want []string
	for _, arch := range imageArchs {
		want = append(want, imageOS+"/"+arch)
	}
	if !reflect.DeepEqual(archs, want) {
		return fmt.Errorf("the image index holds %v, want %v", archs, want)
	}
	fmt.Fprintf(w, "verified OCI layout %s\n", dir)
	fmt.Fprintf(w, "  tag:        %s\n", desc.Annotations[refNameAnnotation])
	fmt.Fprintf(w, "  index:      %s\n", desc.Digest)
	var version string
	for i, m := range im.Manifests {
		arch := imageArchs[i]
		if !m.MediaType.IsImage() {
			return fmt.Errorf("index entry for %s has media type %s, want an image manifest", arch, m.MediaType)
		}
		img, err := idx.Image(m.Digest)
		if err != nil {
			return fmt.Errorf("read the %s image %s: %w", arch, m.Digest, err)
		}
		got, err := verifyImage(img, arch)
		if err != nil {
			return fmt.Errorf("%s/%s image: %w", imageOS, arch, err)
		}
		if version != "" && got.version != version {
			return fmt.Errorf("the %s image is version %q, the %s one %q", arch, got.version, imageArchs[0], version)
		}
		version = got.version
		fmt.Fprintf(w, "  %s/%s: %s, %s, user %s (non-root), entrypoint %q, static ELF for %s of %s%s\n",
			imageOS, arch, m.Digest, humanSize(got.size), got.user, got.entrypoint, got.machine, humanSize(got.binarySize), got.ran)
		fmt.Fprintf(w, "    %s: static ELF for %s of %s%s\n", pluginPath, got.machine, humanSize(got.pluginSize), got.pluginRan)
	}
	var names []string
	for _, f := range layerFiles(nil, nil) {
		names = append(names, "/"+f.name)
	}
	fmt.Fprintf(w, "  files:      %s\n", strings.Join(names, " "))
	fmt.Fprintf(w, "  version:    %s\n", version)
	return nil
}

// checkedImage is what verifyImage found in one image.
type checkedImage struct {
	version, user, ran, pluginRan string
	entrypoint                    []string
	machine                       elf.Machine
	size, binarySize, pluginSize  int64
}

// verifyImage checks one image of the index: its blobs, configuration,
// files and binaries, all for arch; it runs the binaries when arch is this
// machine's.
func verifyImage(img v1.Image, arch string) (checkedImage, error) {
	if err := validate.Image(img); err != nil {
		return checkedImage{}, fmt.Errorf("image blobs are inconsistent: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return checkedImage{}, fmt.Errorf("config: %w", err)
	}
	if err := checkConfig(cf, arch); err != nil {
		return checkedImage{}, err
	}
	binary, plugin, err := checkFiles(img)
	if err != nil {
		return checkedImage{}, err
	}
	if err := checkStaticELF(binary, arch); err != nil {
		return checkedImage{}, fmt.Errorf("%s: %w", entrypoint, err)
	}
	if err := checkStaticELF(plugin, arch); err != nil {
		return checkedImage{}, fmt.Errorf("%s: %w", pluginPath, err)
	}
	size, err := imageSize(img)
	if err != nil {
		return checkedImage{}, err
	}
	c := checkedImage{
		version: cf.Config.Labels[versionLabel], user: cf.Config.User, entrypoint: cf.Config.Entrypoint,
		machine: elfMachines[arch], size: size, binarySize: int64(len(binary)), pluginSize: int64(len(plugin)),
		ran: ", not run (not this machine's architecture)", pluginRan: ", not run (not this machine's architecture)",
	}
	if runtime.GOOS == imageOS && runtime.GOARCH == arch {
		got, err := runVersion(binary, binaryName, "--version", versionPrefix)
		if err != nil {
			return checkedImage{}, err
		}
		if want := versionPrefix + c.version; got != want {
			return checkedImage{}, fmt.Errorf("%s --version printed %q, but the image's %s label says %q", entrypoint, got, versionLabel, c.version)
		}
		c.ran = ", --version: " + got
		// The plugin of another build would read the history of another
		// version of the controller.
		got, err = runVersion(plugin, pluginName, "version", pluginVersionPrefix)
		if err != nil {
			return checkedImage{}, err
		}
		if want := pluginVersionPrefix + c.version; got != want {
			return checkedImage{}, fmt.Errorf("%s version printed %q, but the image's %s label says %q: build the plugin with the controller, from the same commit", pluginPath, got, versionLabel, c.version)
		}
		c.pluginRan = ", version: " + got
	}
	return c, nil
}

// readLayout opens the layout in dir and returns its only image index.
func readLayout(dir string) (v1.ImageIndex, v1.Descriptor, error) {
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("not an OCI image layout: %w", err)
	}
	lp, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("read index: %w", err)
	}
	im, err := lp.IndexManifest()
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("parse index.json: %w", err)
	}
	if len(im.Manifests) != 1 {
		return nil, v1.Descriptor{}, fmt.Errorf("index.json lists %d manifests, want exactly 1 (the image index)", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if !desc.MediaType.IsIndex() {
		return nil, v1.Descriptor{}, fmt.Errorf("index.json entry has media type %s, want an image index (a multi-platform image; rebuild with make image)", desc.MediaType)
	}
	if desc.Annotations[refNameAnnotation] == "" {
		return nil, v1.Descriptor{}, fmt.Errorf("index.json entry has no %s annotation", refNameAnnotation)
	}
	idx, err := lp.ImageIndex(desc.Digest)
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("read image index %s: %w", desc.Digest, err)
	}
	return idx, desc, nil
}

// checkConfig checks the runtime configuration: non-root user, entrypoint,
// platform (linux/arch) and labels.
func checkConfig(cf *v1.ConfigFile, arch string) error {
	var errs []error
	if cf.Config.User != imageUser {
		errs = append(errs, fmt.Errorf("config user is %q, want %q (non-root)", cf.Config.User, imageUser))
	}
	if !reflect.DeepEqual(cf.Config.Entrypoint, []string{entrypoint}) {
		errs = append(errs, fmt.Errorf("config entrypoint is %q, want %q", cf.Config.Entrypoint, []string{entrypoint}))
	}
	if len(cf.Config.Cmd) != 0 {
		errs = append(errs, fmt.Errorf("config cmd is %q, want none", cf.Config.Cmd))
	}
	if cf.OS != imageOS || cf.Architecture != arch {
		errs = append(errs, fmt.Errorf("platform is %s/%s, want %s/%s", cf.OS, cf.Architecture, imageOS, arch))
	}
	for _, l := range []string{titleLabel, sourceLabel, versionLabel} {
		if cf.Config.Labels[l] == "" {
			errs = append(errs, fmt.Errorf("label %s is missing", l))
		}
	}
	return errors.Join(errs...)
}

// checkFiles checks that the image's file system holds exactly the expected
// files, with their types, modes, owners and (except for the binaries)
// contents, and returns the controller's binary and the plugin's.
func checkFiles(img v1.Image) (binary, plugin []byte, err error) {
	want := map[string]file{}
	for _, f := range layerFiles(nil, nil) {
		want[strings.TrimSuffix(f.name, "/")] = f
	}

	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	seen := map[string]bool{}
	var errs []error
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read image file system: %w", err)
		}
		p := strings.TrimSuffix(strings.TrimPrefix(filepath.ToSlash(filepath.Clean("/"+hdr.Name)), "/"), "/")
		if p == "" {
			continue // the root directory itself
		}
		seen[p] = true
		f, ok := want[p]
		if !ok {
			errs = append(errs, fmt.Errorf("unexpected file /%s in the image", p))
			continue
		}
		if hdr.Typeflag != f.typeflag {
			errs = append(errs, fmt.Errorf("/%s has tar type %q, want %q", p, hdr.Typeflag, f.typeflag))
		}
		if mode := hdr.Mode & 0o7777; mode != f.mode {
			errs = append(errs, fmt.Errorf("/%s has mode %#o, want %#o", p, mode, f.mode))
		}
		if hdr.Uid != f.uid || hdr.Gid != f.gid {
			errs = append(errs, fmt.Errorf("/%s is owned by %d:%d, want %d:%d", p, hdr.Uid, hdr.Gid, f.uid, f.gid))
		}
		if f.typeflag != tar.TypeReg {
			continue
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			return nil, nil, fmt.Errorf("read /%s: %w", p, err)
		}
		switch {
		case p == binaryName:
			binary = body
		case p == pluginName:
			plugin = body
		case !bytes.Equal(body, f.body):
			errs = append(errs, fmt.Errorf("/%s has unexpected contents:\n%s", p, body))
		}
	}
	var missing []string
	for p := range want {
		if !seen[p] {
			missing = append(missing, "/"+p)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("missing from the image: %s", strings.Join(missing, " ")))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return binary, plugin, nil
}

// checkStaticELF checks that b is a 64-bit ELF executable for arch that
// needs no dynamic loader or shared libraries.
func checkStaticELF(b []byte, arch string) error {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("not an ELF binary: %w", err)
	}
	defer f.Close()
	if want := elfMachines[arch]; f.Machine != want || f.Class != elf.ELFCLASS64 {
		return fmt.Errorf("ELF binary is for %s %s, want ELFCLASS64 %s (%s)", f.Class, f.Machine, want, arch)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("ELF file type is %s, want an executable", f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("binary is dynamically linked (it has a PT_INTERP program header); the image has no dynamic loader")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("read ELF dynamic section: %w", err)
	}
	if len(libs) > 0 {
		return fmt.Errorf("binary needs shared libraries %q; the image has none", libs)
	}
	return nil
}

// runVersion writes the binary to a temporary file named name, runs it
// with arg (the controller's --version, the plugin's version command) in
// an empty environment, as in the image, and returns its trimmed output,
// which must start with prefix.
func runVersion(binary []byte, name, arg, prefix string) (string, error) {
	dir, err := os.MkdirTemp("", "podtoip-image-verify-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, binary, 0o755); err != nil {
		return "", err
	}

	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, arg)
	cmd.Dir = dir
	cmd.Env = []string{imagePath}
	outBytes, err := cmd.CombinedOutput()
	out := strings.TrimSpace(string(outBytes))
	if err != nil {
		return "", fmt.Errorf("/%s %s: %w\n%s", name, arg, err, out)
	}
	if !strings.HasPrefix(out, prefix) {
		return "", fmt.Errorf("/%s %s printed %q, want it to start with %q", name, arg, out, prefix)
	}
	return out, nil
}
