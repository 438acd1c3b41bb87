#!/usr/bin/env bash
# Builds the envtest control plane (kube-apiserver, etcd, kubectl) from the Go
# module proxy into bin/k8s/, because setup-envtest's download site is not
# reachable from air-gapped CI. Skips the build when the binaries of the
# pinned versions are already there, and does nothing when KUBEBUILDER_ASSETS
# already points at a directory holding them.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${ENVTEST_BIN_DIR:-${KUBEBUILDER_ASSETS:-$ROOT/bin/k8s}}"
STAMP="$OUT/.versions"
WANT="kube-apiserver=v${K8S_VERSION} etcd=v${ETCD_VERSION} build=2"

if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "${KUBEBUILDER_ASSETS}/kube-apiserver" && -x "${KUBEBUILDER_ASSETS}/etcd" && -z "${BUILD_KUBECTL:-}" ]]; then
  exit 0
fi
have_all() {
  [[ -x "$OUT/kube-apiserver" && -x "$OUT/etcd" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]] &&
    { [[ -z "${BUILD_KUBECTL:-}" ]] || [[ -x "$OUT/kubectl" ]]; }
}
if have_all; then
  exit 0
fi

mkdir -p "$OUT"
WORK="$ROOT/bin/.envtest-build"
mkdir -p "$WORK/apiserver" "$WORK/etcd"

# /version reports the real version instead of v0.0.0-master.
version_ldflags() {
  local major="${K8S_VERSION%%.*}" rest="${K8S_VERSION#*.}"
  local p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    printf -- '-X %s.gitVersion=v%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean ' \
      "$p" "$K8S_VERSION" "$p" "$major" "$p" "${rest%%.*}" "$p"
  done
}

build_apiserver() {
  local dir="$WORK/apiserver" minor="0.${K8S_VERSION#1.}"
  cd "$dir"
  # k8s.io/kubernetes points its staging modules at ./staging/...; a module
  # that requires it must replace each of them with the published version.
  cat > go.mod <<MOD
module envtest.local/apiserver

go 1.26

require k8s.io/kubernetes v${K8S_VERSION}
MOD
  local staging="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller streaming"
  # Read the authoritative list from the module itself when it is cached.
  local gomod
  if gomod="$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}" 2>/dev/null | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')" && [[ -n "$gomod" && -f "$gomod" ]]; then
    staging="$(sed -n 's#^\s*k8s.io/\([a-z0-9-]*\) => ./staging/.*#\1#p' "$gomod" | sort -u | tr '\n' ' ')"
  fi
  for m in $staging; do
    echo "replace k8s.io/$m => k8s.io/$m v${minor}" >> go.mod
  done
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || true
  if [[ ! -x "$OUT/kube-apiserver" || "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]]; then
    GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$(version_ldflags)" -o "$OUT/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
  fi
  # kubectl only where the machine has none (make demo asks for it).
  if [[ -n "${BUILD_KUBECTL:-}" ]]; then
    GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$(version_ldflags)" -o "$OUT/kubectl" k8s.io/kubernetes/cmd/kubectl
  fi
}

build_etcd() {
  cd "$WORK/etcd"
  cat > go.mod <<MOD
module envtest.local/etcd

go 1.26

require go.etcd.io/etcd/server/v3 v${ETCD_VERSION}
MOD
  cat > tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
  GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || true
  GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o "$OUT/etcd" go.etcd.io/etcd/server/v3
}

if [[ ! -x "$OUT/etcd" || "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]]; then
  echo "envtest: building etcd v${ETCD_VERSION} into $OUT (about 1 minute)" >&2
  ( build_etcd )
fi
echo "envtest: building kube-apiserver v${K8S_VERSION} into $OUT (about 6 minutes on 2 cores, cached afterwards)" >&2
( build_apiserver )
echo "$WANT" > "$STAMP"
echo "envtest: binaries ready in $OUT" >&2
