#!/usr/bin/env bash
# Installs every Debian 12 package weir needs to build, test and benchmark.
# Idempotent: packages already present are skipped, so a second run is fast.
set -euo pipefail

PKGS=(
  # build
  build-essential cmake ninja-build pkg-config git
  # packaging: manual pages from --help (dist/CMakeLists.txt), the recursor's
  # root hints the Debian package depends on, and dpkg-dev's dpkg-shlibdeps
  help2man dns-root-data dpkg-dev
  # a compiler cache for scripts/test.sh's five builds
  ccache
  clang clang-format clang-tidy libclang-rt-14-dev llvm
  # libraries
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  libunbound-dev libjemalloc-dev liburcu-dev libsqlite3-dev
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libfmt-dev libmicrohttpd-dev
  # the encrypted front: TLS (OpenSSL 3), HTTP/2 (nghttp2), HTTP/1.1 request parsing
  libssl-dev libnghttp2-dev libhttp-parser-dev
  # weir-mgmt's etcd store: etcd's JSON gateway through libcurl (OpenSSL build);
  # the tests' etcd cluster and etcdctl
  libcurl4-openssl-dev etcd-server etcd-client
  # dnstap (Frame Streams + protobuf-c, protoc-c at build time) and the journal
  libfstrm-dev libprotobuf-c-dev protobuf-c-compiler libsystemd-dev
  libdpdk-dev libbpf-dev linux-libc-dev
  # test peers and clients
  knot-dnsutils bind9-dnsutils fstrm-bin dnsperf unbound dnsdist ldnsutils tshark
  # DoT/DoH clients and a PROXY-protocol v2 sender: curl, h2load (nghttp2-client),
  # openssl s_client, haproxy
  curl nghttp2-client openssl haproxy
  iproute2 procps python3 python3-dnspython
  # raw HTTP/2 frames for the DoH abuse tests (floods, rapid reset)
  python3-h2
  # bench/peers.py: the other resolvers it compares weir with, weir-bench's
  # plots (gnuplot) and a Prometheus to scrape weir's metrics (its promtool
  # checks the exposition in tests/integration/test_metrics.py)
  pdns-recursor knot-resolver gnuplot-nox prometheus
  # the DPDK backend's tests: the client namespace pings, veth offloads
  iputils-ping ethtool
  # test_packaging.py: systemd-analyze verify checks the shipped units
  systemd
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
# unbound, dnsdist, pdns-recursor, knot-resolver (kresd.target, kresd@N and its
# cache garbage collector) and prometheus enable system services; tests and
# benchmarks start their own instances on ports they pick, so the services stay off.
SYSTEMD_UNITS=(unbound dnsdist pdns-recursor kresd.target kres-cache-gc prometheus haproxy)
INIT_SCRIPTS=(unbound dnsdist pdns-recursor kresd prometheus haproxy)
# /run/systemd/system exists iff systemd is PID 1 (is-system-running fails when "degraded").
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  for unit in "${SYSTEMD_UNITS[@]}"; do
    $SUDO systemctl disable --now "$unit" >/dev/null 2>&1 || true
  done
  # kresd runs as instances kresd@1, kresd@2, ...: stop whichever are running.
  $SUDO systemctl stop 'kresd@*.service' >/dev/null 2>&1 || true
elif command -v service >/dev/null 2>&1; then
  for svc in "${INIT_SCRIPTS[@]}"; do
    $SUDO service "$svc" stop >/dev/null 2>&1 || true
  done
fi
