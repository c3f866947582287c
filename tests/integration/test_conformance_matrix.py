"""Resolution conformance matrix: weir-recursor against Debian's unbound
(iterating peer, subnetcache + send-client-subnet) over a generated matrix
of zone shapes (conformance_shapes.py) on one loopback hierarchy of gslb-sim
processes, then the same matrix through weir-fastpath (second answer = first,
TTLs counted down). docs/conformance.md describes the families, the
deliberate differences and the known weir bugs.

Run: python3 tests/integration/test_conformance_matrix.py --build-dir build
"""

import fnmatch
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import unittest
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conformance_shapes as cs  # noqa: E402
import weirtest  # noqa: E402  (first: it makes Debian's dnspython importable)
import dns.edns  # noqa: E402
import dns.flags  # noqa: E402
import dns.message  # noqa: E402
import dns.query  # noqa: E402
import dns.rcode  # noqa: E402
import dns.rdatatype  # noqa: E402

BUILD_DIR = weirtest.parse_build_dir()
NET = "127.0.130"
UNBOUND_SOURCE = f"{NET}.254"  # unbound's queries come from here, weir's from 127.0.0.1
# --serve: start everything, print the addresses and wait (to reproduce by hand).
SERVE = "--serve" in sys.argv
if SERVE:
    sys.argv.remove("--serve")
ECS = ("198.51.100.7", 24)
WEIGHT_CODE = weirtest.WEIGHT_OPTION
WORKERS = 48
# How long a client waits. Stub resolvers give up after a few seconds; an
# answer later than this is no answer.
TIMEOUT = 10.0

# Keys are ("family/label" glob, variant glob): "cname-into-child/*", "tagged".

# Why weir answers differently on purpose, and which difference exactly
# (a predicate on the weir and unbound outcomes). Keep it honest: a weir bug
# belongs in KNOWN_WEIR_BUGS, not here.
DELIBERATE_DIFFERENCES: dict = {
    # docs/behaviour.md#domain-tags: untagged names get no ECS. unbound (send-client-subnet) sends
    # the client's /24, so a GSLB view for the client's subnet answers it only.
    ("client-subnet-view/*", "untagged"): ("weir sends no ECS for untagged names (the GSLB sees the recursor, not "
                                           "the client); unbound sends the client's subnet",
                                           lambda w, u: w.rcode == u.rcode and
                                           ("A", "192.0.2.99") in {(t, d) for _, t, d in w.answer} and
                                           ("A", "192.0.2.15") in {(t, d) for _, t, d in u.answer}),
    # Every server of the zone is unreachable. unbound 1.17 keeps retrying with
    # back-off (RTO up to 120 s) and does not answer within a client's timeout;
    # weir answers SERVFAIL when its resolution deadline passes.
    ("dead/only", "*"): ("SERVFAIL at weir's deadline; unbound holds the query past the client's timeout",
                         lambda w, u: w.rcode == "SERVFAIL" and u.rcode == "TIMEOUT"),
    ("timeout/mute-only", "*"): ("SERVFAIL at weir's deadline; unbound holds the query past the client's timeout",
                                 lambda w, u: w.rcode == "SERVFAIL" and u.rcode == "TIMEOUT"),
    # A tagged chain that leaves the tagged suffix: the untagged name's server
    # gets no ECS from weir (a subscriber's subnet goes only where a tag sends
    # it), so a GSLB view there answers the default; unbound sends the subnet.
    ("cross-suffix/to-untagged-view", "tagged"): ("weir sends no ECS to a name no ecs tag covers, also when a tagged "
                                                  "chain leads there; unbound sends the client's subnet",
                                                  lambda w, u: w.rcode == u.rcode and
                                                  ("A", "192.0.2.99") in {(t, d) for _, t, d in w.answer}),
    # Tagged names are answered by weight (one address picked per subscriber,
    # or the set reordered), which no RRSIG over the authority's RRset would
    # cover: weir's last hop asks without DO and returns no signatures.
    ("dnssec/do-*", "tagged"): ("tagged answers are weighted (a subset or a reordering of the RRset), so weir's "
                                "last hop asks without DO and returns no RRSIGs; unbound returns them",
                                lambda w, u: w.rcode == u.rcode and
                                {r for r in u.answer if r[1] != "RRSIG"} == set(w.answer)),
}

# Known weir bugs: reported as expected failures. A shape listed here that
# matches unbound (or differs only deliberately) is reported as an UNEXPECTED
# PASS, so the entry can be removed once the fix lands. None today: CNAMEs
# into delegated children, DNAME records, RRSIGs to clients without DO and the
# answer deadline were fixed with the correctness issue.
KNOWN_WEIR_BUGS: dict = {}

# Untagged names weir sends ECS for: (shape glob, variant glob) -> bug, and
# for names outside every shape, name glob -> bug.
KNOWN_ECS_LEAKS: dict = {}
KNOWN_ECS_LEAKS_OUTSIDE: dict = {}

# The same for the fastpath replay (first answer vs the cache hit).
KNOWN_FASTPATH_BUGS: dict = {}

# What the matrix adds to weirtest.unbound_config().
UNBOUND_EXTRA = (
    # Its own source address: the servers' query logs then tell weir's queries apart.
    f"outgoing-interface: {UNBOUND_SOURCE}",
    "num-queries-per-thread: 1024",
    "outgoing-range: 2048",
    # unbound 1.17 drops the reply to a client whose resolution took longer
    # than 1.9 s (it expects a retry to hit its cache); the matrix asks once.
    "discard-timeout: 0",
)


@dataclass
class Outcome:
    """What a user sees of one answer: rcode, answer RRsets (order-free),
    SOA in authority, TTL per RRset."""
    rcode: str
    answer: frozenset = frozenset()
    ttls: dict = field(default_factory=dict)
    soa: bool = False
    negative: bool = False
    text: str = ""
    tcp: bool = False  # the answer came over TCP (after TC=1)
    seconds: float = 0.0

    def brief(self) -> str:
        rrs = "; ".join(f"{n} {t} {d}" for n, t, d in sorted(self.answer))
        return f"{self.rcode} [{rrs}]{' +SOA' if self.soa else ''} ({'TCP, ' if self.tcp else ''}{self.seconds:.2f}s)"


@dataclass
class Tally:
    """The outcomes of one pass over the matrix, by what they mean."""
    bug_label: str  # how a known bug is named in the expected failures
    passes: dict = field(default_factory=lambda: {"untagged": 0, "tagged": 0})
    deliberate: list = field(default_factory=list)
    expected_fail: list = field(default_factory=list)
    unexpected_pass: list = field(default_factory=list)
    mismatches: list = field(default_factory=list)

    def add(self, shape: cs.Shape, variant: str, line: str, passed: bool, bug: Optional[str],
            why: Optional[str] = None) -> None:
        """`line` describes the outcome; `passed` if it matches (or differs
        deliberately, `why`); `bug` the known bug the shape is listed with."""
        if passed:
            self.passes[variant] += 1
            if why:
                self.deliberate.append(f"{line}\n      deliberate: {why}")
            if bug:
                self.unexpected_pass.append(f"{shape.describe()} [{variant}] (known bug: {bug})")
        elif bug:
            self.expected_fail.append(f"{line}\n      {self.bug_label}: {bug}")
        else:
            self.mismatches.append(line)

    def counts(self, n: int, seconds: float) -> str:
        return (f"pass untagged {self.passes['untagged']}/{n}, tagged {self.passes['tagged']}/{n}; expected failures "
                f"{len(self.expected_fail)}, unexpected passes {len(self.unexpected_pass)}, mismatches "
                f"{len(self.mismatches)} ({seconds:.1f}s)")

    @staticmethod
    def print_lists(lists) -> None:
        """Prints each non-empty (title, lines) of `lists`."""
        for title, items in lists:
            if items:
                print(f"-- {title}: {len(items)}")
                for x in items:
                    print("   " + x)


def ask(host: str, port: int, qname: str, qtype: str, tagged: bool, timeout: float,
        options: Optional[list] = None, source: str = cs.CLIENT_ADDRESS, dnssec_ok: bool = False) -> Outcome:
    """One query with RD set, EDNS 1232 (DO if `dnssec_ok`), and in the tagged
    variant ECS and the empty weight option (or `options`); TC=1 is retried
    over TCP."""
    if options is None:
        options = [dns.edns.ECSOption(*ECS), dns.edns.GenericOption(WEIGHT_CODE, b"")] if tagged else []
    q = dns.message.make_query(qname, qtype, use_edns=0, payload=1232, options=options, want_dnssec=dnssec_ok)
    q.flags |= dns.flags.RD
    t0 = time.monotonic()
    try:
        r, tcp = dns.query.udp_with_fallback(q, host, port=port, timeout=timeout, source=source)
    except dns.exception.Timeout:
        return Outcome("TIMEOUT", seconds=time.monotonic() - t0)
    except Exception as e:  # noqa: BLE001 - a malformed answer is an outcome too
        return Outcome(f"ERROR:{type(e).__name__}", text=str(e), seconds=time.monotonic() - t0)
    answer, ttls = set(), {}
    want = dns.rdatatype.from_text(qtype)
    has_qtype = False
    for rrset in r.answer:
        name = rrset.name.to_text().lower()
        tname = dns.rdatatype.to_text(rrset.rdtype)
        ttls[(name, tname)] = rrset.ttl
        has_qtype = has_qtype or rrset.rdtype == want
        for rd in rrset:
            answer.add((name, tname, rd.to_text().lower()))
    rcode = dns.rcode.to_text(r.rcode())
    soa = any(rrset.rdtype == dns.rdatatype.SOA for rrset in r.authority)
    return Outcome(rcode, frozenset(answer), ttls, soa, rcode in ("NOERROR", "NXDOMAIN") and not has_qtype,
                   r.to_text(), tcp, time.monotonic() - t0)


def differences(w: Outcome, u: Outcome, ttl_slack: int = 5) -> list:
    """How `w` differs from `u` for a user: rcode, answer sets, SOA presence on
    negatives, and w's TTLs above u's (TTL is compared only as a bound).
    No answer from `w` within the client's timeout is always a difference."""
    out = []
    if w.rcode == "TIMEOUT":
        out.append(f"no answer within {TIMEOUT:.0f}s")
    elif w.rcode != u.rcode:
        out.append(f"rcode {w.rcode} vs {u.rcode}")
    if w.answer != u.answer:
        only_w = sorted(w.answer - u.answer)
        only_u = sorted(u.answer - w.answer)
        out.append(f"answer only-weir={only_w} only-unbound={only_u}")
    if w.negative and u.negative and w.soa != u.soa:
        out.append(f"SOA in authority {w.soa} vs {u.soa}")
    for key, ttl in w.ttls.items():
        if key in u.ttls and ttl > u.ttls[key] + ttl_slack:
            out.append(f"TTL {key} {ttl} > {u.ttls[key]}")
    return out


def lookup(table: dict, shape: cs.Shape, variant: str):
    """The entry of `table` whose (shape glob, variant glob) key matches."""
    for (pattern, vpattern), value in table.items():
        if fnmatch.fnmatchcase(f"{shape.family}/{shape.label}", pattern) and fnmatch.fnmatchcase(variant, vpattern):
            return value
    return None


def deliberate(shape: cs.Shape, variant: str, w: Outcome, u: Outcome) -> Optional[str]:
    entry = lookup(DELIBERATE_DIFFERENCES, shape, variant)
    if entry is not None and entry[1](w, u):
        return entry[0]
    return None


class ConformanceMatrixTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        weirtest.require_tools("unbound")
        cls.started = time.monotonic()
        # WEIR_MATRIX_FAMILIES=truncated,dead: only those families (to loop a few by hand).
        families = {f for f in os.environ.get("WEIR_MATRIX_FAMILIES", "").split(",") if f}
        cls.shapes = [s for s in cs.all_shapes() if not families or s.family in families]
        cls.dir = tempfile.mkdtemp(prefix="weir-matrix-")
        cls.sims = []
        cls.weir = cls.unbound = cls.fastpath = None
        try:
            h = cs.Hierarchy(cls.shapes, NET)
            cls.query_logs = []
            for path, address in h.write(cls.dir):
                cls.query_logs.append(path[:-len(".toml")] + ".queries.jsonl")
                cls.sims.append(weirtest.GslbSim(BUILD_DIR, config_path=path, listen=(f"{address}:53",),
                                                 control=None, query_log=cls.query_logs[-1],
                                                 extra_args=("--log-size", "100")))
            hints = os.path.join(cls.dir, "root.hints")
            with open(hints, "w") as f:
                f.write(h.root_hints)
            cls.hierarchy = h
            tags = os.path.join(cls.dir, "tags.txt")
            with open(tags, "w") as f:
                f.write(f"{cs.TAGGED_BASE.rstrip('.')} weight=on ecs=on\n")
            # The test clock holds weir-recursor's TTLs still: in the fastpath
            # replay a second trip to the recursor then shows the first TTL
            # again, while a fastpath cache hit shows the fastpath's clock.
            cls.weir_config = weirtest.recursor_config(root_hints=hints, tags=tags, resolver={"do_ip6": False})
            cls.weir = weirtest.Recursor(BUILD_DIR, cls.weir_config, test_clock=True)
            cls.unbound = weirtest.Unbound(cls.dir, hints, NET, extra=UNBOUND_EXTRA)
            cls.ub_port = cls.unbound.port
        except Exception:
            cls.tearDownClass()
            raise
        print(f"\nconformance matrix: {len(cls.shapes)} shapes, {len(cls.hierarchy.zones)} zones on "
              f"{len(cls.sims)} gslb-sim processes ({time.monotonic() - cls.started:.1f}s to start)", flush=True)

    @classmethod
    def tearDownClass(cls):
        for p in (cls.fastpath, cls.unbound, cls.weir):
            if p is not None:
                p.stop()
        for s in cls.sims:
            s.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def _run_all(self, jobs: list) -> list:
        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            return list(pool.map(lambda j: j(), jobs))

    def test_1_weir_recursor_matches_unbound(self):
        t0 = time.monotonic()
        jobs, keys = [], []
        for s in self.shapes:
            timeout = TIMEOUT if s.slow else 5.0
            for variant, base in (("untagged", cs.UNTAGGED_BASE), ("tagged", cs.TAGGED_BASE)):
                tagged = variant == "tagged"
                qname = s.query(base)
                keys.append((s, variant))
                jobs.append(lambda q=qname, t=s.qtype, g=tagged, to=timeout, d=s.dnssec_ok: (
                    ask(self.weir.host, self.weir.port, q, t, g, to, dnssec_ok=d)))
                jobs.append(lambda q=qname, t=s.qtype, g=tagged, to=timeout, d=s.dnssec_ok: (
                    ask("127.0.0.1", self.ub_port, q, t, g, to, dnssec_ok=d)))
        results = self._run_all(jobs)
        t = Tally("known weir bug")
        for i, (s, variant) in enumerate(keys):
            w, u = results[2 * i], results[2 * i + 1]
            diff = differences(w, u)
            bug = lookup(KNOWN_WEIR_BUGS, s, variant)
            why = deliberate(s, variant, w, u) if diff else None
            line = (f"{s.describe()} [{variant}]: {'; '.join(diff)}\n      weir:    {w.brief()}\n"
                    f"      unbound: {u.brief()}")
            t.add(s, variant, line, not diff or bool(why), bug, why)
        n = len(self.shapes)
        st = self.weir.stats()
        print("\nweir-recursor counters: " + ", ".join(f"{k}={v}" for k, v in sorted(st.items()) if v and not
                                                        isinstance(v, (dict, list))))
        print(f"weir-recursor vs unbound: {n} shapes; {t.counts(n, time.monotonic() - t0)}")
        Tally.print_lists((("deliberate differences (counted as passes)", t.deliberate),
                           ("expected failures (KNOWN_WEIR_BUGS)", t.expected_fail),
                           ("UNEXPECTED PASSES (remove from KNOWN_WEIR_BUGS)", t.unexpected_pass),
                           ("MISMATCHES", t.mismatches)))
        leaks, expected_leaks = self._ecs_sent_for_untagged_names()
        print(f"-- ECS sent by weir for untagged names: {len(leaks)} unexpected, {len(expected_leaks)} known")
        for x in leaks + expected_leaks:
            print("   " + x)
        sys.stdout.flush()
        self.assertEqual(t.mismatches, [], f"{len(t.mismatches)} mismatches against unbound (listed above)")
        # A known-bug list that is out of date is a defect too.
        self.assertEqual(t.unexpected_pass, [], "known weir bugs that pass now: remove them from KNOWN_WEIR_BUGS")
        self.assertEqual(leaks, [], f"weir sent ECS for {len(leaks)} untagged names (listed above)")
        stale = [x for x in expected_leaks if x.startswith("UNEXPECTED PASS")]
        self.assertEqual(stale, [], "known ECS leaks that are gone: remove them from the known lists")

    def _ecs_sent_for_untagged_names(self) -> tuple:
        """docs/behaviour.md#domain-tags: untagged names get no ECS. Every query weir sent (source
        127.0.0.1; unbound sends from UNBOUND_SOURCE) for a name outside the
        tagged suffix must be without ECS. Returns (unexpected, known) lines."""
        by_root = {s.root(b): s for s in self.shapes for b in (cs.UNTAGGED_BASE, cs.TAGGED_BASE)}
        leaks, known, seen = {}, {}, set()
        for path in self.query_logs:
            with open(path) as f:
                for line in f:
                    q = json.loads(line)
                    name = q.get("qname") or ""
                    if (q.get("ecs") is None or not q["source"].startswith("127.0.0.1:") or
                            name.endswith("." + cs.TAGGED_BASE) or name == cs.TAGGED_BASE):
                        continue
                    e = q["ecs"]
                    labels = name.split(".")
                    shape = next((by_root[".".join(labels[i:])] for i in range(len(labels))
                                  if ".".join(labels[i:]) in by_root), None)
                    text = f"{name} {q['qtype']} with ECS {e['address']}/{e['source']}"
                    bug = (lookup(KNOWN_ECS_LEAKS, shape, "*") if shape else
                           next((v for k, v in KNOWN_ECS_LEAKS_OUTSIDE.items() if fnmatch.fnmatchcase(name, k)), None))
                    seen.update(k for k in KNOWN_ECS_LEAKS if shape and fnmatch.fnmatchcase(
                        f"{shape.family}/{shape.label}", k[0]))
                    seen.update(k for k in KNOWN_ECS_LEAKS_OUTSIDE if fnmatch.fnmatchcase(name, k))
                    (known if bug else leaks)[text] = f"{text}{f' ({shape.describe()})' if shape else ''}" + (
                        f"\n      known weir bug: {bug}" if bug else "")
        for k in list(KNOWN_ECS_LEAKS) + list(KNOWN_ECS_LEAKS_OUTSIDE):
            if k not in seen:
                known[f"~{k}"] = f"UNEXPECTED PASS: no ECS sent any more for {k} (remove it from the known list)"
        return sorted(leaks.values()), sorted(known.values())

    def test_2_fastpath_cache_hit_equals_first_answer(self):
        t0 = time.monotonic()
        citymap = os.path.join(self.dir, "citymap.csv")
        with open(citymap, "w") as f:
            f.write(f"127.0.0.0/8,lab,{ECS[0].rsplit('.', 1)[0]}.0/{ECS[1]}\n")
        fp_tags = os.path.join(self.dir, "fastpath-tags.txt")
        with open(fp_tags, "w") as f:
            f.write(f"{cs.TAGGED_BASE.rstrip('.')} weight=on ecs=on answer=ordered\n")
        up = f"{self.weir.host}:{self.weir.port}"
        cfg = weirtest.fastpath_config([up], weighted=[up], workers=1, citymap=citymap, tags=fp_tags,
                                       upstream={"timeout_ms": 5000, "attempts": 1})
        type(self).fastpath = fp = weirtest.Fastpath(BUILD_DIR, cfg, test_clock=True)
        keys = [(s, v, s.query(b)) for s in self.shapes
                for v, b in (("untagged", cs.UNTAGGED_BASE), ("tagged", cs.TAGGED_BASE))]

        def jobs():
            return [lambda q=q, s=s, v=v: ask(fp.host, fp.port, q, s.qtype, False, TIMEOUT,
                                              options=[dns.edns.GenericOption(WEIGHT_CODE, b"")]
                                              if v == "tagged" else [], dnssec_ok=s.dnssec_ok)
                    for s, v, q in keys]

        first = self._run_all(jobs())
        fp.advance_clock(2)
        second = self._run_all(jobs())
        t = Tally("known bug")
        for (s, v, _), a, b in zip(keys, first, second):
            diff = differences(b, a, ttl_slack=0)
            # DO queries are relayed, never cached (docs/fastpath-config.md).
            if a.rcode == "NOERROR" and a.answer and not s.dnssec_ok:
                # The clock moved 2 s: a cache hit shows it; a second trip to
                # the recursor (real clock) does not.
                for key, ttl in b.ttls.items():
                    if key in a.ttls and a.ttls[key] >= 2 and ttl > a.ttls[key] - 2:
                        diff.append(f"not a cache hit: TTL {key} {a.ttls[key]} then {ttl} 2s later")
                        break
            line = f"{s.describe()} [{v}]: {'; '.join(diff)}\n      first:  {a.brief()}\n      second: {b.brief()}"
            t.add(s, v, line, not diff, lookup(KNOWN_FASTPATH_BUGS, s, v))
        n = len(self.shapes)
        print(f"\nweir-fastpath replay (second answer = first, from the cache): {t.counts(n, time.monotonic() - t0)}")
        Tally.print_lists((("expected failures (KNOWN_FASTPATH_BUGS)", t.expected_fail),
                           ("UNEXPECTED PASSES (remove from KNOWN_FASTPATH_BUGS)", t.unexpected_pass),
                           ("MISMATCHES", t.mismatches)))
        sys.stdout.flush()
        self.assertEqual(t.mismatches, [],
                         f"{len(t.mismatches)} cache hits differ from the first answer (listed above)")
        self.assertEqual(t.unexpected_pass, [],
                         "known fastpath bugs that pass now: remove them from KNOWN_FASTPATH_BUGS")


    def test_3_truncated_shapes_20_rounds_without_servfail(self):
        # Every round a fresh weir-recursor (empty caches, libunbound's included), the truncated
        # shapes in both variants and fresh names in the zones whose server truncates every UDP
        # answer, all at once: each must be answered as unbound answers it, never SERVFAIL.
        shapes = [s for s in self.shapes if s.family == "truncated"]
        if not shapes:
            self.skipTest("WEIR_MATRIX_FAMILIES leaves out the truncated family")
        tc_only = [s for s in shapes if s.label.startswith("tc-only")]
        t0 = time.monotonic()
        failures = []
        for rnd in range(20):
            rec = weirtest.Recursor(BUILD_DIR, self.weir_config, test_clock=True)
            try:
                jobs, keys = [], []
                for s in shapes:
                    for variant, base in (("untagged", cs.UNTAGGED_BASE), ("tagged", cs.TAGGED_BASE)):
                        q = s.query(base)
                        keys.append((f"{s.describe()} [{variant}]", q, s.qtype, variant == "tagged"))
                for s in tc_only:
                    for i in range(4):
                        for base in (cs.UNTAGGED_BASE, cs.TAGGED_BASE):
                            keys.append((f"round {rnd} fresh name", f"r{rnd}n{i}.{s.root(base)}", "A",
                                         base == cs.TAGGED_BASE))
                for what, q, qtype, tagged in keys:
                    jobs.append(lambda q=q, t=qtype, g=tagged: ask(rec.host, rec.port, q, t, g, TIMEOUT))
                    jobs.append(lambda q=q, t=qtype, g=tagged: ask("127.0.0.1", self.ub_port, q, t, g, TIMEOUT))
                results = self._run_all(jobs)
                for i, (what, q, qtype, _) in enumerate(keys):
                    w, u = results[2 * i], results[2 * i + 1]
                    diff = differences(w, u, ttl_slack=86400)  # unbound answers from its cache
                    if w.rcode == "SERVFAIL" or diff:
                        failures.append(f"round {rnd}: {what} {q} {qtype}: {'; '.join(diff) or w.rcode}\n"
                                        f"      weir:    {w.brief()}\n      unbound: {u.brief()}")
            finally:
                rec.stop()
        print(f"\ntruncated shapes, 20 rounds of {len(keys)} questions each with a fresh weir-recursor: "
              f"{len(failures)} failures ({time.monotonic() - t0:.1f}s)")
        for f in failures[:20]:
            print("   " + f)
        self.assertEqual(failures, [], f"{len(failures)} answers differ from unbound's (listed above)")


def serve() -> None:
    def interrupt(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, interrupt)  # stop everything on SIGTERM too
    T = ConformanceMatrixTest
    T.setUpClass()
    print(f"weir-recursor {T.weir.host}:{T.weir.port}  unbound 127.0.0.1:{T.ub_port}  configs {T.dir}\n"
          f"e.g. dig @127.0.0.1 -p {T.weir.port} www.c.s040.tagged.example A +subnet=198.51.100.7/24 "
          f"+ednsopt={WEIGHT_CODE}\nCtrl-C stops.", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        T.tearDownClass()


if __name__ == "__main__":
    if SERVE:
        serve()
    else:
        unittest.main(verbosity=2)
