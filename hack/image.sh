#!/usr/bin/env bash
# hack/image.sh: the operator image (make image), and the ko builds of
# make cluster.
#
#   hack/image.sh
#       make image: IMAGE (promptops/promptops:<appVersion>) from the
#       Dockerfile with CONTAINER_TOOL, or with the first of docker and
#       podman that reaches its engine. With neither, the same binary (static,
#       stamped with VERSION, user 65532, with the CA certificates) with ko,
#       into the image tarball bin/promptops-image.tar (IMAGE_TARBALL), which
#       docker load, ctr images import and kind load image-archive take.
#   hack/image.sh ko REPO TAG TARBALL [PACKAGE]
#       ko builds PACKAGE (default: the promptops binary) as REPO:TAG into
#       TARBALL: what make cluster imports into the node's containerd.
#
# ko needs no daemon and no registry: the base (user 65532:65532, only the
# CA certificates) is written into an OCI layout in ko's cache
# (bin/.kocache), which ko finds by digest.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KO="${KO:-$ROOT/bin/ko}"
VERSION="${VERSION:-$(sed -n 's/^appVersion: "\(.*\)"/\1/p' "$ROOT/charts/promptops/Chart.yaml")}"
IMAGE="${IMAGE:-promptops/promptops:$VERSION}"
IMAGE_TARBALL="${IMAGE_TARBALL:-$ROOT/bin/promptops-image.tar}"

# base_image DIR: writes the base image into the OCI layout DIR, once,
# and prints its digest: linux/amd64, user 65532:65532, and one layer with
# this machine's CA certificates (/etc/ssl/certs/ca-certificates.crt, as
# the Dockerfile copies its build stage's) when it has them, for an LLM or
# embeddings server over HTTPS; else no layer. The layer's tar and gzip
# carry no times or owners, so the same certificates make the same digest.
base_image() {
  local dir=$1 certs=/etc/ssl/certs/ca-certificates.crt
  mkdir -p "$dir/blobs/sha256"
  local diff_ids="" layers=""
  if [[ -f $certs ]]; then
    local tmp ldig lsize diff
    tmp="$(mktemp -d)"
    mkdir -p "$tmp/root/etc/ssl/certs"
    cp "$certs" "$tmp/root/etc/ssl/certs/ca-certificates.crt"
    chmod 0755 "$tmp/root/etc" "$tmp/root/etc/ssl" "$tmp/root/etc/ssl/certs"
    chmod 0644 "$tmp/root/etc/ssl/certs/ca-certificates.crt"
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --format=gnu \
      -C "$tmp/root" -cf "$tmp/layer.tar" etc
    diff="$(sha256sum < "$tmp/layer.tar" | cut -d' ' -f1)"
    gzip -n -9 < "$tmp/layer.tar" > "$tmp/layer.tar.gz"
    ldig="$(sha256sum < "$tmp/layer.tar.gz" | cut -d' ' -f1)"
    lsize="$(stat -c %s "$tmp/layer.tar.gz")"
    mv "$tmp/layer.tar.gz" "$dir/blobs/sha256/$ldig"
    rm -rf "$tmp"
    diff_ids="\"sha256:$diff\""
    layers="{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:$ldig\",\"size\":$lsize}"
  fi
  local config="{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"User\":\"65532:65532\",\"Env\":[\"PATH=/\"]},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[$diff_ids]}}"
  local cdig csize manifest mdig msize
  cdig="$(printf '%s' "$config" | sha256sum | cut -d' ' -f1)"
  csize=${#config}
  printf '%s' "$config" > "$dir/blobs/sha256/$cdig"
  manifest="{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"sha256:$cdig\",\"size\":$csize},\"layers\":[$layers]}"
  mdig="$(printf '%s' "$manifest" | sha256sum | cut -d' ' -f1)"
  msize=${#manifest}
  printf '%s' "$manifest" > "$dir/blobs/sha256/$mdig"
  # ko adds the images it pulls to the same index: keep them.
  if [[ ! -f "$dir/index.json" ]] || ! grep -q "sha256:$mdig" "$dir/index.json"; then
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%d,"platform":{"architecture":"amd64","os":"linux"}}]}' \
      "$mdig" "$msize" > "$dir/index.json"
  fi
  printf '{"imageLayoutVersion":"1.0.0"}' > "$dir/oci-layout"
  echo "sha256:$mdig"
}

# ko_build REPO TAG TARBALL [PACKAGE]: a static, trimmed binary of PACKAGE
# (stamped with VERSION, as the Dockerfile's) on the base.
ko_build() {
  local repo=$1 tag=$2 tarball=$3 pkg=${4:-.}
  [[ -x "$KO" ]] || die "no ko at $KO: run 'make ko' or set KO"
  local kocache="$ROOT/bin/.kocache" digest
  digest="$(base_image "$kocache/img")"
  mkdir -p "$(dirname "$tarball")"
  (cd "$ROOT" && env KOCACHE="$kocache" KO_DEFAULTBASEIMAGE="local.invalid/empty@$digest" \
    GOFLAGS="-trimpath -ldflags=-X=github.com/promptops/promptops/internal/cli.version=$VERSION" CGO_ENABLED=0 GOAMD64="${GOAMD64_IMAGE:-v2}" \
    KO_DOCKER_REPO="$repo" "$KO" build --bare --push=false --platform=linux/amd64 --sbom=none \
    --tags="$tag" --tarball="$tarball" "$pkg")
}

die() { printf 'make image: error: %s\n' "$*" >&2; exit 1; }

# engine prints the container tool to build with: CONTAINER_TOOL when set,
# else the first of docker and podman that reaches its engine.
engine() {
  if [[ -n "${CONTAINER_TOOL:-}" ]]; then
    echo "$CONTAINER_TOOL"
    return
  fi
  local t
  for t in docker podman; do
    command -v "$t" >/dev/null 2>&1 && "$t" info >/dev/null 2>&1 && { echo "$t"; return; }
  done
  return 0
}

case "${1:-}" in
  ko)
    shift
    (($# >= 3)) || { echo "usage: $0 ko REPO TAG TARBALL [PACKAGE]" >&2; exit 2; }
    ko_build "$@"
    ;;
  "")
    tool="$(engine)"
    if [[ -n "$tool" ]]; then
      (cd "$ROOT" && "$tool" build --build-arg VERSION="$VERSION" --build-arg GOAMD64="${GOAMD64_IMAGE:-v2}" -t "$IMAGE" .)
      echo "make image: built $IMAGE with $tool"
      exit 0
    fi
    echo "make image: no docker or podman reaches its engine here (CONTAINER_TOOL=...): building with ko instead"
    [[ -x "$KO" ]] || make -s -C "$ROOT" ko
    mkdir -p "$(dirname "$IMAGE_TARBALL")"
    ko_build "${IMAGE%:*}" "${IMAGE##*:}" "$IMAGE_TARBALL" . > "$IMAGE_TARBALL.log" 2>&1 ||
      { tail -n 20 "$IMAGE_TARBALL.log" >&2; die "ko build failed (log: $IMAGE_TARBALL.log)"; }
    rel="${IMAGE_TARBALL#"$PWD"/}"
    echo "make image: built $IMAGE with ko into $rel; load it into your cluster's nodes:"
    echo "  ctr -n k8s.io images import $rel       # containerd"
    echo "  kind load image-archive $rel           # kind"
    echo "  docker load -i $rel                    # docker, then tag and push it"
    ;;
  *) echo "usage: $0 [ko REPO TAG TARBALL [PACKAGE]]" >&2; exit 2 ;;
esac
