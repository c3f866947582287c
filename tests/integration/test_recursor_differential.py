"""Differential test: weir-recursor against Debian's unbound daemon
(subnetcache module, send-client-subnet) over the same fake hierarchy and
the same client subnets. Addresses, TTL bounds and ECS scope must agree.

Run: python3 tests/integration/test_recursor_differential.py --build-dir build
"""

import os
import shutil
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import default, gslb_name, record, view  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
NET = "127.0.104"

SHOP = record("www", "A", "192.0.2.1", ttl=300) + record("video", "CNAME", "x.cdn-gslb.example.", ttl=600)

CDN = gslb_name(
    "x", view("198.51.100.0/24", ["192.0.2.10", "192.0.2.11", "2001:db8::10"], [2, 1, 1], scope=24),
    view("203.0.113.0/24", ["192.0.2.20", "192.0.2.21"], [1, 3], scope=20, ttl=120),
    view("2001:db8:100::/48", ["192.0.2.30", "2001:db8::30"], [4, 4], scope=48),
    view("198.51.100.128/25", ["192.0.2.40"], [1], scope=28),
    # Not scope 0: unbound keeps scope-0 answers in its global message cache
    # and prefers them over longer scopes it also holds (weir takes the longest
    # match, RFC 7871 7.3.1), which would make the two differ by design.
    default=default(["192.0.2.99"], [1], scope=24), ttl=60, weights=True)

CASES = [
    ("video.shop.example", "A", "198.51.100.7/24"),
    ("video.shop.example", "A", "203.0.113.50/24"),
    ("video.shop.example", "A", "192.0.2.1/24"),
    ("video.shop.example", "A", "198.51.100.200/24"),
    ("x.cdn-gslb.example", "A", "198.51.100.7/24"),
    ("x.cdn-gslb.example", "AAAA", "2001:db8:100:5::/56"),
    ("x.cdn-gslb.example", "A", "2001:db8:100:5::/56"),
    ("x.cdn-gslb.example", "AAAA", "198.51.100.7/24"),
    ("www.shop.example", "A", None),
]


class DifferentialTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig", "unbound")
        # Each cleanup is registered as soon as its process runs: a start
        # that fails later still stops what started before it.
        cls.h = weirtest.FakeHierarchy(BUILD_DIR, net=NET, zones={"shop.example.": SHOP, "cdn-gslb.example.": CDN})
        cls.addClassCleanup(cls.h.stop)
        cls.tags = weirtest.write_temp("video.shop.example weight=on ecs=on\ncdn-gslb.example weight=on ecs=on\n",
                                       suffix=".txt")
        cls.addClassCleanup(os.unlink, cls.tags)
        cls.weir = weirtest.Recursor(BUILD_DIR, weirtest.recursor_config(root_hints=cls.h.root_hints, tags=cls.tags,
                                                                          resolver={"do_ip6": False}))
        cls.addClassCleanup(cls.weir.stop)
        cls.dir = tempfile.mkdtemp(prefix="weir-unbound-")
        cls.addClassCleanup(shutil.rmtree, cls.dir, ignore_errors=True)
        cls.unbound = weirtest.Unbound(cls.dir, cls.h.root_hints, NET)
        cls.addClassCleanup(cls.unbound.stop)
        cls.ub_port = cls.unbound.port

    def compare(self, qname, qtype, ecs):
        w = weirtest.dig(self.weir.host, self.weir.port, qname, qtype, ecs=ecs, norec=False)
        u = weirtest.dig("127.0.0.1", self.ub_port, qname, qtype, ecs=ecs, norec=False)
        self.assertEqual(w.status, u.status, (w.text, u.text))
        self.assertEqual([(x.name, x.type) for x in w.answer], [(x.name, x.type) for x in u.answer],
                         (w.text, u.text))
        # unbound rotates RRsets (rrset-roundrobin); weir keeps the GSLB's order.
        key = lambda x: (x.name, x.type, x.data)  # noqa: E731
        self.assertEqual(sorted(map(key, w.answer)), sorted(map(key, u.answer)), (w.text, u.text))
        for rw, ru in zip(sorted(w.answer, key=key), sorted(u.answer, key=key)):
            # Both start from the authoritative TTL; a second or two may separate the queries.
            self.assertLessEqual(abs(rw.ttl - ru.ttl), 3, (rw, ru))
        if ecs is None:
            self.assertIsNone(w.ecs)
        else:
            self.assertIsNotNone(w.ecs, w.text)
            self.assertIsNotNone(u.ecs, u.text)
            self.assertEqual((w.ecs.address, w.ecs.source, w.ecs.scope), (u.ecs.address, u.ecs.source, u.ecs.scope))
        return w, u

    def test_same_answers_as_unbound_subnetcache(self):
        for qname, qtype, ecs in CASES:
            with self.subTest(qname=qname, qtype=qtype, ecs=ecs):
                self.compare(qname, qtype, ecs)
        # Again from both caches: still equal (cache hits keep the scope and age TTLs alike).
        time.sleep(1.1)
        for qname, qtype, ecs in CASES:
            with self.subTest(cached=True, qname=qname, qtype=qtype, ecs=ecs):
                self.compare(qname, qtype, ecs)

    def test_scope_cache_hits_agree(self):
        # 203.0.113.0/24 gets scope /20: a /24 elsewhere in that /20 is a cache hit for both.
        self.compare("x.cdn-gslb.example", "A", "203.0.113.9/24")
        gslb = self.h.sim("cdn-gslb.example.")
        before = gslb.stats()["queries"]
        w, u = self.compare("x.cdn-gslb.example", "A", "203.0.112.9/24")
        self.assertEqual(w.addresses(), ["192.0.2.20", "192.0.2.21"])
        self.assertEqual(gslb.stats()["queries"], before, "neither resolver asked again inside the scope")


if __name__ == "__main__":
    unittest.main()
