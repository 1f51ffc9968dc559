# Container image targets, included from the main Makefile, which defines GO,
# LDFLAGS and VERSION.
#
# `make image` needs no Docker engine: hack/image packs static builds of the
# controller for linux/amd64 and linux/arm64 into an OCI image layout, one
# image index of two images each equivalent to the Dockerfile's result
# (distroless-style /etc/passwd and /etc/group, user 65532:65532), then
# verifies it. The layout can be loaded or pushed with tools that read OCI
# layouts, e.g. `skopeo copy oci:_output/image docker-daemon:podtoip-controller:TAG`
# or `crane push _output/image REGISTRY/podtoip-controller:TAG`.

IMAGE_OUT   := _output/image
IMAGE_BIN   := _output/image-bin
IMAGE_ARCHS := amd64 arm64

.PHONY: image
image: ## Build the container image for linux/amd64 and linux/arm64 as an OCI layout in _output/image (no Docker engine needed; see Dockerfile for docker build).
	@set -e; for arch in $(IMAGE_ARCHS); do \
		echo ">> linux/$$arch"; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(IMAGE_BIN)/linux_$$arch/podtoip-controller . ; \
	done
	cd hack/image && $(GO) run . $(foreach a,$(IMAGE_ARCHS),-binary linux/$(a)=$(CURDIR)/$(IMAGE_BIN)/linux_$(a)/podtoip-controller) \
		-version $(VERSION) -out $(CURDIR)/$(IMAGE_OUT) -tag podtoip-controller:$(VERSION)
	cd hack/image && $(GO) run . -verify $(CURDIR)/$(IMAGE_OUT)

.PHONY: test-image
test-image: image ## Build the image and verify both platforms' entrypoint, user, binary and architecture.
	cd hack/image && $(GO) test -count=1 ./...
