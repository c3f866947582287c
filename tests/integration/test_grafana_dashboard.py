"""The Grafana dashboard in examples/grafana/ against a real Prometheus
scraping a real weir-fastpath: after a weighted load from two cities every
panel's query is valid PromQL and the panels an operator opens first (QPS,
hit ratio per partition, latency, weight conformance per city) have data.

Run: python3 tests/integration/test_grafana_dashboard.py --build-dir build
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
# test_metrics_accounting takes --build-dir out of argv when it is imported: its value is ours.
from test_metrics_accounting import BUILD_DIR, CITYMAP, QNAME, TAGS, zones  # noqa: E402
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DASHBOARD = os.path.join(ROOT, "examples", "grafana", "weir-dashboard.json")
# Panels that must show data after the load.
MUST_HAVE_DATA = ("Queries per second by transport", "Hit ratio per partition", "Response latency (hit)",
                  "Response latency (miss)", "Observed share by address ($name)",
                  "Configured share by address ($name)", "Observed - configured share ($name)",
                  "Worst deviation per city (last window)", "Entries per partition")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def substitute(expr, name):
    return (expr.replace("$__rate_interval", "20s").replace('"$name"', f'"{name}"')
            .replace('"$job"', '".*"').replace('"$instance"', '".*"').replace('"$partition"', '".*"'))


def panel_queries(dashboard):
    for p in dashboard["panels"]:
        for t in p.get("targets", []):
            yield p["title"], t["expr"]


@weirtest.requires(shutil.which("prometheus") is not None, "prometheus is not installed (scripts/install-deps.sh)")
class GrafanaDashboardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(DASHBOARD) as f:
            cls.dashboard = json.load(f)
        cls.tmp = tempfile.TemporaryDirectory()
        cls.files = weirtest.PartitionFiles(CITYMAP, TAGS)

    @classmethod
    def tearDownClass(cls):
        cls.files.cleanup()
        cls.tmp.cleanup()

    def query(self, port, expr, seconds=None):
        """An instant query, or with `seconds` a range query over the last
        `seconds` at a 1 s step (what a Grafana panel asks)."""
        if seconds is None:
            url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        else:
            now = time.time()
            url = f"http://127.0.0.1:{port}/api/v1/query_range?" + urllib.parse.urlencode(
                {"query": expr, "start": now - seconds, "end": now, "step": 1})
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            return json.load(e)

    def test_every_panel_query_runs_and_the_main_panels_have_data(self):
        sim = weirtest.GslbSim(BUILD_DIR, config_text=zones(), seed=1)
        self.addCleanup(sim.stop)
        upstream = f"{sim.host}:{sim.port}"
        # A 1 s conformance window: the deviation gauge closes windows as Prometheus scrapes.
        config = weirtest.fastpath_config([upstream], weighted=[upstream], workers=2, citymap=self.files.citymap,
                                          tags=self.files.tags, server={"metrics_conformance_window_s": 1})
        fp = weirtest.Fastpath(BUILD_DIR, config)
        self.addCleanup(fp.stop)

        port = free_port()
        conf = os.path.join(self.tmp.name, "prometheus.yml")
        with open(conf, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: weir\n    static_configs:\n"
                    f"      - targets: ['{fp.metrics_host}:{fp.metrics_port}']\n")
        log = open(os.path.join(self.tmp.name, "prometheus.log"), "w")
        self.addCleanup(log.close)
        prom = subprocess.Popen(["prometheus", f"--config.file={conf}", f"--web.listen-address=127.0.0.1:{port}",
                                 f"--storage.tsdb.path={os.path.join(self.tmp.name, 'tsdb')}"],
                                stdout=subprocess.DEVNULL, stderr=log)

        def stop_prometheus():
            prom.terminate()
            try:
                prom.wait(timeout=10)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait()
        self.addCleanup(stop_prometheus)

        bench = weirtest.binary(BUILD_DIR, "bench/weir_bench/weir-bench")
        # About 12 s of load at a modest rate: Prometheus scrapes it a dozen times.
        argv = [bench, "--progress", "never", "--server", f"{fp.host}:{fp.port}", "--citymap", self.files.citymap,
                "--tagged-name", QNAME, "--tagged-fraction", "0.7", "--names", "20", "--miss-fraction", "0.01",
                "--sources-per-city", "4", "--rate", "2000", "--duration", "12", "--warmup"]
        load = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        self.assertEqual(load.returncode, 0, f"{' '.join(argv)}\n{load.stdout}\n{load.stderr}")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # the last scrapes after the load
            r = self.query(port, 'up{job="weir"}')
            if r.get("status") == "success" and r["data"]["result"] and r["data"]["result"][0]["value"][1] == "1":
                break
            time.sleep(0.5)
        else:
            with open(os.path.join(self.tmp.name, "prometheus.log")) as f:
                self.fail("Prometheus never scraped weir-fastpath:\n" + f.read()[-4000:])
        time.sleep(2)

        with_data = set()
        for title, expr in panel_queries(self.dashboard):
            q = substitute(expr, QNAME + ".")
            r = self.query(port, q, seconds=60)
            self.assertEqual(r.get("status"), "success", f"{title}: {q}\n{r}")
            if r["data"]["result"]:
                with_data.add(title)
        for title in MUST_HAVE_DATA:
            self.assertIn(title, with_data, f"panel {title!r} has no data after the load")
        # Idle now: every query was answered or dropped.
        r = self.query(port, "sum(weir_queries_total) - sum(weir_responses_total) - sum(weir_drops_total)")
        self.assertEqual(float(r["data"]["result"][0]["value"][1]), 0.0, r)
        # The template variables' queries find the weighted name and both cities.
        r = self.query(port, 'group by (partition) (weir_answer_weight{name="%s."})' % QNAME)
        self.assertEqual({s["metric"]["partition"] for s in r["data"]["result"]}, {"city-a", "city-b"}, r)

    def test_dashboard_shape(self):
        d = self.dashboard
        self.assertEqual(d["uid"], "weir-overview")
        ids = [p["id"] for p in d["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids are unique")
        names = {v["name"] for v in d["templating"]["list"]}
        self.assertEqual(names, {"datasource", "job", "instance", "name", "partition"})
        for p in d["panels"]:
            if p["type"] == "row":
                continue
            self.assertTrue(p["targets"], p["title"])
            self.assertEqual(p["datasource"]["uid"], "${datasource}", p["title"])


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]])
