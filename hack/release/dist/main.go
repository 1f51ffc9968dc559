// Command dist packs a release of podtoip-controller into a directory
// (make dist writes dist/), and verifies such a directory.
//
// From binaries cross-compiled by the Makefile into BIN/OS_ARCH/, it writes:
//
//   - podtoip-controller_VERSION_OS_ARCH.tar.gz and
//     kubectl-ptp_VERSION_OS_ARCH.tar.gz for each platform, each holding the
//     binary, LICENSE and README.md;
//   - install.yaml: artifacts/ rendered with kustomize, with the image
//     IMAGE, for `kubectl apply -f install.yaml`;
//   - krew/ptp.yaml: the krew plugin manifest of the kubectl-ptp archives;
//   - podtoip-controller-CHARTVERSION.tgz: the Helm chart, whose defaults
//     are the image of the release being packed, for `helm install NAME URL`;
//   - checksums.txt: the SHA-256 of every file above, as sha256sum prints
//     them (`sha256sum -c checksums.txt` checks a download).
//
// Usage:
//
//	go run ./dist -root REPO -bin BIN -out DIR -version V -image REF -release-url URL -homepage URL
//	go run ./dist -verify DIR -version V -image REF
//
// The archives are reproducible: fixed timestamps and owners, no gzip
// name or time, so the same binaries give the same checksums.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const (
	controllerBin = "podtoip-controller"
	pluginBin     = "kubectl-ptp"
	// pluginName is the plugin's name in krew: `kubectl krew install ptp`.
	pluginName = "ptp"
	chartName  = "podtoip-controller"

	checksumsFile = "checksums.txt"
	installFile   = "install.yaml"
	krewFile      = "krew/" + pluginName + ".yaml"
)

// platform is one GOOS/GOARCH a release has binaries for.
type platform struct{ os, arch string }

func (p platform) String() string { return p.os + "_" + p.arch }

// releasePlatforms are a release's platforms; the Makefile builds the
// binaries of each into BIN/OS_ARCH/.
var releasePlatforms = []platform{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}}

// release says what a release is.
type release struct {
	version    string // git describe, as in the binaries
	image      string // the controller's image reference, REPOSITORY:TAG
	releaseURL string // where the archives are downloaded from, without a trailing slash
	homepage   string
	platforms  []platform
}

// chartVersion is the release's version as Helm requires it, a semantic
// version (krew's, without the v).
func (r release) chartVersion() string { return strings.TrimPrefix(krewVersion(r.version), "v") }

// chartFile is the name of the packed chart.
func (r release) chartFile() string { return fmt.Sprintf("%s-%s.tgz", chartName, r.chartVersion()) }

// archiveName is the name of bin's archive for p.
func (r release) archiveName(bin string, p platform) string {
	return fmt.Sprintf("%s_%s_%s.tar.gz", bin, r.version, p)
}

func main() {
	var (
		root       = flag.String("root", "", "The repository's root: LICENSE, README.md, artifacts/ and charts/ are read from it (required to pack).")
		binDir     = flag.String("bin", "", "Directory with the cross-compiled binaries in OS_ARCH/ subdirectories (required to pack).")
		out        = flag.String("out", "", "Directory to write the release to (required to pack); it must not exist or be empty.")
		version    = flag.String("version", "", "The release's version, as in the binaries' --version (required).")
		image      = flag.String("image", "", "The controller's image reference for install.yaml, REPOSITORY:TAG (required).")
		releaseURL = flag.String("release-url", "", "The URL the archives will be downloaded from, for the krew manifest (required to pack).")
		homepage   = flag.String("homepage", "", "The project's homepage, for the krew manifest (required to pack).")
		verifyDir  = flag.String("verify", "", "Verify the release in this directory instead of writing one.")
		install    = flag.Bool("install-yaml", false, "Print the release's install.yaml (from -root's artifacts/) instead of writing a release.")
	)
	flag.Parse()
	if flag.NArg() > 0 {
		usageError("unexpected arguments %q", flag.Args())
	}
	if *version == "" || *image == "" {
		usageError("-version and -image are required")
	}
	r := release{version: *version, image: *image, releaseURL: *releaseURL, homepage: *homepage, platforms: releasePlatforms}
	if *verifyDir != "" {
		report, err := verify(*verifyDir, r)
		if err != nil {
			fail("verify %s: %v", *verifyDir, err)
		}
		fmt.Print(report)
		return
	}
	if *install {
		if *root == "" {
			usageError("-install-yaml needs -root")
		}
		b, err := installYAML(filepath.Join(*root, "artifacts"), r)
		if err != nil {
			fail("render install.yaml: %v", err)
		}
		os.Stdout.Write(b)
		return
	}
	if *root == "" || *binDir == "" || *out == "" || *releaseURL == "" || *homepage == "" {
		usageError("-root, -bin, -out, -release-url and -homepage are required (or -verify DIR)")
	}
	files, err := pack(*root, *binDir, *out, r)
	if err != nil {
		fail("pack the release: %v", err)
	}
	for _, f := range files {
		fmt.Println("wrote", filepath.Join(*out, f))
	}
}

func usageError(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "error: "+format+"\n", args...)
	flag.Usage()
	os.Exit(2)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
	os.Exit(1)
}
