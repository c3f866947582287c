"""Black-box tests of weir-fastpath's encrypted front (docs/encrypted.md):
DNS over TLS and DNS over HTTPS answer from the same cache with the same
per-city weighted shares as UDP. Real clients: kdig +tls / +https, curl,
openssl, and pipelining clients on Python's ssl module and python3-h2.

Run: python3 tests/integration/test_fastpath_tls.py --build-dir build
"""

import base64
import collections
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest import tls as wtls  # noqa: E402
from weirtest.zones import default, gslb_name, no_empty_weight_option, record, view, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()

CITY_A = ["192.0.2.11", "192.0.2.12", "192.0.2.13"]
CITY_A_WEIGHTS = [5, 3, 1]
CITY_B = ["192.0.2.21", "192.0.2.22"]
CITY_B_WEIGHTS = [3, 1]

ZONES = (no_empty_weight_option() + zone("cdn.example.net.", rname="admin", minimum=30, ttl=60) +
         gslb_name("x", view("198.51.100.0/24", CITY_A, CITY_A_WEIGHTS, scope=24),
                   view("203.0.113.0/24", CITY_B, CITY_B_WEIGHTS, scope=24), ttl=300) +
         zone("example.com.") + record("www", "A", "192.0.2.1", ttl=300) +
         record("mx", "MX", "10 mail.example.com.", ttl=300) +
         gslb_name("slow", default=default(["192.0.2.99"]), latency_ms=700, ttl=300))

CITYMAP = """\
# cidr,city,ecs_address/prefix
127.1.0.0/16,city-a,198.51.100.0/24
127.2.0.0/16,city-b,203.0.113.0/24
"""
TAGS = "cdn.example.net weight=on ecs=on answer=single level=city\n"
QNAME = "x.cdn.example.net"


def tls_section(certs: wtls.Certs, dot_port: int, doh_port: int, **keys) -> str:
    lines = ["", "[tls]", f"dot_port = {dot_port}", f"doh_port = {doh_port}"]
    lines += [f"{k} = {weirtest.toml_value(v)}" for k, v in keys.items()]
    lines += ["", "[[tls.certificate]]", f'chain = "{certs.chain}"', f'key = "{certs.key}"', ""]
    return "\n".join(lines)


def shares(addresses, expected_addresses):
    c = collections.Counter(addresses)
    return [c[a] for a in expected_addresses]


def exact(counts, weights):
    total = sum(counts)
    return total > 0 and all(abs(n / total - w / sum(weights)) <= 0.005 for n, w in zip(counts, weights))


class _TlsCase(unittest.TestCase):
    """A CA, the city map and tags per class; per test a fresh gslb-sim and
    weir-fastpath with [tls] (start())."""

    TOOLS = ("kdig", "dig", "curl", "openssl")

    @classmethod
    def setUpClass(cls):
        weirtest.require_tools(*cls.TOOLS)
        cls.tmp = tempfile.TemporaryDirectory()
        cls.certs = wtls.Certs(cls.tmp.name)
        cls.files = weirtest.PartitionFiles(CITYMAP, TAGS)

    @classmethod
    def tearDownClass(cls):
        cls.files.cleanup()
        cls.tmp.cleanup()

    def start(self, doh=True, **tls_keys):
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES, seed=1)
        self.addCleanup(self.sim.stop)
        upstream = f"{self.sim.host}:{self.sim.port}"
        config = weirtest.fastpath_config([upstream], weighted=[upstream], workers=1, citymap=self.files.citymap,
                                          tags=self.files.tags, upstream={"timeout_ms": 1500})
        config += tls_section(self.certs, weirtest.free_port(udp_and_tcp=False),
                              weirtest.free_port(udp_and_tcp=False) if doh else 0, **tls_keys)
        self.fp = weirtest.Fastpath(BUILD_DIR, config)
        self.addCleanup(self.fp.stop)
        self.assertIsNotNone(self.fp.dot, "no 'listening dot' line")


class FastpathTlsTest(_TlsCase):
    def setUp(self):
        self.start()
        self.assertIsNotNone(self.fp.doh, "no 'listening doh' line")

    # ------------------------------------------------------------ real clients

    def kdig(self, *args):
        return subprocess.run(["kdig", *args], capture_output=True, text=True, timeout=20).stdout

    def test_kdig_dot(self):
        host, port = self.fp.dot
        out = self.kdig(f"@{host}", "-p", str(port), f"+tls-ca={self.certs.ca}", "+tls-hostname=localhost",
                        "www.example.com", "A")
        self.assertIn("TLS session", out)
        self.assertRegex(out, r"www\.example\.com\.\s+\d+\s+IN\s+A\s+192\.0\.2\.1")

    def test_kdig_doh_post_and_get(self):
        host, port = self.fp.doh
        for mode in ("+https", "+https-get"):
            out = self.kdig(f"@{host}", "-p", str(port), f"+tls-ca={self.certs.ca}", "+tls-hostname=localhost",
                            mode, "www.example.com", "A")
            self.assertIn("HTTP session (HTTP/2-" + ("GET" if mode == "+https-get" else "POST") + ")", out, mode)
            self.assertRegex(out, r"www\.example\.com\.\s+\d+\s+IN\s+A\s+192\.0\.2\.1", mode)

    def curl(self, version, url, *extra):
        res = subprocess.run(["curl", "-s", "-i", version, "--cacert", self.certs.ca, *extra, url],
                             capture_output=True, timeout=20)
        head, _, body = res.stdout.partition(b"\r\n\r\n")
        return head.decode(), body

    def test_curl_dns_query_and_resolve_over_http2_and_http11(self):
        host, port = self.fp.doh
        wire = wtls.query_wire("www.example.com")
        b64 = base64.urlsafe_b64encode(wire).rstrip(b"=").decode()
        for version, status_line in (("--http2", "HTTP/2 200"), ("--http1.1", "HTTP/1.1 200")):
            head, body = self.curl(version, f"https://localhost:{port}/dns-query?dns={b64}")
            self.assertTrue(head.startswith(status_line), head)
            self.assertRegex(head.lower(), r"content-type: application/dns-message")
            self.assertRegex(head.lower(), r"cache-control: max-age=(\d+)")
            self.assertEqual(wtls.addresses(body), ["192.0.2.1"])
            # POST with the message as the body
            head, body = self.curl(version, f"https://localhost:{port}/dns-query", "-H",
                                   "content-type: application/dns-message", "--data-binary", "@-")
            # (an empty POST body is no DNS message)
            self.assertIn(" 400", head.splitlines()[0])
            post = subprocess.run(["curl", "-s", "-i", version, "--cacert", self.certs.ca, "-H",
                                   "content-type: application/dns-message", "--data-binary", "@-",
                                   f"https://localhost:{port}/dns-query"], input=wire, capture_output=True,
                                  timeout=20).stdout
            head, _, body = post.partition(b"\r\n\r\n")
            self.assertTrue(head.decode().startswith(status_line), head)
            self.assertEqual(wtls.addresses(body), ["192.0.2.1"])
            # the JSON form
            head, body = self.curl(version, f"https://localhost:{port}/resolve?name=mx.example.com&type=MX")
            self.assertTrue(head.startswith(status_line), head)
            self.assertIn("application/dns-json", head.lower())
            doc = json.loads(body)
            self.assertEqual(doc["Status"], 0)
            self.assertEqual(doc["Question"], [{"name": "mx.example.com.", "type": 15}])
            self.assertEqual([(a["type"], a["data"]) for a in doc["Answer"]], [(15, "10 mail.example.com.")])
            # errors an operator can read
            head, _ = self.curl(version, f"https://localhost:{port}/nowhere")
            self.assertIn(" 404", head.splitlines()[0])
            head, _ = self.curl(version, f"https://localhost:{port}/dns-query?dns=!!!")
            self.assertIn(" 400", head.splitlines()[0])

    # ------------------------------------------------------------ DoT behaviour

    def test_pipelined_queries_answered_out_of_order(self):
        host, port = self.fp.dot
        c = wtls.DotClient(host, port, self.certs)
        self.addCleanup(c.close)
        self.assertEqual(wtls.addresses(c.exchange(wtls.query_wire("www.example.com", qid=1))), ["192.0.2.1"])
        # A miss the upstream answers 700 ms later, then a cached name: both
        # on the wire before any answer; the cached one comes back first.
        c.send(wtls.query_wire("slow.example.com", qid=2) + b"")
        c.send(wtls.query_wire("www.example.com", qid=3))
        first, second = c.recv(), c.recv()
        ids = [int.from_bytes(first[:2], "big"), int.from_bytes(second[:2], "big")]
        self.assertEqual(ids, [3, 2], "the cached answer should not wait for the miss")
        self.assertEqual(wtls.addresses(second), ["192.0.2.99"])
        # Many pipelined at once: each answered, matched by ID.
        for i in range(200):
            c.send(wtls.query_wire("www.example.com", qid=1000 + i))
        got = {int.from_bytes(c.recv()[:2], "big") for _ in range(200)}
        self.assertEqual(got, set(range(1000, 1200)))

    def test_session_resumed(self):
        host, port = self.fp.dot
        c = wtls.DotClient(host, port, self.certs)
        c.exchange(wtls.query_wire("www.example.com"))  # TLS 1.3 tickets arrive after the handshake
        session = c.sock.session
        c.close()
        self.assertFalse(c.sock.session_reused)
        r = wtls.DotClient(host, port, self.certs, session=session)
        self.addCleanup(r.close)
        self.assertEqual(wtls.addresses(r.exchange(wtls.query_wire("www.example.com"))), ["192.0.2.1"])
        self.assertTrue(r.sock.session_reused, "the ticket was not accepted")
        m = self.fp.metrics()
        self.assertGreaterEqual(m.value("weir_tls_handshakes_total", transport="dot", result="resumed"), 1)
        self.assertGreaterEqual(m.value("weir_tls_handshakes_total", transport="dot", result="full"), 1)

    def test_padded_queries_get_padded_answers(self):
        host, port = self.fp.dot
        c = wtls.DotClient(host, port, self.certs)
        self.addCleanup(c.close)
        plain = c.exchange(wtls.query_wire("www.example.com", qid=7))
        padded = c.exchange(wtls.query_wire("www.example.com", qid=8, padding=True))
        self.assertNotEqual(len(plain) % 468, 0)
        self.assertEqual(len(padded) % 468, 0, f"{len(padded)} bytes is not a multiple of 468 (RFC 8467)")
        self.assertEqual(wtls.addresses(padded), ["192.0.2.1"])

    # ------------------------------------------------------------ weights

    def dot_addresses(self, source, n):
        host, port = self.fp.dot
        c = wtls.DotClient(host, port, self.certs, source=source)
        try:
            for i in range(n):
                c.send(wtls.query_wire(QNAME, qid=i))
            return [a for _ in range(n) for a in wtls.addresses(c.recv())]
        finally:
            c.close()

    def doh_addresses(self, source, n):
        host, port = self.fp.doh
        c = wtls.DohClient(host, port, self.certs, source=source)
        try:
            out = []
            for start in range(0, n, 50):
                reqs = [("POST", "/dns-query", wtls.query_wire(QNAME)) for _ in range(min(50, n - start))]
                for status, _, body in c.request(reqs):
                    self.assertEqual(status, 200)
                    out += wtls.addresses(body)
            return out
        finally:
            c.close()

    def test_city_shares_over_dot_and_doh_follow_weights(self):
        got = {"a": [], "b": []}
        for i in range(3):
            got["a"] += self.dot_addresses(f"127.1.{i}.10", 150)
            got["b"] += self.dot_addresses(f"127.2.{i}.10", 100)
            got["a"] += self.doh_addresses(f"127.1.{i}.20", 150)
            got["b"] += self.doh_addresses(f"127.2.{i}.20", 100)
        a, b = shares(got["a"], CITY_A), shares(got["b"], CITY_B)
        self.assertEqual(sum(a), 900, "city A: queries without an address")
        self.assertEqual(sum(b), 600)
        self.assertEqual(a, [500, 300, 100], f"city A shares {a} vs weights {CITY_A_WEIGHTS}")
        self.assertEqual(b, [450, 150], f"city B shares {b} vs weights {CITY_B_WEIGHTS}")

    def test_mixed_udp_dot_doh_from_one_city_keeps_its_shares(self):
        got = []
        for i in range(3):
            got += weirtest.dig_many(self.fp.host, self.fp.port, QNAME, 90, source=f"127.1.5.{i + 1}")
            got += self.dot_addresses(f"127.1.6.{i + 1}", 90)
            got += self.doh_addresses(f"127.1.7.{i + 1}", 90)
        a = shares(got, CITY_A)
        self.assertEqual(sum(a), 810)
        self.assertTrue(exact(a, CITY_A_WEIGHTS), f"city A over three transports: {a} vs {CITY_A_WEIGHTS}")
        self.assertEqual(a, [450, 270, 90])

    # ------------------------------------------------------------ operations

    def peer_subject(self, host, port):
        c = wtls.DotClient(host, port, self.certs)
        try:
            cert = c.sock.getpeercert()
            return dict(x[0] for x in cert["subject"])["commonName"]
        finally:
            c.close()

    def test_renewed_certificate_reloaded_without_dropping_connections(self):
        host, port = self.fp.dot
        self.assertEqual(self.peer_subject(host, port), "weir test server")
        held = wtls.DotClient(host, port, self.certs)
        self.addCleanup(held.close)
        self.assertEqual(wtls.addresses(held.exchange(wtls.query_wire("www.example.com"))), ["192.0.2.1"])
        self.certs.issue("weir renewed server")
        try:
            self.fp.process.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            subject = None
            while time.monotonic() < deadline:
                subject = self.peer_subject(host, port)
                if subject == "weir renewed server":
                    break
                time.sleep(0.1)
            self.assertEqual(subject, "weir renewed server", "new connections still get the old certificate")
            # The connection opened before the reload is still served.
            self.assertEqual(wtls.addresses(held.exchange(wtls.query_wire("www.example.com"))), ["192.0.2.1"])
            self.assertEqual(self.fp.metrics().value("weir_tls_certificate_reloads_total"), 1)
        finally:
            self.certs.issue("weir test server")

    def test_dnstap_free_metrics_per_transport(self):
        host, port = self.fp.dot
        c = wtls.DotClient(host, port, self.certs)
        self.addCleanup(c.close)
        c.exchange(wtls.query_wire("www.example.com"))
        d = wtls.DohClient(*self.fp.doh, self.certs)
        self.addCleanup(d.close)
        d.request([("GET", "/dns-query?dns=" + base64.urlsafe_b64encode(
            wtls.query_wire("www.example.com")).rstrip(b"=").decode(), None)])
        m = self.fp.metrics()
        self.assertGreaterEqual(m.value("weir_tls_queries_total", transport="dot"), 1)
        self.assertGreaterEqual(m.value("weir_tls_queries_total", transport="doh"), 1)
        self.assertGreaterEqual(m.value("weir_doh_responses_total", status="2xx"), 1)
        self.assertEqual(m.value("weir_doh_connections_total", version="2"), 1)


class FastpathTlsProxyTest(_TlsCase):
    """Behind HAProxy (TCP mode, send-proxy-v2): the PROXY header's source
    picks the city; a listed proxy without the header is closed."""

    TOOLS = ("haproxy",)

    def setUp(self):
        # The proxy connects from 127.0.0.1; clients come from 127.1/16 and 127.2/16.
        self.start(doh=False, proxy_protocol_from=["127.0.0.1/32"])
        self.front = weirtest.free_port(udp_and_tcp=False)
        cfg = os.path.join(self.tmp.name, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write(f"""global
  maxconn 100
defaults
  mode tcp
  timeout connect 2s
  timeout client 10s
  timeout server 10s
frontend dot
  bind 127.0.0.1:{self.front}
  default_backend weir
backend weir
  server fp {self.fp.dot[0]}:{self.fp.dot[1]} send-proxy-v2 source 127.0.0.1
""")
        self.haproxy = subprocess.Popen(["haproxy", "-db", "-f", cfg], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        self.addCleanup(self.stop_haproxy)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket_ok = subprocess.run(["ss", "-ltn", f"sport = :{self.front}"], capture_output=True,
                                           text=True).stdout.count("LISTEN")
            except OSError:
                socket_ok = 0
            if socket_ok:
                break
            time.sleep(0.05)

    def stop_haproxy(self):
        self.haproxy.terminate()
        try:
            self.haproxy.wait(5)
        except subprocess.TimeoutExpired:
            self.haproxy.kill()
            self.haproxy.wait()

    def test_the_proxy_header_picks_the_city(self):
        for source, city, weights in (("127.1.3.3", CITY_A, CITY_A_WEIGHTS), ("127.2.3.3", CITY_B, CITY_B_WEIGHTS)):
            c = wtls.DotClient("127.0.0.1", self.front, self.certs, source=source)
            try:
                n = 9 * sum(weights)
                for i in range(n):
                    c.send(wtls.query_wire(QNAME, qid=i))
                got = [a for _ in range(n) for a in wtls.addresses(c.recv())]
            finally:
                c.close()
            self.assertEqual(shares(got, city), [9 * w for w in weights], f"{source}: {collections.Counter(got)}")

    def test_a_listed_proxy_without_a_header_is_closed(self):
        host, port = self.fp.dot
        with self.assertRaises((OSError, ConnectionError)):
            c = wtls.DotClient(host, port, self.certs, source="127.0.0.1", timeout=3)
            c.exchange(wtls.query_wire("www.example.com"))
        self.assertEqual(self.fp.metrics().value("weir_tls_proxy_header_invalid_total", transport="dot"), 1)


class FastpathTlsCheckTest(unittest.TestCase):
    """--check names each certificate problem."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.certs = wtls.Certs(cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, chain, key):
        cfg = os.path.join(self.tmp.name, "fp.toml")
        text = weirtest.fastpath_config(["127.0.0.1:53"]) + "\n[tls]\ndot_port = 853\ndoh_port = 443\n"
        text += f'\n[[tls.certificate]]\nchain = "{chain}"\nkey = "{key}"\n'
        with open(cfg, "w") as f:
            f.write(text)
        res = subprocess.run([weirtest.binary(BUILD_DIR, "fastpath/weir-fastpath"), "--check", "-c", cfg],
                             capture_output=True, text=True, timeout=20)
        return res.returncode, res.stdout + res.stderr

    def test_good_certificate_passes(self):
        code, out = self.check(self.certs.chain, self.certs.key)
        self.assertEqual(code, 0, out)

    def test_unreadable_expired_and_mismatched(self):
        code, out = self.check(os.path.join(self.tmp.name, "missing.pem"), self.certs.key)
        self.assertNotEqual(code, 0)
        self.assertRegex(out, r"missing\.pem: cannot read the certificate chain: No such file")
        other_chain = os.path.join(self.tmp.name, "other.pem")
        other_key = os.path.join(self.tmp.name, "other.key")
        self.certs.issue("other", chain=other_chain, key=other_key)
        code, out = self.check(self.certs.chain, other_key)
        self.assertNotEqual(code, 0)
        self.assertIn("this key does not belong to the certificate", out)
        expired_chain = os.path.join(self.tmp.name, "expired.pem")
        expired_key = os.path.join(self.tmp.name, "expired.key")
        self.certs.issue("expired", days=-1, chain=expired_chain, key=expired_key)
        code, out = self.check(expired_chain, expired_key)
        self.assertNotEqual(code, 0)
        self.assertIn("has expired", out)


if __name__ == "__main__":
    unittest.main()
