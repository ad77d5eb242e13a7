#!/usr/bin/env bash
# Goodput of a bulk RDMA WRITE stream under random loss, roce0 beside tcp0 in the same run (issue 20: "goodput
# under 1% and 5% loss reported beside tcp0's"). Two hosts of the network-namespace bed; host 1 streams WRITEs into
# a region on host 2 (scripts/RoceFlow.java, FLOW_DEVICE=roce0 or tcp0) for RUN_SECONDS; an nftables rule on the
# bed's switch (bridge family, forward hook) drops LOSS% of the flow's packets at random in both directions:
#   roce0: udp dport 4791 numgen random mod 100 < LOSS drop      (both contexts use port 4791)
#   tcp0:  tcp dport 4800 / tcp sport 4800 numgen random ...     (both contexts listen on port 4800)
# For each round, loss and device it prints the goodput, and for roce0 its go-back-N retries and ACK timeouts.
#
#   jccl-transport-roce/scripts/roce-loss-netns.sh            (root; iproute2, nftables; JDK 25)
#
# Environment: LOSSES (default "0 1 5"), DEVICES (default "roce0 tcp0"), RUN_SECONDS (default 3), ROUNDS (default
# 3), MESSAGE_BYTES (default 65536), OUTSTANDING (WRITEs in flight, default 4), JCCL_NETNS_PREFIX (default jrl),
# QP_TIMEOUT (roce0's ACK timeout code, default 14 = 67 ms; JCCL_ROCE_ACK_TIMEOUT_FLOOR_US still applies).
# The bed is always taken down at the end.
# Needs the jars: ./mvnw -o install -DskipTests -pl jccl-common,jccl-verbs,jccl-transport-tcp,jccl-transport-roce
set -euo pipefail
ROOT="$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)"
# shellcheck source=../../scripts/env.sh
source "$ROOT/scripts/env.sh"
export JCCL_NETNS_PREFIX="${JCCL_NETNS_PREFIX:-jrl}"
P="$JCCL_NETNS_PREFIX"
LOSSES="${LOSSES:-0 1 5}"
DEVICES="${DEVICES:-roce0 tcp0}"
RUN_SECONDS="${RUN_SECONDS:-3}"
ROUNDS="${ROUNDS:-3}"
MESSAGE_BYTES="${MESSAGE_BYTES:-65536}"
OUTSTANDING="${OUTSTANDING:-4}"
TCP_PORT=4800
NETNS="$ROOT/scripts/netns.sh"

[ "$(id -u)" = 0 ] || { echo "roce-loss-netns: needs root (network namespaces)" >&2; exit 1; }
command -v nft >/dev/null || { echo "roce-loss-netns: nft not found (apt-get install -y nftables)" >&2; exit 1; }
CP=""
for m in jccl-common jccl-verbs jccl-transport-tcp jccl-transport-roce; do
  jar="$ROOT/$m/target/$m-0.2.0.jar"
  [ -f "$jar" ] || { echo "roce-loss-netns: no $jar; build: ./mvnw -o install -DskipTests -pl jccl-common,jccl-verbs,jccl-transport-tcp,jccl-transport-roce" >&2; exit 1; }
  CP="$CP${CP:+:}$jar"
done
WORK="$(mktemp -d /tmp/roce-loss-netns.XXXXXX)"
cleanup() {
  "$NETNS" down || true
  rm -rf "$WORK"
}
trap cleanup EXIT
"$JAVA_HOME/bin/javac" -d "$WORK/classes" -cp "$CP" "$ROOT/jccl-transport-roce/scripts/RoceFlow.java"
JAVA=("$JAVA_HOME/bin/java" --enable-native-access=ALL-UNNAMED -XX:+UseSerialGC -Xmx256m -cp "$CP:$WORK/classes")

"$NETNS" up 2 >/dev/null

# loss RULE...: replaces the switch's loss table (nothing at 0%)
loss() {
  local percent="$1" device="$2"
  ip netns exec "$P-sw" nft delete table bridge "${P}_loss" 2>/dev/null || true
  [ "$percent" -gt 0 ] || return 0
  local match
  if [ "$device" = roce0 ]; then
    match="udp dport 4791 numgen random mod 100 < $percent counter drop"
  else
    match="tcp dport $TCP_PORT numgen random mod 100 < $percent counter drop
    tcp sport $TCP_PORT numgen random mod 100 < $percent counter drop"
  fi
  ip netns exec "$P-sw" nft -f - <<NFT
table bridge ${P}_loss {
  chain lossy {
    type filter hook forward priority 0; policy accept;
    $match
  }
}
NFT
}
dropped() {
  ip netns exec "$P-sw" nft list table bridge "${P}_loss" 2>/dev/null \
    | sed -n 's/.*counter packets \([0-9]*\).*/\1/p' | awk '{s += $1} END {print s + 0}'
}
field() { # field NAME LINE
  sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"
}

echo "roce-loss-netns: ${RUN_SECONDS}s per run, $MESSAGE_BYTES-byte WRITEs x $OUTSTANDING, losses: $LOSSES, roce0 QP_TIMEOUT ${QP_TIMEOUT:-14}, floor ${JCCL_ROCE_ACK_TIMEOUT_FLOOR_US:-32768} us; load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %-5s %-6s %12s %9s %8s %9s\n' round loss device goodput_mbps dropped retries timeouts
for round in $(seq 1 "$ROUNDS"); do
  for percent in $LOSSES; do
    for device in $DEVICES; do
      dir="$WORK/$round-$percent-$device"
      mkdir -p "$dir"
      loss "$percent" "$device"
      pids=()
      for h in 2 1; do
        role=server
        args=()
        [ "$h" = 1 ] && role=client && args=("$RUN_SECONDS" "$MESSAGE_BYTES" "$OUTSTANDING")
        ip netns exec "$P-h$h" env FLOW_DEVICE="$device" JCCL_ROCE_ADDRESS="10.77.0.$h" JCCL_ROCE_PORT=4791 \
          JCCL_TCP_ADDRESS="10.77.0.$h" JCCL_TCP_PORT="$TCP_PORT" "${JAVA[@]}" RoceFlow "$role" "$dir" f \
          "${args[@]}" >"$dir/$role.log" 2>&1 &
        pids+=($!)
      done
      for i in $(seq 1 600); do
        [ -f "$dir/f.ready" ] && break
        sleep 0.1
      done
      touch "$dir/go"
      # the client (pids[1]) first: a client that fails leaves no f.done, so release the server then, and stop a
      # run that outlives its time by a minute (a hung run would hold the benchmark lock)
      status=0
      for i in $(seq 1 $(( (RUN_SECONDS + 60) * 10 ))); do
        kill -0 "${pids[1]}" 2>/dev/null || break
        sleep 0.1
      done
      kill "${pids[1]}" 2>/dev/null && status=1
      wait "${pids[1]}" || status=1
      touch "$dir/f.done"
      for i in $(seq 1 100); do
        kill -0 "${pids[0]}" 2>/dev/null || break
        sleep 0.1
      done
      kill "${pids[0]}" 2>/dev/null || true
      wait "${pids[0]}" || status=1
      if [ "$status" != 0 ]; then
        echo "roce-loss-netns: $device at $percent% failed in round $round:" >&2
        tail -n 5 "$dir"/*.log >&2
        printf '%-5s %-5s %-6s %12s\n' "$round" "$percent%" "$device" failed
        continue
      fi
      c="$(grep '^client' "$dir/client.log")"
      printf '%-5s %-5s %-6s %12s %9s %8s %9s\n' "$round" "$percent%" "$device" "$(field goodput_mbps "$c")" \
        "$(dropped)" "$(field completer_retry_err "$c")" "$(field local_ack_timeout_err "$c")"
    done
  done
done
echo "roce-loss-netns: load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
