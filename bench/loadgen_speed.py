#!/usr/bin/env python3
"""How much load a load generator can offer: weir-bench and dnsperf against
dns-reflector (a recvmmsg/sendmmsg echo, the cheapest DNS server there is),
one core each, in the same run (docs/bench.md, "weir-bench's own speed").

The reflector runs pinned to --server-cpu, the load generator to --load-cpu.
Per round, for --duration seconds each: dnsperf closed loop with the settings
it does best with here (--dnsperf-args); weir-bench closed loop
(--bench-args); and weir-bench open loop at a rate far above what one core can
send (--offer-args), which shows the most it can offer: there the reflector
answers what it can and the rest is lost. dnsperf cannot offer more than its
closed loop sends: it is CPU-bound there (its gen CPU % column). The table
gives, per run, the queries sent and answered per second, loss, and the CPU
each side used (utime+stime, user and system), and the ratios of the medians
of queries sent per second.

Python 3 standard library; run as root for --nice.

  python3 bench/loadgen_speed.py --build build-release --repeat 3
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peerlib  # noqa: E402
from peerlib import CLK_TCK, Proc, SetupError, log  # noqa: E402


def cpu_us(pid):
    """(user, system) CPU of a process so far, in microseconds (all threads)."""
    f = peerlib._stat_fields(pid)
    return int(f[11]) * 1_000_000 // CLK_TCK, int(f[12]) * 1_000_000 // CLK_TCK


def irq_time_separate():
    """Whether the kernel accounts irq and softirq time apart from the task
    it interrupted (CONFIG_IRQ_TIME_ACCOUNTING). Without it (tick-based
    accounting, the usual case) that time is already in the task's stime."""
    for path in ("/proc/config.gz", f"/boot/config-{os.uname().release}"):
        try:
            if path.endswith(".gz"):
                import gzip
                with gzip.open(path, "rt") as f:
                    text = f.read()
            else:
                with open(path) as f:
                    text = f.read()
        except OSError:
            continue
        return "CONFIG_IRQ_TIME_ACCOUNTING=y" in text
    return False


IRQ_SEPARATE = irq_time_separate()


def cpu_irq_us(cpu):
    """irq + softirq time of one CPU so far, in microseconds. On loopback the
    delivery of every datagram into the receiver's socket runs in softirq on
    the sender's CPU: part of each side's cost."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith(f"cpu{cpu} "):
                v = [int(x) for x in line.split()[1:]]
                return (v[5] + v[6]) * 1_000_000 // CLK_TCK
    return 0


def run_measured(argv, reflector_pid, gen_cpu, refl_cpu):
    """Runs a load generator to completion; returns its stdout and the CPU
    it and the reflector used while it ran."""
    r0 = cpu_us(reflector_pid)
    g_irq0, r_irq0 = cpu_irq_us(gen_cpu), cpu_irq_us(refl_cpu)
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        p = subprocess.Popen(argv, stdout=out_f, stderr=err_f, text=True)
        # os.wait4 gives the load generator's own rusage at its exit (reading
        # /proc/PID just before it exits would race).
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - t0
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read(), err_f.read()
    r1 = cpu_us(reflector_pid)
    g_irq1, r_irq1 = cpu_irq_us(gen_cpu), cpu_irq_us(refl_cpu)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SetupError(f"{argv[0]} exited {code}: {err.strip().splitlines()[-1:] or out[-200:]}")
    return out, {"gen_user_s": ru.ru_utime, "gen_sys_s": ru.ru_stime, "wall_s": wall,
                 "refl_user_s": (r1[0] - r0[0]) / 1e6, "refl_sys_s": (r1[1] - r0[1]) / 1e6,
                 "gen_irq_s": (g_irq1 - g_irq0) / 1e6, "refl_irq_s": (r_irq1 - r_irq0) / 1e6}


def parse_dnsperf(out):
    def num(pattern):
        m = re.search(pattern, out)
        if not m:
            raise SetupError(f"dnsperf output without {pattern!r}:\n{out}")
        return float(m.group(1))
    sent = num(r"Queries sent:\s+(\d+)")
    done = num(r"Queries completed:\s+(\d+)")
    elapsed = num(r"Run time \(s\):\s+([\d.]+)")
    return {"sent": sent, "answered": done, "duration_s": elapsed}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory with weir-bench and dns-reflector (default: build)")
    ap.add_argument("--duration", type=float, default=5, help="seconds per run (default: 5)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per load generator, alternating (default: 3)")
    ap.add_argument("--server-cpu", default="1", help="CPU of the reflector (default: 1)")
    ap.add_argument("--load-cpu", default="0", help="CPU of the load generator (default: 0)")
    ap.add_argument("--nice", type=int, default=0, help="run both at nice -N (root; default: 0)")
    ap.add_argument("--dnsperf-args", default="-c 4 -q 500",
                    help="dnsperf's load options (default: '-c 4 -q 500': its best here)")
    ap.add_argument("--bench-args", default="--outstanding 512 --batch 64 --sockets 2",
                    help="weir-bench's load options (default: '--outstanding 512 --batch 64 --sockets 2')")
    ap.add_argument("--offer-args", default="--rate 10000000 --batch 64 --sockets 4 --timeout 500",
                    help="weir-bench's open-loop options for its maximum offer "
                         "(default: '--rate 10000000 --batch 64 --sockets 4 --timeout 500')")
    ap.add_argument("--out", help="write the figures as JSON to this file")
    a = ap.parse_args()

    bench = os.path.join(a.build, "bench", "weir_bench", "weir-bench")
    reflector = os.path.join(a.build, "bench", "weir_bench", "dns-reflector")
    for exe in (bench, reflector):
        if not os.access(exe, os.X_OK):
            raise SystemExit(f"{exe} not found: build the targets weir-bench and dns-reflector")
    if shutil.which("dnsperf") is None:
        raise SystemExit("dnsperf not found (scripts/install-deps.sh installs it)")
    nice = ["nice", "-n", str(-a.nice)] if a.nice else []

    work = tempfile.mkdtemp(prefix="weir-loadgen-")
    queries = os.path.join(work, "queries.txt")
    with open(queries, "w") as f:
        f.writelines(f"h{i}.bench.test A\n" for i in range(1000))
    refl = Proc("dns-reflector", nice + ["taskset", "-c", a.server_cpu, reflector, "--listen", "127.0.0.1:0"],
                work, stdout_pipe=True)
    runs = []
    try:
        lines = refl.read_lines_until(r"^ready")
        port = int(next(re.search(r":(\d+)$", l).group(1) for l in lines if l.startswith("listening")))
        gens = {
            "dnsperf": nice + ["taskset", "-c", a.load_cpu, "dnsperf", "-s", "127.0.0.1", "-p", str(port),
                               "-d", queries, "-l", str(a.duration)] + a.dnsperf_args.split(),
            "weir-bench": nice + ["taskset", "-c", a.load_cpu, bench, "--server", f"127.0.0.1:{port}",
                                  "--queries", queries, "--duration", str(a.duration), "--progress", "never",
                                  "--json", os.path.join(work, "wb.json")] + a.bench_args.split(),
        }
        gens["weir-bench offer"] = gens["weir-bench"][:-len(a.bench_args.split())] + a.offer_args.split()
        for i in range(a.repeat):
            for name, argv in gens.items():
                busy0 = peerlib.machine_busy_us()
                out, cpu = run_measured(argv, refl.pid, a.load_cpu, a.server_cpu)
                busy = (peerlib.machine_busy_us() - busy0) / 1e6
                if name == "dnsperf":
                    fig = parse_dnsperf(out)
                else:
                    with open(os.path.join(work, "wb.json")) as f:
                        j = json.load(f)
                    fig = {"sent": j["sent"], "answered": j["answered"], "duration_s": j["duration_s"]}
                fig.update(cpu)
                fig["gen"] = name
                fig["round"] = i + 1
                irq = cpu["gen_irq_s"] + cpu["refl_irq_s"] if IRQ_SEPARATE else 0.0
                fig["other_cores"] = max(0.0, busy - cpu["gen_user_s"] - cpu["gen_sys_s"] - cpu["refl_user_s"] -
                                         cpu["refl_sys_s"] - irq) / cpu["wall_s"]
                runs.append(fig)
                log(f"{name} round {i + 1}: {fig['sent'] / fig['duration_s']:.0f} qps sent")
    finally:
        refl.stop()
        shutil.rmtree(work, ignore_errors=True)

    print(f"# load generators against dns-reflector ({time.strftime('%Y-%m-%d %H:%M:%S')}, "
          f"{os.cpu_count()} CPUs, reflector on CPU {a.server_cpu}, generator on CPU {a.load_cpu})")
    print(f"# load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; dnsperf {a.dnsperf_args}; "
          f"weir-bench {a.bench_args}; {a.duration:g} s per run")
    print()
    print(f"{'generator':<17} {'round':>5} {'sent/s':>10} {'answered/s':>11} {'loss %':>7} "
          f"{'gen CPU %':>9} {'(usr':>6} {'sys':>6} {'irq)':>6} {'refl CPU %':>10} {'(irq)':>6} {'other':>6}")
    for r in runs:
        d = r["duration_s"]
        gen = (r["gen_user_s"] + r["gen_sys_s"] + (r["gen_irq_s"] if IRQ_SEPARATE else 0)) / r["wall_s"] * 100
        refl_cpu = (r["refl_user_s"] + r["refl_sys_s"] + (r["refl_irq_s"] if IRQ_SEPARATE else 0)) / r["wall_s"] * 100
        loss = 100 * (r["sent"] - r["answered"]) / r["sent"] if r["sent"] else 0
        print(f"{r['gen']:<17} {r['round']:>5} {r['sent'] / d:>10.0f} {r['answered'] / d:>11.0f} {loss:>7.3f} "
              f"{gen:>9.1f} {r['gen_user_s'] / r['wall_s'] * 100:>6.1f} {r['gen_sys_s'] / r['wall_s'] * 100:>6.1f} "
              f"{r['gen_irq_s'] / r['wall_s'] * 100:>6.1f} {refl_cpu:>10.1f} {r['refl_irq_s'] / r['wall_s'] * 100:>6.1f} "
              f"{r['other_cores']:>6.2f}")
    med = {g: statistics.median(r["sent"] / r["duration_s"] for r in runs if r["gen"] == g) for g in gens}
    print()
    print(f"median sent/s: dnsperf {med['dnsperf']:.0f}, weir-bench closed loop {med['weir-bench']:.0f} "
          f"({med['weir-bench'] / med['dnsperf']:.2f}x), weir-bench open loop (its maximum offer) "
          f"{med['weir-bench offer']:.0f} ({med['weir-bench offer'] / med['dnsperf']:.2f}x dnsperf)")
    print("  gen CPU % = the load generator's utime+stime over the run's wall time (100 = one core); irq = its CPU's"
          " irq+softirq time (where the kernel delivers what it sends), "
          + ("added to it (the kernel accounts IRQ time apart)" if IRQ_SEPARATE else
             "already inside sys (tick-based accounting charges it to the running task)")
          + "; refl CPU % = the same for the reflector; other = cores used by everything else")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"runs": runs, "median_sent_qps": med, "args": vars(a)}, f, indent=1)


if __name__ == "__main__":
    try:
        main()
    except SetupError as e:
        raise SystemExit(f"loadgen_speed: {e}")
