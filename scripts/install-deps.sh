#!/usr/bin/env bash
# Installs the Debian packages the system tests use (network namespaces, rate limits, loss, mpirun, and
# python3-torch for the tests against torch.distributed's TCPStore and torchrun, python3-scapy for the RoCEv2
# ICRC checks, tshark for the RoCEv2 decode check).
# Best effort: without root or apt the system tests that need them skip with a message saying why.
set -u
packages=(iproute2 nftables openmpi-bin python3-torch python3-scapy tshark)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "install-deps: not root or no apt-get; system tests needing ${missing[*]} will be skipped" >&2
  exit 0
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
timeout 600 apt-get update -qq >/dev/null 2>&1 || true
timeout 900 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
  || echo "install-deps: apt-get install ${missing[*]} failed; dependent system tests will skip" >&2
exit 0
