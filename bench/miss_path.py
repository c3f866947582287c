#!/usr/bin/env python3
"""The fastpath's CPU per answer on the hit path and on the miss path, for
one or more builds, alternated (bench/RESULTS.md, "The miss path").

    python3 bench/miss_path.py --build OLD --build NEW [--repeat 2] [--duration 5]

For each build and repeat: gslb-sim (the first build's, the same upstream
for every run) serves example.com; weir-fastpath (one worker) forwards to
it. Phases, each `--duration` seconds of dnsperf on loopback:

  hits      cached names at a fixed 20,000 qps
  misses    unique names (NXDOMAIN from gslb-sim) at a fixed `--miss-rate`
  miss-max  unique names, dnsperf at its full speed (-c 4 -q 1000)

Printed per phase: answers per second, the fastpath's CPU (all threads,
from /proc/PID/stat) per answer in microseconds, and its largest
descriptor count during the phase. The machine's other load shows in the
figures: compare builds run back to back, not runs of different days.
"""

import argparse
import os
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import weirtest  # noqa: E402
from weirtest.zones import record, zone  # noqa: E402

HIT_NAMES = 1000


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def phase(fp, queries, args):
    stop = threading.Event()
    peak = [fds(fp.pid)]

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], fds(fp.pid))
            time.sleep(0.05)

    t = threading.Thread(target=sample)
    t.start()
    cpu0 = cpu_seconds(fp.pid)
    res = weirtest.dnsperf(fp.host, fp.port, queries, args, timeout=120)
    cpu = cpu_seconds(fp.pid) - cpu0
    stop.set()
    t.join()
    dur = float(args[args.index("-l") + 1])
    return res.completed / dur, cpu * 1e6 / max(res.completed, 1), peak[0], res


def run(build, sim, args, serial):
    config = weirtest.fastpath_config([f"{sim.host}:{sim.port}"], workers=1, cache={"bytes": 256 << 20})
    with weirtest.Fastpath(build, config) as fp:
        hits = [f"h{i}.example.com A" for i in range(HIT_NAMES)]
        weirtest.dnsperf(fp.host, fp.port, hits, ["-n", "1", "-c", "2", "-t", "3"])
        d = str(args.duration)
        out = []
        out.append(("hits", *phase(fp, hits, ["-l", d, "-Q", "20000", "-c", "4", "-t", "2"])))
        n = int(args.miss_rate * args.duration * 1.2)
        misses = [f"u{serial}-{i}.miss.example.com A" for i in range(n)]
        out.append(("misses", *phase(fp, misses, ["-l", d, "-Q", str(args.miss_rate), "-c", "4", "-t", "2"])))
        flood = [f"f{serial}-{i}.miss.example.com A" for i in range(400000)]
        out.append(("miss-max", *phase(fp, flood, ["-l", d, "-c", "4", "-q", "1000", "-t", "2"])))
        return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", action="append", required=True, help="a build directory (repeatable)")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--duration", type=int, default=5)
    p.add_argument("--miss-rate", type=int, default=10000)
    args = p.parse_args()
    weirtest.require_tools("dnsperf")
    zones = zone("example.com.") + "".join(record(f"h{i}", "A", f"192.0.2.{i % 250 + 1}", ttl=3600)
                                           for i in range(HIT_NAMES))
    print(f"# load average at start: {os.getloadavg()}")
    print("| build | run | phase | answers/s | fastpath CPU us/answer | max fds | lost |")
    print("|---|---:|---|---:|---:|---:|---:|")
    serial = 0
    with weirtest.GslbSim(args.build[0], config_text=zones) as sim:
        for r in range(args.repeat):
            for b in args.build:
                serial += 1
                for name, qps, us, peak, res in run(b, sim, args, serial):
                    print(f"| {b} | {r + 1} | {name} | {qps:,.0f} | {us:.2f} | {peak} | {res.lost} |", flush=True)
    print(f"# load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
