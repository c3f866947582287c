"""gslb-sim zone files (docs/gslb-sim.md) from a few calls, so that a test
states only what its zone holds:

    zone("example.com.") + record("www", "A", "192.0.2.1", ttl=300) +
    gslb_name("x", view("198.51.100.0/24", ["192.0.2.10"], [1], scope=24), ttl=60)

Every key argument becomes a TOML key of its table, in the order given."""

from __future__ import annotations

from typing import Optional, Sequence

from .config import toml_value


def _table(header: str, keys: dict, indent: str = "") -> str:
    return f"{indent}{header}\n" + "".join(f"{indent}{k} = {toml_value(v)}\n" for k, v in keys.items() if v is not None)


def zone(origin: str, *, mname: str = "ns1", rname: str = "hostmaster", minimum: Optional[int] = 60,
         ttl: Optional[int] = 3600, serial: Optional[int] = None, **keys) -> str:
    """A [[zone]] table (`keys` such as lame) and its SOA (None leaves a
    field to gslb-sim's default); the zone's records and names follow it."""
    return ("\n" + _table("[[zone]]", dict(origin=origin, **keys)) +
            _table("[zone.soa]", {"mname": mname, "rname": rname, "serial": serial, "minimum": minimum, "ttl": ttl}))


def record(name: str, rtype: str, data: str, ttl: Optional[int] = None) -> str:
    """One [[zone.record]]; `name` relative to the zone unless it ends with a dot."""
    return "\n" + _table("[[zone.record]]", {"name": name, "type": rtype, "ttl": ttl, "data": data})


def view(cidr: str, addresses: Sequence[str], weights: Optional[Sequence[int]] = None, **keys) -> dict:
    """One view of a gslb_name(): clients in `cidr` get `addresses` (with `weights`)."""
    return dict(cidr=cidr, **keys, addresses=list(addresses), weights=None if weights is None else list(weights))


def default(addresses: Sequence[str], weights: Optional[Sequence[int]] = None, **keys) -> dict:
    """The answer of a gslb_name() for clients no view matches."""
    return dict(keys, addresses=list(addresses), weights=None if weights is None else list(weights))


def gslb_name(name: str, *views: dict, default: Optional[dict] = None, **keys) -> str:
    """A [[zone.name]] answered per client subnet: its `views` in order,
    then the `default` answer; `keys` such as ttl, weights, truncate."""
    out = "\n" + _table("[[zone.name]]", dict(name=name, **keys))
    for v in views:
        out += _table("[[zone.name.view]]", v, "  ")
    if default is not None:
        out += _table("[zone.name.default]", default, "  ")
    return out


def delegation(name: str, ns: str, addresses: Sequence[str], ttl: Optional[int] = None) -> str:
    """A [[zone.delegation]] of `name` to the server `ns` at `addresses` (glue)."""
    glue = "[{ name = " + toml_value(ns) + ", addresses = " + toml_value(list(addresses)) + " }]"
    return "\n" + _table("[[zone.delegation]]", {"name": name, "ttl": ttl, "ns": [ns]}) + f"glue = {glue}\n"


def no_empty_weight_option() -> str:
    """The [defaults] table that makes gslb-sim answer a weight-option
    query for a name without weights with no option at all."""
    return "[defaults]\nempty_weight_option = false\n\n"


def zone_head(origin: str, ns_address: str, soa_minimum: int = 60) -> str:
    """A zone served by ns1.`origin` at `ns_address`: its SOA and apex NS."""
    return (zone(origin, mname=f"ns1.{origin}", rname=f"hostmaster.{origin}", minimum=soa_minimum) +
            record("@", "NS", f"ns1.{origin}", ttl=3600) + record(f"ns1.{origin}", "A", ns_address, ttl=3600) + "\n")


def swrr_sequence(weights, n):
    """nginx smooth weighted round-robin (docs/behaviour.md#answering-by-weight), as the fastpath answers
    one partition's clients: the indexes of the first n picks."""
    current = [0] * len(weights)
    total = sum(weights)
    out = []
    for _ in range(n):
        for i, w in enumerate(weights):
            current[i] += w
        best = max(range(len(weights)), key=lambda i: (current[i], -i))
        current[best] -= total
        out.append(best)
    return out
