#!/usr/bin/env python3
"""The weighted hit path, weir-fastpath A against B over kernel sockets.

gslb-sim serves NAMES weighted names (4 addresses, weights 4:3:2:1) with one
view per city for two cities; each weir-fastpath build (one worker, pinned to
CPU 1) is warmed, then loaded by weir-bench (closed loop, pinned to CPU 0)
from both cities at once for DURATION seconds. The builds alternate for
ROUNDS rounds; printed per run: answers per second and the worst share
deviation of any (name, city) in percentage points. A benchmark, not a test.

Run: python3 bench/hit_path_ab.py --a build-old --b build [--names 1000] [--rounds 5]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
import weirtest  # noqa: E402
from weirtest.zones import gslb_name, no_empty_weight_option, view, zone  # noqa: E402

ZONE = "cdn.example.net."
CITIES = [("city-1", "127.1.0.0/16", "192.0.2.0/26"), ("city-2", "127.2.0.0/16", "192.0.2.64/26")]


def pin(pid: int, cpu: int) -> None:
    for task in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(task), {cpu})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="build directory of weir-fastpath A")
    ap.add_argument("--b", required=True, help="build directory of weir-fastpath B (its weir-bench and gslb-sim are used)")
    ap.add_argument("--names", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--outstanding", type=int, default=200)
    args = ap.parse_args()

    tmp = tempfile.TemporaryDirectory()
    citymap = "".join(f"{cidr},{city},{ecs}\n" for city, cidr, ecs in CITIES)
    files = weirtest.PartitionFiles(citymap, f"{ZONE.rstrip('.')} weight=on ecs=on answer=single level=city\n")
    text = no_empty_weight_option() + zone(ZONE, rname="admin", minimum=30, ttl=60)
    weights, queries = [], []
    for i in range(args.names):
        views = []
        for c, (city, _, ecs) in enumerate(CITIES):
            addrs = [f"10.{c}.{(i * 4 + k) // 256}.{(i * 4 + k) % 256}" for k in range(4)]
            views.append(view(ecs, addrs, [4, 3, 2, 1], scope=26))
            weights += [f"w{i}.{ZONE},{city},{a},{w}\n" for a, w in zip(addrs, [4, 3, 2, 1])]
        text += gslb_name(f"w{i}", *views, ttl=3600)
        queries.append(f"w{i}.{ZONE} A\n")
    wfile = os.path.join(tmp.name, "weights.csv")
    qfile = os.path.join(tmp.name, "queries.txt")
    with open(wfile, "w") as f:
        f.writelines(weights)
    with open(qfile, "w") as f:
        f.writelines(queries * 10)
    sim = weirtest.GslbSim(args.b, config_text=text, seed=1)
    bench = weirtest.binary(args.b, "bench/weir_bench/weir-bench")
    up = f"{sim.host}:{sim.port}"
    results = {"a": [], "b": []}
    try:
        for rnd in range(args.rounds):
            for label in ("a", "b"):
                conf = weirtest.fastpath_config([up], weighted=[up], workers=1, citymap=files.citymap,
                                                tags=files.tags)
                fp = weirtest.Fastpath(getattr(args, label), conf)
                try:
                    pin(fp.process.pid, 1)
                    out = os.path.join(tmp.name, f"{label}{rnd}.json")
                    argv = [bench, "-s", f"{fp.host}:{fp.port}", "--citymap", files.citymap, "-d", qfile,
                            "--queries-weighted", "--weights", wfile, "--no-probe", "--warmup",
                            "-q", str(args.outstanding), "-l", str(args.duration), "--json", out]
                    r = subprocess.run(["taskset", "-c", "0"] + argv, capture_output=True, text=True, timeout=600)
                    if r.returncode != 0:
                        print(r.stdout, r.stderr, file=sys.stderr)
                        return 1
                    with open(out) as f:
                        rep = json.load(f)
                    qps = rep["qps_answered"]
                    dev = rep["worst_deviation_pp"]
                    results[label].append(qps)
                    print(f"round {rnd} {label} ({getattr(args, label)}): {qps:,.0f} answers/s, "
                          f"max deviation {dev} pp", flush=True)
                finally:
                    fp.stop()
    finally:
        sim.stop()
        files.cleanup()
    ma, mb = statistics.median(results["a"]), statistics.median(results["b"])
    print(f"median a {ma:,.0f}/s, b {mb:,.0f}/s, b/a {mb / ma:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
