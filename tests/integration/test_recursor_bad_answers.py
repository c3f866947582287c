"""Bad authoritative answers on weir-recursor's last hop: truncated, wrong
question, out-of-bailiwick records, weight options of the wrong length, ECS
of another family. Each is rejected or neutralised; nothing crashes and
nothing reaches the cache.

A scripted authoritative (policy forward for bad.example.) writes the bad
answers; a gslb-sim hierarchy on 127.0.103.x holds the names the bad
answers try to poison.

Run: python3 tests/integration/test_recursor_bad_answers.py --build-dir build
"""

import os
import struct
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest import build_response, ecs_option, echo_ecs, rdata_a, weight_option, wire_name  # noqa: E402
from weirtest.zones import default, gslb_name, record, view  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
NET = "127.0.103"
POISON = "6.6.6.6"

SHOP = record("www", "A", "192.0.2.1")

CDN = gslb_name("x", view("198.51.100.0/24", ["192.0.2.10", "192.0.2.11"], [3, 1], scope=24),
                default=default(["192.0.2.99"], [1]), ttl=60, weights=True)

GOOD = "192.0.2.200"


def handler(q):
    n = q.qname
    label = n.split(".")[0]
    ok = [(n, "A", 60, rdata_a(GOOD)), (n, "A", 60, rdata_a("192.0.2.201"))]
    opts = [echo_ecs(q, 24), weight_option([2, 1])]
    if label == "tc":
        if q.transport == "udp":
            return build_response(q, tc=True, options=[echo_ecs(q, 24)])
        return build_response(q, answer=ok, options=opts)
    # The two malformed replies are made from raw bytes on purpose: dnspython
    # writes only well-formed messages.
    if label == "cut":  # a reply cut in the middle of a record, every time
        return build_response(q, answer=ok, options=opts)[:-9]
    if label == "garbage":  # the query's ID, QR and AA, then random bytes
        return struct.pack("!H", q.id) + b"\x84\x00" + os.urandom(40)
    if label == "wrongq":  # forged replies first, then the genuine one
        poison = [(n, "A", 60, rdata_a(POISON))]
        return [build_response(q, qname="other.bad.example.", answer=[("other.bad.example.", "A", 60,
                                                                       rdata_a(POISON))], options=opts[:1]),
                build_response(q, qid=(q.id + 1) & 0xFFFF, answer=poison, options=opts[:1]),
                build_response(q, answer=ok, options=opts)]
    if label == "oob":  # in-bailiwick answer plus records for zones this server does not serve
        return build_response(
            q, answer=ok + [("www.shop.example.", "A", 86400, rdata_a(POISON))],
            authority=[("shop.example.", "NS", 86400, wire_name("ns.evil.example."))],
            additional=[("ns.evil.example.", "A", 86400, rdata_a(POISON))],
            options=[echo_ecs(q, 24), weight_option([2, 1, 9])])
    if label == "oobcname":  # a CNAME out of the zone with the target's "answer" attached
        return build_response(
            q, answer=[(n, "CNAME", 300, wire_name("x.cdn-gslb.example.")),
                       ("x.cdn-gslb.example.", "A", 86400, rdata_a(POISON))],
            options=[echo_ecs(q, 24), weight_option([7])])
    if label.startswith("w"):  # invalid weight options
        data = {"wodd": b"\x00\x02\x00", "wcount": b"\x00\x05", "wzero": b"\x00\x00\x00\x01",
                "whigh": b"\x01\x00\x00\x01", "wmany": b"\x00\x01" * 5}[label]
        return build_response(q, answer=ok, options=[echo_ecs(q, 24), (65001, data)])
    if label == "family":  # ECS of the other family, to every query
        return build_response(q, answer=ok, options=[ecs_option(2, 24, 24, b"\x20\x01\x0d"), weight_option([2, 1])])
    return build_response(q, answer=ok, options=opts)


class BadAnswersTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig")
        weirtest.start_authorities(cls, BUILD_DIR, NET, {"shop.example.": SHOP, "cdn-gslb.example.": CDN}, handler)
        cls.tags = weirtest.write_temp(
            f"bad.example weight=on ecs=on policy=forward:127.0.0.1@{cls.auth.port}\n"
            "cdn-gslb.example weight=on ecs=on\n", suffix=".txt")
        cls.addClassCleanup(os.unlink, cls.tags)
        cfg = weirtest.recursor_config(root_hints=cls.h.root_hints, tags=cls.tags,
                                       last_hop={"timeout_ms": 200, "attempts": 2})
        cls.r = weirtest.Recursor(BUILD_DIR, cfg)
        cls.addClassCleanup(cls.r.stop)

    def ask(self, name, ecs="198.51.100.7/24", **kw):
        return self.r.dig(name, "A", ecs=ecs, options=[65001], timeout=3, **kw)

    def assertNoPoison(self):
        self.assertTrue(self.r.alive())
        for name, ecs in (("www.shop.example", None), ("www.shop.example", "198.51.100.7/24"),
                          ("x.cdn-gslb.example", "198.51.100.7/24"), ("other.bad.example", "198.51.100.7/24")):
            r = self.r.dig(name, "A", ecs=ecs, timeout=3)
            self.assertNotIn(POISON, r.addresses(), (name, r.text))

    def tearDown(self):
        self.assertNoPoison()

    def test_truncated_reply_retried_over_tcp(self):
        r = self.ask("tc.bad.example")
        self.assertEqual(r.addresses(), [GOOD, "192.0.2.201"], (r.text, self.r.stats(), [(q.transport, q.qname) for q in self.auth.received()]))
        self.assertEqual(r.weights(), [2, 1])
        self.assertEqual([q.transport for q in self.auth.received("tc.bad.example.")], ["udp", "tcp"])

    def test_cut_or_garbage_reply_rejected(self):
        for name in ("cut.bad.example", "garbage.bad.example"):
            with self.subTest(name=name):
                r = self.ask(name)
                self.assertEqual(r.status, "SERVFAIL", r.text)
                self.assertEqual(r.answer, [])
        self.assertGreaterEqual(self.r.stats()["malformed_replies"] + self.r.stats()["spoofed_dropped"], 2)

    def test_wrong_question_or_id_ignored_genuine_answer_taken(self):
        before = self.r.stats()["spoofed_dropped"]
        r = self.ask("wrongq.bad.example")
        self.assertEqual(r.addresses(), [GOOD, "192.0.2.201"], r.text)
        self.assertGreaterEqual(self.r.stats()["spoofed_dropped"], before + 2)

    def test_out_of_bailiwick_records_dropped(self):
        r = self.ask("oob.bad.example")
        self.assertEqual(r.addresses(), [GOOD, "192.0.2.201"], r.text)
        self.assertEqual([x.name for x in r.answer], ["oob.bad.example."] * 2)
        self.assertEqual(r.authority, [])
        self.assertEqual(r.weights(), [2, 1], "weights of the dropped record are dropped with it")
        self.assertGreaterEqual(self.r.stats()["out_of_bailiwick"], 1)

    def test_out_of_zone_cname_target_resolved_from_its_own_servers(self):
        r = self.ask("oobcname.bad.example")
        self.assertEqual(r.status, "NOERROR", r.text)
        self.assertEqual([(x.type, x.data) for x in r.answer][0], ("CNAME", "x.cdn-gslb.example."))
        self.assertEqual(r.addresses(), ["192.0.2.10", "192.0.2.11"])
        self.assertEqual(r.weights(), [3, 1])
        gslb = [e for e in self.h.sim("cdn-gslb.example.").log(1000)
                if e["qname"] == "x.cdn-gslb.example." and e["weight_option"]]
        self.assertTrue(gslb and gslb[-1]["ecs"]["address"] == "198.51.100.0")

    def test_invalid_weight_options_neutralised(self):
        for label in ("wodd", "wcount", "wzero", "whigh", "wmany"):
            with self.subTest(option=label):
                r = self.ask(f"{label}.bad.example")
                self.assertEqual(r.addresses(), [GOOD, "192.0.2.201"], r.text)
                self.assertEqual(r.option(65001), b"", "invalid weights -> equal weights (length 0)")
        self.assertGreaterEqual(self.r.stats()["weights_invalid"], 5)

    def test_ecs_of_another_family_is_not_trusted(self):
        r = self.ask("family.bad.example")
        self.assertEqual(r.addresses(), [GOOD, "192.0.2.201"], r.text)
        self.assertEqual(r.ecs.scope, 0)
        sent = self.auth.received("family.bad.example.")
        self.assertEqual([q.ecs is not None for q in sent], [True, False])
        s = self.r.stats()
        self.assertGreaterEqual(s["ecs_forged"], 1)
        self.assertGreaterEqual(s["ecs_unsolicited"], 1)


if __name__ == "__main__":
    unittest.main()
