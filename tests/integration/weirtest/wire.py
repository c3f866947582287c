"""DNS messages in wire form for the tests that talk to a server below
dig's level: queries a client would not send, responses of a scripted
authoritative, and what came back. dnspython (Debian's python3-dnspython)
encodes and decodes; weir's own codec is dns/, and the tests must not share
it.

Two things stay raw on purpose, because dnspython normalises them:

* EDNS options are read as the bytes that came (`options_as_sent`).
  dnspython's ECS parser masks the address to the source prefix and rejects a
  wrong length, which would hide exactly what the ECS rule tests check in
  weir's queries (RFC 7871 11.1: the address cut to the prefix).
* Deliberately malformed packets (bytes after the last record, a reply cut in
  the middle of a record, garbage after an ID) are made by the tests from
  these bytes; nothing here can or should build them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import dns.edns
import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import dns.wire

WEIGHT_OPTION = 65001  # the default code of weir's weight option (docs/behaviour.md#the-weight-option)
ECS = 8
UDP_PAYLOAD = 1232

DecodeError = dns.exception.DNSException  # what parse_message raises for a malformed message

TYPE_CODES = {"A": 1, "NS": 2, "CNAME": 5, "SOA": 6, "TXT": 16, "AAAA": 28, "OPT": 41}

Option = Union[dns.edns.Option, tuple]  # a dnspython option, or (code, data bytes)


def wire_name(text: str) -> bytes:
    """`text` as an uncompressed wire name (for RDATA the tests assemble)."""
    return dns.name.from_text(text).to_wire()


def _rdtype(rtype: Union[str, int]) -> int:
    return dns.rdatatype.from_text(rtype) if isinstance(rtype, str) else int(rtype)


def rdata(rtype: Union[str, int], value: Union[str, bytes, dns.rdata.Rdata]) -> dns.rdata.Rdata:
    """An IN-class RDATA of `rtype` from its text form, its wire form, or as is."""
    if isinstance(value, dns.rdata.Rdata):
        return value
    t = _rdtype(rtype)
    if isinstance(value, str):
        return dns.rdata.from_text(dns.rdataclass.IN, t, value)
    return dns.rdata.from_wire(dns.rdataclass.IN, t, bytes(value), 0, len(value))


def rdata_a(address: str) -> dns.rdata.Rdata:
    """An A, or an AAAA for an IPv6 address."""
    return rdata("AAAA" if ":" in address else "A", address)


def rdata_soa(mname: str, rname: str, serial: int = 1, minimum: int = 60) -> dns.rdata.Rdata:
    return rdata("SOA", f"{mname} {rname} {serial} 3600 600 86400 {minimum}")


def _option(opt: Option) -> dns.edns.Option:
    if isinstance(opt, dns.edns.Option):
        return opt
    code, data = opt
    return dns.edns.GenericOption(code, bytes(data))


def ecs_option(family: int, source: int, scope: int, address: bytes) -> dns.edns.Option:
    """An ECS option with `address` as it goes on the wire. dnspython's
    ECSOption when that is what it would write; the same bytes as a generic
    option when they are not canonical (host bits past the prefix, another
    length, an unknown family), so that a forged or echoed option keeps
    every byte."""
    data = struct.pack("!HBB", family, source, scope) + bytes(address)
    try:
        opt = dns.edns.option_from_wire(ECS, data, 0, len(data))
    except (dns.exception.DNSException, ValueError):
        opt = None
    if opt is None or opt.to_wire() != data:
        return dns.edns.GenericOption(ECS, data)
    return opt


def echo_ecs(q: "RawQuery", scope: int) -> Optional[dns.edns.Option]:
    """The query's ECS echoed with `scope`, or None when it had none."""
    e = q.ecs
    return None if e is None else ecs_option(e[0], e[1], scope, e[3])


def weight_option(weights: Sequence[int], code: int = WEIGHT_OPTION) -> dns.edns.Option:
    """weir's weight option: 16-bit big-endian weights (docs/behaviour.md#the-weight-option)."""
    return dns.edns.GenericOption(code, b"".join(struct.pack("!H", w) for w in weights))


def make_query(qname: str, qtype: int = 1, *, qid: int = 0x1234, rd: bool = True, ad: bool = False,
               edns: bool = True, do: bool = False, options: Sequence[Option] = (), trailing: bytes = b"") -> bytes:
    """A query in wire form: one question, an OPT when `edns` (buffer 1232,
    DO as given, `options`), then `trailing` raw bytes that no count covers
    (to test how a server treats them)."""
    q = dns.message.make_query(qname, qtype)
    if edns:
        q.use_edns(0, dns.flags.DO if do else 0, UDP_PAYLOAD, options=[_option(o) for o in options])
    q.id = qid
    q.flags = (dns.flags.RD if rd else 0) | (dns.flags.AD if ad else 0)
    return q.to_wire() + trailing


def options_as_sent(pkt: bytes) -> Optional[list]:
    """[(code, data)] of the OPT record of a well-formed message, byte for
    byte as it came (see the module comment), or None without an OPT."""
    p = dns.wire.Parser(pkt, 4)
    qd, an, ns, ar = p.get_struct("!4H")
    for _ in range(qd):
        p.get_name()
        p.get_struct("!HH")
    for _ in range(an + ns + ar):
        p.get_name()
        rtype, _, _, rdlen = p.get_struct("!HHIH")
        data = p.get_bytes(rdlen)
        if rtype == dns.rdatatype.OPT:
            out, i = [], 0
            while i + 4 <= len(data):
                code, n = struct.unpack("!HH", data[i:i + 4])
                out.append((code, data[i + 4:i + 4 + n]))
                i += 4 + n
            return out
    return None


@dataclass
class RawRecord:
    """One record of a decoded message; `name` in lower case, `rdata` a
    dnspython Rdata (compares by value: rdata_a("192.0.2.1") == ...)."""
    name: str
    type: int
    klass: int
    ttl: int
    rdata: dns.rdata.Rdata


@dataclass
class RawMessage:
    """A response decoded from wire form by dnspython, one record at a time
    in the order they came (`message` is dnspython's own view)."""
    id: int
    flags: int
    qname: Optional[str]
    qtype: Optional[int]
    answer: list
    authority: list
    additional: list  # the OPT excluded
    message: dns.message.Message
    raw_options: Optional[list] = None  # [(code, data)] as sent, None without an OPT

    @property
    def rcode(self) -> int:
        return int(self.message.rcode())

    @property
    def ad(self) -> bool:
        return bool(self.flags & dns.flags.AD)

    @property
    def tc(self) -> bool:
        return bool(self.flags & dns.flags.TC)

    def options(self) -> list:
        """[(code, data)] of the OPT record, [] without one."""
        return list(self.raw_options or [])

    def option(self, code: int) -> Optional[bytes]:
        return _find_option(self.raw_options or [], code)

    def types(self) -> set:
        """Every record type in the answer, authority and additional sections."""
        return {r.type for r in self.answer + self.authority + self.additional}


def _find_option(options: list, code: int) -> Optional[bytes]:
    for c, d in options:
        if c == code:
            return d
    return None


def _records(section: list) -> list:
    return [RawRecord(rrset.name.to_text().lower(), int(rrset.rdtype), int(rrset.rdclass), rrset.ttl, rd)
            for rrset in section for rd in rrset]


def parse_message(pkt: bytes) -> RawMessage:
    """Decodes a whole response; raises DecodeError (dnspython's FormError,
    TrailingJunk...) when it is malformed."""
    m = dns.message.from_wire(pkt, one_rr_per_rrset=True)
    q = m.question[0] if m.question else None
    return RawMessage(m.id, int(m.flags), q.name.to_text().lower() if q is not None else None,
                      int(q.rdtype) if q is not None else None,
                      _records(m.answer), _records(m.authority), _records(m.additional), m,
                      options_as_sent(pkt) if m.edns >= 0 else None)


@dataclass
class RawQuery:
    """A query as a ScriptedAuthority received it."""
    id: int
    flags: int
    qname: str  # lower case, absolute
    name: dns.name.Name  # the question name as sent (case kept, for the echo)
    qtype: int
    qclass: int
    edns: bool = False
    options: list = field(default_factory=list)  # [(code, bytes)] as sent
    transport: str = "udp"

    def option(self, code: int) -> Optional[bytes]:
        return _find_option(self.options, code)

    @property
    def ecs(self) -> Optional[tuple]:
        """(family, source, scope, address bytes as sent) or None."""
        d = self.option(ECS)
        if d is None or len(d) < 4:
            return None
        return int.from_bytes(d[0:2], "big"), d[2], d[3], d[4:]


def parse_raw_query(pkt: bytes, transport: str = "udp") -> Optional[RawQuery]:
    """Header, question and OPT options of a query; None if unreadable."""
    try:
        m = dns.message.from_wire(pkt)
        if len(m.question) != 1:
            return None
        q = m.question[0]
        return RawQuery(m.id, int(m.flags), q.name.to_text().lower(), q.name, int(q.rdtype), int(q.rdclass),
                        edns=m.edns >= 0, options=options_as_sent(pkt) or [], transport=transport)
    except (dns.exception.DNSException, ValueError, struct.error):
        return None


RecordSpec = tuple  # (owner, type name or code, ttl, RDATA: an Rdata, its text or its wire bytes)


def build_response(q: RawQuery, *, rcode: int = 0, aa: bool = True, tc: bool = False,
                   answer: Sequence[RecordSpec] = (), authority: Sequence[RecordSpec] = (),
                   additional: Sequence[RecordSpec] = (),
                   options: Optional[Sequence[Optional[Option]]] = None, qname: Optional[str] = None,
                   qid: Optional[int] = None) -> bytes:
    """A response to `q`, each record an RRset of its own (order and TTLs
    as given). `options` None = no OPT; a list (possibly empty) = an OPT
    with those options (None entries skipped). `qname`/`qid` override the
    question name and the ID (to forge a mismatch)."""
    m = dns.message.Message(id=q.id if qid is None else qid)
    m.flags = (dns.flags.QR | (q.flags & dns.flags.RD) | (dns.flags.AA if aa else 0) |
               (dns.flags.TC if tc else 0) | (rcode & 0xF))
    name = q.name if qname is None else dns.name.from_text(qname)
    m.question.append(dns.rrset.RRset(name, q.qclass, q.qtype))
    for section, records in ((m.answer, answer), (m.authority, authority), (m.additional, additional)):
        for owner, rtype, ttl, value in records:
            rrset = dns.rrset.RRset(dns.name.from_text(owner), dns.rdataclass.IN, _rdtype(rtype))
            rrset.add(rdata(rtype, value), ttl)
            section.append(rrset)
    if options is not None:
        m.use_edns(0, 0, UDP_PAYLOAD, options=[_option(o) for o in options if o is not None])
    # No size limit: the scripted server decides what fits (dnspython would cut at the OPT's 1232).
    return m.to_wire(max_size=65535)


def tcp_frame(msg: bytes) -> bytes:
    """`msg` with its DNS-over-TCP length prefix."""
    return struct.pack("!H", len(msg)) + msg


def split_tcp_frames(data: bytes) -> tuple:
    """Splits a DNS-over-TCP byte stream into complete messages; returns
    (messages, the bytes of an incomplete last one)."""
    out = []
    while len(data) >= 2:
        n = struct.unpack("!H", data[:2])[0]
        if len(data) < 2 + n:
            break
        out.append(data[2:2 + n])
        data = data[2 + n:]
    return out, data
