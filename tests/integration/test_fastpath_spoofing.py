"""Black-box tests of weir-fastpath's forwarder against forged and late
answers (docs/behaviour.md#the-front-cache, issue #16 items 1 and 6):

* blind spoofing: a slow recursor answers 1 s late; a forger who knows the
  forwarder's source port (read with `ss -uanp` for the daemon's PID; the
  pool has one socket here, the attacker's best case) floods all 65,536 IDs
  with a poison A record for the name asked, 20 names in a row. None may be
  accepted: dig gets the genuine address, and so does the cache afterwards.
  The same forger against the forwarder with 0x20 and the unwanted-reply
  reaction turned off poisons it, so the test's attacker is a real one;
* late answers: a recursor that answers after the timeout is counted in
  weir_upstream_late_answers_total, not as spoofed or unwanted, and the
  SERVFAIL the client got is a response, not a drop.

Loopback only; every process is stopped by PID.

Run: python3 tests/integration/test_fastpath_spoofing.py --build-dir build
"""

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

BUILD_DIR = weirtest.parse_build_dir()
HERE = os.path.dirname(os.path.abspath(__file__))
GENUINE = "192.0.2.10"
POISON = "192.0.2.66"


def source_ports(pid: int, exclude: int) -> list:
    """The UDP ports the process has open, as `ss -uanp` lists them, less
    its listening port: what an attacker on the host would read."""
    out = subprocess.run(["ss", "-uanp"], capture_output=True, text=True, check=True, timeout=10).stdout
    ports = set()
    for line in out.splitlines():
        if f"pid={pid}," not in line:
            continue
        fields = line.split()
        local = fields[3]
        m = re.search(r":(\d+)$", local)
        if m and int(m.group(1)) != exclude:
            ports.add(int(m.group(1)))
    return sorted(ports)


class BlindSpoofingTest(unittest.TestCase):
    def setUp(self):
        if shutil.which("ss") is None:
            weirtest.skip_or_fail(self, "ss (iproute2) is not installed")
        self.dir = tempfile.mkdtemp(prefix="weir-spoof-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.ports_file = os.path.join(self.dir, "ports")
        open(self.ports_file, "w").close()

    def start_fake(self, delay_ms):
        self.fake = weirtest.Process([sys.executable, os.path.join(HERE, "fake_upstreams.py"), "slow",
                                      "--answer", GENUINE, "--poison", POISON, "--delay-ms", str(delay_ms),
                                      "--forge-ports-file", self.ports_file], ready=r"^ready$")
        self.addCleanup(self.fake.stop)
        host, port = weirtest.split_hostport(self.fake.wait_line(r"^listening udp (\S+)").group(1))
        self.upstream = f"{host}:{port}"

    def start_fastpath(self, delay_ms=1000, **upstream):
        self.start_fake(delay_ms)
        keys = {"timeout_ms": delay_ms + 1500, "answer_deadline_ms": delay_ms + 3000, "attempts": 1,
                "udp_sockets": 1}
        keys.update(upstream)
        fp = weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config([self.upstream], upstream=keys))
        self.addCleanup(fp.stop)
        ports = source_ports(fp.pid, fp.port)
        self.assertEqual(len(ports), 1, f"one pool socket expected, ss shows {ports}")
        with open(self.ports_file, "w") as f:
            f.write(f"{ports[0]}\n")
        return fp

    def attack(self, fp, name):
        """One forged flood against `name`; returns the addresses dig got and
        those the cache answers afterwards."""
        r = fp.dig(name, extra=["+time=8", "+tries=1"])
        # This flood is over before we look at the cache (the forger prints
        # a line after each) and before the next one starts.
        self.floods = getattr(self, "floods", 0) + 1
        self.fake.wait_count(r"^forged 65536$", self.floods, timeout=60)
        again = fp.dig(name, extra=["+time=6", "+tries=1"])
        return r, again

    def test_forged_answers_for_every_id_are_never_accepted(self):
        fp = self.start_fastpath()
        poisoned = []
        for i in range(20):
            name = f"forge-{i}.example.com"
            r, again = self.attack(fp, name)
            self.assertEqual(r.status, "NOERROR", f"{name}:\n{r.text}")
            if POISON in r.addresses() or POISON in again.addresses():
                poisoned.append(name)
            self.assertEqual(r.addresses(), [GENUINE], f"{name}: dig got\n{r.text}")
            self.assertEqual(again.addresses(), [GENUINE], f"{name}: the cache holds\n{again.text}")
        self.assertEqual(poisoned, [])
        m = fp.metrics()
        # Every flood was seen and reacted to once: after the threshold of
        # unwanted answers (or a forgery that guessed the ID but not the
        # case) the question went to TCP.
        reactions = m.value("weir_upstream_spoof_reactions_total")
        case = m.value("weir_upstream_case_mismatches_total")
        print(f"20 floods of 65,536 forged answers: reactions {reactions}, case mismatches {case}, "
              f"unwanted {m.value('weir_upstream_unwanted_replies_total')}, "
              f"late {m.value('weir_upstream_late_answers_total')}, "
              f"spoofed {m.value('weir_upstream_spoofed_total')}", file=sys.stderr)
        if os.environ.get("WEIR_DEBUG_SPOOF"):
            print(fp.process.stderr_text(), file=sys.stderr)
        self.assertEqual(reactions + case, 20, m.text)
        self.assertGreaterEqual(m.value("weir_upstream_unwanted_replies_total"), 20 * 10, m.text)
        tcp = [l for l in weirtest.collect_lines(self.fake) if l.startswith("query tcp ")]
        self.assertEqual(len(tcp), 20, f"each question re-asked over TCP once: {tcp}")
        self.assertEqual(m.value("weir_cache_hits_total"), 20, m.text)

    def test_the_same_forger_poisons_a_forwarder_without_the_defences(self):
        # ID and port alone, the port known: the flood wins the race against
        # a recursor 1 s late. This is what the defences above stop.
        fp = self.start_fastpath(delay_ms=2500, case_randomization=False, unwanted_reply_threshold=0)
        # The flood must reach the right ID before the genuine answer (2.5 s
        # late here, for a slow runner) and the kernel may drop part of it:
        # an attempt can lose the race.
        tried = []
        for i in range(8):
            r, again = self.attack(fp, f"weak-{i}.example.com")
            tried.append(r.addresses())
            if POISON in r.addresses():
                break
        self.assertIn([POISON], tried, "the forger should win without 0x20 and the reaction")


class PoolRotationTest(unittest.TestCase):
    def test_pool_sockets_move_to_fresh_ports_and_old_ones_close(self):
        if shutil.which("ss") is None:
            weirtest.skip_or_fail(self, "ss (iproute2) is not installed")
        with socket_pair() as hole:
            up = f"127.0.0.1:{hole.getsockname()[1]}"
            # 2 sockets, lifetime 10 s: one of them moves every 5 s.
            config = weirtest.fastpath_config([up], upstream={"udp_sockets": 2, "udp_socket_lifetime_s": 10})
            fp = weirtest.Fastpath(BUILD_DIR, config)
            self.addCleanup(fp.stop)
            first = set(source_ports(fp.pid, fp.port))
            self.assertEqual(len(first), 2, first)
            self.assertTrue(weirtest.wait_until(lambda: set(source_ports(fp.pid, fp.port)) - first, 15.0),
                            f"no port changed in 15 s: {first}")
            # Retired sockets close once their late answers cannot come (5 s
            # here): never more than the pool and the ones retired meanwhile.
            for _ in range(10):
                self.assertLessEqual(len(source_ports(fp.pid, fp.port)), 4)
                self.assertLessEqual(fp.metrics().value("weir_upstream_udp_sockets"), 4)
                time.sleep(0.5)


def socket_pair():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))  # a recursor that never answers
    return s


class CookieTest(unittest.TestCase):
    """RFC 7873 towards a recursor that makes cookies: the client cookie
    goes with every query, the server cookie is learned and echoed, and an
    answer without the cookie (once the server sent one) or with another
    client cookie is refused and the question asked over TCP."""

    def start(self, *fake_args):
        fake = weirtest.Process([sys.executable, os.path.join(HERE, "fake_upstreams.py"), "cookies",
                                 "--answer", GENUINE, "--poison", POISON, *fake_args], ready=r"^ready$")
        self.addCleanup(fake.stop)
        host, port = weirtest.split_hostport(fake.wait_line(r"^listening udp (\S+)").group(1))
        fp = weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config([f"{host}:{port}"],
                                                                   upstream={"attempts": 1}))
        self.addCleanup(fp.stop)
        return fake, fp

    def cookies_seen(self, fake, transport="udp"):
        lines = weirtest.collect_lines(fake)
        return [re.search(r"cookie=(\S+)", l).group(1) for l in lines if l.startswith(f"query {transport} ")]

    def test_server_cookie_is_learned_and_echoed(self):
        fake, fp = self.start()
        for name in ("c1.example.com", "c2.example.com"):
            r = fp.dig(name)
            self.assertEqual(r.addresses(), [GENUINE], r.text)
        sent = self.cookies_seen(fake)
        self.assertEqual(len(sent), 2, sent)
        self.assertEqual(len(sent[0]), 16, f"first query: the client cookie alone: {sent}")
        self.assertEqual(sent[1], sent[0] + b"weir-test-srv-c1".hex(), f"then with the server cookie: {sent}")
        self.assertEqual(fp.metrics().value("weir_upstream_cookie_mismatches_total"), 0)

    def test_answer_without_the_cookie_is_refused_once_the_server_sent_one(self):
        fake, fp = self.start("--forge", "absent", "--forge-from", "2")
        r = fp.dig("learn.example.com")
        self.assertEqual(r.addresses(), [GENUINE], r.text)
        r = fp.dig("target.example.com")
        self.assertEqual(r.addresses(), [GENUINE], f"the cookie-less forgery was taken:\n{r.text}")
        m = fp.metrics()
        self.assertEqual(m.value("weir_upstream_cookie_mismatches_total"), 1, m.text)
        self.assertEqual(len(self.cookies_seen(fake, "tcp")), 1, "asked again over TCP once")
        self.assertEqual(fp.dig("target.example.com").addresses(), [GENUINE], "cache")

    def test_answer_with_another_client_cookie_is_refused(self):
        fake, fp = self.start("--forge", "wrong")
        r = fp.dig("wrong.example.com")
        self.assertEqual(r.addresses(), [GENUINE], f"the forgery was taken:\n{r.text}")
        m = fp.metrics()
        self.assertEqual(m.value("weir_upstream_cookie_mismatches_total"), 1, m.text)
        self.assertEqual(m.value("weir_upstream_spoofed_total"), 1, m.text)


class LateAnswerTest(unittest.TestCase):
    def test_answer_after_the_timeout_is_late_not_spoofed(self):
        fake = weirtest.Process([sys.executable, os.path.join(HERE, "fake_upstreams.py"), "slow",
                                 "--answer", GENUINE, "--delay-ms", "700"], ready=r"^ready$")
        self.addCleanup(fake.stop)
        host, port = weirtest.split_hostport(fake.wait_line(r"^listening udp (\S+)").group(1))
        config = weirtest.fastpath_config([f"{host}:{port}"], upstream={"timeout_ms": 200, "attempts": 1})
        fp = weirtest.Fastpath(BUILD_DIR, config)
        self.addCleanup(fp.stop)
        r = fp.dig("late.example.com", extra=["+time=3", "+tries=1"])
        self.assertEqual(r.status, "SERVFAIL", r.text)
        self.assertTrue(weirtest.wait_until(lambda: fp.metrics().value("weir_upstream_late_answers_total") == 1,
                                            5.0), fp.metrics().text)
        m = fp.metrics()
        self.assertEqual(m.value("weir_upstream_spoofed_total"), 0, m.text)
        self.assertEqual(m.value("weir_upstream_unwanted_replies_total"), 0, m.text)
        self.assertEqual(m.value("weir_upstream_timeouts_total"), 1, m.text)
        # weir's own SERVFAIL is a response (with its reason), not a drop.
        self.assertEqual(m.value("weir_responses_total", rcode="SERVFAIL"), 1, m.text)
        self.assertEqual(m.value("weir_error_responses_total", reason="upstream_failure"), 1, m.text)
        self.assertEqual(m.value("weir_drops_total"), 0, m.text)
        # The late answer did not fill the cache: the next query asks again.
        before = m.value("weir_upstream_queries_total")
        fp.dig("late.example.com", extra=["+time=3", "+tries=1"])
        self.assertEqual(fp.metrics().value("weir_upstream_queries_total"), before + 1)


if __name__ == "__main__":
    unittest.main()
