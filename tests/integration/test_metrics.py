"""Black-box tests of weir-fastpath's Prometheus endpoint: what promtool
(Prometheus' own checker) says of the exposition, HEAD, 404/405, and that
idle connections cannot delay a scrape.

Run: python3 tests/integration/test_metrics.py --build-dir build
"""

import concurrent.futures
import http.client
import os
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import gslb_name, no_empty_weight_option, record, view, zone  # noqa: E402

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


class MetricsEndpointTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig", "promtool")
        cls.files = weirtest.PartitionFiles(CITYMAP, TAGS)
        cls.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES, seed=1)
        upstream = f"{cls.sim.host}:{cls.sim.port}"
        config = weirtest.fastpath_config([upstream], weighted=[upstream], workers=2, citymap=cls.files.citymap,
                                          tags=cls.files.tags, upstream={"timeout_ms": 1000})
        cls.fp = weirtest.Fastpath(BUILD_DIR, config)
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

    def request(self, method, path, timeout=5.0):
        """(status, headers, body) of one request with Python's http.client."""
        conn = http.client.HTTPConnection(self.fp.metrics_host, self.fp.metrics_port, timeout=timeout)
        try:
            conn.request(method, path)
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            conn.close()

    def test_promtool_accepts_the_exposition(self):
        status, headers, body = self.request("GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertEqual(headers.get("Content-Type"), "text/plain; version=0.0.4; charset=utf-8")
        text = body.decode()
        # The families the queries above must have filled, under their names.
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
        r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=30)
        self.assertEqual((r.returncode, r.stdout.decode(), r.stderr.decode()), (0, "", ""), text)

    def test_head_is_200_without_a_body(self):
        status, headers, body = self.request("HEAD", "/metrics")
        self.assertEqual(status, 200)
        self.assertTrue(headers.get("Content-Type", "").startswith("text/plain; version=0.0.4"))
        self.assertEqual(body, b"")
        # On the wire too: nothing after the header block.
        with socket.create_connection((self.fp.metrics_host, self.fp.metrics_port), timeout=5) as s:
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
                s = socket.create_connection((self.fp.metrics_host, self.fp.metrics_port), timeout=5)
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


if __name__ == "__main__":
    unittest.main()
