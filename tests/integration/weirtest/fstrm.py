"""Frame Streams peers for dnstap tests (https://farsightsec.github.io/fstrm/):
a reader that does the bidirectional handshake and counts the data frames
it gets, and a stuck reader that accepts connections and never answers.
Both listen on a unix socket path and run on their own thread; stop() by
the test."""

import os
import socket
import struct
import threading
from typing import Optional

CONTENT_TYPE = b"protobuf:dnstap.Dnstap"
ACCEPT, START, STOP, READY, FINISH = 1, 2, 3, 4, 5
FIELD_CONTENT_TYPE = 1


def control_frame(kind: int, content_type: Optional[bytes] = None) -> bytes:
    body = struct.pack(">I", kind)
    if content_type is not None:
        body += struct.pack(">II", FIELD_CONTENT_TYPE, len(content_type)) + content_type
    return struct.pack(">II", 0, len(body)) + body


def _read_exact(conn: socket.socket, n: int) -> Optional[bytes]:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


class StuckReader:
    """Accepts every connection and never reads or answers."""

    def __init__(self, path: str):
        self.path = path
        self.accepted = 0
        self._conns = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (socket.timeout, OSError):
                continue
            self._conns.append(conn)
            self.accepted += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        for c in self._conns:
            c.close()
        self._sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


class Reader:
    """A Frame Streams reader: READY -> ACCEPT -> START, then data frames
    (their payloads in `frames`), FINISH on STOP. One connection at a time."""

    def __init__(self, path: str):
        self.path = path
        self.frames = []
        self.connections = 0
        self.finished = 0
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        self._sock.listen(8)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def count(self) -> int:
        with self._lock:
            return len(self.frames)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (socket.timeout, OSError):
                continue
            with conn:
                conn.settimeout(None)
                self._serve(conn)

    def _serve(self, conn: socket.socket) -> None:
        head = _read_exact(conn, 8)
        if head is None:
            return
        escape, n = struct.unpack(">II", head)
        body = _read_exact(conn, n)
        if escape != 0 or body is None or struct.unpack(">I", body[:4])[0] != READY:
            return
        conn.sendall(control_frame(ACCEPT, CONTENT_TYPE))
        self.connections += 1
        while True:
            head = _read_exact(conn, 4)
            if head is None:
                return
            (n,) = struct.unpack(">I", head)
            if n == 0:  # a control frame
                (n,) = struct.unpack(">I", _read_exact(conn, 4) or b"\0\0\0\0")
                body = _read_exact(conn, n)
                if body is None:
                    return
                if struct.unpack(">I", body[:4])[0] == STOP:
                    conn.sendall(control_frame(FINISH))
                    self.finished += 1
                    return
                continue
            payload = _read_exact(conn, n)
            if payload is None:
                return
            with self._lock:
                self.frames.append(payload)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=3)
        self._sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass
