#!/usr/bin/env bash
# make demo: a local control plane (kube-apiserver + etcd, no kubelet), the
# operator, and the samples. Prints what it shows and stops everything it
# started, unless KEEP=1, which leaves the cluster and the operator running.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

DEMO="$ROOT/bin/demo"
NS=promptops-demo
PIDS="$DEMO/pids"

# running_pids prints the pids in $PIDS that are still this demo's
# processes (this script, bin/localcp, bin/promptops manager), not pids
# the system has reused since.
running_pids() {
  local pid
  [[ -f "$PIDS" ]] || return 0
  while read -r pid; do
    ps -o command= -p "$pid" 2>/dev/null | grep -qE "demo\.sh|$ROOT/bin/(localcp|promptops)" && echo "$pid"
  done < "$PIDS"
  return 0
}

# hack/demo.sh down (make demo-down): stop a control-plane demo left
# running by KEEP=1, or remove a KEEP demo from the one-node cluster (which
# keeps running: make cluster-down).
if [[ "${1:-}" == down ]]; then
  read -ra running <<<"$(running_pids | xargs)"
  if ((${#running[@]} == 0)); then
    rm -f "$PIDS"
    if [[ -f "${PROMPTOPS_CLUSTER_DIR:-$ROOT/bin/cluster}/env" ]]; then
      exec hack/demo.d/cluster.sh down
    fi
    echo "make demo-down: no demo running"
    exit 0
  fi
  for ((i=${#running[@]}-1; i>=0; i--)); do kill "${running[i]}" 2>/dev/null || true; done
  for _ in $(seq 1 60); do [[ -z "$(running_pids)" ]] && break; sleep 0.5; done
  [[ -z "$(running_pids)" ]] || { echo "make demo-down: still running: $(running_pids | xargs)"; exit 1; }
  rm -f "$PIDS" "$DEMO/kubeconfig"
  echo "make demo-down: stopped the demo's control plane and operator (${running[*]})"
  exit 0
fi

# Where the machine can run a real node (make cluster: Linux, root, Debian's
# packages, PostgreSQL for the bank), the demo runs there and shows a
# consolidation Job end to end; DEMO_CONTROL_PLANE_ONLY=1 keeps this one.
if [[ -z "${DEMO_CONTROL_PLANE_ONLY:-}" ]]; then
  why=
  if [[ "$(uname -s)" != Linux ]]; then why="not Linux"
  elif [[ "$(id -u)" != 0 ]]; then why="not root; the node changes iptables, mounts and sysctls: sudo make demo"
  elif ! command -v apt-get >/dev/null || ! command -v dpkg-query >/dev/null; then why="no apt-get for containerd, runc and the CNI plugins"
  elif ! compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null && ! command -v pg_ctl >/dev/null; then why="no PostgreSQL server programs for the bank (Debian's postgresql)"
  fi
  if [[ -z "$why" ]]; then
    echo "make demo: on a one-node cluster (make cluster); DEMO_CONTROL_PLANE_ONLY=1 for the control plane only"
    exec hack/demo.d/cluster.sh
  fi
  echo "make demo: control plane only, no node ($why)"
fi
export KUBECONFIG="$DEMO/kubeconfig"
mkdir -p "$DEMO"
# One control-plane demo per checkout: a second one would remove the first
# one's kubeconfig and logs.
if [[ -n "$(running_pids)" ]]; then
  echo "make demo: a demo is already running here (KUBECONFIG=$KUBECONFIG, pids $(running_pids | xargs)); stop it with make demo-down" >&2
  exit 1
fi
echo $$ > "$PIDS"
rm -f "$KUBECONFIG"

KUBECTL="$(command -v kubectl || true)"
if [[ -z "$KUBECTL" ]]; then
  BUILD_KUBECTL=1 hack/build-envtest-binaries.sh
  KUBECTL="$ROOT/bin/k8s/kubectl"
fi
k() { "$KUBECTL" "$@"; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

pids=()
cleanup() {
  if [[ "${KEEP:-}" == "1" ]]; then
    say "KEEP=1: the local control plane and the operator keep running"
    echo "The demo's objects are in namespace $NS, the namespace of this kubeconfig's context:"
    echo
    echo "  export KUBECONFIG=$KUBECONFIG"
    echo "  kubectl get pt"
    echo
    echo "Stop them with: make demo-down"
    return
  fi
  say "Stopping the operator and the local control plane"
  for ((i=${#pids[@]}-1; i>=0; i--)); do kill "${pids[i]}" 2>/dev/null || true; wait "${pids[i]}" 2>/dev/null || true; done
  rm -f "$PIDS"
}
trap cleanup EXIT

say "Starting a local control plane (envtest binaries in bin/k8s)"
go build -o "$ROOT/bin/localcp" ./hack/localcp
"$ROOT/bin/localcp" --assets "$ROOT/bin/k8s" --crds "$ROOT/config/crd/bases" --write-kubeconfig "$KUBECONFIG" 2>"$DEMO/localcp.log" &
pids+=($!)
echo $! >> "$PIDS"
for _ in $(seq 1 120); do [[ -s "$KUBECONFIG" ]] && break; sleep 0.5; done
[[ -s "$KUBECONFIG" ]] || { echo "control plane did not start:"; cat "$DEMO/localcp.log"; exit 1; }
# The samples' namespace in the kubeconfig's context, so that after KEEP=1
# kubectl get pt and the README's commands find them without -n.
k config set-context --current --namespace="$NS" >/dev/null
k version 2>/dev/null | sed -n 's/^Server Version/kube-apiserver/p' || true

# free_port prints the first port from $1 up that nothing listens on
# (the usual 18080/18081 may be taken by another demo or service).
free_port() {
  local p=$1
  while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do p=$((p + 1)); done
  echo "$p"
}
METRICS_PORT=$(free_port 18080)
PROBE_PORT=$(free_port $((METRICS_PORT + 1)))
WEBHOOK_PORT=$(free_port $((PROBE_PORT + 1)))

# The budget webhook: the API server calls the local manager at a URL; the
# manager keeps a self-signed certificate for 127.0.0.1 and writes its CA
# into this configuration's caBundle. failurePolicy: Ignore, so applies go
# through while the manager starts.
say "Registering the PromptTemplate webhook at https://127.0.0.1:$WEBHOOK_PORT"
k apply -f - <<EOF_WEBHOOK
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: promptops-validating-webhook
webhooks:
- name: vprompttemplate.promptops.io
  admissionReviewVersions: ["v1"]
  clientConfig:
    url: https://127.0.0.1:$WEBHOOK_PORT/validate-promptops-io-v1-prompttemplate
  failurePolicy: Ignore
  sideEffects: None
  timeoutSeconds: 5
  rules:
  - apiGroups: ["promptops.io"]
    apiVersions: ["v1"]
    operations: ["CREATE", "UPDATE"]
    resources: ["prompttemplates"]
EOF_WEBHOOK

say "Starting the operator (bin/promptops manager on ports $METRICS_PORT/$PROBE_PORT/$WEBHOOK_PORT, log in bin/demo/manager.log)"
"$ROOT/bin/promptops" manager --kubeconfig "$KUBECONFIG" --job-image "promptops/promptops:$(sed -n 's/^appVersion: "\(.*\)"/\1/p' "$ROOT/charts/promptops/Chart.yaml")" --metrics-bind-address="127.0.0.1:$METRICS_PORT" \
  --health-probe-bind-address="127.0.0.1:$PROBE_PORT" \
  --enable-webhook --webhook-host=127.0.0.1 --webhook-port="$WEBHOOK_PORT" --webhook-cert-dir="$DEMO/webhook-certs" \
  --webhook-self-signed --webhook-cert-hosts=127.0.0.1 --webhook-configuration=promptops-validating-webhook \
  >"$DEMO/manager.log" 2>&1 &
manager=$!
pids+=($manager)
echo "$manager" >> "$PIDS"
ready=
for _ in $(seq 1 120); do
  if ! kill -0 "$manager" 2>/dev/null; then
    echo "the operator exited before it was ready; its log:"; cat "$DEMO/manager.log"; exit 1
  fi
  if curl -fsS "http://127.0.0.1:$PROBE_PORT/readyz" >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.5
done
[[ -n "$ready" ]] || { echo "the operator did not become ready in 60 s; its log:"; tail -50 "$DEMO/manager.log"; exit 1; }
# Ready includes the webhook server; wait for the caBundle too, or the API
# server would not trust it and (failurePolicy: Ignore) warn of nothing.
ca=
for _ in $(seq 1 60); do
  if ! kill -0 "$manager" 2>/dev/null; then
    echo "the operator exited; its log:"; cat "$DEMO/manager.log"; exit 1
  fi
  ca=$(k get validatingwebhookconfiguration promptops-validating-webhook -o jsonpath='{.webhooks[0].clientConfig.caBundle}')
  [[ -n "$ca" ]] && break
  sleep 0.5
done
[[ -n "$ca" ]] || { echo "the operator did not set the webhook's caBundle in 30 s; its log:"; tail -50 "$DEMO/manager.log"; exit 1; }

say "Applying the samples into namespace $NS"
k create namespace "$NS" >/dev/null
k kustomize config/samples | k apply -n "$NS" -f -

if [[ -f "$ROOT/hack/demo.d/steps.sh" ]]; then
  # shellcheck source=/dev/null
  source "$ROOT/hack/demo.d/steps.sh"
fi

say "kubectl get pt,mb -n $NS"
k get pt,mb -n "$NS"
