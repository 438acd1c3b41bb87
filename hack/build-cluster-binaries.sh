#!/usr/bin/env bash
# Builds the node and control-plane binaries of the one-node cluster
# (kubelet, kube-controller-manager, kube-scheduler, kube-proxy, kubectl) at
# the kube-apiserver's version, from the Go module proxy. `go install
# k8s.io/kubernetes/cmd/kubelet@vX` is refused because k8s.io/kubernetes
# replaces its staging modules with ./staging paths; a scratch module that
# requires k8s.io/kubernetes and replaces each staging module with its
# published v0.X.Y builds them.
#
# The output directory is keyed on the version: $CLUSTER_BINARIES (when set,
# e.g. shared by several worktrees) or bin/cluster-k8s/v<version>. A stamp
# file marks a complete build; nothing is rebuilt when it is there.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.37.2}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${CLUSTER_BINARIES:-$ROOT/bin/cluster-k8s/v${K8S_VERSION}}"
CMDS="kubelet kube-controller-manager kube-scheduler kube-proxy kubectl"
STAMP="$OUT/.complete"
WANT="v${K8S_VERSION} ${CMDS} build=1"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  exit 0
fi
mkdir -p "$OUT"
WORK="$ROOT/bin/.cluster-build/v${K8S_VERSION}"
mkdir -p "$WORK"
cd "$WORK"

major="${K8S_VERSION%%.*}" rest="${K8S_VERSION#*.}" minor="0.${K8S_VERSION#1.}"
LDFLAGS="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDFLAGS+=" -X $p.gitVersion=v${K8S_VERSION} -X $p.gitMajor=${major} -X $p.gitMinor=${rest%%.*} -X $p.gitTreeState=clean"
done

if [[ ! -f go.sum ]]; then
  cat > go.mod <<MOD
module promptops.local/clusterbuild

go 1.26

require k8s.io/kubernetes v${K8S_VERSION}
MOD
  # The authoritative staging list is k8s.io/kubernetes's own go.mod.
  gomod="$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  if [[ -z "$gomod" || ! -f "$gomod" ]]; then
    echo "cluster-binaries: cannot download k8s.io/kubernetes@v${K8S_VERSION} from the Go module proxy (GOPROXY=$(go env GOPROXY)); check the proxy, then run make cluster-binaries again" >&2
    exit 1
  fi
  for m in $(sed -n 's#^\s*k8s.io/\([a-z0-9-]*\) => ./staging/.*#\1#p' "$gomod" | sort -u); do
    echo "replace k8s.io/$m => k8s.io/$m v${minor}" >> go.mod
  done
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for c in $CMDS; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
    printf ')\n'
  } > tools.go
  GOFLAGS=-mod=mod go mod tidy
fi

for c in $CMDS; do
  if [[ -x "$OUT/$c" ]]; then continue; fi
  echo "cluster-binaries: building $c v${K8S_VERSION} into $OUT" >&2
  start=$SECONDS
  GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$LDFLAGS" -o "$OUT/$c.tmp" "k8s.io/kubernetes/cmd/$c"
  mv "$OUT/$c.tmp" "$OUT/$c"
  echo "cluster-binaries: $c built in $((SECONDS - start))s" >&2
done
echo "$WANT" > "$STAMP"
echo "cluster-binaries: ready in $OUT" >&2
