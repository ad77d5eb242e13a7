#!/usr/bin/env bash
# A/B of SmallAllReduceLoop (8 B all-reduce, ranks as threads of one JVM over shm0) between two classpaths:
#   bench/observability/ab.sh A_CLASSPATH B_CLASSPATH [PAIRS] [RANKS] [BLOCKS] [OPS_PER_BLOCK]
# Runs A,B then B,A alternately (PAIRS pairs), one JVM per run; prints each run's median (and fastest) block in
# ns/op and, per side, the median over runs of both: on a shared machine the fastest block is the steadier figure. docs/observability.md has the numbers it gave for the JFR events (A: before them, B: with them).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../scripts/env.sh"
a=$1; b=$2; pairs=${3:-10}; ranks=${4:-2}; blocks=${5:-15}; ops=${6:-50000}
flags=(--enable-native-access=ALL-UNNAMED --add-modules jdk.incubator.vector)
run() {
  "$JAVA_HOME/bin/java" "${flags[@]}" -cp "$1" "$here/SmallAllReduceLoop.java" "$ranks" "$blocks" "$ops" \
    2>/dev/null | sed -n 's/^median_ns \([0-9.]*\) min_ns \([0-9.]*\)/\1 \2/p'
}
declare -a A B AM BM
for ((p = 0; p < pairs; p++)); do
  if ((p % 2 == 0)); then x=$(run "$a"); y=$(run "$b"); else y=$(run "$b"); x=$(run "$a"); fi
  A+=("${x% *}"); AM+=("${x#* }"); B+=("${y% *}"); BM+=("${y#* }")
  echo "pair $((p + 1)): A ${x% *} ns (fastest block ${x#* })  B ${y% *} ns (fastest block ${y#* })"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "ranks $ranks, $pairs pairs: median A $(median "${A[@]}") ns/op, median B $(median "${B[@]}") ns/op;" \
  "fastest blocks: median A $(median "${AM[@]}") ns/op, median B $(median "${BM[@]}") ns/op"
