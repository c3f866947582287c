"""RFC 7871 rules on weir-recursor's last hop, one test per rule, each
checking the packets the authoritative servers actually received (gslb-sim's
query log, or a scripted authoritative's record of raw queries).

Run: python3 tests/integration/test_recursor_ecs_rules.py --build-dir build
"""

import ipaddress
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest import build_response, echo_ecs, ecs_option, rdata_a, weight_option  # noqa: E402
from weirtest.zones import default, gslb_name, record, view  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
NET = "127.0.102"

SHOP = record("www", "A", "192.0.2.1") + record("video", "CNAME", "x.cdn-gslb.example.", ttl=600)

CDN = (gslb_name("x", view("198.51.100.0/24", ["192.0.2.10", "192.0.2.11"], [3, 1], scope=24),
                 view("2001:db8:100::/48", ["2001:db8::10"], [2], scope=48),
                 view("127.0.0.0/8", ["192.0.2.40"], [1], scope=8),
                 default=default(["192.0.2.99"], [1]), ttl=60, weights=True) +
       gslb_name("long", view("198.51.100.0/24", ["192.0.2.28"], [1], scope=28), ttl=60, weights=True))

SCRIPTED = "scripted.example."


def scripted_handler(q):
    name = q.qname
    ok = [(name, "A", 60, rdata_a("192.0.2.200"))]
    e = q.ecs
    if name.startswith("noecs."):  # an authority that does not speak ECS at all
        return build_response(q, answer=ok, options=[weight_option([1])])
    if name.startswith("refused.") or name.startswith("formerr."):
        if e is not None:
            return build_response(q, rcode=5 if name.startswith("refused.") else 1, aa=False, options=[])
        return build_response(q, answer=ok, options=[])
    if name.startswith("forged-") and e is not None:
        family, source, _, addr = e
        if name.startswith("forged-address."):
            addr = bytes([addr[0] ^ 0x80]) + addr[1:]
        elif name.startswith("forged-source."):
            source, addr = 16, addr[:2]
        elif name.startswith("forged-family."):
            family = 2 if family == 1 else 1
        return build_response(q, answer=ok, options=[ecs_option(family, source, 24, addr)])
    return build_response(q, answer=ok, options=[echo_ecs(q, 24)])


class EcsRulesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig")
        weirtest.start_authorities(cls, BUILD_DIR, NET, {"shop.example.": SHOP, "cdn-gslb.example.": CDN},
                                   scripted_handler)
        cls.gslb = cls.h.sim("cdn-gslb.example.")
        cls.tags = weirtest.write_temp(
            "video.shop.example weight=on ecs=on\ncdn-gslb.example weight=on ecs=on\n"
            f"{SCRIPTED} weight=on ecs=on policy=forward:127.0.0.1@{cls.auth.port}\n", suffix=".txt")
        cls.addClassCleanup(os.unlink, cls.tags)
        cls.cfg = dict(root_hints=cls.h.root_hints, tags=cls.tags, last_hop={"timeout_ms": 300, "attempts": 2})
        cls.r = weirtest.Recursor(BUILD_DIR, weirtest.recursor_config(**cls.cfg))
        cls.addClassCleanup(cls.r.stop)

    def setUp(self):
        self.r.flush()
        self.h.reset()
        self.auth.clear()

    def all_logs(self):
        return [(origin, e) for origin, sim in self.h.sims.items() for e in sim.log(10000)]

    def last_hop(self, qname):
        """gslb-sim's log of weir's own last-hop queries (the only ones with the weight option)."""
        return [e for e in self.gslb.log(1000) if e["qname"] == qname and e["weight_option"]]

    def ask(self, name, ecs=None, qtype="A", **kw):
        r = self.r.dig(name, qtype, ecs=ecs, options=[65001], **kw)
        self.assertEqual(r.status, "NOERROR", r.text)
        return r

    # RFC 7871 7.2.2 / docs/behaviour.md#the-recursive-tier: ECS goes only to the servers of tagged names,
    # never on derived queries (NS and address lookups) nor for ordinary names.
    def test_ecs_only_to_tagged_name_servers_never_on_derived_queries(self):
        self.ask("video.shop.example", ecs="198.51.100.7/24")
        self.r.dig("www.shop.example", "A")
        with_ecs = [(o, e["qname"], e["qtype"]) for o, e in self.all_logs() if e["ecs"] is not None]
        self.assertEqual(sorted(set(with_ecs)), [("cdn-gslb.example.", "x.cdn-gslb.example.", "A"),
                                                 ("shop.example.", "video.shop.example.", "A")])
        derived = [e for _, e in self.all_logs() if e["qtype"] in ("NS", "AAAA") or e["qname"].startswith("ns1.")]
        self.assertTrue(derived, "the zone cuts were found through libunbound")
        for e in derived:
            self.assertIsNone(e["ecs"], e)
        for origin in (".", "example."):
            self.assertEqual(self.h.sim(origin).stats()["with_ecs"], 0)

    # RFC 7871 11.1: at most /24 and /56 go upstream, the address cut to
    # ceil(source/8) bytes with every bit past the source zero.
    def test_source_prefix_capped_and_address_truncated(self):
        cases = [("198.51.100.77/32", 1, 24, "198.51.100.0"), ("198.51.100.77/20", 1, 20, "198.51.96.0"),
                 ("2001:db8:100:7:1::/80", 2, 56, "2001:db8:100::"), ("2001:db8:100:ff::/52", 2, 52, "2001:db8:100::")]
        for ecs, family, source, address in cases:
            with self.subTest(ecs=ecs):
                self.auth.clear()
                self.ask(f"raw.{SCRIPTED}", ecs=ecs, qtype="A")
                sent = self.auth.received(f"raw.{SCRIPTED}")[-1].ecs
                self.assertIsNotNone(sent)
                fam, src, scope, addr = sent
                self.assertEqual((fam, src, scope), (family, source, 0))
                self.assertEqual(len(addr), (source + 7) // 8)
                full = addr + bytes((4 if family == 1 else 16) - len(addr))
                self.assertEqual(str(ipaddress.ip_address(full)), address)
                self.r.flush()
        # The same through the hierarchy: gslb-sim saw a valid /24 (no parse error).
        self.ask("video.shop.example", ecs="198.51.100.77/32")
        e = [e for e in self.gslb.log(100) if e["qname"] == "x.cdn-gslb.example."][-1]
        self.assertEqual(e["ecs"], {"family": 1, "address": "198.51.100.0", "source": 24})
        self.assertIsNone(e["error"])

    def test_default_source_from_client_address(self):
        cfg = dict(self.cfg, ecs={"from_client_address": True})
        with weirtest.Recursor(BUILD_DIR, weirtest.recursor_config(**cfg)) as r:
            res = r.dig(f"raw.{SCRIPTED}", "A", options=[65001], source=f"{NET}.77")
            self.assertEqual(res.status, "NOERROR", res.text)
            fam, src, _, addr = self.auth.received(f"raw.{SCRIPTED}")[-1].ecs
            self.assertEqual((fam, src, addr), (1, 24, bytes([127, 0, 102])))

    # RFC 7871 7.3: a reply without ECS is cached as scope 0, for every client.
    def test_reply_without_ecs_is_cached_globally(self):
        a = self.ask(f"noecs.{SCRIPTED}", ecs="198.51.100.7/24")
        self.assertEqual(a.ecs.scope, 0)
        b = self.ask(f"noecs.{SCRIPTED}", ecs="203.0.113.7/24")
        c = self.ask(f"noecs.{SCRIPTED}", ecs="2001:db8:5::/56", qtype="A")
        self.assertEqual(b.addresses(), ["192.0.2.200"])
        self.assertEqual(c.addresses(), ["192.0.2.200"])
        self.assertEqual((b.ecs.scope, c.ecs.scope), (0, 0))
        self.assertEqual(len(self.auth.received(f"noecs.{SCRIPTED}")), 1)

    # RFC 7871 7.1.3: REFUSED or FORMERR to a query with ECS -> once without.
    def test_refused_or_formerr_retried_once_without_ecs(self):
        for label in ("refused", "formerr"):
            with self.subTest(rcode=label):
                name = f"{label}.{SCRIPTED}"
                r = self.ask(name, ecs="198.51.100.7/24")
                self.assertEqual(r.addresses(), ["192.0.2.200"])
                self.assertEqual(r.ecs.scope, 0)
                got = self.auth.received(name)
                self.assertEqual([q.ecs is not None for q in got], [True, False])
                # The answer without ECS is global: another city does not ask again.
                self.ask(name, ecs="203.0.113.7/24")
                self.assertEqual(len(self.auth.received(name)), 2)
        self.assertGreaterEqual(self.r.stats()["ecs_retry_without"], 2)

    # RFC 7871 7.3: an echo whose family, source or address differ from what
    # was sent is not trusted; the query is repeated without ECS.
    def test_forged_echo_requeried_without_ecs(self):
        for kind in ("address", "source", "family"):
            with self.subTest(kind=kind):
                name = f"forged-{kind}.{SCRIPTED}"
                r = self.ask(name, ecs="198.51.100.7/24")
                self.assertEqual(r.addresses(), ["192.0.2.200"])
                self.assertEqual(r.ecs.scope, 0)
                self.assertEqual([q.ecs is not None for q in self.auth.received(name)], [True, False])
        self.assertGreaterEqual(self.r.stats()["ecs_forged"], 3)

    # RFC 7871 7.3.1: a scope longer than the source is used at the source length.
    def test_scope_longer_than_source_valid_at_source_length(self):
        a = self.ask("long.cdn-gslb.example", ecs="198.51.100.7/24")
        self.assertEqual(a.addresses(), ["192.0.2.28"])
        self.assertEqual((a.ecs.source, a.ecs.scope), (24, 24))
        self.assertEqual(len(self.last_hop("long.cdn-gslb.example.")), 1)
        # Another address of the same /24 (a /25 outside the /28 the server named) is served from the cache.
        b = self.ask("long.cdn-gslb.example", ecs="198.51.100.200/25")
        self.assertEqual(b.addresses(), ["192.0.2.28"])
        self.assertEqual((b.ecs.source, b.ecs.scope), (25, 24))
        self.assertEqual(len(self.last_hop("long.cdn-gslb.example.")), 1)

    # RFC 7871 7.1.2: source /0 means "do not use my address": nothing is
    # sent, and the answer serves /0 queries only.
    def test_source_zero_sends_no_ecs_and_serves_only_zero(self):
        z = self.ask("x.cdn-gslb.example", ecs="0.0.0.0/0")
        self.assertEqual(z.addresses(), ["192.0.2.40"])  # the view of the recursor's own (loopback) address
        self.assertEqual((z.ecs.source, z.ecs.scope), (0, 0))
        sent = self.last_hop("x.cdn-gslb.example.")
        self.assertEqual(len(sent), 1)
        self.assertIsNone(sent[0]["ecs"])
        # A city's query does not get the /0 answer...
        c = self.ask("x.cdn-gslb.example", ecs="198.51.100.7/24")
        self.assertEqual(c.addresses(), ["192.0.2.10", "192.0.2.11"])
        # ...and a second /0 query is served from the /0 answer.
        z2 = self.ask("x.cdn-gslb.example", ecs="0.0.0.0/0")
        self.assertEqual(z2.addresses(), ["192.0.2.40"])
        sent = self.last_hop("x.cdn-gslb.example.")
        self.assertEqual([e["ecs"] is not None for e in sent], [False, True])


if __name__ == "__main__":
    unittest.main()
