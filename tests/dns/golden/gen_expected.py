#!/usr/bin/env python3
"""Generate expected.json, expected.txt (the same facts, line-oriented, for the
C++ test) and decoded_drill.txt for the golden DNS fixtures.

The DNS decoding is done by independent tools, NOT by this script:
  * Wireshark's dissector: each *.bin is wrapped in a dummy UDP/IPv4 frame by
    `text2pcap -u SRC,DST` (port 53 on the server side) and decoded with
    `tshark -T json --no-duplicate-keys -O dns`.  This script only reshapes
    tshark's JSON fields into a compact per-fixture record.
  * ldns: `drill -i <hexfile>` decodes every fixture too; its text output is
    written to decoded_drill.txt, and every RR line built from tshark's fields
    is cross-checked to appear (whitespace-normalised) in drill's output, as is
    the header (id, rcode, flags, counts).

TCP fixtures are stored without the 2-byte length prefix, so they are plain
DNS messages and are wrapped in UDP just for dissection.

Usage: python3 gen_expected.py        (run inside tests/dns/golden/)
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

TRANSPORT_TCP = {"q_dig_tcp.bin", "q_kdig_tcp.bin"}

TYPE_NAMES = {1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 15: "MX", 16: "TXT",
              28: "AAAA", 41: "OPT"}
CLASS_NAMES = {1: "IN"}
OPT_NAMES = {3: "NSID", 8: "ECS", 10: "COOKIE", 65001: "LOCAL65001"}


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def tshark_decode(path, is_response, tmp):
    raw = open(path, "rb").read()
    hexfile = os.path.join(tmp, "x.hex")
    pcap = os.path.join(tmp, "x.pcap")
    with open(hexfile, "w") as f:
        for off in range(0, len(raw), 16):
            chunk = raw[off:off + 16]
            f.write("%06x %s\n" % (off, " ".join("%02x" % b for b in chunk)))
    ports = "53,40000" if is_response else "40000,53"
    run(["text2pcap", "-q", "-u", ports, hexfile, pcap])
    out = subprocess.run(
        ["tshark", "-r", pcap, "-T", "json", "--no-duplicate-keys", "-O", "dns"],
        check=True, capture_output=True, text=True).stdout  # stderr: root warning
    pkts = json.loads(out)
    assert len(pkts) == 1, path
    return raw, pkts[0]["_source"]["layers"]["dns"]


def drill_decode(raw, tmp):
    hexfile = os.path.join(tmp, "d.hex")
    with open(hexfile, "w") as f:
        f.write(raw.hex() + "\n")
    return run(["drill", "-i", hexfile])


def as_list(x):
    if x is None:
        return []
    return x if isinstance(x, list) else [x]


def fqdn(n):
    return "." if n == "<Root>" else n + "."


def rdata_text(rr, rtype):
    if rtype == 1:
        return rr["dns.a"]
    if rtype == 28:
        return rr["dns.aaaa"]
    if rtype == 5:
        return fqdn(rr["dns.cname"])
    if rtype == 2:
        return fqdn(rr["dns.ns"])
    if rtype == 6:
        return " ".join([fqdn(rr["dns.soa.mname"]), fqdn(rr["dns.soa.rname"]),
                         rr["dns.soa.serial_number"], rr["dns.soa.refresh_interval"],
                         rr["dns.soa.retry_interval"], rr["dns.soa.expire_limit"],
                         rr["dns.soa.minimum_ttl"]])
    if rtype == 16:
        return " ".join('"%s"' % t for t in as_list(rr["dns.txt"]))
    raise ValueError("unhandled rr type %d" % rtype)


def decode_option(o):
    code = int(o["dns.opt.code"])
    length = int(o["dns.opt.len"])
    hexdata = o.get("dns.opt.data", "").replace(":", "")
    opt = {"code": code, "name": OPT_NAMES.get(code, "UNKNOWN"), "length": length,
           "hex": hexdata}
    assert len(hexdata) == 2 * length, (o, hexdata)
    if code == 8:  # EDNS Client Subnet, as decoded by tshark
        fam = int(o["dns.opt.client.family"])
        opt["ecs"] = {
            "family": fam,
            "source_prefix": int(o["dns.opt.client.netmask"]),
            "scope_prefix": int(o["dns.opt.client.scope"]),
            "address": o.get("dns.opt.client.addr4") or o.get("dns.opt.client.addr6"),
            "address_bytes_on_wire": length - 4,
        }
    elif code == 10:
        opt["cookie"] = {
            "client_hex": o.get("dns.opt.cookie.client", "").replace(":", ""),
            "server_hex": o.get("dns.opt.cookie.server", "").replace(":", ""),
        }
    elif code == 3:
        data = bytes.fromhex(hexdata)
        opt["nsid"] = {"hex": hexdata, "ascii": data.decode("ascii", "replace")}
    return opt


def section(dns, key):
    out, opt = [], None
    for title, rr in (dns.get(key) or {}).items():
        for r in as_list(rr):
            rtype = int(r["dns.resp.type"])
            if rtype == 41:
                z = int(r["dns.resp.z"], 16)
                opt = {
                    "owner": fqdn(r["dns.resp.name"]),
                    "udp_size": int(r["dns.rr.udp_payload_size"]),
                    "ext_rcode": int(r["dns.resp.ext_rcode"], 16),
                    "version": int(r["dns.resp.edns0_version"]),
                    "do": int(r["dns.resp.z_tree"]["dns.resp.z.do"]),
                    "flags_word": z,  # full 16-bit EDNS flags field (DO is bit 15)
                    "rdlength": int(r["dns.resp.len"]),
                    "options": [decode_option(o) for o in as_list(r.get("dns.opt"))],
                }
                continue
            out.append({
                "name": fqdn(r["dns.resp.name"]),
                "type": TYPE_NAMES.get(rtype, str(rtype)),
                "type_code": rtype,
                "class": CLASS_NAMES.get(int(r["dns.resp.class"], 16), r["dns.resp.class"]),
                "ttl": int(r["dns.resp.ttl"]),
                "rdlength": int(r["dns.resp.len"]),
                "rdata": rdata_text(r, rtype),
            })
    return out, opt


def norm(s):
    return " ".join(s.split()).lower()


def build(path, tmp):
    fname = os.path.basename(path)
    is_resp = fname.startswith("r_")
    raw, dns = tshark_decode(path, is_resp, tmp)
    flags_word = int(dns["dns.flags"], 16)
    tree = dns["dns.flags_tree"]
    flags = {
        "qr": (flags_word >> 15) & 1,
        "opcode": (flags_word >> 11) & 0xF,
        "aa": (flags_word >> 10) & 1,
        "tc": (flags_word >> 9) & 1,
        "rd": (flags_word >> 8) & 1,
        "ra": (flags_word >> 7) & 1,
        "z": (flags_word >> 6) & 1,
        "ad": (flags_word >> 5) & 1,
        "cd": (flags_word >> 4) & 1,
        "rcode": flags_word & 0xF,
    }
    # tshark's own flag fields (only some are shown for queries) must agree
    for k, f in [("qr", "response"), ("opcode", "opcode"), ("aa", "authoritative"),
                 ("tc", "truncated"), ("rd", "recdesired"), ("ra", "recavail"),
                 ("z", "z"), ("ad", "authenticated"), ("cd", "checkdisable"),
                 ("rcode", "rcode")]:
        if "dns.flags." + f in tree:
            assert int(tree["dns.flags." + f]) == flags[k], (fname, k)
    questions = []
    for title, q in (dns.get("Queries") or {}).items():
        for qq in as_list(q):
            qt = int(qq["dns.qry.type"])
            questions.append({"name": fqdn(qq["dns.qry.name"]),
                              "type": TYPE_NAMES.get(qt, str(qt)), "type_code": qt,
                              "class": CLASS_NAMES.get(int(qq["dns.qry.class"], 16))})
    an, _ = section(dns, "Answers")
    ns, _ = section(dns, "Authoritative nameservers")
    ar, edns = section(dns, "Additional records")
    rec = {
        "file": fname,
        "size": len(raw),
        "transport": "tcp (length prefix stripped)" if fname in TRANSPORT_TCP else "udp",
        "id": int(dns["dns.id"], 16),
        "flags_word": flags_word,
        "flags": flags,
        "counts": {"qd": int(dns["dns.count.queries"]), "an": int(dns["dns.count.answers"]),
                   "ns": int(dns["dns.count.auth_rr"]), "ar": int(dns["dns.count.add_rr"])},
        "question": questions,
        "answer": an,
        "authority": ns,
        "additional": ar,
        "edns": edns,
    }

    # ---- cross-check against ldns (drill -i) --------------------------------
    d = drill_decode(raw, tmp)
    hdr = re.search(r"opcode: (\w+), rcode: (\w+), id: (\d+)", d)
    assert hdr and int(hdr.group(3)) == rec["id"], fname
    rcodes = {"NOERROR": 0, "FORMERR": 1, "SERVFAIL": 2, "NXDOMAIN": 3, "NOTIMPL": 4, "REFUSED": 5}
    assert rcodes[hdr.group(2)] == flags["rcode"], fname
    fl = re.search(r";; flags: ([a-z ]*);", d).group(1).split()
    for k in ("qr", "aa", "tc", "rd", "ra", "ad", "cd"):
        assert (k in fl) == bool(flags[k]), (fname, k, fl)
    cnt = re.search(r"QUERY: (\d+), ANSWER: (\d+), AUTHORITY: (\d+), ADDITIONAL: (\d+)", d)
    # ldns does not count the OPT record in ADDITIONAL
    assert [int(x) for x in cnt.groups()] == [rec["counts"]["qd"], rec["counts"]["an"],
                                              rec["counts"]["ns"],
                                              rec["counts"]["ar"] - (1 if edns else 0)], fname
    dn = norm(d)
    for q in questions:
        assert norm(";; %s IN %s" % (q["name"], q["type"])) in dn, (fname, q)
    for rr in an + ns + ar:
        line = "%s %d %s %s %s" % (rr["name"], rr["ttl"], rr["class"], rr["type"], rr["rdata"])
        assert norm(line) in dn, (fname, line)
    if edns:
        m = re.search(r";; EDNS: version (\d+); flags: ([a-z ]*); udp: (\d+)", d)
        assert int(m.group(1)) == edns["version"] and int(m.group(3)) == edns["udp_size"], fname
        assert ("do" in m.group(2).split()) == bool(edns["do"]), fname
    else:
        assert ";; EDNS:" not in d, fname
    return rec, d


D = "dig @127.0.0.1 -p 53535 +tries=1 +timeout=1"
K = "kdig @127.0.0.1 -p 53535 +retry=0 +timeout=1"
DU = "dig @127.0.0.1 -p 53535 +tries=1 +timeout=2"   # via capture.py proxy -> unbound :53536
KU = "kdig @127.0.0.1 -p 53535 +retry=0 +timeout=2"
COMMANDS = {
    "q_dig_plain.bin": D + " www.example.com A",
    "q_dig_subnet_v4.bin": D + " +subnet=198.51.100.0/24 www.example.com A",
    "q_dig_subnet_v6.bin": D + " +subnet=2001:db8:1234::/48 www.example.com AAAA",
    "q_dig_ednsopt65001.bin": D + " +ednsopt=65001 www.example.com A",
    "q_dig_dnssec.bin": D + " +dnssec www.example.com A",
    "q_dig_nsid.bin": D + " +nsid www.example.com A",
    "q_dig_noedns.bin": D + " +noedns www.example.com A",
    "q_dig_tcp.bin": D + " +tcp www.example.com A   (capture.py --tcp)",
    "q_dig_mixedcase.bin": D + " WwW.ExAmPlE.CoM A",
    "q_kdig_subnet.bin": K + " +subnet=203.0.113.0/24 www.example.com A",
    "q_kdig_ednsopt65001.bin": K + " +ednsopt=65001 www.example.com A",
    "q_kdig_dnssec_nsid.bin": K + " +dnssec +nsid www.example.com A",
    "q_kdig_tcp.bin": K + " +tcp www.example.com A   (capture.py --tcp)",
    "q_kdig_mixedcase.bin": K + " WwW.ExAmPlE.CoM A   (NB: kdig lowercases the qname on the wire)",
    "unbound_a4": DU + " a4.example.com A",
    "unbound_aaaa2": KU + " +edns aaaa2.example.com AAAA",
    "unbound_cname_chain": DU + " www.example.com A",
    "unbound_nxdomain": DU + " nx.example.com A",
    "unbound_nodata": DU + " a4.example.com MX",
    "unbound_noedns": DU + " +noedns a4.example.com A",
    "unbound_tc": DU + " +noedns +ignore txt.example.com TXT",
    "unbound_nsid": DU + " +nsid a4.example.com A",
    "unbound_mixedcase": DU + " A4.ExAmPlE.CoM A",
}


def command_for(fname):
    if fname in COMMANDS:
        return COMMANDS[fname]
    base = fname[:-4].split("_", 1)[1]
    if fname.startswith("rq_"):
        return "client query of r_%s.bin: %s (make_responses.sh)" % (base, COMMANDS[base])
    return "unbound reply (unbound.conf) to: %s (make_responses.sh)" % COMMANDS[base]


def summary(rec):
    f = rec["flags"]
    parts = ["id=%d (0x%04x)" % (rec["id"], rec["id"]),
             "flags=0x%04x QR=%d OPCODE=%d AA=%d TC=%d RD=%d RA=%d Z=%d AD=%d CD=%d RCODE=%d" % (
                 rec["flags_word"], f["qr"], f["opcode"], f["aa"], f["tc"], f["rd"], f["ra"],
                 f["z"], f["ad"], f["cd"], f["rcode"]),
             "counts qd=%(qd)d an=%(an)d ns=%(ns)d ar=%(ar)d" % rec["counts"]]
    for q in rec["question"]:
        parts.append("Q: %s %s %s" % (q["name"], q["class"], q["type"]))
    for sec in ("answer", "authority", "additional"):
        for rr in rec[sec]:
            parts.append("%s: %s %d %s %s %s" % (sec[:2].upper(), rr["name"], rr["ttl"],
                                                 rr["class"], rr["type"], rr["rdata"]))
    e = rec["edns"]
    if e is None:
        parts.append("EDNS: none")
    else:
        opts = []
        for o in e["options"]:
            t = "code=%d(%s) len=%d hex=%s" % (o["code"], o["name"], o["length"], o["hex"] or "-")
            if "ecs" in o:
                c = o["ecs"]
                t += " [family=%d source=%d scope=%d addr=%s, %d addr bytes on wire]" % (
                    c["family"], c["source_prefix"], c["scope_prefix"], c["address"],
                    c["address_bytes_on_wire"])
            if "cookie" in o:
                t += " [client cookie=%s server cookie=%s]" % (
                    o["cookie"]["client_hex"], o["cookie"]["server_hex"] or "none")
            if "nsid" in o:
                t += ' [nsid="%s"]' % o["nsid"]["ascii"] if o["length"] else " [empty NSID request]"
            opts.append(t)
        parts.append("EDNS: udp=%d DO=%d version=%d ext_rcode=%d options: %s" % (
            e["udp_size"], e["do"], e["version"], e["ext_rcode"], "; ".join(opts) or "none"))
    return "; ".join(parts)


CLASS_CODES = {v: k for k, v in CLASS_NAMES.items()}


def write_expected_txt(out, generator):
    """expected.txt: the same content as expected.json, one fact per line, for
    the C++ golden test (tests/dns/golden_test.cc has no JSON parser). Every
    value comes from the records built above from tshark's decoding."""
    L = ["# Generated by gen_expected.py from tshark's decoding (%s); do not edit." % generator,
         "# One block per fixture, 'fixture <file>' ... 'end'. Names as on the wire",
         "# (case preserved, absolute). Codes are numeric; hex is lower case, '-' = empty.",
         "# rr <section> <owner> <type> <class> <ttl> <rdlength on wire> <rdata text...>",
         "# edns none | edns udp= do= version= ext_rcode= flags_word= rdlength= owner=",
         "# option <code> <length> <hex>; then ecs <family> <source> <scope> <address>",
         "# <address bytes on wire> / cookie <client hex> <server hex> / nsid <hex>",
         "count %d" % len(out)]
    for name, rec in out.items():
        f = rec["flags"]
        L.append("fixture %s" % name)
        L.append("kind %s" % ("response" if name.startswith("r_") else "query"))
        L.append("size %d" % rec["size"])
        L.append("id %d" % rec["id"])
        L.append("flags_word %d" % rec["flags_word"])
        L.append("flags " + " ".join("%s=%d" % (k, f[k]) for k in
                                     ("qr", "opcode", "aa", "tc", "rd", "ra", "z", "ad", "cd", "rcode")))
        c = rec["counts"]
        L.append("counts %d %d %d %d" % (c["qd"], c["an"], c["ns"], c["ar"]))
        for q in rec["question"]:
            L.append("question %s %d %d" % (q["name"], q["type_code"], CLASS_CODES[q["class"]]))
        for sec in ("answer", "authority", "additional"):
            for rr in rec[sec]:
                L.append("rr %s %s %d %d %d %d %s" % (sec, rr["name"], rr["type_code"],
                                                     CLASS_CODES[rr["class"]], rr["ttl"],
                                                     rr["rdlength"], rr["rdata"]))
        e = rec["edns"]
        if e is None:
            L.append("edns none")
        else:
            L.append("edns udp=%d do=%d version=%d ext_rcode=%d flags_word=%d rdlength=%d owner=%s" % (
                e["udp_size"], e["do"], e["version"], e["ext_rcode"], e["flags_word"],
                e["rdlength"], e["owner"]))
            for o in e["options"]:
                L.append("option %d %d %s" % (o["code"], o["length"], o["hex"] or "-"))
                if "ecs" in o:
                    s = o["ecs"]
                    L.append("ecs %d %d %d %s %d" % (s["family"], s["source_prefix"],
                                                     s["scope_prefix"], s["address"],
                                                     s["address_bytes_on_wire"]))
                if "cookie" in o:
                    L.append("cookie %s %s" % (o["cookie"]["client_hex"] or "-",
                                               o["cookie"]["server_hex"] or "-"))
                if "nsid" in o:
                    L.append("nsid %s" % (o["nsid"]["hex"] or "-"))
        L.append("end")
    with open("expected.txt", "w") as fh:
        fh.write("\n".join(L) + "\n")


def write_readme(out):
    lines = []
    for name, rec in out.items():
        lines.append("- `%s` (%d B, %s) -- `%s`  \n  %s" % (
            name, rec["size"], rec["transport"], command_for(name), summary(rec)))
    text = open("README.md").read()
    a = text.index("<!-- BEGIN GENERATED -->") + len("<!-- BEGIN GENERATED -->")
    b = text.index("<!-- END GENERATED -->")
    with open("README.md", "w") as f:
        f.write(text[:a] + "\n" + "\n".join(lines) + "\n" + text[b:])


def main():
    os.chdir(HERE)
    files = sorted(glob.glob("q_*.bin") + glob.glob("rq_*.bin") + glob.glob("r_*.bin"))
    out, drill_txt = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for p in files:
            rec, d = build(p, tmp)
            out[rec["file"]] = rec
            drill_txt.append("===== %s (%d bytes)\n%s\n%s" % (
                rec["file"], rec["size"], open(p, "rb").read().hex(), d))
    meta = {
        "_generator": "gen_expected.py: text2pcap + tshark -T json --no-duplicate-keys "
                      "(Wireshark %s), cross-checked with drill -i (ldns)" %
                      run(["tshark", "-v"]).split()[2],
        "fixtures": out,
    }
    with open("expected.json", "w") as f:
        json.dump(meta, f, indent=1, sort_keys=False)
        f.write("\n")
    with open("decoded_drill.txt", "w") as f:
        f.write("".join(drill_txt))
    write_expected_txt(out, meta["_generator"])
    write_readme(out)
    print("wrote README.md fixture list, expected.json and expected.txt (%d fixtures), "
          "decoded_drill.txt" % len(out))


if __name__ == "__main__":
    sys.exit(main())
