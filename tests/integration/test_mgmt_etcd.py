"""The management plane as a fleet runs it (docs/mgmt.md#etcd): a 3-member etcd
cluster on loopback, two weir-mgmt instances sharing it, and real weir-fastpath
and weir-recursor nodes that know both instances. Each case breaks something
while changes are being pushed (an etcd member, the weir-mgmt a node is on, two
commits racing, a compaction, a stale instance) and then asserts what an
operator would check: every node runs the store's version with the store's
content (the SHA-256 weir-mgmt reports against the snapshot file each node
applied), and a query load running throughout lost no query.

Run: python3 tests/integration/test_mgmt_etcd.py --build-dir build
"""

import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import gslb_name, no_empty_weight_option, record, view, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
weirtest.require_tools("etcd", "etcdctl")

import dns.message  # noqa: E402
import dns.query  # noqa: E402
import dns.rcode  # noqa: E402

CITY_A = ["192.0.2.11", "192.0.2.12", "192.0.2.13"]
CITY_B = ["192.0.2.21", "192.0.2.22"]
ZONES = (no_empty_weight_option() + zone("cdn.example.net.", rname="admin", minimum=30, ttl=60) +
         gslb_name("x", view("198.51.100.0/24", CITY_A, [5, 3, 1], scope=24),
                   view("203.0.113.0/24", CITY_B, [1, 1], scope=24), ttl=300) +
         zone("plain.example.", minimum=30, ttl=60) + record("www", "A", "192.0.2.80", ttl=300))
CITYMAP = "127.1.0.0/16,city-a,198.51.100.0/24\n127.2.0.0/16,city-b,203.0.113.0/24\n"
QNAME = "x.cdn.example.net"


def read_node_snapshot(state_dir: str) -> dict:
    """The snapshot a node applied last, from its state_dir/snapshot file
    ("weir-snapshot/1", a checksum line, then the SNAPSHOT frame: u32 length,
    type, fields of u32 length + bytes: version, tags, citymap, origin[,
    accounts])."""
    with open(os.path.join(state_dir, "snapshot"), "rb") as f:
        data = f.read()
    magic, _checksum, body = data.split(b"\n", 2)
    assert magic == b"weir-snapshot/1", magic
    (length,) = struct.unpack(">I", body[:4])
    frame = body[4:4 + length]
    pos, fields = 1, []
    while pos < len(frame):
        (n,) = struct.unpack(">I", frame[pos:pos + 4])
        fields.append(frame[pos + 4:pos + 4 + n])
        pos += 4 + n
    return {"version": int(fields[0]), "tags": fields[1], "citymap": fields[2], "origin": fields[3].decode(),
            "accounts": fields[4] if len(fields) > 4 else b""}


class QueryLoad:
    """Queries each server in a loop from a background thread (UDP, one at
    a time per server, 1 s timeout, a city source address); counts what went
    unanswered or answered other than NOERROR."""

    def __init__(self, servers, names):
        self.servers = servers
        self.names = names  # (host, port) -> the names to ask that server
        self.sent = 0
        self.failed = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        i = 0
        while not self._stop.is_set():
            for host, port in self.servers:
                source = "127.1.0.9" if i % 2 == 0 else "127.2.0.9"
                names = self.names[(host, port)]
                q = dns.message.make_query(names[i % len(names)], "A")
                self.sent += 1
                try:
                    r = dns.query.udp(q, host, port=port, timeout=1.0, source=source)
                    if r.rcode() not in (dns.rcode.NOERROR, dns.rcode.NXDOMAIN):
                        self.failed.append((host, port, dns.rcode.to_text(r.rcode())))
                except Exception as e:  # noqa: BLE001 - every failure is counted
                    self.failed.append((host, port, repr(e)))
            i += 1
            time.sleep(0.005)

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)


class FleetTest(unittest.TestCase):
    # Per case: which etcd members each weir-mgmt talks to (None: all).
    MGMT_B_MEMBERS = None

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="weir-fleet-test-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        self.addCleanup(self.sim.stop)
        self.etcd = weirtest.EtcdCluster(self.dir)
        self.addCleanup(self.etcd.stop)
        self.port_a = weirtest.free_port(udp_and_tcp=False)
        self.port_b = weirtest.free_port(udp_and_tcp=False)
        self.mgmt_a = self.start_mgmt("a")
        b_endpoints = self.etcd.endpoints if self.MGMT_B_MEMBERS is None else \
            [self.etcd.endpoints[i] for i in self.MGMT_B_MEMBERS]
        self.mgmt_b = self.start_mgmt("b", b_endpoints)
        self.commit(self.mgmt_a, "citymap", "import", self.write("cities.csv", CITYMAP))
        self.commit(self.mgmt_a, "tag", "add", "cdn.example.net", "weight=on", "ecs=on", "answer=single",
                    "level=city")
        addresses_ab = [self.mgmt_a.address, self.mgmt_b.address]
        self.nodes = {}  # node id -> (daemon, state dir, kind)
        self.start_fastpath("fp-1", addresses_ab)
        self.start_fastpath("fp-2", list(reversed(addresses_ab)))
        self.start_recursor("rec-1", addresses_ab)
        self.assert_converged()
        # The fastpaths answer the tagged name per city; the recursor (no
        # delegation to the tagged zone through a forwarder) a plain name.
        servers = [(d.host, d.port) for d, _, kind in self.nodes.values()]
        self.load = QueryLoad(servers, {
            (d.host, d.port): [QNAME, "www.plain.example", "nx.plain.example"] if kind == "fastpath"
            else ["www.plain.example", "nx.plain.example"] for d, _, kind in self.nodes.values()})
        self.addCleanup(self.load.stop)

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def start_mgmt(self, name, endpoints=None):
        m = weirtest.Mgmt(BUILD_DIR, self.dir, port=self.port_a if name == "a" else self.port_b,
                          etcd=endpoints or self.etcd.endpoints, instance=f"mgmt-{name}",
                          config_name=f"mgmt-{name}.toml")
        self.addCleanup(m.stop)
        self.addCleanup(self.report_death, m)
        return m

    def report_death(self, mgmt):
        """A weir-mgmt the test did not kill must still run: its log says why not."""
        rc = mgmt.process.proc.poll()
        if rc is not None and rc != -9:
            raise AssertionError(f"weir-mgmt {mgmt.address} exited {rc}: {mgmt.process.stderr_text()[-4000:]}")

    def start_fastpath(self, node_id, addresses):
        state = os.path.join(self.dir, f"{node_id}-state")
        config = weirtest.fastpath_config([f"{self.sim.host}:{self.sim.port}"]) + weirtest.mgmt_node_section(
            addresses, node_id, self.mgmt_a.token_file, state)
        fp = weirtest.Fastpath(BUILD_DIR, config)
        self.addCleanup(fp.stop)
        self.nodes[node_id] = (fp, state, "fastpath")
        return fp

    def start_recursor(self, node_id, addresses):
        state = os.path.join(self.dir, f"{node_id}-state")
        config = weirtest.recursor_config(forwarders=[f"{self.sim.host}:{self.sim.port}"],
                                          server={"metrics_listen": "127.0.0.1:0"}) + \
            weirtest.mgmt_node_section(addresses, node_id, self.mgmt_a.token_file, state)
        rec = weirtest.Recursor(BUILD_DIR, config)
        self.addCleanup(rec.stop)
        self.nodes[node_id] = (rec, state, "recursor")
        return rec

    def commit(self, mgmt, *args, retries=0):
        r = mgmt.weirctl(*args, "--retries", str(retries))
        self.assertEqual(r.returncode, 0, f"{args}: {r.stderr}")
        m = re.search(r"version (\d+)", r.stdout)
        self.assertIsNotNone(m, r.stdout)
        return int(m.group(1))

    def store_status(self, mgmt=None):
        for m in ([mgmt] if mgmt else [self.mgmt_a, self.mgmt_b]):
            if m.process.alive():
                return m.weirctl_json("status")
        raise AssertionError("no weir-mgmt is running")

    def assert_converged(self, timeout=15.0, nodes=None, instances=True):
        """Every node (or `nodes`) runs the store's version and content;
        both weir-mgmt instances (those running) hold the same version
        (unless not `instances`)."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            statuses = [m.weirctl_json("status") for m in (self.mgmt_a, self.mgmt_b) if m.process.alive()]
            store = max(statuses, key=lambda s: s["version"])
            ok = all(s["version"] == store["version"] for s in statuses) or not instances
            last = {"store": store["version"], "instances": [s["version"] for s in statuses]}
            for node_id in nodes or self.nodes:
                daemon, state, kind = self.nodes[node_id]
                try:
                    snap = read_node_snapshot(state)
                except OSError:
                    ok = False
                    continue
                last[node_id] = snap["version"]
                ok = ok and snap["version"] == store["version"] and snap["origin"] == store["origin"]
                ok = ok and hashlib.sha256(snap["tags"]).hexdigest() == store["tags_sha256"]
                ok = ok and hashlib.sha256(snap["citymap"]).hexdigest() == store["citymap_sha256"]
                if kind == "fastpath":
                    ok = ok and hashlib.sha256(snap["accounts"]).hexdigest() == store["accounts_sha256"]
                ok = ok and daemon.metrics().value("weir_mgmt_snapshot_version") == store["version"]
            if ok:
                return store
            time.sleep(0.1)
        raise AssertionError(f"not converged within {timeout}s: {last}")

    def assert_no_query_lost(self):
        self.load.stop()
        self.assertGreater(self.load.sent, 20)
        self.assertEqual(self.load.failed, [], f"{len(self.load.failed)} of {self.load.sent} queries failed")

    def wait_log(self, mgmt, pattern, timeout=10.0):
        """Waits for a line of `mgmt`'s log (stderr) matching `pattern`."""
        rx = re.compile(pattern)
        weirtest.wait_until(lambda: rx.search(mgmt.process.stderr_text()) is not None, timeout=timeout, interval=0.1)

    def node_records(self, mgmt):
        return {n["node"]: n for n in mgmt.weirctl_json("nodes")["nodes"]}


class EtcdFleetTest(FleetTest):
    def test_commits_through_either_instance_reach_every_node(self):
        v1 = self.commit(self.mgmt_a, "tag", "add", "a.example", "ecs=on")
        v2 = self.commit(self.mgmt_b, "tag", "add", "b.example", "ecs=on")
        self.assertGreater(v2, v1)
        store = self.assert_converged()
        self.assertEqual(store["version"], v2)
        # Both instances list the same tags; the audit log is the store's.
        tags = self.mgmt_a.weirctl_json("tag", "ls")["tags"]
        self.assertEqual(tags, self.mgmt_b.weirctl_json("tag", "ls")["tags"])
        self.assertTrue(any(t.startswith("a.example.") for t in tags) and any(t.startswith("b.example.") for t in tags))
        audit = self.mgmt_b.weirctl_json("audit")
        self.assertEqual([e["version"] for e in audit][-2:], [v1, v2])
        # The registry: every node, on the instance it listed first.
        records = self.node_records(self.mgmt_a)
        self.assertEqual(records["fp-1"]["mgmt"], "mgmt-a")
        self.assertEqual(records["rec-1"]["mgmt"], "mgmt-a")
        weirtest.wait_until(lambda: self.node_records(self.mgmt_a)["fp-2"]["version"] == v2, timeout=5)
        records = self.node_records(self.mgmt_a)
        self.assertEqual(records["fp-2"]["mgmt"], "mgmt-b")
        self.assertTrue(all(r["connected"] and r["in_sync"] for r in records.values()), records)
        self.assert_no_query_lost()

    def test_etcd_member_killed_mid_push(self):
        versions = []
        for i in range(12):
            if i == 4:
                self.etcd.kill(0)
            mgmt = self.mgmt_a if i % 2 == 0 else self.mgmt_b
            versions.append(self.commit(mgmt, "tag", "add", f"t{i}.example", "ecs=on", retries=3))
        self.assertEqual(versions, sorted(versions))
        store = self.assert_converged()
        self.assertEqual(store["version"], versions[-1])
        self.assertEqual(len(self.mgmt_a.weirctl_json("tag", "ls")["tags"]), 13)
        # The member comes back and catches up; commits go on.
        self.etcd.start(0)
        v = self.commit(self.mgmt_b, "tag", "rm", "t0.example")
        self.assertEqual(self.assert_converged()["version"], v)
        self.assert_no_query_lost()

    def test_mgmt_killed_mid_push_node_moves_and_converges(self):
        # A change through B goes to every node; A dies while it pushes it.
        tags = "".join(f"n{i}.example ecs=on\n" for i in range(20000)) + \
            "cdn.example.net weight=on ecs=on answer=single level=city\n"
        v = self.commit(self.mgmt_b, "tag", "import", self.write("tags.txt", tags))
        killed = time.monotonic()
        self.mgmt_a.process.proc.kill()
        self.mgmt_a.process.proc.wait()
        # fp-1 and rec-1 were on A: each is on B within 2 s of losing A.
        for node in ("fp-1", "rec-1"):
            daemon = self.nodes[node][0]
            self.assertTrue(weirtest.wait_until(
                lambda: daemon.metrics().value("weir_mgmt_connected") == 1 and
                self.node_records(self.mgmt_b)[node]["mgmt"] == "mgmt-b" and
                self.node_records(self.mgmt_b)[node]["connected"], timeout=3.0, interval=0.05))
        self.assertLess(time.monotonic() - killed, 3.0)
        self.assertEqual(self.assert_converged()["version"], v)
        v2 = self.commit(self.mgmt_b, "tag", "rm", "n7.example")
        self.assertEqual(self.assert_converged()["version"], v2)
        self.assert_no_query_lost()

    def test_racing_commits_one_wins_one_conflicts_nothing_lost(self):
        # A's import is long to check and write; B's small change commits
        # meanwhile: A's commit was computed against the version before it,
        # so it is refused as a conflict and changes nothing.
        tags = "".join(f"r{i}.example ecs=on\n" for i in range(60000)) + \
            "cdn.example.net weight=on ecs=on answer=single level=city\n"
        path = self.write("big.txt", tags)
        seen_conflict = False
        imported = 0  # an earlier attempt's import that landed (its tags stay)
        for attempt in range(5):
            big = subprocess.Popen([weirtest.binary(BUILD_DIR, "mgmt/weirctl"), "--server", self.mgmt_a.address,
                                    "--token-file", self.mgmt_a.token_file, "--actor", "big", "tag", "import", path],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(0.05)
            # B may lose the race too (A's import committed before B saw
            # it): it is told so and lands when retried.
            small = self.commit(self.mgmt_b, "tag", "add", f"race{attempt}.example", "ecs=on", retries=2)
            out, err = big.communicate(timeout=60)
            tags_now = self.mgmt_b.weirctl_json("tag", "ls")["tags"]
            if big.returncode == 3:
                seen_conflict = True
                self.assertIn("conflict", err)
                # Nothing lost: B's change is there, A's import changed nothing.
                self.assertTrue(any(t.startswith(f"race{attempt}.example.") for t in tags_now))
                if not imported:
                    self.assertFalse(any(t.startswith("r1.example.") for t in tags_now))
                self.assertEqual(self.store_status()["version"], small)
                # The same command again is computed against B's version and lands.
                v = self.commit(self.mgmt_a, "tag", "import", path, retries=2)
                self.assertGreater(v, small)
                self.assertEqual(len(self.mgmt_b.weirctl_json("tag", "ls")["tags"]), 60001)
                break
            # No race this time: the import committed before B's add (B's tag
            # is there beside the import's) or after it (the import replaced
            # every tag, B's included): which one, the versions say.
            self.assertEqual(big.returncode, 0, err)
            imported = int(re.search(r"version (\d+)", out).group(1))
            self.assertEqual(any(t.startswith(f"race{attempt}.example.") for t in tags_now), imported < small,
                             (imported, small))
        self.assertTrue(seen_conflict, "the import never raced B's change")
        # Unordered races: every command either lands or is told so.
        self.commit(self.mgmt_a, "tag", "import", self.write("small.txt", "cdn.example.net weight=on ecs=on "
                                                             "answer=single level=city\n"), retries=2)
        results = []

        def add(mgmt, name):
            r = mgmt.weirctl("tag", "add", f"{name}.example", "ecs=on")
            results.append((name, r.returncode, r.stderr))
        threads = [threading.Thread(target=add, args=(self.mgmt_a if i % 2 else self.mgmt_b, f"u{i}"))
                   for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        tags_now = self.mgmt_a.weirctl_json("tag", "ls")["tags"]
        for name, rc, err in results:
            self.assertIn(rc, (0, 3), err)
            self.assertEqual(rc == 0, any(t.startswith(f"{name}.example.") for t in tags_now), (name, rc))
        self.assert_converged()
        self.assert_no_query_lost()


class EtcdCompactionTest(FleetTest):
    # B reads and watches through member 2 only.
    MGMT_B_MEMBERS = [2]

    def test_compaction_forces_a_resync(self):
        self.etcd.kill(2)
        for i in range(5):
            last = self.commit(self.mgmt_a, "tag", "add", f"c{i}.example", "ecs=on")
        self.etcd.etcdctl("compact", str(self.etcd.revision()))
        self.etcd.start(2)
        self.wait_log(self.mgmt_b, r"compacted before this instance saw them", timeout=15)
        self.assertEqual(self.assert_converged(timeout=20)["version"], last)
        self.assertEqual(self.store_status(self.mgmt_b)["version"], last)
        self.assert_no_query_lost()

    def test_stale_mgmt_never_pushes_an_older_version(self):
        self.etcd.pause(2)  # B can no longer read the store: its copy is stale
        newer = self.commit(self.mgmt_a, "tag", "add", "s.example", "ecs=on")
        self.assert_converged(nodes=["fp-1", "rec-1"], instances=False)
        self.assertLess(self.store_status(self.mgmt_b)["version"], newer)
        # fp-1 and rec-1 lose A and move to B, which is behind: nothing older
        # is pushed to them; they keep running the newer version.
        self.mgmt_a.process.proc.kill()
        self.mgmt_a.process.proc.wait()
        self.wait_log(self.mgmt_b, r"node fp-1 runs version \d+, newer than this instance's")
        time.sleep(1.0)
        for node in ("fp-1", "rec-1"):
            daemon, state, _ = self.nodes[node]
            self.assertEqual(read_node_snapshot(state)["version"], newer)
            self.assertEqual(daemon.metrics().value("weir_mgmt_snapshot_version"), newer)
        # B catches up once its member answers; fp-2 (on B all along) follows.
        self.etcd.resume(2)
        self.assertEqual(self.assert_converged(timeout=20)["version"], newer)
        v = self.commit(self.mgmt_b, "tag", "rm", "s.example")
        self.assertEqual(self.assert_converged()["version"], v)
        self.assert_no_query_lost()


if __name__ == "__main__":
    unittest.main()
