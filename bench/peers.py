#!/usr/bin/env python3
"""Cache-hit comparison of weir-fastpath with its peers, on one machine, over loopback.

Servers (each skipped, with the reason, when it will not start or answer):
  weir           weir-fastpath, kernel sockets backend, workers = 1
  dnsdist        dnsdist with a packet cache           (bench/configs/dnsdist.conf.in)
  unbound        unbound, 1 thread                     (bench/configs/unbound.conf.in)
  pdns-recursor  PowerDNS Recursor, 1 thread           (bench/configs/pdns-recursor.conf.in)
  kresd          Knot Resolver, one kresd process      (bench/configs/kresd.conf.in)

All of them forward to one gslb-sim serving the bench zone (NAMES names
hN.bench.test, 1..ADDRS A records each, TTL 3600) on 127.0.0.1. Each server
in turn is pinned to SERVER_CPU (taskset), the load generator to LOAD_CPU,
gslb-sim to LOAD_CPU as well (it is idle once the caches are warm). Per server:

  1. start it, wait for an answer, check it with dig;
  2. warm-up: every name twice at a low rate;
  3. fixed rate (--rate, --duration; --repeat times, the run with the least
     server CPU per answer kept): QPS, loss, p50/p99 latency and server CPU
     microseconds per answered query = utime+stime over the run of the server
     process (all threads, and its children if it forks), /proc/PID/stat;
  4. max rate (closed loop, --outstanding per load-generator thread);
  5. capacity (--capacity-quota PCT of one core, 0 = skip): the same server
     moved into a cgroup with that CPU quota and offered more than it can
     answer (closed loop, --capacity-outstanding); its answered QPS is its
     capacity for that much CPU.

Cache misses during 3-5 are counted as the queries gslb-sim received meanwhile
(and, for weir, from its own metrics); they should be 0.

Output, in --out DIR: peers.md (the tables below as markdown), peers.json
(everything), one load-generator JSON per run (RUN.json) and, with
weir-bench, its plots (plots/RUN/), and two comparison plots (PNG and SVG,
gnuplot): peers_latency_cdf (every server's latency CDF at the fixed rate)
and peers_cpu_capacity (CPU us per answer, capacity under the quota). The tables are printed too. Ratios are
weir / peer: QPS and capacity above 1 and CPU per query below 1 favour weir.

The load generator is weir-bench (--bench, default BUILD/bench/weir_bench/
weir-bench). Until it is built, --load-generator dnsperf (or auto, the
default, when the binary is missing) uses dnsperf as a stand-in: the same
runs, but no latency percentiles (mean only).

A benchmark, not a test: it exits 2 when the setup fails (no gslb-sim, no
load generator, no server could be measured), 0 otherwise. --capacity-quota
needs root (cgroups); --nice needs root.

  python3 bench/peers.py --build build-peers --out /tmp/peers
  python3 bench/peers.py --servers weir,unbound --repeat 3 --capacity-quota 0
"""

import argparse
import datetime
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peerlib  # noqa: E402
from peerlib import SetupError, log  # noqa: E402

SERVERS = ["weir", "dnsdist", "unbound", "pdns-recursor", "kresd"]
PEERS = SERVERS[1:]


# ------------------------------------------------------------ load generator
class LoadGenerator:
    """How to run the load generator: weir-bench, or dnsperf as a stand-in.

    run_load() is the one place that knows either command line; it returns
    weir-bench's JSON report (dnsperf's output mapped onto its keys)."""

    def __init__(self, kind, path, prefix):
        self.kind = kind      # "weir-bench" or "dnsperf"
        self.path = path
        self.prefix = prefix  # nice + taskset

    def describe(self):
        return f"{self.kind} ({self.path})"


def run_load(gen, port, queries, label, outdir, *, rate=None, outstanding=None, duration=None, count=None,
             warmup=False, threads=1, sockets=4, timeout_ms=1000, server=None, names=1000, plot=True, extra=()):
    """Runs the load generator once against 127.0.0.1:port.

    rate: open loop at that many queries per second; else closed loop with
    `outstanding` queries in flight per thread. duration (s) or count
    (queries) ends the run. plot: weir-bench writes its plots to
    OUTDIR/plots/LABEL/. extra: more weir-bench arguments (sources, ECS).
    With `server` (a peerlib.Proc), the server's CPU
    time (process tree) and schedstat time are sampled just before and after.

    Returns the weir-bench report ("sent", "answered", "timeouts",
    "qps_answered", "loss_pct", "duration_s", "rcodes", "latency_us", ...)
    plus "argv", "wall_s", "gen_cpu_s" (the generator's own CPU) and, with
    `server`, "server_user_us", "server_sys_us", "server_sched_us",
    "other_cores" (CPU of everything else on the machine meanwhile)."""
    json_path = os.path.join(outdir, f"{label}.json")
    if gen.kind == "weir-bench":
        argv = [gen.path, "--server", f"127.0.0.1:{port}", "--queries", queries]
        if rate:
            argv += ["--rate", str(rate)]
        elif outstanding:
            argv += ["--outstanding", str(outstanding)]
        argv += ["--threads", str(threads), "--sockets", str(sockets), "--timeout", str(timeout_ms)]
        if duration:
            argv += ["--duration", str(duration)]
        if count:
            argv += ["--count", str(count)]
        if warmup:
            argv += ["--warmup"]
        argv += list(extra) + ["--json", json_path, "--progress", "never"]
        if plot:
            argv += ["--plot", os.path.join(outdir, "plots", label)]
    else:
        if extra:
            raise SetupError(f"{label}: weir-bench arguments {' '.join(extra)} need weir-bench, not dnsperf")
        # dnsperf: -q is the total in flight, -c the sockets, -n passes over the file.
        argv = ["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", queries, "-T", str(threads),
                "-c", str(max(sockets, threads)), "-t", str(max(1, math.ceil(timeout_ms / 1000)))]
        argv += ["-Q", str(rate), "-q", str(max(100, (outstanding or 100) * threads))] if rate else \
                ["-q", str((outstanding or 100) * threads)]
        if duration:
            argv += ["-l", str(duration)]
        if count:
            argv += ["-n", str(max(1, math.ceil(count / names)))]
    argv = gen.prefix + argv

    cpu0 = peerlib.tree_cpu_us(server.pid) if server else (0, 0)
    sch0 = peerlib.proc_sched_ns(server.pid) if server else None
    busy0 = peerlib.machine_busy_us()
    t0 = time.monotonic()
    try:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as e:
        raise SetupError(f"cannot run {argv[len(gen.prefix)]}: {e}") from e
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.stdout.close()
    code = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    cpu1 = peerlib.tree_cpu_us(server.pid) if server else (0, 0)
    sch1 = peerlib.proc_sched_ns(server.pid) if server else None
    busy1 = peerlib.machine_busy_us()
    with open(os.path.join(outdir, f"{label}.out"), "w") as f:
        f.write(" ".join(argv) + "\n" + out)

    if gen.kind == "weir-bench":
        if code != 0:
            tail = " | ".join(l for l in out.strip().splitlines()[-3:])
            raise SetupError(f"weir-bench ({label}) exited {code}"
                             f"{' (usage error)' if code == 2 else ''}: {tail}")
        try:
            with open(json_path) as f:
                res = json.load(f)
        except (OSError, ValueError) as e:
            raise SetupError(f"weir-bench ({label}): no readable --json report: {e}") from e
    else:
        res = parse_dnsperf(out, label)
        with open(json_path, "w") as f:
            json.dump(res, f, indent=1)

    res["argv"] = argv
    res["wall_s"] = wall
    res["gen_cpu_s"] = ru.ru_utime + ru.ru_stime
    if server:
        res["server_user_us"] = cpu1[0] - cpu0[0]
        res["server_sys_us"] = cpu1[1] - cpu0[1]
        res["server_sched_us"] = (sch1 - sch0) / 1000 if sch0 is not None and sch1 is not None else None
        # Everything else the machine ran meanwhile (other users, gslb-sim,
        # kernel threads), in cores: above ~0.1 the run was disturbed.
        other = (busy1 - busy0) - (res["server_user_us"] + res["server_sys_us"]) - res["gen_cpu_s"] * 1e6
        res["other_cores"] = max(other, 0) / 1e6 / wall
    return res


def parse_dnsperf(out, label):
    """dnsperf 2.x's summary as a weir-bench report (no percentiles, no timeline)."""
    r = peerlib.weirtest.parse_dnsperf(out)
    if r.completed is None and r.sent is None:
        raise SetupError(f"dnsperf ({label}) output not understood: {out.strip()[-300:]}")

    def grab(key):
        m = re.search(rf"{key}:\s+([\d.]+)", out)
        return float(m.group(1)) if m else None
    elapsed = grab(r"Run time \(s\)") or 0.0
    sent, answered = r.sent or 0, r.completed or 0
    mean = grab(r"Average Latency \(s\)")
    m = re.search(r"Average Latency \(s\):.*max ([\d.]+)", out)
    lmax = float(m.group(1)) * 1e6 if m else None
    return {
        "sent": sent, "answered": answered, "timeouts": r.lost or 0,
        "qps_sent": sent / elapsed if elapsed else 0.0, "qps_answered": grab("Queries per second") or 0.0,
        "loss_pct": 100.0 * (sent - answered) / sent if sent else 0.0, "duration_s": elapsed,
        "rcodes": dict(r.rcodes),
        "latency_us": {"count": answered, "mean": mean * 1e6 if mean is not None else None,
                       "p50": None, "p90": None, "p99": None, "p999": None,
                       "max": lmax},
        "timeline": [], "stand_in": "dnsperf",
    }


def pick_generator(args, prefix):
    bench = args.bench or os.path.join(args.build, "bench", "weir_bench", "weir-bench")
    have_bench = os.access(bench, os.X_OK)
    if args.load_generator == "weir-bench" or (args.load_generator == "auto" and have_bench):
        if not have_bench:
            raise SetupError(f"{bench} not found: build target weir-bench, or pass --bench PATH")
        return LoadGenerator("weir-bench", bench, prefix)
    dnsperf = shutil.which("dnsperf")
    if dnsperf is None:
        raise SetupError(f"no load generator: {bench} not built and dnsperf not installed")
    if args.load_generator == "auto":
        log(f"note: {bench} not found; using dnsperf as a stand-in (no latency percentiles)")
    return LoadGenerator("dnsperf", dnsperf, prefix)


# ------------------------------------------------------------------ measuring
def start_server(name, args, workdir, sim_port, prefix):
    if name == "weir":
        return peerlib.start_weir(args.build, workdir, sim_port, prefix, workers=1, label="weir")
    starter = {"dnsdist": peerlib.start_dnsdist, "unbound": peerlib.start_unbound,
               "pdns-recursor": peerlib.start_pdns_recursor, "kresd": peerlib.start_kresd}[name]
    return starter(workdir, sim_port, prefix)


def server_misses(name, srv, sim, before):
    """Cache misses since `before` (a snapshot from this function with before=None)."""
    now = {"upstream": peerlib.gslb_queries(sim)}
    if name == "weir":
        m = peerlib.weir_metrics(srv)
        if "misses" in m:
            now["weir_misses"] = m["misses"]
    if before is None:
        return now
    return {k: now[k] - before[k] for k in now if k in before}


def summarize(r):
    """The figures of one run that the tables use."""
    answered = max(r["answered"], 1)
    cpu = r.get("server_user_us", 0) + r.get("server_sys_us", 0)
    dur = r["duration_s"] or r["wall_s"]
    lat = r.get("latency_us") or {}
    return {
        "sent": r["sent"], "answered": r["answered"], "qps": r["qps_answered"], "loss_pct": r["loss_pct"],
        "p50_us": lat.get("p50"), "p99_us": lat.get("p99"), "mean_us": lat.get("mean"),
        "noerror": (r.get("rcodes") or {}).get("NOERROR", 0),
        "cpu_us_per_q": cpu / answered,
        "user_us_per_q": r.get("server_user_us", 0) / answered,
        "sys_us_per_q": r.get("server_sys_us", 0) / answered,
        "sched_us_per_q": r["server_sched_us"] / answered if r.get("server_sched_us") is not None else None,
        "server_util": cpu / 1e6 / r["wall_s"],
        "gen_util": r["gen_cpu_s"] / r["wall_s"],
        "other_cores": r.get("other_cores"),
        "duration_s": dur,
        "notes": r.get("notes") or [],
        "histogram_us": r.get("latency_histogram_us") or [],
    }


def check_answers(name, label, r, minimum):
    noerror = (r.get("rcodes") or {}).get("NOERROR", 0)
    if r["answered"] < minimum or noerror < 0.99 * r["answered"]:
        raise SetupError(f"{name}: {label} answered {r['answered']} (NOERROR {noerror}) of {r['sent']} "
                         f"(at least {minimum} NOERROR expected); see {label}.out")


def measure_server(name, args, gen, workdir, outdir, sim, queries, server_prefix):
    """All runs on one server; returns its result dict. Raises SetupError to skip it."""
    srv = start_server(name, args, workdir, sim.port, server_prefix)
    quota = None
    try:
        if not peerlib.wait_answer(srv.port, proc=srv):
            why = "exited" if not srv.alive() else f"no answer to {peerlib.PROBE_NAME} within 10 s"
            raise SetupError(f"{name} {why}; last stderr line: {srv.last_error_line()}")
        peerlib.dig_check(srv.port)
        log(f"{name}: pid {srv.pid} on 127.0.0.1:{srv.port}, pinned to core {args.server_cpu}")
        common = dict(threads=args.threads, sockets=args.sockets, timeout_ms=args.timeout, names=args.names)

        # A server that has just started may still be loading modules or
        # priming: one failed warm-up is retried once before it is skipped.
        for attempt in (1, 2):
            warm = run_load(gen, srv.port, queries, f"{name}-warmup", outdir, rate=args.warmup_rate,
                            count=2 * args.names, warmup=True, plot=False, **common)
            try:
                check_answers(name, "warm-up", warm, args.names)
                break
            except SetupError as e:
                if attempt == 2:
                    raise
                log(f"{e}; warming up again in 2 s")
                time.sleep(2)
        time.sleep(0.5)
        res = {"server": name, "pid": srv.pid, "argv": srv.argv, "runs": {}}

        before = server_misses(name, srv, sim, None)
        fixed = []
        for rep in range(max(args.repeat, 1)):
            log(f"{name}: fixed rate {args.rate} qps for {args.duration} s ({rep + 1}/{max(args.repeat, 1)})")
            r = run_load(gen, srv.port, queries, f"{name}-fixed{rep}", outdir, rate=args.rate,
                         duration=args.duration, server=srv, **common)
            check_answers(name, f"{name}-fixed{rep}", r, 1)
            fixed.append(summarize(r))
            time.sleep(0.5)
        best = min(fixed, key=lambda s: s["cpu_us_per_q"])
        best["repeats_cpu_us_per_q"] = [s["cpu_us_per_q"] for s in fixed]
        res["runs"]["fixed"] = best

        log(f"{name}: max rate (closed loop, {args.outstanding} outstanding per thread) for {args.max_duration} s")
        r = run_load(gen, srv.port, queries, f"{name}-max", outdir, outstanding=args.outstanding,
                     duration=args.max_duration, server=srv, **common)
        check_answers(name, f"{name}-max", r, 1)
        res["runs"]["max"] = summarize(r)

        if args.capacity_quota > 0:
            time.sleep(0.5)
            quota = peerlib.CpuQuota(f"weir-peers-{os.getpid()}-{name}", args.capacity_quota, args.period_us)
            quota.add(srv.pid)
            thr0 = quota.throttled_s()
            log(f"{name}: capacity at {args.capacity_quota:g}% of one core for {args.capacity_duration} s "
                f"({args.capacity_outstanding} outstanding per thread)")
            try:
                r = run_load(gen, srv.port, queries, f"{name}-capacity", outdir,
                             outstanding=args.capacity_outstanding, duration=args.capacity_duration, server=srv,
                             **dict(common, sockets=args.capacity_sockets))
            except SetupError as e:
                # The fixed and max runs stand on their own: keep them.
                res["capacity_error"] = str(e)
                log(f"{name}: capacity run failed: {e}")
            else:
                s = summarize(r)
                s["throttled_s"] = quota.throttled_s() - thr0
                s["quota_pct"] = args.capacity_quota
                res["runs"]["capacity"] = s
        res["misses"] = server_misses(name, srv, sim, before)
        if not srv.alive():
            raise SetupError(f"{name} exited during the runs; last stderr line: {srv.last_error_line()}")
        return res
    finally:
        srv.stop()
        if quota:
            quota.remove()


# --------------------------------------------------------------------- report
def fmt(v, spec, none="-"):
    return none if v is None else format(v, spec)


def ratio(a, b):
    return a / b if a is not None and b else None


def ratios(results):
    """weir / peer for each measured peer: QPS at max rate, CPU us per query at the fixed rate, capacity QPS."""
    w = results.get("weir")
    out = {}
    if not w:
        return out
    for peer in PEERS:
        p = results.get(peer)
        if not p:
            continue
        out[peer] = {
            "max_qps": ratio(w["runs"]["max"]["qps"], p["runs"]["max"]["qps"]),
            "fixed_cpu_us_per_q": ratio(w["runs"]["fixed"]["cpu_us_per_q"], p["runs"]["fixed"]["cpu_us_per_q"]),
            "capacity_qps": ratio(w["runs"].get("capacity", {}).get("qps"), p["runs"].get("capacity", {}).get("qps")),
        }
    return out


def render(meta, results, skipped, rat, args):
    """The report as markdown lines (also what is printed)."""
    L = [f"# weir vs peers, cache hits over loopback ({meta['date']})", ""]
    L.append(f"Machine: {meta['cpus']} CPUs, load average at start {meta['loadavg']}; servers on core "
             f"{args.server_cpu}, load generator on core {args.load_cpu}{', nice ' + str(-args.nice) if args.nice else ''}; "
             f"load generator {meta['generator']}; weir commit {meta['commit']}.")
    L.append(f"{args.names} names x 1..{args.addrs} A, TTL {args.ttl}, all cache hits after a warm-up; fixed rate "
             f"{args.rate} qps x {args.duration} s (best of {max(args.repeat, 1)} by CPU/query); max rate closed loop "
             f"{args.outstanding} outstanding x {args.threads} thread(s), {args.max_duration} s"
             + (f"; capacity at {args.capacity_quota:g}% of one core (cgroup quota, period {args.period_us} us), "
                f"{args.capacity_outstanding} outstanding, {args.capacity_duration} s." if args.capacity_quota > 0 else
                "; capacity skipped (--capacity-quota 0)."))
    L.append("")
    L += ["| server | run | answered | QPS | loss % | mean us | p50 us | p99 us | server CPU % | CPU us/query "
          "| user | sys | gen CPU % | other cores |",
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, res in results.items():
        for run in ("fixed", "max", "capacity"):
            s = res["runs"].get(run)
            if not s:
                continue
            label = {"fixed": f"{args.rate} qps", "max": "max", "capacity": f"cap {args.capacity_quota:g}%"}[run]
            L.append(f"| {name} | {label} | {s['answered']} | {s['qps']:.0f} | {s['loss_pct']:.2f} | "
                     f"{fmt(s['mean_us'], '.0f')} | {fmt(s['p50_us'], '.0f')} | {fmt(s['p99_us'], '.0f')} | {100 * s['server_util']:.1f} | "
                     f"{s['cpu_us_per_q']:.2f} | {s['user_us_per_q']:.2f} | {s['sys_us_per_q']:.2f} | "
                     f"{100 * s['gen_util']:.1f} | {fmt(s['other_cores'], '.2f')} |")
    L.append("")
    L.append("CPU us/query = server utime+stime (/proc/PID/stat, all threads and children) / answered queries; "
             "gen = the load generator's CPU; other = CPU (cores) of everything else meanwhile (above ~0.1 the "
             "run was disturbed).")
    misses = ", ".join(f"{n} {r['misses'].get('upstream', '?')}" + (f" (weir metrics {r['misses']['weir_misses']})"
                                                                   if "weir_misses" in r["misses"] else "")
                       for n, r in results.items())
    if misses:
        L.append(f"Queries that reached gslb-sim during the measured runs (cache misses): {misses}."
                 + (" dnsdist's health check (h0.bench.test every 5 s) is among them." if "dnsdist" in results else ""))
    for name, res in results.items():
        for run, s in res["runs"].items():
            for note in s.get("notes") or []:
                L.append(f"{name} {run}: load generator note: {note}")
        if res.get("capacity_error"):
            L.append(f"{name}: no capacity figure: {res['capacity_error']}")
    for name, why in skipped.items():
        L.append(f"Skipped **{name}**: {why}")
    L.append("")
    if rat:
        L += ["Ratios weir / peer (QPS and capacity above 1, CPU per query below 1 favour weir):", "",
              f"| peer | QPS at max rate | CPU us/query at {args.rate} qps | capacity QPS at "
              f"{args.capacity_quota:g}% |", "|---|---:|---:|---:|"]
        for peer, r in rat.items():
            L.append(f"| {peer} | {fmt(r['max_qps'], '.2f')} | {fmt(r['fixed_cpu_us_per_q'], '.2f')} | "
                     f"{fmt(r['capacity_qps'], '.2f')} |")
        L.append("")
    elif "weir" not in results:
        L += ["No ratios: weir was not measured.", ""]
    return L


def write_comparison_plots(results, outdir, args):
    """Two plots beside the tables, PNG and SVG, drawn by gnuplot:
    peers_latency_cdf (every server's latency CDF in its kept fixed-rate run)
    and peers_cpu_capacity (CPU us per answer at the fixed rate, user and
    system stacked, and answered QPS under the CPU quota). Returns the files
    written; a missing gnuplot or a failed plot is reported, not fatal."""
    if shutil.which("gnuplot") is None:
        log("plots: gnuplot not found (Debian gnuplot-nox); no comparison plots")
        return []
    names = [n for n in results if results[n]["runs"].get("fixed", {}).get("histogram_us")]
    files = []
    cdf_plots = []
    for n in names:
        hist = results[n]["runs"]["fixed"]["histogram_us"]
        total = sum(c for _, c in hist) or 1
        path = os.path.join(outdir, f"peers_latency_{n}.dat")
        acc = 0
        with open(path, "w") as f:
            f.write("# upper_us cumulative_pct\n")
            for upper, c in hist:
                acc += c
                f.write(f"{upper} {100.0 * acc / total}\n")
        files.append(path)
        cdf_plots.append(f"'{os.path.basename(path)}' using 1:2 with steps lw 2 title '{n}'")
    with open(os.path.join(outdir, "peers_bars.dat"), "w") as f:
        f.write("# server user_us_per_q sys_us_per_q capacity_qps\n")
        for n, res in results.items():
            fx = res["runs"].get("fixed", {})
            cap = res["runs"].get("capacity", {}).get("qps", 0)
            f.write(f"{n} {fx.get('user_us_per_q', 0)} {fx.get('sys_us_per_q', 0)} {cap}\n")
    files.append(os.path.join(outdir, "peers_bars.dat"))
    scripts = {}
    if cdf_plots:
        scripts["peers_latency_cdf"] = [
            f"set title 'Latency at {args.rate} qps (cache hits, loopback)' noenhanced",
            "set xlabel 'latency (us)'", "set ylabel 'answers (%)'", "set logscale x", "set yrange [0:100]",
            "set grid", "set key bottom right", "plot " + ", ".join(cdf_plots)]
    scripts["peers_cpu_capacity"] = [
        "set multiplot layout 1,2", "set style data histograms", "set style fill solid 0.8 border -1",
        "set boxwidth 0.8", "set grid ytics", "set xtics rotate by -30", "set yrange [0:*]",
        "set style histogram rowstacked", f"set title 'Server CPU per answer at {args.rate} qps' noenhanced",
        "set ylabel 'CPU us per answer'",
        "plot 'peers_bars.dat' using 2:xtic(1) title 'user', '' using 3 title 'system'",
        "set style histogram clustered", f"set title 'Answered QPS at {args.capacity_quota:g}% of one core' noenhanced",
        "set ylabel 'QPS'", "plot 'peers_bars.dat' using 4:xtic(1) title 'capacity' lc rgb '#4a7'",
        "unset multiplot"]
    terms = {"png": "pngcairo size 1000,560", "svg": "svg size 1000,560"}
    for name, body in scripts.items():
        for ext, term in terms.items():
            gp = os.path.join(outdir, f"{name}.{ext}.gp")
            with open(gp, "w") as f:
                f.write(f"set terminal {term}\nset output '{name}.{ext}'\n" + "\n".join(body) + "\n")
            p = subprocess.run(["gnuplot", os.path.basename(gp)], cwd=outdir, capture_output=True, text=True,
                               timeout=60)
            if p.returncode != 0:
                log(f"plots: {name}.{ext}: gnuplot exited {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
                continue
            files += [gp, os.path.join(outdir, f"{name}.{ext}")]
    return files


def git_commit():
    try:
        return subprocess.run(["git", "-C", peerlib.REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or "?"
    except OSError:
        return "?"


# ----------------------------------------------------------------------- main
def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_argument_group("what to run")
    g.add_argument("--build", default=os.path.join(peerlib.REPO, "build"),
                   help="CMake build directory with weir-fastpath and gslb-sim (Release) (default: %(default)s)")
    g.add_argument("--bench", help="weir-bench binary (default: BUILD/bench/weir_bench/weir-bench)")
    g.add_argument("--load-generator", choices=("auto", "weir-bench", "dnsperf"), default="auto",
                   help="weir-bench, dnsperf as a stand-in, or auto: weir-bench when built, else dnsperf "
                        "(default: %(default)s)")
    g.add_argument("--servers", default=",".join(SERVERS),
                   help=f"comma list, in order, from {', '.join(SERVERS)} (default: all)")
    g.add_argument("--out", default=None,
                   help="directory for peers.md, peers.json and the per-run reports and plots "
                        "(default: ./peers-YYYYmmdd-HHMMSS)")
    g.add_argument("--keep", action="store_true",
                   help="keep the work directory (server configs, logs, zone) instead of deleting it")
    g = ap.add_argument_group("zone")
    g.add_argument("--names", type=int, default=1000, help="names in the zone and the query file (default: 1000)")
    g.add_argument("--addrs", type=int, default=4, help="A records per name: 1..N, cycling (default: 4)")
    g.add_argument("--ttl", type=int, default=3600, help="TTL of the records in seconds (default: 3600)")
    g = ap.add_argument_group("load")
    g.add_argument("--rate", type=int, default=20000, help="offered rate of the fixed-rate run, qps (default: 20000)")
    g.add_argument("--duration", type=int, default=10, help="seconds of each fixed-rate run (default: 10)")
    g.add_argument("--repeat", type=int, default=1,
                   help="fixed-rate runs per server; the one with the least server CPU per answer is kept "
                        "(default: 1; 3 on a noisy machine)")
    g.add_argument("--max-duration", type=int, default=10, help="seconds of the max-rate run (default: 10)")
    g.add_argument("--outstanding", type=int, default=100,
                   help="queries in flight per load-generator thread in the max-rate run (default: 100)")
    g.add_argument("--threads", type=int, default=1, help="load-generator threads (default: 1)")
    g.add_argument("--sockets", type=int, default=4, help="load-generator UDP sockets (default: 4)")
    g.add_argument("--timeout", type=int, default=1000,
                   help="ms after which a query counts as lost (default: 1000)")
    g.add_argument("--warmup-rate", type=int, default=5000,
                   help="rate of the warm-up (every name twice), qps (default: 5000)")
    g = ap.add_argument_group("capacity under a CPU quota")
    g.add_argument("--capacity-quota", type=float, default=25.0,
                   help="CPU quota in percent of one core for the capacity run, 0 = skip it (default: 25; root)")
    g.add_argument("--capacity-duration", type=int, default=10, help="seconds of the capacity run (default: 10)")
    g.add_argument("--capacity-outstanding", type=int, default=5000,
                   help="queries in flight per thread in the capacity run: enough to keep a throttled server "
                        "busy (default: 5000)")
    g.add_argument("--capacity-sockets", type=int, default=8, help="load-generator sockets there (default: 8)")
    g.add_argument("--period-us", type=int, default=10000,
                   help="cgroup CFS period; a short one keeps the throttled pauses short (default: 10000)")
    g = ap.add_argument_group("placement")
    g.add_argument("--server-cpu", default="1", help="core the servers are pinned to (default: 1)")
    g.add_argument("--load-cpu", default="0", help="core(s) of the load generator and gslb-sim (default: 0)")
    g.add_argument("--nice", type=int, default=0,
                   help="run servers and the load generator at nice -N when others share the machine (root)")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    args.servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    unknown = [s for s in args.servers if s not in SERVERS]
    if unknown:
        ap.error(f"unknown server(s) {', '.join(unknown)}; choose from {', '.join(SERVERS)}")
    if args.out is None:
        args.out = os.path.abspath(time.strftime("peers-%Y%m%d-%H%M%S"))
    for opt in ("names", "rate", "duration", "max_duration", "outstanding", "threads", "sockets", "timeout"):
        if getattr(args, opt) <= 0:
            ap.error(f"--{opt.replace('_', '-')} must be positive")
    if args.capacity_quota < 0 or args.capacity_quota > 100 * (os.cpu_count() or 1):
        ap.error("--capacity-quota must be 0 (skip) or a percentage of one core")
    return args


def main():
    args = parse_args()
    if shutil.which("taskset") is None:
        log("setup: taskset not found (util-linux)")
        return 2
    if (args.capacity_quota > 0 or args.nice) and os.geteuid() != 0:
        log("setup: --capacity-quota and --nice need root; use --capacity-quota 0 --nice 0 otherwise")
        return 2
    nice = ["nice", "-n", str(-args.nice)] if args.nice else []
    server_prefix = nice + ["taskset", "-c", args.server_cpu]
    os.makedirs(args.out, exist_ok=True)
    with open("/proc/loadavg") as f:
        loadavg = " ".join(f.read().split()[:3])
    meta = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"), "cpus": os.cpu_count(),
            "loadavg": loadavg, "commit": git_commit(), "kernel": os.uname().release}
    workdir = tempfile.mkdtemp(prefix="weir-peers-")
    results, skipped = {}, {}
    sim = None
    t_start = time.time()
    try:
        gen = pick_generator(args, nice + ["taskset", "-c", args.load_cpu])
        meta["generator"] = gen.describe()
        zone_path = os.path.join(workdir, "zones.toml")
        queries = os.path.join(args.out, "queries.txt")
        peerlib.write_zone(zone_path, args.names, args.addrs, args.ttl)
        peerlib.write_queries(queries, args.names)
        sim = peerlib.start_gslb_sim(args.build, workdir, zone_path, cpus=args.load_cpu, control=True)
        log(f"gslb-sim on 127.0.0.1:{sim.port} (core {args.load_cpu}), {args.names} names; load generator "
            f"{gen.describe()}; output {args.out}")
        for name in args.servers:
            try:
                results[name] = measure_server(name, args, gen, workdir, args.out, sim, queries, server_prefix)
            except SetupError as e:
                skipped[name] = str(e)
                log(f"{name}: skipped: {e}")
    except SetupError as e:
        log(f"setup failure: {e}")
        return 2
    finally:
        if sim:
            sim.stop()
        if args.keep:
            log(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    rat = ratios(results)
    lines = render(meta, results, skipped, rat, args)
    text = "\n".join(lines) + f"\ntotal run time {time.time() - t_start:.0f} s\n"
    print(text)
    with open(os.path.join(args.out, "peers.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "peers.json"), "w") as f:
        json.dump({"meta": meta, "args": vars(args), "results": results, "skipped": skipped, "ratios": rat}, f,
                  indent=1, default=str)
    plots = [f for f in write_comparison_plots(results, args.out, args) if f.endswith((".png", ".svg"))]
    log(f"wrote {os.path.join(args.out, 'peers.md')}, peers.json" +
        (f" and {', '.join(os.path.basename(f) for f in plots)}" if plots else ""))
    return 0 if results else 2


if __name__ == "__main__":
    sys.exit(main())
