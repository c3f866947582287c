#!/usr/bin/env python3
"""Scripted misbehaving upstreams for weir's black-box tests.

Run as a program on loopback; it binds port 0 and prints where it listens:

    python3 fake_upstreams.py spoofing --answer 192.0.2.10 --poison 192.0.2.66 --delay-ms 100
    listening udp 127.0.0.1:PORT
    spoof-from udp 127.0.0.1:PORT2
    ready
    query id=4711 qname=www.example.com. qtype=1 from=127.0.0.1:55321     (one line per query)

`spoofing`: for every query it first sends three forged answers carrying the
poison address, each wrong in exactly one way an attacker cannot avoid
(docs/behaviour.md#the-front-cache: random ID, random port, question must match):

  (a) the right question with a wrong ID,
  (b) the right ID with a wrong question name,
  (c) a fully correct answer, but from a different source port (a second
      socket, as an off-path attacker racing the real server would),

and `--delay-ms` later the genuine answer (the `--answer` address) from the
listening socket. A resolver that accepts any forged answer caches the poison.

`slow`: a genuine answer `--delay-ms` after each UDP query (echoing the
question's case, as weir-recursor does), at once over TCP on the same port.
With `--forge-ports-file FILE` it is also a blind forger: for each UDP query
it reads the resolver's source ports from FILE (one per line, as a test
read them with `ss`) and sends to each of them an answer with the poison
address under every one of the 65,536 IDs, from the listening socket (the
right source address and port, as an off-path attacker spoofs them). The
forger knows the name asked but not the resolver's 0x20 case: it writes the
name in lower case. It prints `forged N` after each flood.

`cookies`: a server that makes DNS cookies (RFC 7873): every answer, over
UDP and TCP, echoes the query's client cookie with a 16-byte server cookie.
It prints `query cookie=HEX` (the option as received, `none` without one).
With `--forge absent|wrong` each UDP query first gets a forged answer that
has the right ID and question (case included: a forger on the path, or one
that guessed both) with the poison address and no cookie, or another client
cookie; the genuine answer follows `--delay-ms` later (`--forge-from N`: from
the Nth UDP query on).

Tests start it with weirtest.Process(...) and stop it by PID.
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys
import threading
import time

import weirtest  # this file's folder is on sys.path when it runs as a program


def answer(q: weirtest.RawQuery, address: str, qid: int = None, qname: str = None, ttl: int = 300) -> bytes:
    """An authoritative answer to `q` with one A record for the question
    (`qid`/`qname` forge the ID or the question name), an OPT if `q` had one."""
    owner = qname or q.name.to_text()
    return weirtest.build_response(q, answer=[(owner, "A", ttl, weirtest.rdata_a(address))],
                                   options=[] if q.edns else None, qid=qid, qname=qname)


def run_spoofing(args) -> None:
    main = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    main.bind((args.host, 0))
    spoof = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    spoof.bind((args.host, 0))
    print(f"listening udp {args.host}:{main.getsockname()[1]}", flush=True)
    print(f"spoof-from udp {args.host}:{spoof.getsockname()[1]}", flush=True)
    print("ready", flush=True)
    lock = threading.Lock()  # sendto from the timer threads and the loop
    while True:
        pkt, peer = main.recvfrom(65535)
        q = weirtest.parse_raw_query(pkt)
        if q is None:
            print(f"garbage from={peer[0]}:{peer[1]} len={len(pkt)}", flush=True)
            continue
        print(f"query id={q.id} qname={q.name.to_text()} qtype={q.qtype} from={peer[0]}:{peer[1]}", flush=True)
        forged = [
            (main, answer(q, args.poison, qid=(q.id + 1) & 0xFFFF)),  # (a)
            (main, answer(q, args.poison, qname=args.wrong_name)),  # (b)
            (spoof, answer(q, args.poison)),  # (c)
        ]
        with lock:
            for sock, data in forged:
                sock.sendto(data, peer)
        genuine = answer(q, args.answer)

        def send_genuine(data=genuine, to=peer):
            with lock:
                main.sendto(data, to)

        t = threading.Timer(args.delay_ms / 1000.0, send_genuine)
        t.daemon = True
        t.start()


def forge_flood(sock: socket.socket, lock: threading.Lock, q: weirtest.RawQuery, poison: str,
                ports_file: str) -> int:
    """Every ID to every port in `ports_file`, lower-case question."""
    with open(ports_file) as f:
        ports = [int(line) for line in f if line.strip()]
    lower = q.qname  # parse_raw_query's lower-case name
    pkt = bytearray(weirtest.build_response(q, answer=[(lower, "A", 300, weirtest.rdata_a(poison))],
                                            options=[] if q.edns else None, qname=lower, qid=0))
    sent = 0
    for port in ports:
        for qid in range(65536):
            pkt[0] = qid >> 8
            pkt[1] = qid & 0xFF
            while True:
                try:
                    with lock:
                        sock.sendto(pkt, ("127.0.0.1", port))
                    break
                except BlockingIOError:
                    time.sleep(0.0005)
            sent += 1
    return sent



def bind_udp_and_tcp(host: str):
    """A UDP socket and a listening TCP socket on one port the kernel picked.
    Tests run in parallel: the UDP port's TCP twin may be taken, so another
    port is tried then."""
    for _ in range(100):
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind((host, 0))
        port = udp.getsockname()[1]
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            tcp.bind((host, port))
        except OSError:
            udp.close()
            tcp.close()
            continue
        tcp.listen(64)
        return udp, tcp, port
    raise RuntimeError(f"no port free for both UDP and TCP on {host}")

def run_slow(args) -> None:
    main, tcp, port = bind_udp_and_tcp(args.host)
    print(f"listening udp {args.host}:{port}", flush=True)
    print("ready", flush=True)
    lock = threading.Lock()

    def serve_tcp():
        while True:
            conn, _ = tcp.accept()
            threading.Thread(target=tcp_conn, args=(conn,), daemon=True).start()

    def tcp_conn(conn):
        with conn:
            data = b""
            while True:
                chunk = conn.recv(65535)
                if not chunk:
                    return
                data += chunk
                msgs, data = weirtest.split_tcp_frames(data)
                for m in msgs:
                    q = weirtest.parse_raw_query(m, "tcp")
                    if q is None:
                        continue
                    print(f"query tcp id={q.id} qname={q.name.to_text()} qtype={q.qtype}", flush=True)
                    conn.sendall(weirtest.tcp_frame(answer(q, args.answer)))

    threading.Thread(target=serve_tcp, daemon=True).start()
    while True:
        pkt, peer = main.recvfrom(65535)
        q = weirtest.parse_raw_query(pkt)
        if q is None:
            continue
        print(f"query id={q.id} qname={q.name.to_text()} qtype={q.qtype} from={peer[0]}:{peer[1]}", flush=True)
        genuine = answer(q, args.answer)

        def send_genuine(data=genuine, to=peer):
            with lock:
                main.sendto(data, to)

        t = threading.Timer(args.delay_ms / 1000.0, send_genuine)
        t.daemon = True
        t.start()
        if args.forge_ports_file:
            def flood(q=q):
                n = forge_flood(main, lock, q, args.poison, args.forge_ports_file)
                print(f"forged {n}", flush=True)
            threading.Thread(target=flood, daemon=True).start()


SERVER_COOKIE = b"weir-test-srv-c1"  # 16 bytes


def run_cookies(args) -> None:
    main, tcp, port = bind_udp_and_tcp(args.host)
    print(f"listening udp {args.host}:{port}", flush=True)
    print("ready", flush=True)
    lock = threading.Lock()

    def reply(q, address=None, cookie=b"keep"):
        sent = q.option(10)
        if cookie == b"keep":
            cookie = sent[:8] + SERVER_COOKIE if sent else None
        options = ([] if cookie is None else [(10, cookie)]) if q.edns else None
        owner = q.name.to_text()
        return weirtest.build_response(q, answer=[(owner, "A", 300, weirtest.rdata_a(address or args.answer))],
                                       options=options)

    def log(q):
        sent = q.option(10)
        print(f"query {q.transport} cookie={sent.hex() if sent else 'none'} qname={q.name.to_text()}", flush=True)

    def tcp_conn(conn):
        with conn:
            data = b""
            while True:
                chunk = conn.recv(65535)
                if not chunk:
                    return
                data += chunk
                msgs, data = weirtest.split_tcp_frames(data)
                for m in msgs:
                    q = weirtest.parse_raw_query(m, "tcp")
                    if q is not None:
                        log(q)
                        conn.sendall(weirtest.tcp_frame(reply(q)))

    def serve_tcp():
        while True:
            conn, _ = tcp.accept()
            threading.Thread(target=tcp_conn, args=(conn,), daemon=True).start()

    threading.Thread(target=serve_tcp, daemon=True).start()
    count = 0
    while True:
        pkt, peer = main.recvfrom(65535)
        q = weirtest.parse_raw_query(pkt)
        if q is None:
            continue
        log(q)
        count += 1
        if args.forge != "none" and count >= args.forge_from:
            sent = q.option(10) or bytes(8)
            forged_cookie = None if args.forge == "absent" else bytes(b ^ 0xFF for b in sent[:8]) + SERVER_COOKIE
            with lock:
                main.sendto(reply(q, args.poison, forged_cookie), peer)
        genuine = reply(q)

        def send_genuine(data=genuine, to=peer):
            with lock:
                main.sendto(data, to)

        t = threading.Timer(args.delay_ms / 1000.0, send_genuine)
        t.daemon = True
        t.start()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("spoofing", help="forged answers first, the genuine one later")
    s.add_argument("--host", default="127.0.0.1", help="loopback address to bind (port 0)")
    s.add_argument("--answer", default="192.0.2.10", help="address in the genuine answer")
    s.add_argument("--poison", default="192.0.2.66", help="address in every forged answer")
    s.add_argument("--wrong-name", default="poison.example.", help="question name of forgery (b)")
    s.add_argument("--delay-ms", type=int, default=100, help="delay of the genuine answer")
    s = sub.add_parser("slow", help="the genuine answer late over UDP (at once over TCP), optional forger")
    s.add_argument("--host", default="127.0.0.1", help="loopback address to bind (port 0)")
    s.add_argument("--answer", default="192.0.2.10", help="address in the genuine answer")
    s.add_argument("--poison", default="192.0.2.66", help="address in every forged answer")
    s.add_argument("--delay-ms", type=int, default=1000, help="delay of the genuine UDP answer")
    s.add_argument("--forge-ports-file", default=None, help="flood every ID to the ports listed here")
    s = sub.add_parser("cookies", help="a server that makes DNS cookies, optional forged answers without them")
    s.add_argument("--host", default="127.0.0.1", help="loopback address to bind (port 0)")
    s.add_argument("--answer", default="192.0.2.10", help="address in the genuine answer")
    s.add_argument("--poison", default="192.0.2.66", help="address in every forged answer")
    s.add_argument("--delay-ms", type=int, default=100, help="delay of the genuine UDP answer")
    s.add_argument("--forge", choices=["none", "absent", "wrong"], default="none",
                   help="a forged answer first: without a cookie, or with another client cookie")
    s.add_argument("--forge-from", type=int, default=1, help="forge from the Nth UDP query on (1: all)")
    args = p.parse_args(argv)
    if not ipaddress.ip_address(args.host).is_loopback:
        p.error("--host must be a loopback address")
    try:
        {"slow": run_slow, "cookies": run_cookies, "spoofing": run_spoofing}[args.mode](args)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
