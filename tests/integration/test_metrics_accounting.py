"""weir-fastpath's metrics as an operator reads them (docs/metrics.md):

* accounting: every query is answered once or dropped, so
  weir_queries_total = weir_responses_total + weir_drops_total after hits,
  misses, relayed answers, stale answers, truncated answers, REFUSED and
  garbage, each case checked on its own deltas;
* weight conformance: after a weighted load from two cities (5:3:1 and 1:1)
  the PromQL-shaped share computation from two scrapes, answers over their
  (name, partition) sum against weir_answer_weight over its sum, is within
  0.5 percentage points for every address, and the deviation gauge
  weir_answer_share_deviation_ratio agrees with the same computation;
* the cardinality bound: beyond server.metrics_answer_names names, the
  answers are summed in weir_answers_other_total.

Run: python3 tests/integration/test_metrics_accounting.py --build-dir build
"""

import os
import subprocess
import sys
import tempfile
import unittest
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import gslb_name, no_empty_weight_option, record, view, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()

CITY_A = ["192.0.2.11", "192.0.2.12", "192.0.2.13"]
CITY_A_WEIGHTS = [5, 3, 1]
CITY_B = ["192.0.2.21", "192.0.2.22"]
CITY_B_WEIGHTS = [1, 1]
QNAME = "x.cdn.example.net"
WINDOW = 60

CITYMAP = """\
# cidr,city,ecs_address/prefix
127.1.0.0/16,city-a,198.51.100.0/24
127.2.0.0/16,city-b,203.0.113.0/24
"""
TAGS = "cdn.example.net weight=on ecs=on answer=single level=city\n"


def zones():
    text = (no_empty_weight_option() + zone("cdn.example.net.", rname="admin", minimum=30, ttl=60) +
            gslb_name("x", view("198.51.100.0/24", CITY_A, CITY_A_WEIGHTS, scope=24),
                      view("203.0.113.0/24", CITY_B, CITY_B_WEIGHTS, scope=24), ttl=3600))
    for i in range(3):  # more weighted names than the cardinality bound lets through
        text += gslb_name(f"y{i}", view("198.51.100.0/24", CITY_A[:2], [1, 1], scope=24),
                          view("203.0.113.0/24", CITY_B, [2, 1], scope=24), ttl=3600)
    text += zone("example.com.", minimum=30, ttl=60)
    text += record("www", "A", "192.0.2.1", ttl=30)
    text += record("new", "A", "192.0.2.2", ttl=30)
    # 40 addresses: larger than a 512-byte UDP answer, so TC without EDNS.
    text += "".join(record("big", "A", f"192.0.2.{100 + i}", ttl=300) for i in range(40))
    text += zone("refused.example.", lame="refused")
    return text


def series(m, name):
    """{labels tuple: value} of every sample of `name`."""
    return {tuple(sorted(labels.items())): v for labels, v in m.series(name)}


class AccountingTest(unittest.TestCase):
    """queries = responses + drops, case by case."""

    @classmethod
    def setUpClass(cls):
        cls.files = weirtest.PartitionFiles(CITYMAP, TAGS)
        cls.sim = weirtest.GslbSim(BUILD_DIR, config_text=zones(), seed=1)
        upstream = f"{cls.sim.host}:{cls.sim.port}"
        config = weirtest.fastpath_config([upstream], weighted=[upstream], workers=2, citymap=cls.files.citymap,
                                          tags=cls.files.tags, allow=("127.0.0.0/16", "127.1.0.0/16"),
                                          cache={"stale_answer_after_ms": 200},
                                          upstream={"timeout_ms": 300, "attempts": 1})
        cls.fp = weirtest.Fastpath(BUILD_DIR, config, test_clock=True)

    @classmethod
    def tearDownClass(cls):
        cls.fp.stop()
        cls.sim.stop()
        cls.files.cleanup()

    def snapshot(self):
        m = self.fp.metrics()
        return {
            "queries": m.value("weir_queries_total"),
            "responses": m.value("weir_responses_total"),
            "drops": m.value("weir_drops_total"),
            "hits": m.value("weir_cache_hits_total"),
            "misses": m.value("weir_cache_misses_total"),
            "stale": m.value("weir_stale_served_total"),
            "truncated": m.value("weir_truncated_total"),
            "refused": m.value("weir_responses_total", rcode="REFUSED"),
            "noerror": m.value("weir_responses_total", rcode="NOERROR"),
            "acl": m.value("weir_error_responses_total", reason="acl"),
            "garbage": m.value("weir_drops_total", reason="garbage"),
            "tcp_queries": m.value("weir_queries_total", transport="tcp"),
            "tcp_responses": m.value("weir_responses_total", transport="tcp"),
            "hit_latency": m.value("weir_response_latency_seconds_count", path="hit"),
            "miss_latency": m.value("weir_response_latency_seconds_count", path="miss"),
            "cached": m.value("weir_cache_inserts_total", partition="common"),
        }

    def check(self, case, action, **expect):
        before = self.snapshot()
        action()
        after = self.snapshot()
        d = {k: after[k] - before[k] for k in after}
        self.assertGreater(d["queries"], 0, f"{case}: nothing counted: {d}")
        self.assertEqual(d["queries"], d["responses"] + d["drops"], f"{case}: queries != responses + drops: {d}")
        for k, v in expect.items():
            self.assertEqual(d[k], v, f"{case}: {k}: {d}")
        return d

    def test_1_every_kind_of_answer_is_counted_once(self):
        fp = self.fp
        self.check("miss", lambda: self.assertEqual(fp.dig("www.example.com").status, "NOERROR"),
                   queries=1, responses=1, misses=1, noerror=1, drops=0, miss_latency=1, hit_latency=0, cached=1)
        self.check("hit", lambda: self.assertEqual(fp.dig("www.example.com").status, "NOERROR"),
                   queries=1, responses=1, hits=1, noerror=1, hit_latency=1, miss_latency=0)
        self.check("hit over tcp", lambda: self.assertEqual(fp.dig("www.example.com", tcp=True).status, "NOERROR"),
                   queries=1, responses=1, tcp_queries=1, tcp_responses=1)
        # Relayed: the upstream's REFUSED is passed on, never cached.
        self.check("relayed", lambda: self.assertEqual(fp.dig("a.refused.example").status, "REFUSED"),
                   queries=1, responses=1, refused=1, misses=1, acl=0, miss_latency=1, cached=0)
        # Relayed: a DNSSEC-aware query (DO) is relayed from the upstream.
        self.check("relayed DO", lambda: self.assertEqual(fp.dig("new.example.com", extra=["+dnssec"]).status,
                                                          "NOERROR"), queries=1, responses=1)
        # TC: 40 addresses do not fit 512 bytes (no EDNS); the miss and the hit both.
        for case in ("TC miss", "TC hit"):
            self.check(case, lambda: self.assertTrue(
                fp.dig("big.example.com", extra=["+noedns", "+ignore"]).tc), queries=1, responses=1, truncated=1)
        # REFUSED by the ACL, and for a class other than IN.
        self.check("acl", lambda: self.assertEqual(fp.dig("www.example.com", source="127.9.0.1").status, "REFUSED"),
                   queries=1, responses=1, refused=1, acl=1, hit_latency=1)
        self.check("class", lambda: self.assertEqual(fp.dig("www.example.com", qtype="TXT",
                                                            extra=["-c", "CH"]).status, "REFUSED"),
                   queries=1, responses=1, refused=1)
        # Garbage: no response at all.
        self.check("garbage", lambda: self.assertIsNone(weirtest.udp_exchange(fp.host, fp.port, b"\x00\x01junk",
                                                                              timeout=0.5)),
                   queries=1, responses=0, drops=1, garbage=1, hit_latency=0, miss_latency=0)

    def test_2_stale_answers_are_counted_once(self):
        fp = self.fp
        self.assertEqual(fp.dig("www.example.com").status, "NOERROR")  # cached (or a hit)
        self.sim.stop()  # every upstream is gone
        fp.advance_clock(31)  # www (TTL 30) has just expired
        d = self.check("stale", lambda: self.assertEqual(fp.dig("www.example.com", timeout=3).status, "NOERROR"),
                       queries=1, responses=1, stale=1, noerror=1, drops=0)
        self.assertEqual(d["hits"], 0, d)
        # Nothing stale for a new name: SERVFAIL, counted as an upstream failure.
        before = fp.metrics().value("weir_error_responses_total", reason="upstream_failure")
        self.check("servfail", lambda: self.assertEqual(fp.dig("never.example.com", timeout=3).status, "SERVFAIL"),
                   queries=1, responses=1)
        self.assertEqual(fp.metrics().value("weir_error_responses_total", reason="upstream_failure") - before, 1)


class WeightConformanceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.bench = weirtest.binary(BUILD_DIR, "bench/weir_bench/weir-bench")
        cls.files = weirtest.PartitionFiles(CITYMAP, TAGS)
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.files.cleanup()
        cls.tmp.cleanup()

    def start(self, **server):
        sim = weirtest.GslbSim(BUILD_DIR, config_text=zones(), seed=1)
        self.addCleanup(sim.stop)
        upstream = f"{sim.host}:{sim.port}"
        server = {"metrics_conformance_window_s": WINDOW, **server}
        config = weirtest.fastpath_config([upstream], weighted=[upstream], workers=2, citymap=self.files.citymap,
                                          tags=self.files.tags, server=server, upstream={"timeout_ms": 1000})
        fp = weirtest.Fastpath(BUILD_DIR, config, test_clock=True)
        self.addCleanup(fp.stop)
        return fp

    def load(self, fp, *names, count=18000):
        argv = [self.bench, "--progress", "never", "--server", f"{fp.host}:{fp.port}", "--citymap",
                self.files.citymap, "--tagged-fraction", "1", "--sources-per-city", "8", "--count", str(count),
                "--outstanding", "20", "--warmup"]
        for n in names:
            argv += ["--tagged-name", n]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, f"{' '.join(argv)}\n{p.stdout}\n{p.stderr}")

    def test_shares_from_two_scrapes_match_the_weights_and_the_deviation_gauge(self):
        fp = self.start()
        first = fp.metrics()  # opens the conformance window
        self.load(fp, QNAME)
        fp.advance_clock(WINDOW)
        second = fp.metrics()  # closes it: the gauge covers exactly the answers between the scrapes

        # rate(weir_answers_total[...]) / sum by (name, partition) (rate(...)),
        # against weir_answer_weight / sum by (name, partition) (weir_answer_weight).
        before = series(first, "weir_answers_total")
        delta = {k: v - before.get(k, 0) for k, v in series(second, "weir_answers_total").items()}
        weights = series(second, "weir_answer_weight")
        groups = defaultdict(dict)
        for labels, v in delta.items():
            d = dict(labels)
            groups[(d["name"], d["partition"])].setdefault(d["address"], [0, 0])[0] = v
        for labels, w in weights.items():
            d = dict(labels)
            groups[(d["name"], d["partition"])].setdefault(d["address"], [0, 0])[1] = w
        want = {("city-a", a): w for a, w in zip(CITY_A, CITY_A_WEIGHTS)}
        want.update({("city-b", a): w for a, w in zip(CITY_B, CITY_B_WEIGHTS)})
        self.assertEqual({(p, a): aw[1] for (n, p), addrs in groups.items() for a, aw in addrs.items()}, want,
                         "weir_answer_weight is the weights the GSLB configured, per city:\n" + second.text)
        deviation = series(second, "weir_answer_share_deviation_ratio")
        for (name, partition), addrs in groups.items():
            self.assertEqual(name, QNAME + ".")
            answered = sum(aw[0] for aw in addrs.values())
            total_weight = sum(aw[1] for aw in addrs.values())
            self.assertGreater(answered, 5000, f"{partition}: the load did not reach it")
            worst = 0.0
            for address, (n, w) in addrs.items():
                off = abs(n / answered - w / total_weight)
                self.assertLess(off, 0.005, f"{partition} {address}: {n}/{answered} against {w}/{total_weight}")
                worst = max(worst, off)
            gauge = deviation[(("name", name), ("partition", partition))]
            self.assertAlmostEqual(gauge, worst, places=9, msg=f"{partition}: the gauge disagrees\n{second.text}")

        # Before the next window closes the gauge keeps the last window's value.
        self.assertEqual(series(fp.metrics(), "weir_answer_share_deviation_ratio"), deviation)

    def test_names_beyond_the_bound_are_summed(self):
        fp = self.start(metrics_answer_names=2)
        names = [QNAME] + [f"y{i}.cdn.example.net" for i in range(3)]
        self.load(fp, *names, count=8000)
        m = fp.metrics()
        exported = {dict(labels)["name"] for labels in series(m, "weir_answers_total")}
        self.assertEqual(len(exported), 2, m.text)
        self.assertEqual({dict(labels)["name"] for labels in series(m, "weir_answer_weight")}, exported)
        total = m.value("weir_answers_total") + m.value("weir_answers_other_total")
        self.assertEqual(total, 8000, "every weighted answer is counted, by address or summed:\n" + m.text)
        self.assertGreater(m.value("weir_answers_other_total"), 0, m.text)
        self.assertEqual(subprocess.run(["promtool", "check", "metrics"], input=m.text, capture_output=True,
                                        text=True).returncode, 0)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]])
