"""Black-box test of the learned tags of docs/behaviour.md#domain-tags: a customer's untagged
name that is a CNAME into a tagged CDN suffix is not shared between cities;
weir learns the tag from the chain and resolves the name again as tagged.

Run: python3 tests/integration/test_fastpath_learned.py --build-dir build
"""

import collections
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import default, gslb_name, record, view, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()

CITY_A = ["192.0.2.11", "192.0.2.12"]
CITY_B = ["192.0.2.21", "192.0.2.22", "192.0.2.23"]

ZONES = (zone("example.com.") +
         # The customer's name, untagged, a CNAME into the CDN's GSLB zone.
         record("video", "CNAME", "x.cdn.example.net.", ttl=600) +
         zone("cdn.example.net.", rname="admin", minimum=30, ttl=60) +
         gslb_name("x", view("198.51.100.0/24", CITY_A, [3, 1], scope=24),
                   view("203.0.113.0/24", CITY_B, [1, 1, 1], scope=24), default=default(["192.0.2.99"], [1]),
                   ttl=300))

CITYMAP = """\
127.1.0.0/16,city-a,198.51.100.0/24
127.2.0.0/16,city-b,203.0.113.0/24
"""
TAGS = "cdn.example.net weight=on ecs=on answer=single level=city\n"


class LearnedTagTest(unittest.TestCase):
    def setUp(self):
        files = weirtest.PartitionFiles(CITYMAP, TAGS)
        self.addCleanup(files.cleanup)
        citymap, tags = files.citymap, files.tags
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES, seed=1)
        self.addCleanup(self.sim.stop)
        up = f"{self.sim.host}:{self.sim.port}"
        self.fp = weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config([up], weighted=[up], workers=1,
                                                                        citymap=citymap, tags=tags))
        self.addCleanup(self.fp.stop)

    def addresses(self, source, n):
        return weirtest.dig_many(self.fp.host, self.fp.port, "video.example.com", n, source=source)

    def test_cname_into_tagged_suffix_is_answered_per_city(self):
        a = self.addresses("127.1.0.5", 40)
        b = self.addresses("127.2.0.5", 30)
        # Each city gets its own addresses, in the CDN's proportions.
        self.assertEqual(dict(collections.Counter(a)), {CITY_A[0]: 30, CITY_A[1]: 10})
        self.assertEqual(dict(collections.Counter(b)), {CITY_B[0]: 10, CITY_B[1]: 10, CITY_B[2]: 10})

        # What the GSLB saw: one plain query that revealed the chain, then one
        # tagged query per city with that city's ECS and the weight option.
        log = [q for q in self.sim.log(50) if q["qname"].rstrip(".") == "video.example.com"]
        plain = [q for q in log if q["ecs"] is None]
        tagged = [q for q in log if q["ecs"] is not None]
        self.assertEqual(len(plain), 1, log)
        self.assertFalse(plain[0]["weight_option"], plain[0])
        self.assertEqual(sorted((q["ecs"]["address"], q["ecs"]["source"]) for q in tagged),
                         [("198.51.100.0", 24), ("203.0.113.0", 24)], log)
        for q in tagged:
            self.assertTrue(q["weight_option"], q)

        m = self.fp.metrics()
        self.assertEqual(m.value("weir_learned_tags"), 1)
        self.assertEqual(m.value("weir_learned_tags_total"), 1)

    def test_answer_keeps_the_chain(self):
        r = self.fp.dig("video.example.com", source="127.1.0.9")
        self.assertEqual(r.status, "NOERROR")
        types = [(rec.name.rstrip(".").lower(), rec.type) for rec in r.answer]
        self.assertEqual(types[0], ("video.example.com", "CNAME"), r.answer)
        self.assertEqual(types[-1], ("x.cdn.example.net", "A"), r.answer)
        self.assertIn(r.answer[-1].data, CITY_A)


if __name__ == "__main__":
    unittest.main()
