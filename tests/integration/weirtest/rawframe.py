"""Sends one Ethernet frame on an interface and prints the first UDP frame
that answers it: the raw exchange of NetnsPair.raw_exchange (weirtest.netns),
run inside the client namespace with `ip netns exec`. Standard library only,
so that it runs as a plain script, without the harness or dnspython:

    python3 rawframe.py IFACE FRAME_HEX SPORT [--timeout SECONDS]

The answer is the first frame received on IFACE (not one going out) that
carries IPv4 or IPv6 UDP to port SPORT. The kernel moves an 802.1Q tag out
of a received frame into the packet's metadata (on receive, whether or not
the 8021q module is loaded), so the tag is read from PACKET_AUXDATA; a tag
still in the frame (ethertype 0x8100) is read from the frame. Prints one
JSON line, {"frame": HEX of the frame as received, "vlan": TCI or null};
exits 1 when no answer came within the timeout, 2 when the socket failed.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time
from typing import Optional

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
ETH_P_8021Q = 0x8100
IPPROTO_UDP = 17
SOL_PACKET = 263
PACKET_AUXDATA = 8
TP_STATUS_VLAN_VALID = 0x10
# struct tpacket_auxdata: tp_status, tp_len, tp_snaplen, tp_mac, tp_net, tp_vlan_tci, tp_vlan_tpid
AUXDATA = struct.Struct("=IIIHHHH")


def split_ethernet(frame: bytes) -> tuple[Optional[int], int, int]:
    """(TCI of an in-band 802.1Q tag or None, ethertype, offset of the layer-3
    header) of an Ethernet frame."""
    ethertype = int.from_bytes(frame[12:14], "big")
    if ethertype == ETH_P_8021Q and len(frame) >= 18:
        return int.from_bytes(frame[14:16], "big"), int.from_bytes(frame[16:18], "big"), 18
    return None, ethertype, 14


def udp_dport(frame: bytes) -> Optional[int]:
    """The destination port of an IPv4 or IPv6 UDP frame (IPv6 without
    extension headers), None for anything else."""
    _, ethertype, l3 = split_ethernet(frame)
    if ethertype == ETH_P_IP and len(frame) >= l3 + 20 and frame[l3] >> 4 == 4 and frame[l3 + 9] == IPPROTO_UDP:
        udp = l3 + (frame[l3] & 0x0F) * 4
    elif ethertype == ETH_P_IPV6 and len(frame) >= l3 + 40 and frame[l3 + 6] == IPPROTO_UDP:
        udp = l3 + 40
    else:
        return None
    if len(frame) < udp + 8:
        return None
    return int.from_bytes(frame[udp + 2:udp + 4], "big")


def auxdata_vlan(ancdata: list) -> Optional[int]:
    """The TCI the kernel took out of a received frame, from the
    PACKET_AUXDATA control message of recvmsg(), or None."""
    for level, kind, data in ancdata:
        if level == SOL_PACKET and kind == PACKET_AUXDATA and len(data) >= AUXDATA.size:
            status, _, _, _, _, tci, _ = AUXDATA.unpack_from(data)
            if status & TP_STATUS_VLAN_VALID:
                return tci
    return None


def exchange(iface: str, frame: bytes, sport: int, timeout: float) -> Optional[tuple[bytes, Optional[int]]]:
    """Sends `frame` on `iface`; returns (answer frame, TCI or None), or None
    when no answer came within `timeout` seconds."""
    # Protocol 0 receives nothing until bind() names the interface, so no
    # frame of another interface is queued in between.
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0) as s:
        s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
        s.bind((iface, ETH_P_ALL))
        s.send(frame)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            s.settimeout(left)
            try:
                data, ancdata, _, address = s.recvmsg(65535, socket.CMSG_SPACE(AUXDATA.size))
            except socket.timeout:
                return None
            if address[2] == socket.PACKET_OUTGOING or udp_dport(data) != sport:
                continue
            tci = auxdata_vlan(ancdata)
            return data, tci if tci is not None else split_ethernet(data)[0]


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description="Send one Ethernet frame and print the UDP frame answering it.")
    parser.add_argument("iface")
    parser.add_argument("frame", help="the whole frame in hex, from the destination MAC on")
    parser.add_argument("sport", type=int, help="the answer is UDP to this port (the frame's source port)")
    parser.add_argument("--timeout", type=float, default=3.0)
    args = parser.parse_args(argv)
    try:
        answer = exchange(args.iface, bytes.fromhex(args.frame), args.sport, args.timeout)
    except OSError as e:
        print(f"rawframe: {args.iface}: {e}", file=sys.stderr)
        return 2
    if answer is None:
        print(f"rawframe: no UDP frame to port {args.sport} on {args.iface} within {args.timeout}s", file=sys.stderr)
        return 1
    frame, vlan = answer
    print(json.dumps({"frame": frame.hex(), "vlan": vlan}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
