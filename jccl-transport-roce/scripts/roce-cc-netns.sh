#!/usr/bin/env bash
# Two roce0 flows into one bottleneck on the network-namespace bed (issue 20, "Congestion control"): hosts 1 and
# 2 each stream RDMA WRITEs to host 3; the switch's port towards host 3 is a tc tbf bottleneck, and nftables on
# the switch sets CE on MARK_PERMILLE of every 1000 ECT packets going there (an ECN queue, emulated). For each
# congestion mode (JCCL_ROCE_CC) and round it prints both flows' goodput, Jain's fairness index, the packets the
# bottleneck dropped and the CE marks it set, and the roce0 counters (retries, CNPs).
#
# roce0's FFM socket reads the IP ECN field of each received packet (recvmmsg with IP_RECVTOS), so the CE marks
# reach its notification point as they are (FECN_BRIDGE=0, the default). FECN_BRIDGE=1 also has host 3 copy each CE
# mark into the BTH's FECN bit on arrival (an nftables rule; the ICRC leaves FECN out, as it leaves out the TOS
# byte), which the notification point reads as InfiniBand's own congestion mark: the only mark the NIO fallback
# (JCCL_ROCE_IO=nio, no TOS byte) can see, and how the first measurements were taken.
#
#   jccl-transport-roce/scripts/roce-cc-netns.sh            (root; iproute2, nftables; JDK 25)
#
# Environment: RATE (tbf rate, default 50mbit), LINK_MBPS (JCCL_ROCE_LINK_MBPS of every flow, default 50),
# MARK_PERMILLE (default 100), LIMIT (tbf queue, default 64kb), RUN_SECONDS (default 8), ROUNDS (default 2), MODES
# (default "none dcqcn delay"), MESSAGE_BYTES (default 65536), OUTSTANDING (WRITEs in flight per flow, default 4),
# JCCL_NETNS_PREFIX (default jcc). The bed is always taken down at the end.
# Needs the jars: ./mvnw -o install -DskipTests -pl jccl-common,jccl-verbs,jccl-transport-roce
set -euo pipefail
ROOT="$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)"
# shellcheck source=../../scripts/env.sh
source "$ROOT/scripts/env.sh"
export JCCL_NETNS_PREFIX="${JCCL_NETNS_PREFIX:-jcc}"
P="$JCCL_NETNS_PREFIX"
RATE="${RATE:-50mbit}"
LINK_MBPS="${LINK_MBPS:-50}"
MARK_PERMILLE="${MARK_PERMILLE:-100}"
LIMIT="${LIMIT:-64kb}"
RUN_SECONDS="${RUN_SECONDS:-8}"
ROUNDS="${ROUNDS:-2}"
MODES="${MODES:-none dcqcn delay}"
MESSAGE_BYTES="${MESSAGE_BYTES:-65536}"
FECN_BRIDGE="${FECN_BRIDGE:-0}"
OUTSTANDING="${OUTSTANDING:-4}"
NETNS="$ROOT/scripts/netns.sh"

[ "$(id -u)" = 0 ] || { echo "roce-cc-netns: needs root (network namespaces)" >&2; exit 1; }
CP=""
for m in jccl-common jccl-verbs jccl-transport-roce; do
  jar="$ROOT/$m/target/$m-0.2.0.jar"
  [ -f "$jar" ] || { echo "roce-cc-netns: no $jar; build: ./mvnw -o install -DskipTests -pl jccl-common,jccl-verbs,jccl-transport-roce" >&2; exit 1; }
  CP="$CP${CP:+:}$jar"
done
WORK="$(mktemp -d /tmp/roce-cc-netns.XXXXXX)"
cleanup() {
  "$NETNS" down || true
  rm -rf "$WORK"
}
trap cleanup EXIT
"$JAVA_HOME/bin/javac" -d "$WORK/classes" -cp "$CP" "$ROOT/jccl-transport-roce/scripts/RoceFlow.java"
JAVA=("$JAVA_HOME/bin/java" --enable-native-access=ALL-UNNAMED -XX:+UseSerialGC -Xmx256m -cp "$CP:$WORK/classes")

"$NETNS" up 3 >/dev/null
# the shared bottleneck: the switch's port towards host 3
ip netns exec "$P-sw" tc qdisc replace dev "$P-h3s" root tbf rate "$RATE" burst 16kb limit "$LIMIT"
# CE on a fraction of the ECT(0) packets towards host 3
ip netns exec "$P-sw" nft -f - <<NFT
table bridge ${P}_ecn {
  chain ecnmark {
    type filter hook forward priority 0; policy accept;
    oifname "$P-h3s" ip ecn ect0 numgen random mod 1000 < $MARK_PERMILLE counter ip ecn set ce
  }
}
NFT
if [ "$FECN_BRIDGE" = 1 ]; then
  # the FECN bridge (see the top): CE → BTH FECN (bit 7 of byte 4 after the 8-byte UDP header)
  ip netns exec "$P-h3" nft -f - <<NFT
table inet ${P}_fecn {
  chain ce2fecn {
    type filter hook prerouting priority -300; policy accept;
    ip ecn ce udp dport 4790-4799 @th,96,1 set 1
  }
}
NFT
fi

tbf_stat() { # "sent_packets dropped"
  ip netns exec "$P-sw" tc -s qdisc show dev "$P-h3s" | sed -n 's/.*Sent [0-9]* bytes \([0-9]*\) pkt (dropped \([0-9]*\),.*/\1 \2/p' | head -1
}
marks() {
  ip netns exec "$P-sw" nft list table bridge "${P}_ecn" | sed -n 's/.*counter packets \([0-9]*\).*/\1/p' | head -1
}
field() { # field NAME LINE
  sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"
}

echo "roce-cc-netns: bottleneck $RATE (tbf limit $LIMIT), CE on $MARK_PERMILLE/1000 ECT packets (FECN_BRIDGE=$FECN_BRIDGE), ${RUN_SECONDS}s per run, $MESSAGE_BYTES-byte WRITEs x $OUTSTANDING per flow, JCCL_ROCE_LINK_MBPS=$LINK_MBPS; load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %-5s %10s %10s %6s %8s %8s %7s %6s %8s\n' mode round flow1_mbps flow2_mbps jain drop_pct ce_marks retries cnp_tx cnp_rcvd
for round in $(seq 1 "$ROUNDS"); do
  for mode in $MODES; do
    dir="$WORK/$mode-$round"
    mkdir -p "$dir"
    pids=()
    for f in 1 2; do
      ip netns exec "$P-h3" env JCCL_ROCE_ADDRESS=10.77.0.3 JCCL_ROCE_PORT=$((4790 + f)) JCCL_ROCE_CC="$mode" \
        JCCL_ROCE_LINK_MBPS="$LINK_MBPS" JCCL_ROCE_RX_SPIN_US=0 "${JAVA[@]}" RoceFlow server "$dir" "f$f" \
        >"$dir/server$f.log" 2>&1 &
      pids+=($!)
      ip netns exec "$P-h$f" env JCCL_ROCE_ADDRESS="10.77.0.$f" JCCL_ROCE_PORT=4791 JCCL_ROCE_CC="$mode" \
        JCCL_ROCE_LINK_MBPS="$LINK_MBPS" JCCL_ROCE_RX_SPIN_US=0 "${JAVA[@]}" RoceFlow client "$dir" "f$f" \
        "$RUN_SECONDS" "$MESSAGE_BYTES" "$OUTSTANDING" >"$dir/client$f.log" 2>&1 &
      pids+=($!)
    done
    for i in $(seq 1 600); do
      [ -f "$dir/f1.ready" ] && [ -f "$dir/f2.ready" ] && break
      sleep 0.1
    done
    read -r sent0 drop0 <<<"$(tbf_stat)"
    marks0="$(marks)"
    touch "$dir/go"
    status=0
    for pid in "${pids[@]}"; do
      wait "$pid" || status=1
    done
    read -r sent1 drop1 <<<"$(tbf_stat)"
    marks1="$(marks)"
    if [ "$status" != 0 ]; then
      echo "roce-cc-netns: a flow failed in $mode round $round:" >&2
      tail -n 5 "$dir"/*.log >&2
      continue
    fi
    c1="$(grep '^client' "$dir/client1.log")"
    c2="$(grep '^client' "$dir/client2.log")"
    s1="$(grep '^server' "$dir/server1.log")"
    s2="$(grep '^server' "$dir/server2.log")"
    g1="$(field goodput_mbps "$c1")"
    g2="$(field goodput_mbps "$c2")"
    retries=$(( $(field completer_retry_err "$c1") + $(field completer_retry_err "$c2") ))
    cnp_tx=$(( $(field np_cnp_sent "$s1") + $(field np_cnp_sent "$s2") ))
    cnp_rx=$(( $(field rp_cnp_handled "$c1") + $(field rp_cnp_handled "$c2") ))
    awk -v m="$mode" -v r="$round" -v a="$g1" -v b="$g2" -v s="$((sent1 - sent0))" -v d="$((drop1 - drop0))" \
      -v ce="$((marks1 - marks0))" -v re="$retries" -v tx="$cnp_tx" -v rx="$cnp_rx" 'BEGIN {
        jain = (a + b) * (a + b) / (2 * (a * a + b * b));
        printf "%-6s %-5s %10.2f %10.2f %6.3f %8.2f %8d %7d %6d %8d\n", m, r, a, b, jain, 100 * d / (s + d), ce, re, tx, rx }'
  done
done
