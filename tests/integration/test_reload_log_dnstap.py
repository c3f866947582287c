"""Reloads of [log] and [dnstap] (docs/operator-guide.md#reload): SIGHUP and
`weirctl reload` re-read the config file; the log level and dnstap's
enabled and sample apply live and are named in the reply and the log, and a
changed key that needs a restart refuses the whole reload, with the same
error in weirctl's output and in the daemon's log, and nothing applied.

Both weir-fastpath and weir-recursor, gslb-sim as their upstream, the real
weirctl on each daemon's control socket.

Run: python3 tests/integration/test_reload_log_dnstap.py --build-dir build
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import record, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
WEIRCTL = weirtest.binary(BUILD_DIR, "mgmt/weirctl")
ZONES = zone("example.com.", ttl=600) + record("www", "A", "192.0.2.1", ttl=600)


class ReloadLogDnstapTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig")
        cls.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES, seed=1)

    @classmethod
    def tearDownClass(cls):
        cls.sim.stop()

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="weir-reload-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    # ------------------------------------------------------------ helpers

    def config(self, kind: str, log: dict, dnstap: dict) -> str:
        upstream = f"{self.sim.host}:{self.sim.port}"
        control = {"socket": self.ctl_socket}
        files = getattr(self, "files", {})
        if kind == "fastpath":
            base = weirtest.fastpath_config([upstream], control=control, citymap=files.get("citymap"),
                                            tags=files.get("tags"))
        else:
            base = weirtest.recursor_config(forwarders=[upstream], control=control, tags=files.get("tags"),
                                            server={"max_inflight": 1000})
        return base + "\n" + weirtest.toml_tables([("log", log), ("dnstap", dnstap)])

    def start(self, kind: str, log: dict, dnstap: dict):
        self.ctl_socket = os.path.join(self.dir, f"{kind}.ctl")
        cls = weirtest.Fastpath if kind == "fastpath" else weirtest.Recursor
        d = cls(BUILD_DIR, self.config(kind, log, dnstap))
        self.addCleanup(d.stop)
        return d

    def rewrite(self, kind: str, d, log: dict, dnstap: dict) -> None:
        with open(d.config_path, "w") as f:
            f.write(self.config(kind, log, dnstap))

    def weirctl(self, *args) -> subprocess.CompletedProcess:
        return subprocess.run([WEIRCTL, "-C", self.ctl_socket, "--actor", "test"] + list(args),
                              capture_output=True, text=True, timeout=30)

    @staticmethod
    def log(d) -> str:
        return d.process.stderr_text()

    def sighup(self, d, expect: str) -> str:
        """SIGHUP, then the first new log line matching `expect`."""
        before = len(self.log(d))
        os.kill(d.pid, signal.SIGHUP)
        found = []

        def seen():
            m = re.search(expect, self.log(d)[before:])
            if m:
                found.append(m.group(0))
            return bool(m)
        weirtest.wait_until(seen, timeout=5)
        return found[0]

    @staticmethod
    def tap_counts(kind: str, d) -> tuple:
        if kind == "fastpath":
            m = d.metrics()
            return (m.value("weir_dnstap_messages_total", result="sent"),
                    m.value("weir_dnstap_messages_total", result="sampled_out"))
        st = d.stats()
        return st["dnstap_sent"], st["dnstap_sampled_out"]

    def queries(self, d, n: int) -> None:
        for i in range(n):
            r = d.dig("www.example.com", "A", norec=False, source=f"127.0.0.{50 + i}")
            self.assertIsNotNone(r.status, r.text)

    def tapped_by(self, kind: str, d, n: int) -> tuple:
        """(messages tapped, queries sampled out) by `n` queries."""
        sent0, out0 = self.tap_counts(kind, d)
        self.queries(d, n)
        sent1, out1 = self.tap_counts(kind, d)
        return sent1 - sent0, out1 - out0

    # -------------------------------------------------------------- tests

    def test_log_level_applies_on_sighup_and_weirctl(self):
        for kind in ("fastpath", "recursor"):
            with self.subTest(kind=kind):
                tap = {"file": os.path.join(self.dir, f"{kind}-log.dnstap")}
                d = self.start(kind, {"level": "info"}, tap)
                loaded = f"debug config: {re.escape(d.config_path)}: loaded"
                self.assertNotRegex(self.log(d), loaded)
                # SIGHUP: debug from here on (the reload says so, and its
                # debug line appears).
                self.rewrite(kind, d, {"level": "debug"}, tap)
                line = self.sighup(d, r"info config: reloaded [^\n]*")
                self.assertIn("log level debug", line)
                weirtest.wait_until(lambda: re.search(loaded, self.log(d)) is not None)
                # weirctl: back to info; the reply names it, debug lines stop.
                self.rewrite(kind, d, {"level": "info"}, tap)
                r = self.weirctl("reload")
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("log level info", r.stdout)
                n = len(re.findall(loaded, self.log(d)))
                r = self.weirctl("reload")  # nothing changed: still info
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertNotIn("log level", r.stdout)
                self.assertEqual(len(re.findall(loaded, self.log(d))), n)
                self.assertEqual(d.stop(), 0)

    def test_dnstap_on_off_and_sample_apply_live(self):
        for kind in ("fastpath", "recursor"):
            with self.subTest(kind=kind):
                path = os.path.join(self.dir, f"{kind}.dnstap")
                tap = {"file": path, "upstream": False}
                d = self.start(kind, {}, tap)
                self.assertEqual(self.tapped_by(kind, d, 2), (4, 0))  # each query and its response
                self.rewrite(kind, d, {}, {**tap, "enabled": False})
                r = self.weirctl("reload")
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("dnstap off", r.stdout)
                self.assertEqual(self.tapped_by(kind, d, 4), (0, 0))
                self.rewrite(kind, d, {}, {**tap, "sample": 2})
                line = self.sighup(d, r"info config: reloaded [^\n]*")
                self.assertIn("dnstap on, dnstap sample 2", line)
                self.assertEqual(self.tapped_by(kind, d, 6), (6, 3))  # 3 of 6 queries, with their responses
                self.assertEqual(d.stop(), 0)
                size = os.path.getsize(path)
                self.assertGreater(size, 0)

    def test_a_key_that_needs_a_restart_refuses_the_whole_reload(self):
        for kind in ("fastpath", "recursor"):
            with self.subTest(kind=kind):
                path = os.path.join(self.dir, f"{kind}-kept.dnstap")
                tap = {"file": path, "upstream": False}
                d = self.start(kind, {"level": "info"}, tap)
                other = os.path.join(self.dir, f"{kind}-other.dnstap")
                # The destination changes along with keys that would apply live.
                self.rewrite(kind, d, {"level": "debug"}, {**tap, "file": other, "sample": 3})
                message = f"[dnstap] file changed: needs a restart (kept {path}): nothing reloaded"
                r = self.weirctl("reload")
                self.assertEqual(r.returncode, 1)
                self.assertIn(message, r.stderr)
                self.assertIn(f"error control: reload by test: {message}", self.log(d))
                line = self.sighup(d, r"error config: [^\n]*")
                self.assertIn(message, line)
                # Nothing of it applied: still info, still every query tapped.
                self.assertNotIn(f"{d.config_path}: loaded", self.log(d))
                self.assertEqual(self.tapped_by(kind, d, 2), (4, 0))
                self.assertFalse(os.path.exists(other))
                self.assertEqual(d.stop(), 0)

    def test_a_refused_reload_names_every_broken_file(self):
        """Every broken file at once, in weirctl's reply and at error in the
        log, on weirctl reload and on SIGHUP alike; nothing applied."""
        for kind in ("fastpath", "recursor"):
            with self.subTest(kind=kind):
                self.files = {"tags": os.path.join(self.dir, f"{kind}-tags.txt")}
                if kind == "fastpath":
                    self.files["citymap"] = os.path.join(self.dir, f"{kind}-citymap.csv")
                    with open(self.files["citymap"], "w") as f:
                        f.write("127.0.0.0/8,loop,127.0.0.0/24\n")
                with open(self.files["tags"], "w") as f:
                    f.write("example.com weight=on\n")
                path = os.path.join(self.dir, f"{kind}-kept2.dnstap")
                tap = {"file": path}
                d = self.start(kind, {"level": "info"}, tap)
                # Two bad lines in the tags, one in the city map, and a
                # config change that needs a restart.
                with open(self.files["tags"], "w") as f:
                    f.write("example.com weight=on\nbad..name weight=on\nother.example wieght=on\n")
                if kind == "fastpath":
                    with open(self.files["citymap"], "w") as f:
                        f.write("127.0.0.0/8,loop,127.0.0.0/24\n127.9.0.1/16,far,127.9.0.0/24\n")
                self.rewrite(kind, d, {"level": "debug"}, {"file": os.path.join(self.dir, "elsewhere.dnstap")})
                wanted = [rf"{re.escape(self.files['tags'])}:2: ", rf"{re.escape(self.files['tags'])}:3: ",
                          r"\[dnstap\] file changed: needs a restart", r": nothing reloaded$"]
                if kind == "fastpath":
                    wanted.append(rf"{re.escape(self.files['citymap'])}:2: .*host bits")
                r = self.weirctl("reload")
                self.assertEqual(r.returncode, 1, r.stderr)
                line = [x for x in self.log(d).splitlines() if "error control: reload by test: " in x]
                self.assertEqual(len(line), 1, self.log(d))
                hup = self.sighup(d, r"error config: [^\n]*")
                for text in (r.stderr.strip(), line[0], hup):
                    for w in wanted:
                        self.assertRegex(text, w)
                # Nothing applied: still info (no debug line), the old tags in force.
                self.assertNotIn(f"{d.config_path}: loaded", self.log(d))
                self.assertNotIn(" info control: reload", self.log(d))
                self.assertEqual(d.stop(), 0)
        self.files = {}


if __name__ == "__main__":
    unittest.main()
