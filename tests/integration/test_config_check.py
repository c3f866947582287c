"""`--check` validates the whole configuration as the start would and reports every error
(docs/operator-guide.md#checking-a-configuration): the config file's errors as FILE:LINE:COLUMN,
then those of the files it names (city map, tags, [mgmt] token, root hints, trust anchor) as
PATH:LINE, one per line on stderr, exit code 2. The real start refuses the same configs with the
same lines, before it binds anything.

Run: python3 tests/integration/test_config_check.py --build-dir build
"""

import os
import re
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
BINARIES = {
    "fastpath": "fastpath/weir-fastpath",
    "recursor": "recursor/weir-recursor",
    "mgmt": "mgmt/weir-mgmt",
}
TOKEN = "check-token-0123456789abcdef\n"
HINTS = ".  3600000 IN NS ns.root.\nns.root. 3600000 IN A 127.0.101.1\n"

# Minimal valid configs; a case appends to them or replaces a line. Line numbers below count
# from these texts.
FASTPATH = """[server]
listen = ["127.0.0.1:0"]
metrics_listen = "127.0.0.1:0"

[acl]
allow = ["127.0.0.0/8"]

[upstream]
ordinary = ["127.0.0.1:5353"]
"""
RECURSOR = """[server]
listen = ["127.0.0.1:0"]

[acl]
allow = ["127.0.0.0/8"]

[resolver]
root_hints = "root.hints"
"""
MGMT = """[mgmt]
listen = "127.0.0.1:0"
database = "mgmt.db"
token_file = "mgmt.token"
"""

# What a config error line of the log says, without the time stamp and the process.
ERROR_LINE = re.compile(r" error config: (.*)$")


def error_lines(stderr):
    return [m.group(1) for m in map(ERROR_LINE.search, stderr.splitlines()) if m]


class ConfigCheckTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = self.tmp.name

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def run_daemon(self, daemon, config, *flags, timeout=15):
        argv = [weirtest.binary(BUILD_DIR, BINARIES[daemon]), "-c", config, "--log-target", "stderr", *flags]
        return weirtest.run(argv, timeout=timeout)

    def check_fails(self, daemon, config_text, expected, files=None, also_start=False):
        """Writes the config (as config.toml) and `files` beside it, runs --check and asserts exit 2
        with exactly the `expected` errors, each a regular expression matched by one line, in that
        order. With also_start, the real start must refuse it the same way."""
        for name, text in (files or {}).items():
            self.write(name, text)
        config = self.write("config.toml", config_text)
        r = self.run_daemon(daemon, config, "--check")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertEqual(r.stdout, "")
        lines = error_lines(r.stderr)
        self.assertEqual(len(lines), len(expected), "\n".join(lines))
        for line, want in zip(lines, expected):
            self.assertRegex(line, want.replace("CONFIG", re.escape(config)).replace("DIR", re.escape(self.dir)))
        if also_start:
            started = time.monotonic()
            s = self.run_daemon(daemon, config)
            self.assertEqual(s.returncode, 2, s.stdout + s.stderr)
            self.assertNotIn("ready", s.stdout)
            self.assertEqual(error_lines(s.stderr), lines)
            self.assertLess(time.monotonic() - started, 5)
        return lines

    def check_passes(self, daemon, config_text, files=None):
        for name, text in (files or {}).items():
            self.write(name, text)
        config = self.write("config.toml", config_text)
        r = self.run_daemon(daemon, config, "--check")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, f"{config}: ok\n")

    # ---- the config file itself

    def test_unknown_keys_everywhere(self):
        text = FASTPATH.replace("[acl]\n", "[acl]\ncolour = 1\n") + "shape = 2\n\n[cache]\nbites = 10\n"
        self.check_fails("fastpath", text, [
            r"^CONFIG:6:1: unknown key 'colour' in \[acl\]$",
            r"^CONFIG:11:1: unknown key 'shape' in \[upstream\]$",
            r"^CONFIG:14:1: unknown key 'bites' in \[cache\]$",
        ], also_start=True)

    def test_wrong_types(self):
        text = FASTPATH.replace('metrics_listen = "127.0.0.1:0"',
                                'metrics_listen = "127.0.0.1:0"\nworkers = "two"\ntcp = 1')
        text += "timeout_ms = 1.5\n"
        self.check_fails("fastpath", text, [
            r"^CONFIG:4:11: 'workers' must be an integer$",
            r"^CONFIG:5:7: 'tcp' must be true or false$",
            r"^CONFIG:12:14: 'timeout_ms' must be an integer$",
        ])

    def test_bad_cidrs_each_reported(self):
        text = FASTPATH.replace('allow = ["127.0.0.0/8"]',
                                'allow = ["127.0.0.0/8", "10.0.0.0/33", "not-a-net"]\n'
                                'trusted_forwarders = ["192.0.2.1/40"]')
        # A rejected entry is not reported again as "allow must list...".
        self.check_fails("fastpath", text, [
            r"^CONFIG:6:25: .*33",
            r"^CONFIG:6:40: .*not-a-net",
            r"^CONFIG:7:23: .*40",
        ])

    def test_bad_ports(self):
        text = RECURSOR.replace('listen = ["127.0.0.1:0"]',
                                'listen = ["127.0.0.1:99999"]\nmetrics_listen = "127.0.0.1:port"')
        self.check_fails("recursor", text, [
            r"^CONFIG:2:11: .*127\.0\.0\.1:99999",
            r"^CONFIG:3:18: .*127\.0\.0\.1:port",
        ], files={"root.hints": HINTS}, also_start=True)

    def test_a_missing_list_is_reported_once_with_the_other_errors(self):
        text = RECURSOR.replace('allow = ["127.0.0.0/8"]', "") + "verbosity = 9\n"
        self.check_fails("recursor", text, [
            r"^CONFIG:1:1: \[acl\] allow must list the front nodes",
            r"^CONFIG:9:13: 'verbosity' must be between 0 and 5, not 9$",
        ], files={"root.hints": HINTS})

    # ---- the files the config names

    def test_missing_files_name_the_key_and_the_path(self):
        text = FASTPATH + '\n[partitions]\ncitymap = "nowhere/citymap.csv"\ntags = "tags.txt"\n'
        self.check_fails("fastpath", text, [
            r"^CONFIG:12:11: \[partitions\] citymap 'DIR/nowhere/citymap\.csv': No such file or directory$",
            r"^CONFIG:13:8: \[partitions\] tags 'DIR/tags\.txt': No such file or directory$",
        ], also_start=True)

    def test_malformed_city_map_reports_every_bad_line(self):
        csv = ("# cidr, city, ecs\n"
               "10.0.0.0/8, beijing, 192.0.2.0/24\n"
               "10.1.0.0/16, shanghai\n"                 # 3: two fields
               "10.2.0.0/33, shanghai, 198.51.100.0\n"   # 4: bad prefix
               "10.3.0.0/16, bad city!, \n"              # 5: bad name
               "10.4.0.0/16, guangzhou, 203.0.113.0/99\n"  # 6: bad ECS prefix
               "2001:db8::/32, beijing,\n")
        text = FASTPATH + '\n[partitions]\ncitymap = "citymap.csv"\n'
        self.check_fails("fastpath", text, [
            r"^DIR/citymap\.csv:3: expected 3 fields",
            r"^DIR/citymap\.csv:4: .*33",
            r"^DIR/citymap\.csv:5: bad city name 'bad city!'$",
            r"^DIR/citymap\.csv:6: bad ECS prefix length '99'$",
        ], files={"citymap.csv": csv}, also_start=True)

    def test_city_map_duplicates_name_the_first_line(self):
        csv = ("10.0.0.0/8, beijing, 192.0.2.0/24\n"
               "10.1.0.0/16, shanghai, 198.51.100.0/24\n"
               "10.0.0.0/8, shanghai,\n"                    # 3: the prefix of line 1 again
               "10.2.0.0/16, beijing, 203.0.113.0/24\n"     # 4: beijing's second IPv4 ECS address
               "10.3.0.0/16, beijing, 192.0.2.0/24\n"       # the same address again: fine
               "10.1.0.0/16, beijing,\n")                   # 6: the prefix of line 2 again
        text = FASTPATH + '\n[partitions]\ncitymap = "citymap.csv"\n'
        self.check_fails("fastpath", text, [
            r"^DIR/citymap\.csv:3: duplicate prefix 10\.0\.0\.0/8 \(first on line 1\)$",
            r"^DIR/citymap\.csv:4: city 'beijing' already has a different IPv4 ECS source \(first on line 1\)$",
            r"^DIR/citymap\.csv:6: duplicate prefix 10\.1\.0\.0/16 \(first on line 2\)$",
        ], files={"citymap.csv": csv})

    def test_city_map_errors_are_capped_per_file(self):
        csv = "".join(f"10.{i}.0.0/16 beijing\n" for i in range(150))
        text = FASTPATH + '\n[partitions]\ncitymap = "citymap.csv"\n'
        lines = self.check_fails(
            "fastpath", text,
            [rf"^DIR/citymap\.csv:{i + 1}: expected 3 fields" for i in range(100)]
            + [r"^DIR/citymap\.csv: \.\.\. and 50 more errors$"],
            files={"citymap.csv": csv})
        self.assertEqual(len(lines), 101)

    def test_bad_tag_lines_of_the_fastpath_and_the_recursor(self):
        tags = ("example.com weight=on\n"
                "bad..name weight=on\n"             # 2
                "cdn.example.com colour=red\n"      # 3
                "shop.example.com weight=maybe\n"   # 4
                "example.com ecs=on\n")             # 5: example.com again
        expected = [
            r"^DIR/tags\.txt:2: bad domain suffix 'bad\.\.name'$",
            r"^DIR/tags\.txt:3: unknown key 'colour'$",
            r"^DIR/tags\.txt:4: weight: ",
            r"^DIR/tags\.txt:5: duplicate tag for example\.com\. \(first on line 1\)$",
        ]
        self.check_fails("fastpath", FASTPATH + '\n[partitions]\ntags = "tags.txt"\n', expected,
                         files={"tags.txt": tags})
        self.check_fails("recursor", RECURSOR + '\n[tags]\nfile = "tags.txt"\n', expected,
                         files={"tags.txt": tags, "root.hints": HINTS}, also_start=True)

    def test_token_files(self):
        # weir-mgmt's own token: too short.
        self.check_fails("mgmt", MGMT, [
            r"^CONFIG:4:14: \[mgmt\] token_file 'DIR/mgmt\.token': the token must have at least 16 characters$",
        ], files={"mgmt.token": "short\n"}, also_start=True)
        # A node's: missing, with a config error beside it.
        node = (FASTPATH + '\n[mgmt]\naddress = "127.0.0.1:1"\ntoken_file = "node.token"\n'
                'state_dir = "state"\nport = 3\n')
        self.check_fails("fastpath", node, [
            r"^CONFIG:15:1: unknown key 'port' in \[mgmt\]$",
            r"^CONFIG:13:14: \[mgmt\] token_file 'DIR/node\.token': No such file or directory$",
        ])
        # A directory is no token file.
        os.mkdir(self.path("tokendir"))
        self.check_fails("mgmt", MGMT.replace("mgmt.token", "tokendir"), [
            r"^CONFIG:4:14: \[mgmt\] token_file 'DIR/tokendir': Is a directory$",
        ])
        self.check_passes("mgmt", MGMT, files={"mgmt.token": TOKEN})

    def test_a_node_with_mgmt_and_no_stored_snapshot_reads_its_files(self):
        # No snapshot in state_dir: the start reads the city map, so it must be there.
        node = (FASTPATH + '\n[partitions]\ncitymap = "citymap.csv"\n\n[mgmt]\naddress = "127.0.0.1:1"\n'
                'token_file = "node.token"\nstate_dir = "state"\n')
        self.check_fails("fastpath", node, [
            r"^CONFIG:12:11: \[partitions\] citymap 'DIR/citymap\.csv': No such file or directory$",
        ], files={"node.token": TOKEN})
        self.check_passes("fastpath", node, files={"citymap.csv": "10.0.0.0/8,beijing,192.0.2.0\n"})

    def test_missing_root_hints_refuse_the_recursor(self):
        self.check_fails("recursor", RECURSOR, [
            r"^CONFIG:8:14: \[resolver\] root_hints 'DIR/root\.hints': No such file or directory$",
        ], also_start=True)

    def test_root_hints_without_servers_and_a_bad_trust_anchor(self):
        hints = ("; nothing but comments and a stray line\n"
                 "$TTL 3600\n"
                 "ns.root. 3600000 IN A 127.0.101.300\n"   # 3: not an address
                 "orphan\n")                               # 4: not a record
        text = RECURSOR + 'trust_anchor = "root.key"\n'
        self.check_fails("recursor", text, [
            r"^DIR/root\.hints:3: '127\.0\.101\.300' is not an IPv4 address$",
            r"^DIR/root\.hints:4: not a resource record",
            r"^DIR/root\.hints: no NS record",
            r"^DIR/root\.hints: no address \(A or AAAA\) record",
            r"^DIR/root\.key: no DS or DNSKEY record",
        ], files={"root.hints": hints, "root.key": "; empty\n"}, also_start=True)
        # Multi-line records (parentheses), as DNSKEY files have them, are read whole.
        self.check_passes("recursor", text, files={
            "root.hints": HINTS,
            "root.key": ". IN DNSKEY ( 257 3 8\n  AwEAAaz/tAm8yTn4Mfeh ) ; keytag 20326\n"})

    def test_config_and_file_errors_in_one_run(self):
        text = RECURSOR.replace("[acl]\n", "[acl]\nallowed = []\n") + '\n[tags]\nfile = "tags.txt"\n'
        self.check_fails("recursor", text, [
            r"^CONFIG:5:1: unknown key 'allowed' in \[acl\]$",
            r"^CONFIG:9:14: \[resolver\] root_hints 'DIR/root\.hints': No such file or directory$",
            r"^DIR/tags\.txt:1: unknown key 'weigth'$",
        ], files={"tags.txt": "example.com weigth=on\n"}, also_start=True)

    def test_valid_configs_pass(self):
        files = {"root.hints": HINTS, "tags.txt": "example.com weight=on\n",
                 "citymap.csv": "10.0.0.0/8,beijing,192.0.2.0\n"}
        self.check_passes("recursor", RECURSOR + '\n[tags]\nfile = "tags.txt"\n', files)
        self.check_passes("fastpath", FASTPATH + '\n[partitions]\ncitymap = "citymap.csv"\ntags = "tags.txt"\n',
                          files)


if __name__ == "__main__":
    unittest.main()
