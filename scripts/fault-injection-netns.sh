#!/usr/bin/env bash
# Randomised fault injection over tcp0 between network-namespace "hosts" (issue 17, docs/fault-tolerance.md):
# scripts/fault-injection.sh's trials (FaultInjectionTest) with rank r in host r % HOSTS + 1 of a scripts/netns.sh
# bed (prefix JCCL_NETNS_PREFIX, default jft), each host its own JCCL_HOST_ID, the job's store on host 1. The bed
# is brought up first and always taken down at the end, also on failure or Ctrl-C. Needs root and iproute2.
#
# Usage: scripts/fault-injection-netns.sh [TRIALS=20] [RANKS="4 8"] [HOSTS=2] [SEED]
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
export JCCL_NETNS_PREFIX="${JCCL_NETNS_PREFIX:-jft}"
hosts="${3:-2}"
[[ "$hosts" =~ ^[2-4]$ ]] || { echo "fault-injection-netns.sh: HOSTS must be 2..4, not '$hosts'" >&2; exit 2; }
trap 'scripts/netns.sh down' EXIT
scripts/netns.sh up "$hosts"
export JCCL_FI_NETNS_HOSTS="$hosts"
echo "fault injection between $hosts namespace hosts ($JCCL_NETNS_PREFIX-h1..h$hosts)"
scripts/fault-injection.sh "${1:-20}" "${2:-4 8}" tcp0 ${4:+"$4"}
