"""Server cookies on weir-recursor's front (RFC 7873, RFC 9018), black-box.

dig and kdig play clients that do cookies; weir-fastpath, which sends a
client cookie with every query to its recursors, plays the front tier in
front of a recursor with require_cookies = true: it learns the server cookie
from the BADCOOKIE of its first query and echoes it afterwards. The fake
hierarchy (gslb-sim on 127.0.143.x port 53) answers the names.

Run: python3 tests/integration/test_recursor_cookies.py --build-dir build
"""

import os
import re
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import record  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
NET = "127.0.143"

SHOP = (record("www", "A", "192.0.2.1", ttl=300) + record("www", "AAAA", "2001:db8::1", ttl=300) +
        record("a", "A", "192.0.2.11", ttl=300) + record("b", "A", "192.0.2.12", ttl=300) +
        record("c", "A", "192.0.2.13", ttl=300) + record("d", "A", "192.0.2.14", ttl=300))

SECRET = "000102030405060708090a0b0c0d0e0f"
CLIENT = "0123456789abcdef"


def cookie_of(r: weirtest.Response) -> str:
    """The COOKIE option of a dig or kdig answer as hex ("" when none)."""
    m = re.search(r"^;;? COOKIE: ([0-9a-fA-F]+)", r.text, re.M)
    return m.group(1).lower() if m else ""


class RecursorCookiesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig", "kdig")
        cls.tmp = tempfile.TemporaryDirectory(prefix="weir-cookies-")
        cls.secret_file = os.path.join(cls.tmp.name, "cookie.secret")
        with open(cls.secret_file, "w") as f:
            f.write(f"# shared by the recursors behind one address\n{SECRET}\n")
        cls.h = weirtest.FakeHierarchy(BUILD_DIR, net=NET, zones={"shop.example.": SHOP})
        # Cookies answered, not required (the default), on a generated secret.
        cls.open = weirtest.Recursor(BUILD_DIR, weirtest.recursor_config(
            root_hints=cls.h.root_hints, server={"metrics_listen": "127.0.0.1:0"}))
        # Cookies required over UDP, with the secret file.
        cls.strict = weirtest.Recursor(BUILD_DIR, weirtest.recursor_config(
            root_hints=cls.h.root_hints,
            server={"metrics_listen": "127.0.0.1:0", "require_cookies": True,
                    "cookie_secret_file": cls.secret_file}))

    @classmethod
    def tearDownClass(cls):
        cls.strict.stop()
        cls.open.stop()
        cls.h.stop()
        cls.tmp.cleanup()

    def verdicts(self, r) -> dict:
        m = r.metrics()
        out = {v: m.value("weir_recursor_cookie_queries_total", verdict=v)
               for v in ("none", "client_only", "valid", "invalid", "malformed")}
        out["badcookie"] = m.value("weir_recursor_badcookie_total")
        return out

    def delta(self, r, before: dict) -> dict:
        after = self.verdicts(r)
        return {k: after[k] - before[k] for k in after}

    def test_dig_gets_a_server_cookie_and_its_echo_is_valid(self):
        before = self.verdicts(self.open)
        first = self.open.dig("www.shop.example", "A", extra=[f"+cookie={CLIENT}"])
        self.assertEqual(first.status, "NOERROR", first.text)
        self.assertEqual(first.addresses(), ["192.0.2.1"])
        got = cookie_of(first)
        # The client cookie, then RFC 9018's 16 bytes: version 1, reserved 0.
        self.assertEqual(len(got), 48, first.text)
        self.assertTrue(got.startswith(CLIENT + "01000000"), got)
        self.assertIn("(good)", first.text)
        # Echoed (by kdig this time): valid, and answered with a fresh cookie.
        again = weirtest.kdig(self.open.host, self.open.port, "www.shop.example", "A", norec=False,
                              extra=[f"+cookie={got}"])
        self.assertEqual(again.status, "NOERROR", again.text)
        self.assertTrue(cookie_of(again).startswith(CLIENT), again.text)
        # A forged server cookie is not valid; without require_cookies the
        # query is answered all the same, with a cookie that is.
        forged = got[:-2] + ("00" if got[-2:] != "00" else "01")
        f = self.open.dig("www.shop.example", "A", extra=[f"+cookie={forged}"])
        self.assertEqual(f.status, "NOERROR", f.text)
        self.assertEqual(f.addresses(), ["192.0.2.1"])
        self.assertTrue(cookie_of(f).startswith(CLIENT), f.text)
        # No cookie in, no cookie out.
        plain = self.open.dig("www.shop.example", "A", extra=["+nocookie"])
        self.assertEqual(plain.status, "NOERROR", plain.text)
        self.assertEqual(cookie_of(plain), "")
        d = self.delta(self.open, before)
        self.assertEqual((d["client_only"], d["valid"], d["invalid"], d["badcookie"]), (1, 1, 1, 0), d)
        self.assertGreaterEqual(d["none"], 1)

    def test_require_cookies_answers_badcookie_until_the_cookie_is_echoed(self):
        before = self.verdicts(self.strict)
        first = self.strict.dig("www.shop.example", "A", extra=[f"+cookie={CLIENT}", "+nobadcookie"])
        self.assertEqual(first.status, "BADCOOKIE", first.text)
        self.assertEqual(first.answer, [])
        got = cookie_of(first)
        self.assertEqual(len(got), 48, first.text)
        ok = self.strict.dig("www.shop.example", "A", extra=[f"+cookie={got}"])
        self.assertEqual(ok.status, "NOERROR", ok.text)
        self.assertEqual(ok.addresses(), ["192.0.2.1"])
        # A forged server cookie gets BADCOOKIE with a good one.
        forged = got[:16] + got[16:32] + "00" * 8
        bad = self.strict.dig("www.shop.example", "A", extra=[f"+cookie={forged}", "+nobadcookie"])
        self.assertEqual(bad.status, "BADCOOKIE", bad.text)
        retry = self.strict.dig("www.shop.example", "A", extra=[f"+cookie={cookie_of(bad)}"])
        self.assertEqual(retry.status, "NOERROR", retry.text)
        # The cookie is bound to the client's address.
        moved = self.strict.dig("www.shop.example", "A", source="127.0.0.2",
                                extra=[f"+cookie={got}", "+nobadcookie"])
        self.assertEqual(moved.status, "BADCOOKIE", moved.text)
        # Over TCP the address is proven: answered whatever the cookie.
        tcp = self.strict.dig("www.shop.example", "A", tcp=True, extra=[f"+cookie={forged}"])
        self.assertEqual(tcp.status, "NOERROR", tcp.text)
        self.assertTrue(cookie_of(tcp).startswith(CLIENT), tcp.text)
        # A client that does no cookies at all is answered (RFC 7873 5.2.1).
        plain = self.strict.dig("www.shop.example", "A", extra=["+nocookie"])
        self.assertEqual(plain.status, "NOERROR", plain.text)
        self.assertEqual(plain.addresses(), ["192.0.2.1"])
        d = self.delta(self.strict, before)
        self.assertEqual(d["badcookie"], 3, d)
        self.assertEqual(d["valid"], 2, d)
        self.assertEqual(d["invalid"], 3, d)  # forged over UDP, moved, forged over TCP

    def test_a_malformed_cookie_is_formerr(self):
        before = self.verdicts(self.open)
        for hexdata in ("0102030405", "0102030405060708090a", "00" * 41):
            with self.subTest(length=len(hexdata) // 2):
                r = self.open.dig("www.shop.example", "A", extra=["+nocookie", f"+ednsopt=10:{hexdata}"])
                self.assertEqual(r.status, "FORMERR", r.text)
                self.assertEqual(cookie_of(r), "")
        self.assertEqual(self.delta(self.open, before)["malformed"], 3)

    def test_fastpath_learns_the_cookie_of_a_recursor_that_requires_them(self):
        before = self.verdicts(self.strict)
        fp = weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config([f"{self.strict.host}:{self.strict.port}"]))
        try:
            first = fp.dig("www.shop.example", "A", extra=["+nocookie"])
            self.assertEqual(first.status, "NOERROR", first.text)
            self.assertEqual(first.addresses(), ["192.0.2.1"])
            d = self.delta(self.strict, before)
            # First contact: a client cookie alone, BADCOOKIE, then the
            # same question with the cookie just learnt.
            self.assertGreaterEqual(d["client_only"], 1, d)
            self.assertGreaterEqual(d["badcookie"], 1, d)
            self.assertGreaterEqual(d["valid"], 1, d)
            learnt = self.verdicts(self.strict)
            retries = fp.metrics().value("weir_upstream_cookie_retries_total")
            self.assertGreaterEqual(retries, 1)
            names = ["a", "b", "c", "d"]
            for n in names:
                r = fp.dig(f"{n}.shop.example", "A", extra=["+nocookie"])
                self.assertEqual(r.status, "NOERROR", r.text)
                self.assertEqual(len(r.addresses()), 1, r.text)
            d = self.delta(self.strict, learnt)
            # Every later miss carried the learnt cookie: counted valid,
            # none invalid or without one, no BADCOOKIE.
            self.assertGreaterEqual(d["valid"], len(names), d)
            self.assertEqual((d["client_only"], d["invalid"], d["badcookie"]), (0, 0, 0), d)
            m = fp.metrics()
            self.assertEqual(m.value("weir_upstream_cookie_mismatches_total"), 0, m.text)
            self.assertEqual(m.value("weir_upstream_cookie_retries_total"), retries, "no BADCOOKIE after the first")
        finally:
            fp.stop()


if __name__ == "__main__":
    unittest.main()
