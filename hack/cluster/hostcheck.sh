#!/usr/bin/env bash
# hack/cluster/hostcheck.sh DIR: writes what make cluster may change on the
# host into DIR (mounts, links, addresses, routes, network namespaces,
# cgroups, iptables and nft rules, sysctls, directories, listeners), to diff
# a snapshot taken before make cluster with one taken after make
# cluster-down: diff -r before/ after/.
set -uo pipefail
out=${1:?usage: hostcheck.sh DIR}
mkdir -p "$out"
awk '{print $5, $9}' /proc/self/mountinfo | sort > "$out/mounts"
ip -o link show | awk -F': ' '{print $2}' | sort > "$out/links"
ip -o addr show | awk '{print $2, $4}' | sort > "$out/addrs"
ip route show table all | sort > "$out/routes"
ls /run/netns 2>/dev/null > "$out/netns"; ls /var/run/netns 2>/dev/null >> "$out/netns"
find /sys/fs/cgroup -maxdepth 2 -type d -name 'kubepods*' 2>/dev/null | sort > "$out/cgroups"
iptables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//' > "$out/iptables"
ip6tables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//' > "$out/ip6tables"
nft list ruleset 2>/dev/null > "$out/nft"
for s in net.ipv4.ip_forward vm.overcommit_memory kernel.panic kernel.panic_on_oops net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables net.netfilter.nf_conntrack_max; do
  echo "$s=$(sysctl -n "$s" 2>/dev/null)"
done > "$out/sysctls"
for d in /run/containerd /var/lib/cni /var/lib/kubelet /var/log/containers /var/log/pods /run/netns /opt/containerd /etc/cni; do
  [[ -e $d ]] && echo "$d"
done > "$out/dirs"
ps -eo args= | grep -E 'bin/cluster|cluster-k8s|/usr/bin/containerd|containerd-shim|/ko-app/|listen_addresses=10.244.77' | grep -v grep | awk '{print $1}' | sort > "$out/processes"
ss -Hltn 2>/dev/null | awk '{print $4}' | grep -E '^(10\.244\.77\.|127\.0\.0\.1:(2437|2438|2025|2024))' | sort > "$out/listeners"
