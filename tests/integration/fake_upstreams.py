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
(DESIGN section 6: random ID, random port, question must match):

  (a) the right question with a wrong ID,
  (b) the right ID with a wrong question name,
  (c) a fully correct answer, but from a different source port (a second
      socket, as an off-path attacker racing the real server would),

and `--delay-ms` later the genuine answer (the `--answer` address) from the
listening socket. A resolver that accepts any forged answer caches the poison.

Tests start it with weirtest.Process(...) and stop it by PID.
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
import struct
import sys
import threading

QR, AA, RD = 0x8000, 0x0400, 0x0100


def parse_query(pkt: bytes):
    """(id, flags, qname labels as bytes incl. the root, qtype, qclass, has_opt), or None."""
    if len(pkt) < 12:
        return None
    qid, flags, qd, an, ns, ar = struct.unpack("!6H", pkt[:12])
    if qd != 1:
        return None
    i = 12
    while True:
        if i >= len(pkt):
            return None
        n = pkt[i]
        if n & 0xC0:
            return None  # queries have no compression in the question
        i += 1 + n
        if n == 0:
            break
    if i + 4 > len(pkt):
        return None
    qname = pkt[12:i]
    qtype, qclass = struct.unpack("!HH", pkt[i:i + 4])
    return qid, flags, qname, qtype, qclass, ar > 0


def name_text(wire: bytes) -> str:
    labels, i = [], 0
    while wire[i]:
        labels.append(wire[i + 1:i + 1 + wire[i]].decode("ascii", "replace"))
        i += 1 + wire[i]
    return ".".join(labels) + "."


def name_wire(text: str) -> bytes:
    out = b""
    for label in text.rstrip(".").split("."):
        out += bytes([len(label)]) + label.encode()
    return out + b"\x00"


def answer(qid: int, qflags: int, qname: bytes, qtype: int, qclass: int, address: str, with_opt: bool,
           ttl: int = 300) -> bytes:
    """An authoritative answer with one A record (owner compressed to the question)."""
    flags = QR | AA | (qflags & RD)
    header = struct.pack("!6H", qid, flags, 1, 1, 0, 1 if with_opt else 0)
    question = qname + struct.pack("!HH", qtype, qclass)
    rr = struct.pack("!HHHIH", 0xC00C, 1, 1, ttl, 4) + ipaddress.IPv4Address(address).packed
    opt = b"\x00" + struct.pack("!HHIH", 41, 1232, 0, 0) if with_opt else b""
    return header + question + rr + opt


def run_spoofing(args) -> None:
    main = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    main.bind((args.host, 0))
    spoof = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    spoof.bind((args.host, 0))
    print(f"listening udp {args.host}:{main.getsockname()[1]}", flush=True)
    print(f"spoof-from udp {args.host}:{spoof.getsockname()[1]}", flush=True)
    print("ready", flush=True)
    lock = threading.Lock()  # sendto from the timer threads and the loop
    wrong_name = name_wire(args.wrong_name)
    while True:
        pkt, peer = main.recvfrom(65535)
        q = parse_query(pkt)
        if q is None:
            print(f"garbage from={peer[0]}:{peer[1]} len={len(pkt)}", flush=True)
            continue
        qid, qflags, qname, qtype, qclass, has_opt = q
        print(f"query id={qid} qname={name_text(qname)} qtype={qtype} from={peer[0]}:{peer[1]}", flush=True)
        forged = [
            (main, answer((qid + 1) & 0xFFFF, qflags, qname, qtype, qclass, args.poison, has_opt)),  # (a)
            (main, answer(qid, qflags, wrong_name, qtype, qclass, args.poison, has_opt)),  # (b)
            (spoof, answer(qid, qflags, qname, qtype, qclass, args.poison, has_opt)),  # (c)
        ]
        with lock:
            for sock, data in forged:
                sock.sendto(data, peer)
        genuine = answer(qid, qflags, qname, qtype, qclass, args.answer, has_opt)

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
    args = p.parse_args(argv)
    if not ipaddress.ip_address(args.host).is_loopback:
        p.error("--host must be a loopback address")
    try:
        run_spoofing(args)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
