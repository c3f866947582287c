"""Black-box tests of gslb-sim (bench/gslb_sim) with dig and kdig.

Run: python3 tests/integration/test_gslb_sim.py --build-dir build
"""

import ipaddress
import json
import os
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import default, delegation, gslb_name, no_empty_weight_option, record, view, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()

ZONES = (no_empty_weight_option() + zone("example.com.", serial=7, minimum=45) +
         record("www", "A", "192.0.2.1", ttl=300) + record("video", "CNAME", "x.cdn.test.", ttl=600) +
         record("chain1", "CNAME", "chain2") + record("chain2", "CNAME", "www") +
         record("away", "CNAME", "www.example.org.") +
         record("deep.ent", "TXT", "empty non-terminal above me") +
         gslb_name("broken", servfail=True) +
         gslb_name("lost", loss=1.0) + record("lost", "A", "192.0.2.5") +
         gslb_name("slow", latency_ms=300) + record("slow", "A", "192.0.2.3") +
         gslb_name("big", truncate=True) + record("big", "A", "192.0.2.4") +
         delegation("sub", "ns1.sub", ["127.0.0.2"]) +
         zone("cdn.test.", rname="admin", minimum=30, ttl=20) +
         gslb_name("x", view("198.51.100.0/24", ["192.0.2.10", "192.0.2.11"], [2, 1], scope=24, ttl=30),
                   view("203.0.113.0/24", ["192.0.2.20", "192.0.2.21", "192.0.2.22"], [1, 3, 5], scope=20),
                   view("2001:db8:100::/40", ["2001:db8::30", "2001:db8::31"], [4, 6]),
                   view("127.0.0.0/8", ["192.0.2.40"], [9], scope=8),
                   default=default(["192.0.2.99"], [1]), ttl=20) +
         gslb_name("plain", default=default(["192.0.2.50", "192.0.2.51"]), empty_weight_option=True))

W = 65001  # the default weight option code


class GslbSimTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig", "kdig")
        cls.tmp = tempfile.TemporaryDirectory()
        cls.query_log = os.path.join(cls.tmp.name, "queries.jsonl")
        cls.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES, listen=("127.0.0.1:0", "[::1]:0"),
                                   query_log=cls.query_log, seed=42)
        cls.host, cls.port = cls.sim.host, cls.sim.port

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()
        cls.tmp.cleanup()

    def dig(self, qname, qtype="A", **kw):
        return weirtest.dig(self.host, self.port, qname, qtype, **kw)

    def kdig(self, qname, qtype="A", **kw):
        return weirtest.kdig(self.host, self.port, qname, qtype, **kw)

    def assertStatus(self, r, status):
        self.assertEqual(r.status, status, f"expected {status}; client output:\n{r.text}")

    # ------------------------------------------------------------ answers

    def test_plain_a_is_authoritative(self):
        for r in (self.dig("www.example.com"), self.kdig("www.example.com")):
            self.assertStatus(r, "NOERROR")
            self.assertTrue(r.aa, f"AA flag missing:\n{r.text}")
            self.assertEqual(r.addresses(), ["192.0.2.1"], r.text)
            self.assertEqual(r.answer[0].ttl, 300, r.text)

    def test_opt_echoed_only_when_sent(self):
        r = self.dig("www.example.com")  # dig sends EDNS by default
        self.assertEqual((r.edns, r.udp_size), (True, 1232), "OPT must be echoed with our UDP size:\n" + r.text)
        r = self.kdig("www.example.com")  # kdig does not
        self.assertFalse(r.edns, "no OPT expected without EDNS in the query:\n" + r.text)

    def test_ipv6_listener(self):
        hosts = [h for h, _ in self.sim.listeners]
        self.assertIn("::1", hosts, self.sim.process.lines)
        port = dict(self.sim.listeners)["::1"]
        r = weirtest.kdig("::1", port, "www.example.com", "A")
        self.assertStatus(r, "NOERROR")
        self.assertEqual(r.addresses(), ["192.0.2.1"], r.text)

    def test_ecs_view_and_scope(self):
        r = self.dig("x.cdn.test", ecs="198.51.100.7/24")
        self.assertStatus(r, "NOERROR")
        self.assertEqual(r.addresses(), ["192.0.2.10", "192.0.2.11"], r.text)
        self.assertEqual(r.answer[0].ttl, 30, r.text)
        self.assertIsNotNone(r.ecs, "ECS must be echoed:\n" + r.text)
        self.assertEqual((r.ecs.address, r.ecs.source, r.ecs.scope), ("198.51.100.0", 24, 24), r.text)

        r = self.kdig("x.cdn.test", ecs="203.0.113.9/24")
        self.assertEqual(r.addresses(), ["192.0.2.20", "192.0.2.21", "192.0.2.22"], r.text)
        self.assertEqual((r.ecs.address, r.ecs.source, r.ecs.scope), ("203.0.113.0", 24, 20), r.text)

        r = self.dig("x.cdn.test", "AAAA", ecs="2001:db8:100:5::/56")
        self.assertEqual(r.addresses(), ["2001:db8::30", "2001:db8::31"], r.text)
        self.assertEqual((r.ecs.source, r.ecs.scope), (56, 40), r.text)

        # An ECS address in no view gets the default view; its scope is 0.
        r = self.dig("x.cdn.test", ecs="192.0.2.0/24")
        self.assertEqual(r.addresses(), ["192.0.2.99"], r.text)
        self.assertEqual(r.ecs.scope, 0, r.text)

    def test_no_ecs_uses_source_and_sends_no_ecs(self):
        r = self.dig("x.cdn.test")
        self.assertEqual(r.addresses(), ["192.0.2.40"], "127.0.0.1 must pick the 127.0.0.0/8 view:\n" + r.text)
        self.assertIsNone(r.ecs, "a query without ECS must get no ECS option:\n" + r.text)

    def test_ecs_scope_zero_for_names_without_views(self):
        r = self.dig("www.example.com", ecs="198.51.100.7/24")
        self.assertEqual((r.ecs.address, r.ecs.source, r.ecs.scope), ("198.51.100.0", 24, 0), r.text)

    # ------------------------------------------------------------ weight option

    def test_weight_option_carries_view_weights(self):
        r = self.dig("x.cdn.test", ecs="198.51.100.7/24", options=[W])
        self.assertEqual(r.option(W), bytes([0, 2, 0, 1]), "weights 2,1 expected:\n" + r.text)
        r = self.kdig("x.cdn.test", ecs="203.0.113.1/24", options=[W])
        self.assertEqual(r.weights(W), [1, 3, 5], r.text)
        # A query option of any length asks for weights.
        r = self.dig("x.cdn.test", ecs="198.51.100.7/24", options=[(W, "0102")])
        self.assertEqual(r.weights(W), [2, 1], r.text)

    def test_no_weight_option_without_asking(self):
        r = self.dig("x.cdn.test", ecs="198.51.100.7/24")
        self.assertIsNone(r.option(W), "weights sent although not asked:\n" + r.text)

    def test_unweighted_name_gets_empty_option_when_configured(self):
        r = self.dig("plain.cdn.test", options=[W])
        self.assertStatus(r, "NOERROR")
        self.assertEqual(r.addresses(), ["192.0.2.50", "192.0.2.51"], r.text)
        self.assertEqual(r.option(W), b"", "length-0 weight option expected:\n" + r.text)
        r = self.kdig("plain.cdn.test", options=[W])
        self.assertEqual(r.option(W), b"", r.text)
        # www has no setting and [defaults] says no empty option.
        r = self.dig("www.example.com", options=[W])
        self.assertIsNone(r.option(W), r.text)

    def test_cname_chain_into_gslb_name(self):
        r = self.dig("video.example.com", ecs="198.51.100.7/24", options=[W])
        self.assertStatus(r, "NOERROR")
        self.assertTrue(r.aa, r.text)
        self.assertEqual([(a.name, a.type) for a in r.answer],
                         [("video.example.com.", "CNAME"), ("x.cdn.test.", "A"), ("x.cdn.test.", "A")], r.text)
        self.assertEqual(r.answer[0].data, "x.cdn.test.", r.text)
        # Only the address records count for the weights.
        self.assertEqual(r.weights(W), [2, 1], r.text)
        self.assertEqual(r.ecs.scope, 24, r.text)

    def test_cname_chain_inside_zone_and_leaving_zones(self):
        r = self.kdig("chain1.example.com")
        self.assertEqual([a.type for a in r.answer], ["CNAME", "CNAME", "A"], r.text)
        self.assertEqual(r.addresses(), ["192.0.2.1"], r.text)
        r = self.dig("away.example.com")
        self.assertStatus(r, "NOERROR")
        self.assertEqual([(a.type, a.data) for a in r.answer], [("CNAME", "www.example.org.")], r.text)

    # ------------------------------------------------------------ negative answers

    def test_nxdomain_with_soa(self):
        r = self.dig("nope.example.com")
        self.assertStatus(r, "NXDOMAIN")
        self.assertTrue(r.aa, r.text)
        self.assertEqual(len(r.authority), 1, r.text)
        soa = r.authority[0]
        self.assertEqual((soa.name, soa.type), ("example.com.", "SOA"), r.text)
        self.assertEqual(soa.ttl, 45, "negative TTL must be min(SOA ttl, minimum):\n" + r.text)
        self.assertTrue(soa.data.startswith("ns1.example.com. hostmaster.example.com. 7 "), r.text)

    def test_nodata_with_soa(self):
        for r in (self.dig("www.example.com", "AAAA"), self.kdig("ent.example.com", "A")):
            self.assertStatus(r, "NOERROR")
            self.assertEqual(r.answer, [], r.text)
            self.assertEqual([a.type for a in r.authority], ["SOA"], r.text)
        r = self.dig("x.cdn.test", "AAAA", ecs="198.51.100.1/24")  # view has no IPv6
        self.assertStatus(r, "NOERROR")
        self.assertEqual(r.answer, [], r.text)
        self.assertEqual(r.authority[0].ttl, 20, r.text)

    def test_referral_and_refused(self):
        r = self.dig("host.sub.example.com")
        self.assertStatus(r, "NOERROR")
        self.assertFalse(r.aa, "a referral must have AA clear:\n" + r.text)
        self.assertEqual([(a.name, a.type, a.data) for a in r.authority],
                         [("sub.example.com.", "NS", "ns1.sub.example.com.")], r.text)
        self.assertEqual([(a.name, a.data) for a in r.additional], [("ns1.sub.example.com.", "127.0.0.2")], r.text)
        r = self.dig("www.example.org")
        self.assertStatus(r, "REFUSED")
        self.assertFalse(r.aa, r.text)

    # ------------------------------------------------------------ faults and transports

    def test_servfail_injection(self):
        self.sim.reset()
        r = self.dig("broken.example.com")
        self.assertStatus(r, "SERVFAIL")
        self.assertEqual(self.sim.stats()["faults"].get("servfail"), 1, self.sim.stats())

    def test_loss_injection(self):
        self.sim.reset()
        r = self.dig("lost.example.com", timeout=1, tries=1)
        self.assertIsNone(r.status, "a lost query must get no answer:\n" + r.text)
        stats = self.sim.stats()
        self.assertEqual((stats["queries"], stats["dropped"]), (1, 1), stats)
        # Loss is UDP only: TCP still answers.
        r = self.dig("lost.example.com", "A", tcp=True)
        self.assertStatus(r, "NOERROR")
        self.assertEqual(r.addresses(), ["192.0.2.5"], r.text)

    def test_latency_injection(self):
        start = time.monotonic()
        r = self.dig("slow.example.com", timeout=3)
        elapsed = time.monotonic() - start
        self.assertStatus(r, "NOERROR")
        self.assertGreaterEqual(elapsed, 0.3, f"answered after {elapsed:.3f}s, latency_ms = 300")

    def test_truncate_forces_tcp(self):
        r = self.dig("big.example.com")
        self.assertTrue(r.truncated_retry, "dig must see TC and retry over TCP:\n" + r.text)
        self.assertEqual(r.transport, "TCP", r.text)
        self.assertEqual(r.addresses(), ["192.0.2.4"], r.text)
        r = self.dig("big.example.com", extra=["+ignore"])
        self.assertTrue(r.tc, r.text)
        self.assertEqual(r.answer, [], r.text)

    def test_tcp_several_queries_per_connection(self):
        self.sim.reset()
        r = self.dig("www.example.com", tcp=True)
        self.assertStatus(r, "NOERROR")
        self.assertEqual(r.transport, "TCP", r.text)
        self.assertEqual(r.addresses(), ["192.0.2.1"], r.text)
        r = self.kdig("x.cdn.test", tcp=True, ecs="198.51.100.7/24", options=[W])
        self.assertEqual(r.weights(W), [2, 1], r.text)
        # dig +keepopen sends both queries on one connection.
        out = weirtest.run(["dig", f"@{self.host}", "-p", str(self.port), "+tcp", "+keepopen", "+norec",
                            "www.example.com", "A", "chain1.example.com", "A"])
        self.assertEqual(out.stdout.count("status: NOERROR"), 2, out.stdout)
        tcp = [e for e in self.sim.log(10) if e["transport"] == "tcp"]
        self.assertEqual(len(tcp), 4, tcp)
        self.assertEqual(tcp[2]["source"], tcp[3]["source"], "the two +keepopen queries share a connection")
        self.assertEqual(self.sim.stats()["tcp"], 4)

    def test_badvers_and_formerr(self):
        r = self.dig("www.example.com", edns=1, extra=["+noednsnegotiation"])
        self.assertStatus(r, "BADVERS")
        # An ECS option with bits set past its source prefix (RFC 7871 6): FORMERR.
        query = bytes.fromhex(
            "abcd0000000100000000000103777777076578616d706c6503636f6d0000010001"
            "0000291000000000000000"  # OPT header with rdlength 0, patched below
        )
        ecs = bytes.fromhex("0008" "0007" "0001" "1400" "c63364")  # 198.51.100.0/20: bits set past /20
        query = query[:-2] + len(ecs).to_bytes(2, "big") + ecs
        reply = weirtest.udp_exchange(self.host, self.port, query)
        self.assertIsNotNone(reply, "malformed query got no answer")
        self.assertEqual(reply[:2], b"\xab\xcd")
        self.assertEqual(reply[3] & 0x0F, 1, f"FORMERR expected, got rcode {reply[3] & 0x0F}")

    # ------------------------------------------------------------ observability

    def test_stats_count_what_was_sent(self):
        self.sim.reset()
        self.dig("x.cdn.test", ecs="198.51.100.7/24", options=[W])
        self.kdig("x.cdn.test", ecs="198.51.100.200/24", options=[W])
        self.dig("x.cdn.test", ecs="203.0.113.1/24")
        self.dig("www.example.com", "AAAA", extra=["+noedns"])
        s = self.sim.stats()
        self.assertEqual(s["queries"], 4, s)
        self.assertEqual(s["udp"], 4, s)
        self.assertEqual(s["with_ecs"], 3, s)
        self.assertEqual(s["with_weight_option"], 2, s)
        self.assertEqual(s["with_edns"], 3, s)
        self.assertEqual(s["by_qname_qtype"], {"x.cdn.test.": {"A": 3}, "www.example.com.": {"AAAA": 1}}, s)
        self.assertEqual(s["by_qname_ecs"]["x.cdn.test."], {"198.51.100.0/24": 2, "203.0.113.0/24": 1}, s)
        log = self.sim.log(10)
        self.assertEqual(len(log), 4, log)
        self.assertEqual(log[0]["ecs"], {"family": 1, "address": "198.51.100.0", "source": 24}, log[0])
        self.assertEqual((log[0]["weight_option"], log[0]["weight_option_len"]), (True, 0), log[0])
        self.assertEqual(log[0]["view"], "198.51.100.0/24", log[0])
        self.assertEqual((log[2]["weight_option"], log[2]["weight_option_len"]), (False, None), log[2])
        self.assertEqual((log[3]["edns"], log[3]["ecs"], log[3]["rcode"]), (False, None, "NOERROR"), log[3])
        # The same records reach --query-log.
        with open(self.query_log) as f:
            lines = f.read().splitlines()
        self.assertTrue(any('"qname":"www.example.com.","qtype":"AAAA"' in l for l in lines), lines[-5:])

    def test_set_weights_at_run_time(self):
        self.sim.set_weights("x.cdn.test", "198.51.100.0/24", [7, 3])
        try:
            r = self.dig("x.cdn.test", ecs="198.51.100.7/24", options=[W])
            self.assertEqual(r.weights(W), [7, 3], r.text)
        finally:
            self.sim.set_weights("x.cdn.test", "198.51.100.0/24", [2, 1])
        with self.assertRaises(RuntimeError):
            self.sim.set_weights("x.cdn.test", "198.51.100.0/24", [1, 2, 3])

    def test_reload(self):
        self.sim.reload()
        r = self.dig("www.example.com")
        self.assertEqual(r.addresses(), ["192.0.2.1"], r.text)


class WeightOptionCodeTest(unittest.TestCase):
    def test_custom_code(self):
        with weirtest.GslbSim(BUILD_DIR, config_text=ZONES, weight_option_code=65123, control=None) as sim:
            r = weirtest.dig(sim.host, sim.port, "x.cdn.test", "A", ecs="198.51.100.7/24", options=[65123, W])
            self.assertEqual(r.weights(65123), [2, 1], r.text)
            self.assertIsNone(r.option(W), "the default code is an unknown option now:\n" + r.text)

SYNTH_ZONES = (zone("synth.test.", minimum=45, ttl=None) +
               record("old", "DNAME", "new", ttl=120) + record("www.new", "A", "192.0.2.1") +
               record("away", "DNAME", "elsewhere.example.") +
               record("*.w", "A", "192.0.2.50", ttl=70) + record("*.w", "TXT", "wild") +
               record("e.w", "A", "192.0.2.51") + record("x.y.w", "A", "192.0.2.52") +
               record("*.cw", "CNAME", "www.new") +
               record("www.new", "RRSIG", "A 13 4 300 20300101000000 1577836800 4242 synth.test. c2lnbmF0dXJl",
                      ttl=200) +
               record("@", "RRSIG", "SOA 13 2 3600 20300101000000 20200101000000 4242 synth.test. c29h", ttl=200) +
               zone("lame.test.", minimum=None, ttl=None, lame="refused") + record("www", "A", "192.0.2.7") +
               zone("copy.test.", minimum=None, ttl=None, lame="no-aa") + record("www", "A", "192.0.2.8"))


class SynthesisAndLameTest(unittest.TestCase):
    """DNAME (RFC 6672), wildcards (RFC 4592) and lame zones."""

    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig")
        cls.sim = weirtest.GslbSim(BUILD_DIR, config_text=SYNTH_ZONES, control=None)

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()

    def dig(self, qname, qtype="A"):
        return weirtest.dig(self.sim.host, self.sim.port, qname, qtype)

    def rrs(self, r):
        return [(x.name, x.type, x.ttl, x.data) for x in r.answer]

    def test_dname_synthesizes_a_cname_and_follows_it(self):
        r = self.dig("www.old.synth.test")
        self.assertEqual(r.status, "NOERROR", r.text)
        self.assertTrue(r.aa, r.text)
        self.assertEqual(self.rrs(r), [("old.synth.test.", "DNAME", 120, "new.synth.test."),
                                       ("www.old.synth.test.", "CNAME", 120, "www.new.synth.test."),
                                       ("www.new.synth.test.", "A", 300, "192.0.2.1")], r.text)

    def test_dname_to_a_missing_name_is_nxdomain_with_soa(self):
        r = self.dig("nothere.old.synth.test")
        self.assertEqual(r.status, "NXDOMAIN", r.text)
        self.assertEqual([x.type for x in r.answer], ["DNAME", "CNAME"], r.text)
        self.assertEqual([(x.name, x.type, x.ttl) for x in r.authority], [("synth.test.", "SOA", 45)], r.text)

    def test_dname_out_of_our_zones_ends_with_the_cname(self):
        r = self.dig("a.b.away.synth.test")
        self.assertEqual(r.status, "NOERROR", r.text)
        self.assertEqual(self.rrs(r)[1], ("a.b.away.synth.test.", "CNAME", 300, "a.b.elsewhere.example."), r.text)
        self.assertEqual(len(r.answer), 2, r.text)

    def test_dname_owner_itself_is_not_rewritten(self):
        r = self.dig("old.synth.test", "DNAME")
        self.assertEqual(self.rrs(r), [("old.synth.test.", "DNAME", 120, "new.synth.test.")], r.text)
        r = self.dig("old.synth.test", "A")
        self.assertEqual((r.status, r.answer), ("NOERROR", []), r.text)
        self.assertEqual([x.type for x in r.authority], ["SOA"], r.text)

    def test_dname_too_long_is_yxdomain(self):
        # 237 bytes of labels: 254 bytes with away.synth.test., 256 with elsewhere.example.
        qname = ".".join(["a" * 60] * 3 + ["b" * 53]) + ".away.synth.test"
        r = self.dig(qname)
        self.assertEqual(r.status, "YXDOMAIN", r.text)

    def test_wildcard_answers_with_the_query_name(self):
        r = self.dig("anything.w.synth.test")
        self.assertEqual(self.rrs(r), [("anything.w.synth.test.", "A", 70, "192.0.2.50")], r.text)
        r = self.dig("a.b.w.synth.test", "TXT")
        self.assertEqual(self.rrs(r), [("a.b.w.synth.test.", "TXT", 300, '"wild"')], r.text)

    def test_wildcard_nodata(self):
        r = self.dig("anything.w.synth.test", "AAAA")
        self.assertEqual((r.status, r.answer), ("NOERROR", []), r.text)
        self.assertEqual([x.type for x in r.authority], ["SOA"], r.text)

    def test_existing_names_and_empty_non_terminals_block_the_wildcard(self):
        self.assertEqual(self.dig("e.w.synth.test").addresses(), ["192.0.2.51"])
        r = self.dig("e.w.synth.test", "TXT")  # exists: NODATA, not the wildcard's TXT
        self.assertEqual((r.status, r.answer), ("NOERROR", []), r.text)
        r = self.dig("y.w.synth.test")  # empty non-terminal
        self.assertEqual((r.status, r.answer), ("NOERROR", []), r.text)
        r = self.dig("q.y.w.synth.test")  # closest encloser y.w has no wildcard
        self.assertEqual(r.status, "NXDOMAIN", r.text)

    def test_wildcard_cname_is_followed(self):
        r = self.dig("z.cw.synth.test")
        self.assertEqual(self.rrs(r), [("z.cw.synth.test.", "CNAME", 300, "www.new.synth.test."),
                                       ("www.new.synth.test.", "A", 300, "192.0.2.1")], r.text)

    def test_rrsigs_only_with_do(self):
        r = weirtest.dig(self.sim.host, self.sim.port, "www.new.synth.test", "A")
        self.assertEqual([x.type for x in r.answer], ["A"], r.text)
        r = weirtest.dig(self.sim.host, self.sim.port, "www.new.synth.test", "A", extra=["+dnssec"])
        self.assertEqual(self.rrs(r), [
            ("www.new.synth.test.", "A", 300, "192.0.2.1"),
            ("www.new.synth.test.", "RRSIG", 200,
             "A 13 4 300 20300101000000 20200101000000 4242 synth.test. c2lnbmF0dXJl")], r.text)
        r = weirtest.dig(self.sim.host, self.sim.port, "www.new.synth.test", "AAAA", extra=["+dnssec"])
        self.assertEqual([(x.type, x.name) for x in r.authority], [("SOA", "synth.test."), ("RRSIG", "synth.test.")],
                         r.text)
        r = self.dig("www.new.synth.test", "RRSIG")  # asked for: sent without DO
        self.assertEqual([x.type for x in r.answer], ["RRSIG"], r.text)

    def test_lame_refused_zone(self):
        r = self.dig("www.lame.test")
        self.assertEqual((r.status, r.aa, r.answer), ("REFUSED", False, []), r.text)

    def test_lame_no_aa_zone_answers_without_aa(self):
        r = self.dig("www.copy.test")
        self.assertEqual((r.status, r.aa, r.addresses()), ("NOERROR", False, ["192.0.2.8"]), r.text)
        r = self.dig("nothere.copy.test")
        self.assertEqual((r.status, r.aa), ("NXDOMAIN", False), r.text)


class BadConfigTest(unittest.TestCase):
    def run_sim(self, text):
        path = weirtest.write_temp(text)
        try:
            out = weirtest.run([weirtest.binary(BUILD_DIR, weirtest.GslbSim.RELPATH), "--config", path,
                                "--listen", "127.0.0.1:0"], timeout=10)
        finally:
            os.unlink(path)
        return path, out

    def test_semantic_error_names_the_line(self):
        text = ZONES.replace('data = "192.0.2.1"', 'data = "192.0.2.300"')
        line = text.splitlines().index('data = "192.0.2.300"') + 1
        path, out = self.run_sim(text)
        self.assertEqual(out.returncode, 2, out.stderr)
        # FILE:LINE:COLUMN of the value, as the daemons' configs report errors.
        column = text.splitlines()[line - 1].index('"192.0.2.300"') + 1
        self.assertIn(f"{path}:{line}:{column}: invalid IP address '192.0.2.300'", out.stderr)

    def test_syntax_error_names_the_line(self):
        text = ZONES.replace("ttl = 300\n", "ttl = = 300\n", 1)
        line = text.splitlines().index("ttl = = 300") + 1
        path, out = self.run_sim(text)
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn(f"{path}:{line}:", out.stderr)

    def test_unknown_key_and_bad_weights(self):
        path, out = self.run_sim(ZONES.replace("weights = [2, 1]", "weights = [2, 1, 3]"))
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn("'weights' has 3 entries for 2 addresses", out.stderr)
        path, out = self.run_sim(ZONES.replace('name = "plain"', 'name = "plain"\nadresses = []'))
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn("unknown key 'adresses'", out.stderr)

    def test_dname_wildcard_and_lame_rules(self):
        bad = {
            'lame = "sometimes"': "'lame' must be \"refused\" or \"no-aa\", got 'sometimes'",
            '[[zone.record]]\nname = "old"\ntype = "CNAME"\ndata = "www.new"\n': "CNAME and",
            '[[zone.record]]\nname = "x.old"\ntype = "A"\ndata = "192.0.2.9"\n':
                "'x.old.synth.test.' is below the DNAME at 'old.synth.test.'",
            '[[zone.delegation]]\nname = "sub.old"\nns = ["ns.sub.old"]\n':
                "delegation 'sub.old.synth.test.' is at or below the DNAME at 'old.synth.test.'",
            '[[zone.delegation]]\nname = "*.d"\nns = ["ns.example."]\n': "cannot be a wildcard name",
            '[[zone.record]]\nname = "old"\ntype = "DNAME"\nttl = 120\ndata = "other"\n': "only one DNAME",
            '[[zone.record]]\nname = "s"\ntype = "RRSIG"\ndata = "A 13 3 300 1 2 3 synth.test. !!"\n':
                "invalid base64 in RRSIG signature",
            '[[zone.record]]\nname = "s"\ntype = "RRSIG"\ndata = "A 13 3 300"\n': "RRSIG data must be",
        }
        head, rest = SYNTH_ZONES.split("[[zone.record]]", 1)
        for snippet, want in bad.items():
            with self.subTest(snippet=snippet):
                if snippet.startswith("lame"):
                    text = SYNTH_ZONES.replace('origin = "synth.test."', 'origin = "synth.test."\n' + snippet)
                else:
                    text = head + snippet + "\n[[zone.record]]" + rest
                path, out = self.run_sim(text)
                self.assertEqual(out.returncode, 2, out.stderr)
                self.assertIn(want, out.stderr)

    def test_example_config_loads(self):
        example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "gslb-sim",
                               "zones.toml")
        with weirtest.GslbSim(BUILD_DIR, config_path=example) as sim:
            r = weirtest.dig(sim.host, sim.port, "video.example.com", "A", ecs="198.51.100.7/24", options=[W])
            self.assertEqual(r.addresses(), ["192.0.2.10", "192.0.2.11"], r.text)
            self.assertEqual(r.weights(W), [2, 1], r.text)


class GslbSimStatsBoundTest(unittest.TestCase):
    """`stats` keeps per-name counters for a bounded number of names (and
    ECS subnets per name): a flood of distinct names costs gslb-sim nothing
    that grows."""

    @staticmethod
    def ask(sim, queries):
        import socket
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(2)
            for q in queries:
                s.sendto(q.to_wire(), (sim.host, sim.port))
                s.recv(4096)

    @staticmethod
    def with_subnets(n):
        import dns.edns
        import dns.message
        return [dns.message.make_query("www.example.com", "A", use_edns=0,
                                       options=[dns.edns.ECSOption(f"198.51.{i // 256}.{i % 256}", 32)])
                for i in range(n)]

    def test_names_past_the_cap_are_counted_together(self):
        import dns.message
        sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES, extra_args=["--stats-names", "100"])
        self.addCleanup(sim.stop)
        self.ask(sim, [dns.message.make_query(f"n{i}.example.com", "A") for i in range(500)])
        self.ask(sim, self.with_subnets(300))
        st = sim.stats()
        self.assertEqual(st["queries"], 800)
        names = st["by_qname_qtype"]
        self.assertEqual(len(names), 101, "100 names and the rest together")
        self.assertEqual(st["other_names"], 400 + 300, "n100 ... n499, and www after them")
        self.assertEqual(names["(other names)"], {"A": 700})
        self.assertNotIn("www.example.com.", names)

    def test_subnets_per_name_are_bounded(self):
        sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        self.addCleanup(sim.stop)
        self.ask(sim, self.with_subnets(300))
        subnets = sim.stats()["by_qname_ecs"]["www.example.com."]
        self.assertEqual(len(subnets), 257, "256 subnets and the rest together")
        self.assertEqual(subnets["(other subnets)"], 300 - 256)


SEGMENTS = """
[segments]
seed = 5
cities = 2
segments_per_city = 8
prefix = "10.0.0.0/16"
segment_lengths = [22, 24]
nodes_per_city = 16
addresses_per_answer = 2
node_prefix = "198.18.0.0/24"
suffix = "seg.cdn.test."
name_groups = 4
city_level_fraction = 0
segments_per_answer = [1, 1]
change_every_s = 3600
change_fraction = 1.0
"""
SEG_ZONES = zone("cdn.test.", rname="admin") + SEGMENTS


class SegmentModelTest(unittest.TestCase):
    """[segments]: every subscriber segment answered on its own, the ECS scope
    its prefix length, the answers moved by `segments-epoch`, and the ground
    truth and city map exports."""

    NAME = "www.seg.cdn.test"

    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig", "kdig")
        cls.sim = weirtest.GslbSim(BUILD_DIR, config_text=SEG_ZONES)

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()

    def setUp(self):
        self.assertEqual(self.sim.control("segments-epoch 0").strip(), "ok")

    def truth(self, epoch=None):
        return json.loads(self.sim.control(f"segments-truth {self.NAME}" + ("" if epoch is None else f" {epoch}")))

    def ask(self, address, client=weirtest.dig):
        return client(self.sim.host, self.sim.port, self.NAME, "A", ecs=f"{address}/24", options=[W])

    @staticmethod
    def last_slash24(cidr):
        net = ipaddress.ip_network(cidr)
        return str(net.broadcast_address - 255)

    def test_three_segments_of_one_city_get_three_answers_with_their_scopes(self):
        segments = [s for s in self.truth()["segments"] if s["city"] == "city-0"]
        self.assertEqual(len(segments), 8, segments)
        picked, seen = [], set()
        for s in segments:
            if tuple(s["addresses"]) not in seen:
                seen.add(tuple(s["addresses"]))
                picked.append(s)
        self.assertGreaterEqual(len(picked), 3, f"city-0 should have 3 distinct answers: {segments}")
        answers = []
        for s, client in zip(picked[:3], (weirtest.dig, weirtest.kdig, weirtest.dig)):
            r = self.ask(self.last_slash24(s["cidr"]), client)
            self.assertEqual(r.status, "NOERROR", r.text)
            self.assertEqual(r.addresses(), s["addresses"], r.text)
            self.assertEqual(r.weights(W), s["weights"], r.text)
            self.assertEqual(r.ecs.scope, int(s["cidr"].split("/")[1]), f"scope of {s['cidr']}:\n{r.text}")
            self.assertEqual(r.answer[0].ttl, 60, r.text)
            answers.append(tuple(r.addresses()))
        self.assertEqual(len(set(answers)), 3, answers)
        # Past the last segment: scope 0 and the default answer (city 0's first nodes).
        r = self.ask("10.0.255.0")
        self.assertEqual((r.addresses(), r.ecs.scope), (["198.18.0.1", "198.18.0.2"], 0), r.text)
        self.assertEqual(self.sim.log(1)[0]["view"], "segment default")

    def test_epoch_command_moves_the_answer(self):
        first = self.truth()["segments"][0]
        address = self.last_slash24(first["cidr"])
        before = self.ask(address).addresses()
        self.assertEqual(before, first["addresses"])
        self.assertEqual(self.sim.control("segments-epoch 1").strip(), "ok")
        self.assertEqual(self.sim.control("segments-epoch").strip(), "1")
        after = self.ask(address)
        self.assertNotEqual(after.addresses(), before, "change_fraction = 1 moves every answer:\n" + after.text)
        self.assertEqual(after.addresses(), self.truth(1)["segments"][0]["addresses"], after.text)
        self.assertEqual(self.truth()["epoch"], 1)
        self.assertEqual(self.sim.control("segments-epoch 0").strip(), "ok")
        self.assertEqual(self.ask(address).addresses(), before)
        self.assertTrue(self.sim.control("segments-epoch x").startswith("error: "))

    def test_exports_from_the_command_line(self):
        path = weirtest.write_temp(SEG_ZONES)
        self.addCleanup(os.unlink, path)
        sim = weirtest.binary(BUILD_DIR, weirtest.GslbSim.RELPATH)
        out = weirtest.run([sim, "--config", path, "--segments-citymap"])
        self.assertEqual(out.returncode, 0, out.stderr)
        rows = [l.split(",") for l in out.stdout.splitlines() if not l.startswith("#")]
        self.assertEqual(len(rows), 16, out.stdout)
        self.assertEqual((rows[0][0].split("/")[0], rows[0][1], rows[0][2]), ("10.0.0.0", "city-0", "10.0.0.0/24"))
        self.assertEqual([r[1] for r in rows], ["city-0"] * 8 + ["city-1"] * 8)
        out = weirtest.run([sim, "--config", path, "--segments-truth", self.NAME, "--segments-epoch", "1"])
        self.assertEqual(out.returncode, 0, out.stderr)
        doc = json.loads(out.stdout)
        self.assertEqual((doc["name"], doc["epoch"], len(doc["subnets"])), (self.NAME + ".", 1, 256))
        self.assertEqual(doc, self.truth(1))
        out = weirtest.run([sim, "--config", path, "--segments-truth", "www.example.com"])
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn("is not below the segments suffix seg.cdn.test.", out.stderr)

    def test_example_config_serves(self):
        example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "gslb-sim",
                               "segments.toml")
        with weirtest.GslbSim(BUILD_DIR, config_path=example) as sim:
            truth = json.loads(sim.control("segments-truth www.seg.example"))
            self.assertEqual((len(truth["segments"]), len(truth["subnets"])), (9000, 65536))
            subnet = truth["subnets"][40000]
            r = weirtest.kdig(sim.host, sim.port, "www.seg.example", "A", ecs=subnet["subnet"], options=[W])
            self.assertEqual(r.addresses(), subnet["addresses"], r.text)
            self.assertEqual(r.weights(W), subnet["weights"], r.text)
            self.assertEqual(r.ecs.scope, subnet["scope"], r.text)

    def test_bad_segments_config_names_the_line(self):
        text = SEG_ZONES.replace("cities = 2", "cities = 0")
        path = weirtest.write_temp(text)
        self.addCleanup(os.unlink, path)
        out = weirtest.run([weirtest.binary(BUILD_DIR, weirtest.GslbSim.RELPATH), "--config", path,
                            "--listen", "127.0.0.1:0"], timeout=10)
        self.assertEqual(out.returncode, 2, out.stderr)
        line = text.splitlines().index("cities = 0") + 1
        self.assertIn(f"{path}:{line}:10: 'cities' must be between 1 and 65535, not 0", out.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
