"""Black-box tests of weir-bench, the load generator and weight-share meter
(docs/bench.md): against weir-fastpath and gslb-sim with two cities it must
see the shares weir gives (and weir's own counters must agree with it),
against a GSLB that hands each city the other's addresses it must report
the leak, and bad input must give one clear error and the documented exit
status.

Run: python3 tests/integration/test_weir_bench.py --build-dir build
"""

import json
import re
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import gslb_name, no_empty_weight_option, record, view, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()

CITY_A = ["192.0.2.11", "192.0.2.12", "192.0.2.13"]
CITY_A_WEIGHTS = [5, 3, 1]
CITY_B = ["192.0.2.21", "192.0.2.22"]
CITY_B_WEIGHTS = [1, 1]
QNAME = "x.cdn.example.net"


def zones(a_addresses, a_weights, b_addresses, b_weights):
    return (no_empty_weight_option() + zone("cdn.example.net.", rname="admin", minimum=30, ttl=60) +
            gslb_name("x", view("198.51.100.0/24", a_addresses, a_weights, scope=24),
                      view("203.0.113.0/24", b_addresses, b_weights, scope=24), ttl=3600) +
            zone("bench.test.") + "".join(record(f"n{i}", "A", f"192.0.2.{100 + i}", ttl=3600) for i in range(20)))


RIGHT = zones(CITY_A, CITY_A_WEIGHTS, CITY_B, CITY_B_WEIGHTS)
# The broken GSLB: each city's view holds the other city's nodes.
WRONG = zones(CITY_B, CITY_B_WEIGHTS, CITY_A, CITY_A_WEIGHTS)

CITYMAP = """\
# cidr,city,ecs_address/prefix
127.1.0.0/16,city-a,198.51.100.0/24
127.2.0.0/16,city-b,203.0.113.0/24
"""
TAGS = "cdn.example.net weight=on ecs=on answer=single level=city\n"
# What the CDN configured: the check for the broken GSLB.
WEIGHTS = "".join(f"{QNAME},city-a,{a},{w}\n" for a, w in zip(CITY_A, CITY_A_WEIGHTS)) + \
          "".join(f"{QNAME},city-b,{a},{w}\n" for a, w in zip(CITY_B, CITY_B_WEIGHTS))

# gslb-sim's segment model, small: 2 cities x 8 segments of one /24 each
# (10.0.0.0/24 .. 10.0.15.0/24), one name group, every segment its own run
# (no city-wide answers) and 8 nodes per city with one address per answer,
# so the segments of a city get different nodes; static (no change epochs).
SEGMENTS = """\
[[zone]]
origin = "example."
[zone.soa]
mname = "ns1"
rname = "hostmaster"

[segments]
suffix = "seg.example."
prefix = "10.0.0.0/16"
node_prefix = "198.18.0.0/16"
seed = 3
cities = 2
segments_per_city = 8
segment_lengths = [24, 24]
nodes_per_city = 8
addresses_per_answer = 1
name_groups = 1
city_level_fraction = 0
segments_per_answer = [1, 1]
change_every_s = 0
"""


class WeirBenchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.bench = weirtest.binary(BUILD_DIR, "bench/weir_bench/weir-bench")
        cls.files = weirtest.PartitionFiles(CITYMAP, TAGS)
        cls.tmp = tempfile.TemporaryDirectory()
        cls.weights = os.path.join(cls.tmp.name, "weights.csv")
        with open(cls.weights, "w") as f:
            f.write(WEIGHTS)

    @classmethod
    def tearDownClass(cls):
        cls.files.cleanup()
        cls.tmp.cleanup()

    def start(self, zone_text, workers=1):
        sim = weirtest.GslbSim(BUILD_DIR, config_text=zone_text, seed=1)
        self.addCleanup(sim.stop)
        upstream = f"{sim.host}:{sim.port}"
        config = weirtest.fastpath_config([upstream], weighted=[upstream], workers=workers,
                                          citymap=self.files.citymap, tags=self.files.tags,
                                          upstream={"timeout_ms": 1000})
        fp = weirtest.Fastpath(BUILD_DIR, config)
        self.addCleanup(fp.stop)
        return sim, fp

    def run_bench(self, *args, expect=0, timeout=120):
        out = os.path.join(self.tmp.name, f"run-{self.id().split('.')[-1]}.json")
        argv = [self.bench, "--progress", "never", "--json", out, *args]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        self.assertEqual(p.returncode, expect, f"{' '.join(argv)}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
        with open(out) as f:
            return json.load(f), p

    @staticmethod
    def shares(report):
        return {(row["city"], a["address"]): a["answers"] for row in report["shares"] for a in row["addresses"]
                if a["answers"] > 0}

    # ------------------------------------------------------------ the segment model

    def segments_run(self, level):
        """gslb-sim's segment model (2 cities x 8 /24 segments, every segment
        its own answer), weir-fastpath with tag `seg.example ecs=on
        level=<level>` trusting 127.0.0.1 as a forwarder, and weir-bench
        sending from 127.0.0.1 with a subscriber /24 as ECS, each answer
        checked against the model."""
        config = os.path.join(self.tmp.name, f"segments-{level}.toml")
        with open(config, "w") as f:
            f.write(SEGMENTS)
        sim = weirtest.GslbSim(BUILD_DIR, config_path=config)
        self.addCleanup(sim.stop)
        citymap_text = subprocess.run([weirtest.binary(BUILD_DIR, "bench/gslb_sim/gslb-sim"), "--config", config,
                                       "--segments-citymap"], capture_output=True, text=True, check=True,
                                      timeout=30).stdout
        files = weirtest.PartitionFiles(citymap_text, f"seg.example ecs=on level={level}\n")
        self.addCleanup(files.cleanup)
        upstream = f"{sim.host}:{sim.port}"
        fp = weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config(
            [upstream], weighted=[upstream], citymap=files.citymap, tags=files.tags,
            acl={"trusted_forwarders": ["127.0.0.1/32"]}))
        self.addCleanup(fp.stop)
        report, p = self.run_bench("--server", f"{fp.host}:{fp.port}", "--source", "127.0.0.1",
                                   "--subscriber-ecs", files.citymap, "--names", "20", "--zone", "seg.example.",
                                   "--segments-truth", config, "--count", "4000", "--outstanding", "20")
        self.assertEqual(report["answered"], 4000, p.stdout)
        self.assertIn("segments", report, p.stdout)
        self.assertIn("misscheduled", p.stdout)
        return report["segments"], p, sim

    def test_subnet_level_answers_every_subscriber_from_its_own_segment(self):
        seg, p, sim = self.segments_run("subnet")
        self.assertEqual(seg["checked"], 4000, p.stdout)
        self.assertEqual(seg["unanswered"], 0, p.stdout)
        self.assertEqual(seg["misscheduled"], 0, p.stdout)
        self.assertEqual(seg["misscheduled_per_10k"], 0, p.stdout)
        # The GSLB was asked with the subscribers' own /24s, all 16 of them,
        # and never for the forwarder's own address (the preflight carries
        # the map's first /24 too).
        asked = {q["ecs"]["address"] for q in sim.log(10000) if q.get("ecs")}
        self.assertEqual(asked, {f"10.0.{i}.0" for i in range(16)})

    def test_city_level_answers_a_citys_segments_with_one_answer(self):
        # One answer per city for 8 segments with 8 different answers: most
        # subscribers get another segment's node.
        seg, p, _ = self.segments_run("city")
        self.assertEqual(seg["checked"], 4000, p.stdout)
        self.assertEqual(seg["unanswered"], 0, p.stdout)
        self.assertGreater(seg["misscheduled"], 1000, p.stdout)
        self.assertAlmostEqual(seg["misscheduled_per_10k"], 10000 * seg["misscheduled"] / seg["checked"], delta=1)

    # ------------------------------------------------------------ the right GSLB

    def test_shares_match_weights_and_weirs_own_counters(self):
        sim, fp = self.start(RIGHT)
        report, p = self.run_bench("--server", f"{fp.host}:{fp.port}", "--citymap", self.files.citymap,
                                   "--tagged-name", QNAME, "--names", "20", "--tagged-fraction", "0.8",
                                   "--sources-per-city", "8", "--count", "20000", "--outstanding", "20", "--warmup")
        self.assertEqual(report["sent"], 20000, p.stdout)
        self.assertEqual(report["answered"], 20000, p.stdout)
        self.assertEqual(report["timeouts"], 0, p.stdout)
        self.assertEqual(report["mismatched"], 0, p.stdout)
        self.assertEqual(report["rcodes"], {"NOERROR": 20000}, p.stdout)

        rows = {row["city"]: row for row in report["shares"]}
        self.assertEqual(set(rows), {"city-a", "city-b"}, p.stdout)
        for city, addresses, weights in (("city-a", CITY_A, CITY_A_WEIGHTS), ("city-b", CITY_B, CITY_B_WEIGHTS)):
            row = rows[city]
            self.assertEqual(row["name"], QNAME + ".", row)
            self.assertEqual(row["weights_from"], "answer", row)
            want = dict(zip(addresses, weights))
            self.assertEqual({a["address"]: a["weight"] for a in row["addresses"]}, want,
                             f"{city}: weights learned from the probe's weight option")
            self.assertEqual(round(row["max_deviation_pp"], 1), 0.0, f"{city}: one worker, SWRR is exact\n{p.stdout}")
            self.assertEqual(row["leaked_answers"], 0, row)
            # Answers come back on 8 sockets per city, so their order is
            # only nearly the server's: runs stay short.
            self.assertLessEqual(row["longest_run"], 4, row)
        self.assertEqual(report["leaked_answers"], 0, p.stdout)
        self.assertEqual(round(report["worst_deviation_pp"], 1), 0.0, p.stdout)
        # About 80 % of the queries were for the tagged name, split evenly.
        total = sum(rows[c]["answers"] for c in rows)
        self.assertTrue(15000 < total < 17000, total)
        self.assertTrue(abs(rows["city-a"]["answers"] - rows["city-b"]["answers"]) < 0.1 * total, rows)

        # weir counted the same picks, address by address.
        m = fp.metrics()
        weir = {(l["partition"], l["address"]): int(v) for l, v in m.series("weir_answers_total")
                if l["name"] == QNAME + "."}
        self.assertEqual(weir, self.shares(report), m.text)
        # The subscribers' queries came from 8 addresses per city; the GSLB
        # saw one query per city (the probe's), then everything was cached.
        self.assertEqual(sim.stats()["by_qname_ecs"].get(QNAME + "."),
                         {"198.51.100.0/24": 1, "203.0.113.0/24": 1}, sim.stats())

    def test_file_weights_agree_and_text_report(self):
        sim, fp = self.start(RIGHT)
        report, p = self.run_bench("--server", f"{fp.host}:{fp.port}", "--citymap", self.files.citymap,
                                   "--tagged-name", QNAME, "--names", "0", "--weights", self.weights,
                                   "--count", "9000", "--city-share", "city-a=2,city-b=1",
                                   "--sources-per-city", "1", "--outstanding", "1", "--plot",
                                   os.path.join(self.tmp.name, "plots"))
        rows = {row["city"]: row for row in report["shares"]}
        self.assertEqual({c: r["weights_from"] for c, r in rows.items()}, {"city-a": "file", "city-b": "file"})
        # --city-share 2:1, split by SWRR over batches: exact to a batch.
        self.assertTrue(abs(rows["city-a"]["answers"] - 6000) <= 32, rows["city-a"]["answers"])
        self.assertEqual(round(report["worst_deviation_pp"], 1), 0.0, p.stdout)
        # One query at a time from one address per city: the picks arrive in
        # the server's order. Smooth WRR for 5:3:1 is a b a c a b a b a,
        # repeated: at most two of a in a row (across cycles); 1:1 alternates.
        self.assertEqual((rows["city-a"]["longest_run"], rows["city-a"]["longest_run_address"]), (2, CITY_A[0]))
        self.assertEqual(rows["city-b"]["longest_run"], 1, rows["city-b"])
        self.assertIn("city city-a", p.stdout)
        self.assertIn("weight   5 ->  55.56 %", p.stdout)
        self.assertIn("plots:", p.stdout)
        plots = os.listdir(os.path.join(self.tmp.name, "plots"))
        for want in ("latency_cdf.png", "latency_cdf.svg", "qps_p99.png", "qps_p99.svg"):
            self.assertIn(want, plots)
        self.assertEqual(len([f for f in plots if f.startswith("shares_") and f.endswith(".png")]), 2, plots)

    # ------------------------------------------------------------ the wrong GSLB

    def test_reports_cross_city_leak(self):
        sim, fp = self.start(WRONG)
        report, p = self.run_bench("--server", f"{fp.host}:{fp.port}", "--citymap", self.files.citymap,
                                   "--tagged-name", QNAME, "--names", "0", "--weights", self.weights,
                                   "--count", "4000")
        rows = {row["city"]: row for row in report["shares"]}
        self.assertEqual(report["answered"], 4000, p.stdout)
        # Every pick was the other city's node.
        for city in ("city-a", "city-b"):
            self.assertEqual(rows[city]["leaked_answers"], rows[city]["answers"], rows[city])
            self.assertGreater(rows[city]["answers"], 1000, rows[city])
        self.assertEqual(report["leaked_answers"], 4000, p.stdout)
        self.assertGreater(report["worst_deviation_pp"], 50, p.stdout)
        self.assertIn("4000 leaked answers", p.stdout)

    # ------------------------------------------------------------ load modes and transports

    def test_open_loop_rate_tcp_and_misses(self):
        sim, fp = self.start(RIGHT)
        report, p = self.run_bench("--server", f"{fp.host}:{fp.port}", "--names", "20", "--zone", "bench.test",
                                   "--rate", "2000", "--duration", "2", "--tcp-fraction", "0.25",
                                   "--miss-fraction", "0.1", "--ecs-fraction", "0.2", "--threads", "2")
        self.assertEqual(report["timeouts"], 0, p.stdout)
        self.assertTrue(3600 <= report["sent"] <= 4400, p.stdout)
        self.assertTrue(800 <= report["sent_tcp"] <= 1200, p.stdout)
        self.assertEqual(report["answered"], report["sent"], p.stdout)
        # Unique names miss every cache: the GSLB says NXDOMAIN for them.
        nx = report["rcodes"].get("NXDOMAIN", 0)
        self.assertTrue(0.07 * report["sent"] < nx < 0.13 * report["sent"], report["rcodes"])
        # One point per second, and one for the tail of late answers.
        self.assertIn(len(report["timeline"]), (2, 3), report["timeline"])
        self.assertEqual(sum(t["sent"] for t in report["timeline"]), report["sent"], report["timeline"])
        self.assertEqual(sum(t["answered"] for t in report["timeline"]), report["answered"], report["timeline"])
        m = fp.metrics()
        self.assertEqual(m.value("weir_queries_total"), report["sent"] + 1, "the run plus the preflight query")

    # ------------------------------------------------------------ bad input

    def test_unreachable_server_is_one_clear_error(self):
        port = weirtest.free_port()
        _, p = self.run_bench_raw("--server", f"127.0.0.1:{port}", "--timeout", "200", "--duration", "1")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(f"no answer from 127.0.0.1:{port}", p.stderr)

    def test_bad_input_exits_2_with_the_reason(self):
        bad_map = os.path.join(self.tmp.name, "bad.csv")
        with open(bad_map, "w") as f:
            f.write("127.1.0.0/16,city-a,198.51.100.0/24\nnot-a-cidr,city-b,\n")
        bad_queries = os.path.join(self.tmp.name, "bad.txt")
        with open(bad_queries, "w") as f:
            f.write("www.example.com A\nwww.example.com NOSUCHTYPE\n")
        cases = [
            (["--citymap", bad_map], "line 2"),
            (["--queries", bad_queries], "bad.txt:2: unknown type 'NOSUCHTYPE'"),
            (["--queries", os.path.join(self.tmp.name, "missing.txt")], "missing.txt"),
            (["--rate", "10", "--outstanding", "5"], "exclude each other"),
            (["--server", "300.1.1.1:53"], "--server"),
            (["--citymap", self.files.citymap, "--city-share", "city-z=1"], "no city 'city-z'"),
        ]
        for args, why in cases:
            _, p = self.run_bench_raw(*args)
            self.assertEqual(p.returncode, 2, f"{args}: {p.stderr}")
            self.assertIn(why, p.stderr, args)
            self.assertEqual(p.stdout, "", args)

    def test_help_documents_every_option(self):
        _, p = self.run_bench_raw("--help")
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "bench.md")) as f:
            doc = f.read()
        options = {re.match(r"--[a-z0-9-]+", w.split(",")[-1]).group(0) for w in p.stdout.split()
                   if re.match(r"(-[a-zA-Z],)?--[a-z]", w)}
        self.assertGreater(len(options), 30, p.stdout)
        for opt in options:
            self.assertIn(opt, doc, f"docs/bench.md does not mention {opt}")

    def run_bench_raw(self, *args):
        p = subprocess.run([self.bench, "--progress", "never", *args], capture_output=True, text=True, timeout=60)
        return None, p


if __name__ == "__main__":
    unittest.main()
