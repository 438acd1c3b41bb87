#!/usr/bin/env bash
# make demo on a machine that can run the one-node cluster (root, Debian):
# the operator on a real node (make cluster), and one MemoryBank
# consolidation Job end to end: facts imported into PostgreSQL on this
# machine, the run requested by annotation, the Job's pod consolidating them
# with a model, the bank's status and the observations in the store.
# The model is PROMPTOPS_DEMO_LLM_URL (with OPENAI_API_KEY and
# PROMPTOPS_DEMO_LLM_MODEL) when set, else the tests' scripted stand-in.
# KEEP=1 leaves the cluster, the demo's namespace, PostgreSQL and the
# stand-in running, and writes bin/demo/kubeconfig (its context's namespace
# is the demo's) and bin/demo/store (the bank's DSN) for the README's
# commands; otherwise a cluster this demo started is removed (make
# cluster-down) at the end. "down" (make demo-down) removes a KEEP demo from
# the cluster and leaves the cluster running.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
NS=promptops-demo
STATE="${PROMPTOPS_CLUSTER_DIR:-$ROOT/bin/cluster}"
DEMO="$ROOT/bin/demo"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# standin_pid prints the pid of the demo's PostgreSQL and stand-in when it
# still runs (its command line names the cluster's directory).
standin_pid() {
  local pid
  pid="$(cat "$STATE/run/standin.pid" 2>/dev/null)" || return 0
  [[ -n "$pid" && -r /proc/$pid/cmdline ]] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -qF "$STATE/standin" && echo "$pid"
  return 0
}

if [[ "${1:-}" == down ]]; then
  if [[ -f "$STATE/env" ]]; then
    set -a; . "$STATE/env"; set +a
    "$KUBECTL" delete namespace "$NS" --ignore-not-found --timeout=120s >/dev/null ||
      echo "make demo-down: could not delete namespace $NS (is the cluster down? make cluster-down removes everything)" >&2
  fi
  pid="$(standin_pid)"
  if [[ -n "$pid" ]]; then
    kill "$pid"
    for _ in $(seq 1 100); do [[ -d /proc/$pid ]] || break; sleep 0.1; done
  fi
  rm -f "$STATE/run/standin.pid" "$DEMO/kubeconfig" "$DEMO/store"
  echo "make demo-down: removed namespace $NS and stopped the demo's PostgreSQL; the cluster keeps running (make cluster-down)"
  exit 0
fi

make -s cluster-binaries helm ko >&2
started=
if ! { [[ -f "$STATE/env" ]] && (set -a; . "$STATE/env"; "$KUBECTL" get --raw /readyz) >/dev/null 2>&1; }; then
  say "Starting a one-node cluster (make cluster; about 1-2 minutes once the binaries are built)"
  hack/cluster.sh up
  started=1
fi
set -a; . "$STATE/env"; set +a
k() { "$KUBECTL" "$@"; }
# A demo left by KEEP=1 (or an interrupted one) still has its namespace:
# running again would delete its objects. (One a finished demo is deleting,
# Terminating, is waited for below.)
if [[ -z "$started" && "$(k get namespace "$NS" -o jsonpath='{.status.phase}' 2>/dev/null)" == Active ]]; then
  echo "make demo: a demo is already running: namespace $NS is on the cluster (KEEP=1); remove it with make demo-down" >&2
  exit 1
fi

standin=
cleanup() {
  local rc=$?
  if [[ "${KEEP:-}" == 1 && $rc == 0 ]]; then
    # The cluster's kubeconfig with the demo's namespace in its context, so
    # that kubectl get pt and the README's commands find the demo's objects;
    # the bank's store stays up (make demo-down or make cluster-down stop it).
    mkdir -p "$DEMO"
    cp "$KUBECONFIG" "$DEMO/kubeconfig"
    k --kubeconfig "$DEMO/kubeconfig" config set-context --current --namespace="$NS" >/dev/null
    (umask 077; printf '%s\n' "$dsn" > "$DEMO/store")
    say "KEEP=1: the cluster, the demo and its PostgreSQL keep running"
    echo "The demo's objects are in namespace $NS, the namespace of this kubeconfig's context:"
    echo
    echo "  export KUBECONFIG=$DEMO/kubeconfig"
    echo "  export PROMPTOPS_STORE=\$(cat $DEMO/store)   # the bank's PostgreSQL, for promptops facts and observations"
    echo "  kubectl get pt,mb"
    echo
    echo "Remove the demo with make demo-down, the cluster with make cluster-down."
    return
  fi
  [[ -n "$standin" ]] && { kill "$standin" 2>/dev/null || true; wait "$standin" 2>/dev/null || true; }
  rm -f "$STATE/run/standin.pid"
  if [[ -n "$started" ]]; then
    say "Removing the cluster (make cluster-down)"
    hack/cluster.sh down
  else
    k delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

k get nodes
k get pods -n "$OPERATOR_NAMESPACE" -o wide

# PostgreSQL (and the stand-in model) on this machine at HOST_IP, where the
# Job's pod reaches them. The binary lives in the cluster's directory, so
# make cluster-down stops it if this script is killed.
go build -o "$STATE/standin" ./hack/demo.d/standin
args=(-host "$HOST_IP" -allow "${POD_CIDR:-10.244.77.0/24}")
[[ -n "${PROMPTOPS_DEMO_LLM_URL:-}" ]] && args+=(-no-model)
# In a session of its own, so that it outlives a KEEP demo's terminal.
setsid "$STATE/standin" "${args[@]}" > "$STATE/standin.out" 2> "$STATE/logs/standin.log" &
standin=$!
echo "$standin" > "$STATE/run/standin.pid"
for _ in $(seq 1 120); do grep -q '^dsn=' "$STATE/standin.out" 2>/dev/null && break; sleep 0.5; done
dsn="$(sed -n 's/^dsn=//p' "$STATE/standin.out")"
[[ -n "$dsn" ]] || { cat "$STATE/logs/standin.log"; echo "PostgreSQL did not start at $HOST_IP (log above)"; exit 1; }
if [[ -n "${PROMPTOPS_DEMO_LLM_URL:-}" ]]; then
  model_url="$PROMPTOPS_DEMO_LLM_URL" model="${PROMPTOPS_DEMO_LLM_MODEL:-gpt-4o-mini}"
  echo "model: $model_url ($model, from PROMPTOPS_DEMO_LLM_URL)"
else
  for _ in $(seq 1 20); do grep -q '^model=' "$STATE/standin.out" && break; sleep 0.2; done
  model_url="$(sed -n 's/^model=//p' "$STATE/standin.out")" model=stand-in
  echo "model: the scripted stand-in of the tests at $model_url (set PROMPTOPS_DEMO_LLM_URL and OPENAI_API_KEY for a real one)"
fi

say "A namespace enforcing the Restricted Pod Security Standard, and a MemoryBank on PostgreSQL at $HOST_IP"
k delete namespace "$NS" --ignore-not-found >/dev/null
k create namespace "$NS" >/dev/null
k label namespace "$NS" pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/enforce-version=latest >/dev/null
k create secret generic demo-store -n "$NS" --from-literal=dsn="$dsn" >/dev/null
apikey=
if [[ -n "${OPENAI_API_KEY:-}" ]]; then
  k create secret generic demo-llm -n "$NS" --from-literal=key="$OPENAI_API_KEY" >/dev/null
  apikey="    apiKeySecretRef: {name: demo-llm, key: key}"
fi
k apply -n "$NS" -f - <<YAML
apiVersion: promptops.io/v1
kind: MemoryBank
metadata:
  name: support-agent
spec:
  store:
    postgres: {dsnSecretRef: {name: demo-store, key: dsn}}
  llm:
    baseURL: $model_url
    model: $model
$apikey
YAML
k wait -n "$NS" --for=condition=Ready --timeout=60s mb/support-agent

say "The sample PromptTemplates (config/samples; the bank above replaces its MemoryBank)"
k apply -n "$NS" -f config/samples/ssa-prompts-configmap.yaml -f config/samples/promptops_v1_prompttemplate_ssa.yaml \
  -f config/samples/promptops_v1_prompttemplate_support.yaml -f config/samples/promptops_v1_prompttemplate_overbudget.yaml
k wait -n "$NS" --for=condition=Ready --timeout=60s pt/ssa-pro pt/support-assistant
k get pt -n "$NS"

say "Facts into the store: promptops facts import --bank $NS/support-agent"
"$ROOT/bin/promptops" facts import --bank "$NS/support-agent" --store "$dsn" hack/demo.d/facts.jsonl

say "A run on request: kubectl annotate mb/support-agent promptops.io/consolidate-requested-at=..."
k annotate -n "$NS" mb/support-agent --overwrite "promptops.io/consolidate-requested-at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
for _ in $(seq 1 100); do [[ -n "$(k get jobs -n "$NS" -l promptops.io/memorybank=support-agent -o name)" ]] && break; sleep 0.3; done
job="$(k get jobs -n "$NS" -l promptops.io/memorybank=support-agent -o name)"
[[ -n "$job" ]] || { k get mb support-agent -n "$NS" -o yaml; echo "no Job was created"; exit 1; }
k wait -n "$NS" --for=condition=Complete --timeout=180s "$job" || {
  k describe -n "$NS" "$job"; k logs -n "$NS" -l promptops.io/memorybank=support-agent --tail=30 || true; exit 1; }
k get -n "$NS" "$job"; k get pods -n "$NS" -l promptops.io/memorybank=support-agent

say "The Job's pod: kubectl logs"
k logs -n "$NS" -l promptops.io/memorybank=support-agent --tail=20

say "The bank's last run"
for _ in $(seq 1 60); do [[ -n "$(k get mb support-agent -n "$NS" -o jsonpath='{.status.lastRun.jobName}')" ]] && break; sleep 0.5; done
k get mb support-agent -n "$NS" -o jsonpath='{.status.lastRun}{"\n"}'
k get mb -n "$NS"

say "The observations in the store: promptops observations list"
"$ROOT/bin/promptops" observations list --bank "$NS/support-agent" --store "$dsn"
