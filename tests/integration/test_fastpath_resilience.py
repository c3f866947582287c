"""Black-box tests of weir-fastpath's upstream side (docs/behaviour.md#the-front-cache): coalescing,
failover between recursors, serve-stale, anti-spoofing. gslb-sim and a
scripted fake upstream (fake_upstreams.py) stand in for the recursors.

Run: python3 tests/integration/test_fastpath_resilience.py --build-dir build
"""

import os
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import gslb_name, record, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
HERE = os.path.dirname(os.path.abspath(__file__))


COALESCE_ZONES = (zone("example.com.") + gslb_name("slow", latency_ms=500) +
                  record("slow", "A", "192.0.2.3", ttl=300))

FAILOVER_NAMES = 300


def failover_zones():
    # Many names with TTL 1: on the real clock each one expires every second,
    # so the front keeps asking its recursors during the whole run.
    return zone("fo.example.") + "".join(record(f"n{i}", "A", f"192.0.2.{i % 250 + 1}", ttl=1)
                                         for i in range(FAILOVER_NAMES))


STALE_ZONES = zone("example.com.") + record("www", "A", "192.0.2.1", ttl=60) + record("www", "A", "192.0.2.2", ttl=60)


def metric(fp, name, **labels):
    return fp.metrics().value(name, **labels)


class CoalescingTest(unittest.TestCase):
    def test_thousand_concurrent_identical_queries_make_one_upstream_query(self):
        weirtest.require_tools("dnsperf")
        with weirtest.GslbSim(BUILD_DIR, config_text=COALESCE_ZONES) as sim:
            up = f"{sim.host}:{sim.port}"
            with weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config([up], workers=2,
                                                                       upstream={"timeout_ms": 2000})) as fp:
                # 1,000 identical queries at once from 8 client sockets (so
                # both workers get some); the GSLB holds its answer 500 ms.
                res = weirtest.dnsperf(fp.host, fp.port, ["slow.example.com A"] * 1000,
                                       ["-n", "1", "-q", "1000", "-c", "8", "-t", "5", "-b", "1024"])
                self.assertEqual((res.sent, res.completed, res.lost), (1000, 1000, 0), res.text)
                self.assertEqual(res.rcodes, {"NOERROR": 1000}, res.text)
                stats = sim.stats()
                m = fp.metrics()
                counts = {k: m.value(k) for k in ("weir_cache_misses_total", "weir_cache_hits_total",
                                                  "weir_coalesced_total", "weir_upstream_queries_total")}
                # A second upstream query ~500 ms after the first means a miss
                # queued before the cache fill was drained by the forwarder
                # after the first query had completed (no in-flight entry left
                # to join, and the forwarder does not look at the cache).
                self.assertEqual(stats["by_qname_qtype"], {"slow.example.com.": {"A": 1}},
                                 f"the GSLB must see exactly one query: {stats}\nfront: {counts}\n"
                                 f"GSLB log: {sim.log(5)}")
                misses = m.value("weir_cache_misses_total")
                hits = m.value("weir_cache_hits_total")
                coalesced = m.value("weir_coalesced_total")
                self.assertEqual(m.value("weir_queries_total", transport="udp"), 1000, m.text)
                self.assertEqual(misses + hits, 1000, m.text)
                self.assertGreater(misses, 100, "the queries were not concurrent; the test proved nothing:\n"
                                   + m.text)
                self.assertEqual(coalesced, misses - 1, "every miss but the first joins the one in flight:\n"
                                 + m.text)
                self.assertEqual(m.value("weir_upstream_queries_total"), 1, m.text)
                self.assertEqual(m.value("weir_drops_total"), 0, m.text)


class FailoverTest(unittest.TestCase):
    def test_losing_one_recursor_under_load_fails_under_one_percent(self):
        weirtest.require_tools("dnsperf")
        zones = failover_zones()
        sim_a = weirtest.GslbSim(BUILD_DIR, config_text=zones)
        self.addCleanup(sim_a.stop)
        sim_b = weirtest.GslbSim(BUILD_DIR, config_text=zones)
        self.addCleanup(sim_b.stop)
        ups = [f"{sim_a.host}:{sim_a.port}", f"{sim_b.host}:{sim_b.port}"]
        config = weirtest.fastpath_config(ups, workers=2, upstream={
            "timeout_ms": 300, "attempts": 3, "health_failures": 3, "health_interval_ms": 1000})
        fp = weirtest.Fastpath(BUILD_DIR, config)
        self.addCleanup(fp.stop)

        queries = [f"n{i}.fo.example A" for i in range(FAILOVER_NAMES)]
        result = {}

        def load():
            result["r"] = weirtest.dnsperf(fp.host, fp.port, queries,
                                           ["-l", "10", "-Q", "500", "-c", "4", "-q", "200", "-t", "5"])

        t = threading.Thread(target=load)
        t.start()
        time.sleep(3)
        before_a = sim_a.stats()["queries"]
        before_b = sim_b.stats()["queries"]
        sim_b.stop()  # by PID
        t.join(timeout=60)
        self.assertFalse(t.is_alive(), "dnsperf did not finish")
        res = result["r"]
        after_a = sim_a.stats()["queries"]

        # Both recursors carried the load before; the survivor took over.
        self.assertGreater(before_a, 50, f"recursor A idle before the kill ({before_a})")
        self.assertGreater(before_b, 50, f"recursor B idle before the kill ({before_b})")
        # ~7 s of load after the kill, ~300 expiring names a second.
        self.assertGreater(after_a - before_a, 500,
                           f"recursor A got only {after_a - before_a} queries after B was killed")

        self.assertGreater(res.sent, 4000, res.text)  # 10 s at 500 qps
        servfail = res.rcodes.get("SERVFAIL", 0)
        failed = res.lost + servfail + res.interrupted
        self.assertLess(failed, res.sent / 100,
                        f"{res.lost} lost + {servfail} SERVFAIL of {res.sent} (must be < 1%):\n{res.text}")
        self.assertEqual(set(res.rcodes) - {"NOERROR", "SERVFAIL"}, set(), res.text)

        m = fp.metrics()
        self.assertEqual(m.value("weir_upstream_up", group="ordinary", upstream=ups[1]), 0,
                         "the killed recursor must be marked down:\n" + m.text)
        self.assertEqual(m.value("weir_upstream_up", group="ordinary", upstream=ups[0]), 1, m.text)
        self.assertGreater(m.value("weir_upstream_timeouts_total", group="ordinary", upstream=ups[1]), 0, m.text)


class ServeStaleTest(unittest.TestCase):
    def test_stale_answer_within_window_then_servfail(self):
        sim = weirtest.GslbSim(BUILD_DIR, config_text=STALE_ZONES)
        self.addCleanup(sim.stop)
        config = weirtest.fastpath_config(
            [f"{sim.host}:{sim.port}"],
            cache={"stale_window": 600, "stale_answer_ttl": 30, "prefetch_percent": 0},
            upstream={"timeout_ms": 200, "attempts": 2, "health_failures": 3})
        fp = weirtest.Fastpath(BUILD_DIR, config, test_clock=True)
        self.addCleanup(fp.stop)

        r = fp.dig("www.example.com")
        self.assertEqual(r.status, "NOERROR", r.text)
        fresh = sorted(r.addresses())
        self.assertEqual(fresh, ["192.0.2.1", "192.0.2.2"], r.text)
        self.assertEqual({a.ttl for a in r.answer}, {60}, r.text)

        sim.stop()  # every upstream is down now
        fp.advance_clock(61)  # expired 1 s ago, well inside the 600 s stale window
        stale_before = metric(fp, "weir_stale_served_total")
        r = fp.dig("www.example.com", timeout=3)
        self.assertEqual(r.status, "NOERROR", "expired entry inside stale_window must be served:\n" + r.text)
        self.assertEqual(sorted(r.addresses()), fresh, r.text)
        ttls = {a.ttl for a in r.answer}
        self.assertTrue(all(1 <= t <= 30 for t in ttls), f"stale TTL must be stale_answer_ttl (30) or less: "
                                                         f"{ttls}\n{r.text}")
        m = fp.metrics()
        self.assertEqual(m.value("weir_stale_served_total"), stale_before + 1, m.text)
        self.assertEqual(m.value("weir_error_responses_total", reason="upstream_failure"), 0, m.text)

        fp.advance_clock(600)  # now 601 s past expiry: outside the window
        r = fp.dig("www.example.com", timeout=3)
        self.assertEqual(r.status, "SERVFAIL", "past stale_window nothing may be served:\n" + r.text)
        self.assertEqual(r.answer, [], r.text)
        m = fp.metrics()
        self.assertEqual(m.value("weir_stale_served_total"), stale_before + 1, m.text)
        self.assertEqual(m.value("weir_error_responses_total", reason="upstream_failure"), 1, m.text)
        self.assertTrue(fp.alive())


class AntiSpoofingTest(unittest.TestCase):
    def test_forged_answers_are_dropped_and_counted(self):
        fake = weirtest.Process([sys.executable, os.path.join(HERE, "fake_upstreams.py"), "spoofing",
                                 "--answer", "192.0.2.10", "--poison", "192.0.2.66", "--delay-ms", "100"],
                                ready=r"^ready$")
        self.addCleanup(fake.stop)
        host, port = weirtest.split_hostport(fake.wait_line(r"^listening udp (\S+)").group(1))
        config = weirtest.fastpath_config([f"{host}:{port}"], upstream={"timeout_ms": 1500, "attempts": 1})
        fp = weirtest.Fastpath(BUILD_DIR, config)
        self.addCleanup(fp.stop)

        for attempt in ("miss", "hit"):
            r = fp.dig("www.example.com", timeout=3)
            self.assertEqual(r.status, "NOERROR", f"{attempt}:\n{r.text}")
            self.assertEqual(r.addresses(), ["192.0.2.10"], f"{attempt}: poisoned or lost answer:\n{r.text}")
        queries = [l for l in weirtest.collect_lines(fake) if l.startswith("query ")]
        self.assertEqual(len(queries), 1, f"the second query must be a cache hit: {queries}")
        # The name goes out in 0x20 case: compared without it.
        self.assertIn("qname=www.example.com. qtype=1", queries[0].lower())
        m = fp.metrics()
        self.assertEqual(m.value("weir_upstream_spoofed_total"), 3,
                         "wrong ID, wrong question and wrong source port must each be dropped:\n" + m.text)
        self.assertEqual(m.value("weir_cache_hits_total"), 1, m.text)
        self.assertEqual(m.value("weir_upstream_queries_total"), 1, m.text)


class InflightLimitTest(unittest.TestCase):
    """upstream.max_inflight / max_inflight_per_upstream: a question that
    would go past either is answered at once (SERVFAIL here: nothing stale),
    counted, and holds no socket; the questions already in flight go on."""

    def held_questions(self, fp, hole, count):
        # `count` distinct misses the blackholed recursor never answers; the
        # clients are not waited for.
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(client.close)
        for i in range(count):
            client.sendto(weirtest.make_query(f"held{i}.example.com", qid=i + 1), (fp.host, fp.port))
        self.assertTrue(weirtest.wait_until(lambda: metric(fp, "weir_upstream_queries_total") == count, 5.0),
                        fp.metrics().text)

    def over_limit_is_answered_at_once(self, fp, count):
        for i in range(count):
            start = time.monotonic()
            r = fp.dig(f"over{i}.example.com")
            elapsed = time.monotonic() - start
            self.assertEqual(r.status, "SERVFAIL", r.text)
            self.assertLess(elapsed, 1.0, f"over the limit must not wait for the deadline: {elapsed:.2f} s")

    def fastpath(self, hole, **upstream):
        up = f"127.0.0.1:{hole.getsockname()[1]}"
        keys = {"timeout_ms": 20000, "answer_deadline_ms": 20000, "attempts": 1}
        keys.update(upstream)
        return weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config([up], upstream=keys))

    def test_total_limit(self):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as hole:
            hole.bind(("127.0.0.1", 0))  # bound, never read: a blackhole
            with self.fastpath(hole, max_inflight=20) as fp:
                self.held_questions(fp, hole, 20)
                self.over_limit_is_answered_at_once(fp, 5)
                m = fp.metrics()
                self.assertEqual(m.value("weir_upstream_inflight_limited_total"), 5, m.text)
                self.assertEqual(m.value("weir_upstream_queries_total"), 20, m.text)
                # A question already in flight still takes more clients.
                r = fp.dig("held0.example.com", extra=["+time=1", "+tries=1"])
                self.assertEqual(metric(fp, "weir_coalesced_total"), 1, r.text)

    def test_per_upstream_limit(self):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as hole:
            hole.bind(("127.0.0.1", 0))
            with self.fastpath(hole, max_inflight_per_upstream=8) as fp:
                self.held_questions(fp, hole, 8)
                sockets_before = len(os.listdir(f"/proc/{fp.pid}/fd"))
                self.over_limit_is_answered_at_once(fp, 4)
                m = fp.metrics()
                self.assertEqual(m.value("weir_upstream_inflight_limited_total"), 4, m.text)
                self.assertEqual(m.value("weir_upstream_queries_total"), 8, m.text)
                # The metrics server closes its side of a scrape's connection
                # on its own threads, a moment later: wait for it (a socket
                # held by a refused question would stay for timeout_ms, 20 s).
                fds = lambda: len(os.listdir(f"/proc/{fp.pid}/fd"))  # noqa: E731
                self.assertTrue(weirtest.wait_until(lambda: fds() <= sockets_before, 3.0),
                                f"a refused question must not hold a socket: {fds()} > {sockets_before}")


if __name__ == "__main__":
    unittest.main()
