"""The real DNS clients (dig, kdig, dnsperf) run as programs and their
output parsed, plus the few raw exchanges below them (one UDP datagram, a
half-closed TCP connection) and the daemons' text control and metrics ports."""

from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

from .process import netns_argv, run, write_temp
from .wire import WEIGHT_OPTION, split_tcp_frames, tcp_frame


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

    def weights(self, code: int = WEIGHT_OPTION) -> Optional[list]:
        """The weight option decoded as 16-bit big-endian values (docs/behaviour.md#the-weight-option), or None."""
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


@dataclass(frozen=True)
class _Dialect:
    """How one client prints the lines the parser reads (regexes)."""
    header: str  # status, id
    flags: str  # flags, counts
    server: str  # UDP/TCP
    opt_section: str
    edns: str  # UDP size
    ecs: str
    option: str  # code, data
    opt_line_prefix: str  # lines of the OPT section start with it
    opt_lines_only: bool  # an OPT-section line is nothing else
    option_text: bool  # option data is followed by its text in parentheses


_DIG = _Dialect(header=r";; ->>HEADER<<- opcode: \w+, status: (\w+), id: (\d+)", flags=r";; flags:([^;]*);(.*)$",
                server=r";; SERVER: .*\((UDP|TCP)\)", opt_section=";; OPT PSEUDOSECTION",
                edns=r"; EDNS: version: \d+, flags:[^;]*; udp: (\d+)", ecs=r"; CLIENT-SUBNET: (\S+)",
                option=r"; OPT=(\d+):\s*(.*)$", opt_line_prefix="; ", opt_lines_only=True, option_text=True)
_KDIG = _Dialect(header=r";; ->>HEADER<<- opcode: \w+; status: (\w+); id: (\d+)", flags=r";; Flags:([^;]*);(.*)$",
                 server=r";; From .*\((UDP|TCP)\)", opt_section=";; EDNS PSEUDOSECTION",
                 edns=r";; Version: \d+; flags:[^;]*; UDP size: (\d+)", ecs=r";; CLIENT-SUBNET: (\S+)",
                 option=r";; Option \((\d+)\):\s*(.*)$", opt_line_prefix="", opt_lines_only=False,
                 option_text=False)


def _parse(text: str, d: _Dialect) -> Response:
    r = Response(text=text)
    section = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith(";; Truncated, retrying in TCP mode"):  # dig only
            r.truncated_retry = True
        m = re.match(d.header, line)
        if m:
            r = Response(text=text, status=m.group(1), id=int(m.group(2)), truncated_retry=r.truncated_retry)
            section = None
            continue
        m = re.match(d.flags, line)
        if m:
            r.flags = set(m.group(1).split())
            for k, v in re.findall(r"(\w+): (\d+)", m.group(2)):
                r.counts[k] = int(v)
            continue
        m = re.match(d.server, line)
        if m:
            r.transport = m.group(1)
            continue
        if line.startswith(d.opt_section):
            r.edns = True
            section = "opt"
            continue
        if section == "opt" and line.startswith(d.opt_line_prefix):
            m = re.match(d.edns, line)
            if m:
                r.udp_size = int(m.group(1))
            m = re.match(d.ecs, line)
            if m:
                r.ecs = _parse_ecs(m.group(1))
            m = re.match(d.option, line)
            if m:
                # dig prints '00 02 00 01 ("....")': keep the hex part only.
                r.options[int(m.group(1))] = _hex_bytes(m.group(2).split("(")[0] if d.option_text else m.group(2))
            if d.opt_lines_only:
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


def parse_dig(text: str) -> Response:
    """Parses dig's default (full) output. Only the last message is kept when
    dig printed several (e.g. after retries)."""
    return _parse(text, _DIG)


def parse_kdig(text: str) -> Response:
    """Parses kdig's default output (Knot 3.2: no +json)."""
    return _parse(text, _KDIG)


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


def _client(argv0: Sequence[str], parse, server: str, port: int, qname: str, qtype: str, ecs: Optional[str],
            options: Iterable, tcp: bool, edns: Optional[int], bufsize: Optional[int], norec: bool, timeout: float,
            tries: int, extra: Sequence[str], netns: Optional[str]) -> Response:
    argv = [argv0[0], f"@{server}", "-p", str(port), qname, qtype, f"+time={max(1, int(timeout))}"] + list(argv0[1:])
    argv += _client_args(ecs, options, tcp, edns, bufsize, norec)
    argv += list(extra)
    out = run(netns_argv(netns, argv), timeout=timeout * tries + 10)
    return parse(out.stdout + out.stderr)


def dig(server: str, port: int, qname: str, qtype: str = "A", *, ecs: Optional[str] = None,
        options: Iterable = (), tcp: bool = False, edns: Optional[int] = None, bufsize: Optional[int] = None,
        norec: bool = True, timeout: float = 2.0, tries: int = 1, extra: Sequence[str] = (),
        netns: Optional[str] = None) -> Response:
    """Queries with dig and parses its full output.

    ecs: "198.51.100.7/24" (dig's +subnet). options: EDNS options, each a
    code (length 0) or (code, bytes-or-hex). extra: more dig arguments.
    netns: run dig inside this network namespace (NetnsPair.client_ns).
    """
    return _client(["dig", f"+tries={tries}"], parse_dig, server, port, qname, qtype, ecs, options, tcp, edns,
                   bufsize, norec, timeout, tries, extra, netns)


def kdig(server: str, port: int, qname: str, qtype: str = "A", *, ecs: Optional[str] = None,
         options: Iterable = (), tcp: bool = False, edns: Optional[int] = None, bufsize: Optional[int] = None,
         norec: bool = True, timeout: float = 2.0, tries: int = 1, extra: Sequence[str] = (),
         netns: Optional[str] = None) -> Response:
    """Queries with kdig (Knot); same arguments as dig()."""
    return _client(["kdig", f"+retry={max(0, tries - 1)}"], parse_kdig, server, port, qname, qtype, ecs, options,
                   tcp, edns, bufsize, norec, timeout, tries, extra, netns)


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


_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")


def dig_many(server: str, port: int, qname: str, count: int, *, source: Optional[str] = None,
             qtype: str = "A", batch: int = 100, extra: Sequence[str] = (), timeout: float = 2.0,
             netns: Optional[str] = None) -> list:
    """Sends `count` queries for one name with `dig +short` (up to `batch`
    questions per dig process, one after another) and returns every address
    line printed, in order. A lost query prints no address, so
    len(result) < count reveals losses. netns: as for dig()."""
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
        res = run(netns_argv(netns, argv), timeout=timeout * n + 30)
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


def _read_to_close(s: socket.socket) -> bytes:
    chunks = []
    while True:
        data = s.recv(65536)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


def control_command(host: str, port: int, line: str, timeout: float = 5.0) -> str:
    """Sends one line to a line-protocol control port (gslb-sim) and returns
    the whole reply (the server closes after replying)."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(line.encode() + b"\n")
        return _read_to_close(s).decode()


def http_get(host: str, port: int, path: str, timeout: float = 5.0) -> str:
    """GET `path` over plain HTTP/1.1 (the metrics endpoint closes after one
    reply); returns the body. Raises RuntimeError on a non-200 status."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        raw = _read_to_close(s).decode(errors="replace")
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


def tcp_exchange_half_close(server: str, port: int, queries: Sequence[bytes], timeout: float = 5.0) -> tuple:
    """Sends `queries` over one TCP connection (length-prefixed, in one
    write), then shutdown(SHUT_WR), and reads until the server closes.
    Returns (list of response messages as bytes, True if the server closed
    the connection cleanly within `timeout`)."""
    family = socket.AF_INET6 if ":" in server else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect((server, port))
        s.sendall(b"".join(tcp_frame(q) for q in queries))
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
    return split_tcp_frames(data)[0], closed
