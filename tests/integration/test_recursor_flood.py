"""weir-recursor under a forged-answer flood for a full minute (issue #26
item 1): no configuration and no traffic may make the daemon exit.

Five recursors, one per allowed setting of the reactions to unwanted
replies: last_hop.unwanted_reply_threshold 0 (off), 1, 10 (the default) and
65536 (the largest), and one whose libunbound talks to its forwarder with
its own sockets (forwarder_transport = "libunbound"; resolver.
unwanted_reply_threshold only takes 0). They share one forwarder (a
scripted server on loopback) for ordinary names and a forward tag for
tagged ones. For FLOOD_SECONDS a client keeps fresh questions in flight on
every recursor while a forger, as fast as it can, reads every UDP port the
recursors and their libunbound processes have open (`ss`) and sends them
forged answers with random IDs, from the forwarder's address and port.
Afterwards every daemon (and its libunbound process) is still the one
started, and answers a new ordinary and a new tagged name.

Run: python3 tests/integration/test_recursor_flood.py --build-dir build
"""

import os
import random
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest import build_response, rdata_a  # noqa: E402

import dns.flags  # noqa: E402  (weirtest finds Debian's dnspython)
import dns.message  # noqa: E402
import dns.rrset  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
GOOD = "192.0.2.81"
POISON = "6.6.6.6"
FLOOD_SECONDS = int(os.environ.get("WEIR_FLOOD_SECONDS", "60"))


def forged_template(qname: str) -> bytes:
    m = dns.message.make_response(dns.message.make_query(qname, "A", want_dnssec=False))
    m.flags |= dns.flags.AA
    m.answer.append(dns.rrset.from_text(qname, 300, "IN", "A", POISON))
    m.use_edns(0, 0, 1232)
    return m.to_wire()


def udp_ports(pids: list) -> list:
    """Every UDP port the processes have open, as `ss` lists them."""
    out = subprocess.run(["ss", "-uanpH"], capture_output=True, text=True, timeout=10).stdout
    ports = set()
    for line in out.splitlines():
        if not any(f"pid={p}," in line for p in pids):
            continue
        m = re.search(r"^\S+\s+\d+\s+\d+\s+\S*:(\d+)\s", line)
        if m:
            ports.add(int(m.group(1)))
    return sorted(ports)


class FloodTest(unittest.TestCase):
    def test_a_minute_of_forged_answers_at_every_threshold(self):
        weirtest.require_tools("dig", "ss")
        # Names with a "slow" label are never answered: their queries stay
        # in flight until they time out, a target for the forger.
        auth = weirtest.ScriptedAuthority(
            lambda q: None if ".slow." in q.qname else
            build_response(q, answer=[(q.name.to_text(), "A", 300, rdata_a(GOOD))], options=[]))
        self.addCleanup(auth.stop)
        tags = weirtest.write_temp(f"tagged.example weight=on policy=forward:127.0.0.1@{auth.port}\n",
                                   suffix=".txt")
        self.addCleanup(os.unlink, tags)
        settings = [("threshold 0", {"unwanted_reply_threshold": 0}, {}),
                    ("threshold 1", {"unwanted_reply_threshold": 1}, {}),
                    ("threshold 10", {}, {}),
                    ("threshold 65536", {"unwanted_reply_threshold": 65536}, {}),
                    ("libunbound's sockets", {}, {"forwarder_transport": "libunbound"})]
        daemons = []
        for label, last_hop, resolver in settings:
            cfg = weirtest.recursor_config(forwarders=[f"127.0.0.1:{auth.port}"], tags=tags,
                                           last_hop={"timeout_ms": 400, **last_hop}, resolver=resolver,
                                           server={"metrics_listen": "127.0.0.1:0"})
            r = weirtest.Recursor(BUILD_DIR, cfg)
            self.addCleanup(r.stop)
            # libunbound's process is forked at the first lookup.
            self.assertEqual(r.dig(f"warm.{label.replace(' ', '-')}.example.", "A", timeout=8).addresses(), [GOOD])
            daemons.append((label, r, weirtest.child_pids(r.pid)))

        stop = threading.Event()
        sent = {"queries": 0, "forged": 0}

        def client():
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setblocking(False)
            n = 0
            while not stop.is_set():
                for _, r, _ in daemons:
                    n += 1
                    # Tagged names left unanswered (weir's last hop keeps
                    # them in flight through its timeouts), and ordinary
                    # ones with letters and digits only, answered at once
                    # (libunbound would take a forwarder that stays silent
                    # this often for down).
                    if n % 3:
                        name = f"q{n}.slow.tagged.example."
                    else:
                        name = f"q{n}.plain.example." if n % 2 else f"{n}.{n % 977}."
                    q = dns.message.make_query(name, "A", use_edns=0, payload=1232)
                    try:
                        sock.sendto(q.to_wire(), (r.host, r.port))
                        sent["queries"] += 1
                    except OSError:
                        pass
                try:
                    while True:
                        sock.recv(4096)
                except OSError:
                    pass
                time.sleep(0.005)
            sock.close()

        def forger():
            template = bytearray(forged_template("q1.plain.example."))
            while not stop.is_set():
                pids = []
                for _, r, _ in daemons:
                    pids += [r.pid] + weirtest.child_pids(r.pid)
                for port in udp_ports(pids):
                    for _ in range(512):
                        template[0:2] = struct.pack("!H", random.getrandbits(16))
                        try:
                            auth.udp.sendto(template, ("127.0.0.1", port))
                            sent["forged"] += 1
                        except OSError:
                            pass

        threads = [threading.Thread(target=client, daemon=True), threading.Thread(target=forger, daemon=True)]
        for t in threads:
            t.start()
        time.sleep(FLOOD_SECONDS)
        stop.set()
        for t in threads:
            t.join(10)
        print(f"{FLOOD_SECONDS} s: {sent['queries']} queries, {sent['forged']} forged answers", file=sys.stderr)
        self.assertGreater(sent["forged"], 10000 * FLOOD_SECONDS // 60, "the forger ran")

        for label, r, children in daemons:
            self.assertTrue(r.process.alive(), f"{label}: the daemon exited:\n{r.process.stderr_text()[-3000:]}")
            self.assertEqual(weirtest.child_pids(r.pid), children, f"{label}: libunbound's process was replaced")
            m = r.metrics()
            self.assertEqual(m.value("weir_recursor_resolver_restarts_total"), 0, label)
            tail = label.replace(" ", "-").replace("'", "")
            plain = r.dig(f"after.{tail}.example.", "A", timeout=8)
            self.assertEqual(plain.addresses(), [GOOD], f"{label}: {plain.text}")
            tagged = r.dig(f"after-{tail}.tagged.example.", "A", timeout=8)
            self.assertEqual(tagged.addresses(), [GOOD], f"{label}: {tagged.text}")
            unwanted = sum(m.value("weir_recursor_unwanted_replies_total", reason=x)
                           for x in ("id", "question", "case", "cookie"))
            reactions = sum(m.value("weir_recursor_unwanted_reply_reactions_total", trigger=x)
                            for x in ("threshold", "case", "cookie", "badcookie"))
            print(f"{label}: unwanted replies {unwanted:.0f}, reactions {reactions:.0f}", file=sys.stderr)
            # The flood reached queries in flight on weir's last hop.
            self.assertGreater(unwanted, 0, label)
            if label == "threshold 0":
                self.assertEqual(m.value("weir_recursor_unwanted_reply_reactions_total", trigger="threshold"), 0)


if __name__ == "__main__":
    unittest.main()
