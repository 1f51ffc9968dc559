# Container image for podtoip-controller.
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t podtoip-controller .
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=... -t REPO:TAG --push .
#
# The build stage runs on the builder's own platform and cross-compiles for
# each target (the binary is static), so no emulation is needed.
# Without a Docker engine, `make image` builds an equivalent image as an OCI
# layout (see hack/image).

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG VERSION=dev
ARG TARGETOS=linux
ARG TARGETARCH
WORKDIR /src
# Download modules first so that this layer is cached across source edits.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /podtoip-controller .
# The kubectl plugin, for `kubectl ptp export` run in the cluster as a
# CronJob (artifacts/export); the entrypoint stays the controller.
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /kubectl-ptp ./cmd/kubectl-ptp

FROM gcr.io/distroless/static:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="podtoip-controller" \
      org.opencontainers.image.source="example.com/podtoip-controller" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /podtoip-controller /podtoip-controller
COPY --from=build /kubectl-ptp /kubectl-ptp
USER 65532:65532
ENTRYPOINT ["/podtoip-controller"]
