#!/usr/bin/env python3
"""Seeds fuzz corpora from a real capture: DNS messages and byte streams as
weir's daemons and their peers really exchanged them.

Take a capture on loopback while integration tests run, then extract:

    dumpcap -i lo -w /tmp/it.pcapng -f "not port 22" &   # root; stop it by its PID
    python3 tests/integration/test_recursor_tcp.py --build-dir build-ci/main
    python3 tests/integration/test_mgmt.py --build-dir build-ci/main
    kill <dumpcap's PID>
    python3 tests/fuzz/seed_from_pcap.py /tmp/it.pcapng --mgmt-ports 40000-60999 --out tests/fuzz/corpus

tshark reads the capture (every UDP and TCP payload, whatever the port: the
tests use ephemeral ports, so nothing is decoded by port), and this script
sorts what it finds:

  * UDP payloads that parse as one DNS message: queries (QR=0) to
    query_fuzz/, responses (QR=1) to response_fuzz/;
  * TCP streams whose first bytes are a length-prefixed DNS message: the
    client's side to dns_tcp_stream_fuzz/ (what a DNS-over-TCP server reads),
    the server's side to dns_tcp_reader_fuzz/ (what a client reads), each
    prefixed with the targets' seed byte; the DNS messages inside them also
    go to query_fuzz/ and response_fuzz/;
  * other TCP streams that parse as mgmt frames (u32 length, a known type)
    to mgmt_frame_fuzz/, prefixed with its chunk-size byte; a snapshot frame
    (type 2, tags and city map as mgmt pushed them) is also written as a
    stored-snapshot body to mgmt_snapshot_file_fuzz/ (mode byte 1: the
    target adds the file header and checksum).

Files are named pcap_<sha1 prefix>.bin, so a rerun adds only what is new.
Each target keeps at most --max-files new files (spread over the sizes
found) and --max-bytes in all, so corpora stay small enough to commit.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import struct
import subprocess
import sys
from collections import defaultdict

MGMT_TYPES = range(1, 8)  # mgmt/include/weir/mgmt/protocol.h MsgType: kHello (1) .. kError (7)
MGMT_SNAPSHOT = 2


def tshark_rows(pcap: str, fields: list, display_filter: str) -> list:
    argv = ["tshark", "-r", pcap, "-n", "-Y", display_filter, "-T", "fields", "-E", "separator=\t"]
    for f in fields:
        argv += ["-e", f]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"tshark failed: {r.stderr.strip()}")
    return [line.split("\t") for line in r.stdout.splitlines() if line]


def looks_like_dns(msg: bytes) -> bool:
    """A DNS message with one question whose name is well formed."""
    if len(msg) < 17:
        return False
    qd = struct.unpack("!H", msg[4:6])[0]
    if qd != 1 or (msg[2] >> 3) & 0xF not in (0, 4, 5):  # QUERY, NOTIFY, UPDATE opcodes
        return False
    at, total = 12, 0
    while True:
        if at >= len(msg):
            return False
        n = msg[at]
        if n == 0:
            at += 1
            break
        if n & 0xC0:
            return False
        at += 1 + n
        total += 1 + n
        if total > 255:
            return False
    return at + 4 <= len(msg)


def dns_frames(stream: bytes) -> list:
    """The whole length-prefixed DNS messages at the start of a TCP stream."""
    out, at = [], 0
    while at + 2 <= len(stream):
        n = struct.unpack("!H", stream[at:at + 2])[0]
        if at + 2 + n > len(stream) or not looks_like_dns(stream[at + 2:at + 2 + n]):
            break
        out.append(stream[at + 2:at + 2 + n])
        at += 2 + n
    return out


def mgmt_frames(stream: bytes) -> list:
    """(type, body) of the whole mgmt frames at the start of a TCP stream."""
    out, at = [], 0
    while at + 5 <= len(stream):
        n = struct.unpack("!I", stream[at:at + 4])[0]
        if n < 1 or at + 4 + n > len(stream) or stream[at + 4] not in MGMT_TYPES:
            break
        out.append((stream[at + 4], stream[at + 4:at + 4 + n]))
        at += 4 + n
    return out


def tcp_streams(pcap: str) -> dict:
    """{(stream, direction): bytes}, direction 0 from the side that sent first."""
    rows = tshark_rows(pcap, ["tcp.stream", "ip.src", "ipv6.src", "tcp.srcport", "tcp.seq_raw", "tcp.payload"],
                       "tcp.len > 0")
    first = {}
    segs = defaultdict(dict)
    for row in rows:
        if len(row) < 6 or not row[5]:
            continue
        stream, src = row[0], (row[1] or row[2], row[3])
        first.setdefault(stream, src)
        d = 0 if first[stream] == src else 1
        segs[(stream, d)][int(row[4])] = bytes.fromhex(row[5].replace(":", ""))
    out = {}
    for key, by_seq in segs.items():
        data, next_seq = b"", None
        for seq in sorted(by_seq):
            chunk = by_seq[seq]
            if next_seq is not None and seq < next_seq:  # retransmission overlap
                chunk = chunk[next_seq - seq:]
            data += chunk
            next_seq = seq + len(by_seq[seq]) if next_seq is None else max(next_seq, seq + len(by_seq[seq]))
        out[key] = data
    return out


def in_ports(port: str, ranges: list) -> bool:
    try:
        p = int(port)
    except ValueError:
        return False
    return any(lo <= p <= hi for lo, hi in ranges)


def shape(c: bytes) -> tuple:
    """What makes two inputs different to a parser: the size, and for DNS
    messages the flags and section counts (bytes 2..11)."""
    return (len(c), c[2:12] if len(c) >= 12 else b"")


def pick(candidates: list, max_files: int, max_bytes: int) -> list:
    """Unique candidates, one per shape first, spread over the sizes found,
    within the limits."""
    unique = {hashlib.sha1(c).hexdigest(): c for c in candidates}
    by_shape = {}
    for h, c in sorted(unique.items()):
        by_shape.setdefault(shape(c), (h, c))
    items = sorted(by_shape.values(), key=lambda kv: (len(kv[1]), kv[0]))
    if len(items) > max_files:
        step = len(items) / max_files
        items = [items[int(i * step)] for i in range(max_files)]
    out, total = [], 0
    for h, c in items:
        if total + len(c) > max_bytes:
            continue
        out.append((h, c))
        total += len(c)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pcap")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus"))
    ap.add_argument("--mgmt-ports", default="",
                    help="ports weir-mgmt listened on (N or N-M, comma separated): only their streams are "
                         "read as mgmt frames")
    ap.add_argument("--max-files", type=int, default=40, help="new files per target at most")
    ap.add_argument("--max-bytes", type=int, default=256 << 10, help="bytes of new files per target at most")
    ap.add_argument("--stream-bytes", type=int, default=4096, help="bytes kept of each TCP stream")
    ap.add_argument("--targets", default="", help="only these targets (comma separated)")
    ap.add_argument("--dry-run", action="store_true", help="say what would be written")
    a = ap.parse_args()

    ranges = []
    for part in filter(None, a.mgmt_ports.split(",")):
        lo, _, hi = part.partition("-")
        ranges.append((int(lo), int(hi or lo)))

    found = defaultdict(list)
    for row in tshark_rows(a.pcap, ["udp.payload"], "udp && !icmp"):
        if not row[0]:
            continue
        msg = bytes.fromhex(row[0].replace(":", ""))
        if looks_like_dns(msg):
            found["response_fuzz" if msg[2] & 0x80 else "query_fuzz"].append(msg)

    streams = tcp_streams(a.pcap)
    ports = {}
    if ranges:
        for row in tshark_rows(a.pcap, ["tcp.stream", "tcp.srcport", "tcp.dstport"], "tcp.flags.syn == 1 && "
                               "tcp.flags.ack == 0"):
            ports[row[0]] = row[2]
    for (stream, d), data in streams.items():
        if d != 0:
            continue
        # A long pipelined stream (a load generator's) is cut to its first
        # --stream-bytes: libFuzzer's inputs are short anyway.
        back = streams.get((stream, 1), b"")[:a.stream_bytes]
        data = data[:a.stream_bytes]
        frames = dns_frames(data)
        if frames:
            found["dns_tcp_stream_fuzz"].append(bytes([len(data) & 0xFF]) + data)
            for m in frames:
                found["query_fuzz" if not m[2] & 0x80 else "response_fuzz"].append(m)
            answers = dns_frames(back)
            if answers:
                found["dns_tcp_reader_fuzz"].append(bytes([len(back) & 0xFF]) + back)
                found["response_fuzz"] += answers
            continue
        if ranges and in_ports(ports.get(stream, ""), ranges):
            for side in (data, back):
                fr = mgmt_frames(side)
                if not fr:
                    continue
                found["mgmt_frame_fuzz"].append(bytes([len(side) % 17]) + side)
                for t, body in fr:
                    if t == MGMT_SNAPSHOT:
                        frame = struct.pack("!I", len(body)) + body
                        found["mgmt_snapshot_file_fuzz"].append(b"\x01" + frame)

    for target in sorted(found):
        if a.targets and target not in a.targets.split(","):
            continue
        chosen = pick(found[target], a.max_files, a.max_bytes)
        d = os.path.join(a.out, target)
        new = 0
        for h, c in chosen:
            path = os.path.join(d, f"pcap_{h[:12]}.bin")
            if os.path.exists(path):
                continue
            new += 1
            if not a.dry_run:
                os.makedirs(d, exist_ok=True)
                with open(path, "wb") as f:
                    f.write(c)
        print(f"{target}: {len(found[target])} found, {len(chosen)} kept, {new} new")


if __name__ == "__main__":
    main()
