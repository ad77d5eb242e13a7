#!/bin/bash
# How fast the kernel copies roce0's payloads on send, against a C sender with roce0's exact msghdrs
# (bench/c/gso_sender.c), ROUNDS rounds (default 3), each under the shared benchmark lock with the load average:
# perf samples the CPU time spent in _copy_from_iter (the copy from the registered region into the skb inside
# sendmmsg) over a whole `jccl perf write_bw -d roce0 --local -s 1M` run and over a gso_sender run, and divides it
# by the bytes each sent. CPU time per GB does not count the time a thread waits for a core, so it compares the
# copies themselves on a loaded host, where wall-clock rates swing 10x (docs/transport-roce.md, "Where the
# bandwidth goes"). Needs perf and the right to sample the whole system (root, or kernel.perf_event_paranoid <= 0).
#   jccl-transport-roce/scripts/roce-copy-profile.sh [ROUNDS]
# BW_ITERATIONS (default 2000) and BW_WARMUP (default 500) as in roce-vs-tcp-bench.sh; C_SECONDS (default 2);
# JCCL (default ./jccl) runs another build's tools; JCCL_BENCH_LOCK as in roce-vs-tcp-bench.sh.
cd "$(dirname "$0")/../.." || exit 1
ROUNDS=${1:-3}
BW_ITERATIONS=${BW_ITERATIONS:-2000}
BW_WARMUP=${BW_WARMUP:-500}
C_SECONDS=${C_SECONDS:-2}
JCCL=${JCCL:-./jccl}
LOCK=${JCCL_BENCH_LOCK:-/tmp/jccl-bench.lock}
command -v perf > /dev/null || { echo "roce-copy-profile: needs perf" >&2; exit 1; }
export JCCL_NO_BUILD=1 JCCL_JAVA_OPTS=${JCCL_JAVA_OPTS:--Xmx512m} JCCL_ROCE_PORT=0
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
SENDER=$WORK/gso_sender
gcc -O2 -pthread -o "$SENDER" bench/c/gso_sender.c || exit 1

round() {
  local load cpu gb roce c
  load=$(cut -d' ' -f1 /proc/loadavg)
  # CPU seconds of the samples in _copy_from_iter: the event count (ns of cpu-clock) times the symbol's share
  cpu() { perf report -i "$1" --sort sym --stdio 2> /dev/null \
    | awk '/Event count/ {ev = $NF} /\] _copy_from_iter$/ {p = $1} END {gsub("%", "", p); printf "%.4f", ev * p / 100 / 1e9}'; }
  roce=$(perf record -q -e cpu-clock -F 999 -o "$WORK/roce.data" -- timeout 120 "$JCCL" perf write_bw -d roce0 --local \
    -s 1M -n "$BW_ITERATIONS" --warmup "$BW_WARMUP" 2> /dev/null | grep -A1 "#bytes" | tail -1 | awk '{print $4}')
  gb=$(awk -v n=$((BW_ITERATIONS + BW_WARMUP)) 'BEGIN {printf "%.4f", n * 1048576 / 1e9}')
  c=$(perf record -q -e cpu-clock -F 999 -o "$WORK/c.data" -- "$SENDER" "$C_SECONDS" roce3 roce 2> /dev/null)
  awk -v r="$1" -v load="$load" -v roce="${roce:-nan}" -v rc="$(cpu "$WORK/roce.data")" -v gb="$gb" \
    -v c="$c" -v cc="$(cpu "$WORK/c.data")" -v s="$C_SECONDS" 'BEGIN {
      split(c, f, ","); cgb = f[4] * s;
      printf "| %s | %s | %s | %.3f | %.1f | %.3f |\n", r, load, roce, rc / gb, f[4] * 1e9 / 1048576, (cgb > 0 ? cc / cgb : 0) }'
}

echo "| Round | load (1 min) | roce0 1 MiB WRITE MiB/s | roce0 _copy_from_iter CPU s/GB | gso_sender MiB/s | gso_sender _copy_from_iter CPU s/GB |"
echo "|---|---|---|---|---|---|"
for i in $(seq "$ROUNDS"); do
  if [ "$LOCK" = none ]; then round "$i"; else
    flock "$LOCK" bash -c "$(declare -f round); WORK=$WORK SENDER=$SENDER JCCL=$JCCL BW_ITERATIONS=$BW_ITERATIONS \
      BW_WARMUP=$BW_WARMUP C_SECONDS=$C_SECONDS round $i"
  fi
done
