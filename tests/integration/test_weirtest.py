"""Tests of the harness itself where it has logic of its own: the wire
helpers on dnspython (what a test sends and what it reads back must be
what went over the wire), the zone builders, the raw Ethernet frames, and
the network namespaces of the DPDK tests (NetnsPair; those need root and
are skipped without it). No daemon is started.

Run: python3 tests/integration/test_weirtest.py
"""

import json
import os
import subprocess
import socket
import sys
import tomllib
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest import netns, rawframe  # noqa: E402
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


MAC_S, MAC_C = "02:00:00:00:00:01", "02:00:00:00:00:02"


class FrameTest(unittest.TestCase):
    def test_checksum_is_rfc_1071(self):
        # RFC 1071 section 3's example words sum to 0xddf2; an odd byte counts as its high half.
        self.assertEqual(netns.checksum(bytes.fromhex("0001f203f4f5f6f7")), 0xFFFF - 0xDDF2)
        self.assertEqual(netns.checksum(b"\x01"), 0xFFFF - 0x0100)
        self.assertEqual(netns.checksum(bytes.fromhex("0001f203f4f5f6f7") + (0xFFFF - 0xDDF2).to_bytes(2, "big")), 0)

    def test_udp_frame_parses_back_with_its_tag_and_checksums(self):
        for src, dst in (("198.18.0.2", "198.18.0.1"), ("2001:2::2", "2001:2::1")):
            for vlan in (None, 0x2064):  # PCP 1, VID 100
                frame = weirtest.build_udp_frame(MAC_S, MAC_C, src, dst, 40000, 53, b"odd", vlan=vlan)
                self.assertEqual(weirtest.parse_udp_frame(frame + b"\0" * 20), {  # Ethernet padding is not payload
                    "dst_mac": MAC_S, "src_mac": MAC_C, "vlan": vlan, "src_ip": src, "dst_ip": dst, "sport": 40000,
                    "dport": 53, "payload": b"odd", "ip_checksum_ok": None if ":" in src else True,
                    "udp_checksum_ok": True})
                # rawframe.py finds a reply whose tag is still in the frame.
                self.assertEqual(rawframe.udp_dport(frame), 53)
                self.assertEqual(rawframe.split_ethernet(frame)[0], vlan)
                damaged = bytearray(frame)
                damaged[-1] ^= 1
                self.assertFalse(weirtest.parse_udp_frame(bytes(damaged))["udp_checksum_ok"])
        with self.assertRaises(ValueError):
            weirtest.parse_udp_frame(bytes.fromhex("ffffffffffff020000000002 0806") + b"\0" * 28)  # ARP


# A UDP echo server on the address in argv[1] that prints its port.
UDP_ECHO = """
import socket, sys
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0))
print(s.getsockname()[1], flush=True)
while True:
    data, peer = s.recvfrom(65535)
    s.sendto(data, peer)
"""

# On interface argv[1]: answers every frame that comes in with the frame argv[2] (hex).
RAW_REPLY = """
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
s.bind((sys.argv[1], 3))  # ETH_P_ALL
print("ready", flush=True)
while True:
    data, address = s.recvfrom(65535)
    if address[2] != socket.PACKET_OUTGOING:
        s.send(bytes.fromhex(sys.argv[2]))
"""


def netns_names() -> set:
    return {line.split()[0] for line in weirtest.run(["ip", "netns", "list"], check=True).stdout.splitlines()}


def in_ns(ns: str, *argv: str) -> str:
    return weirtest.run(weirtest.netns_argv(ns, argv), check=True).stdout


class RequiresTest(unittest.TestCase):
    """weirtest.requires: skipped outside CI, a failure under WEIR_REQUIRE_ALL=1."""

    def run_case(self, require_all):
        from weirtest import process
        saved = process.REQUIRE_ALL
        process.REQUIRE_ALL = require_all
        try:
            class Case(unittest.TestCase):
                @process.requires(False, "no such tool")
                def test_it(self):
                    pass

                @process.requires(True, "present")
                def test_present(self):
                    pass
            result = unittest.TestResult()
            unittest.TestLoader().loadTestsFromTestCase(Case).run(result)
            return result
        finally:
            process.REQUIRE_ALL = saved

    def test_skip_outside_ci_failure_in_ci(self):
        r = self.run_case(False)
        self.assertEqual((len(r.skipped), len(r.failures), r.testsRun), (1, 0, 2))
        r = self.run_case(True)
        self.assertEqual((len(r.skipped), len(r.failures), r.testsRun), (0, 1, 2))
        self.assertIn("required by CI: no such tool", r.failures[0][1])


class Boom(Exception):
    pass


@weirtest.requires(os.geteuid() == 0, "network namespaces need root (ip netns add, setns)")
class NetnsTest(unittest.TestCase):
    def assertGone(self, pair):
        self.assertFalse({pair.server_ns, pair.client_ns} & netns_names())

    def pair(self, **kw) -> weirtest.NetnsPair:
        pair = weirtest.NetnsPair(**kw)
        self.addCleanup(pair.close)
        return pair

    def test_pair_comes_up_and_goes_away_even_when_the_body_raises(self):
        with self.assertRaises(Boom):
            with weirtest.NetnsPair(client_v4=["198.18.1.10"], client_v6=["2001:2::10"], mtu=9000) as pair:
                self.assertLessEqual({pair.server_ns, pair.client_ns}, netns_names())
                self.assertLessEqual(max(len(pair.server_if), len(pair.client_if)), 15)
                server = json.loads(in_ns(pair.server_ns, "ip", "-j", "addr", "show"))
                client = json.loads(in_ns(pair.client_ns, "ip", "-j", "addr", "show"))
                by_name = {i["ifname"]: i for i in server + client}
                for ns in (pair.server_ns, pair.client_ns):
                    lo = json.loads(in_ns(ns, "ip", "-j", "link", "show", "dev", "lo"))[0]
                    self.assertIn("UP", lo["flags"])
                s, c = by_name[pair.server_if], by_name[pair.client_if]
                self.assertEqual((s["address"], c["address"], s["mtu"], c["mtu"]),
                                 (pair.server_mac, pair.client_mac, 9000, 9000))
                self.assertIn("UP", s["flags"])
                self.assertEqual(s["addr_info"], [])
                self.assertEqual(in_ns(pair.server_ns, "sysctl", "-n", f"net.ipv6.conf.{pair.server_if}.disable_ipv6",
                                       f"net.ipv4.conf.{pair.server_if}.rp_filter",
                                       f"net.ipv4.conf.{pair.server_if}.arp_ignore").split(), ["1", "1", "1"])
                self.assertIn("UP", c["flags"])
                got = {(a["local"], a["prefixlen"]) for a in c["addr_info"] if a.get("scope") == "global"}
                self.assertEqual(got, {("198.18.0.2", 16), ("198.18.1.10", 16), ("2001:2::2", 64),
                                       ("2001:2::10", 64)})
                self.assertFalse([a for a in c["addr_info"] if a["local"].startswith("2001:") and a.get("tentative")])
                self.assertIn("tx-checksumming: off", in_ns(pair.client_ns, "ethtool", "-k", pair.client_if))
                left_running = weirtest.Process(pair.client_argv(["sleep", "60"]), ready=None)
                self.addCleanup(left_running.stop)
                raise Boom()
        self.assertGone(pair)
        self.assertEqual(left_running.proc.wait(timeout=5), -15)  # SIGTERM, by PID

    def test_a_failed_construction_leaves_nothing(self):
        mine = f"-{os.getpid()}-"
        with self.assertRaises(RuntimeError):  # the veth cannot be made with that MTU
            weirtest.NetnsPair(mtu=1)
        self.assertFalse([n for n in netns_names() if mine in n])
        with self.assertRaises(ValueError):
            weirtest.NetnsPair(client_v4=["192.0.2.1"])

    def test_a_pair_never_closed_goes_at_exit(self):
        script = ("import sys; sys.path.insert(0, sys.argv[1]); import weirtest; "
                  "p = weirtest.NetnsPair(); print(p.server_ns, p.client_ns, flush=True); raise SystemExit(3)")
        out = subprocess.run([sys.executable, "-c", script, os.path.dirname(os.path.abspath(__file__))],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 3, out.stderr)
        names = set(out.stdout.split())
        self.assertEqual(len(names), 2)
        self.assertFalse(names & netns_names())

    def test_ping_from_the_client_namespace(self):
        pair = self.pair()
        in_ns(pair.server_ns, "ip", "addr", "add", "198.18.0.1/16", "dev", pair.server_if)
        self.assertTrue(pair.ping("198.18.0.1", count=2))
        self.assertFalse(pair.ping("198.18.0.3", timeout=1))  # nobody has it

    def test_enter_server_moves_the_thread_and_what_it_starts(self):
        pair = self.pair()
        server = f"net:[{os.stat(f'/run/netns/{pair.server_ns}').st_ino}]"
        before = os.readlink("/proc/thread-self/ns/net")
        self.assertNotEqual(before, server)
        silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(silent.close)
        silent.bind(("127.0.0.1", 0))
        port = silent.getsockname()[1]
        with pair.enter_server():
            self.assertEqual(os.readlink("/proc/thread-self/ns/net"), server)
            with weirtest.Process(["sleep", "60"], ready=None) as child:
                self.assertEqual(os.readlink(f"/proc/{child.pid}/ns/net"), server)
            # What the daemons do: listen on loopback, reached from the test inside the block.
            # The port is one this test holds on the host's loopback with a silent socket, so
            # no other test's server can answer the "outside" probe below.
            echo = weirtest.Process([sys.executable, "-c", UDP_ECHO, "127.0.0.1", str(port)], ready=r"^\d+$")
            self.addCleanup(echo.stop)
            self.assertEqual(weirtest.udp_exchange("127.0.0.1", port, b"inside"), b"inside")
        self.assertEqual(os.readlink("/proc/thread-self/ns/net"), before)
        self.assertIsNone(weirtest.udp_exchange("127.0.0.1", port, b"outside", timeout=0.5))  # not our loopback
        with weirtest.Process(["sleep", "60"], ready=None) as child:
            self.assertEqual(os.readlink(f"/proc/{child.pid}/ns/net"), before)
        with self.assertRaises(Boom):
            with pair.enter_server():
                raise Boom()
        self.assertEqual(os.readlink("/proc/thread-self/ns/net"), before)

    def test_dig_kdig_dig_many_in_the_client_namespace(self):
        pair = self.pair(client_v4=["198.18.1.10"])
        in_ns(pair.server_ns, "ip", "addr", "add", "198.18.0.1/16", "dev", pair.server_if)
        answer = weirtest.rdata_a("192.0.2.1")
        with pair.enter_server():  # its sockets are in the server namespace
            auth = weirtest.ScriptedAuthority(
                lambda q: weirtest.build_response(q, answer=[(q.qname, "A", 60, answer)]), host="198.18.0.1")
        with auth:
            for client in (weirtest.dig, weirtest.kdig):
                r = client("198.18.0.1", auth.port, "www.example.org", netns=pair.client_ns)
                self.assertEqual((r.status, r.addresses()), ("NOERROR", ["192.0.2.1"]), r.text)
            self.assertEqual(weirtest.dig_many("198.18.0.1", auth.port, "www.example.org", 3, source="198.18.1.10",
                                               netns=pair.client_ns), ["192.0.2.1"] * 3)
            self.assertEqual(len(auth.received()), 5)

    def test_udp_frames_pass_the_kernel_checksums(self):
        # The server's kernel echoes only what passed its IPv4 header and UDP
        # checksum checks; with offload off there, its echo has checksums
        # the kernel computed, which parse_udp_frame must find correct.
        pair = self.pair()
        s = pair.server_if
        in_ns(pair.server_ns, "sysctl", "-q", "-w", f"net.ipv6.conf.{s}.disable_ipv6=0")
        in_ns(pair.server_ns, "ip", "addr", "add", "198.18.0.1/16", "dev", s)
        in_ns(pair.server_ns, "ip", "addr", "add", "2001:2::1/64", "dev", s, "nodad")
        in_ns(pair.server_ns, "ethtool", "-K", s, "tx", "off")
        for src, dst in (("198.18.0.2", "198.18.0.1"), ("2001:2::2", "2001:2::1")):
            with self.subTest(dst=dst), \
                    weirtest.Process(weirtest.netns_argv(pair.server_ns, [sys.executable, "-c", UDP_ECHO, dst]),
                                     ready=r"^\d+$") as echo:
                port = int(echo.lines[0])
                for payload in (b"even", b"odd"):
                    frame = weirtest.build_udp_frame(pair.server_mac, pair.client_mac, src, dst, 40000, port, payload)
                    got, vlan = pair.raw_exchange(frame, 40000)
                    self.assertEqual(weirtest.parse_udp_frame(got), {
                        "dst_mac": pair.client_mac, "src_mac": pair.server_mac, "vlan": None, "src_ip": dst,
                        "dst_ip": src, "sport": port, "dport": 40000, "payload": payload,
                        "ip_checksum_ok": None if ":" in src else True, "udp_checksum_ok": True})
                    self.assertIsNone(vlan)
                # The same frames with a wrong checksum get no echo: the check above means something.
                wrong_udp = bytearray(frame)
                wrong_udp[-1] ^= 1
                wrong = [wrong_udp]
                if ":" not in src:
                    wrong_ip = bytearray(frame)
                    wrong_ip[14 + 8] -= 1  # TTL: in the IPv4 header checksum only
                    wrong.append(wrong_ip)
                for bad in wrong:
                    with self.assertRaises(TimeoutError):
                        pair.raw_exchange(bytes(bad), 40000, timeout=1)

    def test_vlan_tags(self):
        pair = self.pair()
        in_ns(pair.server_ns, "ip", "addr", "add", "198.18.0.1/16", "dev", pair.server_if)
        # Sent: a priority tag (VID 0) is the one tag a kernel without a VLAN
        # device (no 8021q module here) accepts, so its echo shows the tag
        # was well formed; VID 100 is dropped there.
        with weirtest.Process(weirtest.netns_argv(pair.server_ns, [sys.executable, "-c", UDP_ECHO, "198.18.0.1"]),
                              ready=r"^\d+$") as echo:
            port = int(echo.lines[0])
            for tci in (0x6000, 100):  # PCP 3 VID 0, PCP 0 VID 100
                frame = weirtest.build_udp_frame(pair.server_mac, pair.client_mac, "198.18.0.2", "198.18.0.1", 40000,
                                                 port, b"tagged", vlan=tci)
                if tci == 100:
                    with self.assertRaises(TimeoutError):
                        pair.raw_exchange(frame, 40000, timeout=1)
                else:
                    got, vlan = pair.raw_exchange(frame, 40000)
                    self.assertEqual((weirtest.parse_udp_frame(got)["payload"], vlan), (b"tagged", None))
        # Received: a tagged answer (what the DPDK backend sends on a VLAN)
        # comes with its tag moved out of the frame by the client's kernel.
        reply = weirtest.build_udp_frame(pair.client_mac, pair.server_mac, "198.18.0.1", "198.18.0.2", 53, 40001,
                                         b"answer", vlan=0x2064)
        with weirtest.Process(weirtest.netns_argv(pair.server_ns, [sys.executable, "-c", RAW_REPLY, pair.server_if,
                                                                   reply.hex()])):
            query = weirtest.build_udp_frame(pair.server_mac, pair.client_mac, "198.18.0.2", "198.18.0.1", 40001,
                                             53, b"query", vlan=0x2064)
            got, vlan = pair.raw_exchange(query, 40001)
        self.assertEqual(vlan, 0x2064)
        self.assertEqual(got, reply[:12] + reply[16:])  # as received: without the tag
        fields = weirtest.parse_udp_frame(got)
        self.assertEqual((fields["vlan"], fields["sport"], fields["payload"], fields["udp_checksum_ok"]),
                         (None, 53, b"answer", True))


if __name__ == "__main__":
    unittest.main()
