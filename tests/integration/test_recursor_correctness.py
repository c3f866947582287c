"""Resolution correctness of weir-recursor: CNAME chains across zone cuts,
negative answers with their SOA, libunbound's built-in local zones and the
subscriber's subnet, learned tags behind a flat forwarder, DNSSEC records
for clients without DO, answer deadlines, negative answers without SOA, and
the libunbound knobs of [resolver].

Hierarchy (gslb-sim on port 53 of 127.0.110.x, one scripted server):
  example.            TLD
  corp.example.       video CNAME x.cdn.corp.example. (delegated below corp)
  cdn.corp.example.   the GSLB: x with per-city views and weights
  org.example.        www CNAME www.sub.org.example. (delegated below org)
  sub.org.example.
  bind.example.       a scripted BIND-style server: the CNAME with AA=1 and a
                      referral for the target's zone in the authority section
  cdn.bind.example.

Run: python3 tests/integration/test_recursor_correctness.py --build-dir build
"""

import base64
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import default, delegation, gslb_name, record, view  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
NET = "127.0.110"
W = 65001

CORP = (record("video", "CNAME", "x.cdn.corp.example.", ttl=600) +
        record("short", "CNAME", "x.cdn.corp.example.", ttl=20) + record("www", "A", "192.0.2.5", ttl=300) +
        record("loop1", "CNAME", "loop2.cdn.corp.example.", ttl=300) +
        record("gone", "CNAME", "nothing.cdn.corp.example.", ttl=300) +
        "".join(record(f"c{i}", "CNAME", f"c{i + 1}.cdn.corp.example.", ttl=300) for i in range(1, 9, 2)) +
        delegation("cdn", "ns1.cdn", [f"{NET}.4"], ttl=3600))

CDN_X = gslb_name("x", view("198.51.100.0/24", ["192.0.2.10", "192.0.2.11"], [3, 1], scope=24),
                  view("203.0.113.0/24", ["192.0.2.20"], [1], scope=24), default=default(["192.0.2.99"], [1]),
                  ttl=60, weights=True)

CDN_CORP = (CDN_X + record("loop2", "CNAME", "loop1.corp.example.", ttl=300) +
            "".join(record(f"c{i}", "CNAME", "x.cdn.corp.example." if i == 8 else f"c{i + 1}.corp.example.", ttl=300)
                    for i in range(2, 9, 2)))

ORG = delegation("sub", "ns1.sub", [f"{NET}.7"], ttl=3600) + record("www", "CNAME", "www.sub.org.example.", ttl=300)

SUB_ORG = record("www", "A", "192.0.2.77", ttl=300)

ZONES = {
    "corp.example.": CORP,            # .3
    "cdn.corp.example.": CDN_CORP,    # .4
    "cdn.bind.example.": CDN_X,       # .5
    "org.example.": ORG,              # .6
    "sub.org.example.": SUB_ORG,      # .7
}
BIND_ADDR = f"{NET}.9"

TAGS = """corp.example weight=on ecs=on
bind.example weight=on ecs=on
"""


def bind_style(q: weirtest.RawQuery):
    """bind.example.: answers its own names; a CNAME into the delegated
    cdn.bind.example. comes with AA=1 and the referral in authority."""
    n = weirtest.wire_name
    soa = ("bind.example.", "SOA", 3600, weirtest.rdata_soa("ns.bind.example.", "h.bind.example.", minimum=60))
    ns_cdn = [("cdn.bind.example.", "NS", 3600, n("ns1.cdn.bind.example."))]
    glue_cdn = [("ns1.cdn.bind.example.", "A", 3600, weirtest.rdata_a(f"{NET}.5"))]
    opts = [weirtest.echo_ecs(q, 0)] if q.edns else None
    if q.qname.endswith("cdn.bind.example."):
        return weirtest.build_response(q, aa=False, authority=ns_cdn, additional=glue_cdn, options=opts)
    if q.qname == "bind.example." and q.qtype == 2:
        return weirtest.build_response(q, answer=[("bind.example.", "NS", 3600, n("ns.bind.example."))],
                                       additional=[("ns.bind.example.", "A", 3600, weirtest.rdata_a(BIND_ADDR))],
                                       options=opts)
    if q.qname == "bind.example." and q.qtype == 6:
        return weirtest.build_response(q, answer=[soa], options=opts)
    if q.qname == "ns.bind.example." and q.qtype == 1:
        return weirtest.build_response(q, answer=[("ns.bind.example.", "A", 3600, weirtest.rdata_a(BIND_ADDR))],
                                       options=opts)
    if q.qname == "video.bind.example.":
        if q.qtype == 5:
            return weirtest.build_response(q, answer=[("video.bind.example.", "CNAME", 300,
                                                       n("x.cdn.bind.example."))], options=opts)
        return weirtest.build_response(q, answer=[("video.bind.example.", "CNAME", 300, n("x.cdn.bind.example."))],
                                       authority=ns_cdn, additional=glue_cdn, options=opts)
    if q.qname in ("bind.example.", "ns.bind.example."):
        return weirtest.build_response(q, authority=[soa], options=opts)
    if q.qname.startswith("cname-nosoa") and q.qname.endswith(".bind.example."):
        # A CNAME (TTL 60) to a name that has no record of the type, and no SOA either.
        target = "nosoa-nodata-target" + q.qname[len("cname-nosoa"):]
        return weirtest.build_response(q, answer=[(q.qname, "CNAME", 60, n(target))], options=opts)
    if q.qname.startswith("nosoa") and q.qname.endswith(".bind.example."):
        # NODATA (nosoa-nodata...) or NXDOMAIN (nosoa-nx...) with an empty authority section.
        return weirtest.build_response(q, rcode=3 if q.qname.startswith("nosoa-nx") else 0, options=opts)
    return weirtest.build_response(q, rcode=3, authority=[soa], options=opts)


def count(sim: weirtest.GslbSim, qname: str, qtype: str = "A") -> int:
    return sim.stats().get("by_qname_qtype", {}).get(qname, {}).get(qtype, 0)


def rrs(r: weirtest.Response, section: str = "answer") -> set:
    return {(x.name.lower(), x.type, x.data.lower()) for x in getattr(r, section)}


class Base(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig", "kdig")
        cls.bind = weirtest.ScriptedAuthority(bind_style, host=BIND_ADDR, port=53)
        cls.h = weirtest.FakeHierarchy(BUILD_DIR, net=NET, zones=ZONES,
                                       extra_children={"bind.example.": BIND_ADDR})
        cls.tags = weirtest.write_temp(TAGS, suffix=".txt")

    @classmethod
    def tearDownClass(cls):
        cls.h.stop()
        cls.bind.stop()

    def start(self, **kw) -> weirtest.Recursor:
        cache = {"negative_max_ttl": 3600}
        cache.update(kw.pop("cache", {}))
        conf = weirtest.recursor_config(root_hints=self.h.root_hints, tags=kw.pop("tags", self.tags),
                                        resolver=dict({"do_ip6": False}, **kw.pop("resolver", {})),
                                        cache=cache, **kw)
        r = weirtest.Recursor(BUILD_DIR, conf, test_clock=True)
        self.addCleanup(r.stop)
        return r


class CnameAcrossZoneCuts(Base):
    """Case 1: a CNAME whose target is in a child zone served elsewhere."""

    def test_tagged_cname_into_delegated_child(self):
        rec = self.start()
        r = weirtest.dig(rec.host, rec.port, "video.corp.example", ecs="198.51.100.7/24", options=[W])
        self.assertEqual(r.status, "NOERROR")
        self.assertIn(("video.corp.example.", "CNAME", "x.cdn.corp.example."), rrs(r))
        self.assertEqual(sorted(r.addresses()), ["192.0.2.10", "192.0.2.11"], r.text)
        self.assertEqual(r.weights(W), [3, 1])
        self.assertEqual(r.ecs.scope, 24)
        # ECS reached the GSLB at the target's own zone cut.
        # (libunbound's own zone-cut lookups carry neither ECS nor the weight option.)
        log = [e for e in self.h.sim("cdn.corp.example.").log(500)
               if e["qname"] == "x.cdn.corp.example." and e["weight_option"]]
        self.assertTrue(log and all(e["ecs"] and e["ecs"]["address"] == "198.51.100.0" for e in log), log)

    def test_bind_style_aa_cname_with_referral(self):
        rec = self.start()
        r = weirtest.dig(rec.host, rec.port, "video.bind.example", ecs="203.0.113.9/24", options=[W])
        self.assertEqual(r.status, "NOERROR", r.text)
        self.assertIn(("video.bind.example.", "CNAME", "x.cdn.bind.example."), rrs(r))
        self.assertEqual(r.addresses(), ["192.0.2.20"], r.text)
        self.assertEqual(r.weights(W), [1])

    def test_untagged_cname_into_delegated_child(self):
        rec = self.start()
        r = weirtest.dig(rec.host, rec.port, "www.org.example")
        self.assertEqual(r.status, "NOERROR")
        self.assertIn(("www.org.example.", "CNAME", "www.sub.org.example."), rrs(r))
        self.assertEqual(r.addresses(), ["192.0.2.77"], r.text)

    def test_chain_of_eight_links_across_cuts(self):
        rec = self.start()
        r = weirtest.dig(rec.host, rec.port, "c1.corp.example", ecs="198.51.100.7/24")
        self.assertEqual(r.status, "NOERROR", r.text)
        self.assertEqual(sum(1 for x in r.answer if x.type == "CNAME"), 8, r.text)
        self.assertEqual(sorted(r.addresses()), ["192.0.2.10", "192.0.2.11"])

    def test_chain_longer_than_the_limit_is_servfail(self):
        rec = self.start(last_hop={"max_cname_chain": 5})
        r = weirtest.dig(rec.host, rec.port, "c1.corp.example", ecs="198.51.100.7/24")
        self.assertEqual(r.status, "SERVFAIL", r.text)
        self.assertGreaterEqual(rec.stats()["cname_chain_too_long"], 1)

    def test_loop_across_cuts_is_servfail_and_counted(self):
        rec = self.start()
        t0 = time.monotonic()
        r = weirtest.dig(rec.host, rec.port, "loop1.corp.example", ecs="198.51.100.7/24")
        self.assertEqual(r.status, "SERVFAIL", r.text)
        self.assertLess(time.monotonic() - t0, 2.0)
        self.assertEqual(rec.stats()["cname_loops"], 1)

    def test_chain_target_nxdomain_in_child_zone(self):
        rec = self.start()
        r = weirtest.dig(rec.host, rec.port, "gone.corp.example", ecs="198.51.100.7/24")
        self.assertEqual(r.status, "NXDOMAIN", r.text)
        self.assertIn(("gone.corp.example.", "CNAME", "nothing.cdn.corp.example."), rrs(r))
        self.assertEqual([x.name.lower() for x in r.authority if x.type == "SOA"], ["cdn.corp.example."])

    def test_cached_chain_expires_with_its_shortest_ttl(self):
        rec = self.start()
        corp = self.h.sim("corp.example.")
        r = weirtest.dig(rec.host, rec.port, "short.corp.example", ecs="198.51.100.7/24")
        self.assertEqual(sorted(r.addresses()), ["192.0.2.10", "192.0.2.11"], r.text)
        before = count(corp, "short.corp.example.")
        rec.advance_clock(15)
        r = weirtest.dig(rec.host, rec.port, "short.corp.example", ecs="198.51.100.7/24")
        self.assertEqual(count(corp, "short.corp.example."), before, "served from cache within the CNAME TTL")
        self.assertTrue(all(x.ttl <= 5 for x in r.answer if x.type == "CNAME"), r.text)
        rec.advance_clock(6)  # past the CNAME's 20 s, inside the target's 60 s
        r = weirtest.dig(rec.host, rec.port, "short.corp.example", ecs="198.51.100.7/24")
        self.assertEqual(r.status, "NOERROR")
        self.assertGreater(count(corp, "short.corp.example."), before, "the expired chain is fetched again")


class NegativeAnswers(Base):
    """Case 2 (recursor side) and case 9."""

    def test_tagged_nxdomain_and_nodata_carry_the_soa_and_are_cached(self):
        rec = self.start(cache={"negative_max_ttl": 30})
        corp = self.h.sim("corp.example.")
        for qname, qtype, rcode in (("nx.corp.example", "A", "NXDOMAIN"), ("www.corp.example", "AAAA", "NOERROR")):
            with self.subTest(qname=qname, qtype=qtype):
                r = weirtest.dig(rec.host, rec.port, qname, qtype, ecs="198.51.100.7/24", options=[W])
                self.assertEqual(r.status, rcode)
                self.assertEqual(r.answer, [])
                soa = [x for x in r.authority if x.type == "SOA"]
                self.assertEqual([x.name.lower() for x in soa], ["corp.example."], r.text)
                self.assertLessEqual(soa[0].ttl, 30, "min(SOA TTL, MINIMUM) clamped by negative_max_ttl")
                self.assertEqual(r.option(W), b"", "the weight option is echoed with length 0")
                n = count(corp, qname + ".", qtype)
                rec.advance_clock(10)
                r2 = weirtest.dig(rec.host, rec.port, qname, qtype, ecs="198.51.100.7/24")
                self.assertEqual(r2.status, rcode)
                self.assertEqual(count(corp, qname + ".", qtype), n, "negative answer served from the cache")
                self.assertLessEqual([x.ttl for x in r2.authority if x.type == "SOA"][0], 20)
                self.assertIsNone(r2.option(W), "no weight option to a query without it")

    def test_forward_tag_below_the_zone_apex_keeps_the_soa(self):
        # The tag names a suffix inside corp.example.: the SOA's owner is above it.
        tags = weirtest.write_temp(f"dept.corp.example weight=on ecs=on policy=forward:{NET}.3@53\n", suffix=".txt")
        rec = self.start(tags=tags)
        r = weirtest.dig(rec.host, rec.port, "nx.dept.corp.example", ecs="198.51.100.7/24", options=[W])
        self.assertEqual(r.status, "NXDOMAIN")
        self.assertEqual([x.name.lower() for x in r.authority if x.type == "SOA"], ["corp.example."], r.text)
        self.assertEqual(r.option(W), b"")

    def test_ordinary_negative_soa_ttl_is_the_negative_ttl(self):
        rec = self.start(cache={"negative_max_ttl": 25})
        r = weirtest.dig(rec.host, rec.port, "nothing.org.example")
        self.assertEqual(r.status, "NXDOMAIN")
        soa = [x for x in r.authority if x.type == "SOA"]
        self.assertEqual(len(soa), 1, r.text)
        self.assertLessEqual(soa[0].ttl, 25)

    def test_negative_without_soa_is_not_cached(self):
        def no_soa(q):
            return weirtest.build_response(q, rcode=3, options=[] if q.edns else None)

        with weirtest.ScriptedAuthority(no_soa) as up:
            tags = weirtest.write_temp(f"nosoa.example weight=on ecs=on policy=forward:127.0.0.1@{up.port}\n",
                                       suffix=".txt")
            rec = self.start(tags=tags)
            for _ in range(2):
                r = weirtest.dig(rec.host, rec.port, "a.nosoa.example", ecs="198.51.100.7/24")
                self.assertEqual(r.status, "NXDOMAIN")
            self.assertEqual(len(up.received("a.nosoa.example.")), 2, "each query went upstream")
        with weirtest.ScriptedAuthority(no_soa) as fwd:
            conf = weirtest.recursor_config(forwarders=[f"127.0.0.1:{fwd.port}"], resolver={"do_ip6": False})
            rec = weirtest.Recursor(BUILD_DIR, conf, test_clock=True)
            self.addCleanup(rec.stop)
            for _ in range(2):
                r = weirtest.dig(rec.host, rec.port, "b.nosoa.example")
                self.assertEqual(r.status, "NXDOMAIN")
            # weir keeps nothing (libunbound itself keeps such an answer for at most 5 s).
            st = rec.stats()
            self.assertEqual(st["ordinary_misses"], 2)
            self.assertEqual(st["negative_uncached"], 2)
            self.assertEqual(st["plain_entries"], 0)


    def test_negative_without_soa_through_full_recursion_is_asked_again(self):
        # An authority inside the hierarchy (not a forwarder) that answers NODATA and NXDOMAIN
        # with no SOA: libunbound and weir's last hop both get it; neither answer is kept by weir.
        empty = weirtest.write_temp("", suffix=".txt")
        self.addCleanup(os.unlink, empty)
        for tags, variant in ((empty, "untagged"), (self.tags, "tagged")):
            rec = self.start(tags=tags)
            names = (f"nosoa-nodata-{variant}.bind.example", f"nosoa-nx-{variant}.bind.example",
                     f"cname-nosoa-{variant}.bind.example")
            for name in names:
                for i in range(2):
                    r = weirtest.dig(rec.host, rec.port, name, ecs="198.51.100.7/24" if variant == "tagged" else None)
                    self.assertEqual(r.status, "NXDOMAIN" if "-nx-" in name else "NOERROR", r.text)
                    self.assertEqual([x.type for x in r.answer], ["CNAME"] if name.startswith("cname") else [],
                                     r.text)
                    self.assertFalse([x for x in r.authority if x.type == "SOA"], r.text)
                    # The clock of weir's caches moves on: a NODATA kept like one with an SOA
                    # (for 60 s, say) would still be answered from them.
                    rec.advance_clock(10)
            st = rec.stats()
            with self.subTest(variant=variant):
                self.assertEqual(st["negative_uncached"], 6, st)
                self.assertEqual(st.get("plain_entries", 0), 0, st)
                # Through the front: a miss each time too (the clock moved 10 s between queries).
                fp = weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config([f"{rec.host}:{rec.port}"],
                                                                           weighted=[f"{rec.host}:{rec.port}"],
                                                                           tags=tags), test_clock=True)
                self.addCleanup(fp.stop)
                name = f"nosoa-nodata-{variant}.bind.example"
                before = rec.stats()["queries"]
                for i in range(2):
                    r = fp.dig(name)
                    self.assertEqual((r.status, r.answer), ("NOERROR", []), r.text)
                    fp.advance_clock(10)
                self.assertEqual(rec.stats()["queries"] - before, 2, "the front kept a NODATA without SOA")
                self.assertEqual(fp.metrics().value("weir_cache_entries"), 0)


class ThroughTheFastpath(Base):
    """Case 2 end to end: weir-fastpath in front of weir-recursor caches a
    tagged name's negative answer per city, with the SOA, and echoes the
    weight option with length 0."""

    CITYMAP = "127.1.0.0/16,city-a,198.51.100.0/24\n127.2.0.0/16,city-b,203.0.113.0/24\n"

    def test_tagged_negatives_are_cached_per_city_in_the_front(self):
        rec = self.start(cache={"negative_max_ttl": 30})
        citymap = weirtest.write_temp(self.CITYMAP, suffix=".csv")
        up = f"{rec.host}:{rec.port}"
        fp = weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config([up], weighted=[up], citymap=citymap,
                                                                   tags=self.tags), test_clock=True)
        self.addCleanup(fp.stop)
        for qname, qtype, rcode in (("nx2.corp.example", "A", "NXDOMAIN"), ("www.corp.example", "AAAA", "NOERROR")):
            with self.subTest(qname=qname):
                before = rec.stats()["queries"]
                for source in ("127.1.0.5", "127.2.0.5"):
                    r = fp.dig(qname, qtype, source=source, options=[W])
                    self.assertEqual(r.status, rcode, r.text)
                    soa = [x for x in r.authority if x.type == "SOA"]
                    self.assertEqual([x.name.lower() for x in soa], ["corp.example."], r.text)
                    self.assertLessEqual(soa[0].ttl, 30)
                    self.assertEqual(r.option(W), b"", r.text)
                self.assertEqual(rec.stats()["queries"] - before, 2, "one miss per city")
                fp.advance_clock(10)
                for source in ("127.1.0.5", "127.2.0.5"):
                    r = fp.dig(qname, qtype, source=source)
                    self.assertEqual(r.status, rcode)
                    self.assertLessEqual([x.ttl for x in r.authority if x.type == "SOA"][0], 20)
                    self.assertIsNone(r.option(W))
                self.assertEqual(rec.stats()["queries"] - before, 2, "repeats are fastpath cache hits")


class LocalZonesAndSubnets(Base):
    """Case 3: a subscriber's subnet goes nowhere it was not configured to go."""

    def test_builtin_local_zone_with_ecs_is_answered_locally_without_ecs(self):
        rec = self.start(cache={"negative_max_ttl": 40})
        for qname in ("foo.test", "foo.invalid", "x.onion", "foo.home.arpa", "5.1.168.192.in-addr.arpa"):
            with self.subTest(qname=qname):
                t0 = time.monotonic()
                r = weirtest.dig(rec.host, rec.port, qname, ecs="198.51.100.7/24", options=[W])
                self.assertLess(time.monotonic() - t0, 1.5)
                self.assertEqual(r.status, "NXDOMAIN", r.text)
                for x in r.authority:
                    self.assertLessEqual(x.ttl, 40, "negative_max_ttl holds for local zones")
        st = rec.stats()
        self.assertEqual(st["ecs_sent"], 0)
        self.assertEqual(st["upstream_queries"], 0)

    def test_untagged_name_with_client_ecs_gets_no_ecs_upstream(self):
        rec = self.start()
        self.h.reset()
        r = weirtest.dig(rec.host, rec.port, "www.org.example", ecs="198.51.100.7/24", options=[W])
        self.assertEqual(r.addresses(), ["192.0.2.77"])
        self.assertEqual(r.ecs.scope, 0)
        for origin in (".", "example.", "org.example.", "sub.org.example."):
            for e in self.h.sim(origin).log(500):
                self.assertIsNone(e["ecs"], f"{origin} got ECS: {e}")
        self.assertEqual(rec.stats()["ecs_sent"], 0)

    def test_local_zone_setting(self):
        rec = self.start(resolver={"local_zones": ["test. nodefault", "blocked.org.example. refuse",
                                                   "www.org.example. static"]})
        root = self.h.sim(".")
        before = count(root, "foo.test.") + count(root, "test.", "NS") + count(root, "test.", "A")
        r = weirtest.dig(rec.host, rec.port, "foo.test")
        self.assertEqual(r.status, "NXDOMAIN")  # from our fake root, which has no test.
        after = sum(v for q, t in root.stats()["by_qname_qtype"].items() if q.endswith("test.") for v in t.values())
        self.assertGreater(after, before, "test. was iterated, not answered locally")
        self.assertEqual(weirtest.dig(rec.host, rec.port, "www.blocked.org.example").status, "REFUSED")
        r = weirtest.dig(rec.host, rec.port, "www.org.example")  # exists upstream, a CNAME
        self.assertEqual(r.status, "NXDOMAIN", r.text)

    def test_forward_tag_serves_test_suffix(self):
        sim = weirtest.GslbSim(BUILD_DIR, config_text='[[zone]]\norigin = "svc.test."\n[zone.soa]\n'
                               'mname = "ns.svc.test."\nrname = "h.svc.test."\n' + CDN_X)
        self.addCleanup(sim.stop)
        tags = weirtest.write_temp(f"svc.test weight=on ecs=on policy=forward:127.0.0.1@{sim.port}\n", suffix=".txt")
        rec = self.start(tags=tags)
        r = weirtest.dig(rec.host, rec.port, "x.svc.test", ecs="198.51.100.7/24", options=[W])
        self.assertEqual(sorted(r.addresses()), ["192.0.2.10", "192.0.2.11"], r.text)
        self.assertEqual(r.weights(W), [3, 1])


class LearnedBehindFlatForwarder(Base):
    """Case 5: the customer's zone is reached through a forwarder that
    gives no NS for it; its CNAME enters a tagged suffix."""

    def test_learned_chain_is_resolved_from_the_chain(self):
        n = weirtest.wire_name

        def forwarder(q):
            opts = [] if q.edns else None
            if q.qname == "www.customer.example." and q.qtype == 1:
                return weirtest.build_response(q, aa=False, answer=[
                    ("www.customer.example.", "CNAME", 120, n("x.cdn.corp.example.")),
                    ("x.cdn.corp.example.", "A", 60, weirtest.rdata_a("192.0.2.99"))], options=opts)
            if q.qname == "x.cdn.corp.example." and q.qtype == 1:  # the GSLB's answer for nobody's city
                return weirtest.build_response(q, aa=False, answer=[
                    ("x.cdn.corp.example.", "A", 60, weirtest.rdata_a("192.0.2.99"))], options=opts)
            return weirtest.build_response(q, aa=False, options=opts)  # no NS, no SOA: a flat forwarder

        with weirtest.ScriptedAuthority(forwarder) as fwd:
            tags = weirtest.write_temp(f"cdn.corp.example weight=on ecs=on policy=forward:{NET}.4@53\n"
                                       "bad.example weight=on ecs=on\n", suffix=".txt")
            conf = weirtest.recursor_config(forwarders=[f"127.0.0.1:{fwd.port}"], tags=tags,
                                            resolver={"do_ip6": False})
            rec = weirtest.Recursor(BUILD_DIR, conf, test_clock=True)
            self.addCleanup(rec.stop)
            r = weirtest.dig(rec.host, rec.port, "www.customer.example", ecs="203.0.113.9/24", options=[W])
            self.assertEqual(r.status, "NOERROR", r.text)
            self.assertIn(("www.customer.example.", "CNAME", "x.cdn.corp.example."), rrs(r))
            self.assertEqual(r.addresses(), ["192.0.2.20"], "the city's view, resolved with ECS")
            self.assertEqual(r.weights(W), [1])
            self.assertTrue(all(q.ecs is None for q in fwd.received()), "no subnet to the forwarder")
            self.assertGreaterEqual(rec.stats()["learned_tagged"], 1)
            # A tagged name whose zone cut cannot be found: SERVFAIL, and why is logged.
            r = weirtest.dig(rec.host, rec.port, "www.bad.example", ecs="203.0.113.9/24")
            self.assertEqual(r.status, "SERVFAIL")
            self.assertTrue(weirtest.wait_until(lambda: "www.bad.example" in rec.process.stderr_text(), 3),
                            rec.process.stderr_text())


class DnssecWithoutDo(Base):
    """Case 6: no RRSIG/NSEC/NSEC3 to a client that did not set DO."""

    def test_rrsig_only_with_do(self):
        signature = base64.b64encode(b"\x01" * 64).decode()  # nobody checks it
        rrsig = weirtest.rdata("RRSIG", f"A 13 3 300 2000000000 1600000000 12345 sig.example. {signature}")
        nsec = weirtest.rdata("NSEC", "z.sig.example. A RRSIG NSEC")

        def signed(q):
            return weirtest.build_response(q, answer=[(q.qname, "A", 300, weirtest.rdata_a("192.0.2.50")),
                                                      (q.qname, 46, 300, rrsig)],
                                           authority=[(q.qname, 47, 300, nsec)],
                                           options=[] if q.edns else None)

        with weirtest.ScriptedAuthority(signed) as up:
            # Ordinary names through libunbound (forwarding), and a tagged
            # name whose authority sends signatures nobody asked for.
            tags = weirtest.write_temp(f"t.sig.example weight=on policy=forward:127.0.0.1@{up.port}\n",
                                       suffix=".txt")
            conf = weirtest.recursor_config(forwarders=[f"127.0.0.1:{up.port}"], tags=tags,
                                            resolver={"do_ip6": False})
            rec = weirtest.Recursor(BUILD_DIR, conf, test_clock=True)
            self.addCleanup(rec.stop)
            for qname in ("a.sig.example", "a.t.sig.example"):
                with self.subTest(qname=qname):
                    r = weirtest.dig(rec.host, rec.port, qname, norec=False, extra=["+adflag", "+nodnssec"])
                    self.assertEqual(r.addresses(), ["192.0.2.50"], r.text)
                    types = {x.type for x in r.answer + r.authority + r.additional}
                    self.assertFalse(types & {"RRSIG", "NSEC", "NSEC3"}, r.text)
                    self.assertNotIn("ad", r.flags, "nothing here was validated")
            r = weirtest.dig(rec.host, rec.port, "a.sig.example", norec=False, extra=["+dnssec"])
            self.assertIn("RRSIG", {x.type for x in r.answer}, r.text)


class Deadlines(Base):
    """Case 7: every query is answered by the deadline."""

    def test_blackholed_authorities_get_servfail_by_the_deadline(self):
        with weirtest.ScriptedAuthority(lambda q: None) as hole:
            tags = weirtest.write_temp(f"hole.example weight=on ecs=on policy=forward:127.0.0.1@{hole.port}\n",
                                       suffix=".txt")
            rec = self.start(tags=tags, server={"answer_deadline_ms": 1500},
                             last_hop={"timeout_ms": 2000, "attempts": 4})
            t0 = time.monotonic()
            r = weirtest.dig(rec.host, rec.port, "a.hole.example", ecs="198.51.100.7/24", timeout=5)
            took = time.monotonic() - t0
            self.assertEqual(r.status, "SERVFAIL")
            self.assertLess(took, 2.5)
            self.assertGreaterEqual(took, 1.3)
            self.assertGreaterEqual(rec.stats()["deadline_servfail"], 1)
        with weirtest.ScriptedAuthority(lambda q: None) as hole:
            conf = weirtest.recursor_config(forwarders=[f"127.0.0.1:{hole.port}"], resolver={"do_ip6": False},
                                            server={"answer_deadline_ms": 1500})
            rec = weirtest.Recursor(BUILD_DIR, conf, test_clock=True)
            self.addCleanup(rec.stop)
            t0 = time.monotonic()
            r = weirtest.dig(rec.host, rec.port, "a.hole.example", timeout=5)
            self.assertEqual(r.status, "SERVFAIL")
            self.assertLess(time.monotonic() - t0, 2.5)


class ResolverKnobs(Base):
    """Case 10: qname minimisation, seen at the root."""

    def test_qname_minimisation_off_sends_the_full_name_to_the_root(self):
        for mode, full_name_at_root in (("off", True), ("on", False)):
            with self.subTest(mode=mode):
                self.h.reset()
                rec = self.start(resolver={"qname_minimisation": mode})
                r = weirtest.dig(rec.host, rec.port, "www.sub.org.example")
                self.assertEqual(r.addresses(), ["192.0.2.77"])
                names = {e["qname"] for e in self.h.sim(".").log(100)}
                self.assertEqual("www.sub.org.example." in names, full_name_at_root, names)
                rec.stop()


if __name__ == "__main__":
    unittest.main()
