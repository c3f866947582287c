"""Black-box tests of weir-recursor over a fake DNS hierarchy on loopback.

gslb-sim instances on port 53 of 127.0.101.x play the root, the "example."
TLD, a customer zone (shop.example.) and the CDN's GSLB zone
(cdn-gslb.example.); libunbound's root hints point at 127.0.101.1. Real
clients (dig, kdig) play the front.

Run: python3 tests/integration/test_recursor.py --build-dir build
"""

import os
import signal
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import default, gslb_name, record, view  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
NET = "127.0.101"

SHOP = (record("www", "A", "192.0.2.1", ttl=300) + record("www", "AAAA", "2001:db8::1", ttl=300) +
        record("video", "CNAME", "x.cdn-gslb.example.", ttl=600) +
        record("big", "CNAME", "tcp.cdn-gslb.example.", ttl=600) +
        record("short", "CNAME", "s.cdn-gslb.example.", ttl=20))

CDN = (gslb_name("x", view("198.51.100.0/24", ["192.0.2.10", "192.0.2.11", "192.0.2.12"], [5, 3, 1], scope=24),
                 view("203.0.113.0/24", ["192.0.2.20", "192.0.2.21"], [2, 1], scope=16, ttl=120),
                 view("2001:db8:100::/48", ["2001:db8::30", "192.0.2.30"], [4, 7], scope=48),
                 default=default(["192.0.2.99"], [1]), ttl=60, weights=True) +
       gslb_name("tcp", default=default(["192.0.2.77"], [3]), truncate=True, weights=True) +
       gslb_name("plain", default=default(["192.0.2.50", "192.0.2.51"], ttl=60), weights=False,
                 empty_weight_option=True) +
       gslb_name("fwd", view("198.51.100.0/24", ["192.0.2.60"], [9]), weights=True) +
       gslb_name("s", default=default(["192.0.2.40", "192.0.2.41"], [2, 1]), ttl=10, weights=True))

TAGS = """\
video.shop.example weight=on ecs=on
big.shop.example weight=on ecs=on
short.shop.example weight=on ecs=on
cdn-gslb.example weight=on ecs=on
fwd.cdn-gslb.example weight=on ecs=on policy=forward:{gslb}@53
"""


class RecursorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig", "kdig")
        cls.h = weirtest.FakeHierarchy(BUILD_DIR, net=NET, zones={"shop.example.": SHOP, "cdn-gslb.example.": CDN})
        cls.gslb = cls.h.sim("cdn-gslb.example.")
        cls.shop = cls.h.sim("shop.example.")
        cls.tags = weirtest.write_temp(TAGS.format(gslb=cls.h.address["cdn-gslb.example."]), suffix=".txt")
        cfg = weirtest.recursor_config(root_hints=cls.h.root_hints, tags=cls.tags,
                                       allow=["127.0.0.0/8", "::1/128"], listen=["127.0.0.1:0"],
                                       cache={"prefetch_percent": 10, "stale_window": 3600})
        cls.r = weirtest.Recursor(BUILD_DIR, cfg, test_clock=True)

    @classmethod
    def tearDownClass(cls):
        cls.r.stop()
        cls.h.stop()
        os.unlink(cls.tags)

    def setUp(self):
        self.r.flush()
        self.h.reset()

    def gslb_queries(self, qname="x.cdn-gslb.example."):
        return [e for e in self.gslb.log(1000) if e["qname"] == qname and e["qtype"] in ("A", "AAAA")]

    # ------------------------------------------------------------ ordinary names

    def test_ordinary_name_full_recursion_and_cache(self):
        r = self.r.dig("www.shop.example", "A")
        self.assertEqual(r.status, "NOERROR", r.text)
        self.assertEqual(r.addresses(), ["192.0.2.1"])
        self.assertIn("ra", r.flags)
        self.assertIsNone(r.option(65001))
        r6 = weirtest.kdig(self.r.host, self.r.port, "www.shop.example", "AAAA", norec=False)
        self.assertEqual(r6.addresses(), ["2001:db8::1"], r6.text)
        before = self.shop.stats()["queries"]
        again = self.r.dig("www.shop.example", "A")
        self.assertEqual(again.addresses(), ["192.0.2.1"])
        self.assertEqual(self.shop.stats()["queries"], before, "second query must be answered from the cache")
        self.assertGreaterEqual(self.r.stats()["ordinary_hits"], 1)
        # No ECS and no weight option ever reached an authoritative for an untagged name.
        for e in self.shop.log(1000):
            if e["qname"] == "www.shop.example.":
                self.assertIsNone(e["ecs"], e)
                self.assertFalse(e["weight_option"], e)

    def test_nxdomain_through_recursion(self):
        r = self.r.dig("nope.shop.example", "A")
        self.assertEqual(r.status, "NXDOMAIN", r.text)
        self.assertEqual([x.type for x in r.authority], ["SOA"])

    # ------------------------------------------------------------ tagged names

    def test_tagged_cname_into_gslb_gets_each_view_with_weights(self):
        cases = [
            ("198.51.100.7/24", ["192.0.2.10", "192.0.2.11", "192.0.2.12"], [5, 3, 1], "198.51.100.0", 24, 24),
            ("203.0.113.9/24", ["192.0.2.20", "192.0.2.21"], [2, 1], "203.0.113.0", 24, 16),
            ("192.0.2.200/24", ["192.0.2.99"], [1], "192.0.2.0", 24, 0),
        ]
        for ecs, addrs, weights, echo, source, scope in cases:
            with self.subTest(ecs=ecs):
                r = self.r.dig("video.shop.example", "A", ecs=ecs, options=[65001])
                self.assertEqual(r.status, "NOERROR", r.text)
                self.assertEqual([(x.name, x.type) for x in r.answer][0], ("video.shop.example.", "CNAME"))
                self.assertEqual(r.answer[0].data, "x.cdn-gslb.example.")
                self.assertEqual(r.addresses(), addrs)
                self.assertEqual(r.weights(65001), weights)
                self.assertEqual((r.ecs.address, r.ecs.source, r.ecs.scope), (echo, source, scope))
                self.assertLessEqual(r.answer[-1].ttl, 120)
        # Each view was asked once, with the city's ECS and the empty weight option.
        sent = self.gslb_queries()
        self.assertEqual(sorted(e["ecs"]["address"] for e in sent), ["192.0.2.0", "198.51.100.0", "203.0.113.0"])
        for e in sent:
            self.assertEqual(e["ecs"]["source"], 24)
            self.assertTrue(e["weight_option"])
            self.assertEqual(e["weight_option_len"], 0)

    def test_ipv6_ecs_and_aaaa(self):
        r = self.r.dig("video.shop.example", "AAAA", ecs="2001:db8:100:7::1/56", options=[65001])
        self.assertEqual(r.status, "NOERROR", r.text)
        self.assertEqual(r.addresses(), ["2001:db8::30"])
        self.assertEqual(r.weights(65001), [4])
        self.assertEqual((r.ecs.source, r.ecs.scope), (56, 48))
        sent = self.gslb_queries()
        self.assertEqual(sent[-1]["ecs"], {"family": 2, "address": "2001:db8:100::", "source": 56})

    def test_second_query_inside_scope_is_a_cache_hit(self):
        first = self.r.dig("video.shop.example", "A", ecs="203.0.113.9/24", options=[65001])
        self.assertEqual(first.ecs.scope, 16)
        upstream = self.gslb.stats()["by_qname_qtype"]["x.cdn-gslb.example."]["A"]
        # Another city /24 inside the same /16 scope, from another front address.
        second = weirtest.dig(self.r.host, self.r.port, "video.shop.example", "A", ecs="203.0.7.1/24",
                              options=[65001], norec=False, extra=["-b", "127.0.0.2"])
        self.assertEqual(second.addresses(), first.addresses())
        self.assertEqual(second.weights(65001), [2, 1])
        self.assertEqual((second.ecs.address, second.ecs.scope), ("203.0.7.0", 16))
        self.assertEqual(self.gslb.stats()["by_qname_qtype"]["x.cdn-gslb.example."]["A"], upstream,
                         "no second upstream query")
        # A /24 outside the scope is not served from that entry.
        third = self.r.dig("video.shop.example", "A", ecs="203.1.0.1/24", options=[65001])
        self.assertEqual(third.addresses(), ["192.0.2.99"])
        self.assertEqual(self.gslb.stats()["by_qname_qtype"]["x.cdn-gslb.example."]["A"], upstream + 1)

    def test_weight_option_only_when_asked_and_empty_when_unweighted(self):
        r = self.r.dig("video.shop.example", "A", ecs="198.51.100.7/24")
        self.assertEqual(r.addresses(), ["192.0.2.10", "192.0.2.11", "192.0.2.12"])
        self.assertIsNone(r.option(65001))
        p = self.r.dig("plain.cdn-gslb.example", "A", ecs="198.51.100.7/24", options=[65001])
        self.assertEqual(p.addresses(), ["192.0.2.50", "192.0.2.51"])
        self.assertEqual(p.option(65001), b"")

    def test_truncated_last_hop_retries_over_tcp(self):
        r = self.r.dig("big.shop.example", "A", ecs="198.51.100.7/24", options=[65001])
        self.assertEqual(r.status, "NOERROR", r.text)
        self.assertEqual(r.addresses(), ["192.0.2.77"])
        self.assertEqual(r.weights(65001), [3])
        transports = [e["transport"] for e in self.gslb.log(1000) if e["qname"] == "tcp.cdn-gslb.example."]
        self.assertIn("tcp", transports)
        self.assertGreaterEqual(self.r.stats()["upstream_tcp"], 1)

    def test_policy_forward_takes_servers_from_the_tag(self):
        r = self.r.dig("fwd.cdn-gslb.example", "A", ecs="198.51.100.7/24", options=[65001])
        self.assertEqual(r.addresses(), ["192.0.2.60"])
        self.assertEqual(r.weights(65001), [9])

    def test_tcp_front_and_kdig(self):
        r = weirtest.kdig(self.r.host, self.r.port, "video.shop.example", "A", ecs="198.51.100.7/24",
                          options=[65001], tcp=True, norec=False)
        self.assertEqual(r.status, "NOERROR", r.text)
        self.assertEqual(r.transport, "TCP")
        self.assertEqual(r.addresses(), ["192.0.2.10", "192.0.2.11", "192.0.2.12"])
        self.assertEqual(r.weights(65001), [5, 3, 1])

    def test_stale_answer_served_when_the_gslb_fails_and_prefetch_refreshes(self):
        r = self.r.dig("video.shop.example", "A", ecs="198.51.100.7/24", options=[65001])
        self.assertEqual(r.addresses(), ["192.0.2.10", "192.0.2.11", "192.0.2.12"])
        self.assertEqual([rr.ttl for rr in r.answer], [600, 60, 60, 60])
        # A chain whose TTLs are all below the stale TTL (CNAME 20, A 10).
        short = self.r.dig("short.shop.example", "A", ecs="198.51.100.7/24", options=[65001])
        self.assertEqual(sorted(short.addresses()), ["192.0.2.40", "192.0.2.41"], short.text)
        self.assertEqual([rr.ttl for rr in short.answer], [20, 10, 10])
        # Prefetch: a hit in the last 10% of the 60 s TTL refreshes the ECS-scoped entry.
        self.r.advance_clock(55)
        n = len(self.gslb_queries())
        hit = self.r.dig("video.shop.example", "A", ecs="198.51.100.7/24", options=[65001])
        self.assertEqual(hit.addresses(), r.addresses())
        self.assertLessEqual(hit.answer[-1].ttl, 5)
        weirtest.wait_until(lambda: len(self.gslb_queries()) > n, timeout=5)
        self.assertEqual(self.gslb_queries()[-1]["ecs"]["address"], "198.51.100.0")
        self.assertGreaterEqual(self.r.stats()["prefetches"], 1)
        # Stale: the entry expires and the GSLB answers SERVFAIL from now on.
        self.r.advance_clock(600)
        self.gslb.control("reset")
        with open(self.gslb.config_path) as f:
            original = f.read()
        try:
            with open(self.gslb.config_path, "w") as f:
                f.write(original.replace('name = "x"\nttl = 60', 'name = "x"\nservfail = true\nttl = 60')
                        .replace('name = "s"\nttl = 10', 'name = "s"\nservfail = true\nttl = 10'))
            self.gslb.reload()
            stale = self.r.dig("video.shop.example", "A", ecs="198.51.100.7/24", options=[65001], timeout=5)
            self.assertEqual(stale.status, "NOERROR", stale.text)
            self.assertEqual(stale.addresses(), ["192.0.2.10", "192.0.2.11", "192.0.2.12"])
            self.assertEqual(stale.weights(65001), [5, 3, 1])
            # RFC 8767 4: every record of a stale answer carries stale_answer_ttl (30), the
            # CNAME cached for 600 s as much as the A records cached for 60 s.
            self.assertEqual([rr.ttl for rr in stale.answer], [30, 30, 30, 30], stale.text)
            short = self.r.dig("short.shop.example", "A", ecs="198.51.100.7/24", options=[65001], timeout=5)
            self.assertEqual(short.status, "NOERROR", short.text)
            self.assertEqual(sorted(short.addresses()), ["192.0.2.40", "192.0.2.41"], short.text)
            self.assertEqual([rr.ttl for rr in short.answer], [30, 30, 30], short.text)
            self.assertGreaterEqual(self.r.stats()["stale_served"], 1)
            # Another city has no stale entry: SERVFAIL.
            other = self.r.dig("video.shop.example", "A", ecs="203.0.113.9/24", options=[65001], timeout=5)
            self.assertEqual(other.status, "SERVFAIL", other.text)
        finally:
            with open(self.gslb.config_path, "w") as f:
                f.write(original)
            self.gslb.reload()

    def test_libunbound_process_killed_is_replaced_and_the_daemon_keeps_answering(self):
        # libunbound resolves in a child process of weir-recursor; losing it (killed, crashed,
        # a fatal exit inside libunbound) costs the lookups in flight, never the daemon.
        cfg = weirtest.recursor_config(root_hints=self.h.root_hints, tags=self.tags,
                                       allow=["127.0.0.0/8", "::1/128"], listen=["127.0.0.1:0"])
        r = weirtest.Recursor(BUILD_DIR, cfg, test_clock=True)
        self.addCleanup(r.stop)
        first = r.dig("www.shop.example", "A")
        self.assertEqual(first.addresses(), ["192.0.2.1"], first.text)
        children = weirtest.child_pids(r.process.pid)
        self.assertEqual(len(children), 1, "libunbound's resolving process")
        os.kill(children[0], signal.SIGKILL)
        weirtest.wait_until(lambda: r.stats()["ub_restarts"] == 1, timeout=5)
        r.flush()
        again = r.dig("www.shop.example", "AAAA", timeout=5)
        self.assertEqual(again.status, "NOERROR", again.text)
        self.assertEqual(again.addresses(), ["2001:db8::1"], again.text)
        self.assertIsNone(r.process.proc.poll(), "weir-recursor itself is still running")
        self.assertIn("libunbound's resolving process ended: starting a new one", r.process.stderr_text())

    # ------------------------------------------------------------ protection

    def test_acl_refuses_others(self):
        cfg = weirtest.recursor_config(root_hints=self.h.root_hints, allow=["10.0.0.0/8"])
        with weirtest.Recursor(BUILD_DIR, cfg) as r:
            res = r.dig("www.shop.example", "A")
            self.assertEqual(res.status, "REFUSED", res.text)
            self.assertEqual(r.stats()["refused_acl"], 1)

    def test_config_without_root_hints_or_forwarders_is_rejected(self):
        path = weirtest.write_temp('[server]\nlisten = ["127.0.0.1:0"]\n[acl]\nallow = ["127.0.0.0/8"]\n')
        try:
            res = weirtest.run([weirtest.binary(BUILD_DIR, weirtest.Recursor.RELPATH), "-c", path, "--check"])
            self.assertEqual(res.returncode, 2)
            self.assertIn("root_hints", res.stderr)
        finally:
            os.unlink(path)

    def test_malformed_queries_do_not_hurt(self):
        self.assertIsNone(weirtest.udp_exchange(self.r.host, self.r.port, b"\x00\x01", timeout=0.5))
        reply = weirtest.udp_exchange(self.r.host, self.r.port, b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05",
                                      timeout=1)
        self.assertIsNotNone(reply)
        self.assertEqual(reply[3] & 0xF, 1)  # FORMERR
        self.assertTrue(self.r.alive())
        self.assertEqual(self.r.dig("www.shop.example").addresses(), ["192.0.2.1"])


if __name__ == "__main__":
    unittest.main()
