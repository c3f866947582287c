#!/usr/bin/env python3
"""HTTPDNS capacity per CPU: weir-fastpath's HTTPDNS API (docs/httpdns.md)
under h2load (Debian's nghttp2-client, a real HTTP/2 and HTTP/1.1 client),
every measured request a cache hit.

Set-up (loopback, no namespaces): gslb-sim serves a weighted name
x.cdn.example.net (three addresses, weights 5/3/1 for city-a's ECS view) and
plain names www.example.com, h0..h6.example.com (TTL 3600); weir-fastpath,
kernel backend, 1 worker, forwards to it with the city map putting
127.0.0.0/16 (every h2load connection's source) in city-a and the tag
`cdn.example.net weight=on ecs=on answer=single level=city`. Its encrypted
front (one thread of the process) serves HTTPDNS on [httpdns] http_port
(plain HTTP/1.1 and h2c) and on [tls] doh_port (HTTPS, ALPN h2), with an
accounts file: `bench` (unsigned=on) and `signed` (unsigned=off: every
request's HMAC is checked). rps limits off (rps_per_source = 0, no account
rps), [tls] per-source limits off. A throwaway EC P-256 certificate
(weirtest.tls.Certs); h2load does not verify it.

weir-fastpath runs pinned to --server-cpu (all its threads), h2load (one
thread) and gslb-sim to --load-cpu, so that the server's CPU time is its own
and "per CPU-second" means per core. weir-fastpath and h2load run under
SCHED_FIFO (--rt PRIO, chrt -f; the default): on a shared 2-vCPU guest with
builds running, nice -10 alone left weir's front thread waiting on the run
queue as long as it ran (/proc/PID/task/TID/schedstat) and the server never
saturated; --rt 0 runs them at nice -NICE instead. Under SCHED_FIFO a
saturated server meets the kernel's RT throttling (sched_rt_runtime_us,
950 ms of each second): a ~50 ms pause a second, seen in h2load's max.

Steps (--steps; each is warmed first: the URL is fetched until gslb-sim sees
no new query, the answer checked; gslb-sim's queries during the run are the
misses, 0 expected):
  h2-d          HTTP/2 (h2c prior knowledge, plain port), GET /bench/d?host=x.cdn.example.net
  h2-d-plain    the same for the plain name www.example.com
  h2-resolve8   HTTP/2, /bench/resolve?host= the weighted name and h0..h6.example.com (8 hosts)
  h1-d          HTTP/1.1 keep-alive (h2load --h1), the weighted name; --h1-streams in
                flight per connection (1: no pipelining, what SDKs do)
  https-h2-d    HTTPS (doh_port, ALPN h2), the weighted name
  h2-signed-d   HTTP/2, /signed/d?host=x.cdn.example.net&exp=(now + 1 h)&s=HMAC-SHA256,
                one URL precomputed: the cost of the signature check
Each run: `h2load -c CLIENTS -m STREAMS -D DURATION -t 1 URL`. Per run:
  req/s            h2load's (its main duration)
  srv cores        weir-fastpath's utime+stime over h2load's whole life
                   (/proc/PID/stat; also per thread from /proc/PID/task) / wall
                   time: near 1.0, the server set the pace; well under it,
                   the client did (its own CPU is shown as "h2load cores");
                   the busiest thread's run and run-queue wait (schedstat)
  req/CPU-s        requests served (weir_httpdns_requests_total, same window)
                   / weir-fastpath CPU seconds: requests per core; the batch
                   step also hosts per CPU-second (weir_httpdns_hosts_total)
  srv p50/p99      from weir_httpdns_request_duration_seconds{api} (difference
                   before/after the run): the upper bound of the bucket holding
                   the percentile, and in brackets a linear interpolation inside
                   that bucket (Prometheus histogram_quantile's method). The
                   server time runs from the whole request parsed to its
                   response queued: not the socket's queues, not the client's
  cli mean/max     h2load's "time for request" (request sent to response
                   received, client side, including queueing behind the other
                   streams in flight)
  non-2xx          h2load's 3xx/4xx/5xx, failed, errored and timeout counts,
                   and weir_httpdns_errors_total over the run
The target to compare against: p99 server time under 1 ms on a cache hit.

A benchmark, not a test: it prints figures (and --json FILE) and exits
non-zero only when the setup fails. Needs root (chrt -f, nice -N).

  python3 bench/httpdns_capacity.py --build build-ci/main --duration 10
  python3 bench/httpdns_capacity.py --build build-ci/main --steps h2-d,h1-d --duration 3 --runs 1
"""

import argparse
import hashlib
import hmac
import http.client
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "bench"))
import weirtest  # noqa: E402
from weirtest import tls as wtls  # noqa: E402
from weirtest.zones import gslb_name, no_empty_weight_option, record, view, zone  # noqa: E402
from peerlib import SetupError, log, thread_cpu  # noqa: E402

WEIGHTED = "x.cdn.example.net"
PLAIN = "www.example.com"
BATCH = [WEIGHTED] + [f"h{i}.example.com" for i in range(7)]
CITY_A = ["192.0.2.11", "192.0.2.12", "192.0.2.13"]
CITY_B = ["192.0.2.21", "192.0.2.22"]

ZONES = (no_empty_weight_option() + zone("cdn.example.net.", rname="admin", minimum=3600, ttl=3600) +
         gslb_name("x", view("198.51.100.0/24", CITY_A, [5, 3, 1], scope=24),
                   view("203.0.113.0/24", CITY_B, [3, 1], scope=24), ttl=3600) +
         zone("example.com.", minimum=3600) + record("www", "A", "192.0.2.1", ttl=3600) +
         "".join(record(f"h{i}", "A", f"192.0.2.{100 + i}", ttl=3600) for i in range(7)))
# Every h2load connection comes from 127.0.0.1: all of 127.0.0.0/16 is city-a.
CITYMAP = """\
# cidr,city,ecs_address/prefix
127.0.0.0/16,city-a,198.51.100.0/24
127.2.0.0/16,city-b,203.0.113.0/24
"""
TAGS = "cdn.example.net weight=on ecs=on answer=single level=city\n"
SECRET_BENCH = "bench-secret-0123456789abcdef"
SECRET_SIGNED = "signed-secret-0123456789abcdef"
ACCOUNTS = (f"bench unsigned=on legacy_md5=off secret={SECRET_BENCH}\n"
            f"signed unsigned=off legacy_md5=off secret={SECRET_SIGNED}\n")

# name: (scheme "http"/"https", h1?, account, api, hosts, signed?)
STEPS = {
    "h2-d": ("http", False, "bench", "d", [WEIGHTED], False),
    "h2-d-plain": ("http", False, "bench", "d", [PLAIN], False),
    "h2-resolve8": ("http", False, "bench", "resolve", BATCH, False),
    "h1-d": ("http", True, "bench", "d", [WEIGHTED], False),
    "https-h2-d": ("https", False, "bench", "d", [WEIGHTED], False),
    "h2-signed-d": ("http", False, "signed", "d", [WEIGHTED], True),
}


# ---------------------------------------------------------------- set-up
class PinnedFastpath(weirtest.Fastpath):
    """weirtest.Fastpath started under `prefix` (nice, taskset): the
    process's pid is weir-fastpath's own (both exec it)."""

    def __init__(self, build_dir, config_text, prefix, timeout=20.0):
        self.config_path = weirtest.write_temp(config_text)
        argv = list(prefix) + [weirtest.binary(build_dir, self.RELPATH), "-c", self.config_path]
        self._start(argv, self.READY, timeout, temp_config=self.config_path)


def weir_config(sim, files, certs, accounts, doh_port, http_port):
    upstream = f"{sim.host}:{sim.port}"
    config = weirtest.fastpath_config([upstream], weighted=[upstream], workers=1, citymap=files.citymap,
                                      tags=files.tags, upstream={"timeout_ms": 1500})
    return config + "\n".join([
        "", "[tls]", "dot_port = 0", f"doh_port = {doh_port}",
        "handshakes_per_second_per_source = 0", "max_connections_per_source = 0", "",
        "[[tls.certificate]]", f'chain = "{certs.chain}"', f'key = "{certs.key}"', "",
        "[httpdns]", "enabled = true", f"http_port = {http_port}", f'accounts_file = "{accounts}"',
        "anonymous = false", "rps_per_source = 0", ""])


def hmac_sign(path, params, secret):
    """docs/httpdns.md: HMAC-SHA256 of PATH?name=value&... sorted by name, `s` excluded."""
    text = path + "?" + "&".join(f"{k}={v}" for k, v in sorted((k, str(v)) for k, v in params.items() if k != "s"))
    return hmac.new(secret.encode(), text.encode(), hashlib.sha256).hexdigest()


def step_target(step, exp):
    scheme, h1, account, api, hosts, signed = STEPS[step]
    path = f"/{account}/{api}"
    params = {"host": ",".join(hosts)}
    if signed:
        params["exp"] = exp
        params["s"] = hmac_sign(path, params, SECRET_SIGNED)
    return path + "?" + urllib.parse.urlencode(params, safe=",")


# ---------------------------------------------------------------- measuring
def priority(args, cpu):
    """The command prefix that runs a program on `cpu` at the bench's priority."""
    if args.rt:
        return ["chrt", "-f", str(args.rt), "taskset", "-c", str(cpu)]
    return (["nice", "-n", str(-args.nice)] if args.nice else []) + ["taskset", "-c", str(cpu)]


def process_cpu_s(pid):
    u, s = weirtest.proc_cpu_us(pid)
    return (u + s) / 1e6


def histogram(m, name, **labels):
    """{le (float): cumulative count} of a Prometheus histogram."""
    out = {}
    for lab, v in m.series(name + "_bucket", **labels):
        le = float("inf") if lab["le"] == "+Inf" else float(lab["le"])
        out[le] = out.get(le, 0) + v  # summed over the other labels (accounts)
    return out


def quantile(before, after, q):
    """(bucket upper bound, linear interpolation inside it) of the q-quantile
    of the observations between two scrapes of one histogram, in seconds."""
    les = sorted(after)
    cum = [after[le] - before.get(le, 0) for le in les]
    if not cum or cum[-1] <= 0:
        return None, None
    rank = q * cum[-1]
    prev_le, prev_cum = 0.0, 0.0
    for le, c in zip(les, cum):
        if c >= rank:
            if le == float("inf"):
                return le, prev_le
            inside = c - prev_cum
            return le, prev_le + (le - prev_le) * ((rank - prev_cum) / inside if inside else 1.0)
        prev_le, prev_cum = le, c
    return None, None


H2LOAD_TIME = re.compile(r"^time for request:\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)")


def to_seconds(text):
    m = re.match(r"([\d.]+)(us|ms|s)$", text)
    if not m:
        return None
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]


def parse_h2load(out):
    r = {}
    m = re.search(r"^finished in ([\d.]+)s, ([\d.]+) req/s", out, re.M)
    if m:
        r["finished_s"], r["rps"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, "
                  r"(\d+) timeout", out, re.M)
    if m:
        for k, v in zip(("total", "started", "done", "succeeded", "failed", "errored", "timeout"), m.groups()):
            r[k] = int(v)
    m = re.search(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out, re.M)
    if m:
        for k, v in zip(("s2xx", "s3xx", "s4xx", "s5xx"), m.groups()):
            r[k] = int(v)
    for line in out.splitlines():
        t = H2LOAD_TIME.match(line.strip())
        if t:
            r["cli_min_s"], r["cli_max_s"], r["cli_mean_s"], r["cli_sd_s"] = (to_seconds(x) for x in t.groups())
    m = re.search(r"^Application protocol: (\S+)", out, re.M)
    if m:
        r["protocol"] = m.group(1)
    return r


def fetch(ctx, step, target):
    """One GET of the step's URL (http.client, HTTP/1.1): (status, JSON body)."""
    scheme = STEPS[step][0]
    if scheme == "https":
        conn = http.client.HTTPSConnection("127.0.0.1", ctx["fp"].doh[1], timeout=5,
                                           context=ssl._create_unverified_context())  # noqa: S323
    else:
        conn = http.client.HTTPConnection("127.0.0.1", ctx["fp"].http[1], timeout=5)
    try:
        conn.request("GET", target)
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, json.loads(body) if body else None
    finally:
        conn.close()


def gslb_queries(sim):
    return json.loads(sim.control("stats"))["queries"]


def warm(ctx, step, target):
    """Fetches the URL until gslb-sim sees no new query (every host cached)
    and checks the answer: 200, every host with its addresses."""
    for _ in range(10):
        q0 = gslb_queries(ctx["sim"])
        status, body = fetch(ctx, step, target)
        if status != 200:
            raise SetupError(f"{step}: warm-up GET {target}: status {status}, {body}")
        entries = body.get("dns", [body]) if isinstance(body, dict) else []
        if [e.get("host") for e in entries] != STEPS[step][4] or any(not e.get("ips") for e in entries):
            raise SetupError(f"{step}: warm-up GET {target}: unexpected answer {body}")
        if WEIGHTED in STEPS[step][4]:
            w = next(e for e in entries if e["host"] == WEIGHTED)
            if sorted(w["ips"]) != sorted(CITY_A):
                raise SetupError(f"{step}: the weighted name answered {w['ips']}, not city-a's {CITY_A}")
        if gslb_queries(ctx["sim"]) == q0:
            return body
        time.sleep(0.1)
    raise SetupError(f"{step}: gslb-sim still queried after 10 fetches of {target}")


def run_step(ctx, step, target, run):
    args, fp = ctx["args"], ctx["fp"]
    scheme, h1, account, api, hosts, _ = STEPS[step]
    port = fp.doh[1] if scheme == "https" else fp.http[1]
    url = f"{scheme}://127.0.0.1:{port}{target}"
    clients = args.h1_clients if h1 else args.clients
    streams = args.h1_streams if h1 else args.streams
    argv = priority(args, args.load_cpu) + ["h2load", "-t", "1", "-c", str(clients), "-m", str(streams),
                   "-D", f"{args.duration:g}"] + (["--h1"] if h1 else []) + [url]
    m0 = fp.metrics()
    q0 = gslb_queries(ctx["sim"])
    cpu0, thr0 = process_cpu_s(fp.pid), thread_cpu(fp.pid)
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = p.stdout.read()
    finally:
        _, status, ru = os.wait4(p.pid, 0)
        p.stdout.close()
    wall = time.monotonic() - t0
    cpu1, thr1 = process_cpu_s(fp.pid), thread_cpu(fp.pid)
    q1 = gslb_queries(ctx["sim"])
    m1 = fp.metrics()
    with open(os.path.join(args.workdir, f"{step}-{run}.out"), "w") as f:
        f.write(" ".join(argv) + "\n" + out)
    code = os.waitstatus_to_exitcode(status)
    r = parse_h2load(out)
    if code != 0 or "rps" not in r:
        tail = " | ".join(out.strip().splitlines()[-4:])
        raise SetupError(f"h2load ({step}) exited {code}: {tail}")
    cpu = cpu1 - cpu0
    served = (m1.value("weir_httpdns_requests_total", account=account, api=api) -
              m0.value("weir_httpdns_requests_total", account=account, api=api))
    hosts_served = (m1.value("weir_httpdns_hosts_total", account=account) -
                    m0.value("weir_httpdns_hosts_total", account=account))
    errors = {}
    for lab, v in m1.series("weir_httpdns_errors_total"):
        d = v - sum(v0 for l0, v0 in m0.series("weir_httpdns_errors_total") if l0 == lab)
        if d:
            errors[f"{lab.get('account')}/{lab.get('code')}"] = d
    results = {}
    for lab, v in m1.series("weir_httpdns_host_results_total", account=account):
        d = v - m0.value("weir_httpdns_host_results_total", **lab)
        if d:
            results[lab["result"]] = d
    stale = (m1.value("weir_httpdns_stale_hosts_total", account=account) -
             m0.value("weir_httpdns_stale_hosts_total", account=account))
    h0 = histogram(m0, "weir_httpdns_request_duration_seconds", api=api)
    h1_ = histogram(m1, "weir_httpdns_request_duration_seconds", api=api)
    p50, p50i = quantile(h0, h1_, 0.50)
    p99, p99i = quantile(h0, h1_, 0.99)
    threads = []
    for tid, (comm, t, ran, waited) in thr1.items():
        b = thr0.get(tid, (comm, 0.0, 0.0, 0.0))
        threads.append((comm, tid, t - b[1], ran - b[2], waited - b[3]))
    threads.sort(key=lambda x: -x[2])
    r.update({
        "step": step, "run": run, "argv": argv, "url": url, "wall_s": wall, "cpu_s": cpu,
        "srv_cores": cpu / wall, "h2load_cores": (ru.ru_utime + ru.ru_stime) / wall,
        "served": served, "hosts": hosts_served, "req_per_cpu_s": served / cpu if cpu else None,
        "hosts_per_cpu_s": hosts_served / cpu if cpu else None, "misses": q1 - q0, "errors": errors,
        "host_results": results, "stale": stale, "p50_le_s": p50, "p50_interp_s": p50i, "p99_le_s": p99,
        "p99_interp_s": p99i,
        "threads": [(c, t, round(d, 3), round(ran, 3), round(w, 3)) for c, t, d, ran, w in threads if d > 0][:6],
        "non_2xx": sum(r.get(k, 0) for k in ("s3xx", "s4xx", "s5xx")),
        "client_failures": sum(r.get(k, 0) for k in ("failed", "errored", "timeout")),
    })
    return r


def measure(args):
    with tempfile.TemporaryDirectory(prefix="weir-httpdns-") as tmp:
        certs = wtls.Certs(tmp)
        files = weirtest.PartitionFiles(CITYMAP, TAGS)
        accounts = os.path.join(tmp, "accounts.txt")
        with open(accounts, "w") as f:
            f.write(ACCOUNTS)
        os.chmod(accounts, 0o600)
        sim = fp = None
        results = {}
        try:
            sim = weirtest.GslbSim(args.build, config_text=ZONES, seed=1)
            subprocess.run(["taskset", "-a", "-p", "-c", str(args.load_cpu), str(sim.pid)], check=True,
                           capture_output=True, timeout=10)
            config = weir_config(sim, files, certs, accounts, weirtest.free_port(udp_and_tcp=False),
                                 weirtest.free_port(udp_and_tcp=False))
            with open(os.path.join(args.workdir, "weir.toml"), "w") as f:
                f.write(config)
            version = weirtest.run([weirtest.binary(args.build, "fastpath/weir-fastpath"), "--version"]).stdout.strip()
            fp = PinnedFastpath(args.build, config, priority(args, args.server_cpu))
            if fp.http is None or fp.doh is None:
                raise SetupError(f"weir-fastpath: no 'listening http' or 'listening doh' line: {fp.process.lines}")
            ctx = {"args": args, "sim": sim, "fp": fp, "version": version}
            exp = int(time.time()) + 3600
            for step in args.steps:
                target = step_target(step, exp)
                body = warm(ctx, step, target)
                runs = []
                for i in range(args.runs):
                    warm(ctx, step, target)
                    try:
                        r = run_step(ctx, step, target, i + 1)
                    except SetupError as e:
                        log(f"{step} run {i + 1}: {e}")
                        continue
                    runs.append(r)
                    log(f"  {step} run {i + 1}: {r['rps']:.0f} req/s ({r.get('protocol')}), weir {r['srv_cores']:.3f}"
                        f" cores, {fmt(r['req_per_cpu_s'])} req/CPU-s, h2load {r['h2load_cores']:.3f} cores, "
                        f"p50 {us(r['p50_le_s'])} ({us(r['p50_interp_s'])}) p99 {us(r['p99_le_s'])} "
                        f"({us(r['p99_interp_s'])}) us, 2xx {r.get('s2xx')} non-2xx {r['non_2xx']} "
                        f"failed/errored/timeout {r.get('failed')}/{r.get('errored')}/{r.get('timeout')}, "
                        f"errors {r['errors'] or 0}, misses {r['misses']}, results {r['host_results']}")
                    if not fp.alive():
                        raise SetupError(f"weir-fastpath exited during {step}: {fp.process.stderr_text()[-500:]}")
                if runs:
                    med = sorted(runs, key=lambda r: r["rps"])[len(runs) // 2]
                    results[step] = {"median": med, "runs": runs, "example_answer": body}
            ctx["stderr"] = fp.process.stderr_text()
            return results, ctx
        finally:
            if fp:
                fp.stop()
            if sim:
                sim.stop()
            files.cleanup()


# ---------------------------------------------------------------- report
def fmt(v, spec=",.0f"):
    return "-" if v is None else format(v, spec)


def us(v):
    if v is None:
        return "-"
    if v == float("inf"):
        return "+Inf"
    return f"{v * 1e6:,.0f}"


def report(args, results, ctx):
    la = os.getloadavg()
    prio = f"SCHED_FIFO {args.rt} (chrt -f)" if args.rt else f"nice -{args.nice}"
    print(f"\nHTTPDNS capacity, every request a cache hit ({ctx['version']}); weir-fastpath (1 worker; HTTPDNS on "
          f"its encrypted front thread) pinned to CPU {args.server_cpu}, h2load -t 1 and gslb-sim pinned to CPU "
          f"{args.load_cpu}; weir-fastpath and h2load at {prio}; h2load -c {args.clients} -m {args.streams} (HTTP/1.1: -c "
          f"{args.h1_clients} -m {args.h1_streams}), -D {args.duration:g} s; median of {args.runs} run(s) by "
          f"req/s; load average at the end {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}")
    print("req/CPU-s: requests served / weir-fastpath CPU seconds (= per core); srv p50/p99: the bucket's upper "
          "bound of weir_httpdns_request_duration_seconds, (linear interpolation inside it); cli: h2load's time "
          "for request, client side; all times in microseconds.\n")
    hdr = (f"{'step':12} {'req/s':>9} {'runs':>26} {'srv cores':>9} {'req/CPU-s':>9} {'hosts/CPU-s':>11} "
           f"{'srv p50':>12} {'srv p99':>13} {'cli mean':>8} {'cli max':>8} {'h2load':>6} {'non-2xx':>7} "
           f"{'miss':>4}")
    print(hdr)
    for step, res in results.items():
        r = res["median"]
        runs = "/".join(fmt(x["rps"]) for x in res["runs"])
        hosts = fmt(r["hosts_per_cpu_s"]) if len(STEPS[step][4]) > 1 else ""
        bad = r["non_2xx"] + r["client_failures"] + sum(r["errors"].values())
        print(f"{step:12} {fmt(r['rps']):>9} {runs:>26} {r['srv_cores']:>9.3f} {fmt(r['req_per_cpu_s']):>9} "
              f"{hosts:>11} {us(r['p50_le_s']) + ' (' + us(r['p50_interp_s']) + ')':>12} "
              f"{us(r['p99_le_s']) + ' (' + us(r['p99_interp_s']) + ')':>13} {us(r.get('cli_mean_s')):>8} "
              f"{us(r.get('cli_max_s')):>8} {r['h2load_cores']:>6.2f} {bad:>7} {r['misses']:>4}")
    print("\nthe target: p99 server time under 1 ms on a cache hit:")
    for step, res in results.items():
        r = res["median"]
        if r["p99_le_s"] is not None:
            print(f"  {step:12} p99 <= {us(r['p99_le_s'])} us: {'met' if r['p99_le_s'] <= 0.001 else 'NOT met'}")
    print("\nweir-fastpath threads over the median run, the busiest first: utime+stime seconds "
          "[schedstat: ran / waited on the run queue]:")
    for step, res in results.items():
        r = res["median"]
        print(f"  {step:12} {r['wall_s']:.2f} s wall: " +
              ", ".join(f"{c}/{t} {d:.2f} [{ran:.2f}/{w:.2f}]" for c, t, d, ran, w in r["threads"][:3]))
    print("\nper run: h2load's status codes and failures, weir's errors, host results and stale answers:")
    for step, res in results.items():
        for r in res["runs"]:
            print(f"  {step:12} #{r['run']} {r.get('protocol')}: {r.get('done')} done, 2xx {r.get('s2xx')} 3xx "
                  f"{r.get('s3xx')} 4xx {r.get('s4xx')} 5xx {r.get('s5xx')}, failed {r.get('failed')} errored "
                  f"{r.get('errored')} timeout {r.get('timeout')}; served {fmt(r['served'])}, hosts "
                  f"{fmt(r['hosts'])}, results {r['host_results']}, stale {r['stale']:.0f}, errors {r['errors']}")
    print("\nh2load command lines (median runs):")
    for step, res in results.items():
        print("  " + " ".join(res["median"]["argv"]))
    tail = [l for l in ctx.get("stderr", "").splitlines() if l.strip()]
    if tail:
        print(f"\nweir-fastpath stderr ({len(tail)} lines), the last:")
        for l in tail[-5:]:
            print("  " + l[:200])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--steps", default=",".join(STEPS), help=f"any of {','.join(STEPS)}")
    ap.add_argument("--duration", type=float, default=10, help="seconds per run (h2load -D)")
    ap.add_argument("--runs", type=int, default=3, help="runs per step; the median by req/s is reported")
    ap.add_argument("--clients", type=int, default=8, help="HTTP/2: h2load -c, connections")
    ap.add_argument("--streams", type=int, default=16, help="HTTP/2: h2load -m, streams in flight per connection")
    ap.add_argument("--h1-clients", type=int, default=32, help="HTTP/1.1: h2load -c")
    ap.add_argument("--h1-streams", type=int, default=1,
                    help="HTTP/1.1: h2load -m, requests in flight per connection (1: keep-alive, no pipelining)")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--load-cpu", type=int, default=1)
    ap.add_argument("--rt", type=int, default=10,
                    help="weir-fastpath and h2load under SCHED_FIFO at this priority (chrt -f); 0: --nice instead")
    ap.add_argument("--nice", type=int, default=10,
                    help="with --rt 0: weir-fastpath and h2load at nice -N (0: not reniced)")
    ap.add_argument("--json")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (config, h2load outputs)")
    args = ap.parse_args()
    if os.geteuid() != 0 and (args.rt or args.nice):
        log("setup: needs root (chrt -f, nice -N); --rt 0 --nice 0 runs without")
        return 2
    if not shutil.which("h2load"):
        log("setup: h2load not installed (Debian: nghttp2-client)")
        return 2
    args.build = os.path.abspath(args.build)
    args.steps = [s for s in args.steps.split(",") if s]
    unknown = [s for s in args.steps if s not in STEPS]
    if unknown:
        log(f"setup: unknown steps {unknown}")
        return 2
    args.workdir = tempfile.mkdtemp(prefix="weir-httpdns-bench-")
    t_start = time.monotonic()
    try:
        results, ctx = measure(args)
    except (SetupError, RuntimeError, FileNotFoundError, subprocess.SubprocessError) as e:
        log(f"setup: {e}")
        return 2
    finally:
        if not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)
        else:
            log(f"work directory kept: {args.workdir}")
    report(args, results, ctx)
    print(f"\n(total {time.monotonic() - t_start:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "version": ctx["version"], "results": results}, f, indent=2, default=str)
    return 0 if results else 2


if __name__ == "__main__":
    sys.exit(main())
