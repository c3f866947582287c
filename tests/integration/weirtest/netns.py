"""Network namespaces for the tests of weir-fastpath's DPDK backend: two
namespaces joined by a veth pair (NetnsPair). The server end is left to the
DPDK af_packet PMD: no addresses, and sysctls that keep the kernel from
answering on it. The client end is an ordinary kernel interface that dig,
kdig, ping and raw Ethernet frames (rawframe.py) go out of.

Addresses come from the benchmarking ranges only (198.18.0.0/15,
2001:2::/48). Everything a pair creates goes when it closes, also when the
test failed: the processes left in its namespaces (stopped by PID), then the
namespaces, which take the veth with them. Needs root.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ipaddress
import itertools
import json
import os
import select
import signal
import struct
import subprocess
import sys
import time
from typing import Iterator, Optional, Sequence

from .process import netns_argv, require_tools, run
from .rawframe import ETH_P_IP, ETH_P_IPV6, IPPROTO_UDP, split_ethernet

CLONE_NEWNET = 0x40000000
V4_RANGE = ipaddress.ip_network("198.18.0.0/15")
V6_RANGE = ipaddress.ip_network("2001:2::/48")
CLIENT_V4 = "198.18.0.2"  # the client end's first address, in a /16
CLIENT_V6 = "2001:2::2"  # in a /64
RAWFRAME = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rawframe.py")

_libc = ctypes.CDLL(None, use_errno=True)
_counter = itertools.count(1)
_open: set = set()  # the pairs not closed yet, for the exit-time safety net


def _setns(fd: int) -> None:
    """Moves the calling thread into the network namespace of `fd` (setns(2)
    through libc: os.setns needs Python 3.12)."""
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns(CLONE_NEWNET): {os.strerror(err)}")


def _must(argv: Sequence[str]) -> str:
    """Runs a set-up command; its stdout, or RuntimeError with its stderr."""
    out = run(argv, timeout=10)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: rc {out.returncode}: {out.stderr.strip()}")
    return out.stdout


def _addresses(extra: Sequence[str], first: str, network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> list:
    for a in extra:
        if ipaddress.ip_address(a) not in network:
            raise ValueError(f"{a} is outside {network} (tests use the benchmarking ranges only)")
    return [first, *extra]


def _mac(ns: str, ifname: str) -> str:
    return json.loads(_must(["ip", "-n", ns, "-j", "link", "show", "dev", ifname]))[0]["address"]


def _wait_exited(pidfds: list, timeout: float) -> list:
    """Waits until every process of `pidfds` has exited (a pidfd becomes
    readable then, zombies included); returns the pidfds still running."""
    deadline = time.monotonic() + timeout
    running = list(pidfds)
    while running:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        poller = select.poll()
        for fd in running:
            poller.register(fd, select.POLLIN)
        done = {fd for fd, _ in poller.poll(left * 1000)}
        running = [fd for fd in running if fd not in done]
    return running


def _hold_processes(ns: str) -> dict:
    """{pidfd: PID} of the processes in namespace `ns` (`ip netns pids`). The
    pidfd is opened before the namespace is checked, so a PID reused in
    between is never signalled. The test's own process is left out: it is
    listed while its main thread is in the namespace (enter_server)."""
    ns_file = os.stat(f"/run/netns/{ns}")
    held = {}
    for word in _must(["ip", "netns", "pids", ns]).split():
        pid = int(word)
        if pid == os.getpid():
            continue
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            now = os.stat(f"/proc/{pid}/ns/net")
        except OSError:  # exited meanwhile
            now = None
        if now is not None and (now.st_dev, now.st_ino) == (ns_file.st_dev, ns_file.st_ino):
            held[fd] = pid
        else:
            os.close(fd)
    return held


def _signal_and_wait(held: dict, sig: int, timeout: float) -> list:
    """Sends `sig` to the processes of `held` and closes their pidfds once
    they exited or `timeout` passed; returns the PIDs still running."""
    try:
        for fd in held:
            try:
                signal.pidfd_send_signal(fd, sig)
            except ProcessLookupError:
                pass
        return [held[fd] for fd in _wait_exited(list(held), timeout)]
    finally:
        for fd in held:
            os.close(fd)


def _stop_processes(ns: str, timeout: float = 5.0) -> None:
    """Stops every process in namespace `ns` by PID: SIGTERM, `timeout` to
    exit, then SIGKILL to whatever is there by then, again until none is
    left (a process may have started children meanwhile)."""
    _signal_and_wait(_hold_processes(ns), signal.SIGTERM, timeout)
    for _ in range(10):
        held = _hold_processes(ns)
        if not held:
            return
        survivors = _signal_and_wait(held, signal.SIGKILL, timeout)
        if survivors:
            raise RuntimeError(f"netns {ns}: PIDs {survivors} survived SIGKILL")
    raise RuntimeError(f"netns {ns}: processes keep appearing after SIGKILL")


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071): the one's complement of the one's
    complement sum of the 16-bit big-endian words, an odd byte padded with 0.
    Data that carries its own correct checksum sums to 0."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _pseudo_header(src: bytes, dst: bytes, udp_length: int) -> bytes:
    if len(src) == 4:
        return src + dst + struct.pack("!BBH", 0, IPPROTO_UDP, udp_length)
    return src + dst + struct.pack("!I3xB", udp_length, IPPROTO_UDP)


def _mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", ""))


def build_udp_frame(dst_mac: str, src_mac: str, src_ip: str, dst_ip: str, sport: int, dport: int, payload: bytes,
                    vlan: Optional[int] = None) -> bytes:
    """An Ethernet frame of one UDP datagram over IPv4 or IPv6 (by the
    addresses), with correct IPv4 header and UDP checksums, for the frames a
    kernel client cannot send (an 802.1Q tag, a forged source). MACs are
    "aa:bb:cc:dd:ee:ff"; `vlan` is the TCI of an in-band 802.1Q tag
    (PCP << 13 | VID). Short frames are not padded to 60 bytes: a veth
    carries them as they are."""
    src, dst = ipaddress.ip_address(src_ip), ipaddress.ip_address(dst_ip)
    if src.version != dst.version:
        raise ValueError(f"{src_ip} and {dst_ip} are not of one family")
    length = 8 + len(payload)
    udp_sum = checksum(_pseudo_header(src.packed, dst.packed, length) + struct.pack("!HHHH", sport, dport, length, 0) +
                       payload) or 0xFFFF  # 0 means "no checksum" (RFC 768)
    udp = struct.pack("!HHHH", sport, dport, length, udp_sum) + payload
    if src.version == 4:
        # version/IHL, TOS, total length, ID, DF, TTL, protocol, checksum, addresses
        header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + length, 0, 0x4000, 64, IPPROTO_UDP, 0, src.packed,
                             dst.packed)
        header = header[:10] + struct.pack("!H", checksum(header)) + header[12:]
        ethertype = ETH_P_IP
    else:
        # version 6, payload length, next header, hop limit, addresses
        header = struct.pack("!IHBB16s16s", 6 << 28, length, IPPROTO_UDP, 64, src.packed, dst.packed)
        ethertype = ETH_P_IPV6
    tag = b"" if vlan is None else struct.pack("!HH", 0x8100, vlan)
    return _mac_bytes(dst_mac) + _mac_bytes(src_mac) + tag + struct.pack("!H", ethertype) + header + udp


def parse_udp_frame(frame: bytes) -> dict:
    """The UDP datagram of an Ethernet frame (IPv4, or IPv6 without extension
    headers, after an in-band 802.1Q tag if any): dst_mac, src_mac, vlan (TCI
    of the in-band tag or None), src_ip, dst_ip, sport, dport, payload (as
    long as the UDP length says: Ethernet padding dropped), ip_checksum_ok
    (None for IPv6) and udp_checksum_ok (a zero IPv4 UDP checksum, "none",
    counts as ok). Frames a kernel sent through a veth with checksum offload
    on carry unfinished UDP checksums. Raises ValueError for anything else."""
    vlan, ethertype, l3 = split_ethernet(frame)
    if ethertype == ETH_P_IP and len(frame) >= l3 + 20:
        ihl = (frame[l3] & 0x0F) * 4
        proto, src, dst = frame[l3 + 9], frame[l3 + 12:l3 + 16], frame[l3 + 16:l3 + 20]
        ip_ok: Optional[bool] = checksum(frame[l3:l3 + ihl]) == 0
        udp = l3 + ihl
    elif ethertype == ETH_P_IPV6 and len(frame) >= l3 + 40:
        proto, src, dst = frame[l3 + 6], frame[l3 + 8:l3 + 24], frame[l3 + 24:l3 + 40]
        ip_ok = None
        udp = l3 + 40
    else:
        raise ValueError(f"not IPv4 or IPv6 (ethertype {ethertype:#06x}): {frame.hex()}")
    if proto != IPPROTO_UDP or len(frame) < udp + 8:
        raise ValueError(f"not UDP: {frame.hex()}")
    sport, dport, length, udp_sum = struct.unpack_from("!HHHH", frame, udp)
    if length < 8 or len(frame) < udp + length:
        raise ValueError(f"UDP length {length} does not fit the frame: {frame.hex()}")
    datagram = frame[udp:udp + length]
    udp_ok = (udp_sum == 0 and len(src) == 4) or checksum(_pseudo_header(src, dst, length) + datagram) == 0
    return {"dst_mac": frame[0:6].hex(":"), "src_mac": frame[6:12].hex(":"), "vlan": vlan,
            "src_ip": str(ipaddress.ip_address(src)), "dst_ip": str(ipaddress.ip_address(dst)), "sport": sport,
            "dport": dport, "payload": datagram[8:], "ip_checksum_ok": ip_ok, "udp_checksum_ok": udp_ok}


class NetnsPair:
    """Two network namespaces joined by a veth pair, for weir-fastpath's
    DPDK backend (af_packet PMD on the server end) and the clients that
    query it.

    server_ns, server_if, server_mac: the server side. Its end of the veth
    is up with no addresses, IPv6 disabled, rp_filter=1 and arp_ignore=1,
    so the kernel neither answers nor sends on it: what the PMD reads is
    what the client sent (which includes the client kernel's own IPv6
    router solicitations and MLD reports). The daemons run there (enter_server()) and keep
    their metrics and control ports on its loopback.

    client_ns, client_if, client_mac, client_v4, client_v6: the client side.
    Its end has 198.18.0.2/16 and 2001:2::2/64 first, then the extra
    `client_v4` (/16) and `client_v6` (/64) addresses, IPv6 without DAD so
    they are usable at once, and transmit checksum offload off: otherwise
    the frames the PMD reads carry unfinished checksums. dig, kdig and
    dig_many run there with netns=pair.client_ns, other programs through
    client_argv()/client_run(), raw frames through raw_exchange().

    `mtu` sets both ends (default: the veth's 1500). Both namespaces have
    `lo` up. The names carry the test's PID and a
    counter, so parallel test processes do not collide. close() (the
    context manager's exit) stops what still runs in the namespaces and
    deletes them; a pair the test never closed is closed at interpreter
    exit, as a safety net only.
    """

    def __init__(self, client_v4: Sequence[str] = (), client_v6: Sequence[str] = (), mtu: Optional[int] = None):
        require_tools("ip", "ethtool", "sysctl")
        self.client_v4 = _addresses(client_v4, CLIENT_V4, V4_RANGE)
        self.client_v6 = _addresses(client_v6, CLIENT_V6, V6_RANGE)
        pid, n = os.getpid(), next(_counter)
        self.server_ns, self.client_ns = f"weir-s-{pid}-{n}", f"weir-c-{pid}-{n}"
        self.server_if, self.client_if = f"ws{pid}-{n}", f"wc{pid}-{n}"
        if len(self.server_if) > 15:  # IFNAMSIZ - 1
            raise RuntimeError(f"interface name {self.server_if} is longer than 15 characters")
        self._created: list = []
        _open.add(self)
        try:
            self._create(mtu)
        except BaseException:
            self.close()
            raise

    def _create(self, mtu: Optional[int]) -> None:
        for ns in (self.server_ns, self.client_ns):
            _must(["ip", "netns", "add", ns])
            self._created.append(ns)
            _must(["ip", "-n", ns, "link", "set", "dev", "lo", "up"])
        # Both ends are made inside their namespaces: the veth never exists
        # in the test's own namespace, so nothing can be left behind there.
        mtu_args = ["mtu", str(mtu)] if mtu is not None else []
        _must(["ip", "-n", self.server_ns, "link", "add", self.server_if, *mtu_args, "type", "veth", "peer", "name",
               self.client_if, *mtu_args, "netns", self.client_ns])
        s, c = self.server_if, self.client_if
        # Before the link goes up, so the kernel never sends IPv6 (link-local
        # DAD, router solicitations) on the server end.
        _must(netns_argv(self.server_ns, ["sysctl", "-q", "-w", f"net.ipv6.conf.{s}.disable_ipv6=1",
                                          f"net.ipv4.conf.{s}.rp_filter=1", f"net.ipv4.conf.{s}.arp_ignore=1"]))
        _must(["ip", "-n", self.server_ns, "link", "set", "dev", s, "up"])
        _must(self.client_argv(["ethtool", "-K", c, "tx", "off"]))
        for a in self.client_v4:
            _must(["ip", "-n", self.client_ns, "addr", "add", f"{a}/16", "dev", c])
        for a in self.client_v6:
            _must(["ip", "-n", self.client_ns, "addr", "add", f"{a}/64", "dev", c, "nodad"])
        _must(["ip", "-n", self.client_ns, "link", "set", "dev", c, "up"])
        self.server_mac = _mac(self.server_ns, s)
        self.client_mac = _mac(self.client_ns, c)

    def close(self) -> None:
        """Stops every process still running in either namespace (by PID),
        then deletes both namespaces; deleting them removes the veth. Tries
        everything before raising the first error. Safe to call again."""
        _open.discard(self)
        errors = []
        for ns in self._created:
            try:
                _stop_processes(ns)
            except Exception as e:  # still delete the namespace
                errors.append(e)
        while self._created:
            try:
                _must(["ip", "netns", "del", self._created.pop()])
            except Exception as e:
                errors.append(e)
        if errors:
            raise errors[0]

    def __enter__(self) -> "NetnsPair":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextlib.contextmanager
    def enter_server(self) -> Iterator[None]:
        """Moves the calling thread (the test's main thread) into the server
        namespace for the block, and back after it, also on an exception.

        The processes the block starts (the harness's Fastpath, Recursor,
        GslbSim, unchanged) are in the server namespace, as are the sockets
        it opens: talk to the daemons' loopback ports inside the block. A
        socket keeps its namespace afterwards, and so does a process."""
        before = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            target = os.open(f"/run/netns/{self.server_ns}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(target)
            finally:
                os.close(target)
            try:
                yield
            finally:
                _setns(before)
        finally:
            os.close(before)

    def client_argv(self, argv: Sequence[str]) -> list:
        """`argv` run inside the client namespace."""
        return netns_argv(self.client_ns, argv)

    def client_run(self, argv: Sequence[str], timeout: float = 30.0) -> subprocess.CompletedProcess:
        """Runs `argv` to completion inside the client namespace, capturing
        text stdout/stderr."""
        return run(self.client_argv(argv), timeout=timeout)

    def ping(self, address: str, count: int = 1, v6: bool = False, timeout: int = 5) -> bool:
        """True when `count` echo replies came back from `address` within
        `timeout` seconds, pinged from the client namespace."""
        argv = ["ping", *(["-6"] if v6 else []), "-c", str(count), "-w", str(timeout), address]
        return self.client_run(argv, timeout=timeout + 10).returncode == 0

    def raw_exchange(self, frame: bytes, sport: int, timeout: float = 3.0) -> tuple[bytes, Optional[int]]:
        """Sends one Ethernet frame (build_udp_frame) out of the client end
        and returns the first UDP frame that comes back to port `sport`, as
        (frame as received, 802.1Q TCI or None). The kernel moves a received
        tag out of the frame, so the TCI is usually not in the frame itself
        (rawframe.py). Raises TimeoutError when nothing came in `timeout`."""
        out = self.client_run([sys.executable, RAWFRAME, self.client_if, frame.hex(), str(sport), "--timeout",
                               str(timeout)], timeout=timeout + 10)
        if out.returncode == 1 and out.stderr.startswith("rawframe: no UDP frame"):
            raise TimeoutError(out.stderr.strip())
        if out.returncode != 0:
            raise RuntimeError(f"rawframe.py: rc {out.returncode}: {out.stderr.strip()}")
        answer = json.loads(out.stdout)
        return bytes.fromhex(answer["frame"]), answer["vlan"]


@atexit.register
def _close_leftovers() -> None:
    """Best effort for a test that never closed its pair (a crash between
    creating and entering the with-block): a namespace outlives its creator."""
    for pair in list(_open):
        try:
            pair.close()
        except Exception as e:
            print(f"weirtest.netns: cleaning up {pair.server_ns}/{pair.client_ns}: {e}", file=sys.stderr)
