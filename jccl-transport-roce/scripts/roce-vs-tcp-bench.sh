#!/bin/bash
# Loopback WRITE bandwidth (1 MiB) and latency (8 B) of roce0 beside tcp0, a C UDP ping-pong
# (bench/c/udp_pingpong.c) and the same ping-pong made of roce0's system calls per hop (its hop "roce": the answer
# and its ACK as one GSO message to a GRO socket; the kernel's floor for roce0) and that hop made by a JVM through
# FFM with no JCCL code (jccl-benchmarks' JvmUdpPingPong, run from source: the floor for any JVM provider),
# ROUNDS rounds (default 5), each round under the shared benchmark lock
# (/tmp/jccl-bench.lock; JCCL_BENCH_LOCK overrides, "none" runs without) with the load average taken inside it;
# then the medians and the ratios against the targets of issue 20 (docs/transport-roce.md, "Loopback benchmark").
# Extra roce0 settings pass through the environment (JCCL_ROCE_IO, JCCL_ROCE_MTU, JCCL_ROCE_POLL_DRIVEN, ...).
# BW_ITERATIONS (default 4000) and LAT_ITERATIONS (default 3000) set -n; BW_WARMUP (default 2000 messages) and
# LAT_WARMUP (default 20000 round trips) set --warmup, the same for every device: with the tool's own warm-up (128
# and 1000) and -n 300 the measured part ran before C2 had compiled the path (8 B t_typical 12 us against 5-6 us
# warm; tcp0's 1 MiB WRITE 0.9-1.6 GB/s against 3-5 GB/s warm), and 300 MiB took 0.1-0.4 s: noise. Until
# 2026-11-27 the defaults were 2000 and 500: on that day's VM 2.79 GB/s for roce0 (2.98 for tcp0) against 4.02
# (4.27) with 4000 and 2000, five rounds each: the JIT again.
# LAT_CPUS (default 0,1; "none": unpinned) pins the latency runs' two ends to SERVER,CLIENT CPUs, the JCCL devices'
# (`--cpus`) and the C ping-pongs' threads alike: unpinned, the scheduler put roce0's two perftest threads on one core
# in 3 of 5 rounds on 2026-11-27 (10-12 us, each end then hands the core over after 16 empty polls), a coin flip
# that decided the median; pinned, 3.7-3.8 us in 6 runs of 6 (docs/transport-roce.md, "Another VM").
# JCCL (default ./jccl) runs another build's tools, e.g. a copy of main's (./jccl, scripts/env.sh and
# jccl-tools/target/{jccl-tools-0.2.0.jar,lib}) for a before/after in the same rounds.
#   jccl-transport-roce/scripts/roce-vs-tcp-bench.sh [ROUNDS]
cd "$(dirname "$0")/../.." || exit 1
source scripts/env.sh # JAVA_HOME for the JVM ping-pong
ROUNDS=${1:-5}
BW_ITERATIONS=${BW_ITERATIONS:-4000}
LAT_ITERATIONS=${LAT_ITERATIONS:-3000}
BW_WARMUP=${BW_WARMUP:-2000}
LAT_WARMUP=${LAT_WARMUP:-20000}
LAT_CPUS=${LAT_CPUS:-0,1}
JCCL=${JCCL:-./jccl}
LOCK=${JCCL_BENCH_LOCK:-/tmp/jccl-bench.lock}
# Uses the tools as built (./jccl builds them on first use; JCCL_NO_BUILD=1 below skips the staleness check).
export JCCL_NO_BUILD=1 JCCL_JAVA_OPTS=${JCCL_JAVA_OPTS:--Xmx512m} JCCL_ROCE_PORT=0
PINGPONG=${TMPDIR:-/tmp}/jccl-udp-pingpong
gcc -O2 -pthread -o "$PINGPONG" bench/c/udp_pingpong.c || exit 1
JVM_PINGPONG=jccl-benchmarks/src/main/java/io/jccl/benchmarks/JvmUdpPingPong.java
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
CPUS=$LAT_CPUS
[ "$CPUS" = none ] && CPUS=

# perftest result line: bw -> "BW average" column (MiB/s); lat -> "t_min t_typical" columns (us)
bw() { timeout 120 "$JCCL" perf write_bw -d "$1" --local -s 1M -n "$BW_ITERATIONS" --warmup "$BW_WARMUP" 2>&1 | grep -A1 "#bytes" | tail -1 | awk '{print $4}'; }
lat() { timeout 120 "$JCCL" perf write_lat -d "$1" --local -s 8 -n "$LAT_ITERATIONS" --warmup "$LAT_WARMUP" ${CPUS:+--cpus "$CPUS"} 2>&1 | grep -A1 "#bytes" | tail -1 | awk '{print $3, $5}'; }

round() {
  local load rb tb rl tl cl fl jl
  load=$(cut -d' ' -f1 /proc/loadavg)
  rb=$(bw roce0); tb=$(bw tcp0)
  rl=$(lat roce0); tl=$(lat tcp0)
  cl=$(timeout 60 "$PINGPONG" 8 3000 "${CPUS:--}" plain | awk -F, '{print $4, $5}')
  fl=$(timeout 60 "$PINGPONG" 8 3000 "${CPUS:--}" roce | awk -F, '{print $4, $5}')
  jl=$(timeout 60 "$JAVA_HOME/bin/java" --enable-native-access=ALL-UNNAMED "$JVM_PINGPONG" 8 3000 "${CPUS:--}" roce \
    | awk -F, '{print $4, $5}')
  echo "$1 $load ${rb:-nan} ${tb:-nan} ${rl:-nan nan} ${tl:-nan nan} ${cl:-nan nan} ${fl:-nan nan} ${jl:-nan nan}"
}

echo "| Round | load (1 min) | roce0 1 MiB WRITE MiB/s | tcp0 1 MiB WRITE MiB/s | roce0/tcp0 | roce0 8 B t_min / t_typical us | tcp0 8 B t_min / t_typical us | C UDP 8 B t_min / t_typical us | C, roce0's system calls, t_min / t_typical us | JVM, roce0's system calls, t_min / t_typical us |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for i in $(seq "$ROUNDS"); do
  if [ "$LOCK" = none ]; then line=$(round "$i"); else line=$(flock "$LOCK" bash -c "$(declare -f bw lat round); PINGPONG=$PINGPONG JVM_PINGPONG=$JVM_PINGPONG CPUS=$CPUS JCCL=$JCCL BW_ITERATIONS=$BW_ITERATIONS LAT_ITERATIONS=$LAT_ITERATIONS BW_WARMUP=$BW_WARMUP LAT_WARMUP=$LAT_WARMUP round $i"); fi
  echo "$line" >> "$OUT"
  echo "$line" | awk '{printf "| %s | %s | %s | %s | %.2fx | %s / %s | %s / %s | %s / %s | %s / %s | %s / %s |\n", $1, $2, $3, $4, ($4 > 0 ? $3 / $4 : 0), $5, $6, $7, $8, $9, $10, $11, $12, $13, $14}'
done
python3 - "$OUT" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
def med(i):
    v = [float(r[i]) for r in rows if r[i] != "nan"]
    return statistics.median(v) if v else float("nan")
ratios = [float(r[2]) / float(r[3]) for r in rows if r[2] != "nan" and r[3] != "nan" and float(r[3]) > 0]
lat_ratios = [float(r[5]) / float(r[9]) for r in rows if r[5] != "nan" and r[9] != "nan" and float(r[9]) > 0]
ratio = statistics.median(ratios) if ratios else float("nan")
lat_ratio = statistics.median(lat_ratios) if lat_ratios else float("nan")
floor_ratios = [float(r[11]) / float(r[9]) for r in rows if r[11] != "nan" and r[9] != "nan" and float(r[9]) > 0]
floor_ratio = statistics.median(floor_ratios) if floor_ratios else float("nan")
jvm_ratios = [float(r[13]) / float(r[9]) for r in rows if r[13] != "nan" and r[9] != "nan" and float(r[9]) > 0]
jvm_ratio = statistics.median(jvm_ratios) if jvm_ratios else float("nan")
print(f"| median | {med(1):.2f} | {med(2):.1f} | {med(3):.1f} | {ratio:.2f}x | {med(4):.2f} / {med(5):.2f} | "
      f"{med(6):.2f} / {med(7):.2f} | {med(8):.2f} / {med(9):.2f} | {med(10):.2f} / {med(11):.2f} | "
      f"{med(12):.2f} / {med(13):.2f} |")
gbs = med(2) * 1048576 / 1e9
print(f"targets: 1 MiB WRITE >= 0.6x tcp0: {ratio:.2f}x ({'met' if ratio >= 0.6 else 'not met'}); >= 3 GB/s: "
      f"{gbs:.2f} GB/s ({'met' if gbs >= 3 else 'not met'}); 8 B t_typical within 1.5x of the C ping-pong: "
      f"{lat_ratio:.2f}x per round, median ({'met' if lat_ratio <= 1.5 else 'not met'}); roce0's own system calls "
      f"in C: {floor_ratio:.2f}x the C ping-pong (the kernel's floor for that target), from a JVM with no RoCE "
      f"processing: {jvm_ratio:.2f}x (the floor for a JVM provider)")
PY
