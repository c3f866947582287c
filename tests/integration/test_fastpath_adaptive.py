"""Black-box tests of level=adaptive (docs/behaviour.md#adaptive-segments):
weir-fastpath asks a GSLB (gslb-sim) with each subscriber's /24 as ECS,
learns from the answer's ECS scope which segment the answer holds for,
and answers the segment's other subscribers from the cache. Subscribers
are loopback sources; one city (127.1.0.0/16) holds several segments.

Run: python3 tests/integration/test_fastpath_adaptive.py --build-dir build
"""

import collections
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import default, gslb_name, view, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
WEIRCTL = weirtest.binary(BUILD_DIR, "mgmt/weirctl")


def three_segments(ttl=60, inner=("192.0.2.1",)):
    """x.seg.example.com: three segments inside city-1 and a default (scope 0)."""
    return (zone("example.com.") +
            gslb_name("x.seg", view("127.1.0.0/20", list(inner), scope=20),
                      view("127.1.16.0/22", ["192.0.2.2"], scope=22),
                      view("127.1.32.0/24", ["192.0.2.3"], scope=24),
                      default=default(["192.0.2.99"], scope=0), ttl=ttl))


class AdaptiveTest(unittest.TestCase):
    def start(self, zones, tag="seg.example.com ecs=on level=adaptive", cache=None):
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=zones)
        self.addCleanup(self.sim.stop)
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        tags = os.path.join(d.name, "tags.txt")
        with open(tags, "w") as f:
            f.write(tag + "\n")
        citymap = os.path.join(d.name, "citymap.csv")
        with open(citymap, "w") as f:
            f.write("127.1.0.0/16,city-1,127.1.0.0/24\n127.2.0.0/16,city-2,127.2.0.0/24\n")
        up = f"{self.sim.host}:{self.sim.port}"
        self.control = os.path.join(d.name, "control.sock")
        self.fp = weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config([up], weighted=[up], citymap=citymap,
                                                                        tags=tags, cache=cache or {},
                                                                        control={"socket": self.control}),
                                    test_clock=True)
        self.addCleanup(self.fp.stop)

    def weirctl(self, *args, json_out=True):
        r = subprocess.run([WEIRCTL, "-C", self.control, *args] + (["--json"] if json_out else []),
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        return json.loads(r.stdout) if json_out else r.stdout

    def asked(self):
        """The ECS subnets gslb-sim was asked with, in order."""
        return [q["ecs"]["address"] for q in self.sim.log(10000) if q.get("ecs")]

    def metric(self, name, **labels):
        return self.fp.metrics().value(name, **labels)

    def test_each_segment_of_a_city_gets_its_own_answer_and_its_subscribers_hit(self):
        self.start(three_segments())
        # One subscriber per segment: each asked with its own /24, each
        # answered with its segment's node (a city-wide key would give all
        # three the first one's).
        for source, want in (("127.1.3.7", "192.0.2.1"), ("127.1.17.7", "192.0.2.2"),
                             ("127.1.32.7", "192.0.2.3")):
            self.assertEqual(self.fp.dig("x.seg.example.com", source=source).addresses(), [want], source)
        self.assertEqual(self.asked(), ["127.1.3.0", "127.1.17.0", "127.1.32.0"])
        self.assertEqual(self.metric("weir_segments"), 3)
        # Other subscribers of the same segments, in other /24s: from the
        # cache, no new question.
        for source, want in (("127.1.15.9", "192.0.2.1"), ("127.1.0.1", "192.0.2.1"),
                             ("127.1.19.200", "192.0.2.2")):
            self.assertEqual(self.fp.dig("x.seg.example.com", source=source).addresses(), [want], source)
        self.assertEqual(len(self.asked()), 3)
        self.assertEqual(self.metric("weir_adaptive_lookups_total", tier="segment"), 3)
        # Outside every segment learned: asked, answered by the GSLB's default.
        self.assertEqual(self.fp.dig("x.seg.example.com", source="127.1.20.1").addresses(), ["192.0.2.99"])
        self.assertEqual(self.asked()[-1], "127.1.20.0")

    def test_a_scope_zero_answer_is_the_names_global_tier(self):
        self.start(three_segments())
        # A segment learned first, then the GSLB's default (scope 0).
        self.assertEqual(self.fp.dig("x.seg.example.com", source="127.1.32.1").addresses(), ["192.0.2.3"])
        self.assertEqual(self.fp.dig("x.seg.example.com", source="127.2.5.5").addresses(), ["192.0.2.99"])
        # Scope 0: every IPv4 subscriber without a longer segment, any city,
        # from the cache (RFC 7871 7.3.1: suitable for every address).
        for source in ("127.2.77.1", "127.9.9.9", "127.1.200.1"):
            self.assertEqual(self.fp.dig("x.seg.example.com", source=source).addresses(), ["192.0.2.99"])
        self.assertEqual(len(self.asked()), 2)
        self.assertEqual(self.metric("weir_adaptive_lookups_total", tier="global"), 3)
        # The longer segment still wins inside it.
        self.assertEqual(self.fp.dig("x.seg.example.com", source="127.1.32.99").addresses(), ["192.0.2.3"])
        self.assertEqual(len(self.asked()), 2)
        self.assertEqual(self.metric("weir_adaptive_lookups_total", tier="segment"), 1)
        self.assertEqual(self.metric("weir_adaptive_lookups_total", tier="none"), 2)

    def test_segments_merge_when_their_answers_are_equal_and_split_when_they_differ(self):
        def zones(second):
            return (zone("example.com.") +
                    gslb_name("m.seg", view("127.1.0.0/21", ["192.0.2.1"], scope=21),
                              view("127.1.8.0/21", [second], scope=21), ttl=60))
        self.start(zones("192.0.2.1"))
        self.fp.dig("m.seg.example.com", source="127.1.1.1")
        self.fp.dig("m.seg.example.com", source="127.1.9.1")
        # Two sibling /21s with one answer: one /20, one cache entry.
        self.assertEqual(self.metric("weir_segment_changes_total", change="merge"), 1)
        self.assertEqual(self.metric("weir_segments"), 1)
        self.assertEqual(self.metric("weir_cache_entries", partition="segment"), 1)
        # The GSLB changes the second /21's node; past the TTL its subscriber
        # is asked again and the /20 splits.
        with open(self.sim.config_path, "w") as f:
            f.write(zones("192.0.2.8"))
        self.sim.reload()
        self.fp.advance_clock(61)
        self.assertEqual(self.fp.dig("m.seg.example.com", source="127.1.12.1").addresses(), ["192.0.2.8"])
        self.assertEqual(self.fp.dig("m.seg.example.com", source="127.1.4.1").addresses(), ["192.0.2.1"])
        self.assertEqual(self.fp.dig("m.seg.example.com", source="127.1.15.5").addresses(), ["192.0.2.8"])
        self.assertEqual(self.fp.dig("m.seg.example.com", source="127.1.0.5").addresses(), ["192.0.2.1"])
        self.assertEqual(self.asked(), ["127.1.1.0", "127.1.9.0", "127.1.12.0", "127.1.4.0"])
        self.assertEqual(self.metric("weir_segment_changes_total", change="split"), 1)
        self.assertEqual(self.metric("weir_segments"), 2)

    def test_a_segment_asked_again_after_its_ttl_with_the_same_answer_is_refreshed_in_place(self):
        self.start(three_segments())
        self.assertEqual(self.fp.dig("x.seg.example.com", source="127.1.17.7").addresses(), ["192.0.2.2"])
        self.assertEqual(self.metric("weir_segment_refreshes_total"), 0)
        # Past the TTL: asked again (another subscriber of the segment), the
        # same answer and scope: the segment's time moves on, nothing new.
        self.fp.advance_clock(61)
        self.assertEqual(self.fp.dig("x.seg.example.com", source="127.1.18.1").addresses(), ["192.0.2.2"])
        self.assertEqual(self.asked(), ["127.1.17.0", "127.1.18.0"])
        self.assertEqual(self.metric("weir_segment_learns_total"), 2)
        self.assertEqual(self.metric("weir_segment_refreshes_total"), 1)
        self.assertEqual(self.metric("weir_segment_changes_total", change="new"), 1)
        self.assertEqual(self.metric("weir_segments"), 1)
        # Served again for its TTL: the segment's other subscribers hit.
        self.fp.advance_clock(30)
        self.assertEqual(self.fp.dig("x.seg.example.com", source="127.1.16.200").addresses(), ["192.0.2.2"])
        self.assertEqual(len(self.asked()), 2)
        segs = self.weirctl("segments", "ls", "x.seg.example.com")["segments"]
        self.assertEqual([(s["segment"], s["ttl_left"]) for s in segs], [("127.1.16.0/22", 30)])

    def test_an_upstream_servfail_keeps_the_stale_answer_and_teaches_nothing(self):
        def zones(servfail):
            return (zone("example.com.") +
                    gslb_name("s.seg", view("127.1.0.0/20", ["192.0.2.1"], scope=20), servfail=servfail, ttl=60))
        self.start(zones(False))
        self.assertEqual(self.fp.dig("s.seg.example.com", source="127.1.1.1").addresses(), ["192.0.2.1"])
        with open(self.sim.config_path, "w") as f:
            f.write(zones(True))
        self.sim.reload()
        self.fp.advance_clock(61)
        # The segment is past its TTL: asked again, SERVFAIL: the segment's
        # stale answer (RFC 8767), and no segment learned from the failure.
        for source in ("127.1.2.2", "127.1.9.9"):
            r = self.fp.dig("s.seg.example.com", source=source)
            self.assertEqual(r.status, "NOERROR", source)
            self.assertEqual(r.addresses(), ["192.0.2.1"], source)
        self.assertEqual(self.metric("weir_segments"), 1)
        self.assertEqual(self.metric("weir_segment_learns_total"), 1)
        ls = self.weirctl("segments", "ls", "s.seg.example.com")
        self.assertEqual([r["segment"] for r in ls["segments"]], ["127.1.0.0/20"])

    def test_the_bound_keeps_a_name_within_max_segments(self):
        self.start(three_segments(), tag="seg.example.com ecs=on level=adaptive max_segments=2")
        for i, source in enumerate(("127.1.3.7", "127.1.17.7", "127.1.32.7")):
            self.fp.advance_clock(1)
            self.fp.dig("x.seg.example.com", source=source)
        self.assertEqual(self.metric("weir_segments"), 2)
        self.assertEqual(self.metric("weir_segment_changes_total", change="bound_drop"), 1)
        # The least recently learned (the /20) went: its subscribers are asked again.
        self.assertEqual(self.fp.dig("x.seg.example.com", source="127.1.32.8").addresses(), ["192.0.2.3"])
        self.assertEqual(self.fp.dig("x.seg.example.com", source="127.1.17.8").addresses(), ["192.0.2.2"])
        self.assertEqual(len(self.asked()), 3)
        self.assertEqual(self.fp.dig("x.seg.example.com", source="127.1.3.8").addresses(), ["192.0.2.1"])
        self.assertEqual(len(self.asked()), 4)

    def test_weighted_shares_are_exact_per_segment(self):
        # Two segments with the same weighted answer share one cache entry,
        # each picking in its own smooth sequence: every window of 4 answers
        # of one segment holds the addresses 3:1, however the two interleave.
        zones = (zone("example.com.") +
                 gslb_name("w.seg", view("127.1.0.0/22", ["192.0.2.1", "192.0.2.2"], [3, 1], scope=22),
                           view("127.1.8.0/22", ["192.0.2.1", "192.0.2.2"], [3, 1], scope=22), ttl=300))
        self.start(zones, tag="seg.example.com weight=on ecs=on level=adaptive")
        self.fp.dig("w.seg.example.com", source="127.1.1.1")
        self.fp.dig("w.seg.example.com", source="127.1.9.1")
        self.assertEqual(self.metric("weir_cache_entries", partition="segment"), 1)
        picks = {"a": collections.Counter(), "b": collections.Counter()}
        pattern = "aababbabaaab" * 4
        for i, seg in enumerate(pattern):
            source = f"127.1.{(i % 3) + (0 if seg == 'a' else 8)}.{i + 10}"
            picks[seg].update(self.fp.dig("w.seg.example.com", source=source).addresses())
        for seg in "ab":
            n = sum(picks[seg].values())
            self.assertEqual(n % 4, 0, seg)
            self.assertEqual(picks[seg]["192.0.2.1"], 3 * n // 4, (seg, picks[seg]))
            self.assertEqual(picks[seg]["192.0.2.2"], n // 4, (seg, picks[seg]))

    def test_sibling_prefetch_learns_the_citys_other_segments(self):
        views = [view(f"127.1.{i}.0/24", [f"192.0.2.{i}"], scope=24) for i in (1, 2, 3)]
        zones = zone("example.com.") + gslb_name("y.seg", *views, ttl=60) + gslb_name("z.seg", *views, ttl=60)
        self.start(zones, cache={"sibling_prefetch": 2})
        for source in ("127.1.1.7", "127.1.2.7"):
            self.fp.dig("y.seg.example.com", source=source)
        # A miss for z in a third subnet: z is fetched for the city's two
        # other recent subnets too, each with its own /24, and each learns
        # its own segment.
        self.assertEqual(self.fp.dig("z.seg.example.com", source="127.1.3.7").addresses(), ["192.0.2.3"])
        self.assertEqual(self.metric("weir_sibling_prefetches_total"), 2)
        z_asked = lambda: sorted(q["ecs"]["address"] for q in self.sim.log(1000)
                                 if q.get("ecs") and q["qname"].startswith("z."))
        self.assertEqual(z_asked(), ["127.1.1.0", "127.1.2.0", "127.1.3.0"])
        misses = self.metric("weir_cache_misses_total")
        for i in (1, 2):
            self.assertEqual(self.fp.dig("z.seg.example.com", source=f"127.1.{i}.99").addresses(), [f"192.0.2.{i}"])
        self.assertEqual(self.metric("weir_cache_misses_total"), misses)
        self.assertEqual(len(z_asked()), 3)


    def test_weirctl_lists_the_segments_and_compares_them_with_the_city_map(self):
        self.start(three_segments())
        for source in ("127.1.3.7", "127.1.17.7", "127.1.32.7", "127.2.0.9"):
            self.fp.dig("x.seg.example.com", source=source)
        ls = self.weirctl("segments", "ls", "x.seg.example.com")
        rows = {r["segment"]: r for r in ls["segments"]}
        self.assertEqual(sorted(rows), ["0.0.0.0/0", "127.1.0.0/20", "127.1.16.0/22", "127.1.32.0/24"])
        self.assertEqual(rows["127.1.16.0/22"]["addresses"], ["192.0.2.2"])
        self.assertEqual(rows["127.1.16.0/22"]["city"], "city-1")
        self.assertEqual(rows["127.1.16.0/22"]["ttl_left"], 60)
        self.assertIn("127.1.32.0/24", self.weirctl("segments", "ls", "x.seg.example.com", json_out=False))
        self.assertEqual(self.weirctl("segments", "ls", "nothing.seg.example.com")["segments"], [])
        # city-1 is four answers for the GSLB (three segments and the
        # default around them); city-2 is one, the default's.
        diff = self.weirctl("segments", "diff")
        cities = {c["city"]: c for c in diff["cities"]}
        self.assertEqual(cities["city-1"]["cells"], 4)
        self.assertEqual(cities["city-1"]["verdict"], "split in 4")
        self.assertEqual(cities["city-2"]["cells"], 1)
        # The proposal: city-1 cut along the segments, each part with an ECS
        # source inside it; every /24 of the map is in exactly one line.
        text = self.weirctl("segments", "diff", "--proposal", json_out=False)
        lines = [l.split(",") for l in text.splitlines() if l and not l.startswith("#")]
        by_cidr = {cidr: (city, ecs) for cidr, city, ecs in lines}
        self.assertEqual(by_cidr["127.1.16.0/22"][1], "127.1.16.0/24")
        self.assertEqual(by_cidr["127.1.32.0/24"], (by_cidr["127.1.32.0/24"][0], "127.1.32.0/24"))
        self.assertEqual(by_cidr["127.2.0.0/16"][0], "city-2")
        self.assertEqual(len({city for city, _ in by_cidr.values() if city.startswith("city-1")}), 4)
        total = sum(1 << (24 - int(c.split("/")[1])) for c in by_cidr)
        self.assertEqual(total, 2 * 256)


if __name__ == "__main__":
    unittest.main()
