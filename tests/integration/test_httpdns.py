"""Black-box tests of weir-fastpath's HTTPDNS API (docs/httpdns.md): app
SDKs ask /d and /resolve over plain HTTP (HTTP/1.1 and HTTP/2 with prior
knowledge) and HTTPS; answers come from the same cache with the same
per-city weighted shares as DNS. The client is curl; signatures are made
with openssl dgst (as the docs show) and Python's hmac.

Run: python3 tests/integration/test_httpdns.py --build-dir build
"""

import collections
import hashlib
import hmac
import json
import os
import re
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest import tls as wtls  # noqa: E402
from weirtest.zones import default, gslb_name, no_empty_weight_option, record, view, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()

CITY_A = ["192.0.2.11", "192.0.2.12", "192.0.2.13"]
CITY_A_WEIGHTS = [5, 3, 1]
CITY_B = ["192.0.2.21", "192.0.2.22"]
CITY_B_WEIGHTS = [3, 1]
HOSTS = [f"h{i}.example.com" for i in range(29)]

ZONES = (no_empty_weight_option() + zone("cdn.example.net.", rname="admin", minimum=30, ttl=60) +
         gslb_name("x", view("198.51.100.0/24", CITY_A, CITY_A_WEIGHTS, scope=24),
                   view("203.0.113.0/24", CITY_B, CITY_B_WEIGHTS, scope=24), ttl=300) +
         zone("example.com.", minimum=60) + record("www", "A", "192.0.2.1", ttl=300) +
         record("www", "AAAA", "2001:db8::1", ttl=300) + record("six", "AAAA", "2001:db8::6", ttl=300) +
         "".join(record(f"h{i}", "A", f"192.0.2.{100 + i}", ttl=300) for i in range(29)) +
         "".join(gslb_name(f"slow{i}", default=default(["192.0.2.99"]), latency_ms=600, ttl=300) for i in range(8)))

CITYMAP = """\
# cidr,city,ecs_address/prefix
127.1.0.0/16,city-a,198.51.100.0/24
127.2.0.0/16,city-b,203.0.113.0/24
"""
TAGS = "cdn.example.net weight=on ecs=on answer=single level=city\n"
WEIGHTED = "x.cdn.example.net"

SECRET_ACME = "acme-secret-0123456789abcdef"
SECRET_ACME_NEW = "acme-secret-fedcba9876543210"
SECRET_STRICT = "strict-secret-0123456789abcdef"
SECRET_SLOW = "slow-secret-0123456789abcdef00"


def accounts_text(acme_secrets=(SECRET_ACME,)) -> str:
    acme = " ".join(f"secret={s}" for s in acme_secrets)
    return (f"acme unsigned=on legacy_md5=on {acme}\n"
            f"strict unsigned=off legacy_md5=off secret={SECRET_STRICT}\n"
            f"slow unsigned=on rps=5 secret={SECRET_SLOW}\n")


def hmac_sign(path: str, params: dict, secret: str) -> str:
    """The string to sign (docs/httpdns.md): PATH?sorted name=value, `s` excluded."""
    pairs = sorted((k, str(v)) for k, v in params.items() if k != "s")
    text = path + "?" + "&".join(f"{k}={v}" for k, v in pairs)
    return hmac.new(secret.encode(), text.encode(), hashlib.sha256).hexdigest()


def url_for(base: str, path: str, params: dict) -> str:
    return base + path + "?" + urllib.parse.urlencode(params, safe=",:")


class HttpDnsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("curl", "openssl")
        cls.tmp = tempfile.TemporaryDirectory()
        cls.certs = wtls.Certs(cls.tmp.name)
        cls.files = weirtest.PartitionFiles(CITYMAP, TAGS)
        cls.accounts = os.path.join(cls.tmp.name, "accounts.txt")

    @classmethod
    def tearDownClass(cls):
        cls.files.cleanup()
        cls.tmp.cleanup()

    def setUp(self):
        self.start()

    def start(self, test_clock=False):
        with open(self.accounts, "w") as f:
            f.write(accounts_text())
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES, seed=1)
        self.addCleanup(self.sim.stop)
        upstream = f"{self.sim.host}:{self.sim.port}"
        config = weirtest.fastpath_config([upstream], weighted=[upstream], workers=1, citymap=self.files.citymap,
                                          tags=self.files.tags, upstream={"timeout_ms": 1500})
        config += "\n".join([
            "", "[tls]", "dot_port = 0", f"doh_port = {weirtest.free_port(udp_and_tcp=False)}", "",
            "[[tls.certificate]]", f'chain = "{self.certs.chain}"', f'key = "{self.certs.key}"', "",
            "[httpdns]", "enabled = true", f"http_port = {weirtest.free_port(udp_and_tcp=False)}",
            f'accounts_file = "{self.accounts}"', "anonymous = true", "rps_per_source = 0",
            'trusted_callers = ["127.3.0.0/16"]', ""])
        self.fp = weirtest.Fastpath(BUILD_DIR, config, test_clock=test_clock)
        self.addCleanup(self.fp.stop)
        self.assertIsNotNone(self.fp.http, "no 'listening http' line")
        self.assertIsNotNone(self.fp.doh, "no 'listening doh' line")
        self.plain = f"http://127.0.0.1:{self.fp.http[1]}"
        self.https = f"https://localhost:{self.fp.doh[1]}"

    # ------------------------------------------------------------ helpers

    def curl(self, *urls, version="--http1.1", source=None):
        """(status, headers text, JSON body) per URL, over one connection."""
        args = ["curl", "-s", "-i", version, "--cacert", self.certs.ca]
        if source:
            args += ["--interface", source]
        res = subprocess.run(args + list(urls), capture_output=True, timeout=60)
        self.assertEqual(res.returncode, 0, res.stderr)
        out = []
        data = res.stdout
        while data:
            head, _, rest = data.partition(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            status = int(lines[0].split()[1])
            length = 0
            for line in lines[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == "content-length":
                    length = int(v)
            body, data = rest[:length], rest[length:]
            is_json = re.search(r"content-type: application/(dns-)?json", head.decode().lower()) is not None
            out.append((status, head.decode(), json.loads(body) if body and is_json else body))
        self.assertEqual(len(out), len(urls))
        return out

    def get(self, url, **kw):
        return self.curl(url, **kw)[0]

    # ------------------------------------------------------------ single host

    def test_single_over_http11_http2_and_https(self):
        cases = [(self.plain, "--http1.1", "HTTP/1.1 200"), (self.plain, "--http2-prior-knowledge", "HTTP/2 200"),
                 (self.https, "--http2", "HTTP/2 200"), (self.https, "--http1.1", "HTTP/1.1 200")]
        for base, version, line in cases:
            status, head, body = self.get(f"{base}/acme/d?host=www.example.com", version=version)
            self.assertEqual(status, 200, (version, head, body))
            self.assertTrue(head.startswith(line), head)
            self.assertIn("application/json", head.lower())
            self.assertEqual(body["host"], "www.example.com")
            self.assertEqual(body["ips"], ["192.0.2.1"])
            self.assertNotIn("ipsv6", body)  # query=4 is the default
            self.assertEqual(body["origin_ttl"], 300)
            self.assertTrue(0 < body["ttl"] <= 300)
            self.assertEqual(body["client_ip"], "127.0.0.1")
            self.assertLess(abs(body["server_time"] - time.time()), 5)
        status, _, body = self.get(f"{self.plain}/acme/d?host=www.example.com&query=4,6")
        self.assertEqual((body["ips"], body["ipsv6"]), (["192.0.2.1"], ["2001:db8::1"]))
        status, _, body = self.get(f"{self.plain}/acme/d?host=nosuch.example.com")
        self.assertEqual((status, body["code"], body["ips"]), (200, "nxdomain", []))
        # Anonymous access (configured on) and the HEAD method.
        status, _, body = self.get(f"{self.plain}/d?host=www.example.com")
        self.assertEqual(body["ips"], ["192.0.2.1"])

    def test_bad_requests(self):
        for path, status, code in (("/acme/d", 400, "MissingArgument"),
                                   ("/acme/d?host=bad..name", 400, "InvalidHost"),
                                   ("/acme/d?host=www.example.com&ip=300.1.1.1", 400, "InvalidIp"),
                                   ("/acme/d?host=www.example.com&query=5", 400, "InvalidArgument"),
                                   ("/acme/resolve?host=" + ",".join(HOSTS + HOSTS), 400, "TooManyHosts"),
                                   ("/acme/d?host=www.example.com&pad=" + "x" * 2100, 414, "InvalidArgument")):
            got, _, body = self.get(self.plain + path)
            self.assertEqual((got, body["code"]), (status, code), path)
            self.assertIn("server_time", body)
        got, head, _ = self.get(self.plain + "/dns-query?dns=AAABAAABAAAAAAAAA3d3dwdleGFtcGxlA2NvbQAAAQAB")
        self.assertEqual(got, 404, "DNS over HTTPS is never served in the clear")

    # ------------------------------------------------------------ batch

    def test_batch_of_32_with_both_families_and_an_nxdomain(self):
        hosts = HOSTS + ["six.example.com", WEIGHTED, "nosuch.example.com"]
        self.assertEqual(len(hosts), 32)
        for base, version in ((self.plain, "--http2-prior-knowledge"), (self.https, "--http2")):
            status, _, body = self.get(f"{base}/acme/resolve?host={','.join(hosts)}&query=4,6", version=version,
                                       source="127.1.0.5")
            self.assertEqual(status, 200, body)
            got = {e["host"]: e for e in body["dns"]}
            self.assertEqual([e["host"] for e in body["dns"]], hosts)
            for i, h in enumerate(HOSTS):
                self.assertEqual(got[h]["ips"], [f"192.0.2.{100 + i}"])
                self.assertEqual(got[h]["ipsv6"], [])
                self.assertNotIn("code", got[h])
            self.assertEqual((got["six.example.com"]["ips"], got["six.example.com"]["ipsv6"]), ([], ["2001:db8::6"]))
            self.assertEqual(got["nosuch.example.com"]["code"], "nxdomain")
            # the weighted set, ordered: every address, the SWRR pick first
            self.assertEqual(sorted(got[WEIGHTED]["ips"]), sorted(CITY_A))
            self.assertEqual(body["client_ip"], "127.1.0.5")

    # ------------------------------------------------------------ whose answer

    def test_ip_honoured_when_signed_ignored_when_not(self):
        exp = int(time.time()) + 600
        params = {"host": WEIGHTED, "ip": "127.2.0.9", "exp": exp}
        params["s"] = hmac_sign("/acme/d", params, SECRET_ACME)
        _, _, body = self.get(url_for(self.plain, "/acme/d", params), source="127.1.0.5")
        self.assertEqual(sorted(body["ips"]), sorted(CITY_B), body)
        self.assertEqual(body["client_ip"], "127.2.0.9")
        self.assertNotIn("ip_ignored", body)
        # unsigned: the requester's own city, and the ip= reported as ignored
        _, _, body = self.get(f"{self.plain}/acme/d?host={WEIGHTED}&ip=127.2.0.9", source="127.1.0.5")
        self.assertEqual(sorted(body["ips"]), sorted(CITY_A), body)
        self.assertEqual((body["client_ip"], body.get("ip_ignored")), ("127.1.0.5", True))
        # a trusted caller's ip= is honoured unsigned
        _, _, body = self.get(f"{self.plain}/acme/d?host={WEIGHTED}&ip=127.2.0.9", source="127.3.0.1")
        self.assertEqual(sorted(body["ips"]), sorted(CITY_B), body)

    # ------------------------------------------------------------ signatures

    def test_signature_computed_in_a_shell_is_accepted(self):
        exp = int(time.time()) + 300
        text = f"/strict/d?exp={exp}&host=www.example.com"
        out = subprocess.run(["openssl", "dgst", "-sha256", "-hmac", SECRET_STRICT], input=text.encode(),
                             capture_output=True, check=True).stdout.decode()
        sig = out.strip().split()[-1]
        status, _, body = self.get(f"{self.plain}/strict/d?host=www.example.com&exp={exp}&s={sig}")
        self.assertEqual((status, body["ips"]), (200, ["192.0.2.1"]), body)

    def test_each_signature_error(self):
        now = int(time.time())

        def signed(account, secret, exp, path="d", **extra):
            params = {"host": "www.example.com", "exp": exp, **extra}
            params["s"] = hmac_sign(f"/{account}/{path}", params, secret)
            return url_for(self.plain, f"/{account}/{path}", params)

        cases = [
            (signed("strict", SECRET_STRICT, now - 5), 403, "SignatureExpired"),
            (signed("strict", SECRET_STRICT, now + 86400 + 60), 403, "InvalidSignature"),
            (signed("strict", "not-the-secret-0000000000", now + 60), 403, "InvalidSignature"),
            (signed("nobody", SECRET_STRICT, now + 60), 403, "InvalidAccount"),
            (f"{self.plain}/strict/d?host=www.example.com", 403, "UnsignedInterfaceDisabled"),
            (f"{self.plain}/acme/sign_d?host=www.example.com", 403, "UnsignedInterfaceDisabled"),
        ]
        # the legacy form: accepted where the account allows it, refused where not
        t = now + 600
        md5 = hashlib.md5(f"www.example.com-{SECRET_ACME}-{t}".encode()).hexdigest()
        cases.append((f"{self.plain}/acme/sign_d?host=www.example.com&t={t}&s={md5}", 200, None))
        md5s = hashlib.md5(f"www.example.com-{SECRET_STRICT}-{t}".encode()).hexdigest()
        cases.append((f"{self.plain}/strict/sign_d?host=www.example.com&t={t}&s={md5s}", 403, "InvalidSignature"))
        md5x = hashlib.md5(f"www.example.com-{SECRET_ACME}-{now - 1}".encode()).hexdigest()
        cases.append((f"{self.plain}/acme/sign_d?host=www.example.com&t={now - 1}&s={md5x}", 403, "SignatureExpired"))
        cases.append((signed("strict", SECRET_STRICT, now + 60), 200, None))
        results = self.curl(*[c[0] for c in cases])
        for (url, status, code), (got, _, body) in zip(cases, results):
            self.assertEqual(got, status, (url, body))
            if code:
                self.assertEqual(body["code"], code, url)
                self.assertLess(abs(body["server_time"] - now), 10)
                self.assertNotIn(SECRET_STRICT, json.dumps(body))
        m = self.fp.metrics()
        self.assertGreaterEqual(m.value("weir_httpdns_errors_total", account="strict", code="SignatureExpired"), 1)
        self.assertGreaterEqual(m.value("weir_httpdns_errors_total", account="?", code="InvalidAccount"), 1)
        # every response timed, per account and API (the strict account's: 5 refused, 1 served)
        self.assertEqual(m.value("weir_httpdns_request_duration_seconds_count", account="strict", api="d"), 6)
        self.assertEqual(m.value("weir_httpdns_requests_total", account="strict", api="d"), 1)

    def test_key_rotation_both_keys_live_during_the_overlap(self):
        exp = int(time.time()) + 600

        def url(secret):
            params = {"host": "www.example.com", "exp": exp}
            params["s"] = hmac_sign("/acme/d", params, secret)
            return url_for(self.plain, "/acme/d", params)

        self.assertEqual([r[0] for r in self.curl(url(SECRET_ACME), url(SECRET_ACME_NEW))], [200, 403])
        with open(self.accounts, "w") as f:
            f.write(accounts_text((SECRET_ACME_NEW, SECRET_ACME)))
        self.reload_until(lambda: [r[0] for r in self.curl(url(SECRET_ACME), url(SECRET_ACME_NEW))] == [200, 200])
        with open(self.accounts, "w") as f:
            f.write(accounts_text((SECRET_ACME_NEW,)))
        self.reload_until(lambda: [r[0] for r in self.curl(url(SECRET_ACME), url(SECRET_ACME_NEW))] == [403, 200])
        self.assertEqual(self.get(url(SECRET_ACME))[2]["code"], "InvalidSignature")
        # a broken file is refused as a whole: the accounts in use stay
        with open(self.accounts, "w") as f:
            f.write("acme secret=short\n")
        os.kill(self.fp.pid, signal.SIGHUP)
        deadline = time.time() + 10
        while time.time() < deadline and f"{self.accounts}: line 1" not in self.fp.process.stderr_text():
            time.sleep(0.05)
        self.assertIn(f"{self.accounts}: line 1", self.fp.process.stderr_text())
        self.assertNotIn("secret=short", self.fp.process.stderr_text())
        self.assertEqual([r[0] for r in self.curl(url(SECRET_ACME), url(SECRET_ACME_NEW))], [403, 200])

    def reload_until(self, done):
        os.kill(self.fp.pid, signal.SIGHUP)
        deadline = time.time() + 10
        while time.time() < deadline:
            if done():
                return
            time.sleep(0.05)
        self.fail("the reloaded accounts were not applied")

    # ------------------------------------------------------------ quotas

    def test_quota_exceeded_is_429_with_retry_after(self):
        results = self.curl(*[f"{self.plain}/slow/d?host=www.example.com"] * 20)
        statuses = collections.Counter(r[0] for r in results)
        self.assertGreaterEqual(statuses[200], 5)
        self.assertGreaterEqual(statuses[429], 10, statuses)
        refused = next(r for r in results if r[0] == 429)
        self.assertEqual(refused[2]["code"], "QuotaExceeded")
        self.assertIn("retry-after: 1", refused[1].lower())
        # another account is not affected
        self.assertEqual(self.get(f"{self.plain}/acme/d?host=www.example.com")[0], 200)

    # ------------------------------------------------------------ weights

    def test_two_cities_shares_over_the_api_equal_the_weights(self):
        for source, addresses, weights in (("127.1.0.5", CITY_A, CITY_A_WEIGHTS),
                                           ("127.2.0.5", CITY_B, CITY_B_WEIGHTS)):
            n = sum(weights) * 20
            results = self.curl(*[f"{self.plain}/acme/d?host={WEIGHTED}"] * n, source=source)
            firsts = collections.Counter(r[2]["ips"][0] for r in results)
            self.assertEqual([firsts[a] for a in addresses], [w * 20 for w in weights], (source, firsts))
            for _, _, body in results:
                self.assertEqual(sorted(body["ips"]), sorted(addresses))  # every address, the pick first
            # weights=1: every address with its GSLB weight
            _, _, body = self.get(f"{self.plain}/acme/d?host={WEIGHTED}&weights=1", source=source)
            self.assertEqual(dict(zip(body["ips"], body["weights"])), dict(zip(addresses, weights)))

    # ------------------------------------------------------------ connections that go

    def test_a_connection_closed_with_queries_out_leaves_nothing_behind(self):
        hosts = ",".join(f"slow{i}.example.com" for i in range(8))
        s = socket.create_connection(("127.0.0.1", self.fp.http[1]))
        s.sendall(f"GET /acme/resolve?host={hosts}&query=4,6 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        deadline = time.time() + 5
        while time.time() < deadline and self.fp.metrics().value("weir_httpdns_pending_queries") < 16:
            time.sleep(0.02)
        self.assertEqual(self.fp.metrics().value("weir_httpdns_pending_queries"), 16)
        # reset (not a FIN: that would wait for the answer owed) before the upstream answers (600 ms)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        deadline = time.time() + 5
        while time.time() < deadline and self.fp.metrics().value("weir_httpdns_pending_queries") > 0:
            time.sleep(0.02)
        m = self.fp.metrics()
        self.assertEqual((m.value("weir_httpdns_pending_queries"), m.value("weir_httpdns_pending_requests")), (0, 0))
        # the answers still came and filled the cache: asked again, all are there
        deadline = time.time() + 5
        while True:
            _, _, body = self.get(f"{self.plain}/acme/resolve?host={hosts}")
            if [e["ips"] for e in body["dns"]] == [["192.0.2.99"]] * 8 or time.time() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual([e["ips"] for e in body["dns"]], [["192.0.2.99"]] * 8)

    def test_a_partial_tls_record_does_not_spin_the_front(self):
        # A client that stops in the middle of a TLS record: OpenSSL has bytes
        # of it (read ahead) but no whole record; the front waits on the
        # socket instead of reading again and again.
        raw = socket.create_connection(("127.0.0.1", self.fp.doh[1]))
        self.addCleanup(raw.close)
        ctx = ssl.create_default_context(cafile=self.certs.ca)
        ctx.set_alpn_protocols(["h2"])
        inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ctx.wrap_bio(inc, out, server_hostname="localhost")
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                raw.sendall(out.read())
                inc.write(raw.recv(65536))
        raw.sendall(out.read())
        tls.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        record = out.read()
        raw.sendall(record[:len(record) - 5])  # all but the last bytes of the record
        time.sleep(0.2)
        before = self.front_cpu()
        time.sleep(1.0)
        used = self.front_cpu() - before
        self.assertLess(used, 0.3, f"weir-fastpath used {used:.2f} s of CPU in 1 s with a stalled client")

    def front_cpu(self) -> float:
        """CPU seconds of weir-fastpath's threads (utime + stime)."""
        total = 0
        for tid in os.listdir(f"/proc/{self.fp.pid}/task"):
            with open(f"/proc/{self.fp.pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")

    # ------------------------------------------------------------ DoH beside it

    def test_doh_requests_in_many_small_records_are_all_read(self):
        # DoH on the same port: each request in its own TLS record, hundreds
        # on the wire at once. OpenSSL reads ahead, so records it holds past
        # the server's read rounds get no socket event; they are still served.
        h = wtls.DohClient("127.0.0.1", self.fp.doh[1], self.certs, source="127.1.0.5")
        self.addCleanup(h.close)
        for _ in range(9):
            got = h.request([("POST", "/dns-query", wtls.query_wire(WEIGHTED))] * 100, timeout=3)
            self.assertEqual([g[0] for g in got], [200] * 100)

    def test_doh_json_keeps_resolve_with_name(self):
        status, _, body = self.get(f"{self.https}/resolve?name=www.example.com&type=A", version="--http2")
        self.assertEqual(status, 200)
        self.assertEqual([a["data"] for a in body["Answer"]], ["192.0.2.1"])
        status, _, body = self.get(f"{self.https}/resolve?host=www.example.com", version="--http2")
        self.assertEqual(body["dns"][0]["ips"], ["192.0.2.1"])


class HttpDnsCheckTest(unittest.TestCase):
    """--check reads the accounts file as the start does, and the [httpdns] rules."""

    def test_check_names_the_bad_account_line_and_the_port_rules(self):
        with tempfile.TemporaryDirectory() as tmp:
            accounts = os.path.join(tmp, "accounts.txt")
            with open(accounts, "w") as f:
                f.write(f"ok secret={SECRET_ACME}\nbad unknown=1 secret={SECRET_STRICT}\n")
            base = weirtest.fastpath_config(["127.0.0.1:5353"])
            fp = weirtest.binary(BUILD_DIR, "fastpath/weir-fastpath")
            path = weirtest.write_temp(base + f'\n[httpdns]\nenabled = true\nhttp_port = 8080\naccounts_file = "{accounts}"\n',
                                       directory=tmp)
            r = weirtest.run([fp, "--check", "-c", path], timeout=30)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(f"{accounts}: line 2", r.stdout + r.stderr)
            self.assertNotIn(SECRET_STRICT, r.stdout + r.stderr)
            with open(accounts, "w") as f:
                f.write(f"ok secret={SECRET_ACME}\n")
            r = weirtest.run([fp, "--check", "-c", path], timeout=30)
            self.assertEqual((r.returncode, r.stdout), (0, f"{path}: ok\n"), r.stderr)
            # nowhere to serve it: no http_port and no [tls]
            path = weirtest.write_temp(base + "\n[httpdns]\nenabled = true\n", directory=tmp)
            r = weirtest.run([fp, "--check", "-c", path], timeout=30)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("[httpdns] is served on [tls] doh_port", r.stdout + r.stderr)


class HttpDnsStaleTest(HttpDnsTest):
    """The optimistic cache, on the test clock."""

    def setUp(self):
        self.start(test_clock=True)

    def test_optimistic_stale_answer_then_the_refreshed_one(self):
        url = f"{self.plain}/acme/d?host=www.example.com"
        status, _, body = self.get(url)
        self.assertEqual((status, body["origin_ttl"], body.get("stale")), (200, 300, None))
        self.fp.advance_clock(400)  # expired 100 s ago, inside the stale window
        asked = len(self.sim.log(1000))
        status, _, body = self.get(url)
        self.assertEqual((status, body.get("stale"), body["ips"]), (200, True, ["192.0.2.1"]), body)
        self.assertEqual(body["origin_ttl"], 300)
        self.assertLessEqual(body["ttl"], 30)
        # the refresh went upstream behind the answer; the next answer is fresh
        deadline = time.time() + 10
        while time.time() < deadline:
            status, _, body = self.get(url)
            if not body.get("stale"):
                break
            time.sleep(0.05)
        self.assertNotIn("stale", body)
        self.assertGreater(body["ttl"], 200)
        self.assertGreater(len(self.sim.log(1000)), asked)
        self.assertGreaterEqual(self.fp.metrics().value("weir_httpdns_stale_hosts_total", account="acme"), 1)

    # the other tests are HttpDnsTest's, not run twice
    test_single_over_http11_http2_and_https = None
    test_bad_requests = None
    test_batch_of_32_with_both_families_and_an_nxdomain = None
    test_ip_honoured_when_signed_ignored_when_not = None
    test_signature_computed_in_a_shell_is_accepted = None
    test_each_signature_error = None
    test_key_rotation_both_keys_live_during_the_overlap = None
    test_quota_exceeded_is_429_with_retry_after = None
    test_two_cities_shares_over_the_api_equal_the_weights = None
    test_doh_json_keeps_resolve_with_name = None
    test_doh_requests_in_many_small_records_are_all_read = None
    test_a_connection_closed_with_queries_out_leaves_nothing_behind = None
    test_a_partial_tls_record_does_not_spin_the_front = None


if __name__ == "__main__":
    unittest.main()
