"""weirctl's control channel on weir-recursor ([control], docs/recursor-config.md#control-channel):
cache flush of one name, one suffix, one ECS scope or one type changes only
those entries (the authoritative servers' query counts prove the others stay
cached); cache dump shows a tagged entry's weights and TTL left; stats, cache
stats, upstreams, partitions and reload answer; bad arguments exit 1 with the
reason; the TCP listener takes the token and refuses another; weir-mgmt's
weirctl --all reaches the recursor over its node stream. Driven with the real
weirctl against a fake DNS hierarchy of gslb-sim servers.

Run: python3 tests/integration/test_recursor_control.py --build-dir build
"""

import json
import os
import shutil
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.process import binary, run  # noqa: E402
from weirtest.zones import default, gslb_name, record, view  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
NET = "127.0.131"
ECS1 = "198.51.100.7/24"
ECS2 = "203.0.113.7/24"
SCOPE1 = "198.51.100.0/24"
SCOPE2 = "203.0.113.0/24"
CDN = "cdn-gslb.example."
SHOP = "shop.example."


def weighted(name):
    return gslb_name(name, view(SCOPE1, ["192.0.2.10", "192.0.2.11"], [3, 1], scope=24),
                     view(SCOPE2, ["192.0.2.20"], [1], scope=24),
                     default=default(["192.0.2.99"], [1]), ttl=300, weights=True)


ZONES = {
    CDN: weighted("a") + weighted("b") + weighted("x.sub") + weighted("y.sub"),
    SHOP: record("www", "A", "192.0.2.1", ttl=300) + record("mail", "A", "192.0.2.2", ttl=300),
}


class RecursorControlTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig")
        cls.h = weirtest.FakeHierarchy(BUILD_DIR, net=NET, zones=ZONES)
        cls.addClassCleanup(cls.h.stop)
        cls.cdn = cls.h.sim(CDN)
        cls.shop = cls.h.sim(SHOP)
        cls.dir = tempfile.mkdtemp(prefix="weir-rctl-")
        cls.addClassCleanup(shutil.rmtree, cls.dir, True)
        cls.tags = os.path.join(cls.dir, "tags.txt")
        with open(cls.tags, "w") as f:
            f.write("cdn-gslb.example weight=on ecs=on\n")
        cls.sock = os.path.join(cls.dir, "rec.ctl")
        cls.r = weirtest.Recursor(BUILD_DIR, weirtest.recursor_config(
            root_hints=cls.h.root_hints, tags=cls.tags, control={"socket": cls.sock}), test_clock=True)
        cls.addClassCleanup(cls.r.stop)

    def setUp(self):
        self.r.flush()  # the legacy control port's flush: every weir cache
        self.h.reset()

    # ---- helpers

    def weirctl(self, *args, control=None, token_file=None, json_out=False):
        argv = [binary(BUILD_DIR, "mgmt/weirctl"), "-C", control or self.sock, "--actor", "test"]
        if token_file:
            argv += ["--token-file", token_file]
        if json_out:
            argv.append("--json")
        return run(argv + list(args))

    def ok(self, *args, **kw):
        r = self.weirctl(*args, **kw)
        self.assertEqual(r.returncode, 0, f"weirctl {' '.join(args)}: {r.stdout}{r.stderr}")
        return r.stdout

    def ok_json(self, *args):
        return json.loads(self.ok(*args, json_out=True))

    def ask(self, name, ecs=None):
        r = self.r.dig(name, ecs=ecs)
        self.assertEqual(r.status, "NOERROR", r.text)
        return r

    def last_hop(self, name, scope):
        """weir's own last-hop queries for `name` with ECS `scope` (libunbound's carry none)."""
        stats = self.cdn.stats()["by_qname_ecs"]
        return stats.get(name, {}).get(scope, 0)

    def ordinary_queries(self, name):
        return self.shop.stats()["by_qname_qtype"].get(name, {}).get("A", 0)

    # ---- flush

    def test_flush_of_one_name_keeps_the_others(self):
        for name in ("a.cdn-gslb.example.", "b.cdn-gslb.example."):
            self.ask(name, ECS1)
            self.ask(name, ECS1)
            self.assertEqual(self.last_hop(name, SCOPE1), 1, "the second query is a cache hit")
        out = self.ok("cache", "flush", "a.cdn-gslb.example")
        self.assertIn("flushed 1 entries (a.cdn-gslb.example.)", out)
        for name in ("a.cdn-gslb.example.", "b.cdn-gslb.example."):
            self.ask(name, ECS1)
        self.assertEqual(self.last_hop("a.cdn-gslb.example.", SCOPE1), 2)
        self.assertEqual(self.last_hop("b.cdn-gslb.example.", SCOPE1), 1)
        # The flushed count is apart from evictions.
        tagged = [c for c in self.ok_json("cache", "stats")["caches"] if c["cache"] == "tagged"][0]
        self.assertGreaterEqual(tagged["flushed"], 1)
        self.assertEqual(tagged["evictions"], 0)

    def test_flush_of_a_suffix(self):
        names = ("x.sub.cdn-gslb.example.", "y.sub.cdn-gslb.example.", "a.cdn-gslb.example.")
        for name in names:
            self.ask(name, ECS1)
        reply = self.ok_json("cache", "flush", "sub.cdn-gslb.example", "--suffix")
        self.assertEqual(reply["flushed"], 2)
        self.assertEqual(reply["tagged"], 2)
        for name in names:
            self.ask(name, ECS1)
        self.assertEqual([self.last_hop(n, SCOPE1) for n in names], [2, 2, 1])

    def test_flush_of_one_ecs_scope(self):
        for name in ("a.cdn-gslb.example.", "b.cdn-gslb.example."):
            self.ask(name, ECS1)
            self.ask(name, ECS2)
        self.ask("www.shop.example.")
        reply = self.ok_json("cache", "flush", "--partition", SCOPE1)
        self.assertEqual((reply["flushed"], reply["tagged"], reply["ordinary"]), (2, 2, 0))
        # The ordinary name is still in weir's cache.
        dump = self.ok_json("cache", "dump", "--name", "www.shop.example")
        self.assertEqual([(e["cache"], e["scope"]) for e in dump["entries"]], [("ordinary", "common")])
        for name in ("a.cdn-gslb.example.", "b.cdn-gslb.example."):
            self.ask(name, ECS1)
            self.ask(name, ECS2)
            self.assertEqual(self.last_hop(name, SCOPE1), 2, name)
            self.assertEqual(self.last_hop(name, SCOPE2), 1, name)
        # An address in the scope names it too; an address outside none.
        self.assertEqual(self.ok_json("cache", "flush", "--partition", "192.0.2.1")["flushed"], 0)
        self.assertEqual(self.ok_json("cache", "flush", "a.cdn-gslb.example", "--partition", "203.0.113.9")["flushed"],
                         1)
        self.ask("a.cdn-gslb.example.", ECS1)
        self.ask("a.cdn-gslb.example.", ECS2)
        self.assertEqual(self.last_hop("a.cdn-gslb.example.", SCOPE1), 2)
        self.assertEqual(self.last_hop("a.cdn-gslb.example.", SCOPE2), 2)

    def test_flush_of_one_type(self):
        self.ask("a.cdn-gslb.example.", ECS1)
        self.assertEqual(self.ok_json("cache", "flush", "a.cdn-gslb.example", "--type", "AAAA")["flushed"], 0)
        self.ask("a.cdn-gslb.example.", ECS1)
        self.assertEqual(self.last_hop("a.cdn-gslb.example.", SCOPE1), 1)
        self.assertEqual(self.ok_json("cache", "flush", "a.cdn-gslb.example", "--type", "A")["flushed"], 1)
        self.ask("a.cdn-gslb.example.", ECS1)
        self.assertEqual(self.last_hop("a.cdn-gslb.example.", SCOPE1), 2)

    def test_flush_of_an_ordinary_name_and_libunbounds_cache(self):
        self.ask("www.shop.example.")
        self.ask("mail.shop.example.")
        self.assertEqual(self.ordinary_queries("www.shop.example."), 1)
        out = self.ok("cache", "flush", "www.shop.example")
        self.assertIn("ordinary answers 1", out)
        self.assertIn("libunbound's own cache keeps their records until their TTL ends", out)
        self.assertEqual(self.ok_json("cache", "dump", "--name", "www.shop.example")["entries"], [])
        self.assertEqual(len(self.ok_json("cache", "dump", "--name", "mail.shop.example")["entries"]), 1)
        # What the reply says: libunbound answers from its own cache, the
        # authority sees no new query; weir caches the answer again.
        self.ask("www.shop.example.")
        self.assertEqual(self.ordinary_queries("www.shop.example."), 1)
        self.assertEqual(len(self.ok_json("cache", "dump", "--name", "www.shop.example")["entries"]), 1)

    def test_flush_of_everything(self):
        self.ask("a.cdn-gslb.example.", ECS1)
        self.ask("www.shop.example.")
        reply = self.ok_json("cache", "flush", ".", "--suffix")
        self.assertGreaterEqual(reply["tagged"], 1)
        self.assertGreaterEqual(reply["ordinary"], 1)
        self.assertGreaterEqual(reply["zone_cuts"], 1)  # cdn-gslb.example's servers
        self.assertEqual(self.ok_json("cache", "dump")["entries"], [])

    # ---- dump

    def test_dump_shows_weights_and_ttl_left(self):
        self.ask("a.cdn-gslb.example.", ECS1)
        self.ask("a.cdn-gslb.example.", ECS2)
        dump = self.ok_json("cache", "dump", "--name", "a.cdn-gslb.example")
        by_scope = {e["scope"]: e for e in dump["entries"]}
        self.assertEqual(set(by_scope), {SCOPE1, SCOPE2})
        e = by_scope[SCOPE1]
        self.assertEqual((e["type"], e["cache"], e["kind"], e["ttl"], e["ttl_left"], e["origin"], e["weighted"]),
                         ("A", "tagged", "positive", 300, 300, "fetched (last hop)", True))
        self.assertEqual(e["addresses"], [{"address": "192.0.2.10", "weight": 3},
                                          {"address": "192.0.2.11", "weight": 1}])
        text = self.ok("cache", "dump", "--name", "a.cdn-gslb.example", "--partition", SCOPE1)
        self.assertIn("192.0.2.10 weight 3", text)
        self.assertNotIn("192.0.2.20", text)
        self.r.advance_clock(100)
        e = self.ok_json("cache", "dump", "--name", "a.cdn-gslb.example", "--partition", SCOPE1)["entries"][0]
        self.assertEqual(e["ttl_left"], 200)
        self.r.advance_clock(250)
        e = self.ok_json("cache", "dump", "--name", "a.cdn-gslb.example", "--partition", SCOPE1)["entries"][0]
        self.assertEqual((e["ttl_left"], e["stale_for"], e["origin"]), (0, 50, "stale"))
        self.assertIn("stale 50s", self.ok("cache", "dump", "--name", "a.cdn-gslb.example"))
        # --limit
        self.assertEqual(len(self.ok_json("cache", "dump", "--limit", "1")["entries"]), 1)
        self.assertTrue(self.ok_json("cache", "dump", "--limit", "1")["truncated"])

    # ---- the other commands

    def test_stats_cache_stats_upstreams_partitions(self):
        self.ask("a.cdn-gslb.example.", ECS1)
        self.ask("www.shop.example.")
        stats = self.ok_json("stats")
        names = {m["name"] for m in stats}
        self.assertIn("weir_recursor_queries_total", names)
        self.assertIn("weir_recursor_cache_entries", self.ok("stats"))
        caches = {c["cache"]: c for c in self.ok_json("cache", "stats")["caches"]}
        self.assertEqual(set(caches), {"tagged", "tagged /0", "ordinary", "zone cuts"})
        self.assertEqual((caches["tagged"]["entries"], caches["tagged"]["answers"]), (1, 1))
        self.assertGreater(caches["tagged"]["bytes"], 0)
        self.assertEqual(caches["ordinary"]["entries"], 1)
        self.assertIn("libunbound's own caches", self.ok("cache", "stats"))
        up = self.ok_json("upstreams")
        self.assertGreaterEqual(up["last_hop"]["queries"], 1)
        self.assertIn("root hints", self.ok("upstreams"))
        parts = self.ok_json("partitions")
        self.assertFalse(parts["city_map"])
        self.assertEqual(parts["scopes"], [{"scope": SCOPE1, "answers": 1, "names": 1}])
        self.assertIn("no city map", self.ok("partitions"))

    def test_reload_rereads_the_tag_file(self):
        self.assertIn("reloaded the tags", self.ok("reload"))
        with open(self.tags, "w") as f:
            f.write("cdn-gslb.example weight=maybe\n")
        try:
            r = self.weirctl("reload")
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn(self.tags, r.stderr + r.stdout)
        finally:
            with open(self.tags, "w") as f:
                f.write("cdn-gslb.example weight=on ecs=on\n")
        self.ok("reload")

    def test_bad_arguments_exit_1_with_the_reason(self):
        for args, why in ((("cache", "flush"), "flush what?"),
                          (("cache", "flush", "--partition", "mars"), "no partition 'mars'"),
                          (("cache", "flush", "--partition", "198.51.100.7/24"), "198.51.100.7/24"),
                          (("cache", "flush", "a.example", "--type", "BOGUS"), "unknown type 'BOGUS'"),
                          (("cache", "dump", "--name", "a..example"), "not a domain name")):
            r = self.weirctl(*args)
            self.assertEqual(r.returncode, 1, f"{args}: {r.stdout}{r.stderr}")
            self.assertIn(why, r.stderr + r.stdout, args)

    def test_tcp_listener_takes_the_token(self):
        token = os.path.join(self.dir, "control.token")
        with open(token, "w") as f:
            f.write("rctl-token-0123456789abcdef\n")
        wrong = os.path.join(self.dir, "wrong.token")
        with open(wrong, "w") as f:
            f.write("not-the-token-0123456789\n")
        sock = os.path.join(self.dir, "tcp-rec.ctl")
        rec = weirtest.Recursor(BUILD_DIR, weirtest.recursor_config(
            root_hints=self.h.root_hints, control={"socket": sock, "listen": "127.0.0.1:0", "token_file": token}))
        try:
            self.assertEqual(rec.control_socket, sock)
            self.assertIsNotNone(rec.control_tcp)
            address = "%s:%d" % rec.control_tcp
            out = self.ok("cache", "stats", control=address, token_file=token)
            self.assertIn("ordinary", out)
            r = self.weirctl("cache", "stats", control=address, token_file=wrong)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("bad token", r.stderr + r.stdout)
            self.assertTrue(os.path.exists(sock))
        finally:
            rec.stop()
        self.assertFalse(os.path.exists(sock), "the socket file goes with the daemon")

    def test_weir_mgmt_fans_out_to_the_recursor(self):
        workdir = tempfile.mkdtemp(prefix="weir-rctl-mgmt-", dir=self.dir)
        mgmt = weirtest.Mgmt(BUILD_DIR, workdir)
        self.addCleanup(mgmt.stop)
        config = weirtest.recursor_config(root_hints=self.h.root_hints, tags=self.tags) + weirtest.mgmt_node_section(
            mgmt.address, "rec-1", mgmt.token_file, os.path.join(workdir, "rec-state"))
        rec = weirtest.Recursor(BUILD_DIR, config)
        self.addCleanup(rec.stop)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if any(n["node"] == "rec-1" and n["connected"] for n in mgmt.weirctl_json("nodes")["nodes"]):
                break
            time.sleep(0.05)
        rec.dig("www.shop.example.")
        r = mgmt.weirctl("--all", "cache", "flush", "www.shop.example")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("rec-1", r.stdout)
        self.assertIn("flushed 1 entries", r.stdout)
        r = mgmt.weirctl("--all", "cache", "flush", "--partition", "mars")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("no partition 'mars'", r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
