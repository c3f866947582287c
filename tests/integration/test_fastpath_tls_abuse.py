"""Black-box tests of the abuse limits of weir-fastpath's encrypted front
([tls]: DNS over TLS, DNS over HTTPS over HTTP/2 and HTTP/1.1), as an
operator sees them: the connection refused or closed, the HTTP status, the
GOAWAY code, and the counter that says why (weir_tls_*, weir_doh_*).

  * handshakes per second per source, connections per source and in all
    (pressure closes the idle longest, full and busy refuses);
  * a handshake that stalls, an HTTP/2 or DoT client that sends nothing;
  * HTTP/2 concurrent streams, header/target/body caps (HTTP/2, HTTP/1.1);
  * clients that never read their answers (DoT, HTTP/2);
  * HTTP/2 rapid reset (CVE-2023-44487), SETTINGS and PING floods;
  * 10,000 idle DoT connections: the server's memory per connection.

The front is started per test on loopback ports the test picks, with a
throwaway EC P-256 CA and server certificate (openssl). Sources are
loopback addresses (127.0.x.y) the client binds. HTTP/2 is spoken frame by
frame (hyperframe and hpack, python3-h2's own codecs) so that a test can
send what a well-behaved client never would. gslb-sim is the upstream:
`www.example.com` (cached after the first query), `large.example.com` (a
15 KB TXT answer, cached) and `huge.example.com` (60 KB, never cached); a
second gslb-sim answers slowly (misses that stay in flight).

Run: python3 tests/integration/test_fastpath_tls_abuse.py --build-dir build
"""

import base64
import collections
import os
import resource
import selectors
import socket
import ssl
import struct
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weirtest  # noqa: E402
from weirtest import split_tcp_frames, tcp_frame  # noqa: E402
from weirtest.zones import record, zone  # noqa: E402

try:
    import hpack  # noqa: E402
    import hyperframe.frame as h2frame  # noqa: E402
except ImportError:  # a Python that is not Debian's (pyenv): Debian's python3-h2 and its codecs
    sys.path.append("/usr/lib/python3/dist-packages")
    import hpack  # noqa: E402
    import hyperframe.frame as h2frame  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()

QNAME = "www.example.com"
ADDRESS = "192.0.2.1"
LARGE = "large.example.com"  # a 15 KB TXT answer: cached (the cache takes up to 16,000 bytes of records)
HUGE = "huge.example.com"    # a 60 KB TXT answer: too large to cache, every query is a miss
ZONES = (zone("example.com.") + record("www", "A", ADDRESS, ttl=300) +
         "\n[[zone.record]]\nname = \"large\"\ntype = \"TXT\"\nttl = 300\ndata = " +
         weirtest.toml_value(["x" * 250] * 60) + "\n" +
         "\n[[zone.record]]\nname = \"huge\"\ntype = \"TXT\"\nttl = 300\ndata = " +
         weirtest.toml_value(["x" * 250] * 240) + "\n")
# Every answer 300 ms late; `hold.slow.example.` answers after 30 s: a query
# for it keeps its connection busy for the whole test.
SLOW_TXT = ["y" * 250] * 4  # a 1 KB TXT answer: it fits the upstream's UDP, padded it is 1,404 bytes
SLOW_ZONES = ("[faults]\nlatency_ms = 300\n" + zone("slow.example.") + "\n[[zone.record]]\nname = \"*.w\"\n"
              "type = \"TXT\"\nttl = 300\ndata = " + weirtest.toml_value(SLOW_TXT) + "\n" +
              "\n[[zone.name]]\nname = \"hold\"\nlatency_ms = 30000\n  [zone.name.default]\n"
              "  addresses = [\"192.0.2.4\"]\n")
HOLD = "hold.slow.example"

# The [tls] of the brief: every test starts from it.
TLS = dict(handshake_timeout_ms=500, handshakes_per_second_per_source=5, max_connections=50,
           max_connections_per_source=10, idle_timeout_ms=1000, lifetime_ms=600000, http_max_streams=100,
           http_max_header_bytes=8192, http_max_body_bytes=65535, connection_buffer_bytes=65536)

SERVER = "127.0.0.1"  # the front listens here; clients bind their own 127.0.x.y
PADDING = 12          # EDNS(0) Padding (RFC 7830): the answers are padded to 468-byte blocks (RFC 8467)

# HTTP/2 (RFC 9113)
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
NO_ERROR, PROTOCOL_ERROR, REFUSED_STREAM, CANCEL, ENHANCE_YOUR_CALM = 0x0, 0x1, 0x7, 0x8, 0xb
SETTINGS_MAX_CONCURRENT_STREAMS, SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_HEADER_LIST_SIZE = 0x3, 0x4, 0x6


# ---------------------------------------------------------------- set-up


def make_certificates(directory):
    """A throwaway EC P-256 CA and a server certificate it signed for
    IP:127.0.0.1 and DNS:localhost, in `directory`: ca.pem, cert.pem, key.pem."""
    def openssl(*args):
        r = weirtest.run(["openssl", *args], timeout=30)
        if r.returncode != 0:
            raise RuntimeError(f"openssl {' '.join(args)}: {r.stderr}")

    p = lambda name: os.path.join(directory, name)  # noqa: E731
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", p("ca.key"))
    openssl("req", "-x509", "-new", "-key", p("ca.key"), "-subj", "/CN=weir test CA", "-days", "2",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
            "-out", p("ca.pem"))
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", p("key.pem"))
    openssl("req", "-new", "-key", p("key.pem"), "-subj", "/CN=localhost", "-out", p("server.csr"))
    with open(p("ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                "extendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", p("server.csr"), "-CA", p("ca.pem"), "-CAkey", p("ca.key"), "-CAcreateserial",
            "-days", "2", "-extfile", p("ext.cnf"), "-out", p("cert.pem"))


def raise_descriptor_limit(want):
    """The soft RLIMIT_NOFILE of this process (inherited by the daemons it
    starts from now on) up to `want` within the hard limit; the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def rss_kib(pid):
    """VmRSS of a process, KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def wait_for(predicate, timeout, what, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


# ---------------------------------------------------------------- DNS over TLS


def query(qname=QNAME, qid=1, pad=False):
    return weirtest.make_query(qname, 1, qid=qid, options=[(PADDING, b"")] if pad else [])


def tcp_connect(port, source, timeout=5.0, rcvbuf=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((source, 0))
    s.settimeout(timeout)
    s.connect((SERVER, port))
    return s


def ask(s, qid, qname=QNAME, timeout=5.0):
    """One query over DoT socket `s`; its answer, or None when the server
    closed the connection instead."""
    s.settimeout(timeout)
    s.sendall(tcp_frame(query(qname, qid)))
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except (ssl.SSLError, OSError):
            return None
        if not chunk:
            return None
        data += chunk
        msgs, data = split_tcp_frames(data)
        if msgs:
            return msgs[0]


def _addresses(answer):
    """The A records of a DNS answer in wire form, as text."""
    return [r.rdata.to_text() for r in weirtest.parse_message(answer).answer if r.type == 1]


def tls_closed(s):
    """True once the server closed TLS socket `s` (close_notify, EOF or
    reset), without blocking; what else it sent is read and dropped."""
    s.setblocking(False)
    try:
        while True:
            if not s.recv(65536):
                return True
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
        return False
    except (ssl.SSLError, OSError):
        return True
    finally:
        try:
            s.setblocking(True)
        except OSError:
            pass


def raw_closed(s):
    """True once the peer closed plain socket `s` (EOF or reset), without blocking."""
    s.setblocking(False)
    try:
        while True:
            if not s.recv(65536):
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        try:
            s.setblocking(True)
        except OSError:
            pass


def close_all(socks):
    for s in socks:
        try:
            s.close()
        except OSError:
            pass


# ---------------------------------------------------------------- HTTP/2, frame by frame


class H2Stream:
    def __init__(self):
        self.status = None
        self.headers = []
        self.body = b""
        self.ended = False
        self.reset = None  # the error code of the server's RST_STREAM


class H2:
    """An HTTP/2 client over TLS (ALPN h2) that writes exactly the frames
    it is told to. It ACKs the server's SETTINGS and PINGs and reopens flow
    control windows as DATA arrives (each unless told not to), and records
    what came back: `settings`, `streams` (status, body, resets),
    `goaway` (error code, last stream id), `closed` (EOF or reset)."""

    def __init__(self, port, source=SERVER, ctx=None, rcvbuf=None, settings=None, timeout=5.0, handshake=True):
        raw = tcp_connect(port, source, timeout, rcvbuf)
        self.sock = ctx.wrap_socket(raw, server_hostname="localhost")
        if self.sock.selected_alpn_protocol() != "h2":
            raise AssertionError(f"ALPN: {self.sock.selected_alpn_protocol()!r}, not h2")
        self.enc, self.dec = hpack.Encoder(), hpack.Decoder()
        self.inbuf = b""
        self.settings = {}
        self.settings_acked = 0
        self.pings_acked = 0
        self.goaway = None
        self.closed = False
        self.closed_at = None
        self.streams = collections.defaultdict(H2Stream)
        self.auto_ack = True
        self.auto_window = True
        self.conn_window = 65535       # what we may still send (RFC 9113 6.9.2)
        self.stream_windows = {}
        self._block = None             # (stream id, header block so far, END_STREAM)
        if handshake:
            self.send(PREFACE, h2frame.SettingsFrame(0, settings or {}))
            self.pump(5, lambda: self.settings and self.settings_acked)
            if not self.settings or not self.settings_acked:
                raise AssertionError("no SETTINGS exchange with the server")

    # -- frames out

    def headers_frame(self, sid, headers, end_stream=True):
        f = h2frame.HeadersFrame(sid, self.enc.encode(headers))
        f.flags.add("END_HEADERS")
        if end_stream:
            f.flags.add("END_STREAM")
        return f

    @staticmethod
    def request_headers(method, path, extra=()):
        return [(":method", method), (":scheme", "https"), (":authority", "localhost"), (":path", path),
                ("accept", "application/dns-message"), *extra]

    def get(self, sid, q=None, extra=(), end_stream=True, path=None):
        q = query(qid=0) if q is None else q
        path = path or "/dns-query?dns=" + base64.urlsafe_b64encode(q).rstrip(b"=").decode()
        return self.headers_frame(sid, self.request_headers("GET", path, extra), end_stream)

    def post_headers(self, sid, length=None, end_stream=False, extra=()):
        h = [("content-type", "application/dns-message")] + list(extra)
        if length is not None:
            h.append(("content-length", str(length)))
        return self.headers_frame(sid, self.request_headers("POST", "/dns-query", h), end_stream)

    @staticmethod
    def data(sid, payload, end_stream=True):
        f = h2frame.DataFrame(sid, payload)
        if end_stream:
            f.flags.add("END_STREAM")
        return f

    @staticmethod
    def rst(sid, code=CANCEL):
        return h2frame.RstStreamFrame(sid, code)

    @staticmethod
    def ping(n):
        return h2frame.PingFrame(0, struct.pack("!Q", n))

    def send(self, *frames):
        """Writes the frames (and bytes) in one go; False when the
        connection is gone."""
        out = b"".join(f if isinstance(f, bytes) else f.serialize() for f in frames)
        for f in frames:
            if isinstance(f, h2frame.DataFrame):
                self.conn_window -= len(f.data)
                self.stream_windows[f.stream_id] = self.stream_windows.get(f.stream_id, self._initial()) - len(f.data)
        try:
            self.sock.sendall(out)
            return True
        except (ssl.SSLError, OSError):
            self._closed()
            return False

    def _initial(self):
        return self.settings.get(SETTINGS_INITIAL_WINDOW_SIZE, 65535)

    def send_body(self, sid, body, end_stream=True, timeout=5.0):
        """DATA for stream `sid` within the server's flow-control windows
        (waiting for its WINDOW_UPDATEs), 16 KB frames."""
        off = 0
        deadline = time.monotonic() + timeout
        while off < len(body):
            room = min(self.conn_window, self.stream_windows.get(sid, self._initial()), 16384, len(body) - off)
            if room <= 0:
                if time.monotonic() > deadline or self.closed:
                    raise AssertionError(f"no flow-control window to send the body of stream {sid} "
                                         f"({off} of {len(body)} bytes sent)")
                self.pump(0.2)
                continue
            last = off + room == len(body)
            if not self.send(self.data(sid, body[off:off + room], end_stream and last)):
                raise AssertionError(f"the connection closed while sending the body of stream {sid}")
            off += room

    # -- frames in

    def _closed(self):
        if not self.closed:
            self.closed = True
            self.closed_at = time.monotonic()

    def pump(self, timeout, until=None):
        """Reads and handles frames for up to `timeout` s, or until
        `until()` holds or the connection closes; returns until()'s value
        (None without one)."""
        deadline = time.monotonic() + timeout
        while True:
            if until is not None and until():
                return True
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                return until() if until is not None else None
            self.sock.settimeout(min(left, 0.5))
            try:
                chunk = self.sock.recv(65536)
            except (socket.timeout, ssl.SSLWantReadError):
                continue
            except (ssl.SSLError, OSError):
                self._closed()
                continue
            if not chunk:
                self._closed()
                continue
            self.inbuf += chunk
            self._parse()

    def _parse(self):
        while len(self.inbuf) >= 9:
            frame, length = h2frame.Frame.parse_frame_header(memoryview(self.inbuf[:9]))
            if len(self.inbuf) < 9 + length:
                return
            frame.parse_body(memoryview(self.inbuf[9:9 + length]))
            self.inbuf = self.inbuf[9 + length:]
            self._handle(frame)

    def _handle(self, f):
        replies = []
        if isinstance(f, h2frame.SettingsFrame):
            if "ACK" in f.flags:
                self.settings_acked += 1
            else:
                old = self._initial()
                self.settings.update(f.settings)
                for sid in self.stream_windows:
                    self.stream_windows[sid] += self._initial() - old
                if self.auto_ack:
                    replies.append(h2frame.SettingsFrame(0, flags=["ACK"]))
        elif isinstance(f, h2frame.PingFrame):
            if "ACK" in f.flags:
                self.pings_acked += 1
            elif self.auto_ack:
                replies.append(h2frame.PingFrame(0, f.opaque_data, flags=["ACK"]))
        elif isinstance(f, (h2frame.HeadersFrame, h2frame.ContinuationFrame)):
            if isinstance(f, h2frame.HeadersFrame):
                self._block = (f.stream_id, f.data, "END_STREAM" in f.flags)
            else:
                self._block = (self._block[0], self._block[1] + f.data, self._block[2])
            if "END_HEADERS" in f.flags:
                sid, block, end = self._block
                self._block = None
                st = self.streams[sid]
                st.headers = [(k.decode() if isinstance(k, bytes) else k, v.decode() if isinstance(v, bytes) else v)
                              for k, v in self.dec.decode(block)]
                for k, v in st.headers:
                    if k == ":status":
                        st.status = int(v)
                st.ended = st.ended or end
        elif isinstance(f, h2frame.DataFrame):
            st = self.streams[f.stream_id]
            st.body += f.data
            st.ended = st.ended or "END_STREAM" in f.flags
            n = f.flow_controlled_length
            if n and self.auto_window:
                replies.append(h2frame.WindowUpdateFrame(0, n))
                if not st.ended:
                    replies.append(h2frame.WindowUpdateFrame(f.stream_id, n))
        elif isinstance(f, h2frame.RstStreamFrame):
            self.streams[f.stream_id].reset = f.error_code
        elif isinstance(f, h2frame.GoAwayFrame):
            self.goaway = (f.error_code, f.last_stream_id)
        elif isinstance(f, h2frame.WindowUpdateFrame):
            if f.stream_id == 0:
                self.conn_window += f.window_increment
            else:
                self.stream_windows[f.stream_id] = (self.stream_windows.get(f.stream_id, self._initial()) +
                                                    f.window_increment)
        if replies and not self.closed:
            self.send(*replies)

    # -- conveniences

    def done(self, *sids):
        return lambda: all(self.streams[s].ended or self.streams[s].reset is not None for s in sids)

    def wait_closed(self, timeout):
        """Reads until the server closes; True when it did within `timeout`."""
        self.pump(timeout, lambda: self.closed)
        return self.closed

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def dns_answer_ok(body):
    """A DoH 200 body with the test name's address."""
    return _addresses(body) == [ADDRESS]


# ---------------------------------------------------------------- HTTP/1.1


def _http1_response(data):
    """(status, head, body) of a whole HTTP/1.1 response at the start of
    `data`, or None while it is incomplete."""
    head, sep, rest = data.partition(b"\r\n\r\n")
    if not sep:
        return None
    lines = head.decode(errors="replace").split("\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    if len(rest) < length:
        return None
    return int(lines[0].split()[1]), head.decode(errors="replace"), rest[:length]


def http1_exchange(port, ctx, request, body=b"", source=SERVER, timeout=5.0):
    """One HTTP/1.1 request over TLS (ALPN http/1.1): its head and `body`
    written while the response is read, as a real client does (the server
    may answer before the body is all sent). Returns (status or None, the
    response head, its body, how the connection was after the response:
    "close" (the server closed it: close_notify or EOF), "reset" (an error,
    the response incomplete or not), or "open" (still open 0.3 s later))."""
    raw = tcp_connect(port, source, timeout)
    s = ctx.wrap_socket(raw, server_hostname="localhost")
    assert s.selected_alpn_protocol() in ("http/1.1", None), s.selected_alpn_protocol()
    out = request + body
    s.setblocking(False)
    sent, data, ended, response = 0, b"", None, None
    deadline = time.monotonic() + timeout
    settle = None
    try:
        while time.monotonic() < deadline and ended is None:
            progress = False
            if sent < len(out):
                try:
                    sent += s.send(out[sent:sent + 16384])
                    progress = True
                except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                    pass
                except (ssl.SSLError, OSError):
                    sent = len(out)  # the server stopped reading: what did it say?
            try:
                chunk = s.recv(65536)
                if not chunk:
                    ended = "close"
                    break
                data += chunk
                progress = True
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                pass
            except (ssl.SSLError, OSError):
                ended = "reset"
                break
            if response is None:
                response = _http1_response(data)
                if response is not None:
                    settle = time.monotonic() + 0.3
            if settle is not None and time.monotonic() > settle:
                ended = "open"
            if not progress:
                time.sleep(0.005)
    finally:
        s.close()
    if response is None:
        response = _http1_response(data) or (None, data.decode(errors="replace"), b"")
    return (*response, ended)


# ---------------------------------------------------------------- the tests


class FastpathTlsAbuseTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("openssl")
        cls.tmp = tempfile.TemporaryDirectory()
        cls.addClassCleanup(cls.tmp.cleanup)
        make_certificates(cls.tmp.name)
        cls.ca = os.path.join(cls.tmp.name, "ca.pem")
        cls.sim = weirtest.GslbSim(BUILD_DIR, config_text=ZONES)
        cls.addClassCleanup(cls.sim.stop)
        cls.slow = weirtest.GslbSim(BUILD_DIR, config_text=SLOW_ZONES)
        cls.addClassCleanup(cls.slow.stop)

    # -- the front

    def start(self, upstream=None, upstream_keys=None, **tls):
        """weir-fastpath with the brief's [tls] (keys in `tls` override it)
        on two free ports; self.dot / self.doh are its ports."""
        sim = upstream or self.sim
        keys = dict(TLS, **tls)
        for attempt in range(3):
            dot, doh = weirtest.free_port(), weirtest.free_port()
            while doh == dot:
                doh = weirtest.free_port()
            cfg = weirtest.fastpath_config([f"{sim.host}:{sim.port}"], upstream=upstream_keys)
            cfg += "\n" + weirtest.toml_tables([("tls", dict(dot_port=dot, doh_port=doh, **keys))])
            cfg += ("[[tls.certificate]]\n"
                    f"chain = {weirtest.toml_value(os.path.join(self.tmp.name, 'cert.pem'))}\n"
                    f"key = {weirtest.toml_value(os.path.join(self.tmp.name, 'key.pem'))}\n")
            try:
                d = weirtest.Fastpath(BUILD_DIR, cfg)
            except RuntimeError as e:  # a port taken between its pick and the bind
                if attempt == 2 or "ddress already in use" not in str(e):
                    raise
                continue
            self.addCleanup(d.stop)
            lines = " ".join(d.process.lines)
            self.assertIn(f"listening dot {SERVER}:{dot}", lines)
            self.assertIn(f"listening doh {SERVER}:{doh}", lines)
            self.dot, self.doh = dot, doh
            return d
        raise AssertionError("unreachable")

    def ctx(self, alpn):
        c = ssl.create_default_context(cafile=self.ca)
        c.set_alpn_protocols([alpn])
        return c

    def dot_connect(self, source, timeout=5.0, rcvbuf=None):
        """A DoT connection from `source`, its handshake done (raises
        ssl.SSLError/OSError when the server refuses it)."""
        raw = tcp_connect(self.dot, source, timeout, rcvbuf)
        try:
            s = self.ctx("dot").wrap_socket(raw, server_hostname="localhost")
        except BaseException:
            raw.close()
            raise
        return s

    def try_dot(self, source, timeout=3.0):
        """A DoT connection from `source`, or None when the handshake fails."""
        try:
            return self.dot_connect(source, timeout)
        except (ssl.SSLError, OSError):
            return None

    def h2(self, source=SERVER, **kw):
        return H2(self.doh, source, self.ctx("h2"), **kw)

    @staticmethod
    def counter(d, name, **labels):
        return d.metrics().value(name, **labels)

    def assert_dot_served(self, source, qid=77):
        s = self.dot_connect(source)
        try:
            a = ask(s, qid)
            self.assertIsNotNone(a, f"a DoT query from {source} was not answered")
            self.assertEqual(_addresses(a), [ADDRESS])
        finally:
            s.close()

    def assert_doh_served(self, source=SERVER):
        h = self.h2(source)
        try:
            h.send(h.get(1))
            h.pump(5, h.done(1))
            self.assertEqual(h.streams[1].status, 200, f"a DoH query from {source} was not answered")
            self.assertTrue(dns_answer_ok(h.streams[1].body))
        finally:
            h.close()

    # ============================================================ 1. handshakes per second

    def test_handshake_rate_per_source_closes_the_excess_at_accept(self):
        d = self.start()
        abuser, other = "127.0.0.21", "127.0.0.22"
        results = []
        start = time.monotonic()
        for _ in range(20):
            s = self.try_dot(abuser)
            results.append(s is not None)
            if s is not None:
                s.close()
        elapsed = time.monotonic() - start
        ok, refused = results.count(True), results.count(False)
        # 5 per second, burst 5: the first five get through, then at most 5
        # more for each second the attempts span.
        self.assertEqual(results[:5], [True] * 5, f"the burst of 5 was not let through: {results}")
        allowed = 5 * (int(elapsed) + 2)
        self.assertLessEqual(ok, allowed, f"{ok} of 20 handshakes in {elapsed:.2f} s from one source: {results}")
        self.assertGreaterEqual(refused, 20 - allowed)
        self.assertGreater(refused, 0)
        wait_for(lambda: self.counter(d, "weir_tls_handshakes_total", transport="dot", result="rate_limited")
                 == refused, 5, f"{refused} rate-limited handshakes to be counted")
        self.assertEqual(self.counter(d, "weir_tls_handshakes_total", transport="dot", result="full"), ok)
        self.assertEqual(self.counter(d, "weir_tls_handshakes_total", transport="dot", result="failed"), 0)
        # Another source is not held back, over DoT nor DoH.
        self.assert_dot_served(other)
        self.assert_doh_served(other)
        # The abuser's budget refills: within two seconds it connects again.
        s = wait_for(lambda: self.try_dot(abuser), 3, "the abuser's handshake budget to refill", interval=0.25)
        s.close()

    # ============================================================ 2. connections per source, in all

    def test_connections_per_source_then_pressure_evicts_the_longest_idle(self):
        d = self.start(handshakes_per_second_per_source=0, idle_timeout_ms=60000)
        socks = {}
        try:
            s1 = "127.0.0.31"
            socks[s1] = [self.dot_connect(s1) for _ in range(10)]
            # The 11th from the source is refused at accept: its handshake fails.
            self.assertIsNone(self.try_dot(s1), "an 11th connection from one source was admitted")
            wait_for(lambda: self.counter(d, "weir_tls_connections_closed_total", reason="per_source_limit") == 1,
                     5, "the per-source refusal to be counted")
            self.assertEqual(self.counter(d, "weir_tls_connections"), 10)
            self.assertIsNotNone(ask(socks[s1][-1], 1), "a connection within the limit was not served")
            self.assert_dot_served("127.0.0.39")  # another source is
            wait_for(lambda: self.counter(d, "weir_tls_connections") == 10, 5, "its connection to be closed")
            # 45 of 50 is pressure: from there each new connection closes the
            # connection idle the longest: the first ones of s1 (its last one
            # asked a query: idle since, not since accept).
            for i in range(2, 6):
                src = f"127.0.0.3{i}"
                socks[src] = []
                for _ in range(10):
                    socks[src].append(self.dot_connect(src))
            latecomer = self.dot_connect("127.0.0.36")
            socks["late"] = [latecomer]
            # 10 + 40 + 1 = 51 admitted into 45 places: 6 evicted.
            wait_for(lambda: self.counter(d, "weir_tls_connections_closed_total", reason="pressure") == 6, 5,
                     "six pressure evictions")
            self.assertEqual(self.counter(d, "weir_tls_connections"), 45)
            closed = [tls_closed(s) for s in socks[s1]]
            self.assertEqual(closed, [True] * 6 + [False] * 4,
                             "pressure did not close the six connections idle the longest")
            self.assertEqual(self.counter(d, "weir_tls_connections_closed_total", reason="max_connections"), 0)
            self.assertIsNotNone(ask(latecomer, 2), "the connection admitted under pressure was not served")
            self.assertIsNotNone(ask(socks["127.0.0.35"][-1], 3))
        finally:
            for group in socks.values():
                close_all(group)

    def test_a_full_table_of_busy_connections_refuses_the_next(self):
        # Every connection owes an answer (a question the slow upstream
        # answers after 30 s): none is idle, so at 50 the 51st is refused.
        d = self.start(upstream=self.slow, handshakes_per_second_per_source=0, idle_timeout_ms=60000,
                       upstream_keys={"timeout_ms": 30000, "attempts": 1, "answer_deadline_ms": 30000})
        socks = []
        try:
            for i in range(50):
                s = self.dot_connect(f"127.0.0.{41 + i // 10}")
                s.sendall(tcp_frame(query(HOLD, qid=i + 1)))
                socks.append(s)
                wait_for(lambda: self.counter(d, "weir_tls_queries_total", transport="dot") == i + 1, 5,
                         f"query {i + 1} to be read")
            self.assertEqual(self.counter(d, "weir_tls_connections"), 50)
            self.assertIsNone(self.try_dot("127.0.0.46"), "a 51st connection was admitted into a full, busy table")
            wait_for(lambda: self.counter(d, "weir_tls_connections_closed_total", reason="max_connections") == 1,
                     5, "the refusal to be counted")
            self.assertEqual(self.counter(d, "weir_tls_connections_closed_total", reason="pressure"), 0)
            self.assertFalse(any(tls_closed(s) for s in socks), "a busy connection was closed")
        finally:
            close_all(socks)

    # ============================================================ 3. stalled handshakes

    def test_a_stalled_handshake_is_closed_after_handshake_timeout(self):
        # Idle timeout far away: a close within 2 s is the handshake timer's.
        d = self.start(idle_timeout_ms=10000)
        bio_in, bio_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = self.ctx("dot").wrap_bio(bio_in, bio_out, server_hostname="localhost")
        with self.assertRaises(ssl.SSLWantReadError):
            obj.do_handshake()
        hello = bio_out.read()
        self.assertGreater(len(hello), 100)
        clients = {
            "silent, DoT": tcp_connect(self.dot, "127.0.0.51"),
            "half a ClientHello, DoT": tcp_connect(self.dot, "127.0.0.52"),
            "silent, DoH": tcp_connect(self.doh, "127.0.0.53"),
            "a ClientHello trickled, DoH": tcp_connect(self.doh, "127.0.0.54"),
        }
        start = time.monotonic()
        clients["half a ClientHello, DoT"].sendall(hello[:len(hello) // 2])
        closed = {}
        sent = 0
        try:
            while len(closed) < len(clients) and time.monotonic() - start < 4:
                trickle = clients["a ClientHello trickled, DoH"]
                if "a ClientHello trickled, DoH" not in closed and sent < len(hello) - 1:
                    try:
                        trickle.sendall(hello[sent:sent + 1])  # one byte every 20 ms, never the last
                        sent += 1
                    except OSError:
                        pass
                for name, s in clients.items():
                    if name not in closed and raw_closed(s):
                        closed[name] = time.monotonic() - start
                time.sleep(0.02)
        finally:
            close_all(clients.values())
        self.assertEqual(set(closed), set(clients), f"still open after 4 s: {set(clients) - set(closed)}")
        for name, t in closed.items():
            self.assertGreaterEqual(t, 0.4, f"{name}: closed after {t:.2f} s, before the handshake timeout")
            self.assertLessEqual(t, 2.0, f"{name}: closed after {t:.2f} s")
        self.assertEqual(self.counter(d, "weir_tls_handshakes_total", transport="dot", result="timeout"), 2)
        self.assertEqual(self.counter(d, "weir_tls_handshakes_total", transport="doh", result="timeout"), 2)
        self.assertEqual(self.counter(d, "weir_tls_connections_closed_total", reason="idle"), 4)
        self.assertEqual(self.counter(d, "weir_tls_connections"), 0)
        self.assert_dot_served("127.0.0.55")

    # ============================================================ 4. idle clients

    def test_idle_http2_and_dot_clients_are_closed_after_idle_timeout(self):
        d = self.start()
        h = self.h2("127.0.0.61")                   # preface, SETTINGS and their ACKs, then nothing
        start = time.monotonic()
        idle_dot = self.dot_connect("127.0.0.62")   # a handshake, then nothing
        asked_once = self.dot_connect("127.0.0.63")
        self.assertIsNotNone(ask(asked_once, 1))
        asked_at = time.monotonic()
        active = self.dot_connect("127.0.0.64")     # a query every 300 ms
        closed = {}
        qid = 2
        try:
            while time.monotonic() - start < 3.5:
                self.assertIsNotNone(ask(active, qid), f"the active DoT client was closed after {qid - 2} queries")
                qid += 1
                h.pump(0.1)
                if h.closed and "h2" not in closed:
                    closed["h2"] = h.closed_at - start
                if "dot" not in closed and tls_closed(idle_dot):
                    closed["dot"] = time.monotonic() - start
                if "dot asked once" not in closed and tls_closed(asked_once):
                    closed["dot asked once"] = time.monotonic() - asked_at
                time.sleep(0.2)
        finally:
            h.close()
            close_all([idle_dot, asked_once, active])
        self.assertEqual(set(closed), {"h2", "dot", "dot asked once"}, f"closed: {closed}")
        for who, t in closed.items():
            self.assertGreaterEqual(t, 0.8, f"{who}: closed after {t:.2f} s, before the idle timeout")
            self.assertLessEqual(t, 2.5, f"{who}: closed after {t:.2f} s")
        self.assertGreaterEqual(qid, 10)
        wait_for(lambda: self.counter(d, "weir_tls_connections_closed_total", reason="idle") >= 3, 5,
                 "three idle closes to be counted")
        self.assertEqual(self.counter(d, "weir_tls_connections_closed_total", reason="idle"), 3)
        self.assertEqual(self.counter(d, "weir_tls_connections_closed_total", reason="lifetime"), 0)

    # ============================================================ 5. concurrent streams

    def test_http2_streams_beyond_max_concurrent_streams_are_refused(self):
        d = self.start()
        h = self.h2("127.0.0.71")
        try:
            self.assertEqual(h.settings.get(SETTINGS_MAX_CONCURRENT_STREAMS), 100, h.settings)
            self.assertEqual(h.settings.get(SETTINGS_MAX_HEADER_LIST_SIZE), 8192, h.settings)
            self.assertEqual(h.settings.get(SETTINGS_INITIAL_WINDOW_SIZE), 65536, h.settings)
            # 100 requests open at once (their bodies still to come), then 10 more.
            first = [1 + 2 * i for i in range(100)]
            excess = [201 + 2 * i for i in range(10)]
            h.send(*[h.post_headers(sid) for sid in first + excess])
            h.pump(2, lambda: all(h.streams[s].reset is not None for s in excess) or h.closed)
            if h.goaway is not None:
                # nghttp2 treats streams past a limit the client has
                # acknowledged as a connection error (before the ACK it
                # refuses them): GOAWAY PROTOCOL_ERROR, counted, and the
                # server goes on serving everyone else.
                self.assertEqual(h.goaway[0], PROTOCOL_ERROR, f"GOAWAY {h.goaway}")
                self.assertEqual(self.counter(d, "weir_doh_sessions_closed_total", reason="protocol_error"), 1)
                other = self.h2("127.0.0.72")
                try:
                    other.send(other.get(1))
                    other.pump(5, other.done(1))
                    self.assertEqual(other.streams[1].status, 200)
                finally:
                    other.close()
                return
            self.assertFalse(h.closed, "the connection closed without a GOAWAY")
            for sid in excess:
                self.assertIn(h.streams[sid].reset, (REFUSED_STREAM, PROTOCOL_ERROR),
                              f"stream {sid} past the limit: reset {h.streams[sid].reset}")
            self.assertFalse([s for s in first if h.streams[s].reset is not None],
                             "a stream within the limit was reset")
            # The hundred open ones are answered.
            q = query(qid=0)
            h.send(*[h.data(sid, q) for sid in first])
            h.pump(5, h.done(*first))
            statuses = collections.Counter(h.streams[s].status for s in first)
            self.assertEqual(statuses, {200: 100}, statuses)
            self.assertTrue(all(dns_answer_ok(h.streams[s].body) for s in first))
            # The limit is on streams open at once: with those done, more are taken.
            h.send(h.get(301))
            h.pump(5, h.done(301))
            self.assertEqual(h.streams[301].status, 200)
            self.assertEqual(self.counter(d, "weir_doh_sessions_closed_total"), 0)
        finally:
            h.close()

    # ============================================================ 6. header, target and body caps

    def test_http2_header_target_and_body_caps(self):
        d = self.start()
        h = self.h2("127.0.0.72")
        try:
            q = query(qid=0)
            h.send(h.get(1, extra=[("x-pad", "a" * 9000)]))               # header fields > 8192
            h.send(h.get(3, extra=[("x-pad", "a" * 7000)]))               # within the cap
            h.send(h.get(5, path="/dns-query?dns=" + base64.urlsafe_b64encode(q).rstrip(b"=").decode() +
                         "&x=" + "a" * 5000))                              # :path > 4096
            h.send(h.post_headers(7, length=70000))                        # Content-Length > 65535
            h.send(h.post_headers(9))                                      # 65536 bytes of body, no length
            h.pump(5, h.done(1, 3, 5, 7))
            h.send_body(9, b"\0" * 65536)
            h.send(h.post_headers(11, length=len(q)), h.data(11, q))      # a proper POST
            h.pump(5, h.done(9, 11))
            got = {sid: h.streams[sid].status for sid in (1, 3, 5, 7, 9, 11)}
            self.assertEqual(got, {1: 431, 3: 200, 5: 414, 7: 413, 9: 413, 11: 200}, got)
            self.assertTrue(dns_answer_ok(h.streams[3].body))
            self.assertTrue(dns_answer_ok(h.streams[11].body))
            # Stream errors: the connection goes on.
            self.assertIsNone(h.goaway)
            self.assertFalse(h.closed)
            h.send(h.get(13))
            h.pump(5, h.done(13))
            self.assertEqual(h.streams[13].status, 200)
        finally:
            h.close()
        m = d.metrics()
        self.assertEqual(m.value("weir_doh_responses_total", status="4xx"), 4)
        self.assertEqual(m.value("weir_doh_responses_total", status="2xx"), 3)
        self.assertEqual(m.value("weir_doh_requests_total"), 3)  # the rejected ones never reach the resolver
        self.assertEqual(m.value("weir_doh_sessions_closed_total"), 0)

    def test_http1_header_target_and_body_caps(self):
        d = self.start(handshakes_per_second_per_source=0)
        ctx = self.ctx("http/1.1")
        q = query(qid=0)
        path = "/dns-query?dns=" + base64.urlsafe_b64encode(q).rstrip(b"=").decode()

        def get(target, extra=""):
            return (f"GET {target} HTTP/1.1\r\nHost: localhost\r\nAccept: application/dns-message\r\n{extra}\r\n"
                    ).encode()

        cases = [
            ("header fields > 8192", get(path, f"X-Pad: {'a' * 9000}\r\n"), b"", 431),
            ("a target > 4096", get(path + "&x=" + "a" * 5000), b"", 414),
            ("Content-Length > 65535", b"POST /dns-query HTTP/1.1\r\nHost: localhost\r\n"
             b"Content-Type: application/dns-message\r\nContent-Length: 200000\r\n\r\n", b"\0" * 200000, 413),
            ("a body > 65535 in chunks", b"POST /dns-query HTTP/1.1\r\nHost: localhost\r\n"
             b"Content-Type: application/dns-message\r\nTransfer-Encoding: chunked\r\n\r\n",
             b"".join(b"4000\r\n" + b"\0" * 0x4000 + b"\r\n" for _ in range(5)) + b"0\r\n\r\n", 413),
        ]
        # The 413 goes out while the body still arrives: weir reads and drops
        # the rest before it closes, or the client's unread 413 would be lost
        # to the reset.
        for name, request, body, want in cases:
            with self.subTest(name):
                status, head, _, ended = http1_exchange(self.doh, ctx, request, body, source="127.0.0.73")
                self.assertEqual(status, want, f"{name}: {head!r} ({ended})")
                self.assertIn("connection: close", head.lower(), name)
                self.assertEqual(ended, "close", f"{name}: the connection was not closed cleanly after the {want}")
        # Within the caps: answered, the connection kept.
        status, head, body, ended = http1_exchange(self.doh, ctx, get(path, f"X-Pad: {'a' * 7000}\r\n"),
                                                   source="127.0.0.74")
        self.assertEqual(status, 200, head)
        self.assertTrue(dns_answer_ok(body))
        self.assertEqual(ended, "open")
        m = d.metrics()
        self.assertEqual(m.value("weir_doh_responses_total", status="4xx"), len(cases))
        self.assertEqual(m.value("weir_doh_sessions_closed_total", reason="limit"), len(cases))
        self.assertEqual(m.value("weir_doh_connections_total", version="1.1"), len(cases) + 1)

    # ============================================================ 7. clients that never read

    def test_dot_pipeliner_that_never_reads_is_not_read_from_then_closed_for_unsent(self):
        # 60,000 padded queries for a cached name (468-byte answers: 28 MB
        # owed) from a client with a 4 KB receive buffer that never reads.
        d = self.start()
        self.assert_dot_served("127.0.0.81")  # cached now
        base = rss_kib(d.pid)
        n = 60000
        q = query(QNAME, 1, pad=True)
        frame = tcp_frame(q)
        burst = b"".join(tcp_frame(struct.pack("!H", i % 65535 + 1) + q[2:]) for i in range(n))
        s = self.dot_connect("127.0.0.82", rcvbuf=4096)
        progress = {"sent": 0, "error": None}

        def pipeline():  # the only user of `s` until it is done
            try:
                while progress["sent"] < len(burst):
                    progress["sent"] += s.send(burst[progress["sent"]:progress["sent"] + 16384])
            except (ssl.SSLError, OSError) as e:
                progress["error"] = e

        sender = threading.Thread(target=pipeline, daemon=True)
        read = lambda: self.counter(d, "weir_tls_queries_total", transport="dot") - 1  # noqa: E731
        try:
            sender.start()
            # Not read from: with thousands of its queries waiting in the
            # server's socket, the count of those read stops while the
            # connection is open.
            samples = []
            plateau = None
            deadline = time.monotonic() + 10
            while plateau is None and time.monotonic() < deadline:
                open_now = self.counter(d, "weir_tls_connections") == 1
                samples.append((time.monotonic(), read(), progress["sent"] // len(frame)))
                old = [x for x in samples if x[0] <= samples[-1][0] - 0.3]
                if open_now and old and old[-1][1] == samples[-1][1] > 0 and samples[-1][2] > samples[-1][1] + 1000:
                    plateau = samples[-1][1]
                time.sleep(0.05)
            self.assertIsNotNone(plateau, f"the server did not stop reading a client that reads nothing: "
                                          f"(time, read, sent): {samples[-5:]}")
            self.assertLess(plateau, n // 2, f"{plateau} of {n} queries read from a client that reads nothing")
            self.assertLess(rss_kib(d.pid) - base, 32 * 1024, "the server's memory grew past 32 MB for one client")
            # Then closed: for the answers it left unsent.
            wait_for(lambda: self.counter(d, "weir_tls_connections") == 0, 5,
                     "the connection of a client that never reads to be closed")
            self.assertEqual(read(), plateau)
            self.assertEqual(self.counter(d, "weir_tls_connections_closed_total", reason="unsent"), 1,
                             f"closed by reason: {d.metrics().series('weir_tls_connections_closed_total')}")
        finally:
            s.close()
            sender.join(timeout=10)
        self.assert_dot_served("127.0.0.83")

    def test_dot_client_that_never_reads_its_missed_answers_is_closed_for_unsent(self):
        # 6,000 padded TXT queries for names not cached: their answers
        # (1,404 bytes each, 8 MB in all) come back 300 ms later to a
        # client that reads nothing.
        d = self.start(upstream=self.slow, idle_timeout_ms=60000,
                       upstream_keys={"timeout_ms": 5000, "attempts": 1, "answer_deadline_ms": 10000})
        base = rss_kib(d.pid)
        n = 6000
        burst = b"".join(tcp_frame(weirtest.make_query(f"q{i}.w.slow.example", 16, qid=i + 1, options=[(PADDING, b"")]))
                         for i in range(n))
        s = self.dot_connect("127.0.0.84", rcvbuf=4096)
        try:
            s.sendall(burst)
            wait_for(lambda: self.counter(d, "weir_tls_connections_closed_total", reason="unsent") == 1, 10,
                     "the client's connection to be closed for its unsent answers")
            self.assertEqual(self.counter(d, "weir_tls_connections"), 0)
            self.assertLess(rss_kib(d.pid) - base, 32 * 1024, "the server's memory grew past 32 MB for one client")
        finally:
            s.close()
        self.assertEqual(self.counter(d, "weir_tls_connections_closed_total"), 1)

    def never_reading_http2_client(self, d, qname, batches, batch_size, source):
        """An HTTP/2 client with its flow-control windows opened wide that
        asks `qname` (TXT) in `batches` batches of `batch_size` streams,
        each batch in a TLS record of its own (so that no read of the
        server's holds more than the concurrency limit), over a 4 KB
        receive buffer it never reads. Returns once the server closed it
        (or fails after 8 s): (requests the server read, its RSS growth in KiB)."""
        q = weirtest.make_query(qname, 16, qid=0)
        warm = self.h2(source)
        warm.send(warm.get(1, q=q))
        warm.pump(5, warm.done(1))
        self.assertEqual(warm.streams[1].status, 200)
        warm.close()
        wait_for(lambda: self.counter(d, "weir_tls_connections") == 0, 5, "the warm-up connection to be closed")
        base = rss_kib(d.pid)
        requests = lambda: self.counter(d, "weir_doh_requests_total") - 1  # noqa: E731
        h = self.h2(source, rcvbuf=4096, settings={SETTINGS_INITIAL_WINDOW_SIZE: 2 ** 31 - 1})
        try:
            h.send(h2frame.WindowUpdateFrame(0, 2 ** 31 - 1 - 65535))
            for b in range(batches):
                if not h.send(*[h.get(1 + 2 * (b * batch_size + i), q=q) for i in range(batch_size)]):
                    break
            wait_for(lambda: self.counter(d, "weir_tls_connections") == 0, 8,
                     f"the HTTP/2 connection of a client that never reads to be closed "
                     f"({batches * batch_size} requests sent, {requests()} read)")
            return requests(), rss_kib(d.pid) - base
        finally:
            h.close()

    def test_http2_client_that_never_reads_cached_answers_is_closed_for_unsent(self):
        # 15 KB answers from the cache, 10 x 100 streams (15 MB: more than
        # the kernel's socket buffers take). The idle timeout (3 s) is not
        # what should close it.
        d = self.start(idle_timeout_ms=3000)
        read, grown = self.never_reading_http2_client(d, LARGE, 10, 100, "127.0.0.85")
        self.assertLess(read, 1000, "the server read every request of a client that reads nothing")
        self.assertLess(grown, 48 * 1024, "the server's memory grew past 48 MB for one client")
        # Not an HTTP/2 error of the client's: the session ended nothing.
        self.assertEqual(self.counter(d, "weir_doh_sessions_closed_total"), 0,
                         d.metrics().series("weir_doh_sessions_closed_total"))
        self.assertEqual(self.counter(d, "weir_tls_connections_closed_total", reason="unsent"), 1,
                         f"closed by reason: {d.metrics().series('weir_tls_connections_closed_total')}")
        self.assert_doh_served("127.0.0.86")

    def test_http2_client_that_never_reads_missed_answers_is_closed_for_unsent(self):
        # 60 KB answers, never cached: each comes back from upstream, 100
        # streams of them (6 MB).
        d = self.start(idle_timeout_ms=60000)
        read, grown = self.never_reading_http2_client(d, HUGE, 1, 100, "127.0.0.87")
        self.assertLessEqual(read, 100)
        self.assertLess(grown, 48 * 1024, "the server's memory grew past 48 MB for one client")
        self.assertEqual(self.counter(d, "weir_doh_sessions_closed_total"), 0,
                         d.metrics().series("weir_doh_sessions_closed_total"))
        self.assertEqual(self.counter(d, "weir_tls_connections_closed_total", reason="unsent"), 1,
                         f"closed by reason: {d.metrics().series('weir_tls_connections_closed_total')}")
        self.assert_doh_served("127.0.0.88")

    # ============================================================ 8. rapid reset

    def test_http2_rapid_reset_gets_goaway_enhance_your_calm(self):
        d = self.start()
        # 90 streams opened and cancelled at once: under the limit, served on.
        calm = self.h2("127.0.0.91")
        frames = []
        for i in range(90):
            frames += [calm.post_headers(1 + 2 * i), calm.rst(1 + 2 * i)]
        calm.send(*frames)
        calm.send(calm.get(181))
        calm.pump(5, calm.done(181))
        self.assertEqual(calm.streams[181].status, 200, "90 resets within a second ended the connection")
        self.assertIsNone(calm.goaway)
        # 150: GOAWAY ENHANCE_YOUR_CALM, then the connection closes.
        h = self.h2("127.0.0.92")
        try:
            frames = []
            for i in range(150):
                frames += [h.post_headers(1 + 2 * i), h.rst(1 + 2 * i)]
            h.send(*frames)
            self.assertTrue(h.wait_closed(3), "the connection stayed open after 150 rapid resets")
            self.assertIsNotNone(h.goaway, "closed without GOAWAY")
            self.assertEqual(h.goaway[0], ENHANCE_YOUR_CALM, f"GOAWAY {h.goaway}")
        finally:
            h.close()
            calm.close()
        wait_for(lambda: self.counter(d, "weir_doh_sessions_closed_total", reason="rapid_reset") == 1, 5,
                 "the rapid-reset close to be counted")
        self.assertGreaterEqual(self.counter(d, "weir_doh_streams_reset_total"), 90 + 101)
        self.assertEqual(self.counter(d, "weir_doh_sessions_closed_total", reason="control_flood"), 0)
        # Others are served on.
        self.assert_doh_served("127.0.0.93")
        self.assert_dot_served("127.0.0.93")

    # ============================================================ 9. control frame floods

    def test_http2_settings_and_ping_floods_get_goaway_enhance_your_calm(self):
        d = self.start()
        # 80 PINGs at once: answered, the connection kept.
        calm = self.h2("127.0.0.94")
        calm.send(*[calm.ping(i) for i in range(80)])
        calm.pump(3, lambda: calm.pings_acked == 80)
        self.assertEqual(calm.pings_acked, 80)
        calm.send(calm.get(1))
        calm.pump(5, calm.done(1))
        self.assertEqual(calm.streams[1].status, 200)
        calm.close()
        floods = {
            "SETTINGS": lambda h: [h2frame.SettingsFrame(0, {SETTINGS_INITIAL_WINDOW_SIZE: 65535 + i})
                                   for i in range(150)],
            "PING": lambda h: [h.ping(i) for i in range(150)],
        }
        for n, (what, frames) in enumerate(floods.items(), start=1):
            with self.subTest(what):
                h = self.h2(f"127.0.0.9{4 + n}")
                try:
                    h.send(*frames(h))
                    self.assertTrue(h.wait_closed(3), f"the connection stayed open after 150 {what} frames")
                    self.assertIsNotNone(h.goaway, f"{what} flood: closed without GOAWAY")
                    self.assertEqual(h.goaway[0], ENHANCE_YOUR_CALM, f"{what} flood: GOAWAY {h.goaway}")
                finally:
                    h.close()
                wait_for(lambda: self.counter(d, "weir_doh_sessions_closed_total", reason="control_flood") == n,
                         5, f"the {what} flood's close to be counted")
        self.assertEqual(self.counter(d, "weir_doh_sessions_closed_total", reason="rapid_reset"), 0)
        self.assert_doh_served("127.0.0.98")

    # ============================================================ accounting

    def test_every_connection_accepted_is_counted_closed_once(self):
        # After refusals of each kind (handshake rate, per source) and a
        # handshake timeout, with every client gone: each connection
        # accepted is counted closed once, by reason (as for plain TCP:
        # test_tcp_abuse), so accepted - closed = open holds.
        d = self.start(max_connections_per_source=3, handshake_timeout_ms=300)
        for _ in range(10):  # 5 per second: some refused for the rate
            s = self.try_dot("127.0.0.101")
            if s is not None:
                s.close()
        held = [s for s in (self.try_dot("127.0.0.102") for _ in range(4)) if s is not None]
        self.assertEqual(len(held), 3)  # the 4th refused per source
        stall = tcp_connect(self.dot, "127.0.0.103")
        wait_for(lambda: raw_closed(stall), 3, "the stalled handshake to be closed")
        stall.close()
        close_all(held)
        wait_for(lambda: self.counter(d, "weir_tls_connections") == 0, 5, "every connection to be closed")
        m = d.metrics()
        accepted = m.value("weir_tls_connections_accepted_total")
        closed = m.value("weir_tls_connections_closed_total")
        rate_limited = m.value("weir_tls_handshakes_total", result="rate_limited")
        self.assertGreater(rate_limited, 0)
        self.assertGreaterEqual(m.value("weir_tls_connections_closed_total", reason="per_source_limit"), 1)
        self.assertEqual(m.value("weir_tls_handshakes_total", result="timeout"), 1)
        # Refusals for the handshake rate happen before the connection table
        # sees the socket: counted there (result="rate_limited") only.
        self.assertEqual(accepted, 10 + 4 + 1 - rate_limited)
        self.assertEqual(closed, accepted,
                         f"{accepted} accepted, {closed} counted closed; {rate_limited} refused for the handshake "
                         f"rate: {m.series('weir_tls_connections_closed_total')}")

    # ============================================================ 10. 10,000 idle connections

    def test_ten_thousand_idle_dot_connections(self):
        n = 10000
        if raise_descriptor_limit(n + 1000) < n + 200:
            weirtest.skip_or_fail(self, "RLIMIT_NOFILE too low for 10,000 client sockets")
        d = self.start(max_connections=12000, max_connections_per_source=0, handshakes_per_second_per_source=0,
                       idle_timeout_ms=600000, handshake_timeout_ms=20000)
        soft = resource.prlimit(d.pid, resource.RLIMIT_NOFILE)[0]
        self.assertGreaterEqual(soft, n + 100, "the daemon did not inherit the raised descriptor limit")
        self.assert_dot_served("127.0.0.110")
        base = rss_kib(d.pid)
        start = time.monotonic()
        socks = open_idle_dot(self.dot, self.ctx("dot"), n, sources=[f"127.0.{10 + i // 200}.{1 + i % 200}"
                                                                     for i in range(400)])
        try:
            took = time.monotonic() - start
            self.assertEqual(len(socks), n)
            wait_for(lambda: self.counter(d, "weir_tls_connections") == n, 10, f"{n} connections open")
            used = rss_kib(d.pid) - base
            per = used * 1024 / n
            print(f"\n10,000 idle DoT connections in {took:.1f} s: server VmRSS {base} KiB -> {base + used} KiB, "
                  f"+{used / 1024:.1f} MiB, {per / 1024:.1f} KiB per connection", file=sys.stderr)
            # OpenSSL's SSL (a few KB, no buffers when idle: SSL_MODE_RELEASE_BUFFERS),
            # the kernel's socket (not in RSS), the connection's entries: well under 40 KB.
            self.assertLess(used, 400 * 1024, f"{used} KiB for {n} idle connections")
            self.assertLess(per, 40 * 1024, f"{per:.0f} bytes per idle connection")
            self.assertEqual(self.counter(d, "weir_tls_handshakes_total", transport="dot", result="full"), n + 1)
            # The last one (and the first) are served.
            for s, qid in ((socks[-1], 1), (socks[0], 2)):
                s.setblocking(True)
                a = ask(s, qid)
                self.assertIsNotNone(a)
                self.assertEqual(_addresses(a), [ADDRESS])
            self.assertEqual(self.counter(d, "weir_tls_connections_closed_total"), 1)  # assert_dot_served's
        finally:
            close_all(socks)


def open_idle_dot(port, ctx, n, sources, parallel=400, timeout=45.0):
    """`n` DoT connections, their handshakes done, spread over `sources`:
    non-blocking, `parallel` handshakes at a time. Returns the sockets
    (raises AssertionError when one fails or the lot takes over `timeout`)."""
    sel = selectors.DefaultSelector()
    done, started = [], 0
    deadline = time.monotonic() + timeout
    in_flight = 0

    def begin(i):
        raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        raw.setsockopt(socket.SOL_IP, 24, 1)  # IP_BIND_ADDRESS_NO_PORT: the port picked at connect, per 4-tuple
        raw.bind((sources[i % len(sources)], 0))
        raw.setblocking(False)
        raw.connect_ex((SERVER, port))
        s = ctx.wrap_socket(raw, server_hostname="localhost", do_handshake_on_connect=False)
        sel.register(s, selectors.EVENT_WRITE, "connect")

    try:
        while len(done) < n:
            while started < n and in_flight < parallel:
                begin(started)
                started += 1
                in_flight += 1
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(done)} of {n} handshakes done in {timeout} s")
            for key, _ in sel.select(timeout=1.0):
                s = key.fileobj
                try:
                    s.do_handshake()
                except ssl.SSLWantReadError:
                    sel.modify(s, selectors.EVENT_READ)
                    continue
                except ssl.SSLWantWriteError:
                    sel.modify(s, selectors.EVENT_WRITE)
                    continue
                except (ssl.SSLError, OSError) as e:
                    raise AssertionError(f"handshake {len(done) + 1} failed: {e!r}")
                sel.unregister(s)
                in_flight -= 1
                done.append(s)
    except BaseException:
        close_all(done)
        for key in list(sel.get_map().values()):
            key.fileobj.close()
        raise
    finally:
        sel.close()
    return done


if __name__ == "__main__":
    unittest.main()
