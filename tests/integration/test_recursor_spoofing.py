"""Blind spoofing of weir-recursor's last hop (issue #16 item 1): an attacker
who knows the source port of a query in flight floods it with forged answers
carrying all 65,536 IDs while the authoritative server is slow to answer.

The authoritative server is a scripted one in this process (policy forward
for spoof.example.): it answers over UDP after DELAY seconds, over TCP at
once, does DNS cookies (RFC 7873, server side) and can be told to lower-case
the question (an authority that does not preserve case). The forger reads
the query's source port from `ss -uanp` of the recursor's PID while the
query is in flight and sends its forged answers from the authority's own
address and port (the socket of the scripted server: the same datagrams a
spoofer's raw socket would send), in a random order of IDs.

With the defences on (the defaults: 0x20, cookies, unwanted_reply_threshold),
no forged address reaches a client or the cache in ATTEMPTS attempts. With
them off, the same attack succeeds: the control that shows the test can fail.

Run: python3 tests/integration/test_recursor_spoofing.py --build-dir build
"""

import hashlib
import os
import random
import re
import struct
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest import build_response, rdata_a  # noqa: E402

import dns.flags  # noqa: E402  (weirtest finds Debian's dnspython)
import dns.message  # noqa: E402
import dns.rrset  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
GOOD = "192.0.2.80"
POISON = "6.6.6.6"
DELAY = 1.0  # the authority's UDP answer comes this late
ATTEMPTS = 20
BURST = 128  # forged datagrams sent back to back
COOKIE = 10
SERVER_SECRET = os.urandom(16)


def server_cookie(client: bytes) -> bytes:
    return hashlib.sha256(SERVER_SECRET + client).digest()[:8]


class Authority:
    """The scripted authoritative server of spoof.example. and its switches."""

    def __init__(self, cookies: bool = True):
        self.cookies = cookies
        self.lowercase = False  # answer with the question in lower case (no 0x20 echo)
        self.slow = set()  # names answered DELAY seconds late over UDP
        self.badcookie_once = set()  # names answered BADCOOKIE to their first UDP query
        self.in_flight = {}  # name -> threading.Event set when its slow UDP query arrived
        self.srv = weirtest.ScriptedAuthority(self.handler)
        self.port = self.srv.port

    def handler(self, q):
        name = q.qname
        options = []
        rcode = 0
        if self.cookies:
            c = q.option(COOKIE)
            if c is not None and len(c) >= 8:
                options.append((COOKIE, c[:8] + server_cookie(c[:8])))
                if q.transport == "udp" and name in self.badcookie_once and c[8:] != server_cookie(c[:8]):
                    self.badcookie_once.discard(name)
                    rcode = 23
        if rcode:
            m = dns.message.from_wire(build_response(q, options=options))
            m.set_rcode(rcode)
            return m.to_wire()
        qname = name if self.lowercase else None
        r = build_response(q, qname=qname, answer=[(name, "A", 300, rdata_a(GOOD))], options=options)
        if q.transport == "udp" and name in self.slow:
            ev = self.in_flight.get(name)
            if ev is not None:
                ev.set()
            time.sleep(DELAY)
        return r

    def stop(self):
        self.srv.stop()


def forged_answers(qname: str) -> list:
    """One forged answer per ID, in a random order: the attacker knows the
    question but neither the case the recursor sent nor its cookie."""
    m = dns.message.make_response(dns.message.make_query(qname, "A", want_dnssec=False), recursion_available=False)
    m.flags |= dns.flags.AA
    m.answer.append(dns.rrset.from_text(qname, 300, "IN", "A", POISON))
    m.use_edns(0, 0, 1232)
    template = m.to_wire()
    ids = list(range(65536))
    random.shuffle(ids)
    return [struct.pack("!H", i) + template[2:] for i in ids]


def source_port(pid: int, auth_port: int) -> int:
    """The local port of the recursor's UDP socket connected to the
    authority, as `ss` shows it (0: none in flight). libunbound's resolving
    process (a child of the daemon) counts as the recursor."""
    pids = [pid] + weirtest.child_pids(pid)
    out = subprocess.run(["ss", "-uanpH"], capture_output=True, text=True, timeout=10).stdout
    for line in out.splitlines():
        if not any(f"pid={p}," in line for p in pids):
            continue
        m = re.search(r"127\.0\.0\.1:(\d+)\s+127\.0\.0\.1:(\d+)", line)
        if m and int(m.group(2)) == auth_port:
            return int(m.group(1))
    return 0


class Attacker(unittest.TestCase):
    """The scripted authority, a recursor in front of it, and the forger."""

    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig", "ss")
        cls.auth = Authority()
        cls.addClassCleanup(cls.auth.stop)

    def setUp(self):
        self.ports = []  # the source port of each attacked query, as ss showed it

    def start_recursor(self, last_hop=None, resolver=None):
        tags = weirtest.write_temp(f"spoof.example weight=on policy=forward:127.0.0.1@{self.auth.port}\n",
                                   suffix=".txt")
        self.addCleanup(os.unlink, tags)
        lh = {"timeout_ms": 4000, "attempts": 2}
        lh.update(last_hop or {})
        cfg = weirtest.recursor_config(forwarders=[f"127.0.0.1:{self.auth.port}"], tags=tags, last_hop=lh, resolver=resolver,
                                       server={"answer_deadline_ms": 8000, "metrics_listen": "127.0.0.1:0"})
        r = weirtest.Recursor(BUILD_DIR, cfg)
        self.addCleanup(r.stop)
        return r

    def attack(self, r, name: str, forged: list) -> tuple:
        """One attempt: a client asks `name`, the forger floods the port of
        the query in flight. Returns (the client's addresses, the cache's
        addresses, whether the flood found the port in time)."""
        self.auth.slow.add(name)
        ev = self.auth.in_flight[name] = threading.Event()
        result = {}
        client = threading.Thread(target=lambda: result.update(r=r.dig(name, "A", timeout=8)))
        client.start()
        self.assertTrue(ev.wait(10), f"{name}: the query never reached the authority")
        arrived = time.monotonic()
        port = source_port(r.pid, self.auth.port)
        # On a loaded machine `ss` may take most of DELAY: a flood that
        # starts late races the genuine answer and does not count as aimed.
        aimed = bool(port) and time.monotonic() - arrived < DELAY / 2
        if port:
            # In bursts the size of a socket's receive buffer, with a pause
            # for the recursor to read them: a forger that overruns the
            # buffer only loses its own datagrams (2 cores, shared).
            sock, to = self.auth.srv.udp, ("127.0.0.1", port)
            for at in range(0, len(forged), BURST):
                for pkt in forged[at:at + BURST]:
                    try:
                        sock.sendto(pkt, to)
                    except OSError:
                        pass
                time.sleep(0.0002)
        client.join(15)
        self.assertFalse(client.is_alive())
        first = result["r"]
        again = r.dig(name, "A", timeout=8)  # from the cache
        self.ports.append(port)
        return first.addresses(), again.addresses(), aimed

    def run_attacks(self, r, prefix: str, n: int) -> tuple:
        accepted, aimed = 0, 0
        for i in range(n):
            name = f"{prefix}{i}.spoof.example."
            first, cached, found = self.attack(r, name, forged_answers(name))
            aimed += found
            if POISON in first or POISON in cached:
                accepted += 1
            else:
                self.assertEqual(first, [GOOD], name)
                self.assertEqual(cached, [GOOD], name)
        return accepted, aimed


class SpoofingTest(Attacker):
    def test_blind_spoofing_defeated(self):
        r = self.start_recursor()
        accepted, aimed = self.run_attacks(r, "d", ATTEMPTS)
        m = r.metrics()
        self.assertEqual(accepted, 0, f"{accepted} of {ATTEMPTS} forgeries accepted")
        self.assertGreaterEqual(aimed, ATTEMPTS // 2, "the forger found the port of most queries in time")
        # One socket per query, its port picked at random by the kernel:
        # no two alike (bar a rare coincidence), no sequence to predict.
        ports = [p for p in self.ports if p]
        self.assertGreaterEqual(len(set(ports)), len(ports) - 1, ports)
        self.assertLessEqual(sum(1 for a, b in zip(ports, ports[1:]) if abs(a - b) <= 16), 1, ports)
        self.assertGreater(m.value("weir_recursor_unwanted_replies_total", reason="id"), 0)
        reactions = sum(m.value("weir_recursor_unwanted_reply_reactions_total", trigger=t)
                        for t in ("threshold", "case", "cookie"))
        self.assertGreaterEqual(reactions, aimed, "each flooded query went over TCP")
        # The operator hears of it, and a flood does not flood the log:
        # at most one "wrong ID" line per query, rate-limited on top.
        log = r.process.stderr_text()
        self.assertIn("possible spoofing, asking over TCP", log)
        self.assertLessEqual(log.count("with a wrong ID"), ATTEMPTS)
        self.assertEqual(m.value("weir_recursor_upstream_0x20_fallbacks_total"), 0,
                         "a forgery never turns 0x20 off for a server that preserves case")

    def until_reaction(self, r, prefix: str, trigger: str, rounds: int = 12) -> None:
        """Attacks until the forgery with the right ID reached the recursor
        and set off `trigger` (on a loaded machine the kernel may drop it
        from a full buffer in any one round); none may be accepted."""
        for i in range(rounds):
            accepted, _ = self.run_attacks(r, f"{prefix}{i}-", 1)
            self.assertEqual(accepted, 0)
            if r.metrics().value("weir_recursor_unwanted_reply_reactions_total", trigger=trigger) >= 1:
                return
        self.fail(f"no {trigger} reaction in {rounds} rounds")

    def test_each_defence_alone_defeats_it(self):
        # 0x20 alone: the forgery with the right ID has the wrong case.
        r = self.start_recursor({"cookies": False, "unwanted_reply_threshold": 0})
        self.until_reaction(r, "c", "case")
        # Cookies alone: the server is known to do cookies after one answer;
        # the forgery has none.
        r = self.start_recursor({"use_0x20": False, "unwanted_reply_threshold": 0})
        self.assertEqual(r.dig("warm.spoof.example", "A", timeout=8).addresses(), [GOOD])
        self.until_reaction(r, "k", "cookie")

    def test_control_without_defences_the_attack_succeeds(self):
        """The same attack against the last hop with every defence off: it
        must succeed, or the test above proves nothing."""
        r = self.start_recursor({"use_0x20": False, "cookies": False, "unwanted_reply_threshold": 0})
        # A forged datagram the kernel drops (a full receive buffer on a
        # loaded machine) is one the recursor never sees: up to 5 tries.
        for i in range(5):
            name = f"o{i}.spoof.example."
            first, cached, _ = self.attack(r, name, forged_answers(name))
            if POISON in first and POISON in cached:
                return
        self.fail("forgeries should get through without the defences")

    def test_authority_that_does_not_preserve_case_still_answers(self):
        r = self.start_recursor()
        self.auth.srv.clear()
        self.auth.lowercase = True
        try:
            first = r.dig("Lower1.spoof.example", "A", timeout=8)
            second = r.dig("lower2.spoof.example", "A", timeout=8)
        finally:
            self.auth.lowercase = False
        self.assertEqual(first.addresses(), [GOOD], first.text)
        self.assertEqual(second.addresses(), [GOOD], second.text)
        q1 = self.auth.srv.received("lower1.spoof.example.")
        q2 = self.auth.srv.received("lower2.spoof.example.")
        # The first: UDP in random case, answered in lower case, so asked
        # over TCP (where no forger can answer) and the server remembered.
        self.assertEqual([q.transport for q in q1], ["udp", "tcp"])
        self.assertNotEqual(q1[0].name.to_text(), "lower1.spoof.example.", "0x20 was on")
        # The second: UDP only, without 0x20, still with ID, port and cookie.
        self.assertEqual([q.transport for q in q2], ["udp"])
        self.assertEqual(q2[0].name.to_text(), "lower2.spoof.example.")
        self.assertIsNotNone(q2[0].option(COOKIE))
        self.assertEqual(r.metrics().value("weir_recursor_upstream_0x20_fallbacks_total"), 1)

    def test_cookies_sent_and_server_cookie_echoed(self):
        r = self.start_recursor()
        self.auth.srv.clear()
        for n in ("ck1", "ck2", "ck3"):
            self.assertEqual(r.dig(f"{n}.spoof.example", "A", timeout=8).addresses(), [GOOD])
        c1 = self.auth.srv.received("ck1.spoof.example.")[0].option(COOKIE)
        c2 = self.auth.srv.received("ck2.spoof.example.")[0].option(COOKIE)
        c3 = self.auth.srv.received("ck3.spoof.example.")[0].option(COOKIE)
        self.assertEqual(len(c1), 8, "the first query carries the client cookie only")
        self.assertEqual(c2, c1[:8] + server_cookie(c1[:8]), "then the server cookie is echoed back")
        self.assertEqual(c3, c2, "the client cookie stays for the same pair of addresses")
        m = r.metrics()
        self.assertGreaterEqual(m.value("weir_recursor_upstream_cookies_sent_total"), 3)
        self.assertEqual(m.value("weir_recursor_upstream_cookie_servers"), 1)

    def test_badcookie_retried_with_the_new_server_cookie(self):
        r = self.start_recursor()
        self.auth.srv.clear()
        self.auth.badcookie_once.add("bc.spoof.example.")
        a = r.dig("bc.spoof.example", "A", timeout=8)
        self.assertEqual(a.addresses(), [GOOD], a.text)
        qs = self.auth.srv.received("bc.spoof.example.")
        self.assertEqual([q.transport for q in qs], ["udp", "udp"])
        first, second = qs[0].option(COOKIE), qs[1].option(COOKIE)
        self.assertEqual(len(first), 8)
        self.assertEqual(second, first + server_cookie(first))
        self.assertEqual(r.metrics().value("weir_recursor_upstream_cookie_retries_total"), 1)

    def test_ordinary_names_reach_the_forwarder_with_weirs_defences(self):
        """Ordinary names go through libunbound, which forwards (here to the
        same server) through weir's relay: the forwarder sees weir's last
        hop, 0x20 and a cookie, whatever libunbound's own use_caps_for_id.
        With forwarder_transport = "libunbound", libunbound's own sockets:
        use_caps_for_id alone decides the case, and no cookie goes."""
        for transport, caps in (("weir", True), ("weir", False), ("libunbound", True), ("libunbound", False)):
            r = self.start_recursor(resolver={"use_caps_for_id": caps, "forwarder_transport": transport})
            self.auth.srv.clear()
            name = f"www.ordinary-{transport}-{int(caps)}.example."
            self.assertEqual(r.dig(name, "A", timeout=8).addresses(), [GOOD])
            got = self.auth.srv.received(name)
            sent = [q.name.to_text() for q in got]
            self.assertTrue(sent)
            if transport == "weir" or caps:
                self.assertTrue(any(n != name for n in sent), f"{transport} caps={caps}: {sent}")
            else:
                self.assertEqual(set(sent), {name})
            cookies = [q.option(COOKIE) for q in got]
            if transport == "weir":
                self.assertTrue(all(c is not None for c in cookies), f"{transport}: {cookies}")
                m = r.metrics()
                self.assertGreaterEqual(m.value("weir_recursor_forwarder_relay_answers_total", result="answer"), 1)
            else:
                self.assertTrue(all(c is None for c in cookies), f"{transport}: {cookies}")


class OrdinarySpoofingTest(Attacker):
    """The same forger against ordinary names (no tag covers them), which
    libunbound resolves through its forwarder (the scripted authority):
    names with letters (0x20 adds entropy) and digits-only names (none:
    the ID alone, which the flood covers in full)."""

    def ordinary_attacks(self, r, names: list) -> tuple:
        accepted, aimed = [], 0
        for name in names:
            first, cached, found = self.attack(r, name, forged_answers(name))
            aimed += found
            if POISON in first or POISON in cached:
                accepted.append(name)
            else:
                self.assertEqual(first, [GOOD], name)
                self.assertEqual(cached, [GOOD], name)
        return accepted, aimed

    def test_blind_spoofing_of_ordinary_names_defeated(self):
        r = self.start_recursor()
        tag = random.randrange(10**6)
        letters = [f"www{i}-{tag}.ordinary.example." for i in range(ATTEMPTS)]
        digits = [f"{i}{tag}.{tag % 1000}.{1000 + i}." for i in range(ATTEMPTS)]
        for kind, names in (("letters", letters), ("digits only", digits)):
            accepted, aimed = self.ordinary_attacks(r, names)
            self.assertEqual(accepted, [], f"{kind}: {len(accepted)} of {ATTEMPTS} forgeries accepted")
            self.assertGreaterEqual(aimed, ATTEMPTS // 2, f"{kind}: the forger found the port of most queries")
            self.assertTrue(r.process.alive(), "the daemon is still running")
        m = r.metrics()
        self.assertGreater(m.value("weir_recursor_unwanted_replies_total", reason="id"), 0)
        self.assertEqual(m.value("weir_recursor_resolver_restarts_total"), 0, "libunbound's process never ended")
        # Every answer reached the client through the relay.
        self.assertGreaterEqual(m.value("weir_recursor_forwarder_relay_answers_total", result="answer"),
                                2 * ATTEMPTS)

    def test_control_libunbounds_own_sockets_are_poisoned(self):
        """The same forger against libunbound's own sockets (the old
        transport): digits-only names carry no 0x20, and the flood covers
        every ID, so it wins the race against the authority 1 s late."""
        r = self.start_recursor(resolver={"forwarder_transport": "libunbound"})
        tag = random.randrange(10**6)
        for i in range(6):
            name = f"{i}{tag}.{tag % 1000}.{2000 + i}."
            first, cached, _ = self.attack(r, name, forged_answers(name))
            if POISON in first or POISON in cached:
                return
        self.fail("libunbound's own sockets should take a forgery for a digits-only name")


class IterationTransportTest(unittest.TestCase):
    """libunbound iterating itself (root hints): resolver.tcp_upstream
    sends its queries over TCP, where a blind forger cannot answer."""

    NET = "127.0.141"

    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig")
        root = f"{cls.NET}.1"

        def handler(q):
            # The root's server answers for every name (all are in its zone).
            if q.qtype == 2 and q.qname == ".":
                return build_response(q, answer=[(".", "NS", 3600, "ns.root.")],
                                      additional=[("ns.root.", "A", 3600, root)], options=[])
            if q.qtype == 1:
                addr = root if q.qname == "ns.root." else GOOD
                return build_response(q, answer=[(q.name.to_text(), "A", 300, rdata_a(addr))], options=[])
            return build_response(q, authority=[(".", "SOA", 300, weirtest.rdata_soa("ns.root.", "h.root."))],
                                  options=[])

        cls.root = weirtest.ScriptedAuthority(handler, host=root, port=53)
        cls.addClassCleanup(cls.root.stop)
        cls.hints = weirtest.write_temp(f". 3600 IN NS ns.root.\nns.root. 3600 IN A {root}\n", suffix=".hints")
        cls.addClassCleanup(os.unlink, cls.hints)

    def test_tcp_upstream_sends_libunbounds_queries_over_tcp(self):
        for tcp in (False, True):
            cfg = weirtest.recursor_config(root_hints=self.hints, resolver={"tcp_upstream": tcp, "do_ip6": False})
            r = weirtest.Recursor(BUILD_DIR, cfg)
            self.addCleanup(r.stop)
            name = f"www.iterate-{int(tcp)}.example."
            a = r.dig(name, "A", timeout=8)
            self.assertEqual(a.addresses(), [GOOD], a.text)
            got = {q.transport for q in self.root.received(name)}
            self.assertEqual(got, {"tcp"} if tcp else {"udp"}, f"tcp_upstream={tcp}")
            r.stop()


if __name__ == "__main__":
    unittest.main()
