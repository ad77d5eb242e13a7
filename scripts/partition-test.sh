#!/usr/bin/env bash
# The network-partition system test (issue 17, docs/fault-tolerance.md "Partitions between namespace hosts"):
# PartitionSystemTest with 4 ranks over tcp0 on two scripts/netns.sh hosts (prefix jfp), host 2 cut off and healed.
# RUNS times (default 1); QUORUM (default majority) is JCCL_SHRINK_QUORUM for the ranks: "none" shows the split
# brain (the cut-off rank decides alone on its own standby store). Needs root, iproute2 and nftables.
#
# Usage: scripts/partition-test.sh [RUNS=1] [QUORUM=majority]
# Environment: MAVEN_REPO (a -Dmaven.repo.local for the offline build).
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
# shellcheck source=scripts/env.sh
source scripts/env.sh
export JCCL_PARTITION_TEST=1 JCCL_PARTITION_QUORUM="${2:-majority}"
trap 'JCCL_NETNS_PREFIX=jfp scripts/netns.sh down' EXIT
repo=()
if [ -n "${MAVEN_REPO:-}" ]; then
  repo=("-Dmaven.repo.local=$MAVEN_REPO")
fi
status=0
for i in $(seq 1 "${1:-1}"); do
  log="$(mktemp -t jccl-partition.XXXXXX)"
  rc=0
  ./mvnw -o -q "${repo[@]}" test -pl jccl-collectives -Dtest=PartitionSystemTest \
    -Dsurefire.failIfNoSpecifiedTests=false >"$log" 2>&1 || rc=$?
  echo "run $i: rc $rc (log $log)"
  grep -E "^partition|^  rank 3|Tests run:.*Partition|skipped" "$log" || true
  [ "$rc" = 0 ] || status=$rc
done
exit "$status"
