"""Installing weir as an operator does (docs/operator-guide.md#installing):
`cmake --install` into a staging root lays out the programs, the systemd
units (naming the installed binaries), the default configuration, the manual
pages and the documentation; `systemd-analyze verify` accepts the units; the
shipped configuration passes --check; and, as root on a machine without weir
installed, the Debian package from `cpack -G DEB` installs with dpkg, creates
the weir user and the mgmt token, runs its daemons as that user, and purges
cleanly.

Run: python3 tests/integration/test_packaging.py --build-dir build
"""

import grp
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402

BUILD_DIR = os.path.abspath(weirtest.parse_build_dir())
UNITS = ("weir-fastpath", "weir-recursor", "weir-mgmt")
CONFIGS = ("fastpath.toml", "recursor.toml", "mgmt.toml", "citymap.csv", "tags.txt")
NET = "127.0.119"


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=kw.pop("timeout", 300), **kw)


class StagedInstall:
    """`cmake --install` of the build into a temporary root with prefix /usr."""

    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        env = dict(os.environ, DESTDIR=self.root)
        r = run(["cmake", "--install", BUILD_DIR, "--prefix", "/usr"], env=env)
        if r.returncode != 0:
            raise AssertionError(f"cmake --install failed: {r.stdout}{r.stderr}")

    def path(self, p):
        return os.path.join(self.root, p.lstrip("/"))


class InstallTreeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.staged = StagedInstall()

    @classmethod
    def tearDownClass(cls):
        cls.staged.tmp.cleanup()

    def test_layout(self):
        s = self.staged
        for p in ("/usr/sbin/weir-fastpath", "/usr/sbin/weir-recursor", "/usr/sbin/weir-mgmt", "/usr/bin/weirctl",
                  "/usr/bin/weir-bench", "/usr/bin/dns-reflector"):
            self.assertTrue(os.access(s.path(p), os.X_OK), p)
        for unit in UNITS:
            self.assertTrue(os.path.isfile(s.path(f"/usr/lib/systemd/system/{unit}.service")), unit)
        for c in CONFIGS:
            self.assertTrue(os.path.isfile(s.path(f"/etc/weir/{c}")), c)
        for page in ("man8/weir-fastpath.8", "man8/weir-recursor.8", "man8/weir-mgmt.8", "man1/weirctl.1",
                     "man1/weir-bench.1"):
            self.assertTrue(os.path.isfile(s.path(f"/usr/share/man/{page}")), page)
        for doc in ("operator-guide.md", "fastpath-config.md", "examples/grafana/weir-dashboard.json",
                    "systemd/weir-fastpath.service.d/dpdk.conf"):
            self.assertTrue(os.path.isfile(s.path(f"/usr/share/doc/weir/{doc}")), doc)

    def test_manual_pages(self):
        man = self.staged.path("/usr/share/man")
        pages = {"weir-fastpath": "man8/weir-fastpath.8", "weir-recursor": "man8/weir-recursor.8",
                 "weir-mgmt": "man8/weir-mgmt.8", "weirctl": "man1/weirctl.1", "weir-bench": "man1/weir-bench.1"}
        texts = {}
        for name, page in pages.items():
            with open(os.path.join(man, page), encoding="utf-8") as f:
                texts[name] = f.read()
            see_also = texts[name].split(".SH \"SEE ALSO\"")[-1]
            self.assertNotIn(f"{name}(", see_also, f"{page} refers to itself")
            self.assertRegex(see_also, r"/share/doc/weir/", page)
        for name in ("weir-fastpath", "weir-recursor", "weir-mgmt"):
            self.assertNotIn("test\\-clock", texts[name], "a flag for tests only")
            self.assertNotIn("REQUIRED", texts[name], "--version and --help need no config")
        # The audit log's default actor is the caller's, not the build machine's.
        self.assertNotIn("@" + os.uname().nodename, texts["weirctl"])
        self.assertIn("user@host of the caller", texts["weirctl"])
        # Every subcommand with its options, the nested ones too.
        for word in ("nodes", "rm", "\\-\\-limit", "account", "rotate", "\\-\\-secret\\-file", "cache", "flush",
                     "\\-\\-partition", "citymap", "import"):
            self.assertIn(word, texts["weirctl"])
        # Each tool's exit codes as its source defines them (weirctl's 3: a conflict).
        exit_codes = {"weirctl": ("0", "1", "2", "3"), "weir-bench": ("0", "1", "2")}
        for name, codes in exit_codes.items():
            section = texts[name].split(".SH \"EXIT STATUS\"")[-1].split(".SH")[0]
            self.assertEqual(tuple(re.findall(r"^\.B (\d)$", section, re.M)), codes, name)
        self.assertIn("conflict", texts["weirctl"].split(".SH \"EXIT STATUS\"")[-1].split(".SH")[0])
        self.assertNotIn("refused", texts["weir-bench"].split(".SH \"EXIT STATUS\"")[-1].split(".SH")[0])

    def test_units_name_the_installed_programs_and_config(self):
        for unit in UNITS:
            with open(self.staged.path(f"/usr/lib/systemd/system/{unit}.service")) as f:
                text = f.read()
            self.assertIn(f"ExecStart=/usr/sbin/{unit} --config /etc/weir/{unit[5:]}.toml\n", text)
            self.assertIn("Type=notify\n", text)
            self.assertIn("User=weir\n", text)
            self.assertIn("ProtectSystem=strict\n", text)
            self.assertNotRegex(text, r"@[A-Z_]+@", "every template variable is substituted")

    def test_units_pass_systemd_analyze_verify(self):
        if shutil.which("systemd-analyze") is None:
            weirtest.skip_or_fail(self, "systemd-analyze is not installed (package systemd)")
        units = [self.staged.path(f"/usr/lib/systemd/system/{u}.service") for u in UNITS]
        # verify checks that ExecStart's program exists: point the copies at the staged binaries.
        work = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, work)
        copies = []
        for u in units:
            with open(u) as f:
                text = f.read().replace("/usr/sbin/", self.staged.path("/usr/sbin/"))
            dst = os.path.join(work, os.path.basename(u))
            with open(dst, "w") as f:
                f.write(text)
            copies.append(dst)
        r = run(["systemd-analyze", "verify", "--man=no", *copies], timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # verify exits 0 on unknown keys and bad values too, with a warning: none may be printed.
        self.assertEqual((r.stdout + r.stderr).strip(), "")

    def test_shipped_configuration_passes_check(self):
        for daemon, conf in (("weir-fastpath", "fastpath.toml"), ("weir-recursor", "recursor.toml")):
            r = run([self.staged.path(f"/usr/sbin/{daemon}"), "--check", "-c", self.staged.path(f"/etc/weir/{conf}")])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(r.stdout.endswith(": ok\n"), r.stdout)

    def test_a_plain_install_keeps_an_edited_config(self):
        with tempfile.TemporaryDirectory() as prefix:
            r = run(["cmake", "--install", BUILD_DIR, "--prefix", prefix])
            self.assertEqual(r.returncode, 0, r.stderr)
            conf = os.path.join(prefix, "etc/weir/fastpath.toml")
            with open(conf, "a") as f:
                f.write("# edited\n")
            r = run(["cmake", "--install", BUILD_DIR, "--prefix", prefix])
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(conf) as f:
                self.assertTrue(f.read().endswith("# edited\n"))
            with open(os.path.join(prefix, "lib/systemd/system/weir-fastpath.service")) as f:
                self.assertIn(f"ExecStart={prefix}/sbin/weir-fastpath --config {prefix}/etc/weir/fastpath.toml",
                              f.read())


def dpkg_installed(name):
    r = run(["dpkg-query", "-W", "-f=${Status}", name], timeout=30)
    return r.returncode == 0 and "install ok installed" in r.stdout


@weirtest.requires(os.geteuid() == 0, "dpkg -i needs root")
@weirtest.requires(bool(shutil.which("dpkg") and shutil.which("cpack")), "needs dpkg and cpack")
class DebianPackageTest(unittest.TestCase):
    def setUp(self):
        if dpkg_installed("weir"):
            self.skipTest("a weir package is installed on this machine: not touching it")
        self.out = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.out, True)
        r = run(["cpack", "-G", "DEB", "-B", self.out, "--config", os.path.join(BUILD_DIR, "CPackConfig.cmake")],
                timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        debs = [f for f in os.listdir(self.out) if f.endswith(".deb")]
        self.assertEqual(len(debs), 1, os.listdir(self.out))
        self.deb = os.path.join(self.out, debs[0])

    def purge(self):
        run(["dpkg", "--purge", "weir"], timeout=120)

    def test_install_run_and_purge(self):
        info = run(["dpkg-deb", "--info", self.deb]).stdout
        self.assertRegex(info, r"Depends:.*adduser")
        self.assertRegex(info, r"Depends:.*dns-root-data")
        self.assertRegex(info, r"Depends:.*libunbound8")
        self.assertIn("conffiles", info)

        self.addCleanup(self.purge)
        r = run(["dpkg", "-i", self.deb], timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(dpkg_installed("weir"))
        weir = pwd.getpwnam("weir")
        self.assertEqual(grp.getgrgid(weir.pw_gid).gr_name, "weir")
        token = os.stat("/etc/weir/mgmt.token")
        self.assertEqual(stat.S_IMODE(token.st_mode), 0o640)
        self.assertEqual(token.st_gid, weir.pw_gid)
        with open("/etc/weir/mgmt.token") as f:
            self.assertRegex(f.read(), r"^[0-9a-f]{64}\n$")
        r = run(["/usr/sbin/weir-fastpath", "--version"])
        self.assertRegex(r.stdout, r"^weir-fastpath \d+\.\d+\.\d+ \(commit ")
        for daemon, conf in (("weir-fastpath", "fastpath.toml"), ("weir-recursor", "recursor.toml")):
            r = run([f"/usr/sbin/{daemon}", "--check", "-c", f"/etc/weir/{conf}"])
            self.assertEqual(r.returncode, 0, r.stderr)

        # The shipped pair, on addresses of this test's own, as the weir user.
        work = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, work, True)
        shutil.copy("/etc/weir/tags.txt", work)
        shutil.copy("/etc/weir/citymap.csv", work)
        os.chmod(work, 0o755)
        with open("/etc/weir/recursor.toml") as f:
            rec_text = f.read()
        rec_text = rec_text.replace("127.0.0.1:5353", f"{NET}.2:5353").replace("127.0.0.1:5354", f"{NET}.2:5354")
        rec_text = rec_text.replace("127.0.0.1:9154", f"{NET}.2:0")
        rec_conf = os.path.join(work, "recursor.toml")
        with open(rec_conf, "w") as f:
            f.write(rec_text)
        with open("/etc/weir/fastpath.toml") as f:
            fp_text = f.read()
        fp_text = re.sub(r'listen = \[.*\]', f'listen = ["{NET}.1:53"]', fp_text)
        fp_text = fp_text.replace("127.0.0.1:5353", f"{NET}.2:5353").replace("127.0.0.1:9153", f"{NET}.1:0")
        fp_conf = os.path.join(work, "fastpath.toml")
        with open(fp_conf, "w") as f:
            f.write(fp_text)
        for p in (rec_conf, fp_conf):
            os.chmod(p, 0o644)
        rec = weirtest.Process(["/usr/sbin/weir-recursor", "-c", rec_conf, "--user", "weir"], ready=r"^ready$",
                               timeout=30)
        self.addCleanup(rec.stop)
        fp = weirtest.Process(["/usr/sbin/weir-fastpath", "-c", fp_conf, "--user", "weir"],
                              ready=r"^metrics http ", timeout=30)
        self.addCleanup(fp.stop)
        for pid in (rec.pid, fp.pid):
            with open(f"/proc/{pid}/status") as f:
                uid_line = next(line for line in f if line.startswith("Uid:"))
            self.assertEqual(uid_line.split()[1:], [str(weir.pw_uid)] * 4)
        # No Internet here: the root servers do not answer, so the recursor
        # gives SERVFAIL; the point is that the pair answers at all.
        r = weirtest.dig(f"{NET}.1", 53, "example.com", timeout=8)
        self.assertIn(r.status, ("SERVFAIL", "NOERROR"), r.text)
        # weirctl reaches the fastpath on its default control socket (bound
        # by root before the drop, mode 0660).
        # (Every other test's fastpath runs without the default socket.)
        self.assertIn("control unix /run/weir-fastpath/control.sock", fp.lines)
        st = os.stat("/run/weir-fastpath/control.sock")
        self.assertEqual(st.st_mode & 0o777, 0o660)
        r = run(["/usr/bin/weirctl", "--json", "stats"])
        self.assertEqual(r.returncode, 0, r.stderr)
        queries = sum(m["value"] for m in json.loads(r.stdout) if m["name"] == "weir_queries_total")
        self.assertGreaterEqual(queries, 1)
        self.assertEqual(fp.stop(), 0)
        self.assertEqual(rec.stop(), 0)

        r = run(["dpkg", "--purge", "weir"], timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertFalse(os.path.exists("/usr/sbin/weir-fastpath"))
        self.assertFalse(os.path.exists("/etc/weir"))
        self.assertFalse(os.path.exists("/var/lib/weir"))
        with self.assertRaises(KeyError):
            pwd.getpwnam("weir")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
