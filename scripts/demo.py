#!/usr/bin/env python3
"""The offline demo: gslb-sim -> weir-recursor -> weir-fastpath, the city map
and tags pushed with weirctl through weir-mgmt to both nodes, a
short load from each city's subscriber range, and each city's answer shares
printed against the CDN's weights; then the same cities over DNS over TLS and
DNS over HTTPS (a CA made for the demo), their shares printed per transport;
then an HTTPDNS account made with weirctl and a signed batch request by curl
from two cities' addresses, printed.

Everything runs on loopback; every process is started here and stopped by PID.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import weirtest  # noqa: E402
from weirtest import tls as wtls  # noqa: E402

# city -> (a subscriber source address, the CDN's weights per address)
CITIES = {
    "beijing": ("127.1.0.10", {"192.0.2.10": 5, "192.0.2.11": 3, "192.0.2.12": 1}),
    "shanghai": ("127.2.0.10", {"192.0.2.20": 2, "192.0.2.21": 1}),
    "guangzhou": ("127.3.0.10", {"192.0.2.30": 1, "192.0.2.31": 1, "192.0.2.32": 1, "192.0.2.33": 1}),
}
NAME = "video.shop.example"


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def encrypted_shares(fp_lines, certs, per_city=900):
    """Each city's answers to NAME over DoT and DoH (HTTP/2): {transport: {city: [addresses]}}."""
    dot = re.search(r"^listening dot (\S+):(\d+)$", "\n".join(fp_lines), re.M)
    doh = re.search(r"^listening doh (\S+):(\d+)$", "\n".join(fp_lines), re.M)
    out = {"DoT": {}, "DoH": {}}
    for city, (src, _) in CITIES.items():
        c = wtls.DotClient(dot.group(1), int(dot.group(2)), certs, source=src)
        for i in range(per_city):
            c.send(wtls.query_wire(NAME, qid=i))
        out["DoT"][city] = [a for _ in range(per_city) for a in wtls.addresses(c.recv())]
        c.close()
        h = wtls.DohClient(doh.group(1), int(doh.group(2)), certs, source=src)
        got = []
        for start in range(0, per_city, 100):
            for status, _, body in h.request([("POST", "/dns-query", wtls.query_wire(NAME))] * 100):
                if status == 200:
                    got += wtls.addresses(body)
        out["DoH"][city] = got
        h.close()
    return out


def httpdns_batch(mgmt, fp_lines, work):
    """An HTTPDNS account made with weirctl, then one signed batch request by
    curl from two cities' subscriber addresses, printed as sent and answered."""
    http = re.search(r"^listening http (\S+):(\d+)$", "\n".join(fp_lines), re.M)
    r = mgmt.weirctl("account", "add", "demo-app", json_out=True)
    if r.returncode != 0:
        print(f"weirctl account add: {r.stderr.strip()}")
        return False
    secret = json.loads(r.stdout)["secret"]
    secret_file = os.path.join(work, "demo-app.secret")
    with open(secret_file, "w") as f:
        f.write(secret + "\n")
    print("\n$ weirctl account add demo-app    # the secret is shown once; the demo keeps it in "
          f"{os.path.basename(secret_file)}")
    # The nodes get it with the next push; wait until the fastpath has it.
    version = mgmt.weirctl_json("status")["version"]
    mgmt.wait_in_sync("fastpath-1", version)
    hosts = f"{NAME},www.shop.example,nosuch.shop.example"
    ok = True
    for city in ("beijing", "shanghai"):
        src, weights = CITIES[city]
        exp = int(time.time()) + 600
        to_sign = f"/demo-app/resolve?exp={exp}&host={hosts}&query=4,6"
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-hmac", secret], input=to_sign, text=True,
                             capture_output=True, check=True).stdout.split()[-1]
        url = f"http://{http.group(1)}:{http.group(2)}/demo-app/resolve?host={hosts}&query=4,6&exp={exp}&s={sig}"
        print(f"\n# {city}: the string to sign is {to_sign!r}")
        print(f"$ S=$(printf '%s' '{to_sign}' | openssl dgst -sha256 -hmac \"$(cat {os.path.basename(secret_file)})\" "
              f"| awk '{{print $NF}}')")
        print(f'$ curl -s --interface {src} "{url.replace(sig, "$S")}"')
        out = subprocess.run(["curl", "-s", "--interface", src, url], capture_output=True, text=True, timeout=20)
        try:
            body = json.loads(out.stdout)
        except ValueError:
            print(f"  not JSON: {out.stdout!r} {out.stderr.strip()}")
            return False
        print("  " + json.dumps(body, indent=None))
        first = body.get("dns", [{}])[0]
        if sorted(first.get("ips", [])) != sorted(weights):
            ok = False
            print(f"  ERROR: {NAME} for {city}: {first.get('ips')} (want {sorted(weights)})")
        else:
            print(f"  {NAME} for {city}: every address of the city, {first['ips'][0]} first (the SWRR pick)")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--seconds", type=float, default=3.0, help="load per city")
    ap.add_argument("--qps", type=int, default=3000, help="offered load per city")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="weir-demo-")
    demo = os.path.join(ROOT, "examples", "demo")
    hierarchy = None
    try:
        for f in ("citymap.csv", "tags.txt"):
            shutil.copy(os.path.join(demo, f), work)
        zones = {origin: open(os.path.join(demo, origin.rstrip(".") + ".toml")).read()
                 for origin in ("shop.example.", "cdn-gslb.example.")}
        hierarchy = weirtest.FakeHierarchy(args.build_dir, net="127.0.99", tld="example.", zones=zones)
        gslb = hierarchy.sim("cdn-gslb.example.")
        mgmt = weirtest.Mgmt(args.build_dir, work)
        print(f"weir-mgmt on {mgmt.address} (SQLite database and token in {work})")
        rconf = weirtest.recursor_config(root_hints=hierarchy.root_hints) + weirtest.mgmt_node_section(
            mgmt.address, "recursor-1", mgmt.token_file, os.path.join(work, "recursor-state"))
        with mgmt, weirtest.Recursor(args.build_dir, rconf) as rec:
            up = f"{rec.host}:{rec.port}"
            conf = open(os.path.join(demo, "fastpath.toml.in")).read().replace("@RECURSOR@", up)
            conf = conf.replace("@MGMT@", mgmt.address)
            certs = wtls.Certs(work)
            conf = (conf.replace("@DOT_PORT@", str(weirtest.free_port(udp_and_tcp=False)))
                    .replace("@DOH_PORT@", str(weirtest.free_port(udp_and_tcp=False)))
                    .replace("@HTTP_PORT@", str(weirtest.free_port(udp_and_tcp=False)))
                    .replace("@TLS_CHAIN@", certs.chain).replace("@TLS_KEY@", certs.key))
            conf_path = os.path.join(work, "fastpath.toml")
            open(conf_path, "w").write(conf)
            fp_bin = weirtest.binary(args.build_dir, "fastpath/weir-fastpath")
            with weirtest.Process([fp_bin, "-c", conf_path], ready=r"^metrics http ") as fp:
                port = int(re.search(r"udp 127\.0\.0\.1:(\d+)", "\n".join(fp.lines)).group(1))
                mport = int(re.search(r"metrics http 127\.0\.0\.1:(\d+)", "\n".join(fp.lines)).group(1))
                print("fake hierarchy on 127.0.99.1-4 port 53 (root, example., shop.example., cdn-gslb.example.)")
                print(f"weir-recursor on {up}; weir-fastpath on 127.0.0.1:{port}, metrics on 127.0.0.1:{mport}\n")
                for cmd in (["citymap", "import", os.path.join(work, "citymap.csv")],
                            ["tag", "import", os.path.join(work, "tags.txt")]):
                    r = mgmt.weirctl(*cmd)
                    print(f"$ weirctl {' '.join(cmd[:2])} {os.path.basename(cmd[2])}\n  {r.stdout.strip() or r.stderr.strip()}")
                    if r.returncode != 0:
                        return 1
                version = mgmt.weirctl_json("status")["version"]
                for node in ("recursor-1", "fastpath-1"):
                    mgmt.wait_in_sync(node, version)
                print("$ weirctl nodes")
                print("  " + mgmt.weirctl("nodes").stdout.strip().replace("\n", "\n  ") + "\n")
                qfile = os.path.join(work, "queries.txt")
                open(qfile, "w").write(f"{NAME} A\n")
                for city, (src, _) in CITIES.items():
                    out = subprocess.run(
                        ["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-a", src, "-d", qfile,
                         "-l", str(args.seconds), "-Q", str(args.qps), "-c", "1"],
                        capture_output=True, text=True, timeout=args.seconds + 30)
                    qps = re.search(r"Queries per second:\s+([\d.]+)", out.stdout)
                    lost = re.search(r"Queries lost:\s+(\d+)", out.stdout)
                    print(f"load from {city:<10} ({src}): {float(qps.group(1)) if qps else 0:8.0f} q/s, "
                          f"lost {lost.group(1) if lost else '?'}")
                text = metrics(mport)
                seen = {}
                for m in re.finditer(r'weir_answers_total\{name="([^"]+)",partition="([^"]+)",address="([^"]+)"\} (\d+)',
                                     text):
                    seen.setdefault(m.group(2), {})[m.group(3)] = int(m.group(4))
                print(f"\nanswer shares for {NAME} per city (observed vs the CDN's weights):")
                ok = True
                for city, (_, weights) in CITIES.items():
                    got = seen.get(city, {})
                    total = sum(got.values())
                    wsum = sum(weights.values())
                    print(f"  {city} ({total} answers)")
                    for addr, w in weights.items():
                        share = got.get(addr, 0) / total if total else 0.0
                        print(f"    {addr:<12} weight {w:>3}  want {w / wsum:6.1%}  got {share:6.1%}")
                    foreign = set(got) - set(weights)
                    if foreign:
                        ok = False
                        print(f"    ERROR: answers from another city: {sorted(foreign)}")
                    if total == 0:
                        ok = False
                enc = encrypted_shares(fp.lines, certs)
                dot = re.search(r"^listening dot (\S+)$", "\n".join(fp.lines), re.M).group(1)
                ca_copy = os.path.join(os.path.abspath(args.build_dir), "demo-ca.pem")
                shutil.copy(certs.ca, ca_copy)
                print(f"\nthe same name over DNS over TLS and HTTPS ({dot.replace(':', ' port ')} DoT; the demo's CA: "
                      f"{ca_copy}, e.g. kdig @127.0.0.1 -p {dot.rsplit(':', 1)[1]} +tls-ca={ca_copy} "
                      f"+tls-hostname=localhost {NAME}):")
                for city, (_, weights) in CITIES.items():
                    wsum = sum(weights.values())
                    print(f"  {city}")
                    for addr, w in weights.items():
                        cells = []
                        for transport in ("DoT", "DoH"):
                            got = enc[transport][city]
                            cells.append(f"{transport} {got.count(addr) / len(got) if got else 0:6.1%}")
                        print(f"    {addr:<12} want {w / wsum:6.1%}  " + "  ".join(cells))
                    for transport in ("DoT", "DoH"):
                        got = enc[transport][city]
                        if not got or set(got) - set(weights):
                            ok = False
                            print(f"    ERROR: {transport}: {len(got)} answers, foreign: {sorted(set(got) - set(weights))}")
                ok = httpdns_batch(mgmt, fp.lines, work) and ok
                log = [q for q in gslb.log(1000) if q["qname"].rstrip(".") == "x.cdn-gslb.example" and q["qtype"] == "A"]
                ecs = sorted(f'{q["ecs"]["address"]}/{q["ecs"]["source"]}' for q in log if q["ecs"])
                print(f"\nA queries the CDN's GSLB saw for x.cdn-gslb.example: {len(log)} "
                      f"({len(log) - len(ecs)} without ECS, then one per city with its ECS: {', '.join(ecs)}); "
                      f"every other answer came from weir's caches")
                learned = re.search(r"^weir_learned_tags_total (\d+)", text, re.M)
                print(f"weir learned the CDN tag for {learned.group(1) if learned else 0} customer name(s) "
                      f"from their CNAME chains")
                hits = re.search(r"^weir_cache_hits_total (\d+)", text, re.M)
                misses = re.search(r"^weir_cache_misses_total (\d+)", text, re.M)
                print(f"weir cache: {hits.group(1) if hits else 0} hits, {misses.group(1) if misses else 0} misses")
                # The same entries as the nodes hold them, through weir-mgmt's
                # fan-out to every node's control channel.
                print("\n$ weirctl --all cache dump --name example --suffix")
                r = mgmt.weirctl("--all", "cache", "dump", "--name", "example", "--suffix")
                print("  " + (r.stdout.strip() or r.stderr.strip()).replace("\n", "\n  "))
                return 0 if ok else 1
    finally:
        if hierarchy is not None:
            hierarchy.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
