"""The programs under test and their peers, each started on loopback from a
config and stopped by PID: gslb-sim (the scripted GSLB authoritative),
weir-fastpath, weir-recursor, weir-mgmt, and Debian's unbound."""

from __future__ import annotations

import json
import os
import signal
import re
import subprocess
import time
from typing import Optional, Sequence

import dns.exception
import dns.message
import dns.query

from .clients import Metrics, Response, control_command, dig, http_get
from .config import unbound_config
from .process import Process, binary, free_port, run, split_hostport, write_temp


class _Program:
    """A program we started (`process`), stopped by PID."""

    process: Process

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.alive()

    def stop(self) -> int:
        return self.process.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class _MetricsEndpoint:
    """A daemon's Prometheus endpoint, from its "metrics http ADDR" start-up
    line (`metrics_host`/`metrics_port`; None when it has none)."""

    metrics_host = None
    metrics_port = None

    def _metrics_line(self, line: str) -> bool:
        if not line.startswith("metrics http "):
            return False
        self.metrics_host, self.metrics_port = split_hostport(line.split()[2])
        return True

    def metrics(self) -> Metrics:
        if self.metrics_port is None:
            raise RuntimeError("started without server.metrics_listen")
        return Metrics(http_get(self.metrics_host, self.metrics_port, "/metrics"))


class _Server(_Program, _MetricsEndpoint):
    """A program started with `argv` that prints its addresses, then a line
    matching `ready`: "listening udp ADDR [tcp ADDR]" for each listener
    (`listeners`; `host`/`port` is the first, UDP and TCP share the port),
    "control ADDR" for a line-protocol control port, "control unix PATH" and
    "control tcp ADDR" for weirctl's control channel (`control_socket`,
    `control_tcp`) and "metrics http ADDR" for a Prometheus endpoint. A config written to a temporary file
    (`temp_config`) is removed on stop."""

    _LISTEN = re.compile(r"^listening udp (\S+)(?: tcp (\S+))?$")
    control_address = None
    control_socket = None
    control_tcp = None

    def _start(self, argv: Sequence[str], ready: str, timeout: float, temp_config: Optional[str] = None) -> None:
        self._temp_config = temp_config
        try:
            self.process = Process(argv, ready=ready, timeout=timeout)
        except Exception:
            self._remove_temp_config()
            raise
        self.listeners = []
        for line in self.process.lines:
            m = self._LISTEN.match(line)
            if m:
                self.listeners.append(split_hostport(m.group(1)))
            elif line.startswith("control unix "):
                self.control_socket = line.split(" ", 2)[2]
            elif line.startswith("control tcp "):
                self.control_tcp = split_hostport(line.split()[2])
            elif line.startswith("control "):  # the recursor's legacy control port
                self.control_address = split_hostport(line.split()[1])
            elif not self._metrics_line(line):
                self._on_line(line)
        self.host, self.port = self.listeners[0]

    def _on_line(self, line: str) -> None:
        pass

    def _remove_temp_config(self) -> None:
        if self._temp_config:
            try:
                os.unlink(self._temp_config)
            except OSError:
                pass
            self._temp_config = None

    def control(self, line: str) -> str:
        if self.control_address is None:
            raise RuntimeError(f"{self.process.argv[0]} was started without a control port")
        return control_command(*self.control_address, line)

    def stats(self) -> dict:
        """The `stats` JSON of the control port."""
        return json.loads(self.control("stats"))

    def _control_ok(self, line: str) -> None:
        reply = self.control(line).strip()
        if reply != "ok":
            raise RuntimeError(f"{os.path.basename(self.process.argv[0])} control: {reply}")

    def stop(self) -> int:
        rc = self.process.stop()
        self._remove_temp_config()
        return rc


class GslbSim(_Server):
    """gslb-sim started on loopback with port 0; `host`/`port` is the first
    listen address (UDP and TCP share the port), `listeners` all of them.

    Pass `config_text` (written to a temp file) or `config_path`.
    """

    RELPATH = "bench/gslb_sim/gslb-sim"

    def __init__(self, build_dir: str, config_text: Optional[str] = None, config_path: Optional[str] = None,
                 listen: Sequence[str] = ("127.0.0.1:0",), control: Optional[str] = "127.0.0.1:0",
                 query_log: Optional[str] = None, seed: Optional[int] = None,
                 weight_option_code: Optional[int] = None, extra_args: Sequence[str] = (), timeout: float = 10.0):
        tmp = None
        if config_path is None:
            if config_text is None:
                raise ValueError("config_text or config_path is required")
            tmp = config_path = write_temp(config_text)
        self.config_path = config_path
        argv = [binary(build_dir, self.RELPATH), "--config", config_path]
        for address in listen:
            argv += ["--listen", address]
        if control:
            argv += ["--control", control]
        if query_log:
            argv += ["--query-log", query_log]
        if seed is not None:
            argv += ["--seed", str(seed)]
        if weight_option_code is not None:
            argv += ["--weight-option-code", str(weight_option_code)]
        argv += list(extra_args)
        self._start(argv, r"^ready$", timeout, temp_config=tmp)

    def log(self, n: int = 100) -> list:
        """The last `n` queries, oldest first, as dicts."""
        return [json.loads(l) for l in self.control(f"log {n}").splitlines() if l.strip()]

    def reset(self) -> None:
        self._control_ok("reset")

    def set_weights(self, name: str, view: str, weights: Sequence[int]) -> None:
        self._control_ok(f"set-weights {name} {view} {','.join(str(w) for w in weights)}")

    def reload(self) -> None:
        self._control_ok("reload")


class _Daemon(_Server):
    """A weir daemon started from a config text (written to a temp file) and
    stopped by PID. Subclasses name the binary (RELPATH) and the start-up
    line that means ready (READY), and read their other start-up lines in
    _on_line(). `extra_args` go after the config (e.g. "--log-level", "debug")."""

    RELPATH = ""
    READY = r"^ready$"

    def __init__(self, build_dir: str, config_text: str, test_clock: bool = False, timeout: float = 10.0,
                 extra_args: Sequence[str] = ()):
        self.config_path = write_temp(config_text)
        argv = [binary(build_dir, self.RELPATH), "-c", self.config_path]
        if test_clock:
            argv.append("--test-clock")
        argv += list(extra_args)
        self._start(argv, self.READY, timeout, temp_config=self.config_path)

    def dig(self, qname: str, qtype: str = "A", *, source: Optional[str] = None, norec: bool = False,
            extra: Sequence[str] = (), **kw) -> Response:
        """dig against this server, from `source` (any 127.x.y.z) if given."""
        extra = list(extra) + (["-b", source] if source else [])
        return dig(self.host, self.port, qname, qtype, norec=norec, extra=extra, **kw)


class Fastpath(_Daemon):
    """weir-fastpath started on loopback from a config text (written to a
    temp file). The config must listen on port 0 and set
    server.metrics_listen = "127.0.0.1:0". `host`/`port` is the first listen
    address (UDP and TCP), `metrics_port` the Prometheus port.

    With test_clock=True the TTL clock only moves through advance_clock()."""

    RELPATH = "fastpath/weir-fastpath"
    dot = None  # (host, port) of the first DoT listener ([tls]), from "listening dot ADDR"
    doh = None  # and of the first DoH listener
    http = None  # and of the first plain HTTP (HTTPDNS) listener

    def _on_line(self, line: str) -> None:
        m = re.match(r"^listening (dot|doh|http) (\S+)$", line)
        if m and getattr(self, m.group(1)) is None:
            setattr(self, m.group(1), split_hostport(m.group(2)))

    def advance_clock(self, seconds: int) -> str:
        """Moves the --test-clock TTL clock forward; returns the server's reply."""
        return http_get(self.metrics_host, self.metrics_port, f"/test/advance-clock?seconds={int(seconds)}")


class Recursor(_Daemon):
    """weir-recursor started from a config text (written to a temp file);
    `host`/`port` is the first listen address (UDP and TCP), `control()`
    talks to its control port (stats, advance-clock N, flush, reload-tags),
    `metrics()` scrapes it when the config sets server.metrics_listen.

    With test_clock=True the TTL clock only moves through advance_clock()."""

    RELPATH = "recursor/weir-recursor"

    def __init__(self, build_dir: str, config_text: str, test_clock: bool = False, timeout: float = 15.0,
                 extra_args: Sequence[str] = ()):
        super().__init__(build_dir, config_text, test_clock, timeout, extra_args)

    def advance_clock(self, seconds: int) -> None:
        self._control_ok(f"advance-clock {int(seconds)}")

    def flush(self) -> None:
        self.control("flush")


class Mgmt(_Program, _MetricsEndpoint):
    """weir-mgmt on 127.0.0.1:`port` (0: any) with its database and token in
    `workdir` (kept across restarts, so a test can stop and start it again on
    the same port with the same data). weirctl() runs the real CLI. With
    `metrics`, its Prometheus endpoint is on 127.0.0.1, any port."""

    RELPATH = "mgmt/weir-mgmt"
    TOKEN = "test-token-0123456789abcdef"

    def __init__(self, build_dir: str, workdir: str, port: int = 0, timeout: float = 10.0, metrics: bool = False,
                 etcd: Optional[Sequence[str]] = None, instance: str = "", config_name: str = "mgmt.toml",
                 etcd_prefix: str = "/weir/", extra: str = ""):
        """`etcd`: the store is that etcd cluster's (its client endpoints)
        instead of the SQLite file; several Mgmt may share it (give each its
        own `config_name` in one workdir, or their own workdirs). `extra`:
        more tables for the config file ([calibration]); a feedback endpoint
        it opens is at `feedback_host`:`feedback_port`."""
        self.build_dir = build_dir
        self.workdir = workdir
        self.token_file = os.path.join(workdir, "mgmt.token")
        if not os.path.exists(self.token_file):
            with open(self.token_file, "w") as f:
                f.write(self.TOKEN + "\n")
        self.config_path = os.path.join(workdir, config_name)
        with open(self.config_path, "w") as f:
            f.write(f'[mgmt]\nlisten = "127.0.0.1:{port}"\ntoken_file = "mgmt.token"\n')
            if instance:
                f.write(f'instance = "{instance}"\n')
            if metrics:
                f.write('metrics_listen = "127.0.0.1:0"\n')
            if etcd is None:
                f.write('database = "mgmt.db"\n')
            else:
                f.write('store = "etcd"\n[etcd]\nendpoints = [' + ", ".join(f'"{e}"' for e in etcd) + ']\n'
                        f'prefix = "{etcd_prefix}"\nrequest_timeout_ms = 1500\nconnect_timeout_ms = 300\n')
            f.write(extra)
        self.process = Process([binary(build_dir, self.RELPATH), "-c", self.config_path], ready=r"^ready$",
                               timeout=timeout)
        m = re.match(r"^listening (\S+)$", self.process.lines[0])
        self.host, self.port = split_hostport(m.group(1))
        self.address = f"{self.host}:{self.port}"
        self.feedback_host = self.feedback_port = None
        for line in self.process.lines[1:]:
            if line.startswith("feedback http "):
                self.feedback_host, self.feedback_port = split_hostport(line.split()[2])
            self._metrics_line(line)

    def weirctl(self, *args: str, token_file: Optional[str] = None, json_out: bool = False,
                timeout: float = 30.0) -> subprocess.CompletedProcess:
        argv = [binary(self.build_dir, "mgmt/weirctl"), "--server", self.address, "--token-file",
                token_file or self.token_file, "--actor", "test"]
        if json_out:
            argv.append("--json")
        return run(argv + list(args), timeout=timeout)

    def weirctl_json(self, *args: str) -> dict:
        r = self.weirctl(*args, json_out=True)
        if r.returncode != 0:
            raise AssertionError(f"weirctl {' '.join(args)}: rc {r.returncode}: {r.stderr}")
        return json.loads(r.stdout)

    def wait_in_sync(self, node: str, version: int, timeout: float = 10.0) -> dict:
        """Waits until `node` has ACKed `version`; returns its record."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            for n in self.weirctl_json("nodes")["nodes"]:
                if n["node"] == node:
                    last = n
                    if n["connected"] and n["version"] == version:
                        return n
            time.sleep(0.05)
        raise AssertionError(f"node {node} not at version {version} within {timeout}s: {last}")


class EtcdCluster:
    """Debian's etcd: a cluster of `members` on 127.0.0.1 (free client and
    peer ports), data in `workdir`/etcd-N. kill(i) stops one member hard
    (SIGKILL), start(i) starts it again on its ports and data; pause(i) and
    resume(i) freeze and thaw it (SIGSTOP/SIGCONT). etcdctl() runs the real
    CLI against every member."""

    def __init__(self, workdir: str, members: int = 3, timeout: float = 20.0):
        self.workdir = workdir
        self.names = [f"m{i}" for i in range(members)]
        self.client_ports = [free_port(udp_and_tcp=False) for _ in range(members)]
        self.peer_ports = [free_port(udp_and_tcp=False) for _ in range(members)]
        self.endpoints = [f"http://127.0.0.1:{p}" for p in self.client_ports]
        self.initial = ",".join(f"{n}=http://127.0.0.1:{p}" for n, p in zip(self.names, self.peer_ports))
        self.processes: list = [None] * members
        self.paused: set = set()
        for i in range(members):
            self.start(i, new=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.etcdctl("endpoint", "health", check=False).returncode == 0:
                return
            time.sleep(0.2)
        logs = [self.log(i)[-2000:] for i in range(members)]
        self.stop()
        raise RuntimeError(f"etcd cluster not healthy within {timeout}s: {logs}")

    def log(self, i: int) -> str:
        try:
            with open(os.path.join(self.workdir, f"etcd-{i}.log")) as f:
                return f.read()
        except OSError:
            return ""

    def start(self, i: int, new: bool = False) -> None:
        data = os.path.join(self.workdir, f"etcd-{i}")
        argv = ["etcd", "--name", self.names[i], "--data-dir", data,
                "--listen-client-urls", self.endpoints[i], "--advertise-client-urls", self.endpoints[i],
                "--listen-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_ports[i]}",
                "--initial-cluster", self.initial, "--initial-cluster-token", os.path.basename(self.workdir),
                "--initial-cluster-state", "new", "--heartbeat-interval", "50", "--election-timeout", "500",
                "--logger", "zap", "--log-outputs", os.path.join(self.workdir, f"etcd-{i}.log")]
        self.processes[i] = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def kill(self, i: int) -> None:
        p = self.processes[i]
        if p is not None:
            if i in self.paused:
                os.kill(p.pid, signal.SIGCONT)
                self.paused.discard(i)
            p.kill()
            p.wait(timeout=10)
            self.processes[i] = None

    def pause(self, i: int) -> None:
        os.kill(self.processes[i].pid, signal.SIGSTOP)
        self.paused.add(i)

    def resume(self, i: int) -> None:
        os.kill(self.processes[i].pid, signal.SIGCONT)
        self.paused.discard(i)

    def etcdctl(self, *args: str, endpoints: Optional[Sequence[str]] = None, check: bool = True,
                timeout: float = 15.0) -> subprocess.CompletedProcess:
        live = endpoints or [e for i, e in enumerate(self.endpoints) if self.processes[i] is not None
                             and i not in self.paused]
        env = dict(os.environ, ETCDCTL_API="3")
        r = subprocess.run(["etcdctl", "--endpoints", ",".join(live), "--dial-timeout", "1s",
                            "--command-timeout", "5s", *args], capture_output=True, text=True, timeout=timeout,
                           env=env)
        if check and r.returncode != 0:
            raise AssertionError(f"etcdctl {' '.join(args)}: rc {r.returncode}: {r.stderr}")
        return r

    def revision(self) -> int:
        out = self.etcdctl("endpoint", "status", "--write-out=json").stdout
        return max(int(e["Status"]["header"]["revision"]) for e in json.loads(out))

    def stop(self) -> None:
        for i in range(len(self.processes)):
            self.kill(i)


class Unbound(_Program):
    """Debian's unbound (the peer weir is compared with) on 127.0.0.1 and a
    free port, its config from unbound_config() in `directory`; started in
    the foreground with `prefix` before it (e.g. taskset) and ready once it
    answers ". NS"."""

    def __init__(self, directory: str, root_hints: str, net: str, extra: Sequence[str] = (),
                 prefix: Sequence[str] = (), timeout: float = 15.0):
        self.config_path = os.path.join(directory, "unbound.conf")
        # The free port can be taken between its pick and unbound's bind:
        # then unbound exits, and it starts again on another.
        for attempt in range(3):
            self.host, self.port = "127.0.0.1", free_port()
            with open(self.config_path, "w") as f:
                f.write(unbound_config(self.port, directory, root_hints, net, extra))
            self.process = Process(list(prefix) + ["unbound", "-d", "-c", self.config_path], ready=None)
            deadline = time.monotonic() + timeout
            while not self._answers():
                if not self.process.alive() and attempt < 2:
                    break
                if time.monotonic() > deadline or not self.process.alive():
                    err = self.process.stderr_text()
                    self.process.stop()
                    raise RuntimeError(f"unbound did not start: {err}")
                time.sleep(0.1)
            else:
                return
            self.process.stop()

    def _answers(self) -> bool:
        try:
            dns.query.udp(dns.message.make_query(".", "NS"), self.host, port=self.port, timeout=1)
            return True
        except (dns.exception.Timeout, dns.query.BadResponse, OSError):
            return False

    def stderr_text(self) -> str:
        return self.process.stderr_text()
