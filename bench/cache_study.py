#!/usr/bin/env python3
"""How weir-fastpath's cache strategies for a GSLB that answers per subscriber
segment compare: hit ratio, upstream queries, mis-scheduled answers and cache
bytes (docs/bench.md, "The cache study").

    python3 bench/cache_study.py --build-dir build [--quick]

For each strategy (`--strategies`, all by default):

  city               tag `level=city`: one answer per city of the model's city map
  subnet             tag `level=subnet`: one answer per subscriber /24
  adaptive           tag `level=adaptive max_segments=16384`: segments learned from the ECS scopes
  adaptive+prefetch  the same with cache.sibling_prefetch = 4

it starts gslb-sim with the [segments] config (`--config`, examples/gslb-sim/segments.toml by default,
with change_every_s = 0 so the truth stays at epoch 0), weir-fastpath with the model's city map, the tag
`seg.example <keys>`, gslb-sim as its ordinary and weighted upstream and 127.0.0.1 as a trusted
forwarder, and weir-bench from 127.0.0.1 with a subscriber /24 as ECS (--subscriber-ecs) for --names
names below seg.example. of Zipf popularity --zipf, closed loop for --count queries, each answer checked
against the model (--segments-truth). Then it reads weir-fastpath's metrics and writes one CSV row per
strategy (--out) and gnuplot bar charts (--plot-dir).

Python 3 standard library only. Every process is started here and stopped by its PID.
"""

import argparse
import csv
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peerlib  # noqa: E402
from peerlib import SetupError, log  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

STRATEGIES = {
    "city": ("level=city", {}),
    "subnet": ("level=subnet", {}),
    "adaptive": ("level=adaptive max_segments=16384", {}),
    "adaptive+prefetch": ("level=adaptive max_segments=16384", {"sibling_prefetch": 4}),
}
FIELDS = ["strategy", "queries", "answered", "upstream_queries", "hit_ratio", "misscheduled_per_10k",
          "misscheduled", "checked", "unanswered", "cache_bytes", "segments", "qps", "seconds"]
# --rate: one row per (strategy, simulated second) in the time series CSV.
SERIES_FIELDS = ["strategy", "second", "queries", "hits", "misses", "hit_ratio", "upstream_queries", "segments",
                 "cache_bytes"]


class Proc(peerlib.Proc):
    """peerlib's server process, its stdout read through a pipe until its
    start-up lines are in, then drained to NAME.log so the pipe never fills."""

    def __init__(self, name, argv, workdir):
        super().__init__(name, argv, workdir, stdout_pipe=True)
        self._drain = None

    def lines_until(self, pattern, timeout=30.0):
        """The stdout lines up to the first matching `pattern`."""
        lines = self.read_lines_until(pattern, timeout)
        self._drain = subprocess.Popen(["cat"], stdin=self.p.stdout, stdout=self.log_file)
        return lines

    def stop(self):
        super().stop()
        if self._drain is not None:
            self._drain.wait(timeout=10)
            self._drain = None


def hostport(text):
    host, port = text.rsplit(":", 1)
    return host.strip("[]"), int(port)


def control(host, port, line, timeout=10.0):
    """One line to gslb-sim's control port; the reply (it closes after it)."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(line.encode() + b"\n")
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                return b"".join(chunks).decode()
            chunks.append(data)


def metrics(host, port):
    """weir-fastpath's Prometheus samples: {name: sum over all label sets}."""
    body = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in body.splitlines():
        m = re.match(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{.*\})?\s+(\S+)$", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


def binary(build, rel):
    path = os.path.join(build, rel)
    if not os.access(path, os.X_OK):
        raise SetupError(f"{path} not found: build target {os.path.basename(rel)}")
    return path


def static_config(src, dst, scope=""):
    """A copy of the [segments] config with change_every_s = 0: the GSLB's
    answers then stay at epoch 0, the epoch weir-bench checks against; with
    `scope`, that scope key in place of the config's."""
    with open(src) as f:
        text = f.read()
    text, n = re.subn(r"(?m)^(\s*change_every_s\s*=\s*)\d+", r"\g<1>0", text)
    if n == 0:
        text = re.sub(r"(?m)^\[segments\]\s*$", "[segments]\nchange_every_s = 0", text, count=1)
    if scope:
        text = re.sub(r"(?m)^\s*scope\s*=.*$", "", text)
        text = re.sub(r"(?m)^\[segments\]\s*$", f'[segments]\nscope = "{scope}"', text, count=1)
    with open(dst, "w") as f:
        f.write(text)


def fastpath_config(path, upstream, citymap, tags, args, cache_extra):
    cache = {"bytes": args.cache_bytes, "adaptive_names": 200000, "adaptive_segments": 20000000}
    cache.update(cache_extra)
    with open(path, "w") as f:
        f.write("[server]\n"
                'listen = ["127.0.0.1:0"]\n'
                f"workers = {args.workers}\n"
                'metrics_listen = "127.0.0.1:0"\n'
                "[acl]\n"
                'allow = ["127.0.0.0/8"]\n'
                'trusted_forwarders = ["127.0.0.1/32"]\n'
                "[partitions]\n"
                f'citymap = "{citymap}"\n'
                f'tags = "{tags}"\n'
                "[cache]\n" + "".join(f"{k} = {v}\n" for k, v in cache.items()) +
                "[upstream]\n"
                f'ordinary = ["{upstream}"]\n'
                f'weighted = ["{upstream}"]\n'
                "[control]\n"
                'socket = ""\n')


def run_strategy(name, args, build, workdir, config, citymap):
    keys, cache_extra = STRATEGIES[name]
    label = name.replace("+", "-")
    sim = fp = None
    try:
        sim = Proc(f"gslb-sim-{label}", [binary(build, "bench/gslb_sim/gslb-sim"), "--config", config, "--listen",
                                         "127.0.0.1:0", "--control", "127.0.0.1:0"], workdir)
        lines = sim.lines_until(r"^ready$")
        sim_addr = next(l.split()[2] for l in lines if l.startswith("listening udp "))
        sim_control = hostport(next(l.split()[1] for l in lines if re.match(r"^control \S+$", l)))

        tags = os.path.join(workdir, f"tags-{label}.txt")
        with open(tags, "w") as f:
            f.write(f"seg.example ecs=on {keys}\n")
        conf = os.path.join(workdir, f"fastpath-{label}.toml")
        fastpath_config(conf, sim_addr, citymap, tags, args, cache_extra)
        fp_argv = [binary(build, "fastpath/weir-fastpath"), "-c", conf]
        if args.rate:
            fp_argv.append("--test-clock")
        fp = Proc(f"fastpath-{label}", fp_argv, workdir)
        lines = fp.lines_until(r"^ready$")
        fp_addr = next(l.split()[2] for l in lines if l.startswith("listening udp "))
        fp_metrics = hostport(next(l.split()[2] for l in lines if l.startswith("metrics http ")))

        if args.rate:
            r, m, series = run_steady(name, label, args, build, workdir, config, citymap, fp_addr, fp_metrics)
        else:
            series = []
            r = run_bench(label, args, build, workdir, config, citymap, fp_addr, args.count, args.seed)
            m = metrics(*fp_metrics)
        gslb = json.loads(control(*sim_control, "stats"))
    finally:
        if fp is not None:
            fp.stop()
        if sim is not None:
            sim.stop()

    hits, misses = m.get("weir_cache_hits_total", 0), m.get("weir_cache_misses_total", 0)
    seg = r.get("segments", {})
    seconds = r.get("wall_seconds", 0)
    row = {
        "strategy": name,
        "queries": r["sent"],
        "answered": r["answered"],
        "upstream_queries": int(m.get("weir_upstream_queries_total", 0)),
        "hit_ratio": round(hits / (hits + misses), 5) if hits + misses else 0,
        "misscheduled_per_10k": seg.get("misscheduled_per_10k", 0),
        "misscheduled": seg.get("misscheduled", 0),
        "checked": seg.get("checked", 0),
        "unanswered": seg.get("unanswered", 0),
        "cache_bytes": int(m.get("weir_cache_bytes", 0)),
        "segments": int(m.get("weir_segments", 0)),
        "qps": round(r["qps_answered"]),
        "seconds": round(seconds, 1),
    }
    log(f"{name}: {row} (gslb-sim saw {gslb.get('queries')} queries)")
    return row, series


def run_bench(label, args, build, workdir, config, citymap, fp_addr, count, seed):
    """One weir-bench run of `count` queries: its JSON report, with its wall
    time added as wall_seconds."""
    report = os.path.join(workdir, f"bench-{label}.json")
    argv = [binary(build, "bench/weir_bench/weir-bench"), "--server", fp_addr, "--source", "127.0.0.1",
            "--subscriber-ecs", citymap, "--names", str(args.names), "--zone", "seg.example.",
            "--zipf", str(args.zipf), "--segments-truth", config, "--count", str(count),
            "--outstanding", str(args.outstanding), "--seed", str(seed), "--timeout", "3000",
            "--progress", "never", "--json", report]
    if not args.rate:
        log(f"{label}: {' '.join(argv)}")
    t0 = time.time()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout)
    seconds = time.time() - t0
    with open(os.path.join(workdir, f"bench-{label}.txt"), "a") as f:
        f.write(p.stdout + p.stderr)
    if p.returncode != 0:
        raise SetupError(f"{label}: weir-bench exited {p.returncode}: {p.stderr.strip()}")
    with open(report) as f:
        r = json.load(f)
    r["wall_seconds"] = seconds
    return r


def advance_clock(fp_metrics, seconds):
    host, port = fp_metrics
    urllib.request.urlopen(f"http://{host}:{port}/test/advance-clock?seconds={seconds}", timeout=10).read()


def run_steady(name, label, args, build, workdir, config, citymap, fp_addr, fp_metrics):
    """The steady state on weir-fastpath's test clock: --rate queries per
    simulated second for --simulated-seconds, the clock moved one second after
    each second's queries (weir-bench seeded anew each second). The figures are
    the differences over the seconds after --warmup-seconds; the series has one
    row per simulated second."""
    total = {"sent": 0, "answered": 0, "qps_answered": 0.0, "wall_seconds": 0.0,
             "segments": {"misscheduled": 0, "checked": 0, "unanswered": 0}}
    series = []
    start = prev = metrics(*fp_metrics)
    log(f"{name}: {args.simulated_seconds} simulated seconds of {args.rate} queries "
        f"(the first {args.warmup_seconds} not counted)")
    for second in range(args.simulated_seconds):
        r = run_bench(label, args, build, workdir, config, citymap, fp_addr, args.rate,
                      args.seed * 1000003 + second)
        advance_clock(fp_metrics, 1)
        now = metrics(*fp_metrics)
        d = {k: now.get(k, 0) - prev.get(k, 0) for k in
             ("weir_cache_hits_total", "weir_cache_misses_total", "weir_upstream_queries_total")}
        looked = d["weir_cache_hits_total"] + d["weir_cache_misses_total"]
        series.append({"strategy": name, "second": second + 1, "queries": r["sent"],
                       "hits": int(d["weir_cache_hits_total"]), "misses": int(d["weir_cache_misses_total"]),
                       "hit_ratio": round(d["weir_cache_hits_total"] / looked, 5) if looked else 0,
                       "upstream_queries": int(d["weir_upstream_queries_total"]),
                       "segments": int(now.get("weir_segments", 0)), "cache_bytes": int(now.get("weir_cache_bytes", 0))})
        prev = now
        if second + 1 == args.warmup_seconds:
            start = now
        if second + 1 > args.warmup_seconds:
            for k in ("sent", "answered", "wall_seconds"):
                total[k] += r[k] if k in r else 0
            for k in ("misscheduled", "checked", "unanswered"):
                total["segments"][k] += r.get("segments", {}).get(k, 0)
        if (second + 1) % 30 == 0:
            log(f"{name}: simulated second {second + 1}: hit ratio {series[-1]['hit_ratio']}")
    seg = total["segments"]
    seg["misscheduled_per_10k"] = round(seg["misscheduled"] * 10000 / seg["checked"], 2) if seg["checked"] else 0
    total["qps_answered"] = total["answered"] / total["wall_seconds"] if total["wall_seconds"] else 0
    end = metrics(*fp_metrics)
    m = {k: end.get(k, 0) - start.get(k, 0) for k in
         ("weir_cache_hits_total", "weir_cache_misses_total", "weir_upstream_queries_total")}
    m["weir_cache_bytes"] = end.get("weir_cache_bytes", 0)
    m["weir_segments"] = end.get("weir_segments", 0)
    return total, m, series


def gnuplot_to(base, script):
    """gnuplot's `script` drawn to BASE.png and BASE.svg; the files written."""
    written = []
    for term, ext in (("pngcairo size 800,500", "png"), ("svg size 800,500", "svg")):
        out = f"{base}.{ext}"
        p = subprocess.run([shutil.which("gnuplot")], input=f'set terminal {term}\nset output "{out}"\n' + script,
                           capture_output=True, text=True)
        if p.returncode != 0:
            log(f"gnuplot failed for {out}: {p.stderr.strip()}")
            continue
        written.append(out)
    return written


def plot(rows, plot_dir, title, prefix):
    """One bar chart per figure, PNG and SVG, with gnuplot (skipped when it is not installed)."""
    gnuplot = shutil.which("gnuplot")
    if gnuplot is None:
        log("gnuplot not found: no plots")
        return []
    data = os.path.join(plot_dir, f"{prefix}.dat")
    with open(data, "w") as f:
        f.write("# strategy " + " ".join(FIELDS[1:]) + "\n")
        for r in rows:
            f.write(f'"{r["strategy"]}" ' + " ".join(str(r[k]) for k in FIELDS[1:]) + "\n")
    figures = [("hit_ratio", "hit ratio", "%.3f"), ("upstream_queries", "upstream queries", "%.0f"),
               ("misscheduled_per_10k", "mis-scheduled answers per 10,000", "%.1f"),
               ("cache_bytes", "cache bytes", "%.3g")]
    written = []
    for key, label, fmt in figures:
        col = FIELDS.index(key) + 1
        written += gnuplot_to(os.path.join(plot_dir, f"{prefix}_{key}"),
                              f'set title "{label} per cache strategy\\n{{/*0.8 {title}}}"\n'
                              "set style fill solid 0.6 border -1\nset boxwidth 0.6\nset grid ytics\n"
                              "set yrange [0:*]\nunset key\n"
                              f'plot "{data}" using 0:{col}:xtic(1) with boxes lc rgb "#4477aa", '
                              f'"" using 0:{col}:(sprintf("{fmt}", ${col})) with labels offset 0,0.8\n')
    os.remove(data)
    return written


def plot_series(series, plot_dir, title, prefix):
    """The hit ratio of each simulated second, one line per strategy."""
    gnuplot = shutil.which("gnuplot")
    if gnuplot is None or not series:
        return []
    strategies = list(dict.fromkeys(r["strategy"] for r in series))
    data = os.path.join(plot_dir, f"{prefix}_series.dat")
    with open(data, "w") as f:
        for s in strategies:
            f.write(f'"{s}"\n')
            for r in series:
                if r["strategy"] == s:
                    f.write(f'{r["second"]} {r["hit_ratio"]}\n')
            f.write("\n\n")
    written = gnuplot_to(os.path.join(plot_dir, f"{prefix}_hit_ratio_over_time"),
                         f'set title "hit ratio per simulated second\\n{{/*0.8 {title}}}"\n'
                         "set xlabel \"simulated second\"\nset ylabel \"hit ratio\"\nset grid\nset yrange [0:1]\n"
                         "set key bottom right\n"
                         f'plot for [i=0:{len(strategies) - 1}] "{data}" index i using 1:2 with lines lw 2 '
                         "title columnheader(1)\n")
    os.remove(data)
    return written


def write_csv(path, rows, fields=FIELDS):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def interrupted(signum, frame):
    # SIGTERM as Ctrl-C: the servers and weir-bench started so far are stopped on the way out.
    raise KeyboardInterrupt


def main():
    signal.signal(signal.SIGTERM, interrupted)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build"), help="the build tree (default: build)")
    ap.add_argument("--config", default=os.path.join(REPO, "examples", "gslb-sim", "segments.toml"),
                    help="gslb-sim config with a [segments] table (a copy with change_every_s = 0 is used)")
    ap.add_argument("--scope", choices=["segment", "run"], default="",
                    help="the model's ECS scope key in place of the config's (docs/gslb-sim.md)")
    ap.add_argument("--strategies", default=",".join(STRATEGIES),
                    help="comma-separated, of: " + ", ".join(STRATEGIES) + " (default: all)")
    ap.add_argument("--names", type=int, default=100000, help="names below seg.example. (default 100000)")
    ap.add_argument("--zipf", type=float, default=0.9, help="Zipf exponent of name popularity (default 0.9)")
    ap.add_argument("--count", type=int, default=2000000, help="queries per strategy (default 2,000,000)")
    ap.add_argument("--outstanding", type=int, default=100, help="weir-bench's queries outstanding (default 100)")
    ap.add_argument("--seed", type=int, default=1, help="weir-bench's seed (default 1)")
    ap.add_argument("--workers", type=int, default=1, help="weir-fastpath workers (default 1)")
    ap.add_argument("--cache-bytes", type=int, default=1 << 30, help="cache.bytes (default 1 GiB)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run of about a minute: 10,000 names, 100,000 queries per strategy")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds one weir-bench run may take")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results", "cache_study.csv"),
                    help="the CSV (default bench/results/cache_study.csv)")
    ap.add_argument("--plot-dir", default=os.path.join(REPO, "bench", "results"),
                    help="where the plots go (default bench/results)")
    ap.add_argument("--plot-prefix", default="cache_study",
                    help="plot file names: PREFIX_<figure>.png and .svg (default cache_study)")
    ap.add_argument("--rate", type=int, default=0,
                    help="steady state on weir-fastpath's test clock: this many queries per simulated second "
                         "(--count is then unused; default 0: one closed-loop run of --count)")
    ap.add_argument("--simulated-seconds", type=int, default=240,
                    help="with --rate: simulated seconds to run (default 240, four TTLs of the model)")
    ap.add_argument("--warmup-seconds", type=int, default=60,
                    help="with --rate: simulated seconds not counted in the figures (default 60, one TTL)")
    ap.add_argument("--series-out", default="",
                    help="with --rate: the per-second CSV (default: --out with _series before .csv)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (configs, logs, JSON)")
    args = ap.parse_args()
    if args.quick:
        args.names, args.count = 10000, 100000
        if args.rate:
            args.simulated_seconds, args.warmup_seconds = min(args.simulated_seconds, 20), 0
    if args.rate and not 0 <= args.warmup_seconds < args.simulated_seconds:
        ap.error("--warmup-seconds must be below --simulated-seconds")
    if not args.series_out:
        args.series_out = re.sub(r"(\.csv)?$", "_series.csv", args.out, count=1)
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    for s in strategies:
        if s not in STRATEGIES:
            ap.error(f"unknown strategy {s!r} (known: {', '.join(STRATEGIES)})")
    build = os.path.abspath(args.build_dir)

    workdir = tempfile.mkdtemp(prefix="cache-study-")
    rows, series = [], []
    try:
        config = os.path.join(workdir, "segments.toml")
        static_config(args.config, config, args.scope)
        citymap = os.path.join(workdir, "citymap.csv")
        p = subprocess.run([binary(build, "bench/gslb_sim/gslb-sim"), "--config", config, "--segments-citymap"],
                           capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise SetupError(f"gslb-sim --segments-citymap: {p.stderr.strip()}")
        with open(citymap, "w") as f:
            f.write(p.stdout)
        t0 = time.time()
        for s in strategies:
            row, rows_series = run_strategy(s, args, build, workdir, config, citymap)
            rows.append(row)
            series += rows_series
            # After each strategy, so an interrupted study keeps what it measured.
            write_csv(args.out, rows)
            if args.rate:
                write_csv(args.series_out, series, SERIES_FIELDS)
        log(f"all strategies in {time.time() - t0:.0f} s")
    except SetupError as e:
        log(f"cache_study: {e} (work directory {workdir})")
        return 1
    except KeyboardInterrupt:
        log(f"cache_study: interrupted; {len(rows)} strategies done, in {args.out}")
        return 1
    finally:
        if args.keep or not rows:
            log(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    os.makedirs(args.plot_dir, exist_ok=True)
    if args.rate:
        title = (f"{args.names} names, zipf {args.zipf}, {args.rate} queries per simulated second, "
                 f"seconds {args.warmup_seconds + 1}-{args.simulated_seconds}")
    else:
        title = f"{args.names} names, zipf {args.zipf}, {args.count} queries"
    if args.scope:
        title += f", GSLB scope {args.scope}"
    files = plot(rows, args.plot_dir, title, args.plot_prefix)
    if args.rate:
        files += plot_series(series, args.plot_dir, title, args.plot_prefix)
    print(",".join(FIELDS))
    for r in rows:
        print(",".join(str(r[k]) for k in FIELDS))
    print(f"csv: {args.out}; plots: {len(files)} files in {args.plot_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
