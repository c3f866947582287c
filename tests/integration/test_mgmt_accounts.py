"""Black-box tests of HTTPDNS accounts in the management plane (docs/mgmt.md#httpdns-accounts):
weirctl account add/ls/rotate/retire/set/rm against weir-mgmt, pushed to a
weir-fastpath node, which keeps them in its private snapshot file and
answers HTTPDNS with them (signed requests checked with Python's hmac). A
secret is shown once, by the add or rotate that made it, and never in a
listing, an audit entry or a log line of weir-mgmt or the node; weir-recursor
nodes are not given the accounts. Without [mgmt], the node reads them from
[httpdns] accounts_file, at start and on reload.

Run: python3 tests/integration/test_mgmt_accounts.py --build-dir build
"""

import hashlib
import hmac
import json
import os
import re
import shutil
import stat
import struct
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest.zones import zone  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()

SECRET = re.compile(r"\b[0-9a-f]{64}\b")


def fingerprint(secret: str) -> str:
    """What weirctl account ls shows of a secret (docs/mgmt.md)."""
    return hashlib.sha256(secret.encode()).hexdigest()[:12]


def read_snapshot_file(path: str) -> dict:
    """A node's stored snapshot (docs/mgmt.md): "weir-snapshot/1\\n", a
    checksum line, then the SNAPSHOT frame: u32 length, u8 type 2, fields of
    u32 length + bytes (version, tags, citymap, origin[, accounts])."""
    with open(path, "rb") as f:
        data = f.read()
    magic = b"weir-snapshot/1\n"
    assert data.startswith(magic), data[:32]
    body = data[len(magic) + 17:]
    (length,) = struct.unpack(">I", body[:4])
    assert length == len(body) - 4 and body[4] == 2, (length, len(body), body[4])
    fields, pos = [], 5
    while pos < len(body):
        (n,) = struct.unpack(">I", body[pos:pos + 4])
        fields.append(body[pos + 4:pos + 4 + n].decode())
        pos += 4 + n
    return {"version": int(fields[0]), "tags": fields[1], "citymap": fields[2], "origin": fields[3],
            "accounts": fields[4] if len(fields) > 4 else ""}


def httpdns(port: int, target: str) -> tuple:
    """GET http://127.0.0.1:port/target: (HTTP status, the JSON body's "code" or "")."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{target}", timeout=10) as r:
            status, body = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    return status, json.loads(body).get("code", "")


def signed_target(account: str, secret: str, host: str = "www.example.net") -> str:
    """A single-API request signed as docs/httpdns.md says: HMAC-SHA256 of
    PATH?PARAMS (every parameter but s, sorted), valid for 5 minutes."""
    exp = int(time.time()) + 300
    path = f"/{account}/d"
    sig = hmac.new(secret.encode(), f"{path}?exp={exp}&host={host}".encode(), hashlib.sha256).hexdigest()
    return f"{path}?host={host}&exp={exp}&s={sig}"


def httpdns_section(port: int, accounts_file: str = "") -> str:
    text = f"\n[httpdns]\nenabled = true\nhttp_port = {port}\n"
    return text + (f"accounts_file = {json.dumps(accounts_file)}\n" if accounts_file else "")


def account_lines(snapshot: dict) -> dict:
    """The accounts of a snapshot by name: {name: {"unsigned": ..., "secret": [...]}}."""
    out = {}
    for line in snapshot["accounts"].splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        words = line.split()
        acct = {"secret": []}
        for w in words[1:]:
            k, v = w.split("=", 1)
            if k == "secret":
                acct["secret"].append(v)
            else:
                acct[k] = v
        out[words[0]] = acct
    return out


class MgmtAccountsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="weir-mgmt-accounts-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=zone("example.net.", rname="admin"))
        self.addCleanup(self.sim.stop)
        self.mgmt_port = weirtest.free_port(udp_and_tcp=False)
        self.mgmt = weirtest.Mgmt(BUILD_DIR, self.dir, port=self.mgmt_port)
        self.addCleanup(lambda: self.mgmt.stop())
        self.secrets = []  # every secret this test made or gave: none may leak

    def start_fastpath(self, node_id="fp-1", accounts_file=""):
        self.http_port = weirtest.free_port(udp_and_tcp=False)
        config = weirtest.fastpath_config([f"{self.sim.host}:{self.sim.port}"]) + weirtest.mgmt_node_section(
            self.mgmt.address, node_id, self.mgmt.token_file, os.path.join(self.dir, node_id)) + \
            httpdns_section(self.http_port, accounts_file)
        fp = weirtest.Fastpath(BUILD_DIR, config, extra_args=["--log-level", "debug"])
        self.addCleanup(fp.stop)
        return fp

    def ctl_ok(self, *args):
        r = self.mgmt.weirctl(*args)
        self.assertEqual(r.returncode, 0, f"weirctl {' '.join(args)}: {r.stdout}{r.stderr}")
        return r

    def new_secret(self, r) -> str:
        """The one secret an add/rotate printed, printed once."""
        found = SECRET.findall(r.stdout)
        self.assertEqual(len(found), 1, r.stdout)
        self.assertEqual(r.stdout.count(found[0]), 1, r.stdout)
        self.assertNotIn(found[0], r.stderr)
        self.assertIn(f"fingerprint {fingerprint(found[0])}", r.stdout)
        self.secrets.append(found[0])
        return found[0]

    def auth_code(self, target: str) -> str:
        """The node's HTTPDNS verdict: "" served, else the refusal's code."""
        status, code = httpdns(self.http_port, target)
        return code if status != 200 else ""

    def stored(self, node_id="fp-1") -> dict:
        path = os.path.join(self.dir, node_id, "snapshot")
        mode = stat.S_IMODE(os.stat(path).st_mode)
        self.assertEqual(mode, 0o600, f"{path} has mode {oct(mode)}: it holds the secrets")
        return read_snapshot_file(path)

    def version(self) -> int:
        return self.mgmt.weirctl_json("status")["version"]

    def ls(self) -> dict:
        """`account ls` as JSON, checked against the text form: fingerprints, never a secret."""
        text = self.ctl_ok("account", "ls").stdout
        doc = self.mgmt.weirctl_json("account", "ls")
        raw = json.dumps(doc)
        for s in self.secrets:
            self.assertNotIn(s, text)
            self.assertNotIn(s, raw)
        for a in doc["accounts"]:
            self.assertIn(a["name"], text)
            for f in a["fingerprints"]:
                self.assertIn(f, text)
        return {a["name"]: a for a in doc["accounts"]}

    def assert_no_secret_anywhere(self, *logs):
        audit = json.dumps(self.mgmt.weirctl_json("audit", "--limit", "1000"))
        for s in self.secrets:
            self.assertNotIn(s, audit)
            self.assertNotIn(s, self.mgmt.process.stderr_text(), "weir-mgmt logged a secret")
            for name, text in logs:
                self.assertNotIn(s, text, f"{name} logged a secret")

    def test_account_lifecycle_reaches_the_node(self):
        fp = self.start_fastpath()
        # add: a new 64-hex secret, printed once; the node gets it.
        r = self.ctl_ok("account", "add", "acme", "--legacy-md5", "on", "--rps", "100")
        first = self.new_secret(r)
        v = self.version()
        self.assertEqual(v, 1)
        self.mgmt.wait_in_sync("fp-1", v)
        snap = self.stored()
        self.assertEqual(snap["version"], v)
        self.assertEqual(account_lines(snap),
                         {"acme": {"unsigned": "off", "legacy_md5": "on", "rps": "100", "secret": [first]}})
        accounts = self.ls()
        self.assertEqual(accounts["acme"]["secrets"], 1)
        self.assertEqual(accounts["acme"]["fingerprints"], [fingerprint(first)])
        self.assertEqual((accounts["acme"]["unsigned"], accounts["acme"]["legacy_md5"], accounts["acme"]["rps"]),
                         (False, True, 100))
        self.assertIsNone(accounts["acme"]["rotated"])
        # The node answers with it: signed with its secret, or refused.
        self.assertEqual(self.auth_code(signed_target("acme", first)), "")
        self.assertEqual(self.auth_code(signed_target("acme", "not-the-secret-0123456789")), "InvalidSignature")
        self.assertEqual(self.auth_code("/acme/d?host=www.example.net"), "UnsignedInterfaceDisabled")
        self.assertEqual(self.auth_code("/nobody/d?host=www.example.net"), "InvalidAccount")

        # An existing name and an invalid one are refused; nothing changes.
        r = self.mgmt.weirctl("account", "add", "acme")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("exists", r.stderr)
        self.assertIsNone(SECRET.search(r.stdout + r.stderr))
        r = self.mgmt.weirctl("account", "add", "no/slash")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("not an account name", r.stderr)
        r = self.mgmt.weirctl("account", "add", "bad", "--unsigned", "maybe")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(self.version(), v)

        # rotate: the new secret current, the old one still live.
        second = self.new_secret(self.ctl_ok("account", "rotate", "acme"))
        self.assertNotIn(first, self.ctl_ok("account", "ls").stdout)
        v = self.version()
        self.mgmt.wait_in_sync("fp-1", v)
        self.assertEqual(account_lines(self.stored())["acme"]["secret"], [second, first])
        accounts = self.ls()
        self.assertEqual(accounts["acme"]["secrets"], 2)
        self.assertEqual(accounts["acme"]["fingerprints"], [fingerprint(second), fingerprint(first)])
        self.assertIsNotNone(accounts["acme"]["rotated"])
        # Both live on the node: the apps move over without a failure.
        self.assertEqual(self.auth_code(signed_target("acme", second)), "")
        self.assertEqual(self.auth_code(signed_target("acme", first)), "")

        # rotate again before retiring: the oldest is dropped, two stay live.
        third = self.new_secret(self.ctl_ok("account", "rotate", "acme"))
        v = self.version()
        self.mgmt.wait_in_sync("fp-1", v)
        self.assertEqual(account_lines(self.stored())["acme"]["secret"], [third, second])
        self.assertNotIn(first, self.stored()["accounts"])
        self.assertEqual(self.auth_code(signed_target("acme", first)), "InvalidSignature")

        # retire: the end of the overlap.
        self.ctl_ok("account", "retire", "acme")
        v = self.version()
        self.mgmt.wait_in_sync("fp-1", v)
        self.assertEqual(account_lines(self.stored())["acme"]["secret"], [third])
        self.assertEqual(self.ls()["acme"]["secrets"], 1)
        self.assertEqual(self.auth_code(signed_target("acme", second)), "InvalidSignature")
        self.assertEqual(self.auth_code(signed_target("acme", third)), "")
        r = self.mgmt.weirctl("account", "retire", "acme")
        self.assertEqual(r.returncode, 1, "one secret: nothing to retire")

        # set: only what is given changes.
        self.ctl_ok("account", "set", "acme", "--unsigned", "on", "--rps", "5")
        v = self.version()
        self.mgmt.wait_in_sync("fp-1", v)
        self.assertEqual(account_lines(self.stored())["acme"],
                         {"unsigned": "on", "legacy_md5": "on", "rps": "5", "secret": [third]})
        self.assertEqual(self.auth_code("/acme/d?host=www.example.net"), "")

        # A secret from a file: taken, and not printed back.
        given = "operator-given-secret-0123456789"
        self.secrets.append(given)
        path = os.path.join(self.dir, "beta.secret")
        with open(path, "w") as f:
            f.write(given + "\n")
        r = self.ctl_ok("account", "add", "beta", "--secret-file", path)
        self.assertNotIn(given, r.stdout)
        self.assertIsNone(SECRET.search(r.stdout))
        self.assertIn(fingerprint(given), r.stdout)
        v = self.version()
        self.mgmt.wait_in_sync("fp-1", v)
        self.assertEqual(account_lines(self.stored())["beta"]["secret"], [given])
        self.assertEqual(self.ls()["beta"]["fingerprints"], [fingerprint(given)])
        # A bad secret file is refused without showing it.
        bad = "has spaces in it, so refused"
        with open(path, "w") as f:
            f.write(bad + "\n")
        r = self.mgmt.weirctl("account", "rotate", "beta", "--secret-file", path)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertNotIn(bad, r.stdout + r.stderr)

        # rm: gone from the node too.
        self.ctl_ok("account", "rm", "acme")
        v = self.version()
        self.mgmt.wait_in_sync("fp-1", v)
        self.assertEqual(list(account_lines(self.stored())), ["beta"])
        self.ctl_ok("account", "rm", "beta")
        v = self.version()
        self.mgmt.wait_in_sync("fp-1", v)
        self.assertEqual(self.stored()["accounts"], "")
        self.assertEqual(self.ls(), {})
        self.assertEqual(self.auth_code("/acme/d?host=www.example.net"), "InvalidAccount")

        audit = [(e["action"], e["detail"].split()[0]) for e in self.mgmt.weirctl_json("audit")]
        self.assertEqual(audit, [("account add", "acme"), ("account rotate", "acme"), ("account rotate", "acme"),
                                 ("account retire", "acme"), ("account set", "acme"), ("account add", "beta"),
                                 ("account rm", "acme"), ("account rm", "beta")])
        self.assertIn("account acme added", self.mgmt.process.stderr_text())
        self.assert_no_secret_anywhere(("weir-fastpath", fp.process.stderr_text()))

    def test_node_restarts_from_its_stored_accounts(self):
        fp = self.start_fastpath()
        secret = self.new_secret(self.ctl_ok("account", "add", "acme", "--unsigned", "on"))
        self.mgmt.wait_in_sync("fp-1", 1)
        log = fp.process.stderr_text()
        fp.stop()
        self.mgmt.stop()
        # mgmt down: the node starts from its file, accounts included.
        fp2 = self.start_fastpath()
        self.assertIn("starting from stored mgmt snapshot version 1", fp2.process.stderr_text())
        self.assertEqual(account_lines(self.stored())["acme"]["secret"], [secret])
        self.assertEqual(self.auth_code(signed_target("acme", secret)), "")
        # mgmt back with the same database: the node is in sync, nothing to push.
        self.mgmt = weirtest.Mgmt(BUILD_DIR, self.dir, port=self.mgmt_port)
        self.mgmt.wait_in_sync("fp-1", 1, timeout=15)
        self.assertEqual(account_lines(self.stored())["acme"]["secret"], [secret])
        self.assert_no_secret_anywhere(("weir-fastpath", log), ("weir-fastpath (restarted)",
                                                                fp2.process.stderr_text()))

    def test_recursors_are_not_given_the_accounts(self):
        self.start_fastpath()
        config = weirtest.recursor_config(forwarders=[f"{self.sim.host}:{self.sim.port}"]) + \
            weirtest.mgmt_node_section(self.mgmt.address, "rec-1", self.mgmt.token_file,
                                       os.path.join(self.dir, "rec-1"))
        rec = weirtest.Recursor(BUILD_DIR, config)
        self.addCleanup(rec.stop)
        self.ctl_ok("tag", "add", "example.net", "ecs=on")
        secret = self.new_secret(self.ctl_ok("account", "add", "acme"))
        for node in ("fp-1", "rec-1"):
            self.mgmt.wait_in_sync(node, 2)
        self.assertEqual(account_lines(self.stored("fp-1"))["acme"]["secret"], [secret])
        rec_snap = self.stored("rec-1")
        self.assertEqual(rec_snap["version"], 2)
        self.assertIn("example.net.", rec_snap["tags"])
        self.assertEqual(rec_snap["accounts"], "")
        self.assert_no_secret_anywhere(("weir-recursor", rec.process.stderr_text()))

    def test_with_mgmt_the_accounts_file_is_ignored(self):
        given = "file-secret-0123456789abcdef"
        self.secrets.append(given)
        path = os.path.join(self.dir, "accounts")
        with open(path, "w") as f:
            f.write(f"local unsigned=on secret={given}\n")
        fp = self.start_fastpath(accounts_file=path)
        self.assertRegex(fp.process.stderr_text(), r"accounts_file .* is ignored")
        self.assertEqual(self.auth_code("/local/d?host=www.example.net"), "InvalidAccount")
        secret = self.new_secret(self.ctl_ok("account", "add", "acme", "--unsigned", "on"))
        self.mgmt.wait_in_sync("fp-1", 1)
        self.assertEqual(self.auth_code("/acme/d?host=www.example.net"), "")
        self.assertEqual(self.auth_code(signed_target("acme", secret)), "")
        self.assertEqual(self.auth_code("/local/d?host=www.example.net"), "InvalidAccount")
        self.assert_no_secret_anywhere(("weir-fastpath", fp.process.stderr_text()))


class StandaloneAccountsTest(unittest.TestCase):
    """A node without [mgmt]: the accounts come from [httpdns] accounts_file."""

    SECRET_A = "standalone-secret-a-0123456789"
    SECRET_B = "standalone-secret-b-0123456789"

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="weir-accounts-file-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.sim = weirtest.GslbSim(BUILD_DIR, config_text=zone("example.net.", rname="admin"))
        self.addCleanup(self.sim.stop)
        self.accounts = os.path.join(self.dir, "accounts.txt")
        self.socket = os.path.join(self.dir, "control.sock")
        self.http_port = weirtest.free_port(udp_and_tcp=False)
        self.config = weirtest.fastpath_config([f"{self.sim.host}:{self.sim.port}"],
                                               control={"socket": self.socket}) + \
            httpdns_section(self.http_port, self.accounts)

    def write_accounts(self, text):
        with open(self.accounts, "w") as f:
            f.write(text)

    def code(self, target):
        status, code = httpdns(self.http_port, target)
        return code if status != 200 else ""

    def reload(self):
        return weirtest.run([weirtest.binary(BUILD_DIR, "mgmt/weirctl"), "--control", self.socket, "reload"])

    def test_loaded_at_start_and_on_reload_all_or_nothing(self):
        self.write_accounts(f"# the apps\nacme unsigned=on secret={self.SECRET_A}\n")
        fp = weirtest.Fastpath(BUILD_DIR, self.config)
        self.addCleanup(fp.stop)
        self.assertEqual(self.code("/acme/d?host=www.example.net"), "")
        self.assertEqual(self.code("/beta/d?host=www.example.net"), "InvalidAccount")

        self.write_accounts(f"acme secret={self.SECRET_A}\nbeta secret={self.SECRET_B}\n")
        r = self.reload()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("HTTPDNS accounts", r.stdout)
        self.assertEqual(self.code(signed_target("beta", self.SECRET_B)), "")
        self.assertEqual(self.code("/acme/d?host=www.example.net"), "UnsignedInterfaceDisabled")

        # A bad line: refused with the file and the line, nothing changes.
        self.write_accounts(f"acme unsigned=on secret={self.SECRET_A}\nbeta rps=fast secret={self.SECRET_B}\n")
        r = self.reload()
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn(f"{self.accounts}: line 2", r.stderr)
        self.assertEqual(self.code("/acme/d?host=www.example.net"), "UnsignedInterfaceDisabled")
        self.assertEqual(self.code(signed_target("beta", self.SECRET_B)), "")
        fp.stop()
        log = fp.process.stderr_text()

        # The same file refuses the start.
        r = weirtest.run([weirtest.binary(BUILD_DIR, "fastpath/weir-fastpath"), "-c",
                          weirtest.write_temp(self.config, directory=self.dir)], timeout=30)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(f"{self.accounts}: line 2", r.stderr)
        for text in (log, r.stderr, r.stdout):
            self.assertNotIn(self.SECRET_A, text)
            self.assertNotIn(self.SECRET_B, text)


if __name__ == "__main__":
    unittest.main()
