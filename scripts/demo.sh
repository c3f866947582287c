#!/usr/bin/env bash
# The main job: install, build, and run the offline demo topology
# (gslb-sim -> weir-recursor -> weir-fastpath, the city map and tags pushed
# with weirctl through weir-mgmt, a short load from each city, and each
# city's answer shares against the CDN's weights).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
BUILD=${WEIR_BUILD_DIR:-build-demo}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWEIR_BUILD_BENCH=OFF -DWEIR_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target weir-fastpath weir-recursor weir-mgmt weirctl gslb-sim
exec python3 scripts/demo.py --build-dir "$BUILD" "$@"
