"""Black-box test of sibling prefetch (cache.sibling_prefetch): after a
subnet-level miss is filled, weir-fastpath asks the same question for the
city's other recently active subnets, each with its own /24 as ECS, so
their subscribers find the answer cached (seed 002's prefetch of related
segments). Subscribers are loopback sources of two cities.

Run: python3 tests/integration/test_fastpath_sibling_prefetch.py --build-dir build
"""

import os
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import record, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()

ZONES = (zone("example.com.") +
         record("a.cdn", "A", "192.0.2.10", ttl=300) +
         record("b.cdn", "A", "192.0.2.20", ttl=300))


class SiblingPrefetchTest(unittest.TestCase):
    def test_a_miss_fetches_the_name_for_the_citys_recent_subnets(self):
        sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        self.addCleanup(sim.stop)
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        tags = os.path.join(d.name, "tags.txt")
        with open(tags, "w") as f:
            f.write("cdn.example.com ecs=on level=subnet\n")
        citymap = os.path.join(d.name, "citymap.csv")
        with open(citymap, "w") as f:
            f.write("127.1.0.0/16,city-1,127.1.0.0/24\n127.2.0.0/16,city-2,127.2.0.0/24\n")
        up = f"{sim.host}:{sim.port}"
        fp = weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config([up], citymap=citymap, tags=tags,
                                                                   cache={"sibling_prefetch": 2}))
        self.addCleanup(fp.stop)

        def asked(name):
            return sorted(q["ecs"]["address"] for q in sim.log(1000)
                          if q.get("qname", "").rstrip(".") == name and q.get("ecs"))

        # Subscribers of three subnets of city-1 (and one of city-2) are seen.
        for source in ("127.1.1.1", "127.1.2.1", "127.1.3.1", "127.2.9.1"):
            self.assertEqual(fp.dig("a.cdn.example.com", source=source).status, "NOERROR")

        # A miss for b in city-1's subnet 4: b is fetched for it and for the
        # two most recent other subnets of the city, not for city-2's.
        self.assertEqual(fp.dig("b.cdn.example.com", source="127.1.4.1").addresses(), ["192.0.2.20"])
        deadline = time.monotonic() + 5
        while len(asked("b.cdn.example.com")) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(asked("b.cdn.example.com"), ["127.1.2.0", "127.1.3.0", "127.1.4.0"])
        self.assertEqual(fp.metrics().value("weir_sibling_prefetches_total"), 2)

        # Their subscribers find it cached: no miss, no upstream query.
        misses = fp.metrics().value("weir_cache_misses_total")
        for source in ("127.1.2.77", "127.1.3.77"):
            self.assertEqual(fp.dig("b.cdn.example.com", source=source).addresses(), ["192.0.2.20"])
        self.assertEqual(fp.metrics().value("weir_cache_misses_total"), misses)
        self.assertEqual(len(asked("b.cdn.example.com")), 3)
        # Subnet 1 was beyond cache.sibling_prefetch: its subscriber misses.
        fp.dig("b.cdn.example.com", source="127.1.1.77")
        self.assertEqual(fp.metrics().value("weir_cache_misses_total"), misses + 1)


if __name__ == "__main__":
    unittest.main()
