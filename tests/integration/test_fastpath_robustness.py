"""Black-box robustness tests of weir-fastpath's TCP and metrics listeners:
clients that misbehave must cost them their connection, never the process.

Run: python3 tests/integration/test_fastpath_robustness.py --build-dir build
"""

import os
import socket
import struct
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import record, zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
HERE = os.path.dirname(os.path.abspath(__file__))
# A query dig sent over TCP for www.example.com A (tests/dns/golden).
QUERY = open(os.path.join(HERE, "..", "dns", "golden", "q_dig_tcp.bin"), "rb").read()

ZONES = zone("example.com.") + record("www", "A", "192.0.2.1", ttl=300)


def framed(qid):
    return weirtest.tcp_frame(struct.pack("!H", qid) + QUERY[2:])


class FastpathRobustnessTest(unittest.TestCase):
    def setUp(self):
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        self.addCleanup(self.sim.stop)
        up = f"{self.sim.host}:{self.sim.port}"
        self.fp = weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config([up]))
        self.addCleanup(self.fp.stop)
        self.assertEqual(self.fp.dig("www.example.com").status, "NOERROR")  # warm the cache

    def test_metrics_client_that_resets_does_not_kill_the_process(self):
        for _ in range(5):
            s = socket.create_connection((self.fp.metrics_host, self.fp.metrics_port))
            s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            # Close with RST before the answer is read: the server's write
            # then hits a reset connection (EPIPE), which must not be fatal.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
            time.sleep(0.05)
        time.sleep(0.3)
        self.assertTrue(self.fp.alive(), "weir-fastpath died after a metrics client reset")
        self.assertEqual(self.fp.dig("www.example.com").status, "NOERROR")

    def test_pipelined_tcp_client_that_reads_late_gets_every_answer(self):
        n = 2000
        s = socket.create_connection((self.fp.host, self.fp.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(b"".join(framed(i) for i in range(n)))
        time.sleep(1.0)  # answers pile up while the client does not read
        s.settimeout(5)
        buf = b""
        ids = set()
        while len(ids) < n:
            chunk = s.recv(65536)
            if not chunk:
                break
            msgs, buf = weirtest.split_tcp_frames(buf + chunk)
            for msg in msgs:
                ids.add(struct.unpack("!H", msg[:2])[0])
                self.assertEqual(msg[3] & 0x0F, 0, "NOERROR expected")
        s.close()
        self.assertEqual(len(ids), n, f"{n - len(ids)} pipelined queries went unanswered")
        self.assertTrue(self.fp.alive())

    def test_tcp_client_that_never_reads_is_dropped_not_buffered_forever(self):
        s = socket.create_connection((self.fp.host, self.fp.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(0.2)
        payload = b"".join(framed(i & 0xFFFF) for i in range(4000))
        try:
            for _ in range(50):
                s.sendall(payload)
        except (socket.timeout, OSError):
            pass  # the server stopped reading or closed: both are right
        s.close()
        self.assertTrue(self.fp.alive())
        self.assertEqual(self.fp.dig("www.example.com", extra=("+tcp",)).status, "NOERROR")


class FastpathStartFailureTest(unittest.TestCase):
    def test_a_start_without_enough_descriptors_fails(self):
        # Too few file descriptors for what the config holds open: the start
        # must fail with the reason, never serve half set up (a forwarder
        # without its event loop would leave every miss waiting forever).
        # The open-file check refuses before anything is bound, whatever the
        # limit below the need.
        import resource
        import subprocess

        path = weirtest.write_temp(weirtest.fastpath_config(["127.0.0.1:9"]))
        self.addCleanup(os.unlink, path)
        exe = weirtest.binary(BUILD_DIR, "fastpath/weir-fastpath")
        for limit in (4, 16, 64, 256):
            def lower(limit=limit):
                resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
            res = subprocess.run([exe, "-c", path], capture_output=True, text=True, timeout=20, preexec_fn=lower,
                                 input="")
            self.assertEqual(res.returncode, 2, f"limit {limit}: {res.stderr}")
            self.assertNotIn("metrics http", res.stdout, f"limit {limit}: served")
            self.assertIn("open-file limit: the config needs", res.stderr)
            self.assertIn(f"the hard limit is {limit}", res.stderr)


class TcpAnswerOrderTest(unittest.TestCase):
    """Pipelined TCP queries are answered as they complete (RFC 7766
    6.2.1.1), each under its own ID: a cached answer does not wait behind
    a miss sent before it (docs/fastpath-config.md)."""

    def test_a_hit_is_answered_before_a_miss_sent_first(self):
        fake = weirtest.Process([sys.executable, os.path.join(HERE, "fake_upstreams.py"), "slow",
                                 "--answer", "192.0.2.10", "--delay-ms", "600"], ready=r"^ready$")
        self.addCleanup(fake.stop)
        host, port = weirtest.split_hostport(fake.wait_line(r"^listening udp (\S+)").group(1))
        fp = weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config(
            [f"{host}:{port}"], upstream={"timeout_ms": 3000, "answer_deadline_ms": 5000}))
        self.addCleanup(fp.stop)
        self.assertEqual(fp.dig("hit.example.com", extra=["+time=5"]).addresses(), ["192.0.2.10"])

        def q(name, qid):
            return weirtest.tcp_frame(weirtest.make_query(name, 1, qid=qid))

        s = socket.create_connection((fp.host, fp.port))
        self.addCleanup(s.close)
        s.settimeout(5)
        s.sendall(q("slow-miss.example.com", 1) + q("hit.example.com", 2))
        buf, ids = b"", []
        while len(ids) < 2:
            chunk = s.recv(65536)
            self.assertTrue(chunk, f"closed after {ids}")
            msgs, buf = weirtest.split_tcp_frames(buf + chunk)
            for m in msgs:
                ids.append(struct.unpack("!H", m[:2])[0])
                self.assertEqual(m[3] & 0x0F, 0, "NOERROR expected")
        self.assertEqual(ids, [2, 1], "the hit first, then the miss when its answer came")


if __name__ == "__main__":
    unittest.main()
