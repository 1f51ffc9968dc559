package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"

	"example.com/podtoip-controller/hack/release/internal/kustomize"
)

// epoch is every archived file's time, so that the same binaries give the
// same archives and checksums.
var epoch = time.Unix(0, 0).UTC()

// docs are the files every archive carries beside its binary.
var docs = []string{"LICENSE", "README.md"}

// pack writes the release into out and returns the names of the files it
// wrote, relative to out.
func pack(root, binDir, out string, r release) ([]string, error) {
	if entries, err := os.ReadDir(out); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("%s is not empty; remove it first (make dist does)", out)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(out, filepath.Dir(krewFile)), 0o755); err != nil {
		return nil, err
	}
	docFiles := map[string][]byte{}
	for _, d := range docs {
		b, err := os.ReadFile(filepath.Join(root, d))
		if err != nil {
			return nil, fmt.Errorf("reading what every archive carries: %w", err)
		}
		docFiles[d] = b
	}

	sums := map[string]string{} // file name -> hex SHA-256
	write := func(name string, b []byte) error {
		if err := os.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
			return err
		}
		s := sha256.Sum256(b)
		sums[name] = hex.EncodeToString(s[:])
		return nil
	}
	var pluginArchives []archive
	for _, p := range r.platforms {
		for _, bin := range []string{controllerBin, pluginBin} {
			path := filepath.Join(binDir, p.String(), bin)
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("reading the %s binary (make dist builds it): %w", p, err)
			}
			if err := checkBinary(b, p); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			tgz, err := tarGz(bin, b, docFiles)
			if err != nil {
				return nil, fmt.Errorf("archiving %s: %w", path, err)
			}
			name := r.archiveName(bin, p)
			if err := write(name, tgz); err != nil {
				return nil, err
			}
			if bin == pluginBin {
				pluginArchives = append(pluginArchives, archive{name: name, platform: p, sha256: sums[name]})
			}
		}
	}

	manifests, err := installYAML(filepath.Join(root, "artifacts"), r)
	if err != nil {
		return nil, err
	}
	if err := write(installFile, manifests); err != nil {
		return nil, err
	}
	chart, err := chartPackage(filepath.Join(root, "charts", chartName), r)
	if err != nil {
		return nil, err
	}
	if err := write(r.chartFile(), chart); err != nil {
		return nil, err
	}
	plugin, err := krewManifest(r, pluginArchives)
	if err != nil {
		return nil, err
	}
	if err := write(krewFile, plugin); err != nil {
		return nil, err
	}

	names := slices.Sorted(maps.Keys(sums))
	var list bytes.Buffer
	for _, n := range names {
		// sha256sum's format: two spaces, or " *" for binary mode.
		fmt.Fprintf(&list, "%s  %s\n", sums[n], n)
	}
	if err := os.WriteFile(filepath.Join(out, checksumsFile), list.Bytes(), 0o644); err != nil {
		return nil, err
	}
	return append(names, checksumsFile), nil
}

// installYAML renders artifacts/ with the release's image, as one file for
// `kubectl apply -f`.
func installYAML(artifacts string, r release) ([]byte, error) {
	b, err := kustomize.Render(artifacts, kustomize.Overlay{Image: r.image})
	if err != nil {
		return nil, err
	}
	header := fmt.Sprintf("# podtoip-controller %s: the manifests of artifacts/, image %s.\n"+
		"# Install or upgrade with: kubectl apply -f install.yaml\n", r.version, r.image)
	return append([]byte(header), b...), nil
}

// chartPackage packs the chart in chartDir as `helm package` does, for
// the release being packed: its version the release's, its image the release's (the
// repository in values.yaml, the tag as appVersion), so that `helm
// install NAME URL` installs the release without --set.
func chartPackage(chartDir string, r release) ([]byte, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("loading the chart (make chart writes it): %w", err)
	}
	repo, tag, err := kustomize.SplitImage(r.image)
	if err != nil {
		return nil, err
	}
	chrt.Metadata.Version = r.chartVersion()
	chrt.Metadata.AppVersion = tag
	const defaultRepo = "\n  repository: " + kustomize.ImageName + "\n"
	found := false
	for _, f := range chrt.Raw {
		if f.Name == chartutil.ValuesfileName && bytes.Contains(f.Data, []byte(defaultRepo)) {
			f.Data = bytes.Replace(f.Data, []byte(defaultRepo), []byte("\n  repository: "+repo+"\n"), 1)
			found = true
		}
	}
	if !found {
		return nil, fmt.Errorf("%s/values.yaml has no %q to set the release's image in; make chart writes it", chartDir, strings.TrimSpace(defaultRepo))
	}
	tmp, err := os.MkdirTemp("", "podtoip-chart-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	path, err := chartutil.Save(chrt, tmp)
	if err != nil {
		return nil, fmt.Errorf("packing the chart: %w", err)
	}
	return os.ReadFile(path)
}

// tarGz archives the binary (mode 0755) and the documents (0644), owned by
// root, at epoch, in a gzip stream without a name or time.
func tarGz(bin string, binary []byte, docFiles map[string][]byte) ([]byte, error) {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	add := func(name string, mode int64, body []byte) error {
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body)),
			ModTime: epoch, Uname: "root", Gname: "root", Format: tar.FormatPAX,
		}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	if err := add(bin, 0o755, binary); err != nil {
		return nil, err
	}
	for _, d := range docs {
		if err := add(d, 0o644, docFiles[d]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// archiveEntries lists the files in an archive with their modes and
// contents.
func archiveEntries(tgz []byte) (map[string]*tar.Header, map[string][]byte, error) {
	gz, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, nil, fmt.Errorf("not a gzip stream: %w", err)
	}
	tr := tar.NewReader(gz)
	headers, bodies := map[string]*tar.Header{}, map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reading the tar stream: %w", err)
		}
		if strings.Contains(h.Name, "/") {
			return nil, nil, fmt.Errorf("%s is in a directory; the archive is flat, as the krew manifest's files: say", h.Name)
		}
		var b bytes.Buffer
		if _, err := b.ReadFrom(tr); err != nil {
			return nil, nil, err
		}
		headers[h.Name], bodies[h.Name] = h, b.Bytes()
	}
	return headers, bodies, nil
}
