#!/usr/bin/env bash
# hack/cluster.sh up|down|status|install: a real one-node Kubernetes cluster on this
# machine for the end-to-end tests and the demo (make cluster, make
# cluster-down).
#
# up starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# containerd (Debian's, with runc), the kubelet and kube-proxy, with pods on a
# bridge (Debian's CNI plugins), builds the promptops and pause images with ko,
# imports them into containerd, installs the operator with the Helm chart and
# leaves everything running. It writes bin/cluster/env (KUBECONFIG, HOST_IP).
#
# down stops all of it and restores the host: processes, mounts, cgroups,
# network namespaces, the bridge, iptables and nft chains, sysctls and the
# host directories the components write to. It works after an up that was
# killed at any point (up starts with a down), and does nothing when there is
# nothing to do.
#
# It changes the host (iptables, sysctls, mounts, cgroups), so it runs as
# root. The components bind to the bridge's address or to loopback only.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
K8S_VERSION="${K8S_VERSION:-1.37.2}"
STATE="${PROMPTOPS_CLUSTER_DIR:-$ROOT/bin/cluster}"
HOSTSTATE="$STATE/host"          # what up found on the host, for down
ASSETS="${KUBEBUILDER_ASSETS:-$ROOT/bin/k8s}"       # kube-apiserver, etcd
NODEBIN="${CLUSTER_BINARIES:-$ROOT/bin/cluster-k8s/v${K8S_VERSION}}"
HELM="${HELM:-$ROOT/bin/helm}"
KO="${KO:-$ROOT/bin/ko}"
CONF="$ROOT/hack/cluster"

# The pod network: a bridge whose address is the node's, the API server's,
# and where pods reach services on this machine (HOST_IP).
BRIDGE=promptops0
NODE_IP=10.244.77.1
POD_CIDR=10.244.77.0/24
POD_RANGE_START=10.244.77.10
SVC_CIDR=10.96.77.0/24
SVC_IP=10.96.77.1
NODE_NAME="$(hostname | tr '[:upper:]' '[:lower:]')"
APISERVER_PORT=16443
ETCD_CLIENT_PORT=24379
ETCD_PEER_PORT=24380
CM_PORT=20257
SCHED_PORT=20259
KUBELET_PORT=20250
KUBELET_HEALTHZ_PORT=20248
PROXY_HEALTHZ_PORT=20256
PROXY_METRICS_PORT=20249
PAUSE_IMAGE=docker.io/promptops/pause:v1
OPERATOR_IMAGE_REPO=docker.io/promptops/promptops
# The one image name of config/default, the chart and the samples: its tag is
# the chart's appVersion (the Makefile's VERSION).
OPERATOR_IMAGE_TAG="${VERSION:-$(sed -n 's/^appVersion: "\(.*\)"/\1/p' "$ROOT/charts/promptops/Chart.yaml")}"
OPERATOR_NS=promptops-system

# Sysctls the components change (the bridge plugin turns on ip_forward; the
# kubelet would set the others without protectKernelDefaults: false) and
# that down restores.
SYSCTLS="net.ipv4.ip_forward vm.overcommit_memory kernel.panic kernel.panic_on_oops net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables net.netfilter.nf_conntrack_max"
# Host paths the components write to whatever their flags say (containerd's
# shim sockets, the CNI result cache, the kubelet's device-plugin socket and
# container log links); down removes those that up did not find.
HOST_PATHS="/run/containerd /var/lib/cni /var/lib/kubelet /var/log/containers /run/netns /opt/containerd"

log() { printf 'cluster: %s\n' "$*" >&2; }
die() { printf 'cluster: error: %s\n' "$*" >&2; exit 1; }

pidfile() { echo "$STATE/run/$1.pid"; }

# alive NAME: the process of NAME's pid file runs and is ours (its command
# line names the cluster's state directory or binary).
alive() {
  local f pid
  f="$(pidfile "$1")"
  [[ -f "$f" ]] || return 1
  pid="$(cat "$f")"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" | grep -qF -e "$STATE" -e "$NODEBIN" -e "$ASSETS"
}

# start NAME CMD...: runs CMD in its own session, log in logs/NAME.log,
# with no file descriptor of the caller's but those: the components outlive
# make cluster, and must not keep what it was given open (the lock of
# `flock LOCKFILE make cluster`, which would stay held until make
# cluster-down; a pipe of a CI log, which would never end).
start() {
  local name=$1; shift
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      if ((fd > 2)); then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec setsid "$@" > "$STATE/logs/$name.log" 2>&1 < /dev/null
  ) &
  echo $! > "$(pidfile "$name")"
}

# stop NAME [SECONDS]: SIGTERM, then SIGKILL after SECONDS (10).
stop() {
  local name=$1 grace=${2:-10} pid i
  if alive "$name"; then
    pid="$(cat "$(pidfile "$name")")"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 $((grace * 10))); do [[ -d /proc/$pid ]] || break; sleep 0.1; done
    [[ -d /proc/$pid ]] && kill -KILL "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do [[ -d /proc/$pid ]] || break; sleep 0.1; done
  fi
  rm -f "$(pidfile "$name")"
}

# wait_for WHAT SECONDS LOG CMD...: retries CMD until it succeeds.
wait_for() {
  local what=$1 secs=$2 logf=$3; shift 3
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      log "$what not ready after ${secs}s; last lines of $logf:"
      tail -n 20 "$logf" >&2 || true
      die "$what did not start (full log: $logf); run 'make cluster-down' and retry, or read the log"
    fi
    sleep 0.5
  done
}

render() { # render SRC DST: substitutes the @NAME@ placeholders.
  sed -e "s#@STATE@#$STATE#g" -e "s#@NODE_IP@#$NODE_IP#g" -e "s#@NODE_NAME@#$NODE_NAME#g" \
    -e "s#@POD_CIDR@#$POD_CIDR#g" -e "s#@POD_RANGE_START@#$POD_RANGE_START#g" -e "s#@BRIDGE@#$BRIDGE#g" \
    -e "s#@PAUSE_IMAGE@#$PAUSE_IMAGE#g" -e "s#@KUBELET_PORT@#$KUBELET_PORT#g" \
    -e "s#@KUBELET_HEALTHZ_PORT@#$KUBELET_HEALTHZ_PORT#g" -e "s#@PROXY_HEALTHZ_PORT@#$PROXY_HEALTHZ_PORT#g" \
    -e "s#@PROXY_METRICS_PORT@#$PROXY_METRICS_PORT#g" "$1" > "$2"
}

kubectl_() { "$NODEBIN/kubectl" --kubeconfig "$STATE/kubeconfig/admin.conf" "$@"; }

#### Preconditions

need_root() {
  [[ $(id -u) == 0 ]] || die "make cluster changes the host (iptables, sysctls, mounts) and must run as root; run it with sudo"
}

ensure_packages() {
  local missing=() p
  for p in containerd runc containernetworking-plugins nftables; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]})); then
    command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get: install containerd, runc, the CNI plugins (/usr/lib/cni) and nft by hand"
    log "installing ${missing[*]} with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2 ||
      die "apt-get install ${missing[*]} failed; run 'apt-get update' and retry"
  fi
}

check_binaries() {
  local b
  for b in kube-apiserver etcd; do
    [[ -x "$ASSETS/$b" ]] || die "no $ASSETS/$b: run 'make envtest' or set KUBEBUILDER_ASSETS to a directory holding kube-apiserver and etcd"
  done
  for b in kubelet kube-controller-manager kube-scheduler kube-proxy kubectl; do
    [[ -x "$NODEBIN/$b" ]] || die "no $NODEBIN/$b: run 'make cluster-binaries' or set CLUSTER_BINARIES to a directory holding them"
  done
  [[ -x "$HELM" ]] || die "no helm at $HELM: run 'make helm' or set HELM"
  [[ -x "$KO" ]] || die "no ko at $KO: run 'make ko' or set KO"
  local v
  v="$("$ASSETS/kube-apiserver" --version 2>/dev/null | awk '{print $2}')"
  [[ "$v" == "v$K8S_VERSION" ]] || die "$ASSETS/kube-apiserver is $v, the node binaries are v$K8S_VERSION; rebuild one of them (make envtest / make cluster-binaries K8S_VERSION=...)"
}

#### Host state, recorded by up and restored by down

record_host() {
  mkdir -p "$HOSTSTATE"
  # A down that did not finish leaves the record of the first up: keep it,
  # it is the host as it was before any cluster.
  if [[ ! -f "$HOSTSTATE/sysctl" ]]; then
    local s
    for s in $SYSCTLS; do
      [[ -e /proc/sys/${s//.//} ]] && echo "$s=$(sysctl -n "$s")"
    done > "$HOSTSTATE/sysctl.tmp"
    mv "$HOSTSTATE/sysctl.tmp" "$HOSTSTATE/sysctl"
  fi
  if [[ ! -f "$HOSTSTATE/absent-paths" ]]; then
    local p
    for p in $HOST_PATHS; do [[ -e $p ]] || echo "$p"; done > "$HOSTSTATE/absent-paths.tmp"
    mv "$HOSTSTATE/absent-paths.tmp" "$HOSTSTATE/absent-paths"
  fi
  if [[ ! -f "$HOSTSTATE/nft-chains" ]]; then
    nft_chains > "$HOSTSTATE/nft-chains.tmp"
    mv "$HOSTSTATE/nft-chains.tmp" "$HOSTSTATE/nft-chains"
  fi
}

# nft_chains prints "family table chain" for every nft chain.
nft_chains() {
  command -v nft >/dev/null || return 0
  nft list chains 2>/dev/null | awk '$1=="table"{fam=$2; tab=$3} $1=="chain"{print fam, tab, $2}'
}

#### Setup

make_pki() {
  local d="$STATE/pki"
  mkdir -p "$d"
  (
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 30 -subj "/CN=promptops-cluster-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
    cert() { # cert NAME SUBJECT EKU [SANS]
      openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
      {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$3"
        [[ -z "${4:-}" ]] || echo "subjectAltName=$4"
      } > "$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 30 -extfile "$1.ext" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    cert apiserver "/CN=kube-apiserver" serverAuth \
      "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$NODE_IP,IP:$SVC_IP"
    cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
    cert admin "/O=system:masters/CN=promptops-cluster-admin" clientAuth
    cert controller-manager "/CN=system:kube-controller-manager" clientAuth
    cert scheduler "/CN=system:kube-scheduler" clientAuth
    cert kube-proxy "/CN=system:kube-proxy" clientAuth
    cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
    cert kubelet-server "/CN=$NODE_NAME" serverAuth "DNS:$NODE_NAME,IP:$NODE_IP"
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    chmod 600 ./*.key
  )
}

make_kubeconfigs() {
  mkdir -p "$STATE/kubeconfig"
  local n ca
  ca="$(base64 -w0 < "$STATE/pki/ca.crt")"
  for n in admin controller-manager scheduler kube-proxy kubelet; do
    cat > "$STATE/kubeconfig/$n.conf" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: promptops
  cluster:
    server: https://$NODE_IP:$APISERVER_PORT
    certificate-authority-data: $ca
users:
- name: $n
  user:
    client-certificate-data: $(base64 -w0 < "$STATE/pki/$n.crt")
    client-key-data: $(base64 -w0 < "$STATE/pki/$n.key")
contexts:
- name: promptops
  context: {cluster: promptops, user: $n}
current-context: promptops
EOF
    chmod 600 "$STATE/kubeconfig/$n.conf"
  done
}

# build_images writes the pause and promptops images as tarballs with ko
# (hack/image.sh ko, which make image uses too without docker or podman),
# from static Go binaries on a base of only the CA certificates (no registry
# here).
build_images() {
  local out="$STATE/images"
  mkdir -p "$out"
  log "building the images with ko (pause, promptops)"
  KO="$KO" VERSION="$OPERATOR_IMAGE_TAG" "$ROOT/hack/image.sh" ko "${PAUSE_IMAGE%:*}" "${PAUSE_IMAGE##*:}" \
    "$out/pause.tar" ./hack/cluster/pause > "$STATE/logs/ko-pause.log" 2>&1 ||
    { tail -n 20 "$STATE/logs/ko-pause.log" >&2; die "ko build of the pause image failed (log: $STATE/logs/ko-pause.log)"; }
  KO="$KO" VERSION="$OPERATOR_IMAGE_TAG" "$ROOT/hack/image.sh" ko "$OPERATOR_IMAGE_REPO" "$OPERATOR_IMAGE_TAG" \
    "$out/promptops.tar" . > "$STATE/logs/ko-promptops.log" 2>&1 ||
    { tail -n 20 "$STATE/logs/ko-promptops.log" >&2; die "ko build of the promptops image failed (log: $STATE/logs/ko-promptops.log)"; }
}

# install_operator installs (or upgrades) the operator with the Helm chart
# as release promptops in promptops-system, webhook and secure metrics on,
# from the image up imported (never pulled). "install" runs it again on a
# running cluster (make readme-check-cluster restores the cluster's own
# install with it after trying the README's kustomize and Helm recipes).
install_operator() {
  log "installing the operator with the Helm chart (webhook and secure metrics on)"
  "$HELM" --kubeconfig "$STATE/kubeconfig/admin.conf" upgrade --install promptops "$ROOT/charts/promptops" \
    --namespace "$OPERATOR_NS" --create-namespace \
    --set image.repository="$OPERATOR_IMAGE_REPO" --set image.tag="$OPERATOR_IMAGE_TAG" --set image.pullPolicy=Never \
    --set webhook.enabled=true --set metrics.secure=true \
    --wait --timeout 180s > "$STATE/logs/helm.log" 2>&1 || {
      tail -n 20 "$STATE/logs/helm.log" >&2
      kubectl_ -n "$OPERATOR_NS" get pods -o wide >&2 || true
      die "helm install failed (log: $STATE/logs/helm.log; kubectl -n $OPERATOR_NS describe pods)"
    }
}

up() {
  need_root
  local t0=$SECONDS
  ensure_packages
  check_binaries
  if [[ -d "$STATE/run" || -d "$HOSTSTATE" ]]; then
    log "removing the previous cluster first"
    down
  fi
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    die "the bridge $BRIDGE exists but is not this checkout's ($STATE): another make cluster runs on this machine (one at a time); run make cluster-down there"
  fi
  record_host
  mkdir -p "$STATE"/{run,logs,etcd,cni/net.d,cni/ipam,containerd,kubelet/root,kubelet/pki,kubelet/pod-logs,kubelet/volume-plugins,apiserver-certs}
  render "$CONF/containerd.toml" "$STATE/containerd/config.toml"
  render "$CONF/kubelet.yaml" "$STATE/kubelet/config.yaml"
  render "$CONF/kube-proxy.yaml" "$STATE/kube-proxy.yaml"
  render "$CONF/cni.conflist" "$STATE/cni/net.d/10-promptops.conflist"
  make_pki
  make_kubeconfigs
  build_images &
  local images_pid=$!

  # The bridge exists before any pod so that the API server, the kubelet and
  # kube-proxy can bind to its address.
  ip link add "$BRIDGE" type bridge
  ip addr add "$NODE_IP/${POD_CIDR#*/}" dev "$BRIDGE"
  ip link set "$BRIDGE" up

  local P="$STATE/pki"
  start etcd "$ASSETS/etcd" --name promptops --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "promptops=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state new --listen-metrics-urls=""
  start kube-apiserver "$ASSETS/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --bind-address="$NODE_IP" --advertise-address="$NODE_IP" --secure-port="$APISERVER_PORT" \
    --cert-dir="$STATE/apiserver-certs" \
    --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
    --client-ca-file="$P/ca.crt" \
    --kubelet-client-certificate="$P/apiserver-kubelet-client.crt" --kubelet-client-key="$P/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$P/ca.crt" --kubelet-preferred-address-types=InternalIP \
    --service-cluster-ip-range="$SVC_CIDR" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --profiling=false
  wait_for kube-apiserver 90 "$STATE/logs/kube-apiserver.log" kubectl_ get --raw /readyz
  start kube-controller-manager "$NODEBIN/kube-controller-manager" \
    --kubeconfig="$STATE/kubeconfig/controller-manager.conf" \
    --authentication-kubeconfig="$STATE/kubeconfig/controller-manager.conf" \
    --authorization-kubeconfig="$STATE/kubeconfig/controller-manager.conf" \
    --bind-address=127.0.0.1 --secure-port="$CM_PORT" \
    --controllers='*' \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
    --cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" \
    --service-cluster-ip-range="$SVC_CIDR" \
    --leader-elect=false --profiling=false
  start kube-scheduler "$NODEBIN/kube-scheduler" \
    --kubeconfig="$STATE/kubeconfig/scheduler.conf" \
    --authentication-kubeconfig="$STATE/kubeconfig/scheduler.conf" \
    --authorization-kubeconfig="$STATE/kubeconfig/scheduler.conf" \
    --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" \
    --leader-elect=false --profiling=false

  start containerd /usr/bin/containerd --config "$STATE/containerd/config.toml"
  wait_for containerd 30 "$STATE/logs/containerd.log" ctr --address "$STATE/run/containerd.sock" version
  log "waiting for the image builds"
  wait "$images_pid" || die "the image build failed (logs in $STATE/logs/ko-*.log)"
  local img
  for img in pause promptops; do
    ctr --address "$STATE/run/containerd.sock" -n k8s.io images import "$STATE/images/$img.tar" >/dev/null ||
      die "ctr images import $STATE/images/$img.tar failed (containerd log: $STATE/logs/containerd.log)"
  done

  start kubelet "$NODEBIN/kubelet" --config="$STATE/kubelet/config.yaml" \
    --kubeconfig="$STATE/kubeconfig/kubelet.conf" \
    --root-dir="$STATE/kubelet/root" --cert-dir="$STATE/kubelet/pki" \
    --hostname-override="$NODE_NAME" --node-ip="$NODE_IP"
  start kube-proxy "$NODEBIN/kube-proxy" --config="$STATE/kube-proxy.yaml"
  wait_for "the node $NODE_NAME" 120 "$STATE/logs/kubelet.log" \
    kubectl_ wait --for=condition=Ready "node/$NODE_NAME" --timeout=2s
  wait_for "kube-proxy" 60 "$STATE/logs/kube-proxy.log" \
    curl -fsS "http://127.0.0.1:$PROXY_HEALTHZ_PORT/healthz"
  wait_for "the default ServiceAccount" 60 "$STATE/logs/kube-controller-manager.log" \
    kubectl_ -n default get serviceaccount default

  install_operator

  cp "$STATE/kubeconfig/admin.conf" "$STATE/kubeconfig.yaml"
  cat > "$STATE/env" <<EOF
KUBECONFIG=$STATE/kubeconfig.yaml
HOST_IP=$NODE_IP
POD_CIDR=$POD_CIDR
KUBECTL=$NODEBIN/kubectl
OPERATOR_NAMESPACE=$OPERATOR_NS
OPERATOR_IMAGE=$OPERATOR_IMAGE_REPO:$OPERATOR_IMAGE_TAG
EOF
  log "one node ($NODE_NAME, Kubernetes v$K8S_VERSION) and the operator are running; took $((SECONDS - t0))s; 'make cluster-down' removes them"
  echo "export KUBECONFIG=$STATE/kubeconfig.yaml"
}

#### Teardown

# pids_with STRING: the processes whose command line contains STRING.
pids_with() {
  local f pid
  # grep names itself too; it has exited when the loop looks.
  for f in $(grep -laF -- "$1" /proc/[0-9]*/cmdline 2>/dev/null); do
    pid="${f#/proc/}" pid="${pid%/cmdline}"
    [[ -d /proc/$pid && $pid != "$$" && $pid != "$BASHPID" ]] && echo "$pid"
  done
  return 0
}

# cgroup_dirs: the cgroups the kubelet made, deepest first.
cgroup_dirs() {
  local h
  for h in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [[ -d $h ]] && find "$h" -depth -type d
  done
  return 0
}

kill_pods() {
  local d pid i
  for i in 1 2 3 4 5; do
    local any=
    for d in $(cgroup_dirs); do
      [[ -r $d/cgroup.procs ]] || continue
      while read -r pid; do
        [[ -n $pid ]] || continue
        kill -KILL "$pid" 2>/dev/null || true
        any=1
      done < "$d/cgroup.procs"
    done
    [[ -z $any ]] && break
    sleep 0.5
  done
}

umount_under() { # umount_under DIR: every mount below DIR, deepest first
  local m
  awk -v d="$1" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "cannot unmount $m"
  done
}

clean_iptables() {
  local cmd table chain rule
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    for table in filter nat mangle raw; do
      # First the jumps from the built-in chains, then the chains.
      "$cmd-save" -t "$table" 2>/dev/null | { grep -E '^-A [A-Z]+ .*-j (KUBE-|CNI-)' || true; } | while read -r rule; do
        # shellcheck disable=SC2086
        "$cmd" -t "$table" -D ${rule#-A } 2>/dev/null || true
      done
      for chain in $("$cmd-save" -t "$table" 2>/dev/null | sed -n 's/^:\(\(KUBE\|CNI\)-[^ ]*\) .*/\1/p'); do
        "$cmd" -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in $("$cmd-save" -t "$table" 2>/dev/null | sed -n 's/^:\(\(KUBE\|CNI\)-[^ ]*\) .*/\1/p'); do
        "$cmd" -t "$table" -X "$chain" 2>/dev/null || log "cannot delete $cmd -t $table chain $chain"
      done
    done
  done
}

# clean_nft deletes the nft chains and tables that were not there before up
# and are empty now (iptables-nft leaves its base chains behind), and
# kube-proxy's own tables.
clean_nft() {
  command -v nft >/dev/null || return 0
  local before="$HOSTSTATE/nft-chains" fam tab chain
  [[ -f $before ]] || return 0
  local t
  for t in "ip kube-proxy" "ip6 kube-proxy"; do
    grep -q "^$t " "$before" || nft delete table $t 2>/dev/null || true
  done
  nft_chains | while read -r fam tab chain; do
    grep -qxF "$fam $tab $chain" "$before" && continue
    # only chains without rules
    if [[ -z "$(nft list chain "$fam" "$tab" "$chain" 2>/dev/null | sed -n '/^\s*chain /,/^\s*}/p' | grep -vE '^\s*(chain |type |policy |}|$)')" ]]; then
      nft delete chain "$fam" "$tab" "$chain" 2>/dev/null || true
    fi
  done
  nft list tables 2>/dev/null | while read -r _ fam tab; do
    grep -q "^$fam $tab " "$before" && continue
    [[ -z "$(nft list table "$fam" "$tab" 2>/dev/null | grep -E '^\s*chain ')" ]] && nft delete table "$fam" "$tab" 2>/dev/null || true
  done
}

down() {
  need_root
  if [[ ! -d "$STATE/run" && ! -d "$HOSTSTATE" ]]; then
    log "no cluster in $STATE: nothing to remove"
    return 0
  fi
  # Teardown goes on past any failed step; leftovers() reports at the end.
  set +e +o pipefail
  local name pid
  # Extra processes the e2e tests or the demo started on the host
  # (PostgreSQL, the stand-in model) keep pid files here too.
  if alive kube-proxy && [[ -x "$NODEBIN/kube-proxy" ]]; then
    stop kube-proxy
    timeout 30 "$NODEBIN/kube-proxy" --cleanup --config="$STATE/kube-proxy.yaml" > "$STATE/logs/kube-proxy-cleanup.log" 2>&1 || true
  fi
  stop kube-proxy
  stop kubelet
  kill_pods
  stop containerd
  # containerd's shims outlive it; theirs name its socket.
  for pid in $(pids_with "$STATE/run/containerd.sock"); do kill -KILL "$pid" 2>/dev/null || true; done
  kill_pods
  stop kube-controller-manager
  stop kube-scheduler
  if [[ -d "$STATE/run" ]]; then
    for name in $(cd "$STATE/run" && ls -- *.pid 2>/dev/null | sed 's/\.pid$//'); do
      [[ $name == etcd || $name == kube-apiserver ]] || stop "$name"
    done
  fi
  # Nothing is left to drain: the API server's graceful shutdown only waits.
  stop kube-apiserver 2
  stop etcd
  # Anything else that still names the state directory (a shim of an
  # interrupted run).
  for pid in $(pids_with "$STATE/"); do
    [[ $pid == $$ || $pid == $BASHPID ]] && continue
    kill -KILL "$pid" 2>/dev/null || true
  done

  umount_under "$STATE"
  umount_under /run/containerd
  umount_under /var/lib/kubelet
  umount_under /run/netns
  local d
  for d in $(cgroup_dirs); do rmdir "$d" 2>/dev/null || log "cannot remove cgroup $d (processes left: $(cat "$d/cgroup.procs" 2>/dev/null | tr '\n' ' '))"; done

  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    local veth
    for veth in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
      ip link del "$veth" 2>/dev/null || true
    done
    ip link del "$BRIDGE"
  fi
  clean_iptables
  clean_nft

  if [[ -f "$HOSTSTATE/sysctl" ]]; then
    local kv
    while read -r kv; do
      [[ -n $kv ]] || continue
      [[ "$(sysctl -n "${kv%%=*}" 2>/dev/null)" == "${kv#*=}" ]] || sysctl -q -w "$kv" || log "cannot restore $kv"
    done < "$HOSTSTATE/sysctl"
  fi
  if [[ -f "$HOSTSTATE/absent-paths" ]]; then
    local p
    while read -r p; do
      [[ -n $p ]] || continue
      umount_under "$p"
      rm -rf -- "$p"
    done < "$HOSTSTATE/absent-paths"
  fi
  # Keep the logs of the last run; drop everything else.
  if [[ -d "$STATE" ]]; then
    rm -rf "$STATE/logs.previous"
    [[ -d "$STATE/logs" ]] && mv "$STATE/logs" "$STATE/logs.previous"
    find "$STATE" -mindepth 1 -maxdepth 1 ! -name logs.previous -exec rm -rf {} +
  fi
  set -e -o pipefail
  local left
  left="$(leftovers)"
  if [[ -n "$left" ]]; then
    printf '%s\n' "$left" >&2
    die "the cluster left the above on the host; run 'make cluster-down' again, and remove by hand what remains"
  fi
  log "cluster removed and the host restored"
}

# leftovers prints what of the cluster is still on the host.
leftovers() {
  local pid
  for pid in $(pids_with "$STATE/") $(pids_with "$NODEBIN/"); do
    [[ $pid == $$ || $pid == "$BASHPID" ]] || echo "process $pid: $(tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null)"
  done
  awk -v d="$STATE" '$5 == d || index($5, d "/") == 1 {print "mount " $5}' /proc/self/mountinfo
  cgroup_dirs | sed 's/^/cgroup /'
  ip link show "$BRIDGE" >/dev/null 2>&1 && echo "link $BRIDGE"
  local cmd
  for cmd in iptables ip6tables; do
    command -v "$cmd-save" >/dev/null && "$cmd-save" 2>/dev/null | grep -E '^:(KUBE|CNI)-|-j (KUBE|CNI)-' | sed "s/^/$cmd /"
  done
  if [[ -f "$HOSTSTATE/sysctl" ]]; then echo "host state $HOSTSTATE (sysctls not restored)"; fi
  return 0
}

# install: the operator's install of up, again, on the running cluster.
install() {
  need_root
  [[ -x "$NODEBIN/kubectl" ]] || die "no $NODEBIN/kubectl: set CLUSTER_BINARIES to the cluster's"
  [[ -x "$HELM" ]] || die "no helm at $HELM: run 'make helm' or set HELM"
  [[ -f "$STATE/env" ]] && kubectl_ get --raw /readyz >/dev/null 2>&1 ||
    die "no running cluster in $STATE: run 'make cluster' first"
  install_operator
  log "the operator is installed (helm release promptops in $OPERATOR_NS)"
}

status() {
  local name
  for name in etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy; do
    if alive "$name"; then echo "$name: running (pid $(cat "$(pidfile "$name")"))"; else echo "$name: not running"; fi
  done
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  install) install ;;
  *) echo "usage: $0 up|down|status|install" >&2; exit 2 ;;
esac
