#!/usr/bin/env bash
# A multi-host test bed on one machine: 2-4 network namespaces ("hosts") joined by veth pairs to a bridge that
# lives in its own namespace, so nothing is added to the host's own network configuration.
#
#   scripts/netns.sh up N [--rate RATE] [--loss PCT]   create hosts 1..N (N = 2..4); --loss 100 = partition
#   scripts/netns.sh shape [--rate RATE|none] [--loss PCT] [--host H]  change shaping of a running bed (all
#                                                      hosts, or host H only: --host 2 --loss 100 cuts host 2 off)
#   scripts/netns.sh run H CMD...                      run CMD inside host H (1..4, h1 or the namespace name)
#   scripts/netns.sh addr H                            print host H's IPv4 address
#   scripts/netns.sh status                            show namespaces, addresses, qdiscs and loss rules
#   scripts/netns.sh down                              remove everything (idempotent)
#
# Host i is namespace ${PREFIX}-h<i> with interface eth0 = 10.77.0.<i>/24 and fd77::<i>/64; the bridge br0 is in
# ${PREFIX}-sw. PREFIX is $JCCL_NETNS_PREFIX (default "jccl"). --rate shapes each host's egress with a token
# bucket (tc tbf, e.g. 100mbit, 1gbit); --loss drops PCT% of each host's outgoing packets at random with an
# nftables rule (numgen random mod 100 < PCT). netem is not used: it is not available on every kernel we run on.
# Needs root, iproute2 (ip, tc) and, for --loss, nftables (apt-get install -y iproute2 nftables).
set -euo pipefail

PREFIX="${JCCL_NETNS_PREFIX:-jccl}"
SWITCH="${PREFIX}-sw"
SUBNET="10.77.0"

die() {
  echo "netns.sh: $*" >&2
  exit 1
}

need() {
  command -v "$1" >/dev/null 2>&1 || die "'$1' not found; install it: apt-get install -y $2"
}

host_ns() {
  local h="$1"
  case "$h" in
    "${PREFIX}"-h[1-4]) echo "$h" ;;
    h[1-4]) echo "${PREFIX}-$h" ;;
    [1-4]) echo "${PREFIX}-h$h" ;;
    *) die "unknown host '$h' (use 1..4, h1..h4 or ${PREFIX}-h1..${PREFIX}-h4)" ;;
  esac
}

hosts() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}-h[1-4]$" | sort || true
}

shape() {
  local rate="" loss="" only=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --host) only="$(host_ns "${2:?--host needs a host, 1..4}")"; shift 2 ;;
      --rate) rate="${2:?--rate needs a value, e.g. 100mbit}"; shift 2 ;;
      --loss) loss="${2:?--loss needs a percentage}"; shift 2 ;;
      *) die "unknown option '$1'" ;;
    esac
  done
  if [ -n "$loss" ]; then
    need nft nftables
    [[ "$loss" =~ ^[0-9]+$ ]] && [ "$loss" -le 100 ] || die "--loss takes a whole percentage 0..100, not '$loss'"
  fi
  local ns
  for ns in $(hosts); do
    if [ -n "$only" ] && [ "$ns" != "$only" ]; then
      continue
    fi
    if [ -n "$rate" ]; then
      if [ "$rate" = none ]; then
        ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
      else
        # burst must hold at least one MTU-sized packet per timer tick; 256 KiB is plenty up to ~10 Gbit/s.
        ip netns exec "$ns" tc qdisc replace dev eth0 root tbf rate "$rate" burst 256kb latency 100ms
      fi
    fi
    if [ -n "$loss" ]; then
      ip netns exec "$ns" nft delete table inet jccl_loss 2>/dev/null || true
      if [ "$loss" -gt 0 ]; then
        ip netns exec "$ns" nft add table inet jccl_loss
        ip netns exec "$ns" nft add chain inet jccl_loss out '{ type filter hook output priority 0; policy accept; }'
        if [ "$loss" -ge 100 ]; then
          ip netns exec "$ns" nft add rule inet jccl_loss out oifname "eth0" drop   # a partition
        else
          ip netns exec "$ns" nft add rule inet jccl_loss out oifname "eth0" numgen random mod 100 '<' "$loss" drop
        fi
      fi
    fi
  done
}

down() {
  local ns
  for ns in $(hosts) "$SWITCH"; do
    if ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$ns"; then
      ip netns del "$ns"
    fi
  done
  # veth ends left in the root namespace by an interrupted 'up'
  local link
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^${PREFIX}-h[1-4][es]$" || true); do
    ip link del "$link" 2>/dev/null || true
  done
}

up() {
  local n="${1:-}"
  shift || true
  [[ "$n" =~ ^[2-4]$ ]] || die "usage: netns.sh up N [--rate RATE] [--loss PCT]  (N = 2..4)"
  [ "$(id -u)" = 0 ] || die "must run as root (network namespaces)"
  need ip iproute2
  need tc iproute2
  down
  ip netns add "$SWITCH"
  ip netns exec "$SWITCH" ip link set lo up
  ip netns exec "$SWITCH" ip link add br0 type bridge
  ip netns exec "$SWITCH" ip link set br0 up
  local i ns
  for i in $(seq 1 "$n"); do
    ns="${PREFIX}-h$i"
    ip netns add "$ns"
    ip link add "${PREFIX}-h${i}e" type veth peer name "${PREFIX}-h${i}s"
    ip link set "${PREFIX}-h${i}e" netns "$ns"
    ip link set "${PREFIX}-h${i}s" netns "$SWITCH"
    ip netns exec "$ns" ip link set "${PREFIX}-h${i}e" name eth0
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip addr add "${SUBNET}.$i/24" dev eth0
    ip netns exec "$ns" ip -6 addr add "fd77::$i/64" dev eth0 nodad 2>/dev/null || true
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$SWITCH" ip link set "${PREFIX}-h${i}s" master br0
    ip netns exec "$SWITCH" ip link set "${PREFIX}-h${i}s" up
  done
  if [ $# -gt 0 ]; then
    shape "$@"
  fi
  # Without STP the bridge forwards at once; when ping exists, check that host 1 reaches the others anyway.
  command -v ping >/dev/null 2>&1 || n=1
  for i in $(seq 2 "$n"); do
    local ok=0 attempt
    for attempt in $(seq 1 50); do
      if ip netns exec "${PREFIX}-h1" ping -c1 -W1 "${SUBNET}.$i" >/dev/null 2>&1; then
        ok=1
        break
      fi
      sleep 0.1
    done
    [ "$ok" = 1 ] || echo "netns.sh: warning: ${SUBNET}.$i not answering pings yet (is --loss very high?)" >&2
  done
  echo "netns.sh: hosts up: $(for i in $(hosts); do i="${i##*-h}";  printf '%s=%s.%s ' "${PREFIX}-h$i" "$SUBNET" "$i"; done)"
}

status() {
  local ns
  for ns in $(hosts); do
    echo "== $ns"
    ip netns exec "$ns" ip -br addr show dev eth0
    ip netns exec "$ns" tc qdisc show dev eth0
    if command -v nft >/dev/null 2>&1; then
      ip netns exec "$ns" nft list table inet jccl_loss 2>/dev/null | grep drop || true
    fi
  done
}

cmd="${1:-}"
shift || true
case "$cmd" in
  up) up "$@" ;;
  down) down ;;
  shape) shape "$@" ;;
  run)
    [ $# -ge 2 ] || die "usage: netns.sh run H CMD..."
    ns="$(host_ns "$1")"
    shift
    exec ip netns exec "$ns" "$@"
    ;;
  addr)
    [ $# -eq 1 ] || die "usage: netns.sh addr H"
    ns="$(host_ns "$1")"
    echo "${SUBNET}.${ns##*-h}"
    ;;
  status) status ;;
  *)
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
    [ -z "$cmd" ] || exit 2
    ;;
esac
