"""Shared pieces of the load benchmarks (bench/peers.py, bench/capacity_per_cpu.py).

The bench zone and query file, gslb-sim as the one authoritative upstream,
the servers under test started on loopback from bench/configs/*.in, process
CPU accounting from /proc and a cgroup CPU quota. Python 3 standard library
plus tests/integration/weirtest.

Every process is started by us and stopped by its PID only (Proc.stop); no
process is ever looked up or signalled by name.
"""

import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFDIR = os.path.join(REPO, "bench", "configs")
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import weirtest  # noqa: E402
from weirtest.zones import record, zone  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
BENCH_ZONE = "bench.test."
PROBE_NAME = "h0.bench.test"


class SetupError(Exception):
    """The benchmark cannot run (a binary missing, a server not answering)."""


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------ CPU accounting
def machine_busy_us():
    """CPU time spent by everything on the machine (all cores), in microseconds."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...
    busy = v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)
    return busy * 1_000_000 // CLK_TCK


def _stat_fields(pid):
    """/proc/PID/stat fields from field 3 (state) on; the command name may hold spaces."""
    with open(f"/proc/{pid}/stat") as f:
        data = f.read()
    return data[data.rindex(")") + 2:].split()


def _children(pid):
    """PIDs of the live children of `pid` (all its threads' children)."""
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out += [int(x) for x in f.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def tree_cpu_us(pid):
    """(user, system) CPU microseconds of process `pid` and everything it forked.

    utime+stime of a process cover all its threads (/proc/PID/stat fields 14,
    15); cutime+cstime (16, 17) add the children it has waited for; live
    descendants are added one by one. Tick resolution (CLK_TCK, usually 10 ms):
    runs must be long enough for that not to matter (10 s at 20k qps is 200k
    answers, 10 ms is then 0.05 us per answer).
    """
    user = system = 0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            f = _stat_fields(p)
        except OSError:
            continue  # exited meanwhile; its time went to its parent's cutime
        user += int(f[11]) + int(f[13])
        system += int(f[12]) + int(f[14])
        stack += _children(p)
    return user * 1_000_000 // CLK_TCK, system * 1_000_000 // CLK_TCK


def proc_sched_ns(pid):
    """On-CPU nanoseconds of all threads of `pid` (/proc/PID/task/*/schedstat), or None."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
    except OSError:
        return None
    return total


class CpuQuota:
    """A cgroup (v1 cpu controller, else v2) limiting its processes to
    `percent` of one core. Needs root."""

    CGROUP_CPU = "/sys/fs/cgroup/cpu"

    def __init__(self, name, percent, period_us):
        self.v2 = not os.path.isdir(self.CGROUP_CPU)
        base = "/sys/fs/cgroup/unified" if self.v2 else self.CGROUP_CPU
        self.path = os.path.join(base, name)
        try:
            os.makedirs(self.path, exist_ok=True)
            quota = int(period_us * percent / 100)
            if self.v2:
                with open(os.path.join(self.path, "cpu.max"), "w") as f:
                    f.write(f"{quota} {period_us}")
            else:
                with open(os.path.join(self.path, "cpu.cfs_period_us"), "w") as f:
                    f.write(str(period_us))
                with open(os.path.join(self.path, "cpu.cfs_quota_us"), "w") as f:
                    f.write(str(quota))
        except OSError as e:
            raise SetupError(f"cgroup {self.path}: {e} (needs root and the cpu controller)") from e

    def add(self, pid):
        """Moves `pid` and all its threads into the group (cgroup.procs moves the whole process)."""
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(pid))
        for child in _children(pid):
            self.add(child)

    def throttled_s(self):
        with open(os.path.join(self.path, "cpu.stat")) as f:
            for line in f:
                k, v = line.split()
                if k == "throttled_time":  # v1, ns
                    return int(v) / 1e9
                if k == "throttled_usec":  # v2
                    return int(v) / 1e6
        return 0.0

    def remove(self):
        """Removes the group; it must be empty (its processes stopped) first."""
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)


# ------------------------------------------------------------------ processes
def thread_cpu(pid):
    """{tid: (comm, utime+stime seconds, schedstat run seconds, schedstat
    run-queue wait seconds)} of every thread of `pid`."""
    out, tck = {}, os.sysconf("SC_CLK_TCK")
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                data = f.read()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ran_ns, wait_ns = (int(x) for x in f.read().split()[:2])
        except (OSError, ValueError):
            continue
        comm = data[data.index("(") + 1:data.rindex(")")]
        fields = data[data.rindex(")") + 2:].split()
        out[int(tid)] = (comm, (int(fields[11]) + int(fields[12])) / tck, ran_ns / 1e9, wait_ns / 1e9)
    return out


def free_port():
    """A port free for both UDP and TCP on 127.0.0.1 (for servers that cannot bind :0)."""
    for _ in range(50):
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        t.bind(("127.0.0.1", 0))
        port = t.getsockname()[1]
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            u.bind(("127.0.0.1", port))
        except OSError:
            t.close()
            continue
        finally:
            u.close()
        t.close()
        return port
    raise SetupError("no free port")


class Proc:
    """A server process we started; stopped by its PID only.

    stdout goes to NAME.log (or a pipe, read with read_lines_until), stderr
    to NAME.err in `workdir`."""

    def __init__(self, name, argv, workdir, stdout_pipe=False, cwd=None):
        self.name = name
        self.argv = argv
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.err_path = os.path.join(workdir, f"{name}.err")
        self.log_file = open(self.log_path, "w")
        self.err_file = open(self.err_path, "w")
        try:
            self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE if stdout_pipe else self.log_file,
                                      stderr=self.err_file, cwd=cwd)
        except OSError as e:
            self.log_file.close()
            self.err_file.close()
            raise SetupError(f"{name}: cannot start {argv[0]}: {e}") from e

    @property
    def pid(self):
        return self.p.pid

    def last_error_line(self):
        """The last non-empty line the process wrote to stderr (else stdout), for skip messages."""
        for path in (self.err_path, self.log_path):
            try:
                with open(path, errors="replace") as f:
                    lines = [l.strip() for l in f if l.strip()]
            except OSError:
                continue
            if lines:
                return lines[-1]
        return "(no output)"

    def read_lines_until(self, pattern, timeout=10.0):
        """Reads stdout lines until one matches `pattern`; returns all lines read."""
        fd = self.p.stdout.fileno()
        sel = selectors.DefaultSelector()
        sel.register(fd, selectors.EVENT_READ)
        buf = b""
        lines = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            if not sel.select(timeout=0.2):
                if self.p.poll() is not None:
                    break
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                line = line.decode(errors="replace")
                lines.append(line)
                self.log_file.write(line + "\n")
                self.log_file.flush()
                if re.search(pattern, line):
                    return lines
        self.stop()  # never leave a half-started server behind
        raise SetupError(f"{self.name}: no line matching {pattern!r} within {timeout}s "
                         f"(last output: {self.last_error_line()}); log {self.log_path}")

    def alive(self):
        return self.p.poll() is None

    def stop(self):
        if self.log_file.closed:
            return
        if self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.kill(self.p.pid, signal.SIGKILL)
                self.p.wait()
        if self.p.stdout:
            self.p.stdout.close()
        self.log_file.close()
        self.err_file.close()


# ------------------------------------------------------------ zone and names
def write_zone(path, names, addrs_max, ttl):
    """The bench zone for gslb-sim: hN.bench.test for N < names, 1..addrs_max A records each."""
    text = zone(BENCH_ZONE, ttl=ttl) + record("@", "NS", "ns1", ttl=ttl) + record("ns1", "A", "127.0.0.1", ttl=ttl)
    for i in range(names):
        for k in range(1 + i % addrs_max):  # 1..addrs_max A records
            text += record(f"h{i}", "A", f"10.{k}.{(i >> 8) & 0xff}.{i & 0xff}", ttl=ttl)
    with open(path, "w") as f:
        f.write("# generated by bench/peerlib.py\n" + text)


def write_queries(path, names):
    """The query file (dnsperf format, "name type" per line): every bench name once."""
    with open(path, "w") as f:
        for i in range(names):
            f.write(f"h{i}.bench.test A\n")


def start_gslb_sim(build, workdir, zone_path, cpus="0", control=False):
    """gslb-sim on 127.0.0.1 (a free port), pinned to `cpus`. Returns its Proc
    with .port and, with control=True, .control_port (see gslb_queries)."""
    exe = os.path.join(build, "bench", "gslb_sim", "gslb-sim")
    if not os.access(exe, os.X_OK):
        raise SetupError(f"{exe} not found: build target gslb-sim")
    argv = ["taskset", "-c", cpus, exe, "--config", zone_path, "--listen", "127.0.0.1:0"]
    if control:
        argv += ["--control", "127.0.0.1:0"]
    p = Proc("gslb-sim", argv, workdir, stdout_pipe=True)
    lines = p.read_lines_until(r"^ready")
    m = next((re.match(r"listening udp 127\.0\.0\.1:(\d+)", l) for l in lines if l.startswith("listening")), None)
    if not m:
        p.stop()
        raise SetupError(f"gslb-sim: unexpected output {lines!r}")
    p.port = int(m.group(1))
    c = next((re.match(r"control 127\.0\.0\.1:(\d+)", l) for l in lines if l.startswith("control")), None)
    p.control_port = int(c.group(1)) if c else None
    return p


def gslb_queries(sim):
    """How many queries gslb-sim has received so far (its `stats` command):
    the difference over a run is the servers' cache misses in that run."""
    import json

    return json.loads(weirtest.control_command("127.0.0.1", sim.control_port, "stats"))["queries"]


# ------------------------------------------------------------------- probing
def dns_query(port, name, qtype=1, timeout=1.0):
    """One UDP query (RD, no EDNS) to 127.0.0.1:port; returns (rcode, answer
    count) or None when nothing (readable) came back."""
    query = weirtest.make_query(name, qtype, qid=os.getpid() & 0xFFFF, edns=False)
    try:
        data = weirtest.udp_exchange("127.0.0.1", port, query, timeout)
        m = weirtest.parse_message(data) if data else None
    except (OSError, weirtest.DecodeError):
        return None
    return None if m is None else (m.rcode, len(m.answer))


def wait_answer(port, name=PROBE_NAME, timeout=10.0, proc=None):
    """True once `name` is answered NOERROR with records; False on timeout or
    when `proc` exits."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and not proc.alive():
            return False
        r = dns_query(port, name, timeout=0.5)
        if r is not None and r[0] == 0 and r[1] > 0:
            return True
        time.sleep(0.2)
    return False


def dig_check(port, name=PROBE_NAME):
    """dig (a client nobody here wrote) agrees the server answers: raises SetupError otherwise."""
    if shutil.which("dig") is None:
        return
    r = weirtest.dig("127.0.0.1", port, name, "A", norec=False, timeout=2.0, tries=2)
    if r.status != "NOERROR" or not r.addresses():
        raise SetupError(f"dig {name} @127.0.0.1 -p {port}: {r.status}, {len(r.addresses())} addresses")


# ---------------------------------------------------------------- the servers
def write_config(name, workdir, replacements, confdir=None, out_name=None):
    """bench/configs/NAME.in with each key of `replacements` replaced, written
    to workdir/(out_name or NAME); returns its path."""
    with open(os.path.join(confdir or CONFDIR, f"{name}.in")) as f:
        text = f.read()
    for key, value in replacements.items():
        text = text.replace(key, value)
    left = sorted(set(re.findall(r"@[A-Z_]+@", text)))
    if left:
        raise SetupError(f"{name}.in: placeholders not filled in: {', '.join(left)}")
    conf = os.path.join(workdir, out_name or name)
    with open(conf, "w") as f:
        f.write(text)
    return conf


def _exe(names, package):
    for n in names:
        path = shutil.which(n) or (n if os.path.isabs(n) else None)
        if path and os.access(path, os.X_OK):
            return path
    raise SetupError(f"{names[0]} not installed (apt-get install -y {package})")


def start_weir(build, workdir, sim_port, prefix, workers=1, label="weir"):
    """weir-fastpath on kernel sockets, 127.0.0.1 port 0, metrics on; .port, .metrics_port."""
    exe = os.path.join(build, "fastpath", "weir-fastpath")
    if not os.access(exe, os.X_OK):
        raise SetupError(f"{exe} not found: build target weir-fastpath")
    conf = os.path.join(workdir, f"{label}.toml")
    with open(conf, "w") as f:
        f.write(
            "[server]\n"
            'listen = ["127.0.0.1:0"]\n'
            f"workers = {workers}\n"
            'metrics_listen = "127.0.0.1:0"\n'
            "[acl]\n"
            'allow = ["127.0.0.0/8"]\n'
            "[upstream]\n"
            f'ordinary = ["127.0.0.1:{sim_port}"]\n'
        )
    p = Proc(label, prefix + [exe, "-c", conf], workdir, stdout_pipe=True)
    lines = p.read_lines_until(r"^metrics http")
    port = metrics = None
    for l in lines:
        m = re.match(r"listening udp 127\.0\.0\.1:(\d+)", l)
        if m:
            port = int(m.group(1))
        m = re.match(r"metrics http 127\.0\.0\.1:(\d+)", l)
        if m:
            metrics = int(m.group(1))
    if port is None:
        p.stop()
        raise SetupError(f"{label}: unexpected output {lines!r}")
    p.port, p.metrics_port, p.conf = port, metrics, conf
    return p


def weir_metrics(p):
    """{"hits": n, "misses": n, "queries": n} from weir's Prometheus endpoint ({} if unreachable)."""
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{p.metrics_port}/metrics", timeout=2).read().decode()
    except OSError:
        return {}
    out = {}
    for key, pat in (("hits", r"^weir_cache_hits_total (\d+)"), ("misses", r"^weir_cache_misses_total (\d+)"),
                     ("queries", r'^weir_queries_total\{transport="udp"\} (\d+)')):
        m = re.search(pat, body, re.M)
        if m:
            out[key] = int(m.group(1))
    return out


def start_dnsdist(workdir, sim_port, prefix):
    """dnsdist with a packet cache in front of gslb-sim (bench/configs/dnsdist.conf.in)."""
    exe = _exe(["dnsdist"], "dnsdist")
    port = free_port()
    conf = write_config("dnsdist.conf", workdir, {"@PORT@": str(port), "@UPSTREAM@": f"127.0.0.1:{sim_port}"})
    p = Proc("dnsdist", prefix + [exe, "-C", conf, "--supervised", "--disable-syslog"], workdir)
    p.port, p.conf = port, conf
    return p


def start_unbound(workdir, sim_port, prefix, config="unbound.conf"):
    """unbound, 1 thread, forwarding everything to gslb-sim (bench/configs/CONFIG.in,
    default unbound.conf.in)."""
    exe = _exe(["unbound", "/usr/sbin/unbound"], "unbound")
    port = free_port()
    conf = write_config(config, workdir,
                        {"@PORT@": str(port), "@UPSTREAM_PORT@": str(sim_port), "@DIR@": workdir})
    p = Proc("unbound", prefix + [exe, "-d", "-c", conf], workdir)
    p.port, p.conf = port, conf
    return p


def start_pdns_recursor(workdir, sim_port, prefix):
    """PowerDNS Recursor, 1 thread, packet cache, everything forwarded to
    gslb-sim (bench/configs/pdns-recursor.conf.in); its own config dir, so
    /etc/powerdns is not read."""
    exe = _exe(["pdns_recursor", "/usr/sbin/pdns_recursor"], "pdns-recursor")
    port = free_port()
    rundir = os.path.join(workdir, "pdns-recursor")
    os.makedirs(rundir, exist_ok=True)
    conf = write_config("pdns-recursor.conf", rundir,
                        {"@ADDRESS@": "127.0.0.1", "@PORT@": str(port), "@UPSTREAM@": f"127.0.0.1:{sim_port}",
                         "@DIR@": rundir}, out_name="recursor.conf")
    p = Proc("pdns-recursor", prefix + [exe, f"--config-dir={rundir}"], workdir)
    p.port, p.conf = port, conf
    return p


def start_kresd(workdir, sim_port, prefix):
    """Knot Resolver, one process (kresd -n), forwarding everything to gslb-sim
    (bench/configs/kresd.conf.in); run directory (cache, control socket) in workdir."""
    exe = _exe(["kresd", "/usr/sbin/kresd"], "knot-resolver")
    port = free_port()
    rundir = os.path.join(workdir, "kresd")
    os.makedirs(rundir, exist_ok=True)
    conf = write_config("kresd.conf", rundir,
                        {"@ADDRESS@": "127.0.0.1", "@PORT@": str(port), "@UPSTREAM@": f"127.0.0.1@{sim_port}",
                         "@DIR@": rundir})
    p = Proc("kresd", prefix + [exe, "-n", "-c", conf, rundir], workdir, cwd=rundir)
    p.port, p.conf = port, conf
    return p
