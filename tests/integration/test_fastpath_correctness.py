"""Black-box tests of weir-fastpath's protocol correctness, each as an
operator sees it from a client:

* negative answers (RFC 2308) for tagged names: SOA in authority, TTL =
  min(SOA TTL, MINIMUM) capped by cache.negative_max_ttl, cached per
  partition, counted down, weight option echoed only when asked;
* a negative answer without SOA is not cached (RFC 2308 section 5);
* SERVFAIL is cached no longer than cache.servfail_ttl, learned tags too;
* TCP half-close: every query received is answered before the close
  (RFC 7766 section 6.2.4);
* no DNSSEC records to clients that did not set DO, AD only per RFC 6840;
* every query is answered (SERVFAIL) by upstream.answer_deadline_ms when
  every upstream is blackholed;
* bytes after the last counted record of a query get FORMERR (fastpath and,
  through the shared codec, weir-recursor).

The upstreams are gslb-sim and weirtest.ScriptedAuthority on 127.0.0.1 with
kernel-chosen ports; the fastpath forwards tagged names to them directly.

Run: python3 tests/integration/test_fastpath_correctness.py --build-dir build
"""

import base64
import os
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
import dns.message  # noqa: E402
import dns.query  # noqa: E402
import dns.rcode  # noqa: E402
from weirtest.zones import gslb_name, no_empty_weight_option, record, view, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
W = 65001  # the default weight option code
T_A, T_SOA, T_AAAA, T_RRSIG, T_NSEC, T_NSEC3 = 1, 6, 28, 46, 47, 50
DNSSEC_TYPES = {T_RRSIG, T_NSEC, T_NSEC3}

ZONES = (no_empty_weight_option() + zone("cdn.test.", rname="admin", minimum=40) +
         gslb_name("x", view("198.51.100.0/24", ["192.0.2.11", "192.0.2.12"], [2, 1], scope=24),
                   view("203.0.113.0/24", ["192.0.2.21"], [1], scope=24), ttl=300) +
         "".join(gslb_name(f"slow{i}", latency_ms=400) for i in (1, 2, 3)) +
         "".join(record(f"slow{i}", "A", f"192.0.2.3{i}") for i in (1, 2, 3)) +
         zone("plain.test.", rname="admin", minimum=None, ttl=None) +
         record("www", "CNAME", "x.cdn.test."))

CITYMAP = """\
127.1.0.0/16,city-a,198.51.100.0/24
127.2.0.0/16,city-b,203.0.113.0/24
"""
TAGS = "cdn.test weight=on ecs=on answer=single level=city\n"

CITY_A1, CITY_A2, CITY_B1 = "127.1.0.1", "127.1.0.2", "127.2.0.1"


def query(server, port, payload, source=None, timeout=3.0):
    """One UDP exchange from `source`; the decoded response or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        if source:
            s.bind((source, 0))
        s.settimeout(timeout)
        s.sendto(payload, (server, port))
        try:
            return weirtest.parse_message(s.recv(65535))
        except socket.timeout:
            return None


def upstream_queries(sim, qname):
    return sum(sim.stats().get("by_qname_qtype", {}).get(qname, {}).values())


class NegativeTaggedTest(unittest.TestCase):
    """Issue item 1: NXDOMAIN/NODATA of tagged names."""

    def start(self, cache=None):
        files = weirtest.PartitionFiles(CITYMAP, TAGS)
        self.addCleanup(files.cleanup)
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        self.addCleanup(self.sim.stop)
        up = f"{self.sim.host}:{self.sim.port}"
        conf = weirtest.fastpath_config([up], weighted=[up], citymap=files.citymap, tags=files.tags,
                                        cache=cache, upstream={"timeout_ms": 1000})
        self.fp = weirtest.Fastpath(BUILD_DIR, conf, test_clock=True)
        self.addCleanup(self.fp.stop)

    def ask(self, qname, qtype, source, weight=True):
        opts = [(W, b"")] if weight else []
        r = query(self.fp.host, self.fp.port, weirtest.make_query(qname, qtype, options=opts), source=source)
        self.assertIsNotNone(r, f"no answer for {qname} from {source}")
        return r

    def check_negative(self, r, rcode, ttl):
        self.assertEqual(r.rcode, rcode)
        self.assertEqual(r.answer, [])
        soa = [x for x in r.authority if x.type == T_SOA]
        self.assertEqual(len(soa), 1, f"SOA in authority: {r.authority}")
        self.assertEqual(soa[0].name, "cdn.test.")
        self.assertEqual(soa[0].ttl, ttl)

    def run_case(self, qname, qtype, rcode):
        wire = qname + "."
        first = self.ask(qname, qtype, CITY_A1)
        self.check_negative(first, rcode, 40)  # min(SOA TTL 3600, MINIMUM 40)
        self.assertEqual(first.option(W), b"", "the weight option is echoed with length 0")
        self.assertEqual(upstream_queries(self.sim, wire), 1)

        # Same city, another subscriber: from the cache, TTL counted down.
        self.fp.advance_clock(15)
        hit = self.ask(qname, qtype, CITY_A2)
        self.check_negative(hit, rcode, 25)
        self.assertEqual(hit.option(W), b"")
        self.assertEqual(upstream_queries(self.sim, wire), 1, "a repeat in the same city went upstream")

        # Without the weight option: no option in the answer.
        plain = self.ask(qname, qtype, CITY_A2, weight=False)
        self.check_negative(plain, rcode, 25)
        self.assertIsNone(plain.option(W))
        self.assertEqual(upstream_queries(self.sim, wire), 1)

        # Another city is another partition: its own upstream query, once.
        other = self.ask(qname, qtype, CITY_B1)
        self.check_negative(other, rcode, 40)
        self.ask(qname, qtype, CITY_B1)
        self.assertEqual(upstream_queries(self.sim, wire), 2)

        # Expired: asked again.
        self.fp.advance_clock(41)
        self.check_negative(self.ask(qname, qtype, CITY_B1), rcode, 40)
        self.assertEqual(upstream_queries(self.sim, wire), 3)

    def test_nxdomain_cached_per_partition(self):
        self.start()
        self.run_case("nope.cdn.test", T_A, 3)

    def test_nodata_cached_per_partition(self):
        self.start()
        self.run_case("x.cdn.test", T_AAAA, 0)

    def test_negative_ttl_capped(self):
        self.start(cache={"negative_max_ttl": 20})
        r = self.ask("nope.cdn.test", T_A, CITY_A1)
        self.check_negative(r, 3, 20)
        self.fp.advance_clock(5)
        self.check_negative(self.ask("nope.cdn.test", T_A, CITY_A2), 3, 15)
        self.assertEqual(upstream_queries(self.sim, "nope.cdn.test."), 1)


class ScriptedUpstreamTest(unittest.TestCase):
    """A scripted upstream for answers gslb-sim never gives."""

    def start(self, handler, cache=None, upstream=None, tags=None, ordinary=None):
        self.auth = weirtest.ScriptedAuthority(handler)
        self.addCleanup(self.auth.stop)
        up = f"{self.auth.host}:{self.auth.port}"
        files = weirtest.PartitionFiles(CITYMAP, tags if tags is not None else TAGS)
        self.addCleanup(files.cleanup)
        conf = weirtest.fastpath_config(ordinary or [up], weighted=[up], citymap=files.citymap,
                                        tags=files.tags, cache=cache,
                                        upstream=upstream or {"timeout_ms": 1000})
        self.fp = weirtest.Fastpath(BUILD_DIR, conf, test_clock=True)
        self.addCleanup(self.fp.stop)

    def ask(self, payload, source=CITY_A1):
        r = query(self.fp.host, self.fp.port, payload, source=source)
        self.assertIsNotNone(r, "no answer")
        return r


SOA = weirtest.rdata_soa("ns1.cdn.test.", "admin.cdn.test.", minimum=120)


class NegativeTtlTest(ScriptedUpstreamTest):
    def test_soa_ttl_is_min_of_ttl_and_minimum(self):
        # SOA record TTL 300, MINIMUM 120: the negative TTL is 120 (RFC 2308 5).
        self.start(lambda q: weirtest.build_response(q, rcode=3, authority=[("cdn.test.", "SOA", 300, SOA)],
                                                     options=[]))
        r = self.ask(weirtest.make_query("gone.cdn.test", options=[(W, b"")]))
        self.assertEqual(r.rcode, 3)
        self.assertEqual([(x.type, x.ttl) for x in r.authority], [(T_SOA, 120)])
        self.assertEqual(r.option(W), b"")
        self.fp.advance_clock(20)
        r = self.ask(weirtest.make_query("gone.cdn.test"), source=CITY_A2)
        self.assertEqual([(x.type, x.ttl) for x in r.authority], [(T_SOA, 100)])
        self.assertIsNone(r.option(W))
        self.assertEqual(len(self.auth.received("gone.cdn.test.")), 1)


class NegativeWithoutSoaTest(ScriptedUpstreamTest):
    """Issue item 6: RFC 2308 section 5, no SOA -> not cached."""

    def test_nxdomain_without_soa_is_not_cached(self):
        self.start(lambda q: weirtest.build_response(q, rcode=3, options=[]), tags="")
        for i in range(2):
            r = self.ask(weirtest.make_query("nosoa.example.org"))
            self.assertEqual(r.rcode, 3)
        self.assertEqual(len(self.auth.received("nosoa.example.org.")), 2,
                         "a negative answer without SOA was cached")

    def test_nodata_without_soa_is_not_cached(self):
        self.start(lambda q: weirtest.build_response(q, rcode=0, options=[]))
        for src in (CITY_A1, CITY_A2):
            r = self.ask(weirtest.make_query("nosoa.cdn.test"), source=src)
            self.assertEqual(r.rcode, 0)
            self.assertEqual(r.answer, [])
        self.assertEqual(len(self.auth.received("nosoa.cdn.test.")), 2,
                         "a NODATA answer without SOA was cached")


class ServfailTtlTest(ScriptedUpstreamTest):
    """Issue item 7: SERVFAIL is cached for cache.servfail_ttl at most."""

    def handler(self, q):
        # www.plain.test is untagged, but its CNAME enters the tagged
        # cdn.test: the fastpath learns the tag and asks again as a tagged
        # name (with the weight option), and that resolution fails.
        if q.qname == "www.plain.test." and q.option(W) is None:
            return weirtest.build_response(q, answer=[("www.plain.test.", "CNAME", 300,
                                                       weirtest.wire_name("x.cdn.test."))], options=[])
        return weirtest.build_response(q, rcode=2, aa=False, options=[])

    def failed_queries(self, name):
        return len([q for q in self.auth.received(name) if name != "www.plain.test." or q.option(W) is not None])

    def test_servfail_ttl_plain_tagged_and_learned(self):
        self.start(self.handler, cache={"servfail_ttl": 3, "stale_window": 0})
        for name in ("sf.example.org", "sf.cdn.test", "www.plain.test"):
            wire = name + "."
            r = self.ask(weirtest.make_query(name))
            self.assertEqual(r.rcode, 2, name)
            first = self.failed_queries(wire)
            self.assertGreater(first, 0, name)
            self.fp.advance_clock(2)
            self.assertEqual(self.ask(weirtest.make_query(name), source=CITY_A2).rcode, 2)
            self.assertEqual(self.failed_queries(wire), first, f"{name}: SERVFAIL not cached for servfail_ttl")
            self.fp.advance_clock(2)  # 4 s > servfail_ttl
            self.assertEqual(self.ask(weirtest.make_query(name)).rcode, 2)
            self.assertGreater(self.failed_queries(wire), first, f"{name}: SERVFAIL cached longer than servfail_ttl")


SIGNATURE = base64.b64encode(b"\x55" * 64).decode()  # nobody checks it


def rrsig(covered, signer):
    return weirtest.rdata("RRSIG", f"{covered} 13 3 300 2000000000 1700000000 12345 {signer} {SIGNATURE}")


def nsec(next_name):
    return weirtest.rdata("NSEC", f"{next_name} A MX RRSIG NSEC")


def nsec3():
    return weirtest.rdata("NSEC3", f"1 0 0 - {base64.b32hexencode(bytes([0x11] * 20)).decode()} A")


def set_ad(pkt):
    return pkt[:3] + bytes([pkt[3] | 0x20]) + pkt[4:]


class DnssecStrippingTest(ScriptedUpstreamTest):
    """Issue item 3: a misbehaving upstream sends DNSSEC records and AD to a
    query without DO; clients without DO never see them."""

    def handler(self, q):
        if q.qname.startswith("signed"):
            return set_ad(weirtest.build_response(
                q, answer=[(q.qname, "A", 300, weirtest.rdata_a("192.0.2.80")),
                           (q.qname, T_RRSIG, 300, rrsig("A", "example.org."))],
                authority=[("example.org.", "NS", 300, weirtest.wire_name("ns1.example.org.")),
                           ("example.org.", T_RRSIG, 300, rrsig("NS", "example.org."))],
                additional=[("ns1.example.org.", "A", 300, weirtest.rdata_a("192.0.2.53")),
                            ("ns1.example.org.", T_RRSIG, 300, rrsig("A", "example.org."))],
                options=[]))
        return set_ad(weirtest.build_response(
            q, rcode=3,
            authority=[("example.org.", "SOA", 300, weirtest.rdata_soa("ns1.example.org.", "a.example.org.")),
                       ("example.org.", T_RRSIG, 300, rrsig("SOA", "example.org.")),
                       ("a.example.org.", T_NSEC, 300, nsec("z.example.org.")),
                       ("a.example.org.", T_RRSIG, 300, rrsig("NSEC", "example.org.")),
                       ("abcd.example.org.", T_NSEC3, 300, nsec3())],
            options=[]))

    def test_relayed_answers_without_do(self):
        # Answers the cache does not keep are relayed: CD without DO, and a
        # negative answer without SOA. Neither may carry DNSSEC records.
        def handler(q):
            if q.qname.startswith("nosoa"):
                return weirtest.build_response(q, rcode=3, authority=[
                    ("a.example.org.", T_NSEC, 300, nsec("z.example.org.")),
                    ("a.example.org.", T_RRSIG, 300, rrsig("NSEC", "example.org."))], options=[])
            return self.handler(q)

        self.start(handler, tags="")
        for name in ("signed.example.org", "nx.example.org"):
            for _ in range(2):
                q = bytearray(weirtest.make_query(name, ad=True))
                q[3] |= 0x10  # CD
                r = self.ask(bytes(q))
                self.assertFalse(r.types() & DNSSEC_TYPES, f"CD, no DO, {name}: {r.types()}")
                self.assertTrue(r.flags & 0x10, "CD is copied")
                if name.startswith("signed"):
                    self.assertEqual([x.type for x in r.answer], [T_A])
                    self.assertEqual([(x.type, x.name) for x in r.authority], [(2, "example.org.")],
                                     "the NS RRset stays")
                    self.assertEqual([(x.type, x.rdata) for x in r.additional],
                                     [(T_A, weirtest.rdata_a("192.0.2.53"))], "the glue stays")
                else:
                    self.assertEqual([x.type for x in r.authority], [T_SOA])
        r = self.ask(weirtest.make_query("nosoa.example.org"))
        self.assertEqual(r.rcode, 3)
        self.assertFalse(r.types() & DNSSEC_TYPES, r.types())
        # With DO and CD the client gets what the upstream sent.
        q = bytearray(weirtest.make_query("signed.example.org", do=True))
        q[3] |= 0x10
        r = self.ask(bytes(q))
        self.assertIn(T_RRSIG, {x.type for x in r.answer})

    def test_no_dnssec_records_without_do(self):
        self.start(self.handler, tags="")
        # dig's default: RD and AD, no DO. First the relayed answer, then the cached one.
        for attempt in ("relayed", "cached"):
            r = self.ask(weirtest.make_query("signed.example.org", ad=True))
            self.assertEqual(r.rcode, 0)
            self.assertEqual([(x.type, x.rdata) for x in r.answer], [(T_A, weirtest.rdata_a("192.0.2.80"))],
                             attempt)
            self.assertFalse(r.types() & DNSSEC_TYPES, f"{attempt}: DNSSEC records without DO: {r.types()}")
            self.assertTrue(r.ad, f"{attempt}: AD asked for and upstream-authenticated")
            r = self.ask(weirtest.make_query("nx.example.org", ad=True))
            self.assertEqual(r.rcode, 3)
            self.assertFalse(r.types() & DNSSEC_TYPES, f"{attempt}: DNSSEC records without DO: {r.types()}")
            self.assertEqual([x.type for x in r.authority], [T_SOA])
        # No AD and no DO: never AD (RFC 6840 5.8).
        for name in ("signed.example.org", "nx.example.org"):
            r = self.ask(weirtest.make_query(name, ad=False))
            self.assertFalse(r.ad, name)
            self.assertFalse(r.types() & DNSSEC_TYPES)
        # Without EDNS at all.
        r = self.ask(weirtest.make_query("signed2.example.org", ad=True, edns=False))
        self.assertFalse(r.types() & DNSSEC_TYPES, r.types())
        self.assertEqual(len(r.answer), 1)
        # With DO the client gets what the upstream sent.
        r = self.ask(weirtest.make_query("signed3.example.org", do=True))
        self.assertIn(T_RRSIG, {x.type for x in r.answer})

    def test_explicit_rrsig_query_is_answered(self):
        # A query for the RRSIG type itself gets the RRSIGs (RFC 4035 3.1.5 does not apply).
        self.start(lambda q: weirtest.build_response(
            q, answer=[(q.qname, T_RRSIG, 300, rrsig("A", "example.org."))], options=[]), tags="")
        r = self.ask(weirtest.make_query("sig.example.org", T_RRSIG))
        self.assertEqual([x.type for x in r.answer], [T_RRSIG])


class AnswerDeadlineTest(unittest.TestCase):
    """Issue item 4: upstreams that never answer still give SERVFAIL in time."""

    def test_blackholed_upstreams_get_servfail_by_the_deadline(self):
        holes = []
        for _ in range(3):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))  # bound, never read: a blackhole
            self.addCleanup(s.close)
            holes.append(f"127.0.0.1:{s.getsockname()[1]}")
        # The default timeouts: 1.5 s per try, 3 tries.
        conf = weirtest.fastpath_config(holes)
        fp = weirtest.Fastpath(BUILD_DIR, conf)
        self.addCleanup(fp.stop)
        for transport in ("udp", "tcp"):
            # Timed in-process (dnspython), so a slow start of a client process on
            # a loaded machine is not counted; without the deadline the three
            # 1.5 s tries would take 4.5 s.
            q = dns.message.make_query(f"hole-{transport}.example.org", "A")
            send = dns.query.tcp if transport == "tcp" else dns.query.udp
            t0 = time.monotonic()
            r = send(q, fp.host, port=fp.port, timeout=6)
            elapsed = time.monotonic() - t0
            self.assertEqual(r.rcode(), dns.rcode.SERVFAIL, f"{transport}: {r}")
            self.assertLess(elapsed, 3.8, f"{transport}: SERVFAIL after {elapsed:.2f} s")
            self.assertGreater(elapsed, 2.5, "the default deadline is 3 s")

    def test_deadline_knob(self):
        hole = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        hole.bind(("127.0.0.1", 0))
        self.addCleanup(hole.close)
        conf = weirtest.fastpath_config([f"127.0.0.1:{hole.getsockname()[1]}"],
                                        upstream={"timeout_ms": 5000, "answer_deadline_ms": 700})
        fp = weirtest.Fastpath(BUILD_DIR, conf)
        self.addCleanup(fp.stop)
        t0 = time.monotonic()
        r = weirtest.dig(fp.host, fp.port, "hole.example.org", timeout=3, norec=False)
        self.assertEqual(r.status, "SERVFAIL", r.text)
        self.assertLess(time.monotonic() - t0, 1.5)

    def test_bad_deadline_is_rejected(self):
        path = weirtest.write_temp(weirtest.fastpath_config(["127.0.0.1:53"],
                                                            upstream={"answer_deadline_ms": 50}))
        self.addCleanup(os.unlink, path)
        out = weirtest.run([weirtest.binary(BUILD_DIR, "fastpath/weir-fastpath"), "-c", path, "--check"])
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn("answer_deadline_ms", out.stderr)


class TcpHalfCloseTest(unittest.TestCase):
    """Issue item 2: RFC 7766 6.2.4, answers go out before the close."""

    def test_half_closed_client_gets_every_answer(self):
        sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        self.addCleanup(sim.stop)
        fp = weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config([f"{sim.host}:{sim.port}"]))
        self.addCleanup(fp.stop)
        names = ["slow1.cdn.test", "slow2.cdn.test", "slow3.cdn.test"]
        queries = [weirtest.make_query(n, qid=100 + i) for i, n in enumerate(names)]
        answers, closed = weirtest.tcp_exchange_half_close(fp.host, fp.port, queries, timeout=5)
        got = sorted((m.id, m.rcode, [r.rdata for r in m.answer])
                     for m in (weirtest.parse_message(a) for a in answers))
        self.assertEqual(got, [(100, 0, [weirtest.rdata_a("192.0.2.31")]),
                               (101, 0, [weirtest.rdata_a("192.0.2.32")]),
                               (102, 0, [weirtest.rdata_a("192.0.2.33")])])
        self.assertTrue(closed, "the server closes once everything is answered")
        # Cached now: a half-closed connection with hits only is answered too.
        answers, closed = weirtest.tcp_exchange_half_close(fp.host, fp.port, queries[:1])
        self.assertEqual(len(answers), 1)
        self.assertTrue(closed)


class TrailingBytesTest(unittest.TestCase):
    """Issue item 5: bytes after the last counted record are FORMERR."""

    CASES = {
        "after the question": weirtest.make_query("www.example.org", edns=False, trailing=b"\x00\x00"),
        "after the OPT": weirtest.make_query("www.example.org", trailing=b"\xde\xad"),
        "one byte": weirtest.make_query("www.example.org", trailing=b"\x00"),
    }

    def check_formerr(self, host, port, label):
        for what, pkt in self.CASES.items():
            raw = weirtest.udp_exchange(host, port, pkt)
            self.assertIsNotNone(raw, f"{label}, {what}: no answer")
            m = weirtest.parse_message(raw)
            self.assertEqual(m.flags & 0xF, 1, f"{label}, {what}: rcode {m.rcode}")
            self.assertEqual(m.id, 0x1234)
            self.assertEqual(m.answer, [])

    def test_fastpath_formerr(self):
        auth = weirtest.ScriptedAuthority(
            lambda q: weirtest.build_response(q, answer=[(q.qname, "A", 60, weirtest.rdata_a("192.0.2.1"))]))
        self.addCleanup(auth.stop)
        fp = weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config([f"{auth.host}:{auth.port}"]))
        self.addCleanup(fp.stop)
        before = fp.metrics().value("weir_error_responses_total", reason="formerr")
        self.check_formerr(fp.host, fp.port, "fastpath")
        self.assertEqual(auth.received(), [], "a malformed query was resolved")
        self.assertEqual(fp.metrics().value("weir_error_responses_total", reason="formerr") - before, len(self.CASES))
        # The same query without the junk is answered.
        r = fp.dig("www.example.org", norec=False)
        self.assertEqual(r.addresses(), ["192.0.2.1"])

    def test_recursor_formerr(self):
        rec = weirtest.Recursor(BUILD_DIR, weirtest.recursor_config(forwarders=["127.0.0.1:9"]))
        self.addCleanup(rec.stop)
        self.check_formerr(rec.host, rec.port, "recursor")


if __name__ == "__main__":
    unittest.main()
