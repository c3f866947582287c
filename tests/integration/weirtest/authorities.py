"""Authoritative servers for the recursor's tests: a fake delegation tree
of gslb-sim instances on loopback (FakeHierarchy), and a scripted server
whose replies the test writes (ScriptedAuthority), for answers no
well-behaved server sends (forged ECS, wrong questions, out-of-bailiwick
records, bad weight options)."""

from __future__ import annotations

import os
import shutil
import socket
import struct
import sys
import tempfile
import threading
from typing import Optional, Sequence

from .zones import delegation, record, zone, zone_head
from .daemons import GslbSim
from .wire import parse_raw_query, tcp_frame


class FakeHierarchy:
    """A DNS delegation tree of gslb-sim instances on port 53 of loopback
    addresses `net`.1 (the root, zone "." with NS ns.root.), `net`.2 (the
    TLD, default "example."; not "test.": libunbound serves it as a local
    zone) and `net`.3... (one per child zone, in the order of `zones`),
    plus a root hints file for libunbound pointing at `net`.1.
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
        root = (zone(".", mname="ns.root.", rname="hostmaster.root.") + record("@", "NS", "ns.root.", ttl=86400) +
                record("ns.root.", "A", f"{net}.1", ttl=86400) + delegation(tld, f"ns1.{tld}", [f"{net}.2"], ttl=86400))
        tld_text = zone_head(tld, f"{net}.2", soa_minimum=60)
        for origin, addr in children.items():
            tld_text += delegation(origin, f"ns1.{origin}", [addr], ttl=3600) + "\n"
        configs = [(".", root), (tld, tld_text)]
        for origin, body in zones.items():
            configs.append((origin, zone_head(origin, self.address[origin]) + body))
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
        # With port 0 the UDP port's TCP twin may be taken by a parallel test's
        # connection: then another port is tried.
        for attempt in range(1 if port else 100):
            # No SO_REUSEADDR on UDP: with it the kernel may hand port 0 out
            # to two such sockets (parallel tests) and split their queries.
            self.udp = socket.socket(family, socket.SOCK_DGRAM)
            self.udp.bind((host, port))
            self.host, self.port = host, self.udp.getsockname()[1]
            self.tcp = socket.socket(family, socket.SOCK_STREAM)
            self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                self.tcp.bind((host, self.port))
                break
            except OSError:
                self.udp.close()
                self.tcp.close()
                if port or attempt == 99:
                    raise
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
        # As a real authority: connections served at once, each for as many
        # queries as its client sends (RFC 7766: libunbound reuses its
        # streams), until the client closes or is idle for 2 s; a query the
        # handler does not answer closes its connection.
        self.tcp.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.tcp.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve_tcp_connection, args=(conn,), daemon=True).start()

    def _serve_tcp_connection(self, conn: socket.socket) -> None:
        def read(n: int) -> bytes:
            data = b""
            while len(data) < n:
                chunk = conn.recv(n - len(data))
                if not chunk:
                    return b""
                data += chunk
            return data

        with conn:
            conn.settimeout(2)
            try:
                while not self._stop.is_set():
                    head = read(2)
                    if len(head) < 2:
                        return
                    pkt = read(struct.unpack("!H", head)[0])
                    if not pkt:
                        return
                    reply = self._answer(pkt, "tcp")
                    if isinstance(reply, list):
                        reply = reply[-1] if reply else None
                    if not reply:
                        return  # no answer: the connection closes, as before
                    conn.sendall(tcp_frame(reply))
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


def start_authorities(test_class, build_dir: str, net: str, zones: dict, handler) -> None:
    """For a test class of the recursor's last hop: `test_class.h`, a
    FakeHierarchy of `zones` on `net`, and `test_class.auth`, a
    ScriptedAuthority answering with `handler`; both stop with the class's
    cleanups (also when a later step of setUpClass fails)."""
    test_class.h = FakeHierarchy(build_dir, net=net, zones=zones)
    test_class.addClassCleanup(test_class.h.stop)
    test_class.auth = ScriptedAuthority(handler)
    test_class.addClassCleanup(test_class.auth.stop)
