#!/usr/bin/env python3
"""weir-fastpath's resident memory under a miss flood beyond its capacity,
sampled as it goes: the load of tests/integration/test_fastpath_memory.py
(a flood of one slow uncacheable name, then unique names at the load
generator's full speed beside it, two workers, a 16 MiB cache), with the
RSS and the upstream gauges printed every few seconds. A benchmark: it
prints figures and asserts nothing (the test asserts the bound).

Run: python3 bench/memory_flood.py --build-dir build [--seconds 40]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
import weirtest  # noqa: E402
from weirtest.zones import gslb_name, record, zone  # noqa: E402

GAUGES = ("weir_upstream_waiting_clients", "weir_upstream_in_flight", "weir_cache_memory_bytes",
          "weir_upstream_waiting_limited_total", "weir_upstream_inflight_limited_total", "weir_cache_misses_total")


def rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) >> 10
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--seconds", type=int, default=40)
    ap.add_argument("--every", type=float, default=3.0)
    a = ap.parse_args()
    zones = (zone("example.com.") + record("www", "A", "192.0.2.1") +
             gslb_name("slow", default={"addresses": ["192.0.2.9"]}, latency_ms=2500, ttl=0))
    with weirtest.GslbSim(a.build_dir, config_text=zones) as sim:
        config = weirtest.fastpath_config([f"{sim.host}:{sim.port}"], workers=2,
                                          cache={"bytes": 16 << 20, "swrr_states": 4096},
                                          upstream={"max_waiting_clients": 20000, "timeout_ms": 3000,
                                                    "answer_deadline_ms": 4000})
        with weirtest.Fastpath(a.build_dir, config) as fp, tempfile.NamedTemporaryFile("w", suffix=".txt") as slow:
            slow.write("slow.example.com A\n")
            slow.flush()
            bench = weirtest.binary(a.build_dir, "bench/weir_bench/weir-bench")
            target = ["-s", f"{fp.host}:{fp.port}", "--progress", "never"]
            slow_flood = subprocess.Popen([bench, *target, "-l", str(a.seconds + 15), "-t", "5000", "-d", slow.name,
                                           "-Q", "50000"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(3)
            flood = subprocess.Popen([bench, *target, "-l", str(a.seconds), "-t", "500", "--names", "10", "--zone",
                                      "example.com.", "--miss-fraction", "1", "-Q", "400000"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            t0 = time.monotonic()
            budget = sum(fp.metrics().value("weir_memory_budget_bytes", part=p)
                         for p in ("cache", "swrr", "rate_limit", "in_flight", "waiting"))
            print(f"weir_memory_budget_bytes: {budget / 2**20:.1f} MiB")
            while flood.poll() is None:
                m = fp.metrics()
                gauges = " ".join(f"{g.removeprefix('weir_')}={m.value(g):.0f}" for g in GAUGES)
                print(f"{time.monotonic() - t0:5.1f}s rss={rss_mib(fp.pid)} MiB {gauges}", flush=True)
                time.sleep(a.every)
            print(flood.communicate()[0][-700:])
            slow_flood.kill()
            slow_flood.wait()


if __name__ == "__main__":
    main()
