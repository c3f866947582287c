"""Black-box tests of weir-fastpath against amplification and abusive
sources (docs/behaviour.md#the-front-cache, docs/fastpath-config.md#rate-limiting):

* UDP answers never exceed 1232 bytes, whatever EDNS size the client offers
  (none, 512, 1232, 4096, 65535), with and without DO, on every path: cached,
  relayed (DO; an answer the cache cannot hold), stale (the upstream gone),
  learned (a CNAME into a tagged suffix) and ANY (RFC 8482); over TCP the
  whole answer comes;
* a large answer (150 addresses, more than can be weighted) is cached after
  its first miss: the second query is a hit (weir's counters and the
  upstream's), and TCP gets every address;
* per-source query limit: an abusive source is limited while innocent ones,
  including one whose address shared the abuser's bucket in the old
  65,536-bucket hash (computed here), get every answer;
* per-source byte limit: a source asking for large answers gets TC past its
  bytes per second (and its full answer over TCP), innocent sources do not.

Clients: dnspython (exact sizes, many queries from one source address), dig
and kdig, each from its own 127.x source address. The clock is the test
clock: buckets refill only when the test moves it.

Run: python3 tests/integration/test_fastpath_amplification.py --build-dir build
"""

import os
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402  (first: it makes Debian's dnspython importable)
import dns.flags  # noqa: E402
import dns.message  # noqa: E402
import dns.rcode  # noqa: E402
from weirtest.zones import record, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()

UDP_MAX = 1232
BIG = 150    # addresses: 2,400 bytes of records, more than the 64 that can be weighted
HUGE = 300   # records: more than a cache entry holds (255), always relayed
MEDIUM = 60  # addresses: a 1,007-byte answer, under 1232
SIZES = [None, 512, 1232, 4096, 65535]  # None: no EDNS


def addr(i):
    return f"10.{i // 62500}.{i // 250 % 250}.{i % 250 + 1}"


ZONES = (zone("example.com.") + record("www", "A", "192.0.2.1", ttl=300) +
         "".join(record("big", "A", addr(i), ttl=300) for i in range(BIG)) +
         "".join(record("huge", "A", addr(i), ttl=300) for i in range(HUGE)) +
         "".join(record("medium", "A", addr(i), ttl=300) for i in range(MEDIUM)) +
         "".join(record("txt", "TXT", '"' + chr(ord("a") + i) * 200 + '"', ttl=300) for i in range(12)) +
         # An untagged customer name into the tagged CDN suffix (learned tag).
         record("shop", "CNAME", "big.cdn.example.net.", ttl=600) +
         zone("cdn.example.net.") + "".join(record("big", "A", addr(i), ttl=300) for i in range(BIG)))

CITYMAP = "127.0.0.0/8,loop,198.51.100.0/24\n"
TAGS = "cdn.example.net level=city\n"


def query(qname, qtype="A", bufsize=None, do=False, qid=None):
    q = dns.message.make_query(qname, qtype, use_edns=bufsize is not None, payload=bufsize or 512,
                               want_dnssec=do)
    if qid is not None:
        q.id = qid
    return q


def udp(server, port, q, source="127.0.0.1", timeout=2.0):
    """One query over UDP from `source`; (wire bytes, parsed) or (None, None)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((source, 0))
        s.settimeout(timeout)
        s.sendto(q.to_wire(), (server, port))
        try:
            wire = s.recv(65535)
        except socket.timeout:
            return None, None
    return wire, dns.message.from_wire(wire)


def udp_flood(server, port, queries, source, quiet=1.0):
    """Sends every query from one socket bound to `source`, then reads replies
    until every query has one or none came for `quiet` seconds. Returns
    {id: wire} of the replies."""
    replies = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.bind((source, 0))
        s.settimeout(quiet)
        for i, q in enumerate(queries):
            s.sendto(q.to_wire(), (server, port))
            if i % 32 == 31:  # let the server keep up; the socket buffer holds the rest
                time.sleep(0.001)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(replies) < len(queries):
            try:
                wire = s.recv(65535)
            except socket.timeout:
                break
            replies[int.from_bytes(wire[:2], "big")] = wire
    return replies


def old_bucket(ip):
    """The bucket the old limiter gave an IPv4 source: StableHash (FNV-1a and
    splitmix64's finaliser) of its 4 bytes, & 0xffff, shared by every address
    in it."""
    m = (1 << 64) - 1
    h = 0xcbf29ce484222325
    for b in socket.inet_aton(ip):
        h = ((h ^ b) * 0x100000001b3) & m
    h ^= h >> 30
    h = (h * 0xbf58476d1ce4e5b9) & m
    h ^= h >> 27
    h = (h * 0x94d049bb133111eb) & m
    h ^= h >> 31
    return h & 0xffff


def old_collision(ip, exclude=()):
    """A 127/8 address the old hash put in `ip`'s bucket."""
    want = old_bucket(ip)
    for i in range(1, 1 << 24):
        c = f"127.{i >> 16}.{(i >> 8) & 255}.{i & 255}"
        if c != ip and c not in exclude and (i & 255) not in (0, 255) and old_bucket(c) == want:
            return c
    raise AssertionError("no collision in 127/8")


class AmplificationTest(unittest.TestCase):
    """The 1232-byte cap on every path, and large answers cached."""

    def setUp(self):
        weirtest.require_tools("dig", "kdig")
        files = weirtest.PartitionFiles(CITYMAP, TAGS)
        self.addCleanup(files.cleanup)
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        self.addCleanup(self.sim.stop)
        up = f"{self.sim.host}:{self.sim.port}"
        config = weirtest.fastpath_config([up], workers=2, citymap=files.citymap, tags=files.tags,
                                          cache={"prefetch_percent": 0, "stale_answer_after_ms": 200},
                                          upstream={"timeout_ms": 300, "attempts": 1})
        self.fp = weirtest.Fastpath(BUILD_DIR, config, test_clock=True)
        self.addCleanup(self.fp.stop)

    def upstream_queries(self, qname):
        return sum(self.sim.stats()["by_qname_qtype"].get(qname, {}).values())

    def check_udp(self, qname, qtype, what, source="127.0.0.1", dos=(False, True)):
        """Every EDNS size, with and without DO: the answer fits 1232 bytes and
        the client's size; a truncated one has TC and no records."""
        for bufsize in SIZES:
            for do in dos:
                if do and bufsize is None:
                    continue  # DO lives in the OPT record
                q = query(qname, qtype, bufsize, do)
                wire, r = udp(self.fp.host, self.fp.port, q, source=source)
                case = f"{what}: {qname} {qtype} bufsize={bufsize} do={do}"
                self.assertIsNotNone(wire, f"{case}: no answer")
                self.assertLessEqual(len(wire), UDP_MAX, case)
                self.assertLessEqual(len(wire), max(512, bufsize or 512), case)
                self.assertNotEqual(r.rcode(), dns.rcode.SERVFAIL, f"{case}:\n{r}")
                if r.flags & dns.flags.TC:
                    self.assertEqual(r.answer, [], f"{case}: TC with records:\n{r}")
                elif qtype != "ANY" and qname.startswith(("big", "huge", "txt", "shop")):
                    self.fail(f"{case}: a {len(wire)}-byte answer of a name this large is not whole")

    def test_udp_answers_never_exceed_1232_bytes_on_any_path(self):
        m0 = self.fp.metrics()
        # Misses (relayed and after the fill), then hits; DO queries are relayed each time.
        for attempt in ("first", "again"):
            self.check_udp("big.example.com", "A", f"{attempt} (cached after the first)")
            self.check_udp("txt.example.com", "TXT", attempt)
            self.check_udp("huge.example.com", "A", f"{attempt} (too large for the cache: relayed)")
            # Learned: the chain enters a tagged suffix, the name is resolved again per city.
            self.check_udp("shop.example.com", "A", f"{attempt} (learned tag)")
            self.check_udp("big.example.com", "ANY", f"{attempt} (RFC 8482)")
        m = self.fp.metrics()
        self.assertGreater(m.value("weir_learned_tags_total"), m0.value("weir_learned_tags_total"))
        self.assertEqual(m.value("weir_any_minimal_total") - m0.value("weir_any_minimal_total"), 2 * 9)
        self.assertNotIn("ANY", self.sim.stats()["by_qname_qtype"].get("big.example.com.", {}))
        # Over TCP the whole answer, DO or not, cached or relayed.
        for name, n in (("big.example.com", BIG), ("huge.example.com", HUGE), ("shop.example.com", BIG)):
            for extra in ([], ["+dnssec"]):
                r = self.fp.dig(name, tcp=True, extra=extra + ["+bufsize=4096"])
                self.assertEqual((r.status, r.transport, r.tc), ("NOERROR", "TCP", False), r.text)
                self.assertEqual(len(r.addresses()), n, r.text)
        # kdig over UDP with a 4096-byte buffer gets TC, then TCP when allowed to fall back.
        r = weirtest.kdig(self.fp.host, self.fp.port, "big.example.com", bufsize=4096, extra=["+notcp", "+ignore"])
        self.assertTrue(r.tc, r.text)
        r = weirtest.kdig(self.fp.host, self.fp.port, "big.example.com", bufsize=4096)
        self.assertEqual(len(r.addresses()), BIG, r.text)

        # Stale: expired, and the upstream gone: served stale, still within 1232 bytes.
        self.fp.advance_clock(400)
        self.sim.stop()
        stale_before = self.fp.metrics().value("weir_stale_served_total")
        # (DO queries are never answered from the cache: they get SERVFAIL here.)
        self.check_udp("big.example.com", "A", "stale", dos=(False,))
        self.check_udp("txt.example.com", "TXT", "stale", dos=(False,))
        self.assertGreater(self.fp.metrics().value("weir_stale_served_total"), stale_before)
        m = self.fp.metrics()
        self.assertEqual(m.value("weir_queries_total"), m.value("weir_responses_total") + m.value("weir_drops_total"))

    def test_large_answer_is_cached_after_the_first_miss(self):
        m0 = self.fp.metrics()
        wire, r = udp(self.fp.host, self.fp.port, query("big.example.com", bufsize=4096))
        self.assertTrue(r.flags & dns.flags.TC, str(r))
        self.assertLessEqual(len(wire), UDP_MAX)
        m1 = self.fp.metrics()
        self.assertEqual(m1.value("weir_cache_misses_total") - m0.value("weir_cache_misses_total"), 1)
        self.assertEqual(m1.value("weir_cache_inserts_total", partition="common") -
                         m0.value("weir_cache_inserts_total", partition="common"), 1, m1.text)
        upstream = self.upstream_queries("big.example.com.")
        # The second query is a hit: nothing more upstream.
        wire, r = udp(self.fp.host, self.fp.port, query("big.example.com", bufsize=4096), source="127.0.0.9")
        self.assertTrue(r.flags & dns.flags.TC, str(r))
        m2 = self.fp.metrics()
        self.assertEqual(m2.value("weir_cache_hits_total") - m1.value("weir_cache_hits_total"), 1)
        self.assertEqual(m2.value("weir_cache_misses_total"), m1.value("weir_cache_misses_total"))
        # TCP gets every address, from the cache too.
        r = self.fp.dig("big.example.com", tcp=True, source="127.0.0.9")
        self.assertEqual((r.status, r.transport, r.tc), ("NOERROR", "TCP", False), r.text)
        self.assertEqual(len(set(r.addresses())), BIG, r.text)
        # dig's own fallback: UDP, TC, then TCP; still a hit.
        r = self.fp.dig("big.example.com", extra=["+bufsize=4096"], source="127.0.0.10")
        self.assertTrue(r.truncated_retry, r.text)
        self.assertEqual(len(r.addresses()), BIG, r.text)
        m3 = self.fp.metrics()
        self.assertEqual(m3.value("weir_cache_hits_total") - m2.value("weir_cache_hits_total"), 3)
        self.assertEqual(m3.value("weir_cache_misses_total"), m1.value("weir_cache_misses_total"))
        self.assertEqual(self.upstream_queries("big.example.com."), upstream)


class RateLimitTest(unittest.TestCase):
    """Per-source query and byte limits (test clock: refills only when moved)."""

    QPS = 50
    BYTES = 5000

    def setUp(self):
        weirtest.require_tools("dig")
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        self.addCleanup(self.sim.stop)
        # One worker: the limits are per worker (a source's sockets may land on
        # either of two), and one makes every count exact.
        config = weirtest.fastpath_config([f"{self.sim.host}:{self.sim.port}"], workers=1,
                                          cache={"prefetch_percent": 0},
                                          rate_limit={"qps_per_source": self.QPS,
                                                      "bytes_per_second": self.BYTES})
        self.fp = weirtest.Fastpath(BUILD_DIR, config, test_clock=True)
        self.addCleanup(self.fp.stop)
        # The names cached (from a source that takes no part).
        for name in ("www.example.com", "medium.example.com"):
            r = self.fp.dig(name, source="127.200.0.1")
            self.assertEqual(r.status, "NOERROR", r.text)

    def test_table_capacity_is_table_size_per_worker_and_tcp_server(self):
        # 1 worker + the TCP server, the default 65,536 sources each; then
        # 3 workers at 5,000 (rounded up to 8,192) each.
        self.assertEqual(self.fp.metrics().value("weir_rate_limit_table_capacity"), 2 * 65536)
        config = weirtest.fastpath_config([f"{self.sim.host}:{self.sim.port}"], workers=3,
                                          rate_limit={"qps_per_source": self.QPS, "table_size": 5000})
        fp = weirtest.Fastpath(BUILD_DIR, config)
        self.addCleanup(fp.stop)
        self.assertEqual(fp.metrics().value("weir_rate_limit_table_capacity"), 4 * 8192)

    def test_abusive_source_leaves_innocent_sources_their_answers(self):
        abuser = "127.0.0.2"
        collided = old_collision(abuser)  # shared the abuser's bucket in the old limiter
        others = ["127.0.0.3", "127.3.4.5"]
        self.assertEqual(old_bucket(collided), old_bucket(abuser))
        m0 = self.fp.metrics()
        rounds, flood, polite = 4, 600, 40  # per round; polite < QPS
        abuser_ok = 0
        sent = {s: 0 for s in [collided] + others}
        answered = {s: 0 for s in [collided] + others}
        for rnd in range(rounds):
            qs = [query("www.example.com", qid=i) for i in range(flood)]
            abuser_ok += len(udp_flood(self.fp.host, self.fp.port, qs, abuser))
            for s in [collided] + others:
                qs = [query("www.example.com", qid=i) for i in range(polite)]
                answered[s] += len(udp_flood(self.fp.host, self.fp.port, qs, s))
                sent[s] += polite
            self.fp.advance_clock(1)
        for s in sent:
            self.assertGreaterEqual(answered[s], 0.995 * sent[s], f"{s}: {answered[s]}/{sent[s]} answered")
        # The burst, then QPS per second of the clock.
        self.assertLessEqual(abuser_ok, self.QPS * rounds)
        self.assertGreaterEqual(abuser_ok, self.QPS * rounds * 0.9)
        # dig from the collided address, right after the abuser's flood.
        udp_flood(self.fp.host, self.fp.port, [query("www.example.com", qid=i) for i in range(200)], abuser)
        got = weirtest.dig_many(self.fp.host, self.fp.port, "www.example.com", 20, source=collided)
        self.assertEqual(got, ["192.0.2.1"] * 20)
        m = self.fp.metrics()
        limited = m.value("weir_rate_limited_total", reason="qps") - m0.value("weir_rate_limited_total", reason="qps")
        self.assertGreaterEqual(limited, rounds * flood - abuser_ok)
        self.assertEqual(limited, m.value("weir_drops_total", reason="rate_limited") -
                         m0.value("weir_drops_total", reason="rate_limited"))
        self.assertEqual(m.value("weir_queries_total"), m.value("weir_responses_total") + m.value("weir_drops_total"))

    def test_source_asking_for_large_answers_is_limited_in_bytes(self):
        abuser, innocent = "127.0.0.20", old_collision("127.0.0.20")
        m0 = self.fp.metrics()
        full_bytes, tc, seconds = 0, 0, 3
        for _ in range(seconds):
            qs = [query("medium.example.com", bufsize=1232, qid=i) for i in range(30)]
            for wire in udp_flood(self.fp.host, self.fp.port, qs, abuser).values():
                r = dns.message.from_wire(wire)
                if r.flags & dns.flags.TC:
                    tc += 1
                    self.assertEqual(r.answer, [])
                    self.assertLess(len(wire), 100)  # no larger than the query, give or take the OPT
                else:
                    self.assertEqual(len(r.answer[0]), MEDIUM)
                    full_bytes += len(wire)
            # The innocent source: every answer whole.
            for i in range(3):
                wire, r = udp(self.fp.host, self.fp.port, query("medium.example.com", bufsize=1232), source=innocent)
                self.assertFalse(r.flags & dns.flags.TC, str(r))
                self.assertEqual(len(r.answer[0]), MEDIUM)
            self.fp.advance_clock(1)
        self.assertLessEqual(full_bytes, self.BYTES * seconds)
        self.assertGreater(full_bytes, self.BYTES * seconds * 0.6)
        self.assertGreater(tc, 0)
        m = self.fp.metrics()
        self.assertEqual(m.value("weir_rate_limited_total", reason="bytes") -
                         m0.value("weir_rate_limited_total", reason="bytes"), tc)
        # The limited source's own client: TC, then TCP, which is not limited.
        udp_flood(self.fp.host, self.fp.port, [query("medium.example.com", bufsize=1232, qid=i) for i in range(10)],
                  abuser)
        r = self.fp.dig("medium.example.com", source=abuser)
        self.assertTrue(r.truncated_retry, r.text)
        self.assertEqual((r.transport, len(r.addresses())), ("TCP", MEDIUM), r.text)
        m = self.fp.metrics()
        self.assertEqual(m.value("weir_queries_total"), m.value("weir_responses_total") + m.value("weir_drops_total"))


if __name__ == "__main__":
    unittest.main()
