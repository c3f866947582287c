"""Black-box tests of the traffic-share calibration (docs/calibration.md): weir-mgmt
takes the CDN's traffic feedback (`weirctl traffic import`, the HTTP endpoint), steps its
controller and pushes the factors; weir-fastpath picks with weight x factor while
the weights it reports stay the GSLB's. gslb-sim is the GSLB, dig the client.

Run: python3 tests/integration/test_calibration.py --build-dir build
"""

import collections
import http.client
import json
import math
import os
import shutil
import socket
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import gslb_name, no_empty_weight_option, view, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
W = 65001

# Seed 004's case: the GSLB wants 1:3.
LOW, HIGH = "192.0.2.11", "192.0.2.12"
ZONES = (no_empty_weight_option() + zone("cdn.example.net.", rname="admin", minimum=30, ttl=60) +
         gslb_name("x", view("198.51.100.0/24", [LOW, HIGH], [1, 3], scope=24), ttl=300))
CITYMAP = "127.1.0.0/16,city-a,198.51.100.0/24\n"
QNAME = "x.cdn.example.net"
TAG = ["cdn.example.net", "weight=on", "ecs=on", "level=city", "calibrate=on"]
FEEDBACK_TOKEN = "feedback-token-0123456789abcdef"


def feedback_csv(end: int, low: float, high: float, name: str = QNAME, window: int = 300) -> str:
    """One window of traffic for the two addresses, ending at `end` (Unix seconds)."""
    return "".join(f"{end - window},{end},{name},city-a,{a},{w},{t}\n" for a, w, t in ((LOW, 1, low), (HIGH, 3, high)))


def pick_weights(weights, factors):
    """What the front picks with: weight x factor, the largest 255, rounded, at least 1
    (the GSLB weights themselves when every factor is 1)."""
    eff = [w * f for w, f in zip(weights, factors)]
    if all(f == 1 for f in factors):
        return list(weights)
    top = max(eff)
    return [max(1, int(math.floor(e * 255 / top + 0.5))) for e in eff]


class CalibrationTest(unittest.TestCase):
    def setUp(self):
        weirtest.require_tools("dig")
        self.dir = tempfile.mkdtemp(prefix="weir-calibration-test-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        self.addCleanup(self.sim.stop)
        with open(os.path.join(self.dir, "feedback.token"), "w") as f:
            f.write(FEEDBACK_TOKEN + "\n")
        self.start_mgmt()
        upstream = f"{self.sim.host}:{self.sim.port}"
        config = weirtest.fastpath_config([upstream], weighted=[upstream], workers=1) + weirtest.mgmt_node_section(
            self.mgmt.address, "fp-1", self.mgmt.token_file, os.path.join(self.dir, "fp-state"))
        self.fp = weirtest.Fastpath(BUILD_DIR, config)
        self.addCleanup(self.fp.stop)

    def start_mgmt(self, port: int = 0):
        self.mgmt = weirtest.Mgmt(BUILD_DIR, self.dir, port=port,
                                  extra='[calibration]\nfeedback_listen = "127.0.0.1:0"\n'
                                  'feedback_token_file = "feedback.token"\n')
        self.addCleanup(lambda: self.mgmt.stop())

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def setup_tag(self, tag=TAG):
        self.assertEqual(self.mgmt.weirctl("citymap", "import", self.write("cities.csv", CITYMAP)).returncode, 0)
        r = self.mgmt.weirctl("tag", "add", *tag)
        self.assertEqual(r.returncode, 0, r.stderr)
        return self.mgmt.wait_in_sync("fp-1", self.mgmt.weirctl_json("status")["version"])

    def shares(self, count):
        got = weirtest.dig_many(self.fp.host, self.fp.port, QNAME, count, source="127.1.0.7")
        self.assertEqual(len(got), count)
        return collections.Counter(got)

    def factors(self):
        rows = self.mgmt.weirctl_json("calibration", "ls")["addresses"]
        return {r["address"]: r["factor"] for r in rows if r["name"] == QNAME + "."}

    def post(self, body: bytes, token=FEEDBACK_TOKEN, path="/v1/traffic"):
        c = http.client.HTTPConnection(self.mgmt.feedback_host, self.mgmt.feedback_port, timeout=10)
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        c.request("POST", path, body=body, headers=headers)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, dict(r.getheaders()), data

    def test_import_moves_the_picks_and_keeps_the_gslb_weights_downstream(self):
        self.setup_tag()
        # Before any feedback: the GSLB's 1:3, exactly, over a whole SWRR window.
        self.assertEqual(self.shares(40), {LOW: 10, HIGH: 30})
        applied = self.fp.metrics().value("weir_mgmt_applied_parts_total", part="factors")
        now = int(time.time())
        # Seed 004: equal DNS shares gave traffic 1:2 where 1:3 was wanted.
        r = self.mgmt.weirctl_json("traffic", "import", self.write("t1.csv", feedback_csv(now - 60, 1000, 2000)))
        self.assertEqual((r["samples"], r["accepted"], r["sets_changed"]), (1, 1, 1))
        self.assertGreater(r["version"], 0)
        f = self.factors()
        self.assertLess(f[LOW], 1.0)
        self.assertGreater(f[HIGH], 1.0)
        self.mgmt.wait_in_sync("fp-1", r["version"])
        want = pick_weights([1, 3], [f[LOW], f[HIGH]])
        self.assertNotEqual(want, [1, 3])
        # The picks follow weight x factor exactly over a window of the new weights.
        self.assertEqual(self.shares(sum(want)), {LOW: want[0], HIGH: want[1]})
        m = self.fp.metrics()

        def gauge(family, address):
            got = [v for l, v in m.series(family, address=address, partition="city-a") if l["name"] == QNAME + "."]
            self.assertEqual(len(got), 1, (family, address, m.series(family)))
            return got[0]
        self.assertEqual(gauge("weir_answer_weight", LOW), 1)
        self.assertEqual(gauge("weir_answer_weight", HIGH), 3)
        self.assertAlmostEqual(gauge("weir_answer_weight_factor", LOW), f[LOW], places=6)
        self.assertAlmostEqual(gauge("weir_answer_weight_factor", HIGH), f[HIGH], places=6)
        self.assertEqual(gauge("weir_answer_effective_weight", LOW), want[0])
        self.assertEqual(gauge("weir_answer_effective_weight", HIGH), want[1])
        self.assertEqual(m.value("weir_mgmt_applied_parts_total", part="factors"), applied + 1)
        # A client that asks for the weights gets the GSLB's, unchanged.
        d = self.fp.dig(QNAME, source="127.1.0.7", extra=[f"+ednsopt={W}"])
        self.assertEqual(sorted(zip(d.addresses(), d.weights(W))), [(LOW, 1), (HIGH, 3)])
        # The same file again: not newer than the set's last sample, nothing changes.
        version = self.mgmt.weirctl_json("status")["version"]
        again = self.mgmt.weirctl_json("traffic", "import", self.write("t1b.csv", feedback_csv(now - 60, 1000, 2000)))
        self.assertEqual((again["accepted"], again["version"]), (0, 0))
        self.assertIn("no later than", again["skipped"][0]["reason"])
        self.assertEqual(self.mgmt.weirctl_json("status")["version"], version)
        self.assertEqual(self.factors(), f)
        # The change is audited, with the actor.
        audit = self.mgmt.weirctl_json("audit")
        self.assertEqual(audit[-1]["action"], "traffic import")
        self.assertEqual(audit[-1]["actor"], "test")

    def test_names_without_calibrate_are_never_touched(self):
        self.setup_tag(["cdn.example.net", "weight=on", "ecs=on", "level=city"])
        now = int(time.time())
        r = self.mgmt.weirctl_json("traffic", "import", self.write("t.csv", feedback_csv(now - 60, 1000, 2000)))
        self.assertEqual((r["accepted"], r["version"]), (0, 0))
        self.assertEqual(r["skipped"][0]["reason"], "no tag with calibrate=on covers the name")
        self.assertEqual(self.factors(), {})
        self.assertEqual(self.shares(40), {LOW: 10, HIGH: 30})
        # Turned on, fed, then off again: the factors stop at once on the node.
        self.assertEqual(self.mgmt.weirctl("tag", "set", "cdn.example.net", "calibrate=on").returncode, 0)
        r = self.mgmt.weirctl_json("traffic", "import", self.write("t2.csv", feedback_csv(now - 30, 1000, 2000)))
        self.assertEqual(r["accepted"], 1)
        self.mgmt.wait_in_sync("fp-1", r["version"])
        self.assertNotEqual(self.shares(40), {LOW: 10, HIGH: 30})
        self.assertEqual(self.mgmt.weirctl("tag", "set", "cdn.example.net", "calibrate=off").returncode, 0)
        self.mgmt.wait_in_sync("fp-1", self.mgmt.weirctl_json("status")["version"])
        m = self.fp.metrics()
        self.assertEqual(m.series("weir_answer_weight_factor", address=LOW), [])
        c = self.shares(400)
        self.assertEqual(c[LOW] * 3, c[HIGH])

    def test_http_feedback_endpoint(self):
        self.setup_tag()
        now = int(time.time())
        doc = {"samples": [{"window_start": now - 360, "window_end": now - 60, "name": QNAME,
                            "partition": "city-a",
                            "addresses": [{"address": LOW, "weight": 1, "traffic": 1000},
                                          {"address": HIGH, "weight": 3, "traffic": 2000}]}]}
        body = json.dumps(doc).encode()
        status, headers, data = self.post(body, token=None)
        self.assertEqual(status, 401)
        self.assertIn("Bearer", headers.get("WWW-Authenticate", ""))
        self.assertEqual(self.post(body, token="wrong-token-0123456789")[0], 401)
        self.assertEqual(self.factors(), {})
        bad = json.dumps({"samples": [{**doc["samples"][0], "addresses": [{"address": LOW, "weight": 0,
                                                                             "traffic": 1}]}]}).encode()
        status, _, data = self.post(bad)
        self.assertEqual(status, 400)
        self.assertIn("weight", json.loads(data)["error"])
        # Over max_feedback_bytes (8 MiB by default): refused from its Content-Length,
        # before the body is read.
        with socket.create_connection((self.mgmt.feedback_host, self.mgmt.feedback_port), timeout=10) as sock:
            sock.sendall(f"POST /v1/traffic HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {FEEDBACK_TOKEN}\r\n"
                         f"Content-Length: {9 << 20}\r\n\r\n".encode() + b"{" * 4096)
            head = sock.recv(4096).decode(errors="replace")
        self.assertTrue(head.startswith("HTTP/1.1 413"), head)
        status, headers, data = self.post(body)
        self.assertEqual(status, 200, data)
        self.assertEqual(headers.get("Content-Type"), "application/json")
        reply = json.loads(data)
        self.assertEqual(reply["accepted"], 1)
        self.assertLess(self.factors()[LOW], 1.0)
        self.mgmt.wait_in_sync("fp-1", reply["version"])
        audit = self.mgmt.weirctl_json("audit")
        self.assertEqual(audit[-1]["action"], "traffic import")
        self.assertTrue(audit[-1]["actor"].startswith("feedback@127.0.0.1"), audit[-1])

    def test_state_survives_a_restart_of_weir_mgmt(self):
        self.setup_tag()
        now = int(time.time())
        r = self.mgmt.weirctl_json("traffic", "import", self.write("t.csv", feedback_csv(now - 60, 1000, 2000)))
        before = self.factors()
        port = self.mgmt.port
        self.mgmt.stop()
        self.start_mgmt(port)
        self.assertEqual(self.factors(), before)
        self.assertEqual(self.mgmt.weirctl_json("status")["version"], r["version"])
        # It goes on from there: a newer window steps again.
        r2 = self.mgmt.weirctl_json("traffic", "import", self.write("t2.csv", feedback_csv(now - 30, 1000, 2200)))
        self.assertEqual(r2["accepted"], 1)
        self.assertLess(self.factors()[LOW], before[LOW])


if __name__ == "__main__":
    unittest.main()
