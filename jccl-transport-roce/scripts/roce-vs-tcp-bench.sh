#!/bin/bash
# Loopback WRITE bandwidth (1 MiB) and latency (8 B) of roce0 beside tcp0 and a C UDP ping-pong (bench/c/udp_pingpong.c),
# ROUNDS rounds (default 3), with the load average before each round (docs/transport-roce.md).
cd "$(dirname "$0")/../.."
ROUNDS=${1:-3}
# Uses the tools as built (./jccl builds them on first use; JCCL_NO_BUILD=1 below skips the staleness check).
export JCCL_NO_BUILD=1 JCCL_JAVA_OPTS=-Xmx512m JCCL_ROCE_PORT=0
PINGPONG=${TMPDIR:-/tmp}/jccl-udp-pingpong
gcc -O2 -pthread -o "$PINGPONG" bench/c/udp_pingpong.c || exit 1
for i in $(seq "$ROUNDS"); do
  echo "== round $i load $(cut -d' ' -f1-3 /proc/loadavg)"
  for dev in roce0 tcp0; do
    echo "== $dev write_bw 1M run $i"
    timeout 120 ./jccl perf write_bw -d $dev --local -s 1M -n 300 2>&1 | grep -A1 "#bytes" | tail -1
    echo "== $dev write_lat 8 run $i"
    timeout 120 ./jccl perf write_lat -d $dev --local -s 8 -n 3000 2>&1 | grep -A1 "#bytes" | tail -1
  done
  echo "== udp_pingpong 8 run $i"
  timeout 60 "$PINGPONG" 8 3000
done
