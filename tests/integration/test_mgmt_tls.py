"""Black-box tests of weir-mgmt's TLS with mutual authentication (docs/mgmt.md#tls):
weir-mgmt with a [tls] table, weir-fastpath nodes with their certificates,
weirctl with an operator certificate. Certificates are made with the openssl
tool (weirtest.tls.ClientCa); Python's ssl module and `openssl s_client` are
the clients nobody here wrote.

Run: python3 tests/integration/test_mgmt_tls.py --build-dir build
"""

import calendar
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.tls import ClientCa  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()


class MgmtTlsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="weir-mgmt-tls-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.ca = ClientCa(self.dir)
        self.other_ca = ClientCa(self.dir, "other-ca")
        self.mgmt_cert = self.path("mgmt.pem")
        self.mgmt_key = self.path("mgmt.key")
        self.mgmt_serial = self.ca.issue(self.mgmt_cert, self.mgmt_key, "weir-mgmt")
        self.op_cert, self.op_key = self.path("alice.pem"), self.path("alice.key")
        self.ca.issue(self.op_cert, self.op_key, "alice", "weir-operator")
        self.port = weirtest.free_port(udp_and_tcp=False)
        self.mgmt = None
        self.start_mgmt()
        self.upstream = "127.0.0.1:9"  # the nodes' DNS is not what is tested here

    def path(self, name):
        return os.path.join(self.dir, name)

    def start_mgmt(self):
        config = self.path("mgmt.toml")
        with open(config, "w") as f:
            f.write(f'[mgmt]\nlisten = "127.0.0.1:{self.port}"\ndatabase = "mgmt.db"\n'
                    f'metrics_listen = "127.0.0.1:0"\n'
                    f'[tls]\ncert_file = "mgmt.pem"\nkey_file = "mgmt.key"\nca_file = "ca/ca.pem"\n')
        self.mgmt = weirtest.Process([weirtest.binary(BUILD_DIR, "mgmt/weir-mgmt"), "-c", config])
        self.addCleanup(self.mgmt.stop)
        self.metrics_port = None
        for line in self.mgmt.lines:
            if line.startswith("metrics http "):
                self.metrics_port = int(line.rsplit(":", 1)[1])

    def mgmt_metrics(self):
        return weirtest.Metrics(weirtest.http_get("127.0.0.1", self.metrics_port, "/metrics"))

    def wait_log(self, pattern, timeout=10.0, count=1):
        """Waits until weir-mgmt's log (stderr) has `count` lines matching `pattern`."""
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        while time.monotonic() < deadline:
            lines = [line for line in self.mgmt.stderr_text().splitlines() if rx.search(line)]
            if len(lines) >= count:
                return lines[-1]
            time.sleep(0.05)
        self.fail(f"no {count} log lines matching {pattern!r}: {self.mgmt.stderr_text()[-3000:]}")

    def weirctl(self, *args, cert=None, key=None, actor="alice@host"):
        cert = cert or self.op_cert
        key = key or self.op_key
        argv = [weirtest.binary(BUILD_DIR, "mgmt/weirctl"), "--server", f"127.0.0.1:{self.port}",
                "--actor", actor, "--timeout-ms", "5000"]
        if cert != "none":
            argv += ["--tls-cert", cert, "--tls-key", key, "--tls-ca", self.ca.ca]
        else:  # plain TCP, with a token weir-mgmt does not even ask for
            token = self.path("token")
            with open(token, "w") as f:
                f.write("test-token-0123456789abcdef\n")
            argv += ["--token-file", token]
        return weirtest.run(argv + list(args))

    def weirctl_json(self, *args):
        r = self.weirctl("--json", *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def node(self, node_id):
        for n in self.weirctl_json("nodes")["nodes"]:
            if n["node"] == node_id:
                return n
        return None

    def wait_in_sync(self, node_id, version, timeout=15.0):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.node(node_id)
            if last and last["connected"] and last["version"] == version:
                return last
            time.sleep(0.1)
        self.fail(f"node {node_id} not at version {version}: {last}; mgmt log: {self.mgmt.stderr_text()[-2000:]}")

    def node_cert(self, node_id, cn=None, ca=None, expired=False):
        cert, key = self.path(f"{node_id}.pem"), self.path(f"{node_id}.key")
        (ca or self.ca).issue(cert, key, cn or node_id, "weir-node", expired=expired)
        return cert, key

    def start_fastpath(self, node_id, cert, key):
        section = (f'\n[mgmt]\naddress = "127.0.0.1:{self.port}"\nnode_id = "{node_id}"\n'
                   f'state_dir = {json.dumps(self.path(node_id + "-state"))}\n'
                   f'tls_cert_file = {json.dumps(cert)}\ntls_key_file = {json.dumps(key)}\n'
                   f'tls_ca_file = {json.dumps(self.ca.ca)}\n')
        fp = weirtest.Fastpath(BUILD_DIR, weirtest.fastpath_config([self.upstream]) + section)
        self.addCleanup(fp.stop)
        return fp

    def peer_serial(self):
        """The serial of the certificate weir-mgmt presents now, seen by Python's ssl."""
        ctx = ssl.create_default_context(cafile=self.ca.ca)
        ctx.check_hostname = False
        ctx.load_cert_chain(self.op_cert, self.op_key)
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw:
            with ctx.wrap_socket(raw) as s:
                return s.getpeercert()["serialNumber"]

    def test_node_and_operator_over_tls(self):
        cert, key = self.node_cert("fp-1")
        fp = self.start_fastpath("fp-1", cert, key)
        self.wait_in_sync("fp-1", 0)
        r = self.weirctl("tag", "add", "cdn.example.net", "ecs=on")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.wait_in_sync("fp-1", 1)
        deadline = time.monotonic() + 10
        while fp.metrics().value("weir_mgmt_snapshot_version") != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(fp.metrics().value("weir_mgmt_snapshot_version"), 1)
        # The audit names the certificate, then what weirctl said.
        audit = self.weirctl_json("audit")
        self.assertEqual(audit[-1]["actor"], "alice (cert) as alice@host")
        m = self.mgmt_metrics()
        not_after = subprocess.run(["openssl", "x509", "-in", self.mgmt_cert, "-noout", "-enddate"],
                                   capture_output=True, text=True, check=True).stdout.strip().split("=", 1)[1]
        expected = calendar.timegm(time.strptime(not_after, "%b %d %H:%M:%S %Y GMT"))
        self.assertAlmostEqual(m.value("weir_mgmt_tls_cert_expiry_seconds"), expected, delta=2)

    def test_bad_node_certificates_are_refused_with_the_reason(self):
        # Expired: a node does not start with an expired certificate (its
        # start checks it, as --check does), so this one expires while it
        # runs, and its next session (weir-mgmt restarts) is refused.
        cert, key = self.node_cert("fp-old")
        self.start_fastpath("fp-old", cert, key)
        self.wait_in_sync("fp-old", 0)
        self.ca.issue(cert, key, "fp-old", "weir-node", expired=True)
        self.mgmt.stop()
        self.start_mgmt()
        self.wait_log(r"warning tls: 127\.0\.0\.1:\d+: TLS handshake refused: certificate verify failed "
                      r"\(certificate has expired\)")
        # Signed by another CA.
        cert, key = self.node_cert("fp-other", ca=self.other_ca)
        self.start_fastpath("fp-other", cert, key)
        self.wait_log(r"127\.0\.0\.1:\d+: TLS handshake refused: certificate verify failed "
                      r"\(unable to get local issuer certificate\)")
        # A certificate for another node.
        cert, key = self.node_cert("fp-3", cn="fp-somebody")
        self.start_fastpath("fp-3", cert, key)
        self.wait_log(r"refused: node certificate is for 'fp-somebody', its HELLO says 'fp-3'")
        self.assertGreaterEqual(self.mgmt_metrics().value("weir_mgmt_tls_handshake_failures_total"), 2)
        self.assertGreaterEqual(self.mgmt_metrics().value("weir_mgmt_peer_errors_total", reason="certificate"), 1)
        # None of them is connected, nor in sync.
        for node_id in ("fp-other", "fp-old", "fp-3"):
            n = self.node(node_id)
            self.assertTrue(n is None or not n["connected"], n)

    def test_weirctl_needs_an_operator_certificate(self):
        # No certificate at all: plain TCP on a TLS port.
        r = self.weirctl("status", cert="none")
        self.assertEqual(r.returncode, 2, r.stdout)
        self.wait_log(r"TLS handshake refused")
        # Python's ssl without a client certificate: refused in the handshake.
        ctx = ssl.create_default_context(cafile=self.ca.ca)
        ctx.check_hostname = False
        with self.assertRaises((ssl.SSLError, ConnectionError)):
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw:
                with ctx.wrap_socket(raw) as s:
                    s.sendall(b"x")
                    s.recv(10)
        self.wait_log(r"TLS handshake refused: peer did not return a certificate")
        # A node's certificate may not send requests.
        cert, key = self.node_cert("fp-9")
        r = self.weirctl("status", cert=cert, key=key)
        self.assertEqual(r.returncode, 1, "weir-mgmt refused the request")
        self.assertIn("it may not send REQUEST", r.stderr)
        # A client certificate from another CA: the handshake fails, weirctl says why.
        other_cert, other_key = self.path("mallory.pem"), self.path("mallory.key")
        self.other_ca.issue(other_cert, other_key, "mallory", "weir-operator")
        r = self.weirctl("status", cert=other_cert, key=other_key)
        self.assertEqual(r.returncode, 2)
        self.assertRegex(r.stderr, r"TLS|alert")
        # The right one works.
        self.assertEqual(self.weirctl("status").returncode, 0)

    def test_renewed_mgmt_certificate_is_taken_without_dropping_nodes(self):
        cert, key = self.node_cert("fp-1")
        fp = self.start_fastpath("fp-1", cert, key)
        self.wait_in_sync("fp-1", 0)
        self.assertEqual(int(self.peer_serial(), 16), int(self.mgmt_serial, 16))
        renewed = self.ca.issue(self.mgmt_cert, self.mgmt_key, "weir-mgmt")
        self.wait_log(r"TLS certificate reloaded: .*weir-mgmt, expires ")
        self.assertEqual(int(self.peer_serial(), 16), int(renewed, 16))
        # openssl s_client sees it too.
        out = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{self.port}", "-cert", self.op_cert,
                              "-key", self.op_key, "-CAfile", self.ca.ca, "-verify_return_error"],
                             input="", capture_output=True, text=True, timeout=10)
        self.assertIn("Verify return code: 0 (ok)", out.stdout)
        leaf = subprocess.run(["openssl", "x509", "-noout", "-serial"], input=out.stdout, capture_output=True,
                              text=True).stdout
        self.assertEqual(int(leaf.strip().split("=", 1)[1], 16), int(renewed, 16))
        # The node's session was kept: no reconnection, and the next version reaches it on it.
        self.assertEqual(self.weirctl("tag", "add", "a.example", "ecs=on").returncode, 0)
        self.wait_in_sync("fp-1", 1)
        self.assertNotIn("disconnected", self.mgmt.stderr_text())
        self.assertEqual(fp.metrics().value("weir_mgmt_snapshot_version"), 1)
        # A bad new file: logged, the previous context kept.
        with open(self.mgmt_key, "w") as f:
            f.write("not a key\n")
        self.wait_log(r"TLS certificate not reloaded \(the previous one is kept\)")
        self.assertEqual(int(self.peer_serial(), 16), int(renewed, 16))
        # SIGHUP reloads too (here: the good files back).
        self.ca.issue(self.mgmt_cert, self.mgmt_key, "weir-mgmt")
        self.wait_log(r"TLS certificate reloaded", count=2)
        os.kill(self.mgmt.pid, signal.SIGHUP)
        self.wait_log(r"TLS certificate reloaded", count=3)

    def test_renewed_node_certificate_is_used_at_the_next_session(self):
        cert, key = self.node_cert("fp-1")
        self.start_fastpath("fp-1", cert, key)
        self.wait_in_sync("fp-1", 0)
        # A "renewal" from the wrong CA, then a new session (weir-mgmt restarts):
        # the node presents the new file, and is refused.
        self.other_ca.issue(cert, key, "fp-1", "weir-node")
        self.mgmt.stop()
        self.start_mgmt()
        self.wait_log(r"TLS handshake refused: certificate verify failed \(unable to get local issuer")
        n = self.node("fp-1")
        self.assertFalse(n["connected"], n)
        # The right renewal: taken at the node's next attempt.
        self.ca.issue(cert, key, "fp-1", "weir-node")
        self.wait_in_sync("fp-1", 0, timeout=20)


class MgmtTlsConfigTest(unittest.TestCase):
    """--check of weir-mgmt's [tls] and a node's tls_* files."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="weir-mgmt-tls-check-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.ca = ClientCa(self.dir)

    def check(self, relpath, text):
        path = os.path.join(self.dir, "c.toml")
        with open(path, "w") as f:
            f.write(text)
        return weirtest.run([weirtest.binary(BUILD_DIR, relpath), "-c", path, "--check"])

    def test_mgmt_check(self):
        cert, key = os.path.join(self.dir, "m.pem"), os.path.join(self.dir, "m.key")
        self.ca.issue(cert, key, "weir-mgmt")
        base = f'[mgmt]\nlisten = "127.0.0.1:0"\ndatabase = "db"\n[tls]\ncert_file = "{cert}"\nkey_file = "{key}"\n'
        r = self.check("mgmt/weir-mgmt", base + f'ca_file = "{self.ca.ca}"\n')
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.check("mgmt/weir-mgmt", base + 'ca_file = "missing.pem"\n')
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("missing.pem: cannot read the CA file", r.stderr)
        old, old_key = os.path.join(self.dir, "o.pem"), os.path.join(self.dir, "o.key")
        self.ca.issue(old, old_key, "weir-mgmt", expired=True)
        r = self.check("mgmt/weir-mgmt", f'[mgmt]\nlisten = "127.0.0.1:0"\ndatabase = "db"\n[tls]\n'
                       f'cert_file = "{old}"\nkey_file = "{old_key}"\nca_file = "{self.ca.ca}"\n')
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("has expired", r.stderr)
        # The key of another certificate.
        r = self.check("mgmt/weir-mgmt", f'[mgmt]\nlisten = "127.0.0.1:0"\ndatabase = "db"\n[tls]\n'
                       f'cert_file = "{cert}"\nkey_file = "{old_key}"\nca_file = "{self.ca.ca}"\n')
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("does not belong to the certificate", r.stderr)

    def test_node_check(self):
        cert, key = os.path.join(self.dir, "n.pem"), os.path.join(self.dir, "n.key")
        self.ca.issue(cert, key, "fp-1", "weir-node", expired=True)
        section = (f'\n[mgmt]\naddress = "127.0.0.1:1"\nnode_id = "fp-1"\nstate_dir = "{self.dir}/s"\n'
                   f'tls_cert_file = "{cert}"\ntls_key_file = "{key}"\ntls_ca_file = "{self.ca.ca}"\n')
        r = self.check("fastpath/weir-fastpath", weirtest.fastpath_config(["127.0.0.1:9"]) + section)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("has expired", r.stderr)
        self.ca.issue(cert, key, "fp-1", "weir-node")
        r = self.check("fastpath/weir-fastpath", weirtest.fastpath_config(["127.0.0.1:9"]) + section)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.check("fastpath/weir-fastpath", weirtest.fastpath_config(["127.0.0.1:9"]) +
                       f'\n[mgmt]\nnode_id = "fp-1"\nstate_dir = "{self.dir}/s"\ntls_cert_file = "{cert}"\n')
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("go together", r.stderr)


if __name__ == "__main__":
    unittest.main()
