"""docs/operator-guide.md walked end to end: every command the guide gives is
run, as written, on a loopback topology (weir-mgmt, weir-recursor, weir-fastpath,
gslb-sim as the authority), in the guide's order: a first configuration from
files, the cache control commands, reload, then the weir-mgmt workflow.
The city map and tag file are the guide's own examples.

What cannot run here is adapted the same way every time, and nothing else:
/etc/weir/ is this test's directory (with the token weir-mgmt generated), the
guide's example addresses are loopback ones (the subscriber-facing
198.51.100.53 is the fastpath's address, a control TCP address its own, a
forward target gslb-sim), `systemctl` starts, stops or signals the daemons
directly, weirctl reaches the nodes' control sockets in this directory
(`-C`), and placeholders (NAME, P, T, N, FILE, NODE) get a value.

Both ways are checked: every command the test runs is quoted from the guide
(a command the guide drops fails here), and every command of the guide is
run or listed below as a reference that is not a command by itself (a new
command in the guide fails here until it is walked).

Run: python3 tests/integration/test_operator_guide.py --build-dir build
"""

import os
import re
import shlex
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
GUIDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "operator-guide.md")
WEIRCTL = weirtest.binary(BUILD_DIR, "mgmt/weirctl")
BINARIES = {"weir-fastpath": "fastpath/weir-fastpath", "weir-recursor": "recursor/weir-recursor",
            "weir-mgmt": "mgmt/weir-mgmt"}

ZONES = (zone("example.com.", ttl=300) + record("www", "A", "192.0.2.80", ttl=300) +
         zone("cdn.example.com.", ttl=300) + record("@", "A", "192.0.2.81", ttl=300) +
         zone("cdn.example.net.", ttl=300) + record("@", "A", "192.0.2.82", ttl=300))

# Spans of the guide that name a command without being one to run.
REFERENCES = {
    "weirctl", "weir-fastpath", "weir-recursor", "weir-mgmt", "weirctl --all", "weirctl tag add",
    "weirctl account add", "weirctl -C fastpath", "weirctl -C recursor", "systemctl reload",
    "systemctl status",  # systemd's view of a unit: no systemd here
    "systemctl daemon-reload",  # after copying the DPDK drop-in: no systemd here
}
# Node commands of weirctl (the rest go to weir-mgmt).
NODE_VERBS = {"cache", "stats", "reload", "upstreams", "partitions", "segments"}


def guide_text() -> str:
    with open(GUIDE, encoding="utf-8") as f:
        return f.read()


def guide_commands(text: str) -> list:
    """Every command of the guide, in order: inline code spans starting with
    a program name (broken lines joined), and `$ ` lines of its examples."""
    out = []
    for m in re.finditer(r"```[^\n]*\n(.*?)```|`([^`]+)`", text, re.S):
        if m.group(1) is not None:
            out += [line[2:].strip() for line in m.group(1).splitlines() if line.startswith("$ ")]
            continue
        span = re.sub(r"\s+", " ", m.group(2)).strip()
        if re.match(r"(weirctl|weir-fastpath|weir-recursor|weir-mgmt|systemctl|dig)( |$)", span):
            out.append(span)
    return out


def fenced_example(text: str, first_line: str) -> str:
    """The fenced block of the guide whose first line is `first_line`."""
    for m in re.finditer(r"```[^\n]*\n(.*?)```", text, re.S):
        if m.group(1).startswith(first_line):
            return m.group(1)
    raise AssertionError(f"the guide has no example starting {first_line!r}")


class OperatorGuideTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig")
        cls.text = guide_text()
        cls.commands = guide_commands(cls.text)

    def setUp(self):
        self.etc = tempfile.mkdtemp(prefix="weir-guide-")
        self.addCleanup(shutil.rmtree, self.etc, True)
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        self.addCleanup(self.sim.stop)
        self.ran = set()
        self.daemons = {}
        self.addCleanup(self.stop_all)
        self.fp_sock = os.path.join(self.etc, "fastpath.sock")
        self.rec_sock = os.path.join(self.etc, "recursor.sock")
        self.fp_tcp = f"127.0.0.1:{weirtest.free_port(udp_and_tcp=False)}"
        self.mgmt = None
        self.managed = False

    # ------------------------------------------------------------ the topology

    def stop_all(self):
        for d in list(self.daemons.values()) + ([self.mgmt] if self.mgmt else []):
            d.stop()

    def write(self, name: str, text: str) -> str:
        path = os.path.join(self.etc, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def configs(self):
        """fastpath.toml and recursor.toml in /etc/weir (here): loopback, the
        guide's city map and tags; with a [mgmt] table once weir-mgmt runs."""
        rec = weirtest.recursor_config(forwarders=[f"{self.sim.host}:{self.sim.port}"],
                                       tags=os.path.join(self.etc, "tags.txt"), control={"socket": self.rec_sock})
        mgmt_rec = mgmt_fp = ""
        if self.managed:
            mgmt_rec = weirtest.mgmt_node_section(self.mgmt.address, "rec-1", self.mgmt.token_file,
                                                  os.path.join(self.etc, "rec-state"))
            mgmt_fp = weirtest.mgmt_node_section(self.mgmt.address, "fp-beijing-1", self.mgmt.token_file,
                                                 os.path.join(self.etc, "fp-state"))
        self.write("recursor.toml", rec + mgmt_rec)
        return rec + mgmt_rec, mgmt_fp

    def fastpath_config(self, mgmt_fp: str) -> str:
        recursor = self.daemons["recursor"]
        text = weirtest.fastpath_config(
            [f"{recursor.host}:{recursor.port}"], citymap=os.path.join(self.etc, "citymap.csv"),
            tags=os.path.join(self.etc, "tags.txt"),
            control={"socket": self.fp_sock, "listen": self.fp_tcp,
                     "token_file": os.path.join(self.etc, "mgmt.token")}) + mgmt_fp
        self.write("fastpath.toml", text)
        return text

    def start_pair(self):
        for name in ("fastpath", "recursor"):
            if name in self.daemons:
                self.assertEqual(self.daemons.pop(name).stop(), 0)
        rec_text, mgmt_fp = self.configs()
        self.daemons["recursor"] = weirtest.Recursor(BUILD_DIR, rec_text)
        self.daemons["fastpath"] = weirtest.Fastpath(BUILD_DIR, self.fastpath_config(mgmt_fp))

    # ------------------------------------------------------------ the guide's commands

    def guide(self, command: str, expect: int = 0, **values) -> subprocess.CompletedProcess:
        """Runs `command`, quoted from the guide, with placeholders filled from
        `values`; asserts its exit status."""
        self.assertIn(command, self.commands, "the guide no longer gives this command")
        self.ran.add(command)
        words = []
        for w in shlex.split(command.replace("[", "").replace("]", "")):
            words.append(values.get(w, w))
        words = [w.replace("/etc/weir/", self.etc + "/") for w in words]
        program = words[0]
        if program == "systemctl":
            return self.systemctl(words[1:])
        if program == "dig":
            return self.dig(words[1:])
        env = dict(os.environ, WEIR_MGMT=self.mgmt.address if self.mgmt else "127.0.0.1:1",
                   WEIR_MGMT_TOKEN_FILE=os.path.join(self.etc, "mgmt.token"))
        if program == "weirctl":
            argv = [WEIRCTL, "--actor", "operator"] + self.weirctl_target(words[1:])
        else:
            argv = [weirtest.binary(BUILD_DIR, BINARIES[program])] + words[1:]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=self.etc, env=env)
        self.assertEqual(r.returncode, expect, f"{command}: {' '.join(argv)}\n{r.stdout}\n{r.stderr}")
        return r

    def weirctl_target(self, args: list) -> list:
        """A node command reaches this test's control sockets."""
        if args[:2] == ["-C", "recursor"]:
            return ["-C", self.rec_sock] + args[2:]
        if args[:1] == ["-C"] and args[1] == "192.0.2.10:8953":
            return ["-C", self.fp_tcp] + args[2:]
        verb = next((a for a in args if not a.startswith("-")), "")
        if verb in NODE_VERBS and "--all" not in args and "-C" not in args:
            return ["-C", self.fp_sock] + args
        return args

    def systemctl(self, args: list):
        if args[:2] == ["enable", "--now"] and args[2] == "weir-mgmt":
            self.mgmt = weirtest.Mgmt(BUILD_DIR, self.etc)
        elif args[0] == "restart" and set(args[1:]) == {"weir-recursor", "weir-fastpath"}:
            self.start_pair()
        elif args[0] == "reload" and args[1] == "weir-fastpath":
            fp = self.daemons["fastpath"]
            before = fp.process.stderr_text().count("config: reload")
            os.kill(fp.pid, signal.SIGHUP)
            self.assertTrue(weirtest.wait_until(
                lambda: fp.process.stderr_text().count("config: reload") > before, 5), fp.process.stderr_text())
        else:
            self.fail(f"systemctl {' '.join(args)}: not walked")

    def dig(self, args: list):
        server = next(a[1:] for a in args if a.startswith("@"))
        self.assertEqual(server, "198.51.100.53", "the subscriber-facing address the guide uses")
        name = next(a for a in args if not a.startswith("@"))
        r = self.daemons["fastpath"].dig(name)
        self.assertEqual(r.status, "NOERROR", r.text)
        self.assertTrue(r.addresses(), r.text)
        return r

    def broken_config_example(self):
        """The guide's example of --check on a broken config: a config and tag
        file broken as it shows, in another /etc/weir; its lines, verbatim."""
        block = fenced_example(self.text, "$ weir-fastpath --check -c /etc/weir/fastpath.toml --log-target stderr")
        lines = block.splitlines()
        expected = [line[len("... "):] for line in lines if line.startswith("... ")]
        self.assertEqual(lines[-2:], ["$ echo $?", "2"])
        etc, self.etc = self.etc, os.path.join(self.etc, "broken")
        try:
            os.mkdir(self.etc)
            self.write("fastpath.toml", "[server]\nlisten = [\"127.0.0.1:0\"]\nworkers = \"two\"\n\n[acl]\n"
                       "# subscribers\n\nallow = [\"10.0.0.0/8\", \"10.0.0.0/33\"]\n[upstream]\n"
                       "ordinary = [\"127.0.0.1:5353\"]\n[partitions]\ncitymap = \"/etc/weir/city.csv\"\n"
                       "tags = \"/etc/weir/tags.txt\"\n".replace("/etc/weir/", self.etc + "/"))
            self.write("tags.txt", "example.com weight=on\ncdn.example.com colour=blue\n\n# again\nexample.com\n")
            r = self.guide(lines[0][2:], expect=2)
            got = [re.sub(r"^\S+ \S+\[\d+\] ", "", line) for line in r.stderr.splitlines()]
            self.assertEqual(got, [e.replace("/etc/weir/", self.etc + "/") for e in expected], r.stderr)
            self.ran.add("echo $?")  # the exit status the example shows: 2, asserted above
        finally:
            self.etc = etc

    # ------------------------------------------------------------ the walk

    def test_the_guide_end_to_end(self):
        # weir-mgmt first: its token is the one the control channel's TCP
        # listener and weirctl use (/etc/weir/mgmt.token).
        self.guide("systemctl enable --now weir-mgmt")
        # The guide's city map and tags, with its example addresses made loopback ones.
        self.write("citymap.csv", fenced_example(self.text, "# cidr, city"))
        tags = fenced_example(self.text, "# suffix")
        tags = tags.replace("192.0.2.53@5300", f"{self.sim.host}@{self.sim.port}").replace(",[2001:db8::53]@53", "")
        self.assertNotRegex(tags, r"192\.0\.2\.|2001:db8", "an example address left in the tags")
        self.write("tags.txt", tags)

        # A first configuration.
        self.configs()
        self.start_pair()
        self.guide("weir-fastpath --check -c /etc/weir/fastpath.toml")
        self.guide("weir-fastpath --check -c FILE", FILE=os.path.join(self.etc, "fastpath.toml"))
        self.broken_config_example()
        self.guide("systemctl restart weir-recursor weir-fastpath")
        self.guide("dig @198.51.100.53 cdn.example.com")
        self.assertIn("beijing", self.guide("weirctl partitions").stdout)
        dump = self.guide("weirctl cache dump --name cdn.example.com --suffix").stdout
        self.assertIn("cdn.example.com.", dump)

        # Cache control, on the fastpath and the recursor.
        self.guide("weirctl cache stats")
        self.assertIn("weir_queries_total", self.guide("weirctl stats").stdout)
        self.guide("weirctl upstreams")
        self.guide("weirctl cache dump [--name NAME [--suffix]] [--partition P] [--type T] [--limit N]",
                   NAME="cdn.example.com", P="default", T="A", N="10")
        # The guide's tags learn no segments (no level=adaptive): empty, but answered.
        self.assertIn("0 segments", self.guide("weirctl segments ls NAME [--type T] [--limit N]",
                                               NAME="cdn.example.com", T="A", N="10").stdout)
        self.assertIn("GSLB SEES", self.guide("weirctl segments diff").stdout)
        self.guide("weirctl segments diff [--name N1,N2] [--max-names K] [--proposal]",
                   **{"N1,N2": "cdn.example.com,www.example.com", "K": "5"})
        self.guide("weirctl cache flush NAME --type T", NAME="cdn.example.com", T="A")
        self.guide("weirctl cache flush [NAME] --partition P", NAME="cdn.example.com", P="default")
        self.guide("weirctl cache flush NAME --suffix", NAME="example.com")
        self.guide("weirctl cache flush NAME", NAME="cdn.example.com")
        self.guide("weirctl -C 192.0.2.10:8953 --token-file /etc/weir/mgmt.token cache stats")
        self.guide("dig @198.51.100.53 cdn.example.com")

        # Reload, both ways.
        self.assertIn("reloaded the city map and tags", self.guide("weirctl reload").stdout)
        self.guide("systemctl reload weir-fastpath")

        # The weir-mgmt workflow: the same data through weir-mgmt, the nodes following it.
        self.guide("weirctl citymap import citymap.csv")
        self.guide("weirctl tag import tags.txt")
        self.managed = True
        self.start_pair()
        self.guide("weirctl tag add cdn.example.net weight=on ecs=on")
        self.guide("weirctl tag set cdn.example.net answer=ordered")
        self.guide("weirctl citymap add 10.9.0.0/16 hangzhou 203.0.113.0/24")
        self.guide("weirctl citymap rm 10.9.0.0/16")
        self.guide("weirctl citymap import FILE", FILE="citymap.csv")
        self.guide("weirctl tag import FILE", FILE="tags.txt")
        self.assertIn("operator tag edit: cdn.example.net.", self.guide("weirctl audit").stdout)
        version = self.mgmt.weirctl_json("status")["version"]
        for node in ("fp-beijing-1", "rec-1"):
            self.mgmt.wait_in_sync(node, version)
        nodes = self.guide("weirctl nodes").stdout
        self.assertRegex(nodes, r"fp-beijing-1 kind=fastpath connected=yes .*state=in-sync")
        self.assertRegex(nodes, r"rec-1 kind=recursor connected=yes .*state=in-sync")
        self.guide("dig @198.51.100.53 cdn.example.com")
        self.assertIn("== fp-beijing-1 (fastpath): ok", self.guide("weirctl --all cache flush NAME",
                                                                   NAME="cdn.example.com").stdout)
        self.assertIn("== fp-beijing-1 (fastpath): ok", self.guide("weirctl --all cache flush www.example.com").stdout)
        out = self.guide("weirctl --all --kind fastpath partitions").stdout
        self.assertNotIn("rec-1", out)
        # With mgmt owning the files, a node's reload says so (exit 1).
        self.assertIn("come from weir-mgmt", self.guide("weirctl reload", expect=1).stderr)
        # A retired node: refused while connected, forgotten once stopped.
        self.guide("weirctl nodes rm NODE", NODE="rec-1", expect=1)
        self.assertEqual(self.daemons.pop("recursor").stop(), 0)
        self.guide("weirctl nodes rm NODE", NODE="rec-1")
        self.assertNotIn("rec-1", self.guide("weirctl nodes").stdout)

        # Every command of the guide was walked or is a reference.
        missing = [c for c in self.commands if c not in self.ran and c not in REFERENCES]
        self.assertEqual(missing, [], "commands of docs/operator-guide.md this walk does not run")


if __name__ == "__main__":
    unittest.main()
