"""Black-box test of weighted answers at a carrier's scale (docs/behaviour.md#answering-by-weight):
gslb-sim is the GSLB with one view per city, weir-fastpath (one worker) the front, and one
weir-bench per city the subscribers, all five cities querying at once.

10,000 keys of 4 addresses (2,000 names x 5 cities, weights 4:3:2:1), 25 keys of 20 addresses
and 10 keys of 40 addresses (weights 1..9), each key queried a whole number of weight cycles in
random interleaved order: every city's share of every address must be its weight's share
(0 percentage points off on one worker), no subscriber given another city's address, and no
SWRR state forgotten.

Run: python3 tests/integration/test_fastpath_weights_scale.py --build-dir build
"""

import ipaddress
import json
import os
import random
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import gslb_name, no_empty_weight_option, view, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()

ZONE = "cdn.example.net."
# Five cities on loopback; each sends a documentation-range ECS source upstream.
CITIES = [(f"city-{c + 1}", f"127.{c + 1}.0.0/16", ecs) for c, ecs in enumerate(
    ["192.0.2.0/26", "192.0.2.64/26", "192.0.2.128/26", "192.0.2.192/26", "198.51.100.0/24"])]
SMALL_NAMES = 2000  # x 5 cities = 10,000 keys of 4 addresses
SMALL_WEIGHTS = [4, 3, 2, 1]
SMALL_CYCLES = 3  # 30 queries per key
LARGE = [(20, 5), (40, 2)]  # (addresses, names): 25 keys of 20, 10 of 40
# Answer data (never a destination): one distinct address per (name, city, slot).
DATA = ipaddress.ip_network("198.18.0.0/15")


def build_topology(rng):
    """The names, and for every (name, city) the addresses and weights."""
    names = []  # (name, [(addresses, weights) per city])
    next_address = [int(DATA.network_address) + 1]

    def addresses(n):
        out = [str(ipaddress.ip_address(next_address[0] + i)) for i in range(n)]
        next_address[0] += n
        return out

    for i in range(SMALL_NAMES):
        names.append((f"s{i}", [(addresses(4), SMALL_WEIGHTS) for _ in CITIES]))
    for size, count in LARGE:
        for i in range(count):
            names.append((f"l{size}-{i}", [(addresses(size), [rng.randint(1, 9) for _ in range(size)])
                                          for _ in CITIES]))
    return names


class FastpathWeightsAtScaleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.bench = weirtest.binary(BUILD_DIR, "bench/weir_bench/weir-bench")
        rng = random.Random(25)
        cls.names = build_topology(rng)
        cls.tmp = tempfile.TemporaryDirectory()
        citymap = "# cidr,city,ecs_address/prefix\n" + "".join(f"{cidr},{city},{ecs}\n" for city, cidr, ecs in CITIES)
        cls.files = weirtest.PartitionFiles(citymap, f"{ZONE.rstrip('.')} weight=on ecs=on answer=single level=city\n")

        zone_text = no_empty_weight_option() + zone(ZONE, rname="admin", minimum=30, ttl=60)
        weights = []
        for name, sets in cls.names:
            views = []
            for (city, _, ecs), (addrs, w) in zip(CITIES, sets):
                views.append(view(ecs, addrs, w, scope=int(ecs.split("/")[1])))
                weights += [f"{name}.{ZONE},{city},{a},{x}\n" for a, x in zip(addrs, w)]
            zone_text += gslb_name(name, *views, ttl=600)
        cls.zone_text = zone_text
        cls.weights = os.path.join(cls.tmp.name, "weights.csv")
        with open(cls.weights, "w") as f:
            f.writelines(weights)

        # Each city's query file: every name a whole number of its weight
        # cycles (30 queries for 4:3:2:1, one cycle of the large sets), in
        # random order: the keys of a city interleave, and the five cities'
        # processes interleave in the front's one worker.
        cls.queries = {}
        cls.lines = {}
        for c, (city, _, _) in enumerate(CITIES):
            lines = []
            for name, sets in cls.names:
                reps = sum(sets[c][1]) * (SMALL_CYCLES if len(sets[c][0]) == 4 else 1)
                lines += [f"{name}.{ZONE} A\n"] * reps
            rng.shuffle(lines)
            path = os.path.join(cls.tmp.name, f"queries-{city}.txt")
            with open(path, "w") as f:
                f.writelines(lines)
            cls.queries[city] = path
            cls.lines[city] = len(lines)

    @classmethod
    def tearDownClass(cls):
        cls.files.cleanup()
        cls.tmp.cleanup()

    def test_every_key_gets_its_shares_with_thousands_interleaved(self):
        sim = weirtest.GslbSim(BUILD_DIR, config_text=self.zone_text, seed=1)
        self.addCleanup(sim.stop)
        upstream = f"{sim.host}:{sim.port}"
        config = weirtest.fastpath_config([upstream], weighted=[upstream], workers=1, citymap=self.files.citymap,
                                          tags=self.files.tags, upstream={"timeout_ms": 1000})
        fp = weirtest.Fastpath(BUILD_DIR, config)
        self.addCleanup(fp.stop)

        procs = {}
        for city, _, _ in CITIES:
            out = os.path.join(self.tmp.name, f"run-{city}.json")
            argv = [self.bench, "--progress", "never", "--json", out, "--server", f"{fp.host}:{fp.port}",
                    "--citymap", self.files.citymap, "--city-share", f"{city}=1", "--sources-per-city", "8",
                    "--queries", self.queries[city], "--queries-weighted", "--weights", self.weights, "--no-probe",
                    "--count", str(self.lines[city]), "--outstanding", "20", "--timeout", "3000"]
            procs[city] = (subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), out,
                           argv)
        reports = {}
        for city, (p, out, argv) in procs.items():
            stdout, stderr = p.communicate(timeout=300)
            self.assertEqual(p.returncode, 0, f"{' '.join(argv)}\nstdout:\n{stdout}\nstderr:\n{stderr}")
            with open(out) as f:
                reports[city] = (json.load(f), stdout)

        keys = 0
        for city, (report, stdout) in reports.items():
            n = self.lines[city]
            self.assertEqual((report["sent"], report["answered"]), (n, n), f"{city}\n{stdout}")
            self.assertEqual(report["rcodes"], {"NOERROR": n}, f"{city}\n{stdout}")
            self.assertEqual(report["leaked_answers"], 0, f"{city}: given another city's address\n{stdout}")
            rows = [r for r in report["shares"] if r["city"] == city]
            self.assertEqual(len(rows), len(self.names), f"{city}: one share row per name")
            worst = max(rows, key=lambda r: r["max_deviation_pp"])
            self.assertLessEqual(worst["max_deviation_pp"], 0.5, f"{city}: worst key {json.dumps(worst)}")
            self.assertEqual(round(report["worst_deviation_pp"], 6), 0.0,
                             f"{city}: whole cycles on one worker are exact\n{json.dumps(worst)}")
            for r in rows:
                self.assertEqual(r["weights_from"], "file", r)
                self.assertEqual(r["leaked_answers"], 0, r)
            keys += len(rows)
        self.assertEqual(keys, len(self.names) * len(CITIES))
        self.assertGreaterEqual(keys, 10_000 + 25 + 10)

        m = fp.metrics()
        self.assertEqual(m.value("weir_swrr_evictions_total"), 0, "no SWRR state forgotten")
        self.assertEqual(m.value("weir_swrr_resets_total"), 0, "no set changed")
        self.assertEqual(m.value("weir_swrr_states"), keys, "one state per (name, city)")
        # Each key was fetched once, with its city's ECS source; the 40-address
        # answers (1.6 KB, gslb-sim does not compress) came truncated over UDP
        # and were asked again over TCP.
        stats = sim.stats()
        want = {}
        for name, sets in self.names:
            tries = 2 if len(sets[0][0]) == 40 else 1
            want[f"{name}.{ZONE}"] = {ecs: tries for _, _, ecs in CITIES}
        self.assertEqual(stats["by_qname_ecs"], want)
        self.assertEqual(stats["queries"], keys + 10)


if __name__ == "__main__":
    unittest.main()
