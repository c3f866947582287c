"""The daemons' log (docs/logging.md) as an operator reads it on stderr: the
line format, config errors logged once with their reason and exit status 2,
--log-level filtering, SIGHUP reload outcomes, and weir-recursor's
rate-limited warnings for a burst of malformed upstream answers, closed by
a "(N similar lines suppressed)" summary.

Run: python3 tests/integration/test_logging.py --build-dir build
"""

import os
import re
import signal
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest import build_response, echo_ecs, rdata_a, weight_option  # noqa: E402
from weirtest.zones import record  # noqa: E402

import dns.message  # noqa: E402  (weirtest finds Debian's dnspython)

BUILD_DIR = weirtest.parse_build_dir()
NET = "127.0.117"

# 2026-12-02T01:23:45.678Z weir-fastpath[1234] warning upstream: message
LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (weir-[a-z]+)\[(\d+)\] (error|warning|info|debug) "
                  r"([a-z]+): (.*)$")


def log_lines(text):
    """Every stderr line parsed by LINE; fails on a line of another shape."""
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m is None:
            raise AssertionError(f"not a log line: {line!r}")
        out.append(m.groups())
    return out


class FastpathLogTest(unittest.TestCase):
    def config(self, extra=""):
        return weirtest.fastpath_config(["127.0.0.1:1"], tags=self.tags) + extra

    def setUp(self):
        self.tags = weirtest.write_temp("tagged.example weight=on\n", suffix=".txt")
        self.addCleanup(os.unlink, self.tags)

    def run_fastpath(self, config_text, *args):
        path = weirtest.write_temp(config_text)
        self.addCleanup(os.unlink, path)
        return path, weirtest.run([weirtest.binary(BUILD_DIR, weirtest.Fastpath.RELPATH), "-c", path, *args])

    def test_config_error_is_one_error_line_and_exit_2(self):
        path, r = self.run_fastpath(self.config("\n[server2]\nx = 1\n"))
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = log_lines(r.stderr)
        self.assertEqual(len(lines), 1, r.stderr)
        _, daemon, pid, level, component, message = lines[0]
        self.assertEqual((daemon, level, component), ("weir-fastpath", "error", "config"))
        self.assertGreater(int(pid), 1)
        self.assertRegex(message, rf"^{re.escape(path)}:\d+:\d+: unknown key 'server2' in \[top level\]$")

    def test_bad_log_values_are_config_errors(self):
        path, r = self.run_fastpath(self.config('\n[log]\nlevel = "loud"\n'))
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = log_lines(r.stderr)
        self.assertEqual([l[3:5] for l in lines], [("error", "config")], r.stderr)
        self.assertRegex(lines[0][5], rf"^{re.escape(path)}:\d+:9: log level must be error, warning, info or debug, "
                                      r"not 'loud'$")
        _, r = self.run_fastpath(self.config(), "--log-target", "syslog")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual([l[3:] for l in log_lines(r.stderr)],
                         [("error", "config", "--log-target: log target must be stderr, journal or auto, not 'syslog'")])

    def test_debug_level_and_reload_lines(self):
        fp = weirtest.Fastpath(BUILD_DIR, self.config(), extra_args=["--log-level", "debug", "--log-target", "stderr"])
        self.addCleanup(fp.stop)
        os.kill(fp.pid, signal.SIGHUP)
        self.assertTrue(weirtest.wait_until(lambda: "reload: ok" in fp.process.stderr_text(), 5),
                        fp.process.stderr_text())
        lines = log_lines(fp.process.stderr_text())
        self.assertIn(("debug", "config", f"{fp.config_path}: loaded"), [l[3:] for l in lines])
        self.assertIn(("info", "config", "reload: ok"), [l[3:] for l in lines])
        self.assertEqual({l[2] for l in lines}, {str(fp.pid)})

    def test_level_filters_lines_below_it(self):
        control = os.path.join(os.path.dirname(self.tags), f"logging-{os.getpid()}.ctl")
        config = weirtest.fastpath_config(["127.0.0.1:1"], tags=self.tags, control={"socket": control})
        fp = weirtest.Fastpath(BUILD_DIR, config + '\n[log]\nlevel = "info"\n', extra_args=["--log-level", "warning"])
        self.addCleanup(fp.stop)
        # A good reload's line is info: not written. weirctl returns once the
        # reload is done (a second SIGHUP right away could find the bad file).
        r = weirtest.run([weirtest.binary(BUILD_DIR, "mgmt/weirctl"), "-C", control, "reload"])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.tags, "w") as f:
            f.write("tagged.example weight=maybe\n")
        os.kill(fp.pid, signal.SIGHUP)  # the tag file error is
        self.assertTrue(weirtest.wait_until(lambda: "reload:" in fp.process.stderr_text(), 5))
        lines = log_lines(fp.process.stderr_text())
        self.assertEqual(len(lines), 1, fp.process.stderr_text())
        self.assertEqual(lines[0][3:5], ("error", "config"))
        self.assertRegex(lines[0][5], rf"^reload: {re.escape(self.tags)}.*weight")


def handler(q):
    """Every query under bad.example. gets a reply cut in the middle of a record."""
    n = q.qname
    ok = [(n, "A", 60, rdata_a("192.0.2.200"))]
    return build_response(q, answer=ok, options=[echo_ecs(q, 24), weight_option([1])])[:-9]


class RecursorRateLimitTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig")
        weirtest.start_authorities(cls, BUILD_DIR, NET, {"shop.example.": record("www", "A", "192.0.2.1")},
                                   handler)
        cls.tags = weirtest.write_temp(f"bad.example weight=on ecs=on policy=forward:127.0.0.1@{cls.auth.port}\n",
                                       suffix=".txt")
        cls.addClassCleanup(os.unlink, cls.tags)
        cfg = weirtest.recursor_config(root_hints=cls.h.root_hints, tags=cls.tags,
                                       last_hop={"timeout_ms": 200, "attempts": 1})
        cls.r = weirtest.Recursor(BUILD_DIR, cfg, extra_args=["--log-target", "stderr"])
        cls.addClassCleanup(cls.r.stop)

    def test_malformed_burst_is_rate_limited_with_a_summary(self):
        names = [f"m{i}.bad.example" for i in range(40)]
        for n in names:
            r = self.r.dig(n, "A", ecs="198.51.100.7/24", options=[65001], timeout=3)
            self.assertEqual(r.status, "SERVFAIL", r.text)
        malformed = self.r.stats()["malformed_replies"]
        self.assertGreaterEqual(malformed, 40)

        # 10 lines per 10 s, then one summary once the interval is over.
        summary = re.compile(r"^\((\d+) similar lines suppressed\)$")

        def upstream_lines():
            return [l for l in log_lines(self.r.process.stderr_text()) if l[4] == "upstream"]

        self.assertTrue(weirtest.wait_until(lambda: any(summary.match(l[5]) for l in upstream_lines()), 15),
                        self.r.process.stderr_text())
        lines = upstream_lines()
        shown = [l for l in lines if "malformed answer" in l[5]]
        self.assertEqual(len(shown), 10, self.r.process.stderr_text())
        for l in shown:
            self.assertEqual(l[3], "warning")
            self.assertRegex(l[5], r"^127\.0\.0\.1:\d+: malformed answer for m\d+\.bad\.example\. \(\w+\): next server$")
        counts = [int(summary.match(l[5]).group(1)) for l in lines if summary.match(l[5])]
        self.assertEqual(counts, [malformed - 10])
        self.assertEqual(self.r.stats()["log_suppressed"], malformed - 10)


class UpstreamDownLogTest(unittest.TestCase):
    """Lines that traffic repeats while an upstream is down: said once per
    change of health, rate-limited with a summary, on both daemons."""

    def blast(self, host, port, names):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for i, n in enumerate(names):
                s.sendto(dns.message.make_query(n, "A").to_wire(), (host, port))
                if i % 50 == 49:
                    time.sleep(0.02)

    def test_fastpath_marks_a_dead_recursor_down_once(self):
        # Two recursors that never answer: each is marked down once, and
        # stays down (with both down, both are still tried) without a line
        # per failure after that.
        holes = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
        for h in holes:
            h.bind(("127.0.0.1", 0))
            self.addCleanup(h.close)
        ups = [f"127.0.0.1:{h.getsockname()[1]}" for h in holes]
        fp = weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config(
            ups, upstream={"timeout_ms": 20, "attempts": 2, "answer_deadline_ms": 200, "health_failures": 3,
                           "health_interval_ms": 60000}), extra_args=["--log-target", "stderr"])
        self.addCleanup(fp.stop)
        self.blast(fp.host, fp.port, [f"n{i}.down.example." for i in range(2000)])
        m = fp.metrics()
        self.assertTrue(weirtest.wait_until(
            lambda: sum(fp.metrics().value("weir_upstream_timeouts_total", group="ordinary", upstream=u)
                        for u in ups) >= 200, 10), m.text)
        m = fp.metrics()
        for u in ups:
            self.assertEqual(m.value("weir_upstream_up", group="ordinary", upstream=u), 0, m.text)
        lines = [l for l in log_lines(fp.process.stderr_text()) if l[4] == "upstream"]
        down = [l for l in lines if "marked down" in l[5]]
        self.assertEqual(len(down), 2, "\n".join(l[5] for l in lines))
        self.assertEqual(sorted(re.match(r"^(\S+) marked down after 3 failures in a row$", l[5]).group(1)
                                for l in down), sorted(ups))
        self.assertLessEqual(len(lines), 12, "\n".join(l[5] for l in lines))

    def test_recursor_with_its_forwarder_down_is_rate_limited(self):
        hole = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        hole.bind(("127.0.0.1", 0))
        self.addCleanup(hole.close)
        cfg = weirtest.recursor_config(forwarders=[f"127.0.0.1:{hole.getsockname()[1]}"],
                                       last_hop={"timeout_ms": 20, "attempts": 1},
                                       server={"answer_deadline_ms": 200, "metrics_listen": "127.0.0.1:0"})
        r = weirtest.Recursor(BUILD_DIR, cfg, extra_args=["--log-target", "stderr"])
        self.addCleanup(r.stop)
        self.blast(r.host, r.port, [f"n{i}.down.example." for i in range(1000)])
        self.assertTrue(weirtest.wait_until(
            lambda: r.metrics().value("weir_recursor_forwarder_relay_answers_total", result="servfail") >= 100, 15))
        time.sleep(0.5)
        lines = log_lines(r.process.stderr_text())
        by_component = {}
        for l in lines:
            by_component.setdefault(l[4], []).append(l[5])
        # At most the burst of 10 per call site and a summary in 10 s.
        self.assertLessEqual(len(by_component.get("forward", [])), 11, by_component)
        for comp, msgs in by_component.items():
            self.assertLessEqual(len(msgs), 40, f"{comp}: {len(msgs)} lines")
        self.assertGreater(r.metrics().value("weir_recursor_log_lines_suppressed_total"), 0)


if __name__ == "__main__":
    unittest.main()
