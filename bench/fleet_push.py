#!/usr/bin/env python3
"""The fleet: how fast a weir-mgmt change reaches the nodes, on SQLite (one
weir-mgmt) and on etcd (a 3-member cluster, two weir-mgmt instances), with
real nodes and with 1000 simulated ones (docs/mgmt.md; figures in
bench/RESULTS.md, "The fleet").

Steps (--steps):
  sqlite8, etcd8   8 real weir-fastpath processes (gslb-sim upstream, [mgmt]
                   with a state_dir each). --pushes changes, one every
                   --interval-ms, each the real `weirctl tag add
                   fleetN.example ecs=on` (a subprocess; the time it returns
                   is taken when the process has exited). A node has applied a
                   version when its state_dir/snapshot file with that version
                   is renamed into place (NodeClient stores the snapshot right
                   after the apply function swapped it in, and before it ACKs;
                   the metric weir_mgmt_snapshot_version moves at the same
                   point). The renames are watched with inotify (IN_MOVED_TO
                   on each state_dir, through ctypes: Python's stdlib has no
                   inotify module), stamped with time.monotonic() by a thread
                   blocked in select() on the inotify descriptor, and the
                   version read back from the file: no polling interval, no
                   CPU spent waiting. Latency = that stamp - weirctl's return;
                   weir-mgmt queues the snapshots before it replies, so a node
                   can be faster than weirctl's exit and a latency negative.
                   A node that gets a newer version first (weir-mgmt sends a
                   busy node only the newest) counts as having applied the
                   older one then.
                   etcd: nodes alternate between the instances (node i lists
                   mgmt-a, mgmt-b in turn order i mod 2 first), every push is
                   committed through mgmt-a, so half the nodes get it through
                   mgmt-b's etcd watch.
  sqlite1000,      bench's mgmt-fleet-sim (mgmt_fleet_sim.cc): --sim-nodes
  etcd1000         NodeClients in one process (--sim-apply none by default:
                   accepted at once; parse builds the changed parts as a node
                   does), --pushes tag-adds of its own; p50 /
                   p90 / p99 / max push -> applied after the reply, fleet
                   convergence, weir-mgmt CPU seconds and RSS over the pushes.
                   etcd: split across the two instances, pushes through mgmt-a.
  rss100k          one real weir-fastpath; VmRSS (/proc/PID/status) sampled
                   every 10 ms from before `weirctl tag import` of a
                   100,000-line tags file until 1 s after the node stored the
                   version: baseline, peak, after (and weir-mgmt's too).

A benchmark, not a test: it prints a table (and --out FILE as JSON) and
exits non-zero only when the set-up fails.

  python3 bench/fleet_push.py --build build-ci/helper3 --out /tmp/fleet.json
  python3 bench/fleet_push.py --build build-ci/helper3 --steps sqlite8 --pushes 5
"""

import argparse
import ctypes
import ctypes.util
import hashlib
import json
import os
import select
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import weirtest  # noqa: E402
from weirtest.zones import gslb_name, no_empty_weight_option, record, view, zone  # noqa: E402

ZONES = (no_empty_weight_option() + zone("cdn.example.net.", rname="admin", minimum=30, ttl=60) +
         gslb_name("x", view("198.51.100.0/24", ["192.0.2.11", "192.0.2.12"], [3, 1], scope=24), ttl=300) +
         zone("plain.example.", minimum=30, ttl=60) + record("www", "A", "192.0.2.80", ttl=300))
CITYMAP = "127.1.0.0/16,city-a,198.51.100.0/24\n127.2.0.0/16,city-b,203.0.113.0/24\n"
SEED_TAG = ("cdn.example.net", "weight=on", "ecs=on", "answer=single", "level=city")
ALL_STEPS = ["sqlite8", "etcd8", "sqlite1000", "etcd1000", "rss100k"]


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def percentile(values, q):
    """Nearest rank, as mgmt-fleet-sim computes it."""
    if not values:
        return None
    v = sorted(values)
    rank = max(1, int(-(-q * len(v) // 1)))
    return v[min(rank, len(v)) - 1]


def rnd(x):
    return None if x is None else round(x, 3)


# ---------------------------------------------------------------- inotify
class RenameWatch:
    """inotify IN_MOVED_TO on each node's state_dir (libc through ctypes).
    A thread blocks in select() on the descriptor and stamps each batch of
    events with time.monotonic(); for each rename of `snapshot` it reads the
    version from the file. events[node] = [(version, stamp)]."""

    IN_MOVED_TO = 0x80
    IN_CLOEXEC = 0o2000000
    IN_NONBLOCK = 0o4000

    def __init__(self, dirs):
        self.libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self.fd = self.libc.inotify_init1(self.IN_CLOEXEC | self.IN_NONBLOCK)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.wd = {}
        self.dirs = dirs
        self.events = {node: [] for node in dirs}
        self.lock = threading.Lock()
        for node, d in dirs.items():
            wd = self.libc.inotify_add_watch(self.fd, d.encode(), self.IN_MOVED_TO)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {d}")
            self.wd[wd] = node
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop:
            r, _, _ = select.select([self.fd], [], [], 0.1)
            if not r:
                continue
            stamp = time.monotonic()
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                continue
            pos = 0
            while pos + 16 <= len(data):
                wd, mask, _cookie, n = struct.unpack_from("iIII", data, pos)
                name = data[pos + 16:pos + 16 + n].rstrip(b"\0")
                pos += 16 + n
                node = self.wd.get(wd)
                if node is None or name != b"snapshot" or not (mask & self.IN_MOVED_TO):
                    continue
                try:
                    version = snapshot_version(os.path.join(self.dirs[node], "snapshot"))
                except (OSError, ValueError):
                    continue
                with self.lock:
                    self.events[node].append((version, stamp))

    def applied_at(self, node, version):
        """When `node` first stored `version` or a newer one; None: not yet."""
        with self.lock:
            for v, t in self.events[node]:
                if v >= version:
                    return t
        return None

    def close(self):
        self._stop = True
        self._thread.join(timeout=2)
        os.close(self.fd)


def snapshot_version(path):
    """The version of a node's stored snapshot: "weir-snapshot/1\\n", a
    checksum line, then the SNAPSHOT frame (u32 length, type byte, fields of
    u32 length + bytes; the first is the version)."""
    with open(path, "rb") as f:
        head = f.read(4096)
    magic, _checksum, body = head.split(b"\n", 2)
    if magic != b"weir-snapshot/1":
        raise ValueError(magic)
    (n,) = struct.unpack(">I", body[5:9])
    return int(body[9:9 + n])


# ---------------------------------------------------------------- /proc
def proc_rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def proc_hwm_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- set-up
class Fleet:
    """gslb-sim, the store (SQLite: one weir-mgmt; etcd: 3 members, two
    weir-mgmt), seeded with a city map and one tag; stop() stops all by PID."""

    def __init__(self, build, store):
        self.build = build
        self.store = store
        self.dir = tempfile.mkdtemp(prefix=f"weir-fleet-{store}-")
        self.stack = []
        self.nodes = {}  # node id -> (Fastpath, state_dir)
        try:
            self.sim = weirtest.GslbSim(build, config_text=ZONES)
            self.stack.append(self.sim)
            if store == "etcd":
                self.etcd = weirtest.EtcdCluster(self.dir)
                self.stack.append(self.etcd)
                self.mgmts = [weirtest.Mgmt(build, self.dir, etcd=self.etcd.endpoints, instance=f"mgmt-{n}",
                                            config_name=f"mgmt-{n}.toml") for n in ("a", "b")]
            else:
                self.etcd = None
                self.mgmts = [weirtest.Mgmt(build, self.dir)]
            self.stack.extend(self.mgmts)
            citymap = os.path.join(self.dir, "cities.csv")
            with open(citymap, "w") as f:
                f.write(CITYMAP)
            self.commit("citymap", "import", citymap)
            self.commit("tag", "add", *SEED_TAG)
        except Exception:
            self.stop()
            raise

    @property
    def token_file(self):
        return self.mgmts[0].token_file

    def weirctl_argv(self, *args, mgmt=0):
        return [weirtest.binary(self.build, "mgmt/weirctl"), "--server", self.mgmts[mgmt].address,
                "--token-file", self.token_file, "--actor", "fleet-bench", "--json", *args]

    def commit(self, *args, timeout_ms=10000):
        r = subprocess.run(self.weirctl_argv("--timeout-ms", str(timeout_ms), *args), capture_output=True,
                           text=True, timeout=timeout_ms / 1000 + 30)
        if r.returncode != 0:
            raise RuntimeError(f"weirctl {' '.join(args)}: rc {r.returncode}: {r.stderr}")
        return json.loads(r.stdout)["version"]

    def store_version(self):
        return self.mgmts[0].weirctl_json("status")["version"]

    def start_fastpath(self, i):
        node_id = f"fp-{i}"
        state = os.path.join(self.dir, f"{node_id}-state")
        os.makedirs(state, exist_ok=True)
        addresses = [m.address for m in self.mgmts]
        addresses = addresses[i % len(addresses):] + addresses[:i % len(addresses)]
        config = weirtest.fastpath_config([f"{self.sim.host}:{self.sim.port}"]) + weirtest.mgmt_node_section(
            addresses, node_id, self.token_file, state)
        fp = weirtest.Fastpath(self.build, config, timeout=20.0)
        self.stack.append(fp)
        self.nodes[node_id] = (fp, state)
        return node_id

    def wait_nodes(self, version, timeout=20.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            behind = []
            for node_id, (_, state) in self.nodes.items():
                try:
                    if snapshot_version(os.path.join(state, "snapshot")) < version:
                        behind.append(node_id)
                except (OSError, ValueError):
                    behind.append(node_id)
            if not behind:
                return
            time.sleep(0.02)
        raise RuntimeError(f"nodes {behind} not at version {version} within {timeout}s")

    def stop(self):
        for p in reversed(self.stack):
            try:
                p.stop()
            except Exception as e:  # noqa: BLE001 - stop the rest anyway
                log(f"stopping {p}: {e!r}")
        self.stack = []
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------- steps
def step_real(build, store, args):
    fleet = Fleet(build, store)
    try:
        for i in range(args.real_nodes):
            fleet.start_fastpath(i)
        fleet.wait_nodes(fleet.store_version())
        watch = RenameWatch({n: s for n, (_, s) in fleet.nodes.items()})
        mgmt_pids = [m.pid for m in fleet.mgmts]
        cpu_before = [proc_cpu_s(p) for p in mgmt_pids]
        nonce = int(time.time()) % 100000000
        pushes = []
        try:
            for k in range(args.pushes):
                t0 = time.monotonic()
                r = subprocess.run(fleet.weirctl_argv("tag", "add", f"fleet{nonce}x{k}.example", "ecs=on"),
                                   capture_output=True, text=True, timeout=30)
                t1 = time.monotonic()
                if r.returncode != 0:
                    raise RuntimeError(f"weirctl tag add: rc {r.returncode}: {r.stderr}")
                pushes.append({"version": json.loads(r.stdout)["version"], "start": t0, "returned": t1})
                time.sleep(max(0.0, t0 + args.interval_ms / 1000 - time.monotonic()))
            last = pushes[-1]
            deadline = last["returned"] + args.timeout_ms / 1000
            while time.monotonic() < deadline:
                if all(watch.applied_at(n, last["version"]) is not None for n in fleet.nodes):
                    break
                time.sleep(0.01)
            time.sleep(0.05)
        finally:
            watch.close()
        cpu = [proc_cpu_s(p) - b for p, b in zip(mgmt_pids, cpu_before)]
        lat, conv, never, rows = [], [], 0, []
        for k, p in enumerate(pushes):
            per = []
            for n in fleet.nodes:
                t = watch.applied_at(n, p["version"])
                if t is None or (t - p["returned"]) * 1000 > args.timeout_ms:
                    never += 1
                    continue
                per.append((t - p["returned"]) * 1000)
            lat.extend(per)
            if len(per) == len(fleet.nodes):
                conv.append(max(per))
            rows.append({"push": k + 1, "version": p["version"],
                         "weirctl_ms": rnd((p["returned"] - p["start"]) * 1000),
                         "first_ms": rnd(min(per)) if per else None, "last_ms": rnd(max(per)) if per else None,
                         "applied": len(per)})
        # By the instance each node lists first (node i: mgmt i mod M; the
        # pushes go through mgmt 0).
        by_mgmt = {}
        for j, m in enumerate(fleet.mgmts):
            v = []
            for n in fleet.nodes:
                if int(n.split("-")[1]) % len(fleet.mgmts) != j:
                    continue
                for p in pushes:
                    t = watch.applied_at(n, p["version"])
                    if t is not None and (t - p["returned"]) * 1000 <= args.timeout_ms:
                        v.append((t - p["returned"]) * 1000)
            by_mgmt[m.address + (" (pushed through)" if j == 0 else "")] = {
                "samples": len(v), "p50": rnd(percentile(v, 0.5)), "p99": rnd(percentile(v, 0.99)),
                "max": rnd(max(v) if v else None)}
        return {
            "step": f"{store}{args.real_nodes}", "store": store, "nodes": args.real_nodes, "kind": "real",
            "pushes": rows,
            "latency_ms": {"samples": len(lat), "p50": rnd(percentile(lat, 0.5)), "p90": rnd(percentile(lat, 0.9)),
                           "p99": rnd(percentile(lat, 0.99)), "max": rnd(max(lat) if lat else None),
                           "min": rnd(min(lat) if lat else None)},
            "convergence_ms": {"pushes": len(conv), "p50": rnd(percentile(conv, 0.5)),
                               "p99": rnd(percentile(conv, 0.99)), "max": rnd(max(conv) if conv else None)},
            "weirctl_ms": {"p50": rnd(percentile([r["weirctl_ms"] for r in rows], 0.5)),
                           "max": rnd(max(r["weirctl_ms"] for r in rows))},
            "latency_ms_by_mgmt": by_mgmt,
            "never_applied_pairs": never,
            "mgmt_cpu_s": [round(c, 3) for c in cpu],
        }
    finally:
        fleet.stop()


def step_sim(build, store, args):
    fleet = Fleet(build, store)
    try:
        argv = [weirtest.binary(build, "bench/mgmt-fleet-sim"), "--mgmt", ",".join(m.address for m in fleet.mgmts),
                "--token-file", fleet.token_file, "--nodes", str(args.sim_nodes), "--pushes", str(args.pushes),
                "--interval-ms", str(args.sim_interval_ms), "--timeout-ms", str(args.timeout_ms),
                "--ramp-ms", str(args.sim_ramp_ms), "--apply",
                args.sim_apply, "--push-to", "0", "--mgmt-pid", ",".join(str(m.pid) for m in fleet.mgmts),
                "--json"]
        log(" ".join(argv))
        r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"mgmt-fleet-sim: rc {r.returncode}: {r.stderr[-3000:]}")
        out = json.loads(r.stdout)
        out.update({"step": f"{store}{args.sim_nodes}", "store": store, "kind": "simulated"})
        return out
    finally:
        fleet.stop()


def step_rss100k(build, args):
    fleet = Fleet(build, "sqlite")
    try:
        node_id = fleet.start_fastpath(0)
        fleet.wait_nodes(fleet.store_version())
        fp, state = fleet.nodes[node_id]
        tags = os.path.join(fleet.dir, "tags-100k.txt")
        with open(tags, "w") as f:
            f.write(" ".join(SEED_TAG) + "\n")
            for i in range(args.rss_tags - 1):
                f.write(f"t{i}.zone{i % 997}.example ecs=on\n")
        watch = RenameWatch({node_id: state})
        mgmt_pid = fleet.mgmts[0].pid
        samples, msamples = [], []
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                t = time.monotonic()
                try:
                    samples.append((t, proc_rss_kb(fp.pid)))
                    msamples.append((t, proc_rss_kb(mgmt_pid)))
                except OSError:
                    pass
                stop.wait(0.01)

        sampler = threading.Thread(target=sample, daemon=True)
        # VmHWM from here on (proc(5) clear_refs "5"), not the start-up's.
        for pid in (fp.pid, mgmt_pid):
            try:
                with open(f"/proc/{pid}/clear_refs", "w") as f:
                    f.write("5")
            except OSError:
                pass
        try:
            sampler.start()
            time.sleep(0.5)
            t0 = time.monotonic()
            version = fleet.commit("tag", "import", tags, timeout_ms=120000)
            t1 = time.monotonic()
            deadline = t1 + 60
            applied = None
            while time.monotonic() < deadline and applied is None:
                applied = watch.applied_at(node_id, version)
                time.sleep(0.005)
            time.sleep(1.0)
        finally:
            stop.set()
            sampler.join(timeout=2)
            watch.close()
        base = [kb for t, kb in samples if t < t0]
        mbase = [kb for t, kb in msamples if t < t0]
        window = [kb for t, kb in samples if t >= t0]
        mwindow = [kb for t, kb in msamples if t >= t0]
        with open(os.path.join(state, "snapshot"), "rb") as f:
            snapshot_bytes = len(f.read())
        return {
            "step": "rss100k", "store": "sqlite", "tags": args.rss_tags, "version": version,
            "tags_file_bytes": os.path.getsize(tags), "snapshot_file_bytes": snapshot_bytes,
            "weirctl_ms": round((t1 - t0) * 1000, 1),
            "applied_after_weirctl_ms": None if applied is None else round((applied - t1) * 1000, 1),
            "samples": len(samples),
            "node_rss_kb": {"baseline": int(statistics.median(base)) if base else None,
                            "peak": max(window) if window else None, "after": samples[-1][1] if samples else None,
                            "vmhwm_since_import": proc_hwm_kb(fp.pid)},
            "mgmt_rss_kb": {"baseline": int(statistics.median(mbase)) if mbase else None,
                            "peak": max(mwindow) if mwindow else None, "vmhwm": proc_hwm_kb(mgmt_pid),
                            "after": msamples[-1][1] if msamples else None},
        }
    finally:
        fleet.stop()


# ---------------------------------------------------------------- report
def print_table(results):
    print(f"\n{'step':<12} {'nodes':>6} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8} {'conv p50':>9} "
          f"{'conv max':>9} {'never':>6} {'mgmt CPU s':>11} {'mgmt peak RSS':>14}")
    for r in results:
        if r["step"] == "rss100k":
            continue
        lat, conv = r["latency_ms"], r["convergence_ms"]

        def f(x):
            return "-" if x is None else f"{x:.1f}"

        if r["kind"] == "simulated":
            cpu = "+".join(f"{m['cpu_s']:.2f}" for m in r["mgmt_processes"])
            rss = "/".join(f"{m['rss_peak_sampled_kb'] // 1024}M" for m in r["mgmt_processes"])
            never = r["never_applied"]["pairs"]
        else:
            cpu = "+".join(f"{c:.2f}" for c in r["mgmt_cpu_s"])
            rss = "-"
            never = r["never_applied_pairs"]
        print(f"{r['step']:<12} {r['nodes']:>6} {f(lat['p50']):>8} {f(lat['p90']):>8} {f(lat['p99']):>8} "
              f"{f(lat['max']):>8} {f(conv['p50']):>9} {f(conv['max']):>9} {never:>6} {cpu:>11} {rss:>14}")
    print("(ms after the change's reply: weirctl's exit for real nodes, the REQUEST's reply for simulated ones)")
    for r in results:
        for addr, v in (r.get("latency_ms_by_mgmt") or {}).items():
            if len(r.get("latency_ms_by_mgmt")) > 1:
                via = " (pushed through)" if addr == r.get("push_to") else ""
                print(f"  {r['step']}: nodes on {addr}{via}: p50 {v['p50']} ms, p99 {v['p99']} ms, max {v['max']} ms")
    for r in results:
        if r["step"] == "rss100k":
            n, m = r["node_rss_kb"], r["mgmt_rss_kb"]
            print(f"\nrss100k: {r['tags']} tags ({r['tags_file_bytes']} bytes), weirctl tag import "
                  f"{r['weirctl_ms']} ms, node stored it {r['applied_after_weirctl_ms']} ms after weirctl returned")
            print(f"  weir-fastpath VmRSS: baseline {n['baseline']} kB, peak {n['peak']} kB, after {n['after']} kB "
                  f"(VmHWM {n['vmhwm_since_import']} kB); weir-mgmt: baseline {m['baseline']} kB, peak "
                  f"{m['peak']} kB (VmHWM {m['vmhwm']} kB), after {m['after']} kB")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, help="the build directory")
    ap.add_argument("--steps", default=",".join(ALL_STEPS), help="comma-separated: " + ",".join(ALL_STEPS))
    ap.add_argument("--pushes", type=int, default=20)
    ap.add_argument("--interval-ms", type=int, default=250, help="between pushes to real nodes")
    ap.add_argument("--sim-interval-ms", type=int, default=1000, help="between pushes to simulated nodes")
    ap.add_argument("--timeout-ms", type=int, default=10000)
    ap.add_argument("--real-nodes", type=int, default=8)
    ap.add_argument("--sim-nodes", type=int, default=1000)
    ap.add_argument("--sim-apply", default="none", choices=["parse", "none"],
                    help="none (the default) measures weir-mgmt: with parse, 1000 simulated nodes on a 2-vCPU "
                         "machine measure the simulator's own CityMap builds (~50 ms of CPU each per push)")
    ap.add_argument("--sim-ramp-ms", type=int, default=3000,
                    help="spread the simulated nodes' connects over this time (0: all at once; on SQLite that "
                         "converged in 5.1 s here, the pushes then start behind its HELLO writes)")
    ap.add_argument("--rss-tags", type=int, default=100000)
    ap.add_argument("--out", help="write the results as JSON")
    args = ap.parse_args()
    steps = [s for s in args.steps.split(",") if s]
    for s in steps:
        if s not in ALL_STEPS:
            ap.error(f"unknown step {s}")
    if any(s.startswith("etcd") for s in steps):
        weirtest.require_tools("etcd", "etcdctl")
    results = []
    for s in steps:
        log(f"step {s}")
        t = time.monotonic()
        if s == "rss100k":
            r = step_rss100k(args.build, args)
        elif s.endswith("1000"):
            r = step_sim(args.build, s[:-len("1000")], args)
        else:
            r = step_real(args.build, s[:-len("8")], args)
        r["wall_s"] = round(time.monotonic() - t, 1)
        results.append(r)
        log(f"step {s} done in {r['wall_s']} s")
    print_table(results)
    if args.out:
        with open(args.out, "w") as f:
            binaries = {}
            for rel in ("mgmt/weir-mgmt", "mgmt/weirctl", "fastpath/weir-fastpath", "bench/mgmt-fleet-sim"):
                path = os.path.join(args.build, rel)
                with open(path, "rb") as b:
                    binaries[rel] = {"sha256": hashlib.sha256(b.read()).hexdigest()[:16],
                                     "mtime": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(os.path.getmtime(path)))}
            json.dump({"machine": {"nproc": os.cpu_count(), "uname": " ".join(os.uname())}, "binaries": binaries,
                       "args": vars(args),
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
