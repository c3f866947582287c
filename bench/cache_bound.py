#!/usr/bin/env python3
"""The best hit ratio each cache key scheme can reach on gslb-sim's segment
model, from the model's ground truth: what bounds the cache study
(docs/bench.md, "The cache study") whatever the cache does.

    python3 bench/cache_bound.py --build-dir build [--config examples/gslb-sim/segments.toml] \\
        [--rate 20000] [--names 100000] [--zipf 0.9]

A subscriber /24 is drawn as weir-bench --subscriber-ecs draws it (every /24 of the city map
equally likely), a name by Zipf popularity. A cache that keys answers by K keys, of which a
subscriber's /24 falls in key k with probability p_k, fills a key on a miss and holds it one TTL;
with Poisson arrivals, a name asked n times per TTL then misses sum_k n p_k / (1 + n p_k) times per
TTL (each miss starts a TTL in which the key hits; refreshing before expiry saves some misses
for an upstream query each). The schemes, per name group of the model:

  city      one key per city (what the city map does; wrong for subscribers its city's answer misses)
  /24       one key per subscriber /24 (level=subnet)
  scope     one key per prefix the GSLB's ECS scope names (what level=adaptive can learn at best:
            an answer is valid for its scope prefix only, RFC 7871)
  oracle    the fewest aligned prefixes each of whose /24s get one answer: any cache that answers
            every subscriber its own answer needs at least these keys

It prints one line per scheme: keys per name, the share of subscribers a key answers with another
/24's answer (the city key's cached answer is one of its /24s' answers, each equally likely), and
the hit ratio of such a TTL cache at --rate queries per second (per TTL: rate x TTL queries).
"""

import argparse
import collections
import ipaddress
import json
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def truth(gslb_sim, config, group):
    p = subprocess.run([gslb_sim, "--config", config, "--segments-truth", f"group={group}"], capture_output=True,
                       text=True, timeout=120)
    if p.returncode != 0:
        sys.exit(f"gslb-sim --segments-truth: {p.stderr.strip()}")
    return json.loads(p.stdout)


def oracle_keys(subnets):
    """The fewest aligned prefixes over the /24s in a segment such that every
    prefix's /24s share one answer; a list of their sizes in /24s asked."""
    answer = {}
    for s in subnets:
        if s["segment"] is not None:
            answer[int(ipaddress.ip_network(s["subnet"]).network_address) >> 8] = (
                tuple(s["addresses"]), tuple(s["weights"]))
    if not answer:
        return []
    lo, hi = min(answer), max(answer) + 1
    width = max(1, (hi - lo - 1).bit_length())
    start = lo >> width << width
    sizes = []
    stack = [(start, width)]
    while stack:
        first, bits = stack.pop()
        inside = [answer[a] for a in range(first, first + (1 << bits)) if a in answer]
        if not inside:
            continue
        if bits == 0 or all(x == inside[0] for x in inside):
            sizes.append(len(inside))
            continue
        half = 1 << (bits - 1)
        stack += [(first, bits - 1), (first + half, bits - 1)]
    return sizes


def schemes(doc):
    subnets = [s for s in doc["subnets"] if s["segment"] is not None]

    def by(key):
        return list(collections.Counter(key(s) for s in subnets).values())

    def scope_key(s):
        n = int(ipaddress.ip_network(s["subnet"]).network_address)
        return n >> (32 - s["scope"]), s["scope"]

    # The share answered wrongly by a city key: a city's subscribers get the
    # answer of one of its /24s (each equally likely to be the one cached).
    per_city = collections.defaultdict(collections.Counter)
    for s in subnets:
        per_city[s["city"]][(tuple(s["addresses"]), tuple(s["weights"]))] += 1
    right = sum(sum(c * c for c in answers.values()) / sum(answers.values()) for answers in per_city.values())
    return {
        "city": (by(lambda s: s["city"]), 1 - right / len(subnets)),
        "/24": (by(lambda s: s["subnet"]), 0.0),
        "scope": (by(scope_key), 0.0),
        "oracle": (oracle_keys(doc["subnets"]), 0.0),
    }


def hit_bound(groups, per_ttl, names, zipf):
    """1 - expected misses per TTL / queries per TTL, names spread evenly
    over the groups."""
    weights = [k ** -zipf for k in range(1, names + 1)]
    total = sum(weights)
    out = {}
    for scheme in groups[0]:
        misses = 0.0
        for g in groups:
            sizes, _ = g[scheme]
            all24 = sum(sizes)
            p = [s / all24 for s in sizes]
            # Names of similar popularity in bands, so a 100,000-name run costs seconds.
            i = 0
            while i < names:
                j = min(names, i + max(1, i // 100))
                n = per_ttl * weights[i] / total
                misses += (j - i) * sum(n * pk / (1 + n * pk) for pk in p) / len(groups)
                i = j
        out[scheme] = 1 - misses / per_ttl
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build"), help="the build tree (default: build)")
    ap.add_argument("--config", default=os.path.join(REPO, "examples", "gslb-sim", "segments.toml"),
                    help="gslb-sim config with a [segments] table (read at epoch 0)")
    ap.add_argument("--scope", choices=["segment", "run"], default="",
                    help="override the model's scope key (default: the config's)")
    ap.add_argument("--rate", type=float, action="append",
                    help="queries per second; repeatable (default 20000 and 100000)")
    ap.add_argument("--names", type=int, default=100000, help="names (default 100000)")
    ap.add_argument("--zipf", type=float, default=0.9, help="Zipf exponent of name popularity (default 0.9)")
    ap.add_argument("--groups", type=int, default=0, help="name groups read (default: all of the model's)")
    args = ap.parse_args()
    gslb_sim = os.path.join(os.path.abspath(args.build_dir), "bench", "gslb_sim", "gslb-sim")
    if not os.access(gslb_sim, os.X_OK):
        sys.exit(f"{gslb_sim} not found: build target gslb-sim")
    with open(args.config) as f:
        text = f.read()
    if args.scope:
        text = re.sub(r'(?m)^\s*scope\s*=.*$', "", text)
        text = re.sub(r"(?m)^\[segments\]\s*$", f'[segments]\nscope = "{args.scope}"', text, count=1)
    m = re.search(r"(?m)^\s*name_groups\s*=\s*(\d+)", text)
    model_groups = int(m.group(1)) if m else 16
    m = re.search(r"(?m)^\s*ttl\s*=\s*(\d+)", text)
    ttl = int(m.group(1)) if m else 60
    groups_read = min(args.groups or model_groups, model_groups)
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(text)
        config = f.name
    try:
        groups = [schemes(truth(gslb_sim, config, g)) for g in range(groups_read)]
    finally:
        os.unlink(config)
    rates = args.rate or [20000, 100000]
    bounds = {r: hit_bound(groups, r * ttl, args.names, args.zipf) for r in rates}
    print(f"# {args.names} names, zipf {args.zipf}, TTL {ttl} s, {groups_read} of {model_groups} name groups")
    print("scheme,keys_per_name,wrong_share," + ",".join(f"hit_ratio_{int(r)}_qps" for r in rates))
    for scheme in groups[0]:
        keys = sum(len(g[scheme][0]) for g in groups) / len(groups)
        wrong = sum(g[scheme][1] for g in groups) / len(groups)
        print(f"{scheme},{keys:.0f},{wrong:.4f}," + ",".join(f"{bounds[r][scheme]:.3f}" for r in rates))
    return 0


if __name__ == "__main__":
    sys.exit(main())
