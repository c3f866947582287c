#!/usr/bin/env python3
"""Cache-hit load benchmark: weir-recursor vs Debian's unbound (subnetcache).

Same machine, one run, loopback only. A fake hierarchy of gslb-sim instances
on 127.0.105.x (root -> example. -> cdn-gslb.example.) is the authoritative
side of both resolvers; both have their root hints pointed at it. Names
x0..xN-1.cdn-gslb.example are ECS-tagged in weir and answered per ECS view by
the GSLB; unbound sends ECS to the hierarchy (send-client-subnet) and keeps
answers in its subnet cache.

For each resolver, pinned to one core (taskset -c SERVER_CORE) with dnsperf on
the other: warm the cache with every name for the run's ECS, then

  * a fixed offered rate (dnsperf -Q RATE): QPS and the server's CPU
    microseconds per answered query (utime+stime of all its threads from
    /proc/PID/stat, before/after the run);
  * a max-rate run (no -Q): QPS and CPU microseconds per answered query.

Every query carries the same ECS option (dnsperf -E 8:HEX: 198.51.100.0/24),
so every answer is a hit in the ECS-scope cache. The ratio weir/unbound is
printed. With --results FILE the "## recursor" section of that file is
replaced with the figures (other sections are left alone).

It is a benchmark, not a test: it exits non-zero only when the setup fails.

  python3 bench/recursor_load.py --build build-r --results bench/RESULTS.md
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import weirtest  # noqa: E402
from weirtest.zones import default, gslb_name, view  # noqa: E402

NET = "127.0.105"
ECS_HEX = "00011800c63364"  # family 1, source 24, scope 0, 198.51.100


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def proc_cpu_us(pid):
    return sum(weirtest.proc_cpu_us(pid))


def gslb_zone(names):
    return "".join(gslb_name(f"x{i}", view("198.51.100.0/24", ["192.0.2.10", "192.0.2.11", "192.0.2.12"], [5, 3, 1],
                                           scope=24),
                             default=default(["192.0.2.99"], [1], scope=24), ttl=3600, weights=True)
                   for i in range(names))


# What the benchmark adds to weirtest.unbound_config(): caches that hold every name.
UNBOUND_EXTRA = ("msg-cache-size: 64m", "rrset-cache-size: 64m")


def dnsperf(port, queries_path, duration, rate, load_core):
    argv = ["taskset", "-c", str(load_core), "dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", queries_path,
            "-l", str(duration), "-E", f"8:{ECS_HEX}", "-c", "4", "-q", "200", "-t", "2"]
    if rate:
        argv += ["-Q", str(rate)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60)
    return weirtest.parse_dnsperf(out.stdout + out.stderr)


def measure(name, pid, port, queries_path, args):
    rows = []
    for label, rate, duration in (("fixed", args.rate, args.duration), ("max", 0, args.max_duration)):
        before = proc_cpu_us(pid)
        t0 = time.monotonic()
        res = dnsperf(port, queries_path, duration, rate, args.load_core)
        elapsed = time.monotonic() - t0
        cpu = proc_cpu_us(pid) - before
        done = res.completed
        noerror = res.rcodes.get("NOERROR", 0)
        if done == 0 or noerror < done * 0.99:
            raise SystemExit(f"{name}: answers were not NOERROR cache hits: {res.text[-800:]}")
        rows.append({"server": name, "run": label, "offered": rate or "max", "qps": done / elapsed,
                     "lost": res.lost, "cpu_us_per_query": cpu / done, "cpu_share": cpu / 1e6 / elapsed})
        log(f"{name} {label}: {done / elapsed:,.0f} qps, {cpu / done:.2f} CPU us/query, lost {res.lost}")
    return rows


def warm(host, port, names):
    for i in range(names):
        r = weirtest.dig(host, port, f"x{i}.cdn-gslb.example", "A", ecs="198.51.100.7/24", norec=False)
        if r.status != "NOERROR" or not r.addresses():
            raise SystemExit(f"warm-up failed for x{i}: {r.text}")


def write_results(path, text):
    with open(path) as f:
        content = f.read()
    section = "## recursor\n\n" + text.strip() + "\n"
    m = re.search(r"^## recursor\n.*?(?=^## |\Z)", content, re.S | re.M)
    if m:
        content = content[:m.start()] + section + "\n" + content[m.end():].lstrip("\n")
    else:
        content = content.rstrip("\n") + "\n\n" + section
    with open(path, "w") as f:
        f.write(content)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--names", type=int, default=100)
    ap.add_argument("--rate", type=int, default=20000)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--max-duration", type=int, default=10)
    ap.add_argument("--server-core", type=int, default=0)
    ap.add_argument("--load-core", type=int, default=1)
    ap.add_argument("--results", help="replace the '## recursor' section of this file")
    args = ap.parse_args()
    for tool in ("dnsperf", "unbound", "taskset", "dig"):
        if shutil.which(tool) is None:
            raise SystemExit(f"missing tool: {tool}")
    build = os.path.abspath(args.build)
    tmp = tempfile.mkdtemp(prefix="weir-recursor-bench-")
    queries = os.path.join(tmp, "queries.txt")
    with open(queries, "w") as f:
        f.writelines(f"x{i}.cdn-gslb.example A\n" for i in range(args.names))
    tags = os.path.join(tmp, "tags.txt")
    with open(tags, "w") as f:
        f.write("cdn-gslb.example weight=on ecs=on\n")
    rows = []
    h = weirtest.FakeHierarchy(build, net=NET, zones={"cdn-gslb.example.": gslb_zone(args.names)})
    try:
        cfg = weirtest.recursor_config(root_hints=h.root_hints, tags=tags, resolver={"do_ip6": False})
        weir = weirtest.Recursor(build, cfg)
        try:
            subprocess.run(["taskset", "-a", "-p", "-c", str(args.server_core), str(weir.pid)], check=True,
                           capture_output=True)
            warm(weir.host, weir.port, args.names)
            rows += measure("weir-recursor", weir.pid, weir.port, queries, args)
            stats = weir.stats()
            log(f"weir stats: tagged_hits={stats['tagged_hits']} tagged_misses={stats['tagged_misses']}")
        finally:
            weir.stop()
        ub = weirtest.Unbound(tmp, h.root_hints, NET, extra=UNBOUND_EXTRA,
                              prefix=("taskset", "-c", str(args.server_core)))
        port = ub.port
        try:
            warm("127.0.0.1", port, args.names)
            rows += measure("unbound 1.17 subnetcache", ub.pid, port, queries, args)
        finally:
            ub.stop()
    finally:
        h.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    by = {(r["server"], r["run"]): r for r in rows}
    w_f, u_f = by[("weir-recursor", "fixed")], by[("unbound 1.17 subnetcache", "fixed")]
    w_m, u_m = by[("weir-recursor", "max")], by[("unbound 1.17 subnetcache", "max")]
    lines = [
        f"`python3 bench/recursor_load.py --build BUILD` ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, "
        f"loopback; server on core {args.server_core}, dnsperf on core {args.load_core}; {args.names} ECS-tagged "
        f"names, every query with ECS 198.51.100.0/24, all cache hits; unbound: `module-config: \"subnetcache "
        f"iterator\"`, `send-client-subnet`, 1 thread).",
        "",
        "| server | run | offered qps | answered qps | lost | CPU us / answered query | server CPU share |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['server']} | {r['run']} | {r['offered']} | {r['qps']:,.0f} | {r['lost']} | "
                     f"{r['cpu_us_per_query']:.2f} | {r['cpu_share']:.0%} |")
    lines += [
        "",
        f"Ratio weir/unbound: CPU per query at {args.rate} qps = "
        f"{w_f['cpu_us_per_query'] / u_f['cpu_us_per_query']:.2f}, at max rate = "
        f"{w_m['cpu_us_per_query'] / u_m['cpu_us_per_query']:.2f}; max QPS = {w_m['qps'] / u_m['qps']:.2f}.",
        "",
        "A server CPU share well under 100% in the max run means dnsperf (one core) was the limit, so that max "
        "QPS is a lower bound; CPU microseconds per answered query is the comparable figure. At the fixed rate "
        "both pay one epoll/libevent wake-up per few packets, which dominates.",
    ]
    text = "\n".join(lines)
    print(text)
    if args.results:
        write_results(args.results, text)


if __name__ == "__main__":
    main()
