#!/usr/bin/env python3
"""A bounded soak of a whole weir node on loopback: does memory or the
descriptor count creep under mixed load with tag pushes, recursor restarts
and cache churn?

What runs (every process started here, stopped by its PID):
  * a fake DNS hierarchy of gslb-sim instances on 127.0.77.x:53 (root, TLD
    "example.", the zone "soak.example." with N names and a wildcard under
    miss.soak.example. for unique-name misses), as the integration tests use;
  * weir-mgmt, and two weir-recursors resolving from the root hints, each a
    mgmt node with a small answer cache (cache.max_entries) so it evicts;
  * weir-fastpath over both recursors, a mgmt node, with a small cache
    budget (cache.bytes) so the unique names churn it;
  * weir-bench, open loop: hits on the N names plus a share of unique names
    (every one a miss down to the authoritative);
  * every --push-every seconds a tag push (weirctl tag add, then rm on the
    next one) that reaches the three nodes;
  * every --restart-every seconds kill -9 of one recursor (in turn) and a
    restart on the same port, from its persisted mgmt snapshot.

Every second, VmRSS (/proc/PID/status) and the open descriptors
(/proc/PID/fd) of every daemon go to the CSV (--out). At the end: per
daemon, RSS and fds at the end of the warm-up, the maximum, the last value
and the slope of a least-squares line over the samples after the warm-up
(per life for a restarted recursor), and weir-bench's queries, answers and
loss. --plot DIR draws RSS and fds over time with gnuplot when it is there.

Run (root: the hierarchy binds port 53 on 127.0.77.x):
  python3 bench/soak.py --build-dir build --duration 600 --out soak.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import weirtest  # noqa: E402
from weirtest.authorities import FakeHierarchy  # noqa: E402
from weirtest.zones import record  # noqa: E402

ZONE = "soak.example."
CITYMAP = "# cidr,city,ecs_address/prefix\n127.1.0.0/16,city-a,198.51.100.0/24\n127.2.0.0/16,city-b,203.0.113.0/24\n"


def log(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def zone_body(names: int) -> str:
    text = ""
    for i in range(names):
        for k in range(1 + i % 4):  # 1..4 addresses: entries of several sizes
            text += record(f"n{i}", "A", f"10.{k}.{(i >> 8) & 0xff}.{i & 0xff}", ttl=300)
    text += record("*.miss", "A", "192.0.2.1", ttl=300)
    return text


def read_rss_kb(pid: int):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def count_fds(pid: int):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def slope_per_minute(points):
    """Least-squares slope of [(t seconds, value)] in value per minute (None for < 2 points)."""
    n = len(points)
    if n < 2:
        return None
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return None
    return 60.0 * sum((t - mt) * (v - mv) for t, v in points) / var


class Soak:
    def __init__(self, args):
        self.args = args
        self.build = os.path.abspath(args.build_dir)
        self.dir = tempfile.mkdtemp(prefix="weir-soak-")
        self.hier = None
        self.mgmt = None
        self.recursors = [None, None]
        self.rec_ports = []
        self.rec_configs = []
        self.fastpath = None
        self.bench = None
        self.restarts = [0, 0]
        self.lives = [0, 0]  # life number of each recursor slot
        self.pushes = 0
        self.push_failures = 0

    # --------------------------------------------------------------- set-up
    def start(self):
        a = self.args
        log(f"workdir {self.dir}")
        self.hier = FakeHierarchy(self.build, net=a.net, zones={ZONE: zone_body(a.names)})
        self.mgmt = weirtest.Mgmt(self.build, self.dir, metrics=True)
        with open(os.path.join(self.dir, "cities.csv"), "w") as f:
            f.write(CITYMAP)
        r = self.mgmt.weirctl("citymap", "import", os.path.join(self.dir, "cities.csv"))
        if r.returncode != 0:
            raise RuntimeError(f"weirctl citymap import: {r.stderr}")
        for slot in range(2):
            port = weirtest.free_port()
            self.rec_ports.append(port)
            config = weirtest.recursor_config(
                root_hints=self.hier.root_hints, listen=[f"127.0.0.1:{port}"],
                server={"metrics_listen": "127.0.0.1:0"}, cache={"max_entries": a.recursor_entries}) + \
                weirtest.mgmt_node_section(self.mgmt.address, f"rec-{slot + 1}", self.mgmt.token_file,
                                           os.path.join(self.dir, f"rec-{slot + 1}-state"))
            path = os.path.join(self.dir, f"recursor-{slot + 1}.toml")
            with open(path, "w") as f:
                f.write(config)
            self.rec_configs.append(path)
            self.start_recursor(slot)
        config = weirtest.fastpath_config([f"127.0.0.1:{p}" for p in self.rec_ports],
                                          cache={"bytes": a.fastpath_cache_bytes},
                                          server={"workers": a.workers}) + \
            weirtest.mgmt_node_section(self.mgmt.address, "fp-1", self.mgmt.token_file,
                                       os.path.join(self.dir, "fp-state"))
        self.fastpath = weirtest.Fastpath(self.build, config)
        # Everything answers before the load starts.
        for _ in range(100):
            r = weirtest.dig("127.0.0.1", self.fastpath.port, f"n1.{ZONE}", "A", norec=False, timeout=1.0, tries=1)
            if r.status == "NOERROR" and r.addresses():
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("weir-fastpath does not answer n1." + ZONE)

    def start_recursor(self, slot: int):
        # Not weirtest.Recursor: that writes its config to a temp file it
        # removes on stop, and a killed recursor restarts from the same one.
        argv = [weirtest.binary(self.build, "recursor/weir-recursor"), "-c", self.rec_configs[slot]]
        p = weirtest.Process(argv, ready=r"^ready$", timeout=30)
        self.recursors[slot] = p
        self.lives[slot] += 1

    def kill_and_restart(self, slot: int):
        p = self.recursors[slot]
        os.kill(p.pid, signal.SIGKILL)
        p.proc.wait(timeout=10)
        p.stop()  # reaps and closes its pipes
        self.restarts[slot] += 1
        # The port can be taken for a moment by nothing else (loopback, ours).
        for attempt in range(50):
            try:
                self.start_recursor(slot)
                return
            except RuntimeError as e:
                if attempt == 49:
                    raise
                log(f"recursor-{slot + 1} restart: {str(e)[:200]}; again")
                time.sleep(0.2)

    def push_tag(self):
        # Alternately add and remove a tag: each is a new version pushed to
        # every node, which applies it (RCU snapshot swap) and ACKs.
        name = f"t{self.pushes // 2}.tags.example"
        if self.pushes % 2 == 0:
            r = self.mgmt.weirctl("tag", "add", name, "weight=on", "ecs=on", "answer=single", "level=city")
        else:
            r = self.mgmt.weirctl("tag", "rm", f"t{(self.pushes - 1) // 2}.tags.example")
        self.pushes += 1
        if r.returncode != 0:
            self.push_failures += 1
            log(f"weirctl: {r.stderr.strip()[:200]}")

    def start_load(self):
        a = self.args
        exe = weirtest.binary(self.build, "bench/weir_bench/weir-bench")
        self.bench_json = os.path.join(self.dir, "weir-bench.json")
        argv = [exe, "--server", f"127.0.0.1:{self.fastpath.port}", "--names", str(a.names), "--zone", ZONE,
                "--miss-fraction", str(a.miss_fraction), "--tcp-fraction", str(a.tcp_fraction), "--rate", str(a.rate), "--duration", str(a.duration),
                "--timeout", "2000", "--json", self.bench_json, "--progress", "never"]
        self.bench_out = open(os.path.join(self.dir, "weir-bench.out"), "w")
        self.bench = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.bench_out,
                                      stderr=subprocess.STDOUT)

    # ------------------------------------------------------------- the run
    def daemons(self):
        """[(name, life, pid)] of the daemons now."""
        out = [("weir-fastpath", 1, self.fastpath.pid), ("weir-mgmt", 1, self.mgmt.pid)]
        for slot, p in enumerate(self.recursors):
            out.append((f"weir-recursor-{slot + 1}", self.lives[slot], p.pid))
        return out

    def run(self):
        a = self.args
        self.samples = []  # (t, daemon, life, pid, rss_kb, fds)
        start = time.monotonic()
        next_push = a.push_every
        next_restart = a.restart_every
        restart_slot = 0
        self.start_load()
        log(f"load: {a.rate} qps for {a.duration} s ({a.miss_fraction:.0%} unique names), "
            f"tag push every {a.push_every} s, a recursor killed every {a.restart_every} s")
        with open(a.out, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["t", "daemon", "life", "pid", "rss_kb", "fds"])
            tick = 0
            while True:
                t = time.monotonic() - start
                if t >= a.duration:
                    break
                for name, life, pid in self.daemons():
                    rss, fds = read_rss_kb(pid), count_fds(pid)
                    if rss is None or fds is None:
                        continue
                    self.samples.append((t, name, life, pid, rss, fds))
                    w.writerow([f"{t:.1f}", name, life, pid, rss, fds])
                f.flush()
                if a.push_every > 0 and t >= next_push:
                    self.push_tag()
                    next_push += a.push_every
                if a.restart_every > 0 and t >= next_restart:
                    log(f"kill -9 recursor-{restart_slot + 1} (pid {self.recursors[restart_slot].pid})")
                    self.kill_and_restart(restart_slot)
                    restart_slot = 1 - restart_slot
                    next_restart += a.restart_every
                for name, _, pid in self.daemons():
                    if name != "weir-fastpath" and name != "weir-mgmt":
                        continue
                    if read_rss_kb(pid) is None:
                        raise RuntimeError(f"{name} (pid {pid}) died")
                if self.bench.poll() is not None and t < a.duration - 5:
                    raise RuntimeError(f"weir-bench exited early ({self.bench.returncode}); "
                                       f"see {self.bench_out.name}")
                tick += 1
                time.sleep(max(0.0, start + tick - time.monotonic()))
        try:
            self.bench.wait(timeout=60)
        except subprocess.TimeoutExpired:
            weirtest.stop_pid(self.bench)

    # ----------------------------------------------------------- the report
    def summary(self, with_run=True):
        a = self.args
        print(f"soak: {a.duration} s, warm-up {a.warmup} s, {a.rate} qps, miss fraction {a.miss_fraction}, "
              f"fastpath cache.bytes {a.fastpath_cache_bytes}, recursor cache.max_entries {a.recursor_entries}")
        if with_run:
            print(f"tag pushes {self.pushes} ({self.push_failures} failed), recursor restarts "
                  f"{self.restarts[0]} + {self.restarts[1]}")
        hdr = (f"{'daemon':<20} {'RSS@warm':>9} {'max':>9} {'last':>9} {'slope':>10}   "
               f"{'fds@warm':>8} {'max':>5} {'last':>5} {'slope':>9}")
        print(hdr)
        print(f"{'':<20} {'MiB':>9} {'MiB':>9} {'MiB':>9} {'KiB/min':>10}   {'':>8} {'':>5} {'':>5} {'/min':>9}")
        names = sorted({s[1] for s in self.samples})
        self.report = {}
        for name in names:
            rows = [s for s in self.samples if s[1] == name]
            lives = sorted({s[2] for s in rows})
            for life in lives:
                lr = [s for s in rows if s[2] == life]
                t0 = lr[0][0]
                # A restarted recursor warms up again from its restart.
                warm_end = max(a.warmup, t0 + (a.life_warmup if life > 1 else 0))
                warm = [s for s in lr if s[0] >= warm_end]
                if len(warm) < 10:
                    continue
                rss = [(s[0], s[4]) for s in warm]
                fds = [(s[0], s[5]) for s in warm]
                label = name if len(lives) == 1 else f"{name}#{life}"
                r = {
                    "rss_warm_kb": rss[0][1], "rss_max_kb": max(v for _, v in rss), "rss_last_kb": rss[-1][1],
                    "rss_slope_kb_per_min": slope_per_minute(rss), "fds_warm": fds[0][1],
                    "fds_max": max(v for _, v in fds), "fds_last": fds[-1][1],
                    "fds_slope_per_min": slope_per_minute(fds), "seconds": rss[-1][0] - rss[0][0],
                }
                self.report[label] = r
                print(f"{label:<20} {r['rss_warm_kb'] / 1024:9.1f} {r['rss_max_kb'] / 1024:9.1f} "
                      f"{r['rss_last_kb'] / 1024:9.1f} {r['rss_slope_kb_per_min']:10.1f}   "
                      f"{r['fds_warm']:8d} {r['fds_max']:5d} {r['fds_last']:5d} {r['fds_slope_per_min']:9.3f}"
                      f"   ({r['seconds']:.0f} s)")
        if not with_run:
            return
        try:
            with open(self.bench_json) as f:
                b = json.load(f)
            self.report["weir-bench"] = b
            print(f"weir-bench: sent {b['sent']}, answered {b['answered']}, timed out {b['timeouts']} "
                  f"(loss {b['loss_pct']:.3f} %), rcodes {b.get('rcodes')}")
        except (OSError, ValueError) as e:
            print(f"weir-bench: no JSON report ({e})")
        try:
            m = self.fastpath.metrics()
            print("weir-fastpath: hits {:.0f}, misses {:.0f}, cache memory {:.1f} MiB of a {:.1f} MiB budget, "
                  "slab drains {:.0f}, inserts refused while reclaiming {:.0f}".format(
                      m.value("weir_cache_hits_total"), m.value("weir_cache_misses_total"),
                      m.value("weir_cache_memory_bytes") / 1048576, m.value("weir_cache_budget_bytes") / 1048576,
                      m.value("weir_cache_slab_drains_total"),
                      m.value("weir_cache_insert_refused_total", reason="reclaiming")))
            if m.series("weir_allocator_allocated_bytes"):
                print("weir-fastpath allocator: allocated {:.1f} MiB, resident {:.1f} MiB".format(
                    m.value("weir_allocator_allocated_bytes") / 1048576,
                    m.value("weir_allocator_resident_bytes") / 1048576))
        except Exception as e:  # the figures above stand without it
            print(f"weir-fastpath metrics: {e}")

    def plot(self, outdir):
        if shutil.which("gnuplot") is None:
            log("no gnuplot: no plots")
            return
        os.makedirs(outdir, exist_ok=True)
        names = sorted({s[1] for s in self.samples})
        for column, what in ((4, "rss"), (5, "fds")):
            data = []
            for name in names:
                path = os.path.join(outdir, f"{name}.dat")
                with open(path, "w") as f:
                    for s in self.samples:
                        if s[1] == name:
                            f.write(f"{s[0]:.1f} {s[column] / 1024 if what == 'rss' else s[column]}\n")
                data.append(f"'{path}' using 1:2 with lines title '{name}'")
            script = (f"set terminal pngcairo size 1000,500\nset output '{outdir}/{what}.png'\n"
                      f"set xlabel 'seconds'\nset ylabel '{'RSS MiB' if what == 'rss' else 'open fds'}'\n"
                      f"plot {', '.join(data)}\n")
            subprocess.run(["gnuplot"], input=script.encode(), timeout=60, check=False)
        log(f"plots in {outdir}")

    def stop(self):
        if self.bench is not None and self.bench.poll() is None:
            weirtest.stop_pid(self.bench)
        for p in [self.fastpath] + self.recursors + [self.mgmt]:
            if p is not None:
                try:
                    p.stop()
                except Exception as e:
                    log(f"stop: {e}")
        if self.hier is not None:
            self.hier.stop()
        if not self.args.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    ap.add_argument("--duration", type=int, default=600, help="seconds of load (default 600)")
    ap.add_argument("--warmup", type=int, default=0, help="seconds before the flatness figures (default: a sixth)")
    ap.add_argument("--out", default="soak.csv", help="CSV of the samples (t,daemon,life,pid,rss_kb,fds)")
    ap.add_argument("--rate", type=int, default=2000, help="queries per second, open loop")
    ap.add_argument("--names", type=int, default=5000, help="names in the zone (the hits)")
    ap.add_argument("--miss-fraction", type=float, default=0.3, help="share of unique names (misses)")
    ap.add_argument("--tcp-fraction", type=float, default=0.02, help="share of queries over TCP")
    ap.add_argument("--push-every", type=float, default=10, help="seconds between tag pushes (0: none)")
    ap.add_argument("--restart-every", type=float, default=60,
                    help="seconds between kill -9 of a recursor, in turn (0: none)")
    ap.add_argument("--fastpath-cache-bytes", type=int, default=4 << 20, help="weir-fastpath cache.bytes")
    ap.add_argument("--recursor-entries", type=int, default=5000, help="weir-recursor cache.max_entries")
    ap.add_argument("--workers", type=int, default=1, help="weir-fastpath server.workers")
    ap.add_argument("--net", default="127.0.77", help="the fake hierarchy's /24 on loopback")
    ap.add_argument("--plot", help="directory for gnuplot PNGs of RSS and fds")
    ap.add_argument("--json", help="the summary as JSON")
    ap.add_argument("--life-warmup", type=int, default=20,
                    help="seconds after a recursor's restart before its flatness figures (default 20)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (configs, logs)")
    ap.add_argument("--summarize", metavar="CSV", help="only print the summary of an earlier run's CSV")
    a = ap.parse_args()
    if a.warmup <= 0:
        a.warmup = max(10, a.duration // 6)
    soak = Soak(a)
    if a.summarize:
        with open(a.summarize) as f:
            soak.samples = [(float(r["t"]), r["daemon"], int(r["life"]), int(r["pid"]), int(r["rss_kb"]),
                             int(r["fds"])) for r in csv.DictReader(f)]
        shutil.rmtree(soak.dir, ignore_errors=True)
        soak.summary(with_run=False)
        if a.plot:
            soak.plot(a.plot)
        return
    try:
        soak.start()
        soak.run()
        soak.summary()
        if a.plot:
            soak.plot(a.plot)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(soak.report, f, indent=1)
    finally:
        soak.stop()


if __name__ == "__main__":
    main()
