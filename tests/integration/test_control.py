"""Black-box tests of the control channel (docs/operator-guide.md#cache-control):
the real weirctl drives weir-fastpath over its unix socket and TCP, and every
node through weir-mgmt (weirctl --all). gslb-sim is the upstream; its per-name
and per-ECS query counts prove what a flush made the fastpath fetch again, and
what stayed a cache hit, while dnsperf keeps the fastpath busy.

Run: python3 tests/integration/test_control.py --build-dir build
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import gslb_name, no_empty_weight_option, record, view, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
WEIRCTL = weirtest.binary(BUILD_DIR, "mgmt/weirctl")

CITY_A = ["192.0.2.11", "192.0.2.12", "192.0.2.13"]
CITY_A_WEIGHTS = [5, 3, 1]
CITY_B = ["192.0.2.21", "192.0.2.22"]
CITY_B_WEIGHTS = [1, 1]

ZONES = (no_empty_weight_option() + zone("cdn.example.net.", rname="admin", minimum=30, ttl=600) +
         gslb_name("x", view("198.51.100.0/24", CITY_A, CITY_A_WEIGHTS, scope=24),
                   view("203.0.113.0/24", CITY_B, CITY_B_WEIGHTS, scope=24), ttl=600) +
         gslb_name("y", view("198.51.100.0/24", CITY_A, CITY_A_WEIGHTS, scope=24),
                   view("203.0.113.0/24", CITY_B, CITY_B_WEIGHTS, scope=24), ttl=600) +
         zone("example.com.", ttl=600) + record("www", "A", "192.0.2.1", ttl=600) +
         record("a", "A", "192.0.2.2", ttl=600) + record("b", "A", "192.0.2.3", ttl=600) +
         record("s1.sub", "A", "192.0.2.4", ttl=600) + record("s2.sub", "A", "192.0.2.5", ttl=600) +
         record("a", "AAAA", "2001:db8::2", ttl=600))

CITYMAP = """\
# cidr,city,ecs_address/prefix
127.1.0.0/16,city-a,198.51.100.0/24
127.2.0.0/16,city-b,203.0.113.0/24
"""
TAGS = "cdn.example.net weight=on ecs=on answer=single level=city\n"

PLAIN = ["www.example.com", "a.example.com", "b.example.com", "s1.sub.example.com", "s2.sub.example.com"]
WEIGHTED = ["x.cdn.example.net", "y.cdn.example.net"]
SOURCE_A, SOURCE_B = "127.1.0.5", "127.2.0.5"


def weirctl(*args, control=None, json_out=False, extra=(), timeout=30):
    argv = [WEIRCTL] + (["-C", control] if control else []) + list(extra) + list(args)
    if json_out:
        argv.append("--json")
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def ok_json(r):
    if r.returncode != 0:
        raise AssertionError(f"weirctl rc {r.returncode}: {r.stderr}{r.stdout}")
    return json.loads(r.stdout)


class Load:
    """dnsperf from one source over `names` for `seconds`, in a thread."""

    def __init__(self, server, port, names, source, seconds=4, qps=1500):
        self.result = None
        queries = [f"{n} A" for n in names]
        self.thread = threading.Thread(target=self._run, args=(server, port, queries, source, seconds, qps))
        self.thread.start()

    def _run(self, server, port, queries, source, seconds, qps):
        self.result = weirtest.dnsperf(server, port, queries, ["-l", str(seconds), "-Q", str(qps), "-t", "2"],
                                       source=source, timeout=seconds + 60)

    def join(self):
        self.thread.join()
        return self.result


class FastpathControlTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig", "dnsperf")
        cls.files = weirtest.PartitionFiles(CITYMAP, TAGS)

    @classmethod
    def tearDownClass(cls):
        cls.files.cleanup()

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES, seed=1)
        self.addCleanup(self.sim.stop)
        self.socket = os.path.join(self.tmp.name, "fp.ctl")
        self.fp = self.start_fastpath(workers=2)

    def start_fastpath(self, workers, control_extra=None):
        upstream = f"{self.sim.host}:{self.sim.port}"
        config = weirtest.fastpath_config([upstream], weighted=[upstream], workers=workers,
                                          citymap=self.files.citymap, tags=self.files.tags,
                                          upstream={"timeout_ms": 1000},
                                          control={"socket": self.socket, **(control_extra or {})})
        fp = weirtest.Fastpath(BUILD_DIR, config, test_clock=True)
        self.addCleanup(fp.stop)
        return fp

    def ctl(self, *args, **kw):
        return weirctl(*args, control=self.socket, **kw)

    def warm(self):
        for name in PLAIN:
            self.assertTrue(self.fp.dig(name).addresses(), name)
        for src in (SOURCE_A, SOURCE_B):
            for name in WEIGHTED:
                self.assertTrue(self.fp.dig(name, source=src).addresses(), (name, src))
        self.sim.reset()  # from here on, the sim counts only what the fastpath fetches again

    def upstream_counts(self):
        """{qname: count} and {qname: {ecs: count}} of what the sim received since the reset."""
        st = json.loads(self.sim.control("stats"))
        by_name = {q.rstrip("."): sum(t.values()) for q, t in st["by_qname_qtype"].items()}
        by_ecs = {q.rstrip("."): e for q, e in st["by_qname_ecs"].items()}
        return by_name, by_ecs

    def flush_under_load(self, *flush_args):
        """Flushes while dnsperf asks every name from both cities; returns
        (weirctl reply, upstream counts by name, by name and ECS)."""
        loads = [Load(self.fp.host, self.fp.port, PLAIN + WEIGHTED, src) for src in (SOURCE_A, SOURCE_B)]
        time.sleep(1.5)
        reply = ok_json(self.ctl("cache", "flush", *flush_args, json_out=True))
        results = [l.join() for l in loads]
        for r in results:
            self.assertIsNotNone(r)
            self.assertGreater(r.completed, 1000, "the load did not run")
            self.assertEqual(r.lost, 0, "queries lost while flushing")
        by_name, by_ecs = self.upstream_counts()
        return reply, by_name, by_ecs

    # ------------------------------------------------------------ flush

    def test_flush_one_name_under_load(self):
        self.warm()
        reply, by_name, _ = self.flush_under_load("a.example.com")
        self.assertEqual(reply["flushed"], 1)
        # The flushed name was fetched again once; every other name stayed a hit.
        self.assertEqual(by_name, {"a.example.com": 1})
        dump = ok_json(self.ctl("cache", "dump", json_out=True))
        self.assertEqual(dump["count"], len(PLAIN) + 2 * len(WEIGHTED))

    def test_flush_one_type_only(self):
        self.assertTrue(self.fp.dig("a.example.com", "AAAA").answer)
        self.warm()
        reply = ok_json(self.ctl("cache", "flush", "a.example.com", "--type", "AAAA", json_out=True))
        self.assertEqual(reply["flushed"], 1)
        self.fp.dig("a.example.com", "A")
        self.fp.dig("a.example.com", "AAAA")
        by_name, _ = self.upstream_counts()
        self.assertEqual(by_name, {"a.example.com": 1})  # the AAAA only
        st = json.loads(self.sim.control("stats"))
        self.assertEqual(st["by_qname_qtype"]["a.example.com."], {"AAAA": 1})

    def test_flush_suffix_under_load(self):
        self.warm()
        reply, by_name, _ = self.flush_under_load("sub.example.com", "--suffix")
        self.assertEqual(reply["flushed"], 2)
        self.assertEqual(by_name, {"s1.sub.example.com": 1, "s2.sub.example.com": 1})

    def test_flush_partition_under_load(self):
        self.warm()
        reply, by_name, by_ecs = self.flush_under_load("--partition", "city-a")
        self.assertEqual(reply["flushed"], len(WEIGHTED))  # city-a's copies of x and y
        # Only city A's copies were fetched again (with city A's ECS); city
        # B's and the plain names stayed hits.
        self.assertEqual(by_name, {n: 1 for n in WEIGHTED})
        for n in WEIGHTED:
            self.assertEqual(by_ecs[n], {"198.51.100.0/24": 1}, n)
        stats = ok_json(self.ctl("cache", "stats", json_out=True))
        self.assertEqual({p["partition"]: p["flushed"] for p in stats["partitions"]},
                         {"common": 0, "city-a": 2, "city-b": 0})
        self.assertEqual(stats["flushed"], 2)
        self.assertEqual(stats["evictions"], 0)
        m = self.fp.metrics()
        self.assertEqual(m.value("weir_cache_flushed_total", partition="city-a"), 2)
        self.assertEqual(m.value("weir_cache_flushed_total", partition="city-b"), 0)

    def test_flush_everything_and_nothing(self):
        self.warm()
        self.assertEqual(ok_json(self.ctl("cache", "flush", "nothing.example.org", json_out=True))["flushed"], 0)
        self.assertEqual(ok_json(self.ctl("cache", "flush", ".", "--suffix", json_out=True))["flushed"],
                         len(PLAIN) + 2 * len(WEIGHTED))
        self.assertEqual(ok_json(self.ctl("cache", "dump", json_out=True))["count"], 0)

    # ------------------------------------------------------------ dump

    def test_dump_shows_weights_and_swrr_state(self):
        # One UDP worker: every answer comes from its SWRR sequence. The TCP
        # thread (slot 1) has not answered the name.
        self.fp.stop()
        self.fp = self.start_fastpath(workers=1)
        got = [self.fp.dig("x.cdn.example.net", source=SOURCE_A).addresses()[0] for _ in range(3)]
        # nginx smooth WRR over 5,3,1: .11, .12, .11; current after 3 picks: -3, 0, 3.
        self.assertEqual(got, [CITY_A[0], CITY_A[1], CITY_A[0]])
        dump = ok_json(self.ctl("cache", "dump", "--name", "x.cdn.example.net", "--partition", "city-a",
                                json_out=True))
        self.assertEqual(dump["count"], 1)
        e = dump["entries"][0]
        self.assertEqual((e["name"], e["type"], e["partition"], e["level"], e["kind"], e["origin"]),
                         ("x.cdn.example.net.", "A", "city-a", "city", "positive", "fetched"))
        self.assertTrue(e["weighted"])
        self.assertEqual(e["ttl"], 600)
        self.assertEqual(e["ttl_left"], 600)
        self.assertEqual([(a["address"], a["weight"]) for a in e["addresses"]], list(zip(CITY_A, CITY_A_WEIGHTS)))
        self.assertEqual([a["swrr_current"] for a in e["addresses"]], [[-3, None], [0, None], [3, None]])
        # One worker: its column and the TCP thread's (it answers too), not a second worker's.
        self.assertEqual(dump["workers"], 1)
        self.assertEqual(dump["swrr_threads"], ["w0", "tcp"])
        self.assertEqual(dump["swrr_threads_answered"], 2)
        # TTL left follows the (test) clock; past the TTL the entry is stale.
        self.fp.advance_clock(100)
        e = ok_json(self.ctl("cache", "dump", "--name", "x.cdn.example.net", json_out=True))["entries"][0]
        self.assertEqual(e["ttl_left"], 500)
        self.fp.advance_clock(600)
        e = ok_json(self.ctl("cache", "dump", "--name", "x.cdn.example.net", json_out=True))["entries"][0]
        self.assertEqual((e["ttl_left"], e["stale_for"], e["origin"]), (0, 100, "stale"))
        # The text form shows the same.
        text = self.ctl("cache", "dump", "--name", "x.cdn.example.net").stdout
        self.assertIn("192.0.2.11 weight 5 swrr w0=-3 tcp=-\n", text)
        self.assertNotIn(" w1=", text)
        self.assertIn("stale 100s", text)

    def test_dump_filters_and_limit(self):
        self.warm()
        d = ok_json(self.ctl("cache", "dump", "--name", "example.com", "--suffix", json_out=True))
        self.assertEqual(sorted(e["name"] for e in d["entries"]), sorted(n + "." for n in PLAIN))
        d = ok_json(self.ctl("cache", "dump", "--partition", "city-b", json_out=True))
        self.assertEqual(sorted(e["name"] for e in d["entries"]), sorted(n + "." for n in WEIGHTED))
        self.assertEqual({a["address"] for e in d["entries"] for a in e["addresses"]}, set(CITY_B))
        self.assertTrue(self.fp.dig("a.example.com", "AAAA").answer)
        d = ok_json(self.ctl("cache", "dump", "--type", "AAAA", json_out=True))
        self.assertEqual([(e["name"], e["type"]) for e in d["entries"]], [("a.example.com.", "AAAA")])
        d = ok_json(self.ctl("cache", "dump", "--limit", "2", json_out=True))
        self.assertEqual((d["count"], d["truncated"]), (2, True))

    # ------------------------------------------------------------ the other commands

    def test_stats_upstreams_partitions(self):
        self.warm()
        for _ in range(3):
            self.fp.dig("x.cdn.example.net", source=SOURCE_A)
        stats = ok_json(self.ctl("stats", json_out=True))
        queries = sum(s["value"] for s in stats if s["name"] == "weir_queries_total")
        self.assertEqual(queries, len(PLAIN) + 2 * len(WEIGHTED) + 3)
        table = self.ctl("stats").stdout
        self.assertRegex(table, r"weir_queries_total\{transport=udp\}\s+12\n")
        ups = ok_json(self.ctl("upstreams", json_out=True))["upstreams"]
        self.assertEqual({u["group"] for u in ups}, {"ordinary", "weighted"})
        for u in ups:
            self.assertTrue(u["up"])
            self.assertAlmostEqual(u["ring_share"], 1.0)
        self.assertEqual(next(u for u in ups if u["group"] == "ordinary")["queries"], len(PLAIN))
        parts = {p["partition"]: p for p in ok_json(self.ctl("partitions", json_out=True))["partitions"]}
        self.assertEqual(parts["city-a"]["ecs_v4"], "198.51.100.0/24")
        self.assertEqual(parts["city-a"]["prefixes"], 1)
        self.assertEqual((parts["city-a"]["lookups"], parts["city-a"]["hits"]), (5, 3))
        self.assertEqual((parts["city-b"]["lookups"], parts["city-b"]["hits"]), (2, 0))
        self.assertEqual(parts["common"]["entries"], len(PLAIN))

    def test_reload_through_the_channel(self):
        with open(self.files.tags) as f:
            original = f.read()

        def restore():
            with open(self.files.tags, "w") as f:
                f.write(original)
        self.addCleanup(restore)
        with open(self.files.tags, "w") as f:
            f.write(original + "example.com weight=on\n")
        r = self.ctl("reload")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.files.tags, "w") as f:
            f.write("example.com bogus=1\n")
        r = self.ctl("reload")
        self.assertEqual(r.returncode, 1)
        self.assertIn("bogus", r.stderr)
        self.assertTrue(self.fp.dig("x.cdn.example.net", source=SOURCE_A).addresses())

    def test_errors(self):
        for args, message in ((("cache", "flush"), "flush what?"),
                              (("cache", "flush", "x", "--partition", "atlantis"), "no partition 'atlantis'"),
                              (("cache", "flush", "x", "--type", "BOGUS"), "unknown type 'BOGUS'"),
                              (("cache", "flush", "bad..name"), "not a domain name"),
                              # A subnet partition is one /24: a wider prefix is refused, not half done.
                              (("cache", "flush", "--partition", "127.0.0.0/8"), "a subnet partition is one /24")):
            r = self.ctl(*args)
            self.assertEqual(r.returncode, 1, args)
            self.assertIn(message, r.stderr)
            r = self.ctl(*args, json_out=True)
            self.assertEqual(json.loads(r.stdout)["exit_code"], 1)
        for args, message in ((("--all", "reload"), "--all reload"), (("--kind", "fastpath", "stats"), "--kind applies")):
            r = weirctl(*args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(message, r.stderr)
        r = weirctl("stats", control=os.path.join(self.tmp.name, "nothing.ctl"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot reach the node's control channel", r.stderr)

    def test_tcp_channel_needs_the_token(self):
        token = os.path.join(self.tmp.name, "token")
        with open(token, "w") as f:
            f.write("control-token-0123456789\n")
        wrong = os.path.join(self.tmp.name, "wrong")
        with open(wrong, "w") as f:
            f.write("another-token-0123456789\n")
        self.fp.stop()
        fp = self.start_fastpath(workers=1, control_extra={"listen": "127.0.0.1:0", "token_file": token})
        line = next(l for l in fp.process.lines if l.startswith("control tcp "))
        address = line.split()[2]
        r = weirctl("cache", "stats", control=address, extra=["--token-file", token], json_out=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("entries", json.loads(r.stdout))
        r = weirctl("cache", "stats", control=address, extra=["--token-file", wrong])
        self.assertEqual(r.returncode, 1)
        self.assertIn("bad token", r.stderr)


class FanOutTest(unittest.TestCase):
    """weirctl --all through weir-mgmt: every node answers, one result each."""

    def setUp(self):
        weirtest.require_tools("dig")
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.files = weirtest.PartitionFiles(CITYMAP, TAGS)
        self.addCleanup(self.files.cleanup)
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES, seed=1)
        self.addCleanup(self.sim.stop)
        self.mgmt = weirtest.Mgmt(BUILD_DIR, self.tmp.name)
        self.addCleanup(self.mgmt.stop)
        self.assertEqual(self.mgmt.weirctl("citymap", "import", self.files.citymap).returncode, 0)
        r = self.mgmt.weirctl("tag", "import", self.files.tags)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.version = self.mgmt.weirctl_json("status")["version"]
        upstream = f"{self.sim.host}:{self.sim.port}"
        self.fastpaths = []
        for i in (1, 2):
            state = os.path.join(self.tmp.name, f"fp{i}")
            config = weirtest.fastpath_config([upstream], weighted=[upstream], workers=1,
                                              control={"socket": os.path.join(self.tmp.name, f"fp{i}.ctl")})
            config += weirtest.mgmt_node_section(self.mgmt.address, f"fp{i}", self.mgmt.token_file, state)
            fp = weirtest.Fastpath(BUILD_DIR, config)
            self.addCleanup(fp.stop)
            self.fastpaths.append(fp)
            self.mgmt.wait_in_sync(f"fp{i}", self.version)
        config = weirtest.recursor_config(forwarders=[upstream],
                                          control={"socket": os.path.join(self.tmp.name, "rec.ctl")})
        config += weirtest.mgmt_node_section(self.mgmt.address, "rec1", self.mgmt.token_file,
                                             os.path.join(self.tmp.name, "rec1"))
        self.recursor = weirtest.Recursor(BUILD_DIR, config)
        self.addCleanup(self.recursor.stop)
        self.mgmt.wait_in_sync("rec1", self.version)

    def test_flush_reaches_two_fastpaths_and_a_recursor(self):
        for fp in self.fastpaths:
            self.assertTrue(fp.dig("www.example.com").addresses())
        self.assertTrue(self.recursor.dig("www.example.com").addresses())
        self.assertTrue(self.recursor.dig("b.example.com").addresses())
        self.sim.reset()
        r = self.mgmt.weirctl("--all", "cache", "flush", "www.example.com", json_out=True)
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        out = {n["node"]: n for n in json.loads(r.stdout)["nodes"]}
        self.assertEqual(set(out), {"fp1", "fp2", "rec1"})
        self.assertEqual((out["rec1"]["kind"], out["fp1"]["kind"]), ("recursor", "fastpath"))
        for node in out.values():
            self.assertTrue(node["ok"], node)
            self.assertGreaterEqual(node["result"]["flushed"], 1, node)
        dump = ok_json(weirctl("cache", "dump", "--name", "www.example.com",
                               control=os.path.join(self.tmp.name, "rec.ctl"), json_out=True))
        self.assertEqual(dump["count"], 0)
        dump = ok_json(weirctl("cache", "dump", "--name", "b.example.com",
                               control=os.path.join(self.tmp.name, "rec.ctl"), json_out=True))
        self.assertEqual(dump["count"], 1)
        # Each node fetches the flushed name again; the other name stays cached.
        for fp in self.fastpaths:
            self.assertTrue(fp.dig("www.example.com").addresses())
        self.assertTrue(self.recursor.dig("www.example.com").addresses())
        self.assertTrue(self.recursor.dig("b.example.com").addresses())
        by_name = {q.rstrip("."): sum(t.values())
                   for q, t in json.loads(self.sim.control("stats"))["by_qname_qtype"].items()}
        self.assertNotIn("b.example.com", by_name)
        # The two fastpaths asked again; the recursor's own caches lost the
        # name (its dump no longer lists it before the new query), and its
        # answer came from libunbound's cache, which no flush reaches.
        self.assertEqual(by_name.get("www.example.com"), 2)
        text = self.mgmt.weirctl("--all", "stats").stdout
        for node in ("fp1 (fastpath)", "fp2 (fastpath)", "rec1 (recursor)"):
            self.assertIn(f"== {node}: ok", text)


    def test_flush_reaches_every_fastpath(self):
        for fp in self.fastpaths:
            self.assertTrue(fp.dig("www.example.com").addresses())
            self.assertTrue(fp.dig("x.cdn.example.net", source=SOURCE_A).addresses())
        r = self.mgmt.weirctl("--all", "--kind", "fastpath", "cache", "flush", "www.example.com", json_out=True)
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        out = json.loads(r.stdout)
        self.assertEqual({n["node"]: (n["ok"], n["result"]["flushed"]) for n in out["nodes"]},
                         {"fp1": (True, 1), "fp2": (True, 1)})
        text = self.mgmt.weirctl("--all", "--kind", "fastpath", "cache", "dump").stdout
        self.assertIn("== fp1 (fastpath): ok", text)
        self.assertIn("== fp2 (fastpath): ok", text)
        self.assertNotIn("www.example.com.", text)
        self.assertEqual(text.count("x.cdn.example.net."), 4)  # table + details, on each node

    def test_a_node_that_is_down_is_reported(self):
        self.fastpaths[1].stop()
        time.sleep(0.5)
        r = self.mgmt.weirctl("--all", "cache", "stats", json_out=True)
        self.assertEqual(r.returncode, 1)
        out = {n["node"]: n for n in json.loads(r.stdout)["nodes"]}
        self.assertTrue(out["fp1"]["ok"])
        self.assertFalse(out["fp2"]["ok"])
        self.assertIn("not connected", out["fp2"]["error"])
        # A retired node is forgotten (a connected one is not), and --all succeeds again.
        r = self.mgmt.weirctl("nodes", "rm", "fp1")
        self.assertEqual(r.returncode, 1)
        self.assertIn("is connected", r.stderr)
        self.assertEqual(self.mgmt.weirctl("nodes", "rm", "nosuch").returncode, 1)
        r = self.mgmt.weirctl("nodes", "rm", "fp2")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.mgmt.weirctl("--all", "cache", "stats", json_out=True)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertNotIn("fp2", {n["node"] for n in json.loads(r.stdout)["nodes"]})
        # A node's refusal comes back per node too.
        r = self.mgmt.weirctl("--all", "--kind", "fastpath", "cache", "flush", "x", "--partition", "atlantis",
                              json_out=True)
        self.assertEqual(r.returncode, 1)
        fp1 = next(n for n in json.loads(r.stdout)["nodes"] if n["node"] == "fp1")
        self.assertIn("no partition 'atlantis'", fp1["error"])


if __name__ == "__main__":
    unittest.main()
