"""Config files of the daemons and peers the tests start: weir-fastpath,
weir-recursor and their [mgmt] table (TOML), and Debian's
unbound as the comparison peer."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Optional, Sequence


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r}")


def toml_tables(sections: Sequence[tuple]) -> str:
    """[(table name, {key: value})] as TOML text, in that order."""
    out = []
    for name, keys in sections:
        out.append(f"[{name}]")
        out += [f"{k} = {toml_value(v)}" for k, v in keys.items()]
        out.append("")
    return "\n".join(out)


def fastpath_config(ordinary: Sequence[str], *, weighted: Optional[Sequence[str]] = None, workers: int = 1,
                    allow: Sequence[str] = ("127.0.0.0/8",), citymap: Optional[str] = None,
                    tags: Optional[str] = None, cache: Optional[dict] = None, upstream: Optional[dict] = None,
                    server: Optional[dict] = None, rate_limit: Optional[dict] = None,
                    control: Optional[dict] = None, acl: Optional[dict] = None) -> str:
    """A weir-fastpath TOML config (docs/fastpath-config.md) listening on
    127.0.0.1 port 0 with metrics on 127.0.0.1 port 0. `ordinary`/`weighted`
    are "ip:port" upstreams; `citymap`/`tags` are file paths; the dicts add
    keys to their sections. The control channel is off unless `control`
    gives its [control] keys (tests must not share the default socket).
    `acl` adds [acl] keys (e.g. trusted_forwarders) next to `allow`."""
    srv = {"listen": ["127.0.0.1:0"], "workers": workers, "metrics_listen": "127.0.0.1:0"}
    srv.update(server or {})
    acl_keys = {"allow": list(allow)}
    acl_keys.update(acl or {})
    sections = [("server", srv), ("acl", acl_keys)]
    if rate_limit:
        sections.append(("rate_limit", rate_limit))
    parts = {}
    if citymap:
        parts["citymap"] = citymap
    if tags:
        parts["tags"] = tags
    if parts:
        sections.append(("partitions", parts))
    if cache:
        sections.append(("cache", cache))
    up = {"ordinary": list(ordinary)}
    if weighted is not None:
        up["weighted"] = list(weighted)
    up.update(upstream or {})
    sections.append(("upstream", up))
    sections.append(("control", control if control is not None else {"socket": ""}))
    return toml_tables(sections)


class PartitionFiles:
    """A city map and a tag file (the fastpath's [partitions] files) in a
    temporary directory: `citymap` and `tags` are their paths."""

    def __init__(self, citymap: str, tags: str):
        self.tmp = tempfile.TemporaryDirectory()
        self.citymap = os.path.join(self.tmp.name, "citymap.csv")
        self.tags = os.path.join(self.tmp.name, "tags.txt")
        with open(self.citymap, "w") as f:
            f.write(citymap)
        with open(self.tags, "w") as f:
            f.write(tags)

    def cleanup(self) -> None:
        self.tmp.cleanup()


def recursor_config(*, root_hints: Optional[str] = None, forwarders: Sequence[str] = (), tags: Optional[str] = None,
                    allow: Sequence[str] = ("127.0.0.0/8",), listen: Sequence[str] = ("127.0.0.1:0",),
                    server: Optional[dict] = None, cache: Optional[dict] = None, last_hop: Optional[dict] = None,
                    ecs: Optional[dict] = None, resolver: Optional[dict] = None,
                    control: Optional[dict] = None) -> str:
    """A weir-recursor TOML config (docs/recursor-config.md) listening on
    127.0.0.1 port 0 with a control port on 127.0.0.1 port 0. Paths should
    be absolute. The dicts add keys to their sections. `control` is the
    [control] table of weirctl's channel; without it, no channel (a test
    never binds the host's /run/weir-recursor/control.sock)."""
    srv = {"listen": list(listen), "control": "127.0.0.1:0"}
    srv.update(server or {})
    res = {}
    if root_hints:
        res["root_hints"] = root_hints
    if forwarders:
        res["forwarders"] = list(forwarders)
    res.update(resolver or {})
    sections = [("server", srv), ("acl", {"allow": list(allow)}), ("resolver", res)]
    if tags:
        sections.append(("tags", {"file": tags}))
    for name, d in (("cache", cache), ("last_hop", last_hop), ("ecs", ecs)):
        if d:
            sections.append((name, d))
    # weirctl's control channel: off unless `control` gives its keys.
    sections.append(("control", control if control is not None else {"socket": ""}))
    return toml_tables(sections)


def mgmt_node_section(mgmt_address, node_id: str, token_file: str, state_dir: str) -> str:
    """The [mgmt] table of a fastpath/recursor config (docs/mgmt.md);
    `mgmt_address` one "host:port" or a list of them (weir-mgmt instances)."""
    address = json.dumps(mgmt_address) if isinstance(mgmt_address, str) else \
        "[" + ", ".join(json.dumps(a) for a in mgmt_address) + "]"
    return (f'\n[mgmt]\naddress = {address}\nnode_id = "{node_id}"\ntoken_file = {json.dumps(token_file)}\n'
            f'state_dir = {json.dumps(state_dir)}\n')


def unbound_config(port: int, directory: str, root_hints: str, net: str, extra: Sequence[str] = ()) -> str:
    """unbound.conf for Debian's unbound as the iterating peer weir is
    compared with: 127.0.0.1@`port` in the foreground, root hints into the
    fake hierarchy on `net`.x, the subnet cache sending ECS to `net`.0/24
    (/24 and /56 at most). `extra`: more server: lines."""
    # so-reuseport off: unbound's default would let it share a port another
    # process holds (and that process answer the probe); taken, it fails.
    lines = [f"interface: 127.0.0.1@{port}", f"port: {port}", "so-reuseport: no", "do-daemonize: no", "use-syslog: no", 'logfile: ""',
             'username: ""', 'chroot: ""', f'directory: "{directory}"', 'pidfile: ""', "num-threads: 1",
             "verbosity: 0", "access-control: 127.0.0.0/8 allow", "do-not-query-localhost: no", "do-ip6: no",
             f'root-hints: "{root_hints}"', 'module-config: "subnetcache iterator"', f"send-client-subnet: {net}.0/24",
             "max-client-subnet-ipv4: 24", "max-client-subnet-ipv6: 56", *extra]
    return "server:\n" + "".join(f"  {line}\n" for line in lines) + "remote-control:\n  control-enable: no\n"
