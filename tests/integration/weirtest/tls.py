"""Clients and certificates for the encrypted front's tests (DNS over TLS,
DNS over HTTPS): a throwaway CA and server certificate made with the openssl
tool, a pipelining DoT client on Python's ssl module and an HTTP/2 DoH client
on python3-h2 (Debian's package), each bound to the source address a test
gives (the city of the subscriber)."""

import os
import socket
import ssl
import struct
import subprocess
import time
from typing import Optional, Sequence

import dns.message  # python3-dnspython
import dns.rdatatype


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Certs:
    """A CA and a server certificate for 127.0.0.1 / localhost in `directory`:
    ca.pem, cert.pem (the chain: leaf then CA), key.pem. renew() writes a new
    server certificate (a new serial and subject) over the same files."""

    def __init__(self, directory: str, key: str = "ec", days: int = 30):
        self.dir = directory
        self.ca = os.path.join(directory, "ca.pem")
        self.ca_key = os.path.join(directory, "ca.key")
        self.chain = os.path.join(directory, "cert.pem")
        self.key = os.path.join(directory, "key.pem")
        self.key_type = key
        self._contexts = {}
        newkey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"] if key == "ec" else ["-newkey", "rsa:2048"]
        _openssl("req", "-x509", *newkey, "-nodes", "-keyout", self.ca_key, "-out", self.ca, "-days", "30",
                 "-subj", "/CN=weir test CA")
        self.issue("weir test server", days=days)

    def issue(self, cn: str, days: int = 30, not_before_days: int = 0, chain: Optional[str] = None,
              key: Optional[str] = None) -> None:
        """A server certificate for `cn` signed by the CA, into `chain`/`key`
        (default: the server's files)."""
        chain = chain or self.chain
        key = key or self.key
        csr = os.path.join(self.dir, "server.csr")
        ext = os.path.join(self.dir, "server.ext")
        with open(ext, "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        newkey = (["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"] if self.key_type == "ec"
                  else ["-newkey", "rsa:2048"])
        tmp_key = key + ".new"
        _openssl("req", *newkey, "-nodes", "-keyout", tmp_key, "-out", csr, "-subj", f"/CN={cn}")
        leaf = chain + ".leaf"
        args = ["x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key, "-CAcreateserial", "-out", leaf,
                "-extfile", ext, "-days", str(days)]
        _openssl(*args)
        with open(leaf) as f, open(self.ca) as c, open(chain + ".new", "w") as out:
            out.write(f.read() + c.read())
        os.replace(tmp_key, key)
        os.replace(chain + ".new", chain)
        os.unlink(leaf)

    def client_context(self, alpn: Sequence[str] = ()) -> ssl.SSLContext:
        """One context per ALPN list, kept: a session resumes only on the context that made it."""
        key = tuple(alpn)
        if key not in self._contexts:
            ctx = ssl.create_default_context(cafile=self.ca)
            if alpn:
                ctx.set_alpn_protocols(list(alpn))
            self._contexts[key] = ctx
        return self._contexts[key]


def query_wire(qname: str, qtype: str = "A", qid: int = 0, padding: bool = False, use_edns: bool = True) -> bytes:
    q = dns.message.make_query(qname, qtype, use_edns=0 if use_edns else None,
                               pad=128 if padding else 0)
    q.id = qid
    return q.to_wire()


def addresses(wire: bytes) -> list:
    """The A/AAAA addresses of an answer, in order."""
    m = dns.message.from_wire(wire)
    out = []
    for rrset in m.answer:
        if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
            out += [r.address for r in rrset]
    return out


class DotClient:
    """One DoT connection from `source` (RFC 7858): send() any number of
    queries pipelined, recv() the answers in the order the server sends them."""

    def __init__(self, host: str, port: int, certs: Certs, source: Optional[str] = None, session=None,
                 timeout: float = 5.0, alpn: Sequence[str] = ("dot",)):
        raw = socket.create_connection((host, port), timeout=timeout,
                                       source_address=(source, 0) if source else None)
        self.sock = certs.client_context(alpn).wrap_socket(raw, server_hostname="localhost", session=session)
        self.buf = b""

    def send(self, wire: bytes) -> None:
        self.sock.sendall(struct.pack("!H", len(wire)) + wire)

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self) -> bytes:
        (n,) = struct.unpack("!H", self._read(2))
        return self._read(n)

    def exchange(self, wire: bytes) -> bytes:
        self.send(wire)
        return self.recv()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class DohClient:
    """One DoH connection over HTTP/2 (python3-h2) from `source`: request()
    sends any number of requests on concurrent streams and returns the
    responses as (status, headers dict, body) in stream order."""

    def __init__(self, host: str, port: int, certs: Certs, source: Optional[str] = None, timeout: float = 5.0):
        import h2.config
        import h2.connection
        raw = socket.create_connection((host, port), timeout=timeout,
                                       source_address=(source, 0) if source else None)
        self.sock = certs.client_context(["h2"]).wrap_socket(raw, server_hostname="localhost")
        if self.sock.selected_alpn_protocol() != "h2":
            raise ConnectionError(f"ALPN: the server chose {self.sock.selected_alpn_protocol()!r}, not h2")
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())

    def request(self, reqs: Sequence[tuple], timeout: float = 10.0) -> list:
        """`reqs`: (method, path, body or None). Returns [(status, headers, body)]."""
        import h2.events
        streams = []
        for method, path, body in reqs:
            sid = self.conn.get_next_available_stream_id()
            headers = [(":method", method), (":path", path), (":scheme", "https"), (":authority", "localhost"),
                       ("accept", "application/dns-message")]
            if body is not None:
                headers += [("content-type", "application/dns-message"), ("content-length", str(len(body)))]
            self.conn.send_headers(sid, headers, end_stream=body is None)
            if body is not None:
                self.conn.send_data(sid, body, end_stream=True)
            streams.append(sid)
            self.sock.sendall(self.conn.data_to_send())
        results = {sid: [None, {}, b""] for sid in streams}
        done = set()
        deadline = time.monotonic() + timeout
        while len(done) < len(streams):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(streams) - len(done)} DoH responses missing")
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the server closed the connection")
            for ev in self.conn.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived):
                    hd = dict(ev.headers)
                    results[ev.stream_id][0] = int(hd[":status"])
                    results[ev.stream_id][1] = hd
                elif isinstance(ev, h2.events.DataReceived):
                    results[ev.stream_id][2] += ev.data
                    self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.StreamEnded):
                    done.add(ev.stream_id)
                elif isinstance(ev, h2.events.StreamReset):
                    results[ev.stream_id][0] = -int(ev.error_code)
                    done.add(ev.stream_id)
            out = self.conn.data_to_send()
            if out:
                self.sock.sendall(out)
        return [tuple(results[s]) for s in streams]

    def close(self) -> None:
        try:
            self.conn.close_connection()
            self.sock.sendall(self.conn.data_to_send())
            self.sock.close()
        except OSError:
            pass


class ClientCa:
    """A CA in `directory` that signs weir-mgmt's certificate and the client
    certificates of nodes and operators (subject OU and CN), with `openssl
    ca` so that a certificate may also be made already expired (OpenSSL 3.0's
    x509 has no start/end date option). Files are PEM, keys unencrypted."""

    def __init__(self, directory: str, name: str = "ca"):
        self.dir = os.path.join(directory, name)
        os.makedirs(os.path.join(self.dir, "newcerts"), exist_ok=True)
        self.ca = os.path.join(self.dir, "ca.pem")
        self.ca_key = os.path.join(self.dir, "ca.key")
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                 self.ca_key, "-out", self.ca, "-days", "30", "-subj", f"/CN=weir {name}")
        open(os.path.join(self.dir, "index.txt"), "w").close()
        with open(os.path.join(self.dir, "serial"), "w") as f:
            f.write("1000\n")
        self.config = os.path.join(self.dir, "ca.cnf")
        with open(self.config, "w") as f:
            f.write(f"""[ca]
default_ca = weir
[weir]
database = {self.dir}/index.txt
new_certs_dir = {self.dir}/newcerts
certificate = {self.ca}
private_key = {self.ca_key}
serial = {self.dir}/serial
default_md = sha256
default_days = 30
policy = any
unique_subject = no
copy_extensions = copy
[any]
commonName = supplied
organizationalUnitName = optional
""")

    def issue(self, cert: str, key: str, cn: str, ou: str = "", expired: bool = False) -> str:
        """A certificate for /OU=ou/CN=cn into `cert` and `key` (replaced
        whole, each by a rename); returns its serial (hex, as openssl
        prints it)."""
        csr = cert + ".csr"
        subject = (f"/OU={ou}" if ou else "") + f"/CN={cn}"
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                 key + ".new", "-out", csr, "-subj", subject, "-addext",
                 "subjectAltName=IP:127.0.0.1,DNS:localhost")
        dates = ["-startdate", "20200101000000Z", "-enddate", "20200102000000Z"] if expired else []
        _openssl("ca", "-batch", "-config", self.config, "-in", csr, "-out", cert + ".new", "-notext", *dates)
        os.unlink(csr)
        os.replace(key + ".new", key)
        os.replace(cert + ".new", cert)
        out = subprocess.run(["openssl", "x509", "-in", cert, "-noout", "-serial"], check=True,
                             capture_output=True, text=True).stdout
        return out.strip().split("=", 1)[1]
