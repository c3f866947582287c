"""The size of weir-recursor's UDP answers (issue #26 item 3): at most the
client's EDNS size (512 without EDNS) and never more than the 1232 bytes
weir advertises, whatever the client claims; truncation is decided on the
size sent, with names compressed.

A scripted server is the forwarder of ordinary names and the target of a
forward tag; "bigN.<zone>" has N addresses. The answer's whole size is read
over TCP, then the same question is asked over UDP at buffer sizes around
it, with dnspython (dig would retry truncated answers over TCP).

Run: python3 tests/integration/test_recursor_answer_size.py --build-dir build
"""

import os
import re
import socket
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest import build_response, rdata_a  # noqa: E402

import dns.flags  # noqa: E402
import dns.message  # noqa: E402
import dns.query  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()


def handler(q):
    m = re.match(r"big(\d+)\.", q.qname)
    n = int(m.group(1)) if m else 1
    answer = [(q.name.to_text(), "A", 300, rdata_a(f"192.0.2.{i}")) for i in range(1, n + 1)]
    return build_response(q, answer=answer, options=[])


class AnswerSizeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.auth = weirtest.ScriptedAuthority(handler)
        cls.addClassCleanup(cls.auth.stop)
        tags = weirtest.write_temp(f"tagged.example weight=on policy=forward:127.0.0.1@{cls.auth.port}\n",
                                   suffix=".txt")
        cls.addClassCleanup(os.unlink, tags)
        cfg = weirtest.recursor_config(forwarders=[f"127.0.0.1:{cls.auth.port}"], tags=tags)
        cls.r = weirtest.Recursor(BUILD_DIR, cfg)
        cls.addClassCleanup(cls.r.stop)

    def udp(self, name: str, bufsize):
        """The raw UDP answer at `bufsize` (None: a query without EDNS)."""
        q = dns.message.make_query(name, "A", use_edns=0 if bufsize else False, payload=bufsize or 512)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(8)
            s.sendto(q.to_wire(), (self.r.host, self.r.port))
            wire, _ = s.recvfrom(65535)
        return wire, dns.message.from_wire(wire)

    def whole(self, name: str) -> int:
        a = dns.query.tcp(dns.message.make_query(name, "A", use_edns=0, payload=1232), self.r.host,
                          port=self.r.port, timeout=8)
        return len(a.to_wire())

    def test_udp_answers_never_exceed_1232_bytes(self):
        for zone in ("ordinary.example.", "tagged.example."):
            name = f"big100.{zone}"
            self.assertGreater(self.whole(name), 1232, "the whole answer is larger")
            for bufsize in (1232, 1500, 4096, 65535):
                wire, m = self.udp(name, bufsize)
                self.assertLessEqual(len(wire), 1232, f"{name} at bufsize {bufsize}")
                self.assertTrue(m.flags & dns.flags.TC, f"{name} at bufsize {bufsize}: TC")
                self.assertEqual(m.edns, 0)
                self.assertEqual(m.payload, 1232, "weir advertises 1232")

    def test_truncation_is_decided_on_the_compressed_size(self):
        # 60 addresses: about 1,000 bytes with the owner names compressed,
        # over 1,600 without.
        for zone in ("ordinary.example.", "tagged.example."):
            name = f"big60.{zone}"
            size = self.whole(name)
            self.assertLess(size, 1232, f"{name}: {size} bytes over TCP")
            for bufsize in (size, 1232, 4096):
                wire, m = self.udp(name, bufsize)
                self.assertFalse(m.flags & dns.flags.TC, f"{name} ({size} bytes) at bufsize {bufsize}")
                self.assertEqual(len(wire), size)
                self.assertEqual(len(m.answer[0]), 60)
            wire, m = self.udp(name, size - 1)
            self.assertTrue(m.flags & dns.flags.TC, f"{name} ({size} bytes) at bufsize {size - 1}")
            self.assertLessEqual(len(wire), size - 1)

    def test_without_edns_512_bytes(self):
        wire, m = self.udp("big60.ordinary.example.", None)
        self.assertTrue(m.flags & dns.flags.TC)
        self.assertLessEqual(len(wire), 512)
        wire, m = self.udp("big20.ordinary.example.", None)  # about 360 bytes
        self.assertFalse(m.flags & dns.flags.TC)
        self.assertEqual(len(m.answer[0]), 20)


if __name__ == "__main__":
    unittest.main()
