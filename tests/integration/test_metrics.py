"""Black-box tests of the Prometheus endpoints of weir-fastpath,
weir-recursor and weir-mgmt: what promtool (Prometheus' own checker) says of
each exposition, HEAD, 404/405, that idle connections cannot delay a scrape,
the process and build families every daemon has, and that what a daemon
does shows in its counters.

Run: python3 tests/integration/test_metrics.py --build-dir build
"""

import concurrent.futures
import http.client
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import default, gslb_name, no_empty_weight_option, record, view, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()

ZONES = (no_empty_weight_option() + zone("cdn.example.net.", rname="admin", minimum=30, ttl=60) +
         gslb_name("x", view("198.51.100.0/24", ["192.0.2.11", "192.0.2.12"], [3, 1], scope=24),
                   view("203.0.113.0/24", ["192.0.2.21"], [1], scope=24), ttl=300) +
         zone("example.com.") + record("www", "A", "192.0.2.1", ttl=300))
CITYMAP = """\
# cidr,city,ecs_address/prefix
127.1.0.0/16,city-a,198.51.100.0/24
127.2.0.0/16,city-b,203.0.113.0/24
"""
TAGS = "cdn.example.net weight=on ecs=on answer=single level=city\n"


PROCESS_FAMILIES = ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
                    "process_open_fds", "process_max_fds", "process_start_time_seconds")


ALLOCATOR_FAMILIES = ("weir_allocator_allocated_bytes", "weir_allocator_active_bytes",
                      "weir_allocator_resident_bytes", "weir_allocator_mapped_bytes")


def built_with_jemalloc():
    """WEIR_JEMALLOC of the build under test, from its CMake cache."""
    try:
        with open(os.path.join(BUILD_DIR, "CMakeCache.txt")) as f:
            return any(line.strip() in ("WEIR_JEMALLOC:BOOL=ON", "WEIR_JEMALLOC:BOOL=TRUE") for line in f)
    except OSError:
        return False


class EndpointChecks:
    """The checks every daemon's endpoint passes; a subclass sets
    `self.daemon` (with metrics_host/metrics_port) in setUpClass and
    DAEMON, the name weir_build_info carries."""

    DAEMON = ""
    JEMALLOC = False  # linked with jemalloc when the build has WEIR_JEMALLOC

    def request(self, method, path, timeout=5.0):
        """(status, headers, body) of one request with Python's http.client."""
        conn = http.client.HTTPConnection(self.daemon.metrics_host, self.daemon.metrics_port, timeout=timeout)
        try:
            conn.request(method, path)
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            conn.close()

    def scrape(self):
        status, headers, body = self.request("GET", "/metrics")
        self.assertEqual(status, 200, body)
        self.assertEqual(headers.get("Content-Type"), "text/plain; version=0.0.4; charset=utf-8")
        return weirtest.Metrics(body.decode())

    def assert_promtool_accepts(self, body: bytes):
        r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=30)
        self.assertEqual((r.returncode, r.stdout.decode(), r.stderr.decode()), (0, "", ""), body.decode())

    def test_promtool_accepts_the_exposition(self):
        status, _, body = self.request("GET", "/metrics")
        self.assertEqual(status, 200)
        self.assert_promtool_accepts(body)

    def test_process_and_build_families(self):
        m = self.scrape()
        for family in PROCESS_FAMILIES:
            self.assertEqual(len(m.series(family)), 1, family)
        self.assertGreater(m.value("process_resident_memory_bytes"), 1 << 20)
        self.assertGreaterEqual(m.value("process_virtual_memory_bytes"), m.value("process_resident_memory_bytes"))
        self.assertGreater(m.value("process_open_fds"), 3)
        self.assertGreaterEqual(m.value("process_max_fds"), m.value("process_open_fds"))
        # Clock ticks: a daemon that has just started may have used none yet.
        self.assertGreaterEqual(m.value("process_cpu_seconds_total"), 0)
        self.assertLess(m.value("process_cpu_seconds_total"), 600)
        # Started within the last minute, by the wall clock.
        self.assertLess(abs(time.time() - m.value("process_start_time_seconds")), 60)
        info = m.series("weir_build_info")
        self.assertEqual(len(info), 1, info)
        labels, value = info[0]
        self.assertEqual(value, 1)
        self.assertEqual(labels["daemon"], self.DAEMON)
        self.assertRegex(labels["version"], r"^\d+\.\d+\.\d+$")
        self.assertTrue(labels["commit"], labels)

    def test_allocator_families(self):
        m = self.scrape()
        if not (self.JEMALLOC and built_with_jemalloc()):
            for family in ALLOCATOR_FAMILIES + ("weir_allocator_info",):
                self.assertEqual(m.series(family), [], family)
            return
        for family in ALLOCATOR_FAMILIES:
            self.assertEqual(len(m.series(family)), 1, family)
        info = m.series("weir_allocator_info")
        self.assertEqual(len(info), 1, info)
        self.assertEqual(info[0][0]["allocator"], "jemalloc")
        self.assertTrue(info[0][0]["version"], info)
        allocated = m.value("weir_allocator_allocated_bytes")
        self.assertGreater(allocated, 0)
        self.assertLessEqual(allocated, m.value("weir_allocator_active_bytes"))
        self.assertLessEqual(m.value("weir_allocator_active_bytes"), m.value("weir_allocator_mapped_bytes"))
        # The heap is part of the process: its resident pages are (about) in
        # the RSS read a moment later in the same scrape.
        self.assertGreater(m.value("weir_allocator_resident_bytes"), 0)
        self.assertLessEqual(m.value("weir_allocator_resident_bytes"),
                             m.value("process_resident_memory_bytes") * 1.1 + (1 << 20))

    def test_head_is_200_without_a_body(self):
        status, headers, body = self.request("HEAD", "/metrics")
        self.assertEqual(status, 200)
        self.assertTrue(headers.get("Content-Type", "").startswith("text/plain; version=0.0.4"))
        self.assertEqual(body, b"")
        # On the wire too: nothing after the header block.
        with socket.create_connection((self.daemon.metrics_host, self.daemon.metrics_port), timeout=5) as s:
            s.sendall(b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            raw = b""
            while chunk := s.recv(65536):
                raw += chunk
        head, sep, rest = raw.partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 200"), raw)
        self.assertEqual((sep, rest), (b"\r\n\r\n", b""), raw)

    def test_other_paths_404_other_methods_405(self):
        self.assertEqual(self.request("GET", "/")[0], 404)
        self.assertEqual(self.request("GET", "/metrics/x")[0], 404)
        self.assertEqual(self.request("GET", "/test/advance-clock?seconds=5")[0], 404)  # no --test-clock
        status, headers, _ = self.request("POST", "/metrics")
        self.assertEqual(status, 405)
        self.assertEqual(headers.get("Allow"), "GET, HEAD")
        self.assertEqual(self.request("DELETE", "/metrics")[0], 405)

    def test_idle_connections_do_not_delay_scrapes(self):
        idle = []
        try:
            for i in range(50):
                s = socket.create_connection((self.daemon.metrics_host, self.daemon.metrics_port), timeout=5)
                if i % 2:
                    s.sendall(b"GET /metr")  # half a request line, never finished
                idle.append(s)

            def scrape(_):
                start = time.monotonic()
                status, _, body = self.request("GET", "/metrics", timeout=5)
                return status, len(body), time.monotonic() - start

            with concurrent.futures.ThreadPoolExecutor(5) as pool:
                results = list(pool.map(scrape, range(5)))
            for status, size, took in results:
                self.assertEqual(status, 200)
                self.assertGreater(size, 0)
                self.assertLess(took, 1.0, results)
        finally:
            for s in idle:
                s.close()


class FastpathMetricsTest(EndpointChecks, unittest.TestCase):
    DAEMON = "weir-fastpath"

    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig", "promtool")
        cls.files = weirtest.PartitionFiles(CITYMAP, TAGS)
        cls.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES, seed=1)
        upstream = f"{cls.sim.host}:{cls.sim.port}"
        config = weirtest.fastpath_config([upstream], weighted=[upstream], workers=2, citymap=cls.files.citymap,
                                          tags=cls.files.tags, upstream={"timeout_ms": 1000})
        cls.fp = cls.daemon = weirtest.Fastpath(BUILD_DIR, config)
        # Weighted answers in two cities, an untagged name and an NXDOMAIN,
        # so the partition, weighted-answer and rcode families have samples.
        for src in ("127.1.0.10", "127.2.0.20"):
            weirtest.dig_many(cls.fp.host, cls.fp.port, "x.cdn.example.net", 5, source=src)
        weirtest.dig_many(cls.fp.host, cls.fp.port, "www.example.com", 3)
        weirtest.dig(cls.fp.host, cls.fp.port, "missing.example.com")

    @classmethod
    def tearDownClass(cls):
        cls.fp.stop()
        cls.sim.stop()
        cls.files.cleanup()

    def test_families_the_queries_filled(self):
        status, _, body = self.request("GET", "/metrics")
        self.assertEqual(status, 200)
        text = body.decode()
        m = weirtest.Metrics(text)
        answers = {(l["name"], l["partition"]) for l, v in m.series("weir_answers_total") if v > 0}
        self.assertIn(("x.cdn.example.net.", "city-a"), answers, text)
        self.assertGreater(m.value("weir_partition_lookups_total", partition="city-b"), 0, text)
        self.assertGreater(m.value("weir_partition_lookups_total", partition="common"), 0, text)
        self.assertGreater(m.value("weir_responses_total", rcode="NOERROR"), 0, text)
        self.assertEqual(m.value("weir_responses_total", rcode="NXDOMAIN"), 1, text)
        self.assertTrue(m.series("weir_upstream_latency_seconds_bucket", le="+Inf", group="weighted"), text)
        # le as Prometheus' own clients write it (not C's "0.000500").
        self.assertTrue(m.series("weir_upstream_latency_seconds_bucket", le="0.0005", group="ordinary"), text)


# A fake hierarchy for the recursor: an ordinary zone and a tagged GSLB zone.
RECURSOR_NET = "127.0.120"
SHOP = record("www", "A", "192.0.2.1", ttl=300)
CDN = gslb_name("x", view("198.51.100.0/24", ["192.0.2.10", "192.0.2.11"], [5, 3], scope=24),
                default=default(["192.0.2.99"], [1]), ttl=60, weights=True)
RECURSOR_TAGS = "cdn-gslb.example weight=on ecs=on\n"


class RecursorMetricsTest(EndpointChecks, unittest.TestCase):
    DAEMON = "weir-recursor"
    JEMALLOC = True

    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig", "promtool")
        cls.h = weirtest.FakeHierarchy(BUILD_DIR, net=RECURSOR_NET,
                                       zones={"shop.example.": SHOP, "cdn-gslb.example.": CDN})
        cls.tags = weirtest.write_temp(RECURSOR_TAGS, suffix=".txt")
        cfg = weirtest.recursor_config(root_hints=cls.h.root_hints, tags=cls.tags, allow=["127.0.0.0/16"],
                                       server={"metrics_listen": "127.0.0.1:0"})
        cls.r = cls.daemon = weirtest.Recursor(BUILD_DIR, cfg)

    @classmethod
    def tearDownClass(cls):
        cls.r.stop()
        cls.h.stop()
        os.unlink(cls.tags)

    def test_queries_show_in_the_counters(self):
        before = self.scrape()
        for _ in range(5):
            self.assertEqual(self.r.dig("www.shop.example").status, "NOERROR")
        self.assertEqual(self.r.dig("missing.shop.example").status, "NXDOMAIN")
        r = self.r.dig("x.cdn-gslb.example", extra=["+subnet=198.51.100.7/24"])
        self.assertEqual(r.status, "NOERROR", r.text)
        after = self.scrape()

        def delta(name, **labels):
            return after.value(name, **labels) - before.value(name, **labels)

        self.assertEqual(delta("weir_recursor_queries_total", transport="udp"), 7, after.text)
        self.assertEqual(delta("weir_recursor_responses_total"), 7, after.text)  # every answer once
        self.assertEqual(delta("weir_recursor_responses_total", rcode="NOERROR"), 6, after.text)
        self.assertEqual(delta("weir_recursor_responses_total", rcode="NXDOMAIN"), 1, after.text)
        self.assertGreaterEqual(delta("weir_recursor_cache_hits_total", tier="ordinary"), 3, after.text)
        self.assertGreaterEqual(delta("weir_recursor_cache_misses_total", tier="tagged"), 1, after.text)
        self.assertGreaterEqual(delta("weir_recursor_upstream_queries_total"), 1, after.text)
        self.assertGreaterEqual(delta("weir_recursor_ecs_sent_total"), 1, after.text)
        # Every genuine last-hop answer has its time in the histogram.
        self.assertGreaterEqual(delta("weir_recursor_upstream_latency_seconds_count"), 1, after.text)
        self.assertEqual(after.value("weir_recursor_upstream_latency_seconds_bucket", le="+Inf"),
                         after.value("weir_recursor_upstream_latency_seconds_count"))
        self.assertGreaterEqual(after.value("weir_recursor_cache_entries", cache="ordinary"), 2, after.text)
        self.assertGreaterEqual(after.value("weir_recursor_tagged_names"), 1, after.text)

    def test_refusals_count_by_reason_and_rcode(self):
        before = self.scrape()
        self.assertEqual(self.r.dig("www.shop.example", source="127.9.0.1").status, "REFUSED")  # not in acl.allow
        self.assertEqual(self.r.dig("www.shop.example", extra=["+opcode=notify"]).status, "NOTIMP")
        after = self.scrape()

        def delta(name, **labels):
            return after.value(name, **labels) - before.value(name, **labels)

        self.assertEqual(delta("weir_recursor_drops_total", reason="acl"), 1, after.text)
        self.assertEqual(delta("weir_recursor_drops_total", reason="notimp"), 1, after.text)
        self.assertEqual(delta("weir_recursor_responses_total", rcode="REFUSED"), 1, after.text)
        self.assertEqual(delta("weir_recursor_responses_total", rcode="NOTIMP"), 1, after.text)

    def test_every_stats_counter_matches_the_control_port(self):
        self.r.dig("www.shop.example")
        stats = self.r.stats()
        m = self.scrape()
        # A scrape and the stats command read the same counters on the same thread.
        pairs = {
            "udp": m.value("weir_recursor_queries_total", transport="udp"),
            "tcp": m.value("weir_recursor_queries_total", transport="tcp"),
            "refused_acl": m.value("weir_recursor_drops_total", reason="acl"),
            "notimp": m.value("weir_recursor_drops_total", reason="notimp"),
            "ordinary_hits": m.value("weir_recursor_cache_hits_total", tier="ordinary"),
            "tagged_misses": m.value("weir_recursor_cache_misses_total", tier="tagged"),
            "upstream_queries": m.value("weir_recursor_upstream_queries_total"),
            "ecs_sent": m.value("weir_recursor_ecs_sent_total"),
            "servfail": m.value("weir_recursor_responses_total", rcode="SERVFAIL"),
            "plain_entries": m.value("weir_recursor_cache_entries", cache="ordinary"),
            "zone_cuts": m.value("weir_recursor_cache_entries", cache="zone_cuts"),
            "ub_queries": m.value("weir_recursor_resolver_queries_total"),
            "log_suppressed": m.value("weir_recursor_log_lines_suppressed_total"),
        }
        for key, value in pairs.items():
            self.assertEqual(value, stats[key], key)


class FakeNode:
    """A node that speaks the mgmt protocol (docs/mgmt.md) from here: HELLO,
    then reads the snapshot mgmt pushes and answers it with NACK."""

    def __init__(self, address, token, node_id, kind):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.send(1, ["weir-mgmt/1", token, node_id, kind, "0", ""])

    def send(self, msg_type, fields):
        body = bytes([msg_type]) + b"".join(struct.pack(">I", len(f.encode())) + f.encode() for f in fields)
        self.sock.sendall(struct.pack(">I", len(body)) + body)

    def read_message(self):
        def exactly(n):
            data = b""
            while len(data) < n:
                chunk = self.sock.recv(n - len(data))
                if not chunk:
                    raise ConnectionError("mgmt closed the connection")
                data += chunk
            return data
        body = exactly(struct.unpack(">I", exactly(4))[0])
        fields, pos = [], 1
        while pos < len(body):
            n = struct.unpack(">I", body[pos:pos + 4])[0]
            fields.append(body[pos + 4:pos + 4 + n].decode())
            pos += 4 + n
        return body[0], fields

    def close(self):
        self.sock.close()


class MgmtMetricsTest(EndpointChecks, unittest.TestCase):
    DAEMON = "weir-mgmt"

    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("promtool")
        cls.dir = tempfile.mkdtemp(prefix="weir-mgmt-metrics-")
        cls.mgmt = cls.daemon = weirtest.Mgmt(BUILD_DIR, cls.dir, metrics=True)

    @classmethod
    def tearDownClass(cls):
        cls.mgmt.stop()
        shutil.rmtree(cls.dir, True)

    def test_requests_store_and_nodes_show_in_the_counters(self):
        before = self.scrape()
        tags = os.path.join(self.dir, "tags.txt")
        with open(tags, "w") as f:
            f.write("a.example weight=on\nb.example ecs=on\n")
        csv = os.path.join(self.dir, "citymap.csv")
        with open(csv, "w") as f:
            f.write("127.1.0.0/16,city-a,198.51.100.0/24\n127.2.0.0/16,city-b,203.0.113.0/24\n"
                    "127.3.0.0/16,city-b,203.0.113.0/24\n")
        self.assertEqual(self.mgmt.weirctl("tag", "import", tags).returncode, 0)
        self.assertEqual(self.mgmt.weirctl("citymap", "import", csv).returncode, 0)
        self.assertNotEqual(self.mgmt.weirctl("tag", "rm", "missing.example").returncode, 0)
        self.assertEqual(self.mgmt.weirctl("status").returncode, 0)
        version = self.mgmt.weirctl_json("status")["version"]
        bad = os.path.join(self.dir, "bad.token")
        with open(bad, "w") as f:
            f.write("not-the-token-0123456789\n")
        self.assertNotEqual(self.mgmt.weirctl("status", token_file=bad).returncode, 0)
        # A peer whose first frame is larger than any mgmt accepts.
        with socket.create_connection((self.mgmt.host, self.mgmt.port), timeout=5) as s:
            s.sendall(b"\xff\xff\xff\xff\x01")
            while s.recv(65536):  # the ERROR, then the close
                pass
        # A node that rejects what it is sent, and stays connected.
        node = FakeNode(self.mgmt.address, self.mgmt.TOKEN, "fake-rec", "recursor")
        self.addCleanup(node.close)
        msg_type, fields = node.read_message()
        self.assertEqual((msg_type, fields[0]), (2, str(version)))  # SNAPSHOT
        node.send(4, [str(version), "cannot apply it here"])  # NACK
        deadline = time.monotonic() + 5
        while True:
            m = self.scrape()
            if m.value("weir_mgmt_node_rejections_total") > before.value("weir_mgmt_node_rejections_total"):
                break
            self.assertLess(time.monotonic(), deadline, m.text)
            time.sleep(0.05)

        def delta(name, **labels):
            return m.value(name, **labels) - before.value(name, **labels)

        self.assertEqual(m.value("weir_mgmt_store_version"), version, m.text)
        self.assertEqual(m.value("weir_mgmt_store_tags"), 2, m.text)
        self.assertEqual(m.value("weir_mgmt_store_prefixes"), 3, m.text)
        self.assertGreaterEqual(m.value("weir_mgmt_store_cities"), 2, m.text)
        self.assertEqual(delta("weir_mgmt_requests_total", command="tag-import", result="ok"), 1, m.text)
        self.assertEqual(delta("weir_mgmt_requests_total", command="citymap-import", result="ok"), 1, m.text)
        self.assertEqual(delta("weir_mgmt_requests_total", command="tag-rm", result="error"), 1, m.text)
        self.assertEqual(delta("weir_mgmt_requests_total", command="status", result="ok"), 2, m.text)
        self.assertEqual(delta("weir_mgmt_peer_errors_total", reason="bad_token"), 1, m.text)
        self.assertEqual(delta("weir_mgmt_peer_errors_total", reason="protocol"), 1, m.text)
        self.assertEqual(m.value("weir_mgmt_nodes_connected", kind="recursor"), 1, m.text)
        self.assertEqual(m.value("weir_mgmt_nodes_connected", kind="fastpath"), 0, m.text)
        self.assertEqual(delta("weir_mgmt_snapshots_pushed_total"), 1, m.text)
        self.assertEqual(delta("weir_mgmt_node_rejections_total"), 1, m.text)
        self.assertEqual(m.value("weir_mgmt_persistence_errors_total"), 0, m.text)
        # Every known command has its series from the start.
        self.assertEqual(len(before.series("weir_mgmt_requests_total", command="audit")), 2, before.text)
        node.close()
        # The node's disconnection shows at once: the loop thread renders.
        deadline = time.monotonic() + 5
        while self.scrape().value("weir_mgmt_nodes_connected", kind="recursor") != 0:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)


if __name__ == "__main__":
    unittest.main()
