"""A tag for a zone that does not exist (docs/mgmt.md#zone-check): weir-mgmt
commits it (never refused) and asks every connected weir-recursor whether it
finds the zone of each new suffix; weirctl prints a warning on stderr for
each that none finds (exit 0), --json has them in "warnings", and
weir-mgmt logs them. With no recursor connected, it says the zones were not
checked.

weir-mgmt, a weir-recursor node forwarding to gslb-sim (the authority of
cdn.example.net.), the real weirctl.

Run: python3 tests/integration/test_tag_zone_check.py --build-dir build
"""

import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import record, zone_head  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
# The zone, its NS and the NS address: a cut with a server address.
ZONES = zone_head("cdn.example.net.", "127.0.0.1") + record("www", "A", "192.0.2.1", ttl=60)
MISSING = "warning: no recursor node can find the zone of "


class TagZoneCheckTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="weir-zonecheck-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        self.addCleanup(self.sim.stop)
        self.mgmt = weirtest.Mgmt(BUILD_DIR, self.dir)
        self.addCleanup(self.mgmt.stop)

    def start_recursor(self):
        config = weirtest.recursor_config(forwarders=[f"{self.sim.host}:{self.sim.port}"]) + \
            weirtest.mgmt_node_section(self.mgmt.address, "rec-1", self.mgmt.token_file,
                                       os.path.join(self.dir, "rec-state"))
        rec = weirtest.Recursor(BUILD_DIR, config)
        self.addCleanup(rec.stop)
        self.mgmt.wait_in_sync("rec-1", self.mgmt.weirctl_json("status")["version"])
        return rec

    def tags(self):
        return self.mgmt.weirctl("tag", "ls").stdout

    def test_a_zone_no_recursor_finds_is_warned_about_not_refused(self):
        self.start_recursor()
        # A zone that exists: no warning, the zone named in --json.
        r = self.mgmt.weirctl("tag", "add", "www.cdn.example.net", "weight=on")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("warning", r.stderr)
        # One that does not: committed, exit 0, the warning on stderr only.
        r = self.mgmt.weirctl("tag", "add", "cdn.nosuch.example.org", "weight=on")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"^tag added: version \d+\n$")
        self.assertIn(f"weirctl: {MISSING}cdn.nosuch.example.org", r.stderr)
        self.assertIn("SERVFAIL", r.stderr)
        self.assertIn("cdn.nosuch.example.org", self.tags())
        self.assertIn(f"tag added by test: {MISSING[len('warning: '):]}cdn.nosuch.example.org",
                      self.mgmt.process.stderr_text())
        # A forwarded suffix never asks its zone's servers: not checked.
        r = self.mgmt.weirctl("tag", "add", "fwd.nosuch.example.org", "weight=on", "policy=forward:127.0.0.1@53")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("warning", r.stderr)
        # --replace of a suffix already there adds nothing: nothing asked.
        r = self.mgmt.weirctl("tag", "add", "--replace", "cdn.nosuch.example.org", "weight=on", "ecs=on")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("warning", r.stderr)

        # An import: only its new suffixes are checked, each warned about once.
        path = os.path.join(self.dir, "tags.txt")
        with open(path, "w") as f:
            f.write("www.cdn.example.net weight=on\ncdn.nosuch.example.org weight=on\n"
                    "img.cdn.example.net weight=on\nvideo.gone.example.org weight=on\nlive.gone.example.org weight=on\n")
        r = self.mgmt.weirctl("tag", "import", path, json_out=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        check = doc["zone_check"]
        self.assertEqual((check["nodes_asked"], check["nodes_answered"], check["suffixes"]), (1, 1, 3))
        zones = {c["suffix"]: c["zone"] for c in check["checked"]}
        self.assertEqual(zones["img.cdn.example.net."], "cdn.example.net.")
        self.assertIsNone(zones["video.gone.example.org."])
        self.assertIsNone(zones["live.gone.example.org."])
        self.assertEqual(len(doc["warnings"]), 2, doc["warnings"])
        for name in ("video.gone.example.org", "live.gone.example.org"):
            self.assertTrue(any(w.startswith(MISSING[len("warning: "):] + name) for w in doc["warnings"]), doc)
        self.assertNotIn("cdn.nosuch.example.org", " ".join(doc["warnings"]))  # not new: not asked again

    def test_no_recursor_connected_says_the_zones_were_not_checked(self):
        # No recursor ever known: a fleet whose recursors weir-mgmt does not
        # manage has nobody to ask, and nothing is said.
        r = self.mgmt.weirctl("tag", "add", "a.nosuch.example.org", "weight=on")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("warning", r.stderr)
        # A known recursor that is not connected: said so.
        rec = self.start_recursor()
        self.assertEqual(rec.stop(), 0)
        r = self.mgmt.weirctl("tag", "add", "b.nosuch.example.org", "weight=on")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("weirctl: warning: no recursor node is connected: the zones of 1 new suffix were not checked",
                      r.stderr)
        self.assertIn("b.nosuch.example.org", self.tags())


if __name__ == "__main__":
    unittest.main()
