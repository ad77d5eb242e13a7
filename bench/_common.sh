# Sourced by bench/kernels, bench/compare and bench/verbs: finds JDK 25 and builds JCCL when it is missing or stale.
# shellcheck shell=bash
BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
JCCL_ROOT="$(dirname "$BENCH_DIR")"
# shellcheck source=../scripts/env.sh
source "$JCCL_ROOT/scripts/env.sh"
# OMP_NUM_THREADS=1 also makes nproc print 1: the scripts' headers count cores with `env -u OMP_NUM_THREADS nproc`
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
BENCH_JAR="$JCCL_ROOT/jccl-benchmarks/target/jccl-benchmarks-0.2.0.jar"

bench_mvn() {
  if command -v flock >/dev/null 2>&1; then (cd "$JCCL_ROOT" && flock /tmp/jccl-mvn.lock ./mvnw "$@"); else (cd "$JCCL_ROOT" && ./mvnw "$@"); fi
}

# Builds when the benchmarks jar is missing or a main source / pom of any module is newer (JCCL_NO_BUILD=1 skips).
bench_build() {
  [ "${JCCL_NO_BUILD:-0}" = 1 ] && return 0
  local newer=""
  if [ -f "$BENCH_JAR" ] && [ -d "$JCCL_ROOT/jccl-benchmarks/target/lib" ]; then
    newer=$(find "$JCCL_ROOT" -path '*/target' -prune -o -path '*/.git' -prune -o -path '*/bench/.work' -prune -o \
      \( -path '*/src/main/*' -o -name pom.xml \) -type f -newer "$BENCH_JAR" -print -quit 2>/dev/null)
    [ -z "$newer" ] && return 0
  fi
  mkdir -p "$BENCH_DIR/.work"
  local blog="$BENCH_DIR/.work/build.log"
  echo "[bench] building JCCL (mvnw -o install -DskipTests)${newer:+; newer: $newer}" >&2
  bench_mvn -q -o install -DskipTests >"$blog" 2>&1 && return 0
  echo "[bench] full build failed (see $blog); building jccl-benchmarks alone against the installed modules" >&2
  bench_mvn -q -o install -DskipTests -pl jccl-benchmarks >>"$blog" 2>&1 && return 0
  if [ -f "$BENCH_JAR" ]; then
    echo "[bench] WARNING: build failed; using the existing $BENCH_JAR (tail of $blog:)" >&2
    tail -5 "$blog" >&2
    return 0
  fi
  tail -30 "$blog" >&2
  return 1
}
