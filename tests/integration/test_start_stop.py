"""Black-box tests of a daemon's start and stop (docs/operator-guide.md): every
daemon (weir-fastpath, weir-recursor, weir-mgmt) prints "ready" on stdout
after its addresses and logs "ready", and on SIGTERM logs "stopping
(SIGTERM)" then "stopped" and exits 0 within a second.

Run: python3 tests/integration/test_start_stop.py --build-dir build
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()

# How long a stop may take, from SIGTERM to the exit.
STOP_LIMIT = 1.0


class StartStopTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="weir-start-stop-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def assert_ready_and_prompt_stop(self, daemon):
        """`daemon` printed "ready" as its last start-up line and logged it;
        SIGTERM (by PID) stops it with exit 0 within STOP_LIMIT, logging the
        stop line and then "stopped"."""
        process = daemon.process
        self.assertEqual(process.lines[-1], "ready", process.lines)
        os.kill(process.pid, signal.SIGTERM)
        sent = time.monotonic()
        try:
            rc = process.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.fail(f"{process.argv[0]} still runs 10 s after SIGTERM")
        took = time.monotonic() - sent
        daemon.stop()  # reaps the reader, keeps stderr
        self.assertEqual(rc, 0, process.stderr_text())
        self.assertLess(took, STOP_LIMIT, f"{process.argv[0]} took {took:.2f} s to stop")
        log = process.stderr_text()
        self.assertRegex(log, r"(?m) info startup: ready$")
        stopping = re.search(r"(?m) info shutdown: stopping \(SIGTERM\)$", log)
        stopped = re.search(r"(?m) info shutdown: stopped$", log)
        self.assertIsNotNone(stopping, log)
        self.assertIsNotNone(stopped, log)
        self.assertLess(stopping.start(), stopped.start(), log)

    def test_fastpath(self):
        # Every thread the fastpath runs: UDP workers, the TCP front,
        # the forwarder, the metrics server, weirctl's channel and the mgmt
        # client (to a weir-mgmt that serves it).
        mgmt = weirtest.Mgmt(BUILD_DIR, self.dir)
        self.addCleanup(mgmt.stop)
        config = weirtest.fastpath_config(["127.0.0.1:9"], workers=2,
                                          control={"socket": os.path.join(self.dir, "control.sock")})
        config += weirtest.mgmt_node_section(mgmt.address, "fp-1", mgmt.token_file,
                                             os.path.join(self.dir, "fp-state"))
        fp = weirtest.Fastpath(BUILD_DIR, config)
        self.addCleanup(fp.stop)
        self.assertTrue(any(l.startswith("metrics http ") for l in fp.process.lines), fp.process.lines)
        # Connected to weir-mgmt, so its client is in its steady state.
        weirtest.wait_until(lambda: any(n["node"] == "fp-1" and n["connected"]
                                        for n in mgmt.weirctl_json("nodes")["nodes"]), timeout=10)
        self.assert_ready_and_prompt_stop(fp)

    def test_recursor(self):
        rec = weirtest.Recursor(BUILD_DIR, weirtest.recursor_config(forwarders=["127.0.0.1:9"]))
        self.addCleanup(rec.stop)
        self.assert_ready_and_prompt_stop(rec)

    def test_mgmt(self):
        mgmt = weirtest.Mgmt(BUILD_DIR, self.dir)
        self.addCleanup(mgmt.stop)
        self.assert_ready_and_prompt_stop(mgmt)


if __name__ == "__main__":
    unittest.main()
