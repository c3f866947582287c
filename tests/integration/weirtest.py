"""Shared helpers for weir's black-box tests (tests/integration/test_*.py).

The tests start the real binaries on loopback and query them with real
clients (dig, kdig). This module has no third-party dependencies.

Typical use::

    import weirtest
    BUILD_DIR = weirtest.parse_build_dir()          # strips --build-dir from sys.argv

    class T(unittest.TestCase):
        def test_x(self):
            with weirtest.GslbSim(BUILD_DIR, config_text=ZONES) as sim:
                r = weirtest.dig(sim.host, sim.port, "www.example.com", "A")
                self.assertEqual(r.status, "NOERROR", r.text)

    if __name__ == "__main__":
        unittest.main()

Processes are stopped by PID (terminate, wait, kill), never by name.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

# ---------------------------------------------------------------- setup


def parse_build_dir(argv: Optional[list] = None) -> str:
    """Returns the value of --build-dir and removes it from argv (default
    sys.argv) so unittest.main() does not see it. Falls back to
    $WEIR_BUILD_DIR, then ./build."""
    argv = sys.argv if argv is None else argv
    value = os.environ.get("WEIR_BUILD_DIR", "build")
    i = 1
    while i < len(argv):
        if argv[i] == "--build-dir" and i + 1 < len(argv):
            value = argv[i + 1]
            del argv[i:i + 2]
        elif argv[i].startswith("--build-dir="):
            value = argv[i].split("=", 1)[1]
            del argv[i]
        else:
            i += 1
    return os.path.abspath(value)


def binary(build_dir: str, relpath: str) -> str:
    """Path of a built program, e.g. binary(b, "bench/gslb_sim/gslb-sim").
    Raises FileNotFoundError with a clear message when it was not built."""
    path = os.path.join(build_dir, relpath)
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{path} not found or not executable (build it first)")
    return path


def require_tools(*names: str) -> None:
    """Raises RuntimeError naming the missing programs. Black-box tests need
    the real clients, so a missing one is a setup error, not a skipped test."""
    missing = [n for n in names if shutil.which(n) is None]
    if missing:
        raise RuntimeError(f"missing tools: {', '.join(missing)} (scripts/install-deps.sh installs them)")


def free_port(host: str = "127.0.0.1", udp_and_tcp: bool = True) -> int:
    """A port that is free right now on `host` for TCP (and UDP). Prefer
    letting a server bind port 0 and report its port: another process can
    take this one before you bind it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(50):
        with socket.socket(family, socket.SOCK_STREAM) as t:
            t.bind((host, 0))
            port = t.getsockname()[1]
            if not udp_and_tcp:
                return port
            try:
                with socket.socket(family, socket.SOCK_DGRAM) as u:
                    u.bind((host, port))
                    return port
            except OSError:
                continue
    raise RuntimeError(f"no free port on {host}")


def write_temp(text: str, suffix: str = ".toml", directory: Optional[str] = None) -> str:
    """Writes `text` to a new temporary file and returns its path."""
    fd, path = tempfile.mkstemp(suffix=suffix, dir=directory)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def run(argv: Sequence[str], timeout: float = 30.0, check: bool = False) -> subprocess.CompletedProcess:
    """Runs a command to completion, capturing text stdout/stderr."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=check)


# ---------------------------------------------------------------- processes


class Process:
    """A child process whose stdout is read line by line in the background.

    The constructor starts it and waits until a stdout line matches `ready`
    (a regex), so the caller knows it is serving. Lines seen so far are in
    `lines`; stderr goes to a temporary file (`stderr_text()`).
    """

    def __init__(self, argv: Sequence[str], ready: Optional[str] = r"^ready$", timeout: float = 10.0,
                 env: Optional[dict] = None, cwd: Optional[str] = None):
        self.argv = list(argv)
        self.lines: list[str] = []
        self._queue: "queue.Queue[Optional[str]]" = queue.Queue()
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self._stderr_final = ""
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env,
                                     cwd=cwd, bufsize=1)
        self.pid = self.proc.pid
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if ready is not None:
            try:
                self.wait_line(ready, timeout)
            except Exception:
                self.stop()
                raise

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_line(self, pattern: str, timeout: float = 10.0) -> re.Match:
        """Waits for the next stdout line matching `pattern`; returns the match.
        Raises RuntimeError (with stderr) if the process exits or times out."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        for line in self.lines:
            m = rx.search(line)
            if m:
                return m
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{self.argv[0]}: no line matching {pattern!r} within {timeout}s; "
                                   f"stdout={self.lines!r} stderr={self.stderr_text()!r}")
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                self.proc.wait(timeout=5)
                raise RuntimeError(f"{self.argv[0]} exited with {self.proc.returncode} before {pattern!r}; "
                                   f"stdout={self.lines!r} stderr={self.stderr_text()!r}")
            self.lines.append(line)
            m = rx.search(line)
            if m:
                return m

    def stderr_text(self) -> str:
        if self._stderr.closed:
            return self._stderr_final
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 5.0) -> int:
        """SIGTERM, wait up to `timeout`, then SIGKILL. Returns the exit code."""
        rc = stop_pid(self.proc, timeout)
        self._reader.join(timeout=2)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if not self._stderr.closed:
            self._stderr_final = self.stderr_text()
            self._stderr.close()
        return rc

    def __enter__(self) -> "Process":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def stop_pid(proc: "subprocess.Popen | int", timeout: float = 5.0) -> int:
    """Stops one process we started: SIGTERM, wait, then SIGKILL. Accepts a
    Popen (preferred: it is reaped) or a PID. Returns the exit code (or
    -signal), or 0 for a bare PID that is already gone."""
    if isinstance(proc, int):
        try:
            os.kill(proc, signal.SIGTERM)
        except ProcessLookupError:
            return 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.kill(proc, 0)
            except ProcessLookupError:
                return 0
            time.sleep(0.05)
        try:
            os.kill(proc, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return -signal.SIGKILL
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
    return proc.returncode


# ---------------------------------------------------------------- DNS clients


@dataclass
class Record:
    """One resource record as dig/kdig print it."""
    name: str
    ttl: int
    klass: str
    type: str
    data: str


@dataclass
class Ecs:
    """The CLIENT-SUBNET option of a response: address/source/scope."""
    address: str
    source: int
    scope: int


@dataclass
class Response:
    """A parsed dig or kdig answer. `status` is None when no answer came
    (timeout, connection refused); `text` is the client's full output."""
    text: str
    status: Optional[str] = None
    id: Optional[int] = None
    flags: set = field(default_factory=set)
    counts: dict = field(default_factory=dict)
    edns: bool = False
    udp_size: Optional[int] = None
    ecs: Optional[Ecs] = None
    options: dict = field(default_factory=dict)  # code -> bytes (ECS excluded)
    answer: list = field(default_factory=list)
    authority: list = field(default_factory=list)
    additional: list = field(default_factory=list)
    transport: Optional[str] = None  # "UDP" or "TCP", as reported by the client
    truncated_retry: bool = False  # dig reported TC and retried over TCP

    @property
    def aa(self) -> bool:
        return "aa" in self.flags

    @property
    def tc(self) -> bool:
        return "tc" in self.flags

    def option(self, code: int) -> Optional[bytes]:
        """Data of EDNS option `code`, b"" for a length-0 option, None if absent."""
        return self.options.get(code)

    def addresses(self) -> list:
        """A/AAAA data of the answer section, in answer order."""
        return [r.data for r in self.answer if r.type in ("A", "AAAA")]

    def weights(self, code: int = 65001) -> Optional[list]:
        """The weight option decoded as 16-bit big-endian values (DESIGN 2), or None."""
        data = self.option(code)
        if data is None:
            return None
        return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data) - 1, 2)]


_RR = re.compile(r"^(\S+)\s+(\d+)\s+(\S+)\s+(\S+)\s*(.*)$")


def _record(line: str) -> Optional[Record]:
    m = _RR.match(line.strip())
    if not m:
        return None
    return Record(m.group(1), int(m.group(2)), m.group(3), m.group(4), m.group(5).strip())


def _hex_bytes(text: str) -> bytes:
    return bytes.fromhex(re.sub(r"[^0-9a-fA-F]", "", text))


def _parse_ecs(value: str) -> Optional[Ecs]:
    # "198.51.100.0/24/24" or "2001:db8::/48/40"
    parts = value.strip().rsplit("/", 2)
    if len(parts) != 3:
        return None
    return Ecs(parts[0], int(parts[1]), int(parts[2]))


def parse_dig(text: str) -> Response:
    """Parses dig's default (full) output. Only the last message is kept when
    dig printed several (e.g. after retries)."""
    r = Response(text=text)
    section = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith(";; Truncated, retrying in TCP mode"):
            r.truncated_retry = True
        m = re.match(r";; ->>HEADER<<- opcode: \w+, status: (\w+), id: (\d+)", line)
        if m:
            status = r.truncated_retry
            r = Response(text=text, status=m.group(1), id=int(m.group(2)), truncated_retry=status)
            section = None
            continue
        m = re.match(r";; flags:([^;]*);(.*)$", line)
        if m:
            r.flags = set(m.group(1).split())
            for k, v in re.findall(r"(\w+): (\d+)", m.group(2)):
                r.counts[k] = int(v)
            continue
        m = re.match(r";; SERVER: .*\((UDP|TCP)\)", line)
        if m:
            r.transport = m.group(1)
            continue
        if line.startswith(";; OPT PSEUDOSECTION"):
            r.edns = True
            section = "opt"
            continue
        if section == "opt" and line.startswith("; "):
            m = re.match(r"; EDNS: version: \d+, flags:[^;]*; udp: (\d+)", line)
            if m:
                r.udp_size = int(m.group(1))
            m = re.match(r"; CLIENT-SUBNET: (\S+)", line)
            if m:
                r.ecs = _parse_ecs(m.group(1))
            m = re.match(r"; OPT=(\d+):\s*(.*)$", line)
            if m:
                # dig prints '00 02 00 01 ("....")': keep the hex part only.
                r.options[int(m.group(1))] = _hex_bytes(m.group(2).split("(")[0])
            continue
        m = re.match(r";; (QUESTION|ANSWER|AUTHORITY|ADDITIONAL) SECTION:", line)
        if m:
            section = m.group(1).lower()
            continue
        if not line:
            section = None
            continue
        if line.startswith(";"):
            continue
        if section in ("answer", "authority", "additional"):
            rec = _record(line)
            if rec is not None:
                getattr(r, section).append(rec)
    return r


def parse_kdig(text: str) -> Response:
    """Parses kdig's default output (Knot 3.2: no +json)."""
    r = Response(text=text)
    section = None
    for raw in text.splitlines():
        line = raw.rstrip()
        m = re.match(r";; ->>HEADER<<- opcode: \w+; status: (\w+); id: (\d+)", line)
        if m:
            r = Response(text=text, status=m.group(1), id=int(m.group(2)))
            section = None
            continue
        m = re.match(r";; Flags:([^;]*);(.*)$", line)
        if m:
            r.flags = set(m.group(1).split())
            for k, v in re.findall(r"(\w+): (\d+)", m.group(2)):
                r.counts[k] = int(v)
            continue
        m = re.match(r";; From .*\((UDP|TCP)\)", line)
        if m:
            r.transport = m.group(1)
            continue
        if line.startswith(";; EDNS PSEUDOSECTION"):
            r.edns = True
            section = "opt"
            continue
        if section == "opt":
            m = re.match(r";; Version: \d+; flags:[^;]*; UDP size: (\d+)", line)
            if m:
                r.udp_size = int(m.group(1))
            m = re.match(r";; CLIENT-SUBNET: (\S+)", line)
            if m:
                r.ecs = _parse_ecs(m.group(1))
            m = re.match(r";; Option \((\d+)\):\s*(.*)$", line)
            if m:
                r.options[int(m.group(1))] = _hex_bytes(m.group(2))
        m = re.match(r";; (QUESTION|ANSWER|AUTHORITY|ADDITIONAL) SECTION:", line)
        if m:
            section = m.group(1).lower()
            continue
        if not line:
            section = None
            continue
        if line.startswith(";"):
            continue
        if section in ("answer", "authority", "additional"):
            rec = _record(line)
            if rec is not None:
                getattr(r, section).append(rec)
    return r


def _client_args(ecs: Optional[str], options: Iterable, tcp: bool, edns: Optional[int], bufsize: Optional[int],
                 norec: bool) -> list:
    args = []
    if tcp:
        args.append("+tcp")
    if norec:
        args.append("+norec")
    if edns is not None:
        args.append(f"+edns={edns}")
    if bufsize is not None:
        args.append(f"+bufsize={bufsize}")
    if ecs is not None:
        args.append(f"+subnet={ecs}")
    for opt in options:
        # (code, b"data") / (code, "hexstring") / code  -> +ednsopt=CODE[:HEX]
        if isinstance(opt, int):
            args.append(f"+ednsopt={opt}")
        else:
            code, data = opt
            hexdata = data.hex() if isinstance(data, (bytes, bytearray)) else str(data)
            args.append(f"+ednsopt={code}:{hexdata}" if hexdata else f"+ednsopt={code}")
    return args


def dig(server: str, port: int, qname: str, qtype: str = "A", *, ecs: Optional[str] = None,
        options: Iterable = (), tcp: bool = False, edns: Optional[int] = None, bufsize: Optional[int] = None,
        norec: bool = True, timeout: float = 2.0, tries: int = 1, extra: Sequence[str] = ()) -> Response:
    """Queries with dig and parses its full output.

    ecs: "198.51.100.7/24" (dig's +subnet). options: EDNS options, each a
    code (length 0) or (code, bytes-or-hex). extra: more dig arguments.
    """
    argv = ["dig", f"@{server}", "-p", str(port), qname, qtype, f"+time={max(1, int(timeout))}",
            f"+tries={tries}"]
    argv += _client_args(ecs, options, tcp, edns, bufsize, norec)
    argv += list(extra)
    out = run(argv, timeout=timeout * tries + 10)
    return parse_dig(out.stdout + out.stderr)


def kdig(server: str, port: int, qname: str, qtype: str = "A", *, ecs: Optional[str] = None,
         options: Iterable = (), tcp: bool = False, edns: Optional[int] = None, bufsize: Optional[int] = None,
         norec: bool = True, timeout: float = 2.0, tries: int = 1, extra: Sequence[str] = ()) -> Response:
    """Queries with kdig (Knot); same arguments as dig()."""
    argv = ["kdig", f"@{server}", "-p", str(port), qname, qtype, f"+time={max(1, int(timeout))}",
            f"+retry={max(0, tries - 1)}"]
    argv += _client_args(ecs, options, tcp, edns, bufsize, norec)
    argv += list(extra)
    out = run(argv, timeout=timeout * tries + 10)
    return parse_kdig(out.stdout + out.stderr)


def udp_exchange(server: str, port: int, payload: bytes, timeout: float = 2.0) -> Optional[bytes]:
    """Sends raw bytes over UDP and returns the reply (None on timeout).
    For malformed-input tests only; real queries go through dig/kdig."""
    family = socket.AF_INET6 if ":" in server else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(payload, (server, port))
        try:
            return s.recv(65535)
        except socket.timeout:
            return None


# ---------------------------------------------------------------- gslb-sim


def control_command(host: str, port: int, line: str, timeout: float = 5.0) -> str:
    """Sends one line to a line-protocol control port (gslb-sim) and returns
    the whole reply (the server closes after replying)."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(line.encode() + b"\n")
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode()


_LISTEN = re.compile(r"^listening udp (\S+) tcp (\S+)$")


def split_hostport(text: str) -> tuple:
    """'127.0.0.1:53' -> ('127.0.0.1', 53); '[::1]:53' -> ('::1', 53)."""
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


class GslbSim:
    """gslb-sim started on loopback with port 0; `host`/`port` is the first
    listen address (UDP and TCP share the port), `listeners` all of them.

    Pass `config_text` (written to a temp file) or `config_path`.
    """

    RELPATH = "bench/gslb_sim/gslb-sim"

    def __init__(self, build_dir: str, config_text: Optional[str] = None, config_path: Optional[str] = None,
                 listen: Sequence[str] = ("127.0.0.1:0",), control: Optional[str] = "127.0.0.1:0",
                 query_log: Optional[str] = None, seed: Optional[int] = None,
                 weight_option_code: Optional[int] = None, extra_args: Sequence[str] = (), timeout: float = 10.0):
        self._tmp = None
        if config_path is None:
            if config_text is None:
                raise ValueError("config_text or config_path is required")
            self._tmp = write_temp(config_text)
            config_path = self._tmp
        self.config_path = config_path
        argv = [binary(build_dir, self.RELPATH), "--config", config_path]
        for l in listen:
            argv += ["--listen", l]
        if control:
            argv += ["--control", control]
        if query_log:
            argv += ["--query-log", query_log]
        if seed is not None:
            argv += ["--seed", str(seed)]
        if weight_option_code is not None:
            argv += ["--weight-option-code", str(weight_option_code)]
        argv += list(extra_args)
        self.process = Process(argv, ready=r"^ready$", timeout=timeout)
        self.listeners = []
        self.control_address = None
        for line in self.process.lines:
            m = _LISTEN.match(line)
            if m:
                self.listeners.append(split_hostport(m.group(1)))
            elif line.startswith("control "):
                self.control_address = split_hostport(line.split()[1])
        self.host, self.port = self.listeners[0]

    @property
    def pid(self) -> int:
        return self.process.pid

    def control(self, line: str) -> str:
        if self.control_address is None:
            raise RuntimeError("gslb-sim was started without --control")
        return control_command(*self.control_address, line)

    def stats(self) -> dict:
        """The `stats` JSON (docs/gslb-sim.md)."""
        return json.loads(self.control("stats"))

    def log(self, n: int = 100) -> list:
        """The last `n` queries, oldest first, as dicts."""
        return [json.loads(l) for l in self.control(f"log {n}").splitlines() if l.strip()]

    def reset(self) -> None:
        self._ok(self.control("reset"))

    def set_weights(self, name: str, view: str, weights: Sequence[int]) -> None:
        self._ok(self.control(f"set-weights {name} {view} {','.join(str(w) for w in weights)}"))

    def reload(self) -> None:
        self._ok(self.control("reload"))

    @staticmethod
    def _ok(reply: str) -> None:
        if reply.strip() != "ok":
            raise RuntimeError(f"gslb-sim control: {reply.strip()}")

    def stop(self) -> int:
        rc = self.process.stop()
        if self._tmp:
            try:
                os.unlink(self._tmp)
            except OSError:
                pass
            self._tmp = None
        return rc

    def __enter__(self) -> "GslbSim":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# ---------------------------------------------------------------- weir-fastpath


def http_get(host: str, port: int, path: str, timeout: float = 5.0) -> str:
    """GET `path` over plain HTTP/1.1 (the metrics endpoint closes after one
    reply); returns the body. Raises RuntimeError on a non-200 status."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    raw = b"".join(chunks).decode(errors="replace")
    head, _, body = raw.partition("\r\n\r\n")
    status = head.split("\r\n", 1)[0]
    if " 200 " not in status + " ":
        raise RuntimeError(f"GET {path}: {status!r}")
    return body


_SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class Metrics:
    """A parsed Prometheus text exposition: samples by name and labels."""

    def __init__(self, text: str):
        self.text = text
        self.samples: list = []  # (name, {label: value}, float)
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = _SAMPLE.match(line.strip())
            if m:
                labels = dict(_LABEL.findall(m.group(2) or ""))
                self.samples.append((m.group(1), labels, float(m.group(3))))

    def series(self, name: str, **labels) -> list:
        """[(labels, value)] of `name` whose labels include `labels`."""
        return [(l, v) for n, l, v in self.samples
                if n == name and all(l.get(k) == str(want) for k, want in labels.items())]

    def value(self, name: str, **labels) -> float:
        """Sum of the matching samples; 0 when there are none (Prometheus
        counters that were never incremented may be omitted)."""
        return sum(v for _, v in self.series(name, **labels))


class _Daemon:
    """A weir daemon started from a config text (written to a temp file) and
    stopped by PID; `host`/`port` is its first listen address (UDP and TCP).
    Subclasses name the binary (RELPATH), the start-up line that means ready
    (READY), and read their other start-up lines in _on_line()."""

    RELPATH = ""
    READY = r"^ready$"
    _LISTEN = re.compile(r"^listening udp (\S+)(?: tcp (\S+))?$")

    def __init__(self, build_dir: str, config_text: str, test_clock: bool = False, timeout: float = 10.0):
        self.config_path = write_temp(config_text)
        argv = [binary(build_dir, self.RELPATH), "-c", self.config_path]
        if test_clock:
            argv.append("--test-clock")
        try:
            self.process = Process(argv, ready=self.READY, timeout=timeout)
        except Exception:
            os.unlink(self.config_path)
            raise
        self.listeners = []
        for line in self.process.lines:
            m = self._LISTEN.match(line)
            if m:
                self.listeners.append(split_hostport(m.group(1)))
            else:
                self._on_line(line)
        self.host, self.port = self.listeners[0]

    def _on_line(self, line: str) -> None:
        pass

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.alive()

    def dig(self, qname: str, qtype: str = "A", *, source: Optional[str] = None, norec: bool = False,
            extra: Sequence[str] = (), **kw) -> Response:
        """dig against this server, from `source` (any 127.x.y.z) if given."""
        extra = list(extra) + (["-b", source] if source else [])
        return dig(self.host, self.port, qname, qtype, norec=norec, extra=extra, **kw)

    def stop(self) -> int:
        rc = self.process.stop()
        try:
            os.unlink(self.config_path)
        except OSError:
            pass
        return rc

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class Fastpath(_Daemon):
    """weir-fastpath started on loopback from a config text (written to a
    temp file). The config must listen on port 0 and set
    server.metrics_listen = "127.0.0.1:0". `host`/`port` is the first listen
    address (UDP and TCP), `metrics_port` the Prometheus port.

    With test_clock=True the TTL clock only moves through advance_clock()."""

    RELPATH = "fastpath/weir-fastpath"
    READY = r"^metrics http "

    def _on_line(self, line: str) -> None:
        if line.startswith("metrics http "):
            self.metrics_host, self.metrics_port = split_hostport(line.split()[2])

    def metrics(self) -> Metrics:
        return Metrics(http_get(self.metrics_host, self.metrics_port, "/metrics"))

    def advance_clock(self, seconds: int) -> str:
        """Moves the --test-clock TTL clock forward; returns the server's reply."""
        return http_get(self.metrics_host, self.metrics_port, f"/test/advance-clock?seconds={int(seconds)}")



_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")


def dig_many(server: str, port: int, qname: str, count: int, *, source: Optional[str] = None,
             qtype: str = "A", batch: int = 100, extra: Sequence[str] = (), timeout: float = 2.0) -> list:
    """Sends `count` queries for one name with `dig +short` (up to `batch`
    questions per dig process, one after another) and returns every address
    line printed, in order. A lost query prints no address, so
    len(result) < count reveals losses."""
    out = []
    left = count
    while left > 0:
        n = min(batch, left)
        argv = ["dig", f"@{server}", "-p", str(port), "+short", f"+time={max(1, int(timeout))}", "+tries=1"]
        if source:
            argv += ["-b", source]
        argv += list(extra)
        for _ in range(n):
            argv += [qname, qtype]
        res = run(argv, timeout=timeout * n + 30)
        out += [l.strip() for l in res.stdout.splitlines() if _IPV4.match(l.strip()) or
                (qtype == "AAAA" and ":" in l and not l.startswith(";"))]
        left -= n
    return out


@dataclass
class DnsperfResult:
    text: str
    sent: int = 0
    completed: int = 0
    lost: int = 0
    interrupted: int = 0
    rcodes: dict = field(default_factory=dict)


def parse_dnsperf(text: str) -> DnsperfResult:
    """Parses dnsperf 2.x's summary ("Queries sent:", "Response codes:")."""
    r = DnsperfResult(text=text)
    for key, attr in (("Queries sent", "sent"), ("Queries completed", "completed"), ("Queries lost", "lost"),
                      ("Queries interrupted", "interrupted")):
        m = re.search(rf"^\s*{key}:\s+(\d+)", text, re.M)
        if m:
            setattr(r, attr, int(m.group(1)))
    m = re.search(r"^\s*Response codes:\s+(.*)$", text, re.M)
    if m:
        for code, n in re.findall(r"([A-Z]+) (\d+)", m.group(1)):
            r.rcodes[code] = int(n)
    return r


def dnsperf(server: str, port: int, queries: Sequence[str], args: Sequence[str] = (), timeout: float = 120.0,
            source: Optional[str] = None) -> DnsperfResult:
    """Runs dnsperf with `queries` ("name TYPE" lines) as its data file and
    returns the parsed summary. `args`: more dnsperf options (-l, -Q, -q...)."""
    path = write_temp("\n".join(queries) + "\n", suffix=".txt")
    try:
        argv = ["dnsperf", "-s", server, "-p", str(port), "-d", path]
        if source:
            argv += ["-a", source]
        out = run(argv + list(args), timeout=timeout)
    finally:
        os.unlink(path)
    return parse_dnsperf(out.stdout + out.stderr)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r}")


def fastpath_config(ordinary: Sequence[str], *, weighted: Optional[Sequence[str]] = None, workers: int = 1,
                    allow: Sequence[str] = ("127.0.0.0/8",), citymap: Optional[str] = None,
                    tags: Optional[str] = None, cache: Optional[dict] = None, upstream: Optional[dict] = None,
                    server: Optional[dict] = None, rate_limit: Optional[dict] = None) -> str:
    """A weir-fastpath TOML config (docs/fastpath-config.md) listening on
    127.0.0.1 port 0 with metrics on 127.0.0.1 port 0. `ordinary`/`weighted`
    are "ip:port" upstreams; `citymap`/`tags` are file paths; the dicts add
    keys to their sections."""
    srv = {"listen": ["127.0.0.1:0"], "workers": workers, "metrics_listen": "127.0.0.1:0"}
    srv.update(server or {})
    sections = [("server", srv), ("acl", {"allow": list(allow)})]
    if rate_limit:
        sections.append(("rate_limit", rate_limit))
    parts = {}
    if citymap:
        parts["citymap"] = citymap
    if tags:
        parts["tags"] = tags
    if parts:
        sections.append(("partitions", parts))
    if cache:
        sections.append(("cache", cache))
    up = {"ordinary": list(ordinary)}
    if weighted is not None:
        up["weighted"] = list(weighted)
    up.update(upstream or {})
    sections.append(("upstream", up))
    out = []
    for name, keys in sections:
        out.append(f"[{name}]")
        out += [f"{k} = {_toml_value(v)}" for k, v in keys.items()]
        out.append("")
    return "\n".join(out)


def collect_lines(process: Process, settle: float = 0.2) -> list:
    """Moves every stdout line the process printed so far (waiting `settle`
    seconds for stragglers) into process.lines and returns process.lines.
    For scripted servers that print one line per event."""
    deadline = time.monotonic() + settle
    while True:
        try:
            line = process._queue.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            process._queue.put(None)  # keep the end marker for wait_line()
            break
        process.lines.append(line)
    return process.lines


# ---------------------------------------------------------------- weir-recursor


def recursor_config(*, root_hints: Optional[str] = None, forwarders: Sequence[str] = (), tags: Optional[str] = None,
                    allow: Sequence[str] = ("127.0.0.0/8",), listen: Sequence[str] = ("127.0.0.1:0",),
                    server: Optional[dict] = None, cache: Optional[dict] = None, last_hop: Optional[dict] = None,
                    ecs: Optional[dict] = None, resolver: Optional[dict] = None) -> str:
    """A weir-recursor TOML config (docs/recursor-config.md) listening on
    127.0.0.1 port 0 with a control port on 127.0.0.1 port 0. Paths should
    be absolute. The dicts add keys to their sections."""
    srv = {"listen": list(listen), "control": "127.0.0.1:0"}
    srv.update(server or {})
    res = {}
    if root_hints:
        res["root_hints"] = root_hints
    if forwarders:
        res["forwarders"] = list(forwarders)
    res.update(resolver or {})
    sections = [("server", srv), ("acl", {"allow": list(allow)}), ("resolver", res)]
    if tags:
        sections.append(("tags", {"file": tags}))
    for name, d in (("cache", cache), ("last_hop", last_hop), ("ecs", ecs)):
        if d:
            sections.append((name, d))
    out = []
    for name, keys in sections:
        out.append(f"[{name}]")
        out += [f"{k} = {_toml_value(v)}" for k, v in keys.items()]
        out.append("")
    return "\n".join(out)


class Recursor(_Daemon):
    """weir-recursor started from a config text (written to a temp file);
    `host`/`port` is the first listen address (UDP and TCP), `control()`
    talks to its control port (stats, advance-clock N, flush, reload-tags).

    With test_clock=True the TTL clock only moves through advance_clock()."""

    RELPATH = "recursor/weir-recursor"
    READY = r"^ready$"
    control_address = None

    def __init__(self, build_dir: str, config_text: str, test_clock: bool = False, timeout: float = 15.0):
        super().__init__(build_dir, config_text, test_clock, timeout)

    def _on_line(self, line: str) -> None:
        if line.startswith("control "):
            self.control_address = split_hostport(line.split()[1])

    def control(self, line: str) -> str:
        return control_command(*self.control_address, line)

    def stats(self) -> dict:
        return json.loads(self.control("stats"))

    def advance_clock(self, seconds: int) -> None:
        reply = self.control(f"advance-clock {int(seconds)}").strip()
        if reply != "ok":
            raise RuntimeError(f"weir-recursor control: {reply}")

    def flush(self) -> None:
        self.control("flush")


def _zone_head(origin: str, ns_address: str, soa_minimum: int = 60) -> str:
    return (f'[[zone]]\norigin = "{origin}"\n[zone.soa]\nmname = "ns1.{origin}"\nrname = "hostmaster.{origin}"\n'
            f'minimum = {soa_minimum}\nttl = 3600\n\n'
            f'[[zone.record]]\nname = "@"\ntype = "NS"\nttl = 3600\ndata = "ns1.{origin}"\n\n'
            f'[[zone.record]]\nname = "ns1.{origin}"\ntype = "A"\nttl = 3600\ndata = "{ns_address}"\n\n')


class FakeHierarchy:
    """A DNS delegation tree of gslb-sim instances on port 53 of loopback
    addresses `net`.1 (the root, zone "." with NS ns.root.), `net`.2 (the
    TLD, default "example."; not "test.": libunbound serves it as a local zone) and `net`.3... (one per child zone, in the order of
    `zones`), plus a root hints file for libunbound pointing at `net`.1.
    Nothing leaves loopback: every server and glue address is in `net`.

    zones: {"example.test.": BODY, ...} where BODY is gslb-sim TOML for the
    zone's records/names (relative names are relative to the zone); the
    [[zone]] header, SOA, apex NS and the NS address record are generated.
    extra_children: {"other.test.": "127.0.x.y"} adds delegations only
    (for servers the test runs itself). Port 53 needs root or
    CAP_NET_BIND_SERVICE; give each test file its own `net`."""

    def __init__(self, build_dir: str, net: str = "127.0.101", tld: str = "example.", zones: Optional[dict] = None,
                 extra_children: Optional[dict] = None, query_log: bool = False, sim_args: Sequence[str] = ()):
        zones = zones or {}
        self.net = net
        self.tld = tld
        self.address = {".": f"{net}.1", tld: f"{net}.2"}
        for i, origin in enumerate(zones):
            self.address[origin] = f"{net}.{3 + i}"
        children = {o: self.address[o] for o in zones}
        children.update(extra_children or {})
        self.sims: dict = {}
        self._tmp = tempfile.mkdtemp(prefix="weir-hier-")
        root = (f'[[zone]]\norigin = "."\n[zone.soa]\nmname = "ns.root."\nrname = "hostmaster.root."\n'
                f'minimum = 60\nttl = 3600\n\n'
                f'[[zone.record]]\nname = "@"\ntype = "NS"\nttl = 86400\ndata = "ns.root."\n\n'
                f'[[zone.record]]\nname = "ns.root."\ntype = "A"\nttl = 86400\ndata = "{net}.1"\n\n'
                f'[[zone.delegation]]\nname = "{tld}"\nttl = 86400\nns = ["ns1.{tld}"]\n'
                f'glue = [{{ name = "ns1.{tld}", addresses = ["{net}.2"] }}]\n')
        tld_text = _zone_head(tld, f"{net}.2", soa_minimum=60)
        for origin, addr in children.items():
            tld_text += (f'[[zone.delegation]]\nname = "{origin}"\nttl = 3600\nns = ["ns1.{origin}"]\n'
                         f'glue = [{{ name = "ns1.{origin}", addresses = ["{addr}"] }}]\n\n')
        configs = [(".", root), (tld, tld_text)]
        for origin, body in zones.items():
            configs.append((origin, _zone_head(origin, self.address[origin]) + body))
        self.root_hints = os.path.join(self._tmp, "root.hints")
        with open(self.root_hints, "w") as f:
            f.write(f".  3600000  IN  NS  ns.root.\nns.root.  3600000  IN  A  {net}.1\n")
        try:
            for origin, text in configs:
                path = os.path.join(self._tmp, (origin.strip(".") or "root") + ".toml")
                with open(path, "w") as f:
                    f.write(text)
                self.sims[origin] = GslbSim(build_dir, config_path=path, listen=(f"{self.address[origin]}:53",),
                                            extra_args=sim_args)
        except Exception:
            self.stop()
            raise

    def sim(self, origin: str) -> GslbSim:
        return self.sims[origin]

    def reset(self) -> None:
        for s in self.sims.values():
            s.reset()

    def stop(self) -> None:
        for s in self.sims.values():
            s.stop()
        self.sims = {}
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> "FakeHierarchy":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# ---------------------------------------------------------------- scripted authoritative servers
#
# For answers no well-behaved server sends (forged ECS, wrong questions,
# out-of-bailiwick records, bad weight options): a tiny authoritative whose
# replies the test writes. Test-side byte handling only; weir's own codec
# is dns/.

TYPE_CODES = {"A": 1, "NS": 2, "CNAME": 5, "SOA": 6, "TXT": 16, "AAAA": 28, "OPT": 41}


@dataclass
class RawQuery:
    """A query as a ScriptedAuthority received it."""
    id: int
    flags: int
    qname: str  # lower case, absolute
    qname_wire: bytes
    qtype: int
    qclass: int
    edns: bool = False
    options: list = field(default_factory=list)  # [(code, bytes)]
    transport: str = "udp"

    def option(self, code: int) -> Optional[bytes]:
        for c, d in self.options:
            if c == code:
                return d
        return None

    @property
    def ecs(self) -> Optional[tuple]:
        """(family, source, scope, address bytes as sent) or None."""
        d = self.option(8)
        if d is None or len(d) < 4:
            return None
        return int.from_bytes(d[0:2], "big"), d[2], d[3], d[4:]


def wire_name(text: str) -> bytes:
    out = b""
    for label in text.rstrip(".").split("."):
        if label:
            out += bytes([len(label)]) + label.encode()
    return out + b"\x00"


def _read_name(pkt: bytes, i: int) -> tuple:
    labels = []
    while True:
        n = pkt[i]
        if n == 0:
            return ".".join(labels).lower() + ".", i + 1
        if n & 0xC0:
            raise ValueError("compressed name in a question")
        labels.append(pkt[i + 1:i + 1 + n].decode("ascii", "replace"))
        i += 1 + n


def parse_raw_query(pkt: bytes, transport: str = "udp") -> Optional[RawQuery]:
    """Header, question and OPT options of a query; None if unreadable."""
    try:
        qid, flags, qd, an, ns, ar = struct.unpack("!6H", pkt[:12])
        if qd != 1:
            return None
        qname, i = _read_name(pkt, 12)
        qtype, qclass = struct.unpack("!HH", pkt[i:i + 4])
        q = RawQuery(qid, flags, qname, pkt[12:i], qtype, qclass, transport=transport)
        i += 4
        if ar >= 1 and i + 11 <= len(pkt) and pkt[i] == 0 and struct.unpack("!H", pkt[i + 1:i + 3])[0] == 41:
            q.edns = True
            rdlen = struct.unpack("!H", pkt[i + 9:i + 11])[0]
            opts = pkt[i + 11:i + 11 + rdlen]
            j = 0
            while j + 4 <= len(opts):
                code, length = struct.unpack("!HH", opts[j:j + 4])
                q.options.append((code, opts[j + 4:j + 4 + length]))
                j += 4 + length
        return q
    except (struct.error, IndexError, ValueError):
        return None


def rdata_a(address: str) -> bytes:
    return socket.inet_pton(socket.AF_INET6 if ":" in address else socket.AF_INET, address)


def rdata_soa(mname: str, rname: str, serial: int = 1, minimum: int = 60) -> bytes:
    return wire_name(mname) + wire_name(rname) + struct.pack("!5I", serial, 3600, 600, 86400, minimum)


def ecs_option(family: int, source: int, scope: int, address: bytes) -> tuple:
    """(8, data) for build_response(options=...); `address` as it goes on the wire."""
    return 8, struct.pack("!HBB", family, source, scope) + address


def echo_ecs(q: RawQuery, scope: int) -> Optional[tuple]:
    """The query's ECS echoed with `scope`, or None when it had none."""
    e = q.ecs
    return None if e is None else ecs_option(e[0], e[1], scope, e[3])


def weight_option(weights: Sequence[int], code: int = 65001) -> tuple:
    return code, b"".join(struct.pack("!H", w) for w in weights)


def build_response(q: RawQuery, *, rcode: int = 0, aa: bool = True, tc: bool = False, answer: Sequence = (),
                   authority: Sequence = (), additional: Sequence = (), options: Optional[Sequence] = None,
                   qname: Optional[str] = None, qid: Optional[int] = None) -> bytes:
    """A response to `q`. Records are (owner, type name or code, ttl, rdata
    bytes); names in RDATA must be given uncompressed (wire_name). `options`
    None = no OPT; a list (possibly empty) = an OPT with those (code, data)
    options (None entries skipped). `qname`/`qid` override the question name
    and the ID (to forge a mismatch)."""
    flags = 0x8000 | (q.flags & 0x0100) | (0x0400 if aa else 0) | (0x0200 if tc else 0) | (rcode & 0xF)
    qwire = q.qname_wire if qname is None else wire_name(qname)
    recs = [list(answer), list(authority), list(additional)]
    ar = len(recs[2]) + (1 if options is not None else 0)
    out = struct.pack("!6H", q.id if qid is None else qid, flags, 1, len(recs[0]), len(recs[1]), ar)
    out += qwire + struct.pack("!HH", q.qtype, q.qclass)
    for section in recs:
        for owner, rtype, ttl, rdata in section:
            t = TYPE_CODES[rtype] if isinstance(rtype, str) else rtype
            out += wire_name(owner) + struct.pack("!HHIH", t, 1, ttl, len(rdata)) + rdata
    if options is not None:
        body = b"".join(struct.pack("!HH", c, len(d)) + d for c, d in (o for o in options if o is not None))
        out += b"\x00" + struct.pack("!HHIH", 41, 1232, 0, len(body)) + body
    return out


class ScriptedAuthority:
    """A UDP+TCP server on `host` (port 0 unless given) that answers each
    query with handler(RawQuery) -> bytes, a list of bytes (sent in order,
    over UDP; TCP sends the last) or None (no answer). Every
    received query is appended to `queries`. Runs in a thread of the test."""

    def __init__(self, handler, host: str = "127.0.0.1", port: int = 0):
        self.handler = handler
        self.queries: list = []
        self._lock = threading.Lock()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.udp = socket.socket(family, socket.SOCK_DGRAM)
        self.udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.udp.bind((host, port))
        self.host, self.port = host, self.udp.getsockname()[1]
        self.tcp = socket.socket(family, socket.SOCK_STREAM)
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind((host, self.port))
        self.tcp.listen(16)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._serve_udp, daemon=True),
                         threading.Thread(target=self._serve_tcp, daemon=True)]
        for t in self._threads:
            t.start()

    def _answer(self, pkt: bytes, transport: str) -> Optional[bytes]:
        q = parse_raw_query(pkt, transport)
        if q is None:
            return None
        with self._lock:
            self.queries.append(q)
        try:
            return self.handler(q)
        except Exception as e:  # a test bug must not kill the server thread silently
            print(f"ScriptedAuthority handler error: {e!r}", file=sys.stderr)
            return None

    def _serve_udp(self) -> None:
        self.udp.settimeout(0.2)
        while not self._stop.is_set():
            try:
                pkt, peer = self.udp.recvfrom(65535)
            except socket.timeout:
                continue
            except OSError:
                return
            reply = self._answer(pkt, "udp")
            for r in ([reply] if isinstance(reply, (bytes, bytearray)) else reply or []):
                self.udp.sendto(r, peer)

    def _serve_tcp(self) -> None:
        self.tcp.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.tcp.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    head = conn.recv(2)
                    if len(head) < 2:
                        continue
                    n = struct.unpack("!H", head)[0]
                    pkt = b""
                    while len(pkt) < n:
                        chunk = conn.recv(n - len(pkt))
                        if not chunk:
                            break
                        pkt += chunk
                    reply = self._answer(pkt, "tcp")
                    if isinstance(reply, list):
                        reply = reply[-1] if reply else None
                    if reply:
                        conn.sendall(struct.pack("!H", len(reply)) + reply)
                except OSError:
                    pass

    def received(self, qname: Optional[str] = None) -> list:
        with self._lock:
            return [q for q in self.queries if qname is None or q.qname == qname.lower()]

    def clear(self) -> None:
        with self._lock:
            self.queries.clear()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=2)
        self.udp.close()
        self.tcp.close()

    def __enter__(self) -> "ScriptedAuthority":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def wait_until(predicate, timeout: float = 5.0, interval: float = 0.05) -> bool:
    """Polls `predicate` until it is true; raises AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


class Mgmt:
    """weir-mgmt on 127.0.0.1:`port` (0: any) with its database and token in
    `workdir` (kept across restarts, so a test can stop and start it again on
    the same port with the same data). weirctl() runs the real CLI."""

    RELPATH = "mgmt/weir-mgmt"
    TOKEN = "test-token-0123456789abcdef"

    def __init__(self, build_dir: str, workdir: str, port: int = 0, timeout: float = 10.0):
        self.build_dir = build_dir
        self.workdir = workdir
        self.token_file = os.path.join(workdir, "mgmt.token")
        if not os.path.exists(self.token_file):
            with open(self.token_file, "w") as f:
                f.write(self.TOKEN + "\n")
        self.config_path = os.path.join(workdir, "mgmt.toml")
        with open(self.config_path, "w") as f:
            f.write(f'[mgmt]\nlisten = "127.0.0.1:{port}"\ndatabase = "mgmt.db"\ntoken_file = "mgmt.token"\n')
        self.process = Process([binary(build_dir, self.RELPATH), "-c", self.config_path], ready=r"^ready$",
                               timeout=timeout)
        m = re.match(r"^listening (\S+)$", self.process.lines[0])
        self.host, self.port = split_hostport(m.group(1))
        self.address = f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

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

    def stop(self) -> int:
        return self.process.stop()

    def __enter__(self) -> "Mgmt":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def mgmt_node_section(mgmt_address: str, node_id: str, token_file: str, state_dir: str) -> str:
    """The [mgmt] table of a fastpath/recursor config (docs/mgmt.md)."""
    return (f'\n[mgmt]\naddress = "{mgmt_address}"\nnode_id = "{node_id}"\ntoken_file = {json.dumps(token_file)}\n'
            f'state_dir = {json.dumps(state_dir)}\n')


# ---------------------------------------------------------------- raw messages


def make_query(qname: str, qtype: int = 1, *, qid: int = 0x1234, rd: bool = True, ad: bool = False,
               edns: bool = True, do: bool = False, options: Sequence = (), trailing: bytes = b"") -> bytes:
    """A query in wire form: one question, an OPT when `edns` (buffer 1232,
    DO as given, `options` as (code, bytes)), then `trailing` raw bytes that
    no count covers (to test how a server treats them)."""
    flags = (0x0100 if rd else 0) | (0x0020 if ad else 0)
    out = struct.pack("!6H", qid, flags, 1, 0, 0, 1 if edns else 0) + wire_name(qname) + struct.pack("!HH", qtype, 1)
    if edns:
        body = b"".join(struct.pack("!HH", c, len(d)) + d for c, d in options)
        out += b"\x00" + struct.pack("!HHIH", 41, 1232, 0x8000 if do else 0, len(body)) + body
    return out + trailing


@dataclass
class RawRecord:
    name: str
    type: int
    klass: int
    ttl: int
    rdata: bytes


@dataclass
class RawMessage:
    """A response decoded from wire form (names decompressed, lower case)."""
    id: int
    flags: int
    qname: Optional[str]
    qtype: Optional[int]
    answer: list
    authority: list
    additional: list  # the OPT excluded
    opt: Optional[RawRecord] = None

    @property
    def rcode(self) -> int:
        ext = (self.opt.ttl >> 24) << 4 if self.opt is not None else 0
        return ext | (self.flags & 0xF)

    @property
    def ad(self) -> bool:
        return bool(self.flags & 0x0020)

    @property
    def tc(self) -> bool:
        return bool(self.flags & 0x0200)

    def options(self) -> list:
        """[(code, data)] of the OPT record, [] without one."""
        out, d, i = [], self.opt.rdata if self.opt else b"", 0
        while i + 4 <= len(d):
            code, n = struct.unpack("!HH", d[i:i + 4])
            out.append((code, d[i + 4:i + 4 + n]))
            i += 4 + n
        return out

    def option(self, code: int) -> Optional[bytes]:
        for c, d in self.options():
            if c == code:
                return d
        return None

    def types(self) -> set:
        """Every record type in the answer, authority and additional sections."""
        return {r.type for r in self.answer + self.authority + self.additional}


def _read_name_compressed(pkt: bytes, i: int) -> tuple:
    labels, end, hops = [], None, 0
    while True:
        n = pkt[i]
        if n & 0xC0 == 0xC0:
            if end is None:
                end = i + 2
            i = ((n & 0x3F) << 8) | pkt[i + 1]
            hops += 1
            if hops > 64:
                raise ValueError("pointer loop")
            continue
        if n == 0:
            return ".".join(labels).lower() + ".", end if end is not None else i + 1
        labels.append(pkt[i + 1:i + 1 + n].decode("ascii", "replace"))
        i += 1 + n


def parse_message(pkt: bytes) -> RawMessage:
    """Decodes a whole response; raises ValueError/struct.error when malformed."""
    qid, flags, qd, an, ns, ar = struct.unpack("!6H", pkt[:12])
    i, qname, qtype = 12, None, None
    for _ in range(qd):
        qname, i = _read_name_compressed(pkt, i)
        qtype = struct.unpack("!H", pkt[i:i + 2])[0]
        i += 4
    sections = [[], [], []]
    opt = None
    for s, count in enumerate((an, ns, ar)):
        for _ in range(count):
            name, i = _read_name_compressed(pkt, i)
            rtype, klass, ttl, rdlen = struct.unpack("!HHIH", pkt[i:i + 10])
            rec = RawRecord(name, rtype, klass, ttl, pkt[i + 10:i + 10 + rdlen])
            if len(rec.rdata) != rdlen:
                raise ValueError("rdata overrun")
            i += 10 + rdlen
            if rtype == 41 and s == 2:
                opt = rec
            else:
                sections[s].append(rec)
    return RawMessage(qid, flags, qname, qtype, sections[0], sections[1], sections[2], opt)


def tcp_exchange_half_close(server: str, port: int, queries: Sequence[bytes], timeout: float = 5.0) -> tuple:
    """Sends `queries` over one TCP connection (length-prefixed, in one
    write), then shutdown(SHUT_WR), and reads until the server closes.
    Returns (list of response messages as bytes, True if the server closed
    the connection cleanly within `timeout`)."""
    family = socket.AF_INET6 if ":" in server else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect((server, port))
        s.sendall(b"".join(struct.pack("!H", len(q)) + q for q in queries))
        s.shutdown(socket.SHUT_WR)
        data, closed = b"", False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                break
            if not chunk:
                closed = True
                break
            data += chunk
    out, i = [], 0
    while i + 2 <= len(data):
        n = struct.unpack("!H", data[i:i + 2])[0]
        if i + 2 + n > len(data):
            break
        out.append(data[i + 2:i + 2 + n])
        i += 2 + n
    return out, closed
