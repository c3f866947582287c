#!/usr/bin/env python3
"""The weight calibration closed on the real binaries: gslb-sim (the GSLB, weights 1:3 for
one city), weir-mgmt with its feedback endpoint, one weir-fastpath node, weir-bench as the
subscribers. Each round weir-bench sends QUERIES queries from the city; the "CDN" turns the
answers each address got into traffic with a stable per-answer skew (seed 004's field case:
an answer for B carries 2/3 of the traffic an answer for A does, so equal-to-weight answers
give traffic 1:2 where 1:3 is wanted), optionally with noise, and POSTs it to weir-mgmt
(/v1/traffic, bearer token); the next round runs on the factors weir-mgmt pushed. Printed per
round: answers B:A, traffic B:A, the factors, the effective weights the node picks with.
A benchmark, not a test.

Run: python3 bench/calibration_loop.py --build build-ci/main [--rounds 12] [--queries 20000] [--noise 0.05]
"""

import argparse
import http.client
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
import weirtest  # noqa: E402
from weirtest.zones import gslb_name, no_empty_weight_option, view, zone  # noqa: E402

NAME = "x.cdn.example.net"
A, B = "192.0.2.11", "192.0.2.12"
WEIGHTS = {A: 1, B: 3}
PER_ANSWER = {A: 1.0, B: 2.0 / 3.0}  # traffic one answer brings (NAT, stub caches)
CITYMAP = "127.1.0.0/16,city-a,198.51.100.0/24\n"
TOKEN = "feedback-token-0123456789abcdef"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--queries", type=int, default=20000)
    ap.add_argument("--noise", type=float, default=0.0, help="relative noise on each address's traffic")
    args = ap.parse_args()
    rng = random.Random(7)
    d = tempfile.mkdtemp(prefix="weir-calibration-loop-")
    with open(os.path.join(d, "feedback.token"), "w") as f:
        f.write(TOKEN + "\n")
    sim = weirtest.GslbSim(args.build, config_text=no_empty_weight_option() +
                           zone("cdn.example.net.", rname="admin", minimum=30, ttl=60) +
                           gslb_name("x", view("198.51.100.0/24", [A, B], [1, 3], scope=24), ttl=300))
    mgmt = weirtest.Mgmt(args.build, d, extra='[calibration]\nfeedback_listen = "127.0.0.1:0"\n'
                         'feedback_token_file = "feedback.token"\n')
    up = f"{sim.host}:{sim.port}"
    fp = weirtest.Fastpath(args.build, weirtest.fastpath_config([up], weighted=[up], workers=1) +
                           weirtest.mgmt_node_section(mgmt.address, "fp-1", mgmt.token_file, os.path.join(d, "fp")))
    try:
        citymap = os.path.join(d, "cities.csv")
        with open(citymap, "w") as f:
            f.write(CITYMAP)
        for argv in (["citymap", "import", citymap],
                     ["tag", "add", "cdn.example.net", "weight=on", "ecs=on", "level=city", "calibrate=on"]):
            r = mgmt.weirctl(*argv)
            if r.returncode != 0:
                print(r.stderr, file=sys.stderr)
                return 1
        mgmt.wait_in_sync("fp-1", mgmt.weirctl_json("status")["version"])
        bench = weirtest.binary(args.build, "bench/weir_bench/weir-bench")
        base = int(time.time()) - 1500  # windows in the past, each 60 s after the last
        print(f"{'round':>5} {'answers B:A':>11} {'traffic B:A':>11} {'factor A':>9} {'factor B':>9} {'picks with':>10}")
        for rnd in range(1, args.rounds + 1):
            out = os.path.join(d, f"r{rnd}.json")
            r = subprocess.run([bench, "-s", f"{fp.host}:{fp.port}", "--citymap", citymap, "--tagged-name", NAME,
                                "--names", "0", "-n", str(args.queries), "-q", "50", "--json", out],
                               capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                print(r.stdout, r.stderr, file=sys.stderr)
                return 1
            with open(out) as f:
                rep = json.load(f)
            answers = {A: 0, B: 0}
            for s in rep["shares"]:
                if s["name"].rstrip(".") != NAME:
                    continue
                for a in s["addresses"]:
                    if a["address"] in answers:
                        answers[a["address"]] += a["answers"]
            traffic = {a: answers[a] * PER_ANSWER[a] * max(0.0, 1 + args.noise * rng.gauss(0, 1)) for a in answers}
            end = base + 60 * rnd
            doc = {"samples": [{"window_start": end - 60, "window_end": end, "name": NAME, "partition": "city-a",
                                "addresses": [{"address": a, "weight": WEIGHTS[a], "traffic": traffic[a]}
                                              for a in (A, B)]}]}
            c = http.client.HTTPConnection(mgmt.feedback_host, mgmt.feedback_port, timeout=10)
            c.request("POST", "/v1/traffic", body=json.dumps(doc),
                      headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
            resp = c.getresponse()
            body = json.loads(resp.read())
            c.close()
            if resp.status != 200:
                print(resp.status, body, file=sys.stderr)
                return 1
            if body["version"]:
                mgmt.wait_in_sync("fp-1", body["version"])
            rows = mgmt.weirctl_json("calibration", "ls")["addresses"]
            factor = {row["address"]: row["factor"] for row in rows}
            m = fp.metrics()
            eff = {l["address"]: int(v) for l, v in m.series("weir_answer_effective_weight")}
            print(f"{rnd:>5} {answers[B] / max(1, answers[A]):>11.3f} {traffic[B] / max(1e-9, traffic[A]):>11.3f} "
                  f"{factor.get(A, 1):>9.4f} {factor.get(B, 1):>9.4f} {eff.get(A, 1):>4}:{eff.get(B, 3):<5}", flush=True)
        print("wanted traffic B:A 3.000 (weights 1:3)")
    finally:
        fp.stop()
        mgmt.stop()
        sim.stop()
        shutil.rmtree(d, True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
