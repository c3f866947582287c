#!/usr/bin/env bash
# Installs every Debian 12 package weir needs to build, test and benchmark.
# Idempotent: packages already present are skipped, so a second run is fast.
set -euo pipefail

PKGS=(
  # build
  build-essential cmake ninja-build pkg-config git
  clang clang-format clang-tidy libclang-rt-14-dev llvm
  # libraries
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  libunbound-dev libjemalloc-dev liburcu-dev libsqlite3-dev
  libtomlplusplus-dev libcli11-dev libfmt-dev
  libdpdk-dev libbpf-dev linux-libc-dev
  # test peers and clients
  knot-dnsutils bind9-dnsutils dnsperf unbound dnsdist ldnsutils tshark
  iproute2 procps python3 python3-dnspython
  # the DPDK backend's tests: the client namespace pings, veth offloads
  iputils-ping ethtool
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# tshark asks whether non-root users may capture; answer once, non-interactively.
echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
# The unbound and dnsdist packages enable system services; tests and benchmarks
# start their own instances on ports they pick, so the services stay off.
for svc in unbound dnsdist; do
  if command -v systemctl >/dev/null 2>&1 && systemctl is-system-running >/dev/null 2>&1; then
    $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true
  elif command -v service >/dev/null 2>&1; then
    $SUDO service "$svc" stop >/dev/null 2>&1 || true
  fi
done
