"""Black-box tests of weir-bench over DNS over TLS and DNS over HTTPS
(docs/bench.md, "Transports"): against unbound serving DoT and DoH (RFC
8484, GET and POST) from local data, with a view that gives the second
city's subscribers other addresses, weir-bench must see every answer, each
city's own address (its connections come from that city's sources), close
its connections after --queries-per-connection queries and resume the next
ones' TLS sessions; the new-connection mode must report the handshake rate.
The JSON form (doh-json) is run against a fake DoH server written here on
libnghttp2 (no installed server speaks it: unbound and dnsdist serve RFC
8484 only). A wrong --tls-name and a port that does not speak TLS must give
one clear error and exit status 1.

Run: python3 tests/integration/test_bench_transports.py --build-dir build
"""

import ctypes
import ctypes.util
import json
import math
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402

import dns.exception  # noqa: E402
import dns.message  # noqa: E402
import dns.query  # noqa: E402
import dns.rrset  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()

CITYMAP = """\
# cidr,city,ecs
127.1.0.0/16,city-a,
127.2.0.0/16,city-b,
"""
# The weighted name and each city's answer to it; the ordinary names are the same everywhere.
TAGGED = "a.bench.test."
CITY_ADDRESS = {"city-a": "198.18.0.1", "city-b": "198.18.0.2"}
NAMES = {f"n{i}.bench.test.": f"198.18.1.{i}" for i in range(4)}


def city_of(client_ip: str) -> str:
    return "city-b" if client_ip.startswith("127.2.") else "city-a"


def make_certificates(directory: str) -> dict:
    """A throwaway CA and a server certificate it signed (EC P-256, SAN
    IP:127.0.0.1 and DNS:localhost)."""
    p = {k: os.path.join(directory, f) for k, f in (("ca_key", "ca.key"), ("ca", "ca.pem"), ("key", "server.key"),
                                                    ("csr", "server.csr"), ("cert", "server.pem"),
                                                    ("ext", "server.ext"))}
    with open(p["ext"], "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    for argv in (["openssl", "req", "-x509", *ec, "-keyout", p["ca_key"], "-out", p["ca"], "-days", "2",
                  "-subj", "/CN=weir-bench test CA"],
                 ["openssl", "req", *ec, "-keyout", p["key"], "-out", p["csr"], "-subj", "/CN=localhost"],
                 ["openssl", "x509", "-req", "-in", p["csr"], "-CA", p["ca"], "-CAkey", p["ca_key"],
                  "-CAcreateserial", "-out", p["cert"], "-days", "2", "-extfile", p["ext"]]):
        weirtest.run(argv, check=True)
    return p


def unbound_config(directory: str, certs: dict, udp: int, dot: int, doh: int) -> str:
    data = [f'local-data: "{TAGGED} 300 IN A {{}}"'] + [f'local-data: "{n} 300 IN A {a}"' for n, a in NAMES.items()]
    server = [f"interface: 127.0.0.1@{udp}", f"interface: 127.0.0.1@{dot}", f"interface: 127.0.0.1@{doh}",
              f"port: {udp}", f"tls-port: {dot}", f"https-port: {doh}", f'tls-service-key: "{certs["key"]}"',
              f'tls-service-pem: "{certs["cert"]}"', 'http-endpoint: "/dns-query"', "so-reuseport: no",
              "do-daemonize: no", "use-syslog: no", 'logfile: ""', 'username: ""', 'chroot: ""',
              f'directory: "{directory}"', 'pidfile: ""', "num-threads: 1", "verbosity: 0", "do-ip6: no",
              "incoming-num-tcp: 200", "access-control: 127.0.0.0/8 allow",
              "access-control-view: 127.2.0.0/16 city-b", 'module-config: "iterator"',
              'local-zone: "bench.test." static', *[d.format(CITY_ADDRESS["city-a"]) for d in data]]
    view = ['name: "city-b"', 'local-zone: "bench.test." static', *[d.format(CITY_ADDRESS["city-b"]) for d in data]]
    return ("server:\n" + "".join(f"  {line}\n" for line in server) + "view:\n" +
            "".join(f"  {line}\n" for line in view) + "remote-control:\n  control-enable: no\n")


class UnboundTls:
    """Debian's unbound on 127.0.0.1: plain DNS, DoT and DoH on free ports,
    ready once it answers over UDP. Stopped by its PID."""

    def __init__(self, directory: str, certs: dict):
        for attempt in range(3):
            self.udp, self.dot, self.doh = weirtest.free_port(), weirtest.free_port(), weirtest.free_port()
            path = os.path.join(directory, "unbound.conf")
            with open(path, "w") as f:
                f.write(unbound_config(directory, certs, self.udp, self.dot, self.doh))
            self.process = weirtest.Process(["unbound", "-d", "-c", path], ready=None)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.process.alive():
                try:
                    dns.query.udp(dns.message.make_query(TAGGED, "A"), "127.0.0.1", port=self.udp, timeout=0.5)
                    return
                except (dns.exception.Timeout, OSError):
                    time.sleep(0.1)
            err = self.process.stderr_text()
            self.process.stop()
            if attempt == 2:
                raise RuntimeError(f"unbound did not start: {err}")

    def stop(self) -> None:
        self.process.stop()


# ---------------------------------------------------------------- fake DoH JSON server

_ng = ctypes.CDLL(ctypes.util.find_library("nghttp2") or "libnghttp2.so.14")
_ssize = ctypes.c_ssize_t


class _FrameHd(ctypes.Structure):  # nghttp2_frame_hd, the head of every nghttp2_frame
    _fields_ = [("length", ctypes.c_size_t), ("stream_id", ctypes.c_int32), ("type", ctypes.c_uint8),
                ("flags", ctypes.c_uint8), ("reserved", ctypes.c_uint8)]


class _Nv(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("value", ctypes.c_void_p), ("namelen", ctypes.c_size_t),
                ("valuelen", ctypes.c_size_t), ("flags", ctypes.c_uint8)]


class _Source(ctypes.Union):
    _fields_ = [("fd", ctypes.c_int), ("ptr", ctypes.c_void_p)]


_READ_CB = ctypes.CFUNCTYPE(_ssize, ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_uint8), ctypes.c_size_t,
                            ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(_Source), ctypes.c_void_p)


class _Provider(ctypes.Structure):
    _fields_ = [("source", _Source), ("read_callback", _READ_CB)]


_HEADER_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_FrameHd), ctypes.POINTER(ctypes.c_char),
                              ctypes.c_size_t, ctypes.POINTER(ctypes.c_char), ctypes.c_size_t, ctypes.c_uint8,
                              ctypes.c_void_p)
_DATA_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint8, ctypes.c_int32,
                            ctypes.POINTER(ctypes.c_char), ctypes.c_size_t, ctypes.c_void_p)
_FRAME_CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_FrameHd), ctypes.c_void_p)
_ng.nghttp2_session_mem_recv.restype = _ssize
_ng.nghttp2_session_mem_recv.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
_ng.nghttp2_session_mem_send.restype = _ssize
_ng.nghttp2_session_mem_send.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_char))]
_ng.nghttp2_submit_response.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(_Nv), ctypes.c_size_t,
                                        ctypes.POINTER(_Provider)]
_ng.nghttp2_submit_settings.argtypes = [ctypes.c_void_p, ctypes.c_uint8, ctypes.c_void_p, ctypes.c_size_t]
_ng.nghttp2_session_del.argtypes = [ctypes.c_void_p]
for _name, _cb in (("header", _HEADER_CB), ("data_chunk_recv", _DATA_CB), ("frame_recv", _FRAME_CB)):
    getattr(_ng, f"nghttp2_session_callbacks_set_on_{_name}_callback").argtypes = [ctypes.c_void_p, _cb]
_NGHTTP2_HEADERS, _NGHTTP2_DATA, _END_STREAM, _DATA_FLAG_EOF = 1, 0, 1, 1


class _H2Connection:
    """One HTTP/2 server session (libnghttp2) over one TLS connection."""

    def __init__(self, server: "FakeDohJson", tls: ssl.SSLSocket, client_ip: str):
        self.server, self.tls, self.client_ip = server, tls, client_ip
        self.headers, self.bodies, self.responses = {}, {}, {}
        # The callbacks must outlive the session: kept on self.
        self._cbs = (_HEADER_CB(self._on_header), _DATA_CB(self._on_data), _FRAME_CB(self._on_frame),
                     _READ_CB(self._read))
        callbacks = ctypes.c_void_p()
        _ng.nghttp2_session_callbacks_new(ctypes.byref(callbacks))
        _ng.nghttp2_session_callbacks_set_on_header_callback(callbacks, self._cbs[0])
        _ng.nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, self._cbs[1])
        _ng.nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, self._cbs[2])
        self.session = ctypes.c_void_p()
        _ng.nghttp2_session_server_new(ctypes.byref(self.session), callbacks, None)
        _ng.nghttp2_session_callbacks_del(callbacks)
        _ng.nghttp2_submit_settings(self.session, 0, None, 0)

    def _on_header(self, _session, frame, name, namelen, value, valuelen, _flags, _user):
        headers = self.headers.setdefault(frame.contents.stream_id, {})
        headers[ctypes.string_at(name, namelen).decode()] = ctypes.string_at(value, valuelen).decode()
        return 0

    def _on_data(self, _session, _flags, stream_id, data, length, _user):
        self.bodies[stream_id] = self.bodies.get(stream_id, b"") + ctypes.string_at(data, length)
        return 0

    def _on_frame(self, _session, frame, _user):
        hd = frame.contents
        if hd.type in (_NGHTTP2_HEADERS, _NGHTTP2_DATA) and hd.flags & _END_STREAM:
            self._respond(hd.stream_id)
        return 0

    def _respond(self, stream_id):
        headers = self.headers.pop(stream_id, {})
        status, ctype, body = self.server.answer(headers, self.bodies.pop(stream_id, b""), self.client_ip)
        self.responses[stream_id] = [body, 0]
        keep = [s.encode() for s in (":status", str(status), "content-type", ctype)]
        nva = (_Nv * 2)(*[_Nv(ctypes.cast(ctypes.c_char_p(keep[i]), ctypes.c_void_p),
                              ctypes.cast(ctypes.c_char_p(keep[i + 1]), ctypes.c_void_p), len(keep[i]),
                              len(keep[i + 1]), 0) for i in (0, 2)])
        provider = _Provider(_Source(ptr=stream_id), self._cbs[3])
        _ng.nghttp2_submit_response(self.session, stream_id, nva, 2, ctypes.byref(provider))

    def _read(self, _session, stream_id, buf, length, flags, _source, _user):
        body, sent = self.responses[stream_id]
        n = min(length, len(body) - sent)
        ctypes.memmove(buf, body[sent:sent + n], n)
        self.responses[stream_id][1] = sent + n
        if sent + n == len(body):
            flags[0] |= _DATA_FLAG_EOF
            del self.responses[stream_id]
        return n

    def serve(self):
        try:
            while True:
                out = ctypes.POINTER(ctypes.c_char)()
                while (n := _ng.nghttp2_session_mem_send(self.session, ctypes.byref(out))) > 0:
                    self.tls.sendall(ctypes.string_at(out, n))
                data = self.tls.recv(65536)
                if not data or _ng.nghttp2_session_mem_recv(self.session, data, len(data)) < 0:
                    return
        except (OSError, ssl.SSLError):
            return
        finally:
            _ng.nghttp2_session_del(self.session)
            self.tls.close()


class FakeDohJson:
    """A DoH server of the JSON form on 127.0.0.1 (TLS from Python's ssl,
    ALPN h2; HTTP/2 from libnghttp2): GET /resolve?name=&type= is answered
    in Google's JSON schema, POST /dns-query (the probes' wire form) by
    dnspython, both from the same data as unbound's, by the client's city.
    It counts the requests by method and path, and the TLS connections."""

    def __init__(self, certs: dict):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(certs["cert"], certs["key"])
        self.context.set_alpn_protocols(["h2"])
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.requests = {}  # (method, path without the query) -> count
        self.targets = []   # the first JSON targets seen
        self.connections = 0
        self.resumed = 0
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                sock, (ip, _) = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(sock, ip), daemon=True).start()

    def _connection(self, sock, ip):
        try:
            tls = self.context.wrap_socket(sock, server_side=True)
        except (OSError, ssl.SSLError):
            sock.close()
            return
        with self.lock:
            self.connections += 1
            self.resumed += tls.session_reused
        _H2Connection(self, tls, ip).serve()

    def answer(self, headers: dict, body: bytes, client_ip: str):
        method, target = headers.get(":method", ""), headers.get(":path", "")
        path, _, query = target.partition("?")
        with self.lock:
            self.requests[(method, path)] = self.requests.get((method, path), 0) + 1
            if path == "/resolve" and len(self.targets) < 20:
                self.targets.append(target)
        city = city_of(client_ip)
        if method == "GET" and path == "/resolve":
            args = urllib.parse.parse_qs(query)
            name, qtype = args.get("name", [""])[0], int(args.get("type", ["1"])[0])
            address = CITY_ADDRESS[city] if name.lower() == TAGGED else NAMES.get(name.lower())
            doc = {"Status": 0 if address else 3, "TC": False, "RD": True, "RA": True, "AD": False, "CD": False,
                   "Question": [{"name": name, "type": qtype}]}
            if address and qtype == 1:
                doc["Answer"] = [{"name": name, "type": 1, "TTL": 300, "data": address}]
            return 200, "application/dns-json", json.dumps(doc).encode()
        if method == "POST" and path == "/dns-query":
            query = dns.message.from_wire(body)
            response = dns.message.make_response(query)
            name = query.question[0].name.to_text().lower()
            address = CITY_ADDRESS[city] if name == TAGGED else NAMES.get(name)
            if address:
                response.answer.append(dns.rrset.from_text(query.question[0].name, 300, "IN", "A", address))
            return 200, "application/dns-message", response.to_wire()
        return 404, "text/plain", b"not found\n"

    def stop(self):
        self.listener.close()


# ---------------------------------------------------------------- the tests

class BenchTransportsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("unbound", "openssl")
        cls.bench = weirtest.binary(BUILD_DIR, "bench/weir_bench/weir-bench")
        cls.tmp = tempfile.TemporaryDirectory()
        cls.certs = make_certificates(cls.tmp.name)
        cls.citymap = os.path.join(cls.tmp.name, "citymap.csv")
        with open(cls.citymap, "w") as f:
            f.write(CITYMAP)
        cls.unbound = UnboundTls(cls.tmp.name, cls.certs)
        cls.fake = FakeDohJson(cls.certs)

    @classmethod
    def tearDownClass(cls):
        cls.fake.stop()
        cls.unbound.stop()
        cls.tmp.cleanup()

    def run_bench(self, *args, expect=0, timeout=60):
        out = os.path.join(self.tmp.name, f"run-{self.id().split('.')[-1]}.json")
        if os.path.exists(out):
            os.remove(out)
        argv = [self.bench, "--progress", "never", "--json", out, *args]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        self.assertEqual(p.returncode, expect, f"{' '.join(argv)}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
        if expect != 0:
            return None, p
        with open(out) as f:
            return json.load(f), p

    def city_run(self, transport, port, *extra, per_connection=50):
        """A closed-loop run from both cities' sources: the weighted name and
        the ordinary ones, 2 s."""
        return self.run_bench("--transport", transport, "--server", f"127.0.0.1:{port}", "--tls-ca",
                              self.certs["ca"], "--citymap", self.citymap, "--sources-per-city", "4",
                              "--tagged-name", TAGGED, "--names", str(len(NAMES)), "--tagged-fraction", "0.5",
                              "--outstanding", "20", "--duration", "2", "--queries-per-connection",
                              str(per_connection), *extra)

    def assert_all_answered(self, report, out):
        self.assertGreater(report["sent"], 200, out)
        self.assertEqual(report["answered"], report["sent"], out)
        self.assertEqual(report["timeouts"], 0, out)
        self.assertEqual(report["mismatched"], 0, out)
        self.assertEqual(report["rcodes"], {"NOERROR": report["sent"]}, out)

    def assert_each_city_sees_its_own_address(self, report, out):
        rows = {row["city"]: row for row in report["shares"]}
        self.assertEqual(set(rows), set(CITY_ADDRESS), out)
        for city, address in CITY_ADDRESS.items():
            row = rows[city]
            self.assertEqual(row["weights_from"], "answer", row)
            self.assertEqual({a["address"]: a["answers"] for a in row["addresses"] if a["answers"]},
                             {address: row["answers"]}, f"{city}: its connections come from its own sources\n{out}")
            self.assertGreater(row["answers"], 50, row)
            self.assertEqual(row["leaked_answers"], 0, row)
        self.assertEqual(report["leaked_answers"], 0, out)

    def assert_connections(self, report, per_connection, out):
        c, h = report["connections"], report["handshakes"]
        self.assertEqual(c["queries_per_connection"], per_connection, out)
        lanes = c["per_thread"] * report["threads"]
        # Each connection carries exactly N queries but the last of each lane.
        least = math.ceil(report["sent"] / per_connection)
        self.assertGreaterEqual(c["opened"], least, out)
        self.assertLessEqual(c["opened"], least + lanes, out)
        self.assertEqual(c["connect_failures"] + c["errors"] + h["failed"], 0, out)
        self.assertEqual(h["full"] + h["resumed"], c["opened"], out)
        self.assertGreater(h["resumed"], 0, f"reconnects offer the last session ticket\n{out}")
        self.assertGreater(h["per_s"], 0, out)

    def test_dot(self):
        report, p = self.city_run("dot", self.unbound.dot)
        self.assertEqual(report["transport"], "dot", p.stdout)
        self.assertIn("over DoT", p.stdout)
        self.assert_all_answered(report, p.stdout)
        self.assert_each_city_sees_its_own_address(report, p.stdout)
        self.assert_connections(report, 50, p.stdout)
        self.assertNotIn("http_status", report)

    def test_doh_post_and_get(self):
        for method in ("post", "get"):
            with self.subTest(method=method):
                report, p = self.city_run("doh", self.unbound.doh, "--doh-method", method, "--tls-name", "localhost")
                self.assertEqual(report["transport"], "doh", p.stdout)
                self.assertEqual(report["connections"]["detail"], f"{method.upper()} /dns-query", p.stdout)
                self.assert_all_answered(report, p.stdout)
                self.assert_each_city_sees_its_own_address(report, p.stdout)
                self.assert_connections(report, 50, p.stdout)
                self.assertEqual(report["http_status"], {"200": report["sent"]}, p.stdout)
                self.assertEqual(report["http_errors"] + report["stream_resets"], 0, p.stdout)

    def test_doh_json(self):
        report, p = self.city_run("doh-json", self.fake.port, per_connection=40)
        self.assertEqual(report["transport"], "doh-json", p.stdout)
        self.assert_all_answered(report, p.stdout)
        self.assert_each_city_sees_its_own_address(report, p.stdout)
        self.assert_connections(report, 40, p.stdout)
        self.assertEqual(report["http_status"], {"200": report["sent"]}, p.stdout)
        # The run's queries in the JSON form; only the probes (one per city)
        # and nothing else in the wire form.
        self.assertEqual(self.fake.requests.get(("POST", "/dns-query")), 2, self.fake.requests)
        self.assertGreaterEqual(self.fake.requests.get(("GET", "/resolve"), 0), report["sent"], self.fake.requests)
        for target in self.fake.targets:
            self.assertRegex(target, r"^/resolve\?name=(a|n\d)\.bench\.test\.&type=1$")
        self.assertGreater(self.fake.resumed, 0)

    def test_unlimited_queries_per_connection_and_no_resumption(self):
        report, p = self.city_run("dot", self.unbound.dot, per_connection=0)
        self.assert_all_answered(report, p.stdout)
        # One connection per city, kept for the whole run.
        self.assertEqual(report["connections"]["opened"], 2, p.stdout)
        report, p = self.city_run("dot", self.unbound.dot, "--no-tls-resume", per_connection=100)
        self.assert_all_answered(report, p.stdout)
        h = report["handshakes"]
        self.assertEqual(h["resumed"], 0, p.stdout)
        self.assertEqual(h["full"], report["connections"]["opened"], p.stdout)
        self.assertFalse(h["tls_resume"], p.stdout)

    def test_new_connections_per_second(self):
        for transport, port in (("dot", self.unbound.dot), ("doh", self.unbound.doh)):
            with self.subTest(transport=transport):
                report, p = self.run_bench("--transport", transport, "--server", f"127.0.0.1:{port}", "--tls-ca",
                                           self.certs["ca"], "--citymap", self.citymap, "--names",
                                           str(len(NAMES)), "--new-connections-per-second", "50", "--duration", "2")
                c, h = report["connections"], report["handshakes"]
                self.assertEqual(c["new_per_second"], 50, p.stdout)
                # 2 s at 50 per second, one query each.
                self.assertGreaterEqual(c["opened"], 90, p.stdout)
                self.assertLessEqual(c["opened"], 101, p.stdout)
                self.assertEqual(report["sent"], c["opened"], p.stdout)
                self.assertEqual(report["answered"], report["sent"], p.stdout)
                self.assertEqual(report["rcodes"], {"NOERROR": report["sent"]}, p.stdout)
                self.assertEqual(c["connect_failures"] + c["errors"] + h["failed"] + c["skipped"], 0, p.stdout)
                self.assertEqual(h["full"] + h["resumed"], c["opened"], p.stdout)
                self.assertGreater(h["resumed"], c["opened"] // 2, p.stdout)
                self.assertGreater(h["per_s"], 40, p.stdout)
                self.assertLess(h["per_s"], 55, p.stdout)
                self.assertGreater(h["latency_us"]["count"], 0, p.stdout)

    def test_wrong_tls_name_is_one_clear_error(self):
        _, p = self.run_bench("--transport", "dot", "--server", f"127.0.0.1:{self.unbound.dot}", "--tls-ca",
                              self.certs["ca"], "--tls-name", "wrong.example", "--duration", "1", expect=1)
        self.assertIn(f"TLS handshake with 127.0.0.1:{self.unbound.dot}", p.stderr)
        self.assertIn("hostname mismatch", p.stderr.lower())
        self.assertEqual(p.stdout, "")
        # No CA given: the system's store does not know the test CA.
        _, p = self.run_bench("--transport", "doh", "--server", f"127.0.0.1:{self.unbound.doh}", "--duration", "1",
                              expect=1)
        self.assertIn("certificate verify failed", p.stderr)

    def test_a_port_not_speaking_tls_is_one_clear_error(self):
        # unbound's plain DNS-over-TCP port waits for the rest of a "query"
        # as long as the ClientHello's first bytes say: the handshake times out.
        _, p = self.run_bench("--transport", "dot", "--server", f"127.0.0.1:{self.unbound.udp}", "--tls-ca",
                              self.certs["ca"], "--timeout", "500", "--duration", "1", expect=1)
        self.assertIn("not done within 500 ms (is the server speaking TLS on that port?)", p.stderr)
        # Nobody listening: the connect fails at once.
        closed = weirtest.free_port()
        _, p = self.run_bench("--transport", "doh", "--server", f"127.0.0.1:{closed}", "--tls-ca", self.certs["ca"],
                              "--duration", "1", expect=1)
        self.assertIn(f"connect to 127.0.0.1:{closed}", p.stderr)
        self.assertIn("Connection refused", p.stderr)


if __name__ == "__main__":
    unittest.main()
