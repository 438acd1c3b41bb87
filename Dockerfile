# Multi-stage build of the promptops binary: the manager and the
# consolidation Job run this same image.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH=amd64
# VERSION is what `promptops version` prints (make image passes the chart's appVersion).
ARG VERSION=0.1.0
# Static binary: SQLite is pure Go (modernc.org/sqlite), so no cgo.
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags="-s -w -X github.com/promptops/promptops/internal/cli.version=${VERSION}" -o /out/promptops .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/promptops /promptops
USER 65532:65532
ENTRYPOINT ["/promptops"]
CMD ["manager"]
