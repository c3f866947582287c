"""Black-box tests of weir-fastpath's weighted city answers (docs/behaviour.md):
gslb-sim is the GSLB, cities are source ranges on loopback, dig is the client.

Run: python3 tests/integration/test_fastpath_weights.py --build-dir build
"""

import collections
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import gslb_name, no_empty_weight_option, record, swrr_sequence, view, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
W = 65001  # the default weight option code

CITY_A = ["192.0.2.11", "192.0.2.12", "192.0.2.13"]
CITY_A_WEIGHTS = [5, 3, 1]
CITY_B = ["192.0.2.21", "192.0.2.22"]
CITY_B_WEIGHTS = [1, 1]

ZONES = (no_empty_weight_option() + zone("cdn.example.net.", rname="admin", minimum=30, ttl=60) +
         gslb_name("x", view("198.51.100.0/24", CITY_A, CITY_A_WEIGHTS, scope=24),
                   view("203.0.113.0/24", CITY_B, CITY_B_WEIGHTS, scope=24), ttl=300) +
         zone("example.com.") + record("www", "A", "192.0.2.1", ttl=300))

# No view for 127.0.0.0/8 and no default view: an upstream query that does
# not carry a city's ECS address gets NODATA, so a leak cannot look right.
CITYMAP = """\
# cidr,city,ecs_address/prefix
127.1.0.0/16,city-a,198.51.100.0/24
127.2.0.0/16,city-b,203.0.113.0/24
"""
TAGS = "cdn.example.net weight=on ecs=on answer=single level=city\n"

QNAME = "x.cdn.example.net"


class FastpathWeightsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig")
        cls.files = weirtest.PartitionFiles(CITYMAP, TAGS)
        cls.citymap, cls.tags = cls.files.citymap, cls.files.tags

    @classmethod
    def tearDownClass(cls):
        cls.files.cleanup()

    def setUp(self):
        # A fresh GSLB and front per test: counters, cache and SWRR state
        # start from zero, whatever order the tests run in.
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES, seed=1)
        self.addCleanup(self.sim.stop)
        upstream = f"{self.sim.host}:{self.sim.port}"
        config = weirtest.fastpath_config([upstream], weighted=[upstream], workers=1, citymap=self.citymap,
                                          tags=self.tags, upstream={"timeout_ms": 1000})
        self.fp = weirtest.Fastpath(BUILD_DIR, config)
        self.addCleanup(self.fp.stop)

    def query_many(self, sources, per_source):
        """per_source queries from each source, in batches of one dig process."""
        out = []
        for src in sources:
            out += weirtest.dig_many(self.fp.host, self.fp.port, QNAME, per_source, source=src)
        return out

    # ------------------------------------------------------------ 1. weighted city answers

    def test_city_answers_follow_weights_exactly(self):
        # Nine dig processes per city, 100 queries each, from different
        # addresses of the city; the cities take turns.
        got = {"a": [], "b": []}
        for i in range(9):
            got["a"] += self.query_many([f"127.1.{i}.{10 + i}"], 100)
            got["b"] += self.query_many([f"127.2.{i * 7}.{200 - i}"], 100)
        a, b = got["a"], got["b"]
        self.assertEqual(len(a), 900, f"city A: {900 - len(a)} queries got no address")
        self.assertEqual(len(b), 900, f"city B: {900 - len(b)} queries got no address")

        # Exact shares: one worker, so SWRR is exact over every 9 (2) picks.
        self.assertEqual(dict(collections.Counter(a)),
                         {CITY_A[0]: 500, CITY_A[1]: 300, CITY_A[2]: 100}, "city A shares")
        self.assertEqual(dict(collections.Counter(b)), {CITY_B[0]: 450, CITY_B[1]: 450}, "city B shares")
        self.assertFalse(set(a) & set(CITY_B), "city A was given city B's addresses")
        self.assertFalse(set(b) & set(CITY_A), "city B was given city A's addresses")

        # Smooth, not bursty (docs/behaviour.md#answering-by-weight): the nginx sequence a b a c a b a b a, repeated.
        want = [CITY_A[i] for i in swrr_sequence(CITY_A_WEIGHTS, 900)]
        self.assertEqual(a[:9], want[:9], "first SWRR cycle of city A")
        self.assertEqual(a, want, "city A must follow the SWRR sequence for weights 5,3,1 throughout")
        self.assertTrue(all(b[i] != b[i + 1] for i in range(len(b) - 1)),
                        f"weights 1,1 must alternate; first picks {b[:10]}")

        # The GSLB saw exactly one query per city, with the city's ECS source
        # (never the subscriber's address) and an empty weight option.
        stats = self.sim.stats()
        self.assertEqual(stats["queries"], 2, stats)
        self.assertEqual(stats["by_qname_ecs"], {"x.cdn.example.net.": {"198.51.100.0/24": 1,
                                                                         "203.0.113.0/24": 1}}, stats)
        self.assertEqual(stats["with_weight_option"], 2, stats)
        log = self.sim.log(10)
        self.assertEqual(len(log), 2, log)
        by_ecs = {e["ecs"]["address"]: e for e in log}
        self.assertEqual(set(by_ecs), {"198.51.100.0", "203.0.113.0"}, log)
        for addr, view in (("198.51.100.0", "198.51.100.0/24"), ("203.0.113.0", "203.0.113.0/24")):
            e = by_ecs[addr]
            self.assertEqual(e["ecs"], {"family": 1, "address": addr, "source": 24}, e)
            self.assertEqual((e["weight_option"], e["weight_option_len"]), (True, 0), e)
            self.assertEqual((e["qname"], e["qtype"], e["view"], e["rcode"]),
                             ("x.cdn.example.net.", "A", view, "NOERROR"), e)

        # The front's own accounting agrees with what the clients saw.
        m = self.fp.metrics()
        answers = {(l["partition"], l["address"]): v for l, v in m.series("weir_answers_total")}
        self.assertEqual({l["name"] for l, _ in m.series("weir_answers_total")}, {QNAME + "."}, m.text)
        self.assertEqual(answers, {("city-a", CITY_A[0]): 500, ("city-a", CITY_A[1]): 300,
                                   ("city-a", CITY_A[2]): 100, ("city-b", CITY_B[0]): 450,
                                   ("city-b", CITY_B[1]): 450}, m.text)
        self.assertEqual(m.value("weir_partition_lookups_total", partition="city-a"), 900, m.text)
        self.assertEqual(m.value("weir_partition_hits_total", partition="city-a"), 899, m.text)
        self.assertEqual(m.value("weir_partition_lookups_total", partition="city-b"), 900, m.text)
        self.assertEqual(m.value("weir_partition_hits_total", partition="city-b"), 899, m.text)
        self.assertEqual(m.value("weir_upstream_queries_total"), 2, m.text)
        self.assertEqual(m.value("weir_cache_misses_total"), 2, m.text)
        self.assertEqual(m.value("weir_cache_hits_total"), 1798, m.text)

    def test_single_answer_has_one_address_and_no_option(self):
        r = self.fp.dig(QNAME, source="127.1.0.9")
        self.assertEqual(r.status, "NOERROR", r.text)
        self.assertEqual(len(r.addresses()), 1, "answer=single gives one address:\n" + r.text)
        self.assertIn(r.addresses()[0], CITY_A, r.text)
        self.assertIsNone(r.option(W), "no weight option without asking (docs/behaviour.md#the-weight-option):\n" + r.text)
        self.assertIsNone(r.ecs, "an untrusted client's query gets no ECS back:\n" + r.text)
        r = self.fp.dig(QNAME, source="127.2.0.9")
        self.assertEqual(len(r.addresses()), 1, r.text)
        self.assertIn(r.addresses()[0], CITY_B, r.text)

    # ------------------------------------------------------------ 3. the weight option downstream

    def test_weight_option_query_gets_all_addresses_and_weights(self):
        want = dict(zip(CITY_A, CITY_A_WEIGHTS))
        # First query: a miss answered after the fill; second: a cache hit.
        for attempt in ("miss", "hit"):
            r = self.fp.dig(QNAME, source="127.1.0.9", options=[W])
            self.assertEqual(r.status, "NOERROR", r.text)
            self.assertEqual(sorted(r.addresses()), sorted(CITY_A), f"{attempt}: every address:\n{r.text}")
            self.assertEqual(len(r.option(W) or b""), 2 * len(CITY_A), f"{attempt}: 2 bytes per address:\n{r.text}")
            self.assertEqual(dict(zip(r.addresses(), r.weights(W))), want,
                             f"{attempt}: weights must pair with their addresses in answer order:\n{r.text}")
            self.assertTrue(all(r.option(W)[i] == 0 for i in range(0, len(r.option(W)), 2)),
                            "high bytes must be 0:\n" + r.text)
        # City B, through the same front.
        r = self.fp.dig(QNAME, source="127.2.0.9", options=[W])
        self.assertEqual(dict(zip(r.addresses(), r.weights(W))), dict(zip(CITY_B, CITY_B_WEIGHTS)), r.text)
        # Still one upstream query per city, and weight-option answers are
        # not SWRR picks (no weir_answers_total yet).
        self.assertEqual(self.sim.stats()["queries"], 2, self.sim.stats())
        m = self.fp.metrics()
        self.assertEqual(m.series("weir_answers_total"), [], m.text)
        # Without the option the same entry is answered by SWRR, no option.
        r = self.fp.dig(QNAME, source="127.1.0.9")
        self.assertEqual(len(r.addresses()), 1, r.text)
        self.assertIsNone(r.option(W), r.text)

    def test_untagged_name_with_weight_option_gets_empty_option(self):
        for attempt in ("miss", "hit"):
            r = self.fp.dig("www.example.com", source="127.1.0.9", options=[W])
            self.assertEqual(r.status, "NOERROR", r.text)
            self.assertEqual(r.addresses(), ["192.0.2.1"], r.text)
            self.assertEqual(r.option(W), b"",
                             f"{attempt}: length-0 option expected ('supported, not weighted', docs/behaviour.md#the-weight-option):\n{r.text}")
        r = self.fp.dig("www.example.com", source="127.1.0.9")
        self.assertIsNone(r.option(W), "no option when not asked:\n" + r.text)
        # Untagged: common partition, no ECS and no weight option upstream.
        log = self.sim.log(10)
        self.assertEqual(len(log), 1, log)
        self.assertEqual((log[0]["qname"], log[0]["ecs"], log[0]["weight_option"]),
                         ("www.example.com.", None, False), log[0])


if __name__ == "__main__":
    unittest.main()
