#!/usr/bin/env python3
"""Capacity per CPU over a veth: every server in turn gets the same CPU quota
(cgroup cpu.cfs_quota_us, e.g. 25% of one core) and is offered more cache-hit
queries than it can answer, from dnsperf in a client network namespace;
its answered QPS is its capacity for that much CPU.

Servers (each in a fresh pair of namespaces made by weirtest.NetnsPair,
198.18.0.0/15 only), all answering from their caches the same name set that
gslb-sim (inside the server namespace, outside the quota) serves:
  weir-dpdk-afpacket  weir-fastpath, DPDK backend, net_af_packet + tap
  weir-dpdk-afxdp     weir-fastpath, DPDK backend, net_af_xdp + XDP split
  weir-kernel         weir-fastpath on kernel sockets, 1 worker
  dnsdist             dnsdist packet cache
  unbound             unbound, 1 thread
The server runs on core SERVER_CPU (the DPDK worker lcore there, its main
lcore on the load core), dnsperf on LOAD_CPU. The quota covers every thread
of the server process. A veth delivers a frame in the sender's context: the
receiving stack's work (the client's, for an answer) would be charged to
the server's quota. Receive packet steering on both veth ends moves that
work to LOAD_CPU, so each server pays for what it does itself (its
receive syscalls or ring reads, its transmit path), as with a real NIC.

A benchmark, not a test: it prints figures (and --json) and exits non-zero
only when the setup fails. Needs root.

  python3 bench/capacity_per_cpu.py --build build --quota 25 --duration 10
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "bench"))
import weirtest  # noqa: E402
from weirtest.netns import NetnsPair  # noqa: E402
from peerlib import CpuQuota, Proc, SetupError, log, start_gslb_sim, write_queries, write_zone  # noqa: E402

OWNED_V4 = "198.18.0.1"
SERVERS = ["weir-dpdk-afpacket", "weir-dpdk-afxdp", "weir-kernel", "dnsdist", "unbound"]


def weir_config(kind, sim_port, pair, args, xdp_program):
    base = f"""
[acl]
allow = ["198.18.0.0/15"]
[upstream]
ordinary = ["127.0.0.1:{sim_port}"]
"""
    if kind == "weir-kernel":
        return f"""[server]
listen = ["{OWNED_V4}:53"]
workers = 1
tcp = false
""" + base
    eal = ["-l", f"{args.load_cpu},{args.server_cpu}", "--no-huge", "-m", "256", "--no-pci", "--no-shconf",
           "--no-telemetry", "--log-level=error", f"--file-prefix=weir-cap-{os.getpid()}"]
    if kind == "weir-dpdk-afpacket":
        device, exception = f"net_af_packet0,iface={pair.server_if}", "tap"
    else:
        device, exception = f"net_af_xdp0,iface={pair.server_if},xdp_prog={xdp_program}", "kernel"
    return f"""[server]
backend = "dpdk"
tcp = false
""" + base + f"""[dpdk]
eal_args = [{", ".join(f'"{a}"' for a in eal)}]
lcores = [{args.server_cpu}]
[[dpdk.port]]
device = "{device}"
addresses = ["{OWNED_V4}/16"]
exception = "{exception}"
"""


def start_server(kind, build, workdir, sim_port, pair, args, xdp_program):
    pin = ["taskset", "-c", str(args.server_cpu)]
    if kind.startswith("weir"):
        conf = os.path.join(workdir, f"{kind}.toml")
        with open(conf, "w") as f:
            f.write(weir_config(kind, sim_port, pair, args, xdp_program))
        exe = weirtest.binary(build, "fastpath/weir-fastpath")
        # The DPDK backend pins its own threads (main lcore, worker lcore).
        argv = ([] if kind.startswith("weir-dpdk") else pin) + [exe, "-c", conf]
        p = Proc(kind, argv, workdir, stdout_pipe=True)
        p.read_lines_until(r"^ready$|^listening udp", timeout=30)
        return p
    if kind == "dnsdist":
        conf = os.path.join(workdir, "dnsdist.conf")
        with open(conf, "w") as f:
            f.write(f"""setSecurityPollSuffix("")
setLocal("{OWNED_V4}:53")
setACL({{"198.18.0.0/15"}})
newServer({{address="127.0.0.1:{sim_port}", checkName="h0.bench.test.", checkInterval=5}})
pc = newPacketCache(100000, {{maxTTL=86400}})
getPool(""):setCache(pc)
""")
        return Proc(kind, pin + [shutil.which("dnsdist"), "-C", conf, "--supervised", "--disable-syslog"], workdir)
    if kind == "unbound":
        conf = os.path.join(workdir, "unbound.conf")
        with open(conf, "w") as f:
            f.write(f"""server:
    interface: {OWNED_V4}
    port: 53
    do-ip6: no
    do-tcp: no
    access-control: 198.18.0.0/15 allow
    num-threads: 1
    chroot: ""
    username: ""
    directory: "{workdir}"
    pidfile: "{workdir}/unbound.pid"
    use-syslog: no
    logfile: ""
    verbosity: 0
    do-daemonize: no
    module-config: "iterator"
    prefetch: no
    do-not-query-localhost: no
    msg-cache-size: 64m
    rrset-cache-size: 128m
    qname-minimisation: no
    local-zone: "test." nodefault
forward-zone:
    name: "."
    forward-addr: 127.0.0.1@{sim_port}
""")
        return Proc(kind, pin + [shutil.which("unbound") or "/usr/sbin/unbound", "-d", "-c", conf], workdir)
    raise SetupError(f"unknown server {kind}")


def dnsperf(pair, queries, args, duration, rate=None, label="", workdir=""):
    argv = pair.client_argv(["taskset", "-c", str(args.load_cpu), "dnsperf", "-s", OWNED_V4, "-p", "53", "-d",
                             queries, "-l", str(duration), "-c", str(args.clients), "-q", str(args.outstanding),
                             "-t", "1"] + (["-Q", str(rate)] if rate else []))
    out = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60).stdout
    if workdir:
        with open(os.path.join(workdir, f"dnsperf-{label}.txt"), "w") as f:
            f.write(" ".join(argv) + "\n" + out)

    def grab(pat, cast=float):
        m = re.search(pat, out)
        return cast(m.group(1)) if m else None
    return {"sent": grab(r"Queries sent:\s+(\d+)", int), "answered": grab(r"Queries completed:\s+(\d+)", int),
            "qps": grab(r"Queries per second:\s+([\d.]+)"), "noerror": grab(r"NOERROR (\d+)", int),
            "raw": out}


def measure(kind, args, workdir, zone_path, queries, names, xdp_program):
    res = {"server": kind}
    with NetnsPair() as pair:
        mask = format(1 << args.load_cpu, "x")
        for ns, dev in ((pair.server_ns, pair.server_if), (pair.client_ns, pair.client_if)):
            subprocess.run(["ip", "netns", "exec", ns, "sh", "-c",
                            f"echo {mask} > /sys/class/net/{dev}/queues/rx-0/rps_cpus"], check=True, timeout=10)
        if kind != "weir-dpdk-afpacket":
            # The kernel owns the address on the veth itself.
            subprocess.run(["ip", "-n", pair.server_ns, "addr", "add", f"{OWNED_V4}/16", "dev", pair.server_if],
                           check=True, timeout=10)
        procs = []
        quota = None
        try:
            with pair.enter_server():
                sim = start_gslb_sim(args.build, workdir, zone_path)  # on core 0, outside the quota
                procs.append(sim)
                server = start_server(kind, args.build, workdir, sim.port, pair, args, xdp_program)
                procs.append(server)
            # Warm the cache without a quota, then check every name answers.
            deadline = time.time() + 15
            r = None
            while time.time() < deadline:
                r = weirtest.dig(OWNED_V4, 53, "h0.bench.test", "A", norec=False, netns=pair.client_ns)
                if r.status == "NOERROR" and r.addresses():
                    break
                time.sleep(0.3)
            else:
                raise SetupError(f"{kind}: no answer to h0.bench.test: {r.status if r else None} {r.text[-300:] if r else ''}")
            warm = dnsperf(pair, queries, args, 3, rate=5000, label=f"{kind}-warm", workdir=workdir)
            if (warm["noerror"] or 0) < names:
                raise SetupError(f"{kind}: warm-up answered {warm['noerror']} NOERROR; see {workdir}")
            quota = CpuQuota(f"weir-capacity-{os.getpid()}", args.quota, args.period_us)
            quota.add(server.pid)
            cpu0 = weirtest.proc_cpu_us(server.pid)
            thr0 = quota.throttled_s()
            t0 = time.monotonic()
            run = dnsperf(pair, queries, args, args.duration, label=kind, workdir=workdir)
            wall = time.monotonic() - t0
            cpu1 = weirtest.proc_cpu_us(server.pid)
            res.update({
                "answered_qps": run["qps"], "sent": run["sent"], "answered": run["answered"],
                "server_cpu_cores": ((cpu1[0] - cpu0[0]) + (cpu1[1] - cpu0[1])) / 1e6 / wall,
                "throttled_s": quota.throttled_s() - thr0,
            })
            if args.perf and kind in ("weir-dpdk-afpacket", "weir-dpdk-afxdp", "weir-kernel"):
                res["perf_top"] = perf_top(server.pid, pair, queries, args, workdir, kind)
        finally:
            for p in reversed(procs):
                p.stop()
            if quota:
                quota.remove()
            shutil.rmtree(f"/var/run/dpdk/weir-cap-{os.getpid()}", ignore_errors=True)
    return res


def perf_top(pid, pair, queries, args, workdir, kind):
    """perf record -e cpu-clock of the server under the same load; the top symbols."""
    data = os.path.join(workdir, f"perf-{kind}.data")
    rec = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-g", "-p", str(pid), "-o", data, "--", "sleep",
                            str(args.perf_seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dnsperf(pair, queries, args, args.perf_seconds + 1, label=f"{kind}-perf", workdir=workdir)
    rec.wait(timeout=60)
    out = []
    for sort, limit in (("dso", "1"), ("dso,symbol", "2")):
        rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", sort, "--stdio", "-g", "none",
                              "--percent-limit", limit], capture_output=True, text=True, timeout=120).stdout
        out += [" ".join(l.split()) for l in rep.splitlines() if l.strip() and not l.startswith("#") and "%" in l][:14]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--quota", type=float, default=25.0, help="percent of one core for each server")
    ap.add_argument("--period-us", type=int, default=10000,
                    help="cgroup CFS period; a short one keeps the throttled pauses short for every server")
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--names", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=8, help="dnsperf -c")
    ap.add_argument("--outstanding", type=int, default=5000, help="dnsperf -q: enough to keep a throttled server busy")
    ap.add_argument("--server-cpu", type=int, default=1)
    ap.add_argument("--load-cpu", type=int, default=0)
    ap.add_argument("--perf", action="store_true", help="also profile the weir servers (perf -e cpu-clock)")
    ap.add_argument("--perf-seconds", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        log("setup: needs root (namespaces, cgroups, DPDK)")
        return 2
    xdp_program = os.path.join(args.build, "fastpath", "weir_xdp_split.o")
    workdir = tempfile.mkdtemp(prefix="weir-capacity-")
    zone_path = os.path.join(workdir, "zones.toml")
    queries = os.path.join(workdir, "queries.txt")
    write_zone(zone_path, args.names, 4, 3600)
    write_queries(queries, args.names)
    results = []
    try:
        for kind in args.servers.split(","):
            if kind == "weir-dpdk-afxdp" and not os.path.exists(xdp_program):
                log(f"{kind}: skipped, {xdp_program} not built")
                continue
            if kind in ("dnsdist", "unbound") and not shutil.which(kind) and not os.path.exists("/usr/sbin/unbound"):
                log(f"{kind}: skipped, not installed")
                continue
            log(f"{kind}: {args.quota}% of one core, {args.duration}s")
            try:
                results.append(measure(kind, args, workdir, zone_path, queries, args.names, xdp_program))
            except SetupError as e:
                log(f"{kind}: skipped, {e}")
            log(json.dumps(results[-1]) if results and results[-1]["server"] == kind else "")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    by = {r["server"]: r for r in results}
    print(f"\nCapacity at {args.quota:g}% of one core ({args.duration} s, {args.names} names, dnsperf -c "
          f"{args.clients} -q {args.outstanding} from the client namespace)\n")
    print(f"{'server':22} {'answered qps':>13} {'server cores':>13} {'throttled s':>12}")
    for r in results:
        print(f"{r['server']:22} {r['answered_qps'] or 0:13.0f} {r['server_cpu_cores']:13.3f} "
              f"{r['throttled_s']:12.2f}")
    for weir in ("weir-dpdk-afpacket", "weir-dpdk-afxdp"):
        if weir not in by or not by[weir]["answered_qps"]:
            continue
        print()
        for peer in ("weir-kernel", "dnsdist", "unbound"):
            if peer in by and by[peer]["answered_qps"]:
                print(f"{weir} / {peer}: {by[weir]['answered_qps'] / by[peer]['answered_qps']:.2f}x")
    for r in results:
        if r.get("perf_top"):
            print(f"\nperf (cpu-clock) {r['server']}:")
            for l in r["perf_top"]:
                print("  " + l)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
