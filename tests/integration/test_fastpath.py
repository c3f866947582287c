"""Black-box tests of weir-fastpath as a plain front cache (docs/behaviour.md#the-weight-option, #the-front-cache):
untagged names, TTL ageing on the test clock, malformed queries, ACL, EDNS
version, TCP and truncation. gslb-sim is the upstream; dig is the client.

The weighted/city behaviour is in test_fastpath_weights.py, the upstream
side (coalescing, failover, serve-stale, anti-spoofing) in
test_fastpath_resilience.py.

Run: python3 tests/integration/test_fastpath.py --build-dir build
"""

import glob
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import gslb_name, record, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
W = 65001
CORPUS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fuzz", "corpus")

# 32 A records: 545 bytes as weir writes them (owners compressed), over 512;
# gslb-sim writes owners uncompressed (1036 bytes), still under 1232.
BIG_COUNT = 32
ZONES = (zone("example.com.") + record("www", "A", "192.0.2.1", ttl=300) + record("tcp", "A", "192.0.2.7", ttl=300) +
         # The upstream answers this name over UDP with TC=1 and no records; over TCP it answers in full.
         gslb_name("tconly", truncate=True) + record("tconly", "A", "192.0.2.4", ttl=300) +
         "".join(record("big", "A", f"198.51.100.{i + 1}", ttl=300) for i in range(BIG_COUNT)))

# Subscribers: 127.0.0.0/16 and 127.1.0.0/16; 127.9.0.0/16 is someone else.
ALLOW = ["127.0.0.0/16", "127.1.0.0/16"]


class FastpathTest(unittest.TestCase):
    def setUp(self):
        weirtest.require_tools("dig")
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        self.addCleanup(self.sim.stop)
        config = weirtest.fastpath_config([f"{self.sim.host}:{self.sim.port}"], allow=ALLOW,
                                          cache={"prefetch_percent": 0}, upstream={"timeout_ms": 1000})
        self.fp = weirtest.Fastpath(BUILD_DIR, config, test_clock=True)
        self.addCleanup(self.fp.stop)

    def upstream_queries(self, qname):
        return sum(self.sim.stats()["by_qname_qtype"].get(qname, {}).values())

    # ------------------------------------------------------------ 2. untagged names

    def test_untagged_name_is_cached_and_aged(self):
        r = self.fp.dig("www.example.com")
        self.assertEqual(r.status, "NOERROR", r.text)
        self.assertEqual(r.addresses(), ["192.0.2.1"], r.text)
        self.assertEqual(r.answer[0].ttl, 300, r.text)
        self.assertIsNone(r.option(W), "no weight option without asking:\n" + r.text)
        self.assertTrue("ra" in r.flags and not r.aa, f"a recursive answer: RA set, AA clear:\n{r.text}")
        hits = self.fp.metrics().value("weir_cache_hits_total")

        r = self.fp.dig("www.example.com")
        self.assertEqual(r.addresses(), ["192.0.2.1"], r.text)
        self.assertEqual(r.answer[0].ttl, 300, "the test clock did not move:\n" + r.text)
        self.assertIsNone(r.option(W), r.text)
        self.assertEqual(self.upstream_queries("www.example.com."), 1, "second query must be a cache hit")
        m = self.fp.metrics()
        self.assertEqual(m.value("weir_cache_hits_total"), hits + 1, m.text)
        self.assertEqual(m.value("weir_partition_lookups_total", partition="common"), 2, m.text)
        self.assertEqual(m.value("weir_partition_hits_total", partition="common"), 1, m.text)

        self.fp.advance_clock(10)
        r = self.fp.dig("www.example.com")
        self.assertEqual(r.addresses(), ["192.0.2.1"], r.text)
        self.assertEqual(r.answer[0].ttl, 290, "TTL must drop by the 10 s the clock moved:\n" + r.text)
        self.assertEqual(self.upstream_queries("www.example.com."), 1)

        self.fp.advance_clock(291)  # expired: asked again, full TTL
        r = self.fp.dig("www.example.com")
        self.assertEqual(r.answer[0].ttl, 300, r.text)
        self.assertEqual(self.upstream_queries("www.example.com."), 2)

    # ------------------------------------------------------------ 8. malformed queries

    def test_malformed_corpus_gets_formerr_or_nothing(self):
        files = sorted(glob.glob(os.path.join(CORPUS, "query_fuzz", "malformed_*.bin")))
        with open(os.path.join(CORPUS, "MALFORMED.md")) as f:
            indexed = set(re.findall(r"`(malformed_\w+\.bin)`", f.read()))
        self.assertEqual({os.path.basename(p) for p in files}, indexed, "corpus and MALFORMED.md disagree")
        self.assertGreater(len(files), 30)

        formerr, dropped, badvers = [], [], []
        for path in files:
            name = os.path.basename(path)
            with open(path, "rb") as f:
                pkt = f.read()
            reply = weirtest.udp_exchange(self.fp.host, self.fp.port, pkt, timeout=0.3)
            self.assertTrue(self.fp.alive(), f"weir-fastpath died on {name}:\n{self.fp.process.stderr_text()}")
            is_garbage = len(pkt) < 12 or (pkt[2] & 0x80) != 0  # runt, or a response (QR set)
            if is_garbage:
                # Answering a response invites reflection loops; a runt has no ID.
                self.assertIsNone(reply, f"{name}: garbage must be dropped, got {reply!r}")
                dropped.append(name)
                continue
            if reply is None:
                dropped.append(name)
                continue
            self.assertGreaterEqual(len(reply), 12, f"{name}: runt reply {reply!r}")
            self.assertEqual(reply[:2], pkt[:2], f"{name}: reply ID differs")
            self.assertTrue(reply[2] & 0x80, f"{name}: reply without QR")
            rcode = reply[3] & 0x0F
            if name == "malformed_edns_version_1.bin":
                # BADVERS (16): header RCODE 0 + extended RCODE 1 in the OPT TTL.
                self.assertEqual(rcode, 0, f"{name}: {reply!r}")
                self.assertIn(b"\x00\x00\x29", reply, f"{name}: BADVERS needs an OPT: {reply!r}")
                opt = reply.index(b"\x00\x00\x29") + 1
                self.assertEqual(reply[opt + 4], 1, f"{name}: extended RCODE must be 1 (BADVERS): {reply!r}")
                badvers.append(name)
            else:
                self.assertEqual(rcode, 1, f"{name}: FORMERR expected, got RCODE {rcode}")
                formerr.append(name)
        self.assertEqual(badvers, ["malformed_edns_version_1.bin"])

        # Alive, and still answering.
        self.assertTrue(self.fp.alive())
        r = self.fp.dig("www.example.com")
        self.assertEqual(r.status, "NOERROR", r.text)
        self.assertEqual(r.addresses(), ["192.0.2.1"], r.text)

        m = self.fp.metrics()
        self.assertEqual(m.value("weir_error_responses_total", reason="formerr"), len(formerr), m.text)
        self.assertEqual(m.value("weir_drops_total", reason="garbage"), len(dropped),
                         f"dropped {dropped}\n{m.text}")
        self.assertEqual(m.value("weir_responses_total", rcode="FORMERR"), len(formerr), m.text)
        self.assertEqual(m.value("weir_queries_total", transport="udp"), len(files) + 1, m.text)
        self.assertEqual(m.value("weir_queries_total"), m.value("weir_responses_total") + m.value("weir_drops_total"),
                         "every query is answered once or dropped:\n" + m.text)
        self.assertEqual(self.sim.stats()["queries"], 1, "nothing malformed may reach the upstream")

    # ------------------------------------------------------------ 9. protection and transports

    def test_source_outside_acl_is_refused(self):
        r = self.fp.dig("www.example.com", source="127.9.0.1")
        self.assertEqual(r.status, "REFUSED", r.text)
        self.assertEqual(r.answer, [], r.text)
        r = self.fp.dig("www.example.com", source="127.1.2.3")
        self.assertEqual(r.status, "NOERROR", r.text)
        self.assertEqual(self.upstream_queries("www.example.com."), 1, "a refused query must not go upstream")
        r = self.fp.dig("www.example.com", source="127.9.0.1")
        self.assertEqual(r.status, "REFUSED", "cached answers are not for outsiders either:\n" + r.text)
        self.assertEqual(r.answer, [], r.text)
        m = self.fp.metrics()
        self.assertEqual(m.value("weir_error_responses_total", reason="acl"), 2, m.text)
        self.assertEqual(m.value("weir_drops_total"), 0, m.text)
        self.assertEqual(m.value("weir_responses_total", rcode="REFUSED"), 2, m.text)

    def test_edns_version_1_gets_badvers(self):
        r = self.fp.dig("www.example.com", edns=1, extra=["+noednsnegotiation"])
        self.assertEqual(r.status, "BADVERS", r.text)
        self.assertTrue(r.edns, r.text)
        self.assertIn("EDNS: version: 0", r.text, "BADVERS is answered with our version, 0:\n" + r.text)
        self.assertEqual(r.answer, [], r.text)
        self.assertEqual(self.sim.stats()["queries"], 0)
        self.assertEqual(self.fp.metrics().value("weir_responses_total", rcode="BADVERS"), 1)

    def test_tcp_is_served_from_the_cache(self):
        r = self.fp.dig("tcp.example.com")
        self.assertEqual((r.status, r.transport), ("NOERROR", "UDP"), r.text)
        hits = self.fp.metrics().value("weir_cache_hits_total")
        r = self.fp.dig("tcp.example.com", tcp=True)
        self.assertEqual((r.status, r.transport), ("NOERROR", "TCP"), r.text)
        self.assertEqual(r.addresses(), ["192.0.2.7"], r.text)
        self.assertEqual(self.upstream_queries("tcp.example.com."), 1, "TCP must be answered from the cache")
        m = self.fp.metrics()
        self.assertEqual(m.value("weir_queries_total", transport="tcp"), 1, m.text)
        self.assertEqual(m.value("weir_cache_hits_total"), hits + 1, m.text)
        # A miss over TCP works too.
        r = self.fp.dig("www.example.com", tcp=True)
        self.assertEqual((r.status, r.transport, r.addresses()), ("NOERROR", "TCP", ["192.0.2.1"]), r.text)

    def test_answer_over_512_without_edns_is_truncated(self):
        want = sorted(f"198.51.100.{i + 1}" for i in range(BIG_COUNT))
        for attempt in ("miss", "hit"):
            r = self.fp.dig("big.example.com", extra=["+noedns", "+ignore"])
            self.assertEqual(r.status, "NOERROR", f"{attempt}:\n{r.text}")
            self.assertTrue(r.tc, f"{attempt}: TC must be set above 512 bytes without EDNS:\n{r.text}")
            self.assertEqual(r.answer, [], f"{attempt}:\n{r.text}")
        # With EDNS (dig offers 1232) it fits in UDP.
        r = self.fp.dig("big.example.com")
        self.assertFalse(r.tc, r.text)
        self.assertEqual((r.status, r.transport), ("NOERROR", "UDP"), r.text)
        self.assertEqual(sorted(r.addresses()), want, r.text)
        self.assertEqual(self.upstream_queries("big.example.com."), 1)

    def test_any_over_udp_gets_the_rfc8482_answer_and_never_goes_upstream(self):
        # ANY is the amplification query: over UDP the answer is one small
        # HINFO (RFC 8482 4.2), whatever the name holds, and costs nothing upstream.
        for _ in range(2):
            # +notcp: dig asks ANY over TCP unless told otherwise.
            r = self.fp.dig("big.example.com", "ANY", extra=["+notcp", "+bufsize=4096"])
            self.assertEqual((r.status, r.tc, r.transport), ("NOERROR", False, "UDP"), r.text)
            self.assertEqual([(a.name, a.type, a.data) for a in r.answer],
                             [("big.example.com.", "HINFO", '"RFC8482" ""')], r.text)
            self.assertGreaterEqual(r.answer[0].ttl, 3600, r.text)
        self.assertEqual(self.upstream_queries("big.example.com."), 0)
        self.assertEqual(self.fp.metrics().value("weir_any_minimal_total"), 2)
        # Over TCP (no spoofed sources) ANY is resolved like any other type.
        r = self.fp.dig("www.example.com", "ANY", tcp=True)
        self.assertEqual(r.transport, "TCP", r.text)
        self.assertNotEqual([a.type for a in r.answer], ["HINFO"], r.text)
        self.assertEqual(self.sim.stats()["by_qname_qtype"].get("www.example.com.", {}).get("ANY"), 1,
                         self.sim.stats())
        self.assertEqual(self.fp.metrics().value("weir_any_minimal_total"), 2)

    def test_tcp_answers_are_never_truncated(self):
        # TC exists to send the client to TCP; over TCP the whole answer goes
        # (up to 65535 bytes), whatever the EDNS buffer size says.
        want = sorted(f"198.51.100.{i + 1}" for i in range(BIG_COUNT))
        r = self.fp.dig("big.example.com", tcp=True, extra=["+noedns"])  # a miss over TCP
        self.assertEqual((r.status, r.transport), ("NOERROR", "TCP"), r.text)
        self.assertFalse(r.tc, "TC over TCP (the 512-byte UDP limit applied to a TCP answer):\n" + r.text)
        self.assertEqual(sorted(r.addresses()), want, r.text)
        r = self.fp.dig("big.example.com", tcp=True, extra=["+noedns"])  # a hit over TCP
        self.assertFalse(r.tc, "TC over TCP on a cache hit:\n" + r.text)
        self.assertEqual(sorted(r.addresses()), want, r.text)
        # What a subscriber's stub does: UDP, TC, then TCP, and it gets everything.
        r = self.fp.dig("big.example.com", extra=["+noedns"])
        self.assertTrue(r.truncated_retry, r.text)
        self.assertEqual((r.status, r.transport), ("NOERROR", "TCP"), r.text)
        self.assertFalse(r.tc, r.text)
        self.assertEqual(sorted(r.addresses()), want, r.text)
        self.assertEqual(self.upstream_queries("big.example.com."), 1)

    def test_truncated_upstream_answer_is_retried_over_tcp(self):
        # RFC 7766 / RFC 1035 4.2.1: a truncated UDP answer from upstream is
        # retried over TCP. What the subscriber must never see is the empty
        # TC answer passed off as NOERROR/NODATA.
        for attempt in ("first", "second"):
            r = self.fp.dig("tconly.example.com", timeout=3)
            self.assertEqual(r.status, "NOERROR", f"{attempt}:\n{r.text}")
            self.assertEqual(r.addresses(), ["192.0.2.4"],
                             f"{attempt}: upstream TC answer relayed as an empty NOERROR (no TC, no records, "
                             f"no TCP retry upstream):\n{r.text}")
        stats = self.sim.stats()
        self.assertGreaterEqual(stats["tcp"], 1, f"weir never asked the upstream over TCP: {stats}")


if __name__ == "__main__":
    unittest.main()
