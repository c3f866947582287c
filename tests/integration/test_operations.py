"""Running weir as an operator's service manager does (docs/operator-guide.md):
`--version` on every program without a config, usage errors exit 2, the
systemd notification protocol (READY, RELOADING, STOPPING, WATCHDOG) on a
notify socket the test owns, and the privilege drop of --user when a daemon
is started as root without systemd.

Run: python3 tests/integration/test_operations.py --build-dir build
"""

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest import tls as wtls  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

PROGRAMS = {
    "weir-fastpath": "fastpath/weir-fastpath",
    "weir-recursor": "recursor/weir-recursor",
    "weir-mgmt": "mgmt/weir-mgmt",
    "weirctl": "mgmt/weirctl",
    "gslb-sim": "bench/gslb_sim/gslb-sim",
    "weir-bench": "bench/weir_bench/weir-bench",
    "dns-reflector": "bench/weir_bench/dns-reflector",
}
VERSION = re.compile(r"^(\S+) (\d+\.\d+\.\d+) \(commit (\S+), (\S+) build, DPDK (yes|no)\)$")
DAEMONS = ("weir-fastpath", "weir-recursor", "weir-mgmt")


def status_ids(pid, key):
    """The real, effective, saved and filesystem ids of /proc/PID/status's `key` line (Uid or Gid)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return [int(x) for x in line.split()[1:]]
    raise AssertionError(f"no {key} line")


class VersionAndUsageTest(unittest.TestCase):
    def test_every_program_prints_its_version_without_a_config(self):
        for name, rel in PROGRAMS.items():
            with self.subTest(program=name):
                r = weirtest.run([weirtest.binary(BUILD_DIR, rel), "--version"], timeout=10)
                self.assertEqual(r.returncode, 0, r.stderr)
                lines = r.stdout.splitlines()
                self.assertEqual(len(lines), 1, r.stdout)
                m = VERSION.match(lines[0])
                self.assertIsNotNone(m, lines[0])
                self.assertEqual(m.group(1), name)
                self.assertNotEqual(m.group(3), "", lines[0])

    def test_usage_errors_exit_2_with_the_reason(self):
        for name in DAEMONS:
            exe = weirtest.binary(BUILD_DIR, PROGRAMS[name])
            for args, why in ((["--check"], "--config"), (["-c", "x.toml", "--no-such-flag"], "--no-such-flag")):
                with self.subTest(program=name, args=args):
                    r = weirtest.run([exe, *args], timeout=10)
                    self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                    self.assertIn(why, r.stderr)
        r = weirtest.run([weirtest.binary(BUILD_DIR, PROGRAMS["weirctl"]), "no-such-command"], timeout=10)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)


class NotifySocket:
    """A unix datagram socket standing in for systemd's NOTIFY_SOCKET."""

    def __init__(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.seen = []

    def wait_for(self, field, timeout=10.0):
        """Waits for a message carrying `field` (e.g. "READY=1"); returns its fields."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            fields = data.decode().split("\n")
            self.seen.append(fields)
            if field in fields:
                return fields
        raise AssertionError(f"no {field} within {timeout}s; seen {self.seen}")

    def close(self):
        self.sock.close()
        self.dir.cleanup()


class SystemdNotifyTest(unittest.TestCase):
    def start_fastpath(self, env_extra, extra_args=(), workers=1):
        tags = weirtest.write_temp("tagged.example weight=on\n", suffix=".txt")
        self.addCleanup(os.unlink, tags)
        config = weirtest.write_temp(weirtest.fastpath_config(["127.0.0.1:1"], tags=tags, workers=workers))
        self.addCleanup(os.unlink, config)
        env = dict(os.environ)
        env.update(env_extra)
        p = weirtest.Process([weirtest.binary(BUILD_DIR, PROGRAMS["weir-fastpath"]), "-c", config, *extra_args],
                             ready=r"^metrics http ", env=env)
        self.addCleanup(p.stop)
        return p

    def test_ready_reloading_stopping_and_watchdog(self):
        notify = NotifySocket()
        self.addCleanup(notify.close)
        p = self.start_fastpath({"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "2000000"})
        ready = notify.wait_for("READY=1")
        self.assertIn("STATUS=serving", ready)
        notify.wait_for("WATCHDOG=1", timeout=5)
        os.kill(p.pid, signal.SIGHUP)
        notify.wait_for("RELOADING=1")
        notify.wait_for("READY=1")
        os.kill(p.pid, signal.SIGTERM)
        notify.wait_for("STOPPING=1")
        self.assertEqual(p.proc.wait(timeout=10), 0)

    def test_watchdog_not_petted_while_a_worker_is_stuck(self):
        notify = NotifySocket()
        self.addCleanup(notify.close)
        # WatchdogSec=2: a loop without progress for 1 s stops the pets.
        p = self.start_fastpath({"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "2000000"},
                                extra_args=["--test-clock"], workers=2)
        metrics = next(line for line in p.lines if line.startswith("metrics http ")).split()[2]
        host, port = weirtest.split_hostport(metrics)
        notify.wait_for("READY=1")
        notify.wait_for("WATCHDOG=1", timeout=5)
        # Worker 1 wedges for 6 s (the others, the TCP thread and the forwarder go on).
        self.assertIn("stalls", weirtest.http_get(host, port, "/test/stall-worker?slot=1&ms=6000"))
        status = None
        deadline = time.monotonic() + 5
        while status is None:
            self.assertLess(time.monotonic(), deadline, f"no stall status; seen {notify.seen}")
            status = next((f for f in self._next(notify) if f.startswith("STATUS=stalled: ")), None)
        self.assertIn("worker 1 (no progress for", status)
        self.assertNotIn("worker 0", status)
        self.assertNotIn("forwarder", status)
        # No pet for as long as it is stuck: nothing but silence until it moves again.
        t_stall = time.monotonic()
        after = []
        while time.monotonic() - t_stall < 2.5:
            after.append(self._next(notify, timeout=0.3))
        self.assertFalse(any("WATCHDOG=1" in f for f in after if f), after)
        # It moves again: pets resume, the end of the stall is logged.
        notify.wait_for("STATUS=serving", timeout=6)
        notify.wait_for("WATCHDOG=1", timeout=3)
        os.kill(p.pid, signal.SIGTERM)
        self.assertEqual(p.proc.wait(timeout=10), 0)
        err = p.stderr_text()
        self.assertIn("stalled: worker 1 (no progress for", err)
        self.assertIn("the systemd watchdog is no longer petted", err)
        self.assertIn("every loop makes progress again", err)

    @staticmethod
    def _next(notify, timeout=1.0):
        """The next notify message's fields ([] when none came within `timeout`)."""
        notify.sock.settimeout(timeout)
        try:
            fields = notify.sock.recv(4096).decode().split("\n")
        except socket.timeout:
            return []
        finally:
            notify.sock.settimeout(0.2)
        notify.seen.append(fields)
        return fields

    def test_no_watchdog_without_watchdog_usec(self):
        notify = NotifySocket()
        self.addCleanup(notify.close)
        p = self.start_fastpath({"NOTIFY_SOCKET": notify.path})
        notify.wait_for("READY=1")
        time.sleep(2.5)  # the watchdog would have been petted twice by now
        os.kill(p.pid, signal.SIGTERM)
        notify.wait_for("STOPPING=1")
        self.assertFalse(any("WATCHDOG=1" in m for m in notify.seen), notify.seen)


@weirtest.requires(os.geteuid() == 0, "the privilege drop needs root")
class PrivilegeDropTest(unittest.TestCase):
    def setUp(self):
        self.tags = weirtest.write_temp("tagged.example weight=on\n", suffix=".txt")
        self.addCleanup(os.unlink, self.tags)

    def test_fastpath_runs_as_the_user_once_bound_and_still_answers(self):
        # Port 53 of a loopback address of its own: only root may bind it.
        config = weirtest.fastpath_config(["127.0.0.1:1"], tags=self.tags,
                                          server={"listen": ["127.0.118.1:53"]})
        fp = weirtest.Fastpath(BUILD_DIR, config, extra_args=["--user", "nobody:nogroup"])
        self.addCleanup(fp.stop)
        self.assertEqual(status_ids(fp.process.pid, "Uid"), [65534] * 4)
        self.assertEqual(status_ids(fp.process.pid, "Gid"), [65534] * 4)
        self.assertIn("running as user nobody", fp.process.stderr_text())
        r = fp.dig("tagged.example", timeout=3)  # upstream :1 is down: SERVFAIL is still an answer
        self.assertEqual(r.status, "SERVFAIL")
        self.assertEqual(fp.stop(), 0)

    def test_recursor_drops_too(self):
        rec = weirtest.Recursor(BUILD_DIR, weirtest.recursor_config(forwarders=["127.0.0.1:1"]),
                                extra_args=["--user", "nobody"])
        self.addCleanup(rec.stop)
        self.assertEqual(status_ids(rec.process.pid, "Uid"), [65534] * 4)
        # libunbound's resolving process is forked at the first lookup, after the drop.
        weirtest.dig(rec.host, rec.port, "www.example.com", timeout=5)
        children = weirtest.child_pids(rec.process.pid)
        self.assertEqual(len(children), 1, "libunbound's resolving process")
        self.assertEqual(status_ids(children[0], "Uid"), [65534] * 4)
        self.assertEqual(status_ids(children[0], "Gid"), status_ids(rec.process.pid, "Gid"))
        self.assertEqual(rec.stop(), 0)

    def test_unknown_user_is_rejected_before_anything_starts(self):
        config = weirtest.write_temp(weirtest.fastpath_config(["127.0.0.1:1"], tags=self.tags))
        self.addCleanup(os.unlink, config)
        r = weirtest.run([weirtest.binary(BUILD_DIR, PROGRAMS["weir-fastpath"]), "-c", config, "--user",
                          "no-such-user-weir"], timeout=10)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("no such user 'no-such-user-weir'", r.stderr)
        self.assertNotIn("listening", r.stdout)


# The daemon whose config each shipped file name is; every other shipped *.toml is a gslb-sim
# zone file (docs/gslb-sim.md), loaded by test_gslb_sim.py and the demo. Templates (*.in) are
# filled in by a script first (test_demo_template_passes_check_once_filled).
DAEMON_OF_CONFIG = {"fastpath.toml": "weir-fastpath", "recursor.toml": "weir-recursor", "mgmt.toml": "weir-mgmt"}
GSLB_SIM_ZONES = {"examples/gslb-sim/zones.toml", "examples/gslb-sim/segments.toml",
                  "examples/demo/cdn-gslb.example.toml", "examples/demo/shop.example.toml"}


class ShippedExamplesTest(unittest.TestCase):
    """Every example config starts as shipped: --check passes with the files it names beside it."""

    def check(self, daemon, path):
        r = weirtest.run([weirtest.binary(BUILD_DIR, PROGRAMS[daemon]), "--check", "-c", path], timeout=30)
        self.assertEqual(r.returncode, 0, f"{path}: {r.stderr}")
        self.assertEqual(r.stdout, f"{path}: ok\n")

    def shipped_tomls(self):
        out = []
        for top in ("examples", os.path.join("dist", "etc")):
            for d, _, files in os.walk(os.path.join(SOURCE_DIR, top)):
                out += [os.path.relpath(os.path.join(d, f), SOURCE_DIR) for f in files if f.endswith(".toml")]
        return sorted(out)

    def test_every_shipped_config_passes_check(self):
        # Each file is checked where it ships, beside the files it names (city map, tags, root
        # hints), except the mgmt token: the secret the package writes to /etc/weir/mgmt.token on
        # first install is never shipped, so a copy names one the test writes.
        checked = []
        with tempfile.TemporaryDirectory() as tmp:
            token = os.path.join(tmp, "mgmt.token")
            with open(token, "w") as f:
                f.write("example-token-0123456789\n")
            for rel in self.shipped_tomls():
                daemon = DAEMON_OF_CONFIG.get(os.path.basename(rel))
                if daemon is None:
                    self.assertIn(rel, GSLB_SIM_ZONES, "a shipped config no test checks")
                    continue
                path = os.path.join(SOURCE_DIR, rel)
                with open(path) as f:
                    text = f.read()
                self.assertNotRegex(text, r"@[A-Z_]+@", f"{rel}: placeholders belong in a template (*.in)")
                if re.search(r'^token_file = "/etc/weir/mgmt.token"', text, re.M):
                    path = os.path.join(tmp, rel.replace(os.sep, "_"))
                    with open(path, "w") as f:
                        f.write(text.replace("/etc/weir/mgmt.token", token))
                with self.subTest(rel):
                    self.check(daemon, path)
                checked.append(rel)
        for rel in ("examples/fastpath/fastpath.toml", "examples/recursor/recursor.toml", "examples/mgmt/mgmt.toml",
                    "dist/etc/weir/fastpath.toml", "dist/etc/weir/recursor.toml", "dist/etc/weir/mgmt.toml"):
            self.assertIn(rel, checked)

    def test_demo_template_passes_check_once_filled(self):
        # scripts/demo.py fills @RECURSOR@ and @MGMT@ with the addresses it started, the DoT/DoH
        # ports and the certificate it made, and runs the fastpath beside weir-mgmt's token
        # (mgmt.token).
        with tempfile.TemporaryDirectory() as tmp:
            certs = wtls.Certs(tmp)
            with open(os.path.join(SOURCE_DIR, "examples", "demo", "fastpath.toml.in")) as f:
                text = (f.read().replace("@RECURSOR@", "127.0.0.1:5353").replace("@MGMT@", "127.0.0.1:8054")
                        .replace("@DOT_PORT@", "853").replace("@DOH_PORT@", "443").replace("@HTTP_PORT@", "80")
                        .replace("@TLS_CHAIN@", certs.chain).replace("@TLS_KEY@", certs.key))
            self.assertNotRegex(text, r"@[A-Z_]+@")
            with open(os.path.join(tmp, "mgmt.token"), "w") as f:
                f.write("demo-token-0123456789\n")
            self.check("weir-fastpath", weirtest.write_temp(text, directory=tmp))


# A path of the repository named in a tracked file ("docs/<page>.md", "examples/<dir>/<file>",
# with an optional #section), and a relative Markdown link.
REFERENCE = re.compile(r"(?<![\w/.-])((?:docs|examples|dist|bench|scripts|tests)/[A-Za-z0-9_./-]*[A-Za-z0-9_-]"
                       r"\.(?:md|toml|csv|txt|json|py|sh|conf|hints))(?![\w.])(#[a-z0-9_-]+)?")
MD_LINK = re.compile(r"\]\(([A-Za-z0-9_./-]+\.md)(#[a-z0-9_-]+)?\)")


def sections(path):
    """The anchors GitHub gives the headings of a Markdown file."""
    out = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^#+\s+(.*)$", line)
            if m:
                out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


class DanglingReferencesTest(unittest.TestCase):
    """No code, doc, example or packaging file points at a file or a section that is not in the
    repository (bench/RESULTS.md is a record of past runs and keeps the commands as they were;
    fuzz corpora are data)."""

    def test_every_reference_resolves(self):
        r = subprocess.run(["git", "-C", SOURCE_DIR, "ls-files"], capture_output=True, text=True)
        if r.returncode != 0:
            self.skipTest("not a git checkout")
        bad = []
        for rel in r.stdout.split():
            if rel.startswith("tests/fuzz/corpus/") or rel == "bench/RESULTS.md":
                continue
            try:
                with open(os.path.join(SOURCE_DIR, rel), encoding="utf-8") as f:
                    lines = f.read().splitlines()
            except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
                continue
            for n, line in enumerate(lines, 1):
                refs = [(m.group(1), m.group(2)) for m in REFERENCE.finditer(line)]
                if rel.endswith(".md"):
                    refs += [(os.path.normpath(os.path.join(os.path.dirname(rel), m.group(1))), m.group(2))
                             for m in MD_LINK.finditer(line)]
                for target, anchor in refs:
                    path = os.path.join(SOURCE_DIR, target)
                    if not os.path.exists(path):
                        bad.append(f"{rel}:{n}: {target} is not in the repository")
                    elif anchor and target.endswith(".md") and anchor[1:] not in sections(path):
                        bad.append(f"{rel}:{n}: {target} has no section {anchor}")
        self.assertEqual(bad, [], "\n".join(bad))

    def test_nothing_points_at_the_internal_design_note(self):
        r = subprocess.run(["git", "-C", SOURCE_DIR, "grep", "-n", "-I", "-E", r"DESIGN\.md|shared/seeds|\.\./shared", "--",
                            ".", ":!tests/integration/test_operations.py"],
                           capture_output=True, text=True)
        if r.returncode == 128:
            self.skipTest("not a git checkout")
        self.assertEqual(r.stdout, "")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
