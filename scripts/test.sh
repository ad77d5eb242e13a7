#!/usr/bin/env bash
# The project's test command (README, .ci/run): builds every module and runs every test, including the
# conformance kit for each provider, in one JVM and across JVMs, and the system tests (network namespaces when
# run as root). Extra arguments go to Maven, e.g. scripts/test.sh -pl jccl-transport-shm -am.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
exec ./mvnw -B -ntp install "$@"
