#!/usr/bin/env bash
# Randomised fault injection (issue 17, docs/fault-tolerance.md): TRIALS trials per case, each a job of separate
# JVMs running random collectives that are checked against a reference, with a random rank (rank 0, the store's
# host, included) killed with kill -9 at a random moment, and in a third of the trials a second one 0-400 ms later.
# Reports per case: trials passed/failed and kill -> working shrunk communicator (median, max); any hang, wrong
# result or disagreement is printed with the ranks' outputs and makes the script exit non-zero.
#
# Usage: scripts/fault-injection.sh [TRIALS=100] [RANKS="4 8"] [TRANSPORT=shm0] [SEED]
# Environment: MAVEN_REPO (a -Dmaven.repo.local for the offline build), other JCCL_* variables pass to the ranks.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
# shellcheck source=scripts/env.sh
source scripts/env.sh
export JCCL_FI_TRIALS="${1:-100}"
export JCCL_FI_RANKS="${2:-4 8}"
export JCCL_FI_TRANSPORT="${3:-shm0}"
if [ -n "${4:-}" ]; then
  export JCCL_FI_SEED="$4"
fi
repo=()
if [ -n "${MAVEN_REPO:-}" ]; then
  repo=("-Dmaven.repo.local=$MAVEN_REPO")
fi
log="$(mktemp -t jccl-fault-injection.XXXXXX)"
echo "fault injection: $JCCL_FI_TRIALS trials per case, ranks $JCCL_FI_RANKS, $JCCL_FI_TRANSPORT; full log in $log"
status=0
./mvnw -o -q "${repo[@]}" test -pl jccl-collectives -Dtest=FaultInjectionTest \
  -Dsurefire.failIfNoSpecifiedTests=false >"$log" 2>&1 || status=$?
grep -E "^fault injection over|^recovery breakdown|^TRIAL|HANG|WRONG|DISAGREEMENT|^FAILED|is not the ranks" "$log" || true
exit "$status"
