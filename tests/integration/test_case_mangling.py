"""Authorities that do not echo the question's case: some load balancers
lower-case every name they answer. With 0x20 on (the default), weir must
still answer their names, within the client's deadline: after the mismatch
the question is asked again without case randomisation for that server
(docs/behaviour.md#the-recursive-tier). A scripted authority on port 53 of
127.0.132.9 plays such a server for lower.example., once answering TCP too
and once over UDP only, for libunbound's ordinary names, weir's tagged last
hop and weir-fastpath's upstream.

Run: python3 tests/integration/test_case_mangling.py --build-dir build
"""

import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
NET = "127.0.132"
LOWER_ADDR = f"{NET}.9"
ZONE = "lower.example."


class LowerCasingAuthority:
    """lower.example.: every answer's question and owner names in lower case.
    With `tcp=False` it never answers over TCP (a UDP-only balancer)."""

    def __init__(self):
        self.tcp = True

    def __call__(self, q: weirtest.RawQuery):
        if q.transport == "tcp" and not self.tcp:
            return None
        n = weirtest.wire_name
        soa = (ZONE, "SOA", 3600, weirtest.rdata_soa(f"ns1.{ZONE}", f"h.{ZONE}", minimum=60))
        opts = [] if q.edns else None
        lower = q.qname  # RawQuery.qname is the lower-case form

        def reply(**kw):
            return weirtest.build_response(q, qname=lower, options=opts, **kw)

        if q.qname == ZONE and q.qtype == 2:
            return reply(answer=[(ZONE, "NS", 3600, n(f"ns1.{ZONE}"))],
                         additional=[(f"ns1.{ZONE}", "A", 3600, weirtest.rdata_a(LOWER_ADDR))])
        if q.qname == ZONE and q.qtype == 6:
            return reply(answer=[soa])
        if q.qname == f"ns1.{ZONE}" and q.qtype == 1:
            return reply(answer=[(lower, "A", 3600, weirtest.rdata_a(LOWER_ADDR))])
        if q.qname.startswith("www") and q.qname.endswith("." + ZONE) and q.qtype == 1:
            return reply(answer=[(lower, "A", 300, weirtest.rdata_a("192.0.2.55"))])
        if q.qname.endswith(ZONE):
            return reply(authority=[soa])  # NODATA
        return reply(rcode=5)


class CaseManglingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig")
        cls.handler = LowerCasingAuthority()
        cls.auth = weirtest.ScriptedAuthority(cls.handler, host=LOWER_ADDR, port=53)
        cls.h = weirtest.FakeHierarchy(BUILD_DIR, net=NET, extra_children={ZONE: LOWER_ADDR})
        cls.tags = weirtest.write_temp("tagged.lower.example weight=on ecs=on\n", suffix=".txt")

    @classmethod
    def tearDownClass(cls):
        cls.h.stop()
        cls.auth.stop()
        os.unlink(cls.tags)

    def setUp(self):
        self.handler.tcp = True

    def start(self) -> weirtest.Recursor:
        conf = weirtest.recursor_config(root_hints=self.h.root_hints, tags=self.tags,
                                        resolver={"do_ip6": False, "use_caps_for_id": True},
                                        last_hop={"use_0x20": True})
        r = weirtest.Recursor(BUILD_DIR, conf, test_clock=True)
        self.addCleanup(r.stop)
        return r

    def ask(self, rec, name, **kw):
        t0 = time.monotonic()
        r = weirtest.dig(rec.host, rec.port, name, timeout=5, tries=1, **kw)
        return r, time.monotonic() - t0

    def check_names(self, tcp: bool):
        self.handler.tcp = tcp
        rec = self.start()
        for i, (name, kw) in enumerate((("www.Plain.Lower.Example", {}),
                                        ("www.tagged.lower.example", {"ecs": "198.51.100.7/24"}))):
            with self.subTest(name=name, tcp=tcp):
                r, took = self.ask(rec, name, **kw)
                self.assertEqual(r.status, "NOERROR", r.text)
                self.assertEqual(r.addresses(), ["192.0.2.55"], r.text)
                self.assertLess(took, 3.0, "answered within the resolver's deadline")
        # The tagged last hop learnt the server (weir_recursor_upstream_0x20_fallbacks_total).
        st = rec.stats()
        self.assertGreaterEqual(st["case_fallbacks"], 1, st)
        # Next names of that server: asked without 0x20 at once, no second mismatch.
        before = st["unwanted_case"]
        r, _ = self.ask(rec, "www2.tagged.lower.example", ecs="198.51.100.7/24")
        self.assertEqual(r.addresses(), ["192.0.2.55"], r.text)
        self.assertEqual(rec.stats()["unwanted_case"], before, "the server was asked in 0x20 again")

    def test_authority_with_tcp(self):
        self.check_names(tcp=True)

    def test_udp_only_authority(self):
        self.check_names(tcp=False)

    def test_fastpath_upstream_that_lower_cases(self):
        # weir-fastpath's upstream (a balancer in front of the recursors, say) lower-cases too.
        for tcp in (True, False):
            with self.subTest(tcp=tcp):
                self.handler.tcp = tcp
                conf = weirtest.fastpath_config([f"{LOWER_ADDR}:53"], upstream={"timeout_ms": 1000})
                fp = weirtest.Fastpath(BUILD_DIR, conf)
                try:
                    t0 = time.monotonic()
                    r = fp.dig("WWW.fp.Lower.example", timeout=5)
                    self.assertEqual(r.status, "NOERROR", r.text)
                    self.assertEqual(r.addresses(), ["192.0.2.55"], r.text)
                    self.assertLess(time.monotonic() - t0, 3.0)
                    again = fp.dig("www3.fp.lower.example", timeout=5)
                    self.assertEqual(again.addresses(), ["192.0.2.55"], again.text)
                    m = fp.metrics()
                    self.assertEqual(m.value("weir_upstream_0x20_fallbacks_total"), 1, m.text)
                    self.assertEqual(m.value("weir_upstream_case_mismatches_total"), 1,
                                     "the second name went out without 0x20")
                finally:
                    fp.stop()


if __name__ == "__main__":
    unittest.main()
