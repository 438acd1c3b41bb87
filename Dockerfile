# Multi-stage build of the promptops binary: the manager and the
# consolidation Job run this same image.
#
# The base names no registry: "scratch" is the empty image, which docker and
# podman (buildah) build without pulling anything. The binary is static and
# runs as a numeric non-root user, so it needs only the CA certificates (for
# an LLM or embeddings server over HTTPS), copied from the build stage.
# --build-arg BASE_IMAGE=... picks another base (e.g. distroless/static from
# your own mirror); GO_IMAGE the build stage's.
ARG GO_IMAGE=golang:1.26
ARG BASE_IMAGE=scratch

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH=amd64
# VERSION is what `promptops version` prints (make image passes the chart's appVersion).
ARG VERSION=0.1.0
# GOAMD64: the x86-64 level (v2: bit counts in one instruction; see the Makefile).
ARG GOAMD64=v2
# Static binary: SQLite is pure Go (modernc.org/sqlite), so no cgo.
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH GOAMD64=$GOAMD64 go build -trimpath -ldflags="-s -w -X github.com/promptops/promptops/internal/cli.version=${VERSION}" -o /out/promptops .

FROM ${BASE_IMAGE}
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/promptops /promptops
USER 65532:65532
ENTRYPOINT ["/promptops"]
CMD ["manager"]
