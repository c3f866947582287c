"""Tests of the harness itself where it has logic of its own: the wire
helpers on dnspython (what a test sends and what it reads back must be
what went over the wire) and the zone builders. No daemon is started.

Run: python3 tests/integration/test_weirtest.py
"""

import os
import sys
import tomllib
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import default, delegation, gslb_name, record, view, zone  # noqa: E402

weirtest.parse_build_dir()  # accepts --build-dir like the other tests

# "www.example.org A", ID 0x1234, RD, an OPT with buffer 1232 and no options.
QUERY = bytes.fromhex("1234 0100 0001 0000 0000 0001 03777777076578616d706c65036f726700 0001 0001"
                      "00 0029 04d0 00000000 0000")


class WireTest(unittest.TestCase):
    def test_make_query_writes_the_expected_bytes(self):
        self.assertEqual(weirtest.make_query("www.example.org"), QUERY)
        no_edns = weirtest.make_query("www.example.org", edns=False, trailing=b"\xde\xad")
        self.assertEqual(no_edns, QUERY[:11] + b"\x00" + QUERY[12:33] + b"\xde\xad")

    def test_ecs_of_a_query_is_kept_as_sent(self):
        # /20 with host bits set in the last byte: dnspython's own ECS parser
        # would mask them; the ECS rule tests must see them.
        sent = bytes([0, 1, 20, 0, 203, 0, 113])
        q = weirtest.parse_raw_query(weirtest.make_query("x.example", options=[(8, sent)]))
        self.assertEqual(q.ecs, (1, 20, 0, bytes([203, 0, 113])))
        self.assertEqual(q.option(8), sent)

    def test_ecs_option_is_dnspython_ecs_only_when_canonical(self):
        canonical = weirtest.ecs_option(1, 24, 24, bytes([198, 51, 100]))
        self.assertIsInstance(canonical, weirtest.wire.dns.edns.ECSOption)
        for family, source, address in ((1, 20, bytes([203, 0, 113])), (1, 24, bytes([198, 51])), (3, 8, b"\x01")):
            opt = weirtest.ecs_option(family, source, 0, address)
            self.assertNotIsInstance(opt, weirtest.wire.dns.edns.ECSOption)
            self.assertEqual(opt.to_wire(), bytes([0, family, source, 0]) + address)

    def test_response_keeps_order_ttls_options_and_size(self):
        ecs = (8, bytes([0, 1, 24, 0, 1, 2, 3]))
        q = weirtest.parse_raw_query(weirtest.make_query("WWW.example.org", options=[ecs]))
        answer = [(q.qname, "A", 60, weirtest.rdata_a("192.0.2.1")), (q.qname, "CNAME", 5, "b.example."),
                  (q.qname, "A", 30, weirtest.rdata_a("192.0.2.2"))]
        extra = [(f"n{i}.example.org.", "A", 1, weirtest.rdata_a("10.0.0.1")) for i in range(100)]
        wire = weirtest.build_response(q, answer=answer, additional=extra,
                                       options=[weirtest.echo_ecs(q, 24), weirtest.weight_option([3, 1])])
        self.assertGreater(len(wire), 1232)
        m = weirtest.parse_message(wire)
        self.assertEqual((m.id, m.qname, m.rcode, m.message.question[0].name.to_text()),
                         (0x1234, "www.example.org.", 0, "WWW.example.org."))
        self.assertEqual([(r.type, r.ttl, r.rdata) for r in m.answer],
                         [(1, 60, weirtest.rdata_a("192.0.2.1")), (5, 5, weirtest.rdata("CNAME", "b.example.")),
                          (1, 30, weirtest.rdata_a("192.0.2.2"))])
        self.assertEqual(len(m.additional), 100)
        self.assertEqual(m.options(), [(8, bytes([0, 1, 24, 24, 1, 2, 3])), (65001, b"\x00\x03\x00\x01")])

    def test_forged_question_and_id(self):
        q = weirtest.parse_raw_query(QUERY)
        m = weirtest.parse_message(weirtest.build_response(q, qname="other.example.", qid=7, rcode=3, aa=False))
        self.assertEqual((m.id, m.qname, m.rcode, m.flags & 0x0400, m.raw_options), (7, "other.example.", 3, 0, None))

    def test_malformed_response_raises(self):
        wire = weirtest.build_response(weirtest.parse_raw_query(QUERY), answer=[("www.example.org.", "A", 60,
                                                                                 weirtest.rdata_a("192.0.2.1"))])
        with self.assertRaises(weirtest.DecodeError):
            weirtest.parse_message(wire[:-3])

    def test_tcp_frames(self):
        msgs, rest = weirtest.split_tcp_frames(weirtest.tcp_frame(b"ab") + weirtest.tcp_frame(b"") + b"\x00\x05xy")
        self.assertEqual((msgs, rest), ([b"ab", b""], b"\x00\x05xy"))


class ZonesTest(unittest.TestCase):
    def test_builders_write_the_gslb_sim_tables(self):
        text = (zone("cdn.test.", rname="admin", ttl=None, lame="no-aa") + record("www", "A", "192.0.2.1", ttl=300) +
                gslb_name("x", view("198.51.100.0/24", ["192.0.2.10"], [2], scope=24),
                          default=default(["192.0.2.99"]), ttl=60) +
                delegation("sub", "ns1.sub", ["127.0.0.2"], ttl=3600))
        self.assertEqual(tomllib.loads(text), {"zone": [{
            "origin": "cdn.test.", "lame": "no-aa",
            "soa": {"mname": "ns1", "rname": "admin", "minimum": 60},
            "record": [{"name": "www", "type": "A", "ttl": 300, "data": "192.0.2.1"}],
            "name": [{"name": "x", "ttl": 60,
                      "view": [{"cidr": "198.51.100.0/24", "scope": 24, "addresses": ["192.0.2.10"], "weights": [2]}],
                      "default": {"addresses": ["192.0.2.99"]}}],
            "delegation": [{"name": "sub", "ttl": 3600, "ns": ["ns1.sub"],
                            "glue": [{"name": "ns1.sub", "addresses": ["127.0.0.2"]}]}]}]})


if __name__ == "__main__":
    unittest.main()
