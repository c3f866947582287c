"""weir-recursor's ordinary misses through its forwarder: libunbound through
weir's relay and last hop (resolver.forwarder_transport = "weir") against
libunbound's own sockets ("libunbound"), in alternating runs of one process.

A gslb-sim is the forwarder (it answers every name of example.com at once);
dnsperf asks unique names (every query a miss in both caches), closed loop,
4 clients x 200 outstanding, 8 s per run, 3 rounds. Prints each run and the
medians.

Run: python3 bench/recursor_relay_ab.py --build-dir build
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import weirtest  # noqa: E402
from weirtest.zones import zone  # noqa: E402

B = weirtest.parse_build_dir()
sim = weirtest.GslbSim(B, config_text=zone("example.com."))
tmp = tempfile.TemporaryDirectory()
names = os.path.join(tmp.name, "names.txt")
with open(names, "w") as f:
    for i in range(2000000):
        f.write(f"u{i}.example.com A\n")
res = {"weir": [], "libunbound": []}
for rnd in range(3):
    for t in ("weir", "libunbound"):
        cfg = weirtest.recursor_config(forwarders=[f"{sim.host}:{sim.port}"],
                                       resolver={"forwarder_transport": t}, cache={"max_entries": 2000000})
        r = weirtest.Recursor(B, cfg)
        out = subprocess.run(["dnsperf", "-s", r.host, "-p", str(r.port), "-d", names, "-l", "8", "-c", "4",
                              "-q", "200", "-t", "3"], capture_output=True, text=True).stdout
        qps = float(re.search(r"Queries per second:\s+([\d.]+)", out).group(1))
        lat = float(re.search(r"Average Latency \(s\):\s+([\d.]+)", out).group(1))
        lost = re.search(r"Queries lost:\s+(\d+)", out).group(1)
        res[t].append((qps, lat))
        print(rnd, t, f"qps {qps:.0f} avg latency {lat*1000:.2f} ms lost {lost}", flush=True)
        r.stop()
for t, v in res.items():
    print(t, f"median qps {statistics.median(q for q, _ in v):.0f}",
          f"median latency {statistics.median(lat for _, lat in v) * 1000:.2f} ms")
sim.stop()
tmp.cleanup()
