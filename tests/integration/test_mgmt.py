"""Black-box tests of the management plane (docs/behaviour.md#management): weir-mgmt with
its SQLite database, weirctl, and the push stream into weir-fastpath and
weir-recursor. gslb-sim is the GSLB; cities are source ranges on loopback.

Run: python3 tests/integration/test_mgmt.py --build-dir build
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import gslb_name, no_empty_weight_option, view, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()

CITY_A = ["192.0.2.11", "192.0.2.12", "192.0.2.13"]
CITY_B = ["192.0.2.21", "192.0.2.22"]

ZONES = (no_empty_weight_option() + zone("cdn.example.net.", rname="admin", minimum=30, ttl=60) +
         gslb_name("x", view("198.51.100.0/24", CITY_A, [5, 3, 1], scope=24),
                   view("203.0.113.0/24", CITY_B, [1, 1], scope=24), ttl=300))

CITYMAP = """\
# cidr,city,ecs_address/prefix
127.1.0.0/16,city-a,198.51.100.0/24
127.2.0.0/16,city-b,203.0.113.0/24
"""
TAG = ["cdn.example.net", "weight=on", "ecs=on", "answer=single", "level=city"]
QNAME = "x.cdn.example.net"


class MgmtTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="weir-mgmt-test-")
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        self.addCleanup(self.sim.stop)
        self.mgmt_port = weirtest.free_port(udp_and_tcp=False)
        self.mgmt = weirtest.Mgmt(BUILD_DIR, self.dir, port=self.mgmt_port)
        self.addCleanup(lambda: self.mgmt.stop())
        self.addCleanup(shutil.rmtree, self.dir, True)

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def start_fastpath(self, node_id="fp-1", state="fp-state"):
        upstream = f"{self.sim.host}:{self.sim.port}"
        config = weirtest.fastpath_config([upstream]) + weirtest.mgmt_node_section(
            self.mgmt.address, node_id, self.mgmt.token_file, os.path.join(self.dir, state))
        fp = weirtest.Fastpath(BUILD_DIR, config)
        self.addCleanup(fp.stop)
        return fp

    def push_city_setup(self):
        r = self.mgmt.weirctl("citymap", "import", self.write("cities.csv", CITYMAP))
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.mgmt.weirctl("tag", "add", *TAG)
        self.assertEqual(r.returncode, 0, r.stderr)
        return self.mgmt.weirctl_json("status")["version"]

    def assert_city_answers(self, fp):
        a = fp.dig(QNAME, source="127.1.0.7")
        b = fp.dig(QNAME, source="127.2.0.7")
        self.assertEqual(a.status, "NOERROR")
        self.assertEqual(len(a.addresses()), 1)
        self.assertIn(a.addresses()[0], CITY_A)
        self.assertEqual(len(b.addresses()), 1)
        self.assertIn(b.addresses()[0], CITY_B)

    def test_push_reaches_fastpath_and_takes_effect(self):
        fp = self.start_fastpath()
        self.mgmt.wait_in_sync("fp-1", 0)
        # Untagged: forwarded without ECS, gslb-sim has no view for it -> no address.
        self.assertEqual(fp.dig(QNAME, source="127.1.0.7").addresses(), [])
        version = self.push_city_setup()
        self.assertEqual(version, 2)
        node = self.mgmt.wait_in_sync("fp-1", 2)
        self.assertTrue(node["in_sync"])
        self.assert_city_answers(fp)
        m = fp.metrics()
        self.assertEqual(m.value("weir_mgmt_snapshot_version"), 2)
        self.assertEqual(m.value("weir_mgmt_connected"), 1)
        # Every change is audited with its actor and version.
        audit = self.mgmt.weirctl_json("audit")
        self.assertEqual([(e["version"], e["action"]) for e in audit], [(1, "citymap import"), (2, "tag add")])
        self.assertTrue(all(e["actor"] == "test" for e in audit))
        # Removing the tag is pushed too: the name is plain again.
        self.assertEqual(self.mgmt.weirctl("tag", "rm", "cdn.example.net").returncode, 0)
        self.mgmt.wait_in_sync("fp-1", 3)
        self.assertEqual(self.mgmt.weirctl_json("tag", "ls")["tags"], [])

    def test_changes_after_the_first_arrive_as_deltas_and_keep_the_city_map(self):
        fp = self.start_fastpath()
        self.push_city_setup()
        self.mgmt.wait_in_sync("fp-1", 2)
        before = fp.metrics()
        for i, name in enumerate(("a.example", "b.example", "c.example")):
            self.assertEqual(self.mgmt.weirctl("tag", "add", name, "ecs=on").returncode, 0)
            self.mgmt.wait_in_sync("fp-1", 3 + i)
        after = fp.metrics()
        self.assertEqual(after.value("weir_mgmt_deltas_total", result="applied") -
                         before.value("weir_mgmt_deltas_total", result="applied"), 3)
        # Three tag changes: the tags were rebuilt three times, the city map never.
        self.assertEqual(after.value("weir_mgmt_applied_parts_total", part="tags") -
                         before.value("weir_mgmt_applied_parts_total", part="tags"), 3)
        self.assertEqual(after.value("weir_mgmt_applied_parts_total", part="citymap"),
                         before.value("weir_mgmt_applied_parts_total", part="citymap"))
        self.assert_city_answers(fp)

    def test_city_map_change_never_serves_another_citys_entry(self):
        fp = self.start_fastpath()
        self.push_city_setup()
        self.mgmt.wait_in_sync("fp-1", 2)
        self.assert_city_answers(fp)  # both cities cached now
        # Same cities in the other order, plus a new one first: a cache keyed
        # by position would now give city B's subscribers city A's entry.
        reordered = ("127.3.0.0/16,city-c,192.0.2.0/24\n127.2.0.0/16,city-b,203.0.113.0/24\n"
                     "127.1.0.0/16,city-a,198.51.100.0/24\n")
        r = self.mgmt.weirctl("citymap", "import", self.write("reordered.csv", reordered))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.mgmt.wait_in_sync("fp-1", 3)
        for _ in range(20):
            self.assert_city_answers(fp)
        # City C was removed from nothing and has no view: it gets no address.
        self.assertEqual(fp.dig(QNAME, source="127.3.0.7").addresses(), [])
        # Dropping city A: its subscribers fall to the default city, not to B.
        only_b = "127.2.0.0/16,city-b,203.0.113.0/24\n"
        self.assertEqual(self.mgmt.weirctl("citymap", "import", self.write("only-b.csv", only_b)).returncode, 0)
        self.mgmt.wait_in_sync("fp-1", 4)
        self.assertEqual(fp.dig(QNAME, source="127.1.0.7").addresses(), [])
        self.assertIn(fp.dig(QNAME, source="127.2.0.7").addresses()[0], CITY_B)

    def test_citymap_and_tag_edits_in_place_reach_the_node(self):
        fp = self.start_fastpath()
        self.push_city_setup()
        self.mgmt.wait_in_sync("fp-1", 2)
        self.assert_city_answers(fp)
        # One subscriber range of city A moves to city B: a longer prefix added by itself.
        r = self.mgmt.weirctl("citymap", "add", "127.1.5.0/24", "city-b")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.mgmt.wait_in_sync("fp-1", 3)
        self.assertIn(fp.dig(QNAME, source="127.1.5.9").addresses()[0], CITY_B)
        self.assertIn(fp.dig(QNAME, source="127.1.0.7").addresses()[0], CITY_A)
        self.assertEqual(self.mgmt.weirctl("citymap", "ls").stdout, CITYMAP + "127.1.5.0/24,city-b,\n")
        # The same prefix again needs --replace; a bad line changes nothing.
        self.assertEqual(self.mgmt.weirctl("citymap", "add", "127.1.5.0/24", "city-a").returncode, 1)
        self.assertEqual(self.mgmt.weirctl("citymap", "add", "127.1.5.1/24", "city-a").returncode, 1)
        self.assertEqual(self.mgmt.weirctl_json("status")["version"], 3)
        r = self.mgmt.weirctl("citymap", "rm", "127.1.5.0/24")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.mgmt.wait_in_sync("fp-1", 4)
        self.assertIn(fp.dig(QNAME, source="127.1.5.9").addresses()[0], CITY_A)
        self.assertEqual(self.mgmt.weirctl("citymap", "ls").stdout, CITYMAP)
        # A tag key changed in place: answer=ordered gives every address of the city.
        r = self.mgmt.weirctl("tag", "set", "cdn.example.net", "answer=ordered")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.mgmt.wait_in_sync("fp-1", 5)
        self.assertEqual(sorted(fp.dig(QNAME, source="127.1.0.7").addresses()), sorted(CITY_A))
        tags = self.mgmt.weirctl_json("tag", "ls")["tags"]
        self.assertEqual(len(tags), 1)
        self.assertIn("answer=ordered", tags[0])
        self.assertIn("ecs=on", tags[0])
        audit = [e["action"] for e in self.mgmt.weirctl_json("audit")]
        self.assertEqual(audit[-3:], ["citymap add", "citymap rm", "tag edit"])

    def test_weirctl_host_names_and_json_errors(self):
        exe = weirtest.binary(BUILD_DIR, "mgmt/weirctl")

        def ctl(server, *args):
            return weirtest.run([exe, "--server", server, "--token-file", self.mgmt.token_file, "--actor", "test",
                                 "--json", *args], timeout=30)

        # A host name (localhost may give ::1 first; mgmt listens on 127.0.0.1 only).
        r = ctl(f"localhost:{self.mgmt.port}", "status")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("version", json.loads(r.stdout))
        # Errors are one JSON object on stdout with the exit code, and the reason on stderr.
        r = ctl(self.mgmt.address, "tag", "rm", "missing.example")
        self.assertEqual(r.returncode, 1, r.stderr)
        err = json.loads(r.stdout)
        self.assertEqual(err["exit_code"], 1)
        self.assertIn("missing.example", err["error"])
        free = weirtest.free_port(udp_and_tcp=False)
        r = ctl(f"127.0.0.1:{free}", "status")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(json.loads(r.stdout)["exit_code"], 2)
        self.assertIn("cannot reach weir-mgmt", json.loads(r.stdout)["error"])
        r = ctl("no-such-host.invalid:8054", "status")
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot resolve 'no-such-host.invalid'", json.loads(r.stdout)["error"])
        r = weirtest.run([exe, "--json", "no-such-command"], timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(json.loads(r.stdout)["exit_code"], 2)

    def test_import_names_every_bad_line_and_add_names_the_cause(self):
        self.push_city_setup()
        before = self.mgmt.weirctl("citymap", "ls").stdout
        # Three bad lines among good ones: each is named with its cause, as
        # --check names them, and nothing is applied.
        bad = CITYMAP + ("127.9.0.1/16,city-c,\n"            # line 4: host bits set
                         "127.10.0.0/16,city-d,not-an-address\n"  # line 5: bad ECS address
                         "127.11.0.0/33,city-e,\n")          # line 6: bad prefix length
        path = self.write("three-bad.csv", bad)
        r = self.mgmt.weirctl("citymap", "import", path)
        self.assertEqual(r.returncode, 1, r.stderr)
        lines = [l.removeprefix("weirctl: ") for l in r.stderr.splitlines()]
        lines = [l for l in lines if l.startswith(path)]
        self.assertEqual([l.split(":")[1] for l in lines], ["4", "5", "6"], r.stderr)
        self.assertIn("host bits", lines[0].lower(), r.stderr)
        for l in lines:
            self.assertRegex(l, rf"^{re.escape(path)}:\d+: \S", r.stderr)
        tags = self.write("three-bad.tags", "a.example weight=maybe\nb.example weight=on\nc.example color=red\n"
                          "d..example weight=on\n")
        r = self.mgmt.weirctl("tag", "import", tags)
        self.assertEqual(r.returncode, 1, r.stderr)
        for n in (1, 3, 4):
            self.assertIn(f"{tags}:{n}: ", r.stderr)
        self.assertNotIn(f"{tags}:2: ", r.stderr)
        self.assertEqual(self.mgmt.weirctl_json("status")["version"], 2)
        self.assertEqual(self.mgmt.weirctl("citymap", "ls").stdout, before)
        # citymap add of the same line gives the same cause as its import.
        r = self.mgmt.weirctl("citymap", "add", "127.9.0.1/16", "city-c")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertNotIn("not a city-map line", r.stderr)
        self.assertIn("host bits", r.stderr.lower())
        self.assertEqual(self.mgmt.weirctl_json("status")["version"], 2)

    def test_bad_import_rejected_whole_with_line_number(self):
        fp = self.start_fastpath()
        self.push_city_setup()
        self.mgmt.wait_in_sync("fp-1", 2)
        before = self.mgmt.weirctl("citymap", "ls").stdout
        bad = CITYMAP + "127.3.0.0/16,city-c,203.0.113.0/24\n127.4.0.0/33,city-d,\n"
        bad_csv = self.write("bad.csv", bad)
        r = self.mgmt.weirctl("citymap", "import", bad_csv)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"{bad_csv}:5: ", r.stderr)
        bad_tags = self.write("bad.tags", "a.example weight=on\nb.example color=red\n")
        r = self.mgmt.weirctl("tag", "import", bad_tags)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"{bad_tags}:2: ", r.stderr)
        r = self.mgmt.weirctl("tag", "add", "cdn.example.net", "weight=on")
        self.assertEqual(r.returncode, 1, "a suffix that has a tag needs --replace")
        self.assertIn("--replace", r.stderr)
        # Nothing changed: same version, same data, node still in sync and answering.
        self.assertEqual(self.mgmt.weirctl_json("status")["version"], 2)
        self.assertEqual(self.mgmt.weirctl("citymap", "ls").stdout, before)
        self.assertEqual(len(self.mgmt.weirctl_json("tag", "ls")["tags"]), 1)
        self.mgmt.wait_in_sync("fp-1", 2)
        self.assert_city_answers(fp)

    def test_node_survives_mgmt_down_and_restarts_from_stored_snapshot(self):
        fp = self.start_fastpath()
        self.push_city_setup()
        self.mgmt.wait_in_sync("fp-1", 2)
        self.mgmt.stop()
        self.assert_city_answers(fp)  # mgmt down: the node keeps answering
        fp.stop()
        # A new process, mgmt still down: it starts from the stored snapshot.
        fp2 = self.start_fastpath()
        self.assert_city_answers(fp2)
        m = fp2.metrics()
        self.assertEqual(m.value("weir_mgmt_snapshot_version"), 2)
        self.assertEqual(m.value("weir_mgmt_connected"), 0)
        self.assertIn("starting from stored mgmt snapshot version 2", fp2.process.stderr_text())
        # mgmt back on the same port with the same database: the node reconnects.
        self.mgmt = weirtest.Mgmt(BUILD_DIR, self.dir, port=self.mgmt_port)
        node = self.mgmt.wait_in_sync("fp-1", 2, timeout=15)
        self.assertTrue(node["in_sync"])
        # In sync, so nothing was pushed; the node still reports the stream as up.
        deadline = time.monotonic() + 5
        while fp2.metrics().value("weir_mgmt_connected") != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(fp2.metrics().value("weir_mgmt_connected"), 1)

    def test_damaged_stored_snapshot_is_ignored(self):
        fp = self.start_fastpath()
        self.push_city_setup()
        self.mgmt.wait_in_sync("fp-1", 2)
        fp.stop()
        path = os.path.join(self.dir, "fp-state", "snapshot")
        with open(path, "r+b") as f:
            f.seek(-3, os.SEEK_END)
            f.write(b"XYZ")
        fp2 = self.start_fastpath()
        self.assertIn("checksum mismatch", fp2.process.stderr_text())
        # It got the snapshot from mgmt instead.
        self.mgmt.wait_in_sync("fp-1", 2)
        self.assert_city_answers(fp2)

    def test_json_output_round_trips_utf8_and_escapes(self):
        # City names are ASCII (they become metric labels); comments are free text.
        csv = "# 北京 \"Beijing\" \\ 上海\t\n127.1.0.0/16,beijing,198.51.100.0/24\n127.2.0.0/16,shanghai,203.0.113.0/24\n"
        path = os.path.join(self.dir, "utf8.csv")
        with open(path, "w", encoding="utf-8") as f:
            f.write(csv)
        self.assertEqual(self.mgmt.weirctl("citymap", "import", path).returncode, 0)
        self.assertEqual(self.mgmt.weirctl_json("citymap", "ls")["citymap"], csv)
        self.assertEqual(self.mgmt.weirctl("citymap", "ls").stdout, csv)

    def test_bad_token_is_refused(self):
        bad = self.write("bad.token", "not-the-right-token-at-all\n")
        r = self.mgmt.weirctl("status", token_file=bad)
        self.assertEqual(r.returncode, 1, "mgmt refused: exit 1 (docs/mgmt.md#weirctl)")
        self.assertIn("bad token", r.stderr)
        # A token file that cannot be read: a file error, exit 2, with the reason.
        r = self.mgmt.weirctl("status", token_file=os.path.join(os.path.dirname(bad), "missing.token"))
        self.assertEqual(r.returncode, 2)
        self.assertRegex(r.stderr, r"cannot read token file .*missing\.token: No such file or directory")
        upstream = f"{self.sim.host}:{self.sim.port}"
        config = weirtest.fastpath_config([upstream]) + weirtest.mgmt_node_section(
            self.mgmt.address, "intruder", bad, os.path.join(self.dir, "x-state"))
        fp = weirtest.Fastpath(BUILD_DIR, config)
        self.addCleanup(fp.stop)
        deadline = time.monotonic() + 3
        while "bad token" not in fp.process.stderr_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIn("bad token", fp.process.stderr_text())
        self.assertEqual(self.mgmt.weirctl_json("nodes")["nodes"], [])

    def test_recursor_and_fastpath_nodes(self):
        self.start_fastpath()
        config = weirtest.recursor_config(forwarders=[f"{self.sim.host}:{self.sim.port}"]) + \
            weirtest.mgmt_node_section(self.mgmt.address, "rec-1", self.mgmt.token_file,
                                       os.path.join(self.dir, "rec-state"))
        rec = weirtest.Recursor(BUILD_DIR, config)
        self.addCleanup(rec.stop)
        version = self.push_city_setup()
        for node in ("fp-1", "rec-1"):
            self.mgmt.wait_in_sync(node, version)
        nodes = {n["node"]: n for n in self.mgmt.weirctl_json("nodes")["nodes"]}
        self.assertEqual(nodes["rec-1"]["kind"], "recursor")
        self.assertEqual(nodes["fp-1"]["kind"], "fastpath")
        text = self.mgmt.weirctl("nodes").stdout
        # One weir-mgmt: the instance is named after its host and port.
        self.assertRegex(text, rf"rec-1 kind=recursor connected=yes mgmt=\S+:{self.mgmt.port} version=2 state=in-sync")
        # The recursor's file reload is off while mgmt owns its tags.
        self.assertIn("weir-mgmt", rec.control("reload-tags"))


# What an operator types, and the `command` label of weir_mgmt_requests_total it counts as
# (docs/metrics.md). Every weir-mgmt command weirctl --help lists must be here.
WEIRCTL_REQUESTS = {
    "tag add": ("tag-add", ["tag", "add", "a.example", "weight=on"]),
    "tag set": ("tag-edit", ["tag", "set", "a.example", "ecs=on"]),
    "tag ls": ("tag-ls", ["tag", "ls"]),
    "tag import": ("tag-import", ["tag", "import", "{tags}"]),
    "tag rm": ("tag-rm", ["tag", "rm", "b.example"]),
    "citymap add": ("citymap-add", ["citymap", "add", "10.9.0.0/16", "city-z"]),
    "citymap ls": ("citymap-ls", ["citymap", "ls"]),
    "citymap rm": ("citymap-rm", ["citymap", "rm", "10.9.0.0/16"]),
    "citymap import": ("citymap-import", ["citymap", "import", "{citymap}"]),
    "status": ("status", ["status"]),
    "nodes": ("nodes", ["nodes"]),
    "nodes rm": ("node-rm", ["nodes", "rm", "retired-node"]),
    "audit": ("audit", ["audit", "--limit", "5"]),
    "account add": ("account-add", ["account", "add", "acme"]),
    "account set": ("account-set", ["account", "set", "acme", "--rps", "10"]),
    "account rotate": ("account-rotate", ["account", "rotate", "acme"]),
    "account retire": ("account-retire", ["account", "retire", "acme"]),
    "account ls": ("account-ls", ["account", "ls"]),
    "account rm": ("account-rm", ["account", "rm", "acme"]),
    "traffic import": ("traffic-import", ["traffic", "import", "{traffic}"]),
    "calibration ls": ("calibration-ls", ["calibration", "ls"]),
}
# weirctl's node commands (answered by a node, or by every node through weir-mgmt with --all).
NODE_COMMANDS = {"cache", "stats", "reload", "upstreams", "partitions", "segments"}


def help_subcommands(text: str) -> list:
    """The subcommand names a CLI11 --help lists under SUBCOMMANDS."""
    out, inside = [], False
    for line in text.splitlines():
        if line.strip() == "SUBCOMMANDS:" or line.startswith("Subcommands:"):
            inside = True
            continue
        if inside:
            if not line.strip():
                break
            out.append(line.split()[0])
    return out


class CommandTableTest(unittest.TestCase):
    def test_every_weirctl_command_is_dispatched_and_counted_by_name(self):
        d = tempfile.mkdtemp(prefix="weir-mgmt-cmds-")
        self.addCleanup(shutil.rmtree, d, True)
        mgmt = weirtest.Mgmt(BUILD_DIR, d, metrics=True)
        self.addCleanup(mgmt.stop)
        ctl = os.path.join(BUILD_DIR, "mgmt/weirctl")

        # What weirctl --help offers, two levels deep.
        listed = []
        for top in help_subcommands(subprocess.run([ctl, "--help"], capture_output=True, text=True).stdout):
            subs = help_subcommands(subprocess.run([ctl, top, "--help"], capture_output=True, text=True).stdout)
            if top in ("tag", "citymap", "account", "traffic", "calibration"):
                listed += [f"{top} {s}" for s in subs]
            else:
                listed.append(top)
                listed += [f"{top} {s}" for s in subs if top not in NODE_COMMANDS]
        mgmt_commands = [c for c in listed if c.split()[0] not in NODE_COMMANDS]
        self.assertEqual(sorted(mgmt_commands), sorted(WEIRCTL_REQUESTS), listed)

        before = mgmt.metrics()
        # Every series is there from the start, none with an empty or unlisted label.
        labels = {l["command"] for l, _ in before.series("weir_mgmt_requests_total")}
        self.assertEqual(labels, {v for v, _ in WEIRCTL_REQUESTS.values()} | {"node-control", "unknown", "invalid"},
                         before.text)
        # docs/metrics.md lists exactly these.
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../docs/metrics.md")) as f:
            row = next(line for line in f if line.startswith("| `weir_mgmt_requests_total`"))
        documented = set(re.findall(r"`([a-z-]+)`", row.split("`command`", 1)[1].split("`result`", 1)[0]))
        self.assertEqual(documented, labels, row)
        tags = os.path.join(d, "tags.txt")
        with open(tags, "w") as f:
            f.write("a.example weight=on\nb.example ecs=on\n")
        citymap = os.path.join(d, "citymap.csv")
        with open(citymap, "w") as f:
            f.write("10.1.0.0/16,city-a,198.51.100.0/24\n")
        traffic = os.path.join(d, "traffic.csv")
        with open(traffic, "w") as f:
            f.write("1000,1300,x.a.example,common,192.0.2.1,1,100\n")  # a.example has no calibrate=on: skipped
        for words, (label, argv) in WEIRCTL_REQUESTS.items():
            argv = [a.format(tags=tags, citymap=citymap, traffic=traffic) for a in argv]
            if words == "tag import":
                continue  # below, before "tag rm" needs b.example
            r = mgmt.weirctl(*argv)
            ok = words != "nodes rm"  # a node never seen: refused, still counted as node-rm
            self.assertEqual(r.returncode == 0, ok, f"weirctl {' '.join(argv)}: {r.stdout}{r.stderr}")
            if words == "tag add":
                imp = mgmt.weirctl("tag", "import", tags)
                self.assertEqual(imp.returncode, 0, imp.stderr)
        after = mgmt.metrics()
        for words, (label, _) in WEIRCTL_REQUESTS.items():
            result = "error" if words == "nodes rm" else "ok"
            self.assertEqual(after.value("weir_mgmt_requests_total", command=label, result=result) -
                             before.value("weir_mgmt_requests_total", command=label, result=result), 1,
                             f"weirctl {words} counted as {label}/{result}:\n{after.text}")
        self.assertEqual(after.value("weir_mgmt_requests_total", command="unknown"), 0, after.text)


if __name__ == "__main__":
    unittest.main()
