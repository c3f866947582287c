"""weir-recursor under pressure: bounded caches, bounded in-flight
resolutions, bounded TCP buffers, fronts that half-close or never read,
descriptor exhaustion at accept, and who may talk to it at all (the ACL
before BADVERS, the control port's own ACL).

A gslb-sim hierarchy on 127.0.105.x serves the names resolved by iteration;
a scripted authoritative (policy forward) serves large answers and never
answers "slow" names.

Run: python3 tests/integration/test_recursor_limits.py --build-dir build
"""

import os
import resource
import select
import socket
import struct
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest import build_response, rdata_a, split_tcp_frames, tcp_frame, weight_option  # noqa: E402
from weirtest.zones import default, gslb_name, record  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
NET = "127.0.105"

SHOP = record("www", "A", "192.0.2.1") + record("www", "AAAA", "2001:db8::1")

CDN = (gslb_name("x", default=default(["192.0.2.10", "192.0.2.11"], [3, 1]), ttl=60, weights=True) +
       gslb_name("y", default=default(["192.0.2.20"], [1]), ttl=60, weights=True))

BIG = 200  # A records in a "big" answer: about 3.4 KB


def handler(q):
    label = q.qname.split(".")[0]
    if label.startswith("slow"):
        return None
    n = q.qname
    if label.startswith("big"):
        answer = [(n, "A", 300, bytes([10, 0, i // 256, i % 256])) for i in range(BIG)]
        return build_response(q, answer=answer, options=[weight_option([1] * BIG)])
    return build_response(q, answer=[(n, "A", 300, rdata_a("192.0.2.200"))], options=[weight_option([1])])


def raw_query(qid, name, qtype=1):
    """A query with RD and an empty OPT, as a front would send it."""
    return weirtest.make_query(name, qtype, qid=qid)


def cpu_seconds(pid):
    """User + system CPU time of a process so far."""
    return sum(weirtest.proc_cpu_us(pid)) / 1e6


class LimitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("dig")
        weirtest.start_authorities(cls, BUILD_DIR, NET, {"shop.example.": SHOP, "cdn-gslb.example.": CDN}, handler)
        fwd = f"policy=forward:127.0.0.1@{cls.auth.port}"
        cls.tags = weirtest.write_temp(
            f"lim.example weight=on {fwd}\n"
            f"zs.example weight=on ecs=on {fwd}\n"
            "cdn-gslb.example weight=on ecs=on\n", suffix=".txt")
        cls.addClassCleanup(os.unlink, cls.tags)

    def recursor(self, allow=("127.0.0.0/8",), **sections):
        cfg = weirtest.recursor_config(root_hints=self.h.root_hints, tags=self.tags, allow=list(allow), **sections)
        r = weirtest.Recursor(BUILD_DIR, cfg)
        self.addCleanup(r.stop)
        return r

    # ------------------------------------------------------------ caches

    def test_full_tagged_cache_still_caches_new_names(self):
        r = self.recursor(cache={"max_tagged_names": 2})
        for i in range(5):
            res = r.dig(f"n{i}.lim.example", "A", options=[65001])
            self.assertEqual(res.addresses(), ["192.0.2.200"], res.text)
        self.assertEqual(r.stats()["tagged_names"], 2)
        # The newest name took the place of an older one: asking again is a hit.
        before = len(self.auth.received("n4.lim.example."))
        again = r.dig("n4.lim.example", "A", options=[65001])
        self.assertEqual(again.addresses(), ["192.0.2.200"])
        self.assertEqual(len(self.auth.received("n4.lim.example.")), before, "answered from the cache")
        s = r.stats()
        self.assertGreaterEqual(s["tagged_hits"], 1)
        self.assertGreaterEqual(s["evictions"], 3)

    def test_zero_source_and_ordinary_caches_are_bounded(self):
        r = self.recursor(cache={"max_zero_source_entries": 2, "max_entries": 2})
        for i in range(5):
            res = r.dig(f"z{i}.zs.example", "A", ecs="0.0.0.0/0", options=[65001])
            self.assertEqual(res.addresses(), ["192.0.2.200"], res.text)
        for name, qtype in (("www.shop.example", "A"), ("www.shop.example", "AAAA"), ("nope.shop.example", "A")):
            self.assertEqual(r.dig(name, qtype).status in ("NOERROR", "NXDOMAIN"), True)
        s = r.stats()
        self.assertEqual(s["zero_source_entries"], 2)
        self.assertLessEqual(s["plain_entries"], 2)
        again = r.dig("z4.zs.example", "A", ecs="0.0.0.0/0", options=[65001])
        self.assertEqual(again.addresses(), ["192.0.2.200"])
        self.assertEqual(len(self.auth.received("z4.zs.example.")), 1, "the newest /0 answer is cached")

    def test_zone_cut_cached_by_zone_and_bounded(self):
        r = self.recursor(cache={"max_zone_cuts": 1})
        x = r.dig("x.cdn-gslb.example", "A", ecs="198.51.100.7/24", options=[65001])
        self.assertEqual(x.addresses(), ["192.0.2.10", "192.0.2.11"], x.text)
        y = r.dig("y.cdn-gslb.example", "A", ecs="198.51.100.7/24", options=[65001])
        self.assertEqual(y.addresses(), ["192.0.2.20"], y.text)
        s = r.stats()
        self.assertEqual(s["cut_lookups"], 1, "the second name of the zone uses the zone's cached cut")
        self.assertEqual(s["cut_cache_hits"], 1)
        self.assertEqual(s["zone_cuts"], 1)

    # ------------------------------------------------------------ in-flight limit

    def test_resolutions_beyond_max_inflight_get_servfail_at_once(self):
        r = self.recursor(server={"max_inflight": 2}, last_hop={"timeout_ms": 3000, "attempts": 1})
        socks = []
        try:
            for i in range(2):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(s)
                s.sendto(raw_query(100 + i, f"slow{i}.lim.example"), (r.host, r.port))
            weirtest.wait_until(lambda: r.stats()["in_flight"] == 2, timeout=2)
            start = time.monotonic()
            for i in range(3):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(s)
                s.settimeout(1.0)
                s.sendto(raw_query(200 + i, f"slow-extra{i}.lim.example"), (r.host, r.port))
                reply = s.recv(65535)
                self.assertEqual(struct.unpack("!H", reply[:2])[0], 200 + i)
                self.assertEqual(reply[3] & 0xF, 2, "SERVFAIL")
            self.assertLess(time.monotonic() - start, 1.5, "not after the last-hop timeout")
            s = r.stats()
            self.assertEqual(s["inflight_limited"], 3)
            self.assertEqual(s["in_flight"], 2)
            self.assertEqual(len(self.auth.received("slow-extra0.lim.example.")), 0)
        finally:
            for s in socks:
                s.close()

    # ------------------------------------------------------------ front TCP

    def test_half_closed_front_gets_all_its_answers(self):
        r = self.recursor()
        names = [("www.shop.example", 1), ("www.shop.example", 28), ("nope.shop.example", 1), ("n9.lim.example", 1)]
        with socket.create_connection((r.host, r.port), timeout=5) as s:
            s.sendall(b"".join(tcp_frame(raw_query(300 + i, n, t)) for i, (n, t) in enumerate(names)))
            s.shutdown(socket.SHUT_WR)  # RFC 7766: the front may half-close after its queries
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        msgs, rest = split_tcp_frames(data)
        self.assertEqual(rest, b"")
        self.assertEqual(sorted(struct.unpack("!H", m[:2])[0] for m in msgs), [300, 301, 302, 303])
        rcodes = {struct.unpack("!H", m[:2])[0]: m[3] & 0xF for m in msgs}
        self.assertEqual(rcodes, {300: 0, 301: 0, 302: 3, 303: 0})

    def test_front_that_does_not_read_is_not_buffered_without_bound(self):
        limit = 65537
        r = self.recursor(server={"tcp_max_unsent_bytes": limit})
        warm = r.dig("big.lim.example", "A", options=[65001], tcp=True)
        self.assertEqual(len(warm.addresses()), BIG, warm.text)
        count = 3000  # ~10 MB of answers: far more than the kernel buffers hold
        query = tcp_frame(raw_query(7, "big.lim.example"))
        stream = query * count
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((r.host, r.port))
        try:
            s.setblocking(False)
            sent = 0
            stalled_since = None
            while sent < len(stream):  # until all is sent or the kernel's buffers are full
                try:
                    sent += s.send(stream[sent:sent + 65536])
                    stalled_since = None
                except BlockingIOError:
                    stalled_since = stalled_since or time.monotonic()
                    if time.monotonic() - stalled_since > 1.0:
                        break  # the recursor stopped reading us
                    time.sleep(0.01)
            # The queries themselves fit in the kernel's buffers; what must
            # not grow is what the recursor holds for us.
            # The recursor works through what the kernel holds until its
            # unsent bytes reach the limit: wait for that (bounded), not a
            # fixed time.
            deadline = time.monotonic() + 10
            st = r.stats()
            while st["tcp_reads_paused"] < 1 and time.monotonic() < deadline:
                time.sleep(0.1)
                st = r.stats()
            self.assertGreaterEqual(st["tcp_reads_paused"], 1, st)
            # At most the limit, one answer past it, and nothing else queued.
            self.assertLessEqual(st["tcp_unsent_bytes"], limit + 2 * 4096, st)
            # Once the front reads, everything it sent is answered.
            data = b""
            answers = 0
            deadline = time.monotonic() + 30
            while answers < count and time.monotonic() < deadline:
                want_write = [s] if sent < len(stream) else []
                readable, writable, _ = select.select([s], want_write, [], 1.0)
                if writable:
                    try:
                        sent += s.send(stream[sent:sent + 65536])
                    except BlockingIOError:
                        pass
                if readable:
                    chunk = s.recv(1 << 20)
                    self.assertNotEqual(chunk, b"", "closed before all answers")
                    data += chunk
                    msgs, data = split_tcp_frames(data)
                    answers += len(msgs)
            self.assertEqual(answers, count)
        finally:
            s.close()
        self.assertTrue(r.alive())

    def test_accept_backs_off_when_out_of_descriptors(self):
        r = self.recursor(server={"tcp_max_connections": 1000})
        fds = [int(x) for x in os.listdir(f"/proc/{r.pid}/fd")]
        old = resource.prlimit(r.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(r.pid, resource.RLIMIT_NOFILE, (max(fds) + 4, old[1]))
        clients = []
        try:
            for _ in range(12):  # a few are accepted, the rest wait in the backlog
                clients.append(socket.create_connection((r.host, r.port), timeout=2))
            time.sleep(0.3)
            before = cpu_seconds(r.pid)
            time.sleep(1.0)
            spent = cpu_seconds(r.pid) - before
            self.assertLess(spent, 0.3, "the loop spins on a listener it cannot accept from")
        finally:
            for c in clients:
                c.close()
            resource.prlimit(r.pid, resource.RLIMIT_NOFILE, old)
        res = r.dig("www.shop.example", "A", tcp=True, timeout=3)
        self.assertEqual(res.addresses(), ["192.0.2.1"], res.text)
        self.assertGreaterEqual(r.stats()["accept_paused"], 1)

    # ------------------------------------------------------------ who may ask

    def test_badvers_only_for_allowed_sources(self):
        allowed = self.recursor()
        res = allowed.dig("www.shop.example", "A", edns=1, extra=["+noednsnegotiation"])
        self.assertEqual(res.status, "BADVERS", res.text)
        other = self.recursor(allow=["10.0.0.0/8"])
        res = other.dig("www.shop.example", "A", edns=1, extra=["+noednsnegotiation"])
        self.assertEqual(res.status, "REFUSED", res.text)
        self.assertEqual(other.stats()["refused_acl"], 1)

    def test_control_port_accepts_only_allowed_sources(self):
        r = self.recursor(server={"control_allow": ["127.0.0.2/32"]})

        def control_from(source):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.settimeout(3)
                s.bind((source, 0))
                s.connect(r.control_address)
                try:
                    s.sendall(b"stats\n")
                except OSError:
                    return b""
                data = b""
                while True:
                    try:
                        chunk = s.recv(65536)
                    except ConnectionResetError:
                        break
                    if not chunk:
                        break
                    data += chunk
                return data

        self.assertEqual(control_from("127.0.0.1"), b"")
        self.assertEqual(control_from("127.0.0.1"), b"")
        reply = control_from("127.0.0.2")
        self.assertIn(b'"control_refused":2', reply)


if __name__ == "__main__":
    unittest.main()
