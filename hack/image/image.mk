# Container image targets, included from the main Makefile, which defines GO,
# LDFLAGS and VERSION.
#
# `make image` needs no Docker engine: hack/image packs a static build of the
# controller into an OCI image layout equivalent to the Dockerfile's result
# (distroless-style /etc/passwd and /etc/group, user 65532:65532), then
# verifies it. The layout can be loaded or pushed with tools that read OCI
# layouts, e.g. `skopeo copy oci:_output/image docker-daemon:podtoip-controller:TAG`
# or `crane push _output/image REGISTRY/podtoip-controller:TAG`.

IMAGE_OUT := _output/image
IMAGE_BIN := _output/image-bin/podtoip-controller

.PHONY: image
image: ## Build the container image as an OCI layout in _output/image (no Docker engine needed; see Dockerfile for docker build).
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(IMAGE_BIN) .
	cd hack/image && $(GO) run . -binary $(CURDIR)/$(IMAGE_BIN) -version $(VERSION) -out $(CURDIR)/$(IMAGE_OUT) -tag podtoip-controller:$(VERSION)
	cd hack/image && $(GO) run . -verify $(CURDIR)/$(IMAGE_OUT)

.PHONY: test-image
test-image: image ## Build the image and verify its entrypoint, user and binary.
	cd hack/image && $(GO) test -count=1 ./...
