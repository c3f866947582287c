#!/usr/bin/env bash
# The main job. Installs, builds, and runs what exists of the offline demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
BUILD=${WEIR_BUILD_DIR:-build-demo}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
echo "== dns codec micro-benchmarks"
"$BUILD"/bench/dns_bench --benchmark_min_time=0.2
