#!/usr/bin/env python3
"""Capacity per CPU over DNS over TLS and DNS over HTTPS (HTTP/2): weir-fastpath
against dnsdist and unbound, each in turn under the same cgroup CPU quota
(e.g. 25 % of one core), the method of bench/capacity_per_cpu.py.

Servers (each in a fresh pair of namespaces made by weirtest.NetnsPair,
198.18.0.0/15 only, answering on 198.18.0.1: 53 UDP, 853 DoT, 443 DoH):
  weir      weir-fastpath, kernel backend, 1 worker; its encrypted front
            ([tls]) runs on its own thread in the same process
  dnsdist   dnsdist 1.7, addTLSLocal (OpenSSL provider) and addDOHLocal,
            packet cache, 1 TCP worker (bench/configs/dnsdist_tls.conf.in)
  unbound   unbound 1.17, 1 thread, tls-port / https-port, tickets
            (bench/configs/unbound_tls.conf.in)
All answer from their caches the same 1,000 names (1-4 A records, TTL 3600)
that gslb-sim serves (in the server namespace on LOAD_CPU, outside the
quota). One throwaway EC P-256 CA and server certificate (openssl) for all.

The server runs on SERVER_CPU at nice -NICE, the whole process in the quota;
the load generator (weir-bench) runs on LOAD_CPU in the client namespace, at
the same nice. Receive packet steering on both veth ends moves the receive
side's softirq work to LOAD_CPU, so each server's quota pays only for what
it does itself (as in capacity_per_cpu.py).

Per server, after a warm-up over every transport (no quota; every answer
NOERROR), RUNS runs of each, the median reported:
  capacity   closed loop, --outstanding queries over --connections
             connections, --duration s: UDP (weir only: DoT's share of its
             own UDP capacity), DoT and DoH with each --queries-per-connection
             value (100: a connection closes after 100 queries and the next
             one resumes its TLS session; 0: persistent connections)
  handshakes DoT, --new-connections-per-second far above what the server
             can do, at most --handshake-connections open at once, one query
             each: TLS sessions per second, full (--no-tls-resume) and
             resumed (session tickets); per core = per second / quota share
  rss        (weir only, no quota) VmRSS of weir-fastpath before and with
             --rss-connections idle DoT connections, KiB per connection
             (the approach of tests/integration/test_fastpath_tls_abuse.py:
             non-blocking handshakes, 400 at a time, from a child process of
             this script in the client namespace)
  perf       (weir only, not by default) perf record -e cpu-clock -g of the
             server under each of --perf-loads (capacity or handshake loads,
             as above), reported for the busiest thread (the TLS thread),
             and perf stat of its read, write and epoll_wait system calls
             per answered query
Each run also records the server's CPU (cores, from /proc: near the quota
means the server set the figure, well under it that the generator's side
did; weir-bench's closed loop spins, so its own CPU says little), the
quota's throttled time, the busiest server thread's CPU, gslb-sim's queries
(cache misses; dnsdist health-checks one name every 5 s) and weir-bench's
lost queries and connection errors.

A benchmark, not a test: it prints figures (and --json FILE) and exits
non-zero only when the setup fails. Needs root (namespaces, cgroups, nice).

  python3 bench/encrypted_capacity.py --build build-ci/main --quota 25 --duration 10
  python3 bench/encrypted_capacity.py --build build-ci/main --servers weir --steps perf --runs 1
"""

import argparse
import json
import os
import re
import resource
import selectors
import shutil
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "bench"))
import weirtest  # noqa: E402
from weirtest.netns import NetnsPair  # noqa: E402
from peerlib import (CpuQuota, Proc, SetupError, gslb_queries, log, start_gslb_sim, thread_cpu, tree_cpu_us,  # noqa: E402
                     write_config, write_queries, write_zone)

ADDRESS = "198.18.0.1"
# The client end's own address (NetnsPair) and more, so that the handshake
# runs' tens of thousands of connections never run out of source ports.
CLIENT_EXTRA = [f"198.18.0.{i}" for i in range(3, 11)]
CLIENTS = ["198.18.0.2"] + CLIENT_EXTRA
ACL = "198.18.0.0/15"
PORTS = {"udp": 53, "dot": 853, "doh": 443}
SERVERS = ["weir", "dnsdist", "unbound"]


# ---------------------------------------------------------------- set-up
def make_certificates(d):
    """A throwaway EC P-256 CA and a server certificate for IP:198.18.0.1 it
    signed, in `d`: ca.pem, cert.pem (leaf then CA), key.pem; and an 80-byte
    ticket key for unbound (tickets.key)."""
    def openssl(*a):
        r = subprocess.run(["openssl", *a], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise SetupError(f"openssl {' '.join(a)}: {r.stderr.strip()}")

    p = lambda n: os.path.join(d, n)  # noqa: E731
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", p("ca.key"))
    openssl("req", "-x509", "-new", "-key", p("ca.key"), "-subj", "/CN=weir bench CA", "-days", "2",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
            "-out", p("ca.pem"))
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", p("key.pem"))
    openssl("req", "-new", "-key", p("key.pem"), "-subj", "/CN=bench.test", "-out", p("server.csr"))
    with open(p("ext.cnf"), "w") as f:
        f.write(f"subjectAltName=IP:{ADDRESS},DNS:bench.test\nbasicConstraints=CA:FALSE\n"
                "extendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", p("server.csr"), "-CA", p("ca.pem"), "-CAkey", p("ca.key"), "-CAcreateserial",
            "-days", "2", "-extfile", p("ext.cnf"), "-out", p("leaf.pem"))
    with open(p("leaf.pem")) as leaf, open(p("ca.pem")) as ca, open(p("cert.pem"), "w") as out:
        out.write(leaf.read() + ca.read())
    with open(p("tickets.key"), "wb") as f:
        f.write(os.urandom(80))
    os.chmod(p("key.pem"), 0o600)


def weir_config(sim_port, workdir, tls_extra=""):
    return f"""[server]
listen = ["{ADDRESS}:53"]
workers = 1
tcp = false
metrics_listen = "127.0.0.1:0"
[control]
socket = ""
[acl]
allow = ["{ACL}"]
[upstream]
ordinary = ["127.0.0.1:{sim_port}"]
[tls]
dot_port = {PORTS['dot']}
doh_port = {PORTS['doh']}
# A benchmark client is one source opening thousands of connections.
handshakes_per_second_per_source = 0
max_connections_per_source = 0
{tls_extra}
[[tls.certificate]]
chain = "{workdir}/cert.pem"
key = "{workdir}/key.pem"
"""


def start_server(kind, args, workdir, sim_port, tls_extra=""):
    nice = ["nice", "-n", str(-args.nice)] if args.nice else []
    pin = nice + ["taskset", "-c", str(args.server_cpu)]
    cert, key = os.path.join(workdir, "cert.pem"), os.path.join(workdir, "key.pem")
    if kind == "weir":
        conf = os.path.join(workdir, "weir.toml")
        with open(conf, "w") as f:
            f.write(weir_config(sim_port, workdir, tls_extra))
        p = Proc(kind, pin + [weirtest.binary(args.build, "fastpath/weir-fastpath"), "-c", conf], workdir,
                 stdout_pipe=True)
        lines = p.read_lines_until(r"^metrics http", timeout=30)
        m = next((re.match(r"metrics http 127\.0\.0\.1:(\d+)", l) for l in lines if l.startswith("metrics")), None)
        p.metrics_port = int(m.group(1)) if m else None
        if not any(l.startswith("listening dot") for l in lines) or not any(l.startswith("listening doh")
                                                                          for l in lines):
            p.stop()
            raise SetupError(f"weir: no DoT/DoH listener in its start-up output {lines!r}")
        return p
    if kind == "dnsdist":
        exe = shutil.which("dnsdist")
        if not exe:
            raise SetupError("dnsdist not installed")
        conf = write_config("dnsdist_tls.conf", workdir, {"@ADDRESS@": ADDRESS, "@ACL@": ACL, "@CERT@": cert,
                                                          "@KEY@": key, "@UPSTREAM@": f"127.0.0.1:{sim_port}"})
        return Proc(kind, pin + [exe, "-C", conf, "--supervised", "--disable-syslog"], workdir)
    if kind == "unbound":
        exe = shutil.which("unbound") or "/usr/sbin/unbound"
        if not os.access(exe, os.X_OK):
            raise SetupError("unbound not installed")
        conf = write_config("unbound_tls.conf", workdir,
                            {"@ADDRESS@": ADDRESS, "@ACL@": ACL, "@CERT@": cert, "@KEY@": key, "@DIR@": workdir,
                             "@TICKET_KEY@": os.path.join(workdir, "tickets.key"),
                             "@UPSTREAM_PORT@": str(sim_port)})
        return Proc(kind, pin + [exe, "-d", "-c", conf], workdir)
    raise SetupError(f"unknown server {kind}")


def setup_pair(pair, args):
    """RPS to LOAD_CPU on both veth ends, the server's address on its end,
    and client-side TCP settings for the handshake runs' many connections."""
    mask = format(1 << args.load_cpu, "x")
    for ns, dev in ((pair.server_ns, pair.server_if), (pair.client_ns, pair.client_if)):
        subprocess.run(["ip", "netns", "exec", ns, "sh", "-c",
                        f"echo {mask} > /sys/class/net/{dev}/queues/rx-0/rps_cpus"], check=True, timeout=10)
    subprocess.run(["ip", "-n", pair.server_ns, "addr", "add", f"{ADDRESS}/16", "dev", pair.server_if], check=True,
                   timeout=10)
    subprocess.run(pair.client_argv(["sysctl", "-q", "-w", "net.ipv4.tcp_tw_reuse=1",
                                     "net.ipv4.ip_local_port_range=1024 65000"]), check=True, timeout=10)


# ---------------------------------------------------------------- measuring
def thread_cpu_us(pid):
    """{tid: utime+stime microseconds} of every thread of `pid`."""
    return {tid: int(cpu_s * 1_000_000) for tid, (_, cpu_s, _, _) in thread_cpu(pid).items()}


def bench_argv(args, transport, extra):
    exe = weirtest.binary(args.build, "bench/weir_bench/weir-bench")
    argv = [exe, "--transport", transport, "-s", f"{ADDRESS}:{PORTS[transport]}", "--progress", "never"]
    if transport != "udp":
        argv += ["--tls-ca", os.path.join(args.workdir, "ca.pem")]
    for a in CLIENTS:
        argv += ["--source", a]
    return argv + extra


def run_bench(ctx, label, transport, extra, timeout=120):
    """One weir-bench run in the client namespace on LOAD_CPU; its JSON
    report plus the server's CPU, throttling, gslb-sim's queries and the
    generator's own CPU over the run."""
    args, pair, server, sim, quota = ctx["args"], ctx["pair"], ctx["server"], ctx["sim"], ctx.get("quota")
    json_path = os.path.join(args.workdir, f"{label}.json")
    nice = ["nice", "-n", str(-args.nice)] if args.nice else []
    argv = pair.client_argv(nice + ["taskset", "-c", str(args.load_cpu)] +
                            bench_argv(args, transport, extra + ["--json", json_path]))
    with pair.enter_server():
        miss0 = gslb_queries(sim)
    cpu0, thr0, threads0 = tree_cpu_us(server.pid), quota.throttled_s() if quota else 0.0, thread_cpu_us(server.pid)
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = p.stdout.read()
    finally:
        _, status, ru = os.wait4(p.pid, 0)
        p.stdout.close()
    wall = time.monotonic() - t0
    cpu1, thr1, threads1 = tree_cpu_us(server.pid), quota.throttled_s() if quota else 0.0, thread_cpu_us(server.pid)
    with pair.enter_server():
        miss1 = gslb_queries(sim)
    with open(os.path.join(args.workdir, f"{label}.out"), "w") as f:
        f.write(" ".join(argv) + "\n" + out)
    code = os.waitstatus_to_exitcode(status)
    if code != 0 or not os.path.exists(json_path):
        tail = " | ".join(out.strip().splitlines()[-3:])
        raise SetupError(f"weir-bench ({label}) exited {code}: {tail}")
    with open(json_path) as f:
        rep = json.load(f)
    dur = rep.get("duration_s") or wall
    conns = rep.get("connections") or {}
    hs = rep.get("handshakes") or {}
    busiest = max(((tid, threads1.get(tid, 0) - threads0.get(tid, 0)) for tid in threads1), key=lambda x: x[1],
                  default=(None, 0))
    return {
        "label": label, "argv": argv, "qps": rep.get("qps_answered"), "sent": rep.get("sent"),
        "answered": rep.get("answered"), "lost": rep.get("timeouts"), "loss_pct": rep.get("loss_pct"),
        "rcodes": rep.get("rcodes"), "p50_us": (rep.get("latency_us") or {}).get("p50"),
        "p99_us": (rep.get("latency_us") or {}).get("p99"),
        "conn_opened": conns.get("opened"), "conn_errors": conns.get("errors"),
        "conn_connect_failures": conns.get("connect_failures"), "conn_closed_by_server": conns.get("closed_by_server"),
        "conn_skipped": conns.get("skipped"), "conn_first_error": conns.get("first_error"),
        "hs_full": hs.get("full"), "hs_resumed": hs.get("resumed"), "hs_failed": hs.get("failed"),
        "hs_per_s": hs.get("per_s"), "http_status": rep.get("http_status"), "http_errors": rep.get("http_errors"),
        "stream_resets": rep.get("stream_resets"),
        "server_cores": ((cpu1[0] - cpu0[0]) + (cpu1[1] - cpu0[1])) / 1e6 / wall,
        "busiest_thread": busiest[0], "busiest_thread_cores": busiest[1] / 1e6 / wall,
        "throttled_s": thr1 - thr0, "gen_cpu": (ru.ru_utime + ru.ru_stime) / wall, "wall_s": wall,
        "duration_s": dur, "misses": miss1 - miss0,
    }


def warm(ctx, transport):
    """Every name twice over `transport`, no quota: every answer NOERROR
    (dnsdist's packet cache keys UDP and TCP apart: each transport is warmed)."""
    names = ctx["args"].names
    r = run_bench(ctx, f"{ctx['kind']}-warm-{transport}", transport,
                  ["-d", ctx["queries"], "-n", str(2 * names), "-q", "100", "--queries-per-connection", "0"]
                  if transport != "udp" else ["-d", ctx["queries"], "-n", str(2 * names), "-q", "100"])
    noerror = (r["rcodes"] or {}).get("NOERROR", 0)
    if noerror < 2 * names:
        raise SetupError(f"{ctx['kind']} warm-up over {transport}: {noerror} NOERROR of {2 * names} "
                         f"(rcodes {r['rcodes']}, first error {r['conn_first_error']!r})")


def capacity_argv(args, queries, transport, qpc):
    if transport == "udp":
        return ["-d", queries, "-l", f"{args.duration:g}", "-q", str(args.udp_outstanding), "--sockets",
                str(args.udp_sockets)]
    return ["-d", queries, "-l", f"{args.duration:g}", "-q", str(args.outstanding), "--connections",
            str(args.connections), "--queries-per-connection", str(qpc)]


def handshake_argv(args, queries, resume):
    return ["-d", queries, "-l", f"{args.handshake_duration:g}", "--new-connections-per-second",
            f"{args.handshake_rate:g}", "--connections", str(args.handshake_connections),
            "--queries-per-connection", "1"] + ([] if resume else ["--no-tls-resume"])


def median_of(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def summarize(runs, key):
    return {"median": median_of(runs, key), "runs": [r.get(key) for r in runs],
            "server_cores": median_of(runs, "server_cores"), "throttled_s": median_of(runs, "throttled_s"),
            "gen_cpu": median_of(runs, "gen_cpu"), "misses": sum(r["misses"] for r in runs),
            "lost": sum(r["lost"] or 0 for r in runs), "conn_errors": sum(r["conn_errors"] or 0 for r in runs),
            "closed_by_server": sum(r["conn_closed_by_server"] or 0 for r in runs),
            "hs_full": sum(r["hs_full"] or 0 for r in runs), "hs_resumed": sum(r["hs_resumed"] or 0 for r in runs),
            "hs_failed": sum(r["hs_failed"] or 0 for r in runs),
            "first_error": next((r["conn_first_error"] for r in runs if r.get("conn_first_error")), ""),
            "busiest_thread_cores": median_of(runs, "busiest_thread_cores"), "detail": runs}


def weir_metrics_text(ctx):
    port = getattr(ctx["server"], "metrics_port", None)
    if not port:
        return ""
    try:
        with ctx["pair"].enter_server():
            return weirtest.http_get("127.0.0.1", port, "/metrics")
    except (OSError, RuntimeError):
        return ""


def perf_profile(ctx, label, transport, extra):
    """perf record -e cpu-clock -g of the whole server and perf stat of its
    read/write/epoll_wait system calls per thread while the load of `extra`
    runs; the report is of the busiest thread (the TLS thread under DoT or
    DoH load): the top of perf report --no-children by symbol and by binary,
    and its system calls per answered query."""
    args, pid = ctx["args"], ctx["server"].pid
    data = os.path.join(args.workdir, f"perf-{label}.data")
    secs = str(args.perf_seconds)
    rec = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-g", "-p", str(pid), "-o", data, "--", "sleep",
                            secs], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = run_bench(ctx, f"weir-perf-{label}", transport, extra)
    rec.wait(timeout=120)
    tid = run["busiest_thread"]
    out = {"tid": tid, "qps": run["qps"], "tls_thread_cores": run["busiest_thread_cores"],
           "server_cores": run["server_cores"], "syscalls_per_answer": {}}
    # The system calls in a run of their own: counting them costs the
    # server time (a tracepoint per call), which would distort the profile.
    calls = ["syscalls:sys_enter_read", "syscalls:sys_enter_write", "syscalls:sys_enter_epoll_wait"]
    stat = subprocess.Popen(["perf", "stat", "--per-thread", "-x", ",", "-e", ",".join(calls), "-p", str(pid), "--",
                             "sleep", secs], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    counted = run_bench(ctx, f"weir-perf-{label}-syscalls", transport, extra)
    stat_err = stat.communicate(timeout=120)[1]
    out["syscalls_run_qps"] = counted["qps"]
    for line in stat_err.splitlines():  # "weir-fastpath-TID,COUNT,,EVENT,..."
        f = line.split(",")
        if len(f) >= 4 and f[0].endswith(f"-{tid}") and f[1].isdigit() and counted["qps"]:
            out["syscalls_per_answer"][f[3].split("sys_enter_")[-1]] = int(f[1]) / args.perf_seconds / counted["qps"]
    for name, sort, limit in (("symbols", "dso,symbol", "0.7"), ("dsos", "dso", "1")):
        rep = subprocess.run(["perf", "report", "-i", data, "--tid", str(tid), "--no-children", "--sort", sort,
                              "--stdio", "-g", "none", "--percent-limit", limit],
                             capture_output=True, text=True, timeout=180).stdout
        with open(os.path.join(args.workdir, f"perf-{label}-{name}.txt"), "w") as f:
            f.write(rep)
        out[name] = [" ".join(l.split()) for l in rep.splitlines() if l.strip() and not l.startswith("#")
                     and "%" in l][:40 if name == "symbols" else 12]
    return out


def measure(kind, args, zone_path, queries):
    res = {"server": kind, "capacity": {}, "handshakes": {}, "skipped": {}}
    steps = args.steps.split(",")
    with NetnsPair(client_v4=CLIENT_EXTRA) as pair:
        setup_pair(pair, args)
        procs, quota = [], None
        try:
            with pair.enter_server():
                sim = start_gslb_sim(args.build, args.workdir, zone_path, cpus=str(args.load_cpu), control=True)
                procs.append(sim)
                server = start_server(kind, args, args.workdir, sim.port)
                procs.append(server)
            ctx = {"args": args, "pair": pair, "server": server, "sim": sim, "kind": kind, "queries": queries}
            deadline, r = time.time() + 20, None
            while time.time() < deadline:
                if not server.alive():
                    raise SetupError(f"{kind} exited: {server.last_error_line()}")
                r = weirtest.dig(ADDRESS, 53, "h0.bench.test", "A", norec=False, netns=pair.client_ns)
                if r.status == "NOERROR" and r.addresses():
                    break
                time.sleep(0.3)
            else:
                raise SetupError(f"{kind}: no UDP answer to h0.bench.test ({r.status if r else None}); "
                                 f"{server.last_error_line()}")
            transports = ["udp"] + [t for t in args.transports.split(",") if t]
            for t in transports:
                for attempt in range(3):  # the TLS listeners may come up after UDP
                    try:
                        warm(ctx, t)
                        break
                    except SetupError as e:
                        if attempt == 2:
                            log(f"{kind}: {t} skipped: {e}")
                            res["skipped"][t] = str(e)
                        time.sleep(1)
            quota = CpuQuota(f"weir-enc-{os.getpid()}", args.quota, args.period_us)
            quota.add(server.pid)
            ctx["quota"] = quota
            plan = []
            if "capacity" in steps:
                if kind == "weir" and "udp" not in res["skipped"]:
                    plan.append(("capacity", "udp", "udp", None))
                for t in transports[1:]:
                    if t in res["skipped"]:
                        continue
                    for qpc in args.queries_per_connection:
                        plan.append(("capacity", f"{t}-qpc{qpc}", t, qpc))
            if "handshakes" in steps and "dot" not in res["skipped"]:
                plan += [("handshakes", "dot-full", "dot", False), ("handshakes", "dot-resumed", "dot", True)]
            for step, name, t, param in plan:
                runs = []
                for i in range(args.runs):
                    label = f"{kind}-{name}-{i + 1}"
                    extra = (capacity_argv(args, queries, t, param) if step == "capacity"
                             else handshake_argv(args, queries, param))
                    try:
                        runs.append(run_bench(ctx, label, t, extra))
                    except SetupError as e:
                        log(f"{label}: {e}")
                    if runs:
                        r = runs[-1]
                        log(f"  {label}: {r['qps'] or 0:.0f} qps, {r['hs_per_s'] or 0:.0f} handshakes/s "
                            f"({r['hs_full']} full, {r['hs_resumed']} resumed, {r['hs_failed']} failed), "
                            f"server {r['server_cores']:.3f} cores, throttled {r['throttled_s']:.2f} s, "
                            f"gen {100 * r['gen_cpu']:.0f} %, lost {r['lost']}, errors {r['conn_errors']}, "
                            f"closed by server {r['conn_closed_by_server']}, misses {r['misses']}")
                    if not server.alive():
                        raise SetupError(f"{kind} exited during {label}: {server.last_error_line()}")
                if runs:
                    res[step][name] = summarize(runs, "qps" if step == "capacity" else "hs_per_s")
            if "perf" in steps and kind == "weir":
                res["perf"] = {}
                for load in args.perf_loads.split(","):
                    if load in ("dot-full", "dot-resumed"):
                        t, extra = "dot", handshake_argv(args, queries, load == "dot-resumed")
                    else:
                        t, qpc = load.split("-qpc")
                        extra = capacity_argv(args, queries, t, int(qpc))
                    if t in res["skipped"] or t not in transports:
                        continue
                    extra[extra.index("-l") + 1] = str(args.perf_seconds + 2)
                    res["perf"][load] = perf_profile(ctx, load, t, extra)
            if kind == "weir":
                text = weir_metrics_text(ctx)
                with open(os.path.join(args.workdir, "weir-metrics.txt"), "w") as f:
                    f.write(text)
                res["metrics"] = [l for l in text.splitlines()
                                  if l.startswith(("weir_tls_", "weir_doh_")) and not l.endswith(" 0")]
        finally:
            for p in reversed(procs):
                p.stop()
            if quota:
                quota.remove()
    return res


# ---------------------------------------------------------------- idle connections
def hold_idle_dot(server, ca, count, sources, parallel=400, timeout=90.0):
    """Child mode (in the client namespace): one DoT connection and query
    (printed "base"), then, on a line on stdin, `count` idle DoT connections,
    their handshakes done (printed "open N SECONDS"); on the next line one
    query on the first and the last (printed "served K"); on EOF, closes all."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 1000), hard))
    host, port = server.rsplit(":", 1)
    port = int(port)
    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(["dot"])

    def query(s, qid):
        q = weirtest.make_query("h0.bench.test", 1, qid=qid)
        s.setblocking(True)
        s.settimeout(5)
        s.sendall(struct.pack("!H", len(q)) + q)
        buf = b""
        while len(buf) < 2 or len(buf) < 2 + struct.unpack("!H", buf[:2])[0]:
            chunk = s.recv(65536)
            if not chunk:
                return False
            buf += chunk
        return weirtest.parse_message(buf[2:]).rcode == 0

    first = ctx.wrap_socket(socket.create_connection((host, port), timeout=5), server_hostname=host)
    ok = query(first, 1)
    first.close()
    print(f"base {int(ok)}", flush=True)
    sys.stdin.readline()
    sel, done, started, in_flight = selectors.DefaultSelector(), [], 0, 0
    t0 = time.monotonic()
    while len(done) < count:
        while started < count and in_flight < parallel:
            raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            raw.setsockopt(socket.SOL_IP, 24, 1)  # IP_BIND_ADDRESS_NO_PORT: the port picked per 4-tuple
            raw.bind((sources[started % len(sources)], 0))
            raw.setblocking(False)
            raw.connect_ex((host, port))
            sel.register(raw, selectors.EVENT_WRITE, "connect")
            started += 1
            in_flight += 1
        if time.monotonic() - t0 > timeout:
            print(f"failed {len(done)} of {count} handshakes in {timeout} s", flush=True)
            return 1
        for key, _ in sel.select(timeout=1.0):
            s = key.fileobj
            if key.data == "connect":
                # Wrapped once connected: Python's ssl reads from a socket it
                # is given unconnected (and a non-blocking one fails there).
                sel.unregister(s)
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    print(f"failed connect {len(done) + 1}: {os.strerror(err)}", flush=True)
                    return 1
                s = ctx.wrap_socket(s, server_hostname=host, do_handshake_on_connect=False)
                sel.register(s, selectors.EVENT_WRITE, "tls")
            try:
                s.do_handshake()
            except ssl.SSLWantReadError:
                sel.modify(s, selectors.EVENT_READ, "tls")
                continue
            except ssl.SSLWantWriteError:
                sel.modify(s, selectors.EVENT_WRITE, "tls")
                continue
            except (ssl.SSLError, OSError) as e:
                print(f"failed handshake {len(done) + 1}: {e!r}", flush=True)
                return 1
            sel.unregister(s)
            in_flight -= 1
            done.append(s)
    print(f"open {len(done)} {time.monotonic() - t0:.1f}", flush=True)
    sys.stdin.readline()
    served = sum(1 for i, s in ((2, done[0]), (3, done[-1])) if query(s, i))
    print(f"served {served}", flush=True)
    sys.stdin.read()
    for s in done:
        s.close()
    return 0


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def metric_value(text, name, **labels):
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pat = re.escape(name) + (r"\{" + re.escape(want) + r"\}" if want else "") + r" (\d+)"
    m = re.search(r"^" + pat + r"$", text, re.M)
    return int(m.group(1)) if m else None


def idle_rss(args, zone_path):
    """VmRSS of weir-fastpath before and with `args.rss_connections` idle DoT
    connections (no quota: the handshakes are not what is measured)."""
    n = args.rss_connections
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 2000), hard))  # inherited by weir-fastpath
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < n + 200:
        raise SetupError(f"RLIMIT_NOFILE hard limit {hard} too low for {n} connections")
    with NetnsPair(client_v4=CLIENT_EXTRA) as pair:
        setup_pair(pair, args)
        procs = []
        try:
            with pair.enter_server():
                sim = start_gslb_sim(args.build, args.workdir, zone_path, cpus=str(args.load_cpu), control=True)
                procs.append(sim)
                server = start_server("weir", args, args.workdir, sim.port,
                                      tls_extra=f"max_connections = {n + 2000}\nidle_timeout_ms = 600000\n"
                                                "handshake_timeout_ms = 30000")
                procs.append(server)
            ctx = {"pair": pair, "server": server}
            nice = ["nice", "-n", str(-args.nice)] if args.nice else []
            argv = pair.client_argv(nice + ["taskset", "-c", str(args.load_cpu), sys.executable,
                                            os.path.abspath(__file__), "--hold-idle-dot", f"{ADDRESS}:{PORTS['dot']}",
                                            "--hold-ca", os.path.join(args.workdir, "ca.pem"), "--hold-count", str(n)])
            child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                line = child.stdout.readline().strip()
                if line != "base 1":
                    raise SetupError(f"idle DoT client: {line or 'no output'}")
                time.sleep(1.0)
                base = rss_kib(server.pid)
                child.stdin.write("go\n")
                child.stdin.flush()
                line = child.stdout.readline().strip()
                if not line.startswith("open "):
                    raise SetupError(f"idle DoT client: {line or 'no output'}")
                took = float(line.split()[2])
                deadline, open_now = time.time() + 20, None
                while time.time() < deadline:
                    open_now = metric_value(weir_metrics_text(ctx), "weir_tls_connections")
                    if open_now == n:
                        break
                    time.sleep(0.2)
                time.sleep(1.0)
                held = rss_kib(server.pid)
                child.stdin.write("query\n")
                child.stdin.flush()
                line = child.stdout.readline().strip()
                served = int(line.split()[1]) if line.startswith("served ") else 0
                text = weir_metrics_text(ctx)
            finally:
                try:
                    child.stdin.close()
                except OSError:
                    pass
                child.wait(timeout=60)
        finally:
            for p in reversed(procs):
                p.stop()
    return {"connections": n, "open_per_metrics": open_now, "handshake_seconds": took, "base_kib": base,
            "held_kib": held, "kib_per_connection": (held - base) / n, "served_after": served,
            "full_handshakes": metric_value(text, "weir_tls_handshakes_total", transport="dot", result="full"),
            "argv": argv}


# ---------------------------------------------------------------- report
def fmt(v, spec=".0f"):
    return "-" if v is None else format(v, spec)


def resumed_only(full, resumed):
    """Server CPU microseconds per full and per resumed connection, and the
    resumed-only rate per core they imply: the resumed run mixes both kinds
    (a client offers a ticket only when it holds one), so its own cost per
    connection is split using the full run's."""
    if not full or not resumed or not full["median"] or not resumed["hs_resumed"]:
        return None
    us_full = full["server_cores"] / full["median"] * 1e6
    n = resumed["hs_full"] + resumed["hs_resumed"]
    per_s = resumed["median"]
    full_share = resumed["hs_full"] / n
    us_res = (resumed["server_cores"] * 1e6 - per_s * full_share * us_full) / (per_s * (1 - full_share))
    return {"us_full": us_full, "us_resumed": us_res, "resumed_per_core": 1e6 / us_res, "full_per_core": 1e6 / us_full}


def report(args, results, rss):
    share = args.quota / 100.0
    by = {r["server"]: r for r in results}
    print(f"\nEncrypted DNS capacity at {args.quota:g}% of one core (cgroup quota, period {args.period_us} us); "
          f"median of {args.runs} runs of {args.duration:g} s; weir-bench on core {args.load_cpu}, "
          f"servers on core {args.server_cpu}, nice -{args.nice}; DoT/DoH: {args.outstanding} queries in flight "
          f"over {args.connections} connections\n")
    print("srv cores: the server's CPU over the run (the quota is " f"{share:g}" "; less means it waited for "
          "queries: the generator's side set the pace); per core: answered / srv cores.")
    print(f"{'server':8} {'load':11} {'answered qps':>12} {'runs':>22} {'srv cores':>9} {'per core':>9} "
          f"{'thr s':>5} {'hs full/resumed':>16} {'lost':>5} {'errs':>4} {'miss':>4}")
    for r in results:
        for name, c in r["capacity"].items():
            runs = "/".join(fmt(v) for v in c["runs"])
            per_core = c["median"] / c["server_cores"] if c["median"] and c["server_cores"] else None
            print(f"{r['server']:8} {name:11} {fmt(c['median']):>12} {runs:>22} {fmt(c['server_cores'], '.3f'):>9} "
                  f"{fmt(per_core):>9} {fmt(c['throttled_s'], '.1f'):>5} {c['hs_full']:>8}/{c['hs_resumed']:<7} "
                  f"{c['lost']:>5} {c['conn_errors'] + c['closed_by_server']:>4} {c['misses']:>4}")
    w = by.get("weir")
    if w:
        print("\nweir / peer, answered qps at the same quota (target >= 1.5x); in brackets per core used:")
        for name, c in w["capacity"].items():
            if name == "udp":
                continue
            cells = []
            for peer in ("dnsdist", "unbound"):
                pc = by.get(peer, {}).get("capacity", {}).get(name)
                if pc and pc["median"] and c["median"]:
                    eff = (c["median"] / c["server_cores"]) / (pc["median"] / pc["server_cores"])
                    cells.append(f"/ {peer} {c['median'] / pc['median']:.2f}x ({eff:.2f}x)")
            print(f"  {name:11} " + "  ".join(cells))
        udp = w["capacity"].get("udp")
        if udp and udp["median"]:
            for name in [n for n in w["capacity"] if n.startswith("dot")]:
                d = w["capacity"][name]
                eff = (d["median"] / d["server_cores"]) / (udp["median"] / udp["server_cores"])
                print(f"weir {name} / weir UDP: {d['median'] / udp['median']:.2f} (per core used {eff:.2f}; "
                      f"target >= 0.4)")
    if any(r["handshakes"] for r in results):
        print(f"\nNew DoT sessions per second, one query each (per core = per second / {share:g}):")
        print(f"{'server':8} {'kind':12} {'per second':>10} {'per core':>9} {'runs':>16} {'full/resumed':>14} "
              f"{'failed':>6} {'srv cores':>9} {'us/conn':>8}")
        for r in results:
            for name, h in r["handshakes"].items():
                runs = "/".join(fmt(v) for v in h["runs"])
                us = h["server_cores"] / h["median"] * 1e6 if h["median"] else None
                print(f"{r['server']:8} {name:12} {fmt(h['median']):>10} "
                      f"{fmt(h['median'] / share if h['median'] else None):>9} {runs:>16} "
                      f"{h['hs_full']:>7}/{h['hs_resumed']:<6} {h['hs_failed']:>6} {fmt(h['server_cores'], '.3f'):>9} "
                      f"{fmt(us):>8}")
        print("resumed only (the resumed run's full handshakes taken out at the full run's cost per connection):")
        for r in results:
            d = resumed_only(r["handshakes"].get("dot-full"), r["handshakes"].get("dot-resumed"))
            r["resumed_only"] = d
            if d:
                print(f"  {r['server']:8} {d['us_full']:.0f} us per full, {d['us_resumed']:.0f} us per resumed "
                      f"connection: {d['full_per_core']:.0f} full, {d['resumed_per_core']:.0f} resumed per core")
    for r in results:
        for t, p in (r.get("perf") or {}).items():
            calls = ", ".join(f"{k} {v:.2f}" for k, v in p["syscalls_per_answer"].items())
            print(f"\nperf -e cpu-clock, weir's TLS thread (tid {p['tid']}, {fmt(p['tls_thread_cores'], '.3f')} of "
                  f"{fmt(p['server_cores'], '.3f')} cores) under {t} load, {fmt(p['qps'])} qps; system calls per "
                  f"answer: {calls}; --no-children:")
            for l in p["dsos"]:
                print("  " + l)
            for l in p["symbols"][:25]:
                print("  " + l[:150])
    if rss:
        print(f"\nweir-fastpath with {rss['connections']} idle DoT connections: VmRSS {rss['base_kib']} KiB -> "
              f"{rss['held_kib']} KiB, {rss['kib_per_connection']:.1f} KiB per connection "
              f"(handshakes took {rss['handshake_seconds']} s; open per metrics {rss['open_per_metrics']}; "
              f"{rss['full_handshakes']} full handshakes; after: {rss['served_after']} of 2 answered)")
    for r in results:
        if r["skipped"]:
            print(f"{r['server']}: skipped {r['skipped']}")
        for m in r.get("metrics", []):
            if "closed_total" in m or "failed" in m or "timeout" in m or "error" in m:
                print(f"{r['server']} metric: {m}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--steps", default="capacity,handshakes,rss",
                    help="any of capacity,handshakes,rss,perf (perf: weir only, its own invocation keeps the default "
                         "run under 10 minutes)")
    ap.add_argument("--transports", default="dot,doh")
    ap.add_argument("--quota", type=float, default=25.0, help="percent of one core for each server")
    ap.add_argument("--period-us", type=int, default=10000)
    ap.add_argument("--duration", type=float, default=10, help="seconds per capacity run")
    ap.add_argument("--handshake-duration", type=float, default=5, help="seconds per handshake run")
    ap.add_argument("--runs", type=int, default=3, help="runs per figure; the median is reported")
    ap.add_argument("--names", type=int, default=1000)
    ap.add_argument("--outstanding", type=int, default=1000, help="DoT/DoH: queries in flight in all")
    ap.add_argument("--connections", type=int, default=20, help="DoT/DoH: connections they are spread over")
    ap.add_argument("--queries-per-connection", default="100,0",
                    help="DoT/DoH capacity runs, one per value (0: persistent connections)")
    ap.add_argument("--udp-outstanding", type=int, default=2000)
    ap.add_argument("--udp-sockets", type=int, default=4)
    ap.add_argument("--handshake-rate", type=float, default=20000, help="--new-connections-per-second offered")
    ap.add_argument("--handshake-connections", type=int, default=200, help="the most open at once")
    ap.add_argument("--rss-connections", type=int, default=10000)
    ap.add_argument("--server-cpu", type=int, default=1)
    ap.add_argument("--load-cpu", type=int, default=0)
    ap.add_argument("--nice", type=int, default=10, help="servers and weir-bench at nice -N (0: not reniced)")
    ap.add_argument("--perf-seconds", type=int, default=5)
    ap.add_argument("--perf-loads", default="dot-qpc0,dot-qpc100,doh-qpc0,dot-full",
                    help="the loads the perf step profiles: TRANSPORT-qpcN (capacity) or dot-full, dot-resumed")
    ap.add_argument("--json")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (configs, logs, reports)")
    ap.add_argument("--hold-idle-dot", help=argparse.SUPPRESS)
    ap.add_argument("--hold-ca", help=argparse.SUPPRESS)
    ap.add_argument("--hold-count", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hold_idle_dot:
        return hold_idle_dot(args.hold_idle_dot, args.hold_ca, args.hold_count, CLIENTS)
    if os.geteuid() != 0:
        log("setup: needs root (namespaces, cgroups, nice)")
        return 2
    args.build = os.path.abspath(args.build)
    args.queries_per_connection = [int(x) for x in args.queries_per_connection.split(",") if x != ""]
    args.workdir = tempfile.mkdtemp(prefix="weir-enc-")
    zone_path = os.path.join(args.workdir, "zones.toml")
    queries = os.path.join(args.workdir, "queries.txt")
    results, rss = [], None
    t_start = time.monotonic()
    try:
        make_certificates(args.workdir)
        write_zone(zone_path, args.names, 4, 3600)
        write_queries(queries, args.names)
        steps = args.steps.split(",")
        for kind in args.servers.split(","):
            if not ({"capacity", "handshakes", "perf"} & set(steps)):
                break
            log(f"{kind}: {args.quota:g}% of one core")
            try:
                results.append(measure(kind, args, zone_path, queries))
            except SetupError as e:
                log(f"{kind}: skipped, {e}")
        if "rss" in steps and args.rss_connections > 0:
            log(f"weir: {args.rss_connections} idle DoT connections")
            try:
                rss = idle_rss(args, zone_path)
            except SetupError as e:
                log(f"idle connections: skipped, {e}")
    except SetupError as e:
        log(f"setup: {e}")
        return 2
    finally:
        if not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)
        else:
            log(f"work directory kept: {args.workdir}")
    report(args, results, rss)
    print(f"\n(total {time.monotonic() - t_start:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results, "idle_rss": rss}, f, indent=2, default=str)
    return 0 if results or rss else 2


if __name__ == "__main__":
    sys.exit(main())
