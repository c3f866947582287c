#!/usr/bin/env python3
"""One-shot DNS capture listener used to make the golden fixtures.

Binds 127.0.0.1:<port> (UDP or TCP), waits for ONE DNS message from a real
client (dig / kdig), writes the raw message bytes to --query-out (for TCP the
2-byte length prefix is stripped), and then either:

  * with --upstream HOST:PORT (loopback only): forwards the exact bytes to the
    upstream server (e.g. a local unbound) over the same transport, writes the
    raw reply to --response-out and relays it back to the client; or
  * without --upstream: sends nothing back (the client times out; run it with
    +tries=1 +timeout=1 / +retry=0 +timeout=1).

No DNS parsing is done here; bytes are stored exactly as received.

Example:
  python3 capture.py --port 53535 --query-out q.bin &
  dig @127.0.0.1 -p 53535 +tries=1 +timeout=1 www.example.com A
"""
import argparse
import ipaddress
import socket
import struct
import sys


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return buf


def tcp_read_msg(sock):
    (length,) = struct.unpack("!H", recv_exact(sock, 2))
    return recv_exact(sock, length)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--tcp", action="store_true", help="listen on TCP instead of UDP")
    ap.add_argument("--query-out", required=True)
    ap.add_argument("--response-out")
    ap.add_argument("--upstream", help="HOST:PORT to forward to (loopback only)")
    ap.add_argument("--timeout", type=float, default=20.0)
    args = ap.parse_args()

    upstream = None
    if args.upstream:
        host, port = args.upstream.rsplit(":", 1)
        if not ipaddress.ip_address(host).is_loopback:
            sys.exit("refusing non-loopback upstream")
        upstream = (host, int(port))

    def forward(query):
        if upstream is None:
            return None
        if args.tcp:
            with socket.create_connection(upstream, timeout=5) as u:
                u.sendall(struct.pack("!H", len(query)) + query)
                resp = tcp_read_msg(u)
        else:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                u.settimeout(5)
                u.sendto(query, upstream)
                resp, _ = u.recvfrom(65535)
        if args.response_out:
            with open(args.response_out, "wb") as f:
                f.write(resp)
        return resp

    if args.tcp:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", args.port))
        srv.listen(1)
        srv.settimeout(args.timeout)
        conn, _ = srv.accept()
        with conn:
            conn.settimeout(args.timeout)
            query = tcp_read_msg(conn)
            with open(args.query_out, "wb") as f:
                f.write(query)
            resp = forward(query)
            if resp is not None:
                conn.sendall(struct.pack("!H", len(resp)) + resp)
        srv.close()
    else:
        srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        srv.bind(("127.0.0.1", args.port))
        srv.settimeout(args.timeout)
        query, peer = srv.recvfrom(65535)
        with open(args.query_out, "wb") as f:
            f.write(query)
        resp = forward(query)
        if resp is not None:
            srv.sendto(resp, peer)
        srv.close()
    print(f"captured {len(query)} bytes -> {args.query_out}", file=sys.stderr)


if __name__ == "__main__":
    main()
