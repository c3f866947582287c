"""The zone-shape matrix of test_conformance_matrix.py (docs/conformance.md).

A shape is a small DNS subtree with one question: the zones below its root
R = sNNN.<base>, which servers hold each zone and how they behave (good,
lame, dead, mute, SERVFAIL, TC-only), and the query (qname, qtype). Every
shape is generated twice, under the untagged base `example.` and the tagged
base `tagged.example.`, with identical structure.

`Hierarchy` turns all the shapes into one set of gslb-sim configs: one
process per (server role, zone depth), so a parent and its child never share
a process (gslb-sim answers from the longest zone it holds) while one
process serves every non-nested zone of its depth. Names in shapes are
templates with `{R}` for the shape root (absolute, ending in a dot).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Optional

UNTAGGED_BASE = "example."
TAGGED_BASE = "tagged.example."

# Server roles. Processes of the same role and depth share one address.
GOOD_ROLES = ("main", "alt")
ROLE_ZONE_KEYS = {"lame": 'lame = "refused"\n', "noaa": 'lame = "no-aa"\n'}
ROLE_FAULTS = {
    "sick": "[faults]\nservfail = true\n",  # SERVFAIL for everything
    "mute": "[faults]\nloss = 1.0\n",  # never answers UDP (TCP still works)
    "tconly": "[faults]\ntruncate = true\n",  # TC=1 on every UDP answer
}
DEAD = "dead"  # an address in the net where nothing listens
# Roles whose servers are never shared between shapes: a resolver's
# per-address state (unbound's infra cache: RTT, back-off) learned from one
# shape's unresponsive server must not slow the others down.
PER_SHAPE_ROLES = (DEAD, "mute")


@dataclass
class Server:
    host: str  # NS name template
    role: str = "main"
    glue: bool = True  # the parent gives the host's address with the referral


@dataclass
class ZoneSpec:
    origin: str  # template, e.g. "c.{R}"
    servers: list = field(default_factory=list)
    body: list = field(default_factory=list)  # TOML snippets (templates)


@dataclass
class Shape:
    family: str
    label: str
    zones: list
    qname: str  # template
    qtype: str
    slow: bool = False  # waits for timeouts (dead or mute servers)
    dnssec_ok: bool = False  # the query has DO set
    index: int = 0

    @property
    def id(self) -> str:
        return f"s{self.index:03d}"

    def root(self, base: str) -> str:
        return f"{self.id}.{base}"

    def query(self, base: str) -> str:
        return self.qname.format(R=self.root(base))

    def describe(self) -> str:
        return f"{self.id} {self.family}/{self.label} ({self.qname} {self.qtype})"


# ---------------------------------------------------------------- TOML snippets


def rr(name: str, rtype: str, data, ttl: int = 300) -> str:
    return f'[[zone.record]]\nname = "{name}"\ntype = "{rtype}"\nttl = {ttl}\ndata = {json.dumps(data)}\n'


def settings(name: str, **keys) -> str:
    out = f'[[zone.name]]\nname = "{name}"\n'
    for k, v in keys.items():
        out += f"{k} = {json.dumps(v)}\n"
    return out


def views(name: str) -> str:
    """A GSLB name: one view for 198.51.100.0/24, a default for everyone else."""
    return (f'[[zone.name]]\nname = "{name}"\nttl = 60\n'
            f'  [[zone.name.view]]\n  cidr = "198.51.100.0/24"\n  scope = 24\n'
            f'  addresses = ["192.0.2.10", "192.0.2.11", "2001:db8::10"]\n  weights = [2, 1, 1]\n'
            f'  [zone.name.default]\n  scope = 0\n  addresses = ["192.0.2.99", "2001:db8::99"]\n'
            f'  weights = [1, 1]\n')


def zone(origin: str, *body: str, servers: Optional[list] = None) -> ZoneSpec:
    return ZoneSpec(origin, servers or [Server(f"ns1.{origin}")], list(body))


def a_www(origin: str, addr: str = "192.0.2.1") -> list:
    return [rr(f"www.{origin}", "A", addr), rr(f"www.{origin}", "AAAA", "2001:db8::1"),
            rr(f"www.{origin}", "TXT", f"www at {origin}")]


# ---------------------------------------------------------------- the families

R = "{R}"
U = "{U}"  # the same shape's root under the untagged base ({R} in the untagged variant)
T = "{T}"  # the same shape's root under the tagged base ({R} in the tagged variant)
C = "c.{R}"  # a child zone of the shape root, on its own server
G = "g.{R}"  # a sibling of C (also a child of R)
D = "d.c.{R}"  # a grandchild


def child(origin: str = C, *body: str, servers=None) -> ZoneSpec:
    return zone(origin, *(list(body) or a_www(origin)), servers=servers)


def _answers() -> list:
    out = []
    base = a_www(R) + [rr(f"www.{R}", "MX", f"10 mail.{R}"), rr(f"mail.{R}", "A", "192.0.2.25")]
    for qt in ("A", "AAAA", "TXT", "MX"):
        out.append(Shape("answer", f"www-{qt}", [zone(R, *base)], f"www.{R}", qt))
    multi = [rr(f"multi.{R}", "A", f"192.0.2.{i}") for i in range(30, 36)]
    out.append(Shape("answer", "rrset-6", [zone(R, *multi)], f"multi.{R}", "A"))
    out.append(Shape("answer", "apex-NS", [zone(R, *base)], R, "NS"))
    out.append(Shape("answer", "apex-SOA", [zone(R, *base)], R, "SOA"))
    return out


def _chain(names: list, tail_zone_body: dict, qtype: str = "A", final: str = "A") -> dict:
    """CNAMEs names[0] -> names[1] -> ... ; the last name gets `final` data
    (A/AAAA, "nodata" (TXT only), "nx" (absent)). Returns {origin: [snippets]}
    keyed by the zone of each name (tail_zone_body maps names to zones)."""
    bodies: dict = {}
    for i, n in enumerate(names[:-1]):
        bodies.setdefault(tail_zone_body[n], []).append(rr(n, "CNAME", names[i + 1], ttl=300 - i))
    last = names[-1]
    z = tail_zone_body[last]
    if final == "A":
        bodies.setdefault(z, []).extend([rr(last, "A", "192.0.2.77"), rr(last, "AAAA", "2001:db8::77")])
    elif final == "nodata":
        bodies.setdefault(z, []).append(rr(last, "TXT", "only text here"))
    else:
        bodies.setdefault(z, [])
    return bodies


def _cname_in_zone() -> list:
    out = []
    for n in range(1, 9):
        names = [f"l{i}.{R}" for i in range(n + 1)]
        b = _chain(names, {x: R for x in names})
        out.append(Shape("cname-in-zone", f"links-{n}", [zone(R, *b[R])], names[0], "A"))
    for n in (1, 4, 8):
        names = [f"l{i}.{R}" for i in range(n + 1)]
        b = _chain(names, {x: R for x in names}, final="nx")
        out.append(Shape("cname-in-zone", f"links-{n}-nx", [zone(R, *b[R])], names[0], "A"))
    for qt in ("AAAA", "TXT"):
        names = [f"l{i}.{R}" for i in range(3)]
        b = _chain(names, {x: R for x in names})
        out.append(Shape("cname-in-zone", f"links-2-{qt}", [zone(R, *b[R])], names[0], qt))
    return out


def _child_servers(kind: str) -> tuple:
    """Servers of zone C and extra zones/records, by delegation kind."""
    if kind == "glue":
        return [Server(f"ns1.{C}")], []
    if kind == "glueless":  # NS in the sibling zone G, no glue: resolve ns.g first
        return [Server(f"ns.{G}", glue=False)], [child(G)]
    if kind == "sibling-glue":  # NS in the sibling zone G, the parent gives its address
        return [Server(f"ns.{G}", glue=True)], [child(G)]
    if kind == "parent-host":  # NS host is a name of the parent zone itself
        return [Server(f"ns-c.{R}", glue=False)], []
    raise ValueError(kind)


DELEG_KINDS = ("glue", "glueless", "sibling-glue", "parent-host")


def _per_delegation_kind(cases: tuple):
    """(kind, the child's servers, the extra zones they need, case) for each
    delegation kind and each of `cases`."""
    for kind in DELEG_KINDS:
        servers, extra = _child_servers(kind)
        for case in cases:
            yield kind, servers, extra, case


def _cname_into_child() -> list:
    out = []
    for kind, servers, extra, (label, qt, target) in _per_delegation_kind(
            (("A", "A", "www"), ("AAAA", "AAAA", "www"), ("nodata", "MX", "www"), ("nx", "A", "nothere"))):
        zs = [zone(R, rr(f"www.{R}", "CNAME", f"{target}.{C}")), child(C, *a_www(C), servers=servers)] + extra
        out.append(Shape("cname-into-child", f"{kind}-{label}", zs, f"www.{R}", qt))
    # Up and sideways: a name in the child points to the parent / to a sibling.
    for qt in ("A", "AAAA"):
        zs = [zone(R, *a_www(R)), child(C, rr(f"x.{C}", "CNAME", f"www.{R}"))]
        out.append(Shape("cname-to-parent", qt, zs, f"x.{C}", qt))
        zs = [zone(R), child(C, rr(f"x.{C}", "CNAME", f"www.{G}")), child(G)]
        out.append(Shape("cname-to-sibling", qt, zs, f"x.{C}", qt))
    return out


CYCLE = [R, C, G, D]


def _zones_for(origins: set, bodies: dict, glueless: bool = False) -> list:
    out = []
    for o in CYCLE:
        if o in origins or (o == C and D in origins):
            servers = [Server(f"ns.{G}", glue=False)] if (glueless and o == C) else None
            out.append(zone(o, *bodies.get(o, []), servers=servers))
    if glueless and G not in origins and C in [z.origin for z in out]:
        out.append(zone(G))
    return out


def _links(n: int) -> tuple:
    """A chain of n CNAMEs through the zones of CYCLE in turn: its names and
    the zone of each."""
    names = [f"l{i}.{CYCLE[i % 4]}" for i in range(n + 1)]
    return names, {x: CYCLE[i % 4] for i, x in enumerate(names)}


def _cname_across() -> list:
    out = []
    for glueless in (False, True):
        for n in range(2, 9):
            names, where = _links(n)
            b = _chain(names, where)
            zs = _zones_for(set(where.values()), b, glueless)
            out.append(Shape("cname-across-cuts", f"{'glueless' if glueless else 'glue'}-links-{n}", zs,
                             names[0], "A"))
    for n in (2, 4, 6, 8):
        names, where = _links(n)
        out.append(Shape("cname-across-cuts", f"glue-links-{n}-AAAA",
                         _zones_for(set(where.values()), _chain(names, where)), names[0], "AAAA"))
    for n in (3, 5):
        for final, qt in (("nodata", "A"), ("nx", "A")):
            names, where = _links(n)
            b = _chain(names, where, final=final)
            out.append(Shape("cname-across-cuts", f"links-{n}-{final}", _zones_for(set(where.values()), b),
                             names[0], qt))
    return out


def _cname_loops() -> list:
    out = [
        Shape("cname-loop", "self", [zone(R, rr(f"a.{R}", "CNAME", f"a.{R}"))], f"a.{R}", "A"),
        Shape("cname-loop", "two-in-zone", [zone(R, rr(f"a.{R}", "CNAME", f"b.{R}"), rr(f"b.{R}", "CNAME", f"a.{R}"))],
              f"a.{R}", "A"),
        Shape("cname-loop", "across-cut",
              [zone(R, rr(f"a.{R}", "CNAME", f"b.{C}")), child(C, rr(f"b.{C}", "CNAME", f"a.{R}"))], f"a.{R}", "A"),
        Shape("cname-loop", "three-zones",
              [zone(R, rr(f"a.{R}", "CNAME", f"b.{C}")), child(C, rr(f"b.{C}", "CNAME", f"c.{G}")),
               child(G, rr(f"c.{G}", "CNAME", f"a.{R}"))], f"a.{R}", "A"),
    ]
    return out


def _cname_dangling() -> list:
    return [
        Shape("cname-dangling", "nx-in-zone", [zone(R, rr(f"a.{R}", "CNAME", f"nothere.{R}"))], f"a.{R}", "A"),
        Shape("cname-dangling", "nodata-in-zone", [zone(R, rr(f"a.{R}", "CNAME", f"t.{R}"), rr(f"t.{R}", "TXT", "x"))],
              f"a.{R}", "A"),
        Shape("cname-dangling", "to-ent",
              [zone(R, rr(f"a.{R}", "CNAME", f"ent.{R}"), rr(f"x.ent.{R}", "A", "192.0.2.3"))], f"a.{R}", "A"),
        Shape("cname-dangling", "nx-in-child", [zone(R, rr(f"a.{R}", "CNAME", f"nothere.{C}")), child(C)],
              f"a.{R}", "A"),
        Shape("cname-dangling", "nx-in-tld", [zone(R, rr(f"a.{R}", "CNAME", "nowhere-at-all.example."))],
              f"a.{R}", "A"),
    ]


def _delegations() -> list:
    out = []
    for kind, servers, extra, (label, qn, qt) in _per_delegation_kind(
            (("A", "www", "A"), ("AAAA", "www", "AAAA"), ("nx", "nothere", "A"), ("nodata", "www", "MX"))):
        zs = [zone(R), child(C, *a_www(C), servers=servers)] + extra
        out.append(Shape("delegation", f"{kind}-{label}", zs, f"{qn}.{C}", qt))
    for kind in ("glue", "glueless"):
        for label, qn in (("A", "www"), ("nx", "nothere")):
            dservers = [Server(f"ns1.{D}")] if kind == "glue" else [Server(f"ns.{G}", glue=False)]
            zs = [zone(R), child(C), child(D, *a_www(D), servers=dservers), child(G)]
            out.append(Shape("delegation", f"grandchild-{kind}-{label}", zs, f"{qn}.{D}", "A"))
    for label, qn in (("A", "www"), ("nx", "nothere")):
        zs = [zone(R), child(C, *a_www(C), servers=[Server(f"ns1.{C}"), Server(f"ns2.{C}", "alt")])]
        out.append(Shape("delegation", f"two-servers-{label}", zs, f"{qn}.{C}", "A"))
        zs = [zone(R), child(C, *a_www(C), servers=[Server(f"ns.{G}", glue=False), Server(f"ns2.{C}", "alt")]),
              child(G)]
        out.append(Shape("delegation", f"two-servers-one-glueless-{label}", zs, f"{qn}.{C}", "A"))
    return out


def _lame() -> list:
    out = []
    apex_body = a_www(R) + [rr(f"cn.{R}", "CNAME", f"www.{C}")]
    for order in (("lame", "main"), ("main", "lame")):
        for label, qn in (("A", f"www.{R}"), ("nx", f"nothere.{R}"), ("cname-child", f"cn.{R}")):
            servers = [Server(f"ns{i + 1}.{R}", role) for i, role in enumerate(order)]
            out.append(Shape("lame-refused", f"{'-'.join(order)}-{label}", [zone(R, *apex_body, servers=servers),
                                                                           child(C)], qn, "A"))
    for label, qn in (("A", f"www.{R}"), ("nx", f"nothere.{R}"), ("cname-child", f"cn.{R}")):
        servers = [Server(f"ns1.{R}", "noaa"), Server(f"ns2.{R}", "main")]
        out.append(Shape("lame-noaa", f"noaa-main-{label}", [zone(R, *apex_body, servers=servers), child(C)], qn, "A"))
    for label, qn in (("A", f"www.{R}"), ("nx", f"nothere.{R}")):
        out.append(Shape("lame-refused", f"only-{label}", [zone(R, *apex_body, servers=[Server(f"ns1.{R}", "lame")])],
                         qn, "A"))
    for label, qn, qt in (("A", f"www.{R}", "A"), ("nx", f"nothere.{R}", "A"), ("nodata", f"www.{R}", "MX")):
        out.append(Shape("lame-noaa", f"only-{label}", [zone(R, *apex_body, servers=[Server(f"ns1.{R}", "noaa")])],
                         qn, qt))
    for role in ("lame", "noaa"):
        cservers = [Server(f"ns1.{C}", role), Server(f"ns2.{C}", "main")]
        out.append(Shape(f"lame-{'refused' if role == 'lame' else 'noaa'}", "child-cname",
                         [zone(R, *apex_body), child(C, servers=cservers)], f"cn.{R}", "A"))
    return out


def _dead() -> list:
    out = []
    apex_body = a_www(R) + [rr(f"cn.{R}", "CNAME", f"www.{C}")]
    for order in (("dead", "main"), ("main", "dead")):
        for label, qn in (("A", f"www.{R}"), ("nx", f"nothere.{R}")):
            servers = [Server(f"ns{i + 1}.{R}", role) for i, role in enumerate(order)]
            out.append(Shape("dead", f"{'-'.join(order)}-{label}", [zone(R, *apex_body, servers=servers)], qn, "A",
                             slow=True))
    out.append(Shape("dead", "only", [zone(R, *apex_body, servers=[Server(f"ns1.{R}", DEAD)])], f"www.{R}", "A",
                     slow=True))
    out.append(Shape("dead", "child-cname",
                     [zone(R, *apex_body), child(C, servers=[Server(f"ns1.{C}", DEAD), Server(f"ns2.{C}")])],
                     f"cn.{R}", "A", slow=True))
    for label, servers in (("mute-main", [Server(f"ns1.{R}", "mute"), Server(f"ns2.{R}")]),
                           ("main-mute", [Server(f"ns1.{R}"), Server(f"ns2.{R}", "mute")]),
                           ("mute-only", [Server(f"ns1.{R}", "mute")])):
        out.append(Shape("timeout", label, [zone(R, *apex_body, servers=servers)], f"www.{R}", "A", slow=True))
    return out


def _dname() -> list:
    out = []
    t_body = a_www(f"t.{R}")
    base = [rr(f"d.{R}", "DNAME", f"t.{R}")] + t_body
    for label, qname, qtype in (("in-zone-A", f"www.d.{R}", "A"), ("in-zone-AAAA", f"www.d.{R}", "AAAA"),
                                ("in-zone-nx", f"nothere.d.{R}", "A"), ("in-zone-nodata", f"www.d.{R}", "MX"),
                                ("owner-A", f"d.{R}", "A"), ("owner-DNAME", f"d.{R}", "DNAME")):
        out.append(Shape("dname", label, [zone(R, *base)], qname, qtype))
    out.append(Shape("dname", "deeper", [zone(R, *(base + [rr(f"x.www.t.{R}", "A", "192.0.2.8")]))],
                     f"x.www.d.{R}", "A"))
    cbase = [rr(f"d.{R}", "DNAME", C)]
    out.append(Shape("dname", "into-child-A", [zone(R, *cbase), child(C)], f"www.d.{R}", "A"))
    out.append(Shape("dname", "into-child-nx", [zone(R, *cbase), child(C)], f"nothere.d.{R}", "A"))
    out.append(Shape("dname", "then-cname", [zone(R, rr(f"d.{R}", "DNAME", f"t.{R}"),
                                                   rr(f"www.t.{R}", "CNAME", f"www.{C}")), child(C)],
                     f"www.d.{R}", "A"))
    out.append(Shape("dname", "in-child", [zone(R, *t_body), child(C, rr(f"d.{C}", "DNAME", f"t.{R}"))],
                     f"www.d.{C}", "A"))
    out.append(Shape("dname", "into-child-AAAA", [zone(R, *cbase), child(C)], f"www.d.{R}", "AAAA"))
    out.append(Shape("dname", "to-dname", [zone(R, rr(f"d.{R}", "DNAME", f"e.{R}"), rr(f"e.{R}", "DNAME", f"t.{R}"),
                                                *t_body)], f"www.d.{R}", "A"))
    out.append(Shape("dname", "target-wildcard", [zone(R, rr(f"d.{R}", "DNAME", f"w.{R}"),
                                                       rr(f"*.w.{R}", "A", "192.0.2.56"))], f"any.d.{R}", "A"))
    out.append(Shape("dname", "cname-into-dname", [zone(R, rr(f"a.{R}", "CNAME", f"www.d.{R}"), *base)],
                     f"a.{R}", "A"))
    return out


def _wildcards() -> list:
    out = []
    w = [rr(f"*.w.{R}", "A", "192.0.2.50"), rr(f"*.w.{R}", "TXT", "wild"), rr(f"e.w.{R}", "A", "192.0.2.51"),
         rr(f"x.y.w.{R}", "A", "192.0.2.52")]
    for label, qname, qtype in (("positive", f"any.w.{R}", "A"), ("positive-TXT", f"any.w.{R}", "TXT"),
                                ("deeper", f"a.b.w.{R}", "A"), ("nodata", f"any.w.{R}", "AAAA"),
                                ("exact-beats-wildcard", f"e.w.{R}", "A"), ("exact-nodata", f"e.w.{R}", "TXT"),
                                ("ent-blocks", f"q.y.w.{R}", "A"), ("ent-itself", f"y.w.{R}", "A"),
                                ("literal-star", f"*.w.{R}", "A"), ("mixed-case", f"AnY.W.{R}", "A")):
        out.append(Shape("wildcard", label, [zone(R, *w)], qname, qtype))
    cw = [rr(f"*.cw.{R}", "CNAME", f"www.{R}")] + a_www(R)
    out.append(Shape("wildcard", "cname-in-zone", [zone(R, *cw)], f"z.cw.{R}", "A"))
    out.append(Shape("wildcard", "cname-in-zone-AAAA", [zone(R, *cw)], f"z.cw.{R}", "AAAA"))
    out.append(Shape("wildcard", "cname-into-child", [zone(R, rr(f"*.cw.{R}", "CNAME", f"www.{C}")), child(C)],
                     f"z.cw.{R}", "A"))
    out.append(Shape("wildcard", "cname-to-nx", [zone(R, rr(f"*.cw.{R}", "CNAME", f"nothere.{R}"))], f"z.cw.{R}",
                     "A"))
    out.append(Shape("wildcard", "cname-into-child-AAAA",
                     [zone(R, rr(f"*.cw.{R}", "CNAME", f"www.{C}")), child(C)], f"z.cw.{R}", "AAAA"))
    out.append(Shape("wildcard", "cname-into-child-mixed-case",
                     [zone(R, rr(f"*.cw.{R}", "CNAME", f"www.{C}")), child(C)], f"Z.CW.{R}", "A"))
    out.append(Shape("wildcard", "at-apex", [zone(R, rr(f"*.{R}", "A", "192.0.2.53"))], f"zz.{R}", "A"))
    out.append(Shape("wildcard", "in-child", [zone(R), child(C, rr(f"*.{C}", "A", "192.0.2.54"))], f"zz.{C}", "A"))
    out.append(Shape("wildcard", "cname-target-is-wild",
                     [zone(R, rr(f"a.{R}", "CNAME", f"x.w.{C}")), child(C, rr(f"*.w.{C}", "A", "192.0.2.55"))],
                     f"a.{R}", "A"))
    return out


def _negatives() -> list:
    out = []
    body = a_www(R) + [rr(f"x.ent.{R}", "A", "192.0.2.3")]
    for qt in ("A", "AAAA", "TXT"):
        out.append(Shape("nxdomain", qt, [zone(R, *body)], f"nothere.{R}", qt))
    out.append(Shape("nxdomain", "deep", [zone(R, *body)], f"a.b.c.nothere.{R}", "A"))
    out.append(Shape("nxdomain", "below-ent", [zone(R, *body)], f"y.ent.{R}", "A"))
    out.append(Shape("nxdomain", "below-name", [zone(R, *body)], f"sub.www.{R}", "A"))
    out.append(Shape("nxdomain", "in-child", [zone(R), child(C)], f"nothere.{C}", "AAAA"))
    out.append(Shape("nxdomain", "beside-cut", [zone(R), child(C)], f"cc.{R}", "A"))
    for qt in ("MX", "SRV", "CNAME"):
        out.append(Shape("nodata", qt, [zone(R, *body)], f"www.{R}", qt))
    for qt in ("MX", "SRV"):
        out.append(Shape("nodata", f"in-child-{qt}", [zone(R), child(C)], f"www.{C}", qt))
    out.append(Shape("nxdomain", "in-child-TXT", [zone(R), child(C)], f"nothere.{C}", "TXT"))
    out.append(Shape("nodata", "apex-A", [zone(R, *body)], R, "A"))
    for qt in ("A", "AAAA"):
        out.append(Shape("empty-non-terminal", qt, [zone(R, *body)], f"ent.{R}", qt))
    out.append(Shape("empty-non-terminal", "two-levels",
                     [zone(R, rr(f"a.b.c.{R}", "A", "192.0.2.4"))], f"b.c.{R}", "A"))
    return out


def _case() -> list:
    upper = [rr(f"WwW.{R}", "A", "192.0.2.60"), rr(f"Mixed.{R}", "CNAME", f"WWW.{C}")]
    return [
        Shape("case", "query-upper", [zone(R, *a_www(R))], f"WWW.{R}", "A"),
        Shape("case", "query-mixed-AAAA", [zone(R, *a_www(R))], f"wWw.{R}", "AAAA"),
        Shape("case", "records-upper", [zone(R, *upper), child(C)], f"www.{R}", "A"),
        Shape("case", "cname-upper-target", [zone(R, *upper), child(C)], f"mixed.{R}", "A"),
        Shape("case", "query-mixed-cname", [zone(R, *upper), child(C)], f"MiXeD.{R}", "A"),
        Shape("case", "query-mixed-child", [zone(R), child(C)], f"WWW.C.{R}", "A"),
        Shape("case", "query-mixed-child-nx", [zone(R), child(C)], f"NoThErE.C.{R}", "A"),
        Shape("case", "query-mixed-glueless", [zone(R), child(C, servers=[Server(f"ns.{G}", glue=False)]), child(G)],
              f"Www.C.{R}", "A"),
        Shape("case", "query-mixed-nx", [zone(R, *a_www(R))], f"NoThErE.{R}", "A"),
        Shape("case", "query-mixed-dname", [zone(R, rr(f"d.{R}", "DNAME", f"t.{R}"), *a_www(f"t.{R}"))],
              f"WwW.D.{R}", "A"),
    ]


def _truncation() -> list:
    big_txt = [rr(f"big.{R}", "TXT", [f"{i:03d}-" + "x" * 60 for i in range(24)])]
    many_a = [rr(f"many.{R}", "A", f"192.0.2.{i}") for i in range(1, 101)]
    return [
        Shape("truncated", "tc-flag", [zone(R, *a_www(R), settings(f"www.{R}", truncate=True))], f"www.{R}", "A"),
        Shape("truncated", "tc-nodata", [zone(R, *a_www(R), settings(f"www.{R}", truncate=True))], f"www.{R}",
              "MX"),
        Shape("truncated", "tc-cname-target",
              [zone(R, rr(f"a.{R}", "CNAME", f"www.{C}")), child(C, *a_www(C), settings(f"www.{C}", truncate=True))],
              f"a.{R}", "A"),
        Shape("truncated", "large-txt", [zone(R, *big_txt)], f"big.{R}", "TXT"),
        Shape("truncated", "large-a-rrset", [zone(R, *many_a)], f"many.{R}", "A"),
        Shape("truncated", "tc-only-server", [zone(R, *a_www(R), servers=[Server(f"ns1.{R}", "tconly")])],
              f"www.{R}", "A"),
        Shape("truncated", "tc-only-server-nx", [zone(R, *a_www(R), servers=[Server(f"ns1.{R}", "tconly")])],
              f"nothere.{R}", "A"),
        Shape("truncated", "tc-only-child",
              [zone(R, rr(f"a.{R}", "CNAME", f"www.{C}")), child(C, servers=[Server(f"ns1.{C}", "tconly")])],
              f"a.{R}", "A"),
    ]


def _upstream_errors() -> list:
    body = a_www(R) + [rr(f"cn.{R}", "CNAME", f"www.{C}")]
    return [
        Shape("servfail", "name", [zone(R, *body, settings(f"www.{R}", servfail=True))], f"www.{R}", "A"),
        Shape("servfail", "server-only", [zone(R, *body, servers=[Server(f"ns1.{R}", "sick")])], f"www.{R}", "A"),
        Shape("servfail", "sick-main-A", [zone(R, *body, servers=[Server(f"ns1.{R}", "sick"), Server(f"ns2.{R}")])],
              f"www.{R}", "A"),
        Shape("servfail", "sick-main-nx", [zone(R, *body, servers=[Server(f"ns1.{R}", "sick"), Server(f"ns2.{R}")])],
              f"nothere.{R}", "A"),
        Shape("servfail", "main-sick", [zone(R, *body, servers=[Server(f"ns1.{R}"), Server(f"ns2.{R}", "sick")])],
              f"www.{R}", "A"),
        Shape("servfail", "cname-target", [zone(R, *body), child(C, *a_www(C), settings(f"www.{C}", servfail=True))],
              f"cn.{R}", "A"),
        Shape("slow", "latency-300ms", [zone(R, *body, settings(f"www.{R}", latency_ms=300))], f"www.{R}", "A"),
        Shape("slow", "cname-target-300ms",
              [zone(R, *body), child(C, *a_www(C), settings(f"www.{C}", latency_ms=300))], f"cn.{R}", "A"),
    ]


def client_views(name: str) -> str:
    """A GSLB name with a view for the matrix's client subnet (CLIENT_SUBNET):
    only a resolver that sends the client's subnet as ECS gets it."""
    return (f'[[zone.name]]\nname = "{name}"\nttl = 60\n'
            f'  [[zone.name.view]]\n  cidr = "{CLIENT_SUBNET}"\n  addresses = ["192.0.2.15"]\n'
            f'  [zone.name.default]\n  addresses = ["192.0.2.99"]\n')


# The test queries from CLIENT_ADDRESS (loopback), so a resolver that sends
# ECS from the client address sends CLIENT_SUBNET.
CLIENT_ADDRESS = "127.0.5.5"
CLIENT_SUBNET = "127.0.5.0/24"


def _gslb() -> list:
    return [
        Shape("client-subnet-view", "A", [zone(R, client_views(f"x.{R}"))], f"x.{R}", "A"),
        Shape("client-subnet-view", "cname-into-child",
              [zone(R, rr(f"www.{R}", "CNAME", f"x.{C}")), child(C, client_views(f"x.{C}"))], f"www.{R}", "A"),
        Shape("gslb-views", "A", [zone(R, views(f"x.{R}"))], f"x.{R}", "A"),
        Shape("gslb-views", "AAAA", [zone(R, views(f"x.{R}"))], f"x.{R}", "AAAA"),
        Shape("gslb-views", "nodata", [zone(R, views(f"x.{R}"))], f"x.{R}", "TXT"),
        Shape("gslb-views", "cname-into-child-AAAA",
              [zone(R, rr(f"www.{R}", "CNAME", f"x.{C}")), child(C, views(f"x.{C}"))], f"www.{R}", "AAAA"),
        Shape("gslb-views", "cname-into-child", [zone(R, rr(f"www.{R}", "CNAME", f"x.{C}")), child(C, views(f"x.{C}"))],
              f"www.{R}", "A"),
        Shape("gslb-views", "two-step-cname",
              [zone(R, rr(f"www.{R}", "CNAME", f"y.{G}")), child(G, rr(f"y.{G}", "CNAME", f"x.{C}")),
               child(C, views(f"x.{C}"))], f"www.{R}", "A"),
    ]


def sig(owner: str, covered: str, signer: str) -> str:
    """An RRSIG for `covered` at `owner` (the signature bytes are made up:
    nothing here validates)."""
    return rr(owner, "RRSIG", f"{covered} 13 3 300 20300101000000 20200101000000 4242 {signer} c2lnbmF0dXJl")


def _dnssec() -> list:
    """Signed zones (RRSIGs beside the RRsets, for DO queries): without DO no
    RRSIG may reach the client (RFC 4035 3.2.1)."""
    def signed(origin: str, *extra: str) -> ZoneSpec:
        return zone(origin, *a_www(origin), sig(f"www.{origin}", "A", origin), sig(f"www.{origin}", "AAAA", origin),
                    sig(origin, "SOA", origin), *extra)
    cn = [rr(f"cn.{R}", "CNAME", f"www.{R}"), sig(f"cn.{R}", "CNAME", R)]
    into = [rr(f"cc.{R}", "CNAME", f"www.{C}"), sig(f"cc.{R}", "CNAME", R)]
    out = []
    for do in (False, True):
        p = "do" if do else "no-do"
        out += [
            Shape("dnssec", f"{p}-A", [signed(R)], f"www.{R}", "A", dnssec_ok=do),
            Shape("dnssec", f"{p}-cname", [signed(R, *cn)], f"cn.{R}", "A", dnssec_ok=do),
            Shape("dnssec", f"{p}-nx", [signed(R)], f"nothere.{R}", "A", dnssec_ok=do),
        ]
    out += [
        Shape("dnssec", "no-do-nodata", [signed(R)], f"www.{R}", "MX"),
        Shape("dnssec", "no-do-cname-into-child", [signed(R, *into), signed(C)], f"cc.{R}", "A"),
    ]
    return out


def _cross_suffix() -> list:
    """Chains between the tagged and the untagged tree: the tagged variant of
    "to-untagged" leaves the tagged suffix, the untagged variant of
    "to-tagged" enters it (docs/behaviour.md#domain-tags, learned tags)."""
    body = a_www(R) + [views(f"x.{R}")]
    return [
        Shape("cross-suffix", "to-untagged", [zone(R, rr(f"a.{R}", "CNAME", f"www.{U}"), *body)], f"a.{R}", "A"),
        Shape("cross-suffix", "to-untagged-nx", [zone(R, rr(f"a.{R}", "CNAME", f"nothere.{U}"), *body)], f"a.{R}",
              "A"),
        Shape("cross-suffix", "to-untagged-view", [zone(R, rr(f"a.{R}", "CNAME", f"x.{U}"), *body)], f"a.{R}", "A"),
        Shape("cross-suffix", "to-tagged", [zone(R, rr(f"a.{R}", "CNAME", f"www.{T}"), *body)], f"a.{R}", "A"),
        Shape("cross-suffix", "to-tagged-view", [zone(R, rr(f"a.{R}", "CNAME", f"x.{T}"), *body)], f"a.{R}", "A"),
    ]


def all_shapes() -> list:
    shapes = (_answers() + _cname_in_zone() + _cname_into_child() + _cname_across() + _cname_loops() +
              _cname_dangling() + _delegations() + _lame() + _dead() + _dname() + _wildcards() + _negatives() +
              _case() + _truncation() + _upstream_errors() + _gslb() + _cross_suffix() + _dnssec())
    for i, s in enumerate(shapes):
        s.index = i
    return shapes


# ---------------------------------------------------------------- the hierarchy


def _is_below(name: str, suffix: str) -> bool:
    """name strictly below suffix (both absolute, lower case)."""
    return suffix == "." and name != "." or name.endswith("." + suffix)


def _soa(origin: str, host: str) -> str:
    return (f'[zone.soa]\nmname = "{host}"\nrname = "hostmaster.{origin.lstrip(".")}"\nminimum = 30\nttl = 3600\n')


@dataclass
class _Zone:
    origin: str
    servers: list  # [Server] with absolute hosts
    body: list
    shape_root: str  # the shape it belongs to (its root), or its own origin


class Hierarchy:
    """All shapes under both bases, as gslb-sim configs keyed by process
    (role, depth) with the address of each, plus the root hints."""

    def __init__(self, shapes: list, net: str, dead_first: int = 200):
        self.net = net
        zones: list = [
            _Zone(".", [Server("ns.root.")], [], "."),
            _Zone(UNTAGGED_BASE, [Server(f"ns1.{UNTAGGED_BASE}")], [], UNTAGGED_BASE),
            _Zone(TAGGED_BASE, [Server(f"ns1.{TAGGED_BASE}")], [], TAGGED_BASE),
        ]
        for base in (UNTAGGED_BASE, TAGGED_BASE):
            for s in shapes:
                root = s.root(base)
                names = {"{R}": root, "{U}": s.root(UNTAGGED_BASE), "{T}": s.root(TAGGED_BASE)}

                def f(t: str, names=names) -> str:
                    for k, v in names.items():
                        t = t.replace(k, v)
                    return t

                for z in s.zones:
                    origin = f(z.origin).lower()
                    servers = [Server(f(x.host).lower(), x.role, x.glue) for x in z.servers]
                    zones.append(_Zone(origin, servers, [f(b) for b in z.body], root))
        by_origin = {z.origin: z for z in zones}
        if len(by_origin) != len(zones):
            raise ValueError("a zone is defined twice")
        self.zones = by_origin

        def parent(o: str) -> Optional[str]:
            if o == ".":
                return None
            labels = o.rstrip(".").split(".")
            for i in range(1, len(labels) + 1):
                cand = ".".join(labels[i:]) + "." if i < len(labels) else "."
                if cand in by_origin:
                    return cand
            return None

        def depth(o: str) -> int:
            d, p = 0, parent(o)
            while p is not None:
                d, p = d + 1, parent(p)
            return d

        def auth_zone(name: str) -> str:
            labels = name.rstrip(".").split(".")
            for i in range(len(labels) + 1):
                cand = ".".join(labels[i:]) + "." if i < len(labels) else "."
                if cand in by_origin:
                    return cand
            return "."

        # Addresses: one per (role, depth), per shape too for PER_SHAPE_ROLES;
        # dead ones (from `dead_first` up) have no process.
        self.address: dict = {}
        self.dead_addresses: list = []
        next_host = [1]

        def process_key(role: str, d: int, root: str) -> tuple:
            return (role, d, root) if role in PER_SHAPE_ROLES else (role, d)

        def address_of(key: tuple) -> str:
            if key not in self.address:
                if key[0] == DEAD:
                    self.address[key] = f"{net}.{dead_first + len(self.dead_addresses)}"
                    self.dead_addresses.append(self.address[key])
                else:
                    self.address[key] = f"{net}.{next_host[0]}"
                    next_host[0] += 1
                # .254 stays free: the peer resolver sends from it.
                if next_host[0] >= dead_first or dead_first + len(self.dead_addresses) > 253:
                    raise ValueError(f"the hierarchy needs more addresses than {net}.0/24 has")
            return self.address[key]

        ordered = sorted(by_origin, key=lambda o: (depth(o), o))
        host_address: dict = {}
        for o in ordered:
            z = by_origin[o]
            d = depth(o)
            for s in z.servers:
                host_address.setdefault(s.host, []).append(address_of(process_key(s.role, d, z.shape_root)))
                if len(set(host_address[s.host])) > 1:
                    raise ValueError(f"{s.host} would serve zones on two processes")
        self.depth = {o: depth(o) for o in ordered}
        # Address records of every NS host, in the zone that is authoritative for it.
        extra: dict = {}
        for host, addrs in host_address.items():
            extra.setdefault(auth_zone(host), []).extend(
                f'[[zone.record]]\nname = "{host}"\ntype = "A"\nttl = 3600\ndata = "{a}"\n' for a in sorted(set(addrs)))
        # Delegations in each parent.
        delegations: dict = {}
        for o in ordered:
            p = parent(o)
            if p is None:
                continue
            z = by_origin[o]
            ns = ", ".join(json.dumps(s.host) for s in z.servers)
            glue = ", ".join(
                f'{{ name = {json.dumps(s.host)}, addresses = {json.dumps(sorted(set(host_address[s.host])))} }}'
                for s in z.servers if s.glue)
            text = f'[[zone.delegation]]\nname = "{o}"\nttl = 3600\nns = [{ns}]\n'
            if glue:
                text += f"glue = [{glue}]\n"
            delegations.setdefault(p, []).append(text)
        # One config per process.
        self.configs: dict = {}
        for o in ordered:
            z = by_origin[o]
            d = self.depth[o]
            apex_ns = "".join(f'[[zone.record]]\nname = "@"\ntype = "NS"\nttl = 3600\ndata = "{s.host}"\n'
                              for s in z.servers)
            for role in sorted({s.role for s in z.servers} - {DEAD}):
                text = (f'[[zone]]\norigin = "{o}"\n' + ROLE_ZONE_KEYS.get(role, "") + _soa(o, z.servers[0].host) +
                        apex_ns + "".join(z.body) + "".join(extra.get(o, [])) + "".join(delegations.get(o, [])))
                self.configs.setdefault(process_key(role, d, z.shape_root), []).append(text)
        self.root_hints = f".  3600000  IN  NS  ns.root.\nns.root.  3600000  IN  A  {self.address[('main', 0)]}\n"

    def write(self, directory: str) -> list:
        """Writes one TOML per process; returns [(path, address)]."""
        out = []
        for key, texts in sorted(self.configs.items()):
            role = key[0]
            path = os.path.join(directory, "-".join(str(k).strip(".") for k in key) + ".toml")
            with open(path, "w") as f:
                f.write(ROLE_FAULTS.get(role, ""))
                f.write("\n".join(texts))
            out.append((path, self.address[key]))
        return out
