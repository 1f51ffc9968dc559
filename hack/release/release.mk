# Release targets, included from the main Makefile, which defines GO,
# LDFLAGS and VERSION. The programs are in hack/release, a Go module of its
# own (kustomize, krew and Helm stay out of the controller's module).

# Where the release's image is pushed; install.yaml runs IMAGE_REPO:VERSION.
IMAGE_REPO  ?= ghcr.io/podtoip/podtoip-controller
# The project's page, and where a release's archives are downloaded from
# (the krew manifest's URIs).
HOMEPAGE    ?= https://github.com/podtoip/podtoip-controller
RELEASE_URL ?= $(HOMEPAGE)/releases/download/$(VERSION)
DIST        := dist
# Cross-compiled binaries, one directory per platform, before packing.
DIST_BIN    := bin/dist
DIST_PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
CHART_DIR   := charts/podtoip-controller
# krew's own manifest validation (what the krew-index repository runs),
# pinned; hack/release/dist/dist_test.go runs the same version.
KREW_VALIDATE := sigs.k8s.io/krew/cmd/validate-krew-manifest@v0.4.3
RELEASE_MOD := cd hack/release &&

.PHONY: dist
dist: ## Write a release to dist/: archives of both binaries for linux and darwin (amd64, arm64), install.yaml, the Helm chart, the krew manifest, checksums.txt; then verify it.
	rm -rf $(DIST) $(DIST_BIN)
	@set -e; for p in $(DIST_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; echo ">> $$os/$$arch"; \
		GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(DIST_BIN)/$${os}_$${arch}/podtoip-controller . ; \
		GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(DIST_BIN)/$${os}_$${arch}/kubectl-ptp ./cmd/kubectl-ptp ; \
	done
	$(RELEASE_MOD) $(GO) run ./dist -root $(CURDIR) -bin $(CURDIR)/$(DIST_BIN) -out $(CURDIR)/$(DIST) \
		-version $(VERSION) -image $(IMAGE_REPO):$(VERSION) -release-url $(RELEASE_URL) -homepage $(HOMEPAGE)
	$(RELEASE_MOD) $(GO) run ./dist -verify $(CURDIR)/$(DIST) -version $(VERSION) -image $(IMAGE_REPO):$(VERSION)
	$(GO) run $(KREW_VALIDATE) -manifest $(CURDIR)/$(DIST)/krew/ptp.yaml -skip-install

.PHONY: test-release
test-release: ## Test the release tooling: a release packed for this machine (archives run --version, krew validates and installs the plugin), and the Helm chart against artifacts/.
	$(RELEASE_MOD) $(GO) test -count=1 ./...

.PHONY: chart
chart: ## Regenerate the Helm chart charts/podtoip-controller from artifacts/ (test-release checks it is up to date).
	$(RELEASE_MOD) $(GO) run ./chart generate -artifacts $(CURDIR)/artifacts -out $(CURDIR)/$(CHART_DIR)
