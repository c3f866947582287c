"""Black-box tests of dnstap (docs/dnstap.md) on weir-fastpath and
weir-recursor, read back with BIND's dnstap-read and fstrm_capture.

gslb-sim instances on port 53 of 127.0.109.x play the root, "example."
and the tagged CDN zone cdn-gslb.example.; weir-recursor resolves them
(its last hop sends ECS for the tagged name) and weir-fastpath runs in
front of it. dig and kdig query from 127.0.0.x sources; the daemons are
stopped (which writes out and closes their dnstap output) before the
files are read.

Run: python3 tests/integration/test_dnstap.py --build-dir build
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest import tls as wtls  # noqa: E402
from weirtest.zones import default, gslb_name, record, view  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
NET = "127.0.109"

SHOP = record("www", "A", "192.0.2.1", ttl=300) + record("mail", "A", "192.0.2.2", ttl=300)
CDN = gslb_name("x", view("198.51.100.0/24", ["192.0.2.10", "192.0.2.11"], [5, 3], scope=24),
                default=default(["192.0.2.99"], [1]), ttl=60, weights=True)
TAGS = "cdn-gslb.example weight=on ecs=on\n"


def dnstap_table(**keys) -> str:
    return "\n" + weirtest.toml_tables([("dnstap", keys)])


def read_dnstap(path: str) -> list:
    """The messages of a dnstap file as dnstap-read -y prints them: one dict
    per payload with the keys of its `message:` mapping (the dig-style texts
    query_message and response_message as one string each), plus the
    payload's identity and version."""
    out = subprocess.run(["dnstap-read", "-y", path], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise AssertionError(f"dnstap-read -y {path}: {out.stderr}")
    messages = []
    for doc in out.stdout.split("\n---"):
        top, msg, block = {}, None, None
        for line in doc.splitlines():
            if not line.strip() or line.strip() == "---":
                continue
            indent = len(line) - len(line.lstrip(" "))
            if block is not None and indent >= 4:
                msg[block] += line.strip() + "\n"
                continue
            block = None
            key, _, value = line.strip().partition(":")
            value = value.strip().strip('"')
            if indent == 0:
                if key == "message":
                    msg = {}
                else:
                    top[key] = value
            elif indent == 2 and msg is not None:  # deeper: the parsed form (query_message_data), unused
                if value == "|":
                    block = key
                    msg[key] = ""
                else:
                    msg[key] = value
        if msg is not None:
            msg["identity"] = top.get("identity", "")
            msg["version"] = top.get("version", "")
            messages.append(msg)
    return messages


def _protobuf_fields(data: bytes):
    """(field number, value) of a protobuf message: varints as int, length-delimited as bytes."""
    i = 0

    def varint():
        nonlocal i
        v, shift = 0, 0
        while True:
            b = data[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v
    while i < len(data):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            yield field, varint()
        elif wire == 2:
            n = varint()
            yield field, data[i:i + n]
            i += n
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wire}")


def raw_client_messages(path: str, with_extra: bool = False) -> list:
    """(type, socket protocol, query address) of each CLIENT_QUERY and
    CLIENT_RESPONSE in a dnstap file (Frame Streams, dnstap.proto), read
    without dnstap-read; `with_extra`: and Dnstap.extra (bytes, b"" when absent)."""
    types = {5: "CLIENT_QUERY", 6: "CLIENT_RESPONSE"}
    protocols = {1: "UDP", 2: "TCP", 3: "DOT", 4: "DOH", 5: "DNSCryptUDP", 6: "DNSCryptTCP", 7: "DOQ"}
    data = open(path, "rb").read()
    out, i = [], 0
    while i + 4 <= len(data):
        n = int.from_bytes(data[i:i + 4], "big")
        i += 4
        if n == 0:  # a control frame: its own length, then the frame
            n = int.from_bytes(data[i:i + 4], "big")
            i += 4 + n
            continue
        frame, i = data[i:i + n], i + n
        top = list(_protobuf_fields(frame))
        extra = dict(top).get(3, b"")  # Dnstap.extra
        for field, value in top:
            if field != 14:  # Dnstap.message
                continue
            m = dict(_protobuf_fields(value))
            if m.get(1) in types:
                row = (types[m[1]], protocols.get(m.get(3), str(m.get(3))), socket.inet_ntoa(m[4]))
                out.append(row + (extra,) if with_extra else row)
    return out


def of_type(messages: list, t: str) -> list:
    return [m for m in messages if m.get("type") == t]


class DnstapTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig", "kdig", "dnstap-read", "fstrm_capture")
        cls.h = weirtest.FakeHierarchy(BUILD_DIR, net=NET, zones={"shop.example.": SHOP, "cdn-gslb.example.": CDN})
        cls.tags = weirtest.write_temp(TAGS, suffix=".txt")
        cls.dir = tempfile.mkdtemp(prefix="weir-dnstap-")
        # A recursor without dnstap, for the tests of the fastpath alone.
        cls.plain = weirtest.Recursor(BUILD_DIR, cls.recursor_config())

    @classmethod
    def tearDownClass(cls):
        cls.plain.stop()
        cls.h.stop()
        os.unlink(cls.tags)
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def recursor_config(cls, extra: str = "") -> str:
        return weirtest.recursor_config(root_hints=cls.h.root_hints, tags=cls.tags, allow=["127.0.0.0/8"],
                                        ecs={"from_client_address": True}) + extra

    def path(self, name: str) -> str:
        return os.path.join(self.dir, f"{self.id().split('.')[-1]}-{name}")

    def fastpath(self, upstream, extra: str) -> weirtest.Fastpath:
        return weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config([f"{upstream.host}:{upstream.port}"]) + extra)

    # ------------------------------------------------------------------ files

    def test_both_daemons_to_files(self):
        rec_file, fp_file = self.path("recursor.dnstap"), self.path("fastpath.dnstap")
        rec = weirtest.Recursor(BUILD_DIR, self.recursor_config(dnstap_table(file=rec_file, identity="rec-1")))
        try:
            fp = self.fastpath(rec, dnstap_table(file=fp_file, identity="fp-1", version="weir-test"))
            try:
                # First the recursor's own front, with ECS from the client
                # (its scoped answer serves only that subnet).
                direct = weirtest.dig(rec.host, rec.port, "x.cdn-gslb.example", "A", ecs="198.51.100.7/24",
                                      norec=False, extra=["-b", "127.0.0.30"])
                self.assertEqual(direct.status, "NOERROR", direct.text)
                asked = []  # (source, qname, protocol)
                for i, qname in enumerate(["www.shop.example", "mail.shop.example", "x.cdn-gslb.example",
                                           "www.shop.example"]):  # the last one a cache hit
                    source = f"127.0.0.{11 + i}"
                    r = fp.dig(qname, "A", source=source, norec=False)
                    self.assertEqual(r.status, "NOERROR", r.text)
                    asked.append((source, qname, "UDP"))
                r = weirtest.kdig(fp.host, fp.port, "mail.shop.example", "A", tcp=True, norec=False,
                                  extra=["-b", "127.0.0.20"])
                self.assertEqual(r.status, "NOERROR", r.text)
                asked.append(("127.0.0.20", "mail.shop.example", "TCP"))
                fp_counts = fp.metrics()
                rec_stats = rec.stats()
            finally:
                self.assertEqual(fp.stop(), 0)
        finally:
            self.assertEqual(rec.stop(), 0)

        fp_msgs = read_dnstap(fp_file)
        queries = of_type(fp_msgs, "CLIENT_QUERY")
        responses = of_type(fp_msgs, "CLIENT_RESPONSE")
        self.assertEqual(len(queries), len(asked), fp_msgs)
        self.assertEqual(len(responses), len(asked), fp_msgs)
        # One source per query; each worker thread has its own queue to the
        # writer, so the file keeps each thread's order only.
        by_source = {m["query_address"]: m for m in queries}
        responses_by_source = {m["query_address"]: m for m in responses}
        for source, qname, proto in asked:
            with self.subTest(source=source, qname=qname):
                q, resp = by_source[source], responses_by_source[source]
                self.assertEqual(q["socket_protocol"], proto)
                self.assertEqual(q["socket_family"], "INET")
                self.assertIn(qname, q["query_message"])
                self.assertEqual(q["identity"], "fp-1")
                self.assertEqual(q["version"], "weir-test")
                self.assertEqual(resp["socket_protocol"], proto)
                self.assertIn("status: NOERROR", resp["response_message"])
                self.assertIn(f"{qname}.", resp["response_message"])
                self.assertIn("ANSWER SECTION", resp["response_message"])
        # Misses went to the recursor: its query and answer, from weir's socket.
        fwd_q = of_type(fp_msgs, "FORWARDER_QUERY")
        fwd_r = of_type(fp_msgs, "FORWARDER_RESPONSE")
        self.assertGreaterEqual(len(fwd_q), 3, fp_msgs)
        self.assertEqual(len(fwd_q), len(fwd_r))
        for m in fwd_q + fwd_r:
            self.assertEqual(m["response_address"], rec.host)
            self.assertEqual(m["response_port"], str(rec.port))
        self.assertEqual(fp_counts.value("weir_dnstap_messages_total", result="sent"), len(fp_msgs))
        self.assertEqual(fp_counts.value("weir_dnstap_messages_total", result="dropped"), 0)

        rec_msgs = read_dnstap(rec_file)
        res_q = of_type(rec_msgs, "RESOLVER_QUERY")
        res_r = of_type(rec_msgs, "RESOLVER_RESPONSE")
        self.assertTrue(res_q, rec_msgs)
        self.assertEqual(len(res_q), len(res_r))
        # The last hop's queries for the tagged name carry ECS as sent: the
        # front's 198.51.100.0/24, and the fastpath's address cut to /24.
        # (lower-cased: the name goes out in random case, 0x20)
        ecs = [m for m in res_q if "x.cdn-gslb.example" in m["query_message"].lower() and "CLIENT-SUBNET" in m["query_message"]]
        self.assertTrue(ecs, res_q)
        self.assertTrue(any("198.51.100.0/24" in m["query_message"] for m in ecs), ecs)
        self.assertTrue(any("127.0.0.0/24" in m["query_message"] for m in ecs), ecs)
        for m in res_q:
            self.assertTrue(m["response_address"].startswith(NET + "."), m)
            self.assertEqual(m["response_port"], "53")
            self.assertEqual(m["identity"], "rec-1")
        self.assertTrue(any("198.51.100.0/24" in m["response_message"] for m in res_r), res_r)
        # Its front: the fastpath's misses and the direct query.
        rq = of_type(rec_msgs, "CLIENT_QUERY")
        self.assertIn("127.0.0.30", [m["query_address"] for m in rq])
        self.assertIn("127.0.0.1", [m["query_address"] for m in rq])
        self.assertEqual(len(of_type(rec_msgs, "CLIENT_RESPONSE")), len(rq))
        self.assertEqual(rec_stats["dnstap_sent"], len(rec_msgs))
        self.assertEqual(rec_stats["dnstap_dropped"], 0)

    def test_encrypted_transports_are_tapped_as_dot_and_doh(self):
        fp_file = self.path("fastpath.dnstap")
        certs = wtls.Certs(self.dir)
        tls = (f"\n[tls]\ndot_port = {weirtest.free_port(udp_and_tcp=False)}\n"
               f"doh_port = {weirtest.free_port(udp_and_tcp=False)}\n"
               f'[[tls.certificate]]\nchain = "{certs.chain}"\nkey = "{certs.key}"\n')
        fp = self.fastpath(self.plain, dnstap_table(file=fp_file) + tls)
        try:
            for source, mode, port in (("127.0.0.41", "+tls", fp.dot[1]), ("127.0.0.42", "+https", fp.doh[1])):
                out = subprocess.run(["kdig", "@127.0.0.1", "-p", str(port), mode, f"+tls-ca={certs.ca}",
                                      "+tls-hostname=localhost", "-b", source, "+short", "www.shop.example", "A"],
                                     capture_output=True, text=True, timeout=20)
                self.assertEqual(out.stdout.split(), ["192.0.2.1"], out.stderr)
        finally:
            self.assertEqual(fp.stop(), 0)
        # BIND 9.18's dnstap-read knows only UDP and TCP (it shows DOT and DOH
        # as UDP): the socket protocol is read from the file directly.
        protocols = {(t, addr): proto for t, proto, addr in raw_client_messages(fp_file)}
        self.assertEqual(protocols, {("CLIENT_QUERY", "127.0.0.41"): "DOT", ("CLIENT_RESPONSE", "127.0.0.41"): "DOT",
                                     ("CLIENT_QUERY", "127.0.0.42"): "DOH", ("CLIENT_RESPONSE", "127.0.0.42"): "DOH"})

    def test_httpdns_queries_carry_the_account_never_the_secret(self):
        fp_file = self.path("fastpath-httpdns.dnstap")
        accounts = self.path("accounts.txt")
        secret = "dnstap-test-secret-0123456789"
        with open(accounts, "w") as f:
            f.write(f"acme unsigned=on secret={secret}\n")
        httpdns = (f"\n[httpdns]\nenabled = true\nhttp_port = {weirtest.free_port(udp_and_tcp=False)}\n"
                   f'accounts_file = "{accounts}"\n')
        fp = self.fastpath(self.plain, dnstap_table(file=fp_file) + httpdns)
        try:
            out = subprocess.run(["curl", "-s", "--interface", "127.0.0.43",
                                  f"http://127.0.0.1:{fp.http[1]}/acme/resolve?host=www.shop.example&query=4,6"],
                                 capture_output=True, text=True, timeout=20)
            self.assertEqual(json.loads(out.stdout)["dns"][0]["ips"], ["192.0.2.1"], out.stdout)
        finally:
            self.assertEqual(fp.stop(), 0)
        rows = [r for r in raw_client_messages(fp_file, with_extra=True) if r[2] == "127.0.0.43"]
        # A and AAAA, each a query and a response
        self.assertEqual(len(rows), 4, rows)
        self.assertTrue(all(r[3] == b"httpdns account=acme api=resolve" for r in rows), rows)
        with open(fp_file, "rb") as f:
            self.assertNotIn(secret.encode(), f.read())

    def test_sample_two_taps_every_other_query(self):
        fp_file = self.path("fastpath.dnstap")
        fp = self.fastpath(self.plain, dnstap_table(file=fp_file, sample=2, upstream=False))
        try:
            for i in range(10):
                r = fp.dig("www.shop.example", "A", source=f"127.0.0.{40 + i}", norec=False)
                self.assertEqual(r.status, "NOERROR", r.text)
            counts = fp.metrics()
        finally:
            self.assertEqual(fp.stop(), 0)
        msgs = read_dnstap(fp_file)
        queries = of_type(msgs, "CLIENT_QUERY")
        self.assertEqual([m["query_address"] for m in queries], [f"127.0.0.{40 + i}" for i in range(0, 10, 2)])
        self.assertEqual([m["query_address"] for m in of_type(msgs, "CLIENT_RESPONSE")],
                         [m["query_address"] for m in queries])
        self.assertEqual(len(msgs), 10)  # upstream = false: no FORWARDER_* messages
        self.assertEqual(counts.value("weir_dnstap_messages_total", result="sampled_out"), 5)
        self.assertEqual(counts.value("weir_dnstap_messages_total", result="sent"), 10)

    def test_missing_directory_fails_at_start(self):
        bad = os.path.join(self.dir, "no-such-dir", "tap.dnstap")
        for start in (lambda: self.fastpath(self.plain, dnstap_table(file=bad)),
                      lambda: weirtest.Recursor(BUILD_DIR, self.recursor_config(dnstap_table(file=bad)))):
            with self.assertRaises(RuntimeError) as ctx:
                start().stop()
            self.assertIn("exited with", str(ctx.exception))
            self.assertIn(f"dnstap file {bad}: No such file or directory", str(ctx.exception))

    # ----------------------------------------------------------- unix socket

    def test_unix_socket_read_by_fstrm_capture(self):
        sock, out = self.path("tap.sock"), self.path("captured.dnstap")
        capture = subprocess.Popen(["fstrm_capture", "-t", "protobuf:dnstap.Dnstap", "-u", sock, "-w", out],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.assertTrue(weirtest.wait_until(lambda: os.path.exists(sock), timeout=5), "fstrm_capture did not bind")
            fp = self.fastpath(self.plain, dnstap_table(socket=sock))
            try:
                for i in range(3):
                    r = fp.dig("www.shop.example", "A", source=f"127.0.0.{60 + i}", norec=False)
                    self.assertEqual(r.status, "NOERROR", r.text)
            finally:
                self.assertEqual(fp.stop(), 0)  # the stream is finished with the reader
        finally:
            weirtest.stop_pid(capture)
        msgs = read_dnstap(out)
        self.assertEqual([m["query_address"] for m in of_type(msgs, "CLIENT_QUERY")],
                         [f"127.0.0.{60 + i}" for i in range(3)])
        self.assertEqual(len(of_type(msgs, "CLIENT_RESPONSE")), 3)

    def test_stuck_reader_drops_and_answers_go_on(self):
        # A reader that takes the connection but never answers the Frame
        # Streams handshake: no reader takes the stream, so every message is
        # dropped and counted, and answers go on (test_dnstap_reader.py:
        # the stop, and a working reader taking over).
        sock = self.path("stuck.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(sock)
        listener.listen(4)
        n = 60
        try:
            fp = self.fastpath(self.plain, dnstap_table(socket=sock, queue_size=2, upstream=False))
            try:
                fp.dig("www.shop.example", "A", norec=False)  # in the cache from here on
                start = time.monotonic()
                answers = weirtest.dig_many(fp.host, fp.port, "www.shop.example", n, source="127.0.0.70",
                                            )
                elapsed = time.monotonic() - start
                self.assertEqual(len(answers), n)
                self.assertLess(elapsed, 10.0)
                counts = fp.metrics()
                sent = counts.value("weir_dnstap_messages_total", result="sent")
                dropped = counts.value("weir_dnstap_messages_total", result="dropped")
                self.assertEqual(sent + dropped, 2 * (n + 1))
                self.assertLessEqual(sent, 2)
                self.assertGreaterEqual(dropped, 2 * (n + 1) - 2)
            finally:
                self.assertEqual(fp.stop(), 0)
        finally:
            listener.close()


if __name__ == "__main__":
    unittest.main()
