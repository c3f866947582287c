"""Each daemon raises its soft open-file limit (RLIMIT_NOFILE) to what its config needs, up to
the hard limit, and refuses to start, exit 2, with one line naming the need, the hard limit and
the keys that drive it when the hard limit is too low; `--check` prints the same line
(docs/operator-guide.md#open-file-limit).

The daemons are started under chosen limits (set in the child before it executes the daemon,
so the PID is the daemon's), and /proc/PID/limits is read back.

Run: python3 tests/integration/test_fd_limits.py --build-dir build
"""

import os
import re
import resource
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
BINARIES = {
    "fastpath": "fastpath/weir-fastpath",
    "recursor": "recursor/weir-recursor",
    "mgmt": "mgmt/weir-mgmt",
}
CONFIG_ERROR = 2  # a rejected configuration (docs/operator-guide.md#exit-codes)
TOKEN = "fd-limit-token-0123456789abcdef\n"
HINTS = ".  3600000 IN NS ns.root.\nns.root. 3600000 IN A 127.0.101.1\n"

# 127.0.0.1 is outside acl.allow: the fastpath answers it REFUSED at once, with no recursor.
FASTPATH = """[server]
listen = ["127.0.0.1:0"]
metrics_listen = "127.0.0.1:0"
tcp_max_connections = {tcp}

[acl]
allow = ["10.0.0.0/8"]

[upstream]
ordinary = ["127.0.0.1:5353"]
udp_sockets = 64

[control]
socket = ""
"""
# fdtest. is a local zone: libunbound's resolving process (forked with the raised limit)
# answers it NXDOMAIN without asking anyone.
RECURSOR = """[server]
listen = ["127.0.0.1:0"]
tcp_max_connections = {tcp}
max_inflight = 1000

[acl]
allow = ["127.0.0.0/8"]

[resolver]
root_hints = "root.hints"
outgoing_tcp = 64
local_zones = ["fdtest. always_nxdomain"]

[control]
socket = ""
"""
MGMT = """[mgmt]
listen = "127.0.0.1:0"
database = "mgmt.db"
token_file = "mgmt.token"
max_connections = {connections}
"""

# "open-file limit: the config needs N descriptors (...), the hard limit is H: ..."
REFUSAL = re.compile(r"open-file limit: the config needs ([0-9,]+) descriptors \((.*)\), the hard limit is "
                     r"([0-9,]+): raise LimitNOFILE in the systemd unit .* or lower (.*)$")
RAISED = re.compile(r"open-file limit raised from ([0-9,]+) to ([0-9,]+) .*: the config needs ([0-9,]+) "
                    r"descriptors")


def count(text):
    return int(text.replace(",", ""))


def with_limits(soft, hard, argv):
    """`argv` executed under RLIMIT_NOFILE soft/hard: a Python child sets them, then execs it
    (the same PID)."""
    code = ("import os, resource, sys; "
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard})); "
            "os.execv(sys.argv[1], sys.argv[1:])")
    return [sys.executable, "-c", code, *argv]


def nofile_limits(pid):
    """(soft, hard) of 'Max open files' in /proc/PID/limits."""
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
    raise AssertionError(f"no 'Max open files' line in /proc/{pid}/limits")


class FdLimitTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = self.tmp.name
        self.write("mgmt.token", TOKEN)
        self.write("root.hints", HINTS)
        # The high hard limit is the one the test runs under (raising it needs CAP_SYS_RESOURCE,
        # which a container may not have).
        _, self.high_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if self.high_hard == resource.RLIM_INFINITY:
            self.high_hard = 65536

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def config(self, daemon, **values):
        text = {"fastpath": FASTPATH, "recursor": RECURSOR, "mgmt": MGMT}[daemon].format(**values)
        return self.write(f"{daemon}.toml", text)

    def argv(self, daemon, config, *flags):
        return [weirtest.binary(BUILD_DIR, BINARIES[daemon]), "-c", config, "--log-target", "stderr", *flags]

    def start_low_soft(self, daemon, config):
        """The daemon under soft 64, a high hard limit; serving once it printed its last start-up
        line ("ready", the same for every daemon)."""
        if self.high_hard < 4096:
            weirtest.skip_or_fail(self, f"the hard limit is {self.high_hard}: below what the test configs need")
        process = weirtest.Process(with_limits(64, self.high_hard, self.argv(daemon, config)), ready=r"^ready$",
                                   timeout=20, cwd=self.dir)
        self.addCleanup(process.stop)
        return process

    def assert_raised(self, process):
        """The soft limit in /proc is the need the info line names, the hard limit untouched."""
        m = RAISED.search(process.stderr_text())
        self.assertTrue(m, process.stderr_text())
        self.assertEqual(count(m.group(1)), 64)
        needed = count(m.group(3))
        self.assertEqual(count(m.group(2)), needed)
        self.assertGreater(needed, 64)
        soft, hard = nofile_limits(process.pid)
        self.assertGreaterEqual(soft, needed)
        self.assertEqual(hard, self.high_hard)
        return needed

    def assert_refused(self, daemon, config, hard, keys):
        """Under soft = hard = `hard`, the start and --check both exit 2 with the same one line,
        which names a need above `hard`, the limit, and the config key(s) `keys`."""
        start = weirtest.run(with_limits(hard, hard, self.argv(daemon, config)), timeout=20)
        check = weirtest.run(with_limits(hard, hard, self.argv(daemon, config, "--check")), timeout=20)
        lines = []
        for what, r in (("start", start), ("--check", check)):
            self.assertEqual(r.returncode, CONFIG_ERROR, f"{daemon} {what}: {r.stdout} {r.stderr}")
            errors = [line for line in r.stderr.splitlines() if " error config: " in line]
            self.assertEqual(len(errors), 1, f"{daemon} {what}: {r.stderr}")
            self.assertNotIn("ready", r.stdout)
            self.assertNotIn(": ok", r.stdout)
            lines.append(errors[0].split(" error config: ", 1)[1])
        self.assertEqual(lines[0], lines[1], "--check says what the start says")
        self.assertTrue(lines[0].startswith(config + ": open-file limit: "), lines[0])
        m = REFUSAL.search(lines[0])
        self.assertTrue(m, lines[0])
        self.assertGreater(count(m.group(1)), hard)
        self.assertEqual(count(m.group(3)), hard)
        for key in keys:
            self.assertIn(key, m.group(4))
        return count(m.group(1)), m.group(2)

    # A low soft limit: raised to the need, and the daemon serves.

    def test_fastpath_raises_a_low_soft_limit(self):
        process = self.start_low_soft("fastpath", self.config("fastpath", tcp=1024))
        needed = self.assert_raised(process)
        self.assertGreater(needed, 1024 + 64 * 2, "tcp_max_connections and the UDP pool count")
        listen = re.search(r"^listening udp (\S+)", "\n".join(process.lines), re.M).group(1)
        host, port = weirtest.split_hostport(listen)
        r = weirtest.dig(host, port, "www.example.com", "A")
        self.assertEqual(r.status, "REFUSED", r.text)
        r = weirtest.dig(host, port, "www.example.com", "A", tcp=True)
        self.assertEqual(r.status, "REFUSED", r.text)

    def test_recursor_raises_a_low_soft_limit(self):
        process = self.start_low_soft("recursor", self.config("recursor", tcp=1024))
        needed = self.assert_raised(process)
        self.assertGreater(needed, 1024 + 1000 + 64, "tcp_max_connections, max_inflight, outgoing_tcp")
        listen = re.search(r"^listening udp (\S+)", "\n".join(process.lines), re.M).group(1)
        host, port = weirtest.split_hostport(listen)
        # Through libunbound's resolving process, forked under the raised limit.
        r = weirtest.dig(host, port, "www.fdtest", "A", norec=False)
        self.assertEqual(r.status, "NXDOMAIN", r.text)
        for pid in weirtest.child_pids(process.pid):
            self.assertGreaterEqual(nofile_limits(pid)[0], needed, "libunbound's process inherits the limit")

    def test_mgmt_raises_a_low_soft_limit(self):
        process = self.start_low_soft("mgmt", self.config("mgmt", connections=1024))
        needed = self.assert_raised(process)
        self.assertGreater(needed, 1024)
        listen = re.search(r"^listening (\S+)", "\n".join(process.lines), re.M).group(1)
        r = weirtest.run([weirtest.binary(BUILD_DIR, "mgmt/weirctl"), "--server", listen, "--token-file",
                          os.path.join(self.dir, "mgmt.token"), "--actor", "test", "nodes"], timeout=20)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_a_soft_limit_above_the_need_is_kept(self):
        """Never lowered: a soft limit already above the need stays as it was, with no raise line."""
        if self.high_hard < 8192:
            weirtest.skip_or_fail(self, f"the hard limit is {self.high_hard}: below 8192")
        process = weirtest.Process(with_limits(8192, self.high_hard,
                                               self.argv("mgmt", self.config("mgmt", connections=16))),
                                   ready=r"^ready$", timeout=20, cwd=self.dir)
        self.addCleanup(process.stop)
        self.assertEqual(nofile_limits(process.pid), (8192, self.high_hard))
        self.assertNotIn("open-file limit raised", process.stderr_text())

    # A low hard limit: the start and --check refuse with the same line.

    def test_fastpath_refuses_a_low_hard_limit(self):
        config = self.config("fastpath", tcp=20000)
        needed, terms = self.assert_refused("fastpath", config, 256, ["[server] tcp_max_connections"])
        self.assertIn("tcp_max_connections 20000", terms)
        self.assertIn("udp_sockets 64 x 1 family x 2 (rotation)", terms)
        self.assertGreater(needed, 20000 + 128)

    def test_recursor_refuses_a_low_hard_limit(self):
        config = self.config("recursor", tcp=4096)
        needed, terms = self.assert_refused("recursor", config, 256,
                                            ["[server] tcp_max_connections", "[server] max_inflight"])
        self.assertIn("tcp_max_connections 4096", terms)
        self.assertIn("max_inflight 1000 (last hop)", terms)
        self.assertIn("outgoing_tcp 64", terms)
        self.assertGreater(needed, 4096 + 1000 + 64)

    def test_mgmt_refuses_a_low_hard_limit(self):
        config = self.config("mgmt", connections=1024)
        needed, terms = self.assert_refused("mgmt", config, 256, ["[mgmt] max_connections"])
        self.assertIn("max_connections 1024", terms)
        self.assertGreater(needed, 1024)

    def test_a_config_within_the_hard_limit_passes_check(self):
        """The same hard limit of 256 is enough for a small config: --check passes."""
        config = self.config("mgmt", connections=16)
        r = weirtest.run(with_limits(256, 256, self.argv("mgmt", config, "--check")), timeout=20)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), f"{config}: ok")


if __name__ == "__main__":
    unittest.main()
