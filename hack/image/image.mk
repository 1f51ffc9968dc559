# Container image targets, included from the main Makefile, which defines GO,
# LDFLAGS and VERSION.
#
# `make image` needs no Docker engine: hack/image packs static builds of the
# controller and of the kubectl plugin (/kubectl-ptp, which the optional
# export CronJob of artifacts/export runs; the entrypoint stays the
# controller) for linux/amd64 and linux/arm64 into an OCI image layout, one
# image index of two images each equivalent to the Dockerfile's result
# (distroless-style /etc/passwd and /etc/group, user 65532:65532), then
# verifies it. The layout is named IMAGE_REPO:VERSION (hack/release/release.mk),
# the reference a release's install.yaml runs; push it with a tool that reads
# OCI layouts, e.g. `crane push _output/image IMAGE_REPO:VERSION` or
# `skopeo copy --all oci:_output/image docker://IMAGE_REPO:VERSION`.

IMAGE_OUT   := _output/image
IMAGE_BIN   := _output/image-bin
IMAGE_ARCHS := amd64 arm64

.PHONY: image
image: ## Build the container image for linux/amd64 and linux/arm64 as an OCI layout in _output/image (no Docker engine needed; see Dockerfile for docker build).
	@set -e; for arch in $(IMAGE_ARCHS); do \
		echo ">> linux/$$arch"; \
		GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(IMAGE_BIN)/linux_$$arch/podtoip-controller . ; \
		GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(IMAGE_BIN)/linux_$$arch/kubectl-ptp ./cmd/kubectl-ptp ; \
	done
	cd hack/image && $(GO) run . $(foreach a,$(IMAGE_ARCHS),-binary linux/$(a)=$(CURDIR)/$(IMAGE_BIN)/linux_$(a)/podtoip-controller) \
		$(foreach a,$(IMAGE_ARCHS),-plugin linux/$(a)=$(CURDIR)/$(IMAGE_BIN)/linux_$(a)/kubectl-ptp) \
		-version $(VERSION) -out $(CURDIR)/$(IMAGE_OUT) -tag $(IMAGE_REPO):$(VERSION)
	cd hack/image && $(GO) run . -verify $(CURDIR)/$(IMAGE_OUT)

.PHONY: test-image
test-image: image ## Build the image and verify both platforms' entrypoint, user, binaries (controller and kubectl-ptp) and architecture.
	cd hack/image && $(GO) test -count=1 ./...
